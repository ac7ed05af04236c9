/* np: 1 2 3 4 */
/* MPI-IO data access: explicit offsets, individual file pointers, nonblocking and split
 * collective forms, the _c forms, with a contiguous view and a strided view (a vector
 * filetype interleaving the ranks), a strided memory type, and collective buffering forced
 * on (small cb_buffer_size: many two-phase rounds) and off. Everything written is read back
 * and checked, by the writer and through another view. Files live in a fresh temp dir. */
#include "common.h"

#define B 3  /* ints per block */
#define K 40 /* blocks per rank */

static char dir[256], path[300];

static int val(int rank, int i) { return rank * 100000 + i; }

static void check_count(MPI_Status *st, MPI_Datatype t, int want, const char *what)
{
    int n = -1;
    MPI_CHECK(MPI_Get_count(st, t, &n));
    CHECK(n == want, "%s: MPI_Get_count gave %d, expected %d", what, n, want);
}

/* The strided view: rank r sees blocks r, r+size, r+2*size... of B ints. */
static void set_strided_view(MPI_File fh)
{
    MPI_Datatype vec, ft;
    MPI_CHECK(MPI_Type_vector(K, B, B * t_size, MPI_INT, &vec));
    MPI_CHECK(MPI_Type_create_resized(vec, 0, (MPI_Aint)sizeof(int) * B * t_size * K, &ft));
    MPI_CHECK(MPI_Type_commit(&ft));
    MPI_CHECK(MPI_File_set_view(fh, (MPI_Offset)sizeof(int) * B * t_rank, MPI_INT, ft, "native",
                                MPI_INFO_NULL));
    MPI_CHECK(MPI_Type_free(&vec));
    MPI_CHECK(MPI_Type_free(&ft));
}

/* Rank 0 reads the whole file with the default view and checks the interleaving. */
static void check_interleaved(MPI_File fh, int salt)
{
    MPI_CHECK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    if (t_rank == 0) {
        int n = B * K * t_size;
        int *all = malloc(sizeof(int) * n);
        MPI_Status st;
        MPI_CHECK(MPI_File_read_at(fh, 0, all, n, MPI_INT, &st));
        check_count(&st, MPI_INT, n, "read_at whole file");
        for (int i = 0; i < n; i++) {
            int blk = i / B, r = blk % t_size, j = (blk / t_size) * B + i % B;
            CHECK(all[i] == val(r, j) + salt, "file int %d is %d, expected %d (rank %d elt %d)", i,
                  all[i], val(r, j) + salt, r, j);
        }
        free(all);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
}

static void strided(MPI_Info info, int salt)
{
    MPI_File fh;
    int n = B * K;
    int *w = malloc(sizeof(int) * n), *r = malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++) w[i] = val(t_rank, i) + salt;
    MPI_Status st;
    MPI_CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh));

    /* Collective write with the individual pointer, in two halves. */
    set_strided_view(fh);
    MPI_CHECK(MPI_File_write_all(fh, w, n / 2, MPI_INT, &st));
    check_count(&st, MPI_INT, n / 2, "write_all");
    MPI_Offset pos = -1;
    MPI_CHECK(MPI_File_get_position(fh, &pos));
    CHECK(pos == n / 2, "position %lld after write_all, expected %d", (long long)pos, n / 2);
    MPI_CHECK(MPI_File_write_all(fh, w + n / 2, n - n / 2, MPI_INT, &st));
    MPI_Offset byte = -1;
    MPI_CHECK(MPI_File_get_byte_offset(fh, B + 1, &byte));
    CHECK(byte == (MPI_Offset)sizeof(int) * (B * t_rank + B * t_size + 1),
          "byte offset of etype %d: %lld", B + 1, (long long)byte);
    MPI_CHECK(MPI_File_sync(fh));
    check_interleaved(fh, salt);

    /* Collective read back at explicit offsets. */
    set_strided_view(fh);
    memset(r, 0, sizeof(int) * n);
    MPI_CHECK(MPI_File_read_at_all(fh, 0, r, n, MPI_INT, &st));
    check_count(&st, MPI_INT, n, "read_at_all");
    for (int i = 0; i < n; i++) CHECK(r[i] == w[i], "read_at_all [%d] = %d, expected %d", i, r[i], w[i]);

    /* Independent strided read (data sieving) from the middle. */
    memset(r, 0, sizeof(int) * n);
    MPI_CHECK(MPI_File_read_at(fh, 5, r, n - 5, MPI_INT, &st));
    check_count(&st, MPI_INT, n - 5, "read_at");
    for (int i = 0; i < n - 5; i++) CHECK(r[i] == w[i + 5], "read_at [%d] = %d", i, r[i]);

    /* Independent strided write (data sieving read-modify-write) of every element + 1,
     * each rank in turn's blocks interleaved with the others': the holes must survive. */
    for (int i = 0; i < n; i++) w[i] += 1;
    MPI_CHECK(MPI_File_write_at(fh, 0, w, n, MPI_INT, &st));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    check_interleaved(fh, salt + 1);

    /* Split collective and nonblocking collective forms. */
    set_strided_view(fh);
    for (int i = 0; i < n; i++) w[i] += 1;
    MPI_CHECK(MPI_File_write_at_all_begin(fh, 0, w, n, MPI_INT));
    MPI_CHECK(MPI_File_write_at_all_end(fh, w, &st));
    check_count(&st, MPI_INT, n, "write_at_all_end");
    MPI_Request rq;
    memset(r, 0, sizeof(int) * n);
    MPI_CHECK(MPI_File_iread_at_all(fh, 0, r, n, MPI_INT, &rq));
    MPI_CHECK(MPI_Wait(&rq, &st));
    check_count(&st, MPI_INT, n, "iread_at_all");
    CHECK(rq == MPI_REQUEST_NULL, "request not freed by MPI_Wait");
    for (int i = 0; i < n; i++) CHECK(r[i] == w[i], "iread_at_all [%d] = %d", i, r[i]);
    memset(r, 0, sizeof(int) * n);
    MPI_CHECK(MPI_File_seek(fh, 0, MPI_SEEK_SET));
    MPI_CHECK(MPI_File_read_all_begin(fh, r, n, MPI_INT));
    MPI_CHECK(MPI_File_read_all_end(fh, r, &st));
    for (int i = 0; i < n; i++) CHECK(r[i] == w[i], "read_all_begin [%d] = %d", i, r[i]);

    /* A strided memory type: every other int of a 2n buffer. */
    int *wide = calloc(2 * n, sizeof(int));
    MPI_Datatype every2;
    MPI_CHECK(MPI_Type_vector(n, 1, 2, MPI_INT, &every2));
    MPI_CHECK(MPI_Type_commit(&every2));
    MPI_CHECK(MPI_File_read_at_all(fh, 0, wide, 1, every2, &st));
    check_count(&st, every2, 1, "read_at_all (vector memory type)");
    for (int i = 0; i < n; i++) {
        CHECK(wide[2 * i] == w[i], "vector memory [%d] = %d", i, wide[2 * i]);
        CHECK(wide[2 * i + 1] == 0, "vector memory gap %d written", i);
    }
    MPI_CHECK(MPI_Type_free(&every2));
    free(wide);
    MPI_CHECK(MPI_File_close(&fh));
    CHECK(fh == MPI_FILE_NULL, "MPI_File_close did not set MPI_FILE_NULL");
    free(w);
    free(r);
}

static void contiguous(void)
{
    MPI_File fh;
    enum { N = 1000 };
    static int w[N], r[N];
    MPI_Status st;
    MPI_Offset base = (MPI_Offset)t_rank * N;
    MPI_CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh));
    MPI_CHECK(MPI_File_set_size(fh, 0));
    MPI_CHECK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL));
    for (int i = 0; i < N; i++) w[i] = val(t_rank, i);
    /* Explicit offsets, blocking, in etypes (ints). */
    MPI_CHECK(MPI_File_write_at(fh, base, w, N / 2, MPI_INT, &st));
    check_count(&st, MPI_INT, N / 2, "write_at");
    /* Nonblocking, _c form. */
    MPI_Request rq;
    MPI_CHECK(MPI_File_iwrite_at_c(fh, base + N / 2, w + N / 2, N - N / 2, MPI_INT, &rq));
    int flag = 0;
    while (!flag) MPI_CHECK(MPI_Test(&rq, &flag, &st));
    check_count(&st, MPI_INT, N - N / 2, "iwrite_at_c");
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_Offset size = -1;
    MPI_CHECK(MPI_File_get_size(fh, &size));
    CHECK(size == (MPI_Offset)sizeof(int) * N * t_size, "size %lld", (long long)size);
    /* The neighbour's data, through the individual pointer. */
    int nb = (t_rank + 1) % t_size;
    MPI_CHECK(MPI_File_seek(fh, (MPI_Offset)nb * N, MPI_SEEK_SET));
    MPI_CHECK(MPI_File_read(fh, r, N / 4, MPI_INT, &st));
    MPI_CHECK(MPI_File_read_c(fh, r + N / 4, N - N / 4, MPI_INT, &st));
    for (int i = 0; i < N; i++) CHECK(r[i] == val(nb, i), "neighbour [%d] = %d", i, r[i]);
    MPI_Offset pos = -1;
    MPI_CHECK(MPI_File_get_position(fh, &pos));
    CHECK(pos == (MPI_Offset)(nb + 1) * N, "position %lld", (long long)pos);
    /* MPI_SEEK_CUR and MPI_SEEK_END. */
    MPI_CHECK(MPI_File_seek(fh, -10, MPI_SEEK_CUR));
    MPI_CHECK(MPI_File_get_position(fh, &pos));
    CHECK(pos == (MPI_Offset)(nb + 1) * N - 10, "after SEEK_CUR %lld", (long long)pos);
    MPI_CHECK(MPI_File_seek(fh, -1, MPI_SEEK_END));
    MPI_CHECK(MPI_File_get_position(fh, &pos));
    CHECK(pos == (MPI_Offset)N * t_size - 1, "after SEEK_END %lld", (long long)pos);
    /* Reading past the end: a short count. */
    MPI_CHECK(MPI_File_read(fh, r, 5, MPI_INT, &st));
    check_count(&st, MPI_INT, 1, "read at the end");
    CHECK(r[0] == val(t_size - 1, N - 1), "last int %d", r[0]);
    /* Collective contiguous write/read with the individual pointer (nonblocking). */
    MPI_CHECK(MPI_File_seek(fh, base, MPI_SEEK_SET));
    for (int i = 0; i < N; i++) w[i] = -val(t_rank, i);
    MPI_CHECK(MPI_File_iwrite_all(fh, w, N, MPI_INT, &rq));
    MPI_CHECK(MPI_Wait(&rq, &st));
    MPI_CHECK(MPI_File_seek(fh, base, MPI_SEEK_SET));
    MPI_CHECK(MPI_File_read_all_c(fh, r, N, MPI_INT, &st));
    for (int i = 0; i < N; i++) CHECK(r[i] == w[i], "read_all [%d] = %d", i, r[i]);
    /* The view as set. */
    MPI_Offset disp;
    MPI_Datatype et, ft;
    char rep[MPI_MAX_DATAREP_STRING];
    MPI_CHECK(MPI_File_get_view(fh, &disp, &et, &ft, rep));
    CHECK(disp == 0 && et == MPI_INT && ft == MPI_INT && strcmp(rep, "native") == 0,
          "get_view: %lld %#x %#x %s", (long long)disp, (unsigned)et, (unsigned)ft, rep);
    MPI_Aint ext = 0;
    MPI_CHECK(MPI_File_get_type_extent(fh, MPI_DOUBLE, &ext));
    CHECK(ext == sizeof(double), "type extent %ld", (long)ext);
    MPI_CHECK(MPI_File_close(&fh));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    if (t_rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/ferrite-io-XXXXXX");
        CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    }
    MPI_CHECK(MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD));
    snprintf(path, sizeof path, "%s/data", dir);

    contiguous();

    MPI_Info info;
    MPI_CHECK(MPI_Info_create(&info));
    strided(MPI_INFO_NULL, 0); /* automatic collective buffering */
    MPI_CHECK(MPI_Info_set(info, "romio_cb_write", "enable"));
    MPI_CHECK(MPI_Info_set(info, "romio_cb_read", "enable"));
    MPI_CHECK(MPI_Info_set(info, "cb_buffer_size", "100"));
    MPI_CHECK(MPI_Info_set(info, "cb_nodes", "2"));
    MPI_CHECK(MPI_Info_set(info, "ind_wr_buffer_size", "64"));
    strided(info, 10); /* forced two-phase, many rounds, 2 aggregators */
    MPI_CHECK(MPI_Info_set(info, "romio_cb_write", "disable"));
    MPI_CHECK(MPI_Info_set(info, "romio_cb_read", "disable"));
    MPI_CHECK(MPI_Info_set(info, "romio_ds_write", "disable"));
    MPI_CHECK(MPI_Info_set(info, "romio_ds_read", "disable"));
    strided(info, 20); /* no collective buffering, no sieving */
    MPI_CHECK(MPI_Info_free(&info));

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 0) {
        MPI_CHECK(MPI_File_delete(path, MPI_INFO_NULL));
        CHECK(rmdir(dir) == 0, "temp dir %s not empty after close and delete", dir);
    }
    t_finish("io_access");
    return 0;
}
