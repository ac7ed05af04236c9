/* np: 1 2 4 16 */
/* Error handlers: MPI_ERRORS_ARE_FATAL is the default on MPI_COMM_WORLD; MPI_ERRORS_RETURN
 * returns codes; a handler from MPI_Comm_create_errhandler is called once per error with
 * the communicator and the code (and may call MPI itself), is inherited by Comm_dup,
 * survives MPI_Errhandler_free while attached, and is invoked by Comm_call_errhandler.
 * Errors on a communicator only go to that communicator's handler. */
#include "common.h"

static int calls;
static MPI_Comm last_comm = MPI_COMM_NULL;
static int last_code = -1, last_class = -1;
static char last_msg[MPI_MAX_ERROR_STRING];

static void handler(MPI_Comm *comm, int *code, ...)
{
    calls++;
    last_comm = *comm;
    last_code = *code;
    int len = 0;
    MPI_Error_class(*code, &last_class);
    MPI_Error_string(*code, last_msg, &len);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int n = t_size, x = 1;
    MPI_Errhandler eh, got;
    MPI_CHECK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &got));
    CHECK(got == MPI_ERRORS_ARE_FATAL, "default handler of MPI_COMM_WORLD is not "
          "MPI_ERRORS_ARE_FATAL");
    MPI_CHECK(MPI_Errhandler_free(&got));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &got));
    CHECK(got == MPI_ERRORS_RETURN, "Comm_get_errhandler does not give MPI_ERRORS_RETURN back");
    MPI_CHECK(MPI_Errhandler_free(&got));
    EXPECT_CLASS(MPI_Send(&x, 1, MPI_INT, n, 0, MPI_COMM_WORLD), MPI_ERR_RANK);

    MPI_Comm c, c2;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    MPI_CHECK(MPI_Comm_create_errhandler(handler, &eh));
    MPI_CHECK(MPI_Comm_set_errhandler(c, eh));
    MPI_CHECK(MPI_Comm_get_errhandler(c, &got));
    CHECK(got == eh, "Comm_get_errhandler does not give the user handler back");
    MPI_CHECK(MPI_Errhandler_free(&got));

    /* The handler runs, then the call returns the code it was given. */
    int rc = MPI_Send(&x, 1, MPI_INT, n + 1, 0, c);
    CHECK(calls == 1, "user handler called %d times, expected 1", calls);
    CHECK(last_comm == c, "handler got another communicator");
    CHECK(last_class == MPI_ERR_RANK, "handler got class %d, expected MPI_ERR_RANK", last_class);
    CHECK(last_msg[0] != 0, "MPI_Error_string inside the handler gave an empty string");
    CHECK(rc == last_code, "MPI_Send returned %d, the handler was given %d", rc, last_code);

    /* Errors on MPI_COMM_WORLD do not reach it. */
    EXPECT_CLASS(MPI_Send(&x, 1, MPI_INT, 0, -5, MPI_COMM_WORLD), MPI_ERR_TAG);
    CHECK(calls == 1, "the handler of a dup was called for an error on MPI_COMM_WORLD");

    /* Inherited by Comm_dup; still attached after Errhandler_free. */
    MPI_CHECK(MPI_Comm_dup(c, &c2));
    MPI_CHECK(MPI_Errhandler_free(&eh));
    CHECK(eh == MPI_ERRHANDLER_NULL, "Errhandler_free did not set MPI_ERRHANDLER_NULL");
    MPI_Status st;
    rc = MPI_Recv(&x, -1, MPI_INT, 0, 0, c2, &st);
    CHECK(calls == 2 && last_comm == c2 && last_class == MPI_ERR_COUNT,
          "dup of a comm with a user handler: calls %d class %d", calls, last_class);
    rc = MPI_Send(&x, 1, MPI_DATATYPE_NULL, 0, 0, c);
    CHECK(calls == 3 && last_comm == c && last_class == MPI_ERR_TYPE,
          "after Errhandler_free: calls %d class %d", calls, last_class);

    /* Comm_call_errhandler. */
    MPI_CHECK(MPI_Comm_call_errhandler(c, MPI_ERR_OTHER));
    CHECK(calls == 4 && last_code == MPI_ERR_OTHER && last_comm == c,
          "Comm_call_errhandler: calls %d code %d", calls, last_code);

    /* A user-defined error class and code reach the handler too. */
    int myclass = -1, mycode = -1;
    MPI_CHECK(MPI_Add_error_class(&myclass));
    MPI_CHECK(MPI_Add_error_code(myclass, &mycode));
    MPI_CHECK(MPI_Add_error_string(mycode, "ferrite test error"));
    MPI_CHECK(MPI_Comm_call_errhandler(c2, mycode));
    CHECK(calls == 5 && last_code == mycode && last_class == myclass &&
          strcmp(last_msg, "ferrite test error") == 0,
          "user error code: calls %d class %d (want %d) string '%s'", calls, last_class, myclass,
          last_msg);

    /* Back to ERRORS_RETURN: no more calls. */
    MPI_CHECK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
    EXPECT_CLASS(MPI_Send(&x, 1, MPI_INT, n, 0, c), MPI_ERR_RANK);
    CHECK(calls == 5, "handler called after it was replaced");
    /* Normal traffic on the communicator with a user handler does not call it. */
    int peer = t_partner(), in = -1;
    MPI_CHECK(MPI_Sendrecv(&t_rank, 1, MPI_INT, peer, 0, &in, 1, MPI_INT, peer, 0, c2, &st));
    CHECK(in == peer && calls == 5, "traffic on c2: got %d, calls %d", in, calls);
    MPI_CHECK(MPI_Comm_free(&c2));
    MPI_CHECK(MPI_Comm_free(&c));
    t_finish("errhandler");
    return 0;
}
