/* np: 1 2 */
/* Ferrite only: a function Ferrite does not implement returns (under MPI_ERRORS_RETURN)
 * an error of class MPI_ERR_UNSUPPORTED_OPERATION whose string names the function, and the
 * library keeps working. Skipped on other MPI libraries. */
#include "common.h"

static void expect_unsupported(int rc, const char *fn)
{
    CHECK(rc != MPI_SUCCESS, "%s succeeded; expected MPI_ERR_UNSUPPORTED_OPERATION", fn);
    int cls = t_class(rc);
    CHECK(cls == MPI_ERR_UNSUPPORTED_OPERATION, "%s returned class %d, expected "
          "MPI_ERR_UNSUPPORTED_OPERATION (%d)", fn, cls, MPI_ERR_UNSUPPORTED_OPERATION);
    const char *s = t_errstr(rc);
    CHECK(strstr(s, fn) != NULL, "error string of %s does not name it: \"%s\"", fn, s);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    if (!t_expect_ferrite()) {
        MPI_CHECK(MPI_Finalize());
        if (t_rank == 0) printf("skipped: Ferrite-only check (library is not Ferrite)\n");
        return 0;
    }
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    /* Dynamic processes are not implemented. */
    MPI_Comm other = MPI_COMM_NULL;
    expect_unsupported(MPI_Comm_connect("ferrite-no-port", MPI_INFO_NULL, 0, MPI_COMM_SELF, &other),
                       "MPI_Comm_connect");
    /* Still working afterwards. */
    int peer = t_partner(), in = -1;
    MPI_CHECK(MPI_Sendrecv(&t_rank, 1, MPI_INT, peer, 0, &in, 1, MPI_INT, peer, 0,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(in == peer, "after unsupported calls: got %d", in);
    t_finish("unsupported");
    return 0;
}
