/* np: 1 2 4 16 */
/* Derived datatypes: a strided matrix column (Type_vector) sent and received into a
 * contiguous buffer and into another column, checked element by element with everything
 * outside the column untouched; three adjacent columns with a resized column type
 * (count 3); a large strided vector beyond eager sizes. */
#include "common.h"

#define R 10
#define C 8

static int val(int who, int i, int j) { return who * 10000 + i * 100 + j; }

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int peer = t_partner();
    int a[R][C], b[R][C], col[R * 3];
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) a[i][j] = val(t_rank, i, j);
    MPI_Datatype column, colr;
    MPI_CHECK(MPI_Type_vector(R, 1, C, MPI_INT, &column));
    MPI_CHECK(MPI_Type_commit(&column));
    MPI_Aint lb, extent;
    MPI_CHECK(MPI_Type_get_extent(column, &lb, &extent));
    CHECK(lb == 0 && extent == (MPI_Aint)(((R - 1) * C + 1) * sizeof(int)),
          "column type lb %ld extent %ld", (long)lb, (long)extent);
    MPI_Request rq;
    MPI_Status st;

    /* Column 3 -> contiguous. */
    for (int i = 0; i < R; i++) col[i] = -1;
    MPI_CHECK(MPI_Isend(&a[0][3], 1, column, peer, 1, MPI_COMM_WORLD, &rq));
    MPI_CHECK(MPI_Recv(col, R, MPI_INT, peer, 1, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    for (int i = 0; i < R; i++)
        CHECK(col[i] == val(peer, i, 3), "column as contiguous: element %d is %d, expected %d",
              i, col[i], val(peer, i, 3));

    /* Column 3 -> column 5 of a matrix of sentinels. */
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) b[i][j] = -7;
    MPI_CHECK(MPI_Isend(&a[0][3], 1, column, peer, 2, MPI_COMM_WORLD, &rq));
    MPI_CHECK(MPI_Recv(&b[0][5], 1, column, peer, 2, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    int e = -1;
    MPI_CHECK(MPI_Get_elements(&st, column, &e));
    CHECK(e == R, "Get_elements(column) = %d", e);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            int want = j == 5 ? val(peer, i, 3) : -7;
            CHECK(b[i][j] == want, "column into column: b[%d][%d] = %d, expected %d", i, j,
                  b[i][j], want);
        }

    /* Columns 2, 3, 4 with count 3 of a column resized to the extent of one int. */
    MPI_CHECK(MPI_Type_create_resized(column, 0, sizeof(int), &colr));
    MPI_CHECK(MPI_Type_commit(&colr));
    MPI_CHECK(MPI_Isend(&a[0][2], 3, colr, peer, 3, MPI_COMM_WORLD, &rq));
    MPI_CHECK(MPI_Recv(col, 3 * R, MPI_INT, peer, 3, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < R; i++)
            CHECK(col[k * R + i] == val(peer, i, 2 + k), "resized columns: column %d row %d "
                  "is %d", 2 + k, i, col[k * R + i]);
    /* And back: contiguous into three columns. */
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) b[i][j] = -7;
    for (int i = 0; i < 3 * R; i++) col[i] = t_rank * 1000 + i;
    MPI_CHECK(MPI_Isend(col, 3 * R, MPI_INT, peer, 4, MPI_COMM_WORLD, &rq));
    MPI_CHECK(MPI_Recv(&b[0][1], 3, colr, peer, 4, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    for (int i = 0; i < R; i++)
        for (int j = 0; j < C; j++) {
            int want = (j >= 1 && j <= 3) ? peer * 1000 + (j - 1) * R + i : -7;
            CHECK(b[i][j] == want, "contiguous into columns: b[%d][%d] = %d, expected %d", i, j,
                  b[i][j], want);
        }

    /* Large: every third double of a 3 x 100000 buffer. */
    int n = 100000;
    double *big = malloc(sizeof(double) * 3 * n), *got = malloc(sizeof(double) * 3 * n);
    for (int i = 0; i < 3 * n; i++) big[i] = t_rank + i * 0.5;
    for (int i = 0; i < 3 * n; i++) got[i] = -1.0;
    MPI_Datatype strided;
    MPI_CHECK(MPI_Type_vector(n, 1, 3, MPI_DOUBLE, &strided));
    MPI_CHECK(MPI_Type_commit(&strided));
    MPI_CHECK(MPI_Isend(big + 1, 1, strided, peer, 5, MPI_COMM_WORLD, &rq));
    MPI_CHECK(MPI_Recv(got + 2, 1, strided, peer, 5, MPI_COMM_WORLD, &st));
    MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    for (int i = 0; i < 3 * n; i++) {
        double want = i % 3 == 2 ? peer + (i - 1) * 0.5 : -1.0;
        CHECK(got[i] == want, "large strided: element %d is %g, expected %g", i, got[i], want);
    }
    MPI_CHECK(MPI_Type_free(&strided));
    MPI_CHECK(MPI_Type_free(&colr));
    MPI_CHECK(MPI_Type_free(&column));
    free(big);
    free(got);
    t_finish("vector");
    return 0;
}
