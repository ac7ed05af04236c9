/* np: 1 2 4 16 */
/* Environment: Initialized/Finalized before, during and after; Init_thread, Query_thread,
 * Is_thread_main; Get_version (before Init too; 4.x on Ferrite, at least 3 elsewhere);
 * Get_library_version (names Ferrite on Ferrite); Get_processor_name; Wtime monotonic and
 * advancing, Wtick; Alloc_mem/Free_mem; Pcontrol; COMM_SELF. */
#include "common.h"
#include <time.h>

int main(int argc, char **argv)
{
    int flag = -1, v = -1, sv = -1;
    MPI_CHECK(MPI_Initialized(&flag));
    CHECK(flag == 0, "MPI_Initialized before MPI_Init: %d", flag);
    MPI_CHECK(MPI_Finalized(&flag));
    CHECK(flag == 0, "MPI_Finalized before MPI_Init: %d", flag);
    MPI_CHECK(MPI_Get_version(&v, &sv));
    CHECK(v >= 3, "MPI_Get_version before MPI_Init: %d.%d", v, sv);

    int provided = -1;
    MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &t_rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &t_size));
    int ferrite = t_expect_ferrite();
    CHECK(MPI_THREAD_SINGLE < MPI_THREAD_FUNNELED && MPI_THREAD_FUNNELED < MPI_THREAD_SERIALIZED
          && MPI_THREAD_SERIALIZED < MPI_THREAD_MULTIPLE, "thread level constants out of order");
    CHECK(provided >= MPI_THREAD_SINGLE && provided <= MPI_THREAD_MULTIPLE,
          "Init_thread provided %d", provided);
    int q = -1;
    MPI_CHECK(MPI_Query_thread(&q));
    CHECK(q == provided, "Query_thread %d, Init_thread provided %d", q, provided);
    MPI_CHECK(MPI_Is_thread_main(&flag));
    CHECK(flag == 1, "Is_thread_main false on the thread that called Init_thread");
    MPI_CHECK(MPI_Initialized(&flag));
    CHECK(flag == 1, "MPI_Initialized after MPI_Init: %d", flag);
    MPI_CHECK(MPI_Finalized(&flag));
    CHECK(flag == 0, "MPI_Finalized before MPI_Finalize: %d", flag);

    MPI_CHECK(MPI_Get_version(&v, &sv));
    /* A binary built against another library's header (tests/mpich-binary) may run on a
     * library implementing a newer version, never an older one. */
    CHECK(v > MPI_VERSION || (v == MPI_VERSION && sv >= MPI_SUBVERSION),
          "Get_version %d.%d is older than the header's %d.%d", v, sv, MPI_VERSION, MPI_SUBVERSION);
    CHECK(!ferrite || v == 4, "Ferrite reports MPI version %d.%d, expected 4.x", v, sv);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = -1;
    MPI_CHECK(MPI_Get_library_version(lib, &len));
    CHECK(len > 0 && len < MPI_MAX_LIBRARY_VERSION_STRING && (int)strlen(lib) == len,
          "Get_library_version: length %d, strlen %zu", len, strlen(lib));
    if (getenv("FERRITE_TESTS_EXPECT") && strcmp(getenv("FERRITE_TESTS_EXPECT"), "ferrite") == 0)
        CHECK(strstr(lib, "Ferrite") != NULL, "library version does not name Ferrite: %s", lib);

    char name[MPI_MAX_PROCESSOR_NAME];
    MPI_CHECK(MPI_Get_processor_name(name, &len));
    CHECK(len > 0 && len < MPI_MAX_PROCESSOR_NAME && (int)strlen(name) == len,
          "Get_processor_name: length %d, strlen %zu", len, strlen(name));

    double tick = MPI_Wtick();
    CHECK(tick > 0.0 && tick < 1.0, "MPI_Wtick %g", tick);
    double t0 = MPI_Wtime(), prev = t0;
    for (int i = 0; i < 10000; i++) {
        double t = MPI_Wtime();
        CHECK(t >= prev, "MPI_Wtime went backwards: %.9f after %.9f", t, prev);
        prev = t;
    }
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double t1 = MPI_Wtime();
    CHECK(t1 - t0 >= 0.015 && t1 - t0 < 100.0, "MPI_Wtime advanced %g s over a 20 ms sleep",
          t1 - t0);

    void *mem = NULL;
    MPI_CHECK(MPI_Alloc_mem(1 << 20, MPI_INFO_NULL, &mem));
    CHECK(mem != NULL, "Alloc_mem gave NULL");
    memset(mem, 0x3c, 1 << 20);
    CHECK(((unsigned char *)mem)[(1 << 20) - 1] == 0x3c, "Alloc_mem memory not writable");
    /* Memory from Alloc_mem can be a message buffer. */
    int peer = t_partner();
    MPI_CHECK(MPI_Sendrecv_replace(mem, 1000, MPI_INT, peer, 0, peer, 0, MPI_COMM_WORLD,
                                   MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Free_mem(mem));

    MPI_CHECK(MPI_Pcontrol(0));
    MPI_CHECK(MPI_Pcontrol(1));
    MPI_CHECK(MPI_Pcontrol(2));

    int r = -1, s = -1;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_SELF, &r));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_SELF, &s));
    CHECK(r == 0 && s == 1, "MPI_COMM_SELF rank %d size %d", r, s);

    MPI_CHECK(MPI_Finalize());
    MPI_CHECK(MPI_Finalized(&flag));
    CHECK(flag == 1, "MPI_Finalized after MPI_Finalize: %d", flag);
    MPI_CHECK(MPI_Initialized(&flag));
    CHECK(flag == 1, "MPI_Initialized after MPI_Finalize: %d", flag);
    MPI_CHECK(MPI_Get_version(&v, &sv));
    if (t_rank == 0) printf("done: env\n");
    return 0;
}
