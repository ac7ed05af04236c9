/* np: 2 3 4 7 */
/* MPI_Comm_idup is nonblocking (MPI 4.1 section 7.4.2): it returns before the other members
 * call it, dups of overlapping communicators may be pending together, and blocking
 * constructors may run meanwhile. Each new communicator has its own context: messages sent
 * on one are never received on another. Intercommunicators are dup'ed too. */
#include "common.h"

#define NDUP 8

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int next = (t_rank + 1) % t_size, prev = (t_rank + t_size - 1) % t_size;
    MPI_Comm d;
    MPI_Request r;

    /* 1. Rank 0 starts its idup only after every other rank has started theirs and sent a
     * synchronous message (a blocking dup would deadlock here). */
    if (t_rank == 0) {
        for (int i = 1; i < t_size; i++) {
            int v = -1;
            MPI_CHECK(MPI_Recv(&v, 1, MPI_INT, i, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(v == 100 + i, "got %d from %d", v, i);
        }
        MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &d, &r));
    } else {
        MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &d, &r));
        int v = 100 + t_rank;
        MPI_CHECK(MPI_Ssend(&v, 1, MPI_INT, 0, 0, MPI_COMM_WORLD));
    }
    MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    int sum = 0;
    MPI_CHECK(MPI_Allreduce(&t_rank, &sum, 1, MPI_INT, MPI_SUM, d));
    CHECK(sum == t_size * (t_size - 1) / 2, "allreduce on the dup: %d", sum);

    /* 2. Overlapping dups pending together: every rank dups the pair communicators
     * {i, i+1} it belongs to, in different orders, then waits for both. */
    MPI_Comm pair_lo = MPI_COMM_NULL, pair_hi = MPI_COMM_NULL;
    for (int i = 0; i < t_size; i++) {
        MPI_Comm c;
        int member = t_rank == i || t_rank == (i + 1) % t_size;
        MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED,
                                 t_rank == i ? 0 : 1, &c));
        if (t_rank == i) pair_hi = c; /* with next */
        else if (member) pair_lo = c; /* with prev */
    }
    if (t_size > 2) {
        MPI_Comm dd[2];
        MPI_Request rr[2];
        if (t_rank % 2) {
            MPI_CHECK(MPI_Comm_idup(pair_hi, &dd[0], &rr[0]));
            MPI_CHECK(MPI_Comm_idup(pair_lo, &dd[1], &rr[1]));
        } else {
            MPI_CHECK(MPI_Comm_idup(pair_lo, &dd[1], &rr[1]));
            MPI_CHECK(MPI_Comm_idup(pair_hi, &dd[0], &rr[0]));
        }
        MPI_CHECK(MPI_Waitall(2, rr, MPI_STATUSES_IGNORE));
        /* The same tag on both dups, posted crosswise: each must get its own message. */
        int out[2] = {1000 + t_rank, 2000 + t_rank}, in[2] = {-1, -1};
        MPI_Request q[4];
        MPI_CHECK(MPI_Irecv(&in[1], 1, MPI_INT, 0, 7, dd[1], &q[0])); /* from prev */
        MPI_CHECK(MPI_Irecv(&in[0], 1, MPI_INT, 1, 7, dd[0], &q[1])); /* from next */
        MPI_CHECK(MPI_Isend(&out[0], 1, MPI_INT, 1, 7, dd[0], &q[2]));
        MPI_CHECK(MPI_Isend(&out[1], 1, MPI_INT, 0, 7, dd[1], &q[3]));
        MPI_CHECK(MPI_Waitall(4, q, MPI_STATUSES_IGNORE));
        CHECK(in[0] == 2000 + next && in[1] == 1000 + prev, "crosswise: %d %d", in[0], in[1]);
        MPI_CHECK(MPI_Comm_free(&dd[0]));
        MPI_CHECK(MPI_Comm_free(&dd[1]));
    }

    /* 3. Many dups of one communicator pending together, with a blocking dup and a
     * nonblocking collective between them, completed in reverse order. Messages with one
     * tag on every dup, received in reverse order, land on their own dup. */
    MPI_Comm many[NDUP], blocking;
    MPI_Request rs[NDUP + 1];
    int bsum = -1;
    for (int k = 0; k < NDUP; k++) {
        MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &many[k], &rs[k]));
        if (k == NDUP / 2) MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &blocking));
    }
    MPI_CHECK(MPI_Iallreduce(&t_rank, &bsum, 1, MPI_INT, MPI_SUM, blocking, &rs[NDUP]));
    for (int k = NDUP; k >= 0; k--) MPI_CHECK(MPI_Wait(&rs[k], MPI_STATUS_IGNORE));
    CHECK(bsum == t_size * (t_size - 1) / 2, "iallreduce: %d", bsum);
    int got[NDUP];
    MPI_Request q[2 * NDUP];
    for (int k = 0; k < NDUP; k++) {
        int v = 10 * t_rank + k;
        MPI_CHECK(MPI_Irecv(&got[NDUP - 1 - k], 1, MPI_INT, prev, 3, many[NDUP - 1 - k], &q[k]));
        MPI_CHECK(MPI_Isend(&v, 1, MPI_INT, next, 3, many[k], &q[NDUP + k]));
        MPI_CHECK(MPI_Wait(&q[NDUP + k], MPI_STATUS_IGNORE));
    }
    MPI_CHECK(MPI_Waitall(NDUP, q, MPI_STATUSES_IGNORE));
    for (int k = 0; k < NDUP; k++) CHECK(got[k] == 10 * prev + k, "dup %d got %d", k, got[k]);
    for (int k = 0; k < NDUP; k++) {
        int res;
        MPI_CHECK(MPI_Comm_compare(many[k], MPI_COMM_WORLD, &res));
        CHECK(res == MPI_CONGRUENT, "dup %d compares %d", k, res);
        MPI_CHECK(MPI_Comm_free(&many[k]));
    }
    MPI_CHECK(MPI_Comm_free(&blocking));

    /* 4. An intercommunicator, dup'ed while the other side's leader is still busy. */
    int color = t_rank % 2;
    MPI_Comm half, inter, idup;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, t_rank, &half));
    MPI_CHECK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - color, 9, &inter));
    MPI_CHECK(MPI_Comm_idup(inter, &idup, &r));
    MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    int lrank, rsize, flag;
    MPI_CHECK(MPI_Comm_rank(idup, &lrank));
    MPI_CHECK(MPI_Comm_remote_size(idup, &rsize));
    MPI_CHECK(MPI_Comm_test_inter(idup, &flag));
    CHECK(flag, "the dup of an intercommunicator is not one");
    int rsum = -1;
    MPI_CHECK(MPI_Allreduce(&lrank, &rsum, 1, MPI_INT, MPI_SUM, idup));
    CHECK(rsum == rsize * (rsize - 1) / 2, "inter allreduce %d (remote size %d)", rsum, rsize);
    if (lrank == 0) {
        int v = 77 + color, w = -1;
        MPI_CHECK(MPI_Sendrecv(&v, 1, MPI_INT, 0, 1, &w, 1, MPI_INT, 0, 1, idup,
                               MPI_STATUS_IGNORE));
        CHECK(w == 78 - color, "inter leaders got %d", w);
    }
    MPI_CHECK(MPI_Comm_free(&idup));
    MPI_CHECK(MPI_Comm_free(&inter));
    MPI_CHECK(MPI_Comm_free(&half));

    if (pair_lo != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&pair_lo));
    if (pair_hi != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&pair_hi));
    MPI_CHECK(MPI_Comm_free(&d));
    t_finish("comm_idup");
    return 0;
}
