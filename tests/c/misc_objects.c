/* np: 1 2 3 */
/* Small object calls MPICH's suite found wrong, each checked for its data or class:
 * - MPI_Type_create_f90_real/_integer/_complex give the matching predefined type (size,
 *   and usable in a message); impossible precisions are errors (MPI_ERR_ARG);
 * - MPI_Status_set_elements_x keeps counts beyond 2^31 (Get_elements_c/_x, Get_count_c read
 *   them back; Get_count says MPI_UNDEFINED);
 * - MPI_Type_get_name names predefined types as mpi.h spells them;
 * - a zero-dimensional Cartesian grid (ndims 0, NULL dims and periods) is one process
 *   (rank 0 gets it, the others MPI_COMM_NULL), and the calls on it take NULL arrays. */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int size;
    MPI_Datatype t;

    /* Fortran 90 parameterized types. */
    MPI_CHECK(MPI_Type_create_f90_real(6, MPI_UNDEFINED, &t));
    MPI_CHECK(MPI_Type_size(t, &size));
    CHECK(size == 4, "f90 real(6): size %d", size);
    MPI_CHECK(MPI_Type_create_f90_real(15, 300, &t));
    MPI_CHECK(MPI_Type_size(t, &size));
    CHECK(size == 8, "f90 real(15, 300): size %d", size);
    MPI_CHECK(MPI_Type_create_f90_complex(MPI_UNDEFINED, 30, &t));
    MPI_CHECK(MPI_Type_size(t, &size));
    CHECK(size == 8, "f90 complex(range 30): size %d", size);
    MPI_CHECK(MPI_Type_create_f90_integer(9, &t));
    MPI_CHECK(MPI_Type_size(t, &size));
    CHECK(size == 4, "f90 integer(9): size %d", size);
    MPI_CHECK(MPI_Type_create_f90_integer(18, &t));
    MPI_CHECK(MPI_Type_size(t, &size));
    CHECK(size == 8, "f90 integer(18): size %d", size);
    if (t_is_ferrite()) { /* MPICH says MPI_ERR_OTHER */
        EXPECT_CLASS(MPI_Type_create_f90_real(60, MPI_UNDEFINED, &t), MPI_ERR_ARG);
        EXPECT_CLASS(MPI_Type_create_f90_integer(40, &t), MPI_ERR_ARG);
    } else {
        CHECK(MPI_Type_create_f90_real(60, MPI_UNDEFINED, &t) != MPI_SUCCESS, "real(60) exists");
    }
    {
        MPI_Datatype d;
        MPI_CHECK(MPI_Type_create_f90_real(15, MPI_UNDEFINED, &d));
        double x[2] = {1.5 + t_rank, -2.25}, y[2] = {0, 0};
        MPI_CHECK(MPI_Sendrecv(x, 2, d, t_rank, 0, y, 2, d, t_rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(y[0] == 1.5 + t_rank && y[1] == -2.25, "f90 real message: %g %g", y[0], y[1]);
    }

    /* Big counts in statuses. */
    MPI_Status st;
    MPI_Count big = ((MPI_Count)1 << 33) + 5, n = -1;
    MPI_CHECK(MPI_Status_set_elements_x(&st, MPI_INT, big));
    MPI_CHECK(MPI_Get_elements_c(&st, MPI_INT, &n));
    CHECK(n == big, "Get_elements_c after Status_set_elements_c: %lld", (long long)n);
    MPI_CHECK(MPI_Get_count_c(&st, MPI_INT, &n));
    CHECK(n == big, "Get_count_c: %lld", (long long)n);
    int small = -1;
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &small));
    CHECK(small == MPI_UNDEFINED, "Get_count of 2^33 ints: %d, expected MPI_UNDEFINED", small);
    MPI_CHECK(MPI_Status_set_elements_x(&st, MPI_DOUBLE, big));
    MPI_CHECK(MPI_Get_elements_x(&st, MPI_DOUBLE, &n));
    CHECK(n == big, "Get_elements_x: %lld", (long long)n);

    /* Names of predefined types. */
    struct { MPI_Datatype t; const char *name; } names[] = {
        {MPI_INT, "MPI_INT"}, {MPI_DOUBLE, "MPI_DOUBLE"}, {MPI_C_DOUBLE_COMPLEX, "MPI_C_DOUBLE_COMPLEX"},
        {MPI_UINT64_T, "MPI_UINT64_T"}, {MPI_2INT, "MPI_2INT"}, {MPI_COUNT, "MPI_COUNT"},
    };
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) {
        char name[MPI_MAX_OBJECT_NAME] = "";
        int len = -1;
        MPI_CHECK(MPI_Type_get_name(names[i].t, name, &len));
        CHECK(strcmp(name, names[i].name) == 0 && len == (int)strlen(names[i].name),
              "name of %s: \"%s\" (%d)", names[i].name, name, len);
    }

    /* A zero-dimensional grid. */
    MPI_Comm cart;
    MPI_CHECK(MPI_Cart_create(MPI_COMM_WORLD, 0, NULL, NULL, 0, &cart));
    if (t_rank == 0) {
        CHECK(cart != MPI_COMM_NULL, "rank 0 got no zero-dimensional grid");
        int csize = -1, nd = -1, r = -1;
        MPI_CHECK(MPI_Comm_size(cart, &csize));
        MPI_CHECK(MPI_Cartdim_get(cart, &nd));
        CHECK(csize == 1 && nd == 0, "zero-dimensional grid: size %d ndims %d", csize, nd);
        MPI_CHECK(MPI_Cart_get(cart, 0, NULL, NULL, NULL));
        MPI_CHECK(MPI_Cart_rank(cart, NULL, &r));
        CHECK(r == 0, "Cart_rank in a zero-dimensional grid: %d", r);
        MPI_CHECK(MPI_Cart_coords(cart, 0, 0, NULL));
        MPI_CHECK(MPI_Comm_free(&cart));
    } else {
        CHECK(cart == MPI_COMM_NULL, "rank %d got a zero-dimensional grid", t_rank);
    }
    MPI_CHECK(MPI_Dims_create(1, 0, NULL));
    t_finish("misc_objects");
    return 0;
}
