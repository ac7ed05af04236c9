/* np: 1 2 4 16 */
/* All-pairs exchange received with MPI_ANY_SOURCE and MPI_ANY_TAG: every rank sends each
 * rank (itself included) K messages whose tag and payload encode the sender, and checks
 * that the status source/tag match the payload and every (sender, index) arrives once. */
#include "common.h"

#define K 5

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int n = t_size;
    int total = n * K;
    MPI_Request *rq = malloc(sizeof(MPI_Request) * total);
    int (*out)[3] = malloc(sizeof(int[3]) * total);
    char *seen = calloc(total, 1);
    for (int d = 0; d < n; d++)
        for (int k = 0; k < K; k++) {
            int i = d * K + k;
            out[i][0] = t_rank;
            out[i][1] = k;
            out[i][2] = d;
            MPI_CHECK(MPI_Isend(out[i], 3, MPI_INT, d, 100 * t_rank + k, MPI_COMM_WORLD, &rq[i]));
        }
    for (int m = 0; m < total; m++) {
        int in[3] = {-1, -1, -1};
        MPI_Status st;
        MPI_CHECK(MPI_Recv(in, 3, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == in[0], "status source %d but payload says sender %d",
              st.MPI_SOURCE, in[0]);
        CHECK(st.MPI_TAG == 100 * in[0] + in[1], "status tag %d, expected %d", st.MPI_TAG,
              100 * in[0] + in[1]);
        CHECK(in[2] == t_rank, "message for rank %d delivered to rank %d", in[2], t_rank);
        CHECK(in[0] >= 0 && in[0] < n && in[1] >= 0 && in[1] < K, "bad payload %d %d", in[0],
              in[1]);
        int cnt = -1;
        MPI_CHECK(MPI_Get_count(&st, MPI_INT, &cnt));
        CHECK(cnt == 3, "count %d, expected 3", cnt);
        int idx = in[0] * K + in[1];
        CHECK(!seen[idx], "message %d from %d received twice", in[1], in[0]);
        seen[idx] = 1;
    }
    MPI_CHECK(MPI_Waitall(total, rq, MPI_STATUSES_IGNORE));
    for (int i = 0; i < total; i++) CHECK(rq[i] == MPI_REQUEST_NULL, "request %d not freed", i);
    /* Tag selection with ANY_SOURCE: ask for tags in reverse order of sending. */
    for (int k = 0; k < K; k++)
        MPI_CHECK(MPI_Isend(&k, 0, MPI_INT, t_rank, k, MPI_COMM_WORLD, &rq[k]));
    for (int k = K - 1; k >= 0; k--) {
        MPI_Status st;
        MPI_CHECK(MPI_Recv(NULL, 0, MPI_INT, MPI_ANY_SOURCE, k, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_TAG == k && st.MPI_SOURCE == t_rank, "got tag %d source %d, wanted tag %d",
              st.MPI_TAG, st.MPI_SOURCE, k);
    }
    MPI_CHECK(MPI_Waitall(K, rq, MPI_STATUSES_IGNORE));
    free(rq);
    free(out);
    free(seen);
    t_finish("anysource");
    return 0;
}
