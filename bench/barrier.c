/* MPI_Barrier latency (see coll_bench.h; size column 0). */
#include "coll_bench.h"

static void run(char *buf, char *out, long n, MPI_Comm comm)
{
    (void)buf, (void)out, (void)n;
    MPI_Barrier(comm);
}

static int check(const char *buf, const char *out, long n)
{
    (void)buf, (void)out, (void)n;
    return 0;
}

int main(int argc, char **argv) { return bench_main(argc, argv, "barrier", 0); }
