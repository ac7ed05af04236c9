/* MPI_Alltoall latency, n bytes to every rank (see coll_bench.h). */
#include "coll_bench.h"

static void run(char *buf, char *out, long n, MPI_Comm comm)
{
    for (int k = 0; k < size; k++) buf[k * n] = (char)(rank * 16 + k);
    MPI_Alltoall(buf, (int)n, MPI_BYTE, out, (int)n, MPI_BYTE, comm);
}

static int check(const char *buf, const char *out, long n)
{
    (void)buf;
    for (int k = 0; k < size && n > 0; k++)
        if (out[k * n] != (char)(k * 16 + rank)) return 1;
    return 0;
}

int main(int argc, char **argv) { return bench_main(argc, argv, "alltoall", MAXB / 4); }
