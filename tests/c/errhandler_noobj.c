/* np: 1 2 */
/* Errors of calls with no communicator, window or file (datatype and info calls...): MPI 4.1
 * raises them on MPI_COMM_SELF; MPICH 4.0 on MPI_COMM_WORLD, and programs written for it set
 * only WORLD's handler. Ferrite uses WORLD's handler until the program sets SELF's, SELF's
 * after. A session call on MPI_SESSION_NULL has no session handler to use: it is such an
 * error too (MPICH's way; mpi4py expects the error back, not an abort). */
#include "common.h"

static int self_calls = 0;
static void on_self(MPI_Comm *c, int *code, ...)
{
    (void)code;
    CHECK(*c == MPI_COMM_SELF, "handler of MPI_COMM_SELF called with another communicator");
    self_calls++;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    /* Only WORLD's handler was set: the error comes back (no abort). */
    MPI_Datatype t;
    EXPECT_CLASS(MPI_Type_contiguous(-1, MPI_INT, &t), MPI_ERR_COUNT);
    int size;
    EXPECT_CLASS(MPI_Type_size(MPI_DATATYPE_NULL, &size), MPI_ERR_TYPE);
    MPI_Group g;
    EXPECT_CLASS(MPI_Group_from_session_pset(MPI_SESSION_NULL, "mpi://WORLD", &g), MPI_ERR_SESSION);
    MPI_Info info;
    EXPECT_CLASS(MPI_Session_get_info(MPI_SESSION_NULL, &info), MPI_ERR_SESSION);
    if (t_is_ferrite()) {
        /* Once SELF has a handler of its own, no-object errors go there (MPI 4.1 9.3). */
        MPI_Errhandler eh;
        MPI_CHECK(MPI_Comm_create_errhandler(on_self, &eh));
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, eh));
        EXPECT_CLASS(MPI_Type_size(MPI_DATATYPE_NULL, &size), MPI_ERR_TYPE);
        CHECK(self_calls == 1, "MPI_COMM_SELF's handler ran %d times", self_calls);
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
        MPI_CHECK(MPI_Errhandler_free(&eh));
    }
    t_finish("errhandler_noobj");
    return 0;
}
