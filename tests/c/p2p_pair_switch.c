/* np: 3 4 */
/* Many messages between one pair, interleaved with a third sender: over shared memory the
 * pair 1 -> 0 (and 0 -> 1) switches from the shared receive queue to its own fast ring after
 * a few messages (FERRITE_SHM_FAST_AFTER); the order of each sender's messages and their data
 * must survive the switch. Rank 1 sends 0 B .. 64 KiB messages (inline in a ring slot, in a
 * queue cell, by rendezvous) with blocking and nonblocking sends; rank 2 sends fewer; rank 0
 * receives them with MPI_ANY_SOURCE / MPI_ANY_TAG (and now and then from rank 1 by tag) and
 * checks each sender's sequence numbers and bytes. Every 64 messages rank 0 answers rank 1,
 * so the reverse pair switches too. Other ranks only take part in the final barrier. */
#include "common.h"

#define N1 1500
#define N2 300
#define MAXLEN (64 * 1024)

static int len_of(int src, int i)
{
    static const int sizes[] = {0, 8, 1, 64, 200, 233, 300, 1000, 8, 5000, 16, 20000, 65536};
    int k = (i * 7 + src) % (int)(sizeof sizes / sizeof sizes[0]);
    return sizes[k];
}

static unsigned char byte_of(int src, int i, int j)
{
    return (unsigned char)(src * 31 + i * 7 + j * 13);
}

static void fill(unsigned char *b, int src, int i, int len)
{
    for (int j = 0; j < len; j++) b[j] = byte_of(src, i, j);
    if (len >= 8) {
        memcpy(b, &src, 4);
        memcpy(b + 4, &i, 4);
    }
}

static void check(const unsigned char *b, int src, int i, int len, const MPI_Status *st)
{
    int cnt = -1;
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &cnt));
    CHECK(cnt == len, "message %d from %d: %d bytes, expected %d", i, src, cnt, len);
    CHECK(st->MPI_TAG == i % 1000, "message %d from %d has tag %d (out of order?)", i, src,
          st->MPI_TAG);
    for (int j = 0; j < len; j++) {
        unsigned char want = byte_of(src, i, j);
        if (len >= 8 && j < 8) want = j < 4 ? ((unsigned char *)&src)[j] : ((unsigned char *)&i)[j - 4];
        CHECK(b[j] == want, "message %d from %d: byte %d is %d, expected %d", i, src, j, b[j],
              want);
    }
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    unsigned char *buf = malloc(MAXLEN);
    unsigned char *out = malloc(MAXLEN);
    if (t_rank == 0) {
        int next[3] = {0, 0, 0};
        int total = N1 + N2, replies = 0;
        for (int m = 0; m < total; m++) {
            MPI_Status st;
            /* Mostly wildcards; every fifth receive names rank 1 and its next tag (unless
             * it is done), which must match its next message, not a later one. */
            if (m % 5 == 4 && next[1] < N1) {
                int i = next[1];
                MPI_CHECK(MPI_Recv(buf, MAXLEN, MPI_BYTE, 1, i % 1000, MPI_COMM_WORLD, &st));
            } else {
                MPI_CHECK(MPI_Recv(buf, MAXLEN, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG,
                                   MPI_COMM_WORLD, &st));
            }
            int src = st.MPI_SOURCE;
            CHECK(src == 1 || src == 2, "message from rank %d", src);
            int i = next[src]++;
            CHECK(i < (src == 1 ? N1 : N2), "too many messages from %d", src);
            check(buf, src, i, len_of(src, i), &st);
            if (src == 1 && next[1] % 64 == 0) {
                int r = replies++;
                fill(out, 0, r, len_of(0, r));
                MPI_CHECK(MPI_Send(out, len_of(0, r), MPI_BYTE, 1, r % 1000, MPI_COMM_WORLD));
            }
        }
        CHECK(next[1] == N1 && next[2] == N2, "got %d and %d messages", next[1], next[2]);
    } else if (t_rank == 1) {
        MPI_Request rq[4];
        int nrq = 0, replies = 0;
        for (int i = 0; i < N1; i++) {
            int len = len_of(1, i);
            if (i % 3 == 0) {
                /* Nonblocking, up to four in flight, each from its own buffer. */
                static unsigned char bufs[4][MAXLEN];
                if (nrq == 4) {
                    MPI_CHECK(MPI_Waitall(4, rq, MPI_STATUSES_IGNORE));
                    nrq = 0;
                }
                fill(bufs[nrq], 1, i, len);
                MPI_CHECK(MPI_Isend(bufs[nrq], len, MPI_BYTE, 0, i % 1000, MPI_COMM_WORLD, &rq[nrq]));
                nrq++;
            } else {
                fill(out, 1, i, len);
                MPI_CHECK(MPI_Send(out, len, MPI_BYTE, 0, i % 1000, MPI_COMM_WORLD));
            }
            if ((i + 1) % 64 == 0) {
                MPI_Status st;
                MPI_CHECK(MPI_Recv(buf, MAXLEN, MPI_BYTE, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
                check(buf, 0, replies, len_of(0, replies), &st);
                replies++;
            }
        }
        MPI_CHECK(MPI_Waitall(nrq, rq, MPI_STATUSES_IGNORE));
    } else if (t_rank == 2) {
        for (int i = 0; i < N2; i++) {
            fill(out, 2, i, len_of(2, i));
            MPI_CHECK(MPI_Send(out, len_of(2, i), MPI_BYTE, 0, i % 1000, MPI_COMM_WORLD));
        }
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    free(buf);
    free(out);
    t_finish("p2p_pair_switch");
    return 0;
}
