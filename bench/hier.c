#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* Collectives across hosts (bench/hier.sh): us per call of Barrier, and Bcast, Allreduce,
 * Allgather at 8 B, 1 KiB, 16 KiB (per rank for Allgather) on MPI_COMM_WORLD, the median
 * of 5 batches of N calls (argument 1, default 200); rank 0's time. */
static double t_batch(int which, int n, char *a, char *b, int bytes)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int i = 0; i < n; i++) {
        switch (which) {
        case 0: MPI_Barrier(MPI_COMM_WORLD); break;
        case 1: MPI_Bcast(a, bytes, MPI_CHAR, 0, MPI_COMM_WORLD); break;
        case 2: MPI_Allreduce(a, b, bytes / 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD); break;
        case 3: MPI_Allgather(a, bytes, MPI_CHAR, b, bytes, MPI_CHAR, MPI_COMM_WORLD); break;
        }
    }
    t = (MPI_Wtime() - t) / n * 1e6;
    MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return t;
}
static int cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int iters = argc > 1 ? atoi(argv[1]) : 200;
    char *a = calloc(1, 1 << 20), *b = calloc(n, 1 << 16);
    const char *names[] = {"barrier", "bcast", "allreduce", "allgather"};
    int sizes[] = {8, 1024, 16384};
    for (int w = 0; w < 4; w++)
        for (int s = 0; s < 3; s++) {
            if (w == 0 && s > 0) break;
            double m[5];
            t_batch(w, iters / 10 + 1, a, b, sizes[s]);
            for (int k = 0; k < 5; k++) m[k] = t_batch(w, iters, a, b, sizes[s]);
            qsort(m, 5, sizeof *m, cmp);
            if (r == 0) printf("%s %d %.2f\n", names[w], w ? sizes[s] : 0, m[2]);
        }
    MPI_Finalize();
    return 0;
}
