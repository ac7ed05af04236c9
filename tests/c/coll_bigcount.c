/* np: 1 2 3 5 8 */
/* The large-count (_c) collectives with MPI_Count counts and MPI_Aint displacements, in
 * blocking, nonblocking and persistent forms, checked against serial results (small counts:
 * the point is the signatures and the array types, not 2^31 elements). */
#include "common.h"

#define N 6

static int val(int r, int i) { return r * 100 + i; }

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int me = t_rank, np = t_size;
    int *s = malloc(sizeof(int) * N * np), *r = malloc(sizeof(int) * N * np);
    MPI_Count *cnt = malloc(sizeof(MPI_Count) * np);
    MPI_Aint *dis = malloc(sizeof(MPI_Aint) * np), *bdis = malloc(sizeof(MPI_Aint) * np);
    MPI_Datatype *ty = malloc(sizeof(MPI_Datatype) * np);
    for (int k = 0; k < np; k++) {
        cnt[k] = N;
        dis[k] = (MPI_Aint)(np - 1 - k) * N; /* reversed layout */
        bdis[k] = dis[k] * (MPI_Aint)sizeof(int);
        ty[k] = MPI_INT;
    }
    MPI_Request rq;
    for (int i = 0; i < N; i++) s[i] = val(me, i);

    MPI_CHECK(MPI_Allreduce_c(s, r, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) {
        int want = 0;
        for (int k = 0; k < np; k++) want += val(k, i);
        CHECK(r[i] == want, "Allreduce_c [%d]", i);
    }
    MPI_CHECK(MPI_Iallreduce_c(s, r, N, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &rq));
    MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    for (int i = 0; i < N; i++) CHECK(r[i] == val(np - 1, i), "Iallreduce_c [%d]", i);

    for (int i = 0; i < N; i++) r[i] = me == 0 ? val(0, i) : -1;
    MPI_CHECK(MPI_Bcast_init_c(r, N, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &rq));
    MPI_CHECK(MPI_Start(&rq));
    MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Request_free(&rq));
    for (int i = 0; i < N; i++) CHECK(r[i] == val(0, i), "Bcast_init_c [%d]", i);

    MPI_CHECK(MPI_Allgatherv_c(s, N, MPI_INT, r, cnt, dis, MPI_INT, MPI_COMM_WORLD));
    for (int k = 0; k < np; k++)
        for (int i = 0; i < N; i++)
            CHECK(r[dis[k] + i] == val(k, i), "Allgatherv_c from %d [%d]", k, i);

    for (int i = 0; i < N * np; i++) r[i] = -1;
    MPI_CHECK(MPI_Gatherv_c(s, N, MPI_INT, r, cnt, dis, MPI_INT, np - 1, MPI_COMM_WORLD));
    if (me == np - 1)
        for (int k = 0; k < np; k++)
            for (int i = 0; i < N; i++)
                CHECK(r[dis[k] + i] == val(k, i), "Gatherv_c from %d [%d]", k, i);

    /* alltoallw_c: block for rank k is at reversed byte offset, values val(me*10+k, i) */
    for (int k = 0; k < np; k++)
        for (int i = 0; i < N; i++) s[dis[k] + i] = val(me * 10 + k, i);
    MPI_CHECK(MPI_Alltoallw_c(s, cnt, bdis, ty, r, cnt, bdis, ty, MPI_COMM_WORLD));
    for (int k = 0; k < np; k++)
        for (int i = 0; i < N; i++)
            CHECK(r[dis[k] + i] == val(k * 10 + me, i), "Alltoallw_c from %d [%d]", k, i);
    MPI_CHECK(MPI_Ialltoallv_c(s, cnt, dis, MPI_INT, r, cnt, dis, MPI_INT, MPI_COMM_WORLD, &rq));
    MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    for (int k = 0; k < np; k++)
        for (int i = 0; i < N; i++)
            CHECK(r[dis[k] + i] == val(k * 10 + me, i), "Ialltoallv_c from %d [%d]", k, i);

    for (int j = 0; j < N * np; j++) s[j] = val(me, j);
    MPI_CHECK(MPI_Reduce_scatter_c(s, r, cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) {
        int want = 0;
        for (int k = 0; k < np; k++) want += val(k, me * N + i);
        CHECK(r[i] == want, "Reduce_scatter_c [%d]", i);
    }
    MPI_CHECK(MPI_Scan_c(s, r, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) {
        int want = 0;
        for (int k = 0; k <= me; k++) want += val(k, i);
        CHECK(r[i] == want, "Scan_c [%d]", i);
    }
    int a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = i, b[i] = 2 * i;
    MPI_CHECK(MPI_Reduce_local_c(a, b, N, MPI_INT, MPI_SUM));
    for (int i = 0; i < N; i++) CHECK(b[i] == 3 * i, "Reduce_local_c [%d]", i);

    free(s), free(r), free(cnt), free(dis), free(bdis), free(ty);
    t_finish("coll_bigcount");
    return 0;
}
