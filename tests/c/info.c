/* np: 1 2 */
/* Info objects: set/get/get_valuelen/get_string/delete/nkeys/nthkey/dup/free, order of
 * keys, truncation, MPI_INFO_ENV, communicator hints (set_info/get_info/dup_with_info). */
#include "common.h"

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Info info, copy;
    char val[MPI_MAX_INFO_VAL + 1], key[MPI_MAX_INFO_KEY + 1];
    int flag, n, len;
    MPI_CHECK(MPI_Info_create(&info));
    MPI_CHECK(MPI_Info_set(info, "alpha", "1"));
    MPI_CHECK(MPI_Info_set(info, "beta", "two"));
    MPI_CHECK(MPI_Info_set(info, "gamma", "three3"));
    MPI_CHECK(MPI_Info_set(info, "beta", "TWO")); /* replaces, keeps position */
    MPI_CHECK(MPI_Info_get_nkeys(info, &n));
    CHECK(n == 3, "nkeys %d", n);
    const char *order[] = {"alpha", "beta", "gamma"};
    for (int k = 0; k < 3; k++) {
        MPI_CHECK(MPI_Info_get_nthkey(info, k, key));
        CHECK(strcmp(key, order[k]) == 0, "key %d is %s, expected %s", k, key, order[k]);
    }
    MPI_CHECK(MPI_Info_get(info, "beta", MPI_MAX_INFO_VAL, val, &flag));
    CHECK(flag && strcmp(val, "TWO") == 0, "beta = %s (flag %d)", val, flag);
    MPI_CHECK(MPI_Info_get_valuelen(info, "gamma", &len, &flag));
    CHECK(flag && len == 6, "valuelen %d", len);
    len = 4;
    MPI_CHECK(MPI_Info_get_string(info, "gamma", &len, val, &flag));
    CHECK(flag && len == 7 && strcmp(val, "thr") == 0, "get_string: len %d val %s", len, val);
    MPI_CHECK(MPI_Info_get(info, "delta", MPI_MAX_INFO_VAL, val, &flag));
    CHECK(!flag, "missing key found");
    MPI_CHECK(MPI_Info_dup(info, &copy));
    MPI_CHECK(MPI_Info_delete(info, "alpha"));
    EXPECT_CLASS(MPI_Info_delete(info, "alpha"), MPI_ERR_INFO_NOKEY);
    MPI_CHECK(MPI_Info_get_nkeys(info, &n));
    CHECK(n == 2, "nkeys after delete %d", n);
    MPI_CHECK(MPI_Info_get_nkeys(copy, &n));
    CHECK(n == 3, "dup is independent: nkeys %d", n);
    EXPECT_CLASS(MPI_Info_get_nthkey(info, 5, key), MPI_ERR_ARG);

    /* communicator hints: the standard's (mpi_*) hints are kept and returned by
     * MPI_Comm_get_info; keys the library does not know are ignored (as MPICH does). */
    MPI_Comm c;
    MPI_Info used;
    int ferrite = t_expect_ferrite();
    MPI_CHECK(MPI_Info_set(copy, "mpi_assert_no_any_tag", "true"));
    MPI_CHECK(MPI_Comm_dup_with_info(MPI_COMM_WORLD, copy, &c));
    MPI_CHECK(MPI_Comm_get_info(c, &used));
    MPI_CHECK(MPI_Info_get(used, "beta", MPI_MAX_INFO_VAL, val, &flag));
    CHECK(!flag, "an unknown hint (beta) was not ignored");
    MPI_CHECK(MPI_Info_get(used, "mpi_assert_no_any_tag", MPI_MAX_INFO_VAL, val, &flag));
    CHECK(!ferrite || (flag && strcmp(val, "true") == 0), "mpi_assert_no_any_tag: flag %d", flag);
    MPI_CHECK(MPI_Info_free(&used));
    MPI_CHECK(MPI_Comm_set_info(c, info));
    MPI_CHECK(MPI_Comm_get_info(c, &used));
    MPI_CHECK(MPI_Info_get_nkeys(used, &n));
    CHECK(!ferrite || n == 0, "hints after set_info with only unknown keys: %d", n);
    MPI_CHECK(MPI_Info_free(&used));
    MPI_CHECK(MPI_Comm_free(&c));

#if MPI_VERSION > 4 || (MPI_VERSION == 4 && MPI_SUBVERSION >= 1)
    /* MPI_Get_hw_resource_info gives a new info object of its own (Ferrite's is empty). */
    {
        MPI_Info hw = MPI_INFO_NULL;
        MPI_CHECK(MPI_Get_hw_resource_info(&hw));
        CHECK(hw != MPI_INFO_NULL, "MPI_Get_hw_resource_info gave MPI_INFO_NULL");
        MPI_CHECK(MPI_Info_get_nkeys(hw, &n));
        CHECK(n >= 0, "hw info nkeys %d", n);
        MPI_CHECK(MPI_Info_free(&hw));
    }
#endif

    /* MPI_INFO_ENV is readable */
    MPI_CHECK(MPI_Info_get_nkeys(MPI_INFO_ENV, &n));
    CHECK(n >= 0, "INFO_ENV nkeys %d", n);
    MPI_CHECK(MPI_Info_free(&info));
    MPI_CHECK(MPI_Info_free(&copy));
    CHECK(info == MPI_INFO_NULL, "Info_free did not set MPI_INFO_NULL");
    if (ferrite) /* MPICH says MPI_ERR_ARG */
        EXPECT_CLASS(MPI_Info_get_nkeys(MPI_INFO_NULL, &n), MPI_ERR_INFO);
    t_finish("info");
    return 0;
}
