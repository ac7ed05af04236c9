/* np: 2 4 */
/* MPI_THREAD_MULTIPLE: NT threads per rank run communicator constructors at the same time
 * on overlapping parents (each thread its own duplicate of MPI_COMM_WORLD, plus
 * MPI_Comm_create_group on MPI_COMM_WORLD itself with the thread as tag): Comm_split,
 * Comm_split_type, Comm_create, Comm_create_group, Intercomm_create, Intercomm_merge,
 * Cart_create and Cart_sub, ITERS times. Each iteration keeps all of its communicators
 * alive together and checks every one by communicating on it with the same tag everywhere:
 * an Allgather of (world rank, thread, iteration, kind) checked against the expected
 * members in the expected order (the remote group on an intercommunicator), and on an
 * intracommunicator a ring Sendrecv checked the same way. Two live communicators sharing
 * a context id in a process would cross-match these messages (or hang). */
#include "common.h"
#include <pthread.h>

#define NT 4
#ifndef ITERS
#define ITERS 15
#endif

enum { K_SPLIT, K_TYPE, K_CREATE, K_GROUP, K_INTER, K_MERGE, K_CART, K_SUB };

static MPI_Comm parent[NT];

/* Checks `c` (kind `kind`): its members (the remote group if `inter`) are world ranks
 * `want[0..n)` in order, or any increasing list if `want` is NULL. */
static void check(MPI_Comm c, int inter, int t, int it, int kind, const int *want, int n)
{
    int size = -1, rank = -1;
    if (inter)
        MPI_CHECK(MPI_Comm_remote_size(c, &size));
    else
        MPI_CHECK(MPI_Comm_size(c, &size));
    MPI_CHECK(MPI_Comm_rank(c, &rank));
    if (want) CHECK(size == n, "kind %d thread %d iter %d: size %d, expected %d", kind, t, it, size, n);
    int mine[4] = {t_rank, t, it, kind};
    int *all = malloc(sizeof(int) * 4 * size);
    MPI_CHECK(MPI_Allgather(mine, 4, MPI_INT, all, 4, MPI_INT, c));
    for (int j = 0; j < size; j++) {
        int *r = all + 4 * j;
        CHECK(r[1] == t && r[2] == it && r[3] == kind,
              "kind %d thread %d iter %d: member %d sent thread %d iter %d kind %d", kind, t,
              it, j, r[1], r[2], r[3]);
        if (want)
            CHECK(r[0] == want[j], "kind %d thread %d iter %d: member %d is world rank %d, "
                  "expected %d", kind, t, it, j, r[0], want[j]);
        else if (j > 0)
            CHECK(r[0] > all[4 * (j - 1)], "kind %d thread %d: members out of order", kind, t);
    }
    if (!inter) {
        int got[4];
        MPI_CHECK(MPI_Sendrecv(mine, 4, MPI_INT, (rank + 1) % size, 0, got, 4, MPI_INT,
                               (rank + size - 1) % size, 0, c, MPI_STATUS_IGNORE));
        int *from = all + 4 * ((rank + size - 1) % size);
        CHECK(memcmp(got, from, sizeof got) == 0,
              "kind %d thread %d iter %d: ring got (%d %d %d %d), expected rank %d's", kind,
              t, it, got[0], got[1], got[2], got[3], from[0]);
    }
    free(all);
}

/* World ranks of parity `p`, highest first. */
static int parity(int p, int *out)
{
    int n = 0;
    for (int r = t_size - 1; r >= 0; r--)
        if (r % 2 == p) out[n++] = r;
    return n;
}

static void *worker(void *arg)
{
    int t = (int)(long)arg;
    MPI_Comm P = parent[t];
    int mine_n, other_n, *mine = malloc(sizeof(int) * t_size), *other = malloc(sizeof(int) * t_size);
    int *want = malloc(sizeof(int) * 2 * t_size);
    mine_n = parity(t_rank % 2, mine);
    other_n = parity(1 - t_rank % 2, other);
    MPI_Group world_group;
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
    for (int it = 0; it < ITERS; it++) {
        MPI_Comm split, type, create, group, inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
        MPI_Comm cart, sub;

        MPI_CHECK(MPI_Comm_split(P, t_rank % 2, t_size - t_rank, &split));
        MPI_CHECK(MPI_Comm_split_type(P, MPI_COMM_TYPE_SHARED, t_rank, MPI_INFO_NULL, &type));

        /* the first half (rank 0 at least) */
        int half = (t_size + 1) / 2, range[1][3] = {{0, half - 1, 1}};
        MPI_Group g;
        MPI_CHECK(MPI_Group_range_incl(world_group, 1, range, &g));
        MPI_CHECK(MPI_Comm_create(P, g, &create));
        MPI_CHECK(MPI_Group_free(&g));
        CHECK((create == MPI_COMM_NULL) == (t_rank >= half), "Comm_create: wrong members");

        /* everyone, last rank first */
        int rev[1][3] = {{t_size - 1, 0, -1}};
        MPI_CHECK(MPI_Group_range_incl(world_group, 1, rev, &g));
        MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, g, t, &group));
        MPI_CHECK(MPI_Group_free(&g));

        if (t_size > 1) {
            /* the parities meet; each leader is its parity's highest rank */
            MPI_CHECK(MPI_Intercomm_create(split, 0, P, other[0], 50 + t, &inter));
            MPI_CHECK(MPI_Intercomm_merge(inter, t_rank % 2, &merged));
        }

        int dims[2] = {0, 0}, periods[2] = {1, 0}, keep[2] = {0, 1};
        MPI_CHECK(MPI_Dims_create(t_size, 2, dims));
        MPI_CHECK(MPI_Cart_create(P, 2, dims, periods, 0, &cart));
        MPI_CHECK(MPI_Cart_sub(cart, keep, &sub));

        /* every communicator of the iteration is alive: check them all */
        check(split, 0, t, it, K_SPLIT, mine, mine_n);
        check(type, 0, t, it, K_TYPE, NULL, 0);
        if (create != MPI_COMM_NULL) {
            for (int j = 0; j < half; j++) want[j] = j;
            check(create, 0, t, it, K_CREATE, want, half);
        }
        for (int j = 0; j < t_size; j++) want[j] = t_size - 1 - j;
        check(group, 0, t, it, K_GROUP, want, t_size);
        if (t_size > 1) {
            check(inter, 1, t, it, K_INTER, other, other_n);
            int n = parity(0, want);
            n += parity(1, want + n);
            check(merged, 0, t, it, K_MERGE, want, n);
        }
        for (int j = 0; j < t_size; j++) want[j] = j;
        check(cart, 0, t, it, K_CART, want, t_size);
        int row = t_rank / dims[1];
        check(sub, 0, t, it, K_SUB, want + row * dims[1], dims[1]);

        MPI_Comm *all[] = {&split, &type, &create, &group, &inter, &merged, &cart, &sub};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            if (*all[k] != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(all[k]));
    }
    MPI_CHECK(MPI_Group_free(&world_group));
    free(mine);
    free(other);
    free(want);
    return NULL;
}

int main(int argc, char **argv)
{
    if (!t_init_multiple(&argc, &argv)) return 0;
    for (int t = 0; t < NT; t++) MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &parent[t]));
    pthread_t th[NT];
    for (int t = 0; t < NT; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)(long)t) == 0, "pthread_create");
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < NT; t++) MPI_CHECK(MPI_Comm_free(&parent[t]));
    t_finish("threads_comm_ctor");
    return 0;
}
