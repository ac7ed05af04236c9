/* np: 1 2 4 16 */
/* A token goes around the ring several times; every rank adds its rank, so the value
 * arriving back at rank 0 is known. Also passes an array around to check the payload. */
#include "common.h"

#define LAPS 10
#define ARR 1000

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int next = (t_rank + 1) % t_size, prev = (t_rank + t_size - 1) % t_size;
    long token = 0;
    int arr[ARR];
    for (int lap = 0; lap < LAPS; lap++) {
        MPI_Status st;
        MPI_Request rq;
        if (t_rank == 0) {
            long expect = token;
            for (int i = 0; i < ARR; i++) arr[i] = lap * ARR + i;
            long sent = token;
            MPI_CHECK(MPI_Isend(&sent, 1, MPI_LONG, next, lap, MPI_COMM_WORLD, &rq));
            MPI_CHECK(MPI_Recv(&token, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD, &st));
            MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
            long add = (long)t_size * (t_size - 1) / 2;
            CHECK(token == expect + add, "lap %d: token %ld, expected %ld", lap, token,
                  expect + add);
            CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == lap, "lap %d: status source %d tag %d",
                  lap, st.MPI_SOURCE, st.MPI_TAG);
            int back[ARR];
            memset(back, 0, sizeof back);
            MPI_CHECK(MPI_Isend(arr, ARR, MPI_INT, next, 1000 + lap, MPI_COMM_WORLD, &rq));
            MPI_CHECK(MPI_Recv(back, ARR, MPI_INT, prev, 1000 + lap, MPI_COMM_WORLD, &st));
            MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
            for (int i = 0; i < ARR; i++)
                CHECK(back[i] == lap * ARR + i + (t_size - 1), "lap %d: back[%d] = %d, expected %d",
                      lap, i, back[i], lap * ARR + i + (t_size - 1));
        } else {
            MPI_CHECK(MPI_Recv(&token, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD, &st));
            CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == lap, "lap %d: status source %d tag %d",
                  lap, st.MPI_SOURCE, st.MPI_TAG);
            token += t_rank;
            MPI_CHECK(MPI_Send(&token, 1, MPI_LONG, next, lap, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Recv(arr, ARR, MPI_INT, prev, 1000 + lap, MPI_COMM_WORLD, &st));
            int count = -1;
            MPI_CHECK(MPI_Get_count(&st, MPI_INT, &count));
            CHECK(count == ARR, "lap %d: count %d, expected %d", lap, count, ARR);
            for (int i = 0; i < ARR; i++) {
                CHECK(arr[i] == lap * ARR + i + (t_rank - 1), "lap %d: arr[%d] = %d", lap, i,
                      arr[i]);
                arr[i]++;
            }
            MPI_CHECK(MPI_Send(arr, ARR, MPI_INT, next, 1000 + lap, MPI_COMM_WORLD));
        }
    }
    t_finish("ring");
    return 0;
}
