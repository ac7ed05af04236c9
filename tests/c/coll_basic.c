/* np: 1 2 3 4 5 8 16 */
/* Every blocking collective against a serial computation, with every algorithm Ferrite can
 * be forced to use (FERRITE_COLL_<NAME>_ALGO set with setenv between calls, then
 * FERRITE_Coll_reload_knobs; other MPIs ignore them), at small, large and zero counts, with
 * MPI_IN_PLACE where the standard allows it, and on a communicator with a different rank
 * order (so roots and neighbours are not world ranks). */
#include "common.h"

static int val(int rank, int i) { return rank * 1000 + i * 3 + 1; }

/* Ferrite reads its FERRITE_COLL_* knobs once; this makes it read them again (weak: absent
 * from other MPIs, which ignore the knobs). */
int FERRITE_Coll_reload_knobs(void) __attribute__((weak));
static void set_knob(const char *knob, const char *v)
{
    if (v) setenv(knob, v, 1);
    else unsetenv(knob);
    if (FERRITE_Coll_reload_knobs) MPI_CHECK(FERRITE_Coll_reload_knobs());
}
static void set_algo(const char *knob, const char *v) { set_knob(knob, v); }

static int me, np;
static MPI_Comm comm;

static void check_bcast(int n)
{
    int *b = malloc(sizeof(int) * (n + 1));
    for (int root = 0; root < np; root += (np > 3 ? np / 3 : 1)) {
        for (int i = 0; i < n; i++) b[i] = me == root ? val(root, i) : -1;
        MPI_CHECK(MPI_Bcast(b, n, MPI_INT, root, comm));
        for (int i = 0; i < n; i++)
            CHECK(b[i] == val(root, i), "bcast n=%d root=%d: b[%d]=%d want %d", n, root, i, b[i],
                  val(root, i));
    }
    free(b);
}

static void check_allreduce(int n)
{
    int *s = malloc(sizeof(int) * (n + 1)), *r = malloc(sizeof(int) * (n + 1));
    for (int i = 0; i < n; i++) s[i] = val(me, i);
    MPI_CHECK(MPI_Allreduce(s, r, n, MPI_INT, MPI_SUM, comm));
    for (int i = 0; i < n; i++) {
        int want = 0;
        for (int k = 0; k < np; k++) want += val(k, i);
        CHECK(r[i] == want, "allreduce n=%d: r[%d]=%d want %d", n, i, r[i], want);
    }
    /* in place, MAX */
    for (int i = 0; i < n; i++) r[i] = val(me, i) * ((me + i) % 3 == 0 ? -1 : 1);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, r, n, MPI_INT, MPI_MAX, comm));
    for (int i = 0; i < n; i++) {
        int want = -2147483647;
        for (int k = 0; k < np; k++) {
            int v = val(k, i) * ((k + i) % 3 == 0 ? -1 : 1);
            if (v > want) want = v;
        }
        CHECK(r[i] == want, "allreduce in place max n=%d: r[%d]=%d want %d", n, i, r[i], want);
    }
    free(s);
    free(r);
}

static void check_reduce(int n)
{
    int *s = malloc(sizeof(int) * (n + 1)), *r = malloc(sizeof(int) * (n + 1));
    for (int root = 0; root < np; root += (np > 3 ? np / 3 : 1)) {
        for (int i = 0; i < n; i++) s[i] = val(me, i);
        for (int i = 0; i < n; i++) r[i] = -7;
        /* In place only at root 0: Debian's MPICH 4.0 crashes on an in-place Reduce of
         * 3000 ints at a nonzero root with 3 ranks (tests/c must pass on MPICH too). */
        int inplace = root == 0;
        if (inplace && me == root) memcpy(r, s, sizeof(int) * n);
        MPI_CHECK(MPI_Reduce(inplace && me == root ? MPI_IN_PLACE : s, r, n, MPI_INT, MPI_SUM,
                             root, comm));
        for (int i = 0; i < n; i++) {
            int want = 0;
            for (int k = 0; k < np; k++) want += val(k, i);
            if (me == root)
                CHECK(r[i] == want, "reduce n=%d root=%d: r[%d]=%d want %d", n, root, i, r[i],
                      want);
            else
                CHECK(r[i] == -7, "reduce wrote the receive buffer of a non-root");
        }
    }
    free(s);
    free(r);
}

static void check_gather_scatter(int n)
{
    int *s = malloc(sizeof(int) * (n + 1)), *r = malloc(sizeof(int) * (n * np + 1));
    int *cnt = malloc(sizeof(int) * np), *dis = malloc(sizeof(int) * np);
    for (int root = 0; root < np; root += (np > 3 ? np / 3 : 1)) {
        int inplace = root % 2 == 1;
        for (int i = 0; i < n; i++) s[i] = val(me, i);
        for (int i = 0; i < n * np; i++) r[i] = -1;
        if (inplace && me == root) memcpy(r + root * n, s, sizeof(int) * n);
        MPI_CHECK(MPI_Gather(inplace && me == root ? MPI_IN_PLACE : s, n, MPI_INT, r, n,
                             MPI_INT, root, comm));
        if (me == root)
            for (int k = 0; k < np; k++)
                for (int i = 0; i < n; i++)
                    CHECK(r[k * n + i] == val(k, i), "gather n=%d root=%d: from %d [%d]=%d", n,
                          root, k, i, r[k * n + i]);
        /* scatter back the same blocks */
        for (int i = 0; i < n; i++) s[i] = -1;
        if (inplace && me == root) {
            MPI_CHECK(MPI_Scatter(r, n, MPI_INT, MPI_IN_PLACE, n, MPI_INT, root, comm));
        } else {
            MPI_CHECK(MPI_Scatter(r, n, MPI_INT, s, n, MPI_INT, root, comm));
            for (int i = 0; i < n; i++)
                CHECK(s[i] == val(me, i), "scatter n=%d root=%d: [%d]=%d", n, root, i, s[i]);
        }
        /* v-forms: rank k contributes k % 3 * n elements, stored in reverse rank order */
        int tot = 0;
        for (int k = np - 1; k >= 0; k--) {
            cnt[k] = (k % 3) * n / 2;
            dis[k] = tot;
            tot += cnt[k];
        }
        int *rv = malloc(sizeof(int) * (tot + 1)), *sv = malloc(sizeof(int) * (n * 2 + 1));
        for (int i = 0; i < cnt[me]; i++) sv[i] = val(me, i);
        for (int i = 0; i < tot; i++) rv[i] = -1;
        MPI_CHECK(MPI_Gatherv(sv, cnt[me], MPI_INT, rv, cnt, dis, MPI_INT, root, comm));
        if (me == root)
            for (int k = 0; k < np; k++)
                for (int i = 0; i < cnt[k]; i++)
                    CHECK(rv[dis[k] + i] == val(k, i), "gatherv root=%d from %d [%d]", root, k,
                          i);
        for (int i = 0; i < cnt[me]; i++) sv[i] = -1;
        MPI_CHECK(MPI_Scatterv(rv, cnt, dis, MPI_INT, sv, cnt[me], MPI_INT, root, comm));
        for (int i = 0; i < cnt[me]; i++)
            CHECK(sv[i] == val(me, i), "scatterv root=%d [%d]=%d", root, i, sv[i]);
        /* allgatherv with the same layout, in place on odd roots */
        for (int i = 0; i < tot; i++) rv[i] = -1;
        if (inplace) {
            for (int i = 0; i < cnt[me]; i++) rv[dis[me] + i] = val(me, i);
            MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_INT, rv, cnt, dis, MPI_INT, comm));
        } else {
            for (int i = 0; i < cnt[me]; i++) sv[i] = val(me, i);
            MPI_CHECK(MPI_Allgatherv(sv, cnt[me], MPI_INT, rv, cnt, dis, MPI_INT, comm));
        }
        for (int k = 0; k < np; k++)
            for (int i = 0; i < cnt[k]; i++)
                CHECK(rv[dis[k] + i] == val(k, i), "allgatherv from %d [%d]=%d", k, i,
                      rv[dis[k] + i]);
        free(rv);
        free(sv);
    }
    free(s);
    free(r);
    free(cnt);
    free(dis);
}

static void check_allgather(int n)
{
    int *s = malloc(sizeof(int) * (n + 1)), *r = malloc(sizeof(int) * (n * np + 1));
    for (int ip = 0; ip < 2; ip++) {
        for (int i = 0; i < n; i++) s[i] = val(me, i);
        for (int i = 0; i < n * np; i++) r[i] = -1;
        if (ip) memcpy(r + me * n, s, sizeof(int) * n);
        MPI_CHECK(MPI_Allgather(ip ? MPI_IN_PLACE : s, n, MPI_INT, r, n, MPI_INT, comm));
        for (int k = 0; k < np; k++)
            for (int i = 0; i < n; i++)
                CHECK(r[k * n + i] == val(k, i), "allgather n=%d ip=%d: from %d [%d]=%d", n, ip,
                      k, i, r[k * n + i]);
    }
    free(s);
    free(r);
}

static int a2a(int from, int to, int i) { return from * 100000 + to * 100 + i; }

static void check_alltoall(int n)
{
    int *s = malloc(sizeof(int) * (n * np + 1)), *r = malloc(sizeof(int) * (n * np + 1));
    for (int ip = 0; ip < 2; ip++) {
        for (int k = 0; k < np; k++)
            for (int i = 0; i < n; i++) s[k * n + i] = a2a(me, k, i);
        if (ip) {
            memcpy(r, s, sizeof(int) * n * np);
            MPI_CHECK(MPI_Alltoall(MPI_IN_PLACE, n, MPI_INT, r, n, MPI_INT, comm));
        } else {
            MPI_CHECK(MPI_Alltoall(s, n, MPI_INT, r, n, MPI_INT, comm));
        }
        for (int k = 0; k < np; k++)
            for (int i = 0; i < n; i++)
                CHECK(r[k * n + i] == a2a(k, me, i), "alltoall n=%d ip=%d: from %d [%d]=%d", n,
                      ip, k, i, r[k * n + i]);
    }
    /* alltoallv: rank a sends (a + b) % 3 * n / 2 elements to b, at reversed offsets */
    int *sc = malloc(sizeof(int) * np), *sd = malloc(sizeof(int) * np);
    int *rc = malloc(sizeof(int) * np), *rd = malloc(sizeof(int) * np);
    int st = 0, rt = 0;
    for (int k = np - 1; k >= 0; k--) {
        sc[k] = (me + k) % 3 * n / 2;
        sd[k] = st;
        st += sc[k];
        rc[k] = (k + me) % 3 * n / 2;
        rd[k] = rt;
        rt += rc[k];
    }
    int *sv = malloc(sizeof(int) * (st + 1)), *rv = malloc(sizeof(int) * (rt + 1));
    for (int k = 0; k < np; k++)
        for (int i = 0; i < sc[k]; i++) sv[sd[k] + i] = a2a(me, k, i);
    MPI_CHECK(MPI_Alltoallv(sv, sc, sd, MPI_INT, rv, rc, rd, MPI_INT, comm));
    for (int k = 0; k < np; k++)
        for (int i = 0; i < rc[k]; i++)
            CHECK(rv[rd[k] + i] == a2a(k, me, i), "alltoallv from %d [%d]", k, i);
    /* alltoallw with byte displacements and the same layout */
    int *sdb = malloc(sizeof(int) * np), *rdb = malloc(sizeof(int) * np);
    MPI_Datatype *ty = malloc(sizeof(MPI_Datatype) * np);
    for (int k = 0; k < np; k++) {
        sdb[k] = sd[k] * (int)sizeof(int);
        rdb[k] = rd[k] * (int)sizeof(int);
        ty[k] = MPI_INT;
    }
    for (int i = 0; i < rt; i++) rv[i] = -1;
    MPI_CHECK(MPI_Alltoallw(sv, sc, sdb, ty, rv, rc, rdb, ty, comm));
    for (int k = 0; k < np; k++)
        for (int i = 0; i < rc[k]; i++)
            CHECK(rv[rd[k] + i] == a2a(k, me, i), "alltoallw from %d [%d]", k, i);
    free(sv), free(rv), free(sc), free(sd), free(rc), free(rd), free(sdb), free(rdb), free(ty);
    free(s);
    free(r);
}

static void check_scan_rs(int n)
{
    int *s = malloc(sizeof(int) * (n * np + 1)), *r = malloc(sizeof(int) * (n * np + 1));
    for (int i = 0; i < n; i++) s[i] = val(me, i);
    MPI_CHECK(MPI_Scan(s, r, n, MPI_INT, MPI_SUM, comm));
    for (int i = 0; i < n; i++) {
        int want = 0;
        for (int k = 0; k <= me; k++) want += val(k, i);
        CHECK(r[i] == want, "scan n=%d [%d]=%d want %d", n, i, r[i], want);
    }
    for (int i = 0; i < n; i++) r[i] = val(me, i);
    MPI_CHECK(MPI_Exscan(MPI_IN_PLACE, r, n, MPI_INT, MPI_SUM, comm));
    if (me > 0)
        for (int i = 0; i < n; i++) {
            int want = 0;
            for (int k = 0; k < me; k++) want += val(k, i);
            CHECK(r[i] == want, "exscan n=%d [%d]=%d want %d", n, i, r[i], want);
        }
    /* reduce_scatter_block: element j of rank k is val(k, j) */
    for (int j = 0; j < n * np; j++) s[j] = val(me, j);
    MPI_CHECK(MPI_Reduce_scatter_block(s, r, n, MPI_INT, MPI_SUM, comm));
    for (int i = 0; i < n; i++) {
        int want = 0;
        for (int k = 0; k < np; k++) want += val(k, me * n + i);
        CHECK(r[i] == want, "reduce_scatter_block n=%d [%d]=%d want %d", n, i, r[i], want);
    }
    /* reduce_scatter with counts k % 2 * n, in place */
    int *cnt = malloc(sizeof(int) * np), tot = 0, off = 0;
    for (int k = 0; k < np; k++) {
        cnt[k] = k % 2 * n;
        if (k < me) off += cnt[k];
        tot += cnt[k];
    }
    for (int j = 0; j < tot; j++) s[j] = val(me, j);
    MPI_CHECK(MPI_Reduce_scatter(MPI_IN_PLACE, s, cnt, MPI_INT, MPI_SUM, comm));
    for (int i = 0; i < cnt[me]; i++) {
        int want = 0;
        for (int k = 0; k < np; k++) want += val(k, off + i);
        CHECK(s[i] == want, "reduce_scatter in place [%d]=%d want %d", i, s[i], want);
    }
    free(cnt);
    free(s);
    free(r);
}

/* Derived datatypes: the root sends a strided vector, the others receive contiguous ints
 * (same type signature); allgather into a resized vector (every other int of the buffer);
 * alltoall with a struct type. */
static void check_derived(void)
{
    MPI_Datatype vec, every_other, pair;
    MPI_CHECK(MPI_Type_vector(5, 1, 3, MPI_INT, &vec));
    MPI_CHECK(MPI_Type_commit(&vec));
    MPI_Datatype tmp;
    MPI_CHECK(MPI_Type_vector(1, 1, 1, MPI_INT, &tmp));
    MPI_CHECK(MPI_Type_create_resized(tmp, 0, 2 * sizeof(int), &every_other));
    MPI_CHECK(MPI_Type_commit(&every_other));
    MPI_CHECK(MPI_Type_free(&tmp));
    int bl[2] = {1, 1};
    MPI_Aint dp[2] = {0, 8};
    MPI_Datatype ts[2] = {MPI_INT, MPI_DOUBLE};
    MPI_CHECK(MPI_Type_create_struct(2, bl, dp, ts, &pair));
    MPI_CHECK(MPI_Type_commit(&pair));

    int big[15 * 2], flat[10];
    for (int root = 0; root < np; root += np > 1 ? np - 1 : 1) {
        for (int i = 0; i < 30; i++) big[i] = me == root ? i * 7 : -1;
        for (int i = 0; i < 10; i++) flat[i] = -1;
        if (me == root)
            MPI_CHECK(MPI_Bcast(big, 2, vec, root, comm));
        else
            MPI_CHECK(MPI_Bcast(flat, 10, MPI_INT, root, comm));
        if (me != root)
            for (int j = 0; j < 10; j++) {
                int want = (j / 5) * 13 * 7 + (j % 5) * 3 * 7; /* vec extent: 13 ints */
                CHECK(flat[j] == want, "bcast vector->ints root=%d [%d]=%d want %d", root, j,
                      flat[j], want);
            }
    }
    int *ag = malloc(sizeof(int) * 2 * np);
    for (int i = 0; i < 2 * np; i++) ag[i] = -9;
    int mine = me * 11 + 1;
    MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT, ag, 1, every_other, comm));
    for (int k = 0; k < np; k++) {
        CHECK(ag[2 * k] == k * 11 + 1, "allgather resized [%d]", k);
        CHECK(ag[2 * k + 1] == -9, "allgather resized wrote a gap [%d]", k);
    }
    struct {
        int i;
        int pad;
        double d;
    } *ps = malloc(sizeof *ps * np), *pr = malloc(sizeof *pr * np);
    for (int k = 0; k < np; k++) ps[k].i = me * 100 + k, ps[k].d = me + k / 4.0, pr[k].i = -1;
    MPI_CHECK(MPI_Alltoall(ps, 1, pair, pr, 1, pair, comm));
    for (int k = 0; k < np; k++)
        CHECK(pr[k].i == k * 100 + me && pr[k].d == k + me / 4.0, "alltoall struct from %d", k);
    free(ag), free(ps), free(pr);
    MPI_CHECK(MPI_Type_free(&vec));
    MPI_CHECK(MPI_Type_free(&every_other));
    MPI_CHECK(MPI_Type_free(&pair));
}

static void all_checks(void)
{
    int sizes[] = {0, 1, 7, 3000};
    for (unsigned z = 0; z < sizeof sizes / sizeof *sizes; z++) {
        int n = sizes[z];
        MPI_CHECK(MPI_Barrier(comm));
        check_bcast(n);
        check_allreduce(n);
        check_reduce(n);
        check_gather_scatter(n);
        check_allgather(n);
        check_alltoall(n > 100 ? 100 : n);
        check_scan_rs(n > 100 ? 100 : n);
    }
    check_derived();
    /* zero counts with null buffers */
    MPI_CHECK(MPI_Bcast(NULL, 0, MPI_INT, 0, comm));
    MPI_CHECK(MPI_Allreduce(NULL, NULL, 0, MPI_INT, MPI_SUM, comm));
    MPI_CHECK(MPI_Allgather(NULL, 0, MPI_INT, NULL, 0, MPI_INT, comm));
    MPI_CHECK(MPI_Alltoall(NULL, 0, MPI_INT, NULL, 0, MPI_INT, comm));
    MPI_CHECK(MPI_Reduce_local(NULL, NULL, 0, MPI_INT, MPI_SUM));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    /* Reverse the rank order so communicator ranks differ from world ranks. */
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, 0, t_size - t_rank, &comm));
    MPI_CHECK(MPI_Comm_rank(comm, &me));
    MPI_CHECK(MPI_Comm_size(comm, &np));
    const char *combos[][5] = {
        /* bcast, allreduce, allgather, alltoall, reduce */
        {"auto", "auto", "auto", "auto", "auto"},
        {"binomial", "recursive_doubling", "bruck", "bruck", "binomial"},
        {"scatter_allgather", "rabenseifner", "ring", "pairwise", "rabenseifner"},
        /* shared memory (coll/shm.rs; sizes above FERRITE_COLL_SHM_MAX fall back) */
        {"shm", "shm", "shm", "shm", "shm"},
    };
    for (unsigned c = 0; c < sizeof combos / sizeof *combos; c++) {
        set_algo("FERRITE_COLL_BCAST_ALGO", combos[c][0]);
        set_algo("FERRITE_COLL_ALLREDUCE_ALGO", combos[c][1]);
        set_algo("FERRITE_COLL_ALLGATHER_ALGO", combos[c][2]);
        set_algo("FERRITE_COLL_ALLTOALL_ALGO", combos[c][3]);
        set_algo("FERRITE_COLL_REDUCE_ALGO", combos[c][4]);
        set_algo("FERRITE_COLL_BARRIER_ALGO", strcmp(combos[c][0], "shm") ? "auto" : "shm");
        set_algo("FERRITE_COLL_GATHER_ALGO", strcmp(combos[c][0], "shm") ? "auto" : "shm");
        set_algo("FERRITE_COLL_SCATTER_ALGO", strcmp(combos[c][0], "shm") ? "auto" : "shm");
        all_checks();
    }
    MPI_CHECK(MPI_Comm_free(&comm));
    if (t_size >= 2) {
        /* Intercommunicator barrier (both groups take part), blocking and nonblocking. */
        MPI_Comm half, inter;
        int color = t_rank < t_size / 2;
        MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, 0, &half));
        MPI_CHECK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, color ? t_size / 2 : 0, 7,
                                       &inter));
        MPI_Request rq;
        for (int i = 0; i < 3; i++) {
            MPI_CHECK(MPI_Barrier(inter));
            MPI_CHECK(MPI_Ibarrier(inter, &rq));
            MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        }
        MPI_CHECK(MPI_Comm_free(&inter));
        MPI_CHECK(MPI_Comm_free(&half));
    }
    t_finish("coll_basic");
    return 0;
}
