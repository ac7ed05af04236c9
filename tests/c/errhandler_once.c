/* np: 1 2 */
/* One error, one call of the error handler: a user handler counts its calls for errors
 * raised by legacy (MPI-1) names, large-count (_c) forms and their modern twins, on a
 * communicator, on MPI_COMM_SELF (calls without an object) and on a window. */
#include "common.h"

static int calls;
static void count(MPI_Comm *comm, int *code, ...)
{
    (void)comm;
    (void)code;
    calls++;
}
static int win_calls;
static void count_win(MPI_Win *win, int *code, ...)
{
    (void)win;
    (void)code;
    win_calls++;
}

#define ONCE(call)                                                                            \
    do {                                                                                      \
        int before_ = calls;                                                                  \
        int rc_ = (call);                                                                     \
        CHECK(rc_ != MPI_SUCCESS, "%s succeeded", #call);                                     \
        CHECK(calls == before_ + 1, "%s ran the error handler %d times", #call,               \
              calls - before_);                                                               \
    } while (0)

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_Errhandler eh;
    MPI_CHECK(MPI_Comm_create_errhandler(count, &eh));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, eh));

    MPI_Datatype t;
    int lens[1] = {-1};
    MPI_Aint disps[1] = {0};
    MPI_Datatype types[1] = {MPI_INT};
    MPI_Count clens[1] = {-1}, cdisps[1] = {0};
    /* Datatype constructors (no object: MPI_COMM_SELF's handler). */
    ONCE(MPI_Type_contiguous(-1, MPI_INT, &t));
    ONCE(MPI_Type_contiguous_c(-1, MPI_INT, &t));
    ONCE(MPI_Type_hvector(-1, 1, 8, MPI_INT, &t));
    ONCE(MPI_Type_create_hvector(-1, 1, 8, MPI_INT, &t));
    ONCE(MPI_Type_create_hvector_c(-1, 1, 8, MPI_INT, &t));
    ONCE(MPI_Type_hindexed(1, lens, disps, MPI_INT, &t));
    ONCE(MPI_Type_create_hindexed_c(1, clens, cdisps, MPI_INT, &t));
    ONCE(MPI_Type_struct(1, lens, disps, types, &t));
    ONCE(MPI_Type_create_struct(1, lens, disps, types, &t));
    ONCE(MPI_Type_create_struct_c(1, clens, cdisps, types, &t));
    ONCE(MPI_Type_vector_c(1, 1, 1, MPI_DATATYPE_NULL, &t));
    ONCE(MPI_Type_create_resized_c(MPI_DATATYPE_NULL, 0, 8, &t));
    /* Communicator calls, legacy names included. */
    int v = 0, flag = 0;
    ONCE(MPI_Attr_put(MPI_COMM_WORLD, MPI_KEYVAL_INVALID, &v));
    ONCE(MPI_Comm_set_attr(MPI_COMM_WORLD, MPI_KEYVAL_INVALID, &v));
    ONCE(MPI_Attr_get(MPI_COMM_WORLD, MPI_KEYVAL_INVALID, &v, &flag));
    ONCE(MPI_Errhandler_set(MPI_COMM_WORLD, MPI_ERRHANDLER_NULL));
    ONCE(MPI_Send(&v, 1, MPI_INT, t_size, 0, MPI_COMM_WORLD));
    ONCE(MPI_Send_c(&v, 1, MPI_INT, t_size, 0, MPI_COMM_WORLD));
    MPI_Count psz;
    ONCE(MPI_Pack_size_c(-1, MPI_INT, MPI_COMM_WORLD, &psz));
    ONCE(MPI_Bcast_c(&v, 1, MPI_INT, t_size, MPI_COMM_WORLD));
    MPI_Status st;
    MPI_Count n;
    memset(&st, 0, sizeof st);
    ONCE(MPI_Get_count_c(&st, MPI_DATATYPE_NULL, &n));
    ONCE(MPI_Get_elements_x(&st, MPI_DATATYPE_NULL, &n));
    ONCE(MPI_Type_size_x(MPI_DATATYPE_NULL, &n));

    /* Windows: their own handler. */
    MPI_Win w;
    MPI_Errhandler weh;
    MPI_CHECK(MPI_Win_create(&v, sizeof v, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &w));
    MPI_CHECK(MPI_Win_create_errhandler(count_win, &weh));
    MPI_CHECK(MPI_Win_set_errhandler(w, weh));
    int before = calls;
    CHECK(MPI_Win_set_attr(w, MPI_KEYVAL_INVALID, &v) != MPI_SUCCESS, "Win_set_attr succeeded");
    CHECK(win_calls == 1 && calls == before, "window error: window handler %d calls, comm handler %d",
          win_calls, calls - before);
    MPI_CHECK(MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Errhandler_free(&weh));
    MPI_CHECK(MPI_Win_free(&w));

    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Errhandler_free(&eh));
    t_finish("errhandler_once");
    return 0;
}
