/* np: 2 3 4 */
/* Partitioned communication (MPI_Psend_init, MPI_Precv_init, MPI_Pready, _range, _list,
 * MPI_Parrived). Each rank sends to the next and receives from the previous in a ring,
 * with sender and receiver splitting the buffer differently (8 partitions of 6 doubles sent,
 * 3 of 16 received), over several starts of the same requests; partitions are marked ready
 * out of order and by all three Pready forms. Two partitioned requests for the same peer and
 * tag match in initialization order even when the second is started and readied first;
 * hundreds of init/free cycles for one peer and tag keep working. A partitioned message never matches an
 * ordinary receive (an MPI_ANY_TAG Irecv posted first stays pending). Errors: a partition
 * out of range and a repeated Pready are MPI_ERR_ARG, Pready on a receive or an inactive
 * send and Parrived on a send are MPI_ERR_REQUEST, MPI_ANY_SOURCE in Precv_init
 * MPI_ERR_RANK, zero partitions MPI_ERR_ARG. */
#include "common.h"

#define SP 8
#define SC 6
#define RP 3
#define RC 16
#define N (SP * SC)

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int next = (t_rank + 1) % t_size, prev = (t_rank + t_size - 1) % t_size;
    double sbuf[N], rbuf[N];
    MPI_Request s, r;
    MPI_CHECK(MPI_Psend_init(sbuf, SP, SC, MPI_DOUBLE, next, 5, MPI_COMM_WORLD, MPI_INFO_NULL, &s));
    MPI_CHECK(MPI_Precv_init(rbuf, RP, RC, MPI_DOUBLE, prev, 5, MPI_COMM_WORLD, MPI_INFO_NULL, &r));

    /* An ordinary receive of any tag must not take the partitioned messages. */
    int other = -1;
    MPI_Request any;
    MPI_CHECK(MPI_Irecv(&other, 1, MPI_INT, prev, MPI_ANY_TAG, MPI_COMM_WORLD, &any));

    /* Inactive: Pready is an error, Parrived says true. */
    EXPECT_CLASS(MPI_Pready(0, s), MPI_ERR_REQUEST);
    int flag = 0;
    MPI_CHECK(MPI_Parrived(r, 0, &flag));
    CHECK(flag, "Parrived on an inactive request gave false");

    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < N; i++) {
            sbuf[i] = t_rank * 1000 + round * 100 + i;
            rbuf[i] = -1;
        }
        MPI_CHECK(MPI_Start(&r));
        MPI_CHECK(MPI_Start(&s));
        EXPECT_CLASS(MPI_Pready(SP, s), MPI_ERR_ARG);
        EXPECT_CLASS(MPI_Pready(0, r), MPI_ERR_REQUEST);
        EXPECT_CLASS(MPI_Parrived(s, 0, &flag), MPI_ERR_REQUEST);
        EXPECT_CLASS(MPI_Parrived(r, RP, &flag), MPI_ERR_ARG);
        /* Nothing is sent before the last partition is ready: the receive stays pending. */
        MPI_CHECK(MPI_Pready(SP - 1, s));
        EXPECT_CLASS(MPI_Pready(SP - 1, s), MPI_ERR_ARG);
        if (round % 2 == 0) {
            MPI_CHECK(MPI_Pready_range(2, 4, s));
            int list[] = {6, 0, 5};
            MPI_CHECK(MPI_Pready_list(3, list, s));
            MPI_CHECK(MPI_Pready(1, s));
        } else {
            for (int p = SP - 2; p >= 0; p--) MPI_CHECK(MPI_Pready(p, s));
        }
        /* Parrived becomes true for every partition once the message is in. */
        for (int p = 0; p < RP; p++) {
            flag = 0;
            while (!flag) MPI_CHECK(MPI_Parrived(r, p, &flag));
        }
        MPI_Status st;
        MPI_CHECK(MPI_Wait(&r, &st));
        MPI_CHECK(MPI_Wait(&s, MPI_STATUS_IGNORE));
        for (int i = 0; i < N; i++)
            CHECK(rbuf[i] == prev * 1000 + round * 100 + i, "round %d: rbuf[%d] = %g, expected %d",
                  round, i, rbuf[i], prev * 1000 + round * 100 + i);
    }
    MPI_CHECK(MPI_Test(&any, &flag, MPI_STATUS_IGNORE));
    CHECK(!flag, "an MPI_ANY_TAG Irecv matched a partitioned message");
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Request_free(&s));
    MPI_CHECK(MPI_Request_free(&r));
    /* The ordinary receive gets the ordinary message. */
    int v = 42 + t_rank;
    MPI_CHECK(MPI_Send(&v, 1, MPI_INT, next, 9, MPI_COMM_WORLD));
    MPI_Status st;
    MPI_CHECK(MPI_Wait(&any, &st));
    CHECK(other == 42 + prev && st.MPI_TAG == 9, "ordinary receive got %d tag %d", other, st.MPI_TAG);

    /* Same peer, same tag: the first initialized matches the first, whatever the order. */
    {
        int a[2] = {t_rank, 1}, b[2] = {t_rank, 2}, ra[2] = {-1, -1}, rb[2] = {-1, -1};
        MPI_Request sa, sb, qa, qb;
        MPI_CHECK(MPI_Psend_init(a, 2, 1, MPI_INT, next, 7, MPI_COMM_WORLD, MPI_INFO_NULL, &sa));
        MPI_CHECK(MPI_Psend_init(b, 1, 2, MPI_INT, next, 7, MPI_COMM_WORLD, MPI_INFO_NULL, &sb));
        MPI_CHECK(MPI_Precv_init(ra, 1, 2, MPI_INT, prev, 7, MPI_COMM_WORLD, MPI_INFO_NULL, &qa));
        MPI_CHECK(MPI_Precv_init(rb, 2, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, MPI_INFO_NULL, &qb));
        MPI_CHECK(MPI_Start(&qa));
        MPI_CHECK(MPI_Start(&qb));
        MPI_CHECK(MPI_Start(&sb));
        MPI_CHECK(MPI_Pready(0, sb));
        MPI_CHECK(MPI_Wait(&qb, &st));
        CHECK(rb[0] == prev && rb[1] == 2, "second request got %d %d, expected %d 2", rb[0], rb[1], prev);
        CHECK(st.MPI_TAG == 7 && st.MPI_SOURCE == prev, "status tag %d source %d", st.MPI_TAG, st.MPI_SOURCE);
        MPI_CHECK(MPI_Start(&sa));
        MPI_CHECK(MPI_Pready_range(0, 1, sa));
        MPI_CHECK(MPI_Wait(&qa, &st));
        CHECK(ra[0] == prev && ra[1] == 1, "first request got %d %d, expected %d 1", ra[0], ra[1], prev);
        CHECK(st.MPI_TAG == 7, "status tag %d", st.MPI_TAG);
        MPI_Request all[4] = {sa, sb, qa, qb};
        MPI_CHECK(MPI_Waitall(2, all, MPI_STATUSES_IGNORE));
        for (int i = 0; i < 4; i++) MPI_CHECK(MPI_Request_free(&all[i]));
    }

    /* Many init/free cycles for one peer and tag (freed requests give their place back). */
    for (int i = 0; i < 300; i++) {
        int x = i + t_rank, y = -1;
        MPI_Request a, b;
        MPI_CHECK(MPI_Psend_init(&x, 1, 1, MPI_INT, next, 8, MPI_COMM_WORLD, MPI_INFO_NULL, &a));
        MPI_CHECK(MPI_Precv_init(&y, 1, 1, MPI_INT, prev, 8, MPI_COMM_WORLD, MPI_INFO_NULL, &b));
        MPI_CHECK(MPI_Start(&b));
        MPI_CHECK(MPI_Start(&a));
        MPI_CHECK(MPI_Pready(0, a));
        MPI_CHECK(MPI_Wait(&b, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Wait(&a, MPI_STATUS_IGNORE));
        CHECK(y == i + prev, "cycle %d: got %d", i, y);
        MPI_CHECK(MPI_Request_free(&a));
        MPI_CHECK(MPI_Request_free(&b));
    }

    /* Argument errors. */
    EXPECT_CLASS(MPI_Precv_init(rbuf, RP, RC, MPI_DOUBLE, MPI_ANY_SOURCE, 5, MPI_COMM_WORLD,
                                MPI_INFO_NULL, &r), MPI_ERR_RANK);
    EXPECT_CLASS(MPI_Psend_init(sbuf, 0, SC, MPI_DOUBLE, next, 5, MPI_COMM_WORLD, MPI_INFO_NULL, &s),
                 MPI_ERR_ARG);
    EXPECT_CLASS(MPI_Psend_init(sbuf, SP, SC, MPI_DOUBLE, t_size, 5, MPI_COMM_WORLD, MPI_INFO_NULL, &s),
                 MPI_ERR_RANK);
    t_finish("partitioned");
    return 0;
}
