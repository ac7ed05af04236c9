/* np: 2 3 */
/* MPI_Recv's path without a request (a blocking receive waits as a bare entry in the
 * matching queues; a message already unexpected lands in the buffer at once; a rendezvous
 * message turns it into a request), checked against MPI's matching rules with data:
 * - Irecvs posted before a blocking Recv take the messages both accept first (specific and
 *   wildcard, messages arriving before the calls and while the Recv is blocked);
 * - a stream of 0 B .. 70 KB messages (eager, cell, rendezvous) received by Recv with
 *   specific and ANY tags, Irecvs interleaved, sequence and bytes checked;
 * - ANY_SOURCE over two senders keeps each sender's order (3 ranks);
 * - truncation (eager and rendezvous, unexpected and arriving while blocked): the error
 *   class MPI_ERR_TRUNCATE, the first bytes delivered, nothing written past the buffer;
 * - zero bytes, MPI_PROC_NULL, self-sends, a derived receive type, statuses (source, tag,
 *   count, elements), Ssend into a blocked Recv and into an unexpected one;
 * - under MPI_THREAD_MULTIPLE, two threads of rank 0 blocked in Recv at once on their own
 *   tags while rank 1 sends to both. */
#include "common.h"
#include <pthread.h>

#define TAG_GO 999
#define NSTREAM 600
#define MAXLEN 70000
#define NTHREAD_MSGS 300

static unsigned char byte_of(int src, int i, int j) { return (unsigned char)(src * 29 + i * 7 + j * 3 + 1); }

static void fill(unsigned char *b, int src, int i, int len)
{
    for (int j = 0; j < len; j++) b[j] = byte_of(src, i, j);
}

static void check_bytes(const unsigned char *b, int src, int i, int len, const char *what)
{
    for (int j = 0; j < len; j++)
        CHECK(b[j] == byte_of(src, i, j), "%s: message %d from %d: byte %d is %d, want %d", what,
              i, src, j, b[j], byte_of(src, i, j));
}

static int len_of(int i)
{
    static const int sizes[] = {0, 1, 8, 17, 100, 200, 240, 1000, 4000, 8, 20000, 70000, 3};
    return sizes[i % (int)(sizeof sizes / sizeof sizes[0])];
}

static void expect_status(MPI_Status *st, int src, int tag, MPI_Datatype dt, int count, const char *what)
{
    int n = -1;
    MPI_CHECK(MPI_Get_count(st, dt, &n));
    CHECK(st->MPI_SOURCE == src && st->MPI_TAG == tag && n == count,
          "%s: status source %d tag %d count %d, want %d %d %d", what, st->MPI_SOURCE, st->MPI_TAG,
          n, src, tag, count);
}

/* Irecvs posted before a blocking Recv. `early`: the sender sends before rank 0 posts
 * anything (unexpected messages); otherwise after rank 0's go-ahead (arriving while the
 * Recv blocks). */
static void order_vs_irecv(int early)
{
    const int tag = 5 + early;
    int a[4] = {0}, b[4] = {0}, c[4] = {0};
    MPI_Request r[2];
    MPI_Status st;
    if (t_rank == 1) {
        if (!early) MPI_CHECK(MPI_Recv(NULL, 0, MPI_INT, 0, TAG_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (int k = 1; k <= 3; k++) {
            int m[4] = {k, k, k, k};
            MPI_CHECK(MPI_Send(m, 4, MPI_INT, 0, tag, MPI_COMM_WORLD));
        }
    } else if (t_rank == 0) {
        if (early) MPI_CHECK(MPI_Probe(1, tag, MPI_COMM_WORLD, &st)); /* at least one is here */
        MPI_CHECK(MPI_Irecv(a, 4, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &r[0]));
        MPI_CHECK(MPI_Irecv(b, 4, MPI_INT, 1, tag, MPI_COMM_WORLD, &r[1]));
        if (!early) MPI_CHECK(MPI_Send(NULL, 0, MPI_INT, 1, TAG_GO, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Recv(c, 4, MPI_INT, 1, tag, MPI_COMM_WORLD, &st));
        expect_status(&st, 1, tag, MPI_INT, 4, "Recv after two Irecvs");
        MPI_CHECK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        CHECK(a[0] == 1 && a[3] == 1 && b[0] == 2 && b[3] == 2 && c[0] == 3 && c[3] == 3,
              "early=%d: Irecv(any) got %d, Irecv(1) got %d, Recv got %d (want 1 2 3)", early, a[0],
              b[0], c[0]);
    }
}

/* A stream of many sizes, received by Recv with specific and ANY tags, with some Irecvs
 * posted ahead. */
static void stream(void)
{
    unsigned char *buf = malloc(MAXLEN), *pre = malloc(MAXLEN);
    CHECK(buf && pre, "malloc");
    if (t_rank == 1) {
        for (int i = 0; i < NSTREAM; i++) {
            int len = len_of(i);
            fill(buf, 1, i, len);
            if (i % 5 == 3) {
                MPI_Request r;
                MPI_CHECK(MPI_Isend(buf, len, MPI_BYTE, 0, i % 3, MPI_COMM_WORLD, &r));
                MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            } else if (i % 7 == 6) {
                MPI_CHECK(MPI_Ssend(buf, len, MPI_BYTE, 0, i % 3, MPI_COMM_WORLD));
            } else {
                MPI_CHECK(MPI_Send(buf, len, MPI_BYTE, 0, i % 3, MPI_COMM_WORLD));
            }
        }
    } else if (t_rank == 0) {
        for (int i = 0; i < NSTREAM; i++) {
            MPI_Status st;
            int len = len_of(i);
            if (i % 11 == 4 && i + 1 < NSTREAM) {
                /* An Irecv for message i, then a Recv for i + 1 (same tag pattern: ANY). */
                MPI_Request r;
                MPI_CHECK(MPI_Irecv(pre, MAXLEN, MPI_BYTE, 1, MPI_ANY_TAG, MPI_COMM_WORLD, &r));
                if (i % 2) usleep(200); /* let messages arrive: unexpected for the Recv */
                MPI_CHECK(MPI_Recv(buf, MAXLEN, MPI_BYTE, 1, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
                expect_status(&st, 1, (i + 1) % 3, MPI_BYTE, len_of(i + 1), "Recv after Irecv");
                check_bytes(buf, 1, i + 1, len_of(i + 1), "Recv after Irecv");
                MPI_CHECK(MPI_Wait(&r, &st));
                expect_status(&st, 1, i % 3, MPI_BYTE, len, "Irecv before Recv");
                check_bytes(pre, 1, i, len, "Irecv before Recv");
                i++;
                continue;
            }
            int tag = (i % 4 == 0) ? MPI_ANY_TAG : i % 3;
            MPI_CHECK(MPI_Recv(buf, MAXLEN, MPI_BYTE, i % 6 == 1 ? MPI_ANY_SOURCE : 1, tag,
                               MPI_COMM_WORLD, &st));
            expect_status(&st, 1, i % 3, MPI_BYTE, len, "stream");
            check_bytes(buf, 1, i, len, "stream");
        }
    }
    free(buf);
    free(pre);
}

/* Ranks 1 and 2 each send 200 numbered messages; rank 0 receives 400 with ANY_SOURCE. */
static void any_source_two_senders(void)
{
    if (t_size < 3) return;
    const int n = 200, tag = 31;
    if (t_rank == 1 || t_rank == 2) {
        for (int i = 0; i < n; i++) {
            int m[2] = {t_rank, i};
            MPI_CHECK(MPI_Send(m, 2, MPI_INT, 0, tag, MPI_COMM_WORLD));
        }
    } else if (t_rank == 0) {
        int next[3] = {0, 0, 0};
        for (int k = 0; k < 2 * n; k++) {
            int m[2] = {-1, -1};
            MPI_Status st;
            MPI_CHECK(MPI_Recv(m, 2, MPI_INT, MPI_ANY_SOURCE, k % 2 ? MPI_ANY_TAG : tag,
                               MPI_COMM_WORLD, &st));
            CHECK(st.MPI_SOURCE == m[0] && (m[0] == 1 || m[0] == 2) && st.MPI_TAG == tag,
                  "ANY_SOURCE: status source %d tag %d for a message from %d", st.MPI_SOURCE,
                  st.MPI_TAG, m[0]);
            CHECK(m[1] == next[m[0]], "ANY_SOURCE: message %d from %d, want %d", m[1], m[0],
                  next[m[0]]);
            next[m[0]]++;
        }
    }
}

/* Truncation: `len` bytes into a buffer of `cap`; `blocked`: the Recv waits before the
 * message is sent. */
static void truncation(int len, int cap, int blocked)
{
    const int tag = 40;
    unsigned char *b = malloc(len + 64);
    CHECK(b, "malloc");
    if (t_rank == 1) {
        fill(b, 1, len, len);
        if (blocked) MPI_CHECK(MPI_Recv(NULL, 0, MPI_BYTE, 0, TAG_GO, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Send(b, len, MPI_BYTE, 0, tag, MPI_COMM_WORLD));
    } else if (t_rank == 0) {
        MPI_Status st;
        memset(b, 0xEE, len + 64);
        if (blocked) {
            MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, 1, TAG_GO, MPI_COMM_WORLD));
        } else {
            MPI_CHECK(MPI_Probe(1, tag, MPI_COMM_WORLD, &st));
        }
        st.MPI_SOURCE = st.MPI_TAG = -7;
        int rc = MPI_Recv(b, cap, MPI_BYTE, 1, tag, MPI_COMM_WORLD, &st);
        CHECK(t_class(rc) == MPI_ERR_TRUNCATE, "%d bytes into %d (blocked %d): class %d, want MPI_ERR_TRUNCATE",
              len, cap, blocked, t_class(rc));
        CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == tag, "truncated: status source %d tag %d",
              st.MPI_SOURCE, st.MPI_TAG);
        check_bytes(b, 1, len, cap, "truncated message");
        for (int j = cap; j < cap + 64; j++)
            CHECK(b[j] == 0xEE, "truncation wrote byte %d past the %d-byte buffer", j, cap);
    }
    free(b);
}

static void small_cases(void)
{
    MPI_Status st;
    /* MPI_PROC_NULL: at once, status source PROC_NULL, tag ANY_TAG, count 0. */
    int x = 42;
    MPI_CHECK(MPI_Recv(&x, 1, MPI_INT, MPI_PROC_NULL, 3, MPI_COMM_WORLD, &st));
    expect_status(&st, MPI_PROC_NULL, MPI_ANY_TAG, MPI_INT, 0, "PROC_NULL");
    CHECK(x == 42, "a receive from MPI_PROC_NULL wrote the buffer");

    /* Self: Send (eager) then Recv, Isend then Recv, ANY_SOURCE, zero bytes, NULL buffer. */
    int s[3] = {t_rank, 7, 9}, r[3] = {0, 0, 0};
    MPI_CHECK(MPI_Send(s, 3, MPI_INT, t_rank, 50, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Send(NULL, 0, MPI_INT, t_rank, 51, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Recv(r, 3, MPI_INT, MPI_ANY_SOURCE, 50, MPI_COMM_WORLD, &st));
    expect_status(&st, t_rank, 50, MPI_INT, 3, "self");
    CHECK(r[0] == t_rank && r[1] == 7 && r[2] == 9, "self-send data");
    MPI_CHECK(MPI_Recv(r, 3, MPI_INT, t_rank, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    expect_status(&st, t_rank, 51, MPI_INT, 0, "self zero bytes");
    static unsigned char big[100000], big2[100000];
    fill(big, t_rank, 3, sizeof big);
    MPI_Request q;
    MPI_CHECK(MPI_Isend(big, sizeof big, MPI_BYTE, 0, 52, MPI_COMM_SELF, &q));
    MPI_CHECK(MPI_Recv(big2, sizeof big2, MPI_BYTE, 0, 52, MPI_COMM_SELF, &st));
    MPI_CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    expect_status(&st, 0, 52, MPI_BYTE, sizeof big2, "self rendezvous");
    check_bytes(big2, t_rank, 3, sizeof big2, "self rendezvous");

    /* Zero bytes between ranks, and a derived receive type (every other int of 2 blocks). */
    MPI_Datatype vec;
    MPI_CHECK(MPI_Type_vector(3, 1, 2, MPI_INT, &vec));
    MPI_CHECK(MPI_Type_commit(&vec));
    if (t_rank == 1) {
        MPI_CHECK(MPI_Send(NULL, 0, MPI_BYTE, 0, 60, MPI_COMM_WORLD));
        int v[5] = {10, 11, 12, 13, 14};
        MPI_CHECK(MPI_Send(v, 5, MPI_INT, 0, 61, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Ssend(v, 2, MPI_INT, 0, 62, MPI_COMM_WORLD)); /* into a blocked Recv */
        MPI_CHECK(MPI_Ssend(v, 1, MPI_INT, 0, 63, MPI_COMM_WORLD)); /* unexpected */
    } else if (t_rank == 0) {
        char c = 'z';
        MPI_CHECK(MPI_Recv(&c, 1, MPI_CHAR, 1, 60, MPI_COMM_WORLD, &st));
        expect_status(&st, 1, 60, MPI_CHAR, 0, "zero bytes");
        CHECK(c == 'z', "a zero-byte message wrote the buffer");
        int d[12];
        for (int j = 0; j < 12; j++) d[j] = -1;
        MPI_CHECK(MPI_Recv(d, 2, vec, 1, 61, MPI_COMM_WORLD, &st));
        int el = -1, cnt = -2;
        MPI_CHECK(MPI_Get_elements(&st, vec, &el));
        MPI_CHECK(MPI_Get_count(&st, vec, &cnt));
        CHECK(el == 5 && cnt == MPI_UNDEFINED, "vector receive: elements %d count %d", el, cnt);
        int want[10] = {10, -1, 11, -1, 12, 13, -1, 14, -1, -1};
        for (int j = 0; j < 10; j++) CHECK(d[j] == want[j], "vector receive: d[%d] = %d", j, d[j]);
        int e[2] = {0, 0};
        MPI_CHECK(MPI_Recv(e, 2, MPI_INT, 1, 62, MPI_COMM_WORLD, &st));
        expect_status(&st, 1, 62, MPI_INT, 2, "Ssend into Recv");
        MPI_CHECK(MPI_Probe(1, 63, MPI_COMM_WORLD, &st)); /* so it is unexpected by now */
        MPI_CHECK(MPI_Recv(e, 2, MPI_INT, 1, 63, MPI_COMM_WORLD, &st));
        expect_status(&st, 1, 63, MPI_INT, 1, "unexpected Ssend");
        CHECK(e[0] == 10, "Ssend data");
    }
    MPI_CHECK(MPI_Type_free(&vec));
}

static void *thread_recv(void *arg)
{
    int tag = 70 + (int)(long)arg;
    for (int i = 0; i < NTHREAD_MSGS; i++) {
        int m[2] = {-1, -1};
        MPI_Status st;
        MPI_CHECK(MPI_Recv(m, 2, MPI_INT, 1, tag, MPI_COMM_WORLD, &st));
        CHECK(m[0] == tag && m[1] == i && st.MPI_TAG == tag, "thread tag %d: got %d/%d, want %d", tag,
              m[0], m[1], i);
    }
    return NULL;
}

static void threads(int provided)
{
    if (provided < MPI_THREAD_MULTIPLE) return;
    if (t_rank == 1) {
        for (int i = 0; i < NTHREAD_MSGS; i++)
            for (int t = 0; t < 2; t++) {
                int m[2] = {70 + t, i};
                MPI_CHECK(MPI_Send(m, 2, MPI_INT, 0, 70 + t, MPI_COMM_WORLD));
            }
    } else if (t_rank == 0) {
        pthread_t th[2];
        for (long t = 0; t < 2; t++) CHECK(pthread_create(&th[t], NULL, thread_recv, (void *)t) == 0, "pthread_create");
        for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    }
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);

    for (int early = 0; early < 2; early++) order_vs_irecv(early);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    stream();
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    any_source_two_senders();
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    for (int blocked = 0; blocked < 2; blocked++) {
        truncation(100, 40, blocked);
        truncation(200000, 1000, blocked);
        truncation(5, 0, blocked);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    small_cases();
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    threads(provided);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 0) printf("done: recv_blocking\n");
    MPI_Finalize();
    return 0;
}
