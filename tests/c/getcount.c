/* np: 1 2 4 16 */
/* Get_count and Get_elements: with MPI_INT, MPI_BYTE, a Type_contiguous of 4 ints and a
 * Type_vector of 3 blocks of 2 ints; a message that is not a whole number of the receive
 * type gives MPI_UNDEFINED from Get_count but the exact number of basic elements from
 * Get_elements. */
#include "common.h"

static void expect(MPI_Status *st, MPI_Datatype t, int count, int elements, const char *what)
{
    int c = -2, e = -2;
    MPI_CHECK(MPI_Get_count(st, t, &c));
    MPI_CHECK(MPI_Get_elements(st, t, &e));
    CHECK(c == count, "%s: Get_count %d, expected %d", what, c, count);
    CHECK(e == elements, "%s: Get_elements %d, expected %d", what, e, elements);
    MPI_Count ex = -2;
    MPI_CHECK(MPI_Get_elements_x(st, t, &ex));
    CHECK(ex == elements, "%s: Get_elements_x %lld, expected %d", what, (long long)ex, elements);
}

static void xfer(int *s, int ns, int *r, int rn, MPI_Datatype rt, MPI_Status *st, int peer)
{
    MPI_Request rq;
    MPI_CHECK(MPI_Isend(s, ns, MPI_INT, peer, ns, MPI_COMM_WORLD, &rq));
    MPI_CHECK(MPI_Recv(r, rn, rt, peer, ns, MPI_COMM_WORLD, st));
    MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int peer = t_partner();
    int s[64], r[256];
    for (int i = 0; i < 64; i++) s[i] = i + 1000 * peer;
    MPI_Datatype c4, v32;
    MPI_CHECK(MPI_Type_contiguous(4, MPI_INT, &c4));
    MPI_CHECK(MPI_Type_commit(&c4));
    MPI_CHECK(MPI_Type_vector(3, 2, 5, MPI_INT, &v32));
    MPI_CHECK(MPI_Type_commit(&v32));
    int sz = -1;
    MPI_CHECK(MPI_Type_size(v32, &sz));
    CHECK(sz == 6 * (int)sizeof(int), "Type_size(vector 3x2) = %d", sz);
    MPI_Status st;

    xfer(s, 10, r, 64, MPI_INT, &st, peer);
    expect(&st, MPI_INT, 10, 10, "10 ints as MPI_INT");
    expect(&st, MPI_BYTE, 40, 40, "10 ints as MPI_BYTE");
    expect(&st, c4, MPI_UNDEFINED, 10, "10 ints as contiguous(4)");
    expect(&st, v32, MPI_UNDEFINED, 10, "10 ints as vector(3,2,5)");

    xfer(s, 12, r, 16, c4, &st, peer);
    expect(&st, c4, 3, 12, "12 ints into contiguous(4)");
    /* Each rank sends i + 1000 * (its partner), so we receive i + 1000 * (our rank). */
    for (int i = 0; i < 12; i++)
        CHECK(r[i] == i + 1000 * t_rank, "contig element %d is %d", i, r[i]);

    for (int i = 0; i < 256; i++) r[i] = -1;
    xfer(s, 8, r, 4, v32, &st, peer);
    expect(&st, v32, MPI_UNDEFINED, 8, "8 ints into vector(3,2,5)");
    expect(&st, MPI_INT, 8, 8, "8 ints into vector, as MPI_INT");
    /* Layout: vector instances have extent 12 ints (stride 5, 3 blocks, last block 2):
     * instance 0 at 0: [0,1] [5,6] [10,11]; instance 1 at 12: [12,13] [17,18] ... */
    int where[8] = {0, 1, 5, 6, 10, 11, 12, 13};
    for (int k = 0; k < 8; k++)
        CHECK(r[where[k]] == k + 1000 * t_rank, "vector receive: element %d at %d is %d", k,
              where[k], r[where[k]]);
    CHECK(r[2] == -1 && r[14] == -1 && r[17] == -1, "vector receive wrote outside its blocks");

    xfer(s, 12, r, 4, v32, &st, peer);
    expect(&st, v32, 2, 12, "12 ints into vector(3,2,5)");

    xfer(s, 0, r, 4, c4, &st, peer);
    expect(&st, c4, 0, 0, "empty message");
    expect(&st, MPI_INT, 0, 0, "empty message as MPI_INT");

    MPI_CHECK(MPI_Type_free(&c4));
    MPI_CHECK(MPI_Type_free(&v32));
    t_finish("getcount");
    return 0;
}
