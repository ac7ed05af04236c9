/* Many senders flood one receiver with eager messages of mixed sizes, every byte checked:
 * the shared receive pool of the ofi transport (FERRITE_OFI_SRQ_K/_B) and its credits must
 * lose nothing and must not hang. Phase 1: rank 0 receives as messages come. Phase 2: rank 0
 * stays out of MPI for a while first, so every sender runs out of credits and must wait.
 * Phase 3: rank 0 answers every sender (traffic both ways). argv[1]: messages per sender. */
#include "../c/common.h"
#include <unistd.h>

static const int sizes[] = {0, 8, 100, 1000, 4096, 9000, 15000, 24};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))
#define BURST 8
#define MAXLEN 15000

static unsigned char byte_of(int src, int i, int j)
{
    return (unsigned char)(src * 31 + i * 7 + j * 13 + 1);
}

/* Phase p's message i has tag p*n + i: a sender may start phase 2 while rank 0 still
 * receives phase 1 from others (no collective: it would open connections between senders). */
static void phase(int n, int late)
{
    int base = late ? n : 0;
    if (t_rank == 0) {
        static unsigned char buf[MAXLEN];
        int *seen = calloc((size_t)t_size, sizeof(int));
        if (late) usleep(300000); /* senders fill what they were lent, then wait */
        for (int k = 0; k < n * (t_size - 1); k++) {
            MPI_Status st;
            int i = k / (t_size - 1), len;
            MPI_CHECK(MPI_Recv(buf, MAXLEN, MPI_BYTE, MPI_ANY_SOURCE, base + i, MPI_COMM_WORLD,
                               &st));
            int src = st.MPI_SOURCE;
            MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &len));
            CHECK(src > 0 && seen[src] == i, "message %d from %d: %d came before", i, src,
                  seen[src]);
            seen[src]++;
            CHECK(len == sizes[i % NSIZES], "from %d message %d: %d bytes", src, i, len);
            for (int j = 0; j < len; j++)
                if (buf[j] != byte_of(src, i, j)) {
                    CHECK(0, "from %d message %d: byte %d is %d", src, i, j, buf[j]);
                    break;
                }
        }
        free(seen);
    } else {
        static unsigned char out[BURST][MAXLEN];
        MPI_Request rq[BURST];
        MPI_Status sts[BURST];
        for (int i = 0; i < n; i += BURST) {
            int m = n - i < BURST ? n - i : BURST;
            for (int b = 0; b < m; b++) {
                int len = sizes[(i + b) % NSIZES];
                for (int j = 0; j < len; j++) out[b][j] = byte_of(t_rank, i + b, j);
                MPI_CHECK(MPI_Isend(out[b], len, MPI_BYTE, 0, base + i + b, MPI_COMM_WORLD,
                                    &rq[b]));
            }
            MPI_CHECK(MPI_Waitall(m, rq, sts));
        }
    }
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int n = argc > 1 ? atoi(argv[1]) : 64;
    phase(n, 0);
    phase(n, 1);
    /* Both ways: rank 0 answers each sender with what it sent last. */
    if (t_rank == 0) {
        for (int r = 1; r < t_size; r++) {
            int v = r * 1000 + n;
            MPI_CHECK(MPI_Send(&v, 1, MPI_INT, r, 7, MPI_COMM_WORLD));
        }
    } else {
        int v = -1;
        MPI_CHECK(MPI_Recv(&v, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(v == t_rank * 1000 + n, "answer %d", v);
    }
    /* No barrier: its pattern would open connections between senders. */
    t_finish("flood");
    return 0;
}
