/* np: 1 2 */
/* MPI_Pack/Unpack (and through a message as MPI_PACKED), Pack_size, Pack_external in
 * big-endian "external32" with hand-computed bytes, Type_get_envelope/contents for each
 * constructor, type names, Type_match_size, a darray partition and Aint arithmetic. */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    /* Pack an int vector and a double, unpack them back. */
    int a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0};
    double x = 3.25, y = 0;
    MPI_Datatype v;
    MPI_CHECK(MPI_Type_vector(3, 1, 2, MPI_INT, &v));
    MPI_CHECK(MPI_Type_commit(&v));
    int sz, pos = 0;
    MPI_CHECK(MPI_Pack_size(1, v, MPI_COMM_WORLD, &sz));
    CHECK(sz == 12, "Pack_size of vector(3,1,2) int: %d", sz);
    char buf[64];
    MPI_CHECK(MPI_Pack(a, 1, v, buf, sizeof buf, &pos, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Pack(&x, 1, MPI_DOUBLE, buf, sizeof buf, &pos, MPI_COMM_WORLD));
    CHECK(pos == 20, "position after packing: %d", pos);
    int peer = t_partner();
    MPI_CHECK(MPI_Sendrecv_replace(buf, pos, MPI_PACKED, peer, 1, peer, 1, MPI_COMM_WORLD,
                                   MPI_STATUS_IGNORE));
    int upos = 0;
    MPI_CHECK(MPI_Unpack(buf, pos, &upos, b, 1, v, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Unpack(buf, pos, &upos, &y, 1, MPI_DOUBLE, MPI_COMM_WORLD));
    CHECK(b[0] == 1 && b[1] == 0 && b[2] == 3 && b[4] == 5 && b[5] == 0 && y == 3.25,
          "unpacked %d %d %d %d %d %g", b[0], b[1], b[2], b[4], b[5], y);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    pos = 0;
    /* Ferrite refuses to pack past the output buffer (MPICH does not check). */
    if (t_expect_ferrite())
        EXPECT_CLASS(MPI_Pack(a, 1, v, buf, 8, &pos, MPI_COMM_WORLD), MPI_ERR_TRUNCATE);

    /* external32: big-endian. */
    int i32 = 0x01020304;
    short s16 = 0x0a0b;
    double one = 1.0;
    unsigned char e[32];
    MPI_Aint ep = 0, esz;
    MPI_CHECK(MPI_Pack_external("external32", &i32, 1, MPI_INT, e, sizeof e, &ep));
    MPI_CHECK(MPI_Pack_external("external32", &s16, 1, MPI_SHORT, e, sizeof e, &ep));
    MPI_CHECK(MPI_Pack_external("external32", &one, 1, MPI_DOUBLE, e, sizeof e, &ep));
    unsigned char want[14] = {1, 2, 3, 4, 0x0a, 0x0b, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0};
    CHECK(ep == 14 && memcmp(e, want, 14) == 0, "external32 bytes differ (position %ld)", (long)ep);
    MPI_CHECK(MPI_Pack_external_size("external32", 3, MPI_INT, &esz));
    CHECK(esz == 12, "Pack_external_size %ld", (long)esz);
    int i2 = 0;
    ep = 0;
    MPI_CHECK(MPI_Unpack_external("external32", e, 14, &ep, &i2, 1, MPI_INT));
    CHECK(i2 == i32, "Unpack_external: %x", i2);

    /* Envelopes and contents. */
    int ni, na, nd, comb, ints[16];
    MPI_Aint aints[4];
    MPI_Datatype types[4];
    MPI_CHECK(MPI_Type_get_envelope(MPI_INT, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_NAMED, "MPI_INT combiner %d", comb);
    MPI_CHECK(MPI_Type_get_envelope(v, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_VECTOR && ni == 3 && na == 0 && nd == 1, "vector envelope");
    MPI_CHECK(MPI_Type_get_contents(v, 16, 4, 4, ints, aints, types));
    CHECK(ints[0] == 3 && ints[1] == 1 && ints[2] == 2 && types[0] == MPI_INT, "vector contents");
    MPI_Datatype st, rs, dup;
    int lens[2] = {1, 2};
    MPI_Aint disps[2] = {0, 8};
    MPI_Datatype ts[2] = {MPI_CHAR, v};
    MPI_CHECK(MPI_Type_create_struct(2, lens, disps, ts, &st));
    MPI_CHECK(MPI_Type_get_envelope(st, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_STRUCT && ni == 3 && na == 2 && nd == 2, "struct envelope");
    MPI_CHECK(MPI_Type_get_contents(st, 16, 4, 4, ints, aints, types));
    CHECK(ints[1] == 1 && ints[2] == 2 && aints[1] == 8 && types[0] == MPI_CHAR, "struct contents");
    /* The derived constituent comes back as a handle equivalent to v; free it. */
    MPI_Aint lb, ext;
    MPI_CHECK(MPI_Type_get_extent(types[1], &lb, &ext));
    CHECK(ext == 20, "constituent extent %ld", (long)ext);
    MPI_CHECK(MPI_Type_free(&types[1]));
    MPI_CHECK(MPI_Type_create_resized(st, -4, 64, &rs));
    MPI_CHECK(MPI_Type_get_contents(rs, 16, 4, 4, ints, aints, types));
    CHECK(aints[0] == -4 && aints[1] == 64, "resized contents");
    if (types[0] != st) MPI_CHECK(MPI_Type_free(&types[0]));
    MPI_CHECK(MPI_Type_dup(v, &dup));
    MPI_CHECK(MPI_Type_get_envelope(dup, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_DUP && nd == 1, "dup envelope");

    /* Names. */
    char name[MPI_MAX_OBJECT_NAME];
    int nl;
    MPI_CHECK(MPI_Type_get_name(MPI_DOUBLE, name, &nl));
    CHECK(strcmp(name, "MPI_DOUBLE") == 0, "name of MPI_DOUBLE: %s", name);
    MPI_CHECK(MPI_Type_set_name(v, "my vector"));
    MPI_CHECK(MPI_Type_get_name(v, name, &nl));
    CHECK(strcmp(name, "my vector") == 0 && nl == 9, "set name: %s", name);

    /* Match size. */
    MPI_Datatype m;
    MPI_CHECK(MPI_Type_match_size(MPI_TYPECLASS_REAL, 8, &m));
    MPI_CHECK(MPI_Type_size(m, &sz));
    CHECK(sz == 8, "match_size real 8 gave size %d", sz);
    EXPECT_CLASS(MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 3, &m), MPI_ERR_ARG);

    /* darray: 8x6 block x cyclic over a 2x1 grid; the two halves cover everything once. */
    int gs[2] = {8, 6}, dist[2] = {MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_CYCLIC};
    int dargs[2] = {MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_DFLT_DARG}, ps[2] = {2, 1};
    int seen[48] = {0}, g[48];
    for (int k = 0; k < 48; k++) g[k] = k;
    for (int r = 0; r < 2; r++) {
        MPI_Datatype da;
        MPI_CHECK(MPI_Type_create_darray(2, r, 2, gs, dist, dargs, ps, MPI_ORDER_C, MPI_INT, &da));
        MPI_CHECK(MPI_Type_commit(&da));
        MPI_CHECK(MPI_Type_size(da, &sz));
        CHECK(sz == 24 * 4, "darray part size %d", sz);
        int out[24], p2 = 0;
        MPI_CHECK(MPI_Pack(g, 1, da, out, sizeof out, &p2, MPI_COMM_WORLD));
        for (int k = 0; k < 24; k++) {
            CHECK(out[k] / 6 / 4 == r, "element %d in rank %d's part", out[k], r);
            seen[out[k]]++;
        }
        MPI_CHECK(MPI_Type_free(&da));
    }
    for (int k = 0; k < 48; k++) CHECK(seen[k] == 1, "element %d seen %d times", k, seen[k]);

    MPI_Aint p = 1000;
    CHECK(MPI_Aint_add(p, 24) == 1024 && MPI_Aint_diff(p, 24) == 976, "Aint arithmetic");
    MPI_CHECK(MPI_Type_free(&dup));
    MPI_CHECK(MPI_Type_free(&rs));
    MPI_CHECK(MPI_Type_free(&st));
    MPI_CHECK(MPI_Type_free(&v));
    t_finish("pack");
    return 0;
}
