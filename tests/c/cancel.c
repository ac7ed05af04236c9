/* np: 1 2 4 16 */
/* Cancel of a posted receive: after Cancel and Wait, Test_cancelled says true, the buffer
 * is untouched and a later message with the same source/tag goes to a new receive.
 * Cancel of a receive that already completed has no effect (Test_cancelled false). */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int peer = t_partner();
    MPI_Request rq;
    MPI_Status st;
    int a[4] = {-1, -1, -1, -1}, b[4] = {0, 0, 0, 0}, s[4];
    int flag = -1;
    /* Specific source and wildcard source. */
    for (int w = 0; w < 2; w++) {
        int src = w ? MPI_ANY_SOURCE : peer;
        MPI_CHECK(MPI_Irecv(a, 4, MPI_INT, src, 999, MPI_COMM_WORLD, &rq));
        MPI_CHECK(MPI_Cancel(&rq));
        MPI_CHECK(MPI_Wait(&rq, &st));
        CHECK(rq == MPI_REQUEST_NULL, "Wait on a cancelled request did not free it");
        MPI_CHECK(MPI_Test_cancelled(&st, &flag));
        CHECK(flag, "Test_cancelled false for a cancelled receive nothing could match");
        CHECK(a[0] == -1 && a[3] == -1, "cancelled receive changed its buffer");
    }
    /* The partner sends on tag 999 only once we have told it our receives are cancelled
     * (else its message could legitimately match one of them). */
    int ready = 1, pready = 0;
    MPI_CHECK(MPI_Sendrecv(&ready, 1, MPI_INT, peer, 1, &pready, 1, MPI_INT, peer, 1,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    /* The same source/tag now goes to a fresh receive. */
    for (int i = 0; i < 4; i++) s[i] = t_rank * 10 + i;
    MPI_Request sr;
    MPI_CHECK(MPI_Isend(s, 4, MPI_INT, peer, 999, MPI_COMM_WORLD, &sr));
    MPI_CHECK(MPI_Recv(b, 4, MPI_INT, peer, 999, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Wait(&sr, MPI_STATUS_IGNORE));
    for (int i = 0; i < 4; i++) CHECK(b[i] == peer * 10 + i, "element %d is %d", i, b[i]);
    CHECK(a[0] == -1 && a[3] == -1, "cancelled receive got the later message");
    MPI_CHECK(MPI_Test_cancelled(&st, &flag));
    CHECK(!flag, "Test_cancelled true for a normal receive");

    /* Cancel after completion: no effect. */
    MPI_CHECK(MPI_Irecv(b, 4, MPI_INT, peer, 5, MPI_COMM_WORLD, &rq));
    MPI_CHECK(MPI_Isend(s, 4, MPI_INT, peer, 5, MPI_COMM_WORLD, &sr));
    flag = 0;
    while (!flag) MPI_CHECK(MPI_Request_get_status(rq, &flag, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Cancel(&rq));
    MPI_CHECK(MPI_Wait(&rq, &st));
    MPI_CHECK(MPI_Test_cancelled(&st, &flag));
    CHECK(!flag, "Test_cancelled true for a receive that had completed before Cancel");
    CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == 5, "status source %d tag %d", st.MPI_SOURCE,
          st.MPI_TAG);
    for (int i = 0; i < 4; i++) CHECK(b[i] == peer * 10 + i, "element %d is %d", i, b[i]);
    MPI_CHECK(MPI_Wait(&sr, MPI_STATUS_IGNORE));

    /* Many cancelled receives leave nothing behind: traffic afterwards is normal. */
    MPI_Request many[100];
    for (int i = 0; i < 100; i++)
        MPI_CHECK(MPI_Irecv(a, 4, MPI_INT, MPI_ANY_SOURCE, 7, MPI_COMM_WORLD, &many[i]));
    for (int i = 0; i < 100; i++) MPI_CHECK(MPI_Cancel(&many[i]));
    MPI_Status ms[100];
    MPI_CHECK(MPI_Waitall(100, many, ms));
    for (int i = 0; i < 100; i++) {
        MPI_CHECK(MPI_Test_cancelled(&ms[i], &flag));
        CHECK(flag, "receive %d of 100 not cancelled", i);
    }
    MPI_CHECK(MPI_Sendrecv(&ready, 1, MPI_INT, peer, 2, &pready, 1, MPI_INT, peer, 2,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Sendrecv(s, 4, MPI_INT, peer, 7, b, 4, MPI_INT, peer, 7, MPI_COMM_WORLD, &st));
    for (int i = 0; i < 4; i++) CHECK(b[i] == peer * 10 + i, "after cancels: element %d", i);
    CHECK(a[0] == -1, "a cancelled receive got data");
    t_finish("cancel");
    return 0;
}
