/* np: 1 2 4 5 */
/* MPI-IO shared file pointer and atomic mode. Every rank appends R records with
 * MPI_File_write_shared (and iwrite_shared) at once: the file must hold all size*R records,
 * each exactly once, none overlapping. Then write_ordered / read_ordered (rank order),
 * seek_shared / get_position_shared, read_shared, MPI_MODE_APPEND, MPI_MODE_SEQUENTIAL and
 * atomic mode (concurrent strided writes of the same ints: each int ends up whole from one
 * rank, and with atomicity the whole region from one rank). */
#include "common.h"

#define R 50

struct rec {
    int rank, seq, check;
};

static char dir[256], path[300];

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    if (t_rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/ferrite-io-XXXXXX");
        CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    }
    MPI_CHECK(MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD));
    snprintf(path, sizeof path, "%s/shared", dir);

    MPI_Datatype rt;
    MPI_CHECK(MPI_Type_contiguous(3, MPI_INT, &rt));
    MPI_CHECK(MPI_Type_commit(&rt));
    MPI_File fh;
    MPI_Status st;
    MPI_CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                            MPI_INFO_NULL, &fh));
    MPI_CHECK(MPI_File_set_view(fh, 0, rt, rt, "native", MPI_INFO_NULL));

    /* Contention: everyone appends at once. */
    for (int i = 0; i < R; i++) {
        struct rec x = {t_rank, i, t_rank * 7 + i};
        if (i % 5 == 4) {
            MPI_Request rq;
            MPI_CHECK(MPI_File_iwrite_shared(fh, &x, 1, rt, &rq));
            MPI_CHECK(MPI_Wait(&rq, &st));
        } else {
            MPI_CHECK(MPI_File_write_shared(fh, &x, 1, rt, &st));
        }
        int n = -1;
        MPI_CHECK(MPI_Get_count(&st, rt, &n));
        CHECK(n == 1, "write_shared count %d", n);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_Offset sp = -1;
    MPI_CHECK(MPI_File_get_position_shared(fh, &sp));
    CHECK(sp == (MPI_Offset)R * t_size, "shared position %lld, expected %d", (long long)sp, R * t_size);
    int total = R * t_size;
    struct rec *all = malloc(sizeof(struct rec) * total);
    int *seen = calloc(total, sizeof(int));
    MPI_CHECK(MPI_File_read_at(fh, 0, all, total, rt, &st));
    for (int i = 0; i < total; i++) {
        struct rec x = all[i];
        CHECK(x.rank >= 0 && x.rank < t_size && x.seq >= 0 && x.seq < R && x.check == x.rank * 7 + x.seq,
              "record %d is torn or missing: {%d, %d, %d}", i, x.rank, x.seq, x.check);
        CHECK(!seen[x.rank * R + x.seq]++, "record {%d, %d} written twice", x.rank, x.seq);
    }
    /* Each rank's records appear in its own order. */
    int *last = malloc(sizeof(int) * t_size);
    for (int r = 0; r < t_size; r++) last[r] = -1;
    for (int i = 0; i < total; i++) {
        CHECK(all[i].seq > last[all[i].rank], "rank %d's records out of order", all[i].rank);
        last[all[i].rank] = all[i].seq;
    }

    /* Ordered: rank order from the shared pointer, which moves past all. */
    struct rec mine[3];
    int nmine = 1 + t_rank % 3;
    for (int i = 0; i < nmine; i++) mine[i] = (struct rec){t_rank, 1000 + i, -t_rank};
    MPI_CHECK(MPI_File_write_ordered(fh, mine, nmine, rt, &st));
    int before = 0, grand = 0;
    for (int r = 0; r < t_size; r++) {
        if (r < t_rank) before += 1 + r % 3;
        grand += 1 + r % 3;
    }
    MPI_CHECK(MPI_File_get_position_shared(fh, &sp));
    CHECK(sp == (MPI_Offset)total + grand, "shared position after ordered %lld", (long long)sp);
    struct rec back[3];
    MPI_CHECK(MPI_File_read_at(fh, total + before, back, nmine, rt, &st));
    for (int i = 0; i < nmine; i++)
        CHECK(back[i].rank == t_rank && back[i].seq == 1000 + i, "ordered record %d: {%d, %d}", i,
              back[i].rank, back[i].seq);
    /* read_ordered from a seek_shared. */
    MPI_CHECK(MPI_File_seek_shared(fh, total, MPI_SEEK_SET));
    memset(back, 0, sizeof back);
    MPI_CHECK(MPI_File_read_ordered_begin(fh, back, nmine, rt));
    MPI_CHECK(MPI_File_read_ordered_end(fh, back, &st));
    for (int i = 0; i < nmine; i++)
        CHECK(back[i].rank == t_rank && back[i].seq == 1000 + i, "read_ordered record %d", i);
    /* read_shared: with one rank at a time, the next record in the file. */
    MPI_CHECK(MPI_File_seek_shared(fh, 0, MPI_SEEK_SET));
    for (int r = 0; r < t_size; r++) {
        if (r == t_rank) {
            struct rec x;
            MPI_CHECK(MPI_File_read_shared(fh, &x, 1, rt, &st));
            CHECK(memcmp(&x, &all[r], sizeof x) == 0, "read_shared gave {%d, %d}", x.rank, x.seq);
        }
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    }
    MPI_CHECK(MPI_File_seek_shared(fh, -1, MPI_SEEK_END));
    MPI_CHECK(MPI_File_get_position_shared(fh, &sp));
    CHECK(sp == (MPI_Offset)total + grand - 1, "after seek_shared END: %lld", (long long)sp);

    /* Atomic mode: every rank writes ints 0..63 (stride 2, then the odd ones) with its
     * rank; with atomicity no mix of ranks inside one access. */
    MPI_CHECK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    MPI_CHECK(MPI_File_set_atomicity(fh, 1));
    int flag = 0;
    MPI_CHECK(MPI_File_get_atomicity(fh, &flag));
    CHECK(flag == 1, "atomicity flag %d", flag);
    MPI_Datatype two;
    MPI_CHECK(MPI_Type_vector(32, 1, 2, MPI_INT, &two));
    MPI_Datatype ft;
    MPI_CHECK(MPI_Type_create_resized(two, 0, 64 * sizeof(int), &ft));
    MPI_CHECK(MPI_Type_commit(&ft));
    int vals[64];
    for (int i = 0; i < 64; i++) vals[i] = t_rank + 1;
    for (int round = 0; round < 5; round++) {
        MPI_CHECK(MPI_File_set_view(fh, 0, MPI_INT, ft, "native", MPI_INFO_NULL));
        MPI_CHECK(MPI_File_write_at(fh, 0, vals, 64, MPI_INT, &st)); /* 2 tiles: ints 0,2,...,126 */
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
        MPI_CHECK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
        int got[128];
        MPI_CHECK(MPI_File_read_at(fh, 0, got, 128, MPI_INT, &st));
        for (int i = 2; i < 128; i += 2)
            CHECK(got[i] == got[0], "atomic write mixed ranks: int %d is %d, int 0 is %d", i, got[i], got[0]);
        MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    }
    MPI_CHECK(MPI_File_set_atomicity(fh, 0));
    MPI_CHECK(MPI_Type_free(&two));
    MPI_CHECK(MPI_Type_free(&ft));
    MPI_CHECK(MPI_File_close(&fh));

    /* DELETE_ON_CLOSE removed it; APPEND starts both pointers at the end. */
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    CHECK(access(path, F_OK) != 0, "MPI_MODE_DELETE_ON_CLOSE left %s", path);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 0) {
        FILE *f = fopen(path, "w");
        CHECK(f && fwrite("0123456789", 1, 10, f) == 10, "cannot write %s", path);
        fclose(f);
    }
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_WRONLY | MPI_MODE_APPEND, MPI_INFO_NULL, &fh));
    MPI_Offset p = -1;
    MPI_CHECK(MPI_File_get_position(fh, &p));
    CHECK(p == 10, "APPEND individual pointer %lld", (long long)p);
    MPI_CHECK(MPI_File_get_position_shared(fh, &p));
    CHECK(p == 10, "APPEND shared pointer %lld", (long long)p);
    char c = 'a' + t_rank;
    MPI_CHECK(MPI_File_write_ordered(fh, &c, 1, MPI_CHAR, &st));
    MPI_CHECK(MPI_File_close(&fh));
    /* SEQUENTIAL: shared pointer only. */
    MPI_CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_RDONLY | MPI_MODE_SEQUENTIAL, MPI_INFO_NULL, &fh));
    char buf[64] = {0};
    EXPECT_CLASS(MPI_File_read_at(fh, 0, buf, 1, MPI_CHAR, &st), MPI_ERR_UNSUPPORTED_OPERATION);
    MPI_CHECK(MPI_File_read_ordered(fh, buf, t_rank == 0 ? 10 + t_size : 0, MPI_CHAR, &st));
    if (t_rank == 0) {
        CHECK(memcmp(buf, "0123456789", 10) == 0, "APPEND clobbered the start: %.10s", buf);
        for (int r = 0; r < t_size; r++) CHECK(buf[10 + r] == 'a' + r, "ordered append [%d] = %c", r, buf[10 + r]);
    }
    MPI_CHECK(MPI_File_close(&fh));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 0) {
        MPI_CHECK(MPI_File_delete(path, MPI_INFO_NULL));
        CHECK(rmdir(dir) == 0, "temp dir %s not empty (side files left?)", dir);
    }
    MPI_CHECK(MPI_Type_free(&rt));
    free(all);
    free(seen);
    free(last);
    t_finish("io_shared");
    return 0;
}
