/* Shared driver of the collective latency benchmarks (allreduce.c, bcast.c, alltoall.c,
 * barrier.c): for each size (bytes per rank, 8 B .. 1 MiB by 4x; barrier: 0 only) a
 * warm-up, then timed repetitions scaled down with size (and capped to about 0.3 s per
 * size); prints `size usec` on rank 0, the
 * mean time per operation of the slowest rank. The including file defines
 * `run(buf, out, n, comm)` (one operation on n bytes) and `check(buf, out, n)` (0 when the
 * data of the last operation is right, so a broken collective cannot report a good time). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXB (1 << 20)

static int rank, size;
static void run(char *buf, char *out, long n, MPI_Comm comm);
static int check(const char *buf, const char *out, long n);

static int bench_main(int argc, char **argv, const char *name, long maxb)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *buf = malloc((size_t)MAXB * size + 64), *out = malloc((size_t)MAXB * size + 64);
    if (rank == 0) printf("# %s: latency per operation, %d ranks\n# size usec\n", name, size);
    for (long n = maxb ? 8 : 0; n <= maxb; n = n ? n * 4 : 1) {
        int reps = n <= 1024 ? 2000 : (int)(2000L * 1024 / n);
        if (reps < 20) reps = 20;
        /* Warm-up, which also calibrates: at most ~0.3 s per size (oversubscribed runs are
         * slow), the same count on every rank (the slowest rank's estimate). */
        double w0 = MPI_Wtime(), wt, wmax;
        for (int i = 0; i < 10; i++) run(buf, out, n, MPI_COMM_WORLD);
        wt = (MPI_Wtime() - w0) / 10;
        MPI_Allreduce(&wt, &wmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (wmax * reps > 0.3) reps = (int)(0.3 / wmax) < 10 ? 10 : (int)(0.3 / wmax);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < reps; i++) run(buf, out, n, MPI_COMM_WORLD);
        double t = (MPI_Wtime() - t0) / reps, tmax = 0;
        if (check(buf, out, n)) {
            fprintf(stderr, "%s: rank %d: wrong data at size %ld\n", name, rank, n);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("%ld %.2f\n", n, tmax * 1e6);
        fflush(stdout);
        if (!maxb) break;
    }
    free(buf);
    free(out);
    MPI_Finalize();
    return 0;
}
