/* np: 2 3 */
/* Messages that travel with Ferrite's 8-byte short eager header (standard eager, context and
 * source below 2^16, tag below 2^24) mixed on one pair with messages that need the full one
 * (tags from 2^24, synchronous and buffered sends, rendezvous sizes, a communicator
 * from MPI_Comm_idup, whose context ids start at 2^30), every rank > 0 sending to rank 0:
 * - the receiver takes them with MPI_Probe/Iprobe/Mprobe/Improbe and MPI_ANY_SOURCE/
 *   MPI_ANY_TAG, blocking and nonblocking receives posted before and after arrival, and
 *   checks source, tag, count, every byte and each sender's order;
 * - sizes around the short header's one-line limit (48 bytes) and the fast ring's slot
 *   (240/248 bytes), 0 bytes and a rendezvous size;
 * - truncation of a short-header message (MPI_ERR_TRUNCATE, nothing written past the buffer),
 *   a cancelled Irecv that must not take a message, Ssend completing only on match.
 * Passes on Open MPI and MPICH too. */
#include "common.h"

#define NMSG 48
#define BIG 70000
#define TAG_BIG (1 << 24)
#define TAG_SYNC 777

static const int sizes[] = {0, 1, 7, 8, 16, 17, 32, 40, 47, 48, 49, 56, 63, 64, 65,
                            128, 200, 232, 240, 241, 248, 256, 1000, BIG};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

static unsigned char byte_of(int src, int seq, int j) { return (unsigned char)(src * 37 + seq * 11 + j * 3 + 1); }

/* Message `seq` from `src`: its size and tag (short-header tags, full-header tags and zero). */
static int size_of(int seq) { return sizes[seq % NSIZES]; }
static int tag_of(int seq, int tag_ub)
{
    int t = (seq * 7) % 5;
    if (seq % 3 == 1 && tag_ub >= TAG_BIG + 100) return TAG_BIG + seq; /* full header */
    if (seq % 3 == 2) return 0xffffff - seq;                             /* largest short tags */
    return t;
}

static unsigned char *msg(int src, int seq)
{
    static unsigned char b[BIG + 64];
    for (int j = 0; j < size_of(seq); j++) b[j] = byte_of(src, seq, j);
    return b;
}

static void check_bytes(const unsigned char *b, int src, int seq, int n, const char *what)
{
    CHECK(n == size_of(seq), "%s: message %d from %d has %d bytes, want %d", what, seq, src, n,
          size_of(seq));
    for (int j = 0; j < n; j++)
        CHECK(b[j] == byte_of(src, seq, j), "%s: message %d from %d byte %d is %d, want %d", what,
              seq, src, j, b[j], byte_of(src, seq, j));
}

/* Sender: NMSG messages, the mode chosen by seq (standard mostly, some Bsend/Rsend/Isend). */
static void send_all(MPI_Comm comm, int tag_ub, void *bsend_buf)
{
    (void)bsend_buf;
    for (int seq = 0; seq < NMSG; seq++) {
        unsigned char *b = msg(t_rank, seq);
        int n = size_of(seq), tag = tag_of(seq, tag_ub);
        if (seq % 11 == 5)
            MPI_CHECK(MPI_Bsend(b, n, MPI_BYTE, 0, tag, comm));
        else if (seq % 7 == 3) {
            MPI_Request r;
            MPI_CHECK(MPI_Isend(b, n, MPI_BYTE, 0, tag, comm, &r));
            MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        } else
            MPI_CHECK(MPI_Send(b, n, MPI_BYTE, 0, tag, comm));
    }
}

/* Receiver: each sender's messages in order, taken in the ways listed above. */
static void recv_all(MPI_Comm comm, int tag_ub, const char *what)
{
    int nsend = t_size - 1;
    int next[64] = {0};
    static unsigned char buf[BIG + 64];
    for (int k = 0; k < nsend * NMSG; k++) {
        MPI_Status st;
        int way = k % 6, cnt = -1, src, seq;
        memset(buf, 0xee, sizeof buf);
        if (way == 0) { /* Probe any, then Recv exactly that */
            MPI_CHECK(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &st));
            src = st.MPI_SOURCE;
            seq = next[src];
            CHECK(st.MPI_TAG == tag_of(seq, tag_ub), "%s: probe tag %d, want %d", what, st.MPI_TAG,
                  tag_of(seq, tag_ub));
            MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &cnt));
            CHECK(cnt == size_of(seq), "%s: probe count %d want %d", what, cnt, size_of(seq));
            MPI_CHECK(MPI_Recv(buf, cnt, MPI_BYTE, src, st.MPI_TAG, comm, &st));
        } else if (way == 1) { /* Mprobe any source, specific tag unknown: ANY_TAG */
            MPI_Message m;
            MPI_CHECK(MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &m, &st));
            src = st.MPI_SOURCE;
            MPI_CHECK(MPI_Mrecv(buf, BIG, MPI_BYTE, &m, &st));
        } else if (way == 2) { /* Iprobe loop with a specific source, then Improbe */
            int flag = 0;
            src = 1 + (k / 6) % nsend;
            if (next[src] >= NMSG) src = 1;
            while (next[src] >= NMSG) src++;
            while (!flag) MPI_CHECK(MPI_Iprobe(src, MPI_ANY_TAG, comm, &flag, &st));
            MPI_Message m;
            flag = 0;
            while (!flag) MPI_CHECK(MPI_Improbe(src, st.MPI_TAG, comm, &flag, &m, &st));
            MPI_Request r;
            MPI_CHECK(MPI_Imrecv(buf, BIG, MPI_BYTE, &m, &r));
            MPI_CHECK(MPI_Wait(&r, &st));
        } else if (way == 3) { /* Irecv posted (maybe before arrival), any source and tag */
            MPI_Request r;
            MPI_CHECK(MPI_Irecv(buf, BIG, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &r));
            MPI_CHECK(MPI_Wait(&r, &st));
            src = st.MPI_SOURCE;
        } else if (way == 4) { /* Recv with a specific source and tag */
            src = 1 + (k / 6) % nsend;
            while (next[src] >= NMSG) src = src % nsend + 1;
            MPI_CHECK(MPI_Recv(buf, BIG, MPI_BYTE, src, tag_of(next[src], tag_ub), comm, &st));
        } else { /* Recv any source, any tag */
            MPI_CHECK(MPI_Recv(buf, BIG, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &st));
            src = st.MPI_SOURCE;
        }
        CHECK(src >= 1 && src < t_size && st.MPI_SOURCE == src, "%s: source %d (status %d)", what,
              src, st.MPI_SOURCE);
        seq = next[src]++;
        CHECK(seq < NMSG, "%s: too many messages from %d", what, src);
        CHECK(st.MPI_TAG == tag_of(seq, tag_ub), "%s: way %d message %d from %d tag %d, want %d",
              what, way, seq, src, st.MPI_TAG, tag_of(seq, tag_ub));
        MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &cnt));
        check_bytes(buf, src, seq, cnt, what);
        CHECK(buf[cnt] == 0xee, "%s: byte past message %d from %d written", what, seq, src);
    }
}

/* Truncation, a cancelled receive and Ssend on short-header sizes. */
static void edge_cases(MPI_Comm comm)
{
    unsigned char b[64];
    if (t_rank == 1) {
        for (int j = 0; j < 40; j++) b[j] = (unsigned char)(200 + j);
        MPI_CHECK(MPI_Send(b, 40, MPI_BYTE, 0, 5, comm));  /* truncated, already there */
        MPI_CHECK(MPI_Barrier(comm));
        MPI_CHECK(MPI_Send(b, 40, MPI_BYTE, 0, 6, comm));  /* truncated, arrives while posted */
        MPI_CHECK(MPI_Send(b, 33, MPI_BYTE, 0, 8, comm));  /* for the receive after the cancel */
        MPI_CHECK(MPI_Ssend(b, 24, MPI_BYTE, 0, TAG_SYNC, comm));
    } else if (t_rank == 0) {
        MPI_Status st;
        int rc;
        /* MPICH reports a request's errors in MPI_Wait through MPI_COMM_WORLD's handler. */
        MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        MPI_CHECK(MPI_Probe(1, 5, comm, &st));
        memset(b, 0xee, sizeof b);
        rc = MPI_Recv(b, 16, MPI_BYTE, 1, 5, comm, &st);
        CHECK(t_class(rc) == MPI_ERR_TRUNCATE, "truncation (unexpected): class %d", t_class(rc));
        for (int j = 16; j < 64; j++) CHECK(b[j] == 0xee, "truncation wrote byte %d", j);
        MPI_Request r, c;
        memset(b, 0xee, sizeof b);
        MPI_CHECK(MPI_Irecv(b + 32, 8, MPI_BYTE, 1, 8, comm, &c));
        MPI_CHECK(MPI_Cancel(&c));
        MPI_CHECK(MPI_Wait(&c, &st));
        int cancelled = 0;
        MPI_CHECK(MPI_Test_cancelled(&st, &cancelled));
        CHECK(cancelled, "an Irecv cancelled before any message came was not cancelled");
        MPI_CHECK(MPI_Irecv(b, 16, MPI_BYTE, 1, 6, comm, &r));
        MPI_CHECK(MPI_Barrier(comm));
        rc = MPI_Wait(&r, &st);
        CHECK(rc == MPI_ERR_IN_STATUS || t_class(rc) == MPI_ERR_TRUNCATE ||
                  t_class(st.MPI_ERROR) == MPI_ERR_TRUNCATE,
              "truncation (posted): rc class %d", t_class(rc));
        for (int j = 16; j < 32; j++) CHECK(b[j] == 0xee, "posted truncation wrote byte %d", j);
        unsigned char c33[40];
        memset(c33, 0xee, sizeof c33);
        MPI_CHECK(MPI_Recv(c33, 40, MPI_BYTE, 1, 8, comm, &st));
        int cnt;
        MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &cnt));
        CHECK(cnt == 33 && c33[32] == 232 && c33[33] == 0xee, "after cancel: count %d", cnt);
        for (int j = 32; j < 40; j++) CHECK(b[j] == 0xee, "the cancelled Irecv wrote byte %d", j);
        MPI_CHECK(MPI_Recv(b, 64, MPI_BYTE, 1, TAG_SYNC, comm, &st));
        MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &cnt));
        CHECK(cnt == 24 && b[23] == 223, "ssend: count %d", cnt);
        MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_ARE_FATAL));
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    } else {
        MPI_CHECK(MPI_Barrier(comm));
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t_size);
    int *ub, flag;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
    int tag_ub = flag ? *ub : 32767;
    int bsize = NMSG * (BIG + MPI_BSEND_OVERHEAD);
    void *bbuf = malloc(bsize);
    MPI_CHECK(MPI_Buffer_attach(bbuf, bsize));

    MPI_Comm dup, idup;
    MPI_Request ir;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &idup, &ir));
    MPI_CHECK(MPI_Wait(&ir, MPI_STATUS_IGNORE));
    MPI_Comm comms[3] = {MPI_COMM_WORLD, dup, idup};
    const char *names[3] = {"world", "dup", "idup"};
    for (int round = 0; round < 2; round++) {
        for (int c = 0; c < 3; c++) {
            if (t_rank == 0)
                recv_all(comms[c], tag_ub, names[c]);
            else
                send_all(comms[c], tag_ub, bbuf);
            MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        }
    }
    edge_cases(MPI_COMM_WORLD);
    edge_cases(idup);
    MPI_CHECK(MPI_Comm_free(&dup));
    MPI_CHECK(MPI_Comm_free(&idup));
    MPI_CHECK(MPI_Buffer_detach(&bbuf, &bsize));
    free(bbuf);
    if (t_rank == 0) printf("done: p2p_short_header\n");
    MPI_Finalize();
    return 0;
}
