/* Ping-pong latency between ranks 0 and 1: for sizes 0 B .. 4 MiB (or `pingpong SIZE
 * [REPS]`: one size), a warm-up, then
 * repetitions scaled down with size; prints `size usec` (one-way time, half a round trip)
 * on rank 0. Other ranks, if any, stay idle. Each message is checked at the end of a size
 * (first and last byte) so a broken transport cannot report a good time. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX (4 << 20)

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0) fprintf(stderr, "pingpong needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *buf = malloc(MAX);
    memset(buf, rank, MAX);
    if (rank == 0) printf("# pingpong: one-way latency\n# size usec\n");
    /* `pingpong SIZE [REPS]`: that one size only (bench/ofi.sh). */
    long first = 0, last = MAX;
    if (argc > 1) first = last = atol(argv[1]);
    if (first < 0 || first > MAX) {
        if (rank == 0) fprintf(stderr, "pingpong: size must be in 0..%d\n", MAX);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (long n = first; n <= last; n = n ? n * 2 : 1) {
        int reps = n <= 4096 ? 10000 : (int)(10000L * 4096 / n);
        if (reps < 20) reps = 20;
        if (argc > 2 && atoi(argv[2]) > 0) reps = atoi(argv[2]);
        int warm = reps / 10 < 10 ? 10 : reps / 10;
        double t0 = 0;
        if (rank < 2) {
            for (int i = -warm; i < reps; i++) {
                if (i == 0) t0 = MPI_Wtime();
                if (rank == 0) {
                    MPI_Send(buf, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                    MPI_Recv(buf, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(buf, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
                }
            }
            double t = MPI_Wtime() - t0;
            if (n > 0 && (buf[0] != 0 || buf[n - 1] != 0)) {
                fprintf(stderr, "pingpong: rank %d: wrong data at size %ld\n", rank, n);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            if (rank == 0) printf("%ld %.2f\n", n, t * 1e6 / (2.0 * reps));
            fflush(stdout);
        }
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
