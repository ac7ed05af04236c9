/* np: 1 2 4 */
/* RMA data movement under every synchronization mode (fence, post/start/complete/wait,
 * lock/unlock, lock_all/unlock_all): every rank targets every rank (itself included) with
 * Put, Get, Accumulate, Get_accumulate, Fetch_and_op and Compare_and_swap, on contiguous
 * and derived (strided) datatypes on the origin and the target side, and the request-based
 * Rput/Rget/Raccumulate/Rget_accumulate; then each target checks its own memory and each
 * origin what it fetched. Window layout (ints), n = size, r = origin rank:
 *   [2r, 2r+2)            contiguous Put from r
 *   2n + 4r, 2n + 4r + 2  strided Put from r (vector 2 x 1, stride 2)
 *   6n                    Accumulate SUM of r+1 from every r
 *   6n+1                  Fetch_and_op SUM 1 from every r (a ticket counter)
 *   6n+2                  Compare_and_swap 0 -> r+1 (one winner)
 *   6n+3                  Raccumulate MAX of r */
#include "common.h"

enum { FENCE, PSCW, LOCK, LOCK_ALL, NMODES };
static const char *names[] = {"fence", "pscw", "lock", "lock_all"};

static MPI_Group world_group;

static void begin(int mode, MPI_Win w, int target, int lock_type)
{
    switch (mode) {
    case FENCE: break;
    case PSCW: break;
    case LOCK: MPI_CHECK(MPI_Win_lock(lock_type, target, 0, w)); break;
    case LOCK_ALL: break;
    }
}

static void end(int mode, MPI_Win w, int target)
{
    if (mode == LOCK) MPI_CHECK(MPI_Win_unlock(target, w));
}

static void open_epoch(int mode, MPI_Win w)
{
    switch (mode) {
    case FENCE: MPI_CHECK(MPI_Win_fence(0, w)); break;
    case PSCW:
        MPI_CHECK(MPI_Win_post(world_group, 0, w));
        MPI_CHECK(MPI_Win_start(world_group, 0, w));
        break;
    case LOCK: break;
    case LOCK_ALL: MPI_CHECK(MPI_Win_lock_all(0, w)); break;
    }
}

static void close_epoch(int mode, MPI_Win w)
{
    switch (mode) {
    case FENCE: MPI_CHECK(MPI_Win_fence(0, w)); break;
    case PSCW:
        MPI_CHECK(MPI_Win_complete(w));
        MPI_CHECK(MPI_Win_wait(w));
        break;
    case LOCK: MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); break;
    case LOCK_ALL:
        MPI_CHECK(MPI_Win_unlock_all(w));
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        break;
    }
}

static void run(int mode)
{
    int n = t_size, r = t_rank;
    int len = 6 * n + 4;
    int *mem;
    MPI_Win w;
    MPI_Datatype strided;
    MPI_CHECK(MPI_Type_vector(2, 1, 2, MPI_INT, &strided));
    MPI_CHECK(MPI_Type_commit(&strided));
    MPI_CHECK(MPI_Alloc_mem(len * sizeof(int), MPI_INFO_NULL, &mem));
    for (int i = 0; i < len; i++) mem[i] = 0;
    mem[6 * n + 3] = -1;
    MPI_CHECK(MPI_Win_create(mem, len * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &w));

    /* Epoch 1: writes. */
    int *tickets = calloc(n, sizeof(int)), *cas_old = calloc(n, sizeof(int));
    /* Origin buffers stay untouched until the epoch ends (MPI 4.1 12.3). */
    int src[4 * 16], d[16][2], add = r + 1, one = 1, mine = r, newv = r + 1, cmp = 0;
    open_epoch(mode, w);
    for (int t = 0; t < n; t++) {
        begin(mode, w, t, MPI_LOCK_EXCLUSIVE);
        int *s = src + 4 * t;
        s[0] = 1000 * r + 10 * t;
        s[1] = s[0] + 1;
        MPI_CHECK(MPI_Put(s, 2, MPI_INT, t, 2 * r, 2, MPI_INT, w));
        /* contiguous origin, strided target: 2 ints land at 2n+4r and 2n+4r+2 */
        d[t][0] = 2000 * r + t;
        d[t][1] = 2000 * r + t + 7;
        MPI_CHECK(MPI_Put(d[t], 2, MPI_INT, t, 2 * n + 4 * r, 1, strided, w));
        MPI_CHECK(MPI_Accumulate(&add, 1, MPI_INT, t, 6 * n, 1, MPI_INT, MPI_SUM, w));
        MPI_CHECK(MPI_Fetch_and_op(&one, &tickets[t], MPI_INT, t, 6 * n + 1, MPI_SUM, w));
        MPI_CHECK(MPI_Compare_and_swap(&newv, &cmp, &cas_old[t], MPI_INT, t, 6 * n + 2, w));
        MPI_Request req;
        MPI_CHECK(MPI_Raccumulate(&mine, 1, MPI_INT, t, 6 * n + 3, 1, MPI_INT, MPI_MAX, w, &req));
        MPI_CHECK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        end(mode, w, t);
    }
    close_epoch(mode, w);
    /* Local check of my memory as target. */
    int acc = n * (n + 1) / 2;
    for (int o = 0; o < n; o++) {
        CHECK(mem[2 * o] == 1000 * o + 10 * r && mem[2 * o + 1] == 1000 * o + 10 * r + 1,
              "%s: contiguous put from %d: %d %d", names[mode], o, mem[2 * o], mem[2 * o + 1]);
        int *q = mem + 2 * n + 4 * o;
        CHECK(q[0] == 2000 * o + r && q[1] == 0 && q[2] == 2000 * o + r + 7 && q[3] == 0,
              "%s: strided put from %d: %d %d %d %d", names[mode], o, q[0], q[1], q[2], q[3]);
    }
    CHECK(mem[6 * n] == acc, "%s: accumulate %d, expected %d", names[mode], mem[6 * n], acc);
    CHECK(mem[6 * n + 1] == n, "%s: fetch_and_op counter %d, expected %d", names[mode], mem[6 * n + 1], n);
    CHECK(mem[6 * n + 2] >= 1 && mem[6 * n + 2] <= n, "%s: cas value %d", names[mode], mem[6 * n + 2]);
    CHECK(mem[6 * n + 3] == n - 1, "%s: raccumulate max %d", names[mode], mem[6 * n + 3]);
    for (int t = 0; t < n; t++) {
        CHECK(tickets[t] >= 0 && tickets[t] < n, "%s: ticket %d from %d", names[mode], tickets[t], t);
        CHECK(cas_old[t] == 0 || (cas_old[t] >= 1 && cas_old[t] <= n && cas_old[t] != r + 1),
              "%s: cas old value %d from %d", names[mode], cas_old[t], t);
    }
    /* Tickets are distinct per target: their sum over origins is 0+1+...+n-1. */
    int *sums = calloc(n, sizeof(int));
    MPI_CHECK(MPI_Allreduce(tickets, sums, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int t = 0; t < n; t++)
        CHECK(sums[t] == n * (n - 1) / 2, "%s: tickets at %d sum to %d", names[mode], t, sums[t]);
    /* Exactly one compare_and_swap per target saw 0. */
    int *winners = calloc(n, sizeof(int));
    for (int t = 0; t < n; t++) tickets[t] = cas_old[t] == 0;
    MPI_CHECK(MPI_Allreduce(tickets, winners, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int t = 0; t < n; t++) CHECK(winners[t] == 1, "%s: %d cas winners at %d", names[mode], winners[t], t);

    /* Epoch 2: reads. */
    int got[16][2], sgot[16][3], accv[16], accold[16], rg[16][2], dummy = 0, zero = 0;
    open_epoch(mode, w);
    for (int t = 0; t < n; t++) {
        begin(mode, w, t, MPI_LOCK_SHARED);
        MPI_CHECK(MPI_Get(got[t], 2, MPI_INT, t, 2 * r, 2, MPI_INT, w));
        /* strided target into a strided origin: 3 ints at origin, middle untouched */
        sgot[t][1] = -5;
        MPI_CHECK(MPI_Get(sgot[t], 1, strided, t, 2 * n + 4 * r, 1, strided, w));
        MPI_CHECK(MPI_Get_accumulate(&dummy, 1, MPI_INT, &accv[t], 1, MPI_INT, t, 6 * n, 1, MPI_INT,
                                     MPI_NO_OP, w));
        MPI_Request req[2];
        MPI_CHECK(MPI_Rget(rg[t], 2, MPI_INT, t, 2 * r, 2, MPI_INT, w, &req[0]));
        MPI_CHECK(MPI_Rget_accumulate(&zero, 1, MPI_INT, &accold[t], 1, MPI_INT, t, 6 * n, 1, MPI_INT,
                                      MPI_SUM, w, &req[1]));
        MPI_CHECK(MPI_Waitall(2, req, MPI_STATUSES_IGNORE));
        end(mode, w, t);
    }
    close_epoch(mode, w);
    for (int t = 0; t < n; t++) {
        CHECK(got[t][0] == 1000 * r + 10 * t && got[t][1] == 1000 * r + 10 * t + 1,
              "%s: get from %d: %d %d", names[mode], t, got[t][0], got[t][1]);
        CHECK(rg[t][0] == got[t][0] && rg[t][1] == got[t][1], "%s: rget from %d", names[mode], t);
        CHECK(sgot[t][0] == 2000 * r + t && sgot[t][1] == -5 && sgot[t][2] == 2000 * r + t + 7,
              "%s: strided get from %d: %d %d %d", names[mode], t, sgot[t][0], sgot[t][1], sgot[t][2]);
        CHECK(accv[t] == acc && accold[t] == acc, "%s: get_accumulate from %d: %d %d", names[mode], t,
              accv[t], accold[t]);
    }

    /* Epoch 3: MPI_REPLACE and MPI_PROD with doubles through a derived type, then check. */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Win_free(&w));
    CHECK(w == MPI_WIN_NULL, "Win_free");
    double *dm;
    MPI_CHECK(MPI_Win_allocate(2 * n * sizeof(double), sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &dm, &w));
    MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, r, 0, w));
    for (int i = 0; i < 2 * n; i++) dm[i] = 1.0;
    MPI_CHECK(MPI_Win_unlock(r, w));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    double two = 2.0, val = r;
    open_epoch(mode, w);
    for (int t = 0; t < n; t++) {
        begin(mode, w, t, MPI_LOCK_EXCLUSIVE);
        MPI_CHECK(MPI_Accumulate(&two, 1, MPI_DOUBLE, t, 0, 1, MPI_DOUBLE, MPI_PROD, w));
        MPI_CHECK(MPI_Accumulate(&val, 1, MPI_DOUBLE, t, n + r, 1, MPI_DOUBLE, MPI_REPLACE, w));
        end(mode, w, t);
    }
    close_epoch(mode, w);
    MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, r, 0, w));
    CHECK(dm[0] == (double)(1 << n), "%s: prod %g", names[mode], dm[0]);
    for (int o = 0; o < n; o++) CHECK(dm[n + o] == (double)o, "%s: replace from %d: %g", names[mode], o, dm[n + o]);
    MPI_CHECK(MPI_Win_unlock(r, w));
    MPI_CHECK(MPI_Win_free(&w));

    MPI_CHECK(MPI_Type_free(&strided));
    MPI_CHECK(MPI_Free_mem(mem));
    free(tickets);
    free(cas_old);
    free(sums);
    free(winners);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    CHECK(t_size <= 16, "at most 16 ranks");
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
    for (int m = 0; m < NMODES; m++) run(m);
    MPI_CHECK(MPI_Group_free(&world_group));
    t_finish("rma_ops");
    return 0;
}
