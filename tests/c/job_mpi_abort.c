/* np: 2 4 */
/* exit: 7 */
/* Job-failure test, judged by tests/c/run.sh rather than by its own exit status: the last
 * rank calls MPI_Abort(MPI_COMM_WORLD, 7) while the others wait in MPI_Recv for a message
 * that never comes. The launcher must end the whole job promptly with a non-zero status. */
#include "common.h"
#include <signal.h>
#include <time.h>

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int last = t_size - 1;
    if (t_rank == last) {
        /* Give the others time to block in MPI_Recv. */
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
        fprintf(stderr, "job_mpi_abort: the last rank fails now\n");
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 7);
        _exit(3); /* not reached */
    }
    int x;
    MPI_CHECK(MPI_Recv(&x, 1, MPI_INT, last, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    FAIL("MPI_Recv returned although rank %d never sent", last);
    return 0;
}
