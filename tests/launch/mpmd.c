/* An MPMD job: `mpirun -n N0 mpmd 0 N0 [U] : -n N1 mpmd 1 N0 [U]`. Each rank checks
 * MPI_APPNUM against its first argument and MPI_UNIVERSE_SIZE against U (default the job's
 * size; -1: must not be set), then the
 * programs exchange data: an allgather of (appnum, rank-derived value) checked everywhere,
 * and a message from rank 0 (program 0) to the last rank (program 1) answered doubled. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void fail(int rank, const char *what, long got, long want) {
    fprintf(stderr, "rank %d: %s: got %ld, want %ld\n", rank, what, got, want);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv) {
    int rank, size, flag, *attr;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3) {
        fprintf(stderr, "usage: mpmd APPNUM FIRST-PROGRAM-RANKS [UNIVERSE-SIZE]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int want_app = atoi(argv[1]), n0 = atoi(argv[2]);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &attr, &flag);
    if (!flag) fail(rank, "MPI_APPNUM set", 0, 1);
    if (*attr != want_app) fail(rank, "MPI_APPNUM", *attr, want_app);
    int app = *attr;
    /* Ferrite's mpirun gives the job's size; Hydra none (-1), and then it is not set. */
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &attr, &flag);
    int want_universe = argc > 3 ? atoi(argv[3]) : size;
    if ((want_universe < 0 && flag) || (want_universe >= 0 && (!flag || *attr != want_universe)))
        fail(rank, "MPI_UNIVERSE_SIZE", flag ? *attr : -1, want_universe);

    int mine[2] = {app, 7 * rank + 3};
    int *all = malloc(2 * sizeof(int) * size);
    MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++) {
        if (all[2 * r] != (r < n0 ? 0 : 1)) fail(rank, "appnum of a peer", all[2 * r], r >= n0);
        if (all[2 * r + 1] != 7 * r + 3) fail(rank, "value of a peer", all[2 * r + 1], 7 * r + 3);
    }
    free(all);

    double v[4];
    if (rank == 0 && size > 1) {
        for (int i = 0; i < 4; i++) v[i] = 1.5 * i;
        MPI_Send(v, 4, MPI_DOUBLE, size - 1, 11, MPI_COMM_WORLD);
        MPI_Recv(v, 4, MPI_DOUBLE, size - 1, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < 4; i++)
            if (v[i] != 3.0 * i) fail(rank, "reply from the other program", (long)v[i], 3 * i);
    } else if (rank == size - 1 && size > 1) {
        MPI_Recv(v, 4, MPI_DOUBLE, 0, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < 4; i++) v[i] *= 2;
        MPI_Send(v, 4, MPI_DOUBLE, 0, 12, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("done: mpmd app %d of %d ranks\n", app, size);
    MPI_Finalize();
    return 0;
}
