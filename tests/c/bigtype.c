/* np: 1 2 */
/* Large counts in the datatype engine: the _c constructors with counts and displacements
 * beyond an int build types whose size/extent are queried (never allocated); the int
 * queries say MPI_UNDEFINED; envelopes record large counts; a type with displacements far
 * beyond 2^32 (absolute addresses from MPI_BOTTOM) is exchanged; Get_count/Get_elements
 * and Pack_size on > 2^31 counts. */
#include "common.h"
#include <stdint.h>

#define G (MPI_Count)1073741824 /* 2^30 */

static void expect_size(MPI_Datatype t, MPI_Count size, MPI_Count lb, MPI_Count extent,
                        const char *what)
{
    MPI_Count s = -1, l = -1, e = -1;
    MPI_CHECK(MPI_Type_size_c(t, &s));
    CHECK(s == size, "%s: Type_size_c %lld, expected %lld", what, (long long)s, (long long)size);
    MPI_CHECK(MPI_Type_get_extent_c(t, &l, &e));
    CHECK(l == lb && e == extent, "%s: Type_get_extent_c (%lld, %lld), expected (%lld, %lld)",
          what, (long long)l, (long long)e, (long long)lb, (long long)extent);
    MPI_Aint al = -1, ae = -1;
    MPI_CHECK(MPI_Type_get_extent(t, &al, &ae));
    CHECK(al == lb && ae == extent, "%s: Type_get_extent (%ld, %ld)", what, (long)al, (long)ae);
    MPI_Count x = -1;
    MPI_CHECK(MPI_Type_size_x(t, &x));
    CHECK(x == size, "%s: Type_size_x %lld", what, (long long)x);
    int is = 0;
    MPI_CHECK(MPI_Type_size(t, &is));
    if (size > 2147483647)
        CHECK(is == MPI_UNDEFINED, "%s: Type_size of %lld bytes gave %d, not MPI_UNDEFINED", what,
              (long long)size, is);
    else
        CHECK(is == size, "%s: Type_size %d", what, is);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int ferrite = t_expect_ferrite();
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    /* Errors of calls without a communicator go to MPI_COMM_SELF's handler (MPI 4.1). */
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));

    /* contiguous: 2^32 + 3 chars. */
    MPI_Datatype c;
    MPI_CHECK(MPI_Type_contiguous_c(4 * G + 3, MPI_CHAR, &c));
    expect_size(c, 4 * G + 3, 0, 4 * G + 3, "contiguous_c(2^32+3, char)");
    MPI_Count tl = -1, te = -1;
    MPI_CHECK(MPI_Type_get_true_extent_c(c, &tl, &te));
    CHECK(tl == 0 && te == 4 * G + 3, "true extent (%lld, %lld)", (long long)tl, (long long)te);

    /* vector: 2^31+1 blocks of 2 ints, stride 3 ints. */
    MPI_Datatype v;
    MPI_CHECK(MPI_Type_vector_c(2 * G + 1, 2, 3, MPI_INT, &v));
    expect_size(v, (2 * G + 1) * 8, 0, ((2 * G) * 3 + 2) * 4, "vector_c");
    int ni = -1, na = -1, nd = -1, comb = -1;
    MPI_Count cni = -1, cna = -1, cnc = -1, cnd = -1;
    MPI_CHECK(MPI_Type_get_envelope_c(v, &cni, &cna, &cnc, &cnd, &comb));
    CHECK(comb == MPI_COMBINER_VECTOR && cni == 0 && cna == 0 && cnc == 3 && cnd == 1,
          "vector_c envelope: combiner %d, %lld ints, %lld addresses, %lld counts, %lld types",
          comb, (long long)cni, (long long)cna, (long long)cnc, (long long)cnd);
    MPI_Count counts[3] = {0};
    MPI_Datatype inner = MPI_DATATYPE_NULL;
    MPI_CHECK(MPI_Type_get_contents_c(v, 0, 0, 3, 1, NULL, NULL, counts, &inner));
    CHECK(counts[0] == 2 * G + 1 && counts[1] == 2 && counts[2] == 3 && inner == MPI_INT,
          "vector_c contents %lld %lld %lld", (long long)counts[0], (long long)counts[1],
          (long long)counts[2]);
    /* The int envelope cannot describe large counts. */
    int rc = MPI_Type_get_envelope(v, &ni, &na, &nd, &comb);
    if (ferrite) CHECK(t_class(rc) == MPI_ERR_VALUE_TOO_LARGE, "int envelope of a _c type: class %d", t_class(rc));

    /* An int-built type records ints, and its _c envelope has no large counts. */
    MPI_Datatype small;
    MPI_CHECK(MPI_Type_vector(2, 1, 3, MPI_INT, &small));
    MPI_CHECK(MPI_Type_get_envelope_c(small, &cni, &cna, &cnc, &cnd, &comb));
    CHECK(cni == 3 && cnc == 0 && cnd == 1, "int vector's _c envelope: %lld ints, %lld counts",
          (long long)cni, (long long)cnc);

    /* hvector: 3 blocks of 2^31 bytes, 2^33+8 bytes apart. */
    MPI_Datatype hv;
    MPI_CHECK(MPI_Type_create_hvector_c(3, 2 * G, 8 * G + 8, MPI_BYTE, &hv));
    expect_size(hv, 6 * G, 0, 2 * (8 * G + 8) + 2 * G, "hvector_c");

    /* indexed: blocks of 2^31 and 1 doubles at 0 and 2^32 doubles. */
    MPI_Count ilen[2] = {2 * G, 1}, idisp[2] = {0, 4 * G};
    MPI_Datatype ix;
    MPI_CHECK(MPI_Type_indexed_c(2, ilen, idisp, MPI_DOUBLE, &ix));
    expect_size(ix, (2 * G + 1) * 8, 0, (4 * G + 1) * 8, "indexed_c");
    MPI_Datatype ib;
    MPI_Count bdisp[2] = {4 * G, 0};
    MPI_CHECK(MPI_Type_create_indexed_block_c(2, G, bdisp, MPI_SHORT, &ib));
    expect_size(ib, 2 * G * 2, 0, 5 * G * 2, "indexed_block_c");

    /* struct: an int, then 2^32 chars at byte 8. */
    MPI_Count slen[2] = {1, 4 * G}, sdisp[2] = {0, 8};
    MPI_Datatype stypes[2] = {MPI_INT, MPI_CHAR}, st;
    MPI_CHECK(MPI_Type_create_struct_c(2, slen, sdisp, stypes, &st));
    expect_size(st, 4 * G + 4, 0, 4 * G + 8, "struct_c");

    /* subarray: a 2^20 x 2^13 array of ints (2^35 bytes), rows 5..6. */
    MPI_Count sz[2] = {1 << 20, 1 << 13}, sub[2] = {2, 1 << 13}, start[2] = {5, 0};
    MPI_Datatype sa;
    MPI_CHECK(MPI_Type_create_subarray_c(2, sz, sub, start, MPI_ORDER_C, MPI_INT, &sa));
    expect_size(sa, 2 * (1 << 13) * 4, 0, 32 * G, "subarray_c");
    MPI_Aint tlb = -1, tex = -1;
    MPI_CHECK(MPI_Type_get_true_extent(sa, &tlb, &tex));
    CHECK(tlb == 5 * (1 << 13) * 4 && tex == 2 * (1 << 13) * 4, "subarray_c true extent (%ld, %ld)",
          (long)tlb, (long)tex);

    /* darray_c: 2^33 chars dealt cyclic(3) over 4 processes; the parts add up. */
    MPI_Count gs[1] = {8 * G}, total = 0;
    int dist[1] = {MPI_DISTRIBUTE_CYCLIC}, darg[1] = {3}, psz[1] = {4};
    for (int r = 0; r < 4; r++) {
        MPI_Datatype da;
        MPI_CHECK(MPI_Type_create_darray_c(4, r, 1, gs, dist, darg, psz, MPI_ORDER_C, MPI_CHAR, &da));
        MPI_Count s = -1, l = -1, e = -1;
        MPI_CHECK(MPI_Type_size_c(da, &s));
        MPI_CHECK(MPI_Type_get_extent_c(da, &l, &e));
        CHECK(l == 0 && e == 8 * G, "darray_c rank %d: extent (%lld, %lld)", r, (long long)l,
              (long long)e);
        total += s;
        MPI_CHECK(MPI_Type_free(&da));
    }
    CHECK(total == 8 * G, "darray_c parts add up to %lld, expected %lld", (long long)total,
          (long long)(8 * G));

    /* resized: an int with a 2^33-byte extent. */
    MPI_Datatype rz;
    MPI_CHECK(MPI_Type_create_resized_c(MPI_INT, -G, 8 * G, &rz));
    expect_size(rz, 4, -G, 8 * G, "resized_c");

    /* A large count of a large-extent type: 2^20 of those span 2^53 bytes. */
    MPI_Datatype big;
    MPI_CHECK(MPI_Type_contiguous_c(1 << 20, rz, &big));
    expect_size(big, 4 << 20, -G, 8 * G * (1 << 20), "contiguous_c(2^20, resized_c)");

    /* Pack sizes. */
    MPI_Count ps = -1;
    MPI_CHECK(MPI_Type_commit(&c));
    MPI_CHECK(MPI_Pack_size_c(3, c, MPI_COMM_WORLD, &ps));
    CHECK(ps >= 3 * (4 * G + 3), "Pack_size_c %lld", (long long)ps);
    int ips = 0;
    rc = MPI_Pack_size(1, c, MPI_COMM_WORLD, &ips);
    CHECK(rc != MPI_SUCCESS || ips == MPI_UNDEFINED, "Pack_size of 2^32+3 bytes gave %d", ips);
    if (ferrite) CHECK(t_class(rc) == MPI_ERR_VALUE_TOO_LARGE, "Pack_size: class %d", t_class(rc));
    MPI_Count es = -1;
    MPI_CHECK(MPI_Pack_external_size_c("external32", 2, c, &es));
    /* Debian's MPICH 4.0 truncates this to 6 (the size modulo 2^32). */
    if (ferrite) CHECK(es == 2 * (4 * G + 3), "Pack_external_size_c %lld", (long long)es);

    /* Get_count / Get_elements of a status reporting 2^32+5 bytes. */
    MPI_Status status;
    memset(&status, 0, sizeof status);
    MPI_CHECK(MPI_Status_set_elements_x(&status, MPI_BYTE, 4 * G + 5));
    int n = 0;
    MPI_Count cn = 0;
    MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &n));
    CHECK(n == MPI_UNDEFINED, "Get_count of 2^32+5 bytes: %d", n);
    MPI_CHECK(MPI_Get_count_c(&status, MPI_BYTE, &cn));
    CHECK(cn == 4 * G + 5, "Get_count_c %lld", (long long)cn);
    MPI_CHECK(MPI_Get_elements(&status, MPI_BYTE, &n));
    CHECK(n == MPI_UNDEFINED, "Get_elements of 2^32+5 bytes: %d", n);
    MPI_CHECK(MPI_Get_elements_c(&status, MPI_BYTE, &cn));
    CHECK(cn == 4 * G + 5, "Get_elements_c %lld", (long long)cn);
    MPI_CHECK(MPI_Get_count_c(&status, c, &cn));
    CHECK(cn == MPI_UNDEFINED, "Get_count_c of 2^32+5 bytes in units of 2^32+3: %lld", (long long)cn);
    MPI_CHECK(MPI_Status_set_elements_x(&status, MPI_BYTE, 2 * (4 * G + 3)));
    MPI_CHECK(MPI_Get_count_c(&status, c, &cn));
    CHECK(cn == 2, "Get_count_c in units of 2^32+3 bytes: %lld", (long long)cn);

    /* Exchange through a type whose displacements are absolute addresses far apart (stack
     * and heap): hindexed_c from MPI_BOTTOM, blocks of 3 and 2 ints. */
    int on_stack[3];
    int *on_heap = malloc(2 * sizeof(int));
    MPI_Aint a0, a1;
    MPI_CHECK(MPI_Get_address(on_stack, &a0));
    MPI_CHECK(MPI_Get_address(on_heap, &a1));
    MPI_Count hlen[2] = {3, 2}, hdisp[2] = {a0, a1};
    MPI_Datatype far;
    MPI_CHECK(MPI_Type_create_hindexed_c(2, hlen, hdisp, MPI_INT, &far));
    MPI_CHECK(MPI_Type_commit(&far));
    for (int i = 0; i < 3; i++) on_stack[i] = t_rank * 100 + i;
    for (int i = 0; i < 2; i++) on_heap[i] = t_rank * 100 + 10 + i;
    int got[5] = {0};
    int peer = t_partner();
    MPI_CHECK(MPI_Sendrecv(MPI_BOTTOM, 1, far, peer, 7, got, 5, MPI_INT, peer, 7, MPI_COMM_WORLD,
                           &status));
    for (int i = 0; i < 5; i++) {
        int want = peer * 100 + (i < 3 ? i : 10 + i - 3);
        CHECK(got[i] == want, "far type: element %d is %d, expected %d", i, got[i], want);
    }
    /* And a count-1 send of a small type with a 2^33 extent. */
    MPI_CHECK(MPI_Type_commit(&rz));
    int one = t_rank + 1000, back = 0;
    MPI_CHECK(MPI_Sendrecv(&one, 1, rz, peer, 8, &back, 1, rz, peer, 8, MPI_COMM_WORLD, &status));
    CHECK(back == peer + 1000, "resized_c exchange: %d", back);
    MPI_CHECK(MPI_Get_count_c(&status, rz, &cn));
    CHECK(cn == 1, "Get_count_c of one resized_c element: %lld", (long long)cn);

    /* Arguments. */
    MPI_Datatype bad;
    rc = MPI_Type_contiguous_c(-1, MPI_INT, &bad);
    CHECK(rc != MPI_SUCCESS, "contiguous_c(-1) succeeded");
    if (ferrite) {
        CHECK(t_class(rc) == MPI_ERR_COUNT, "contiguous_c(-1): class %d", t_class(rc));
        /* 2^62 doubles: bounds beyond MPI_Aint. */
        EXPECT_CLASS(MPI_Type_contiguous_c(G * G * 4, MPI_DOUBLE, &bad), MPI_ERR_VALUE_TOO_LARGE);
    }

    MPI_Datatype all[] = {c, v, small, hv, ix, ib, st, sa, rz, big, far};
    for (unsigned i = 0; i < sizeof all / sizeof all[0]; i++) MPI_CHECK(MPI_Type_free(&all[i]));
    free(on_heap);
    t_finish("bigtype");
    return 0;
}
