/* np: 1 2 4 16 */
/* Matched probes: Mprobe/Improbe remove the message from matching (a later probe with the
 * same source/tag sees the next message), Mrecv/Imrecv receive exactly the matched one,
 * the message handle becomes MPI_MESSAGE_NULL, and MPI_PROC_NULL gives MPI_MESSAGE_NO_PROC.
 * Sizes small and large. */
#include "common.h"

#define NM 4
#define T 5

static int sz(int k) { return k % 2 ? 70000 + k : 3 + k; }

static void check(int *b, int n, int src, int k, MPI_Status *st, const char *what)
{
    int c = -1;
    MPI_CHECK(MPI_Get_count(st, MPI_INT, &c));
    CHECK(c == n && st->MPI_SOURCE == src && st->MPI_TAG == T,
          "%s: message %d: count %d source %d tag %d, expected %d %d %d", what, k, c,
          st->MPI_SOURCE, st->MPI_TAG, n, src, T);
    for (int i = 0; i < n; i++)
        CHECK(b[i] == src * 1000 + k * 100000 + i, "%s: message %d element %d is %d", what, k,
              i, b[i]);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int peer = t_partner();
    int *sb[NM], *rb[NM];
    MPI_Request sr[NM];
    for (int k = 0; k < NM; k++) {
        sb[k] = malloc(sizeof(int) * sz(k));
        rb[k] = malloc(sizeof(int) * sz(k));
        for (int i = 0; i < sz(k); i++) sb[k][i] = t_rank * 1000 + k * 100000 + i;
        MPI_CHECK(MPI_Isend(sb[k], sz(k), MPI_INT, peer, T, MPI_COMM_WORLD, &sr[k]));
    }
    MPI_Message m0, m1;
    MPI_Status st, pst;
    /* Message 0 by Mprobe. */
    MPI_CHECK(MPI_Mprobe(peer, T, MPI_COMM_WORLD, &m0, &st));
    CHECK(m0 != MPI_MESSAGE_NULL && m0 != MPI_MESSAGE_NO_PROC, "Mprobe gave no message");
    int c = -1;
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &c));
    CHECK(c == sz(0), "Mprobe: count %d, expected %d", c, sz(0));
    /* The matched message is gone: a plain probe now sees message 1. */
    MPI_CHECK(MPI_Probe(peer, T, MPI_COMM_WORLD, &pst));
    MPI_CHECK(MPI_Get_count(&pst, MPI_INT, &c));
    CHECK(c == sz(1), "Probe after Mprobe: count %d, expected %d (message 1)", c, sz(1));
    /* Message 1 by Improbe (wildcard source). */
    int flag = 0;
    while (!flag) MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, T, MPI_COMM_WORLD, &flag, &m1, &pst));
    CHECK(pst.MPI_SOURCE == peer, "Improbe source %d", pst.MPI_SOURCE);
    MPI_CHECK(MPI_Get_count(&pst, MPI_INT, &c));
    CHECK(c == sz(1), "Improbe: count %d, expected %d", c, sz(1));
    /* Receive them in the opposite order: Imrecv message 1, then Mrecv message 0. */
    MPI_Request r1;
    MPI_CHECK(MPI_Imrecv(rb[1], sz(1), MPI_INT, &m1, &r1));
    CHECK(m1 == MPI_MESSAGE_NULL, "Imrecv did not set the message to MPI_MESSAGE_NULL");
    MPI_CHECK(MPI_Mrecv(rb[0], sz(0), MPI_INT, &m0, &st));
    CHECK(m0 == MPI_MESSAGE_NULL, "Mrecv did not set the message to MPI_MESSAGE_NULL");
    check(rb[0], sz(0), peer, 0, &st, "Mrecv");
    MPI_CHECK(MPI_Wait(&r1, &st));
    check(rb[1], sz(1), peer, 1, &st, "Imrecv");
    /* Messages 2 and 3: Improbe + Mrecv, Mprobe + Imrecv. */
    flag = 0;
    while (!flag) MPI_CHECK(MPI_Improbe(peer, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &m0, &st));
    MPI_CHECK(MPI_Mrecv(rb[2], sz(2), MPI_INT, &m0, &st));
    check(rb[2], sz(2), peer, 2, &st, "Improbe+Mrecv");
    MPI_CHECK(MPI_Mprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &m0, &st));
    MPI_CHECK(MPI_Imrecv(rb[3], sz(3), MPI_INT, &m0, &r1));
    MPI_CHECK(MPI_Wait(&r1, &st));
    check(rb[3], sz(3), peer, 3, &st, "Mprobe+Imrecv");
    MPI_CHECK(MPI_Waitall(NM, sr, MPI_STATUSES_IGNORE));
    /* Nothing left to match. */
    MPI_CHECK(MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &m0, &st));
    CHECK(!flag, "Improbe matched a message after all were received (tag %d)", st.MPI_TAG);
    /* MPI_PROC_NULL */
    MPI_CHECK(MPI_Mprobe(MPI_PROC_NULL, T, MPI_COMM_WORLD, &m0, &st));
    CHECK(m0 == MPI_MESSAGE_NO_PROC, "Mprobe(MPI_PROC_NULL) did not give MPI_MESSAGE_NO_PROC");
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG,
          "Mprobe(MPI_PROC_NULL) status source %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
    int x = 3;
    MPI_CHECK(MPI_Mrecv(&x, 1, MPI_INT, &m0, &st));
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &c));
    CHECK(x == 3 && c == 0 && st.MPI_SOURCE == MPI_PROC_NULL,
          "Mrecv(MPI_MESSAGE_NO_PROC): x %d count %d source %d", x, c, st.MPI_SOURCE);
    flag = 0;
    MPI_CHECK(MPI_Improbe(MPI_PROC_NULL, T, MPI_COMM_WORLD, &flag, &m0, &st));
    CHECK(flag && m0 == MPI_MESSAGE_NO_PROC, "Improbe(MPI_PROC_NULL): flag %d", flag);
    MPI_CHECK(MPI_Imrecv(&x, 1, MPI_INT, &m0, &r1));
    MPI_CHECK(MPI_Wait(&r1, &st));
    CHECK(x == 3 && st.MPI_SOURCE == MPI_PROC_NULL, "Imrecv(MPI_MESSAGE_NO_PROC) changed data");
    for (int k = 0; k < NM; k++) {
        free(sb[k]);
        free(rb[k]);
    }
    t_finish("mprobe");
    return 0;
}
