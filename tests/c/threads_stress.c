/* np: 2 */
/* MPI_THREAD_MULTIPLE stress: 10^6 messages in all (10^5 when FERRITE_TRANSPORTS is set). Each of NT threads per rank streams
 * TOTAL / (2 * NT) small messages to the same thread of the partner and receives as many,
 * in windows of W nonblocking sends and receives completed by Waitall (odd threads) or by
 * Waitany/Testsome (even threads); two threads share MPI_COMM_WORLD, the others have a
 * duplicate each. Every message carries (rank, thread, seq) and is checked:
 * per sender, messages arrive in order. */
#include "common.h"
#include <pthread.h>

#define NT 4
#define TOTAL 1000000
#define W 64

static int peer;
/* TOTAL over shared memory (the default suite run); a tenth over the socket transports, whose
 * suites run every program again (tests/run.sh). */
static int total = TOTAL;
static MPI_Comm comm[NT];
static char errmsg[NT][256];


static void *worker(void *arg)
{
    int t = (int)(long)arg;
    int n = total / (2 * NT);
    /* Threads 0 and 1 share MPI_COMM_WORLD with their own tags (thread 1 receives from
     * MPI_ANY_SOURCE); the others have a communicator each. */
    MPI_Comm c = t < 2 ? MPI_COMM_WORLD : comm[t];
    int tag = 5 + t, src = t == 1 ? MPI_ANY_SOURCE : peer;
    int sbuf[W][3], rbuf[W][3];
    MPI_Request rq[2 * W];
    int expect = 0;
    for (int base = 0; base < n; base += W) {
        int k = n - base < W ? n - base : W;
        for (int i = 0; i < k; i++) {
            TOK(t, MPI_Irecv(rbuf[i], 3, MPI_INT, src, tag, c, &rq[i]));
            sbuf[i][0] = t_rank, sbuf[i][1] = t, sbuf[i][2] = base + i;
            TOK(t, MPI_Isend(sbuf[i], 3, MPI_INT, peer, tag, c, &rq[k + i]));
        }
        if (t % 2) {
            TOK(t, MPI_Waitall(2 * k, rq, MPI_STATUSES_IGNORE));
        } else {
            int left = 2 * k, idx[2 * W], outn;
            while (left > 0) {
                if (left % 3 == 0) {
                    TOK(t, MPI_Waitany(2 * k, rq, &idx[0], MPI_STATUS_IGNORE));
                    left--;
                } else {
                    TOK(t, MPI_Testsome(2 * k, rq, &outn, idx, MPI_STATUSES_IGNORE));
                    if (outn != MPI_UNDEFINED) left -= outn;
                }
            }
        }
        for (int i = 0; i < k; i++, expect++)
            if (rbuf[i][0] != peer || rbuf[i][1] != t || rbuf[i][2] != expect)
                TFAIL(t, "thread %d: message %d is %d/%d/%d, expected %d/%d/%d", t, expect,
                     rbuf[i][0], rbuf[i][1], rbuf[i][2], peer, t, expect);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (!t_init_multiple(&argc, &argv)) return 0;
    peer = t_partner();
    if (getenv("FERRITE_TRANSPORTS")) total = TOTAL / 10;
    for (int t = 0; t < NT; t++) MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm[t]));
    pthread_t th[NT];
    for (long t = 0; t < NT; t++)
        CHECK(pthread_create(&th[t], NULL, worker, (void *)t) == 0, "pthread_create failed");
    for (int t = 0; t < NT; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < NT; t++) CHECK(errmsg[t][0] == 0, "%s", errmsg[t]);
    for (int t = 0; t < NT; t++) MPI_CHECK(MPI_Comm_free(&comm[t]));
    t_finish("threads_stress");
    return 0;
}
