/* Reductions on C long double types, which Rust has no type for (x86-64: the 80-bit x87
 * format in 16 bytes). Compiled by build.rs with the system C compiler and called from
 * coll/op.rs on packed, possibly unaligned buffers: inout[i] = in[i] op inout[i].
 * op: 0 MAX, 1 MIN, 2 SUM, 3 PROD, 4 LAND, 5 LOR, 6 LXOR (complex: SUM, PROD; pairs:
 * 0 MINLOC, 1 MAXLOC). */
#include <complex.h>
#include <stddef.h>
#include <string.h>

void ferrite_ld_reduce(int op, unsigned char *inout, const unsigned char *in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        long double a, b;
        memcpy(&a, in + i * sizeof a, sizeof a);
        memcpy(&b, inout + i * sizeof b, sizeof b);
        long double r = op == 0 ? (a > b ? a : b) : op == 1 ? (a < b ? a : b)
                      : op == 2 ? a + b : op == 3 ? a * b
                      : op == 4 ? (long double)(a != 0 && b != 0)
                      : op == 5 ? (long double)(a != 0 || b != 0)
                      : (long double)((a != 0) != (b != 0));
        memcpy(inout + i * sizeof r, &r, sizeof r);
    }
}

void ferrite_cld_reduce(int op, unsigned char *inout, const unsigned char *in, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        long double complex a, b;
        memcpy(&a, in + i * sizeof a, sizeof a);
        memcpy(&b, inout + i * sizeof b, sizeof b);
        long double complex r = op == 2 ? a + b : a * b;
        memcpy(inout + i * sizeof r, &r, sizeof r);
    }
}

/* (long double, int) pairs packed without padding: stride sizeof(long double) + 4. */
void ferrite_ldi_reduce(int maxloc, unsigned char *inout, const unsigned char *in, size_t n)
{
    const size_t vs = sizeof(long double), stride = vs + sizeof(int);
    for (size_t i = 0; i < n; i++) {
        long double av, bv;
        int ai, bi;
        memcpy(&av, in + i * stride, vs);
        memcpy(&ai, in + i * stride + vs, sizeof ai);
        memcpy(&bv, inout + i * stride, vs);
        memcpy(&bi, inout + i * stride + vs, sizeof bi);
        int a_wins = maxloc ? av > bv : av < bv;
        if (a_wins) {
            bv = av;
            bi = ai;
        } else if (av == bv && ai < bi) {
            bi = ai;
        }
        memcpy(inout + i * stride, &bv, vs);
        memcpy(inout + i * stride + vs, &bi, sizeof bi);
    }
}
