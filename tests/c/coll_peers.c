/* np: 4 16 32 */
/* How many distinct peers each rank exchanges messages with during one Barrier, Bcast,
 * Allreduce, Allgather and Alltoall (Ferrite's FERRITE_Coll_peers), checked exactly against
 * each algorithm's communication pattern: log-scale for the tree/dissemination/Bruck
 * algorithms and communicator creation, N-1 for pairwise alltoall. Rank 0 prints one `peers:` line per collective
 * (min/max over ranks and log2 N) for the connection study. Skipped on other MPIs. */
#include "common.h"

int FERRITE_Coll_peers(int reset, int *count) __attribute__((weak));
/* Ferrite reads its FERRITE_COLL_* knobs once; this makes it read them again (weak: absent
 * from other MPIs, which ignore the knobs). */
int FERRITE_Coll_reload_knobs(void) __attribute__((weak));
static void set_knob(const char *knob, const char *v)
{
    if (v) setenv(knob, v, 1);
    else unsetenv(knob);
    if (FERRITE_Coll_reload_knobs) MPI_CHECK(FERRITE_Coll_reload_knobs());
}

static int me, np;

static int peers_now(void)
{
    int n = -1;
    MPI_CHECK(FERRITE_Coll_peers(1, &n));
    return n;
}

static int count_set(const char *seen)
{
    int c = 0;
    for (int k = 0; k < np; k++) c += seen[k] && k != me;
    return c;
}

/* Peers of rank me when it sends to me+2^k and receives from me-2^k (k < ceil log2 N):
 * dissemination barrier, Bruck allgather and Bruck alltoall. */
static int dissemination(void)
{
    char *seen = calloc(np, 1);
    for (int d = 1; d < np; d <<= 1) {
        seen[(me + d) % np] = 1;
        seen[(me - d + np) % np] = 1;
    }
    int c = count_set(seen);
    free(seen);
    return c;
}

/* Binomial tree rooted at 0: parent and children. */
static int binomial(void)
{
    int c = 0, mask = 1;
    while (mask < np) mask <<= 1;
    if (me) {
        mask = me & -me;
        c++;
    }
    for (int m = mask >> 1; m > 0; m >>= 1) c += me + m < np;
    return c;
}

static void report(const char *name, int got, int want)
{
    CHECK(got == want, "%s at N=%d: rank %d exchanged with %d peers, the algorithm's pattern "
          "says %d", name, np, me, got, want);
    int mn, mx;
    MPI_CHECK(MPI_Reduce(&got, &mn, 1, MPI_INT, MPI_MIN, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Reduce(&got, &mx, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD));
    int lg = 0;
    while ((1 << lg) < np) lg++;
    if (me == 0) printf("peers: %-22s N=%-3d min=%-3d max=%-3d log2N=%d\n", name, np, mn, mx, lg);
    peers_now(); /* the reductions above do not count */
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    me = t_rank, np = t_size;
    if (!t_expect_ferrite() || !FERRITE_Coll_peers) {
        if (me == 0) printf("skipped: FERRITE_Coll_peers is a Ferrite extension\n");
        MPI_Finalize();
        return 0;
    }
    int lg = 0;
    while ((1 << lg) < np) lg++;
    int s[64], r[64 * 64];
    for (int i = 0; i < 64; i++) s[i] = i;
    peers_now();

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    report("Barrier", peers_now(), dissemination());

    set_knob("FERRITE_COLL_BCAST_ALGO", "binomial");
    MPI_CHECK(MPI_Bcast(s, 8, MPI_INT, 0, MPI_COMM_WORLD));
    report("Bcast binomial", peers_now(), binomial());

    set_knob("FERRITE_COLL_ALLREDUCE_ALGO", "recursive_doubling");
    MPI_CHECK(MPI_Allreduce(s, r, 8, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    /* power-of-two sizes only: every rank pairs with rank ^ 2^k */
    if ((np & (np - 1)) == 0) report("Allreduce rec-doubling", peers_now(), lg);
    peers_now();

    set_knob("FERRITE_COLL_ALLGATHER_ALGO", "bruck");
    MPI_CHECK(MPI_Allgather(s, 1, MPI_INT, r, 1, MPI_INT, MPI_COMM_WORLD));
    report("Allgather bruck", peers_now(), dissemination());

    set_knob("FERRITE_COLL_ALLGATHER_ALGO", "ring");
    MPI_CHECK(MPI_Allgather(s, 1, MPI_INT, r, 1, MPI_INT, MPI_COMM_WORLD));
    report("Allgather ring", peers_now(), np > 2 ? 2 : np - 1);

    set_knob("FERRITE_COLL_ALLTOALL_ALGO", "bruck");
    MPI_CHECK(MPI_Alltoall(s, 1, MPI_INT, r, 1, MPI_INT, MPI_COMM_WORLD));
    report("Alltoall bruck", peers_now(), dissemination());

    set_knob("FERRITE_COLL_ALLTOALL_ALGO", "pairwise");
    MPI_CHECK(MPI_Alltoall(s, 1, MPI_INT, r, 1, MPI_INT, MPI_COMM_WORLD));
    report("Alltoall pairwise", peers_now(), np - 1);

    /* Communicator creation gathers every member's record with a Bruck allgather too. */
    MPI_Comm half;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, 0, me, &half));
    report("Comm_split (allgather)", peers_now(), dissemination());
    MPI_CHECK(MPI_Comm_free(&half));

    t_finish("coll_peers");
    return 0;
}
