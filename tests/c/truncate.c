/* np: 1 2 4 16 */
/* Truncation under MPI_ERRORS_RETURN: a message longer than the receive buffer gives
 * MPI_ERR_TRUNCATE from Recv and Wait, MPI_ERR_IN_STATUS from Waitall with the class in
 * the status of the truncated receive only; the bytes after the buffer are left intact;
 * the send completes without error; later traffic is unaffected. Eager and large sizes. A
 * message ending inside a basic element of a derived receive type is MPI_ERR_TRUNCATE. */
#include "common.h"

#define GUARD 64
#define GB 0x5A

static void guard_ok(unsigned char *b, int n, const char *what)
{
    for (int i = 0; i < GUARD; i++)
        CHECK(b[n + i] == GB, "%s: guard byte %d after the %d-byte buffer overwritten", what, i,
              n);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int peer = t_partner();
    int sends[] = {100, 1 << 20};
    int bufs[] = {10, 1000};
    unsigned char *sbuf = malloc(1 << 20), *rbuf = malloc((1 << 20) + GUARD);
    for (int i = 0; i < (1 << 20); i++) sbuf[i] = t_byte(t_rank, i);
    for (int c = 0; c < 2; c++) {
        int sn = sends[c], rn = bufs[c];
        char what[64];
        for (int mode = 0; mode < 3; mode++) {
            snprintf(what, sizeof what, "%d bytes into %d, %s", sn, rn,
                     mode == 0 ? "Recv" : mode == 1 ? "Irecv+Wait" : "Irecv+Waitall");
            int tag = c * 10 + mode;
            MPI_Request srq;
            MPI_CHECK(MPI_Isend(sbuf, sn, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &srq));
            memset(rbuf, GB, rn + GUARD);
            MPI_Status st;
            if (mode == 0) {
                EXPECT_CLASS(MPI_Recv(rbuf, rn, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st),
                             MPI_ERR_TRUNCATE);
            } else if (mode == 1) {
                MPI_Request r;
                MPI_CHECK(MPI_Irecv(rbuf, rn, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r));
                EXPECT_CLASS(MPI_Wait(&r, &st), MPI_ERR_TRUNCATE);
                CHECK(r == MPI_REQUEST_NULL, "%s: request not freed", what);
            } else {
                /* A good receive next to the truncated one. */
                int small = -1, one = 42;
                MPI_Request r[2], s2;
                MPI_Status sts[2];
                MPI_CHECK(MPI_Isend(&one, 1, MPI_INT, peer, 500 + tag, MPI_COMM_WORLD, &s2));
                MPI_CHECK(MPI_Irecv(&small, 1, MPI_INT, peer, 500 + tag, MPI_COMM_WORLD, &r[0]));
                MPI_CHECK(MPI_Irecv(rbuf, rn, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r[1]));
                int rc = MPI_Waitall(2, r, sts);
                CHECK(t_class(rc) == MPI_ERR_IN_STATUS, "%s: Waitall returned class %d, "
                      "expected MPI_ERR_IN_STATUS", what, t_class(rc));
                CHECK(sts[0].MPI_ERROR == MPI_SUCCESS, "%s: good receive has error %d", what,
                      sts[0].MPI_ERROR);
                CHECK(t_class(sts[1].MPI_ERROR) == MPI_ERR_TRUNCATE, "%s: status error class "
                      "%d, expected MPI_ERR_TRUNCATE", what, t_class(sts[1].MPI_ERROR));
                CHECK(small == 42, "%s: good receive got %d", what, small);
                CHECK(sts[0].MPI_SOURCE == peer && sts[0].MPI_TAG == 500 + tag,
                      "%s: good status source %d tag %d", what, sts[0].MPI_SOURCE, sts[0].MPI_TAG);
                MPI_CHECK(MPI_Wait(&s2, MPI_STATUS_IGNORE));
                st = sts[1];
            }
            CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == tag, "%s: status source %d tag %d",
                  what, st.MPI_SOURCE, st.MPI_TAG);
            guard_ok(rbuf, rn, what);
            MPI_CHECK(MPI_Wait(&srq, MPI_STATUS_IGNORE));
            /* Traffic after the truncation still works, the full message this time. */
            memset(rbuf, 0, sn + GUARD);
            MPI_CHECK(MPI_Isend(sbuf, sn, MPI_BYTE, peer, 100 + tag, MPI_COMM_WORLD, &srq));
            MPI_CHECK(MPI_Recv(rbuf, sn, MPI_BYTE, peer, 100 + tag, MPI_COMM_WORLD, &st));
            MPI_CHECK(MPI_Wait(&srq, MPI_STATUS_IGNORE));
            for (int i = 0; i < sn; i++)
                if (rbuf[i] != t_byte(peer, i)) FAIL("%s: after truncation byte %d wrong", what, i);
        }
    }
    /* A message ending inside a basic element of a derived receive type (3 chars into
     * ints): the signatures cannot match, MPI_ERR_TRUNCATE (MPICH's class for it); the
     * bytes still land. */
    {
        int peer = t_rank ^ 1;
        if (peer < t_size) {
            MPI_Datatype chars, ints;
            int bl[3] = {1, 1, 1}, ibl[3] = {1, 2, 1}, idx[3] = {4, 8, 16};
            MPI_Aint disp[3] = {0, 2, 4};
            MPI_Datatype ts[3] = {MPI_CHAR, MPI_CHAR, MPI_CHAR};
            MPI_CHECK(MPI_Type_create_struct(3, bl, disp, ts, &chars));
            MPI_CHECK(MPI_Type_indexed(3, ibl, idx, MPI_INT, &ints));
            MPI_CHECK(MPI_Type_commit(&chars));
            MPI_CHECK(MPI_Type_commit(&ints));
            char src[8] = {1, 0, 2, 0, 3, 0, 0, 0};
            int dst[32];
            memset(dst, 0, sizeof dst);
            MPI_Request sq;
            MPI_Status st;
            MPI_CHECK(MPI_Isend(src, 1, chars, peer, 77, MPI_COMM_WORLD, &sq));
            int rc = MPI_Recv(dst, 1, ints, peer, 77, MPI_COMM_WORLD, &st);
            CHECK(t_class(rc) == MPI_ERR_TRUNCATE, "partial element: class %d", t_class(rc));
            int n = -2;
            MPI_CHECK(MPI_Get_count(&st, MPI_BYTE, &n));
            CHECK(n == 3, "partial element: %d bytes", n);
            MPI_CHECK(MPI_Get_elements(&st, ints, &n));
            CHECK(n == MPI_UNDEFINED, "partial element: Get_elements %d", n);
            unsigned char *b = (unsigned char *)&dst[4];
            CHECK(b[0] == 1 && b[1] == 2 && b[2] == 3, "partial element: bytes %d %d %d", b[0],
                  b[1], b[2]);
            MPI_CHECK(MPI_Wait(&sq, MPI_STATUS_IGNORE));
            MPI_CHECK(MPI_Type_free(&chars));
            MPI_CHECK(MPI_Type_free(&ints));
        }
    }
    free(sbuf);
    free(rbuf);
    t_finish("truncate");
    return 0;
}
