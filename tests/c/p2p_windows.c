/* np: 2 3 */
/* Windows of nonblocking sends and receives (the pattern of osu_bw/osu_bibw/osu_mbw_mr)
 * with mixed sizes, checked byte by byte, both directions at once: partners 0<->1 (an odd
 * last rank talks to itself). Each window holds WIN messages whose sizes straddle every
 * switch of the shm path: 0 B, the fast ring's inline slot (payload 207/208/209 B), a queue
 * cell, the eager limit (16391/16392/16393 B with the default cell), rendezvous (40000,
 * 70000 B). Per window, it varies:
 * - order: receives posted before the partner's sends (expected) or after (unexpected);
 * - receive tags: the message's own tag, or MPI_ANY_TAG (then MPI's order per sender says
 *   which message lands where, checked by the sequence number in the payload);
 * - completion: Waitall, Waitany, Waitsome, Testsome, Testany, Testall, or Test one by one,
 *   on the receive array and on the send array (statuses: source, tag, count). */
#include "common.h"

#define WIN 64
#define NWIN 28
#define MAXLEN 70000
#define TAG_SYNC 30000

static const int sizes[] = {0,     1,     8,     40,    207,   208,   209,  1000,
                            4096,  8192,  16391, 16392, 16393, 40000, 3,    70000};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

static int len_of(int w, int i) { return sizes[(w * 7 + i * 5 + (i >> 3)) % NSIZES]; }

/* Byte j of message (window w, index i) sent by rank src. */
static unsigned char byte_of(int src, int w, int i, int j)
{
    return t_byte((unsigned long)(src * 100003 + w * WIN + i), (unsigned long)j);
}

static void fill(unsigned char *b, int src, int w, int i, int len)
{
    for (int j = 0; j < len; j++) b[j] = byte_of(src, w, i, j);
}

/* Receive k of window w (from `src`, received with `anytag`) completed with status `st`
 * into buffer b: with specific tags it must be message k; with ANY_TAG, too (one sender,
 * order kept). */
static void check(const unsigned char *b, int src, int w, int k, const MPI_Status *st)
{
    int len = len_of(w, k), count = -1;
    CHECK(st->MPI_SOURCE == src, "window %d receive %d: source %d, want %d", w, k,
          st->MPI_SOURCE, src);
    CHECK(st->MPI_TAG == k, "window %d receive %d: tag %d, want %d (order broken)", w, k,
          st->MPI_TAG, k);
    MPI_CHECK(MPI_Get_count(st, MPI_BYTE, &count));
    CHECK(count == len, "window %d receive %d: count %d, want %d", w, k, count, len);
    for (int j = 0; j < len; j++)
        CHECK(b[j] == byte_of(src, w, k, j), "window %d receive %d (%d B): byte %d is %d, want %d",
              w, k, len, j, b[j], byte_of(src, w, k, j));
    /* Nothing written past the message. */
    if (len < MAXLEN)
        CHECK(b[len] == 0xee, "window %d receive %d: byte %d past the %d-byte message written",
              w, k, len, len);
}

/* Completes all n requests of `rq` the way `how` says; statuses land at their index. */
static void complete(int how, int n, MPI_Request *rq, MPI_Status *st)
{
    int done = 0, idx[WIN], outcount, flag;
    MPI_Status tmp[WIN];
    switch (how) {
    case 0:
        MPI_CHECK(MPI_Waitall(n, rq, st));
        return;
    case 1:
        for (int k = 0; k < n; k++) {
            int i = -1;
            MPI_CHECK(MPI_Waitany(n, rq, &i, &tmp[0]));
            CHECK(i >= 0 && i < n && rq[i] == MPI_REQUEST_NULL, "Waitany gave index %d", i);
            st[i] = tmp[0];
        }
        MPI_CHECK(MPI_Waitany(n, rq, &outcount, &tmp[0]));
        CHECK(outcount == MPI_UNDEFINED, "Waitany on no active request gave %d", outcount);
        return;
    case 2:
    case 3:
        while (done < n) {
            if (how == 2)
                MPI_CHECK(MPI_Waitsome(n, rq, &outcount, idx, tmp));
            else
                MPI_CHECK(MPI_Testsome(n, rq, &outcount, idx, tmp));
            CHECK(outcount >= 0 && outcount <= n - done, "%s: outcount %d with %d left",
                  how == 2 ? "Waitsome" : "Testsome", outcount, n - done);
            for (int k = 0; k < outcount; k++) {
                CHECK(idx[k] >= 0 && idx[k] < n && rq[idx[k]] == MPI_REQUEST_NULL,
                      "index %d not completed", idx[k]);
                st[idx[k]] = tmp[k];
            }
            done += outcount;
        }
        MPI_CHECK(MPI_Testsome(n, rq, &outcount, idx, tmp));
        CHECK(outcount == MPI_UNDEFINED, "Testsome on no active request gave %d", outcount);
        return;
    case 4:
        while (done < n) {
            int i = -1;
            MPI_CHECK(MPI_Testany(n, rq, &i, &flag, &tmp[0]));
            if (flag) {
                CHECK(i >= 0 && i < n && rq[i] == MPI_REQUEST_NULL, "Testany gave index %d", i);
                st[i] = tmp[0];
                done++;
            }
        }
        return;
    case 5:
        do MPI_CHECK(MPI_Testall(n, rq, &flag, st));
        while (!flag);
        for (int k = 0; k < n; k++)
            CHECK(rq[k] == MPI_REQUEST_NULL, "Testall left request %d active", k);
        return;
    default:
        while (done < n)
            for (int k = 0; k < n; k++)
                if (rq[k] != MPI_REQUEST_NULL) {
                    MPI_CHECK(MPI_Test(&rq[k], &flag, &tmp[0]));
                    if (flag) {
                        st[k] = tmp[0];
                        done++;
                    }
                }
        return;
    }
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int peer = t_partner();
    unsigned char *sbuf[WIN], *rbuf[WIN];
    for (int i = 0; i < WIN; i++) {
        sbuf[i] = malloc(MAXLEN);
        rbuf[i] = malloc(MAXLEN + 1);
        CHECK(sbuf[i] && rbuf[i], "out of memory");
    }
    MPI_Request srq[WIN], rrq[WIN];
    MPI_Status sst[WIN], rst[WIN];
    for (int w = 0; w < NWIN; w++) {
        int posted_first = w % 2 == 0;
        int anytag = w % 3 == 1;
        int rhow = w % 7, show = (w + 3) % 7;
        for (int i = 0; i < WIN; i++) {
            fill(sbuf[i], t_rank, w, i, len_of(w, i));
            memset(rbuf[i], 0xee, MAXLEN + 1);
        }
        if (posted_first)
            for (int i = 0; i < WIN; i++)
                MPI_CHECK(MPI_Irecv(rbuf[i], len_of(w, i), MPI_BYTE, peer,
                                    anytag ? MPI_ANY_TAG : i, MPI_COMM_WORLD, &rrq[i]));
        else
            /* The partner's sends go first: wait until it says they are posted. */
            MPI_CHECK(MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, TAG_SYNC, NULL, 0, MPI_BYTE, peer,
                                   TAG_SYNC, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (int i = 0; i < WIN; i++)
            MPI_CHECK(MPI_Isend(sbuf[i], len_of(w, i), MPI_BYTE, peer, i, MPI_COMM_WORLD, &srq[i]));
        if (!posted_first) {
            MPI_CHECK(MPI_Sendrecv(NULL, 0, MPI_BYTE, peer, TAG_SYNC, NULL, 0, MPI_BYTE, peer,
                                   TAG_SYNC, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            for (int i = 0; i < WIN; i++)
                MPI_CHECK(MPI_Irecv(rbuf[i], len_of(w, i), MPI_BYTE, peer,
                                    anytag ? MPI_ANY_TAG : i, MPI_COMM_WORLD, &rrq[i]));
        }
        /* Receives first when the sends are large enough to need the partner's progress:
         * every completion call progresses both. */
        complete(rhow, WIN, rrq, rst);
        for (int k = 0; k < WIN; k++) check(rbuf[k], peer, w, k, &rst[k]);
        complete(show, WIN, srq, sst);
        for (int k = 0; k < WIN; k++)
            CHECK(srq[k] == MPI_REQUEST_NULL, "window %d send %d still active", w, k);
    }
    for (int i = 0; i < WIN; i++) {
        free(sbuf[i]);
        free(rbuf[i]);
    }
    t_finish("p2p_windows");
    return 0;
}
