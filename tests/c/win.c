/* np: 1 2 4 */
/* Window objects without RMA: Win_create / Win_allocate / Win_create_dynamic / Win_free,
 * the predefined attributes (MPI_WIN_BASE, SIZE, DISP_UNIT, CREATE_FLAVOR, MODEL), group,
 * name, info, user attributes with copy/delete callbacks (delete runs on Win_delete_attr,
 * on replacement and on Win_free), error handlers (a user handler counts calls: one error,
 * one call), and that an RMA error raises on the window's handler. */
#include "common.h"

static int deletes, last_deleted;
static int handler_calls, handler_class;
static MPI_Win handler_win;

static int del_fn(MPI_Win win, int keyval, void *val, void *extra)
{
    (void)win;
    (void)keyval;
    CHECK(*(int *)extra == 42, "delete callback got extra_state %d", *(int *)extra);
    deletes++;
    last_deleted = (int)(long)val;
    return MPI_SUCCESS;
}

static void count_errors(MPI_Win *win, int *code, ...)
{
    handler_calls++;
    handler_win = *win;
    handler_class = t_class(*code);
}

static void check_predefined(const char *what, MPI_Win win, void *base, MPI_Aint size, int disp, int flavor)
{
    void *b = (void *)1;
    MPI_Aint *s = NULL;
    int *d = NULL, *f = NULL, *m = NULL, flag = 0;
    MPI_CHECK(MPI_Win_get_attr(win, MPI_WIN_BASE, &b, &flag));
    CHECK(flag && (b == base || base == NULL), "%s: MPI_WIN_BASE %p (flag %d), expected %p", what, b, flag, base);
    MPI_CHECK(MPI_Win_get_attr(win, MPI_WIN_SIZE, &s, &flag));
    CHECK(flag && *s == size, "MPI_WIN_SIZE %ld, expected %ld", (long)*s, (long)size);
    MPI_CHECK(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &d, &flag));
    CHECK(flag && *d == disp, "MPI_WIN_DISP_UNIT %d, expected %d", *d, disp);
    MPI_CHECK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &f, &flag));
    CHECK(flag && *f == flavor, "MPI_WIN_CREATE_FLAVOR %d, expected %d", *f, flavor);
    MPI_CHECK(MPI_Win_get_attr(win, MPI_WIN_MODEL, &m, &flag));
    CHECK(flag && (*m == MPI_WIN_UNIFIED || *m == MPI_WIN_SEPARATE), "MPI_WIN_MODEL %d", *m);
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int ferrite = t_expect_ferrite();
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));

    /* Win_create over local memory. */
    int mem[10];
    MPI_Win w;
    MPI_CHECK(MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &w));
    check_predefined("Win_create", w, mem, sizeof mem, sizeof(int), MPI_WIN_FLAVOR_CREATE);

    /* Group: the communicator's. */
    MPI_Group wg, cg;
    int cmp = -1;
    MPI_CHECK(MPI_Win_get_group(w, &wg));
    MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &cg));
    MPI_CHECK(MPI_Group_compare(wg, cg, &cmp));
    CHECK(cmp == MPI_IDENT, "window group vs world group: %d", cmp);
    MPI_CHECK(MPI_Group_free(&wg));
    MPI_CHECK(MPI_Group_free(&cg));

    /* Name. */
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    MPI_CHECK(MPI_Win_set_name(w, "halo window"));
    MPI_CHECK(MPI_Win_get_name(w, name, &len));
    CHECK(len == 11 && strcmp(name, "halo window") == 0, "window name \"%s\" (%d)", name, len);

    /* Info: what is set is what comes back (Ferrite keeps every hint). */
    MPI_Info info, used;
    MPI_CHECK(MPI_Info_create(&info));
    MPI_CHECK(MPI_Info_set(info, "no_locks", "true"));
    MPI_CHECK(MPI_Win_set_info(w, info));
    MPI_CHECK(MPI_Win_get_info(w, &used));
    if (ferrite) {
        char v[16];
        int flag = 0;
        MPI_CHECK(MPI_Info_get(used, "no_locks", sizeof v - 1, v, &flag));
        CHECK(flag && strcmp(v, "true") == 0, "Win_get_info: no_locks=%s (flag %d)", v, flag);
    }
    MPI_CHECK(MPI_Info_free(&used));
    MPI_CHECK(MPI_Info_free(&info));

    /* User attributes and their delete callback. */
    int extra = 42, key = MPI_KEYVAL_INVALID, flag = 0;
    void *val = NULL;
    MPI_CHECK(MPI_Win_create_keyval(MPI_WIN_NULL_COPY_FN, del_fn, &key, &extra));
    MPI_CHECK(MPI_Win_set_attr(w, key, (void *)11L));
    MPI_CHECK(MPI_Win_get_attr(w, key, &val, &flag));
    CHECK(flag && val == (void *)11L, "user attribute %p (flag %d)", val, flag);
    MPI_CHECK(MPI_Win_set_attr(w, key, (void *)12L));
    CHECK(deletes == 1 && last_deleted == 11, "replacing ran %d deletes (last %d)", deletes,
          last_deleted);
    MPI_CHECK(MPI_Win_delete_attr(w, key));
    CHECK(deletes == 2 && last_deleted == 12, "Win_delete_attr ran %d deletes", deletes);
    MPI_CHECK(MPI_Win_get_attr(w, key, &val, &flag));
    CHECK(!flag, "attribute still there after delete");
    MPI_CHECK(MPI_Win_set_attr(w, key, (void *)13L));

    /* Error handlers: a window starts with ERRORS_ARE_FATAL; a user handler is called once
     * per error, with the window. */
    MPI_Errhandler eh, got;
    MPI_CHECK(MPI_Win_get_errhandler(w, &got));
    CHECK(got == MPI_ERRORS_ARE_FATAL, "new window's error handler %#x", (unsigned)got);
    MPI_CHECK(MPI_Win_create_errhandler(count_errors, &eh));
    MPI_CHECK(MPI_Win_set_errhandler(w, eh));
    MPI_CHECK(MPI_Win_get_errhandler(w, &got));
    CHECK(got == eh, "Win_get_errhandler %#x, expected %#x", (unsigned)got, (unsigned)eh);
    MPI_CHECK(MPI_Errhandler_free(&got));
    MPI_CHECK(MPI_Win_call_errhandler(w, MPI_ERR_OTHER));
    CHECK(handler_calls == 1 && handler_win == w && handler_class == MPI_ERR_OTHER,
          "Win_call_errhandler: %d calls, class %d", handler_calls, handler_class);
    if (ferrite) {
        /* An RMA call outside an epoch raises MPI_ERR_RMA_SYNC on this window's handler,
         * once per error. */
        int x = 0;
        int rc = MPI_Put(&x, 1, MPI_INT, 0, 0, 1, MPI_INT, w);
        CHECK(rc != MPI_SUCCESS && t_class(rc) == MPI_ERR_RMA_SYNC, "MPI_Put: %d (class %d)", rc,
              t_class(rc));
        CHECK(handler_calls == 2 && handler_win == w && handler_class == MPI_ERR_RMA_SYNC,
              "MPI_Put ran the window handler %d times (class %d)", handler_calls - 1,
              handler_class);
        rc = MPI_Win_unlock(0, w);
        CHECK(handler_calls == 3 && t_class(rc) == MPI_ERR_RMA_SYNC,
              "MPI_Win_unlock: handler calls %d, class %d", handler_calls, t_class(rc));
        /* A window handler cannot go on a communicator, nor a communicator's on a window. */
        EXPECT_CLASS(MPI_Comm_set_errhandler(MPI_COMM_SELF, eh), MPI_ERR_ARG);
    }
    MPI_CHECK(MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Errhandler_free(&eh));
    if (ferrite) EXPECT_CLASS(MPI_Win_set_attr(w, MPI_WIN_SIZE, &extra), MPI_ERR_KEYVAL);

    MPI_CHECK(MPI_Win_free(&w));
    CHECK(w == MPI_WIN_NULL, "Win_free left %#x", (unsigned)w);
    CHECK(deletes == 3 && last_deleted == 13, "Win_free ran %d deletes (last %d)", deletes,
          last_deleted);

    /* Win_allocate: memory of the asked size, usable. */
    double *p = NULL;
    MPI_CHECK(MPI_Win_allocate(5 * sizeof(double), sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD,
                               &p, &w));
    CHECK(p != NULL, "Win_allocate gave a null base");
    for (int i = 0; i < 5; i++) p[i] = i + t_rank;
    /* Debian's MPICH 4.0 gives rank 1 a MPI_WIN_BASE 8 bytes below its baseptr. */
    check_predefined("Win_allocate", w, ferrite ? p : NULL, 5 * sizeof(double), sizeof(double), MPI_WIN_FLAVOR_ALLOCATE);
    MPI_CHECK(MPI_Win_set_attr(w, key, (void *)14L));
    if (ferrite) {
        /* Without shared memory windows a process addresses only its own memory. */
        MPI_Aint qs = -1;
        int qd = -1;
        double *qb = NULL;
        MPI_CHECK(MPI_Win_shared_query(w, t_rank, &qs, &qd, &qb));
        CHECK(qs == 5 * sizeof(double) && qd == sizeof(double) && qb == p,
              "Win_shared_query of my rank: %ld %d %p", (long)qs, qd, (void *)qb);
        MPI_CHECK(MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN));
        EXPECT_CLASS(MPI_Win_shared_query(w, t_size, &qs, &qd, &qb), MPI_ERR_RANK);
        EXPECT_CLASS(MPI_Win_attach(w, mem, 4), MPI_ERR_RMA_FLAVOR);
    }
    MPI_CHECK(MPI_Win_free(&w));
    CHECK(deletes == 4 && last_deleted == 14, "Win_free of the allocated window: %d deletes",
          deletes);

    /* Dynamic windows have no memory yet. */
    MPI_CHECK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &w));
    check_predefined("Win_create_dynamic", w, NULL, 0, 1, MPI_WIN_FLAVOR_DYNAMIC);
    void *dbase = (void *)1;
    MPI_CHECK(MPI_Win_get_attr(w, MPI_WIN_BASE, &dbase, &flag));
    CHECK(flag && dbase == MPI_BOTTOM, "dynamic window's MPI_WIN_BASE %p", dbase);
    MPI_CHECK(MPI_Win_attach(w, mem, sizeof mem));
    MPI_CHECK(MPI_Win_detach(w, mem));
    MPI_CHECK(MPI_Win_set_errhandler(w, MPI_ERRORS_RETURN));
    if (ferrite) EXPECT_CLASS(MPI_Win_detach(w, mem), MPI_ERR_RMA_ATTACH);
    MPI_CHECK(MPI_Win_free(&w));
    MPI_CHECK(MPI_Win_free_keyval(&key));

    /* A window over a split communicator has that communicator's group. */
    MPI_Comm half;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, t_rank % 2, -t_rank, &half));
    MPI_CHECK(MPI_Win_create(mem, 0, 1, MPI_INFO_NULL, half, &w));
    MPI_CHECK(MPI_Win_get_group(w, &wg));
    int r = -1, hr = -2;
    MPI_CHECK(MPI_Group_rank(wg, &r));
    MPI_CHECK(MPI_Comm_rank(half, &hr));
    CHECK(r == hr, "rank in the window group %d, in the communicator %d", r, hr);
    MPI_CHECK(MPI_Group_free(&wg));
    MPI_CHECK(MPI_Comm_free(&half));
    MPI_CHECK(MPI_Win_free(&w));

    /* Arguments. */
    EXPECT_CLASS(MPI_Win_create(mem, -1, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &w), MPI_ERR_SIZE);
    EXPECT_CLASS(MPI_Win_create(mem, 4, 0, MPI_INFO_NULL, MPI_COMM_WORLD, &w), MPI_ERR_DISP);
    if (ferrite) {
        MPI_Win bad = MPI_WIN_NULL;
        EXPECT_CLASS(MPI_Win_free(&bad), MPI_ERR_WIN);
        EXPECT_CLASS(MPI_Win_set_name(MPI_WIN_NULL, "x"), MPI_ERR_WIN);
        MPI_CHECK(MPI_Win_get_name(MPI_WIN_NULL, name, &len));
        CHECK(strcmp(name, "MPI_WIN_NULL") == 0, "name of MPI_WIN_NULL: \"%s\"", name);
    }
    t_finish("win");
    return 0;
}
