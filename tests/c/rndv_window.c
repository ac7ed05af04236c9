/* np: 2 4 */
/* Windows of many large (rendezvous) messages to several peers at once, every byte
 * checked: each rank Isends to every other rank a window of 16 KiB-1 MiB messages (sizes
 * on both sides of the eager limit, odd lengths, one 4 MiB message to the next rank), from
 * separate buffers, while it receives its peers' windows; some receives are posted before
 * the sends, the rest after (their RTS then wait unexpected and are matched in a burst), in
 * reverse tag order. Transports that keep several rendezvous reads in flight (ofi) read a
 * whole window at once; each message must still land in its own buffer, whole. Three
 * rounds reuse the buffers with new contents (cached registrations must read the new
 * bytes). */
#include "common.h"

static const int sizes[] = {16384, 16385, 24000, 65536, 65537 + 64, 100003, 262144, 1048576};
#define NS ((int)(sizeof sizes / sizeof sizes[0]))
#define BIG (4 << 20)
#define ROUNDS 3

/* Message `m` (window slot) from `from` to `to` in round `r`: its length and seed. */
static int len_of(int from, int to, int m)
{
    if (m == NS) return (to == (from + 1) % t_size) ? BIG : 0;
    return sizes[(m + from) % NS];
}

static unsigned long seed_of(int from, int to, int m, int r)
{
    return (unsigned long)(((r * 64 + from) * 64 + to) * 64 + m) + 1;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int n = t_size, me = t_rank, slots = NS + 1;
    unsigned char **sb = calloc((size_t)n * slots, sizeof *sb);
    unsigned char **rb = calloc((size_t)n * slots, sizeof *rb);
    MPI_Request *rq = malloc(sizeof(MPI_Request) * (size_t)n * slots * 2);
    for (int p = 0; p < n; p++)
        for (int m = 0; m < slots; m++) {
            if (p == me) continue;
            int sl = len_of(me, p, m), rl = len_of(p, me, m);
            if (sl) sb[p * slots + m] = malloc((size_t)sl);
            if (rl) rb[p * slots + m] = malloc((size_t)rl);
        }
    for (int r = 0; r < ROUNDS; r++) {
        int k = 0;
        for (int p = 0; p < n; p++)
            for (int m = 0; m < slots; m++) {
                if (p == me || !len_of(me, p, m)) continue;
                unsigned char *b = sb[p * slots + m];
                unsigned long s = seed_of(me, p, m, r);
                for (int i = 0; i < len_of(me, p, m); i++) b[i] = t_byte(s, (unsigned long)i);
            }
        /* Early receives: the first half of each peer's window, posted before any send. */
        for (int p = 0; p < n; p++)
            for (int m = slots - 1; m >= 0; m--) {
                int l = len_of(p, me, m);
                if (p == me || !l || m >= slots / 2) continue;
                memset(rb[p * slots + m], 0xee, (size_t)l);
                MPI_CHECK(MPI_Irecv(rb[p * slots + m], l, MPI_BYTE, p, m, MPI_COMM_WORLD, &rq[k++]));
            }
        for (int p = 0; p < n; p++)
            for (int m = 0; m < slots; m++) {
                int l = len_of(me, p, m);
                if (p == me || !l) continue;
                MPI_CHECK(MPI_Isend(sb[p * slots + m], l, MPI_BYTE, p, m, MPI_COMM_WORLD, &rq[k++]));
            }
        /* Let the other windows' RTS arrive unexpected, then match them in a burst. */
        int flag;
        MPI_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
        for (int p = n - 1; p >= 0; p--)
            for (int m = slots - 1; m >= 0; m--) {
                int l = len_of(p, me, m);
                if (p == me || !l || m < slots / 2) continue;
                memset(rb[p * slots + m], 0xee, (size_t)l);
                MPI_CHECK(MPI_Irecv(rb[p * slots + m], l, MPI_BYTE, p, m, MPI_COMM_WORLD, &rq[k++]));
            }
        MPI_CHECK(MPI_Waitall(k, rq, MPI_STATUSES_IGNORE));
        for (int p = 0; p < n; p++)
            for (int m = 0; m < slots; m++) {
                int l = len_of(p, me, m);
                if (p == me || !l) continue;
                const unsigned char *b = rb[p * slots + m];
                unsigned long s = seed_of(p, me, m, r);
                for (int i = 0; i < l; i++)
                    CHECK(b[i] == t_byte(s, (unsigned long)i),
                          "round %d: message %d of %d bytes from %d: byte %d is %d, want %d", r, m,
                          l, p, i, b[i], t_byte(s, (unsigned long)i));
            }
    }
    for (int i = 0; i < n * slots; i++) {
        free(sb[i]);
        free(rb[i]);
    }
    free(sb);
    free(rb);
    free(rq);
    t_finish("rndv_window");
    return 0;
}
