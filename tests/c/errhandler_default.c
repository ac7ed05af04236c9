/* np: 1 2 4 */
/* A communicator whose error handler the program never set (nor on the communicator it came
 * from) follows MPI_COMM_WORLD's handler of the moment, as in MPICH: programs set
 * MPI_ERRORS_RETURN on WORLD after making communicators and expect errors on those to come
 * back (MPICH's errors/comm/ *_nullarg tests). MPI_Comm_get_errhandler still reports
 * MPI_ERRORS_ARE_FATAL there, and a handler set on a communicator sticks to it and its
 * children. Windows follow WORLD the same way. Constructors refuse a null output pointer with MPI_ERR_ARG before they start. */
#include "common.h"

static int calls = 0;
static void count(MPI_Comm *c, int *code, ...)
{
    (void)c;
    (void)code;
    calls++;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_Comm early, mid, inter_half;
    int wbuf = 0;
    MPI_Win win;
    MPI_CHECK(MPI_Win_create(&wbuf, sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD,
                             &win));
    MPI_Group g;
    MPI_Errhandler h;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &early));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, t_rank, &inter_half));
    MPI_CHECK(MPI_Comm_get_errhandler(early, &h));
    CHECK(h == MPI_ERRORS_ARE_FATAL, "a new communicator reports %#x", (unsigned)h);
    MPI_CHECK(MPI_Comm_group(early, &g));

    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    /* Every constructor, on a communicator made before WORLD's handler was set. */
    int n;
    EXPECT_CLASS(MPI_Comm_size(early, NULL), MPI_ERR_ARG);
    EXPECT_CLASS(MPI_Comm_dup(early, NULL), MPI_ERR_ARG);
    EXPECT_CLASS(MPI_Comm_split(early, 0, 0, NULL), MPI_ERR_ARG);
    EXPECT_CLASS(MPI_Comm_split_type(early, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, NULL),
                 MPI_ERR_ARG);
    EXPECT_CLASS(MPI_Comm_create(early, g, NULL), MPI_ERR_ARG);
    EXPECT_CLASS(MPI_Comm_create_group(early, g, 0, NULL), MPI_ERR_ARG);
    MPI_Request r;
    EXPECT_CLASS(MPI_Comm_idup(early, NULL, &r), MPI_ERR_ARG);
    /* Checked before the (invalid at -n 1) remote leader: no collective runs. */
    EXPECT_CLASS(MPI_Intercomm_create(inter_half, 0, MPI_COMM_WORLD, 1 - t_rank % 2, 5, NULL),
                 MPI_ERR_ARG);
    int dims[1] = {t_size}, periods[1] = {0};
    EXPECT_CLASS(MPI_Cart_create(early, 1, dims, periods, 0, NULL), MPI_ERR_ARG);
    EXPECT_CLASS(MPI_Send(&n, 1, MPI_INT, t_size, 0, early), MPI_ERR_RANK);
    /* A window made before, and a keyval of the wrong kind on it: WORLD's handler too. */
    int ckey;
    MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &ckey, NULL));
    EXPECT_CLASS(MPI_Win_set_attr(win, ckey, &wbuf), MPI_ERR_KEYVAL);
    MPI_CHECK(MPI_Win_get_errhandler(win, &h));
    CHECK(h == MPI_ERRORS_ARE_FATAL, "a new window reports %#x", (unsigned)h);
    MPI_CHECK(MPI_Comm_free_keyval(&ckey));
    /* MPI_COMM_SELF follows WORLD too. */
    EXPECT_CLASS(MPI_Send(NULL, 1, MPI_INT, 0, 0, MPI_COMM_SELF), MPI_ERR_BUFFER);
    MPI_CHECK(MPI_Comm_get_errhandler(early, &h));
    CHECK(h == MPI_ERRORS_ARE_FATAL, "get_errhandler reports %#x", (unsigned)h);

    /* WORLD's handler of the moment: a user handler on WORLD is called for `early`. */
    MPI_Errhandler eh;
    MPI_CHECK(MPI_Comm_create_errhandler(count, &eh));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh));
    MPI_Comm_size(early, NULL);
    CHECK(calls == 1, "WORLD's handler called %d times for an error on a dup", calls);
    /* A handler set on a communicator sticks: children made after carry it. */
    MPI_CHECK(MPI_Comm_set_errhandler(early, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_dup(early, &mid));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    EXPECT_CLASS(MPI_Comm_size(mid, NULL), MPI_ERR_ARG);
    CHECK(calls == 1, "WORLD's handler called for a communicator with its own (%d)", calls);
    MPI_CHECK(MPI_Comm_get_errhandler(mid, &h));
    CHECK(h == MPI_ERRORS_RETURN, "dup of a RETURN communicator reports %#x", (unsigned)h);
    MPI_CHECK(MPI_Errhandler_free(&eh));

    /* The communicators still work. */
    int sum = 0;
    MPI_CHECK(MPI_Allreduce(&t_rank, &sum, 1, MPI_INT, MPI_SUM, mid));
    CHECK(sum == t_size * (t_size - 1) / 2, "allreduce %d", sum);
    MPI_CHECK(MPI_Win_free(&win));
    MPI_CHECK(MPI_Group_free(&g));
    MPI_CHECK(MPI_Comm_free(&mid));
    MPI_CHECK(MPI_Comm_free(&inter_half));
    MPI_CHECK(MPI_Comm_free(&early));
    t_finish("errhandler_default");
    return 0;
}
