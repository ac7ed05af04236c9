/* np: 1 2 4 16 */
/* Probe and Iprobe, then a receive sized by the probed count: messages of varied sizes
 * and tags from every rank to rank 0 (and from rank 0 to itself), probed with specific and
 * wildcard source/tag. The probed message must be the one received. */
#include "common.h"

#define PER 6

static int msg_size(int src, int k) { return k % 3 == 2 ? 50000 + src : src * 3 + k; }

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    /* Every rank sends PER messages to rank 0. */
    MPI_Request rq[PER];
    int *sb[PER];
    for (int k = 0; k < PER; k++) {
        int n = msg_size(t_rank, k);
        sb[k] = malloc(sizeof(int) * (n + 1));
        for (int i = 0; i < n; i++) sb[k][i] = t_rank * 1000003 + k * 1009 + i;
        MPI_CHECK(MPI_Isend(sb[k], n, MPI_INT, 0, 10 + k, MPI_COMM_WORLD, &rq[k]));
    }
    if (t_rank == 0) {
        int *next = calloc(t_size, sizeof(int));
        for (int m = 0; m < PER * t_size; m++) {
            MPI_Status st;
            int how = m % 3;
            if (how == 0) {
                MPI_CHECK(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            } else if (how == 1) {
                int flag = 0;
                while (!flag)
                    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
            } else {
                /* Specific source and tag: the next expected message of some sender. */
                int src = m % t_size;
                while (next[src] >= PER) src = (src + 1) % t_size;
                MPI_CHECK(MPI_Probe(src, 10 + next[src], MPI_COMM_WORLD, &st));
                CHECK(st.MPI_SOURCE == src && st.MPI_TAG == 10 + next[src],
                      "probe for %d/%d gave %d/%d", src, 10 + next[src], st.MPI_SOURCE,
                      st.MPI_TAG);
            }
            int src = st.MPI_SOURCE, k = st.MPI_TAG - 10;
            CHECK(src >= 0 && src < t_size && k == next[src],
                  "probe gave source %d tag %d; expected tag %d from it (order)", src,
                  st.MPI_TAG, src >= 0 && src < t_size ? 10 + next[src] : -1);
            int c = -1;
            MPI_CHECK(MPI_Get_count(&st, MPI_INT, &c));
            CHECK(c == msg_size(src, k), "probed count %d from %d/%d, expected %d", c, src, k,
                  msg_size(src, k));
            int *buf = malloc(sizeof(int) * (c + 1));
            buf[c] = -77;
            MPI_Status rs;
            MPI_CHECK(MPI_Recv(buf, c, MPI_INT, src, st.MPI_TAG, MPI_COMM_WORLD, &rs));
            int rc = -1;
            MPI_CHECK(MPI_Get_count(&rs, MPI_INT, &rc));
            CHECK(rc == c && rs.MPI_SOURCE == src && rs.MPI_TAG == st.MPI_TAG,
                  "receive after probe: count %d source %d tag %d", rc, rs.MPI_SOURCE, rs.MPI_TAG);
            for (int i = 0; i < c; i++)
                CHECK(buf[i] == src * 1000003 + k * 1009 + i, "from %d msg %d: element %d wrong",
                      src, k, i);
            CHECK(buf[c] == -77, "receive wrote past the probed count");
            free(buf);
            next[src]++;
        }
        int flag = 1;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag,
                             MPI_STATUS_IGNORE));
        CHECK(!flag, "Iprobe found a message after all were received");
        free(next);
    }
    MPI_CHECK(MPI_Waitall(PER, rq, MPI_STATUSES_IGNORE));
    /* Iprobe for a message that is never sent. */
    int flag = 1;
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, 9999, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
    CHECK(!flag, "Iprobe matched tag 9999 that nobody sent");
    for (int k = 0; k < PER; k++) free(sb[k]);
    t_finish("probe");
    return 0;
}
