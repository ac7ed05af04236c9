/* np: 1 2 4 16 */
/* Send modes between partners: Ssend/Issend (not complete before the receive is posted:
 * checked by data, the receiver posts only after a message the sender sends once it has
 * seen the Issend incomplete), Bsend/Ibsend with an attached buffer (complete before any
 * receive is posted; Buffer_detach gives back the buffer and size), Rsend/Irsend to a
 * posted receive; (Ferrite only) Ibsends in a row into a buffer with room for one message.
 * Small and large messages. */
#include "common.h"

#define BIG (200 * 1000)

static int fill(int *p, int n, int seed)
{
    for (int i = 0; i < n; i++) p[i] = seed * 7919 + i;
    return n;
}

static void check(int *p, int n, int seed, const char *what, MPI_Status *st, int peer, int tag)
{
    int c = -1;
    MPI_CHECK(MPI_Get_count(st, MPI_INT, &c));
    CHECK(c == n, "%s: count %d, expected %d", what, c, n);
    CHECK(st->MPI_SOURCE == peer && st->MPI_TAG == tag, "%s: status source %d tag %d", what,
          st->MPI_SOURCE, st->MPI_TAG);
    for (int i = 0; i < n; i++)
        CHECK(p[i] == seed * 7919 + i, "%s: element %d is %d", what, i, p[i]);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int peer = t_partner();
    int sizes[2] = {10, BIG};
    int *sbuf = malloc(sizeof(int) * BIG * 4), *rbuf = malloc(sizeof(int) * BIG * 4);
    MPI_Status st;
    MPI_Request rq, rrq;
    for (int z = 0; z < 2; z++) {
        int n = sizes[z];
        int base = 100 * z;

        /* Issend stays incomplete until the partner posts the receive. */
        fill(sbuf, n, t_rank + base);
        MPI_CHECK(MPI_Issend(sbuf, n, MPI_INT, peer, base + 1, MPI_COMM_WORLD, &rq));
        int flag = 1;
        for (int i = 0; i < 50; i++) {
            MPI_CHECK(MPI_Test(&rq, &flag, MPI_STATUS_IGNORE));
            CHECK(!flag, "Issend of %d ints completed before the receive was posted", n);
        }
        /* Tell the partner it may receive now; wait for the same from it. */
        int go = 1, got = 0;
        MPI_Request grq;
        MPI_CHECK(MPI_Isend(&go, 1, MPI_INT, peer, base + 2, MPI_COMM_WORLD, &grq));
        MPI_CHECK(MPI_Recv(&got, 1, MPI_INT, peer, base + 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Wait(&grq, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Recv(rbuf, n, MPI_INT, peer, base + 1, MPI_COMM_WORLD, &st));
        check(rbuf, n, peer + base, "Issend", &st, peer, base + 1);
        MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        CHECK(rq == MPI_REQUEST_NULL, "Issend request not freed");

        /* Blocking Ssend: lower rank sends first (to itself: receive posted first). */
        fill(sbuf, n, t_rank + base + 3);
        if (peer == t_rank) {
            MPI_CHECK(MPI_Irecv(rbuf, n, MPI_INT, peer, base + 3, MPI_COMM_WORLD, &rrq));
            MPI_CHECK(MPI_Ssend(sbuf, n, MPI_INT, peer, base + 3, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Wait(&rrq, &st));
        } else if (t_rank < peer) {
            MPI_CHECK(MPI_Ssend(sbuf, n, MPI_INT, peer, base + 3, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Recv(rbuf, n, MPI_INT, peer, base + 3, MPI_COMM_WORLD, &st));
        } else {
            MPI_CHECK(MPI_Recv(rbuf, n, MPI_INT, peer, base + 3, MPI_COMM_WORLD, &st));
            MPI_CHECK(MPI_Ssend(sbuf, n, MPI_INT, peer, base + 3, MPI_COMM_WORLD));
        }
        check(rbuf, n, peer + base + 3, "Ssend", &st, peer, base + 3);

        /* Bsend and Ibsend complete locally, before the partner receives anything. */
        int bsize = 2 * (n * (int)sizeof(int) + MPI_BSEND_OVERHEAD);
        char *bbuf = malloc(bsize);
        MPI_CHECK(MPI_Buffer_attach(bbuf, bsize));
        fill(sbuf, n, t_rank + base + 4);
        fill(sbuf + n, n, t_rank + base + 5);
        MPI_CHECK(MPI_Bsend(sbuf, n, MPI_INT, peer, base + 4, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Ibsend(sbuf + n, n, MPI_INT, peer, base + 5, MPI_COMM_WORLD, &rq));
        MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        /* The user buffer may be reused at once: the data was copied. */
        memset(sbuf, 0xff, sizeof(int) * 2 * n);
        MPI_CHECK(MPI_Recv(rbuf, n, MPI_INT, peer, base + 5, MPI_COMM_WORLD, &st));
        check(rbuf, n, peer + base + 5, "Ibsend", &st, peer, base + 5);
        MPI_CHECK(MPI_Recv(rbuf, n, MPI_INT, peer, base + 4, MPI_COMM_WORLD, &st));
        check(rbuf, n, peer + base + 4, "Bsend", &st, peer, base + 4);
        void *back = NULL;
        int backsize = -1;
        MPI_CHECK(MPI_Buffer_detach(&back, &backsize));
        CHECK(back == bbuf && backsize == bsize, "Buffer_detach gave %p/%d, attached %p/%d",
              back, backsize, (void *)bbuf, bsize);
        free(bbuf);

        /* Rsend and Irsend: the partner posts its receives, then says so. */
        fill(sbuf, n, t_rank + base + 6);
        fill(sbuf + n, n, t_rank + base + 7);
        MPI_Request r2[2];
        MPI_Status s2[2];
        MPI_CHECK(MPI_Irecv(rbuf, n, MPI_INT, peer, base + 6, MPI_COMM_WORLD, &r2[0]));
        MPI_CHECK(MPI_Irecv(rbuf + n, n, MPI_INT, peer, base + 7, MPI_COMM_WORLD, &r2[1]));
        MPI_CHECK(MPI_Isend(&go, 0, MPI_INT, peer, base + 8, MPI_COMM_WORLD, &grq));
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_INT, peer, base + 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Wait(&grq, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Rsend(sbuf, n, MPI_INT, peer, base + 6, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Irsend(sbuf + n, n, MPI_INT, peer, base + 7, MPI_COMM_WORLD, &rq));
        MPI_CHECK(MPI_Waitall(2, r2, s2));
        MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        check(rbuf, n, peer + base + 6, "Rsend", &s2[0], peer, base + 6);
        check(rbuf + n, n, peer + base + 7, "Irsend", &s2[1], peer, base + 7);

        /* Ferrite's choice beyond the standard (which makes a Bsend without room
         * erroneous): a buffer with room for one message, four Ibsends in a row whose
         * receives the partner posted first. Each waits for the block of the one before to
         * come free (large ones: when the partner has taken its data) instead of failing
         * with MPI_ERR_BUFFER, as programs that size the buffer for one round expect
         * (MPICH's threads/pt2pt/mt_ibsendirecv_huge). */
        if (t_expect_ferrite()) {
            MPI_Request r4[4];
            MPI_Status s4[4];
            for (int k = 0; k < 4; k++)
                MPI_CHECK(MPI_Irecv(rbuf + k * n, n, MPI_INT, peer, base + 10 + k, MPI_COMM_WORLD,
                                    &r4[k]));
            int osize = n * (int)sizeof(int) + MPI_BSEND_OVERHEAD;
            char *obuf = malloc(osize);
            MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
            MPI_CHECK(MPI_Buffer_attach(obuf, osize));
            for (int k = 0; k < 4; k++) {
                fill(sbuf, n, t_rank + base + 10 + k);
                MPI_CHECK(MPI_Ibsend(sbuf, n, MPI_INT, peer, base + 10 + k, MPI_COMM_WORLD, &rq));
                MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
            }
            MPI_CHECK(MPI_Waitall(4, r4, s4));
            for (int k = 0; k < 4; k++)
                check(rbuf + k * n, n, peer + base + 10 + k, "Ibsend into a one-message buffer",
                      &s4[k], peer, base + 10 + k);
            MPI_CHECK(MPI_Buffer_detach(&back, &backsize));
            free(obuf);
        }
    }
    free(sbuf);
    free(rbuf);
    t_finish("sendmodes");
    return 0;
}
