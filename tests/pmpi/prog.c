/* Program for the profiling-interface test: each rank makes exactly NSEND calls to
 * MPI_Send to its partner, plus sends through PMPI_Send, MPI_Isend, MPI_Ssend and
 * MPI_Sendrecv, none of which may reach a tool's MPI_Send. Checks all received data and
 * prints `pmpi-prog: rank R made N MPI_Send calls`. Needs an even number of ranks. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define NSEND 100
#define NPMPI 7

static void fail(int rank, const char *what, int got, int want)
{
    fprintf(stderr, "FAILED: rank %d: %s: got %d, expected %d\n", rank, what, got, want);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size % 2) fail(rank, "number of ranks must be even", size, size + 1);
    int peer = rank ^ 1, v, x;
    /* Lower rank sends first. */
    for (int phase = 0; phase < 2; phase++) {
        if ((rank < peer) == (phase == 0)) {
            for (int i = 0; i < NSEND; i++) {
                v = rank * 1000 + i;
                MPI_Send(&v, 1, MPI_INT, peer, i, MPI_COMM_WORLD);
            }
            for (int i = 0; i < NPMPI; i++) {
                v = -(rank * 1000 + i);
                PMPI_Send(&v, 1, MPI_INT, peer, 500 + i, MPI_COMM_WORLD);
            }
        } else {
            for (int i = 0; i < NSEND; i++) {
                MPI_Recv(&x, 1, MPI_INT, peer, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (x != peer * 1000 + i) fail(rank, "MPI_Send data", x, peer * 1000 + i);
            }
            for (int i = 0; i < NPMPI; i++) {
                MPI_Recv(&x, 1, MPI_INT, peer, 500 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (x != -(peer * 1000 + i)) fail(rank, "PMPI_Send data", x, -(peer * 1000 + i));
            }
        }
    }
    /* Other send routines must not be counted as MPI_Send. */
    MPI_Request rq;
    v = rank;
    MPI_Isend(&v, 1, MPI_INT, peer, 900, MPI_COMM_WORLD, &rq);
    MPI_Recv(&x, 1, MPI_INT, peer, 900, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    if (x != peer) fail(rank, "MPI_Isend data", x, peer);
    MPI_Sendrecv(&v, 1, MPI_INT, peer, 901, &x, 1, MPI_INT, peer, 901, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    if (x != peer) fail(rank, "MPI_Sendrecv data", x, peer);
    if (rank < peer) {
        MPI_Ssend(&v, 1, MPI_INT, peer, 902, MPI_COMM_WORLD);
    } else {
        MPI_Recv(&x, 1, MPI_INT, peer, 902, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (x != peer) fail(rank, "MPI_Ssend data", x, peer);
    }
    printf("pmpi-prog: rank %d made %d MPI_Send calls\n", rank, NSEND);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
