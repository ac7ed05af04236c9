/* Connection set-up when file descriptors run out (FERRITE_TRANSPORTS=tcp,self).
 * `fdlimit K`: after MPI_Init, every rank opens /dev/null until open fails (EMFILE), then
 * closes K of them, so it has K descriptors left; then it exchanges checked data with every
 * other rank (MPI_ERRORS_RETURN). Each rank prints one line per failed exchange
 * ("rank R: peer P: class C: message") and "rank R: F fails E errs". Bad data is E > 0;
 * a failed exchange must carry a clear class and message; a hang is the harness's timeout.
 * `fdlimit -S`: no exhaustion; each rank prints "listening R PID" and sleeps S seconds
 * first (a stranger then floods its listener; see fdlimit.sh), then for 1.5 s lets MPI
 * accept the flood while it opens 32 files again and again: every open must succeed.
 * `fdlimit K recv`: only rank 0 is left K descriptors, and it only receives (one message
 * from every other rank); the others only send to it.
 * `fdlimit K full`: as `fdlimit K`, but every rank uses up its descriptors again right
 * before MPI_Finalize, which must still succeed (prints "rank R: MPI_Finalize: message"
 * and exits 1 if not). */
#include <mpi.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int fds[1 << 20];

/* Prints a failed call's class and message as "rank R: peer P: class C: message". */
static void report(int rank, int p, int rc)
{
    char s[MPI_MAX_ERROR_STRING];
    int l, c;
    MPI_Error_class(rc, &c);
    MPI_Error_string(rc, s, &l);
    printf("rank %d: peer %d: class %d: %s\n", rank, p, c, s);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, k = argc > 1 ? atoi(argv[1]) : 0, n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int recv_only = argc > 2 && argv[2][0] == 'r';
    int full_at_end = argc > 2 && argv[2][0] == 'f';
    if (k >= 0 && (!recv_only || rank == 0)) {
        for (int fd; n < (1 << 20) && (fd = open("/dev/null", O_RDONLY)) >= 0;) fds[n++] = fd;
        for (int i = 0; i < k && n > 0; i++) close(fds[--n]);
    } else if (k < 0) {
        printf("listening %d %d\n", rank, (int)getpid());
        fflush(stdout);
        sleep(-k);
    }
    int errs = 0, fails = 0;
    if (k < 0) {
        /* The stranger's connections wait now (more come as the kernel retries those its
         * backlog dropped): for 1.5 s, let MPI accept them while the program keeps opening
         * files. MPI may hold only so many unidentified connections, never all descriptors. */
        int least = 32;
        for (double t = MPI_Wtime(); MPI_Wtime() - t < 1.5;) {
            int flag, got = 0, tmp[32];
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            while (got < 32 && (tmp[got] = open("/dev/null", O_RDONLY)) >= 0) got++;
            for (int i = 0; i < got; i++) close(tmp[i]);
            if (got < least) least = got;
            usleep(10000);
        }
        if (least < 32) {
            printf("rank %d: could open only %d of 32 files while the stranger's connections waited\n",
                   rank, least);
            errs++;
        }
    }
    double t0 = MPI_Wtime();
    for (int p = 1; recv_only && p < size; p++) {
        int out = 7 * rank, in = -1;
        int rc = rank == 0 ? MPI_Recv(&in, 1, MPI_INT, p, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE)
                 : p == rank ? MPI_Send(&out, 1, MPI_INT, 0, 0, MPI_COMM_WORLD) : MPI_SUCCESS;
        if (rc != MPI_SUCCESS) {
            report(rank, rank == 0 ? p : 0, rc);
            fails++;
        } else if (rank == 0 && in != 7 * p) {
            printf("rank %d: bad data from %d\n", rank, p);
            errs++;
        }
    }
    for (int p = 0; !recv_only && p < size; p++) {
        if (p == rank) continue;
        int out[4] = {rank, p, 7 * rank, 9 * p}, in[4] = {-1, -1, -1, -1};
        int rc = MPI_Sendrecv(out, 4, MPI_INT, p, 0, in, 4, MPI_INT, p, 0, MPI_COMM_WORLD,
                              MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
            report(rank, p, rc);
            fails++;
        } else if (in[0] != p || in[1] != rank || in[2] != 7 * p || in[3] != 9 * rank) {
            printf("rank %d: bad data from %d\n", rank, p);
            errs++;
        }
    }
    printf("rank %d: %d fails %d errs in %.1f s\n", rank, fails, errs, MPI_Wtime() - t0);
    fflush(stdout);
    while (n > 0) close(fds[--n]);
    if (full_at_end) {
        /* A stranger may hold every descriptor the process may open while it finalizes. */
        for (int fd; n < (1 << 20) && (fd = open("/dev/null", O_RDONLY)) >= 0;) fds[n++] = fd;
        int rc = MPI_Finalize();
        if (rc != MPI_SUCCESS) {
            char s[MPI_MAX_ERROR_STRING];
            int l;
            MPI_Error_string(rc, s, &l);
            printf("rank %d: MPI_Finalize: %s\n", rank, s);
            errs++;
        }
        return errs ? 1 : 0;
    }
    MPI_Finalize();
    return errs ? 1 : 0;
}
