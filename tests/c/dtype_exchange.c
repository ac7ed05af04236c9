/* np: 2 4 */
/* Derived datatypes through point-to-point at eager and rendezvous sizes: a struct array,
 * a strided vector, a 3-D subarray and a resized (padded) type. The receiver checks every
 * byte, including that gaps between elements are left untouched. Also MPI_BOTTOM with
 * absolute addresses and MPI_Get_elements on a partial receive of a struct type. */
#include "common.h"

typedef struct {
    char c;
    double d;
    int i[3];
} rec_t;

static MPI_Datatype rec_type(void)
{
    rec_t r;
    int lens[3] = {1, 1, 3};
    MPI_Aint base, disps[3];
    MPI_Datatype types[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT}, t, tr;
    MPI_CHECK(MPI_Get_address(&r, &base));
    MPI_CHECK(MPI_Get_address(&r.c, &disps[0]));
    MPI_CHECK(MPI_Get_address(&r.d, &disps[1]));
    MPI_CHECK(MPI_Get_address(&r.i, &disps[2]));
    for (int k = 0; k < 3; k++) disps[k] -= base;
    MPI_CHECK(MPI_Type_create_struct(3, lens, disps, types, &t));
    MPI_CHECK(MPI_Type_create_resized(t, 0, sizeof(rec_t), &tr));
    MPI_CHECK(MPI_Type_free(&t));
    MPI_CHECK(MPI_Type_commit(&tr));
    return tr;
}

static void fill_rec(rec_t *r, long n, int seed)
{
    memset(r, 0, sizeof(rec_t) * n);
    for (long k = 0; k < n; k++) {
        r[k].c = (char)(k * 3 + seed);
        r[k].d = k * 0.5 + seed;
        for (int j = 0; j < 3; j++) r[k].i[j] = (int)(k * 7 + j + seed);
    }
}

static void structs(int peer, int sender, long n)
{
    MPI_Datatype t = rec_type();
    rec_t *buf = malloc(sizeof(rec_t) * n);
    if (sender) {
        fill_rec(buf, n, 5);
        MPI_CHECK(MPI_Send(buf, (int)n, t, peer, 1, MPI_COMM_WORLD));
    } else {
        memset(buf, 0, sizeof(rec_t) * n);
        MPI_Status st;
        MPI_CHECK(MPI_Recv(buf, (int)n, t, peer, 1, MPI_COMM_WORLD, &st));
        int cnt;
        MPI_CHECK(MPI_Get_count(&st, t, &cnt));
        CHECK(cnt == n, "struct count %d, expected %ld", cnt, n);
        for (long k = 0; k < n; k++) {
            CHECK(buf[k].c == (char)(k * 3 + 5) && buf[k].d == k * 0.5 + 5,
                  "struct %ld of %ld: c %d d %g", k, n, buf[k].c, buf[k].d);
            for (int j = 0; j < 3; j++)
                CHECK(buf[k].i[j] == (int)(k * 7 + j + 5), "struct %ld int %d", k, j);
        }
    }
    free(buf);
    MPI_CHECK(MPI_Type_free(&t));
}

/* Every other double of a column-major n x 4 matrix: vector(n, 1, 2) of doubles. */
static void vectors(int peer, int sender, long n)
{
    MPI_Datatype v;
    MPI_CHECK(MPI_Type_vector((int)n, 1, 2, MPI_DOUBLE, &v));
    MPI_CHECK(MPI_Type_commit(&v));
    double *buf = malloc(sizeof(double) * 2 * n);
    for (long k = 0; k < 2 * n; k++) buf[k] = sender ? (double)k : -1.0;
    if (sender) {
        MPI_CHECK(MPI_Send(buf, 1, v, peer, 2, MPI_COMM_WORLD));
    } else {
        MPI_CHECK(MPI_Recv(buf, 1, v, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (long k = 0; k < 2 * n; k++) {
            double want = (k % 2 == 0 && k < 2 * n - 1) ? (double)k : -1.0;
            CHECK(buf[k] == want, "vector of %ld: element %ld is %g, expected %g", n, k,
                  buf[k], want);
        }
    }
    free(buf);
    MPI_CHECK(MPI_Type_free(&v));
}

/* The inner block of a 3-D int array (C order), sent as a subarray, received contiguous. */
static void subarrays(int peer, int sender, int m)
{
    int sizes[3] = {m, m + 1, m + 2}, subs[3] = {m - 2, m - 1, m}, starts[3] = {1, 1, 1};
    MPI_Datatype s;
    MPI_CHECK(MPI_Type_create_subarray(3, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &s));
    MPI_CHECK(MPI_Type_commit(&s));
    long total = (long)sizes[0] * sizes[1] * sizes[2];
    long inner = (long)subs[0] * subs[1] * subs[2];
    if (sender) {
        int *a = malloc(sizeof(int) * total);
        for (long k = 0; k < total; k++) a[k] = (int)k;
        MPI_CHECK(MPI_Send(a, 1, s, peer, 3, MPI_COMM_WORLD));
        free(a);
    } else {
        int *b = malloc(sizeof(int) * inner);
        MPI_CHECK(MPI_Recv(b, (int)inner, MPI_INT, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        long k = 0;
        for (int x = 1; x < 1 + subs[0]; x++)
            for (int y = 1; y < 1 + subs[1]; y++)
                for (int z = 1; z < 1 + subs[2]; z++, k++) {
                    int want = (x * sizes[1] + y) * sizes[2] + z;
                    CHECK(b[k] == want, "subarray m=%d: element %ld is %d, expected %d", m, k,
                          b[k], want);
                }
        free(b);
    }
    MPI_CHECK(MPI_Type_free(&s));
}

/* Absolute addresses from MPI_BOTTOM: two separate variables as one struct. */
static void bottom(int peer, int sender)
{
    int a = sender ? 11 : 0;
    double b = sender ? 2.5 : 0;
    MPI_Aint disps[2];
    int lens[2] = {1, 1};
    MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE}, t;
    MPI_CHECK(MPI_Get_address(&a, &disps[0]));
    MPI_CHECK(MPI_Get_address(&b, &disps[1]));
    MPI_CHECK(MPI_Type_create_struct(2, lens, disps, types, &t));
    MPI_CHECK(MPI_Type_commit(&t));
    if (sender)
        MPI_CHECK(MPI_Send(MPI_BOTTOM, 1, t, peer, 4, MPI_COMM_WORLD));
    else {
        MPI_CHECK(MPI_Recv(MPI_BOTTOM, 1, t, peer, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(a == 11 && b == 2.5, "MPI_BOTTOM struct: got %d %g", a, b);
    }
    MPI_CHECK(MPI_Type_free(&t));
}

/* A partial receive of a struct: 2 whole {int, double} records plus one int. */
static void partial(int peer, int sender)
{
    MPI_Datatype t;
    int lens[2] = {1, 1};
    MPI_Aint disps[2] = {0, 8};
    MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE};
    MPI_CHECK(MPI_Type_create_struct(2, lens, disps, types, &t));
    MPI_CHECK(MPI_Type_commit(&t));
    if (sender) {
        char raw[28];
        memset(raw, 1, sizeof raw);
        MPI_CHECK(MPI_Send(raw, 28, MPI_BYTE, peer, 5, MPI_COMM_WORLD));
    } else {
        char buf[64];
        MPI_Status st;
        MPI_CHECK(MPI_Recv(buf, 4, t, peer, 5, MPI_COMM_WORLD, &st));
        int n = -7, c = -7;
        MPI_CHECK(MPI_Get_elements(&st, t, &n));
        MPI_CHECK(MPI_Get_count(&st, t, &c));
        CHECK(n == 5, "Get_elements of 28 bytes of {int,double}: %d, expected 5", n);
        CHECK(c == MPI_UNDEFINED, "Get_count of a partial struct: %d, expected MPI_UNDEFINED", c);
    }
    MPI_CHECK(MPI_Type_free(&t));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int peer = t_partner();
    /* Pairs (0,1), (2,3): the even rank sends. */
    if (peer != t_rank) {
        int sender = t_rank % 2 == 0;
        long sizes[] = {1, 10, 1000, 200000};
        for (int k = 0; k < 4; k++) {
            structs(peer, sender, sizes[k]);
            vectors(peer, sender, sizes[k]);
        }
        subarrays(peer, sender, 4);
        subarrays(peer, sender, 60);
        bottom(peer, sender);
        partial(peer, sender);
    }
    t_finish("dtype_exchange");
    return 0;
}
