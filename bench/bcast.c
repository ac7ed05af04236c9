/* MPI_Bcast latency from rank 0 of n bytes (see coll_bench.h). */
#include "coll_bench.h"

static void run(char *buf, char *out, long n, MPI_Comm comm)
{
    (void)out;
    if (rank == 0) memset(buf, 7, n);
    MPI_Bcast(buf, (int)n, MPI_BYTE, 0, comm);
}

static int check(const char *buf, const char *out, long n)
{
    (void)out;
    return n > 0 && (buf[0] != 7 || buf[n - 1] != 7);
}

int main(int argc, char **argv) { return bench_main(argc, argv, "bcast", MAXB); }
