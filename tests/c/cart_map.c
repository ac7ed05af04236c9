/* np: 1 2 4 */
/* MPI_Cart_map: ranks below the grid size keep their rank, the others get MPI_UNDEFINED; a
 * grid with an empty dimension has no process, so every rank gets MPI_UNDEFINED (not an
 * error: rsmpi's cartesian_map example relies on it), and MPI_Cart_create over it gives
 * MPI_COMM_NULL; MPI_Cart_sub keeping no dimension gives rank 0 alone a zero-dimensional grid;
 * a grid larger than the communicator
 * and (on Ferrite) a negative dimension are MPI_ERR_DIMS. */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int n = t_size, r = -2;
    int periods[3] = {0, 1, 0};

    int d1[1] = {n};
    MPI_CHECK(MPI_Cart_map(MPI_COMM_WORLD, 1, d1, periods, &r));
    CHECK(r == t_rank, "dims {%d}: rank %d", n, r);

    int half[1] = {(n + 1) / 2};
    MPI_CHECK(MPI_Cart_map(MPI_COMM_WORLD, 1, half, periods, &r));
    CHECK(t_rank < half[0] ? r == t_rank : r == MPI_UNDEFINED, "dims {%d}: rank %d", half[0], r);

    int z1[1] = {0};
    r = -2;
    MPI_CHECK(MPI_Cart_map(MPI_COMM_WORLD, 1, z1, periods, &r));
    CHECK(r == MPI_UNDEFINED, "dims {0}: %d, expected MPI_UNDEFINED", r);

    int z3[3] = {2, 0, 3};
    r = -2;
    MPI_CHECK(MPI_Cart_map(MPI_COMM_WORLD, 3, z3, periods, &r));
    CHECK(r == MPI_UNDEFINED, "dims {2, 0, 3}: %d, expected MPI_UNDEFINED", r);

    int big[2] = {n, 2};
    EXPECT_CLASS(MPI_Cart_map(MPI_COMM_WORLD, 2, big, periods, &r), MPI_ERR_DIMS);
    /* MPICH 4.0 does not check for negative dimensions. */
    int neg[2] = {1, -1};
    if (t_is_ferrite()) EXPECT_CLASS(MPI_Cart_map(MPI_COMM_WORLD, 2, neg, periods, &r), MPI_ERR_DIMS);

    /* A grid larger than the communicator: an error, and MPI_COMM_NULL. */
    MPI_Comm toobig = MPI_COMM_WORLD;
    /* (Ferrite says MPI_ERR_TOPOLOGY, MPICH 4.0 MPI_ERR_ARG.) */
    int rc = MPI_Cart_create(MPI_COMM_WORLD, 2, big, periods, 0, &toobig);
    CHECK(t_class(rc) == (t_is_ferrite() ? MPI_ERR_TOPOLOGY : MPI_ERR_ARG), "too big a grid: class %d",
          t_class(rc));
    CHECK(toobig == MPI_COMM_NULL, "a failed MPI_Cart_create left its output set");
    /* MPI_Cart_create over an empty grid: MPI_COMM_NULL everywhere. */
    MPI_Comm cart = MPI_COMM_WORLD;
    MPI_CHECK(MPI_Cart_create(MPI_COMM_WORLD, 3, z3, periods, 0, &cart));
    CHECK(cart == MPI_COMM_NULL, "Cart_create over dims {2, 0, 3} made a communicator");
    /* MPI_Cart_sub keeping no dimension: a zero-dimensional grid of one process (rank 0,
     * congruent to MPI_COMM_SELF), MPI_COMM_NULL elsewhere (as MPICH). */
    int line[1] = {t_size}, keep[1] = {0}, nd = -1, topo = -1, res = -1;
    MPI_Comm l, none = MPI_COMM_WORLD;
    MPI_CHECK(MPI_Cart_create(MPI_COMM_WORLD, 1, line, periods, 0, &l));
    MPI_CHECK(MPI_Cart_sub(l, keep, &none));
    if (t_rank == 0) {
        CHECK(none != MPI_COMM_NULL, "Cart_sub to no dimension gave rank 0 MPI_COMM_NULL");
        MPI_CHECK(MPI_Comm_compare(none, MPI_COMM_SELF, &res));
        MPI_CHECK(MPI_Topo_test(none, &topo));
        MPI_CHECK(MPI_Cartdim_get(none, &nd));
        CHECK(res == MPI_CONGRUENT && topo == MPI_CART && nd == 0,
              "Cart_sub to no dimension: compare %d topo %d ndims %d", res, topo, nd);
        MPI_CHECK(MPI_Comm_free(&none));
    } else {
        CHECK(none == MPI_COMM_NULL, "Cart_sub to no dimension gave rank %d a communicator", t_rank);
    }
    MPI_CHECK(MPI_Comm_free(&l));
    t_finish("cart_map");
    return 0;
}
