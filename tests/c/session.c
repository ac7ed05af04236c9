/* np: 1 2 4 */
/* The sessions model (MPI 4.1 section 11.3), with no MPI_Init: two sessions at once, their
 * info (thread_level), the process sets mpi://WORLD and mpi://SELF (names, lengths, sizes),
 * groups from them and communicators from those groups carrying checked data, a bad set
 * name raised on the session's handler, and the runtime ending with the last session
 * (MPI_Initialized and MPI_Finalized stay false: they describe the world model). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c, ...)                                                                         \
    do {                                                                                      \
        if (!(c)) {                                                                           \
            fprintf(stderr, "FAILED at %s:%d: ", __FILE__, __LINE__);                         \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fprintf(stderr, "\n");                                                            \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)
#define OK(call) CHECK((call) == MPI_SUCCESS, "%s failed", #call)

int main(void)
{
    int flag = -1;
    OK(MPI_Initialized(&flag));
    CHECK(flag == 0, "MPI_Initialized before anything: %d", flag);
    MPI_Info want;
    OK(MPI_Info_create(&want));
    OK(MPI_Info_set(want, "thread_level", "MPI_THREAD_FUNNELED"));
    MPI_Session s1 = MPI_SESSION_NULL, s2 = MPI_SESSION_NULL;
    OK(MPI_Session_init(want, MPI_ERRORS_RETURN, &s1));
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s2));
    OK(MPI_Info_free(&want));
    CHECK(s1 != MPI_SESSION_NULL && s2 != MPI_SESSION_NULL && s1 != s2, "session handles");

    MPI_Info got;
    char v[64];
    OK(MPI_Session_get_info(s1, &got));
    OK(MPI_Info_get(got, "thread_level", sizeof v - 1, v, &flag));
    CHECK(flag && strcmp(v, "MPI_THREAD_FUNNELED") == 0, "thread_level %s", flag ? v : "unset");
    OK(MPI_Info_free(&got));

    int n = 0, world = -1, self = -1;
    OK(MPI_Session_get_num_psets(s1, MPI_INFO_NULL, &n));
    CHECK(n >= 2, "%d process sets", n);
    for (int i = 0; i < n; i++) {
        int len = 0;
        OK(MPI_Session_get_nth_pset(s1, MPI_INFO_NULL, i, &len, NULL));
        char *name = malloc(len);
        OK(MPI_Session_get_nth_pset(s1, MPI_INFO_NULL, i, &len, name));
        CHECK((int)strlen(name) + 1 == len, "pset %d: %s, length %d", i, name, len);
        if (strcmp(name, "mpi://WORLD") == 0) world = i;
        if (strcmp(name, "mpi://SELF") == 0) self = i;
        free(name);
    }
    CHECK(world >= 0 && self >= 0, "WORLD %d SELF %d", world, self);

    /* WORLD: size from the set's info, a communicator from its group, an allreduce. */
    MPI_Info pi;
    OK(MPI_Session_get_pset_info(s1, "mpi://WORLD", &pi));
    OK(MPI_Info_get(pi, "mpi_size", sizeof v - 1, v, &flag));
    int size = atoi(v);
    OK(MPI_Info_free(&pi));
    MPI_Group g;
    MPI_Comm c;
    OK(MPI_Group_from_session_pset(s1, "mpi://WORLD", &g));
    OK(MPI_Comm_create_from_group(g, "org.ferrite.test.session", MPI_INFO_NULL, MPI_ERRORS_RETURN,
                                  &c));
    OK(MPI_Group_free(&g));
    int rank, csize, sum = -1;
    OK(MPI_Comm_rank(c, &rank));
    OK(MPI_Comm_size(c, &csize));
    CHECK(flag && csize == size, "mpi_size %d, communicator of %d", size, csize);
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, c));
    CHECK(sum == size * (size - 1) / 2, "allreduce over the session's WORLD: %d", sum);
    int token = rank == 0 ? 4242 : -1;
    OK(MPI_Bcast(&token, 1, MPI_INT, 0, c));
    CHECK(token == 4242, "bcast %d", token);

    /* SELF through the second session. */
    MPI_Comm sc;
    OK(MPI_Group_from_session_pset(s2, "mpi://self", &g));
    OK(MPI_Comm_create_from_group(g, "org.ferrite.test.self", MPI_INFO_NULL, MPI_ERRORS_RETURN,
                                  &sc));
    OK(MPI_Group_free(&g));
    OK(MPI_Comm_size(sc, &csize));
    CHECK(csize == 1, "SELF communicator of %d", csize);
    OK(MPI_Comm_free(&sc));

    /* Errors on a session go to its handler (MPI_ERRORS_RETURN here). */
    int rc = MPI_Group_from_session_pset(s2, "mpi://nowhere", &g), cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_ARG, "unknown process set: class %d", cls);

    OK(MPI_Comm_free(&c));
    OK(MPI_Session_finalize(&s2));
    CHECK(s2 == MPI_SESSION_NULL, "finalize left the handle");
    OK(MPI_Session_finalize(&s1));
    OK(MPI_Initialized(&flag));
    CHECK(flag == 0, "MPI_Initialized after sessions: %d", flag);
    OK(MPI_Finalized(&flag));
    CHECK(flag == 0, "MPI_Finalized after sessions: %d", flag);
    if (rank == 0) printf("done: session\n");
    return 0;
}
