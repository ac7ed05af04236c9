/* MPI_Allreduce latency: MPI_SUM on n/8 doubles per rank (see coll_bench.h). */
#include "coll_bench.h"

static void run(char *buf, char *out, long n, MPI_Comm comm)
{
    double *b = (double *)buf;
    for (long i = 0; i < n / 8; i++) b[i] = rank + i;
    MPI_Allreduce(buf, out, (int)(n / 8), MPI_DOUBLE, MPI_SUM, comm);
}

static int check(const char *buf, const char *out, long n)
{
    (void)buf;
    const double *o = (const double *)out;
    for (long i = 0; i < n / 8; i++)
        if (o[i] != (double)size * (size - 1) / 2 + (double)size * i) return 1;
    return 0;
}

int main(int argc, char **argv) { return bench_main(argc, argv, "allreduce", MAXB); }
