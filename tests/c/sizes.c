/* np: 1 2 4 16 */
/* Message sizes from 0 B to 16 MiB: powers of two and odd sizes around typical eager
 * limits. Pairs of ranks exchange each size both with Isend/Irecv and with blocking
 * Send/Recv; the receiver checks the count, every byte and the guard bytes after the
 * receive buffer. Every other size is completed by polling with Testall. */
#include "common.h"

#define GUARD 64
#define GUARD_BYTE 0xA5

static size_t sizes[64];
static int nsizes;

static void add(size_t s) { sizes[nsizes++] = s; }

static void fill(unsigned char *p, size_t n, unsigned long msg)
{
    for (size_t i = 0; i < n; i++) p[i] = t_byte(msg, i);
}

static void check_recv(unsigned char *p, size_t n, unsigned long msg, MPI_Status *st,
                       int src, int tag)
{
    int count = -1;
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &count));
    CHECK((size_t)count == n, "size %zu: received count %d", n, count);
    CHECK(st->MPI_SOURCE == src && st->MPI_TAG == tag, "size %zu: status source %d tag %d, "
          "expected %d %d", n, st->MPI_SOURCE, st->MPI_TAG, src, tag);
    for (size_t i = 0; i < n; i++)
        if (p[i] != t_byte(msg, i))
            FAIL("size %zu: byte %zu is 0x%02x, expected 0x%02x", n, i, p[i], t_byte(msg, i));
    for (size_t i = 0; i < GUARD; i++)
        if (p[n + i] != GUARD_BYTE)
            FAIL("size %zu: guard byte %zu after the buffer overwritten (0x%02x)", n, i,
                 p[n + i]);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    size_t odd[] = {0, 1, 7, 8, 4095, 4096, 4097, 8191, 8192, 8193, 16383, 16384, 16385,
                    65535, 65536, 65537, 131071, 131073};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) add(odd[i]);
    for (size_t s = 2; s <= ((size_t)16 << 20); s <<= 1)
        if (s != 8 && s != 4096 && s != 8192 && s != 16384 && s != 65536) add(s);
    add((1u << 20) + 3);
    int peer = t_partner();
    size_t max = (size_t)16 << 20;
    unsigned char *sbuf = malloc(max);
    unsigned char *rbuf = malloc(max + GUARD);
    CHECK(sbuf && rbuf, "out of memory");
    for (int k = 0; k < nsizes; k++) {
        size_t n = sizes[k];
        /* The message from rank r for size index k has id (r * 1000 + k). */
        unsigned long mine = (unsigned long)t_rank * 1000 + k;
        unsigned long theirs = (unsigned long)peer * 1000 + k;
        fill(sbuf, n, mine);
        memset(rbuf, 0, n);
        memset(rbuf + n, GUARD_BYTE, GUARD);
        MPI_Request rq[2];
        MPI_Status st[2];
        MPI_CHECK(MPI_Irecv(rbuf, (int)n, MPI_BYTE, peer, k, MPI_COMM_WORLD, &rq[0]));
        MPI_CHECK(MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, k, MPI_COMM_WORLD, &rq[1]));
        if (k % 2) { /* progress through Testall polling alone */
            int flag = 0;
            while (!flag) MPI_CHECK(MPI_Testall(2, rq, &flag, st));
        } else {
            MPI_CHECK(MPI_Waitall(2, rq, st));
        }
        check_recv(rbuf, n, theirs, &st[0], peer, k);

        /* Blocking: the lower rank sends first (with itself: nonblocking send). Receive
         * buffer is bigger than the message (guard included): count must still be n and
         * nothing past the message may be written. */
        memset(rbuf, 0, n);
        memset(rbuf + n, GUARD_BYTE, GUARD);
        int tag = 1000 + k;
        if (peer == t_rank) {
            MPI_CHECK(MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &rq[1]));
            MPI_CHECK(MPI_Recv(rbuf, (int)(n + GUARD), MPI_BYTE, peer, tag, MPI_COMM_WORLD, st));
            MPI_CHECK(MPI_Wait(&rq[1], MPI_STATUS_IGNORE));
        } else if (t_rank < peer) {
            MPI_CHECK(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Recv(rbuf, (int)(n + GUARD), MPI_BYTE, peer, tag, MPI_COMM_WORLD, st));
        } else {
            MPI_CHECK(MPI_Recv(rbuf, (int)(n + GUARD), MPI_BYTE, peer, tag, MPI_COMM_WORLD, st));
            MPI_CHECK(MPI_Send(sbuf, (int)n, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
        }
        check_recv(rbuf, n, theirs, &st[0], peer, tag);
    }
    free(sbuf);
    free(rbuf);
    t_finish("sizes");
    return 0;
}
