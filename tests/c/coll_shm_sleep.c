/* np: 4 7 */
/* Shared-memory collectives (coll/shm.rs, forced with FERRITE_COLL_*_ALGO=shm; other MPIs
 * ignore the knobs) back to back while one rank at a time lags behind, so the others wait
 * long enough to fall asleep: on the condition's futex gate when the process has nothing
 * else in flight, in the epoll set (rung by datagram) while a request is outstanding. Every
 * kind (Barrier, Bcast, Reduce, Allreduce, Allgather, Gather, Scatter, Alltoall), sizes from
 * 1 B to 1 KiB and roots drawn by a generator all ranks share, on the world and on a
 * reversed half; every result is checked. The last phase keeps a rendezvous-size
 * Irecv/Isend pair open across the collectives (each rank must still serve it). */
#include "common.h"
#include <time.h>

int FERRITE_Coll_reload_knobs(void) __attribute__((weak));

static unsigned long long rng = 88172645463325252ULL;
static unsigned next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng >> 11);
}

static unsigned char val(int rank, int k, int i, int it) { return (unsigned char)(rank * 31 + k * 7 + i * 3 + it); }

static void nap(long us)
{
    struct timespec t = {0, us * 1000};
    nanosleep(&t, NULL);
}

/* One collective of kind `kind`, `len` bytes per block, root `root`, checked. */
static void one(MPI_Comm comm, int kind, int len, int root, int it)
{
    int me, n;
    MPI_CHECK(MPI_Comm_rank(comm, &me));
    MPI_CHECK(MPI_Comm_size(comm, &n));
    unsigned char *a = malloc((size_t)len * n + 1), *b = malloc((size_t)len * n + 1);
    int *x = malloc(sizeof(int) * (len / 4 + 1)), *y = malloc(sizeof(int) * (len / 4 + 1));
    int ni = len / 4 > 0 ? len / 4 : 1;
    switch (kind) {
    case 0:
        MPI_CHECK(MPI_Barrier(comm));
        break;
    case 1:
        for (int i = 0; i < len; i++) a[i] = me == root ? val(root, 0, i, it) : 0xee;
        MPI_CHECK(MPI_Bcast(a, len, MPI_BYTE, root, comm));
        for (int i = 0; i < len; i++) CHECK(a[i] == val(root, 0, i, it), "it %d bcast %d B root %d [%d]", it, len, root, i);
        break;
    case 2:
    case 3:
        for (int i = 0; i < ni; i++) x[i] = me * 1000 + i + it, y[i] = -1;
        if (kind == 2) MPI_CHECK(MPI_Reduce(x, y, ni, MPI_INT, MPI_SUM, root, comm));
        else MPI_CHECK(MPI_Allreduce(x, y, ni, MPI_INT, MPI_SUM, comm));
        if (kind == 3 || me == root)
            for (int i = 0; i < ni; i++)
                CHECK(y[i] == 1000 * n * (n - 1) / 2 + n * (i + it), "it %d %s %d ints root %d [%d] = %d", it,
                      kind == 2 ? "reduce" : "allreduce", ni, root, i, y[i]);
        break;
    case 4:
    case 5:
        for (int i = 0; i < len; i++) a[i] = val(me, 1, i, it);
        memset(b, 0xee, (size_t)len * n);
        if (kind == 4) MPI_CHECK(MPI_Allgather(a, len, MPI_BYTE, b, len, MPI_BYTE, comm));
        else MPI_CHECK(MPI_Gather(a, len, MPI_BYTE, b, len, MPI_BYTE, root, comm));
        if (kind == 4 || me == root)
            for (int r = 0; r < n; r++)
                for (int i = 0; i < len; i++)
                    CHECK(b[r * len + i] == val(r, 1, i, it), "it %d %s %d B root %d from %d [%d]", it,
                          kind == 4 ? "allgather" : "gather", len, root, r, i);
        break;
    case 6:
        for (int r = 0; r < n; r++)
            for (int i = 0; i < len; i++) a[r * len + i] = val(root, r, i, it);
        memset(b, 0xee, len);
        MPI_CHECK(MPI_Scatter(a, len, MPI_BYTE, b, len, MPI_BYTE, root, comm));
        for (int i = 0; i < len; i++) CHECK(b[i] == val(root, me, i, it), "it %d scatter %d B root %d [%d]", it, len, root, i);
        break;
    default:
        for (int r = 0; r < n; r++)
            for (int i = 0; i < len; i++) a[r * len + i] = val(me, r, i, it);
        memset(b, 0xee, (size_t)len * n);
        MPI_CHECK(MPI_Alltoall(a, len, MPI_BYTE, b, len, MPI_BYTE, comm));
        for (int r = 0; r < n; r++)
            for (int i = 0; i < len; i++)
                CHECK(b[r * len + i] == val(r, me, i, it), "it %d alltoall %d B from %d [%d]", it, len, r, i);
    }
    free(a), free(b), free(x), free(y);
}

/* `iters` collectives on `comm`; the rank drawn to lag sleeps first (the others wait). */
static void series(MPI_Comm comm, int iters, int first)
{
    int me, n;
    MPI_CHECK(MPI_Comm_rank(comm, &me));
    MPI_CHECK(MPI_Comm_size(comm, &n));
    for (int it = first; it < first + iters; it++) {
        unsigned r = next();
        int kind = r % 8, root = (r >> 3) % n, lag = (r >> 8) % n;
        int len = 1 << ((r >> 12) % 11); /* 1 B .. 1 KiB */
        if ((r >> 16) % 3 == 0 && me == lag) nap(100 + (r >> 18) % 900);
        one(comm, kind, len, root, it);
    }
}

int main(int argc, char **argv)
{
    const char *knobs[] = {"FERRITE_COLL_BARRIER_ALGO", "FERRITE_COLL_BCAST_ALGO",
                           "FERRITE_COLL_REDUCE_ALGO", "FERRITE_COLL_ALLREDUCE_ALGO",
                           "FERRITE_COLL_ALLGATHER_ALGO", "FERRITE_COLL_GATHER_ALGO",
                           "FERRITE_COLL_SCATTER_ALGO", "FERRITE_COLL_ALLTOALL_ALGO"};
    for (unsigned k = 0; k < sizeof knobs / sizeof *knobs; k++) setenv(knobs[k], "shm", 1);
    setenv("FERRITE_COLL_SHM_MAX", "4096", 1);
    t_init(&argc, &argv);
    if (FERRITE_Coll_reload_knobs) MPI_CHECK(FERRITE_Coll_reload_knobs());
    MPI_Comm half;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, t_rank < (t_size + 1) / 2, -t_rank, &half));

    /* Nothing else in flight: waiters may sleep on the futex gates. */
    series(MPI_COMM_WORLD, 300, 0);
    series(half, 150, 300);
    series(MPI_COMM_WORLD, 150, 450);

    /* A request outstanding across the collectives: waiters sleep in the epoll set, and
     * the rendezvous transfer goes on (or completes at the Waitall). */
    enum { BIG = 200000 };
    char *out = malloc(BIG), *in = malloc(BIG);
    for (int i = 0; i < BIG; i++) out[i] = (char)(i * 13 + t_rank);
    int right = (t_rank + 1) % t_size, left = (t_rank + t_size - 1) % t_size;
    MPI_Request rq[2];
    MPI_CHECK(MPI_Irecv(in, BIG, MPI_CHAR, left, 5, MPI_COMM_WORLD, &rq[0]));
    MPI_CHECK(MPI_Isend(out, BIG, MPI_CHAR, right, 5, MPI_COMM_WORLD, &rq[1]));
    series(MPI_COMM_WORLD, 200, 600);
    MPI_CHECK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
    for (int i = 0; i < BIG; i++) CHECK(in[i] == (char)(i * 13 + left), "rendezvous [%d]", i);
    series(MPI_COMM_WORLD, 100, 800);

    free(out), free(in);
    MPI_CHECK(MPI_Comm_free(&half));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 0) printf("done: coll_shm_sleep\n");
    MPI_CHECK(MPI_Finalize());
    return 0;
}
