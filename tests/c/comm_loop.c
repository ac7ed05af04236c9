/* np: 1 2 4 */
/* 10,000 communicators created and freed in a loop (dup, split, create, create_group in
 * turn) never collide: each one carries a message whose tag and payload identify the
 * iteration, received on the new communicator while an older communicator with the same
 * group still holds a pending message that must not be matched instead. */
#include "common.h"

#define ITERS 10000

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_Comm keep;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &keep));
    int next = (t_rank + 1) % t_size, prev = (t_rank + t_size - 1) % t_size;
    /* A message on `keep` with tag 0 stays unreceived until the end. */
    int held = 4242, got_held = 0;
    MPI_Request hold;
    MPI_CHECK(MPI_Isend(&held, 1, MPI_INT, next, 0, keep, &hold));
    MPI_Group world_group;
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
    for (int it = 0; it < ITERS; it++) {
        MPI_Comm c;
        switch (it % 4) {
        case 0: MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c)); break;
        case 1: MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, 0, t_size - t_rank, &c)); break;
        case 2: MPI_CHECK(MPI_Comm_create(MPI_COMM_WORLD, world_group, &c)); break;
        default: MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, world_group, it, &c)); break;
        }
        int r, n;
        MPI_CHECK(MPI_Comm_rank(c, &r));
        MPI_CHECK(MPI_Comm_size(c, &n));
        CHECK(n == t_size, "iteration %d: size %d", it, n);
        int want_r = it % 4 == 1 ? t_size - 1 - t_rank : t_rank;
        CHECK(r == want_r, "iteration %d: rank %d, expected %d", it, r, want_r);
        if (it % 97 == 0 || it == ITERS - 1) {
            int to = (r + 1) % n, from = (r + n - 1) % n, v = it * 10 + r, w = -1;
            MPI_CHECK(MPI_Sendrecv(&v, 1, MPI_INT, to, 0, &w, 1, MPI_INT, from, 0, c,
                                   MPI_STATUS_IGNORE));
            CHECK(w == it * 10 + from, "iteration %d: got %d from %d", it, w, from);
        }
        MPI_CHECK(MPI_Comm_free(&c));
        CHECK(c == MPI_COMM_NULL, "Comm_free did not set MPI_COMM_NULL");
    }
    MPI_CHECK(MPI_Recv(&got_held, 1, MPI_INT, prev, 0, keep, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Wait(&hold, MPI_STATUS_IGNORE));
    CHECK(got_held == 4242, "held message: %d", got_held);
    MPI_CHECK(MPI_Group_free(&world_group));
    MPI_CHECK(MPI_Comm_free(&keep));
    t_finish("comm_loop");
    return 0;
}
