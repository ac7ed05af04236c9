/* np: 1 */
/* MPI_Pack_external / Unpack_external / Pack_external_size with the sizes of MPI 4.1
 * section 15.5.2 ("external32"): long and unsigned long take 4 bytes, wchar_t 2, long
 * double 16 (binary128), C bool 1, MPI_AINT/OFFSET/COUNT 8; bytes checked against
 * hand-computed big-endian vectors; a long above 2^31 is a conversion error. */
#include "common.h"
#include <wchar.h>
#include <stdbool.h>
#include <stddef.h>

struct mix {
    long l;
    wchar_t w;
    long double d;
    unsigned long u;
    bool b;
};

static MPI_Aint ext_size(MPI_Datatype t)
{
    MPI_Aint s = -1;
    MPI_CHECK(MPI_Pack_external_size("external32", 1, t, &s));
    return s;
}

static void mixed(void)
{
    /* struct mix { long l; wchar_t w; long double d; unsigned long u; _Bool b; } */
    struct mix in, out;
    memset(&in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    in.l = -2; in.w = 0x20ac; in.d = 1.0L; in.u = 0xdeadbeefUL; in.b = true;
    int lens[5] = {1, 1, 1, 1, 1};
    MPI_Aint disps[5] = {offsetof(struct mix, l), offsetof(struct mix, w), offsetof(struct mix, d),
                         offsetof(struct mix, u), offsetof(struct mix, b)};
    MPI_Datatype types[5] = {MPI_LONG, MPI_WCHAR, MPI_LONG_DOUBLE, MPI_UNSIGNED_LONG, MPI_C_BOOL};
    MPI_Datatype st;
    MPI_CHECK(MPI_Type_create_struct(5, lens, disps, types, &st));
    MPI_CHECK(MPI_Type_commit(&st));
    CHECK(ext_size(st) == 4 + 2 + 16 + 4 + 1, "external32 size of the struct: %ld", (long)ext_size(st));
    unsigned char buf[64], want[27] = {
        0xff, 0xff, 0xff, 0xfe,                          /* long -2 */
        0x20, 0xac,                                      /* wchar_t U+20AC */
        0x3f, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* long double 1.0 */
        0xde, 0xad, 0xbe, 0xef,                          /* unsigned long */
        0x01};                                           /* true */
    MPI_Aint pos = 0;
    MPI_CHECK(MPI_Pack_external("external32", &in, 1, st, buf, sizeof buf, &pos));
    CHECK(pos == 27, "position after Pack_external: %ld", (long)pos);
    for (int i = 0; i < 27; i++)
        CHECK(buf[i] == want[i], "external32 byte %d is %#x, expected %#x", i, buf[i], want[i]);
    MPI_Aint upos = 0;
    MPI_CHECK(MPI_Unpack_external("external32", buf, pos, &upos, &out, 1, st));
    CHECK(upos == 27 && out.l == -2 && out.w == 0x20ac && out.d == 1.0L && out.u == 0xdeadbeefUL &&
          out.b, "Unpack_external: %ld %x %Lg %lx %d", out.l, (unsigned)out.w, out.d, out.u, out.b);

    MPI_CHECK(MPI_Type_free(&st));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int ferrite = t_expect_ferrite();
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    struct { MPI_Datatype t; MPI_Aint n; const char *name; } sizes[] = {
        {MPI_CHAR, 1, "MPI_CHAR"}, {MPI_WCHAR, 2, "MPI_WCHAR"}, {MPI_SHORT, 2, "MPI_SHORT"},
        {MPI_INT, 4, "MPI_INT"}, {MPI_LONG, 4, "MPI_LONG"},
        {MPI_UNSIGNED_LONG, 4, "MPI_UNSIGNED_LONG"}, {MPI_LONG_LONG, 8, "MPI_LONG_LONG"},
        {MPI_FLOAT, 4, "MPI_FLOAT"}, {MPI_DOUBLE, 8, "MPI_DOUBLE"},
        {MPI_LONG_DOUBLE, 16, "MPI_LONG_DOUBLE"}, {MPI_C_BOOL, 1, "MPI_C_BOOL"},
        {MPI_INT64_T, 8, "MPI_INT64_T"}, {MPI_AINT, 8, "MPI_AINT"}, {MPI_OFFSET, 8, "MPI_OFFSET"},
        {MPI_COUNT, 8, "MPI_COUNT"}, {MPI_C_DOUBLE_COMPLEX, 16, "MPI_C_DOUBLE_COMPLEX"},
        {MPI_C_LONG_DOUBLE_COMPLEX, 32, "MPI_C_LONG_DOUBLE_COMPLEX"},
    };
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        MPI_Aint s = ext_size(sizes[i].t);
        CHECK(s == sizes[i].n, "external32 size of %s: %ld, expected %ld", sizes[i].name, (long)s,
              (long)sizes[i].n);
    }

    /* Debian's MPICH 4.0 dies (SIGILL) in MPI_Pack_external_size on this struct. */
    if (ferrite) mixed();

    /* Two's complement extremes that fit, and a long that does not. */
    unsigned char buf[16];
    long edge[2] = {-2147483647L - 1, 2147483647L}, back[2] = {0, 0};
    MPI_Aint pos = 0, upos = 0;
    MPI_CHECK(MPI_Pack_external("external32", edge, 2, MPI_LONG, buf, sizeof buf, &pos));
    CHECK(pos == 8 && buf[0] == 0x80 && buf[3] == 0 && buf[4] == 0x7f && buf[7] == 0xff,
          "longs at the int limits packed as %02x..%02x %02x..%02x", buf[0], buf[3], buf[4], buf[7]);
    MPI_CHECK(MPI_Unpack_external("external32", buf, 8, &upos, back, 2, MPI_LONG));
    CHECK(back[0] == edge[0] && back[1] == edge[1], "longs back: %ld %ld", back[0], back[1]);
    if (ferrite) {
        long big = 1L << 31;
        pos = 0;
        EXPECT_CLASS(MPI_Pack_external("external32", &big, 1, MPI_LONG, buf, sizeof buf, &pos),
                     MPI_ERR_CONVERSION);
        unsigned long ubig = 1UL << 32;
        EXPECT_CLASS(MPI_Pack_external("external32", &ubig, 1, MPI_UNSIGNED_LONG, buf, sizeof buf,
                                       &pos), MPI_ERR_CONVERSION);
    }
    t_finish("external32");
    return 0;
}
