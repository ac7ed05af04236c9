/* np: 1 2 4 */
/* MPI_THREAD_MULTIPLE: NT threads per rank call MPI at the same time, no user lock.
 *  1. one thread sits in a blocking MPI_Recv that the partner satisfies only after every
 *     other phase is over: if a blocked call kept the library's lock, the rest would hang;
 *  2. point-to-point with distinct tags: thread t exchanges with the partner's thread t
 *     (blocking Send/Recv and Sendrecv, alternating), data checked in order;
 *  3. a shared tag with MPI_ANY_SOURCE: every thread sends to every rank, every thread
 *     receives its share with ANY_SOURCE; each (source, thread, seq) arrives exactly once
 *     and each sender's messages in order within one receiving thread;
 *  4. collectives on per-thread duplicates of MPI_COMM_WORLD (Allreduce, Bcast, Barrier);
 *  5. Probe then Recv on a thread's own tag, and Mprobe/Mrecv with MPI_ANY_TAG from all
 *     threads at once (each message is taken by exactly one thread);
 *  6. request completion from another thread: thread t Irecvs, thread (t+1)%NT Waits.
 * Is_thread_main is false on the workers, true on the main thread. */
#include "common.h"
#include <pthread.h>

#define NT 4
#define ITERS 100
#define SHARED_N 50
#define TAG_BLOCK 30000
#define TAG_SHARED 20000
#define TAG_PROBE 21000
#define TAG_M 22000
#define TAG_HAND 23000

static int peer;
static MPI_Comm tcomm[NT], mcomm;
static pthread_barrier_t bar;
static char errmsg[NT + 1][256];
static MPI_Request handed[NT];
static int handbuf[NT][2];

/* Phase 3 bookkeeping: seen[src][thread][seq], last seq per (receiver, src, thread). */
static unsigned char *seen;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;


static int iters(void) { return t_size > 2 ? ITERS / 4 : ITERS; }

static void *worker(void *arg)
{
    int t = (int)(long)arg;
    int flag = -1;
    TOK(t, MPI_Is_thread_main(&flag));
    if (flag != 0) TFAIL(t, "thread %d: Is_thread_main says %d", t, flag);

    /* 2. distinct tags, blocking calls */
    for (int i = 0; i < iters(); i++) {
        int out[2] = {t_rank * 100 + t, i}, in[2] = {-1, -1};
        if (i % 2) {
            TOK(t, MPI_Sendrecv(out, 2, MPI_INT, peer, t, in, 2, MPI_INT, peer, t,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else if (t_rank < peer) {
            TOK(t, MPI_Send(out, 2, MPI_INT, peer, t, MPI_COMM_WORLD));
            TOK(t, MPI_Recv(in, 2, MPI_INT, peer, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        } else if (t_rank > peer) {
            TOK(t, MPI_Recv(in, 2, MPI_INT, peer, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            TOK(t, MPI_Send(out, 2, MPI_INT, peer, t, MPI_COMM_WORLD));
        } else {
            MPI_Request r;
            TOK(t, MPI_Irecv(in, 2, MPI_INT, peer, t, MPI_COMM_WORLD, &r));
            TOK(t, MPI_Send(out, 2, MPI_INT, peer, t, MPI_COMM_WORLD));
            TOK(t, MPI_Wait(&r, MPI_STATUS_IGNORE));
        }
        if (in[0] != peer * 100 + t || in[1] != i)
            TFAIL(t, "thread %d iteration %d: got %d %d, expected %d %d", t, i, in[0], in[1],
                 peer * 100 + t, i);
    }

    /* 3. shared tag, ANY_SOURCE: each thread sends SHARED_N messages to every rank and
     * receives SHARED_N * t_size of them (every rank sends NT * SHARED_N to each rank). */
    MPI_Request *sreq = malloc(sizeof *sreq * SHARED_N * t_size);
    int (*sbuf)[3] = malloc(sizeof *sbuf * SHARED_N * t_size);
    for (int d = 0; d < t_size; d++)
        for (int s = 0; s < SHARED_N; s++) {
            int k = d * SHARED_N + s;
            sbuf[k][0] = t_rank, sbuf[k][1] = t, sbuf[k][2] = s;
            TOK(t, MPI_Isend(sbuf[k], 3, MPI_INT, d, TAG_SHARED, MPI_COMM_WORLD, &sreq[k]));
        }
    int *last = malloc(sizeof *last * t_size * NT);
    for (int k = 0; k < t_size * NT; k++) last[k] = -1;
    for (int k = 0; k < SHARED_N * t_size; k++) {
        int in[3];
        MPI_Status st;
        TOK(t, MPI_Recv(in, 3, MPI_INT, MPI_ANY_SOURCE, TAG_SHARED, MPI_COMM_WORLD, &st));
        if (in[0] != st.MPI_SOURCE || in[0] < 0 || in[0] >= t_size || in[1] < 0 ||
            in[1] >= NT || in[2] < 0 || in[2] >= SHARED_N)
            TFAIL(t, "thread %d: bad message %d %d %d from %d", t, in[0], in[1], in[2],
                 st.MPI_SOURCE);
        int *l = &last[in[0] * NT + in[1]];
        if (in[2] <= *l)
            TFAIL(t, "thread %d: from rank %d thread %d seq %d after seq %d (order)", t, in[0],
                 in[1], in[2], *l);
        *l = in[2];
        pthread_mutex_lock(&seen_lock);
        unsigned char *c = &seen[(in[0] * NT + in[1]) * SHARED_N + in[2]];
        int dup = (*c)++;
        pthread_mutex_unlock(&seen_lock);
        if (dup) TFAIL(t, "thread %d: message %d/%d/%d received twice", t, in[0], in[1], in[2]);
    }
    TOK(t, MPI_Waitall(SHARED_N * t_size, sreq, MPI_STATUSES_IGNORE));
    free(sreq), free(sbuf), free(last);

    /* 4. collectives on this thread's communicator */
    for (int i = 0; i < 20; i++) {
        int v = t_rank + i * t, sum = -1;
        TOK(t, MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, tcomm[t]));
        int want = t_size * (t_size - 1) / 2 + t_size * i * t;
        if (sum != want) TFAIL(t, "thread %d: Allreduce gave %d, expected %d", t, sum, want);
        int b = t_rank == i % t_size ? 1000 * t + i : -1;
        TOK(t, MPI_Bcast(&b, 1, MPI_INT, i % t_size, tcomm[t]));
        if (b != 1000 * t + i) TFAIL(t, "thread %d: Bcast gave %d", t, b);
        TOK(t, MPI_Barrier(tcomm[t]));
    }

    /* 5a. Probe then Recv on this thread's tag */
    for (int i = 0; i < 10; i++) {
        int out = t * 1000 + i, in = -1, n = -1;
        MPI_Request r;
        MPI_Status st;
        TOK(t, MPI_Isend(&out, 1, MPI_INT, peer, TAG_PROBE + t, MPI_COMM_WORLD, &r));
        TOK(t, MPI_Probe(peer, TAG_PROBE + t, MPI_COMM_WORLD, &st));
        TOK(t, MPI_Get_count(&st, MPI_INT, &n));
        if (n != 1 || st.MPI_TAG != TAG_PROBE + t) TFAIL(t, "thread %d: Probe count %d", t, n);
        TOK(t, MPI_Recv(&in, 1, MPI_INT, peer, TAG_PROBE + t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        if (in != t * 1000 + i) TFAIL(t, "thread %d: Probe+Recv got %d", t, in);
        TOK(t, MPI_Wait(&r, MPI_STATUS_IGNORE));
    }
    /* 5b. Mprobe/Mrecv with ANY_TAG on a communicator all threads share (and no other
     * phase uses: the partner may already be in phase 6) */
    pthread_barrier_wait(&bar);
    for (int i = 0; i < 10; i++) {
        int out[2] = {t, i}, in[2] = {-1, -1}, n = -1;
        MPI_Request r;
        MPI_Message m;
        MPI_Status st;
        TOK(t, MPI_Isend(out, 2, MPI_INT, peer, TAG_M + t, mcomm, &r));
        TOK(t, MPI_Mprobe(peer, MPI_ANY_TAG, mcomm, &m, &st));
        TOK(t, MPI_Get_count(&st, MPI_INT, &n));
        TOK(t, MPI_Mrecv(in, 2, MPI_INT, &m, MPI_STATUS_IGNORE));
        if (n != 2 || st.MPI_TAG != TAG_M + in[0] || in[0] < 0 || in[0] >= NT || in[1] < 0)
            TFAIL(t, "thread %d: Mprobe/Mrecv got tag %d data %d %d", t, st.MPI_TAG, in[0], in[1]);
        TOK(t, MPI_Wait(&r, MPI_STATUS_IGNORE));
    }
    pthread_barrier_wait(&bar);

    /* 6. thread t posts, thread (t+1)%NT completes */
    int out[2] = {t_rank, t};
    MPI_Request sr;
    TOK(t, MPI_Irecv(handbuf[t], 2, MPI_INT, peer, TAG_HAND + t, MPI_COMM_WORLD, &handed[t]));
    pthread_barrier_wait(&bar);
    TOK(t, MPI_Isend(out, 2, MPI_INT, peer, TAG_HAND + t, MPI_COMM_WORLD, &sr));
    int o = (t + 1) % NT;
    TOK(t, MPI_Wait(&handed[o], MPI_STATUS_IGNORE));
    if (handbuf[o][0] != peer || handbuf[o][1] != o)
        TFAIL(t, "thread %d: completed thread %d's receive: %d %d", t, o, handbuf[o][0],
             handbuf[o][1]);
    TOK(t, MPI_Wait(&sr, MPI_STATUS_IGNORE));
    return NULL;
}

/* 1. blocked in Recv until the partner's workers are done. */
static int blocked_in = -1;
static void *blocker(void *arg)
{
    (void)arg;
    int t = NT;
    TOK(t, MPI_Recv(&blocked_in, 1, MPI_INT, peer, TAG_BLOCK, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    return NULL;
}

int main(int argc, char **argv)
{
    if (!t_init_multiple(&argc, &argv)) return 0;
    peer = t_partner();
    for (int t = 0; t < NT; t++) MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &tcomm[t]));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &mcomm));
    seen = calloc((size_t)t_size * NT * SHARED_N, 1);
    pthread_barrier_init(&bar, NULL, NT);
    pthread_t bl, th[NT];
    CHECK(pthread_create(&bl, NULL, blocker, NULL) == 0, "pthread_create failed");
    for (long t = 0; t < NT; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)t) == 0, "pthread_create failed");
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < NT; t++) CHECK(errmsg[t][0] == 0, "%s", errmsg[t]);
    /* The partner's workers are done too once this barrier passes; release its blocker. */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    int v = 4242;
    MPI_CHECK(MPI_Send(&v, 1, MPI_INT, peer, TAG_BLOCK, MPI_COMM_WORLD));
    pthread_join(bl, NULL);
    CHECK(errmsg[NT][0] == 0, "%s", errmsg[NT]);
    CHECK(blocked_in == 4242, "blocked Recv got %d", blocked_in);
    for (int k = 0; k < t_size * NT * SHARED_N; k++)
        CHECK(seen[k] == 1, "shared-tag message %d/%d/%d received %d times", k / (NT * SHARED_N),
              k / SHARED_N % NT, k % SHARED_N, seen[k]);
    int flag = 0;
    MPI_CHECK(MPI_Is_thread_main(&flag));
    CHECK(flag, "Is_thread_main false on the main thread");
    for (int t = 0; t < NT; t++) MPI_CHECK(MPI_Comm_free(&tcomm[t]));
    MPI_CHECK(MPI_Comm_free(&mcomm));
    free(seen);
    pthread_barrier_destroy(&bar);
    t_finish("threads_multiple");
    return 0;
}
