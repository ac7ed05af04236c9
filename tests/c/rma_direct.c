/* np: 1 2 4 */
/* RMA by direct access within a host and its agreement with the message path. Ranks of one
 * host reach each other's window memory by load/store (MPI_Win_allocate,
 * MPI_Win_allocate_shared) or cross-memory attach (MPI_Win_create: Put and Get; accumulates
 * go as messages the target applies); ranks on other hosts (tests/hosts) and every rank
 * under FERRITE_TRANSPORTS without shm go by messages, so runs of this program cover each
 * path and their mix. For each window flavor:
 *  1. accumulate atomicity: every rank adds to the same elements of rank 0 and of the last
 *     rank, ROUNDS times each, with MPI_Accumulate, MPI_Fetch_and_op and
 *     MPI_Get_accumulate under MPI_Win_lock_all; the sums must be exact;
 *  2. fetch-and-op tickets: each rank draws TICKETS tickets from one counter at rank 0; the
 *     tickets of all ranks are 0 .. n*TICKETS-1, each once;
 *  3. compare-and-swap: increments by CAS retry loops add up;
 *  4. lock exclusivity: under MPI_LOCK_EXCLUSIVE on rank 0 each rank checks an owner slot
 *     is free, claims it, does a get+put increment, checks it still owns the slot, frees it;
 *  5. fence epoch: each rank puts a strided (vector) block into its right neighbour and
 *     gets it back into a strided buffer; every rank puts its own word into every rank.
 * The shared flavor runs over MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). */
#include "common.h"
#include <stdlib.h>

#define ROUNDS 200
#define TICKETS 50
#define CASN 20
#define LOCKS 20

enum { SUM, FOP, GACC0, GACC1, TICKET, CAS, OWNER, LOCKED, VEC = 8, ALL = VEC + 16, SLOTS = ALL + 64 };

static long pattern(int from, int i) { return 1000L * (from + 1) + i; }

/* The target's own view of its memory after others' operations (MPI_WIN_UNIFIED). */
static void settle(MPI_Win w, int r)
{
    MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, r, 0, w));
    MPI_CHECK(MPI_Win_sync(w));
    MPI_CHECK(MPI_Win_unlock(r, w));
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static void check(MPI_Comm comm, MPI_Win w, long *mem, const char *what)
{
    int n, r;
    MPI_CHECK(MPI_Comm_size(comm, &n));
    MPI_CHECK(MPI_Comm_rank(comm, &r));
    for (int i = 0; i < SLOTS; i++) mem[i] = 0;
    MPI_CHECK(MPI_Barrier(comm));
    int targets[2] = {0, n - 1}, nt = n > 1 ? 2 : 1;

    /* 1-3 */
    /* Result buffers stay valid until the flush that completes their operations. */
    long one = 1, old, two[2] = {1, 1}, got[2], tickets[TICKETS];
    MPI_CHECK(MPI_Win_lock_all(0, w));
    for (int k = 0; k < ROUNDS; k++) {
        for (int j = 0; j < nt; j++) {
            int t = targets[j];
            MPI_CHECK(MPI_Accumulate(&one, 1, MPI_LONG, t, SUM, 1, MPI_LONG, MPI_SUM, w));
            MPI_CHECK(MPI_Fetch_and_op(&one, &old, MPI_LONG, t, FOP, MPI_SUM, w));
            MPI_CHECK(MPI_Get_accumulate(two, 2, MPI_LONG, got, 2, MPI_LONG, t, GACC0, 2,
                                         MPI_LONG, MPI_SUM, w));
            if (k % 16 == 0) MPI_CHECK(MPI_Win_flush(t, w));
        }
    }
    MPI_CHECK(MPI_Win_flush_all(w));
    for (int k = 0; k < TICKETS; k++) {
        MPI_CHECK(MPI_Fetch_and_op(&one, &tickets[k], MPI_LONG, 0, TICKET, MPI_SUM, w));
        MPI_CHECK(MPI_Win_flush(0, w));
    }
    for (int k = 0; k < CASN; k++) {
        long cur, res;
        do {
            MPI_CHECK(MPI_Fetch_and_op(NULL, &cur, MPI_LONG, 0, CAS, MPI_NO_OP, w));
            MPI_CHECK(MPI_Win_flush(0, w));
            long next = cur + 1;
            MPI_CHECK(MPI_Compare_and_swap(&next, &cur, &res, MPI_LONG, 0, CAS, w));
            MPI_CHECK(MPI_Win_flush(0, w));
        } while (res != cur);
    }
    MPI_CHECK(MPI_Win_unlock_all(w));
    MPI_CHECK(MPI_Barrier(comm));
    settle(w, r);
    if (r == 0 || r == n - 1) {
        long want = (long)n * ROUNDS;
        CHECK(mem[SUM] == want, "%s: accumulate sum %ld, expected %ld", what, mem[SUM], want);
        CHECK(mem[FOP] == want, "%s: fetch_and_op sum %ld, expected %ld", what, mem[FOP], want);
        CHECK(mem[GACC0] == want && mem[GACC1] == want, "%s: get_accumulate sums %ld %ld, expected %ld",
              what, mem[GACC0], mem[GACC1], want);
    }
    if (r == 0) {
        CHECK(mem[TICKET] == (long)n * TICKETS, "%s: ticket counter %ld", what, mem[TICKET]);
        CHECK(mem[CAS] == (long)n * CASN, "%s: CAS counter %ld, expected %ld", what, mem[CAS],
              (long)n * CASN);
    }
    long *all = malloc(sizeof(long) * n * TICKETS);
    MPI_CHECK(MPI_Gather(tickets, TICKETS, MPI_LONG, all, TICKETS, MPI_LONG, 0, comm));
    if (r == 0) {
        qsort(all, (size_t)n * TICKETS, sizeof(long), cmp_long);
        for (long i = 0; i < (long)n * TICKETS; i++)
            CHECK(all[i] == i, "%s: tickets sorted: position %ld holds %ld (duplicate or gap)",
                  what, i, all[i]);
    }
    free(all);

    /* 4 */
    for (int k = 0; k < LOCKS; k++) {
        long me = r + 1, seen = -1, v = -1, zero = 0;
        MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, w));
        MPI_CHECK(MPI_Get(&seen, 1, MPI_LONG, 0, OWNER, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Win_flush(0, w));
        CHECK(seen == 0, "%s: owner slot holds %ld while rank %d holds the exclusive lock", what,
              seen, r);
        MPI_CHECK(MPI_Put(&me, 1, MPI_LONG, 0, OWNER, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Get(&v, 1, MPI_LONG, 0, LOCKED, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Win_flush(0, w));
        v++;
        MPI_CHECK(MPI_Put(&v, 1, MPI_LONG, 0, LOCKED, 1, MPI_LONG, w));
        MPI_CHECK(MPI_Win_flush(0, w));
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
        CHECK(mem[LOCKED] == (long)n * LOCKS, "%s: locked counter %ld, expected %ld", what,
              mem[LOCKED], (long)n * LOCKS);

    /* 5 */
    MPI_Datatype vec;
    MPI_CHECK(MPI_Type_vector(8, 1, 2, MPI_LONG, &vec));
    MPI_CHECK(MPI_Type_commit(&vec));
    long block[8], back[16];
    for (int i = 0; i < 8; i++) block[i] = pattern(r, i);
    for (int i = 0; i < 16; i++) back[i] = -1;
    int right = (r + 1) % n;
    MPI_CHECK(MPI_Win_fence(0, w));
    MPI_CHECK(MPI_Put(block, 8, MPI_LONG, right, VEC, 1, vec, w));
    for (int t = 0; t < n && t < 64; t++) {
        long word = pattern(r, 100 + t);
        MPI_CHECK(MPI_Put(&word, 1, MPI_LONG, t, ALL + r, 1, MPI_LONG, w));
    }
    MPI_CHECK(MPI_Win_fence(0, w));
    MPI_CHECK(MPI_Get(back, 1, vec, right, VEC, 1, vec, w));
    MPI_CHECK(MPI_Win_fence(0, w));
    int left = (r + n - 1) % n;
    for (int i = 0; i < 16; i++) {
        long want = i % 2 ? -1 : pattern(r, i / 2);
        CHECK(back[i] == want, "%s: strided get back[%d] = %ld, expected %ld", what, i, back[i], want);
        long here = mem[VEC + i], mine = i % 2 ? 0 : pattern(left, i / 2);
        CHECK(here == mine, "%s: strided put slot %d = %ld, expected %ld", what, i, here, mine);
    }
    for (int s = 0; s < n && s < 64; s++)
        CHECK(mem[ALL + s] == pattern(s, 100 + r), "%s: word from rank %d = %ld", what, s,
              mem[ALL + s]);
    MPI_CHECK(MPI_Type_free(&vec));
    MPI_CHECK(MPI_Barrier(comm));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    long *mem;
    MPI_Win w;

    MPI_CHECK(MPI_Win_allocate(SLOTS * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD,
                               &mem, &w));
    check(MPI_COMM_WORLD, w, mem, "MPI_Win_allocate");
    MPI_CHECK(MPI_Win_free(&w));

    long *own = calloc(SLOTS, sizeof(long));
    MPI_CHECK(MPI_Win_create(own, SLOTS * sizeof(long), sizeof(long), MPI_INFO_NULL,
                             MPI_COMM_WORLD, &w));
    check(MPI_COMM_WORLD, w, own, "MPI_Win_create");
    MPI_CHECK(MPI_Win_free(&w));
    free(own);

    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Win_allocate_shared(SLOTS * sizeof(long), sizeof(long), MPI_INFO_NULL, node,
                                      &mem, &w));
    check(node, w, mem, "MPI_Win_allocate_shared");
    MPI_CHECK(MPI_Win_free(&w));
    MPI_CHECK(MPI_Comm_free(&node));
    t_finish("rma_direct");
    return 0;
}
