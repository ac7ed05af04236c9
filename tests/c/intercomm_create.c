/* np: 2 3 4 5 8 */
/* MPI_Comm_create and MPI_Comm_split on an intercommunicator (MPI 4.1 section 7.4.2): each
 * side passes a subgroup of its local group; members get an intercommunicator whose remote
 * group is the other side's subgroup, in that group's order; non-members, and everyone when
 * one side's group is empty, get MPI_COMM_NULL. Data crosses the new intercommunicator and
 * a collective runs on it. (MPICH's test suite makes its intercommunicators this way.) */
#include "common.h"

/* Ranks of `g` in `inter`'s local group, as world ranks. */
static void to_world(MPI_Group g, int n, int *out)
{
    MPI_Group wg;
    int *r = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++) r[i] = i;
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    MPI_CHECK(MPI_Group_translate_ranks(g, n, r, wg, out));
    MPI_CHECK(MPI_Group_free(&wg));
    free(r);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int color = t_rank % 2;
    MPI_Comm half, inter, sub;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, t_rank, &half));
    MPI_CHECK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - color, 5, &inter));
    int lsize, rsize, lrank;
    MPI_CHECK(MPI_Comm_size(inter, &lsize));
    MPI_CHECK(MPI_Comm_remote_size(inter, &rsize));
    MPI_CHECK(MPI_Comm_rank(inter, &lrank));

    /* Each side keeps its members but the last one (or all, if it has one), reversed. */
    MPI_Group local, g;
    MPI_CHECK(MPI_Comm_group(inter, &local));
    int keep = lsize > 1 ? lsize - 1 : 1, rkeep = rsize > 1 ? rsize - 1 : 1;
    int *ranks = malloc(lsize * sizeof(int));
    for (int i = 0; i < keep; i++) ranks[i] = keep - 1 - i;
    MPI_CHECK(MPI_Group_incl(local, keep, ranks, &g));
    MPI_CHECK(MPI_Comm_create(inter, g, &sub));
    if (lrank >= keep) {
        CHECK(sub == MPI_COMM_NULL, "local rank %d is not in the group but got a communicator", lrank);
    } else {
        int flag, s, rs, r;
        CHECK(sub != MPI_COMM_NULL, "local rank %d is in the group but got MPI_COMM_NULL", lrank);
        MPI_CHECK(MPI_Comm_test_inter(sub, &flag));
        CHECK(flag, "the new communicator is not an intercommunicator");
        MPI_CHECK(MPI_Comm_size(sub, &s));
        MPI_CHECK(MPI_Comm_remote_size(sub, &rs));
        MPI_CHECK(MPI_Comm_rank(sub, &r));
        CHECK(s == keep && rs == rkeep && r == keep - 1 - lrank,
              "size %d remote %d rank %d, expected %d %d %d", s, rs, r, keep, rkeep, keep - 1 - lrank);
        /* The remote group is the other side's group, in its order: remote rank k is the
         * other side's local rank rkeep - 1 - k, i.e. world rank 2 * (rkeep - 1 - k) + other. */
        MPI_Group rg;
        MPI_CHECK(MPI_Comm_remote_group(sub, &rg));
        int *w = malloc(rs * sizeof(int));
        to_world(rg, rs, w);
        for (int k = 0; k < rs; k++)
            CHECK(w[k] == 2 * (rkeep - 1 - k) + (1 - color), "remote rank %d is world rank %d", k, w[k]);
        free(w);
        MPI_CHECK(MPI_Group_free(&rg));
        /* Data across: every member sends its world rank to every remote member. */
        for (int k = 0; k < rs; k++) {
            int v = t_rank, got = -1;
            MPI_CHECK(MPI_Sendrecv(&v, 1, MPI_INT, k, 1, &got, 1, MPI_INT, k, 1, sub, MPI_STATUS_IGNORE));
            CHECK(got == 2 * (rkeep - 1 - k) + (1 - color), "from remote %d got %d", k, got);
        }
        /* An intercommunicator allreduce: each side gets the sum over the other side. */
        int v = t_rank, sum = -1, want = 0;
        for (int k = 0; k < rkeep; k++) want += 2 * k + (1 - color);
        MPI_CHECK(MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, sub));
        CHECK(sum == want, "allreduce over the remote side: %d, expected %d", sum, want);
        MPI_CHECK(MPI_Comm_free(&sub));
    }
    MPI_CHECK(MPI_Group_free(&g));

    /* One side passes an empty group: nobody gets a communicator. */
    MPI_CHECK(MPI_Comm_create(inter, color ? MPI_GROUP_EMPTY : local, &sub));
    CHECK(sub == MPI_COMM_NULL, "an empty remote or local group gave a communicator");

    /* MPI_Comm_split on the intercommunicator: colors by local rank parity. */
    MPI_CHECK(MPI_Comm_split(inter, lrank % 2, -lrank, &sub));
    if (sub != MPI_COMM_NULL) {
        int s, rs;
        MPI_CHECK(MPI_Comm_size(sub, &s));
        MPI_CHECK(MPI_Comm_remote_size(sub, &rs));
        CHECK(s == (lsize + 1 - lrank % 2) / 2 && rs == (rsize + 1 - lrank % 2) / 2,
              "split: size %d remote %d", s, rs);
        MPI_CHECK(MPI_Comm_free(&sub));
    } else {
        CHECK(lrank % 2 == 1 && rsize < 2, "split gave MPI_COMM_NULL to local rank %d", lrank);
    }
    MPI_CHECK(MPI_Group_free(&local));
    free(ranks);
    MPI_CHECK(MPI_Comm_free(&inter));
    MPI_CHECK(MPI_Comm_free(&half));
    t_finish("intercomm_create");
    return 0;
}
