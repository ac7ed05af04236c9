/* np: 1 2 */
/* RMA errors get their classes through the window's error handler and change nothing:
 * an operation outside an epoch (MPI_ERR_RMA_SYNC), unlock without lock and lock twice
 * (MPI_ERR_RMA_SYNC), an invalid lock type (MPI_ERR_LOCKTYPE), a target displacement or
 * extent outside the target's window (MPI_ERR_RMA_RANGE), an invalid target rank
 * (MPI_ERR_RANK), a user-defined op in an accumulate (MPI_ERR_OP), MPI_Win_free with a lock
 * held (MPI_ERR_RMA_SYNC); MPI_PROC_NULL targets are no-ops; a user handler sees the error
 * once, with the window. */
#include "common.h"

static int calls, last_class;
static MPI_Win seen;

static void handler(MPI_Win *win, int *code, ...)
{
    calls++;
    seen = *win;
    last_class = t_class(*code);
}

static void user_op(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)in, (void)inout, (void)len, (void)dt;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int n = t_size, r = t_rank, peer = (r + 1) % n;
    int *mem;
    MPI_Win w;
    MPI_CHECK(MPI_Win_allocate(8 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &w));
    for (int i = 0; i < 8; i++) mem[i] = 7;
    MPI_CHECK(MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    int x = 1, y = 0;

    EXPECT_CLASS(MPI_Put(&x, 1, MPI_INT, peer, 0, 1, MPI_INT, w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Get(&y, 1, MPI_INT, peer, 0, 1, MPI_INT, w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Win_unlock(peer, w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Win_flush(peer, w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Win_unlock_all(w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Win_complete(w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Win_wait(w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Win_lock(12345, peer, 0, w), MPI_ERR_LOCKTYPE);

    MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, w));
    EXPECT_CLASS(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Win_free(&w), MPI_ERR_RMA_SYNC);
    EXPECT_CLASS(MPI_Put(&x, 1, MPI_INT, peer, 8, 1, MPI_INT, w), MPI_ERR_RMA_RANGE);
    EXPECT_CLASS(MPI_Put(&x, 1, MPI_INT, peer, -1, 1, MPI_INT, w), MPI_ERR_RMA_RANGE);
    int big[9] = {0};
    EXPECT_CLASS(MPI_Get(big, 9, MPI_INT, peer, 0, 9, MPI_INT, w), MPI_ERR_RMA_RANGE);
    EXPECT_CLASS(MPI_Put(&x, 1, MPI_INT, n, 0, 1, MPI_INT, w), MPI_ERR_RANK);
    EXPECT_CLASS(MPI_Put(&x, 1, MPI_INT, -5, 0, 1, MPI_INT, w), MPI_ERR_RANK);
    MPI_Op op;
    MPI_CHECK(MPI_Op_create(user_op, 1, &op));
    EXPECT_CLASS(MPI_Accumulate(&x, 1, MPI_INT, peer, 0, 1, MPI_INT, op, w), MPI_ERR_OP);
    MPI_CHECK(MPI_Op_free(&op));
    /* MPI_PROC_NULL: nothing happens, successfully. */
    MPI_CHECK(MPI_Put(&x, 1, MPI_INT, MPI_PROC_NULL, 100, 1, MPI_INT, w));
    MPI_CHECK(MPI_Win_unlock(peer, w));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < 8; i++) CHECK(mem[i] == 7, "failed operations wrote memory: [%d] = %d", i, mem[i]);

    /* A user handler runs once per error, with the window. */
    MPI_Errhandler eh;
    MPI_CHECK(MPI_Win_create_errhandler(handler, &eh));
    MPI_CHECK(MPI_Win_set_errhandler(w, eh));
    int rc = MPI_Put(&x, 1, MPI_INT, peer, 0, 1, MPI_INT, w);
    CHECK(t_class(rc) == MPI_ERR_RMA_SYNC && calls == 1 && seen == w && last_class == MPI_ERR_RMA_SYNC,
          "handler: rc class %d, %d calls, class %d", t_class(rc), calls, last_class);
    MPI_CHECK(MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Errhandler_free(&eh));
    MPI_CHECK(MPI_Win_free(&w));
    t_finish("rma_errors");
    return 0;
}
