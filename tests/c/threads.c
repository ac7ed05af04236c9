/* np: 1 2 4 16 */
/* MPI_THREAD_SERIALIZED (asked for when the library provides at least that): four
 * threads per rank take turns calling MPI under a mutex, each exchanging its own stream
 * of messages (its own tag) with the same thread of the partner rank, completing them by
 * polling with MPI_Test so no thread blocks inside MPI while holding the mutex.
 * Is_thread_main is false on those threads. Skipped if SERIALIZED is not provided. */
#include "common.h"
#include <pthread.h>

#define NT 4
#define ITERS 200 /* 20 when oversubscribed (above 4 ranks) */

static pthread_mutex_t mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static int peer;
static char errmsg[NT][256];

static void *worker(void *arg)
{
    int t = (int)(long)arg;
    int main_flag = -1;
    pthread_mutex_lock(&mpi_lock);
    MPI_Is_thread_main(&main_flag);
    pthread_mutex_unlock(&mpi_lock);
    if (main_flag != 0) {
        snprintf(errmsg[t], sizeof errmsg[t], "thread %d: Is_thread_main says %d", t, main_flag);
        return NULL;
    }
    int iters = t_size > 4 ? ITERS / 10 : ITERS;
    for (int i = 0; i < iters; i++) {
        int out[2] = {t_rank * 100 + t, i}, in[2] = {-1, -1};
        MPI_Request rq[2];
        int flag = 0;
        pthread_mutex_lock(&mpi_lock);
        MPI_Irecv(in, 2, MPI_INT, peer, t, MPI_COMM_WORLD, &rq[0]);
        MPI_Isend(out, 2, MPI_INT, peer, t, MPI_COMM_WORLD, &rq[1]);
        pthread_mutex_unlock(&mpi_lock);
        while (!flag) {
            pthread_mutex_lock(&mpi_lock);
            int rc = MPI_Testall(2, rq, &flag, MPI_STATUSES_IGNORE);
            pthread_mutex_unlock(&mpi_lock);
            if (rc != MPI_SUCCESS) {
                snprintf(errmsg[t], sizeof errmsg[t], "thread %d: Testall returned %d", t, rc);
                return NULL;
            }
        }
        if (in[0] != peer * 100 + t || in[1] != i) {
            snprintf(errmsg[t], sizeof errmsg[t], "thread %d iteration %d: got %d %d, expected "
                     "%d %d", t, i, in[0], in[1], peer * 100 + t, i);
            return NULL;
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = -1;
    MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &t_rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &t_size));
    if (provided < MPI_THREAD_SERIALIZED) {
        CHECK(!t_expect_ferrite(), "Ferrite provides thread level %d, below "
              "MPI_THREAD_SERIALIZED", provided);
        MPI_CHECK(MPI_Finalize());
        if (t_rank == 0) printf("skipped: MPI_THREAD_SERIALIZED not provided (%d)\n", provided);
        return 0;
    }
    peer = t_partner();
    pthread_t th[NT];
    for (long t = 0; t < NT; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)t) == 0, "pthread_create failed");
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < NT; t++) CHECK(errmsg[t][0] == 0, "%s", errmsg[t]);
    int flag = 0;
    MPI_CHECK(MPI_Is_thread_main(&flag));
    CHECK(flag, "Is_thread_main false on the main thread");
    t_finish("threads");
    return 0;
}
