/* np: 2 4 16 */
/* Many-to-one storm: 100,000 small messages in total from all other ranks to rank 0,
 * sent as fast as possible with blocking MPI_Send while rank 0 starts receiving late
 * (most messages arrive unexpected). Rank 0 receives them with MPI_ANY_SOURCE and checks
 * that none is lost, each sender's messages arrive in order and its peak memory (VmHWM)
 * grew by at most 64 MiB while doing so. */
#include "common.h"
#include <time.h>

#define TOTAL 100000
#define LIMIT_KB (64L * 1024)

static long vm_hwm_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL, "cannot open /proc/self/status");
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kb = atol(line + 6);
    fclose(f);
    CHECK(kb > 0, "no VmHWM in /proc/self/status");
    return kb;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int senders = t_size - 1;
    CHECK(senders >= 1, "needs at least 2 ranks");
    /* Sender s (rank s+1) sends per + (s < rem) messages. */
    int per = TOTAL / senders, rem = TOTAL % senders;
    if (t_rank == 0) {
        long before = vm_hwm_kb();
        /* Start receiving late, so that the senders run ahead and most messages arrive
         * before their receive is posted. */
        struct timespec ts = {0, 500 * 1000 * 1000};
        nanosleep(&ts, NULL);
        int *next = calloc(t_size, sizeof(int));
        int msg[8];
        for (int m = 0; m < TOTAL; m++) {
            MPI_Status st;
            MPI_CHECK(MPI_Recv(msg, 8, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            int src = st.MPI_SOURCE;
            CHECK(src >= 1 && src < t_size, "message %d from bad source %d", m, src);
            CHECK(msg[0] == src, "message from %d says sender %d", src, msg[0]);
            CHECK(msg[1] == next[src], "from rank %d: sequence %d arrived, expected %d "
                  "(lost or reordered)", src, msg[1], next[src]);
            CHECK(st.MPI_TAG == msg[1] % 32768, "tag %d, expected %d", st.MPI_TAG,
                  msg[1] % 32768);
            int c = -1, want = 2 + msg[1] % 7;
            MPI_CHECK(MPI_Get_count(&st, MPI_INT, &c));
            CHECK(c == want, "from %d seq %d: count %d, expected %d", src, msg[1], c, want);
            for (int i = 2; i < c; i++)
                CHECK(msg[i] == msg[1] * 3 + i, "from %d seq %d: word %d wrong", src, msg[1], i);
            next[src]++;
        }
        for (int s = 1; s < t_size; s++) {
            int want = per + (s - 1 < rem);
            CHECK(next[s] == want, "rank %d: %d messages arrived, expected %d", s, next[s], want);
        }
        int flag = 1;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag,
                             MPI_STATUS_IGNORE));
        CHECK(!flag, "a message beyond the expected %d arrived", TOTAL);
        long after = vm_hwm_kb();
        CHECK(after - before <= LIMIT_KB, "VmHWM grew by %ld KiB during the storm (limit %ld)",
              after - before, LIMIT_KB);
        printf("storm: rank 0 VmHWM %ld -> %ld KiB\n", before, after);
        free(next);
    } else {
        int n = per + (t_rank - 1 < rem);
        int msg[8];
        for (int m = 0; m < n; m++) {
            msg[0] = t_rank;
            msg[1] = m;
            int c = 2 + m % 7;
            for (int i = 2; i < c; i++) msg[i] = m * 3 + i;
            MPI_CHECK(MPI_Send(msg, c, MPI_INT, 0, m % 32768, MPI_COMM_WORLD));
        }
    }
    t_finish("storm");
    return 0;
}
