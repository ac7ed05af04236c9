/* np: 2 4 */
/* Job-failure test, judged by tests/c/run.sh rather than by its own exit status: the last
 * rank makes an erroneous call (a send to a rank that does not exist) under the default
 * error handler MPI_ERRORS_ARE_FATAL, while the others wait in MPI_Recv. The error must
 * end the whole job promptly with a non-zero status. */
#include "common.h"
#include <time.h>

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int last = t_size - 1;
    if (t_rank == last) {
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
        fprintf(stderr, "job_fatal_error: the last rank makes an erroneous call now\n");
        fflush(stderr);
        int x = 0;
        MPI_Send(&x, 1, MPI_INT, t_size + 5, 0, MPI_COMM_WORLD);
        FAIL("MPI_Send to an invalid rank returned under MPI_ERRORS_ARE_FATAL");
    }
    int x;
    MPI_CHECK(MPI_Recv(&x, 1, MPI_INT, last, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    FAIL("MPI_Recv returned although rank %d never sent", last);
    return 0;
}
