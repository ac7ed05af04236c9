/* np: 2 4 */
/* Shared-memory collectives (coll/shm.rs) under MPI_THREAD_MULTIPLE, forced with
 * FERRITE_COLL_*_ALGO=shm: NT threads per rank, each on its own duplicate of
 * MPI_COMM_WORLD (the last one on a reversed-order split), run Allreduce, Bcast (every
 * root), Reduce, Allgather and Barrier at once, at counts carried in the flag's line and in
 * the slots, data checked; meanwhile one more thread ping-pongs point-to-point messages with
 * the partner rank (a thread asleep in a collective must not hold the library's lock, and
 * one waiting in a collective makes progress for the others). On Ferrite over shm the
 * collectives must have run in shared memory: after each communicator's first collective
 * (its segment's set-up) no collective message is exchanged (FERRITE_Coll_peers). */
#include "common.h"
#include <unistd.h>
#include <pthread.h>

int FERRITE_Coll_reload_knobs(void) __attribute__((weak));
int FERRITE_Coll_peers(int reset, int *count) __attribute__((weak));

#define NT 4
#define ITERS 150
#define BIG 300 /* ints: 1200 bytes, in the slots (the line carries up to 56 bytes) */
#define TAG_PP 500

static MPI_Comm tcomm[NT];
static pthread_barrier_t bar;
static char errmsg[NT + 1][256];
static volatile int workers_done;


static int val(int t, int r, int i, int k) { return (t * 131 + r * 17 + i * 7 + k) % 1000 - 400; }

static void *worker(void *arg)
{
    int t = (int)(long)arg;
    MPI_Comm comm = tcomm[t];
    int me, n;
    TOK(t, MPI_Comm_rank(comm, &me));
    TOK(t, MPI_Comm_size(comm, &n));
    int *s = malloc(sizeof(int) * BIG), *r = malloc(sizeof(int) * BIG * n);
    /* The segment's set-up (collective messages), then the count starts. */
    TOK(t, MPI_Barrier(comm));
    pthread_barrier_wait(&bar);
    if (t == 0 && FERRITE_Coll_peers) FERRITE_Coll_peers(1, &(int){0});
    pthread_barrier_wait(&bar);
    for (int i = 0; i < ITERS; i++) {
        int cnt = i % 3 == 0 ? BIG : 1 + i % 5;
        for (int k = 0; k < cnt; k++) s[k] = val(t, me, i, k);
        TOK(t, MPI_Allreduce(s, r, cnt, MPI_INT, MPI_SUM, comm));
        for (int k = 0; k < cnt; k++) {
            int want = 0;
            for (int q = 0; q < n; q++) want += val(t, q, i, k);
            if (r[k] != want) TFAIL(t, "thread %d iter %d: Allreduce [%d] = %d, want %d", t, i, k, r[k], want);
        }
        int root = i % n;
        for (int k = 0; k < cnt; k++) r[k] = me == root ? val(t, root, i, k + 1) : -1;
        TOK(t, MPI_Bcast(r, cnt, MPI_INT, root, comm));
        for (int k = 0; k < cnt; k++)
            if (r[k] != val(t, root, i, k + 1)) TFAIL(t, "thread %d iter %d: Bcast [%d] = %d", t, i, k, r[k]);
        for (int k = 0; k < cnt; k++) r[k] = -1;
        TOK(t, MPI_Reduce(s, r, cnt, MPI_INT, MPI_MAX, root, comm));
        for (int k = 0; k < cnt && me == root; k++) {
            int want = val(t, 0, i, k);
            for (int q = 1; q < n; q++) want = val(t, q, i, k) > want ? val(t, q, i, k) : want;
            if (r[k] != want) TFAIL(t, "thread %d iter %d: Reduce [%d] = %d, want %d", t, i, k, r[k], want);
        }
        if (i % 2) {
            TOK(t, MPI_Allgather(s, cnt, MPI_INT, r, cnt, MPI_INT, comm));
            for (int q = 0; q < n; q++)
                for (int k = 0; k < cnt; k++)
                    if (r[q * cnt + k] != val(t, q, i, k))
                        TFAIL(t, "thread %d iter %d: Allgather [%d][%d] = %d", t, i, q, k, r[q * cnt + k]);
        } else {
            TOK(t, MPI_Barrier(comm));
        }
    }
    free(s);
    free(r);
    return NULL;
}

/* Point-to-point beside the collectives: rank pairs (0,1), (2,3) ping-pong until every
 * worker of both is done (each side says so in its messages). */
static void *pingpong(void *arg)
{
    (void)arg;
    int peer = t_rank ^ 1, t = NT;
    if (peer >= t_size) return NULL;
    int mine_done = 0, theirs_done = 0;
    for (int i = 0; !(mine_done && theirs_done); i++) {
        mine_done = __atomic_load_n(&workers_done, __ATOMIC_ACQUIRE) == NT;
        int out[2] = {i, mine_done}, in[2] = {-1, -1};
        if (t_rank < peer) {
            TOK(t, MPI_Send(out, 2, MPI_INT, peer, TAG_PP, MPI_COMM_WORLD));
            TOK(t, MPI_Recv(in, 2, MPI_INT, peer, TAG_PP, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else {
            TOK(t, MPI_Recv(in, 2, MPI_INT, peer, TAG_PP, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            TOK(t, MPI_Send(out, 2, MPI_INT, peer, TAG_PP, MPI_COMM_WORLD));
        }
        if (in[0] != i) TFAIL(t, "ping-pong %d got %d", i, in[0]);
        theirs_done = in[1];
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *knobs[] = {"FERRITE_COLL_BARRIER_ALGO", "FERRITE_COLL_BCAST_ALGO",
                           "FERRITE_COLL_REDUCE_ALGO", "FERRITE_COLL_ALLREDUCE_ALGO",
                           "FERRITE_COLL_ALLGATHER_ALGO"};
    for (unsigned k = 0; k < sizeof knobs / sizeof *knobs; k++) setenv(knobs[k], "shm", 1);
    setenv("FERRITE_COLL_SHM_MAX", "4096", 1);
    if (!t_init_multiple(&argc, &argv)) return 0;
    if (FERRITE_Coll_reload_knobs) MPI_CHECK(FERRITE_Coll_reload_knobs());
    /* Shared-memory algorithms need every rank on this host: MPI_COMM_TYPE_SHARED says
     * which share it (the launcher's node map; tests/hosts spreads ranks over network
     * namespaces of one machine, separate hosts for it and for shm). */
    MPI_Comm node;
    int node_size = 0, peers0 = 0;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_size(node, &node_size));
    MPI_CHECK(MPI_Comm_free(&node));
    int one_host = node_size == t_size;
    if (FERRITE_Coll_peers) MPI_CHECK(FERRITE_Coll_peers(1, &peers0));
    for (int t = 0; t < NT - 1; t++) MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &tcomm[t]));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, 0, -t_rank, &tcomm[NT - 1]));
    pthread_barrier_init(&bar, NULL, NT);
    pthread_t pp, th[NT];
    CHECK(pthread_create(&pp, NULL, pingpong, NULL) == 0, "pthread_create failed");
    for (long t = 0; t < NT; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)t) == 0, "pthread_create failed");
    for (int t = 0; t < NT; t++) {
        pthread_join(th[t], NULL);
        __atomic_add_fetch(&workers_done, 1, __ATOMIC_RELEASE);
    }
    pthread_join(pp, NULL);
    for (int t = 0; t <= NT; t++) CHECK(errmsg[t][0] == 0, "%s", errmsg[t]);
    /* Over shm on one host, every collective after the set-up ran in shared memory. */
    const char *tr = getenv("FERRITE_TRANSPORTS");
    if (FERRITE_Coll_peers && t_expect_ferrite() && (!tr || strstr(tr, "shm")) && one_host) {
        int peers = -1;
        MPI_CHECK(FERRITE_Coll_peers(0, &peers));
        CHECK(peers == 0, "collective messages to %d peers: the shared-memory algorithms did not run", peers);
    }
    for (int t = 0; t < NT; t++) MPI_CHECK(MPI_Comm_free(&tcomm[t]));
    pthread_barrier_destroy(&bar);
    t_finish("coll_shm_threads");
    return 0;
}
