/* np: 1 2 4 */
/* Many RMA operations per synchronization, data checked: what the message path batches
 * (small Puts and Accumulates to one target travel as one message per flush, or sooner when
 * the buffer fills) and streams (large Gets and Puts), over tcp/udp; over shared memory the
 * same program checks the direct path. Every process is origin to every target, each
 * writing its own sub-region at each target. Per target and round:
 * - 600 small puts of mixed sizes and types into disjoint slots (bytes, ints, a strided
 *   target vector, a strided origin vector), with a flush and an inline Get of the area
 *   checked against a local copy after every 150 (so puts before a flush are seen);
 * - with them, accumulates of long long (plain and a strided vector type) into counters of
 *   this origin, and of long long and double into counters all origins share; an
 *   MPI_Rget_accumulate (MPI_NO_OP) must already see this origin's earlier accumulates
 *   (accumulate ordering), flush or not;
 * - 20 MPI_Rput waited for and their buffer overwritten at once (local completion: the
 *   target still gets the data as it was);
 * - a 10 KiB put, a 100 KiB put, a 72 KiB put into a strided target type, then after a
 *   flush a 320 KiB Get of the whole sub-region, an MPI_Rget into a strided result type
 *   and a Get from a strided target type into a contiguous buffer, all checked.
 * Round 0 runs in lock_all with flushes, round 1 in per-target shared locks, round 2 in a
 * fence epoch (the target checks what every origin put). At the end every target checks
 * the shared counters. Then a dynamic window (always served by messages, so batching and
 * streaming run on every transport): small puts, a streamed put and get, checked; two
 * streamed accumulates, a small MPI_REPLACE and a Get_accumulate that must see all three
 * in order (accumulate ordering while the first ones' data is still arriving); on
 * Ferrite, a batched put and a streamed get outside the attached memory fail with
 * MPI_ERR_RMA_RANGE at the flush, and the window still works after. Each process also
 * accumulates a notice to the next one and polls its own memory for the previous one's,
 * flushing only itself (mpi4py.util.sync's MCS lock): a notice held back hangs the job.
 * Origin buffers of Put and Accumulate stay unchanged until the flush or fence that
 * completes them (MPI 4.1 12.3: an implementation may read them any time until then, as
 * MPICH does), except the MPI_Rput ones, reused once their request is complete. */
#include "common.h"

#define SUB (320 * 1024) /* one origin's sub-region at each target, bytes */
#define NSMALL 600
#define SEG 150            /* small puts between flushes (their slots are disjoint) */
#define SLOT 32
#define RP_OFF 8192        /* MPI_Rput slots */
#define MED_OFF 16384      /* 10 KiB put */
#define MED_LEN 10240
#define BIG_OFF 32768      /* 100 KiB put */
#define BIG_LEN 102400
#define VEC_OFF 139264     /* 4608 blocks of 16 bytes, stride 24: 72 KiB of data */
#define VEC_N 4608
#define VEC_B 16
#define VEC_S 24
#define FENCE_OFF 262144   /* round 2's puts */
#define NCNT 64            /* private counters per origin */
#define NSHARED 16

static int me, np;
static MPI_Win win;
static unsigned char *base;
static MPI_Aint a_off, s_off, d_off;
static MPI_Datatype tvec, ovec, lvec, bigvec;

static unsigned char val(int r, int o, int t, int i, int k)
{
    return (unsigned char)(r * 131 + o * 29 + t * 17 + i * 7 + k * 3 + 1);
}

/* Round 2's i-th put from origin o to target t: slot and length, bytes in `b`. */
static void fence_put(int o, int t, int i, MPI_Aint *off, int *len, unsigned char *b)
{
    *off = FENCE_OFF + (MPI_Aint)((i * 37) % 300) * SLOT;
    *len = 1 + (i + o) % SLOT;
    for (int k = 0; k < *len; k++) b[k] = val(2, o, t, i, k);
}

static void check_bytes(const unsigned char *got, const unsigned char *want, size_t n, const char *what, int t, int r)
{
    for (size_t k = 0; k < n; k++)
        CHECK(got[k] == want[k], "%s from target %d, round %d: byte %zu is %d, expected %d", what, t, r, k,
              got[k], want[k]);
}

/* One round of passive-target work on target t (epoch opened by the caller). */
static void passive(int r, int t, unsigned char *shadow, long long *acc, unsigned char *chk)
{
    MPI_Aint sub = (MPI_Aint)me * SUB;
    /* One origin buffer per operation of a segment: untouched until the segment's flush. */
    static unsigned char srcs[SEG][64];
    static long long incs[SEG], fours[SEG][4];
    static const long long one = 1;
    static const double half = 0.5;
    for (int seg = 0; seg < NSMALL / SEG; seg++) {
        for (int j = 0; j < SEG; j++) {
            int i = seg * SEG + j;
            MPI_Aint off = (MPI_Aint)((j * 37) % SEG) * SLOT;
            unsigned char *src = srcs[j];
            for (int k = 0; k < 64; k++) src[k] = val(r, me, t, i, k);
            switch (i % 4) {
            case 0: { /* bytes */
                int n = 1 + i % SLOT;
                MPI_CHECK(MPI_Put(src, n, MPI_BYTE, t, sub + off, n, MPI_BYTE, win));
                memcpy(shadow + off, src, n);
                break;
            }
            case 1: { /* ints */
                int n = 1 + i % 8;
                MPI_CHECK(MPI_Put(src, n, MPI_INT, t, sub + off, n, MPI_INT, win));
                memcpy(shadow + off, src, n * sizeof(int));
                break;
            }
            case 2: /* 12 contiguous bytes into a strided target type */
                MPI_CHECK(MPI_Put(src, 12, MPI_BYTE, t, sub + off, 1, tvec, win));
                for (int b = 0; b < 4; b++) memcpy(shadow + off + b * 5, src + b * 3, 3);
                break;
            default: /* a strided origin type into 6 contiguous shorts */
                MPI_CHECK(MPI_Put(src, 1, ovec, t, sub + off, 6, MPI_SHORT, win));
                for (int b = 0; b < 3; b++) memcpy(shadow + off + b * 4, src + b * 8, 4);
                break;
            }
            long long *inc = &incs[j];
            *inc = i % 5 + 1;
            int c = i % 32;
            MPI_CHECK(MPI_Accumulate(inc, 1, MPI_LONG_LONG, t, a_off + (me * NCNT + c) * 8, 1, MPI_LONG_LONG,
                                     MPI_SUM, win));
            acc[c] += *inc;
            if (i % 8 == 0) {
                long long *four = fours[j];
                for (int b = 0; b < 4; b++) four[b] = b + 1;
                int at = 32 + (i / 8) % 2;
                MPI_CHECK(MPI_Accumulate(four, 4, MPI_LONG_LONG, t, a_off + (me * NCNT + at) * 8, 1, lvec, MPI_SUM,
                                         win));
                for (int b = 0; b < 4; b++) acc[at + 2 * b] += four[b];
            }
            if (i % 4 == 0) {
                MPI_CHECK(MPI_Accumulate(&one, 1, MPI_LONG_LONG, t, s_off + (i / 4 % NSHARED) * 8, 1, MPI_LONG_LONG,
                                         MPI_SUM, win));
            }
            if (i % 3 == 0) {
                MPI_CHECK(MPI_Accumulate(&half, 1, MPI_DOUBLE, t, d_off, 1, MPI_DOUBLE, MPI_SUM, win));
            }
            if (i % 50 == 49) {
                long long got = -1;
                MPI_Request q;
                MPI_CHECK(MPI_Rget_accumulate(NULL, 0, MPI_LONG_LONG, &got, 1, MPI_LONG_LONG, t,
                                              a_off + (me * NCNT + c) * 8, 1, MPI_LONG_LONG, MPI_NO_OP, win, &q));
                MPI_CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE));
                CHECK(got == acc[c], "target %d round %d: counter %d reads %lld after this origin's accumulates, "
                      "expected %lld", t, r, c, got, acc[c]);
            }
        }
        MPI_CHECK(MPI_Win_flush(t, win));
        MPI_CHECK(MPI_Get(chk, SEG * SLOT, MPI_BYTE, t, sub, SEG * SLOT, MPI_BYTE, win));
        MPI_CHECK(MPI_Win_flush(t, win));
        check_bytes(chk, shadow, SEG * SLOT, "small puts", t, r);
    }
    /* Rput: complete locally, buffer reused at once. */
    unsigned char rsrc[24];
    for (int k = 0; k < 20; k++) {
        MPI_Request q;
        for (int b = 0; b < 24; b++) rsrc[b] = val(r, me, t, 1000 + k, b);
        MPI_CHECK(MPI_Rput(rsrc, 24, MPI_BYTE, t, sub + RP_OFF + k * SLOT, 24, MPI_BYTE, win, &q));
        MPI_CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE));
        memcpy(shadow + RP_OFF + k * SLOT, rsrc, 24);
        memset(rsrc, 0xee, 24);
    }
    /* Medium, large, large strided. */
    unsigned char *big = malloc(BIG_LEN);
    for (int k = 0; k < BIG_LEN; k++) big[k] = val(r, me, t, 2000, k);
    MPI_CHECK(MPI_Put(big, MED_LEN, MPI_BYTE, t, sub + MED_OFF, MED_LEN, MPI_BYTE, win));
    memcpy(shadow + MED_OFF, big, MED_LEN);
    MPI_CHECK(MPI_Put(big, BIG_LEN, MPI_BYTE, t, sub + BIG_OFF, BIG_LEN, MPI_BYTE, win));
    memcpy(shadow + BIG_OFF, big, BIG_LEN);
    /* (A buffer of its own: the others stay untouched until the flush.) */
    unsigned char *big2 = malloc(VEC_N * VEC_B);
    for (int k = 0; k < VEC_N * VEC_B; k++) big2[k] = val(r, me, t, 3000, k);
    MPI_CHECK(MPI_Put(big2, VEC_N * VEC_B, MPI_BYTE, t, sub + VEC_OFF, 1, bigvec, win));
    for (int b = 0; b < VEC_N; b++) memcpy(shadow + VEC_OFF + b * VEC_S, big2 + b * VEC_B, VEC_B);
    MPI_CHECK(MPI_Win_flush(t, win));
    free(big2);
    /* The whole sub-region. */
    memset(chk, 0, SUB);
    MPI_CHECK(MPI_Get(chk, SUB, MPI_BYTE, t, sub, SUB, MPI_BYTE, win));
    MPI_CHECK(MPI_Win_flush(t, win));
    check_bytes(chk, shadow, FENCE_OFF, "the sub-region", t, r);
    /* Strided result type (Rget), strided target type into a contiguous buffer. */
    MPI_Request q;
    memset(chk, 0, SUB);
    MPI_CHECK(MPI_Rget(chk + VEC_OFF, 1, bigvec, t, sub + VEC_OFF, 1, bigvec, win, &q));
    MPI_CHECK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    /* The data is in once the request is complete (MPI 4.1 12.3.5). MPICH 4.0.2 (ch4)
     * completes an MPI_Rget of a derived type before its data arrives: only a flush brings
     * it, so elsewhere the check is made after one; on Ferrite, right after the Wait. */
    if (!t_expect_ferrite()) MPI_CHECK(MPI_Win_flush(t, win));
    for (int b = 0; b < VEC_N; b++)
        check_bytes(chk + VEC_OFF + b * VEC_S, shadow + VEC_OFF + b * VEC_S, VEC_B, "Rget strided", t, r);
    memset(big, 0, BIG_LEN);
    MPI_CHECK(MPI_Get(big, VEC_N * VEC_B, MPI_BYTE, t, sub + VEC_OFF, 1, bigvec, win));
    MPI_CHECK(MPI_Win_flush(t, win));
    for (int b = 0; b < VEC_N; b++)
        check_bytes(big + b * VEC_B, shadow + VEC_OFF + b * VEC_S, VEC_B, "Get from strided", t, r);
    free(big);
    /* This origin's private counters. */
    long long got[NCNT];
    MPI_CHECK(MPI_Get(got, NCNT, MPI_LONG_LONG, t, a_off + me * NCNT * 8, NCNT, MPI_LONG_LONG, win));
    MPI_CHECK(MPI_Win_flush(t, win));
    for (int c = 0; c < NCNT; c++)
        CHECK(got[c] == acc[c], "target %d round %d: private counter %d is %lld, expected %lld", t, r, c, got[c],
              acc[c]);
}

#define SUBD (200 * 1024)
#define DBIG (70 * 1024)
#define ACC_OFF (100 * 1024) /* streamed accumulates: NACC long longs */
#define NACC 12288
#define NSB 2048 /* blocks of 5 of 6 long longs: 80 KiB through a strided target type */

/* The dynamic window part (see the top). */
static void dynamic(void)
{
    MPI_Win dw;
    MPI_CHECK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dw));
    MPI_CHECK(MPI_Win_set_errhandler(dw, MPI_ERRORS_RETURN));
    unsigned char *mem = calloc((size_t)np * SUBD, 1);
    MPI_CHECK(MPI_Win_attach(dw, mem, (MPI_Aint)np * SUBD));
    MPI_Aint mine, *addrs = malloc(np * sizeof *addrs);
    MPI_CHECK(MPI_Get_address(mem, &mine));
    MPI_CHECK(MPI_Allgather(&mine, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD));
    int t = (me + 1) % np;
    MPI_Aint at = addrs[t] + (MPI_Aint)me * SUBD;
    unsigned char *want = calloc(SUBD, 1), *got = calloc(SUBD, 1), *big = malloc(DBIG);
    MPI_CHECK(MPI_Win_lock_all(0, dw));
    static unsigned char bufs[300][SLOT];
    for (int i = 0; i < 300; i++) {
        unsigned char *b = bufs[i];
        int len = 1 + i % SLOT;
        MPI_Aint off = (MPI_Aint)((i * 37) % 300) * SLOT;
        for (int k = 0; k < len; k++) b[k] = val(3, me, t, i, k);
        MPI_CHECK(MPI_Put(b, len, MPI_BYTE, t, at + off, len, MPI_BYTE, dw));
        memcpy(want + off, b, len);
    }
    for (int k = 0; k < DBIG; k++) big[k] = val(3, me, t, 5000, k);
    MPI_CHECK(MPI_Put(big, DBIG, MPI_BYTE, t, at + 10240, DBIG, MPI_BYTE, dw));
    memcpy(want + 10240, big, DBIG);
    MPI_CHECK(MPI_Win_flush(t, dw));
    MPI_CHECK(MPI_Get(got, SUBD, MPI_BYTE, t, at, SUBD, MPI_BYTE, dw));
    MPI_CHECK(MPI_Win_flush(t, dw));
    check_bytes(got, want, SUBD, "dynamic window", t, 3);
    /* Accumulates over 64 KiB (their data streams), contiguous and into a strided target
     * type, then at once a small MPI_REPLACE on some of the same elements and a
     * Get_accumulate (MPI_NO_OP) of them all, without a flush between: accumulate ordering
     * says the Get_accumulate sees every earlier one, applied in order. */
    long long *va = malloc(NACC * sizeof *va), *vs = malloc(NSB * 5 * sizeof *vs), *res = malloc(NACC * sizeof *res);
    long long *expect = (long long *)(want + ACC_OFF);
    static const long long rep4[4] = {1000, 1001, 1002, 1003};
    MPI_Datatype svec;
    MPI_CHECK(MPI_Type_vector(NSB, 5, 6, MPI_LONG_LONG, &svec));
    MPI_CHECK(MPI_Type_commit(&svec));
    for (int k = 0; k < NACC; k++) va[k] = k + 7 * me, expect[k] = va[k];
    for (int b = 0; b < NSB; b++)
        for (int k = 0; k < 5; k++) vs[b * 5 + k] = 3 * (b * 5 + k) + 1, expect[b * 6 + k] += vs[b * 5 + k];
    for (int k = 0; k < 4; k++) expect[100 + k] = rep4[k];
    MPI_CHECK(MPI_Accumulate(va, NACC, MPI_LONG_LONG, t, at + ACC_OFF, NACC, MPI_LONG_LONG, MPI_SUM, dw));
    MPI_CHECK(MPI_Accumulate(vs, NSB * 5, MPI_LONG_LONG, t, at + ACC_OFF, 1, svec, MPI_SUM, dw));
    MPI_CHECK(MPI_Accumulate(rep4, 4, MPI_LONG_LONG, t, at + ACC_OFF + 100 * 8, 4, MPI_LONG_LONG, MPI_REPLACE, dw));
    MPI_CHECK(MPI_Get_accumulate(NULL, 0, MPI_LONG_LONG, res, NACC, MPI_LONG_LONG, t, at + ACC_OFF, NACC,
                                 MPI_LONG_LONG, MPI_NO_OP, dw));
    MPI_CHECK(MPI_Win_flush(t, dw));
    for (int k = 0; k < NACC; k++)
        CHECK(res[k] == expect[k], "streamed accumulates at target %d: element %d reads %lld, expected %lld", t, k,
              res[k], expect[k]);
    MPI_CHECK(MPI_Type_free(&svec));
    free(va), free(vs), free(res);
    /* A notice without a flush to its target, then polling this process's own memory with
     * flushes to itself only (mpi4py.util.sync's MCS lock): the notice must still go. */
    int one = 1, from = (me + np - 1) % np;
    MPI_CHECK(MPI_Accumulate(&one, 1, MPI_INT, t, at + SUBD - 64, 1, MPI_INT, MPI_REPLACE, dw));
    memcpy(want + SUBD - 64, &one, sizeof one);
    volatile int *notice = (volatile int *)(mem + (size_t)from * SUBD + SUBD - 64);
    while (*notice != 1) {
        MPI_CHECK(MPI_Win_flush(me, dw));
        MPI_CHECK(MPI_Win_sync(dw));
    }
    if (t_expect_ferrite()) {
        /* Past the attached memory: refused by the target, raised at the flush. */
        MPI_Aint past = addrs[t] + (MPI_Aint)np * SUBD + 4096;
        MPI_CHECK(MPI_Put(big, 8, MPI_BYTE, t, past, 8, MPI_BYTE, dw));
        EXPECT_CLASS(MPI_Win_flush(t, dw), MPI_ERR_RMA_RANGE);
        MPI_CHECK(MPI_Get(got, 32768, MPI_BYTE, t, past, 32768, MPI_BYTE, dw));
        EXPECT_CLASS(MPI_Win_flush(t, dw), MPI_ERR_RMA_RANGE);
        memset(got, 0, SUBD);
        MPI_CHECK(MPI_Get(got, SUBD, MPI_BYTE, t, at, SUBD, MPI_BYTE, dw));
        MPI_CHECK(MPI_Win_flush(t, dw));
        check_bytes(got, want, SUBD, "dynamic window after refused requests", t, 3);
    }
    MPI_CHECK(MPI_Win_unlock_all(dw));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Win_detach(dw, mem));
    MPI_CHECK(MPI_Win_free(&dw));
    free(mem), free(addrs), free(want), free(got), free(big);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    t_rank = me;
    t_size = np;
    a_off = (MPI_Aint)np * SUB;
    s_off = a_off + (MPI_Aint)np * NCNT * 8;
    d_off = s_off + NSHARED * 8;
    /* A multiple of 16: MPICH 4.0.2 (ch4, same-host windows) misplaces other ranks' memory
     * by 8 bytes when MPI_Win_allocate's size is 8 modulo 16. */
    MPI_Aint wsize = d_off + 16;
    MPI_CHECK(MPI_Win_allocate(wsize, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win));
    memset(base, 0, wsize);
    MPI_CHECK(MPI_Type_vector(4, 3, 5, MPI_CHAR, &tvec));
    MPI_CHECK(MPI_Type_vector(3, 2, 4, MPI_SHORT, &ovec));
    MPI_CHECK(MPI_Type_vector(4, 1, 2, MPI_LONG_LONG, &lvec));
    MPI_CHECK(MPI_Type_vector(VEC_N, VEC_B, VEC_S, MPI_CHAR, &bigvec));
    MPI_Datatype ts[] = {tvec, ovec, lvec, bigvec};
    for (int k = 0; k < 4; k++) MPI_CHECK(MPI_Type_commit(&ts[k]));
    tvec = ts[0], ovec = ts[1], lvec = ts[2], bigvec = ts[3];
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));

    unsigned char *chk = malloc(SUB);
    unsigned char **shadow = malloc(np * sizeof *shadow);
    long long (*acc)[NCNT] = calloc(np, sizeof *acc);
    for (int t = 0; t < np; t++) shadow[t] = calloc(SUB, 1);

    /* Round 0: lock_all; round 1: a shared lock per target. */
    MPI_CHECK(MPI_Win_lock_all(0, win));
    for (int k = 0; k < np; k++) {
        int t = (me + k) % np;
        passive(0, t, shadow[t], acc[t], chk);
    }
    MPI_CHECK(MPI_Win_unlock_all(win));
    for (int k = 0; k < np; k++) {
        int t = (me + k) % np;
        MPI_CHECK(MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win));
        passive(1, t, shadow[t], acc[t], chk);
        MPI_CHECK(MPI_Win_unlock(t, win));
    }

    /* Round 2: a fence epoch; each target checks what every origin put. */
    MPI_CHECK(MPI_Win_fence(0, win));
    unsigned char(*fbufs)[300][SLOT] = malloc((size_t)np * sizeof *fbufs); /* kept until the fence */
    static const long long one = 1;
    for (int t = 0; t < np; t++)
        for (int i = 0; i < 300; i++) {
            MPI_Aint off;
            int len;
            unsigned char *b = fbufs[t][i];
            fence_put(me, t, i, &off, &len, b);
            MPI_CHECK(MPI_Put(b, len, MPI_BYTE, t, (MPI_Aint)me * SUB + off, len, MPI_BYTE, win));
            MPI_CHECK(MPI_Accumulate(&one, 1, MPI_LONG_LONG, t, s_off + (i % NSHARED) * 8, 1, MPI_LONG_LONG, MPI_SUM,
                                     win));
        }
    MPI_CHECK(MPI_Win_fence(0, win));
    free(fbufs);
    for (int o = 0; o < np; o++)
        for (int i = 0; i < 300; i++) {
            MPI_Aint off;
            int len;
            unsigned char b[SLOT];
            fence_put(o, me, i, &off, &len, b);
            for (int k = 0; k < len; k++)
                CHECK(base[(MPI_Aint)o * SUB + off + k] == b[k], "fence round: origin %d put %d byte %d is %d, "
                      "expected %d", o, i, k, base[(MPI_Aint)o * SUB + off + k], b[k]);
        }
    /* Shared counters: per origin and passive round, NSMALL/4 ones spread over NSHARED, and
     * NSMALL/3 halves; the fence round adds 300 ones spread the same way. */
    for (int c = 0; c < NSHARED; c++) {
        long long want = 0, got;
        memcpy(&got, base + s_off + c * 8, 8);
        for (int i = 0; i < NSMALL; i += 4)
            if (i / 4 % NSHARED == c) want += 2 * np;
        for (int i = 0; i < 300; i++)
            if (i % NSHARED == c) want += np;
        CHECK(got == want, "shared counter %d is %lld, expected %lld", c, got, want);
    }
    double d;
    memcpy(&d, base + d_off, 8);
    double dwant = np * 2 * ((NSMALL + 2) / 3) * 0.5;
    CHECK(d == dwant, "shared double is %g, expected %g", d, dwant);
    MPI_CHECK(MPI_Win_fence(MPI_MODE_NOSUCCEED, win));

    dynamic();
    for (int k = 0; k < 4; k++) MPI_CHECK(MPI_Type_free(&ts[k]));
    MPI_CHECK(MPI_Win_free(&win));
    for (int t = 0; t < np; t++) free(shadow[t]);
    free(shadow);
    free(acc);
    free(chk);
    if (me == 0) printf("done: rma_batch\n");
    MPI_Finalize();
    return 0;
}
