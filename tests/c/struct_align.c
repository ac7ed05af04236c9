/* np: 1 2 4 */
/* MPI_Type_create_struct pads the extent to the alignment of the most aligned member, as
 * the C compiler pads the struct, so count > 1 of a struct type described with offsetof
 * steps by sizeof. Without the padding, element 1 is read from and written to the wrong
 * place: silent corruption. Each struct is sent as an array (count 5) through point-to-point
 * (to the next rank, or to self) and through MPI_Bcast, and every byte is checked,
 * including that padding bytes of the receive buffer are left untouched. Also the bounds
 * rules that stay unpadded (a struct of one type, explicit bounds from create_resized and
 * from the MPI-1 markers MPI_LB/MPI_UB), checked against the values MPICH gives. */
#include "common.h"
#include <stddef.h>

#define N 5

typedef struct { double d[3]; int i; } s1_t;          /* 28 bytes of data, sizeof 32 */
typedef struct { char a; double d; char b; } s2_t;    /* 10 bytes of data, sizeof 24 */
typedef struct { int i; char c; } s3_t;               /* 5 bytes, sizeof 8 */
typedef struct { short s; char c; } s4_t;             /* 3 bytes, sizeof 4 */
typedef struct { long double x; char c; } s5_t;       /* 17 bytes, sizeof 32 */
typedef struct { char c; s2_t in; char z; } s6_t;     /* nested struct type, sizeof 40 */

static MPI_Datatype make(int n, const int *lens, const MPI_Aint *disps, const MPI_Datatype *types)
{
    MPI_Datatype t;
    MPI_CHECK(MPI_Type_create_struct(n, lens, disps, types, &t));
    MPI_CHECK(MPI_Type_commit(&t));
    return t;
}

static void check_extent(MPI_Datatype t, MPI_Aint want_lb, MPI_Aint want_extent, const char *what)
{
    MPI_Aint lb, extent;
    MPI_CHECK(MPI_Type_get_extent(t, &lb, &extent));
    CHECK(lb == want_lb && extent == want_extent, "%s: lb %ld extent %ld, expected lb %ld extent %ld",
          what, (long)lb, (long)extent, (long)want_lb, (long)want_extent);
}

/* Fills the data bytes of element k (the members, not the padding) with a pattern; the
 * padding bytes stay 0xEE in both buffers, and the receiver checks them. */
static void fill(unsigned char *buf, size_t size, const size_t *off, const size_t *len, int nm,
                 int seed)
{
    memset(buf, 0xEE, size * N);
    for (int k = 0; k < N; k++)
        for (int m = 0; m < nm; m++)
            for (size_t b = 0; b < len[m]; b++)
                buf[k * size + off[m] + b] = (unsigned char)(seed + 31 * k + 7 * m + b);
}

static void exchange(MPI_Datatype t, size_t size, const size_t *off, const size_t *len, int nm,
                     const char *what)
{
    unsigned char *send = malloc(size * N), *want = malloc(size * N), *recv = malloc(size * N);
    fill(send, size, off, len, nm, t_rank + 1);
    int to = (t_rank + 1) % t_size, from = (t_rank + t_size - 1) % t_size;
    fill(want, size, off, len, nm, from + 1);
    memset(recv, 0xEE, size * N);
    MPI_Status st;
    MPI_CHECK(MPI_Sendrecv(send, N, t, to, 7, recv, N, t, from, 7, MPI_COMM_WORLD, &st));
    int count;
    MPI_CHECK(MPI_Get_count(&st, t, &count));
    CHECK(count == N, "%s: received count %d", what, count);
    for (size_t b = 0; b < size * N; b++)
        CHECK(recv[b] == want[b], "%s: byte %zu (element %zu, offset %zu) is %#x, expected %#x",
              what, b, b / size, b % size, recv[b], want[b]);
    /* The same array broadcast from the last rank. */
    int root = t_size - 1;
    fill(want, size, off, len, nm, 100 + root);
    if (t_rank == root) memcpy(recv, want, size * N);
    else memset(recv, 0xEE, size * N);
    MPI_CHECK(MPI_Bcast(recv, N, t, root, MPI_COMM_WORLD));
    for (size_t b = 0; b < size * N; b++)
        CHECK(recv[b] == want[b], "%s: bcast byte %zu is %#x, expected %#x", what, b, recv[b], want[b]);
    free(send);
    free(want);
    free(recv);
}

#define MEMBER(T, m) offsetof(T, m)

int main(int argc, char **argv)
{
    t_init(&argc, &argv);

    { /* struct { double d[3]; int i; } */
        int lens[2] = {3, 1};
        MPI_Aint d[2] = {MEMBER(s1_t, d), MEMBER(s1_t, i)};
        MPI_Datatype ty[2] = {MPI_DOUBLE, MPI_INT};
        MPI_Datatype t = make(2, lens, d, ty);
        check_extent(t, 0, sizeof(s1_t), "{double[3]; int}");
        size_t off[2] = {MEMBER(s1_t, d), MEMBER(s1_t, i)}, len[2] = {24, 4};
        exchange(t, sizeof(s1_t), off, len, 2, "{double[3]; int}");
        MPI_CHECK(MPI_Type_free(&t));
    }
    { /* struct { char; double; char } and a struct containing it */
        int lens[3] = {1, 1, 1};
        MPI_Aint d[3] = {MEMBER(s2_t, a), MEMBER(s2_t, d), MEMBER(s2_t, b)};
        MPI_Datatype ty[3] = {MPI_CHAR, MPI_DOUBLE, MPI_CHAR};
        MPI_Datatype t = make(3, lens, d, ty);
        check_extent(t, 0, sizeof(s2_t), "{char; double; char}");
        size_t off[3] = {MEMBER(s2_t, a), MEMBER(s2_t, d), MEMBER(s2_t, b)}, len[3] = {1, 8, 1};
        exchange(t, sizeof(s2_t), off, len, 3, "{char; double; char}");

        MPI_Aint d6[3] = {MEMBER(s6_t, c), MEMBER(s6_t, in), MEMBER(s6_t, z)};
        MPI_Datatype ty6[3] = {MPI_CHAR, t, MPI_CHAR};
        MPI_Datatype t6 = make(3, lens, d6, ty6);
        check_extent(t6, 0, sizeof(s6_t), "{char; {char; double; char}; char}");
        size_t off6[5] = {MEMBER(s6_t, c), MEMBER(s6_t, in) + MEMBER(s2_t, a),
                          MEMBER(s6_t, in) + MEMBER(s2_t, d), MEMBER(s6_t, in) + MEMBER(s2_t, b),
                          MEMBER(s6_t, z)};
        size_t len6[5] = {1, 1, 8, 1, 1};
        exchange(t6, sizeof(s6_t), off6, len6, 5, "nested struct");
        MPI_CHECK(MPI_Type_free(&t6));
        MPI_CHECK(MPI_Type_free(&t));
    }
    { /* { int; char }, { short; char }, { long double; char } */
        int lens[2] = {1, 1};
        MPI_Aint d3[2] = {MEMBER(s3_t, i), MEMBER(s3_t, c)};
        MPI_Datatype ty3[2] = {MPI_INT, MPI_CHAR};
        MPI_Datatype t = make(2, lens, d3, ty3);
        check_extent(t, 0, sizeof(s3_t), "{int; char}");
        size_t off3[2] = {MEMBER(s3_t, i), MEMBER(s3_t, c)}, len3[2] = {4, 1};
        exchange(t, sizeof(s3_t), off3, len3, 2, "{int; char}");
        MPI_CHECK(MPI_Type_free(&t));

        MPI_Aint d4[2] = {MEMBER(s4_t, s), MEMBER(s4_t, c)};
        MPI_Datatype ty4[2] = {MPI_SHORT, MPI_CHAR};
        t = make(2, lens, d4, ty4);
        check_extent(t, 0, sizeof(s4_t), "{short; char}");
        size_t off4[2] = {MEMBER(s4_t, s), MEMBER(s4_t, c)}, len4[2] = {2, 1};
        exchange(t, sizeof(s4_t), off4, len4, 2, "{short; char}");
        MPI_CHECK(MPI_Type_free(&t));

        MPI_Aint d5[2] = {MEMBER(s5_t, x), MEMBER(s5_t, c)};
        MPI_Datatype ty5[2] = {MPI_LONG_DOUBLE, MPI_CHAR};
        t = make(2, lens, d5, ty5);
        check_extent(t, 0, sizeof(s5_t), "{long double; char}");
        /* MPI_LONG_DOUBLE carries all sizeof(long double) bytes, x86's 6 unused ones too. */
        size_t off5[2] = {MEMBER(s5_t, x), MEMBER(s5_t, c)}, len5[2] = {sizeof(long double), 1};
        exchange(t, sizeof(s5_t), off5, len5, 2, "{long double; char}");
        MPI_CHECK(MPI_Type_free(&t));
    }
    { /* Bounds that stay as given (values as MPICH 4.0 computes them). */
        int lens[2] = {1, 1};
        MPI_Datatype t, r;
        /* All blocks of one type: an hindexed type, no padding. */
        MPI_Aint dd[2] = {0, 12};
        MPI_Datatype tt[2] = {MPI_DOUBLE, MPI_DOUBLE};
        MPI_CHECK(MPI_Type_create_struct(2, lens, dd, tt, &t));
        check_extent(t, 0, 20, "{double@0, double@12}");
        MPI_CHECK(MPI_Type_free(&t));
        /* A resized member keeps its extent when it alone sets the bounds... */
        MPI_CHECK(MPI_Type_create_resized(MPI_DOUBLE, 0, 12, &r));
        MPI_CHECK(MPI_Type_create_struct(1, lens, dd, &r, &t));
        check_extent(t, 0, 12, "struct{resized(double, 12)}");
        MPI_CHECK(MPI_Type_free(&t));
        /* ...but a struct of it and a char is padded to the double's alignment. */
        MPI_Datatype rc[2] = {r, MPI_CHAR};
        MPI_CHECK(MPI_Type_create_struct(2, lens, dd, rc, &t));
        check_extent(t, 0, 16, "{resized(double, 12)@0, char@12}");
        MPI_CHECK(MPI_Type_free(&t));
        MPI_CHECK(MPI_Type_free(&r));
        /* A resized struct is not padded again by create_resized. */
        MPI_Aint d3[2] = {0, 8};
        MPI_Datatype dc[2] = {MPI_DOUBLE, MPI_CHAR};
        MPI_CHECK(MPI_Type_create_struct(2, lens, d3, dc, &t));
        check_extent(t, 0, 16, "{double; char}");
        MPI_CHECK(MPI_Type_create_resized(t, 0, 9, &r));
        check_extent(r, 0, 9, "resized({double; char}, 9)");
        MPI_CHECK(MPI_Type_free(&r));
        MPI_CHECK(MPI_Type_free(&t));
        /* MPI_UB / MPI_LB markers of MPI-1's MPI_Type_struct override the padded bounds. */
        int l3[3] = {1, 1, 1};
        MPI_Aint du[3] = {0, 4, 5};
        MPI_Datatype tu[3] = {MPI_INT, MPI_CHAR, MPI_UB};
        MPI_CHECK(MPI_Type_struct(3, l3, du, tu, &t));
        check_extent(t, 0, 5, "{int@0, char@4, MPI_UB@5}");
        MPI_CHECK(MPI_Type_free(&t));
        MPI_Aint dl[3] = {-1, 4, 5};
        MPI_Datatype tl[3] = {MPI_LB, MPI_CHAR, MPI_INT};
        MPI_CHECK(MPI_Type_struct(3, l3, dl, tl, &t));
        check_extent(t, -1, 13, "{MPI_LB@-1, char@4, int@5}");
        MPI_CHECK(MPI_Type_free(&t));
    }
    t_finish("struct_align");
    return 0;
}
