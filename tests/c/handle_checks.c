/* np: 1 2 4 */
/* Invalid handles get their own error class whether or not the function is implemented:
 * MPI_Comm_disconnect(MPI_COMM_NULL) is MPI_ERR_COMM, RMA on MPI_WIN_NULL MPI_ERR_WIN, file
 * calls on MPI_FILE_NULL MPI_ERR_FILE, MPI_Comm_spawn on MPI_COMM_NULL MPI_ERR_COMM (never
 * MPI_ERR_UNSUPPORTED_OPERATION first). MPI_Comm_disconnect of a real communicator frees it
 * after its pending communication completes. */
#include "common.h"

static int file_calls = 0, file_code = 0;
static void on_file_error(MPI_File *fh, int *code, ...)
{
    CHECK(*fh == MPI_FILE_NULL, "file error handler called with a file that is not MPI_FILE_NULL");
    file_calls++;
    file_code = *code;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));

    MPI_Comm null = MPI_COMM_NULL;
    EXPECT_CLASS(MPI_Comm_disconnect(&null), MPI_ERR_COMM);
    EXPECT_CLASS(MPI_Win_fence(0, MPI_WIN_NULL), MPI_ERR_WIN);
    int x = 0;
    EXPECT_CLASS(MPI_Put(&x, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_WIN_NULL), MPI_ERR_WIN);
    MPI_Offset size;
    EXPECT_CLASS(MPI_File_get_size(MPI_FILE_NULL, &size), MPI_ERR_FILE);
    MPI_Comm child;
    int errs[1];
    EXPECT_CLASS(MPI_Comm_spawn("true", MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_NULL, &child, errs),
                 MPI_ERR_COMM);

    /* The default file error handler lives on MPI_FILE_NULL (MPI_ERRORS_RETURN at first). */
    MPI_Errhandler eh, got_eh;
    MPI_CHECK(MPI_File_create_errhandler(on_file_error, &eh));
    MPI_CHECK(MPI_File_set_errhandler(MPI_FILE_NULL, eh));
    MPI_CHECK(MPI_File_get_errhandler(MPI_FILE_NULL, &got_eh));
    CHECK(got_eh == eh, "MPI_File_get_errhandler gave %#x, expected %#x", (unsigned)got_eh, (unsigned)eh);
    MPI_CHECK(MPI_Errhandler_free(&got_eh));
    MPI_CHECK(MPI_File_call_errhandler(MPI_FILE_NULL, MPI_ERR_IO));
    CHECK(file_calls == 1 && file_code == MPI_ERR_IO, "file handler ran %d times with code %d", file_calls,
          file_code);
    /* A file handler on a communicator is refused (MPICH 4.0 accepts it). */
    if (t_is_ferrite()) EXPECT_CLASS(MPI_Comm_set_errhandler(MPI_COMM_SELF, eh), MPI_ERR_ARG);
    MPI_CHECK(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Errhandler_free(&eh));

    /* A message in flight when the communicator is disconnected still arrives. */
    MPI_Comm dup;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    int to = (t_rank + 1) % t_size, from = (t_rank + t_size - 1) % t_size, v = t_rank, got = -1;
    MPI_Request rq[2];
    MPI_CHECK(MPI_Irecv(&got, 1, MPI_INT, from, 3, dup, &rq[0]));
    MPI_CHECK(MPI_Isend(&v, 1, MPI_INT, to, 3, dup, &rq[1]));
    MPI_CHECK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
    MPI_CHECK(MPI_Comm_disconnect(&dup));
    CHECK(dup == MPI_COMM_NULL, "MPI_Comm_disconnect did not set the handle to MPI_COMM_NULL");
    CHECK(got == from, "received %d, expected %d", got, from);
    t_finish("handle_checks");
    return 0;
}
