/* np: 1 2 */
/* Attribute callbacks run at the right times and in the right order: Comm_dup calls copy
 * callbacks (and copies only when the callback says so), replacing a value calls delete on
 * the old one, Comm_free deletes every attribute (last set first) before the communicator
 * goes, datatypes do the same through Type_dup/Type_free, and MPI_Finalize deletes the
 * attributes of MPI_COMM_SELF first, while MPI still works. */
#include "common.h"

static char log_[256];
static int nlog;

static void note(char c) { if (nlog < 255) log_[nlog++] = c; log_[nlog] = 0; }

static int copy_yes(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag)
{
    (void)c; (void)k; (void)extra;
    note('C');
    *(void **)out = (char *)in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}

static int copy_no(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag)
{
    (void)c; (void)k; (void)extra; (void)in; (void)out;
    note('N');
    *flag = 0;
    return MPI_SUCCESS;
}

/* Records the attribute value's letter ('a'.. from the value's low bits). */
static int del(MPI_Comm c, int k, void *val, void *extra)
{
    (void)c; (void)k; (void)extra;
    note((char)('a' + ((long)val % 26)));
    return MPI_SUCCESS;
}

static int tcopy(MPI_Datatype t, int k, void *extra, void *in, void *out, int *flag)
{
    (void)t; (void)k; (void)extra;
    note('T');
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static int tdel(MPI_Datatype t, int k, void *val, void *extra)
{
    (void)t; (void)k; (void)extra;
    note((char)('A' + ((long)val % 26)));
    return MPI_SUCCESS;
}

static int self_deleted;

/* Runs after main returns: MPI_Finalize must have called both COMM_SELF delete callbacks. */
static void check_self_deleted(void)
{
    if (self_deleted != 2) {
        fprintf(stderr, "FAILED: %d COMM_SELF delete callbacks ran in MPI_Finalize, expected 2\n",
                self_deleted);
        _exit(3);
    }
}

static int self_del(MPI_Comm c, int k, void *val, void *extra)
{
    (void)c; (void)k; (void)extra;
    /* MPI must still be fully usable here. */
    int fin = 1, r = -1;
    MPI_Finalized(&fin);
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    if (fin || r != t_rank) { fprintf(stderr, "FAILED: MPI not usable in COMM_SELF delete\n"); _exit(3); }
    note((char)('0' + (long)val));
    self_deleted++;
    if ((long)val == 1) {
        /* Last callback of the run: print the order seen. */
        printf("self delete order ok: %s\n", log_);
        if (strcmp(log_ + nlog - 2, "21") != 0) { fprintf(stderr, "FAILED: order %s\n", log_); _exit(3); }
    }
    return MPI_SUCCESS;
}

#define EXPECT_LOG(s) CHECK(strcmp(log_, s) == 0, "callbacks ran as \"%s\", expected \"%s\"", log_, s)

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int k1, k2, k3;
    MPI_CHECK(MPI_Comm_create_keyval(copy_yes, del, &k1, NULL));
    MPI_CHECK(MPI_Comm_create_keyval(copy_no, del, &k2, NULL));
    MPI_CHECK(MPI_Keyval_create(MPI_NULL_COPY_FN, del, &k3, NULL));
    MPI_Comm c, d;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    MPI_CHECK(MPI_Comm_set_attr(c, k1, (void *)0L)); /* 'a' */
    MPI_CHECK(MPI_Comm_set_attr(c, k2, (void *)1L)); /* 'b' */
    MPI_CHECK(MPI_Attr_put(c, k3, (void *)2L));      /* 'c' */
    EXPECT_LOG("");
    MPI_CHECK(MPI_Comm_set_attr(c, k2, (void *)3L)); /* replaces 'b': delete runs */
    EXPECT_LOG("b");
    nlog = 0;
    MPI_CHECK(MPI_Comm_dup(c, &d));
    /* Both copy callbacks ran (in an order MPI leaves open); k3 has none. */
    CHECK(nlog == 2 && strchr(log_, 'C') && strchr(log_, 'N'), "copy callbacks ran as \"%s\"", log_);
    void *v;
    int flag;
    MPI_CHECK(MPI_Comm_get_attr(d, k1, &v, &flag));
    CHECK(flag && (long)v == 1, "copied attribute: flag %d value %ld", flag, (long)v);
    MPI_CHECK(MPI_Comm_get_attr(d, k2, &v, &flag));
    CHECK(!flag, "copy callback said no but the attribute is there");
    MPI_CHECK(MPI_Attr_get(d, k3, &v, &flag));
    CHECK(!flag, "MPI_NULL_COPY_FN attribute was copied");
    nlog = 0;
    MPI_CHECK(MPI_Comm_delete_attr(c, k1));
    EXPECT_LOG("a");
    MPI_CHECK(MPI_Comm_get_attr(c, k1, &v, &flag));
    CHECK(!flag, "deleted attribute still there");
    nlog = 0;
    MPI_CHECK(MPI_Comm_free(&c)); /* remaining: k2 (3 -> 'd'), k3 ('c') */
    CHECK(nlog == 2 && strchr(log_, 'c') && strchr(log_, 'd'), "delete callbacks ran as \"%s\"", log_);
    nlog = 0;
    MPI_CHECK(MPI_Comm_free_keyval(&k1));
    CHECK(k1 == MPI_KEYVAL_INVALID, "free_keyval did not reset the keyval");
    MPI_CHECK(MPI_Comm_free(&d)); /* d holds k1's copy (value 1 -> 'b') after k1 was freed */
    EXPECT_LOG("b");

    /* Datatypes. */
    int tk;
    MPI_Datatype t, t2;
    MPI_CHECK(MPI_Type_create_keyval(tcopy, tdel, &tk, NULL));
    MPI_CHECK(MPI_Type_contiguous(2, MPI_INT, &t));
    MPI_CHECK(MPI_Type_set_attr(t, tk, (void *)4L));
    nlog = 0;
    MPI_CHECK(MPI_Type_dup(t, &t2));
    EXPECT_LOG("T");
    MPI_CHECK(MPI_Type_get_attr(t2, tk, &v, &flag));
    CHECK(flag && (long)v == 4, "type attribute copy: %d %ld", flag, (long)v);
    nlog = 0;
    MPI_CHECK(MPI_Type_free(&t));
    MPI_CHECK(MPI_Type_free(&t2));
    EXPECT_LOG("EE");
    MPI_CHECK(MPI_Type_free_keyval(&tk));

    /* Predefined attributes cannot be set. */
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    EXPECT_CLASS(MPI_Comm_set_attr(MPI_COMM_WORLD, MPI_TAG_UB, NULL), MPI_ERR_KEYVAL);

    /* Finalize: COMM_SELF attributes deleted, last set first, MPI still usable. */
    int s1, s2;
    MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_del, &s1, NULL));
    MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_del, &s2, NULL));
    MPI_CHECK(MPI_Comm_set_attr(MPI_COMM_SELF, s1, (void *)1L));
    MPI_CHECK(MPI_Comm_set_attr(MPI_COMM_SELF, s2, (void *)2L));
    nlog = 0;
    atexit(check_self_deleted);
    t_finish("attr_order");
    return 0;
}
