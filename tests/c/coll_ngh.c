/* np: 1 2 3 4 5 8 */
/* Neighborhood collectives on a periodic 1-D ring (at -n 1 and 2 both directions reach the
 * same rank: the block received from the negative neighbour must be the one it sent towards
 * +1), a 2-D non-periodic grid (MPI_PROC_NULL edges leave receive blocks untouched) and a
 * distributed graph; allgather, alltoall, their v/w forms, nonblocking and persistent. */
#include "common.h"

static int val(int from, int to_slot, int i) { return from * 1000 + to_slot * 10 + i; }

static void ring(int me, int np)
{
    MPI_Comm c;
    int dims[1] = {np}, per[1] = {1};
    MPI_CHECK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, per, 0, &c));
    int left = (me - 1 + np) % np, right = (me + 1) % np;
    int s[2 * 3], r[2 * 3];
    /* alltoall: block j goes to neighbour j (0: -1 direction, 1: +1 direction) */
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < 3; i++) s[j * 3 + i] = val(me, j, i);
    MPI_CHECK(MPI_Neighbor_alltoall(s, 3, MPI_INT, r, 3, MPI_INT, c));
    for (int i = 0; i < 3; i++) {
        /* from the left neighbour: what it sent towards +1 (its block 1) */
        CHECK(r[i] == val(left, 1, i), "ring alltoall from left [%d]=%d want %d", i, r[i],
              val(left, 1, i));
        CHECK(r[3 + i] == val(right, 0, i), "ring alltoall from right [%d]", i);
    }
    MPI_Request rq;
    MPI_CHECK(MPI_Ineighbor_allgather(s, 3, MPI_INT, r, 3, MPI_INT, c, &rq));
    MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    for (int i = 0; i < 3; i++) {
        CHECK(r[i] == val(left, 0, i), "ring allgather from left [%d]", i);
        CHECK(r[3 + i] == val(right, 0, i), "ring allgather from right [%d]", i);
    }
    MPI_CHECK(MPI_Comm_free(&c));
}

static void grid(int me, int np)
{
    MPI_Comm c;
    int dims[2] = {0, 0}, per[2] = {0, 0};
    MPI_CHECK(MPI_Dims_create(np, 2, dims));
    MPI_CHECK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, per, 0, &c));
    int rank;
    MPI_CHECK(MPI_Comm_rank(c, &rank));
    int nb[4];
    MPI_CHECK(MPI_Cart_shift(c, 0, 1, &nb[0], &nb[1]));
    MPI_CHECK(MPI_Cart_shift(c, 1, 1, &nb[2], &nb[3]));
    int s[4], r[4], cnt[4] = {1, 1, 1, 1}, dis[4] = {3, 2, 1, 0};
    for (int j = 0; j < 4; j++) s[dis[j]] = val(rank, j, 0), r[j] = -1;
    MPI_Request rq;
    MPI_CHECK(MPI_Neighbor_alltoallv_init(s, cnt, dis, MPI_INT, r, cnt, dis, MPI_INT, c,
                                          MPI_INFO_NULL, &rq));
    for (int it = 0; it < 2; it++) {
        MPI_CHECK(MPI_Start(&rq));
        MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        for (int j = 0; j < 4; j++) {
            /* slot j came from nb[j], which sent its block j^1 (at displacement 3-(j^1)) */
            int want = nb[j] == MPI_PROC_NULL ? -1 : val(nb[j], j ^ 1, 0);
            CHECK(r[dis[j]] == want, "grid alltoallv slot %d: %d want %d", j, r[dis[j]], want);
        }
    }
    MPI_CHECK(MPI_Request_free(&rq));
    (void)me;
    MPI_CHECK(MPI_Comm_free(&c));
}

static void graph(int me, int np)
{
    /* rank i sends to i+1 and i+3 (mod np); it hears from i-1 and i-3 */
    int dst[2] = {(me + 1) % np, (me + 3) % np}, src[2] = {(me - 1 + np) % np,
                                                           (me - 3 + 3 * np) % np};
    MPI_Comm c;
    MPI_CHECK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, src, MPI_UNWEIGHTED, 2, dst,
                                             MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &c));
    int s[2], r[2], cnt[2] = {1, 1};
    MPI_Aint bd[2] = {0, sizeof(int)};
    MPI_Datatype ty[2] = {MPI_INT, MPI_INT};
    for (int j = 0; j < 2; j++) s[j] = val(me, j, 0), r[j] = -1;
    MPI_CHECK(MPI_Neighbor_alltoallw(s, cnt, bd, ty, r, cnt, bd, ty, c));
    /* FIFO pairing between the same two ranks: k-th block to a rank is its k-th from us */
    for (int i = 0; i < 2; i++) {
        int from = src[i], slot = -1, seen = 0;
        for (int k = 0; k < 2; k++) /* which of from's sends reach us, in order */
            if ((from + (k ? 3 : 1)) % np == me) {
                int mine = 0;
                for (int q = 0; q < i; q++) mine += src[q] == from;
                if (seen++ == mine) slot = k;
            }
        CHECK(slot >= 0 && r[i] == val(from, slot, 0), "graph alltoallw slot %d: %d", i, r[i]);
    }
    MPI_CHECK(MPI_Neighbor_allgather(&me, 1, MPI_INT, r, 1, MPI_INT, c));
    CHECK(r[0] == src[0] && r[1] == src[1], "graph allgather");
    MPI_CHECK(MPI_Comm_free(&c));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    ring(t_rank, t_size);
    grid(t_rank, t_size);
    graph(t_rank, t_size);
    t_finish("coll_ngh");
    return 0;
}
