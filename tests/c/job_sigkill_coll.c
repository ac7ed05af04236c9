/* np: 2 4 */
/* exit: 137 */
/* Job-failure test, judged by tests/c/run.sh rather than by its own exit status: the last
 * rank is killed by SIGKILL in the middle of a run of MPI_Allreduce calls, while the others
 * are inside one (default handler MPI_ERRORS_ARE_FATAL). The survivors fail too, but the
 * cause the launcher reports must be the killed rank: exit 128 + 9, a line naming it. */
#include "common.h"
#include <signal.h>

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    int last = t_size - 1;
    for (int i = 0; i < 1000000; i++) {
        if (t_rank == last && i == 200) {
            fprintf(stderr, "job_sigkill_coll: the last rank fails now\n");
            fflush(stderr);
            kill(getpid(), SIGKILL);
        }
        int in[16], out[16];
        for (int j = 0; j < 16; j++) in[j] = t_rank + i + j;
        MPI_CHECK(MPI_Allreduce(in, out, 16, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        for (int j = 0; j < 16; j++)
            CHECK(out[j] == t_size * (t_size - 1) / 2 + t_size * (i + j), "iteration %d: got %d",
                  i, out[j]);
    }
    FAIL("the Allreduce loop ended although rank %d was killed", last);
    return 0;
}
