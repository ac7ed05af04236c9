/* Parallel HDF5 on MPI-IO: every rank writes its rows of a 2-D dataset with a collective
 * hyperslab write (H5FD_MPIO_COLLECTIVE), then a strided selection (every other row of
 * one column) collectively, closes, reopens and reads the whole dataset back collectively;
 * every value is
 * checked. Built with Debian's h5pcc.mpich (against MPICH), run on Ferrite through
 * LD_LIBRARY_PATH. Prints "phdf5: ok" on rank 0. */
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define COLS 24
#define ROWS_PER 7

#define CHECK(c, ...)                                                                          \
    do {                                                                                       \
        if (!(c)) {                                                                            \
            fprintf(stderr, "FAILED: rank %d line %d: ", rank, __LINE__);                      \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                      \
        }                                                                                      \
    } while (0)

static int value(int r, int c) { return r * 1000 + c; }

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(argc > 1, "usage: phdf5 FILE");
    const char *name = argv[1];
    hsize_t dims[2] = {(hsize_t)ROWS_PER * size, COLS};

    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    CHECK(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL) >= 0, "H5Pset_fapl_mpio");
    hid_t file = H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(file >= 0, "H5Fcreate %s", name);
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dset = H5Dcreate2(file, "grid", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(dset >= 0, "H5Dcreate2");

    /* My rows, collectively. */
    hsize_t start[2] = {(hsize_t)ROWS_PER * rank, 0}, count[2] = {ROWS_PER, COLS};
    int *rows = malloc(sizeof(int) * ROWS_PER * COLS);
    for (int r = 0; r < ROWS_PER; r++)
        for (int c = 0; c < COLS; c++) rows[r * COLS + c] = value(ROWS_PER * rank + r, c);
    hid_t fsel = H5Dget_space(dset);
    H5Sselect_hyperslab(fsel, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t mem = H5Screate_simple(2, count, NULL);
    hid_t xfer = H5Pcreate(H5P_DATASET_XFER);
    CHECK(H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE) >= 0, "H5Pset_dxpl_mpio");
    CHECK(H5Dwrite(dset, H5T_NATIVE_INT, mem, fsel, xfer, rows) >= 0, "collective H5Dwrite");
    H5Sclose(mem);
    H5Sclose(fsel);

    /* A strided selection, collectively: every rank rewrites column (rank % COLS) of
     * every other row of its block with -value. */
    hsize_t s2[2] = {(hsize_t)ROWS_PER * rank, (hsize_t)(rank % COLS)}, stride[2] = {2, 1};
    hsize_t c2[2] = {(ROWS_PER + 1) / 2, 1};
    int col[ROWS_PER];
    for (int k = 0; k < (ROWS_PER + 1) / 2; k++) col[k] = -value(ROWS_PER * rank + 2 * k, rank % COLS);
    fsel = H5Dget_space(dset);
    H5Sselect_hyperslab(fsel, H5S_SELECT_SET, s2, stride, c2, NULL);
    mem = H5Screate_simple(2, c2, NULL);
    CHECK(H5Dwrite(dset, H5T_NATIVE_INT, mem, fsel, xfer, col) >= 0, "strided H5Dwrite");
    H5Sclose(mem);
    H5Sclose(fsel);
    H5Dclose(dset);
    H5Sclose(space);
    H5Fclose(file);

    /* Reopen and read everything back, collectively. */
    file = H5Fopen(name, H5F_ACC_RDONLY, fapl);
    CHECK(file >= 0, "H5Fopen");
    dset = H5Dopen2(file, "grid", H5P_DEFAULT);
    int *all = malloc(sizeof(int) * dims[0] * dims[1]);
    CHECK(H5Dread(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, xfer, all) >= 0, "H5Dread");
    for (hsize_t r = 0; r < dims[0]; r++)
        for (int c = 0; c < COLS; c++) {
            int owner = (int)(r / ROWS_PER), want = value((int)r, c);
            if (c == owner % COLS && (r - (hsize_t)owner * ROWS_PER) % 2 == 0) want = -want;
            CHECK(all[r * COLS + c] == want, "[%d][%d] = %d, expected %d", (int)r, c, all[r * COLS + c], want);
        }
    H5Dclose(dset);
    H5Pclose(xfer);
    H5Pclose(fapl);
    H5Fclose(file);
    free(all);
    free(rows);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("phdf5: ok (%d ranks)\n", size);
    MPI_Finalize();
    return 0;
}
