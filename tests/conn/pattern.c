/* One communication pattern, chosen by argv[1], with its data checked, so the connection
 * counts in FERRITE_REPORT's JSON belong to a known pattern:
 *   none, ring, pingpong (pairs 2i <-> 2i+1), alltoall (every pair, point-to-point, one
 *   message each way; alltoallN: N messages each way), barrier, bcast, allreduce, allgather,
 *   alltoall_coll (MPI_Alltoall), late_close (below). */
#include "../c/common.h"
#include <unistd.h>

static void ring(void)
{
    int next = (t_rank + 1) % t_size, prev = (t_rank + t_size - 1) % t_size;
    for (int lap = 0; lap < 3; lap++) {
        int out = t_rank * 100 + lap, in = -1;
        MPI_CHECK(MPI_Sendrecv(&out, 1, MPI_INT, next, lap, &in, 1, MPI_INT, prev, lap,
                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(in == prev * 100 + lap, "ring lap %d: got %d from %d", lap, in, prev);
    }
}

static void pingpong(void)
{
    int peer = t_rank ^ 1;
    if (peer >= t_size) return;
    for (int i = 0; i < 5; i++) {
        int v = i, w = -1;
        if (t_rank % 2 == 0) {
            MPI_CHECK(MPI_Send(&v, 1, MPI_INT, peer, i, MPI_COMM_WORLD));
            MPI_CHECK(MPI_Recv(&w, 1, MPI_INT, peer, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(w == i + 1, "pingpong %d: got %d", i, w);
        } else {
            MPI_CHECK(MPI_Recv(&w, 1, MPI_INT, peer, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(w == i, "pingpong %d: got %d", i, w);
            w++;
            MPI_CHECK(MPI_Send(&w, 1, MPI_INT, peer, i, MPI_COMM_WORLD));
        }
    }
}

static void alltoall_p2p(int reps)
{
    for (int d = 1; d < t_size; d++) {
        int to = (t_rank + d) % t_size, from = (t_rank + t_size - d) % t_size;
        for (int k = 0; k < reps; k++) {
            int out = (t_rank * 1000 + to) * 100 + k, in = -1;
            MPI_CHECK(MPI_Sendrecv(&out, 1, MPI_INT, to, d, &in, 1, MPI_INT, from, d,
                                   MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(in == (from * 1000 + t_rank) * 100 + k, "alltoall: got %d from %d", in, from);
        }
    }
}

/* Rank 1 talks with rank 2, which then goes into MPI_Finalize; then rank 1 sends to rank 0.
 * Under FERRITE_CONN_MAX=1 rank 1 must first close its connection to rank 2, and rank 2
 * answers that close from inside MPI_Finalize (whose barrier makes progress), so rank 1
 * never opens a connection over budget. The pause only makes sure rank 2 is in Finalize. */
static void late_close(void)
{
    int v = t_rank, w = -1;
    if (t_rank == 1) {
        MPI_CHECK(MPI_Sendrecv(&v, 1, MPI_INT, 2, 0, &w, 1, MPI_INT, 2, 0, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
        CHECK(w == 2, "late_close: got %d from 2", w);
        usleep(200000);
        MPI_CHECK(MPI_Send(&v, 1, MPI_INT, 0, 1, MPI_COMM_WORLD));
    } else if (t_rank == 2) {
        MPI_CHECK(MPI_Sendrecv(&v, 1, MPI_INT, 1, 0, &w, 1, MPI_INT, 1, 0, MPI_COMM_WORLD,
                               MPI_STATUS_IGNORE));
        CHECK(w == 1, "late_close: got %d from 1", w);
    } else if (t_rank == 0) {
        MPI_CHECK(MPI_Recv(&w, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(w == 1, "late_close: got %d from 1", w);
    }
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    const char *p = argc > 1 ? argv[1] : "none";
    int n = t_size;
    if (!strcmp(p, "ring")) ring();
    else if (!strcmp(p, "late_close") && n >= 3) late_close();
    else if (!strcmp(p, "pingpong")) pingpong();
    else if (!strncmp(p, "alltoall", 8) && (p[8] == 0 || (p[8] >= '1' && p[8] <= '9')))
        alltoall_p2p(p[8] ? atoi(p + 8) : 1);
    else if (!strcmp(p, "barrier")) MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    else if (!strcmp(p, "bcast")) {
        int v = t_rank == 0 ? 4242 : 0;
        MPI_CHECK(MPI_Bcast(&v, 1, MPI_INT, 0, MPI_COMM_WORLD));
        CHECK(v == 4242, "bcast: got %d", v);
    } else if (!strcmp(p, "allreduce")) {
        int v = t_rank, s = -1;
        MPI_CHECK(MPI_Allreduce(&v, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        CHECK(s == n * (n - 1) / 2, "allreduce: got %d", s);
    } else if (!strcmp(p, "allgather")) {
        int *all = malloc(sizeof(int) * n);
        MPI_CHECK(MPI_Allgather(&t_rank, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD));
        for (int i = 0; i < n; i++) CHECK(all[i] == i, "allgather: [%d] = %d", i, all[i]);
        free(all);
    } else if (!strcmp(p, "alltoall_coll")) {
        int *out = malloc(sizeof(int) * n), *in = malloc(sizeof(int) * n);
        for (int i = 0; i < n; i++) out[i] = t_rank * 1000 + i;
        MPI_CHECK(MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, MPI_COMM_WORLD));
        for (int i = 0; i < n; i++)
            CHECK(in[i] == i * 1000 + t_rank, "alltoall_coll: [%d] = %d", i, in[i]);
        free(out);
        free(in);
    } else if (strcmp(p, "none")) {
        CHECK(0, "unknown pattern %s", p);
    }
    t_finish(p);
    return 0;
}
