/* np: 1 2 4 16 */
/* Sendrecv and Sendrecv_replace around the ring (shift by 1 and by size/2), with small
 * and large messages, checking data, status and count. A zero count with MPI_DATATYPE_NULL
 * (no data of no type) is accepted, as MPICH does, and receives an empty message. */
#include "common.h"

#define BIG (100 * 1000)

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int *s = malloc(sizeof(int) * BIG), *r = malloc(sizeof(int) * BIG);
    int shifts[2] = {1, t_size / 2 > 0 ? t_size / 2 : 1};
    int sizes[3] = {0, 5, BIG};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++) {
            int n = sizes[b], sh = shifts[a];
            int to = (t_rank + sh) % t_size, from = (t_rank - sh + t_size) % t_size;
            int tag = a * 10 + b;
            for (int i = 0; i < n; i++) s[i] = t_rank * 100000 + i + tag;
            for (int i = 0; i < n; i++) r[i] = -1;
            MPI_Status st;
            MPI_CHECK(MPI_Sendrecv(s, n, MPI_INT, to, tag, r, BIG, MPI_INT, from, MPI_ANY_TAG,
                                   MPI_COMM_WORLD, &st));
            int c = -1;
            MPI_CHECK(MPI_Get_count(&st, MPI_INT, &c));
            CHECK(c == n && st.MPI_SOURCE == from && st.MPI_TAG == tag,
                  "Sendrecv: count %d source %d tag %d, expected %d %d %d", c, st.MPI_SOURCE,
                  st.MPI_TAG, n, from, tag);
            for (int i = 0; i < n; i++)
                CHECK(r[i] == from * 100000 + i + tag, "Sendrecv: element %d is %d", i, r[i]);

            /* In place: the buffer leaves with our values and comes back with theirs. */
            for (int i = 0; i < n; i++) s[i] = t_rank * 100000 + 2 * i + tag;
            MPI_CHECK(MPI_Sendrecv_replace(s, n, MPI_INT, to, 100 + tag, from, 100 + tag,
                                           MPI_COMM_WORLD, &st));
            MPI_CHECK(MPI_Get_count(&st, MPI_INT, &c));
            CHECK(c == n && st.MPI_SOURCE == from && st.MPI_TAG == 100 + tag,
                  "Sendrecv_replace: count %d source %d tag %d", c, st.MPI_SOURCE, st.MPI_TAG);
            for (int i = 0; i < n; i++)
                CHECK(s[i] == from * 100000 + 2 * i + tag, "Sendrecv_replace: element %d is %d",
                      i, s[i]);
        }
    /* With MPI_PROC_NULL on either side. */
    int v = 5, w = 9;
    MPI_Status st;
    MPI_CHECK(MPI_Sendrecv(&v, 1, MPI_INT, MPI_PROC_NULL, 0, &w, 1, MPI_INT, MPI_PROC_NULL, 0,
                           MPI_COMM_WORLD, &st));
    CHECK(w == 9 && st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG,
          "Sendrecv with MPI_PROC_NULL: w %d source %d tag %d", w, st.MPI_SOURCE, st.MPI_TAG);
    free(s);
    free(r);
    {
        int next = (t_rank + 1) % t_size, prev = (t_rank + t_size - 1) % t_size;
        MPI_Status st;
        MPI_Request rq;
        MPI_CHECK(MPI_Irecv(NULL, 0, MPI_DATATYPE_NULL, prev, 3, MPI_COMM_WORLD, &rq));
        MPI_CHECK(MPI_Send(NULL, 0, MPI_DATATYPE_NULL, next, 3, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Wait(&rq, &st));
        int n = -1;
        MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &n));
        CHECK(n == 0 && st.MPI_SOURCE == prev, "empty message: count %d source %d", n, st.MPI_SOURCE);
        MPI_CHECK(MPI_Sendrecv(NULL, 0, MPI_DATATYPE_NULL, next, 4, NULL, 0, MPI_DATATYPE_NULL, prev, 4,
                               MPI_COMM_WORLD, &st));
    }
    t_finish("sendrecv");
    return 0;
}
