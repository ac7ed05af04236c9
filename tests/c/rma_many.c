/* np: 2 4 */
/* Many windows at once: 24 windows over MPI_COMM_WORLD and a split communicator, used in
 * interleaved epochs (a fence on one while others hold locks), each checked for its own
 * data; then freed in an order different from creation. */
#include "common.h"

#define NW 24

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int n = t_size, r = t_rank;
    MPI_Comm half;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, r % 2, r, &half));
    MPI_Win w[NW];
    int *mem[NW];
    for (int i = 0; i < NW; i++) {
        MPI_Comm c = i % 3 == 2 ? half : MPI_COMM_WORLD;
        MPI_CHECK(MPI_Win_allocate(sizeof(int) * 16, sizeof(int), MPI_INFO_NULL, c, &mem[i], &w[i]));
        for (int k = 0; k < 16; k++) mem[i][k] = -1;
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    int vals[NW];
    for (int i = 0; i < NW; i++) {
        int cs;
        MPI_Comm c = i % 3 == 2 ? half : MPI_COMM_WORLD;
        int cr;
        MPI_CHECK(MPI_Comm_size(c, &cs));
        MPI_CHECK(MPI_Comm_rank(c, &cr));
        int t = (cr + 1) % cs;
        vals[i] = 1000 * i + cr;
        if (i % 2) {
            MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, w[i]));
            MPI_CHECK(MPI_Put(&vals[i], 1, MPI_INT, t, cr, 1, MPI_INT, w[i]));
            /* A fence epoch on another window while this lock is held. */
            MPI_CHECK(MPI_Win_fence(0, w[0]));
            MPI_CHECK(MPI_Win_fence(0, w[0]));
            MPI_CHECK(MPI_Win_unlock(t, w[i]));
        } else {
            MPI_CHECK(MPI_Win_fence(0, w[i]));
            MPI_CHECK(MPI_Put(&vals[i], 1, MPI_INT, t, cr, 1, MPI_INT, w[i]));
            MPI_CHECK(MPI_Win_fence(0, w[i]));
        }
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < NW; i++) {
        int cs, cr;
        MPI_Comm c = i % 3 == 2 ? half : MPI_COMM_WORLD;
        MPI_CHECK(MPI_Comm_size(c, &cs));
        MPI_CHECK(MPI_Comm_rank(c, &cr));
        int from = (cr - 1 + cs) % cs;
        for (int k = 0; k < 16; k++) {
            int want = k == from ? 1000 * i + from : -1;
            CHECK(mem[i][k] == want, "window %d [%d] = %d, expected %d", i, k, mem[i][k], want);
        }
    }
    for (int i = NW - 1; i >= 0; i -= 2) MPI_CHECK(MPI_Win_free(&w[i]));
    for (int i = 0; i < NW; i += 2) MPI_CHECK(MPI_Win_free(&w[i]));
    MPI_CHECK(MPI_Comm_free(&half));
    (void)n;
    t_finish("rma_many");
    return 0;
}
