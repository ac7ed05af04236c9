/* np: 1 2 */
/* Datatype bounds at the edges: a type resized to a negative extent, repeated (its copies
 * go downwards in memory: MPICH's lbub test), sent and received with its data checked; and
 * an indexed type with an empty block at the largest displacement (an empty block places
 * nothing, so it cannot overflow the bounds: MPICH's indexed_misc). */
#include "common.h"
#include <stdint.h>

static void bounds(MPI_Datatype t, int size, MPI_Aint lb, MPI_Aint extent, MPI_Aint tlb, MPI_Aint textent,
                   const char *what)
{
    int s;
    MPI_Aint l, e, tl, te;
    MPI_CHECK(MPI_Type_size(t, &s));
    MPI_CHECK(MPI_Type_get_extent(t, &l, &e));
    MPI_CHECK(MPI_Type_get_true_extent(t, &tl, &te));
    CHECK(s == size && l == lb && e == extent && tl == tlb && te == textent,
          "%s: size %d lb %ld extent %ld true_lb %ld true_extent %ld, expected %d %ld %ld %ld %ld", what, s,
          (long)l, (long)e, (long)tl, (long)te, size, (long)lb, (long)extent, (long)tlb, (long)textent);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_Datatype four, neg, evil;
    MPI_CHECK(MPI_Type_contiguous(4, MPI_BYTE, &four));
    /* { (LB,6), 4*(BYTE,0), (UB,-3) }: extent -9 */
    MPI_CHECK(MPI_Type_create_resized(four, 6, -9, &neg));
    bounds(neg, 4, 6, -9, 0, 4, "resized(4 bytes, lb 6, extent -9)");
    /* Three copies at 0, -9, -18. */
    MPI_CHECK(MPI_Type_contiguous(3, neg, &evil));
    MPI_CHECK(MPI_Type_commit(&evil));
    bounds(evil, 12, -12, 9, -18, 22, "contiguous(3, negative extent)");

    /* Data: the bytes at [-18, -14), [-9, -5), [0, 4) of a buffer, in that type-map order
     * (copy 0 first: offsets 0, -9, -18). */
    unsigned char mem[64], got[64], packed[12];
    unsigned char *base = mem + 32, *gbase = got + 32;
    for (int i = 0; i < 64; i++) mem[i] = (unsigned char)(i * 7 + 1);
    int pos = 0;
    MPI_CHECK(MPI_Pack(base, 1, evil, packed, sizeof packed, &pos, MPI_COMM_WORLD));
    CHECK(pos == 12, "packed %d bytes", pos);
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 4; b++)
            CHECK(packed[4 * k + b] == base[-9 * k + b], "packed byte %d of copy %d", b, k);
    memset(got, 0xEE, sizeof got);
    int peer = t_partner();
    MPI_CHECK(MPI_Sendrecv(base, 1, evil, peer, 1, gbase, 1, evil, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    for (int i = -32; i < 32; i++) {
        int in = (i >= 0 && i < 4) || (i >= -9 && i < -5) || (i >= -18 && i < -14);
        unsigned char want = in ? base[i] : 0xEE;
        CHECK(gbase[i] == want, "received byte at offset %d is %#x, expected %#x", i, gbase[i], want);
    }
    MPI_CHECK(MPI_Type_free(&evil));
    MPI_CHECK(MPI_Type_free(&neg));
    MPI_CHECK(MPI_Type_free(&four));

    /* An empty block at the largest displacement does not count. */
    int lens[3] = {1, 0, 2};
    MPI_Aint disps[3] = {0, (MPI_Aint)(INTPTR_MAX), 8};
    MPI_Datatype h;
    MPI_CHECK(MPI_Type_create_hindexed(3, lens, disps, MPI_INT, &h));
    bounds(h, 12, 0, 16, 0, 16, "hindexed with an empty block at MPI_Aint's maximum");
    MPI_CHECK(MPI_Type_free(&h));
    t_finish("dtype_bounds");
    return 0;
}
