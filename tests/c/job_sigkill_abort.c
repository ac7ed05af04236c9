/* np: 2 4 */
/* exit: 137 */
/* Job-failure test, judged by tests/c/run.sh rather than by its own exit status: as
 * job_sigkill_coll, the last rank is killed by SIGKILL amid MPI_Allreduce calls, but the
 * survivors use MPI_ERRORS_RETURN and call MPI_Abort(5) the moment a call fails, so their
 * abort can reach the launcher before it has read the killed rank's SIGCHLD. The cause
 * reported must still be the killed rank (exit 128 + 9), never a survivor's abort. */
#include "common.h"
#include <signal.h>

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int last = t_size - 1;
    for (int i = 0; i < 1000000; i++) {
        if (t_rank == last && i == 200) {
            fprintf(stderr, "job_sigkill_abort: the last rank fails now\n");
            fflush(stderr);
            kill(getpid(), SIGKILL);
        }
        int in = t_rank + i, out = -1;
        if (MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
            MPI_Abort(MPI_COMM_WORLD, 5);
        CHECK(out == t_size * (t_size - 1) / 2 + t_size * i, "iteration %d: got %d", i, out);
    }
    FAIL("the Allreduce loop ended although rank %d was killed", last);
    return 0;
}
