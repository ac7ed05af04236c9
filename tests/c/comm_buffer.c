/* np: 1 2 */
/* MPI 4.1 buffers (3.6): a buffer attached to a communicator serves Bsend on that
 * communicator (before the process's buffer; not on another communicator); a rendezvous-size
 * message holds its room until the partner receives it (a second Bsend, nobody receiving,
 * fails with MPI_ERR_BUFFER after a second), after which Comm_iflush_buffer completes and the
 * room is free again; a Bsend finding the room held waits while the partner's posted receive
 * takes the earlier one; detach returns the address and size; MPI_BUFFER_AUTOMATIC for the
 * process with Buffer_iflush. Data is checked on every receive. */
#include "common.h"

#define N (1 << 20) /* ints: far above any eager limit */

static void fill(int *a, int n, int seed)
{
    for (int i = 0; i < n; i++) a[i] = seed * 1000003 + i * 7;
}

static void check(const int *a, int n, int seed, int line)
{
    for (int i = 0; i < n; i++)
        if (a[i] != seed * 1000003 + i * 7)
            t_fail(__FILE__, line, "element %d of message %d: got %d, expected %d", i, seed,
                   a[i], seed * 1000003 + i * 7);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int peer = t_partner();
    MPI_Comm dup;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
    int bsize = N * (int)sizeof(int) + MPI_BSEND_OVERHEAD;
    char *cbuf = malloc(bsize);
    int *big = malloc(N * sizeof(int)), *in = malloc(N * sizeof(int));
    int small = 5, got = -1;
    CHECK(cbuf && big && in, "malloc failed");

    MPI_CHECK(MPI_Comm_attach_buffer(dup, cbuf, bsize));
    EXPECT_CLASS(MPI_Comm_attach_buffer(dup, cbuf, bsize), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Comm_attach_buffer(MPI_COMM_NULL, cbuf, bsize), MPI_ERR_COMM);
    /* Small message through the communicator's buffer; none on MPI_COMM_WORLD. */
    MPI_CHECK(MPI_Bsend(&small, 1, MPI_INT, peer, 1, dup));
    MPI_CHECK(MPI_Recv(&got, 1, MPI_INT, peer, 1, dup, MPI_STATUS_IGNORE));
    CHECK(got == 5, "small Bsend on the communicator: got %d", got);
    EXPECT_CLASS(MPI_Bsend(&small, 1, MPI_INT, peer, 1, MPI_COMM_WORLD), MPI_ERR_BUFFER);

    /* A big message fills the buffer until the partner receives it. */
    fill(big, N, 10 + t_rank);
    MPI_CHECK(MPI_Bsend(big, N, MPI_INT, peer, 2, dup));
    fill(big, N, 99); /* Bsend copied it: reusing the send buffer changes nothing */
    EXPECT_CLASS(MPI_Bsend(&small, 1, MPI_INT, peer, 3, dup), MPI_ERR_BUFFER);
    /* Both checked before either receives: a partner already past its own check would take
     * our big message while we wait for room, and our small Bsend would find it. */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_Request rq[2];
    MPI_CHECK(MPI_Comm_iflush_buffer(dup, &rq[1]));
    MPI_CHECK(MPI_Irecv(in, N, MPI_INT, peer, 2, dup, &rq[0]));
    MPI_CHECK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
    check(in, N, 10 + peer, __LINE__);
    /* Flushed: the whole buffer is free again. */
    fill(big, N, 20 + t_rank);
    MPI_CHECK(MPI_Ibsend(big, N, MPI_INT, peer, 4, dup, &rq[0]));
    MPI_CHECK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE)); /* local: the data is in the buffer */
    MPI_CHECK(MPI_Recv(in, N, MPI_INT, peer, 4, dup, MPI_STATUS_IGNORE));
    check(in, N, 20 + peer, __LINE__);
    /* Room for one big message only: a second Bsend waits while the first's block is still
     * held and goes out once the partner's posted receive has taken the first. */
    int *in2 = malloc(N * sizeof(int)), *big2 = malloc(N * sizeof(int));
    CHECK(in2 && big2, "malloc failed");
    MPI_CHECK(MPI_Irecv(in, N, MPI_INT, peer, 9, dup, &rq[0]));
    MPI_CHECK(MPI_Irecv(in2, N, MPI_INT, peer, 10, dup, &rq[1]));
    fill(big, N, 50 + t_rank);
    fill(big2, N, 60 + t_rank);
    MPI_CHECK(MPI_Bsend(big, N, MPI_INT, peer, 9, dup));
    MPI_CHECK(MPI_Bsend(big2, N, MPI_INT, peer, 10, dup));
    MPI_CHECK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
    check(in, N, 50 + peer, __LINE__);
    check(in2, N, 60 + peer, __LINE__);
    free(in2);
    free(big2);
    MPI_CHECK(MPI_Comm_flush_buffer(dup));
    void *addr = NULL;
    int size = -1;
    MPI_CHECK(MPI_Comm_detach_buffer(dup, &addr, &size));
    CHECK(addr == cbuf && size == bsize, "Comm_detach_buffer gave %p %d, attached %p %d", addr,
          size, (void *)cbuf, bsize);
    EXPECT_CLASS(MPI_Comm_detach_buffer(dup, &addr, &size), MPI_ERR_BUFFER);

    /* The communicator's buffer comes before the process's (too small) one. */
    char pbuf[64 + MPI_BSEND_OVERHEAD];
    MPI_CHECK(MPI_Buffer_attach(pbuf, sizeof pbuf));
    MPI_CHECK(MPI_Comm_attach_buffer(dup, cbuf, bsize));
    fill(big, N, 30 + t_rank);
    MPI_CHECK(MPI_Bsend(big, N, MPI_INT, peer, 5, dup));
    EXPECT_CLASS(MPI_Bsend(big, N, MPI_INT, peer, 5, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    MPI_CHECK(MPI_Bsend(&small, 1, MPI_INT, peer, 6, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Recv(in, N, MPI_INT, peer, 5, dup, MPI_STATUS_IGNORE));
    check(in, N, 30 + peer, __LINE__);
    MPI_CHECK(MPI_Recv(&got, 1, MPI_INT, peer, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(got == 5, "small Bsend through the process buffer: got %d", got);
    MPI_CHECK(MPI_Comm_detach_buffer(dup, &addr, &size));
    MPI_CHECK(MPI_Buffer_detach(&addr, &size));
    CHECK(addr == pbuf && size == (int)sizeof pbuf, "Buffer_detach gave %p %d", addr, size);

    /* MPI_BUFFER_AUTOMATIC for the process. */
    MPI_CHECK(MPI_Buffer_attach(MPI_BUFFER_AUTOMATIC, 0));
    EXPECT_CLASS(MPI_Buffer_attach(pbuf, sizeof pbuf), MPI_ERR_BUFFER);
    fill(big, N, 40 + t_rank);
    MPI_CHECK(MPI_Bsend(big, N, MPI_INT, peer, 7, MPI_COMM_WORLD));
    fill(big, N, 41 + t_rank);
    MPI_CHECK(MPI_Bsend(big, N, MPI_INT, peer, 8, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Buffer_iflush(&rq[1]));
    MPI_CHECK(MPI_Recv(in, N, MPI_INT, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    check(in, N, 40 + peer, __LINE__);
    MPI_CHECK(MPI_Recv(in, N, MPI_INT, peer, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    check(in, N, 41 + peer, __LINE__);
    MPI_CHECK(MPI_Wait(&rq[1], MPI_STATUS_IGNORE));
    CHECK(rq[1] == MPI_REQUEST_NULL, "Wait did not free the flush request");
    MPI_CHECK(MPI_Buffer_detach(&addr, &size));
    CHECK(addr == MPI_BUFFER_AUTOMATIC && size == 0, "detached automatic buffer: %p %d", addr,
          size);
    MPI_CHECK(MPI_Buffer_flush());

    MPI_CHECK(MPI_Comm_free(&dup));
    /* A freed communicator's buffer goes with it: a new communicator (which may reuse the
     * handle) has none to detach. */
    MPI_Comm d2, d3;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &d2));
    MPI_CHECK(MPI_Comm_attach_buffer(d2, cbuf, bsize));
    MPI_CHECK(MPI_Comm_free(&d2));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &d3));
    MPI_CHECK(MPI_Comm_set_errhandler(d3, MPI_ERRORS_RETURN));
    EXPECT_CLASS(MPI_Comm_detach_buffer(d3, &addr, &size), MPI_ERR_BUFFER);
    MPI_CHECK(MPI_Comm_free(&d3));
    free(cbuf);
    free(big);
    free(in);
    t_finish("comm_buffer");
    return 0;
}
