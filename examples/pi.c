/* Computes pi as the integral of 4 / (1 + x^2) over [0, 1] with the midpoint rule, the
 * intervals split into one contiguous block per rank. The partial sums are combined on
 * rank 0 with point-to-point messages only. Works with any number of ranks.
 *
 *   mpicc -O2 -o pi examples/pi.c && mpirun -n 4 ./pi [intervals]
 *
 * Exits non-zero if the result is more than 1e-9 away from pi. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define PI25DT 3.141592653589793238462643

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long n = argc > 1 ? atol(argv[1]) : 10000000L;
    double h = 1.0 / (double)n;
    /* Rank r takes intervals [n*r/size, n*(r+1)/size). */
    long lo = n * rank / size, hi = n * (rank + 1) / size;
    double sum = 0.0;
    for (long i = lo; i < hi; i++) {
        double x = h * ((double)i + 0.5);
        sum += 4.0 / (1.0 + x * x);
    }
    double part = h * sum;
    int rc = 0;
    if (rank == 0) {
        double pi = part;
        for (int src = 1; src < size; src++) {
            double p;
            MPI_Recv(&p, 1, MPI_DOUBLE, src, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            pi += p;
        }
        double err = fabs(pi - PI25DT);
        printf("pi is approximately %.16f, error is %.16f (%ld intervals, %d ranks)\n", pi, err,
               n, size);
        if (err > 1e-9) {
            fprintf(stderr, "pi: error %g is above 1e-9\n", err);
            rc = 1;
        }
    } else {
        MPI_Send(&part, 1, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return rc;
}
