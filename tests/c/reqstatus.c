/* np: 1 2 4 16 */
/* Request_get_status reports completion without freeing the request; Request_free of an
 * active send still delivers the message; get_status of MPI_REQUEST_NULL is flag true
 * with an empty status. */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int peer = t_partner();
    MPI_Request rq, sr;
    MPI_Status st;
    int flag = -1, x = -1, v = 100 + t_rank;
    /* The partner sends only after we say so: until then get_status must say not done. */
    MPI_CHECK(MPI_Irecv(&x, 1, MPI_INT, peer, 3, MPI_COMM_WORLD, &rq));
    for (int i = 0; i < 20; i++) {
        MPI_CHECK(MPI_Request_get_status(rq, &flag, &st));
        CHECK(!flag, "Request_get_status: done before the message was sent");
    }
    int go = 0, got = -1;
    MPI_CHECK(MPI_Sendrecv(&go, 1, MPI_INT, peer, 4, &got, 1, MPI_INT, peer, 4, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Isend(&v, 1, MPI_INT, peer, 3, MPI_COMM_WORLD, &sr));
    flag = 0;
    while (!flag) MPI_CHECK(MPI_Request_get_status(rq, &flag, &st));
    CHECK(rq != MPI_REQUEST_NULL, "Request_get_status freed the request");
    CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == 3, "get_status: source %d tag %d",
          st.MPI_SOURCE, st.MPI_TAG);
    CHECK(x == 100 + peer, "received %d", x);
    MPI_CHECK(MPI_Request_get_status(rq, &flag, &st));
    CHECK(flag, "second Request_get_status says not done");
    MPI_Status st2;
    MPI_CHECK(MPI_Wait(&rq, &st2));
    CHECK(rq == MPI_REQUEST_NULL && st2.MPI_SOURCE == peer && st2.MPI_TAG == 3,
          "Wait after get_status: source %d tag %d", st2.MPI_SOURCE, st2.MPI_TAG);
    MPI_CHECK(MPI_Wait(&sr, MPI_STATUS_IGNORE));

    /* get_status of MPI_REQUEST_NULL */
    flag = 0;
    MPI_CHECK(MPI_Request_get_status(MPI_REQUEST_NULL, &flag, &st));
    CHECK(flag && st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG,
          "get_status(MPI_REQUEST_NULL): flag %d source %d tag %d", flag, st.MPI_SOURCE,
          st.MPI_TAG);

    /* Request_free of an active send: the message is still delivered, small and large. */
    int n = 100000;
    int *big = malloc(sizeof(int) * n), *in = malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++) big[i] = i ^ t_rank;
    /* To a partner the receives are posted late (the messages arrive unexpected); to
     * itself they are posted first, as MPICH 4.0.2 loses a freed self-send otherwise. */
    int self = peer == t_rank;
    MPI_Request r8, r9;
    x = -1;
    if (self) {
        MPI_CHECK(MPI_Irecv(&x, 1, MPI_INT, peer, 8, MPI_COMM_WORLD, &r8));
        MPI_CHECK(MPI_Irecv(in, n, MPI_INT, peer, 9, MPI_COMM_WORLD, &r9));
    }
    MPI_CHECK(MPI_Isend(&v, 1, MPI_INT, peer, 8, MPI_COMM_WORLD, &sr));
    MPI_CHECK(MPI_Request_free(&sr));
    CHECK(sr == MPI_REQUEST_NULL, "Request_free did not set MPI_REQUEST_NULL");
    MPI_Request br;
    MPI_CHECK(MPI_Isend(big, n, MPI_INT, peer, 9, MPI_COMM_WORLD, &br));
    MPI_CHECK(MPI_Request_free(&br));
    if (!self) {
        MPI_CHECK(MPI_Irecv(&x, 1, MPI_INT, peer, 8, MPI_COMM_WORLD, &r8));
        MPI_CHECK(MPI_Irecv(in, n, MPI_INT, peer, 9, MPI_COMM_WORLD, &r9));
    }
    MPI_CHECK(MPI_Wait(&r8, &st));
    CHECK(x == 100 + peer, "freed small send delivered %d", x);
    MPI_CHECK(MPI_Wait(&r9, &st));
    for (int i = 0; i < n; i++) CHECK(in[i] == (i ^ peer), "freed large send: element %d", i);
    /* The partner has received our big message too before we free the buffer. */
    MPI_CHECK(MPI_Sendrecv(&go, 1, MPI_INT, peer, 10, &got, 1, MPI_INT, peer, 10,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    free(big);
    free(in);
    t_finish("reqstatus");
    return 0;
}
