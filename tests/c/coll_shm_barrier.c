/* np: 1 2 3 4 16 */
/* Barrier and Bcast over many iterations (150; 60 above 4 ranks), in each shared-memory
 * Barrier form Ferrite has (FERRITE_COLL_BARRIER_ALGO: shm picks by ranks per CPU, shm_flat,
 * shm_release, shm_last; other MPIs ignore the knobs), on communicators made after each form
 * is chosen (the form is fixed when a communicator's segment is made):
 * - no rank leaves a Barrier before every rank entered it: before Barrier i each rank
 *   stores i+1 into its word of a shared window (the host's ranks; a late rank, changing
 *   every iteration, first spins a while), and after it every rank must see i+1 or more
 *   in every word;
 * - no Bcast reads stale data: the value changes every iteration, the root rotates, the
 *   size crosses the inline limit (1 to 40 ints), back to back with Barriers as OSU runs
 *   them and without (Bcast after Bcast reuses buffers of both parities). */
#include "common.h"

int FERRITE_Coll_reload_knobs(void) __attribute__((weak));

/* Iterations per form (fewer when oversubscribed: over tcp, -n 16 took 14-20 s with 400
 * at load 24); the late rank and the 40 counts come round within them. */
enum { ITERS = 150, ITERS_BIG = 60, MAXC = 40 };

static void spin(int units)
{
    volatile unsigned long x = 0;
    for (int i = 0; i < units * 2000; i++) x += (unsigned long)i;
}

static void run(MPI_Comm comm, volatile long long *words, int lme, int ln)
{
    int me, n;
    MPI_CHECK(MPI_Comm_rank(comm, &me));
    MPI_CHECK(MPI_Comm_size(comm, &n));
    int buf[MAXC], iters = n > 4 ? ITERS_BIG : ITERS;
    for (int i = 0; i < iters; i++) {
        int late = (i * 7 + i / 5) % n;
        if (me == late) spin(1 + i % 3);
        __atomic_store_n(&words[lme], (long long)i + 1, __ATOMIC_SEQ_CST);
        MPI_CHECK(MPI_Barrier(comm));
        for (int q = 0; q < ln; q++) {
            long long w = __atomic_load_n(&words[q], __ATOMIC_SEQ_CST);
            CHECK(w >= i + 1, "iteration %d: left the Barrier while local rank %d had not "
                  "entered it (its word %lld)", i, q, w);
        }
        /* Bcast with a new value, a rotating root, sizes across the inline limit. */
        int cnt = 1 + (i * 13) % MAXC, root = (i / 2) % n;
        for (int k = 0; k < MAXC; k++) buf[k] = me == root ? i * 1000 + k : -1;
        MPI_CHECK(MPI_Bcast(buf, cnt, MPI_INT, root, comm));
        for (int k = 0; k < MAXC; k++) {
            int want = k < cnt || me == root ? i * 1000 + k : -1;
            CHECK(buf[k] == want, "iteration %d (root %d, count %d): buf[%d] = %d, want %d",
                  i, root, cnt, k, buf[k], want);
        }
        if (i % 3 == 0) {
            /* A second Bcast straight after (no Barrier between), from another root. */
            int r2 = (root + 1) % n, v = me == r2 ? -i : 7;
            MPI_CHECK(MPI_Bcast(&v, 1, MPI_INT, r2, comm));
            CHECK(v == -i, "iteration %d: second Bcast gave %d, want %d", i, v, -i);
        }
    }
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_Comm local;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                                  &local));
    int lme, ln;
    MPI_CHECK(MPI_Comm_rank(local, &lme));
    MPI_CHECK(MPI_Comm_size(local, &ln));
    long long *mine;
    MPI_Win win;
    MPI_CHECK(MPI_Win_allocate_shared(lme == 0 ? (MPI_Aint)(ln * sizeof(long long)) : 0,
                                      sizeof(long long), MPI_INFO_NULL, local, &mine, &win));
    MPI_Aint sz;
    int du;
    long long *words;
    MPI_CHECK(MPI_Win_shared_query(win, 0, &sz, &du, &words));
    const char *forms[] = {"shm", "shm_flat", "shm_release", "shm_last"};
    int nforms = FERRITE_Coll_reload_knobs ? 4 : 1;
    for (int f = 0; f < nforms; f++) {
        if (FERRITE_Coll_reload_knobs) {
            setenv("FERRITE_COLL_BARRIER_ALGO", forms[f], 1);
            setenv("FERRITE_COLL_BCAST_ALGO", "shm", 1);
            MPI_CHECK(FERRITE_Coll_reload_knobs());
        }
        MPI_Comm comm;
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
        MPI_CHECK(MPI_Win_lock_all(0, win));
        for (int q = 0; q < ln; q++)
            if (q == lme) __atomic_store_n(&words[q], 0LL, __ATOMIC_SEQ_CST);
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        run(comm, words, lme, ln);
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        MPI_CHECK(MPI_Win_unlock_all(win));
        MPI_CHECK(MPI_Comm_free(&comm));
    }
    MPI_CHECK(MPI_Win_free(&win));
    MPI_CHECK(MPI_Comm_free(&local));
    t_finish("coll_shm_barrier");
    return 0;
}
