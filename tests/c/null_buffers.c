/* np: 1 2 4 */
/* A null buffer with a nonzero count in a collective, blocking or nonblocking, or in
 * MPI_Pack/MPI_Unpack, is MPI_ERR_BUFFER through the error handler (it used to crash in a
 * memcpy). Every rank passes the null buffer in an argument it uses, so every rank gets the
 * error and none is left waiting. MPI_BOTTOM with a datatype of absolute addresses stays
 * legal, and the collectives keep working afterwards (data checked). The same buffer as
 * send and receive buffer without MPI_IN_PLACE (aliased arguments, which MPI forbids) is
 * MPI_ERR_BUFFER too, on every rank of collectives where every rank passes both, but not
 * with a zero count (nothing is both read and written; mpi4py's empty arrays share an
 * address). Sending from this rank's own block of the receive buffer without MPI_IN_PLACE
 * (MPICH's check) is MPI_ERR_BUFFER too, as are the same buffers in Alltoallv/w. */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int n = t_size;
    int *buf = calloc(4 * (size_t)n, sizeof(int)), *out = calloc(4 * (size_t)n, sizeof(int));
    int *counts = malloc(n * sizeof(int)), *displs = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) {
        counts[i] = 2;
        displs[i] = 2 * i;
    }
    MPI_Comm c = MPI_COMM_WORLD;
    MPI_Request rq;

    /* Own block of the receive buffer as send buffer: an error on every rank (none waits). */
    EXPECT_CLASS(MPI_Allgather(&buf[2 * t_rank], 2, MPI_INT, buf, 2, MPI_INT, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Allgatherv(&buf[2 * t_rank], 2, MPI_INT, buf, counts, displs, MPI_INT, c),
                 MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Iallgather(&buf[2 * t_rank], 2, MPI_INT, buf, 2, MPI_INT, c, &rq), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Alltoallv(buf, counts, displs, MPI_INT, buf, counts, displs, MPI_INT, c),
                 MPI_ERR_BUFFER);
    if (t_rank == 0) {
        EXPECT_CLASS(MPI_Gather(&buf[0], 2, MPI_INT, buf, 2, MPI_INT, 0, c), MPI_ERR_BUFFER);
        EXPECT_CLASS(MPI_Scatterv(buf, counts, displs, MPI_INT, &buf[0], 2, MPI_INT, 0, c), MPI_ERR_BUFFER);
    }

    /* Zero counts: the same address is no aliasing. */
    int zeros[64] = {0}, zdispls[64] = {0};
    MPI_CHECK(MPI_Allreduce(buf, buf, 0, MPI_INT, MPI_SUM, c));
    MPI_CHECK(MPI_Allgather(buf, 0, MPI_INT, buf, 0, MPI_INT, c));
    MPI_CHECK(MPI_Alltoall(buf, 0, MPI_INT, buf, 0, MPI_INT, c));
    if (n <= 64) {
        MPI_CHECK(MPI_Gatherv(buf, 0, MPI_INT, buf, zeros, zdispls, MPI_INT, 0, c));
        MPI_CHECK(MPI_Scatterv(buf, zeros, zdispls, MPI_INT, buf, 0, MPI_INT, 0, c));
        MPI_CHECK(MPI_Allgatherv(buf, 0, MPI_INT, buf, zeros, zdispls, MPI_INT, c));
        MPI_CHECK(MPI_Iallgatherv(buf, 0, MPI_INT, buf, zeros, zdispls, MPI_INT, c, &rq));
        MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    }

    EXPECT_CLASS(MPI_Bcast(NULL, 4, MPI_INT, 0, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Reduce(NULL, out, 4, MPI_INT, MPI_SUM, 0, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Allreduce(NULL, out, 4, MPI_INT, MPI_SUM, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Allreduce(buf, NULL, 4, MPI_INT, MPI_SUM, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Allreduce(MPI_IN_PLACE, NULL, 4, MPI_INT, MPI_SUM, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Gather(NULL, 2, MPI_INT, out, 2, MPI_INT, 0, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Gatherv(NULL, 2, MPI_INT, out, counts, displs, MPI_INT, 0, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Scatter(buf, 2, MPI_INT, NULL, 2, MPI_INT, 0, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Scatterv(buf, counts, displs, MPI_INT, NULL, 2, MPI_INT, 0, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Allgather(NULL, 2, MPI_INT, out, 2, MPI_INT, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Allgather(buf, 2, MPI_INT, NULL, 2, MPI_INT, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Allgatherv(NULL, 2, MPI_INT, out, counts, displs, MPI_INT, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Alltoall(NULL, 2, MPI_INT, out, 2, MPI_INT, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Alltoall(buf, 2, MPI_INT, NULL, 2, MPI_INT, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Alltoallv(NULL, counts, displs, MPI_INT, out, counts, displs, MPI_INT, c),
                 MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Reduce_scatter_block(NULL, out, 2, MPI_INT, MPI_SUM, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Reduce_scatter(NULL, out, counts, MPI_INT, MPI_SUM, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Scan(NULL, out, 4, MPI_INT, MPI_SUM, c), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Exscan(NULL, out, 4, MPI_INT, MPI_SUM, c), MPI_ERR_BUFFER);

    EXPECT_CLASS(MPI_Ibcast(NULL, 4, MPI_INT, 0, c, &rq), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Iallreduce(NULL, out, 4, MPI_INT, MPI_SUM, c, &rq), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Ireduce(NULL, out, 4, MPI_INT, MPI_SUM, 0, c, &rq), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Iallgather(NULL, 2, MPI_INT, out, 2, MPI_INT, c, &rq), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Ialltoall(buf, 2, MPI_INT, NULL, 2, MPI_INT, c, &rq), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Igather(NULL, 2, MPI_INT, out, 2, MPI_INT, 0, c, &rq), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Iscan(NULL, out, 4, MPI_INT, MPI_SUM, c, &rq), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Bcast_init(NULL, 4, MPI_INT, 0, c, MPI_INFO_NULL, &rq), MPI_ERR_BUFFER);

    /* Aliased send and receive buffers (MPICH 4.0 detects only some, and hangs on the
     * others: Ferrite only). */
    if (t_is_ferrite()) {
        EXPECT_CLASS(MPI_Allreduce(buf, buf, 4, MPI_INT, MPI_SUM, c), MPI_ERR_BUFFER);
        EXPECT_CLASS(MPI_Iallreduce(buf, buf, 4, MPI_INT, MPI_SUM, c, &rq), MPI_ERR_BUFFER);
        EXPECT_CLASS(MPI_Allgather(buf, 2, MPI_INT, buf, 2, MPI_INT, c), MPI_ERR_BUFFER);
        EXPECT_CLASS(MPI_Alltoall(buf, 2, MPI_INT, buf, 2, MPI_INT, c), MPI_ERR_BUFFER);
        EXPECT_CLASS(MPI_Scan(buf, buf, 4, MPI_INT, MPI_SUM, c), MPI_ERR_BUFFER);
        EXPECT_CLASS(MPI_Reduce_scatter_block(buf, buf, 2, MPI_INT, MPI_SUM, c), MPI_ERR_BUFFER);
    }

    /* MPI_Reduce_local: no MPI_IN_PLACE, no null or aliased buffers. */
    EXPECT_CLASS(MPI_Reduce_local(MPI_IN_PLACE, out, 4, MPI_INT, MPI_SUM), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Reduce_local(buf, MPI_IN_PLACE, 4, MPI_INT, MPI_SUM), MPI_ERR_BUFFER);
    EXPECT_CLASS(MPI_Reduce_local(out, out, 4, MPI_INT, MPI_SUM), MPI_ERR_BUFFER);
    if (t_is_ferrite()) /* MPICH 4.0 crashes on a null input here */
        EXPECT_CLASS(MPI_Reduce_local(NULL, out, 4, MPI_INT, MPI_SUM), MPI_ERR_BUFFER);

    /* Pack and Unpack. MPICH 4.0 answers a null input with MPI_ERR_ARG and crashes on a
     * null output buffer: those checks are Ferrite's only. */
    char packed[64];
    int pos = 0;
    if (t_is_ferrite()) {
        EXPECT_CLASS(MPI_Pack(NULL, 4, MPI_INT, packed, sizeof packed, &pos, c), MPI_ERR_BUFFER);
        EXPECT_CLASS(MPI_Pack(buf, 4, MPI_INT, NULL, 64, &pos, c), MPI_ERR_BUFFER);
        EXPECT_CLASS(MPI_Unpack(NULL, 64, &pos, out, 4, MPI_INT, c), MPI_ERR_BUFFER);
        EXPECT_CLASS(MPI_Unpack(packed, 64, &pos, NULL, 4, MPI_INT, c), MPI_ERR_BUFFER);
    } else {
        EXPECT_CLASS(MPI_Pack(NULL, 4, MPI_INT, packed, sizeof packed, &pos, c), MPI_ERR_ARG);
    }
    /* Zero counts with null buffers are fine. */
    MPI_CHECK(MPI_Bcast(NULL, 0, MPI_INT, 0, c));
    MPI_CHECK(MPI_Allreduce(NULL, NULL, 0, MPI_INT, MPI_SUM, c));
    MPI_CHECK(MPI_Pack(NULL, 0, MPI_INT, packed, sizeof packed, &pos, c));

    /* MPI_BOTTOM with absolute addresses: legal, and the data arrives. */
    int val[2] = {t_rank == 0 ? 41 : -1, t_rank == 0 ? 43 : -1};
    MPI_Aint addr[2];
    MPI_CHECK(MPI_Get_address(&val[0], &addr[0]));
    MPI_CHECK(MPI_Get_address(&val[1], &addr[1]));
    int lens[2] = {1, 1};
    MPI_Datatype abs_t;
    MPI_CHECK(MPI_Type_create_hindexed(2, lens, addr, MPI_INT, &abs_t));
    MPI_CHECK(MPI_Type_commit(&abs_t));
    MPI_CHECK(MPI_Bcast(MPI_BOTTOM, 1, abs_t, 0, c));
    CHECK(val[0] == 41 && val[1] == 43, "MPI_BOTTOM bcast gave %d %d", val[0], val[1]);
    MPI_CHECK(MPI_Type_free(&abs_t));

    /* Nothing was left half-done: a collective still works. */
    for (int i = 0; i < 4; i++) buf[i] = t_rank + i;
    MPI_CHECK(MPI_Allreduce(buf, out, 4, MPI_INT, MPI_SUM, c));
    for (int i = 0; i < 4; i++)
        CHECK(out[i] == n * (n - 1) / 2 + n * i, "allreduce after errors: [%d] = %d", i, out[i]);
    free(buf);
    free(out);
    free(counts);
    free(displs);
    t_finish("null_buffers");
    return 0;
}
