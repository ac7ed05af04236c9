/* np: 1 2 4 */
/* The lock-free RMA fast path (Ferrite's rma/fast.rs on rma/view.rs) against what the general
 * path decides, with data checked:
 * 1. once a type has taken the fast path, erroneous calls still get their error classes
 *    through the window's handler and change nothing: after unlock_all (Put, Fetch_and_op,
 *    Compare_and_swap, flush: MPI_ERR_RMA_SYNC), outside the window (MPI_ERR_RMA_RANGE), an
 *    operation the type does not support (MPI_ERR_OP), a target not locked, a flush in a
 *    fence epoch, after a MPI_MODE_NOSUCCEED fence and after MPI_Win_complete;
 * 2. a window freed and a smaller one created (the handle may be reused): the new window's
 *    bounds apply, and accumulates on a process's own MPI_Win_create memory are exact;
 * 3. (MPI_THREAD_MULTIPLE, 2+ processes) two threads each lock, operate on and unlock their
 *    own target of one window at once: Fetch_and_op, CAS increments and 64-int accumulates
 *    (the exclusive path) give exact counts, and an operation after a thread's unlock is
 *    MPI_ERR_RMA_SYNC whatever the other thread holds. */
#include "common.h"
#include <pthread.h>

#define N 256
#define ITERS 300
#define REGION 64

/* Checks MPI leaves to the implementation (MPICH checks neither target ranges nor operations at the origin): on Ferrite only. */
static int ferrite;
#define FEXPECT_CLASS(call, cls)                                                              \
    do {                                                                                      \
        if (ferrite) EXPECT_CLASS(call, cls);                                                 \
    } while (0)

static MPI_Win tw;
static char errmsg[2][256];

static void *worker(void *arg)
{
    int k = (int)(long)arg;
    int t = (t_rank + 1 + k) % t_size;
    int one = 1, old = 0, ones[REGION];
    for (int i = 0; i < REGION; i++) ones[i] = 1;
    /* Slots at the target: [k] Fetch_and_op counter, [2 + k] CAS counter, region k at
     * 16 + k * REGION. */
    for (int it = 0; it < ITERS; it++) {
        TOK(k, MPI_Win_lock(MPI_LOCK_SHARED, t, 0, tw));
        TOK(k, MPI_Fetch_and_op(&one, &old, MPI_INT, t, k, MPI_SUM, tw));
        TOK(k, MPI_Accumulate(ones, REGION, MPI_INT, t, 16 + k * REGION, REGION, MPI_INT, MPI_SUM, tw));
        int seen = 0;
        TOK(k, MPI_Win_flush(t, tw));
        if (old != it) TFAIL(k, "thread %d: fetched %d at iteration %d", k, old, it);
        for (;;) {
            int next, got;
            TOK(k, MPI_Get(&seen, 1, MPI_INT, t, 2 + k, 1, MPI_INT, tw));
            TOK(k, MPI_Win_flush(t, tw));
            next = seen + 1;
            TOK(k, MPI_Compare_and_swap(&next, &seen, &got, MPI_INT, t, 2 + k, tw));
            TOK(k, MPI_Win_flush(t, tw));
            if (got == seen) break;
        }
        TOK(k, MPI_Win_unlock(t, tw));
        if (!ferrite) continue; /* MPICH lets this through */
        int rc = MPI_Put(&one, 1, MPI_INT, t, k, 1, MPI_INT, tw);
        if (t_class(rc) != MPI_ERR_RMA_SYNC)
            TFAIL(k, "thread %d: Put after unlock returned class %d, not MPI_ERR_RMA_SYNC", k, t_class(rc));
    }
    return NULL;
}

static void threads_part(void)
{
    int *mem;
    MPI_CHECK(MPI_Win_allocate(N * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &tw));
    MPI_CHECK(MPI_Win_set_errhandler(tw, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t_rank, 0, tw));
    for (int i = 0; i < N; i++) mem[i] = 0;
    MPI_CHECK(MPI_Win_unlock(t_rank, tw));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    pthread_t th[2];
    for (long k = 0; k < 2; k++) CHECK(pthread_create(&th[k], NULL, worker, (void *)k) == 0, "pthread_create");
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < 2; k++) CHECK(errmsg[k][0] == 0, "%s", errmsg[k]);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    /* Exactly one process's thread k targets this process. */
    MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t_rank, 0, tw));
    for (int k = 0; k < 2; k++) {
        CHECK(mem[k] == ITERS, "Fetch_and_op counter %d = %d, expected %d", k, mem[k], ITERS);
        CHECK(mem[2 + k] == ITERS, "CAS counter %d = %d, expected %d", k, mem[2 + k], ITERS);
        for (int i = 0; i < REGION; i++)
            CHECK(mem[16 + k * REGION + i] == ITERS, "region %d [%d] = %d, expected %d", k, i,
                  mem[16 + k * REGION + i], ITERS);
    }
    MPI_CHECK(MPI_Win_unlock(t_rank, tw));
    MPI_CHECK(MPI_Win_free(&tw));
}

int main(int argc, char **argv)
{
    if (!t_init_multiple(&argc, &argv)) return 0;
    ferrite = t_expect_ferrite();
    int n = t_size, r = t_rank, peer = (r + 1) % n;
    int *mem;
    MPI_Win w;
    MPI_CHECK(MPI_Win_allocate(N * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &w));
    for (int i = 0; i < N; i++) mem[i] = 7;
    MPI_CHECK(MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    /* 1. Warm every operation and type up on the fast path (data checked), then errors. */
    int x = 5, y = 0, old = 0, cmp = 7, one = 1;
    unsigned char b = 3;
    MPI_CHECK(MPI_Win_lock_all(0, w));
    for (int rep = 0; rep < 3; rep++) {
        MPI_CHECK(MPI_Put(&x, 1, MPI_INT, peer, 1 + r, 1, MPI_INT, w));
        MPI_CHECK(MPI_Win_flush(peer, w));
        MPI_CHECK(MPI_Get(&y, 1, MPI_INT, peer, 1 + r, 1, MPI_INT, w));
        MPI_CHECK(MPI_Win_flush_all(w));
        CHECK(y == 5, "Get after Put: %d", y);
        MPI_CHECK(MPI_Put(&b, 1, MPI_BYTE, peer, 0, 1, MPI_BYTE, w));
        MPI_CHECK(MPI_Win_flush_local(peer, w));
    }
    MPI_CHECK(MPI_Win_unlock_all(w));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    /* Everyone put 5 at 1 + its rank on its successor: this process got one from its
     * predecessor. */
    int pred = (r + n - 1) % n;
    CHECK(mem[1 + pred] == 5, "mem[%d] = %d, expected 5", 1 + pred, mem[1 + pred]);
    CHECK(((unsigned char *)mem)[0] == 3, "byte 0 = %d, expected 3", ((unsigned char *)mem)[0]);
    for (int i = 0; i < N; i++) mem[i] = 7;
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Win_lock_all(0, w));
    for (int rep = 0; rep < 3; rep++) {
        MPI_CHECK(MPI_Accumulate(&one, 1, MPI_INT, peer, 100 + r, 1, MPI_INT, MPI_SUM, w));
        MPI_CHECK(MPI_Fetch_and_op(&one, &old, MPI_INT, peer, 120 + r, MPI_SUM, w));
        MPI_CHECK(MPI_Win_flush(peer, w));
        CHECK(old == 7 + rep, "Fetch_and_op fetched %d, expected %d", old, 7 + rep);
        int next = cmp + 1, got = -1;
        MPI_CHECK(MPI_Compare_and_swap(&next, &cmp, &got, MPI_INT, peer, 140 + r, w));
        MPI_CHECK(MPI_Win_flush(peer, w));
        CHECK(got == cmp, "CAS fetched %d, expected %d", got, cmp);
        cmp = next;
    }
    MPI_CHECK(MPI_Win_unlock_all(w));

    /* After the epoch: nothing goes through, every call says why. */
    EXPECT_CLASS(MPI_Put(&x, 1, MPI_INT, peer, 1, 1, MPI_INT, w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Get(&y, 1, MPI_INT, peer, 1, 1, MPI_INT, w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Accumulate(&one, 1, MPI_INT, peer, 100 + r, 1, MPI_INT, MPI_SUM, w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Fetch_and_op(&one, &old, MPI_INT, peer, 120 + r, MPI_SUM, w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Compare_and_swap(&x, &cmp, &old, MPI_INT, peer, 140 + r, w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Win_flush(peer, w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Win_flush_all(w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Win_flush_local_all(w), MPI_ERR_RMA_SYNC);

    MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, w));
    FEXPECT_CLASS(MPI_Put(&x, 1, MPI_INT, peer, N, 1, MPI_INT, w), MPI_ERR_RMA_RANGE);
    FEXPECT_CLASS(MPI_Put(&x, 1, MPI_INT, peer, -1, 1, MPI_INT, w), MPI_ERR_RMA_RANGE);
    FEXPECT_CLASS(MPI_Fetch_and_op(&one, &old, MPI_INT, peer, N, MPI_SUM, w), MPI_ERR_RMA_RANGE);
    FEXPECT_CLASS(MPI_Accumulate(&one, 1, MPI_INT, peer, 100 + r, 1, MPI_INT, MPI_MAXLOC, w), MPI_ERR_OP);
    FEXPECT_CLASS(MPI_Accumulate(&one, 1, MPI_INT, peer, 100 + r, 1, MPI_INT, MPI_NO_OP, w), MPI_ERR_OP);
    FEXPECT_CLASS(MPI_Accumulate(&b, 1, MPI_BYTE, peer, 0, 1, MPI_BYTE, MPI_SUM, w), MPI_ERR_OP);
    FEXPECT_CLASS(MPI_Fetch_and_op(&b, &b, MPI_BYTE, peer, 0, MPI_PROD, w), MPI_ERR_OP);
    if (n > 2 && ferrite) { /* MPICH lets this through */
        int other = (r + 2) % n;
        EXPECT_CLASS(MPI_Put(&x, 1, MPI_INT, other, 1, 1, MPI_INT, w), MPI_ERR_RMA_SYNC);
        EXPECT_CLASS(MPI_Win_flush(other, w), MPI_ERR_RMA_SYNC);
    }
    MPI_CHECK(MPI_Win_flush_all(w));
    MPI_CHECK(MPI_Win_unlock(peer, w));

    /* Fence epochs: operations yes, flush no; none after NOSUCCEED. */
    MPI_CHECK(MPI_Win_fence(0, w));
    MPI_CHECK(MPI_Put(&x, 1, MPI_INT, peer, 200 + r, 1, MPI_INT, w));
    EXPECT_CLASS(MPI_Win_flush(peer, w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Win_flush_all(w), MPI_ERR_RMA_SYNC);
    MPI_CHECK(MPI_Win_fence(MPI_MODE_NOSUCCEED, w));
    EXPECT_CLASS(MPI_Put(&x, 1, MPI_INT, peer, 200 + r, 1, MPI_INT, w), MPI_ERR_RMA_SYNC);

    /* PSCW: open between start and complete only. */
    MPI_Group world, pg;
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    MPI_CHECK(MPI_Group_incl(world, 1, &pred, &pg));
    MPI_Group sg;
    MPI_CHECK(MPI_Group_incl(world, 1, &peer, &sg));
    MPI_CHECK(MPI_Win_post(pg, 0, w));
    MPI_CHECK(MPI_Win_start(sg, 0, w));
    int z = 11;
    MPI_CHECK(MPI_Put(&z, 1, MPI_INT, peer, 210 + r, 1, MPI_INT, w));
    MPI_CHECK(MPI_Win_complete(w));
    MPI_CHECK(MPI_Win_wait(w));
    EXPECT_CLASS(MPI_Put(&z, 1, MPI_INT, peer, 210 + r, 1, MPI_INT, w), MPI_ERR_RMA_SYNC);
    MPI_CHECK(MPI_Group_free(&pg));
    MPI_CHECK(MPI_Group_free(&sg));
    MPI_CHECK(MPI_Group_free(&world));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    /* What arrived, and what the refused calls did not change. */
    CHECK(mem[100 + pred] == 10, "accumulated %d, expected 10", mem[100 + pred]);
    CHECK(mem[120 + pred] == 10, "fetch-and-op counter %d, expected 10", mem[120 + pred]);
    CHECK(mem[140 + pred] == 10, "CAS counter %d, expected 10", mem[140 + pred]);
    CHECK(mem[200 + pred] == 5, "fence Put: %d", mem[200 + pred]);
    CHECK(mem[210 + pred] == 11, "PSCW Put: %d", mem[210 + pred]);
    CHECK(((unsigned char *)mem)[0] == 7, "byte 0 = %d changed", ((unsigned char *)mem)[0]);
    for (int i = 1; i < 100; i++) CHECK(mem[i] == 7, "mem[%d] = %d changed", i, mem[i]);
    MPI_CHECK(MPI_Win_free(&w));

    /* 2. A smaller window where the freed one was. */
    MPI_Win w2;
    int *mem2;
    MPI_CHECK(MPI_Win_allocate(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem2, &w2));
    MPI_CHECK(MPI_Win_set_errhandler(w2, MPI_ERRORS_RETURN));
    for (int i = 0; i < 4; i++) mem2[i] = 0;
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Win_lock_all(0, w2));
    FEXPECT_CLASS(MPI_Put(&x, 1, MPI_INT, peer, 100, 1, MPI_INT, w2), MPI_ERR_RMA_RANGE);
    FEXPECT_CLASS(MPI_Put(&x, 1, MPI_INT, peer, 4, 1, MPI_INT, w2), MPI_ERR_RMA_RANGE);
    for (int rep = 0; rep < 3; rep++) MPI_CHECK(MPI_Put(&x, 1, MPI_INT, peer, 3, 1, MPI_INT, w2));
    MPI_CHECK(MPI_Win_unlock_all(w2));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    CHECK(mem2[3] == 5 && mem2[0] == 0, "second window holds %d %d", mem2[0], mem2[3]);
    MPI_CHECK(MPI_Win_free(&w2));

    /* A process's own MPI_Win_create memory: accumulates stay exact. */
    long own[4] = {0, 0, 0, 0}, lone = 1, lold = -1;
    MPI_Win w3;
    MPI_CHECK(MPI_Win_create(own, sizeof own, sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &w3));
    MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, r, 0, w3));
    for (int rep = 0; rep < 50; rep++) {
        MPI_CHECK(MPI_Accumulate(&lone, 1, MPI_LONG, r, 1, 1, MPI_LONG, MPI_SUM, w3));
        MPI_CHECK(MPI_Fetch_and_op(&lone, &lold, MPI_LONG, r, 2, MPI_SUM, w3));
        MPI_CHECK(MPI_Win_flush(r, w3));
        CHECK(lold == rep, "own Fetch_and_op fetched %ld, expected %d", lold, rep);
    }
    MPI_CHECK(MPI_Win_unlock(r, w3));
    CHECK(own[1] == 50 && own[2] == 50 && own[0] == 0, "own window %ld %ld %ld", own[0], own[1], own[2]);
    MPI_CHECK(MPI_Win_free(&w3));

    /* 3. Threads. */
    if (n >= 2) threads_part();
    t_finish("rma_fastview");
    return 0;
}
