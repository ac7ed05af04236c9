/* np: 2 3 4 */
/* Nonblocking collective MPI-IO (MPI_File_iwrite_all & co) completes in the background:
 * - rank 0 starts iwrite_all, then sends rank 1 the message rank 1 waits for before it
 *   starts its own (a deadlock if the call completed inside), and waits for rank 1's
 *   reply sent after rank 1 started; the others just start it. Two-phase is forced on
 *   (strided view, small cb_buffer_size: many rounds, 2 aggregators), then checked by
 *   reading back through iread_all polled with MPI_Test and a strided memory type; the same
 *   with a split collective (write_at_all_begin/end);
 * - several collective accesses outstanding on one file take effect and complete in the
 *   order started (write, overwrite, read: the read sees the overwrite). MPI leaves that
 *   order open (ROMIO's read sees the first write); Ferrite documents it (io/engine.rs);
 * - a request freed with MPI_Request_free still completes (seen by a later read and after
 *   close and reopen); the _c forms; a short read past end of file;
 * - an argument error on one rank makes every rank's collective access fail with its class,
 *   blocking or not, instead of leaving the others waiting. */
#include "common.h"

#define B 2  /* ints per block */
#define K 50 /* blocks per rank */
#define N (B * K)

static char dir[256], path[300];

static int val(int rank, int i, int salt) { return salt * 1000000 + rank * 10000 + i; }

static MPI_Info hints(void)
{
    MPI_Info info;
    MPI_CHECK(MPI_Info_create(&info));
    MPI_CHECK(MPI_Info_set(info, "romio_cb_write", "enable"));
    MPI_CHECK(MPI_Info_set(info, "romio_cb_read", "enable"));
    MPI_CHECK(MPI_Info_set(info, "cb_buffer_size", "64"));
    MPI_CHECK(MPI_Info_set(info, "cb_nodes", "2"));
    return info;
}

/* Rank r sees blocks r, r+size, ... of B ints. */
static void strided_view(MPI_File fh)
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

static void fill(int *w, int salt)
{
    for (int i = 0; i < N; i++)
        w[i] = val(t_rank, i, salt);
}

static void check(const int *r, int salt, const char *what)
{
    for (int i = 0; i < N; i++)
        CHECK(r[i] == val(t_rank, i, salt), "%s: int %d is %d, expected %d", what, i, r[i],
              val(t_rank, i, salt));
}

static void check_count(MPI_Status *st, int want, const char *what)
{
    int n = -1;
    MPI_CHECK(MPI_Get_count(st, MPI_INT, &n));
    CHECK(n == want, "%s: MPI_Get_count gave %d, expected %d", what, n, want);
}

static void background(MPI_File fh)
{
    int w[N], r[2 * N], token = 42;
    MPI_Request req;
    MPI_Status st;
    fill(w, 1);
    if (t_rank == 0) {
        MPI_CHECK(MPI_File_iwrite_all(fh, w, N, MPI_INT, &req));
        MPI_CHECK(MPI_Send(&token, 1, MPI_INT, 1, 7, MPI_COMM_WORLD));
        MPI_CHECK(MPI_Recv(&token, 1, MPI_INT, 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    } else if (t_rank == 1) {
        MPI_CHECK(MPI_Recv(&token, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_File_iwrite_all(fh, w, N, MPI_INT, &req));
        MPI_CHECK(MPI_Send(&token, 1, MPI_INT, 0, 8, MPI_COMM_WORLD));
    } else {
        MPI_CHECK(MPI_File_iwrite_all(fh, w, N, MPI_INT, &req));
    }
    MPI_CHECK(MPI_Wait(&req, &st));
    check_count(&st, N, "iwrite_all");

    /* The same order of calls with a split collective: Ferrite's _begin starts it in the
     * background (MPI lets _begin block until every rank has begun, as ROMIO's does). */
    if (!t_expect_ferrite()) {
    } else if (t_rank == 0) {
        MPI_CHECK(MPI_File_write_at_all_begin(fh, 0, w, N, MPI_INT));
        MPI_CHECK(MPI_Send(&token, 1, MPI_INT, 1, 9, MPI_COMM_WORLD));
    } else if (t_rank == 1) {
        MPI_CHECK(MPI_Recv(&token, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_File_write_at_all_begin(fh, 0, w, N, MPI_INT));
    } else {
        MPI_CHECK(MPI_File_write_at_all_begin(fh, 0, w, N, MPI_INT));
    }
    if (t_expect_ferrite()) {
        MPI_CHECK(MPI_File_write_at_all_end(fh, w, &st));
        check_count(&st, N, "write_at_all_end");
    }

    /* Read back into every other int (a strided memory type), polling with MPI_Test. */
    MPI_Datatype every2;
    MPI_CHECK(MPI_Type_vector(N, 1, 2, MPI_INT, &every2));
    MPI_CHECK(MPI_Type_commit(&every2));
    for (int i = 0; i < 2 * N; i++)
        r[i] = -1;
    MPI_CHECK(MPI_File_seek(fh, 0, MPI_SEEK_SET));
    MPI_CHECK(MPI_File_iread_all(fh, r, 1, every2, &req));
    int flag = 0;
    while (!flag)
        MPI_CHECK(MPI_Test(&req, &flag, &st));
    CHECK(req == MPI_REQUEST_NULL, "MPI_Test left the completed request");
    check_count(&st, N, "iread_all");
    for (int i = 0; i < N; i++) {
        CHECK(r[2 * i] == val(t_rank, i, 1), "iread_all: int %d is %d, expected %d", i, r[2 * i],
              val(t_rank, i, 1));
        CHECK(r[2 * i + 1] == -1, "iread_all wrote between the strided type's ints");
    }
    MPI_CHECK(MPI_Type_free(&every2));
}

/* Write, overwrite and read outstanding together: they take effect in the order started. */
static void in_order(MPI_File fh)
{
    int w1[N], w2[N], r[N];
    MPI_Request q[3];
    MPI_Status st;
    fill(w1, 2);
    fill(w2, 3);
    MPI_CHECK(MPI_File_iwrite_at_all(fh, 0, w1, N, MPI_INT, &q[0]));
    MPI_CHECK(MPI_File_iwrite_at_all_c(fh, 0, w2, N, MPI_INT, &q[1]));
    MPI_CHECK(MPI_File_iread_at_all(fh, 0, r, N, MPI_INT, &q[2]));
    MPI_CHECK(MPI_Wait(&q[2], &st));
    check_count(&st, N, "iread_at_all after two writes");
    int ordered = t_expect_ferrite(); /* a Ferrite property: MPI leaves the order open */
    if (ordered)
        check(r, 3, "iread_at_all after iwrite_at_all and iwrite_at_all_c");
    for (int k = 0; k < 2 && ordered; k++) {
        int flag = 0;
        MPI_CHECK(MPI_Request_get_status(q[k], &flag, MPI_STATUS_IGNORE));
        CHECK(flag, "access %d started before the read had not completed when it did", k);
    }
    MPI_Status sts[2];
    MPI_CHECK(MPI_Waitall(2, q, sts));
}

/* A freed request's write completes: a later collective read sees it, and so does a read
 * after close (which lets it finish) and reopen. */
static void freed(MPI_File *fh, MPI_Info info)
{
    int w[N], r[N];
    MPI_Request q;
    MPI_Status st;
    fill(w, 4);
    MPI_CHECK(MPI_File_iwrite_at_all(*fh, 0, w, N, MPI_INT, &q));
    MPI_CHECK(MPI_Request_free(&q));
    MPI_CHECK(MPI_File_read_at_all(*fh, 0, r, N, MPI_INT, &st));
    if (t_expect_ferrite()) /* in order, as above */
        check(r, 4, "read_at_all after a freed iwrite_at_all");
    fill(w, 5);
    MPI_CHECK(MPI_File_iwrite_at_all(*fh, 0, w, N, MPI_INT, &q));
    MPI_CHECK(MPI_Request_free(&q));
    MPI_CHECK(MPI_File_close(fh));
    MPI_CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDWR, info, fh));
    strided_view(*fh);
    MPI_Count got = -1;
    MPI_CHECK(MPI_File_iread_at_all_c(*fh, 0, r, N, MPI_INT, &q));
    MPI_CHECK(MPI_Wait(&q, &st));
    MPI_CHECK(MPI_Get_count_c(&st, MPI_INT, &got));
    CHECK(got == N, "iread_at_all_c count %lld", (long long)got);
    if (t_expect_ferrite()) /* Ferrite's close lets freed accesses finish first */
        check(r, 5, "read after a freed iwrite_at_all and close");

    /* Past the end: everyone asks for 2 N ints from etype N on; N remain per rank. */
    int big[2 * N];
    MPI_CHECK(MPI_File_iread_at_all(*fh, N - N / 2, big, N, MPI_INT, &q));
    MPI_CHECK(MPI_Wait(&q, &st));
    if (t_expect_ferrite()) /* ROMIO's collective reads report the count asked for */
        check_count(&st, N / 2, "iread_at_all past end of file");
}

/* Rank 1 passes a negative count: every rank fails with MPI_ERR_COUNT. */
static void agreed_errors(MPI_File fh)
{
    if (!t_expect_ferrite()) /* a Ferrite property: MPI does not require the agreement */
        return;
    int w[N], cls = -1;
    MPI_Request q;
    fill(w, 6);
    int count = t_rank == 1 ? -1 : N;
    int rc = MPI_File_write_at_all(fh, 0, w, count, MPI_INT, MPI_STATUS_IGNORE);
    CHECK(rc != MPI_SUCCESS, "write_at_all with a bad count on rank 1 succeeded");
    MPI_CHECK(MPI_Error_class(rc, &cls));
    CHECK(cls == MPI_ERR_COUNT, "write_at_all: class %d, expected MPI_ERR_COUNT", cls);

    rc = MPI_File_iwrite_at_all(fh, 0, w, count, MPI_INT, &q);
    if (t_rank == 1) {
        CHECK(rc != MPI_SUCCESS, "iwrite_at_all with a negative count succeeded");
    } else {
        MPI_CHECK(rc);
        rc = MPI_Wait(&q, MPI_STATUS_IGNORE);
        CHECK(rc != MPI_SUCCESS, "iwrite_at_all with a bad count on rank 1 succeeded here");
    }
    MPI_CHECK(MPI_Error_class(rc, &cls));
    CHECK(cls == MPI_ERR_COUNT, "iwrite_at_all: class %d, expected MPI_ERR_COUNT", cls);
    /* The file still works for everyone afterwards. */
    int r[N];
    fill(w, 7);
    MPI_CHECK(MPI_File_write_at_all(fh, 0, w, N, MPI_INT, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_File_read_at_all(fh, 0, r, N, MPI_INT, MPI_STATUS_IGNORE));
    check(r, 7, "read after the failed accesses");
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    if (t_rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/ferrite-ionb-XXXXXX");
        CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    }
    MPI_CHECK(MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD));
    snprintf(path, sizeof path, "%s/data", dir);

    MPI_Info info = hints();
    MPI_File fh;
    MPI_CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, info, &fh));
    strided_view(fh);
    background(fh);
    in_order(fh);
    freed(&fh, info);
    agreed_errors(fh);
    MPI_CHECK(MPI_File_close(&fh));
    MPI_CHECK(MPI_Info_free(&info));

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 0) {
        MPI_CHECK(MPI_File_delete(path, MPI_INFO_NULL));
        CHECK(rmdir(dir) == 0, "temp dir %s not empty", dir);
    }
    t_finish("io_nonblocking");
    return 0;
}
