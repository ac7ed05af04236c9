/* np: 1 2 3 4 16 */
/* Shared-memory collectives (coll/shm.rs), forced with FERRITE_COLL_*_ALGO=shm (other MPIs
 * ignore the knobs): Barrier, Bcast, Reduce, Allreduce and Allgather at several counts
 * (0 .. the slot size, and one above it, which falls back to the message algorithms on the
 * same communicator), datatypes (a non-contiguous vector for Bcast/Allgather), every
 * predefined operation, a non-commutative user operation (message algorithms), in place and
 * not, every root; many consecutive collectives on several communicators at once (world,
 * a dup, a split by parity, a subset in reverse order), interleaved with point-to-point:
 * a rendezvous-size message whose receiver is inside a Barrier when the sender waits for
 * it (a rank waiting in a shared-memory collective must still serve the transfer); no rank
 * leaving a Barrier before a late one entered. */
#include "common.h"
#include <time.h>

int FERRITE_Coll_reload_knobs(void) __attribute__((weak));

static int iv(int r, int i) { return (r * 7 + i * 3) % 11 - 3; }
static int pv(int r, int i) { return (r + i) % 4 == 0 ? 2 : 1; } /* products stay small */

/* The serial result of `op` over ranks 0..n-1 (world-independent: comm ranks). */
static long long red_int(MPI_Op op, int n, int i, int (*f)(int, int))
{
    long long a = f(0, i);
    for (int r = 1; r < n; r++) {
        long long b = f(r, i);
        if (op == MPI_SUM) a += b;
        else if (op == MPI_PROD) a *= b;
        else if (op == MPI_MAX) a = a > b ? a : b;
        else if (op == MPI_MIN) a = a < b ? a : b;
        else if (op == MPI_LAND) a = a && b;
        else if (op == MPI_LOR) a = a || b;
        else if (op == MPI_LXOR) a = !a != !b;
        else if (op == MPI_BAND) a &= b;
        else if (op == MPI_BOR) a |= b;
        else if (op == MPI_BXOR) a ^= b;
    }
    return a;
}

/* Non-commutative: composition of affine maps x -> a x + b (mod 2^32). */
static void compose(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    unsigned *u = in, *v = inout;
    for (int i = 0; i < *len; i++) {
        unsigned a = u[2 * i] * v[2 * i], b = u[2 * i] * v[2 * i + 1] + u[2 * i + 1];
        v[2 * i] = a;
        v[2 * i + 1] = b;
    }
}

static MPI_Op affine;

static void bcasts(MPI_Comm comm, int me, int n, int cnt)
{
    int *b = malloc(sizeof(int) * (cnt + 1) * 2);
    for (int root = 0; root < n; root++) {
        for (int i = 0; i < cnt; i++) b[i] = me == root ? iv(root, i) : -99;
        MPI_CHECK(MPI_Bcast(b, cnt, MPI_INT, root, comm));
        for (int i = 0; i < cnt; i++) CHECK(b[i] == iv(root, i), "bcast %d root %d [%d]", cnt, root, i);
    }
    /* Every other int: a vector type (packed into the slot, unpacked from it). */
    MPI_Datatype vec;
    MPI_CHECK(MPI_Type_vector(cnt, 1, 2, MPI_INT, &vec));
    MPI_CHECK(MPI_Type_commit(&vec));
    int root = n - 1;
    for (int i = 0; i < 2 * cnt; i++) b[i] = me == root ? iv(root, i) : -99;
    MPI_CHECK(MPI_Bcast(b, 1, vec, root, comm));
    for (int i = 0; i < 2 * cnt; i++)
        CHECK(b[i] == (i % 2 == 0 || me == root ? iv(root, i) : -99), "bcast vec %d [%d]", cnt, i);
    MPI_CHECK(MPI_Type_free(&vec));
    free(b);
}

static void int_reductions(MPI_Comm comm, int me, int n, int cnt, int root)
{
    MPI_Op ops[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_LAND, MPI_LOR,
                    MPI_LXOR, MPI_BAND, MPI_BOR, MPI_BXOR};
    int *s = malloc(sizeof(int) * (cnt + 1)), *r = malloc(sizeof(int) * (cnt + 1));
    /* Debian's MPICH 4.0 crashes on in-place Reduces of 1000s of ints at a nonzero root (see
     * coll_basic.c): larger ones are in place at root 0 only. */
    int rip = root == 0 || cnt <= 64;
    for (unsigned k = 0; k < sizeof ops / sizeof *ops; k++) {
        int (*f)(int, int) = ops[k] == MPI_PROD ? pv : iv;
        for (int inplace = 0; inplace < 2; inplace++) {
            for (int i = 0; i < cnt; i++) s[i] = r[i] = f(me, i);
            MPI_CHECK(MPI_Allreduce(inplace ? MPI_IN_PLACE : s, r, cnt, MPI_INT, ops[k], comm));
            for (int i = 0; i < cnt; i++)
                CHECK(r[i] == red_int(ops[k], n, i, f), "allreduce op %u count %d in place %d [%d]: %d",
                      k, cnt, inplace, i, r[i]);
            for (int i = 0; i < cnt; i++) r[i] = me == root && inplace && rip ? f(me, i) : -77;
            MPI_CHECK(MPI_Reduce(inplace && rip && me == root ? MPI_IN_PLACE : s, r, cnt, MPI_INT, ops[k],
                                 root, comm));
            for (int i = 0; i < cnt; i++)
                CHECK(me == root ? r[i] == red_int(ops[k], n, i, f) : r[i] == -77,
                      "reduce op %u count %d root %d [%d]: %d", k, cnt, root, i, r[i]);
        }
    }
    free(s);
    free(r);
}

static void other_reductions(MPI_Comm comm, int me, int n, int cnt)
{
    /* double and float: SUM, MAX; long long: SUM; unsigned short: BOR; MINLOC on 2INT. */
    double *d = malloc(sizeof(double) * (cnt + 1)), *dr = malloc(sizeof(double) * (cnt + 1));
    for (int i = 0; i < cnt; i++) d[i] = iv(me, i) * 0.5;
    MPI_CHECK(MPI_Allreduce(d, dr, cnt, MPI_DOUBLE, MPI_SUM, comm));
    for (int i = 0; i < cnt; i++) CHECK(dr[i] == red_int(MPI_SUM, n, i, iv) * 0.5, "double sum [%d]", i);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, d, cnt, MPI_DOUBLE, MPI_MAX, comm));
    for (int i = 0; i < cnt; i++) CHECK(d[i] == red_int(MPI_MAX, n, i, iv) * 0.5, "double max [%d]", i);
    float *f = (float *)d, *fr = (float *)dr;
    for (int i = 0; i < cnt; i++) f[i] = (float)iv(me, i);
    MPI_CHECK(MPI_Allreduce(f, fr, cnt, MPI_FLOAT, MPI_MIN, comm));
    for (int i = 0; i < cnt; i++) CHECK(fr[i] == (float)red_int(MPI_MIN, n, i, iv), "float min [%d]", i);
    long long *l = (long long *)d, *lr = (long long *)dr;
    for (int i = 0; i < cnt; i++) l[i] = (long long)iv(me, i) << 33;
    MPI_CHECK(MPI_Allreduce(l, lr, cnt, MPI_LONG_LONG, MPI_SUM, comm));
    for (int i = 0; i < cnt; i++) CHECK(lr[i] == red_int(MPI_SUM, n, i, iv) << 33, "long long sum [%d]", i);
    unsigned short *u = (unsigned short *)d, *ur = (unsigned short *)dr;
    for (int i = 0; i < cnt; i++) u[i] = (unsigned short)(1u << ((me + i) % 16));
    MPI_CHECK(MPI_Allreduce(u, ur, cnt, MPI_UNSIGNED_SHORT, MPI_BOR, comm));
    for (int i = 0; i < cnt; i++) {
        unsigned e = 0;
        for (int q = 0; q < n; q++) e |= 1u << ((q + i) % 16);
        CHECK(ur[i] == (unsigned short)e, "ushort bor [%d]", i);
    }
    int *p = (int *)d, *pr = (int *)dr; /* (value, index) pairs */
    int pc = cnt / 2;
    for (int i = 0; i < pc; i++) {
        p[2 * i] = iv(me, i);
        p[2 * i + 1] = me;
    }
    MPI_CHECK(MPI_Allreduce(p, pr, pc, MPI_2INT, MPI_MINLOC, comm));
    for (int i = 0; i < pc; i++) {
        int best = 0;
        for (int q = 1; q < n; q++)
            if (iv(q, i) < iv(best, i)) best = q;
        CHECK(pr[2 * i] == iv(best, i) && pr[2 * i + 1] == best, "minloc [%d]", i);
    }
    /* A non-commutative user operation (runs the message algorithms, in rank order). */
    unsigned *a = (unsigned *)d, *ar = (unsigned *)dr;
    for (int i = 0; i < pc; i++) {
        a[2 * i] = (unsigned)(2 * me + 3 + i);
        a[2 * i + 1] = (unsigned)(me + 1);
    }
    MPI_CHECK(MPI_Allreduce(a, ar, pc, MPI_2INT, affine, comm));
    for (int i = 0; i < pc; i++) {
        unsigned ea = (unsigned)(2 * (n - 1) + 3 + i), eb = (unsigned)n;
        for (int q = n - 2; q >= 0; q--) {
            unsigned qa = (unsigned)(2 * q + 3 + i), qb = (unsigned)(q + 1);
            eb = qa * eb + qb;
            ea = qa * ea;
        }
        CHECK(ar[2 * i] == ea && ar[2 * i + 1] == eb, "user op [%d]", i);
    }
    free(d);
    free(dr);
}

static void allgathers(MPI_Comm comm, int me, int n, int cnt)
{
    int *s = malloc(sizeof(int) * (cnt + 1)), *r = malloc(sizeof(int) * (size_t)(cnt + 1) * n * 2);
    for (int inplace = 0; inplace < 2; inplace++) {
        for (int i = 0; i < cnt; i++) s[i] = iv(me, i);
        for (int i = 0; i < cnt * n; i++) r[i] = inplace && i / cnt == me ? s[i % cnt] : -5;
        MPI_CHECK(MPI_Allgather(inplace ? MPI_IN_PLACE : s, cnt, MPI_INT, r, cnt, MPI_INT, comm));
        for (int i = 0; i < cnt * n; i++)
            CHECK(r[i] == iv(i / cnt, i % cnt), "allgather %d in place %d [%d]", cnt, inplace, i);
    }
    /* Received as a vector type (every other int), sent as bytes. */
    MPI_Datatype vec, rvec;
    MPI_CHECK(MPI_Type_vector(cnt, 1, 2, MPI_INT, &vec));
    MPI_CHECK(MPI_Type_create_resized(vec, 0, (MPI_Aint)sizeof(int) * 2 * cnt, &rvec));
    MPI_CHECK(MPI_Type_commit(&rvec));
    for (int i = 0; i < 2 * cnt * n; i++) r[i] = -5;
    MPI_CHECK(MPI_Allgather(s, cnt * (int)sizeof(int), MPI_BYTE, r, 1, rvec, comm));
    for (int i = 0; i < 2 * cnt * n; i++) {
        int q = i / (2 * cnt), k = i % (2 * cnt);
        CHECK(r[i] == (k % 2 ? -5 : iv(q, k / 2)), "allgather vec %d [%d]", cnt, i);
    }
    MPI_CHECK(MPI_Type_free(&rvec));
    MPI_CHECK(MPI_Type_free(&vec));
    free(s);
    free(r);
}

/* Rank 1 sends a rendezvous-size message to rank 0 and waits for it before the Barrier;
 * rank 0 posted the receive and waits in the Barrier: it must serve the transfer there. */
static void p2p_in_barrier(MPI_Comm comm, int me, int n)
{
    enum { BIG = 1 << 20 };
    char *m = NULL;
    MPI_Request rq = MPI_REQUEST_NULL;
    if (n >= 2 && me <= 1) m = malloc(BIG);
    if (n >= 2 && me == 0) MPI_CHECK(MPI_Irecv(m, BIG, MPI_CHAR, 1, 42, comm, &rq));
    if (n >= 2 && me == 1) {
        for (int i = 0; i < BIG; i++) m[i] = (char)(i * 7);
        MPI_CHECK(MPI_Send(m, BIG, MPI_CHAR, 0, 42, comm));
    }
    MPI_CHECK(MPI_Barrier(comm));
    if (n >= 2 && me == 0) {
        MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        for (int i = 0; i < BIG; i++) CHECK(m[i] == (char)(i * 7), "p2p [%d]", i);
    }
    free(m);
}

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* No rank leaves a Barrier before the last one entered: a late rank (rank 0, the middle
 * one, the last: both the rank that gathers and ones it releases, in either Barrier form)
 * enters 1 ms after the others and says when; every rank's exit must come after
 * (CLOCK_MONOTONIC is one clock for every process on the host). */
static void barrier_order(MPI_Comm comm, int me, int n)
{
    int lates[] = {0, n / 2, n - 1};
    for (int l = 0; l < 3; l++) {
        int late = lates[l];
        long long entered = 0;
        if (me == late) {
            usleep(1000);
            entered = now_ns();
        }
        MPI_CHECK(MPI_Barrier(comm));
        long long left = now_ns();
        MPI_CHECK(MPI_Bcast(&entered, 1, MPI_LONG_LONG, late, comm));
        CHECK(left >= entered, "barrier left %lld ns before rank %d entered", entered - left,
              late);
    }
}

int main(int argc, char **argv)
{
    const char *knobs[] = {"FERRITE_COLL_BARRIER_ALGO", "FERRITE_COLL_BCAST_ALGO",
                           "FERRITE_COLL_REDUCE_ALGO", "FERRITE_COLL_ALLREDUCE_ALGO",
                           "FERRITE_COLL_ALLGATHER_ALGO"};
    for (unsigned k = 0; k < sizeof knobs / sizeof *knobs; k++) setenv(knobs[k], "shm", 1);
    setenv("FERRITE_COLL_SHM_MAX", "4096", 1);
    t_init(&argc, &argv);
    if (FERRITE_Coll_reload_knobs) MPI_CHECK(FERRITE_Coll_reload_knobs());
    MPI_CHECK(MPI_Op_create(compose, 0, &affine));
    MPI_Comm comms[4];
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comms[0]));
    comms[1] = MPI_COMM_WORLD;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, t_rank, &comms[2]));
    /* A subset (about two thirds) in reverse order; the rest get MPI_COMM_NULL. */
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, t_rank < (2 * t_size + 2) / 3 ? 0 : MPI_UNDEFINED,
                             -t_rank, &comms[3]));
    /* 0 .. the slot (1024 ints = 4096 bytes), then one above it (message algorithms). */
    int counts[] = {0, 1, 3, 64, 1024, 1025};
    for (int round = 0; round < 2; round++) {
        for (unsigned ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
            for (int c = 0; c < 4; c++) {
                MPI_Comm comm = comms[(c + ci + round) % 4];
                if (comm == MPI_COMM_NULL) continue;
                int me, n;
                MPI_CHECK(MPI_Comm_rank(comm, &me));
                MPI_CHECK(MPI_Comm_size(comm, &n));
                int cnt = counts[ci];
                MPI_CHECK(MPI_Barrier(comm));
                bcasts(comm, me, n, cnt);
                int_reductions(comm, me, n, cnt, (int)(ci + c) % n);
                other_reductions(comm, me, n, cnt);
                allgathers(comm, me, n, cnt);
                if (ci == 2) p2p_in_barrier(comm, me, n);
                if (ci == 3) barrier_order(comm, me, n);
            }
        }
    }
    /* Many consecutive small collectives with alternating roots (sequence numbers, buffer
     * reuse across rooted and all-to-all collectives). */
    for (int i = 0; i < 3000; i++) {
        MPI_Comm comm = comms[i % 2 ? 0 : 2];
        int me, n, x, y;
        MPI_CHECK(MPI_Comm_rank(comm, &me));
        MPI_CHECK(MPI_Comm_size(comm, &n));
        x = i * 10 + me;
        switch (i % 4) {
        case 0:
            MPI_CHECK(MPI_Bcast(&x, 1, MPI_INT, i % n, comm));
            CHECK(x == i * 10 + i % n, "loop bcast %d", i);
            break;
        case 1:
            MPI_CHECK(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, comm));
            CHECK(y == i * 10 * n + n * (n - 1) / 2, "loop allreduce %d", i);
            break;
        case 2:
            y = -1;
            MPI_CHECK(MPI_Reduce(&x, &y, 1, MPI_INT, MPI_MAX, i % n, comm));
            CHECK(me == i % n ? y == i * 10 + n - 1 : y == -1, "loop reduce %d", i);
            break;
        default:
            MPI_CHECK(MPI_Barrier(comm));
        }
    }
    MPI_CHECK(MPI_Comm_free(&comms[0]));
    MPI_CHECK(MPI_Comm_free(&comms[2]));
    if (comms[3] != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&comms[3]));
    MPI_CHECK(MPI_Op_free(&affine));
    t_finish("coll_shm");
    return 0;
}
