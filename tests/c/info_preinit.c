/* np: 1 2 */
/* MPI 4.1 section 10.1: the MPI_Info functions work before MPI_Init and after MPI_Finalize.
 * An info made before MPI_Init is used after it (as hints of MPI_Comm_dup_with_info), and
 * MPI_Info_create_env gives the launch environment before MPI_Init. */
#include "common.h"

static void expect(MPI_Info info, const char *key, const char *want)
{
    char v[MPI_MAX_INFO_VAL + 1];
    int flag = 0, len = sizeof v;
    MPI_CHECK(MPI_Info_get_string(info, key, &len, v, &flag));
    CHECK(flag && strcmp(v, want) == 0, "info key %s: flag %d value '%s', expected '%s'", key, flag,
          flag ? v : "", want);
}

int main(int argc, char **argv)
{
    MPI_Info before, copy, env;
    int nkeys = -1, flag = -1;
    MPI_CHECK(MPI_Info_create(&before));
    MPI_CHECK(MPI_Info_set(before, "mpi_assert_no_any_tag", "true"));
    MPI_CHECK(MPI_Info_set(before, "ferrite_test", "made before MPI_Init"));
    MPI_CHECK(MPI_Info_dup(before, &copy));
    MPI_CHECK(MPI_Info_delete(copy, "mpi_assert_no_any_tag"));
    MPI_CHECK(MPI_Info_get_nkeys(copy, &nkeys));
    CHECK(nkeys == 1, "copy has %d keys", nkeys);
    expect(before, "ferrite_test", "made before MPI_Init");
    MPI_CHECK(MPI_Info_create_env(argc, argv, &env));
    MPI_CHECK(MPI_Info_free(&env));
    MPI_CHECK(MPI_Initialized(&flag));
    CHECK(flag == 0, "MPI_Initialized is %d before MPI_Init", flag);

    t_init(&argc, &argv);
    /* The same object works after MPI_Init. */
    expect(copy, "ferrite_test", "made before MPI_Init");
    MPI_Comm dup;
    MPI_CHECK(MPI_Comm_dup_with_info(MPI_COMM_WORLD, before, &dup));
    MPI_Info used;
    MPI_CHECK(MPI_Comm_get_info(dup, &used));
    MPI_CHECK(MPI_Info_free(&used));
    MPI_CHECK(MPI_Comm_free(&dup));
    /* Ferrite's MPI_INFO_ENV knows the job's size once MPI runs (the key is optional:
     * MPICH 4.0 does not set it). */
    char want[32];
    snprintf(want, sizeof want, "%d", t_size);
    if (t_is_ferrite()) expect(MPI_INFO_ENV, "maxprocs", want);
    MPI_CHECK(MPI_Info_free(&before));
    if (t_rank == 0) printf("done: info_preinit\n");
    fflush(stdout);
    MPI_CHECK(MPI_Finalize());

    /* ...and after MPI_Finalize. */
    MPI_CHECK(MPI_Info_set(copy, "after", "finalize"));
    expect(copy, "after", "finalize");
    MPI_CHECK(MPI_Info_free(&copy));
    CHECK(copy == MPI_INFO_NULL, "MPI_Info_free did not reset the handle");
    return 0;
}
