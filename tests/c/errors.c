/* np: 1 2 4 16 */
/* Invalid arguments under MPI_ERRORS_RETURN: each call must return an error of the right
 * class (checked with MPI_Error_class) whose MPI_Error_string is not empty, must not
 * communicate, and the library must keep working afterwards. */
#include "common.h"
#include <limits.h>

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    /* Errors on MPI_COMM_NULL or no object are raised on COMM_SELF (MPI-4) or WORLD. */
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    int n = t_size, x = 1, y = 0;
    MPI_Status st;
    MPI_Request rq;

    /* Rank */
    EXPECT_CLASS(MPI_Send(&x, 1, MPI_INT, n, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    EXPECT_CLASS(MPI_Send(&x, 1, MPI_INT, -5, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    EXPECT_CLASS(MPI_Recv(&y, 1, MPI_INT, n + 3, 0, MPI_COMM_WORLD, &st), MPI_ERR_RANK);
    EXPECT_CLASS(MPI_Isend(&x, 1, MPI_INT, n, 0, MPI_COMM_WORLD, &rq), MPI_ERR_RANK);
    EXPECT_CLASS(MPI_Irecv(&y, 1, MPI_INT, -7, 0, MPI_COMM_WORLD, &rq), MPI_ERR_RANK);
    EXPECT_CLASS(MPI_Ssend(&x, 1, MPI_INT, n, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    EXPECT_CLASS(MPI_Iprobe(n, 0, MPI_COMM_WORLD, &x, &st), MPI_ERR_RANK);
    x = 1;

    /* Tag */
    int *ub = NULL, flag = 0;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
    CHECK(flag && ub, "MPI_TAG_UB not set");
    EXPECT_CLASS(MPI_Send(&x, 1, MPI_INT, 0, -1, MPI_COMM_WORLD), MPI_ERR_TAG);
    EXPECT_CLASS(MPI_Send(&x, 1, MPI_INT, 0, -100, MPI_COMM_WORLD), MPI_ERR_TAG);
    if (*ub < INT_MAX)
        EXPECT_CLASS(MPI_Send(&x, 1, MPI_INT, 0, *ub + 1, MPI_COMM_WORLD), MPI_ERR_TAG);
    EXPECT_CLASS(MPI_Recv(&y, 1, MPI_INT, 0, -100, MPI_COMM_WORLD, &st), MPI_ERR_TAG);
    EXPECT_CLASS(MPI_Isend(&x, 1, MPI_INT, 0, -3, MPI_COMM_WORLD, &rq), MPI_ERR_TAG);

    /* Communicator */
    EXPECT_CLASS(MPI_Send(&x, 1, MPI_INT, 0, 0, MPI_COMM_NULL), MPI_ERR_COMM);
    EXPECT_CLASS(MPI_Recv(&y, 1, MPI_INT, 0, 0, MPI_COMM_NULL, &st), MPI_ERR_COMM);
    EXPECT_CLASS(MPI_Irecv(&y, 1, MPI_INT, 0, 0, MPI_COMM_NULL, &rq), MPI_ERR_COMM);
    int r;
    EXPECT_CLASS(MPI_Comm_rank(MPI_COMM_NULL, &r), MPI_ERR_COMM);
    EXPECT_CLASS(MPI_Comm_size(MPI_COMM_NULL, &r), MPI_ERR_COMM);

    /* Count */
    EXPECT_CLASS(MPI_Send(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    EXPECT_CLASS(MPI_Recv(&y, -2, MPI_INT, 0, 0, MPI_COMM_WORLD, &st), MPI_ERR_COUNT);
    EXPECT_CLASS(MPI_Isend(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD, &rq), MPI_ERR_COUNT);

    /* Datatype */
    EXPECT_CLASS(MPI_Send(&x, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    EXPECT_CLASS(MPI_Recv(&y, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD, &st), MPI_ERR_TYPE);
    MPI_Datatype uncommitted;
    MPI_CHECK(MPI_Type_contiguous(2, MPI_INT, &uncommitted));
    int two[2] = {1, 2};
    EXPECT_CLASS(MPI_Send(two, 1, uncommitted, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    MPI_CHECK(MPI_Type_free(&uncommitted));
    CHECK(uncommitted == MPI_DATATYPE_NULL, "Type_free did not set the handle to NULL");

    /* Request */
    MPI_Request null = MPI_REQUEST_NULL;
    EXPECT_CLASS(MPI_Start(&null), MPI_ERR_REQUEST);
    null = MPI_REQUEST_NULL;
    EXPECT_CLASS(MPI_Request_free(&null), MPI_ERR_REQUEST);
    /* Start on a request that is not persistent. */
    MPI_CHECK(MPI_Irecv(&y, 1, MPI_INT, t_rank, 77, MPI_COMM_WORLD, &rq));
    EXPECT_CLASS(MPI_Start(&rq), MPI_ERR_REQUEST);
    CHECK(rq != MPI_REQUEST_NULL, "failed MPI_Start freed the request");

    /* Waiting on the null request is fine and gives an empty status. */
    null = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Wait(&null, &st));
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG,
          "Wait(MPI_REQUEST_NULL): status source %d tag %d, expected the empty status",
          st.MPI_SOURCE, st.MPI_TAG);

    /* Every error class has a non-empty string. */
    int classes[] = {MPI_SUCCESS, MPI_ERR_BUFFER, MPI_ERR_COUNT, MPI_ERR_TYPE, MPI_ERR_TAG,
                     MPI_ERR_COMM, MPI_ERR_RANK, MPI_ERR_REQUEST, MPI_ERR_ROOT, MPI_ERR_GROUP,
                     MPI_ERR_OP, MPI_ERR_TOPOLOGY, MPI_ERR_DIMS, MPI_ERR_ARG, MPI_ERR_UNKNOWN,
                     MPI_ERR_TRUNCATE, MPI_ERR_OTHER, MPI_ERR_INTERN, MPI_ERR_IN_STATUS,
                     MPI_ERR_PENDING, MPI_ERR_UNSUPPORTED_OPERATION};
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
        char s[MPI_MAX_ERROR_STRING];
        int len = -1, cls = -1;
        MPI_CHECK(MPI_Error_string(classes[i], s, &len));
        CHECK(len > 0 && len < MPI_MAX_ERROR_STRING && (int)strlen(s) == len,
              "error string of class %d has length %d", classes[i], len);
        MPI_CHECK(MPI_Error_class(classes[i], &cls));
        CHECK(cls == classes[i], "MPI_Error_class(%d) = %d", classes[i], cls);
    }

    /* Nothing of the above was sent: the pending self-receive gets this message only. */
    int z = 4242;
    MPI_CHECK(MPI_Send(&z, 1, MPI_INT, t_rank, 77, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Wait(&rq, &st));
    CHECK(y == 4242, "self message holds %d", y);
    int pending = 1;
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &pending, &st));
    CHECK(!pending, "an erroneous call sent a message (source %d tag %d)", st.MPI_SOURCE,
          st.MPI_TAG);
    t_finish("errors");
    return 0;
}
