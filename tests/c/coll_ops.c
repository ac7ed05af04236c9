/* np: 1 2 3 4 5 8 16 */
/* Reduction operations: every predefined op on every type it applies to, long double
 * included (Allreduce against
 * a serial computation, and Reduce_local); MINLOC/MAXLOC on the pair types; user ops,
 * commutative and not (affine-map composition: a wrong order changes the result), on a
 * contiguous and a non-contiguous derived type, in Allreduce/Reduce/Scan/Exscan/
 * Reduce_scatter_block, blocking and nonblocking; the user function calls MPI itself (it
 * must run without the library's lock held); Op_commutative, Op_free. */
#include "common.h"

/* Ferrite reads its FERRITE_COLL_* knobs once; this makes it read them again (weak: absent
 * from other MPIs, which ignore the knobs). */
int FERRITE_Coll_reload_knobs(void) __attribute__((weak));
static void set_knob(const char *knob, const char *v)
{
    if (v) setenv(knob, v, 1);
    else unsetenv(knob);
    if (FERRITE_Coll_reload_knobs) MPI_CHECK(FERRITE_Coll_reload_knobs());
}
#include <complex.h>
#include <stdbool.h>
#include <stdint.h>

static int me, np;
#define N 5

/* Element i of rank r for op o: small values so every result is exact. */
static int gen(int o, int r, int i)
{
    if (o == 3) return (r + i) % 4 == 0 ? 2 : ((r + i) % 3 == 0 ? -1 : 1); /* PROD */
    if (o >= 4) return ((r * 5 + i * 3) >> (i % 3)) & 1 ? (r * 7 + i) % 256 : 0; /* logic, bits */
    /* Non-negative: Debian's MPICH 4.0 computes MAX on MPI_UNSIGNED_CHAR as if signed. */
    return (r * 7 + i * 3) % 13 + r;
}

static const MPI_Op ops[] = {MPI_MAX, MPI_MIN, MPI_SUM, MPI_PROD, MPI_LAND,
                             MPI_BAND, MPI_LOR, MPI_BOR, MPI_LXOR, MPI_BXOR};
static const char *opname[] = {"MAX", "MIN", "SUM", "PROD", "LAND",
                               "BAND", "LOR", "BOR", "LXOR", "BXOR"};

#define COMBINE(o, a, b)                                                                      \
    ((o) == 0   ? ((a) > (b) ? (a) : (b))                                                     \
     : (o) == 1 ? ((a) < (b) ? (a) : (b))                                                     \
     : (o) == 2 ? (a) + (b)                                                                   \
     : (o) == 3 ? (a) * (b)                                                                   \
     : (o) == 4 ? ((a) && (b))                                                                \
     : (o) == 6 ? ((a) || (b))                                                                \
     : (o) == 8 ? (!(a) != !(b))                                                              \
                : 0)
#define BITS(o, a, b) ((o) == 5 ? ((a) & (b)) : (o) == 7 ? ((a) | (b)) : ((a) ^ (b)))

/* Checks op `o` on type T (MPI type MT) with Allreduce and Reduce_local. */
#define CHECK_TYPE(T, MT, o)                                                                  \
    do {                                                                                      \
        T s[N], r[N], e[N], a[N];                                                             \
        for (int i = 0; i < N; i++) s[i] = (T)gen(o, me, i);                                  \
        MPI_CHECK(MPI_Allreduce(s, r, N, MT, ops[o], MPI_COMM_WORLD));                        \
        for (int i = 0; i < N; i++) {                                                         \
            e[i] = (T)gen(o, 0, i);                                                           \
            for (int k = 1; k < np; k++) {                                                    \
                T v = (T)gen(o, k, i);                                                        \
                if (o == 5 || o == 7 || o == 9)                                               \
                    e[i] = (T)BITS(o, (long long)e[i], (long long)v);                         \
                else                                                                          \
                    e[i] = (T)COMBINE(o, e[i], v);                                            \
            }                                                                                 \
            CHECK(r[i] == e[i], "%s on %s [%d]: got %g want %g", opname[o], #MT, i,           \
                  (double)r[i], (double)e[i]);                                                \
            a[i] = (T)gen(o, 1, i);                                                           \
            s[i] = (T)gen(o, 0, i);                                                           \
        }                                                                                     \
        MPI_CHECK(MPI_Reduce_local(s, a, N, MT, ops[o]));                                     \
        for (int i = 0; i < N; i++) {                                                         \
            T v0 = (T)gen(o, 0, i), v1 = (T)gen(o, 1, i), w;                                  \
            if (o == 5 || o == 7 || o == 9)                                                   \
                w = (T)BITS(o, (long long)v0, (long long)v1);                                 \
            else                                                                              \
                w = (T)COMBINE(o, v0, v1);                                                    \
            CHECK(a[i] == w, "Reduce_local %s on %s [%d]", opname[o], #MT, i);                \
        }                                                                                     \
    } while (0)

#define INT_TYPE(T, MT)                                                                       \
    for (int o = 0; o < 10; o++) CHECK_TYPE(T, MT, o)
#define FLOAT_TYPE(T, MT)                                                                     \
    for (int o = 0; o < 4; o++) CHECK_TYPE(T, MT, o)
/* C floating types: arithmetic, and on Ferrite the logical ops MPICH allows on them beyond
 * the standard (its test suite's oplxor/opland/oplor check them; Debian's MPICH 4.0 asserts
 * in MPI_Reduce_local on some of them, so they are not checked there). */
static int logic_on_floats;
#define C_FLOAT_TYPE(T, MT)                                                                   \
    for (int o = 0; o <= 8; o++)                                                              \
        if (o < 4 || (o % 2 == 0 && logic_on_floats)) CHECK_TYPE(T, MT, o)
#define LOGIC_TYPE(T, MT)                                                                     \
    for (int o = 4; o <= 8; o += 2) CHECK_TYPE(T, MT, o)

static void predefined(void)
{
    logic_on_floats = t_is_ferrite();
    INT_TYPE(signed char, MPI_SIGNED_CHAR);
    INT_TYPE(unsigned char, MPI_UNSIGNED_CHAR);
    INT_TYPE(short, MPI_SHORT);
    INT_TYPE(unsigned short, MPI_UNSIGNED_SHORT);
    INT_TYPE(int, MPI_INT);
    INT_TYPE(unsigned, MPI_UNSIGNED);
    INT_TYPE(long, MPI_LONG);
    INT_TYPE(unsigned long, MPI_UNSIGNED_LONG);
    INT_TYPE(long long, MPI_LONG_LONG);
    INT_TYPE(unsigned long long, MPI_UNSIGNED_LONG_LONG);
    INT_TYPE(int8_t, MPI_INT8_T);
    INT_TYPE(int16_t, MPI_INT16_T);
    INT_TYPE(int32_t, MPI_INT32_T);
    INT_TYPE(int64_t, MPI_INT64_T);
    INT_TYPE(uint8_t, MPI_UINT8_T);
    INT_TYPE(uint16_t, MPI_UINT16_T);
    INT_TYPE(uint32_t, MPI_UINT32_T);
    INT_TYPE(uint64_t, MPI_UINT64_T);
    INT_TYPE(MPI_Aint, MPI_AINT);
    INT_TYPE(MPI_Offset, MPI_OFFSET);
    INT_TYPE(MPI_Count, MPI_COUNT);
    /* Fortran types through their C equivalents (INTEGER, REAL, DOUBLE PRECISION, LOGICAL) */
    INT_TYPE(int, MPI_INTEGER);
    FLOAT_TYPE(float, MPI_REAL);
    FLOAT_TYPE(double, MPI_DOUBLE_PRECISION);
    LOGIC_TYPE(int, MPI_LOGICAL);
    C_FLOAT_TYPE(float, MPI_FLOAT);
    C_FLOAT_TYPE(long double, MPI_LONG_DOUBLE);
    C_FLOAT_TYPE(double, MPI_DOUBLE);
    LOGIC_TYPE(bool, MPI_C_BOOL);
    for (int o = 5; o <= 9; o += 2) CHECK_TYPE(unsigned char, MPI_BYTE, o);

    /* complex: SUM and PROD */
    double complex s[N], r[N];
    for (int o = 2; o <= 3; o++) {
        for (int i = 0; i < N; i++) s[i] = gen(o, me, i) + I * (o == 3 ? 0 : me - i);
        MPI_CHECK(MPI_Allreduce(s, r, N, MPI_C_DOUBLE_COMPLEX, ops[o], MPI_COMM_WORLD));
        for (int i = 0; i < N; i++) {
            double complex e = gen(o, 0, i) + I * (o == 3 ? 0 : 0 - i);
            for (int k = 1; k < np; k++) {
                double complex v = gen(o, k, i) + I * (o == 3 ? 0 : k - i);
                e = o == 2 ? e + v : e * v;
            }
            CHECK(r[i] == e, "%s on complex [%d]", opname[o], i);
        }
    }
    long double complex ls_[N], lr_[N];
    for (int i = 0; i < N; i++) ls_[i] = (long double)me / 3 + I * (long double)i;
    MPI_CHECK(MPI_Allreduce(ls_, lr_, N, MPI_C_LONG_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) {
        long double complex e = 0;
        for (int k = 0; k < np; k++) e += (long double)k / 3 + I * (long double)i;
        long double dr = __real__(lr_[i] - e), di = __imag__(lr_[i] - e);
        CHECK(dr < 1e-15L && dr > -1e-15L && di < 1e-15L && di > -1e-15L,
              "long double complex sum [%d]", i);
    }
    /* long double keeps more precision than double: 1 + 2^-60 summed */
    long double tiny = me == 0 ? 1.0L : 0x1p-60L, tsum;
    MPI_CHECK(MPI_Allreduce(&tiny, &tsum, 1, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    CHECK(tsum == 1.0L + (np - 1) * 0x1p-60L, "long double sum lost precision");
    float complex fs[N], fr[N];
    for (int i = 0; i < N; i++) fs[i] = (float)me + I * (float)i;
    MPI_CHECK(MPI_Allreduce(fs, fr, N, MPI_C_FLOAT_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++)
        CHECK(fr[i] == (float)(np * (np - 1) / 2) + I * (float)(i * np), "float complex sum");

    /* MINLOC / MAXLOC: ties go to the smaller index */
    struct {
        double v;
        int i;
    } ds[N], dr[N];
    struct {
        int v;
        int i;
    } is[N], ir[N];
    struct {
        long v;
        int i;
    } ls[N], lr[N];
    struct {
        short v;
        int i;
    } ss[N], sr[N];
    for (int o = 0; o < 2; o++) {
        MPI_Op op = o ? MPI_MAXLOC : MPI_MINLOC;
        for (int i = 0; i < N; i++) {
            ds[i].v = (me * 3 + i) % 4;
            ds[i].i = me;
            is[i].v = (me * 5 + i) % 3;
            is[i].i = me;
            ls[i].v = (me * 5 + i) % 3;
            ls[i].i = me;
            ss[i].v = (short)((me * 5 + i) % 3);
            ss[i].i = me;
        }
        MPI_CHECK(MPI_Allreduce(ls, lr, N, MPI_LONG_INT, op, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Allreduce(ss, sr, N, MPI_SHORT_INT, op, MPI_COMM_WORLD));
        struct {
            long double v;
            int i;
        } lds[N], ldr[N];
        for (int i = 0; i < N; i++) lds[i].v = (me * 5 + i) % 3, lds[i].i = me;
        MPI_CHECK(MPI_Allreduce(lds, ldr, N, MPI_LONG_DOUBLE_INT, op, MPI_COMM_WORLD));
        for (int i = 0; i < N; i++) {
            int cv = 0, ci = -1;
            for (int k = 0; k < np; k++) {
                int w = (k * 5 + i) % 3;
                if (ci < 0 || (o ? w > cv : w < cv)) cv = w, ci = k;
            }
            CHECK(ldr[i].v == cv && ldr[i].i == ci, "%s long_double_int [%d]",
                  o ? "MAXLOC" : "MINLOC", i);
        }
        MPI_CHECK(MPI_Allreduce(ds, dr, N, MPI_DOUBLE_INT, op, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Allreduce(is, ir, N, MPI_2INT, op, MPI_COMM_WORLD));
        for (int i = 0; i < N; i++) {
            double bv = 0;
            int bi = -1, cv = 0, ci = -1;
            for (int k = 0; k < np; k++) {
                double v = (k * 3 + i) % 4;
                int w = (k * 5 + i) % 3;
                if (bi < 0 || (o ? v > bv : v < bv)) bv = v, bi = k;
                if (ci < 0 || (o ? w > cv : w < cv)) cv = w, ci = k;
            }
            CHECK(dr[i].v == bv && dr[i].i == bi, "%s double_int [%d]: (%g,%d) want (%g,%d)",
                  o ? "MAXLOC" : "MINLOC", i, dr[i].v, dr[i].i, bv, bi);
            CHECK(ir[i].v == cv && ir[i].i == ci, "%s 2int [%d]", o ? "MAXLOC" : "MINLOC", i);
            CHECK(lr[i].v == cv && lr[i].i == ci, "%s long_int [%d]", o ? "MAXLOC" : "MINLOC", i);
            CHECK(sr[i].v == cv && sr[i].i == ci, "%s short_int [%d]", o ? "MAXLOC" : "MINLOC",
                  i);
        }
    }
}

/* Affine maps x -> m*x + c; a op b = b after a (associative, not commutative). */
typedef struct {
    long m, c;
} aff;

static MPI_Datatype aff_type;
static int user_calls;

static void compose(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    int sz = 0;
    /* Calls MPI: deadlocks if the library holds its lock while user code runs. */
    MPI_Type_size(*dt, &sz);
    if (sz != (int)sizeof(aff)) FAIL("user op got a datatype of size %d", sz);
    aff *a = in, *b = inout;
    for (int i = 0; i < *len; i++) {
        aff r = {b[i].m * a[i].m, b[i].m * a[i].c + b[i].c};
        b[i] = r;
    }
    user_calls++;
}

static aff aff_of(int r, int i) { return (aff){r % 3 + 2, r * 5 + i}; }

static aff fold(int lo, int hi, int i)
{
    aff e = {1, 0};
    for (int r = lo; r < hi; r++) {
        aff v = aff_of(r, i);
        e = (aff){v.m * e.m, v.m * e.c + v.c};
    }
    return e;
}

static void same(aff got, aff want, const char *what, int i)
{
    CHECK(got.m == want.m && got.c == want.c, "%s [%d]: (%ld,%ld) want (%ld,%ld)", what, i,
          got.m, got.c, want.m, want.c);
}

static void user_ops(int nonblocking)
{
    MPI_Op op;
    MPI_CHECK(MPI_Op_create(compose, 0, &op));
    int commute = -1;
    MPI_CHECK(MPI_Op_commutative(op, &commute));
    CHECK(commute == 0, "Op_commutative says %d for a non-commutative op", commute);
    MPI_CHECK(MPI_Op_commutative(MPI_SUM, &commute));
    CHECK(commute == 1, "MPI_SUM is commutative");
    int counts[] = {1, 3, 300};
    for (int z = 0; z < 3; z++) {
        int n = counts[z];
        aff *s = malloc(sizeof(aff) * n * np), *r = malloc(sizeof(aff) * n * np);
        MPI_Request rq;
        for (int i = 0; i < n; i++) s[i] = aff_of(me, i);
#define RUN(blocking_call, nb_call)                                                           \
    do {                                                                                      \
        if (nonblocking) {                                                                    \
            MPI_CHECK(nb_call);                                                               \
            MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));                                      \
        } else {                                                                              \
            MPI_CHECK(blocking_call);                                                         \
        }                                                                                     \
    } while (0)
        RUN(MPI_Allreduce(s, r, n, aff_type, op, MPI_COMM_WORLD),
            MPI_Iallreduce(s, r, n, aff_type, op, MPI_COMM_WORLD, &rq));
        for (int i = 0; i < n; i++) same(r[i], fold(0, np, i), "allreduce user op", i);
        /* Ferrite: both Reduce algorithms */
        for (int alg = 0; alg < 2; alg++) {
            set_knob("FERRITE_COLL_REDUCE_ALGO", alg ? "rabenseifner" : "binomial");
            for (int root = 0; root < np; root += np - 1 > 0 ? np - 1 : 1) {
                RUN(MPI_Reduce(s, r, n, aff_type, op, root, MPI_COMM_WORLD),
                    MPI_Ireduce(s, r, n, aff_type, op, root, MPI_COMM_WORLD, &rq));
                if (me == root)
                    for (int i = 0; i < n; i++) same(r[i], fold(0, np, i), "reduce user op", i);
            }
        }
        set_knob("FERRITE_COLL_REDUCE_ALGO", NULL);
        RUN(MPI_Scan(s, r, n, aff_type, op, MPI_COMM_WORLD),
            MPI_Iscan(s, r, n, aff_type, op, MPI_COMM_WORLD, &rq));
        for (int i = 0; i < n; i++) same(r[i], fold(0, me + 1, i), "scan user op", i);
        RUN(MPI_Exscan(s, r, n, aff_type, op, MPI_COMM_WORLD),
            MPI_Iexscan(s, r, n, aff_type, op, MPI_COMM_WORLD, &rq));
        if (me > 0)
            for (int i = 0; i < n; i++) same(r[i], fold(0, me, i), "exscan user op", i);
        for (int i = 0; i < n * np; i++) s[i] = aff_of(me, i);
        RUN(MPI_Reduce_scatter_block(s, r, n, aff_type, op, MPI_COMM_WORLD),
            MPI_Ireduce_scatter_block(s, r, n, aff_type, op, MPI_COMM_WORLD, &rq));
        for (int i = 0; i < n; i++)
            same(r[i], fold(0, np, me * n + i), "reduce_scatter_block user op", i);
        free(s);
        free(r);
    }
    MPI_CHECK(MPI_Op_free(&op));
    CHECK(op == MPI_OP_NULL, "Op_free did not set MPI_OP_NULL");
}

/* Sum on the vector type {long, gap, long} (extent 3 longs): the gaps stay untouched. */
static void vsum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    long *a = in, *b = inout;
    for (int i = 0; i < *len; i++) {
        b[3 * i] += a[3 * i];
        b[3 * i + 2] += a[3 * i + 2];
    }
}

static void noncontig_user_op(void)
{
    MPI_Datatype vec;
    MPI_CHECK(MPI_Type_vector(2, 1, 2, MPI_LONG, &vec));
    MPI_CHECK(MPI_Type_commit(&vec));
    MPI_Op op;
    MPI_CHECK(MPI_Op_create(vsum, 1, &op));
    long s[12], r[12];
    for (int i = 0; i < 12; i++) s[i] = me * 100 + i, r[i] = -5;
    MPI_CHECK(MPI_Allreduce(s, r, 3, vec, op, MPI_COMM_WORLD));
    for (int i = 0; i < 12; i++) {
        int data = i < 9 && i % 3 != 1;
        long want = data ? (long)np * (np - 1) / 2 * 100 + (long)np * i : -5;
        CHECK(r[i] == want, "vector user op [%d]=%ld want %ld", i, r[i], want);
    }
    MPI_CHECK(MPI_Op_free(&op));
    MPI_CHECK(MPI_Type_free(&vec));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    me = t_rank, np = t_size;
    MPI_CHECK(MPI_Type_contiguous(2, MPI_LONG, &aff_type));
    MPI_CHECK(MPI_Type_commit(&aff_type));
    predefined();
    user_ops(0);
    user_ops(1);
    noncontig_user_op();
    if (np > 1) CHECK(user_calls > 0, "user function never called");
    if (t_expect_ferrite()) {
        /* MPI_REPLACE is for one-sided operations only; MINLOC needs a pair type. */
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
        int x = 1, y;
        EXPECT_CLASS(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_REPLACE, MPI_COMM_WORLD), MPI_ERR_OP);
        EXPECT_CLASS(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MINLOC, MPI_COMM_WORLD), MPI_ERR_OP);
        MPI_Op sum = MPI_SUM;
        EXPECT_CLASS(MPI_Op_free(&sum), MPI_ERR_OP);
    }
    MPI_CHECK(MPI_Type_free(&aff_type));
    t_finish("coll_ops");
    return 0;
}
