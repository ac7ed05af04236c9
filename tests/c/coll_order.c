/* np: 2 3 4 8 */
/* Blocking and nonblocking collectives started in a different order on different ranks
 * (erroneous by the standard, but MPICH tolerates it and programs rely on it): rank 0 starts
 * an Iallreduce, then calls Barrier and Bcast, then waits; the others call Barrier and
 * Bcast first and start the Iallreduce after. Each collective must match its own kind
 * (no MPI_ERR_TRUNCATE, no hang), and the data must be right. Persistent collectives match
 * in the order they were initialized (MPI 4.1 section 6.13), whatever order they are
 * started in: rank 0 starts a Bcast before a Barrier, the others the other way round. */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int n = t_size;
    for (int round = 0; round < 3; round++) {
        long v[4], sum[4], b[3] = {0, 0, 0};
        for (int i = 0; i < 4; i++) v[i] = t_rank * 10 + i + round;
        MPI_Request rq;
        if (t_rank == 0) {
            MPI_CHECK(MPI_Iallreduce(v, sum, 4, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &rq));
            MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
            b[0] = 7; b[1] = 8 + round; b[2] = 9;
            MPI_CHECK(MPI_Bcast(b, 3, MPI_LONG, 0, MPI_COMM_WORLD));
        } else {
            MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
            MPI_CHECK(MPI_Bcast(b, 3, MPI_LONG, 0, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Iallreduce(v, sum, 4, MPI_LONG, MPI_SUM, MPI_COMM_WORLD, &rq));
        }
        MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        CHECK(b[0] == 7 && b[1] == 8 + round && b[2] == 9, "round %d: bcast gave %ld %ld %ld", round,
              b[0], b[1], b[2]);
        for (int i = 0; i < 4; i++) {
            long want = 10L * n * (n - 1) / 2 + (long)n * (i + round);
            CHECK(sum[i] == want, "round %d: iallreduce[%d] = %ld, expected %ld", round, i, sum[i], want);
        }
    }
    int a = -1;
    MPI_Request pr[2];
    MPI_CHECK(MPI_Bcast_init(&a, 1, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &pr[0]));
    MPI_CHECK(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &pr[1]));
    for (int round = 0; round < 3; round++) {
        a = t_rank == 0 ? 42 + round : -1;
        if (t_rank == 0) {
            MPI_CHECK(MPI_Start(&pr[0]));
            MPI_CHECK(MPI_Start(&pr[1]));
        } else {
            MPI_CHECK(MPI_Start(&pr[1]));
            MPI_CHECK(MPI_Start(&pr[0]));
        }
        MPI_CHECK(MPI_Waitall(2, pr, MPI_STATUSES_IGNORE));
        CHECK(a == 42 + round, "round %d: persistent bcast gave %d", round, a);
    }
    MPI_CHECK(MPI_Request_free(&pr[0]));
    MPI_CHECK(MPI_Request_free(&pr[1]));
    t_finish("coll_order");
    return 0;
}
