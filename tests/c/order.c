/* np: 1 2 4 16 */
/* Non-overtaking: messages between the same pair with the same tag are matched in the
 * order they were sent, whatever their sizes (small, medium and larger than any eager
 * limit). Checked with receives posted before the sends, with all messages unexpected
 * (the receiver waits for a "go" message sent after them), and with ANY_TAG receives. */
#include "common.h"

#define NMSG 60
#define BIG (300 * 1000)

static int size_of(int i)
{
    switch (i % 4) {
    case 0: return BIG + i;
    case 1: return 16;
    case 2: return 5000 + i;
    default: return i; /* includes 3, 7, ...: small */
    }
}

static void check(unsigned char *buf, MPI_Status *st, int round, int i, int peer)
{
    int c = -1;
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &c));
    CHECK(c == size_of(i), "round %d: receive %d got %d bytes, expected %d (overtaken?)", round,
          i, c, size_of(i));
    CHECK(st->MPI_SOURCE == peer, "round %d: source %d", round, st->MPI_SOURCE);
    for (int k = 0; k < c; k++)
        if (buf[k] != t_byte(round * 1000 + i, k))
            FAIL("round %d: message %d byte %d wrong (0x%02x)", round, i, k, buf[k]);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int peer = t_partner();
    unsigned char *sbuf[NMSG], *rbuf[NMSG];
    MPI_Request srq[NMSG], rrq[NMSG];
    MPI_Status st[NMSG];
    for (int i = 0; i < NMSG; i++) {
        sbuf[i] = malloc(size_of(i) + 1);
        rbuf[i] = malloc(BIG + NMSG);
    }
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < NMSG; i++)
            for (int k = 0; k < size_of(i); k++) sbuf[i][k] = t_byte(round * 1000 + i, k);
        int tag = 7;
        if (round == 0) /* receives posted first, all with the same tag */
            for (int i = 0; i < NMSG; i++)
                MPI_CHECK(MPI_Irecv(rbuf[i], BIG + NMSG, MPI_BYTE, peer, tag, MPI_COMM_WORLD,
                                    &rrq[i]));
        for (int i = 0; i < NMSG; i++)
            MPI_CHECK(MPI_Isend(sbuf[i], size_of(i), MPI_BYTE, peer, tag, MPI_COMM_WORLD,
                                &srq[i]));
        if (round == 0) {
            MPI_CHECK(MPI_Waitall(NMSG, rrq, st));
            for (int i = 0; i < NMSG; i++) check(rbuf[i], &st[i], round, i, peer);
        } else {
            /* Make every message unexpected before matching any. */
            int go = 0, got = -1;
            MPI_Request grq;
            MPI_CHECK(MPI_Isend(&go, 1, MPI_INT, peer, 99, MPI_COMM_WORLD, &grq));
            MPI_CHECK(MPI_Recv(&got, 1, MPI_INT, peer, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            MPI_CHECK(MPI_Wait(&grq, MPI_STATUS_IGNORE));
            for (int i = 0; i < NMSG; i++) {
                MPI_CHECK(MPI_Recv(rbuf[i], BIG + NMSG, MPI_BYTE, peer,
                                   round == 1 ? tag : MPI_ANY_TAG, MPI_COMM_WORLD, &st[i]));
                CHECK(st[i].MPI_TAG == tag, "tag %d", st[i].MPI_TAG);
                check(rbuf[i], &st[i], round, i, peer);
            }
        }
        MPI_CHECK(MPI_Waitall(NMSG, srq, MPI_STATUSES_IGNORE));
    }
    for (int i = 0; i < NMSG; i++) {
        free(sbuf[i]);
        free(rbuf[i]);
    }
    t_finish("order");
    return 0;
}
