/* np: 1 */
/* MPI_Status_c2f/f2c/c2f08/f082c/f082f/f2f08 (MPI 4.1, 19.3.5): a received status survives
 * every conversion path (source, tag, error, count, cancelled flag); converting
 * MPI_STATUS_IGNORE or to a null pointer is MPI_ERR_ARG. */
#include "common.h"

static void check_same(const MPI_Status *a, int line)
{
    int count = -1, flag = -1;
    MPI_CHECK(MPI_Get_count(a, MPI_DOUBLE, &count));
    MPI_CHECK(MPI_Test_cancelled(a, &flag));
    if (a->MPI_SOURCE != 0 || a->MPI_TAG != 42 || count != 6 || flag != 1 ||
        a->MPI_ERROR != MPI_ERR_TRUNCATE)
        t_fail(__FILE__, line, "converted status: source %d tag %d count %d cancelled %d "
               "error %d", a->MPI_SOURCE, a->MPI_TAG, count, flag, a->MPI_ERROR);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    double out[6] = {1, 2, 3, 4, 5, 6}, in[6];
    MPI_Status st, back;
    MPI_CHECK(MPI_Sendrecv(out, 6, MPI_DOUBLE, 0, 42, in, 6, MPI_DOUBLE, 0, 42, MPI_COMM_SELF,
                           &st));
    CHECK(in[5] == 6, "sendrecv to self got %g", in[5]);
    MPI_CHECK(MPI_Status_set_cancelled(&st, 1));
    st.MPI_ERROR = MPI_ERR_TRUNCATE;
    check_same(&st, __LINE__);

    MPI_Fint f[MPI_F_STATUS_SIZE], f2[MPI_F_STATUS_SIZE];
    MPI_F08_status f08, f08b;
    MPI_CHECK(MPI_Status_c2f(&st, f));
    memset(&back, 0, sizeof back);
    MPI_CHECK(MPI_Status_f2c(f, &back));
    check_same(&back, __LINE__);
    MPI_CHECK(MPI_Status_c2f08(&st, &f08));
    CHECK(f08.MPI_SOURCE == 0 && f08.MPI_TAG == 42 && f08.MPI_ERROR == MPI_ERR_TRUNCATE,
          "c2f08: source %d tag %d error %d", f08.MPI_SOURCE, f08.MPI_TAG, f08.MPI_ERROR);
    memset(&back, 0, sizeof back);
    MPI_CHECK(MPI_Status_f082c(&f08, &back));
    check_same(&back, __LINE__);
    MPI_CHECK(MPI_Status_f082f(&f08, f2));
    CHECK(memcmp(f, f2, sizeof f) == 0, "f082f differs from c2f");
    memset(&f08b, 0, sizeof f08b);
    MPI_CHECK(MPI_Status_f2f08(f2, &f08b));
    memset(&back, 0, sizeof back);
    MPI_CHECK(MPI_Status_f082c(&f08b, &back));
    check_same(&back, __LINE__);

    EXPECT_CLASS(MPI_Status_c2f(MPI_STATUS_IGNORE, f), MPI_ERR_ARG);
    EXPECT_CLASS(MPI_Status_c2f(&st, NULL), MPI_ERR_ARG);
    EXPECT_CLASS(MPI_Status_f2c(NULL, &back), MPI_ERR_ARG);
    EXPECT_CLASS(MPI_Status_f082c(MPI_F08_STATUS_IGNORE, &back), MPI_ERR_ARG);
    t_finish("status_convert");
    return 0;
}
