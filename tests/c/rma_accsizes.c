/* np: 1 2 4 */
/* Accumulates of every size class, type and operation, racing, with exact results. Every
 * process (and, under MPI_THREAD_MULTIPLE, two threads of it) accumulates into every
 * process's window at once, in one lock_all epoch, ITERS rounds; then each target checks
 * its memory against what the contributions must give whatever their order. Regions: one
 * per (type, operation, element count), counts 1, 2, 3, 16, 17, 33 and 1024 (one element
 * and more, vector loop remainders, a long run); half of them start at an address not
 * aligned to the element. Types int8, short, int, long, unsigned, float, double; operations
 * SUM, PROD, MAX, MIN, BAND, BOR, BXOR and REPLACE (integers) or SUM, PROD, MAX, MIN and
 * REPLACE (floats); REPLACE regions must hold one writer's whole element. Besides, per
 * count, an int and a double ticket region take Get_accumulate SUM of 1 on every element
 * (each writer's old values must rise strictly, element by element) while Fetch_and_op adds
 * 1 to their first element (one element and many on the same element at once: the final
 * counts are exact); a Get_accumulate with MPI_NO_OP reads one region back. Both with
 * MPI_Win_allocate (memory every process of the host maps) and MPI_Win_create (reached by
 * messages the target serves). */
#include "common.h"
#include <pthread.h>
#include <stdint.h>

#define ITERS 5 /* odd: BXOR of a writer's bit ITERS times leaves it set */
#define NCOUNTS 7
static const int counts[NCOUNTS] = {1, 2, 3, 16, 17, 33, 1024};

enum { T_I8, T_SHORT, T_INT, T_LONG, T_UNSIGNED, T_FLOAT, T_DOUBLE, NTYPES };
static const char *tnames[NTYPES] = {"int8", "short", "int", "long", "unsigned", "float", "double"};
static MPI_Datatype tdt[NTYPES];
static const int tsize[NTYPES] = {1, 2, 4, 8, 4, 4, 8};
#define ISFLOAT(t) ((t) >= T_FLOAT)

#define NOPS 8
static const char *onames[NOPS] = {"SUM", "PROD", "MAX", "MIN", "BAND", "BOR", "BXOR", "REPLACE"};
static MPI_Op ops[NOPS];

typedef struct {
    int type, op, count;
    MPI_Aint off; /* byte offset in the window */
} Region;

#define MAXREG (NTYPES * NOPS * NCOUNTS + 2 * NCOUNTS)
static Region regs[MAXREG];
static int nregs, ticket0; /* ticket regions: [ticket0, nregs) */
static MPI_Aint winbytes;
static int nthreads = 1, writers;
static MPI_Win win;

/* Element i of a region as a long long / double (any alignment). */
static void store(int t, void *p, long long v, double d)
{
    switch (t) {
    case T_I8: { int8_t x = (int8_t)v; memcpy(p, &x, 1); break; }
    case T_SHORT: { short x = (short)v; memcpy(p, &x, sizeof x); break; }
    case T_INT: { int x = (int)v; memcpy(p, &x, sizeof x); break; }
    case T_LONG: { long x = (long)v; memcpy(p, &x, sizeof x); break; }
    case T_UNSIGNED: { unsigned x = (unsigned)v; memcpy(p, &x, sizeof x); break; }
    case T_FLOAT: { float x = (float)d; memcpy(p, &x, sizeof x); break; }
    default: memcpy(p, &d, sizeof d);
    }
}

static long long load_i(int t, const void *p)
{
    switch (t) {
    case T_I8: { int8_t x; memcpy(&x, p, 1); return x; }
    case T_SHORT: { short x; memcpy(&x, p, sizeof x); return x; }
    case T_INT: { int x; memcpy(&x, p, sizeof x); return x; }
    case T_LONG: { long x; memcpy(&x, p, sizeof x); return x; }
    default: { unsigned x; memcpy(&x, p, sizeof x); return x; }
    }
}

static double load_d(int t, const void *p)
{
    if (t == T_FLOAT) { float x; memcpy(&x, p, sizeof x); return x; }
    double x;
    memcpy(&x, p, sizeof x);
    return x;
}

/* What writer k (0..writers-1) contributes to element i in round it. */
static long long val(int op, int k, int it, int i)
{
    switch (op) {
    case 0: return i % 3 + 1;                                /* SUM */
    case 1: return 3;                                        /* PROD (integers) */
    case 2: case 3: return (k * 7 + it * 3 + i) % 97 + 1;    /* MAX, MIN */
    case 4: return ~(1LL << (k % 8));                        /* BAND */
    case 5: case 6: return 1LL << (k % 8);                   /* BOR, BXOR */
    default: return k + 1;                                   /* REPLACE */
    }
}

static double fval(int op, int k, int it, int i)
{
    if (op == 1) return (i % 2) + 1.0; /* PROD: powers of two stay exact */
    return (double)val(op, k, it, i);
}

/* The region's start value. */
static long long init_i(int op) { return op == 1 ? 1 : op == 3 ? 120 : op == 4 ? -1 : 0; }

/* A REPLACE element of writer k: every byte of it says k (a torn element would not). */
static long long replace_i(int t, int k)
{
    long long b = k + 1, v = 0;
    for (int j = 0; j < tsize[t]; j++) v |= b << (8 * j);
    return v;
}

static void layout(void)
{
    MPI_Aint off = 0;
    int n = 0;
    for (int t = 0; t < NTYPES; t++)
        for (int o = 0; o < NOPS; o++) {
            if (ISFLOAT(t) && o >= 4 && o <= 6) continue;
            for (int c = 0; c < NCOUNTS; c++) {
                /* Every other region aligned to its element. */
                if (n % 2 == 0) off = (off + tsize[t] - 1) / tsize[t] * tsize[t];
                regs[n] = (Region){t, o, counts[c], off};
                off += (MPI_Aint)counts[c] * tsize[t];
                n++;
            }
        }
    ticket0 = n;
    for (int c = 0; c < NCOUNTS; c++)
        for (int t = T_INT; t <= T_DOUBLE; t += T_DOUBLE - T_INT) {
            off = (off + 7) / 8 * 8;
            regs[n] = (Region){t, 0, counts[c], off};
            off += (MPI_Aint)counts[c] * tsize[t];
            n++;
        }
    nregs = n;
    winbytes = off;
}

static void fill_init(unsigned char *base)
{
    for (int r = 0; r < nregs; r++)
        for (int i = 0; i < regs[r].count; i++) {
            long long v = r >= ticket0 ? 0 : init_i(regs[r].op);
            store(regs[r].type, base + regs[r].off + (MPI_Aint)i * tsize[regs[r].type], v, (double)v);
        }
}

typedef struct {
    int k; /* writer id */
    unsigned char *buf; /* origin data, laid out like the window */
    unsigned char *old; /* Get_accumulate results, per target, the ticket regions */
    unsigned char *prev; /* the previous round's old values */
} Writer;

static void *run(void *arg)
{
    Writer *w = arg;
    MPI_Aint tb = winbytes - regs[ticket0].off;
    for (int it = 0; it < ITERS; it++) {
        for (int r = 0; r < ticket0; r++) {
            Region *g = &regs[r];
            for (int i = 0; i < g->count; i++) {
                unsigned char *p = w->buf + g->off + (MPI_Aint)i * tsize[g->type];
                long long v = g->op == 7 ? replace_i(g->type, w->k) : val(g->op, w->k, it, i);
                store(g->type, p, v, fval(g->op, w->k, it, i));
            }
        }
        for (int r = ticket0; r < nregs; r++)
            for (int i = 0; i < regs[r].count; i++)
                store(regs[r].type, w->buf + regs[r].off + (MPI_Aint)i * tsize[regs[r].type], 1, 1.0);
        for (int d = 0; d < t_size; d++) {
            int tg = (t_rank + d) % t_size;
            for (int r = 0; r < ticket0; r++) {
                Region *g = &regs[r];
                MPI_CHECK(MPI_Accumulate(w->buf + g->off, g->count, tdt[g->type], tg, g->off,
                                         g->count, tdt[g->type], ops[g->op], win));
            }
            unsigned char *old = w->old + (MPI_Aint)tg * tb;
            for (int r = ticket0; r < nregs; r++) {
                Region *g = &regs[r];
                MPI_Aint at = g->off - regs[ticket0].off;
                MPI_CHECK(MPI_Get_accumulate(w->buf + g->off, g->count, tdt[g->type], old + at,
                                             g->count, tdt[g->type], tg, g->off, g->count,
                                             tdt[g->type], MPI_SUM, win));
                if (g->type == T_INT) {
                    int one = 1, o;
                    MPI_CHECK(MPI_Fetch_and_op(&one, &o, MPI_INT, tg, g->off, MPI_SUM, win));
                    MPI_CHECK(MPI_Win_flush_local(tg, win));
                } else {
                    double one = 1, o;
                    MPI_CHECK(MPI_Fetch_and_op(&one, &o, MPI_DOUBLE, tg, g->off, MPI_SUM, win));
                    MPI_CHECK(MPI_Win_flush_local(tg, win));
                }
            }
        }
        MPI_CHECK(MPI_Win_flush_all(win));
        /* Old values rise strictly per element: each writer added 1 since it last read. */
        for (int tg = 0; tg < t_size; tg++)
            for (int r = ticket0; r < nregs; r++) {
                Region *g = &regs[r];
                MPI_Aint at = (MPI_Aint)tg * tb + g->off - regs[ticket0].off;
                for (int i = 0; i < g->count; i++) {
                    MPI_Aint e = at + (MPI_Aint)i * tsize[g->type];
                    double now = g->type == T_INT ? (double)load_i(g->type, w->old + e) : load_d(g->type, w->old + e);
                    double was = g->type == T_INT ? (double)load_i(g->type, w->prev + e) : load_d(g->type, w->prev + e);
                    CHECK(it == 0 ? now >= 0 : now > was,
                          "writer %d round %d target %d: %s ticket region of %d, element %d: old value %g after %g",
                          w->k, it, tg, tnames[g->type], g->count, i, now, was);
                }
            }
        memcpy(w->prev, w->old, (size_t)t_size * tb);
    }
    return NULL;
}

static void check(const unsigned char *base, const char *kind)
{
    for (int r = 0; r < nregs; r++) {
        Region *g = &regs[r];
        for (int i = 0; i < g->count; i++) {
            const unsigned char *p = base + g->off + (MPI_Aint)i * tsize[g->type];
            if (r >= ticket0) {
                /* Get_accumulate adds 1 to every element, Fetch_and_op 1 to the first. */
                double want = (double)ITERS * writers * (i == 0 ? 2 : 1);
                double got = g->type == T_INT ? (double)load_i(g->type, p) : load_d(g->type, p);
                CHECK(got == want, "%s: ticket %s region of %d, element %d: %g, want %g", kind,
                      tnames[g->type], g->count, i, got, want);
                continue;
            }
            if (g->op == 7) {
                long long got = load_i(g->type == T_DOUBLE ? T_LONG : g->type == T_FLOAT ? T_INT : g->type, p);
                int ok = 0;
                for (int k = 0; k < writers && !ok; k++) {
                    unsigned char e[8];
                    store(g->type, e, replace_i(g->type, k), (double)(k + 1));
                    ok = memcmp(e, p, (size_t)tsize[g->type]) == 0;
                }
                CHECK(ok, "%s: REPLACE %s region of %d, element %d: %llx is no writer's element", kind,
                      tnames[g->type], g->count, i, got);
                continue;
            }
            unsigned char want[8];
            if (ISFLOAT(g->type)) {
                double v = (double)init_i(g->op);
                for (int k = 0; k < writers; k++)
                    for (int it = 0; it < ITERS; it++) {
                        double x = fval(g->op, k, it, i);
                        v = g->op == 0 ? v + x : g->op == 1 ? v * x : g->op == 2 ? (x > v ? x : v) : (x < v ? x : v);
                    }
                store(g->type, want, 0, v);
            } else {
                /* Integer arithmetic wraps: compute in unsigned 64 bits, keep the low bytes;
                 * comparisons in the type's own range. */
                unsigned long long u = (unsigned long long)init_i(g->op);
                long long m = load_i(g->type, (store(g->type, want, init_i(g->op), 0), want));
                for (int k = 0; k < writers; k++)
                    for (int it = 0; it < ITERS; it++) {
                        long long x = val(g->op, k, it, i);
                        switch (g->op) {
                        case 0: u += (unsigned long long)x; break;
                        case 1: u *= (unsigned long long)x; break;
                        case 2: m = x > m ? x : m; break;
                        case 3: m = x < m ? x : m; break;
                        case 4: u &= (unsigned long long)x; break;
                        case 5: u |= (unsigned long long)x; break;
                        default: u ^= (unsigned long long)x;
                        }
                    }
                store(g->type, want, (g->op == 2 || g->op == 3) ? m : (long long)u, 0);
            }
            if (memcmp(want, p, (size_t)tsize[g->type]) != 0) {
                if (ISFLOAT(g->type))
                    FAIL("%s: %s %s region of %d, element %d: %g, want %g", kind, onames[g->op],
                         tnames[g->type], g->count, i, load_d(g->type, p), load_d(g->type, want));
                FAIL("%s: %s %s region of %d, element %d: %lld, want %lld", kind, onames[g->op],
                     tnames[g->type], g->count, i, load_i(g->type, p), load_i(g->type, want));
            }
        }
    }
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &t_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &t_size);
    tdt[T_I8] = MPI_INT8_T, tdt[T_SHORT] = MPI_SHORT, tdt[T_INT] = MPI_INT, tdt[T_LONG] = MPI_LONG;
    tdt[T_UNSIGNED] = MPI_UNSIGNED, tdt[T_FLOAT] = MPI_FLOAT, tdt[T_DOUBLE] = MPI_DOUBLE;
    MPI_Op all[NOPS] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_BAND, MPI_BOR, MPI_BXOR, MPI_REPLACE};
    memcpy(ops, all, sizeof all);
    if (provided == MPI_THREAD_MULTIPLE) nthreads = 2;
    writers = nthreads; /* per process; ids k = rank * nthreads + thread */
    layout();
    MPI_Aint tb = winbytes - regs[ticket0].off;
    for (int kind = 0; kind < 2; kind++) {
        unsigned char *base, *mem = NULL;
        if (kind == 0) {
            MPI_CHECK(MPI_Win_allocate(winbytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win));
        } else {
            mem = malloc((size_t)winbytes);
            base = mem;
            MPI_CHECK(MPI_Win_create(base, winbytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
        }
        MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t_rank, 0, win));
        fill_init(base);
        MPI_CHECK(MPI_Win_unlock(t_rank, win));
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        Writer w[2];
        pthread_t th[2];
        MPI_CHECK(MPI_Win_lock_all(0, win));
        for (int k = 0; k < nthreads; k++) {
            w[k].k = t_rank * nthreads + k;
            w[k].buf = calloc(1, (size_t)winbytes);
            w[k].old = calloc((size_t)t_size, (size_t)tb);
            w[k].prev = calloc((size_t)t_size, (size_t)tb);
            if (k > 0) CHECK(pthread_create(&th[k], NULL, run, &w[k]) == 0, "pthread_create");
        }
        run(&w[0]);
        for (int k = 1; k < nthreads; k++) pthread_join(th[k], NULL);
        MPI_CHECK(MPI_Win_unlock_all(win));
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        writers = nthreads * t_size;
        const char *kn = kind == 0 ? "Win_allocate" : "Win_create";
        /* MPI_NO_OP reads the next process's long SUM region of 1024 back. */
        int peer = (t_rank + 1) % t_size;
        for (int r = 0; r < ticket0; r++) {
            Region *g = &regs[r];
            if (g->type != T_LONG || g->op != 0 || g->count != 1024) continue;
            long got[1024];
            MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, peer, 0, win));
            MPI_CHECK(MPI_Get_accumulate(NULL, 0, MPI_LONG, got, 1024, MPI_LONG, peer, g->off, 1024,
                                         MPI_LONG, MPI_NO_OP, win));
            MPI_CHECK(MPI_Win_unlock(peer, win));
            for (int i = 0; i < 1024; i++)
                CHECK(got[i] == (long)writers * ITERS * (i % 3 + 1),
                      "%s: MPI_NO_OP read of %d's long SUM region, element %d: %ld, want %ld", kn,
                      peer, i, got[i], (long)writers * ITERS * (i % 3 + 1));
        }
        MPI_CHECK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t_rank, 0, win));
        check(base, kn);
        MPI_CHECK(MPI_Win_unlock(t_rank, win));
        writers = nthreads;
        for (int k = 0; k < nthreads; k++) free(w[k].buf), free(w[k].old), free(w[k].prev);
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        MPI_CHECK(MPI_Win_free(&win));
        free(mem);
    }
    if (t_rank == 0) printf("rma_accsizes: %d regions, %d writers per process, exact\n", nregs, nthreads);
    t_finish("rma_accsizes");
    return 0;
}
