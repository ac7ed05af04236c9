/* np: 2 3 */
/* MPI_Irecv's handles through every request call (on Ferrite a plain Irecv is a receive
 * without a request object, whose handle the completion calls resolve), eager (16 B) and
 * rendezvous (200 KB) messages, data checked:
 * - Request_free on a pending Irecv: the message still lands in the buffer (seen after a
 *   later message from the same sender, which cannot overtake it);
 * - Cancel on a pending Irecv: Wait's status says cancelled and a later message goes to
 *   the next receive; Cancel on a completed one: not cancelled;
 * - Request_get_status on a pending and then completed Irecv (handle kept, status right),
 *   then Wait; MPI_Start on an Irecv's handle fails with MPI_ERR_REQUEST;
 * - an Irecv matching an unexpected message (eager and rendezvous) and one from
 *   MPI_PROC_NULL; Waitany/Testsome/Testall over Irecvs mixed with MPI_REQUEST_NULL;
 * - a window of 64 Irecvs from ANY_SOURCE/ANY_TAG and specific tags, completed in reverse
 *   order with Wait: every message's bytes, source, tag and count, in send order.
 * Ranks 0 and 1 take part; others only join the barriers. Passes on Open MPI and MPICH too. */
#include "common.h"

#define SMALL 16
#define BIG 200000

static unsigned char val(int seq, int j) { return (unsigned char)(seq * 13 + j * 7 + 1); }

static void fill(unsigned char *b, int n, int seq)
{
    for (int j = 0; j < n; j++) b[j] = val(seq, j);
}

static void expect(const unsigned char *b, int n, int seq, const char *what)
{
    for (int j = 0; j < n; j++)
        CHECK(b[j] == val(seq, j), "%s: byte %d of message %d is %d, want %d", what, j, seq,
              b[j], val(seq, j));
}

static unsigned char big_out[BIG], big_in[BIG];

/* Request_free on a pending Irecv of `n` bytes; the sender sends it then a marker. */
static void freed_pending(int n, int seq)
{
    if (t_rank > 1) {
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        return;
    }
    unsigned char *in = n == BIG ? big_in : malloc(n);
    if (t_rank == 1) {
        MPI_Request r;
        memset(in, 0, n);
        MPI_CHECK(MPI_Irecv(in, n, MPI_BYTE, 0, 10, MPI_COMM_WORLD, &r));
        MPI_CHECK(MPI_Request_free(&r));
        CHECK(r == MPI_REQUEST_NULL, "Request_free leaves MPI_REQUEST_NULL");
        MPI_CHECK(MPI_Send(&seq, 0, MPI_INT, 0, 11, MPI_COMM_WORLD)); /* go */
        int marker = -1;
        MPI_CHECK(MPI_Recv(&marker, 1, MPI_INT, 0, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(marker == seq, "marker %d, want %d", marker, seq);
        /* A rendezvous receive may finish after the marker: give it progress. */
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        expect(in, n, seq, "freed Irecv");
    } else {
        unsigned char *out = n == BIG ? big_out : malloc(n);
        fill(out, n, seq);
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_INT, 1, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Send(out, n, MPI_BYTE, 1, 10, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Send(&seq, 1, MPI_INT, 1, 12, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        if (n != BIG) free(out);
    }
    if (n != BIG) free(in);
}

static void cancels(void)
{
    if (t_rank > 1) return;
    if (t_rank == 1) {
        int a = -1, b = -1, flag = 0;
        MPI_Request r;
        MPI_Status st;
        MPI_CHECK(MPI_Irecv(&a, 1, MPI_INT, 0, 20, MPI_COMM_WORLD, &r));
        MPI_CHECK(MPI_Cancel(&r));
        MPI_CHECK(MPI_Wait(&r, &st));
        MPI_CHECK(MPI_Test_cancelled(&st, &flag));
        CHECK(flag && r == MPI_REQUEST_NULL && a == -1, "a pending Irecv cancels");
        /* Another receive first (a library may reuse the cancelled one's slot for it), then
         * the next receive of tag 20: each takes its own message. */
        int x = -1;
        MPI_Request rx;
        MPI_CHECK(MPI_Irecv(&x, 1, MPI_INT, 0, 23, MPI_COMM_WORLD, &rx));
        MPI_CHECK(MPI_Irecv(&b, 1, MPI_INT, 0, 20, MPI_COMM_WORLD, &r));
        MPI_CHECK(MPI_Send(NULL, 0, MPI_INT, 0, 21, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Wait(&r, &st));
        CHECK(b == 77 && st.MPI_SOURCE == 0 && st.MPI_TAG == 20, "the next Irecv takes it");
        MPI_CHECK(MPI_Wait(&rx, &st));
        CHECK(x == 79 && st.MPI_TAG == 23, "the other Irecv takes its own (%d)", x);
        MPI_CHECK(MPI_Test_cancelled(&st, &flag));
        CHECK(!flag, "a received message is not cancelled");
        /* Completed before the cancel: it stays received. */
        MPI_CHECK(MPI_Irecv(&b, 1, MPI_INT, 0, 22, MPI_COMM_WORLD, &r));
        MPI_CHECK(MPI_Send(NULL, 0, MPI_INT, 0, 21, MPI_COMM_WORLD));
        do MPI_CHECK(MPI_Request_get_status(r, &flag, &st));
        while (!flag);
        CHECK(r != MPI_REQUEST_NULL && st.MPI_TAG == 22, "get_status keeps the handle");
        MPI_CHECK(MPI_Cancel(&r));
        MPI_CHECK(MPI_Wait(&r, &st));
        MPI_CHECK(MPI_Test_cancelled(&st, &flag));
        CHECK(!flag && b == 78 && st.MPI_SOURCE == 0, "completed, then cancel: received");
    } else {
        int v = 77, w = 78, y = 79;
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_INT, 1, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Send(&v, 1, MPI_INT, 1, 20, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Send(&y, 1, MPI_INT, 1, 23, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_INT, 1, 21, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Send(&w, 1, MPI_INT, 1, 22, MPI_COMM_WORLD));
    }
}

static void statuses_and_start(void)
{
    if (t_rank > 1) {
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        return;
    }
    if (t_rank == 1) {
        unsigned char s[SMALL];
        MPI_Request r[4];
        MPI_Status st;
        int flag = 1, idx = -1, cnt = -1;
        MPI_CHECK(MPI_Irecv(big_in, BIG, MPI_BYTE, 0, 30, MPI_COMM_WORLD, &r[0]));
        MPI_CHECK(MPI_Request_get_status(r[0], &flag, &st));
        CHECK(!flag, "nothing sent yet: pending");
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        MPI_Request copy = r[0];
        EXPECT_CLASS(MPI_Start(&copy), MPI_ERR_REQUEST);
        MPI_CHECK(MPI_Send(NULL, 0, MPI_INT, 0, 31, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Wait(&r[0], &st));
        MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &cnt));
        CHECK(cnt == BIG && st.MPI_TAG == 30, "rendezvous Irecv: count %d", cnt);
        expect(big_in, BIG, 30, "rendezvous Irecv");
        /* Unexpected eager and rendezvous messages (sent before these Irecvs are posted,
         * taken after the barrier), one from MPI_PROC_NULL, a null handle. */
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        MPI_CHECK(MPI_Probe(0, 33, MPI_COMM_WORLD, &st));
        MPI_CHECK(MPI_Irecv(s, SMALL, MPI_BYTE, 0, 32, MPI_COMM_WORLD, &r[0]));
        MPI_CHECK(MPI_Irecv(big_in, BIG, MPI_BYTE, 0, 33, MPI_COMM_WORLD, &r[1]));
        MPI_CHECK(MPI_Irecv(s, SMALL, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &r[2]));
        r[3] = MPI_REQUEST_NULL;
        int seen = 0;
        while (seen < 3) {
            MPI_CHECK(MPI_Waitany(4, r, &idx, &st));
            CHECK(idx >= 0 && idx <= 2 && r[idx] == MPI_REQUEST_NULL, "Waitany index %d", idx);
            if (idx == 2)
                CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "PROC_NULL source %d", st.MPI_SOURCE);
            else
                CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 32 + idx, "Waitany status");
            seen++;
        }
        MPI_CHECK(MPI_Waitany(4, r, &idx, &st));
        CHECK(idx == MPI_UNDEFINED, "all null: MPI_UNDEFINED");
        expect(s, SMALL, 32, "unexpected eager Irecv");
        expect(big_in, BIG, 33, "unexpected rendezvous Irecv");
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    } else {
        unsigned char s[SMALL];
        fill(big_out, BIG, 30);
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_INT, 1, 31, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Send(big_out, BIG, MPI_BYTE, 1, 30, MPI_COMM_WORLD));
        fill(s, SMALL, 32);
        fill(big_out, BIG, 33);
        MPI_Request q[2];
        MPI_CHECK(MPI_Isend(s, SMALL, MPI_BYTE, 1, 32, MPI_COMM_WORLD, &q[0]));
        MPI_CHECK(MPI_Isend(big_out, BIG, MPI_BYTE, 1, 33, MPI_COMM_WORLD, &q[1]));
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        MPI_CHECK(MPI_Waitall(2, q, MPI_STATUSES_IGNORE));
    }
}

/* A window of 64: even messages to a specific tag, odd ones to ANY_SOURCE/ANY_TAG;
 * posted before the sends, completed in reverse with Wait, then with Testsome. */
static void window(int round)
{
    enum { W = 64 };
    unsigned char buf[W][SMALL];
    if (t_rank > 1) return;
    if (t_rank == 1) {
        MPI_Request r[W];
        for (int i = 0; i < W; i++) {
            memset(buf[i], 0, SMALL);
            int src = i % 2 ? MPI_ANY_SOURCE : 0, tag = i % 2 ? MPI_ANY_TAG : 40 + i;
            MPI_CHECK(MPI_Irecv(buf[i], SMALL, MPI_BYTE, src, tag, MPI_COMM_WORLD, &r[i]));
        }
        MPI_CHECK(MPI_Send(NULL, 0, MPI_INT, 0, 39, MPI_COMM_WORLD));
        int left = W;
        if (round == 0) {
            for (int i = W - 1; i >= 0; i--) {
                MPI_Status st;
                int cnt = -1;
                MPI_CHECK(MPI_Wait(&r[i], &st));
                MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &cnt));
                CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 40 + i && cnt == SMALL,
                      "message %d: source %d tag %d count %d", i, st.MPI_SOURCE, st.MPI_TAG, cnt);
            }
        } else {
            while (left > 0) {
                int n = 0, idx[W];
                MPI_Status sts[W];
                MPI_CHECK(MPI_Testsome(W, r, &n, idx, sts));
                CHECK(n != MPI_UNDEFINED, "Testsome: requests are left");
                for (int k = 0; k < n; k++)
                    CHECK(sts[k].MPI_TAG == 40 + idx[k], "Testsome status of %d", idx[k]);
                left -= n;
            }
            int flag = 0;
            MPI_CHECK(MPI_Testall(W, r, &flag, MPI_STATUSES_IGNORE));
            CHECK(flag, "Testall over null handles");
        }
        for (int i = 0; i < W; i++) expect(buf[i], SMALL, 40 + i, "window");
    } else {
        MPI_Request q[W];
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_INT, 1, 39, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (int i = 0; i < W; i++) {
            fill(buf[i], SMALL, 40 + i);
            MPI_CHECK(MPI_Isend(buf[i], SMALL, MPI_BYTE, 1, 40 + i, MPI_COMM_WORLD, &q[i]));
        }
        MPI_CHECK(MPI_Waitall(W, q, MPI_STATUSES_IGNORE));
    }
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    freed_pending(SMALL, 1);
    freed_pending(BIG, 2);
    cancels();
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    statuses_and_start();
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    for (int round = 0; round < 2; round++) window(round);
    if (t_rank == 0) printf("done: p2p_irecv_handles\n");
    MPI_Finalize();
    return 0;
}
