/* np: 1 2 4 */
/* MPI_Comm_create with different, disjoint groups on different processes (MPI-2.2): each
 * process gets the communicator of its own group. This is how mpi4py builds the local
 * communicator of an intercommunicator (Intercomm_merge, then Comm_create with
 * Comm_group(intercomm)); a reduce in that local group then goes to the remote leader by
 * point-to-point on a duplicate of the intercommunicator. */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    /* Halves of MPI_COMM_WORLD as disjoint groups of the world communicator. */
    int half = t_size / 2, color = t_rank < half ? 0 : 1;
    int lo = color ? half : 0, n = color ? t_size - half : half;
    if (n == 0) lo = 0, n = t_size; /* -n 1: one group of everyone */
    MPI_Group world, mine;
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    int range[1][3] = {{lo, lo + n - 1, 1}};
    MPI_CHECK(MPI_Group_range_incl(world, 1, range, &mine));
    MPI_Comm part;
    MPI_CHECK(MPI_Comm_create(MPI_COMM_WORLD, mine, &part));
    CHECK(part != MPI_COMM_NULL, "Comm_create gave MPI_COMM_NULL to a member of its group");
    int ps = -1, pr = -1;
    MPI_CHECK(MPI_Comm_size(part, &ps));
    MPI_CHECK(MPI_Comm_rank(part, &pr));
    CHECK(ps == n && pr == t_rank - lo, "Comm_create: size %d rank %d, expected %d %d", ps,
          pr, n, t_rank - lo);
    int sum = -1, want = 0;
    for (int i = lo; i < lo + n; i++) want += i;
    MPI_CHECK(MPI_Allreduce(&t_rank, &sum, 1, MPI_INT, MPI_SUM, part));
    CHECK(sum == want, "Allreduce over my group gave %d, expected %d", sum, want);
    MPI_CHECK(MPI_Comm_free(&part));
    MPI_CHECK(MPI_Group_free(&mine));
    MPI_CHECK(MPI_Group_free(&world));

    if (t_size >= 2) {
        /* mpi4py's intercommunicator reduce. */
        MPI_Comm intra, inter, dup, merged, local;
        MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, 0, &intra));
        MPI_CHECK(MPI_Intercomm_create(intra, 0, MPI_COMM_WORLD, color ? 0 : half, 7, &inter));
        MPI_CHECK(MPI_Comm_dup(inter, &dup));
        int ls, rs, ir;
        MPI_CHECK(MPI_Comm_size(dup, &ls));
        MPI_CHECK(MPI_Comm_remote_size(dup, &rs));
        MPI_CHECK(MPI_Comm_rank(dup, &ir));
        MPI_CHECK(MPI_Intercomm_merge(dup, ls > rs, &merged));
        MPI_Group lg;
        MPI_CHECK(MPI_Comm_group(dup, &lg));
        MPI_CHECK(MPI_Comm_create(merged, lg, &local));
        MPI_CHECK(MPI_Group_free(&lg));
        MPI_CHECK(MPI_Comm_free(&merged));
        CHECK(local != MPI_COMM_NULL, "local communicator is MPI_COMM_NULL");
        int ns = -1, nr = -1;
        MPI_CHECK(MPI_Comm_size(local, &ns));
        MPI_CHECK(MPI_Comm_rank(local, &nr));
        CHECK(ns == ls && nr == ir, "local communicator: size %d rank %d, expected %d %d", ns,
              nr, ls, ir);
        int lsum = -1;
        MPI_CHECK(MPI_Reduce(&t_rank, &lsum, 1, MPI_INT, MPI_SUM, 0, local));
        /* The color-1 leader sends its group's sum to the color-0 leader. */
        if (color == 1 && ir == 0) {
            MPI_Count c = lsum;
            MPI_CHECK(MPI_Send_c(&c, 1, MPI_COUNT, 0, 3, dup));
        } else if (color == 0 && ir == 0) {
            MPI_Count c = -1;
            MPI_Status st;
            MPI_CHECK(MPI_Recv_c(&c, 1, MPI_COUNT, 0, 3, dup, &st));
            int w = 0;
            for (int i = half; i < t_size; i++) w += i;
            CHECK(c == w && st.MPI_SOURCE == 0 && st.MPI_TAG == 3,
                  "remote group sum %lld from %d tag %d, expected %d from 0 tag 3",
                  (long long)c, st.MPI_SOURCE, st.MPI_TAG, w);
        }
        MPI_CHECK(MPI_Comm_free(&local));
        MPI_CHECK(MPI_Comm_free(&dup));
        MPI_CHECK(MPI_Comm_free(&inter));
        MPI_CHECK(MPI_Comm_free(&intra));
    }
    t_finish("comm_create_disjoint");
    return 0;
}
