/* Streaming bandwidth from rank 0 to rank 1: per iteration a window of 64 Isend (rank 0)
 * and 64 Irecv (rank 1), Waitall, then a 4-byte ack back. Sizes 1 B .. 4 MiB, a warm-up,
 * iterations scaled with size; prints `size MB/s` (10^6 bytes per second) on rank 0.
 * `bw SIZE [ITERS]` measures that one size only (for short alternating runs). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX (4 << 20)
#define WINDOW 64

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0) fprintf(stderr, "bw needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* One buffer per window slot would need 256 MiB at 4 MiB; the receiver reuses one
     * buffer (as the usual bandwidth benchmarks do), the sender sends from one. */
    char *buf = malloc(MAX);
    memset(buf, 1, MAX);
    MPI_Request rq[WINDOW];
    int ack = 0;
    if (rank == 0) printf("# bw: streaming bandwidth, window %d\n# size MB/s\n", WINDOW);
    long first = 1, last = MAX;
    if (argc > 1) first = last = atol(argv[1]);
    if (first < 1 || first > MAX) {
        if (rank == 0) fprintf(stderr, "bw: size must be in 1..%d\n", MAX);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (long n = first; n <= last; n *= 2) {
        long target = 256L << 20; /* bytes per size */
        int iters = (int)(target / (n * WINDOW));
        if (iters > 1000) iters = 1000;
        if (iters < 10) iters = 10;
        if (argc > 2) iters = atoi(argv[2]) > 0 ? atoi(argv[2]) : iters;
        int warm = iters / 10 < 2 ? 2 : iters / 10;
        double t0 = 0;
        if (rank < 2) {
            for (int it = -warm; it < iters; it++) {
                if (it == 0) t0 = MPI_Wtime();
                if (rank == 0) {
                    for (int w = 0; w < WINDOW; w++)
                        MPI_Isend(buf, (int)n, MPI_BYTE, 1, w, MPI_COMM_WORLD, &rq[w]);
                    MPI_Waitall(WINDOW, rq, MPI_STATUSES_IGNORE);
                    MPI_Recv(&ack, 1, MPI_INT, 1, 999, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    for (int w = 0; w < WINDOW; w++)
                        MPI_Irecv(buf, (int)n, MPI_BYTE, 0, w, MPI_COMM_WORLD, &rq[w]);
                    MPI_Waitall(WINDOW, rq, MPI_STATUSES_IGNORE);
                    MPI_Send(&ack, 1, MPI_INT, 0, 999, MPI_COMM_WORLD);
                }
            }
            double t = MPI_Wtime() - t0;
            if (buf[0] != 1 || buf[n - 1] != 1) {
                fprintf(stderr, "bw: rank %d: wrong data at size %ld\n", rank, n);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            if (rank == 0) printf("%ld %.2f\n", n, (double)n * WINDOW * iters / t / 1e6);
            fflush(stdout);
        }
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
