/* A job that keeps its shared-memory queues busy until it is killed (or for `argv[1]`
 * seconds): ring exchanges of checked data. Each rank prints "pid <rank> <pid>" once it has
 * exchanged data with both neighbours (so its segment exists and peers have mapped it).
 * `argv[1]` = "abort": rank 2 calls MPI_Abort(MPI_COMM_WORLD, 3) after about 2 s. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int abort_mode = argc > 1 && argv[1][0] == 'a';
    double secs = argc > 1 && !abort_mode ? atof(argv[1]) : 1e9;
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    double end = MPI_Wtime() + secs;
    for (long it = 0;; it++) {
        long out[64], in[64];
        for (int i = 0; i < 64; i++) out[i] = it * 1000 + rank * 64 + i;
        MPI_Sendrecv(out, 64, MPI_LONG, next, 0, in, 64, MPI_LONG, prev, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        for (int i = 0; i < 64; i++)
            if (in[i] != it * 1000 + prev * 64 + i) {
                fprintf(stderr, "rank %d: bad data at iteration %ld\n", rank, it);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        if (it == 10) {
            printf("pid %d %d\n", rank, (int)getpid());
            fflush(stdout);
        }
        if (abort_mode && rank == 2 && it == 2000) MPI_Abort(MPI_COMM_WORLD, 3);
        /* Every rank must leave the ring at the same iteration, or one still in
         * MPI_Sendrecv waits forever for a neighbour already in MPI_Finalize: the
         * clocks' verdict is agreed on, never taken alone. */
        if (it % 100 == 0) {
            int stop = MPI_Wtime() > end;
            MPI_Allreduce(MPI_IN_PLACE, &stop, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
            if (stop) break;
        }
        if (it > 10) usleep(1000);
    }
    MPI_Finalize();
    if (rank == 0) printf("done: spin\n");
    return 0;
}
