/* np: 1 2 */
/* MPI-IO error classes and error handlers: MPI_File_open's amode rules and file-system
 * errors (MPI_ERR_AMODE, MPI_ERR_NO_SUCH_FILE, MPI_ERR_FILE_EXISTS, MPI_ERR_ACCESS),
 * access-mode violations (MPI_ERR_READ_ONLY, MPI_ERR_ACCESS), bad views
 * (MPI_ERR_UNSUPPORTED_DATAREP, MPI_ERR_ARG as ROMIO), MPI_ERR_FILE for MPI_FILE_NULL; files
 * default to MPI_ERRORS_RETURN, inherit MPI_FILE_NULL's handler at open, and a handler set
 * on a file gets that file's errors. Also get_amode, get_group, get_info, c2f/f2c, the
 * "external32" view (big-endian bytes in the file) and MPI_Register_datarep. */
#include "common.h"
#include <sys/stat.h>

static char dir[256], path[300];
static int calls;

static int extent_fn(MPI_Datatype t, MPI_Aint *extent, void *extra)
{
    MPI_Aint lb;
    (void)extra;
    return MPI_Type_get_extent(t, &lb, extent);
}
static MPI_File last_fh;

static void on_file_error(MPI_File *fh, int *code, ...)
{
    calls++;
    last_fh = *fh;
    (void)code;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    if (t_rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/ferrite-io-XXXXXX");
        CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    }
    MPI_CHECK(MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD));
    snprintf(path, sizeof path, "%s/f", dir);
    MPI_File fh = MPI_FILE_NULL;
    MPI_Errhandler eh;
    MPI_CHECK(MPI_File_get_errhandler(MPI_FILE_NULL, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "MPI_FILE_NULL's default handler is %#x", (unsigned)eh);

    /* amode rules */
    EXPECT_CLASS(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh), MPI_ERR_AMODE);
    EXPECT_CLASS(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE, MPI_INFO_NULL, &fh), MPI_ERR_AMODE);
    EXPECT_CLASS(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY | MPI_MODE_CREATE, MPI_INFO_NULL, &fh), MPI_ERR_AMODE);
    EXPECT_CLASS(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR | MPI_MODE_SEQUENTIAL, MPI_INFO_NULL, &fh), MPI_ERR_AMODE);
    /* file system */
    EXPECT_CLASS(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), MPI_ERR_NO_SUCH_FILE);
    CHECK(fh == MPI_FILE_NULL, "a failed open set the handle");
    MPI_CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_WRONLY, MPI_INFO_NULL, &fh));
    int amode = 0;
    MPI_CHECK(MPI_File_get_amode(fh, &amode));
    CHECK(amode == (MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_WRONLY), "amode %#x", amode);
    MPI_CHECK(MPI_File_get_errhandler(fh, &eh));
    CHECK(eh == MPI_ERRORS_RETURN, "a new file's handler is %#x", (unsigned)eh);
    /* read on a write-only file */
    int buf[4] = {1, 2, 3, 4};
    MPI_Status st;
    EXPECT_CLASS(MPI_File_read_at(fh, 0, buf, 1, MPI_INT, &st), MPI_ERR_ACCESS);
    MPI_CHECK(MPI_File_write_at(fh, 4 * t_rank, buf, 1, MPI_INT, &st));
    /* Handles */
    MPI_Fint fi = MPI_File_c2f(fh);
    CHECK(MPI_File_f2c(fi) == fh, "MPI_File_f2c(MPI_File_c2f(fh)) != fh");
    CHECK(MPI_File_c2f(MPI_FILE_NULL) == 0 && MPI_File_f2c(0) == MPI_FILE_NULL, "null handle conversion");
    MPI_Group g, wg;
    int cmp = -1;
    MPI_CHECK(MPI_File_get_group(fh, &g));
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    MPI_CHECK(MPI_Group_compare(g, wg, &cmp));
    CHECK(cmp == MPI_IDENT, "file group compares %d", cmp);
    MPI_CHECK(MPI_Group_free(&g));
    MPI_CHECK(MPI_Group_free(&wg));
    MPI_Info info;
    char v[MPI_MAX_INFO_VAL + 1];
    int flag = 0;
    MPI_CHECK(MPI_File_get_info(fh, &info));
    MPI_CHECK(MPI_Info_get(info, "cb_buffer_size", MPI_MAX_INFO_VAL, v, &flag));
    CHECK(flag && atol(v) > 0, "get_info: cb_buffer_size missing");
    MPI_CHECK(MPI_Info_free(&info));
    /* bad views */
    EXPECT_CLASS(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "no-such-rep", MPI_INFO_NULL), MPI_ERR_UNSUPPORTED_DATAREP);
    EXPECT_CLASS(MPI_File_set_view(fh, 0, MPI_DOUBLE, MPI_INT, "native", MPI_INFO_NULL), MPI_ERR_ARG);
    MPI_CHECK(MPI_File_close(&fh));

    /* "external32": big-endian in the file, native in memory. */
    MPI_CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR, MPI_INFO_NULL, &fh));
    MPI_CHECK(MPI_File_set_view(fh, 64, MPI_INT, MPI_INT, "external32", MPI_INFO_NULL));
    MPI_Aint fext = 0;
    MPI_CHECK(MPI_File_get_type_extent(fh, MPI_INT, &fext));
    CHECK(fext == 4, "external32 extent of MPI_INT %ld", (long)fext);
    int ev = 0x01020304 + t_rank;
    MPI_CHECK(MPI_File_write_at_all(fh, t_rank, &ev, 1, MPI_INT, &st));
    int eback = 0;
    MPI_CHECK(MPI_File_read_at_all(fh, t_rank, &eback, 1, MPI_INT, &st));
    CHECK(eback == ev, "external32 read back %#x", eback);
    MPI_CHECK(MPI_File_set_view(fh, 64, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    unsigned char raw[4];
    MPI_CHECK(MPI_File_read_at(fh, 4 * t_rank, raw, 4, MPI_BYTE, &st));
    CHECK(raw[0] == 1 && raw[1] == 2 && raw[2] == 3 && raw[3] == 4 + t_rank,
          "external32 bytes %02x %02x %02x %02x", raw[0], raw[1], raw[2], raw[3]);
    /* A registered representation without conversion functions reads as native. */
    int rc0 = MPI_Register_datarep("ferrite-test-rep", MPI_CONVERSION_FN_NULL, MPI_CONVERSION_FN_NULL,
                                   extent_fn, NULL);
    CHECK(rc0 == MPI_SUCCESS, "MPI_Register_datarep: %s", t_errstr(rc0));
    EXPECT_CLASS(MPI_Register_datarep("ferrite-test-rep", MPI_CONVERSION_FN_NULL, MPI_CONVERSION_FN_NULL,
                                      extent_fn, NULL), MPI_ERR_DUP_DATAREP);
    if (t_expect_ferrite()) { /* ROMIO refuses user representations in views */
        MPI_CHECK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "ferrite-test-rep", MPI_INFO_NULL));
        MPI_CHECK(MPI_File_read_at(fh, t_rank, &eback, 1, MPI_INT, &st));
        CHECK(eback == 1, "user datarep read %d", eback);
    }
    MPI_CHECK(MPI_File_close(&fh));

    /* EXCL on an existing file; RDONLY writes */
    EXPECT_CLASS(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_RDWR, MPI_INFO_NULL, &fh), MPI_ERR_FILE_EXISTS);
    MPI_CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
    EXPECT_CLASS(MPI_File_write_at(fh, 0, buf, 1, MPI_INT, &st), MPI_ERR_READ_ONLY);
    EXPECT_CLASS(MPI_File_read_at(fh, -1, buf, 1, MPI_INT, &st), MPI_ERR_ARG);
    EXPECT_CLASS(MPI_File_read_at(fh, 0, buf, -1, MPI_INT, &st), MPI_ERR_COUNT);
    EXPECT_CLASS(MPI_File_seek(fh, -1, MPI_SEEK_SET), MPI_ERR_ARG);
    int back[2] = {0, 0};
    MPI_CHECK(MPI_File_read_at(fh, 0, back, 1, MPI_INT, &st));
    CHECK(back[0] == 1, "read back %d", back[0]);
    /* A handler on the file gets its errors, with the file's handle. */
    MPI_Errhandler mine;
    MPI_CHECK(MPI_File_create_errhandler(on_file_error, &mine));
    MPI_CHECK(MPI_File_set_errhandler(fh, mine));
    int rc = MPI_File_write_at(fh, 0, buf, 1, MPI_INT, &st);
    CHECK(rc != MPI_SUCCESS && calls == 1 && last_fh == fh, "file handler: rc %d, calls %d", rc, calls);
    MPI_CHECK(MPI_File_call_errhandler(fh, MPI_ERR_IO));
    CHECK(calls == 2, "MPI_File_call_errhandler: calls %d", calls);
    MPI_CHECK(MPI_File_close(&fh));
    /* Errors on MPI_FILE_NULL and of MPI_File_open go to MPI_FILE_NULL's handler. */
    EXPECT_CLASS(MPI_File_get_size(MPI_FILE_NULL, NULL), MPI_ERR_FILE);
    MPI_CHECK(MPI_File_set_errhandler(MPI_FILE_NULL, mine));
    rc = MPI_File_open(MPI_COMM_WORLD, "/nonexistent-dir/x", MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    CHECK(rc != MPI_SUCCESS && calls == 3 && last_fh == MPI_FILE_NULL, "open error: calls %d", calls);
    /* ... and a file opened now starts with that handler. */
    MPI_CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh));
    MPI_CHECK(MPI_File_get_errhandler(fh, &eh));
    CHECK(eh == mine, "new file's handler %#x, expected the one of MPI_FILE_NULL", (unsigned)eh);
    MPI_CHECK(MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_File_close(&fh));
    MPI_CHECK(MPI_Errhandler_free(&mine));
    /* Permissions (root ignores them). */
    if (geteuid() != 0) {
        if (t_rank == 0) CHECK(chmod(path, 0) == 0, "chmod");
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        EXPECT_CLASS(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh), MPI_ERR_ACCESS);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 0) {
        MPI_CHECK(MPI_File_delete(path, MPI_INFO_NULL));
        EXPECT_CLASS(MPI_File_delete(path, MPI_INFO_NULL), MPI_ERR_NO_SUCH_FILE);
        CHECK(rmdir(dir) == 0, "temp dir %s not empty", dir);
    }
    t_finish("io_errors");
    return 0;
}
