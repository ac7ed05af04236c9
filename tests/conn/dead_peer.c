/* A peer that dies: rank 1 drops its tcp sockets without the clean close a finalizing process
 * does (as a crash would; it stays alive a while so the launcher does not end the job first).
 * Rank 0, under MPI_ERRORS_RETURN, must get MPI_ERR_PROC_ABORTED with a message naming rank 1
 * from a receive posted before the failure, a send after it and a receive posted after it.
 * Rank 0 then prints "dead_peer: ok" and leaves without MPI_Finalize (its peer is gone).
 * Run with 2 ranks over FERRITE_TRANSPORTS=tcp,self by tests/conn/run.sh. */
#include "../c/common.h"
#include <sys/socket.h>
#include <time.h>

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Closes every IPv4/IPv6 socket (the tcp transport's), keeping the PMI connection. */
static void drop_inet_sockets(void)
{
    const char *pmi = getenv("PMI_FD");
    int pmifd = pmi ? atoi(pmi) : -1;
    for (int fd = 3; fd < 4096; fd++) {
        struct sockaddr_storage a;
        socklen_t l = sizeof a;
        if (fd == pmifd || getsockname(fd, (struct sockaddr *)&a, &l) != 0) continue;
        if (a.ss_family == AF_INET || a.ss_family == AF_INET6) close(fd);
    }
}

static void expect_aborted(int rc, const char *what)
{
    CHECK(rc != MPI_SUCCESS, "%s succeeded although rank 1 is gone", what);
    CHECK(t_class(rc) == MPI_ERR_PROC_ABORTED, "%s: class %d, not MPI_ERR_PROC_ABORTED: %s",
          what, t_class(rc), t_errstr(rc));
    CHECK(strstr(t_errstr(rc), "rank 1") != NULL, "%s: message names no rank 1: %s", what,
          t_errstr(rc));
    printf("dead_peer: %s: %s\n", what, t_errstr(rc));
}

int main(int argc, char **argv)
{
    t_init(&argc, &argv);
    CHECK(t_size == 2, "run with 2 ranks");
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int x = 7, y = -1;
    if (t_rank == 1) {
        MPI_CHECK(MPI_Recv(&y, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        MPI_CHECK(MPI_Send(&x, 1, MPI_INT, 0, 1, MPI_COMM_WORLD));
        nap_ms(300); /* rank 0 posts its receive meanwhile */
        drop_inet_sockets();
        nap_ms(20000); /* ended by the launcher once rank 0 has left */
        _exit(0);
    }
    MPI_CHECK(MPI_Send(&x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Recv(&y, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    MPI_Request req;
    MPI_CHECK(MPI_Irecv(&y, 1, MPI_INT, 1, 2, MPI_COMM_WORLD, &req));
    MPI_Status st;
    expect_aborted(MPI_Wait(&req, &st), "a receive posted before");
    CHECK(st.MPI_SOURCE == 1, "status source %d", st.MPI_SOURCE);
    expect_aborted(MPI_Send(&x, 1, MPI_INT, 1, 3, MPI_COMM_WORLD), "a send after");
    expect_aborted(MPI_Recv(&y, 1, MPI_INT, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                   "a receive posted after");
    printf("dead_peer: ok\n");
    fflush(stdout);
    _exit(0);
}
