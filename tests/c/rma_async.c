/* np: 2 4 */
/* Passive-target progress with FERRITE_ASYNC_PROGRESS. Ranks with an odd PMI_RANK set
 * FERRITE_ASYNC_PROGRESS=1 before MPI_Init (unless the environment already sets it), the
 * others run without it; every rank but 0 is a target that sleeps outside MPI (nanosleep in
 * 5 ms slices, looking only at its own window memory) while rank 0 runs, on each target in
 * turn, an exclusive epoch: lock, put, get, accumulate, fetch-and-op, unlock; then a second
 * epoch that puts a flag word.
 *  - A target with the progress thread must see the flag while still asleep (a generous
 *    bound: 60 s), i.e. rank 0's first epoch and the flag's lock and put completed while
 *    the target never called MPI (Ferrite only; another MPI is not held to it).
 *  - A target without it stops sleeping after 300 ms and enters MPI: the epochs complete
 *    then (or earlier, where the library needs no target progress).
 * Either way the data must be right at both ends, MPI_Query_thread must report the level
 * asked for (MPI_Init: MPI_THREAD_SINGLE) even with the thread running, and after
 * MPI_Finalize no more threads may be left than before MPI_Init (the progress thread stopped). */
#define _GNU_SOURCE
#include "common.h"
#include <dirent.h>
#include <time.h>

enum { NPUT = 3, GET0 = 3, ACC = 6, FAO = 7, FLAG = 8, WORDS = 9 };

static long init_word(int rank, int i) { return 1000L * rank + i; }

static int threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

int main(int argc, char **argv)
{
    const char *pr = getenv("PMI_RANK");
    if (pr && atoi(pr) % 2 == 1) setenv("FERRITE_ASYNC_PROGRESS", "1", 0);
    const char *ap = getenv("FERRITE_ASYNC_PROGRESS");
    int async = ap && strcmp(ap, "1") == 0;
    int before = threads_now();

    t_init(&argc, &argv);
    int n = t_size, r = t_rank;
    int ferrite = t_expect_ferrite();
    /* Our mpirun (and Hydra) give every rank PMI_RANK: without it no rank would run the thread. */
    CHECK(!ferrite || pr, "PMI_RANK is not set: cannot choose the ranks that run the progress thread");
    int level = -1;
    MPI_CHECK(MPI_Query_thread(&level));
    CHECK(level == MPI_THREAD_SINGLE, "MPI_Query_thread says %d after MPI_Init, not MPI_THREAD_SINGLE", level);

    long *mem;
    MPI_Win w;
    MPI_CHECK(MPI_Win_allocate(WORDS * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &w));
    MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, r, 0, w));
    for (int i = 0; i < WORDS; i++) mem[i] = i == FLAG ? 0 : init_word(r, i);
    MPI_CHECK(MPI_Win_unlock(r, w));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    int saw_flag = 0;
    if (r == 0) {
        for (int t = 1; t < n; t++) {
            long put[NPUT], got[NPUT], one = 5, old = -1, inc = 100, flag = 1;
            for (int i = 0; i < NPUT; i++) put[i] = 7L * t + i, got[i] = -1;
            MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, w));
            MPI_CHECK(MPI_Put(put, NPUT, MPI_LONG, t, 0, NPUT, MPI_LONG, w));
            MPI_CHECK(MPI_Get(got, NPUT, MPI_LONG, t, GET0, NPUT, MPI_LONG, w));
            MPI_CHECK(MPI_Accumulate(&one, 1, MPI_LONG, t, ACC, 1, MPI_LONG, MPI_SUM, w));
            MPI_CHECK(MPI_Fetch_and_op(&inc, &old, MPI_LONG, t, FAO, MPI_SUM, w));
            MPI_CHECK(MPI_Win_unlock(t, w));
            for (int i = 0; i < NPUT; i++)
                CHECK(got[i] == init_word(t, GET0 + i), "get from %d: word %d is %ld, expected %ld",
                      t, GET0 + i, got[i], init_word(t, GET0 + i));
            CHECK(old == init_word(t, FAO), "fetch-and-op at %d returned %ld, expected %ld", t,
                  old, init_word(t, FAO));
            MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, t, 0, w));
            MPI_CHECK(MPI_Put(&flag, 1, MPI_LONG, t, FLAG, 1, MPI_LONG, w));
            MPI_CHECK(MPI_Win_unlock(t, w));
        }
    } else {
        /* Outside MPI: only loads of our own window memory, written by whoever serves the
         * origin (the progress thread, or a same-host origin directly). */
        const struct timespec slice = {0, 5 * 1000 * 1000};
        int slices = async && ferrite ? 60 * 200 : 60;
        for (int i = 0; i < slices && !saw_flag; i++) {
            nanosleep(&slice, NULL);
            saw_flag = __atomic_load_n(&mem[FLAG], __ATOMIC_ACQUIRE) == 1;
        }
        if (async && ferrite)
            CHECK(saw_flag, "FERRITE_ASYNC_PROGRESS=1 but rank 0's epochs did not complete while "
                  "this target slept outside MPI (60 s)");
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    if (r != 0) {
        MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, r, 0, w));
        for (int i = 0; i < NPUT; i++)
            CHECK(mem[i] == 7L * r + i, "word %d is %ld after rank 0's put, expected %ld", i, mem[i], 7L * r + i);
        for (int i = GET0; i < GET0 + NPUT; i++)
            CHECK(mem[i] == init_word(r, i), "word %d changed to %ld (only read)", i, mem[i]);
        CHECK(mem[ACC] == init_word(r, ACC) + 5, "accumulated word is %ld, expected %ld", mem[ACC],
              init_word(r, ACC) + 5);
        CHECK(mem[FAO] == init_word(r, FAO) + 100, "fetch-and-op word is %ld, expected %ld",
              mem[FAO], init_word(r, FAO) + 100);
        CHECK(mem[FLAG] == 1, "flag word is %ld, expected 1", mem[FLAG]);
        MPI_CHECK(MPI_Win_unlock(r, w));
    }
    int mine[2] = {async, saw_flag}, all[2 * 64];
    if (n <= 64) {
        MPI_CHECK(MPI_Gather(mine, 2, MPI_INT, all, 2, MPI_INT, 0, MPI_COMM_WORLD));
        if (r == 0)
            for (int t = 1; t < n; t++)
                printf("target %d: async progress %s, epochs done while it slept: %s\n", t,
                       all[2 * t] ? "on" : "off", all[2 * t + 1] ? "yes" : "no");
    }
    MPI_CHECK(MPI_Win_free(&w));
    MPI_CHECK(MPI_Finalize());
    int left = threads_now();
    if (ferrite && left != before) {
        fprintf(stderr, "FAILED: rank %d: %d threads after MPI_Finalize, %d before MPI_Init (the "
                "progress thread must stop)\n", r, left, before);
        return 1;
    }
    if (r == 0) {
        printf("done: rma_async\n");
        fflush(stdout);
    }
    return 0;
}
