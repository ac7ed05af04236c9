/* np: 1 2 3 4 5 8 16 */
/* Nonblocking and persistent collectives: many outstanding at once on three communicators
 * (world, a dup, a reversed split), completed in an order different from the start order
 * (reverse Wait, Waitany, Testall polling); every I-form checked against a serial result;
 * persistent Allreduce/Bcast/Barrier/Alltoall restarted with new data (Start, Startall). */
#include "common.h"

#define K 12 /* collectives started per communicator */
#define N 40

static int val(int rank, int k, int i) { return rank * 1000 + k * 37 + i; }

typedef struct {
    MPI_Comm comm;
    int me, np;
    int s[K][N], r[K][N * 16];
} slot;

static void start_all(slot *c, MPI_Request *rq)
{
    int me = c->me, np = c->np;
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++) c->s[k][i] = val(me, k, i);
        for (int i = 0; i < N * 16; i++) c->r[k][i] = -1;
    }
    int n = N / np > 0 ? N / np : 1;
    MPI_CHECK(MPI_Ibarrier(c->comm, &rq[0]));
    for (int i = 0; i < N; i++) c->r[1][i] = me == np - 1 ? val(me, 1, i) : -1;
    MPI_CHECK(MPI_Ibcast(c->r[1], N, MPI_INT, np - 1, c->comm, &rq[1]));
    MPI_CHECK(MPI_Iallreduce(c->s[2], c->r[2], N, MPI_INT, MPI_SUM, c->comm, &rq[2]));
    MPI_CHECK(MPI_Ireduce(c->s[3], c->r[3], N, MPI_INT, MPI_MAX, 0, c->comm, &rq[3]));
    MPI_CHECK(MPI_Iallgather(c->s[4], n, MPI_INT, c->r[4], n, MPI_INT, c->comm, &rq[4]));
    MPI_CHECK(MPI_Ialltoall(c->s[5], n, MPI_INT, c->r[5], n, MPI_INT, c->comm, &rq[5]));
    MPI_CHECK(MPI_Igather(c->s[6], n, MPI_INT, c->r[6], n, MPI_INT, 0, c->comm, &rq[6]));
    MPI_CHECK(MPI_Iscatter(c->s[7], n, MPI_INT, c->r[7], n, MPI_INT, 0, c->comm, &rq[7]));
    MPI_CHECK(MPI_Iscan(c->s[8], c->r[8], N, MPI_INT, MPI_SUM, c->comm, &rq[8]));
    MPI_CHECK(MPI_Iexscan(c->s[9], c->r[9], N, MPI_INT, MPI_SUM, c->comm, &rq[9]));
    MPI_CHECK(MPI_Ireduce_scatter_block(c->s[10], c->r[10], n, MPI_INT, MPI_SUM, c->comm,
                                        &rq[10]));
    /* in place allreduce (prod of +-1) */
    for (int i = 0; i < N; i++) c->r[11][i] = (me + i) % 3 == 0 ? -1 : 1;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, c->r[11], N, MPI_INT, MPI_PROD, c->comm, &rq[11]));
}

static void check_all(slot *c)
{
    int me = c->me, np = c->np;
    int n = N / np > 0 ? N / np : 1;
    for (int i = 0; i < N; i++) {
        CHECK(c->r[1][i] == val(np - 1, 1, i), "ibcast [%d]", i);
        int sum = 0, mx = -1, pre = 0, ex = 0, prod = 1;
        for (int k = 0; k < np; k++) {
            int v = val(k, 2, i);
            sum += v;
            if (val(k, 3, i) > mx) mx = val(k, 3, i);
            if (k <= me) pre += val(k, 8, i);
            if (k < me) ex += val(k, 9, i);
            prod *= (k + i) % 3 == 0 ? -1 : 1;
        }
        CHECK(c->r[2][i] == sum, "iallreduce [%d]=%d want %d", i, c->r[2][i], sum);
        if (me == 0) CHECK(c->r[3][i] == mx, "ireduce [%d]", i);
        CHECK(c->r[8][i] == pre, "iscan [%d]", i);
        if (me > 0) CHECK(c->r[9][i] == ex, "iexscan [%d]", i);
        CHECK(c->r[11][i] == prod, "iallreduce in place prod [%d]", i);
    }
    for (int k = 0; k < np; k++)
        for (int i = 0; i < n; i++) {
            CHECK(c->r[4][k * n + i] == val(k, 4, i), "iallgather from %d [%d]", k, i);
            CHECK(c->r[5][k * n + i] == val(k, 5, me * n + i), "ialltoall from %d [%d]", k, i);
            if (me == 0) CHECK(c->r[6][k * n + i] == val(k, 6, i), "igather from %d", k);
        }
    for (int i = 0; i < n; i++) {
        CHECK(c->r[7][i] == val(0, 7, me * n + i), "iscatter [%d]", i);
        int sum = 0;
        for (int k = 0; k < np; k++) sum += val(k, 10, me * n + i);
        CHECK(c->r[10][i] == sum, "ireduce_scatter_block [%d]", i);
    }
}

static void persistent(MPI_Comm comm, int me, int np)
{
    int s[N], r[N], b[N], a2s[16 * 4], a2r[16 * 4];
    MPI_Request rq[4];
    MPI_CHECK(MPI_Allreduce_init(s, r, N, MPI_INT, MPI_SUM, comm, MPI_INFO_NULL, &rq[0]));
    MPI_CHECK(MPI_Bcast_init(b, N, MPI_INT, 0, comm, MPI_INFO_NULL, &rq[1]));
    MPI_CHECK(MPI_Barrier_init(comm, MPI_INFO_NULL, &rq[2]));
    MPI_CHECK(MPI_Alltoall_init(a2s, 4, MPI_INT, a2r, 4, MPI_INT, comm, MPI_INFO_NULL, &rq[3]));
    for (int it = 0; it < 6; it++) {
        for (int i = 0; i < N; i++) {
            s[i] = val(me, it, i);
            b[i] = me == 0 ? val(0, it + 50, i) : -1;
        }
        for (int i = 0; i < 4 * np; i++) a2s[i] = val(me, it, i);
        if (it % 2) {
            MPI_CHECK(MPI_Startall(4, rq));
        } else {
            for (int j = 3; j >= 0; j--) MPI_CHECK(MPI_Start(&rq[j]));
        }
        MPI_CHECK(MPI_Waitall(4, rq, MPI_STATUSES_IGNORE));
        for (int j = 0; j < 4; j++) CHECK(rq[j] != MPI_REQUEST_NULL, "persistent freed");
        for (int i = 0; i < N; i++) {
            int sum = 0;
            for (int k = 0; k < np; k++) sum += val(k, it, i);
            CHECK(r[i] == sum, "persistent allreduce it=%d [%d]", it, i);
            CHECK(b[i] == val(0, it + 50, i), "persistent bcast it=%d [%d]", it, i);
        }
        for (int k = 0; k < np; k++)
            for (int i = 0; i < 4; i++)
                CHECK(a2r[k * 4 + i] == val(k, it, me * 4 + i), "persistent alltoall");
    }
    for (int j = 0; j < 4; j++) MPI_CHECK(MPI_Request_free(&rq[j]));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    static slot c[3];
    MPI_Comm_dup(MPI_COMM_WORLD, &c[1].comm);
    MPI_Comm_split(MPI_COMM_WORLD, 0, -t_rank, &c[2].comm);
    c[0].comm = MPI_COMM_WORLD;
    for (int round = 0; round < 3; round++) {
        MPI_Request rq[3 * K];
        for (int j = 0; j < 3; j++) {
            MPI_Comm_rank(c[j].comm, &c[j].me);
            MPI_Comm_size(c[j].comm, &c[j].np);
            start_all(&c[j], rq + j * K);
        }
        if (round == 0) {
            /* reverse order, one by one */
            for (int i = 3 * K - 1; i >= 0; i--) MPI_CHECK(MPI_Wait(&rq[i], MPI_STATUS_IGNORE));
        } else if (round == 1) {
            for (int left = 3 * K; left > 0; left--) {
                int idx = -1;
                MPI_CHECK(MPI_Waitany(3 * K, rq, &idx, MPI_STATUS_IGNORE));
                CHECK(idx >= 0 && rq[idx] == MPI_REQUEST_NULL, "waitany");
            }
        } else {
            int flag = 0;
            while (!flag) MPI_CHECK(MPI_Testall(3 * K, rq, &flag, MPI_STATUSES_IGNORE));
        }
        for (int j = 0; j < 3 * K; j++) CHECK(rq[j] == MPI_REQUEST_NULL, "request not freed");
        for (int j = 0; j < 3; j++) check_all(&c[j]);
    }
    persistent(MPI_COMM_WORLD, t_rank, t_size);
    persistent(c[2].comm, c[2].me, c[2].np);
    MPI_Comm_free(&c[1].comm);
    MPI_Comm_free(&c[2].comm);
    t_finish("coll_nb");
    return 0;
}
