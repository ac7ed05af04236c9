/* np: 1 2 4 */
/* mpi4py.util.pkl5's pattern, to self and to the next rank: two synchronous nonblocking
 * sends with the same tag (a small header, then the payload, eager or rendezvous size),
 * neither complete before a receive matches; the receiver finds the header by Probe (or
 * Mprobe/Improbe), receives it, then receives (or matched-receives) the payload. */
#include "common.h"

#define T 9
static const int sizes[] = {0, 1, 100, 5000, 70000, 1 << 20};
#define NS ((int)(sizeof sizes / sizeof sizes[0]))

static void fill(unsigned char *b, int n, int seed)
{
    for (int i = 0; i < n; i++) b[i] = (unsigned char)(seed * 31 + i * 7);
}

static void verify(const unsigned char *b, int n, int seed, const char *what, int mode)
{
    for (int i = 0; i < n; i++)
        CHECK(b[i] == (unsigned char)(seed * 31 + i * 7),
              "%s (mode %d): byte %d of %d is %d", what, mode, i, n, b[i]);
}

/* mode 0: Probe + Recv, 1: Mprobe + Mrecv, 2: Improbe (polled) + Imrecv + Wait. */
static void round_trip(int dst, int src, int n, int mode)
{
    long long info = n, rinfo = -1;
    unsigned char *sb = malloc(n + 1), *rb = malloc(n + 1);
    fill(sb, n, n + mode);
    memset(rb, 0xee, n + 1);
    MPI_Request rq[2];
    MPI_CHECK(MPI_Issend(&info, 1, MPI_LONG_LONG, dst, T, MPI_COMM_WORLD, &rq[0]));
    MPI_CHECK(MPI_Issend(sb, n, MPI_BYTE, dst, T, MPI_COMM_WORLD, &rq[1]));
    if (dst == t_rank) {
        int flag = 1;
        MPI_CHECK(MPI_Test(&rq[0], &flag, MPI_STATUS_IGNORE));
        CHECK(!flag, "Issend to self completed before a receive matched (mode %d)", mode);
    }
    MPI_Status st;
    int cnt = -1;
    MPI_CHECK(MPI_Probe(src, T, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Get_elements(&st, MPI_LONG_LONG, &cnt));
    CHECK(cnt == 1 && st.MPI_SOURCE == src, "header probe: %d elements from %d", cnt,
          st.MPI_SOURCE);
    MPI_CHECK(MPI_Recv(&rinfo, 1, MPI_LONG_LONG, src, T, MPI_COMM_WORLD, &st));
    CHECK(rinfo == n, "header %lld, expected %d", rinfo, n);
    if (mode == 0) {
        MPI_CHECK(MPI_Recv(rb, n, MPI_BYTE, src, T, MPI_COMM_WORLD, &st));
    } else if (mode == 1) {
        MPI_Message m;
        MPI_CHECK(MPI_Mprobe(src, T, MPI_COMM_WORLD, &m, &st));
        MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &cnt));
        CHECK(cnt == n, "Mprobe: count %d, expected %d", cnt, n);
        MPI_CHECK(MPI_Mrecv(rb, n, MPI_BYTE, &m, &st));
        CHECK(m == MPI_MESSAGE_NULL, "Mrecv did not set the message to MPI_MESSAGE_NULL");
    } else {
        MPI_Message m = MPI_MESSAGE_NULL;
        int flag = 0;
        while (!flag) MPI_CHECK(MPI_Improbe(src, T, MPI_COMM_WORLD, &flag, &m, &st));
        MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &cnt));
        CHECK(cnt == n, "Improbe: count %d, expected %d", cnt, n);
        MPI_Request r;
        MPI_CHECK(MPI_Imrecv(rb, n, MPI_BYTE, &m, &r));
        MPI_CHECK(MPI_Wait(&r, &st));
    }
    MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &cnt));
    CHECK(cnt == n && st.MPI_SOURCE == src && st.MPI_TAG == T,
          "payload (mode %d): count %d source %d tag %d, expected %d %d %d", mode, cnt,
          st.MPI_SOURCE, st.MPI_TAG, n, src, T);
    verify(rb, n, n + mode, "payload", mode);
    CHECK(rb[n] == 0xee, "payload (mode %d): byte past the end written", mode);
    MPI_CHECK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
    CHECK(rq[0] == MPI_REQUEST_NULL && rq[1] == MPI_REQUEST_NULL, "Issend requests not freed");
    free(sb);
    free(rb);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int next = (t_rank + 1) % t_size, prev = (t_rank + t_size - 1) % t_size;
    for (int mode = 0; mode < 3; mode++)
        for (int k = 0; k < NS; k++) {
            round_trip(t_rank, t_rank, sizes[k], mode);
            round_trip(next, prev, sizes[k], mode);
        }
    t_finish("ssend_self");
    return 0;
}
