/* np: 2 4 */
/* Passive-target progress. Ferrite has no progress thread: a target serves RMA requests
 * whenever its progress engine runs, i.e. inside any MPI call that waits (here MPI_Barrier
 * and MPI_Recv), never needing a matching call. This checks that
 *  1. while every other rank sits in MPI_Barrier, rank 0 locks each of them many times
 *     (exclusive and shared), puts, gets, accumulates and unlocks, and the barrier only
 *     completes after rank 0 joins it: nothing here relies on a latency bound;
 *  2. a target that sleeps outside MPI (usleep 200 ms) while an origin locks it and gets
 *     from it: the origin's lock and get complete once the target re-enters MPI (in
 *     MPI_Recv for a message the origin sends after its unlock), with the right data;
 *  3. lock contention: every rank increments a counter at rank 0 under an exclusive lock
 *     with get + put (a non-atomic read-modify-write that only the lock makes correct);
 *  4. locks that may be taken lazily (by messages, Ferrite sends the Lock with the first
 *     operation and the Unlock with the last): epochs with no operation (lock/unlock,
 *     lock_all/flush_all/unlock_all) end without hanging; at -n 4, rank 1 holds an
 *     exclusive lock on rank 0 and sleeps outside MPI while rank 2 locks rank 0 too and
 *     puts a word and a 96 KiB block (streamed over tcp): none of it may land before
 *     rank 1 unlocks, and rank 2's unlock returns with all of it in place. */
#include "common.h"

#define ROUNDS 50

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int n = t_size, r = t_rank;
    long *mem;
    MPI_Win w;
    MPI_CHECK(MPI_Win_allocate(4 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &w));
    for (int i = 0; i < 4; i++) mem[i] = 0;
    if (r == 1) mem[2] = 4242; /* what rank 0 gets in part 2 */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    /* 1. */
    if (r == 0) {
        for (int t = 1; t < n; t++) {
            for (int k = 0; k < ROUNDS; k++) {
                long v = 100 * t + k, got = -1, one = 1;
                MPI_CHECK(MPI_Win_lock(k % 2 ? MPI_LOCK_SHARED : MPI_LOCK_EXCLUSIVE, t, 0, w));
                MPI_CHECK(MPI_Put(&v, 1, MPI_LONG, t, 0, 1, MPI_LONG, w));
                MPI_CHECK(MPI_Win_flush(t, w));
                MPI_CHECK(MPI_Get(&got, 1, MPI_LONG, t, 0, 1, MPI_LONG, w));
                MPI_CHECK(MPI_Accumulate(&one, 1, MPI_LONG, t, 1, 1, MPI_LONG, MPI_SUM, w));
                MPI_CHECK(MPI_Win_unlock(t, w));
                CHECK(got == v, "round %d: got %ld from %d, expected %ld", k, got, t, v);
            }
        }
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (r > 0) CHECK(mem[0] == 100 * r + ROUNDS - 1 && mem[1] == ROUNDS, "served: %ld %ld", mem[0], mem[1]);

    /* 2. */
    if (r == 1) {
        usleep(200 * 1000); /* outside MPI: nothing serves rank 0 meanwhile */
        int token;
        MPI_CHECK(MPI_Recv(&token, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(token == 4242, "token %d", token);
    } else if (r == 0) {
        long got = -1;
        MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, w));
        MPI_CHECK(MPI_Get(&got, 1, MPI_LONG, 1, 2, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Win_unlock(1, w));
        /* rank 1 stored 4242 before part 1; the get completes only once it is back in MPI. */
        CHECK(got == 4242, "get from a sleeping target: %ld", got);
        int token = (int)got;
        MPI_CHECK(MPI_Send(&token, 1, MPI_INT, 1, 7, MPI_COMM_WORLD));
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    /* 3. */
    for (int k = 0; k < 10; k++) {
        long v = 0;
        MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w));
        MPI_CHECK(MPI_Get(&v, 1, MPI_LONG, 0, 3, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Win_flush(0, w));
        v++;
        MPI_CHECK(MPI_Put(&v, 1, MPI_LONG, 0, 3, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Win_unlock(0, w));
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (r == 0) CHECK(mem[3] == 10L * n, "locked counter %ld, expected %d", mem[3], 10 * n);
    MPI_CHECK(MPI_Win_free(&w));

    /* 4. */
    enum { BIG = 96 * 1024 / sizeof(long) };
    long *big;
    MPI_CHECK(MPI_Win_allocate((BIG + 8) * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &big, &w));
    for (long i = 0; i < BIG + 8; i++) big[i] = 0;
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    for (int t = 0; t < n; t++) {
        MPI_CHECK(MPI_Win_lock(t % 2 ? MPI_LOCK_SHARED : MPI_LOCK_EXCLUSIVE, t, 0, w));
        MPI_CHECK(MPI_Win_unlock(t, w));
    }
    MPI_CHECK(MPI_Win_lock_all(0, w));
    MPI_CHECK(MPI_Win_flush_all(w));
    MPI_CHECK(MPI_Win_unlock_all(w));
    MPI_CHECK(MPI_Win_lock_all(0, w));
    long one = 1;
    MPI_CHECK(MPI_Accumulate(&one, 1, MPI_LONG, 0, BIG + 1, 1, MPI_LONG, MPI_SUM, w));
    MPI_CHECK(MPI_Win_unlock_all(w));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (r == 0) CHECK(big[BIG + 1] == n, "accumulates under lock_all: %ld of %d", big[BIG + 1], n);
    long *blk = malloc(BIG * sizeof(long));
    if (n >= 3 && r == 1) {
        long mark = 1, seen[3] = {-1, -1, -1};
        MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w));
        MPI_CHECK(MPI_Put(&mark, 1, MPI_LONG, 0, BIG, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Win_flush(0, w)); /* the lock is ours now */
        int go = 1;
        MPI_CHECK(MPI_Send(&go, 1, MPI_INT, 2, 8, MPI_COMM_WORLD));
        usleep(300 * 1000); /* rank 2 locks and puts meanwhile; rank 0 serves in MPI_Barrier */
        MPI_CHECK(MPI_Get(&seen[0], 1, MPI_LONG, 0, BIG, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Get(&seen[1], 1, MPI_LONG, 0, 0, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Get(&seen[2], 1, MPI_LONG, 0, BIG - 1, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Win_unlock(0, w));
        CHECK(seen[0] == 1 && seen[1] == 0 && seen[2] == 0,
              "another exclusive epoch's puts landed inside ours: %ld %ld %ld", seen[0], seen[1], seen[2]);
    } else if (n >= 3 && r == 2) {
        int go;
        MPI_CHECK(MPI_Recv(&go, 1, MPI_INT, 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        long mark = 2;
        for (long i = 0; i < BIG; i++) blk[i] = 7 * i + 3;
        MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w));
        MPI_CHECK(MPI_Put(&mark, 1, MPI_LONG, 0, BIG, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Put(blk, BIG, MPI_LONG, 0, 0, BIG, MPI_LONG, w));
        MPI_CHECK(MPI_Win_unlock(0, w));
        for (long i = 0; i < BIG; i++) blk[i] = -1;
        long m = -1;
        MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, w));
        MPI_CHECK(MPI_Get(blk, BIG, MPI_LONG, 0, 0, BIG, MPI_LONG, w));
        MPI_CHECK(MPI_Get(&m, 1, MPI_LONG, 0, BIG, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Win_unlock(0, w));
        CHECK(m == 2, "word put under an exclusive lock: %ld", m);
        for (long i = 0; i < BIG; i++) CHECK(blk[i] == 7 * i + 3, "block put under an exclusive lock: [%ld] = %ld", i, blk[i]);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    free(blk);
    MPI_CHECK(MPI_Win_free(&w));
    t_finish("rma_passive");
    return 0;
}
