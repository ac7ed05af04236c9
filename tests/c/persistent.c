/* np: 1 2 4 16 */
/* Persistent requests: Send_init/Recv_init (and Ssend_init) reused over many iterations
 * with Start and Startall; the buffer contents change each time and the receiver sees each
 * iteration's data; a completed persistent request stays allocated and inactive (waiting
 * on it again returns at once with an empty status); Request_free releases it. */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int peer = t_partner();
    int ns[2] = {8, 50000}, iters[2] = {300, 20};
    for (int z = 0; z < 2; z++) {
        int n = ns[z];
        int *s = malloc(sizeof(int) * n), *r = malloc(sizeof(int) * n);
        MPI_Request rq[3];
        MPI_Status st[3];
        int *s2 = malloc(sizeof(int) * n), *r2 = malloc(sizeof(int) * n);
        MPI_CHECK(MPI_Recv_init(r, n, MPI_INT, peer, 1, MPI_COMM_WORLD, &rq[0]));
        MPI_CHECK(MPI_Send_init(s, n, MPI_INT, peer, 1, MPI_COMM_WORLD, &rq[1]));
        MPI_Request rr2, ss2;
        MPI_CHECK(MPI_Recv_init(r2, n, MPI_INT, peer, 2, MPI_COMM_WORLD, &rr2));
        MPI_CHECK(MPI_Ssend_init(s2, n, MPI_INT, peer, 2, MPI_COMM_WORLD, &ss2));
        for (int it = 0; it < iters[z]; it++) {
            for (int i = 0; i < n; i++) s[i] = t_rank * 7 + it * 1000 + i;
            for (int i = 0; i < n; i++) s2[i] = -(t_rank * 7 + it * 1000 + i);
            if (it % 2 == 0) {
                MPI_CHECK(MPI_Startall(2, rq));
            } else {
                MPI_CHECK(MPI_Start(&rq[0]));
                MPI_CHECK(MPI_Start(&rq[1]));
            }
            MPI_CHECK(MPI_Start(&rr2));
            MPI_CHECK(MPI_Start(&ss2));
            MPI_CHECK(MPI_Waitall(2, rq, st));
            CHECK(rq[0] != MPI_REQUEST_NULL && rq[1] != MPI_REQUEST_NULL,
                  "Waitall freed a persistent request");
            MPI_CHECK(MPI_Wait(&ss2, MPI_STATUS_IGNORE));
            MPI_CHECK(MPI_Wait(&rr2, &st[2]));
            CHECK(ss2 != MPI_REQUEST_NULL && rr2 != MPI_REQUEST_NULL, "Wait freed a persistent "
                  "request");
            int c = -1;
            MPI_CHECK(MPI_Get_count(&st[0], MPI_INT, &c));
            CHECK(c == n && st[0].MPI_SOURCE == peer && st[0].MPI_TAG == 1,
                  "iteration %d: count %d source %d tag %d", it, c, st[0].MPI_SOURCE,
                  st[0].MPI_TAG);
            for (int i = 0; i < n; i++) {
                CHECK(r[i] == peer * 7 + it * 1000 + i, "iteration %d: element %d is %d", it,
                      i, r[i]);
                CHECK(r2[i] == -(peer * 7 + it * 1000 + i), "iteration %d: Ssend_init element "
                      "%d is %d", it, i, r2[i]);
            }
        }
        /* Inactive persistent request: Wait returns at once with an empty status. */
        MPI_Status e;
        MPI_CHECK(MPI_Wait(&rq[0], &e));
        CHECK(rq[0] != MPI_REQUEST_NULL, "Wait on an inactive persistent request freed it");
        CHECK(e.MPI_SOURCE == MPI_ANY_SOURCE && e.MPI_TAG == MPI_ANY_TAG,
              "Wait on an inactive request: status source %d tag %d", e.MPI_SOURCE, e.MPI_TAG);
        int flag = 0;
        MPI_CHECK(MPI_Test(&rq[1], &flag, MPI_STATUS_IGNORE));
        CHECK(flag, "Test on an inactive persistent request: flag 0");
        MPI_CHECK(MPI_Request_free(&rq[0]));
        MPI_CHECK(MPI_Request_free(&rq[1]));
        MPI_CHECK(MPI_Request_free(&rr2));
        MPI_CHECK(MPI_Request_free(&ss2));
        CHECK(rq[0] == MPI_REQUEST_NULL && rq[1] == MPI_REQUEST_NULL && rr2 == MPI_REQUEST_NULL
              && ss2 == MPI_REQUEST_NULL, "Request_free did not set MPI_REQUEST_NULL");
        free(s); free(r); free(s2); free(r2);
    }
    t_finish("persistent");
    return 0;
}
