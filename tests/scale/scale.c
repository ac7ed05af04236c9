/* Scale checks and MPI_Init timing, chosen by argv[1]:
 *   hello: every rank reports in (rank 0 checks the sum of ranks and the sizes);
 *   ring:  a token goes once around the whole ring (each rank adds its rank), then every rank
 *          exchanges with both neighbours (MPI_Sendrecv) and checks what it got;
 *   init:  nothing but the timing.
 * Rank 0 prints "init max <seconds>": the longest time any rank spent in MPI_Init
 * (CLOCK_MONOTONIC around the call, reduced with MPI_MAX), then "done: <mode> <N>". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rank = -1, size = -1;

static void fail(const char *what, long got, long want)
{
    fprintf(stderr, "FAILED: rank %d: %s: got %ld, expected %ld\n", rank, what, got, want);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static void check(int rc, const char *what)
{
    if (rc != MPI_SUCCESS) fail(what, rc, MPI_SUCCESS);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void hello(void)
{
    long mine[2] = {rank, size}, sum[2] = {0, 0};
    check(MPI_Reduce(mine, sum, 2, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD), "MPI_Reduce");
    if (rank == 0) {
        if (sum[0] != (long)size * (size - 1) / 2) fail("sum of ranks", sum[0], (long)size * (size - 1) / 2);
        if (sum[1] != (long)size * size) fail("sum of sizes", sum[1], (long)size * size);
        printf("hello from %d ranks\n", size);
    }
}

/* The token also carries the maximum MPI_Init time, so the ring talks to its two
 * neighbours only (the connection counts in the report stay those of a ring). */
static double ring(double init)
{
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    struct { long sum; double init; } token = {0, init};
    if (rank == 0) {
        check(MPI_Send(&token, sizeof token, MPI_BYTE, next, 1, MPI_COMM_WORLD), "MPI_Send");
        check(MPI_Recv(&token, sizeof token, MPI_BYTE, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
        if (token.sum != (long)size * (size - 1) / 2) fail("token after a lap", token.sum, (long)size * (size - 1) / 2);
    } else {
        check(MPI_Recv(&token, sizeof token, MPI_BYTE, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
        if (token.sum != (long)(rank - 1) * rank / 2) fail("token", token.sum, (long)(rank - 1) * rank / 2);
        token.sum += rank;
        if (init > token.init) token.init = init;
        check(MPI_Send(&token, sizeof token, MPI_BYTE, next, 1, MPI_COMM_WORLD), "MPI_Send");
    }
    long out[2] = {rank * 10L + 1, rank * 10L + 2}, from_prev = -1, from_next = -1;
    check(MPI_Sendrecv(&out[0], 1, MPI_LONG, next, 2, &from_prev, 1, MPI_LONG, prev, 2,
                       MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Sendrecv");
    check(MPI_Sendrecv(&out[1], 1, MPI_LONG, prev, 3, &from_next, 1, MPI_LONG, next, 3,
                       MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Sendrecv");
    if (from_prev != prev * 10L + 1) fail("from previous rank", from_prev, prev * 10L + 1);
    if (from_next != next * 10L + 2) fail("from next rank", from_next, next * 10L + 2);
    return token.init;
}

int main(int argc, char **argv)
{
    double t0 = now();
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS) return 1;
    double init = now() - t0, init_max = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "hello";
    if (!strcmp(mode, "ring")) {
        init_max = ring(init);
    } else {
        if (!strcmp(mode, "hello")) hello();
        else if (strcmp(mode, "init")) fail("unknown mode", 0, 0);
        check(MPI_Reduce(&init, &init_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD), "MPI_Reduce");
    }
    if (rank == 0) printf("init max %.6f\ndone: %s %d\n", init_max, mode, size);
    MPI_Finalize();
    return 0;
}
