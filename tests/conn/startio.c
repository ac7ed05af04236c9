/* Bytes each rank read(2) during MPI_Init (rchar of /proc/self/io), largest over the ranks:
 * tests/conn/run.sh checks over ofi that libfabric's start-up did not read /proc/kallsyms
 * (transport/ofi/ffi/kallsyms.rs). Prints "rchar: N" (or "rchar: unknown") and "done: startio". */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static long long rchar(void)
{
    FILE *f = fopen("/proc/self/io", "r");
    char line[128];
    long long v = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "rchar: %lld", &v) == 1)
            break;
    fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    int rank;
    long long mine, most, least;
    MPI_Init(&argc, &argv);
    mine = rchar();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Allreduce(&mine, &most, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &least, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) {
        if (least < 0)
            printf("rchar: unknown\n");
        else
            printf("rchar: %lld\n", most);
        printf("done: startio\n");
    }
    MPI_Finalize();
    return 0;
}
