/* np: 1 2 4 16 */
/* Attributes: the predefined MPI_TAG_UB (>= 32767), MPI_HOST, MPI_IO, MPI_WTIME_IS_GLOBAL
 * (required), MPI_UNIVERSE_SIZE and MPI_APPNUM (optional in general, required on Ferrite
 * under its mpirun) read with MPI_Comm_get_attr; user keyvals with copy and delete
 * callbacks through Comm_dup, Comm_delete_attr and Comm_free. */
#include "common.h"

static int deleted, copied;

static int copy_fn(MPI_Comm c, int key, void *extra, void *in, void *out, int *flag)
{
    (void)c; (void)key; (void)extra;
    copied++;
    *(void **)out = (char *)in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}

static int delete_fn(MPI_Comm c, int key, void *val, void *extra)
{
    (void)c; (void)key; (void)val;
    CHECK(*(int *)extra == 4242, "delete callback got the wrong extra_state");
    deleted++;
    return MPI_SUCCESS;
}

static int get(int key, const char *name, int required, int *value)
{
    int *v = NULL, flag = -1;
    MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, key, &v, &flag));
    CHECK(flag == 0 || flag == 1, "%s: flag %d", name, flag);
    CHECK(!required || flag, "%s: attribute not set", name);
    if (flag) {
        CHECK(v != NULL, "%s: flag set but value pointer NULL", name);
        *value = *v;
    }
    return flag;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int ferrite = t_expect_ferrite(), n = t_size, v = -12345;
    get(MPI_TAG_UB, "MPI_TAG_UB", 1, &v);
    CHECK(v >= 32767, "MPI_TAG_UB is %d, must be at least 32767", v);
    get(MPI_HOST, "MPI_HOST", 1, &v);
    CHECK(v == MPI_PROC_NULL || (v >= 0 && v < n), "MPI_HOST is %d", v);
    get(MPI_IO, "MPI_IO", 1, &v);
    CHECK(v == MPI_PROC_NULL || v == MPI_ANY_SOURCE || (v >= 0 && v < n), "MPI_IO is %d", v);
    get(MPI_WTIME_IS_GLOBAL, "MPI_WTIME_IS_GLOBAL", 1, &v);
    CHECK(v == 0 || v == 1, "MPI_WTIME_IS_GLOBAL is %d", v);
    if (get(MPI_UNIVERSE_SIZE, "MPI_UNIVERSE_SIZE", ferrite, &v))
        CHECK(v >= 1, "MPI_UNIVERSE_SIZE is %d", v); /* may be below n when oversubscribed */
    if (get(MPI_APPNUM, "MPI_APPNUM", ferrite, &v))
        CHECK(v == 0, "MPI_APPNUM is %d for a single-program job", v);
    /* The same values on a dup. */
    MPI_Comm d;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    int *ub = NULL, flag = 0;
    MPI_CHECK(MPI_Comm_get_attr(d, MPI_TAG_UB, &ub, &flag));
    CHECK(flag && *ub >= 32767, "MPI_TAG_UB on a dup: flag %d", flag);

    /* User keyvals. */
    static int extra = 4242;
    int kcopy, knocopy;
    MPI_CHECK(MPI_Comm_create_keyval(copy_fn, delete_fn, &kcopy, &extra));
    MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_fn, &knocopy, &extra));
    static char base[8];
    MPI_CHECK(MPI_Comm_set_attr(d, kcopy, base));
    MPI_CHECK(MPI_Comm_set_attr(d, knocopy, base + 4));
    void *p = NULL;
    MPI_CHECK(MPI_Comm_get_attr(d, kcopy, &p, &flag));
    CHECK(flag && p == base, "get_attr gave %p, set %p", p, (void *)base);
    MPI_Comm d2;
    MPI_CHECK(MPI_Comm_dup(d, &d2));
    CHECK(copied == 1, "copy callback called %d times", copied);
    MPI_CHECK(MPI_Comm_get_attr(d2, kcopy, &p, &flag));
    CHECK(flag && p == base + 1, "copied attribute: flag %d value %p", flag, p);
    MPI_CHECK(MPI_Comm_get_attr(d2, knocopy, &p, &flag));
    CHECK(!flag, "attribute with MPI_COMM_NULL_COPY_FN was copied");
    MPI_CHECK(MPI_Comm_delete_attr(d, knocopy));
    CHECK(deleted == 1, "delete callback called %d times after delete_attr", deleted);
    MPI_CHECK(MPI_Comm_get_attr(d, knocopy, &p, &flag));
    CHECK(!flag, "deleted attribute still found");
    MPI_CHECK(MPI_Comm_free(&d));  /* deletes kcopy on d */
    CHECK(deleted == 2, "delete callback called %d times after Comm_free", deleted);
    MPI_CHECK(MPI_Comm_set_attr(d2, kcopy, base + 2)); /* replacing calls delete first */
    CHECK(deleted == 3, "replacing an attribute did not call delete (%d)", deleted);
    MPI_CHECK(MPI_Comm_free_keyval(&kcopy));
    CHECK(kcopy == MPI_KEYVAL_INVALID, "Comm_free_keyval did not set MPI_KEYVAL_INVALID");
    MPI_CHECK(MPI_Comm_free(&d2));
    CHECK(deleted == 4, "delete callback called %d times in all, expected 4", deleted);
    MPI_CHECK(MPI_Comm_free_keyval(&knocopy));
    t_finish("attrs");
    return 0;
}
