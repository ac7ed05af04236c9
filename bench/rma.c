/* One-sided (RMA) benchmarks in the style of the OSU micro-benchmarks, rank 0 origin,
 * rank 1 target (other ranks idle), window from MPI_Win_allocate (OSU's default),
 * passive target: the origin holds MPI_Win_lock(MPI_LOCK_SHARED, 1) for the whole timed
 * loop of a size, as osu_*_latency / osu_put_bw do with their default flush mode.
 *
 *   rma put_lat   MPI_Put + MPI_Win_flush per iteration, usec per operation
 *   rma get_lat   MPI_Get + MPI_Win_flush per iteration, usec per operation
 *   rma acc_lat   MPI_Accumulate (MPI_SUM, MPI_DOUBLE) + MPI_Win_flush, usec per operation
 *   rma put_bw    64 MPI_Put to consecutive target slots, then one flush, MB/s (10^6 B/s)
 *   rma get_bw    64 MPI_Get from consecutive target slots, then one flush, MB/s
 *   rma lock_put_lat, lock_get_lat, lock_acc_lat   as put/get/acc_lat, but each operation in
 *                 its own epoch: MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1), the operation,
 *                 MPI_Win_unlock (what Fortran coarray runtimes do per remote access)
 *
 * Sizes 8 B .. 1 MiB; `rma MODE SIZE [ITERS]` measures one size. Prints `size value` on
 * rank 0. After each size's timed loop the data are checked once (the target checks what
 * was put or accumulated into its window, the origin what it got), so a broken RMA cannot
 * report a number: a mismatch aborts. Every size uses a different byte pattern. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN 8
#define MAX (1 << 20)
#define WINDOW 64

static unsigned char pattern(long i, long n) { return (unsigned char)(i * 31 + n / 8 + 7); }

static void fail(const char *mode, int rank, long n, long at)
{
    fprintf(stderr, "rma %s: rank %d: wrong data at size %ld, byte %ld\n", mode, rank, n, at);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "";
    int epoch = !strncmp(mode, "lock_", 5);
    const char *op = epoch ? mode + 5 : mode;
    int put = !strncmp(op, "put", 3), get = !strncmp(op, "get", 3),
        acc = !strcmp(op, "acc_lat");
    int bw = !epoch && (!strcmp(op, "put_bw") || !strcmp(op, "get_bw"));
    if (!(strcmp(op, "put_lat") == 0 || strcmp(op, "get_lat") == 0 || acc || bw)) {
        if (rank == 0)
            fprintf(stderr, "usage: rma [lock_]put_lat|[lock_]get_lat|[lock_]acc_lat|put_bw|get_bw [SIZE [ITERS]]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (size < 2) {
        if (rank == 0) fprintf(stderr, "rma needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long first = MIN, last = MAX;
    if (argc > 2) first = last = atol(argv[2]);
    if (first < MIN || first > MAX || (acc && first % 8)) {
        if (rank == 0) fprintf(stderr, "rma: size must be in %d..%d (a multiple of 8 for acc_lat)\n", MIN, MAX);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int slots = bw ? WINDOW : 1;
    MPI_Aint winsize = (MPI_Aint)slots * MAX;
    unsigned char *base;
    MPI_Win win;
    MPI_Win_allocate(winsize, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    unsigned char *buf = malloc((size_t)slots * MAX);
    memset(base, 0, (size_t)winsize);
    if (rank == 0) {
        const char *what = bw ? "MB/s" : "usec";
        if (epoch)
            printf("# rma %s: passive target (lock exclusive, op, unlock per operation), MPI_Win_allocate\n# size %s\n",
                   mode, what);
        else
            printf("# rma %s: passive target (lock shared, flush per %s), MPI_Win_allocate\n# size %s\n",
                   mode, bw ? "64 operations" : "operation", what);
    }
    for (long n = first; n <= last; n *= 2) {
        long total = n * slots;
        int reps;
        if (bw) {
            reps = (int)((128L << 20) / total);
            if (reps > 200) reps = 200;
            if (reps < 5) reps = 5;
        } else {
            reps = (int)((64L << 20) / n);
            if (reps > 3000) reps = 3000;
            if (reps < 50) reps = 50;
        }
        if (argc > 3 && atoi(argv[3]) > 0) reps = atoi(argv[3]);
        int warm = reps / 10 < 2 ? 2 : reps / 10;
        long ndbl = n / 8;
        /* Set up: the target fills its window (pattern for get, zero otherwise), the
         * origin its buffer (pattern for put, small integers for acc, zero for get). */
        if (rank == 1) {
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
            if (get) for (long i = 0; i < total; i++) base[i] = pattern(i, n);
            else memset(base, 0, (size_t)total);
            MPI_Win_unlock(1, win);
        } else if (rank == 0) {
            if (put) for (long i = 0; i < total; i++) buf[i] = pattern(i, n);
            else if (acc) for (long i = 0; i < ndbl; i++) ((double *)buf)[i] = (double)(i % 7 + 1);
            else memset(buf, 0, (size_t)total);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t = 0;
        if (rank == 0) {
            if (!epoch) MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            double t0 = 0;
            for (int it = -warm; it < reps; it++) {
                if (it == 0) t0 = MPI_Wtime();
                if (epoch) MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
                for (int w = 0; w < slots; w++) {
                    long off = (long)w * n;
                    if (acc)
                        MPI_Accumulate(buf, (int)ndbl, MPI_DOUBLE, 1, 0, (int)ndbl, MPI_DOUBLE, MPI_SUM, win);
                    else if (put)
                        MPI_Put(buf + off, (int)n, MPI_BYTE, 1, off, (int)n, MPI_BYTE, win);
                    else
                        MPI_Get(buf + off, (int)n, MPI_BYTE, 1, off, (int)n, MPI_BYTE, win);
                }
                if (epoch) MPI_Win_unlock(1, win);
                else MPI_Win_flush(1, win);
            }
            t = MPI_Wtime() - t0;
            if (!epoch) MPI_Win_unlock(1, win);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        /* Check once: the target its window after put/acc, the origin its buffer after get. */
        if (rank == 1 && !get) {
            MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
            if (acc) {
                double times = (double)(warm + reps);
                for (long i = 0; i < ndbl; i++)
                    if (((double *)base)[i] != times * (double)(i % 7 + 1)) fail(mode, rank, n, i * 8);
            } else {
                for (long i = 0; i < total; i++)
                    if (base[i] != pattern(i, n)) fail(mode, rank, n, i);
            }
            MPI_Win_unlock(1, win);
        } else if (rank == 0 && get) {
            for (long i = 0; i < total; i++)
                if (buf[i] != pattern(i, n)) fail(mode, rank, n, i);
        }
        if (rank == 0) {
            if (bw) printf("%ld %.2f\n", n, (double)total * reps / t / 1e6);
            else printf("%ld %.3f\n", n, t * 1e6 / reps); /* ns resolution: small ops take 20-70 ns */
            fflush(stdout);
        }
    }
    free(buf);
    MPI_Win_free(&win);
    MPI_Finalize();
    return 0;
}
