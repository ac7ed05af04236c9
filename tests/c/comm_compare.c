/* np: 2 4 */
/* MPI_Comm_compare (MPI 4.1 7.4.1) for intra- and intercommunicators: IDENT for the same
 * handle, CONGRUENT for a duplicate, SIMILAR when a group (local or remote) holds the same
 * processes in another order, UNEQUAL for other processes or an inter- vs an
 * intracommunicator. */
#include "common.h"

/* The intercommunicator between the even and the odd ranks of MPI_COMM_WORLD; the ranks
 * of a side whose rev[side] is set are ordered from the highest. */
static MPI_Comm parity_inter(int rev_even, int rev_odd)
{
    int side = t_rank % 2, rev[2] = {rev_even, rev_odd};
    MPI_Comm local, inter;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, side, rev[side] ? -t_rank : t_rank, &local));
    /* The remote leader is the remote side's local rank 0: its highest rank if reversed. */
    int other = 1 - side, leader = other;
    if (rev[other])
        for (int r = other; r < t_size; r += 2) leader = r;
    MPI_CHECK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, leader, 17, &inter));
    MPI_CHECK(MPI_Comm_free(&local));
    return inter;
}

static int compare(MPI_Comm a, MPI_Comm b)
{
    int r = -1;
    MPI_CHECK(MPI_Comm_compare(a, b, &r));
    return r;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    /* Intracommunicators. */
    MPI_Comm dup, rev;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, 0, -t_rank, &rev));
    CHECK(compare(MPI_COMM_WORLD, MPI_COMM_WORLD) == MPI_IDENT, "world vs world");
    CHECK(compare(MPI_COMM_WORLD, dup) == MPI_CONGRUENT, "world vs its dup: %d", compare(MPI_COMM_WORLD, dup));
    CHECK(compare(MPI_COMM_WORLD, rev) == MPI_SIMILAR, "world vs reversed: %d", compare(MPI_COMM_WORLD, rev));
    CHECK(compare(MPI_COMM_WORLD, MPI_COMM_SELF) == MPI_UNEQUAL, "world vs self: %d",
          compare(MPI_COMM_WORLD, MPI_COMM_SELF));

    /* Intercommunicators (needs both parities). */
    MPI_Comm a = parity_inter(0, 0), adup, same_procs_reordered, odd_reversed;
    MPI_CHECK(MPI_Comm_dup(a, &adup));
    CHECK(compare(a, a) == MPI_IDENT, "inter vs itself: %d", compare(a, a));
    CHECK(compare(a, adup) == MPI_CONGRUENT, "inter vs its dup: %d", compare(a, adup));
    CHECK(compare(a, MPI_COMM_WORLD) == MPI_UNEQUAL, "inter vs world: %d", compare(a, MPI_COMM_WORLD));
    CHECK(compare(MPI_COMM_WORLD, a) == MPI_UNEQUAL, "world vs inter: %d", compare(MPI_COMM_WORLD, a));
    int bigger = t_size >= 4; /* each side has two processes to reorder */
    same_procs_reordered = parity_inter(1, 1); /* both sides reversed */
    int want = bigger ? MPI_SIMILAR : MPI_CONGRUENT;
    CHECK(compare(a, same_procs_reordered) == want, "both groups reordered: %d, expected %d",
          compare(a, same_procs_reordered), want);
    odd_reversed = parity_inter(0, 1); /* only the odd side reversed */
    /* Even ranks see a congruent local and a similar remote group, odd ranks the reverse:
     * SIMILAR overall. */
    CHECK(compare(a, odd_reversed) == want, "one group reordered: %d, expected %d",
          compare(a, odd_reversed), want);
    /* Other processes: low half vs high half. */
    MPI_Comm low, halves;
    int side = t_rank < t_size / 2;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, side, t_rank, &low));
    MPI_CHECK(MPI_Intercomm_create(low, 0, MPI_COMM_WORLD, side ? t_size / 2 : 0, 18, &halves));
    want = bigger ? MPI_UNEQUAL : MPI_CONGRUENT;
    CHECK(compare(a, halves) == want, "parity vs halves: %d, expected %d", compare(a, halves), want);

    MPI_Comm all[] = {dup, rev, a, adup, same_procs_reordered, odd_reversed, low, halves};
    for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++) MPI_CHECK(MPI_Comm_free(&all[i]));
    t_finish("comm_compare");
    return 0;
}
