/* np: 1 2 4 */
/* MPI_Win_allocate_shared + MPI_Win_shared_query: real load/store access to other ranks'
 * memory on the same host. Rank r has 4*(r+1) ints (rank 1 has none when n > 2, to check
 * zero-size parts); parts are contiguous in rank order (the default); each rank stores
 * (a rank with no memory gets a NULL base from shared_query, as MPICH) into its right
 * neighbour's memory through the pointer shared_query gives, then
 * Win_sync + Barrier + Win_sync (the unified model's load/store synchronization) and every
 * rank checks its own part; RMA (Fetch_and_op under lock_all) on the same memory agrees
 * with loads; MPI_WIN_MODEL is MPI_WIN_UNIFIED. */
#include "common.h"

static int count_of(int r, int n) { return (n > 2 && r == 1) ? 0 : 4 * (r + 1); }

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int n = t_size, r = t_rank;
    int *mine = NULL;
    MPI_Win w;
    MPI_CHECK(MPI_Win_allocate_shared(count_of(r, n) * sizeof(int), sizeof(int), MPI_INFO_NULL,
                                      MPI_COMM_WORLD, &mine, &w));
    int *model, flag, *flavor;
    MPI_CHECK(MPI_Win_get_attr(w, MPI_WIN_MODEL, &model, &flag));
    CHECK(flag && *model == MPI_WIN_UNIFIED, "MPI_WIN_MODEL %d", *model);
    MPI_CHECK(MPI_Win_get_attr(w, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_SHARED, "flavor %d", *flavor);
    int **parts = calloc(n, sizeof(int *));
    char *next = NULL; /* where the next part with memory must start */
    for (int q = 0; q < n; q++) {
        MPI_Aint size;
        int unit;
        MPI_CHECK(MPI_Win_shared_query(w, q, &size, &unit, &parts[q]));
        CHECK(size == (MPI_Aint)(count_of(q, n) * sizeof(int)) && unit == (int)sizeof(int),
              "shared_query(%d): size %ld unit %d", q, (long)size, unit);
        if (size == 0) {
            CHECK(parts[q] == NULL, "shared_query(%d): no memory but base %p", q, (void *)parts[q]);
            continue;
        }
        CHECK(next == NULL || (char *)parts[q] == next, "part %d not contiguous with the one before", q);
        next = (char *)parts[q] + size;
    }
    CHECK(parts[r] == mine || count_of(r, n) == 0, "own part %p, baseptr %p", (void *)parts[r], (void *)mine);
    MPI_Aint s0;
    int u0;
    int *p0;
    MPI_CHECK(MPI_Win_shared_query(w, MPI_PROC_NULL, &s0, &u0, &p0));
    CHECK(p0 == parts[0] && s0 == 4 * (MPI_Aint)sizeof(int), "shared_query(MPI_PROC_NULL)");

    MPI_CHECK(MPI_Win_lock_all(0, w));
    for (int i = 0; i < count_of(r, n); i++) mine[i] = -1;
    MPI_CHECK(MPI_Win_sync(w));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Win_sync(w));
    int right = (r + 1) % n;
    for (int i = 0; i < count_of(right, n); i++) parts[right][i] = 100 * r + i;
    MPI_CHECK(MPI_Win_sync(w));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Win_sync(w));
    int left = (r - 1 + n) % n;
    for (int i = 0; i < count_of(r, n); i++)
        CHECK(mine[i] == 100 * left + i, "[%d] = %d, stored by %d as %d", i, mine[i], left, 100 * left + i);
    /* RMA on the same memory: everyone adds 1 to rank 0's first int (once all have
     * checked their part). */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    int one = 1, old;
    MPI_CHECK(MPI_Fetch_and_op(&one, &old, MPI_INT, 0, 0, MPI_SUM, w));
    MPI_CHECK(MPI_Win_flush(0, w));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Win_sync(w));
    CHECK(parts[0][0] == 100 * (n - 1) + n, "after fetch_and_op: %d", parts[0][0]);
    MPI_CHECK(MPI_Win_unlock_all(w));
    free(parts);
    MPI_CHECK(MPI_Win_free(&w));
    t_finish("rma_shared");
    return 0;
}
