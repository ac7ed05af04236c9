/* np: 2 4 */
/* The MPI_ERROR field of a status (MPI 4.1 section 3.2.5): calls with one status (Recv,
 * Wait, Test, Probe, Mprobe, Mrecv, Sendrecv, Waitany) that succeed leave it as it was; calls
 * with an
 * array of statuses set it only when they return MPI_ERR_IN_STATUS, and then in every
 * status they fill (MPI_SUCCESS for the requests that did not fail). A count of 2^62 and more
 * set with MPI_Status_set_elements_x comes back whole. Testany/Waitany/Request_get_status_any
 * over no active request give the empty status, MPI_ERROR = MPI_SUCCESS included (as MPICH;
 * mpi4py checks it). */
#include "common.h"

#define SENTINEL 12345

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    {
        MPI_Request none[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
        MPI_Status e;
        int idx = -5, flag = 0;
        e.MPI_ERROR = SENTINEL;
        MPI_CHECK(MPI_Testany(2, none, &idx, &flag, &e));
        CHECK(idx == MPI_UNDEFINED && flag && e.MPI_ERROR == MPI_SUCCESS && e.MPI_SOURCE == MPI_ANY_SOURCE &&
                  e.MPI_TAG == MPI_ANY_TAG,
              "Testany over null requests: index %d flag %d error %d", idx, flag, e.MPI_ERROR);
        e.MPI_ERROR = SENTINEL;
        MPI_CHECK(MPI_Request_get_status_any(2, none, &idx, &flag, &e));
        CHECK(idx == MPI_UNDEFINED && flag && e.MPI_ERROR == MPI_SUCCESS,
              "Request_get_status_any over null requests: index %d error %d", idx, e.MPI_ERROR);
        e.MPI_ERROR = SENTINEL;
        MPI_CHECK(MPI_Waitany(2, none, &idx, &e));
        CHECK(idx == MPI_UNDEFINED && e.MPI_ERROR == MPI_SUCCESS, "Waitany: error %d", e.MPI_ERROR);
    }
    int peer = t_rank ^ 1;
    if (peer >= t_size) { t_finish("status_error"); return 0; }
    int v = t_rank, got[4];
    MPI_Status s, ss[3];
    MPI_Request rq[3];

    s.MPI_ERROR = SENTINEL;
    MPI_CHECK(MPI_Sendrecv(&v, 1, MPI_INT, peer, 1, got, 1, MPI_INT, peer, 1, MPI_COMM_WORLD, &s));
    CHECK(s.MPI_ERROR == SENTINEL, "Sendrecv changed MPI_ERROR to %d", s.MPI_ERROR);

    MPI_CHECK(MPI_Isend(&v, 1, MPI_INT, peer, 2, MPI_COMM_WORLD, &rq[0]));
    s.MPI_ERROR = SENTINEL;
    MPI_CHECK(MPI_Probe(peer, 2, MPI_COMM_WORLD, &s));
    /* (MPICH 4.0 sets it in MPI_Probe: the standard leaves it undefined there.) */
    CHECK(s.MPI_ERROR == SENTINEL || !t_is_ferrite(), "Probe changed MPI_ERROR to %d", s.MPI_ERROR);
    MPI_Message msg;
    s.MPI_ERROR = SENTINEL;
    MPI_CHECK(MPI_Mprobe(peer, 2, MPI_COMM_WORLD, &msg, &s));
    CHECK(s.MPI_ERROR == SENTINEL, "Mprobe changed MPI_ERROR to %d", s.MPI_ERROR);
    s.MPI_ERROR = SENTINEL;
    MPI_CHECK(MPI_Mrecv(got, 1, MPI_INT, &msg, &s));
    CHECK(s.MPI_ERROR == SENTINEL && got[0] == peer, "Mrecv: MPI_ERROR %d, data %d", s.MPI_ERROR, got[0]);
    s.MPI_ERROR = SENTINEL;
    MPI_CHECK(MPI_Wait(&rq[0], &s));
    CHECK(s.MPI_ERROR == SENTINEL, "Wait changed MPI_ERROR to %d", s.MPI_ERROR);

    /* Waitall that succeeds: untouched. */
    MPI_CHECK(MPI_Irecv(&got[0], 1, MPI_INT, peer, 3, MPI_COMM_WORLD, &rq[0]));
    MPI_CHECK(MPI_Irecv(&got[1], 1, MPI_INT, peer, 4, MPI_COMM_WORLD, &rq[1]));
    MPI_CHECK(MPI_Send(&v, 1, MPI_INT, peer, 3, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Send(&v, 1, MPI_INT, peer, 4, MPI_COMM_WORLD));
    ss[0].MPI_ERROR = ss[1].MPI_ERROR = SENTINEL;
    MPI_CHECK(MPI_Waitall(2, rq, ss));
    /* (MPICH 4.0 writes MPI_SUCCESS there; section 3.2.5 says "if and only if".) */
    CHECK((ss[0].MPI_ERROR == SENTINEL && ss[1].MPI_ERROR == SENTINEL) || !t_is_ferrite(),
          "successful Waitall set MPI_ERROR");

    /* Waitall where one receive is truncated: MPI_ERR_IN_STATUS, each MPI_ERROR set. */
    int two[2] = {v, v};
    MPI_CHECK(MPI_Irecv(&got[0], 1, MPI_INT, peer, 5, MPI_COMM_WORLD, &rq[0]));
    MPI_CHECK(MPI_Irecv(&got[1], 1, MPI_INT, peer, 6, MPI_COMM_WORLD, &rq[1]));
    MPI_CHECK(MPI_Send(&v, 1, MPI_INT, peer, 5, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Send(two, 2, MPI_INT, peer, 6, MPI_COMM_WORLD));
    ss[0].MPI_ERROR = ss[1].MPI_ERROR = SENTINEL;
    int rc = MPI_Waitall(2, rq, ss);
    CHECK(t_class(rc) == MPI_ERR_IN_STATUS, "truncating Waitall returned class %d", t_class(rc));
    CHECK(ss[0].MPI_ERROR == MPI_SUCCESS, "status 0's MPI_ERROR is %d, expected MPI_SUCCESS", ss[0].MPI_ERROR);
    CHECK(t_class(ss[1].MPI_ERROR) == MPI_ERR_TRUNCATE, "status 1's MPI_ERROR class is %d",
          t_class(ss[1].MPI_ERROR));
    /* The same with completed sends before and after the failing receive (Waitall takes a
     * shortcut for them): every status says its error, MPI_SUCCESS for the sends. */
    MPI_CHECK(MPI_Isend(&v, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, &rq[0]));
    MPI_CHECK(MPI_Irecv(&got[0], 1, MPI_INT, peer, 8, MPI_COMM_WORLD, &rq[1]));
    MPI_CHECK(MPI_Isend(&v, 1, MPI_INT, peer, 9, MPI_COMM_WORLD, &rq[2]));
    MPI_CHECK(MPI_Send(two, 2, MPI_INT, peer, 8, MPI_COMM_WORLD));
    ss[0].MPI_ERROR = ss[1].MPI_ERROR = ss[2].MPI_ERROR = SENTINEL;
    rc = MPI_Waitall(3, rq, ss);
    CHECK(t_class(rc) == MPI_ERR_IN_STATUS, "Waitall over sends and a truncated receive returned class %d",
          t_class(rc));
    CHECK(ss[0].MPI_ERROR == MPI_SUCCESS && ss[2].MPI_ERROR == MPI_SUCCESS,
          "the sends' MPI_ERROR are %d and %d, expected MPI_SUCCESS", ss[0].MPI_ERROR, ss[2].MPI_ERROR);
    CHECK(t_class(ss[1].MPI_ERROR) == MPI_ERR_TRUNCATE, "the receive's MPI_ERROR class is %d",
          t_class(ss[1].MPI_ERROR));
    CHECK(rq[0] == MPI_REQUEST_NULL && rq[1] == MPI_REQUEST_NULL && rq[2] == MPI_REQUEST_NULL,
          "Waitall left a request handle set");
    MPI_CHECK(MPI_Recv(&got[2], 1, MPI_INT, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Recv(&got[3], 1, MPI_INT, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(got[2] == peer && got[3] == peer, "sends around the failure delivered %d and %d", got[2], got[3]);
    MPI_Count big = (MPI_Count)0x7654321f71234567LL, back = 0;
    MPI_CHECK(MPI_Status_set_elements_x(&s, MPI_BYTE, big));
    MPI_CHECK(MPI_Get_elements_x(&s, MPI_BYTE, &back));
    CHECK(back == big, "big count came back as %llx", (unsigned long long)back);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    t_finish("status_error");
    return 0;
}
