/* np: 2 4 16 */
/* Idle ranks block in the kernel instead of spinning: while rank 0 sleeps for a second
 * before sending, every other rank waits in MPI_Recv and must use only a small part of that
 * second of CPU time (the limit is generous: spinning would burn nearly all of it).
 * Debian's MPICH busy-polls and fails this test at -n 2 and 4, as it should. */
#include "common.h"
#include <sys/resource.h>
#include <time.h>

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int x = 0;
    if (t_rank == 0) {
        struct timespec ts = {1, 0};
        nanosleep(&ts, NULL);
        for (int r = 1; r < t_size; r++) {
            x = 1000 + r;
            MPI_CHECK(MPI_Send(&x, 1, MPI_INT, r, 0, MPI_COMM_WORLD));
        }
    } else {
        double before = cpu_seconds();
        MPI_CHECK(MPI_Recv(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        double used = cpu_seconds() - before;
        CHECK(x == 1000 + t_rank, "received %d, expected %d", x, 1000 + t_rank);
        CHECK(used < 0.3, "rank %d used %.3f s of CPU while waiting about 1 s in MPI_Recv",
              t_rank, used);
    }
    t_finish("idle");
    return 0;
}
