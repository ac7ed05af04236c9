/* np: 1 2 */
/* User data representations (MPI_Register_datarep, MPI 4.1 section 14.5.3):
 * - "ferrite-swap" stores ints byte-swapped through its conversion functions: a collective
 *   write of more ints than one conversion chunk (several calls, positions checked to follow
 *   each other), the raw bytes read back through a "native" view, and reads back through
 *   the representation into a strided memory type (the callbacks find items by position in
 *   the tiled type), blocking and nonblocking (the conversion runs before MPI_Wait returns);
 * - the callbacks call MPI themselves (no library lock is held while they run);
 * - "ferrite-wide" stores each int in 8 bytes (its extent function): the file holds 8 bytes
 *   per int and MPI_File_get_type_extent says so; the _c registration and conversion
 *   functions; MPI_CONVERSION_FN_NULL for reads returns the file's bytes as they are;
 * - errors: a conversion function's error is MPI_ERR_CONVERSION, a NULL conversion with
 *   file extents other than native sizes MPI_ERR_CONVERSION, a NULL extent function
 *   MPI_ERR_ARG, a memory type mixing predefined types MPI_ERR_UNSUPPORTED_OPERATION. */
#include "common.h"
#include <stdint.h>

#define N 40000 /* ints per rank: 160 KB, more than one 64 KiB conversion chunk */

static char dir[256], path[300];

struct counters {
    int writes, reads, extents, fail;
    MPI_Offset next; /* the position the next call of an access must start at */
};
static struct counters swapc, widec;

static int val(int rank, int i) { return rank * 1000003 + i * 7 + 1; }

static uint32_t bswap32(uint32_t x) { return __builtin_bswap32(x); }

/* Offset in the user's buffer of data item `i` of `datatype` tiled: MPI_INT items are
 * consecutive; every other type here is the strided one (one int every 8 bytes). */
static MPI_Aint item_offset(MPI_Datatype datatype, MPI_Offset i)
{
    int size;
    MPI_Type_size(datatype, &size); /* an MPI call inside the callback */
    MPI_Aint lb, ext;
    MPI_Type_get_extent(datatype, &lb, &ext);
    if (datatype == MPI_INT)
        return (MPI_Aint)i * 4;
    /* size 8 bytes (2 ints), extent 16: item i at 8 i */
    CHECK(size == 8 && ext == 16, "unexpected memory type in a conversion: size %d extent %ld",
          size, (long)ext);
    return (MPI_Aint)i * 8;
}

static int swap_write(void *userbuf, MPI_Datatype datatype, int count, void *filebuf,
                      MPI_Offset position, void *extra)
{
    struct counters *c = extra;
    c->writes++;
    if (c->fail)
        return MPI_ERR_OTHER;
    CHECK(position == c->next, "write conversion at position %lld, expected %lld",
          (long long)position, (long long)c->next);
    c->next = position + count;
    for (int k = 0; k < count; k++) {
        uint32_t v;
        memcpy(&v, (char *)userbuf + item_offset(datatype, position + k), 4);
        v = bswap32(v);
        memcpy((char *)filebuf + 4 * k, &v, 4);
    }
    return MPI_SUCCESS;
}

static int swap_read(void *userbuf, MPI_Datatype datatype, int count, void *filebuf,
                     MPI_Offset position, void *extra)
{
    struct counters *c = extra;
    c->reads++;
    CHECK(position == c->next, "read conversion at position %lld, expected %lld",
          (long long)position, (long long)c->next);
    c->next = position + count;
    for (int k = 0; k < count; k++) {
        uint32_t v;
        memcpy(&v, (char *)filebuf + 4 * k, 4);
        v = bswap32(v);
        memcpy((char *)userbuf + item_offset(datatype, position + k), &v, 4);
    }
    return MPI_SUCCESS;
}

static int native_extent(MPI_Datatype t, MPI_Aint *extent, void *extra)
{
    struct counters *c = extra;
    c->extents++;
    int size;
    MPI_Type_size(t, &size);
    *extent = size;
    return MPI_SUCCESS;
}

/* "ferrite-wide": an int is 8 bytes in the file (sign-extended, little-endian). */
static int wide_write(void *userbuf, MPI_Datatype datatype, MPI_Count count, void *filebuf,
                      MPI_Offset position, void *extra)
{
    (void)extra;
    CHECK(datatype == MPI_INT, "wide: memory type is not MPI_INT");
    for (MPI_Count k = 0; k < count; k++) {
        int64_t v = ((int *)userbuf)[position + k];
        memcpy((char *)filebuf + 8 * k, &v, 8);
    }
    return MPI_SUCCESS;
}

static int wide_read(void *userbuf, MPI_Datatype datatype, MPI_Count count, void *filebuf,
                     MPI_Offset position, void *extra)
{
    (void)datatype;
    (void)extra;
    for (MPI_Count k = 0; k < count; k++) {
        int64_t v;
        memcpy(&v, (char *)filebuf + 8 * k, 8);
        ((int *)userbuf)[position + k] = (int)v;
    }
    return MPI_SUCCESS;
}

static int wide_extent(MPI_Datatype t, MPI_Aint *extent, void *extra)
{
    struct counters *c = extra;
    c->extents++;
    CHECK(t == MPI_INT, "wide: extent asked for a type other than MPI_INT");
    *extent = 8;
    return MPI_SUCCESS;
}

static void swap_rep(void)
{
    int *w = malloc(sizeof(int) * N), *r = malloc(sizeof(int) * 2 * N);
    MPI_File fh;
    MPI_Status st;
    for (int i = 0; i < N; i++)
        w[i] = val(t_rank, i);
    MPI_CHECK(MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL,
                            &fh));
    MPI_CHECK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "ferrite-swap", MPI_INFO_NULL));
    CHECK(swapc.extents >= 1, "set_view did not ask the extent function");
    MPI_Aint fext = 0;
    MPI_CHECK(MPI_File_get_type_extent(fh, MPI_INT, &fext));
    CHECK(fext == 4, "swap: file extent of MPI_INT %ld", (long)fext);

    swapc.next = 0;
    MPI_CHECK(MPI_File_write_at_all(fh, (MPI_Offset)t_rank * N, w, N, MPI_INT, &st));
    CHECK(swapc.writes >= 3, "%d write conversion calls for %d ints", swapc.writes, N);
    CHECK(swapc.next == N, "write conversions covered %lld items", (long long)swapc.next);
    int n = -1;
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(n == N, "write_at_all count %d", n);

    /* The file holds the ints byte-swapped. */
    MPI_CHECK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    uint32_t *raw = malloc(4 * N);
    MPI_CHECK(MPI_File_read_at_all(fh, (MPI_Offset)t_rank * N * 4, raw, 4 * N, MPI_BYTE, &st));
    for (int i = 0; i < N; i++)
        CHECK(raw[i] == bswap32((uint32_t)val(t_rank, i)), "raw int %d is %#x, expected %#x", i,
              raw[i], bswap32((uint32_t)val(t_rank, i)));
    free(raw);

    /* Back through the representation, into every other int. */
    MPI_Datatype two, every2;
    MPI_CHECK(MPI_Type_vector(2, 1, 2, MPI_INT, &two));
    MPI_CHECK(MPI_Type_create_resized(two, 0, 16, &every2));
    MPI_CHECK(MPI_Type_commit(&every2));
    MPI_CHECK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "ferrite-swap", MPI_INFO_NULL));
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < 2 * N; i++)
            r[i] = -1;
        swapc.next = 0;
        int before = swapc.reads;
        if (pass == 0) {
            MPI_CHECK(MPI_File_read_at_all(fh, (MPI_Offset)t_rank * N, r, N / 2, every2, &st));
        } else {
            MPI_Request q;
            MPI_CHECK(MPI_File_iread_at_all(fh, (MPI_Offset)t_rank * N, r, N / 2, every2, &q));
            MPI_CHECK(MPI_Wait(&q, &st));
        }
        CHECK(swapc.reads - before >= 3, "pass %d: %d read conversion calls", pass,
              swapc.reads - before);
        MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &n));
        CHECK(n == 4 * N, "pass %d: read %d bytes", pass, n);
        for (int i = 0; i < N; i++) {
            CHECK(r[2 * i] == val(t_rank, i), "pass %d: int %d is %d, expected %d", pass, i,
                  r[2 * i], val(t_rank, i));
            CHECK(r[2 * i + 1] == -1, "pass %d: the gap after int %d was written", pass, i);
        }
    }

    /* No read conversion function (same sizes): reads return the file's bytes as they are. */
    MPI_CHECK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "ferrite-swap-noread", MPI_INFO_NULL));
    swapc.next = 0;
    MPI_CHECK(MPI_File_write_at(fh, (MPI_Offset)t_rank * N, w, 4, MPI_INT, &st));
    int four[4];
    MPI_CHECK(MPI_File_read_at(fh, (MPI_Offset)t_rank * N, four, 4, MPI_INT, &st));
    for (int i = 0; i < 4; i++)
        CHECK((uint32_t)four[i] == bswap32((uint32_t)w[i]), "noread: int %d is %#x", i, four[i]);

    /* A failing write conversion, and a type mixing predefined types. */
    swapc.fail = 1;
    EXPECT_CLASS(MPI_File_write_at(fh, 0, w, 4, MPI_INT, &st), MPI_ERR_CONVERSION);
    swapc.fail = 0;
    MPI_Datatype mixed;
    int bl[2] = {1, 1};
    MPI_Aint disp[2] = {0, 8};
    MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE};
    MPI_CHECK(MPI_Type_create_struct(2, bl, disp, types, &mixed));
    MPI_CHECK(MPI_Type_commit(&mixed));
    EXPECT_CLASS(MPI_File_write_at(fh, 0, w, 1, mixed, &st), MPI_ERR_UNSUPPORTED_OPERATION);
    MPI_CHECK(MPI_Type_free(&mixed));
    MPI_CHECK(MPI_Type_free(&two));
    MPI_CHECK(MPI_Type_free(&every2));
    MPI_CHECK(MPI_File_close(&fh));
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 0)
        MPI_CHECK(MPI_File_delete(path, MPI_INFO_NULL));
    free(w);
    free(r);
}

static void wide_rep(void)
{
    /* Each rank its own file, on MPI_COMM_SELF. */
    char mine[320];
    snprintf(mine, sizeof mine, "%s/wide%d", dir, t_rank);
    MPI_File fh;
    MPI_Status st;
    int w[100], r[100];
    for (int i = 0; i < 100; i++)
        w[i] = i % 2 ? -val(t_rank, i) : val(t_rank, i);
    MPI_CHECK(MPI_File_open(MPI_COMM_SELF, mine, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL,
                            &fh));
    MPI_CHECK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "ferrite-wide", MPI_INFO_NULL));
    MPI_Count fext = 0;
    MPI_CHECK(MPI_File_get_type_extent_c(fh, MPI_INT, &fext));
    CHECK(fext == 8, "wide: file extent of MPI_INT %lld", (long long)fext);
    MPI_CHECK(MPI_File_write_at(fh, 10, w, 100, MPI_INT, &st));
    MPI_Offset size = 0;
    MPI_CHECK(MPI_File_get_size(fh, &size));
    CHECK(size == 8 * 110, "wide: file size %lld, expected %d", (long long)size, 8 * 110);
    MPI_CHECK(MPI_File_read_at(fh, 10, r, 100, MPI_INT, &st));
    for (int i = 0; i < 100; i++)
        CHECK(r[i] == w[i], "wide: int %d read back %d, expected %d", i, r[i], w[i]);
    /* The raw bytes: 8-byte integers. */
    MPI_CHECK(MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "native", MPI_INFO_NULL));
    int64_t raw[100];
    MPI_CHECK(MPI_File_read_at(fh, 80, raw, 800, MPI_BYTE, &st));
    for (int i = 0; i < 100; i++)
        CHECK(raw[i] == w[i], "wide: raw int64 %d is %lld", i, (long long)raw[i]);
    /* Reads without a conversion function need native-sized file extents. */
    MPI_CHECK(MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "ferrite-wide-noread", MPI_INFO_NULL));
    EXPECT_CLASS(MPI_File_read_at(fh, 0, r, 1, MPI_INT, &st), MPI_ERR_CONVERSION);
    MPI_CHECK(MPI_File_close(&fh));
    MPI_CHECK(MPI_File_delete(mine, MPI_INFO_NULL));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    if (!t_expect_ferrite()) { /* ROMIO refuses user representations in views */
        if (t_rank == 0)
            printf("skipped: Ferrite-only check (ROMIO does not call conversion functions)\n");
        t_finish("io_datarep");
        return 0;
    }
    if (t_rank == 0) {
        snprintf(dir, sizeof dir, "/tmp/ferrite-iodr-XXXXXX");
        CHECK(mkdtemp(dir) != NULL, "mkdtemp failed");
    }
    MPI_CHECK(MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD));
    snprintf(path, sizeof path, "%s/data", dir);

    MPI_CHECK(MPI_Register_datarep("ferrite-swap", swap_read, swap_write, native_extent, &swapc));
    MPI_CHECK(MPI_Register_datarep_c("ferrite-wide", wide_read, wide_write, wide_extent, &widec));
    MPI_CHECK(MPI_Register_datarep("ferrite-swap-noread", MPI_CONVERSION_FN_NULL, swap_write,
                                   native_extent, &swapc));
    MPI_CHECK(MPI_Register_datarep_c("ferrite-wide-noread", MPI_CONVERSION_FN_NULL_C, wide_write,
                                     wide_extent, &widec));
    EXPECT_CLASS(MPI_Register_datarep("ferrite-swap", swap_read, swap_write, native_extent, NULL),
                 MPI_ERR_DUP_DATAREP);
    EXPECT_CLASS(MPI_Register_datarep("ferrite-noext", swap_read, swap_write, NULL, NULL),
                 MPI_ERR_ARG);

    swap_rep();
    wide_rep();

    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    if (t_rank == 0)
        CHECK(rmdir(dir) == 0, "temp dir %s not empty", dir);
    t_finish("io_datarep");
    return 0;
}
