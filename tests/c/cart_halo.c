/* np: 1 2 4 16 */
/* Jacobi-style halo exchange on a periodic 2-D Cartesian grid (MPI_Dims_create,
 * MPI_Cart_create/shift/coords/rank, column halos through a vector datatype), checked
 * against the same computation done serially on the whole grid by every rank. Also
 * MPI_Cart_sub rows/columns and the topology queries. */
#include "common.h"

#define NX 6 /* local interior size */
#define NY 5
#define STEPS 4

static double init(int gx, int gy) { return (gx * 31 + gy * 17) % 23; }

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int dims[2] = {0, 0}, periods[2] = {1, 1}, coords[2];
    MPI_CHECK(MPI_Dims_create(t_size, 2, dims));
    CHECK(dims[0] * dims[1] == t_size && dims[0] >= dims[1], "Dims_create: %d x %d", dims[0],
          dims[1]);
    MPI_Comm cart;
    MPI_CHECK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart));
    int rank, status, nd;
    MPI_CHECK(MPI_Comm_rank(cart, &rank));
    MPI_CHECK(MPI_Topo_test(cart, &status));
    CHECK(status == MPI_CART, "Topo_test: %d", status);
    MPI_CHECK(MPI_Cartdim_get(cart, &nd));
    CHECK(nd == 2, "Cartdim_get: %d", nd);
    MPI_CHECK(MPI_Cart_coords(cart, rank, 2, coords));
    int back;
    MPI_CHECK(MPI_Cart_rank(cart, coords, &back));
    CHECK(back == rank, "Cart_rank(Cart_coords(%d)) = %d", rank, back);

    /* Local grid with a one-cell halo, row-major [NX+2][NY+2]; x along dim 0. */
    int W = NY + 2;
    double *u = calloc((NX + 2) * W, sizeof(double)), *v = calloc((NX + 2) * W, sizeof(double));
    for (int i = 1; i <= NX; i++)
        for (int j = 1; j <= NY; j++) u[i * W + j] = init(coords[0] * NX + i - 1, coords[1] * NY + j - 1);
    MPI_Datatype col;
    MPI_CHECK(MPI_Type_vector(NX, 1, W, MPI_DOUBLE, &col));
    MPI_CHECK(MPI_Type_commit(&col));
    int up, down, left, right;
    MPI_CHECK(MPI_Cart_shift(cart, 0, 1, &up, &down));
    MPI_CHECK(MPI_Cart_shift(cart, 1, 1, &left, &right));
    for (int s = 0; s < STEPS; s++) {
        /* rows (contiguous) along dim 0, columns (vector type) along dim 1 */
        MPI_CHECK(MPI_Sendrecv(&u[NX * W + 1], NY, MPI_DOUBLE, down, 1, &u[0 * W + 1], NY,
                               MPI_DOUBLE, up, 1, cart, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Sendrecv(&u[1 * W + 1], NY, MPI_DOUBLE, up, 2, &u[(NX + 1) * W + 1], NY,
                               MPI_DOUBLE, down, 2, cart, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Sendrecv(&u[1 * W + NY], 1, col, right, 3, &u[1 * W + 0], 1, col, left, 3,
                               cart, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Sendrecv(&u[1 * W + 1], 1, col, left, 4, &u[1 * W + NY + 1], 1, col, right,
                               4, cart, MPI_STATUS_IGNORE));
        for (int i = 1; i <= NX; i++)
            for (int j = 1; j <= NY; j++)
                v[i * W + j] = 0.25 * (u[(i - 1) * W + j] + u[(i + 1) * W + j] + u[i * W + j - 1] +
                                       u[i * W + j + 1]);
        double *t = u; u = v; v = t;
    }
    /* Serial reference on the whole periodic grid. */
    int GX = dims[0] * NX, GY = dims[1] * NY;
    double *g = malloc(sizeof(double) * GX * GY), *h = malloc(sizeof(double) * GX * GY);
    for (int x = 0; x < GX; x++)
        for (int y = 0; y < GY; y++) g[x * GY + y] = init(x, y);
    for (int s = 0; s < STEPS; s++) {
        for (int x = 0; x < GX; x++)
            for (int y = 0; y < GY; y++)
                h[x * GY + y] = 0.25 * (g[((x + GX - 1) % GX) * GY + y] + g[((x + 1) % GX) * GY + y] +
                                        g[x * GY + (y + GY - 1) % GY] + g[x * GY + (y + 1) % GY]);
        double *t = g; g = h; h = t;
    }
    for (int i = 1; i <= NX; i++)
        for (int j = 1; j <= NY; j++) {
            int x = coords[0] * NX + i - 1, y = coords[1] * NY + j - 1;
            CHECK(u[i * W + j] == g[x * GY + y], "cell (%d,%d): %g, serial %g", x, y, u[i * W + j],
                  g[x * GY + y]);
        }
    /* Rows of the grid: Cart_sub keeping dim 1. */
    int remain[2] = {0, 1}, rs, rr, sdims[1], sper[1], sco[1];
    MPI_Comm row;
    MPI_CHECK(MPI_Cart_sub(cart, remain, &row));
    MPI_CHECK(MPI_Comm_size(row, &rs));
    MPI_CHECK(MPI_Comm_rank(row, &rr));
    CHECK(rs == dims[1] && rr == coords[1], "Cart_sub row: size %d rank %d", rs, rr);
    MPI_CHECK(MPI_Cart_get(row, 1, sdims, sper, sco));
    CHECK(sdims[0] == dims[1] && sper[0] == 1 && sco[0] == coords[1], "Cart_get on the row");
    int sum = 0;
    MPI_CHECK(MPI_Sendrecv(&coords[0], 1, MPI_INT, (rr + 1) % rs, 9, &sum, 1, MPI_INT,
                           (rr + rs - 1) % rs, 9, row, MPI_STATUS_IGNORE));
    CHECK(sum == coords[0], "row partner has x %d, expected %d", sum, coords[0]);
    MPI_CHECK(MPI_Comm_free(&row));
    MPI_CHECK(MPI_Type_free(&col));
    MPI_CHECK(MPI_Comm_free(&cart));
    free(u); free(v); free(g); free(h);

    /* A graph topology: a ring, with neighbour queries. */
    int *index = malloc(sizeof(int) * t_size), *edges = malloc(sizeof(int) * 2 * t_size);
    for (int k = 0; k < t_size; k++) {
        index[k] = 2 * (k + 1);
        edges[2 * k] = (k + t_size - 1) % t_size;
        edges[2 * k + 1] = (k + 1) % t_size;
    }
    MPI_Comm gr;
    MPI_CHECK(MPI_Graph_create(MPI_COMM_WORLD, t_size, index, edges, 0, &gr));
    int nn, ne, nb[2];
    MPI_CHECK(MPI_Graphdims_get(gr, &nn, &ne));
    CHECK(nn == t_size && ne == 2 * t_size, "Graphdims_get %d %d", nn, ne);
    MPI_CHECK(MPI_Graph_neighbors_count(gr, t_rank, &nn));
    MPI_CHECK(MPI_Graph_neighbors(gr, t_rank, 2, nb));
    CHECK(nn == 2 && nb[0] == (t_rank + t_size - 1) % t_size && nb[1] == (t_rank + 1) % t_size,
          "graph neighbours");
    MPI_CHECK(MPI_Topo_test(gr, &status));
    CHECK(status == MPI_GRAPH, "Topo_test on a graph: %d", status);
    MPI_CHECK(MPI_Comm_free(&gr));
    /* Distributed graph: every rank names its edge to the next rank. */
    int src = t_rank, deg = 1, dst = (t_rank + 1) % t_size, w = t_rank + 100;
    MPI_Comm dg;
    MPI_CHECK(MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &src, &deg, &dst, &w, MPI_INFO_NULL, 0, &dg));
    int indeg, outdeg, weighted, s_in, w_in, d_out, w_out;
    MPI_CHECK(MPI_Dist_graph_neighbors_count(dg, &indeg, &outdeg, &weighted));
    CHECK(indeg == 1 && outdeg == 1 && weighted, "dist graph counts %d %d %d", indeg, outdeg, weighted);
    MPI_CHECK(MPI_Dist_graph_neighbors(dg, 1, &s_in, &w_in, 1, &d_out, &w_out));
    int p = (t_rank + t_size - 1) % t_size;
    CHECK(s_in == p && w_in == p + 100 && d_out == dst && w_out == w, "dist graph edges");
    MPI_CHECK(MPI_Comm_free(&dg));
    free(index); free(edges);
    t_finish("cart_halo");
    return 0;
}
