/* np: 1 2 4 16 */
/* MPI_PROC_NULL as peer: every send completes at once, every receive completes at once
 * without touching the buffer and with source MPI_PROC_NULL, tag MPI_ANY_TAG, count 0;
 * probes find such a message immediately. */
#include "common.h"

static void empty(MPI_Status *st, const char *what)
{
    int c = -1;
    MPI_CHECK(MPI_Get_count(st, MPI_INT, &c));
    CHECK(st->MPI_SOURCE == MPI_PROC_NULL && st->MPI_TAG == MPI_ANY_TAG && c == 0,
          "%s: status source %d tag %d count %d, expected MPI_PROC_NULL, MPI_ANY_TAG, 0", what,
          st->MPI_SOURCE, st->MPI_TAG, c);
}

/* MPICH 4.0.2 (ch4) leaves the status of a completed nonblocking receive from
 * MPI_PROC_NULL unset, against the standard; that one check is enforced on Ferrite only. */
static int strict_nb;

static void empty_nb(MPI_Status *st, const char *what)
{
    if (strict_nb) empty(st, what);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    strict_nb = t_expect_ferrite();
    int buf[4] = {1, 2, 3, 4};
    MPI_Status st;
    MPI_Request rq;
    int flag;
    MPI_CHECK(MPI_Send(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Ssend(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Rsend(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Recv(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &st));
    empty(&st, "Recv");
    CHECK(buf[0] == 1 && buf[3] == 4, "Recv from MPI_PROC_NULL changed the buffer");
    MPI_CHECK(MPI_Isend(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &rq));
    flag = 0;
    MPI_CHECK(MPI_Test(&rq, &flag, &st));
    CHECK(flag && rq == MPI_REQUEST_NULL, "Isend to MPI_PROC_NULL not complete at first Test");
    MPI_CHECK(MPI_Irecv(buf, 4, MPI_INT, MPI_PROC_NULL, MPI_ANY_TAG, MPI_COMM_WORLD, &rq));
    flag = 0;
    MPI_CHECK(MPI_Test(&rq, &flag, &st));
    CHECK(flag, "Irecv from MPI_PROC_NULL not complete at first Test");
    empty_nb(&st, "Irecv");
    MPI_CHECK(MPI_Issend(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &rq));
    MPI_CHECK(MPI_Wait(&rq, &st));
    MPI_CHECK(MPI_Probe(MPI_PROC_NULL, 1, MPI_COMM_WORLD, &st));
    empty(&st, "Probe");
    flag = 0;
    MPI_CHECK(MPI_Iprobe(MPI_PROC_NULL, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
    CHECK(flag, "Iprobe(MPI_PROC_NULL) flag 0");
    empty(&st, "Iprobe");
    MPI_CHECK(MPI_Sendrecv_replace(buf, 4, MPI_INT, MPI_PROC_NULL, 0, MPI_PROC_NULL, 0,
                                   MPI_COMM_WORLD, &st));
    empty(&st, "Sendrecv_replace");
    CHECK(buf[0] == 1 && buf[3] == 4, "Sendrecv_replace with MPI_PROC_NULL changed the buffer");
    /* Persistent requests to MPI_PROC_NULL. */
    MPI_Request p[2];
    MPI_CHECK(MPI_Send_init(buf, 4, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &p[0]));
    MPI_CHECK(MPI_Recv_init(buf, 4, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &p[1]));
    for (int i = 0; i < 3; i++) {
        MPI_Status s2[2];
        MPI_CHECK(MPI_Startall(2, p));
        MPI_CHECK(MPI_Waitall(2, p, s2));
        empty_nb(&s2[1], "persistent receive");
    }
    MPI_CHECK(MPI_Request_free(&p[0]));
    MPI_CHECK(MPI_Request_free(&p[1]));
    /* MPI_PROC_NULL traffic did not produce any real message. */
    flag = 1;
    MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st));
    CHECK(!flag, "a message from rank %d arrived although only MPI_PROC_NULL was used",
          st.MPI_SOURCE);
    t_finish("procnull");
    return 0;
}
