/* np: 2 4 16 */
/* Intercommunicators: world split into even and odd ranks, joined by
 * MPI_Intercomm_create; ping-pong across them (ranks are remote ranks), remote size and
 * group, Comm_test_inter, a dup of the intercommunicator, and MPI_Intercomm_merge with
 * both orders of `high`. */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int color = t_rank % 2;
    MPI_Comm half, inter, inter2, merged;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, t_rank, &half));
    int hr, hs, rs, flag;
    MPI_CHECK(MPI_Comm_rank(half, &hr));
    MPI_CHECK(MPI_Comm_size(half, &hs));
    /* Leaders: rank 0 of each half = world ranks 0 and 1. */
    MPI_CHECK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - color, 77, &inter));
    MPI_CHECK(MPI_Comm_test_inter(inter, &flag));
    CHECK(flag, "Comm_test_inter on an intercommunicator is false");
    MPI_CHECK(MPI_Comm_test_inter(half, &flag));
    CHECK(!flag, "Comm_test_inter on an intracommunicator is true");
    MPI_CHECK(MPI_Comm_remote_size(inter, &rs));
    int evens = (t_size + 1) / 2, odds = t_size / 2;
    CHECK(rs == (color ? evens : odds), "remote size %d", rs);
    MPI_Group rg;
    MPI_CHECK(MPI_Comm_remote_group(inter, &rg));
    int zero = 0, w;
    MPI_Group wg;
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    MPI_CHECK(MPI_Group_translate_ranks(rg, 1, &zero, wg, &w));
    CHECK(w == 1 - color, "remote rank 0 is world rank %d", w);

    /* Ping-pong: local rank k talks to remote rank k (if it exists). */
    for (int round = 0; round < 2; round++) {
        MPI_Comm c = round ? inter2 : inter;
        if (hr < rs && hr < hs) {
            long v = 1000L * t_rank + round, got = -1;
            MPI_Status st;
            if (color == 0) {
                MPI_CHECK(MPI_Send(&v, 1, MPI_LONG, hr, 5, c));
                MPI_CHECK(MPI_Recv(&got, 1, MPI_LONG, hr, 6, c, &st));
                CHECK(got == 1000L * t_rank + round + 2001, "pong %ld", got);
            } else {
                MPI_CHECK(MPI_Recv(&got, 1, MPI_LONG, hr, 5, c, &st));
                CHECK(got == 1000L * (t_rank - 1) + round, "ping %ld", got);
                got += 2000 + 1;
                MPI_CHECK(MPI_Send(&got, 1, MPI_LONG, hr, 6, c));
            }
            CHECK(st.MPI_SOURCE == hr, "status source %d, expected remote rank %d", st.MPI_SOURCE, hr);
        }
        if (!round) MPI_CHECK(MPI_Comm_dup(inter, &inter2));
    }
    /* Merge: odd side high -> evens first. */
    int mr, ms;
    MPI_CHECK(MPI_Intercomm_merge(inter, color, &merged));
    MPI_CHECK(MPI_Comm_rank(merged, &mr));
    MPI_CHECK(MPI_Comm_size(merged, &ms));
    CHECK(ms == t_size, "merged size %d", ms);
    CHECK(mr == (color ? evens + hr : hr), "merged rank %d (high=%d)", mr, color);
    MPI_CHECK(MPI_Comm_free(&merged));
    /* Evens high -> odds first. */
    MPI_CHECK(MPI_Intercomm_merge(inter2, !color, &merged));
    MPI_CHECK(MPI_Comm_rank(merged, &mr));
    CHECK(mr == (color ? hr : odds + hr), "merged rank %d (high=%d)", mr, !color);
    int sum = 0, one = 1, got;
    /* A ring over the merged communicator. */
    MPI_CHECK(MPI_Sendrecv(&one, 1, MPI_INT, (mr + 1) % ms, 8, &got, 1, MPI_INT,
                           (mr + ms - 1) % ms, 8, merged, MPI_STATUS_IGNORE));
    sum += got;
    CHECK(sum == 1, "ring over merged");
    MPI_CHECK(MPI_Comm_free(&merged));
    MPI_CHECK(MPI_Comm_free(&inter2));
    MPI_CHECK(MPI_Comm_free(&inter));
    MPI_CHECK(MPI_Comm_free(&half));
    MPI_CHECK(MPI_Group_free(&rg));
    MPI_CHECK(MPI_Group_free(&wg));
    t_finish("intercomm");
    return 0;
}
