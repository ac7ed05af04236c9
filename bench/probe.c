/* Transport probe for bench/run.sh: ranks 0 and 1 exchange 8-byte messages for argv[1]
 * round trips (default 1), checking every payload; rank 0 prints `probe ok <round trips>`.
 * Run at -n 2 to find out whether a configuration starts at all (Ferrite refuses a
 * transport or policy it does not have at MPI_Init), and under strace or FERRITE_REPORT to
 * see which path the messages took. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0) fprintf(stderr, "probe needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long reps = argc > 1 ? atol(argv[1]) : 1;
    long msg[1];
    for (long i = 0; i < reps && rank < 2; i++) {
        if (rank == 0) {
            msg[0] = i;
            MPI_Send(msg, 1, MPI_LONG, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(msg, 1, MPI_LONG, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (msg[0] != -i) {
                fprintf(stderr, "probe: round trip %ld came back as %ld\n", i, msg[0]);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        } else {
            MPI_Recv(msg, 1, MPI_LONG, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (msg[0] != i) {
                fprintf(stderr, "probe: message %ld arrived as %ld\n", i, msg[0]);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            msg[0] = -i;
            MPI_Send(msg, 1, MPI_LONG, 0, 0, MPI_COMM_WORLD);
        }
    }
    if (rank == 0) printf("probe ok %ld\n", reps);
    MPI_Finalize();
    return 0;
}
