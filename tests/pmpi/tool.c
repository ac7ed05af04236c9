/* A profiling tool: intercepts MPI_Send to count calls and forwards to PMPI_Send;
 * intercepts MPI_Finalize to print the count (`pmpi-tool: rank R MPI_Send calls N`). */
#include <mpi.h>
#include <stdio.h>

static long send_calls;

int MPI_Send(const void *buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm)
{
    send_calls++;
    return PMPI_Send(buf, count, type, dest, tag, comm);
}

int MPI_Finalize(void)
{
    int rank = -1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("pmpi-tool: rank %d MPI_Send calls %ld\n", rank, send_calls);
    fflush(stdout);
    return PMPI_Finalize();
}
