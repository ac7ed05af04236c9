/* np: 2 4 */
/* Passive-target locks and accumulates as the same-host fast paths do them (MPI_Win_lock
 * granted through a lock word in the target's shared memory; native atomics on aligned
 * integer elements, the accumulate lock word for the rest), checked by data wherever they
 * run: over shm within a host, over tcp/udp (messages), across hosts (tests/hosts). For
 * MPI_Win_allocate and MPI_Win_allocate_shared windows:
 *  1. exclusive locks exclude: under MPI_LOCK_EXCLUSIVE on rank 0 each rank claims an
 *     owner slot that must be free, increments a counter by get, flush, put (not atomic:
 *     only the lock protects it), checks it still owns the slot, frees it;
 *  2. shared locks are held together: every rank takes MPI_LOCK_SHARED on rank 0, adds
 *     itself to an arrivals counter and waits (bounded) until it counts all ranks before it
 *     unlocks: so the first to see them all saw every rank inside at once;
 *  3. mixed accumulates: every rank adds to the same elements of the last rank with
 *     contiguous MPI_Accumulate (the fast path), MPI_Fetch_and_op, MPI_Raccumulate
 *     (request path) and a derived target type (general path), on longs (native atomics)
 *     and on long doubles (lock word), under lock_all, while the target itself adds too;
 *     the sums are exact;
 *  4. a target asleep outside MPI: rank 0 sleeps 0.5 s after a barrier; the others
 *     lock, get, put and unlock it 10 times each (exclusive). With shared memory windows
 *     of one host (Ferrite, MPI_Win_allocate_shared, FERRITE_RMA_DIRECT not 0) every epoch
 *     must end before the target wakes: its "awake" flag must still be 0. */
#include "common.h"
#include <stdlib.h>
#include <time.h>

#define LOCKS 30
#define ROUNDS 100
#define SLEEPY 10

enum { OWNER, COUNT, HOLDERS, PEAK, LSUM, LSUM2, VSUM, AWAKE = VSUM + 4, SEEN, LD = 16, SLOTS = 24 };

static void settle(MPI_Win w, int r)
{
    MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, r, 0, w));
    MPI_CHECK(MPI_Win_sync(w));
    MPI_CHECK(MPI_Win_unlock(r, w));
}

static void check(MPI_Comm comm, MPI_Win w, long *mem, int shared, const char *what)
{
    int n, r;
    MPI_CHECK(MPI_Comm_size(comm, &n));
    MPI_CHECK(MPI_Comm_rank(comm, &r));
    MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, r, 0, w));
    for (int i = 0; i < SLOTS; i++) mem[i] = 0;
    long double *ld = (long double *)(mem + LD);
    ld[0] = ld[1] = 0;
    MPI_CHECK(MPI_Win_unlock(r, w));
    MPI_CHECK(MPI_Barrier(comm));

    /* 1 */
    for (int k = 0; k < LOCKS; k++) {
        long me = r + 1, seen = -1, v = -1, zero = 0;
        MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w));
        MPI_CHECK(MPI_Get(&seen, 1, MPI_LONG, 0, OWNER, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Win_flush(0, w));
        CHECK(seen == 0, "%s: owner slot holds %ld while rank %d holds the exclusive lock", what,
              seen, r);
        MPI_CHECK(MPI_Put(&me, 1, MPI_LONG, 0, OWNER, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Get(&v, 1, MPI_LONG, 0, COUNT, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Win_flush(0, w));
        v++;
        MPI_CHECK(MPI_Put(&v, 1, MPI_LONG, 0, COUNT, 1, MPI_LONG, w));
        if (k % 3 == 0) usleep(100);
        MPI_CHECK(MPI_Get(&seen, 1, MPI_LONG, 0, OWNER, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Win_flush(0, w));
        CHECK(seen == me, "%s: owner slot changed to %ld under rank %d's exclusive lock", what,
              seen, r);
        MPI_CHECK(MPI_Put(&zero, 1, MPI_LONG, 0, OWNER, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Win_unlock(0, w));
    }
    MPI_CHECK(MPI_Barrier(comm));
    settle(w, r);
    if (r == 0)
        CHECK(mem[COUNT] == (long)n * LOCKS, "%s: counter %ld under exclusive locks, expected %ld",
              what, mem[COUNT], (long)n * LOCKS);

    /* 2 */
    long one = 1, got = 0;
    MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, w));
    MPI_CHECK(MPI_Accumulate(&one, 1, MPI_LONG, 0, HOLDERS, 1, MPI_LONG, MPI_SUM, w));
    MPI_CHECK(MPI_Win_flush(0, w));
    double until = MPI_Wtime() + 20;
    do {
        MPI_CHECK(MPI_Fetch_and_op(NULL, &got, MPI_LONG, 0, HOLDERS, MPI_NO_OP, w));
        MPI_CHECK(MPI_Win_flush(0, w));
    } while (got < n && MPI_Wtime() < until);
    CHECK(got == n, "%s: %ld of %d ranks inside shared locks at once (shared locks exclude?)",
          what, got, n);
    MPI_CHECK(MPI_Win_unlock(0, w));
    MPI_CHECK(MPI_Barrier(comm));

    /* 3 */
    int t = n - 1;
    MPI_Datatype every_other;
    MPI_CHECK(MPI_Type_vector(2, 1, 2, MPI_LONG, &every_other));
    MPI_CHECK(MPI_Type_commit(&every_other));
    long twos[2] = {2, 2}, old;
    long double ldone[2] = {1.0L, 1.0L};
    MPI_CHECK(MPI_Win_lock_all(0, w));
    for (int k = 0; k < ROUNDS; k++) {
        MPI_Request req;
        MPI_CHECK(MPI_Accumulate(&one, 1, MPI_LONG, t, LSUM, 1, MPI_LONG, MPI_SUM, w));
        MPI_CHECK(MPI_Fetch_and_op(&one, &old, MPI_LONG, t, LSUM, MPI_SUM, w));
        MPI_CHECK(MPI_Raccumulate(&one, 1, MPI_LONG, t, LSUM2, 1, MPI_LONG, MPI_SUM, w, &req));
        MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Accumulate(twos, 2, MPI_LONG, t, VSUM, 1, every_other, MPI_SUM, w));
        MPI_CHECK(MPI_Accumulate(twos, 1, MPI_LONG, t, LSUM2, 1, MPI_LONG, MPI_SUM, w));
        MPI_CHECK(MPI_Accumulate(ldone, 2, MPI_LONG_DOUBLE, t, LD, 2, MPI_LONG_DOUBLE,
                                 MPI_SUM, w));
        if (k % 10 == 0) MPI_CHECK(MPI_Win_flush(t, w));
    }
    MPI_CHECK(MPI_Win_unlock_all(w));
    MPI_CHECK(MPI_Type_free(&every_other));
    MPI_CHECK(MPI_Barrier(comm));
    settle(w, r);
    if (r == t) {
        long want = 2L * n * ROUNDS, want2 = 3L * n * ROUNDS;
        CHECK(mem[LSUM] == want, "%s: long sum %ld, expected %ld", what, mem[LSUM], want);
        CHECK(mem[LSUM2] == want2, "%s: long sum 2 %ld, expected %ld", what, mem[LSUM2], want2);
        CHECK(mem[VSUM] == want && mem[VSUM + 2] == want && mem[VSUM + 1] == 0,
              "%s: strided sums %ld %ld %ld, expected %ld %ld 0", what, mem[VSUM], mem[VSUM + 2],
              mem[VSUM + 1], want, want);
        long double lwant = (long double)n * ROUNDS;
        CHECK(ld[0] == lwant && ld[1] == lwant, "%s: long double sums %Lg %Lg, expected %Lg",
              what, ld[0], ld[1], lwant);
    }

    /* 4 */
    MPI_CHECK(MPI_Barrier(comm));
    if (r == 0) {
        usleep(500000);
        MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w));
        mem[AWAKE] = 1;
        MPI_CHECK(MPI_Win_unlock(0, w));
    } else {
        long early = 1;
        for (int k = 0; k < SLEEPY; k++) {
            long awake = -1, v = -1;
            MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w));
            MPI_CHECK(MPI_Get(&awake, 1, MPI_LONG, 0, AWAKE, 1, MPI_LONG, w));
            MPI_CHECK(MPI_Get(&v, 1, MPI_LONG, 0, SEEN, 1, MPI_LONG, w));
            MPI_CHECK(MPI_Win_flush(0, w));
            v++;
            MPI_CHECK(MPI_Put(&v, 1, MPI_LONG, 0, SEEN, 1, MPI_LONG, w));
            MPI_CHECK(MPI_Win_unlock(0, w));
            if (awake) early = 0;
        }
        const char *direct = getenv("FERRITE_RMA_DIRECT");
        if (shared && t_expect_ferrite() && !(direct && !strcmp(direct, "0")))
            CHECK(early, "%s: lock epochs on a same-host target waited for it to wake up", what);
    }
    MPI_CHECK(MPI_Barrier(comm));
    settle(w, r);
    if (r == 0)
        CHECK(mem[SEEN] == (long)(n - 1) * SLEEPY, "%s: counter %ld after the sleeping target, expected %ld",
              what, mem[SEEN], (long)(n - 1) * SLEEPY);
    MPI_CHECK(MPI_Barrier(comm));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    long *mem;
    MPI_Win w;
    MPI_CHECK(MPI_Win_allocate(SLOTS * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD,
                               &mem, &w));
    check(MPI_COMM_WORLD, w, mem, 0, "MPI_Win_allocate");
    MPI_CHECK(MPI_Win_free(&w));

    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int nn;
    MPI_CHECK(MPI_Comm_size(node, &nn));
    if (nn > 1) {
        MPI_CHECK(MPI_Win_allocate_shared(SLOTS * sizeof(long), sizeof(long), MPI_INFO_NULL, node,
                                          &mem, &w));
        check(node, w, mem, 1, "MPI_Win_allocate_shared");
        MPI_CHECK(MPI_Win_free(&w));
    }
    MPI_CHECK(MPI_Comm_free(&node));
    t_finish("rma_lock_shm");
    return 0;
}
