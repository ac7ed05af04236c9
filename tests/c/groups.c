/* np: 1 2 4 16 */
/* Group operations: Comm_group, size/rank, translate_ranks, compare, union, intersection,
 * difference, incl/excl, range_incl/range_excl, MPI_GROUP_EMPTY, and invalid arguments. */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    /* Group calls have no communicator: errors raise on MPI_COMM_SELF (MPI 4), or on
     * MPI_COMM_WORLD (older MPICH). */
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Group w, even, odd, rev, u, x, d, e;
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &w));
    int n, r, cmp;
    MPI_CHECK(MPI_Group_size(w, &n));
    MPI_CHECK(MPI_Group_rank(w, &r));
    CHECK(n == t_size && r == t_rank, "world group: size %d rank %d", n, r);

    int ne = (t_size + 1) / 2, *ev = malloc(sizeof(int) * t_size), *rv = malloc(sizeof(int) * t_size);
    for (int k = 0; k < ne; k++) ev[k] = 2 * k;
    for (int k = 0; k < t_size; k++) rv[k] = t_size - 1 - k;
    MPI_CHECK(MPI_Group_incl(w, ne, ev, &even));
    MPI_CHECK(MPI_Group_excl(w, ne, ev, &odd));
    MPI_CHECK(MPI_Group_incl(w, t_size, rv, &rev));
    MPI_CHECK(MPI_Group_rank(even, &r));
    CHECK(r == (t_rank % 2 == 0 ? t_rank / 2 : MPI_UNDEFINED), "rank in even group: %d", r);
    MPI_CHECK(MPI_Group_compare(w, rev, &cmp));
    CHECK(cmp == (t_size == 1 ? MPI_IDENT : MPI_SIMILAR), "compare(world, reversed) = %d", cmp);
    MPI_CHECK(MPI_Group_union(even, odd, &u));
    MPI_CHECK(MPI_Group_compare(u, w, &cmp));
    CHECK(cmp == (t_size <= 2 ? MPI_IDENT : MPI_SIMILAR), "union(even, odd) vs world: %d", cmp);
    MPI_CHECK(MPI_Group_intersection(even, odd, &x));
    MPI_CHECK(MPI_Group_size(x, &n));
    CHECK(n == 0, "intersection of even and odd has %d members", n);
    MPI_CHECK(MPI_Group_compare(x, MPI_GROUP_EMPTY, &cmp));
    CHECK(cmp == MPI_IDENT, "empty intersection vs MPI_GROUP_EMPTY: %d", cmp);
    MPI_CHECK(MPI_Group_difference(w, even, &d));
    MPI_CHECK(MPI_Group_compare(d, odd, &cmp));
    CHECK(cmp == MPI_IDENT, "world - even vs odd: %d", cmp);

    /* translate: world rank k is reversed rank size-1-k; odd ranks are undefined in even */
    int *tr = malloc(sizeof(int) * t_size), *all = malloc(sizeof(int) * t_size);
    for (int k = 0; k < t_size; k++) all[k] = k;
    MPI_CHECK(MPI_Group_translate_ranks(w, t_size, all, rev, tr));
    for (int k = 0; k < t_size; k++) CHECK(tr[k] == t_size - 1 - k, "translate %d -> %d", k, tr[k]);
    MPI_CHECK(MPI_Group_translate_ranks(w, t_size, all, even, tr));
    for (int k = 0; k < t_size; k++)
        CHECK(tr[k] == (k % 2 ? MPI_UNDEFINED : k / 2), "translate to even %d -> %d", k, tr[k]);
    int pn = MPI_PROC_NULL, out;
    MPI_CHECK(MPI_Group_translate_ranks(w, 1, &pn, even, &out));
    CHECK(out == MPI_PROC_NULL, "MPI_PROC_NULL translates to %d", out);

    /* ranges: (size-1 down to 0 step -2) == reversed evens-or-odds */
    int ranges[1][3] = {{t_size - 1, 0, -2}};
    MPI_CHECK(MPI_Group_range_incl(w, 1, ranges, &e));
    MPI_CHECK(MPI_Group_size(e, &n));
    CHECK(n == (t_size + 1) / 2, "range_incl size %d", n);
    int first;
    int zero = 0;
    MPI_CHECK(MPI_Group_translate_ranks(e, 1, &zero, w, &first));
    CHECK(first == t_size - 1, "range_incl first member is %d", first);
    MPI_CHECK(MPI_Group_free(&e));
    MPI_CHECK(MPI_Group_range_excl(w, 1, ranges, &e));
    MPI_CHECK(MPI_Group_size(e, &n));
    CHECK(n == t_size / 2, "range_excl size %d", n);
    MPI_CHECK(MPI_Group_free(&e));
    CHECK(e == MPI_GROUP_NULL, "Group_free did not set MPI_GROUP_NULL");

    /* errors */
    int bad = t_size;
    EXPECT_CLASS(MPI_Group_incl(w, 1, &bad, &e), MPI_ERR_RANK);
    int dup2[2] = {0, 0};
    if (t_expect_ferrite()) /* a repeated rank is erroneous; MPICH does not check */
        EXPECT_CLASS(MPI_Group_incl(w, 2, dup2, &e), MPI_ERR_RANK);
    EXPECT_CLASS(MPI_Group_size(MPI_GROUP_NULL, &n), MPI_ERR_GROUP);

    /* A communicator from a group */
    MPI_Comm ce;
    MPI_CHECK(MPI_Comm_create(MPI_COMM_WORLD, rev, &ce));
    MPI_CHECK(MPI_Comm_rank(ce, &r));
    CHECK(r == t_size - 1 - t_rank, "rank in the reversed communicator: %d", r);
    MPI_CHECK(MPI_Comm_free(&ce));
    MPI_CHECK(MPI_Comm_create(MPI_COMM_WORLD, odd, &ce));
    CHECK((ce == MPI_COMM_NULL) == (t_rank % 2 == 0), "Comm_create with the odd group");
    if (ce != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&ce));
    if (t_rank % 2 == 0) {
        MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, even, 7, &ce));
        MPI_CHECK(MPI_Comm_size(ce, &n));
        CHECK(n == ne, "create_group(even) size %d", n);
        MPI_CHECK(MPI_Comm_free(&ce));
    }
    MPI_Group gs[] = {w, even, odd, rev, u, x, d};
    for (int k = 0; k < 7; k++) MPI_CHECK(MPI_Group_free(&gs[k]));
    free(ev); free(rv); free(tr); free(all);
    t_finish("groups");
    return 0;
}
