/* np: 1 2 4 16 */
/* Communicators: Comm_dup, Comm_split (parity, reversed keys, MPI_UNDEFINED), Comm_compare
 * results, Comm_free; messages on one communicator never match receives on another, even
 * with equal source and tag and wildcards; repeated dup/free keeps working. */
#include "common.h"

static void expect_compare(MPI_Comm a, MPI_Comm b, int want, const char *what)
{
    int r = -1;
    MPI_CHECK(MPI_Comm_compare(a, b, &r));
    CHECK(r == want, "Comm_compare(%s) = %d, expected %d", what, r, want);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int peer = t_partner(), n = t_size, me = t_rank;
    MPI_Comm dup, dup2, par, rev, same, none;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    int r = -1, s = -1;
    MPI_CHECK(MPI_Comm_rank(dup, &r));
    MPI_CHECK(MPI_Comm_size(dup, &s));
    CHECK(r == me && s == n, "dup: rank %d size %d", r, s);
    expect_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, MPI_IDENT, "world, world");
    expect_compare(MPI_COMM_WORLD, dup, MPI_CONGRUENT, "world, dup");
    expect_compare(MPI_COMM_SELF, MPI_COMM_SELF, MPI_IDENT, "self, self");
    expect_compare(MPI_COMM_WORLD, MPI_COMM_SELF, n == 1 ? MPI_CONGRUENT : MPI_UNEQUAL,
                   "world, self");

    /* Isolation: dup message sent first, world message second; the world receive (with
     * wildcards) must get the world one. */
    int a = 100 + me, b = 200 + me, x = -1;
    MPI_Request rq[2];
    MPI_Status st;
    MPI_CHECK(MPI_Isend(&a, 1, MPI_INT, peer, 0, dup, &rq[0]));
    MPI_CHECK(MPI_Isend(&b, 1, MPI_INT, peer, 0, MPI_COMM_WORLD, &rq[1]));
    MPI_CHECK(MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
    CHECK(x == 200 + peer, "world receive got %d (the message sent on the dup?)", x);
    MPI_CHECK(MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, dup, &st));
    CHECK(x == 100 + peer && st.MPI_SOURCE == peer, "dup receive got %d from %d", x,
          st.MPI_SOURCE);
    MPI_CHECK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));

    /* Split by parity with reversed keys. */
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, me % 2, -me, &par));
    int hi = (n - 1) % 2 == me % 2 ? n - 1 : n - 2; /* highest rank of my parity */
    int psize = (n + 1 - me % 2) / 2;                /* ranks of my parity */
    int prank = (hi - me) / 2;                       /* reversed order */
    MPI_CHECK(MPI_Comm_rank(par, &r));
    MPI_CHECK(MPI_Comm_size(par, &s));
    CHECK(s == psize && r == prank, "parity split: rank %d size %d, expected %d %d", r, s,
          prank, psize);
    expect_compare(MPI_COMM_WORLD, par, n == 1 ? MPI_CONGRUENT : MPI_UNEQUAL, "world, parity");
    /* Ring inside the split communicator; the world rank travels as payload. */
    int to = (r + 1) % s, from = (r - 1 + s) % s, wr = -1;
    MPI_CHECK(MPI_Sendrecv(&me, 1, MPI_INT, to, 7, &wr, 1, MPI_INT, from, 7, par, &st));
    int want_world = hi - 2 * from;
    CHECK(st.MPI_SOURCE == from && wr == want_world, "parity ring: source %d world rank %d, "
          "expected %d %d", st.MPI_SOURCE, wr, from, want_world);
    MPI_Group wg, pg;
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    MPI_CHECK(MPI_Comm_group(par, &pg));
    int tr = -1;
    MPI_CHECK(MPI_Group_translate_ranks(pg, 1, &from, wg, &tr));
    CHECK(tr == wr, "Group_translate_ranks gave %d, the message says %d", tr, wr);
    MPI_CHECK(MPI_Group_free(&wg));
    MPI_CHECK(MPI_Group_free(&pg));

    /* One colour, reversed keys: same group, other order. */
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, 0, n - me, &rev));
    MPI_CHECK(MPI_Comm_rank(rev, &r));
    CHECK(r == n - 1 - me, "reversed split: rank %d, expected %d", r, n - 1 - me);
    expect_compare(MPI_COMM_WORLD, rev, n == 1 ? MPI_CONGRUENT : MPI_SIMILAR, "world, reversed");
    /* One colour, equal keys: old order kept. */
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, 3, 0, &same));
    MPI_CHECK(MPI_Comm_rank(same, &r));
    CHECK(r == me, "equal-key split: rank %d", r);
    expect_compare(MPI_COMM_WORLD, same, MPI_CONGRUENT, "world, equal-key split");
    /* MPI_UNDEFINED: rank 0 is left out. */
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, me == 0 ? MPI_UNDEFINED : 1, 0, &none));
    if (me == 0) {
        CHECK(none == MPI_COMM_NULL, "split with MPI_UNDEFINED did not give MPI_COMM_NULL");
    } else {
        MPI_CHECK(MPI_Comm_size(none, &s));
        MPI_CHECK(MPI_Comm_rank(none, &r));
        CHECK(s == n - 1 && r == me - 1, "split without rank 0: rank %d size %d", r, s);
        MPI_CHECK(MPI_Comm_free(&none));
    }

    /* Same source and tag on three communicators, received in the opposite order. */
    int v[3] = {me * 10 + 1, me * 10 + 2, me * 10 + 3}, got[3] = {-1, -1, -1};
    MPI_Comm cs[3] = {MPI_COMM_WORLD, dup, same};
    MPI_Request r3[3];
    for (int k = 0; k < 3; k++) MPI_CHECK(MPI_Isend(&v[k], 1, MPI_INT, peer, 5, cs[k], &r3[k]));
    for (int k = 2; k >= 0; k--)
        MPI_CHECK(MPI_Recv(&got[k], 1, MPI_INT, peer, 5, cs[k], MPI_STATUS_IGNORE));
    for (int k = 0; k < 3; k++)
        CHECK(got[k] == peer * 10 + k + 1, "communicator %d received %d", k, got[k]);
    MPI_CHECK(MPI_Waitall(3, r3, MPI_STATUSES_IGNORE));

    /* A dup of a dup outlives its parent. */
    MPI_CHECK(MPI_Comm_dup(dup, &dup2));
    expect_compare(dup, dup2, MPI_CONGRUENT, "dup, dup of dup");
    MPI_CHECK(MPI_Comm_free(&dup));
    CHECK(dup == MPI_COMM_NULL, "Comm_free did not set MPI_COMM_NULL");
    MPI_CHECK(MPI_Sendrecv(&a, 1, MPI_INT, peer, 1, &x, 1, MPI_INT, peer, 1, dup2, &st));
    CHECK(x == 100 + peer, "dup of freed dup: got %d", x);

    /* Many dup/free cycles: every new communicator is isolated from the last. */
    /* (Fewer when oversubscribed: each dup is a collective.) */
    int cycles = n > 4 ? 5 : 50;
    for (int i = 0; i < cycles; i++) {
        MPI_Comm c;
        MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
        int out = i * 1000 + me, in = -1;
        MPI_CHECK(MPI_Sendrecv(&out, 1, MPI_INT, peer, 0, &in, 1, MPI_INT, peer, 0, c, &st));
        CHECK(in == i * 1000 + peer, "dup cycle %d: got %d", i, in);
        MPI_CHECK(MPI_Comm_free(&c));
    }
    MPI_CHECK(MPI_Comm_free(&dup2));
    MPI_CHECK(MPI_Comm_free(&par));
    MPI_CHECK(MPI_Comm_free(&rev));
    MPI_CHECK(MPI_Comm_free(&same));
    t_finish("comms");
    return 0;
}
