/* np: 2 3 4 5 8 */
/* Intercommunicator collectives (MPI 4.1 6.2.2): world split into two unequal groups
 * (A: the first size - size/3 world ranks, B: the rest in reverse order), joined by
 * MPI_Intercomm_create. Every rooted collective with the root in each group (MPI_ROOT at
 * the root, MPI_PROC_NULL in the rest of its group, whose buffers must stay untouched),
 * every all-to-all form and the reductions (each group gets the reduction of the OTHER
 * group's data), checked against values computed here; then nonblocking forms outstanding
 * together and a persistent Allreduce started twice. */
#include "common.h"

static int g, me, ln, rn; /* group id (0 = A), local rank, local size, remote size */

static int val(int grp, int r, int i) { return 100000 * grp + 1000 * r + i + 7; }

#define BIG 4096
static int sbuf[BIG], rbuf[BIG];
static int scnt[64], sdsp[64], rcnt[64], rdsp[64];
static MPI_Datatype stypes[64], rtypes[64];

static void fill_r(void)
{
    for (int i = 0; i < BIG; i++) rbuf[i] = -1;
}

static void rooted(MPI_Comm inter, int rg)
{
    int og = 1 - g;
    int rootsz = rg == g ? ln : rn;
    int root_rank = rootsz - 1;
    int is_root_grp = rg == g;
    int root = is_root_grp ? (me == root_rank ? MPI_ROOT : MPI_PROC_NULL) : root_rank;
    int idle = root == MPI_PROC_NULL;

    /* Bcast */
    fill_r();
    if (root == MPI_ROOT)
        for (int i = 0; i < 5; i++) rbuf[i] = val(g, me, i);
    MPI_CHECK(MPI_Bcast(rbuf, 5, MPI_INT, root, inter));
    for (int i = 0; i < 5; i++) {
        int want = root == MPI_ROOT ? val(g, me, i) : idle ? -1 : val(og, root_rank, i);
        CHECK(rbuf[i] == want, "bcast rg %d: [%d] = %d, want %d", rg, i, rbuf[i], want);
    }

    /* Gather: 3 ints from each leaf */
    fill_r();
    for (int i = 0; i < 3; i++) sbuf[i] = val(g, me, i);
    MPI_CHECK(MPI_Gather(sbuf, 3, MPI_INT, rbuf, 3, MPI_INT, root, inter));
    for (int k = 0; k < 3 * rn; k++) {
        int want = root == MPI_ROOT ? val(og, k / 3, k % 3) : -1;
        CHECK(rbuf[k] == want, "gather rg %d: [%d] = %d, want %d", rg, k, rbuf[k], want);
    }

    /* Gatherv: leaf k sends k+1 ints, stored in reverse rank order */
    fill_r();
    for (int i = 0; i < me + 1; i++) sbuf[i] = val(g, me, i);
    {
        int at = 0;
        for (int k = rn - 1; k >= 0; k--) {
            rcnt[k] = k + 1;
            rdsp[k] = at;
            at += k + 1;
        }
    }
    MPI_CHECK(MPI_Gatherv(sbuf, me + 1, MPI_INT, rbuf, rcnt, rdsp, MPI_INT, root, inter));
    if (root == MPI_ROOT) {
        for (int k = 0; k < rn; k++)
            for (int i = 0; i < k + 1; i++)
                CHECK(rbuf[rdsp[k] + i] == val(og, k, i), "gatherv rg %d: from %d [%d] = %d",
                      rg, k, i, rbuf[rdsp[k] + i]);
    } else {
        CHECK(rbuf[0] == -1, "gatherv rg %d: non-root receive buffer written", rg);
    }

    /* Scatter: 3 ints to each leaf */
    fill_r();
    for (int k = 0; k < 3 * rn; k++) sbuf[k] = val(g, k / 3, k % 3);
    MPI_CHECK(MPI_Scatter(sbuf, 3, MPI_INT, rbuf, 3, MPI_INT, root, inter));
    for (int i = 0; i < 3; i++) {
        int want = is_root_grp ? -1 : val(og, me, i);
        CHECK(rbuf[i] == want, "scatter rg %d: [%d] = %d, want %d", rg, i, rbuf[i], want);
    }

    /* Scatterv: leaf k gets k+2 ints */
    fill_r();
    {
        int at = 0;
        for (int k = 0; k < rn; k++) {
            scnt[k] = k + 2;
            sdsp[k] = at;
            for (int i = 0; i < k + 2; i++) sbuf[at + i] = val(g, k, i);
            at += k + 2 + 1; /* a hole */
        }
    }
    MPI_CHECK(MPI_Scatterv(sbuf, scnt, sdsp, MPI_INT, rbuf, me + 2, MPI_INT, root, inter));
    for (int i = 0; i < me + 2; i++) {
        int want = is_root_grp ? -1 : val(og, me, i);
        CHECK(rbuf[i] == want, "scatterv rg %d: [%d] = %d, want %d", rg, i, rbuf[i], want);
    }

    /* Reduce (SUM of the leaves' vectors) */
    fill_r();
    for (int i = 0; i < 4; i++) sbuf[i] = val(g, me, i);
    MPI_CHECK(MPI_Reduce(sbuf, rbuf, 4, MPI_INT, MPI_SUM, root, inter));
    for (int i = 0; i < 4; i++) {
        int want = -1;
        if (root == MPI_ROOT) {
            want = 0;
            for (int k = 0; k < rn; k++) want += val(og, k, i);
        }
        CHECK(rbuf[i] == want, "reduce rg %d: [%d] = %d, want %d", rg, i, rbuf[i], want);
    }

    /* At MPI_PROC_NULL the other arguments are not significant (mpi4py passes null
     * buffers, count 0 and MPI_DATATYPE_NULL). */
    fill_r();
    if (idle) {
        MPI_CHECK(MPI_Reduce(NULL, NULL, 0, MPI_DATATYPE_NULL, MPI_SUM, root, inter));
        MPI_CHECK(MPI_Bcast(NULL, 0, MPI_DATATYPE_NULL, root, inter));
    } else {
        MPI_CHECK(MPI_Reduce(sbuf, rbuf, 4, MPI_INT, MPI_SUM, root, inter));
        MPI_CHECK(MPI_Bcast(rbuf + 8, 2, MPI_INT, root, inter));
    }
    if (root == MPI_ROOT) {
        int want = 0;
        for (int k = 0; k < rn; k++) want += val(og, k, 0);
        CHECK(rbuf[0] == want, "reduce (null args elsewhere) = %d, want %d", rbuf[0], want);
    }
}

/* Non-commutative: a op b = a, so a rank-ordered reduction gives rank 0's vector. */
static void left_fn(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    memcpy(inout, in, (size_t)*len * sizeof(int));
}

static int a2a_count(int sender, int receiver) { return (sender + 2 * receiver) % 3 + 1; }

static void unrooted(MPI_Comm inter)
{
    int og = 1 - g;

    /* Allgather: 2 ints from each remote process */
    fill_r();
    for (int i = 0; i < 2; i++) sbuf[i] = val(g, me, i);
    MPI_CHECK(MPI_Allgather(sbuf, 2, MPI_INT, rbuf, 2, MPI_INT, inter));
    for (int k = 0; k < 2 * rn; k++)
        CHECK(rbuf[k] == val(og, k / 2, k % 2), "allgather [%d] = %d", k, rbuf[k]);

    /* Allgatherv: remote k contributes k+1 ints, with holes */
    fill_r();
    for (int i = 0; i < me + 1; i++) sbuf[i] = val(g, me, i);
    for (int k = 0, at = 0; k < rn; k++) {
        rcnt[k] = k + 1;
        rdsp[k] = at;
        at += k + 2;
    }
    MPI_CHECK(MPI_Allgatherv(sbuf, me + 1, MPI_INT, rbuf, rcnt, rdsp, MPI_INT, inter));
    for (int k = 0; k < rn; k++) {
        for (int i = 0; i < k + 1; i++)
            CHECK(rbuf[rdsp[k] + i] == val(og, k, i), "allgatherv from %d [%d] = %d", k, i,
                  rbuf[rdsp[k] + i]);
        CHECK(rbuf[rdsp[k] + k + 1] == -1, "allgatherv wrote into a hole after %d", k);
    }

    /* Alltoall: block k (2 ints) to remote k */
    fill_r();
    for (int k = 0; k < rn; k++)
        for (int i = 0; i < 2; i++) sbuf[2 * k + i] = val(g, me, 10 * k + i);
    MPI_CHECK(MPI_Alltoall(sbuf, 2, MPI_INT, rbuf, 2, MPI_INT, inter));
    for (int k = 0; k < rn; k++)
        for (int i = 0; i < 2; i++)
            CHECK(rbuf[2 * k + i] == val(og, k, 10 * me + i), "alltoall from %d [%d] = %d", k,
                  i, rbuf[2 * k + i]);

    /* Alltoallv and Alltoallw: a2a_count(sender, receiver) ints */
    for (int w = 0; w < 2; w++) {
        fill_r();
        int sat = 0, rat = 0;
        for (int k = 0; k < rn; k++) {
            scnt[k] = a2a_count(me, k);
            rcnt[k] = a2a_count(k, me);
            sdsp[k] = w ? sat * (int)sizeof(int) : sat;
            rdsp[k] = w ? rat * (int)sizeof(int) : rat;
            stypes[k] = rtypes[k] = MPI_INT;
            for (int i = 0; i < scnt[k]; i++) sbuf[sat + i] = val(g, me, 10 * k + i);
            sat += scnt[k];
            rat += rcnt[k] + 1;
        }
        if (w)
            MPI_CHECK(MPI_Alltoallw(sbuf, scnt, sdsp, stypes, rbuf, rcnt, rdsp, rtypes, inter));
        else
            MPI_CHECK(MPI_Alltoallv(sbuf, scnt, sdsp, MPI_INT, rbuf, rcnt, rdsp, MPI_INT, inter));
        for (int k = 0, at = 0; k < rn; k++) {
            for (int i = 0; i < rcnt[k]; i++)
                CHECK(rbuf[at + i] == val(og, k, 10 * me + i), "alltoall%c from %d [%d] = %d",
                      w ? 'w' : 'v', k, i, rbuf[at + i]);
            at += rcnt[k] + 1;
        }
    }

    /* Allreduce: the sum of the other group's vectors */
    fill_r();
    for (int i = 0; i < 3; i++) sbuf[i] = val(g, me, i);
    MPI_CHECK(MPI_Allreduce(sbuf, rbuf, 3, MPI_INT, MPI_SUM, inter));
    for (int i = 0; i < 3; i++) {
        int want = 0;
        for (int k = 0; k < rn; k++) want += val(og, k, i);
        CHECK(rbuf[i] == want, "allreduce [%d] = %d, want %d", i, rbuf[i], want);
    }

    /* A non-commutative user operation: blocking and nonblocking (its user steps run
     * after the last message) */
    MPI_Op left;
    MPI_CHECK(MPI_Op_create(left_fn, 0, &left));
    for (int nbk = 0; nbk < 2; nbk++) {
        fill_r();
        for (int i = 0; i < 3; i++) sbuf[i] = val(g, me, i);
        if (nbk) {
            MPI_Request rq;
            MPI_CHECK(MPI_Iallreduce(sbuf, rbuf, 3, MPI_INT, left, inter, &rq));
            MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        } else {
            MPI_CHECK(MPI_Allreduce(sbuf, rbuf, 3, MPI_INT, left, inter));
        }
        for (int i = 0; i < 3; i++)
            CHECK(rbuf[i] == val(og, 0, i), "allreduce (user op, nb %d) [%d] = %d, want %d",
                  nbk, i, rbuf[i], val(og, 0, i));
    }
    MPI_CHECK(MPI_Op_free(&left));

    /* Reduce_scatter_block: vectors of ln*rn elements in both groups, rn per process */
    fill_r();
    for (int i = 0; i < ln * rn; i++) sbuf[i] = val(g, me, i);
    MPI_CHECK(MPI_Reduce_scatter_block(sbuf, rbuf, rn, MPI_INT, MPI_SUM, inter));
    for (int i = 0; i < rn; i++) {
        int want = 0;
        for (int k = 0; k < rn; k++) want += val(og, k, me * rn + i);
        CHECK(rbuf[i] == want, "reduce_scatter_block [%d] = %d, want %d", i, rbuf[i], want);
    }

    /* Reduce_scatter: the same ln*rn elements, split unevenly over the local group */
    fill_r();
    int total = ln * rn, before = 0;
    for (int r = 0; r < ln; r++) {
        rcnt[r] = total / ln + (r < total % ln);
        if (r < me) before += rcnt[r];
    }
    if (ln > 1 && rcnt[1] > 0) { /* make it uneven: move one element from rank 1 to 0 */
        rcnt[0]++;
        rcnt[1]--;
        if (me == 1) before++;
    }
    MPI_CHECK(MPI_Reduce_scatter(sbuf, rbuf, rcnt, MPI_INT, MPI_SUM, inter));
    for (int i = 0; i < rcnt[me]; i++) {
        int want = 0;
        for (int k = 0; k < rn; k++) want += val(og, k, before + i);
        CHECK(rbuf[i] == want, "reduce_scatter [%d] = %d, want %d", i, rbuf[i], want);
    }
    CHECK(rbuf[rcnt[me]] == -1, "reduce_scatter wrote past its block");
}

static void nonblocking(MPI_Comm inter)
{
    int og = 1 - g;
    /* Root in group A: its leader (MPICH 4.0's Ibcast on an intercommunicator asserts
     * `r < comm_ptr->remote_size` at -n 8 when the root is not rank 0; the blocking forms
     * above test other roots, and Ferrite runs all forms through the same plans). */
    int root = g == 0 ? (me == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    int bc[4] = {-1, -1, -1, -1}, ar[3], as[3], ga[3 * 64], gs[3], a2s[64], a2r[64];
    for (int i = 0; i < 4; i++)
        if (root == MPI_ROOT) bc[i] = val(g, me, i);
    for (int i = 0; i < 3; i++) as[i] = gs[i] = val(g, me, i);
    for (int k = 0; k < rn; k++) a2s[k] = val(g, me, k);
    for (int k = 0; k < 3 * 64; k++) ga[k] = -1;
    MPI_Request rq[5];
    MPI_CHECK(MPI_Ibcast(bc, 4, MPI_INT, root, inter, &rq[0]));
    MPI_CHECK(MPI_Iallreduce(as, ar, 3, MPI_INT, MPI_SUM, inter, &rq[1]));
    /* Gather towards group B's rank 0 */
    int groot = g == 1 ? (me == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    MPI_CHECK(MPI_Igather(gs, 3, MPI_INT, ga, 3, MPI_INT, groot, inter, &rq[2]));
    MPI_CHECK(MPI_Ialltoall(a2s, 1, MPI_INT, a2r, 1, MPI_INT, inter, &rq[3]));
    MPI_CHECK(MPI_Ibarrier(inter, &rq[4]));
    /* Complete in reverse order */
    for (int k = 4; k >= 0; k--) MPI_CHECK(MPI_Wait(&rq[k], MPI_STATUS_IGNORE));
    for (int i = 0; i < 4; i++) {
        int want = root == MPI_ROOT ? val(g, me, i) : root == MPI_PROC_NULL ? -1 : val(og, 0, i);
        CHECK(bc[i] == want, "ibcast [%d] = %d, want %d", i, bc[i], want);
    }
    for (int i = 0; i < 3; i++) {
        int want = 0;
        for (int k = 0; k < rn; k++) want += val(og, k, i);
        CHECK(ar[i] == want, "iallreduce [%d] = %d, want %d", i, ar[i], want);
    }
    for (int k = 0; k < 3 * rn; k++) {
        int want = groot == MPI_ROOT ? val(og, k / 3, k % 3) : -1;
        CHECK(ga[k] == want, "igather [%d] = %d, want %d", k, ga[k], want);
    }
    for (int k = 0; k < rn; k++)
        CHECK(a2r[k] == val(og, k, me), "ialltoall from %d = %d", k, a2r[k]);

    /* Persistent Allreduce (MAX), started twice with new data */
    MPI_Request p;
    int pin[2], pout[2];
    MPI_CHECK(MPI_Allreduce_init(pin, pout, 2, MPI_INT, MPI_MAX, inter, MPI_INFO_NULL, &p));
    for (int it = 0; it < 2; it++) {
        for (int i = 0; i < 2; i++) pin[i] = val(g, me, i) + 50 * it;
        MPI_CHECK(MPI_Start(&p));
        MPI_CHECK(MPI_Wait(&p, MPI_STATUS_IGNORE));
        for (int i = 0; i < 2; i++) {
            int want = val(og, rn - 1, i) + 50 * it;
            CHECK(pout[i] == want, "allreduce_init it %d [%d] = %d, want %d", it, i, pout[i],
                  want);
        }
    }
    MPI_CHECK(MPI_Request_free(&p));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int nb = t_size >= 3 ? t_size / 3 : 1;
    int na = t_size - nb;
    g = t_rank >= na;
    MPI_Comm half, inter;
    /* Group B in reverse world order: its leader is the last world rank. */
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, g, g ? -t_rank : t_rank, &half));
    MPI_CHECK(MPI_Comm_rank(half, &me));
    MPI_CHECK(MPI_Comm_size(half, &ln));
    MPI_CHECK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, g ? 0 : t_size - 1, 5, &inter));
    MPI_CHECK(MPI_Comm_remote_size(inter, &rn));
    CHECK(rn == (g ? na : nb), "remote size %d", rn);

    for (int rg = 0; rg < 2; rg++) rooted(inter, rg);
    unrooted(inter);
    nonblocking(inter);
    /* Again, so a second round of collectives on the same intercommunicator (tags) and a
     * dup work too. */
    /* Scan and Exscan are not defined on intercommunicators. */
    MPI_CHECK(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
    int x = 1, y = 0;
    int rc = MPI_Scan(&x, &y, 1, MPI_INT, MPI_SUM, inter);
    CHECK(t_class(rc) == MPI_ERR_COMM, "MPI_Scan on an intercommunicator: class %d", t_class(rc));
    rc = MPI_Exscan(&x, &y, 1, MPI_INT, MPI_SUM, inter);
    CHECK(t_class(rc) == MPI_ERR_COMM, "MPI_Exscan on an intercommunicator: class %d",
          t_class(rc));
    MPI_Comm dup;
    MPI_CHECK(MPI_Comm_dup(inter, &dup));
    unrooted(dup);
    rooted(dup, 1);
    MPI_CHECK(MPI_Comm_free(&dup));
    MPI_CHECK(MPI_Comm_free(&inter));
    MPI_CHECK(MPI_Comm_free(&half));
    t_finish("coll_inter");
    return 0;
}
