/* np: 1 2 4 16 */
/* Many outstanding requests: each pair of ranks has 1000 Isend and 1000 Irecv in flight
 * at once, completed in turn with Waitall, Waitany, Waitsome, Testall, Testany and
 * Testsome. Receives are posted before the sends in some rounds and after in others. */
#include "common.h"

#define N 1000

enum { WAITALL, WAITANY, WAITSOME, TESTALL, TESTANY, TESTSOME, NMETHODS };
static const char *names[] = {"Waitall", "Waitany", "Waitsome", "Testall", "Testany", "Testsome"};

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int peer = t_partner();
    static MPI_Request rq[2 * N];
    static MPI_Status st[2 * N], sst[2 * N];
    static int idx[2 * N];
    static int sbuf[N][3], rbuf[N][3];
    static char done[2 * N];
    for (int m = 0; m < NMETHODS; m++) {
        for (int i = 0; i < N; i++) {
            sbuf[i][0] = t_rank; sbuf[i][1] = i; sbuf[i][2] = m;
            rbuf[i][0] = rbuf[i][1] = rbuf[i][2] = -1;
        }
        int recv_first = m % 2 == 0;
        if (recv_first)
            for (int i = 0; i < N; i++)
                MPI_CHECK(MPI_Irecv(rbuf[i], 3, MPI_INT, peer, i, MPI_COMM_WORLD, &rq[i]));
        for (int i = 0; i < N; i++)
            MPI_CHECK(MPI_Isend(sbuf[i], 3, MPI_INT, peer, i, MPI_COMM_WORLD, &rq[N + i]));
        if (!recv_first)
            for (int i = 0; i < N; i++)
                MPI_CHECK(MPI_Irecv(rbuf[i], 3, MPI_INT, peer, i, MPI_COMM_WORLD, &rq[i]));
        memset(done, 0, sizeof done);
        int ndone = 0, flag = 0, index = -1, outcount = -1;
        switch (m) {
        case WAITALL:
            MPI_CHECK(MPI_Waitall(2 * N, rq, st));
            ndone = 2 * N;
            memset(done, 1, sizeof done);
            break;
        case TESTALL:
            do MPI_CHECK(MPI_Testall(2 * N, rq, &flag, st)); while (!flag);
            ndone = 2 * N;
            memset(done, 1, sizeof done);
            break;
        case WAITANY:
        case TESTANY:
            for (;;) {
                MPI_Status s;
                if (m == WAITANY) {
                    MPI_CHECK(MPI_Waitany(2 * N, rq, &index, &s));
                } else {
                    MPI_CHECK(MPI_Testany(2 * N, rq, &index, &flag, &s));
                    if (!flag) continue;
                }
                if (index == MPI_UNDEFINED) break;
                CHECK(index >= 0 && index < 2 * N, "%s: index %d out of range", names[m], index);
                CHECK(!done[index], "%s: request %d completed twice", names[m], index);
                CHECK(rq[index] == MPI_REQUEST_NULL, "%s: completed request %d not set to "
                      "MPI_REQUEST_NULL", names[m], index);
                done[index] = 1;
                if (index < N) st[index] = s;
                ndone++;
            }
            break;
        case WAITSOME:
        case TESTSOME:
            for (;;) {
                if (m == WAITSOME)
                    MPI_CHECK(MPI_Waitsome(2 * N, rq, &outcount, idx, sst));
                else
                    MPI_CHECK(MPI_Testsome(2 * N, rq, &outcount, idx, sst));
                if (outcount == MPI_UNDEFINED) break;
                CHECK(outcount >= 0 && outcount <= 2 * N, "%s: outcount %d", names[m], outcount);
                CHECK(m == TESTSOME || outcount > 0, "Waitsome returned outcount 0");
                /* Statuses come in the order of idx; keep each under its request. */
                for (int j = 0; j < outcount; j++) {
                    int k = idx[j];
                    CHECK(k >= 0 && k < 2 * N, "%s: index %d out of range", names[m], k);
                    CHECK(!done[k], "%s: request %d completed twice", names[m], k);
                    CHECK(rq[k] == MPI_REQUEST_NULL, "%s: request %d not freed", names[m], k);
                    done[k] = 1;
                    ndone++;
                    st[k] = sst[j];
                }
            }
            break;
        }
        CHECK(ndone == 2 * N, "%s: %d of %d requests completed", names[m], ndone, 2 * N);
        for (int i = 0; i < 2 * N; i++)
            CHECK(done[i] && rq[i] == MPI_REQUEST_NULL, "%s: request %d not completed",
                  names[m], i);
        for (int i = 0; i < N; i++) {
            CHECK(rbuf[i][0] == peer && rbuf[i][1] == i && rbuf[i][2] == m,
                  "%s: message %d holds %d %d %d, expected %d %d %d", names[m], i, rbuf[i][0],
                  rbuf[i][1], rbuf[i][2], peer, i, m);
            CHECK(st[i].MPI_SOURCE == peer && st[i].MPI_TAG == i,
                  "%s: status of receive %d says source %d tag %d", names[m], i,
                  st[i].MPI_SOURCE, st[i].MPI_TAG);
            int c = -1;
            MPI_CHECK(MPI_Get_count(&st[i], MPI_INT, &c));
            CHECK(c == 3, "%s: receive %d count %d", names[m], i, c);
        }
    }
    t_finish("manyreq");
    return 0;
}
