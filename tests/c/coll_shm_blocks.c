/* np: 1 2 3 4 7 */
/* Shared-memory Gather, Scatter and Alltoall (coll/shm.rs), forced with
 * FERRITE_COLL_{GATHER,SCATTER,ALLTOALL}_ALGO=shm (other MPIs ignore the knobs): counts from 0
 * through the inline size (56 B, for one block and for all n), the largest block that fits a
 * 4 KiB slot and just above it (the message algorithms on the same communicator), every root, in place and not, non-contiguous types on either side, several
 * communicators at once (world, a dup, a split by parity, a subset in reverse order), then
 * many consecutive mixed collectives (buffer reuse across rooted and all-to-all ones, a
 * nonblocking Ialltoall between them). Every received element is checked, and elements
 * outside the received blocks must keep their fill value. */
#include "common.h"

int FERRITE_Coll_reload_knobs(void) __attribute__((weak));

/* Element i of the block rank `src` sends to rank `dst`. */
static int val(int src, int dst, int i) { return src * 100003 + dst * 1009 + i * 7 + 1; }

static void gathers(MPI_Comm comm, int me, int n, int cnt)
{
    int *s = malloc(sizeof(int) * (cnt + 1)), *r = malloc(sizeof(int) * ((size_t)cnt * n * 2 + 1));
    for (int root = 0; root < n; root++) {
        for (int inplace = 0; inplace < 2; inplace++) {
            for (int i = 0; i < cnt; i++) s[i] = val(me, root, i);
            for (int i = 0; i < cnt * n; i++)
                r[i] = inplace && i / cnt == me ? val(me, root, i % cnt) : -5;
            int ip = inplace && me == root;
            MPI_CHECK(MPI_Gather(ip ? MPI_IN_PLACE : s, cnt, MPI_INT, r, cnt, MPI_INT, root, comm));
            for (int i = 0; i < cnt * n; i++) {
                int want = me == root ? val(i / cnt, root, i % cnt)
                                      : (inplace && i / cnt == me ? val(me, root, i % cnt) : -5);
                CHECK(r[i] == want, "gather %d root %d in place %d [%d]: %d", cnt, root, inplace, i,
                      r[i]);
            }
        }
    }
    /* Received as every other int (a resized vector), sent as bytes. */
    MPI_Datatype vec, rvec;
    MPI_CHECK(MPI_Type_vector(cnt > 0 ? cnt : 1, 1, 2, MPI_INT, &vec));
    MPI_CHECK(MPI_Type_create_resized(vec, 0, (MPI_Aint)sizeof(int) * 2 * (cnt > 0 ? cnt : 1), &rvec));
    MPI_CHECK(MPI_Type_commit(&rvec));
    int root = cnt % n;
    for (int i = 0; i < cnt; i++) s[i] = val(me, root, i);
    for (int i = 0; i < 2 * cnt * n; i++) r[i] = -5;
    MPI_CHECK(MPI_Gather(s, cnt * (int)sizeof(int), MPI_BYTE, r, cnt > 0, rvec, root, comm));
    if (me == root) {
        for (int i = 0; i < 2 * cnt * n; i++) {
            int q = i / (2 * cnt), k = i % (2 * cnt);
            CHECK(r[i] == (k % 2 ? -5 : val(q, root, k / 2)), "gather vec %d [%d]", cnt, i);
        }
    }
    MPI_CHECK(MPI_Type_free(&rvec));
    MPI_CHECK(MPI_Type_free(&vec));
    free(s);
    free(r);
}

static void scatters(MPI_Comm comm, int me, int n, int cnt)
{
    int *s = malloc(sizeof(int) * ((size_t)cnt * n * 2 + 1)), *r = malloc(sizeof(int) * (cnt + 1));
    for (int root = 0; root < n; root++) {
        for (int inplace = 0; inplace < 2; inplace++) {
            for (int i = 0; i < cnt * n; i++) s[i] = me == root ? val(root, i / cnt, i % cnt) : -7;
            for (int i = 0; i <= cnt; i++) r[i] = -5;
            int ip = inplace && me == root;
            MPI_CHECK(MPI_Scatter(s, cnt, MPI_INT, ip ? MPI_IN_PLACE : r, cnt, MPI_INT, root, comm));
            for (int i = 0; i < cnt; i++) {
                if (ip) CHECK(s[me * cnt + i] == val(root, me, i), "scatter in place %d [%d]", cnt, i);
                else CHECK(r[i] == val(root, me, i), "scatter %d root %d [%d]: %d", cnt, root, i, r[i]);
            }
            CHECK(r[cnt] == -5, "scatter %d wrote past the block", cnt);
        }
    }
    /* Sent from every other int (a resized vector), received as bytes. */
    MPI_Datatype vec, svec;
    MPI_CHECK(MPI_Type_vector(cnt > 0 ? cnt : 1, 1, 2, MPI_INT, &vec));
    MPI_CHECK(MPI_Type_create_resized(vec, 0, (MPI_Aint)sizeof(int) * 2 * (cnt > 0 ? cnt : 1), &svec));
    MPI_CHECK(MPI_Type_commit(&svec));
    int root = (cnt + 1) % n;
    for (int i = 0; i < 2 * cnt * n; i++) {
        int q = i / (2 * cnt), k = i % (2 * cnt);
        s[i] = me == root && k % 2 == 0 ? val(root, q, k / 2) : -7;
    }
    for (int i = 0; i <= cnt; i++) r[i] = -5;
    MPI_CHECK(MPI_Scatter(s, cnt > 0, svec, r, cnt * (int)sizeof(int), MPI_BYTE, root, comm));
    for (int i = 0; i < cnt; i++) CHECK(r[i] == val(root, me, i), "scatter vec %d [%d]", cnt, i);
    CHECK(r[cnt] == -5, "scatter vec %d wrote past the block", cnt);
    MPI_CHECK(MPI_Type_free(&svec));
    MPI_CHECK(MPI_Type_free(&vec));
    free(s);
    free(r);
}

static void alltoalls(MPI_Comm comm, int me, int n, int cnt)
{
    size_t all = (size_t)cnt * n;
    int *s = malloc(sizeof(int) * (all + 1)), *r = malloc(sizeof(int) * (2 * all + 1));
    for (int inplace = 0; inplace < 2; inplace++) {
        for (size_t i = 0; i < all; i++) s[i] = val(me, (int)i / cnt, (int)i % cnt);
        for (size_t i = 0; i <= all; i++) r[i] = inplace && i < all ? s[i] : -5;
        MPI_CHECK(MPI_Alltoall(inplace ? MPI_IN_PLACE : s, cnt, MPI_INT, r, cnt, MPI_INT, comm));
        for (size_t i = 0; i < all; i++)
            CHECK(r[i] == val((int)i / cnt, me, (int)i % cnt), "alltoall %d in place %d [%zu]: %d",
                  cnt, inplace, i, r[i]);
        CHECK(r[all] == -5, "alltoall %d wrote past the buffer", cnt);
    }
    /* Received into every other int (a resized vector), sent as bytes. */
    MPI_Datatype vec, rvec;
    MPI_CHECK(MPI_Type_vector(cnt > 0 ? cnt : 1, 1, 2, MPI_INT, &vec));
    MPI_CHECK(MPI_Type_create_resized(vec, 0, (MPI_Aint)sizeof(int) * 2 * (cnt > 0 ? cnt : 1), &rvec));
    MPI_CHECK(MPI_Type_commit(&rvec));
    for (size_t i = 0; i < all; i++) s[i] = val(me, (int)i / cnt, (int)i % cnt);
    for (size_t i = 0; i < 2 * all; i++) r[i] = -5;
    MPI_CHECK(MPI_Alltoall(s, cnt * (int)sizeof(int), MPI_BYTE, r, cnt > 0, rvec, comm));
    for (size_t i = 0; i < 2 * all; i++) {
        int q = (int)i / (2 * cnt), k = (int)i % (2 * cnt);
        CHECK(r[i] == (k % 2 ? -5 : val(q, me, k / 2)), "alltoall vec %d [%zu]", cnt, i);
    }
    MPI_CHECK(MPI_Type_free(&rvec));
    MPI_CHECK(MPI_Type_free(&vec));
    free(s);
    free(r);
}

int main(int argc, char **argv)
{
    const char *knobs[] = {"FERRITE_COLL_GATHER_ALGO", "FERRITE_COLL_SCATTER_ALGO",
                           "FERRITE_COLL_ALLTOALL_ALGO", "FERRITE_COLL_BCAST_ALGO",
                           "FERRITE_COLL_BARRIER_ALGO"};
    for (unsigned k = 0; k < sizeof knobs / sizeof *knobs; k++) setenv(knobs[k], "shm", 1);
    setenv("FERRITE_COLL_SHM_MAX", "4096", 1);
    t_init(&argc, &argv);
    if (FERRITE_Coll_reload_knobs) MPI_CHECK(FERRITE_Coll_reload_knobs());
    MPI_Comm comms[4];
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comms[0]));
    comms[1] = MPI_COMM_WORLD;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, t_rank, &comms[2]));
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, t_rank < (2 * t_size + 2) / 3 ? 0 : MPI_UNDEFINED,
                             -t_rank, &comms[3]));
    /* 0; inline (56 B = 14 ints: one block, or all n blocks) and just above; n blocks filling
     * one 4 KiB slot and one element more; one block filling a slot (the largest in shared
     * memory) and one more (message algorithms). n is each communicator's size. */
    for (int ci = 0; ci < 11; ci++) {
        for (int c = 0; c < 4; c++) {
            MPI_Comm comm = comms[(c + ci) % 4];
            if (comm == MPI_COMM_NULL) continue;
            int me, n;
            MPI_CHECK(MPI_Comm_rank(comm, &me));
            MPI_CHECK(MPI_Comm_size(comm, &n));
            int counts[] = {0, 1, 14 / n, 14 / n + 1, 14, 15, 64, 1024 / n, 1024 / n + 1, 1024, 1025};
            int cnt = counts[ci];
            gathers(comm, me, n, cnt);
            scatters(comm, me, n, cnt);
            alltoalls(comm, me, n, cnt);
        }
    }
    /* Many consecutive small collectives on two communicators, roots moving. */
    for (int i = 0; i < 1000; i++) {
        MPI_Comm comm = comms[i % 2 ? 0 : 2];
        int me, n;
        MPI_CHECK(MPI_Comm_rank(comm, &me));
        MPI_CHECK(MPI_Comm_size(comm, &n));
        int root = i % n, x = val(me, root, i), a[64], b[64];
        switch (i % 5) {
        case 0:
            MPI_CHECK(MPI_Gather(&x, 1, MPI_INT, a, 1, MPI_INT, root, comm));
            for (int q = 0; me == root && q < n; q++)
                CHECK(a[q] == val(q, root, i), "loop gather %d [%d]", i, q);
            break;
        case 1:
            for (int q = 0; q < n; q++) a[q] = val(me, q, i);
            MPI_CHECK(MPI_Scatter(a, 1, MPI_INT, &x, 1, MPI_INT, root, comm));
            CHECK(x == val(root, me, i), "loop scatter %d", i);
            break;
        case 2:
            for (int q = 0; q < n; q++) a[q] = val(me, q, i);
            MPI_CHECK(MPI_Alltoall(a, 1, MPI_INT, b, 1, MPI_INT, comm));
            for (int q = 0; q < n; q++) CHECK(b[q] == val(q, me, i), "loop alltoall %d [%d]", i, q);
            break;
        case 3: {
            MPI_Request rq;
            for (int q = 0; q < n; q++) a[q] = val(me, q, i);
            MPI_CHECK(MPI_Ialltoall(a, 1, MPI_INT, b, 1, MPI_INT, comm, &rq));
            MPI_CHECK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
            for (int q = 0; q < n; q++) CHECK(b[q] == val(q, me, i), "loop ialltoall %d [%d]", i, q);
            break;
        }
        default:
            x = val(root, 0, i);
            MPI_CHECK(MPI_Bcast(&x, 1, MPI_INT, root, comm));
            CHECK(x == val(root, 0, i), "loop bcast %d", i);
        }
    }
    MPI_CHECK(MPI_Comm_free(&comms[0]));
    MPI_CHECK(MPI_Comm_free(&comms[2]));
    if (comms[3] != MPI_COMM_NULL) MPI_CHECK(MPI_Comm_free(&comms[3]));
    t_finish("coll_shm_blocks");
    return 0;
}
