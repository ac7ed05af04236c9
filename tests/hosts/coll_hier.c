/* Two-level collectives across hosts (coll/hier.rs), run by tests/hosts/run.sh with ranks
 * on several network namespaces ("hosts"), unevenly.
 *
 *  1. MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) groups exactly the ranks of one network
 *     namespace (the launcher's node map), ordered by rank.
 *  2. Barrier, Bcast, Reduce (sum, max), Allreduce (sum, max, double sum), Allgather with
 *     data checked, the algorithms forced to `hier`: every root, in place and not, 4 B to
 *     80 KiB, on MPI_COMM_WORLD and on a communicator in reverse rank order.
 *  3. Only leaders send between hosts: the pvar net_offhost_packets_sent (packets of the
 *     transports that reach other hosts) does not move on ranks that do not lead their host
 *     while those collectives run, and moves on leaders; with the flat algorithms forced,
 *     it moves on some non-leader (so the counter does see that traffic). */
#include "../c/common.h"

#define NT 64

static MPI_T_pvar_session sess;
static MPI_T_pvar_handle offhost;

static unsigned long long offhost_sent(void)
{
    unsigned long long v = 0;
    MPI_CHECK(MPI_T_pvar_read(sess, offhost, &v));
    return v;
}

static int val(int rank, int i, int salt)
{
    return (rank + 1) * 1000 + i * 7 + salt;
}

static void set_algos(const char *barrier, const char *bcast, const char *reduce,
                      const char *allreduce, const char *allgather)
{
    setenv("FERRITE_COLL_BARRIER_ALGO", barrier, 1);
    setenv("FERRITE_COLL_BCAST_ALGO", bcast, 1);
    setenv("FERRITE_COLL_REDUCE_ALGO", reduce, 1);
    setenv("FERRITE_COLL_ALLREDUCE_ALGO", allreduce, 1);
    setenv("FERRITE_COLL_ALLGATHER_ALGO", allgather, 1);
    MPI_CHECK(FERRITE_Coll_reload_knobs());
}

/* Every collective at `count` ints on `comm`, data checked. */
static void round_of(MPI_Comm comm, int count, int salt)
{
    int me, n;
    MPI_CHECK(MPI_Comm_rank(comm, &me));
    MPI_CHECK(MPI_Comm_size(comm, &n));
    int *a = malloc(sizeof(int) * count), *b = malloc(sizeof(int) * count);
    int *g = malloc(sizeof(int) * count * n);
    MPI_CHECK(MPI_Barrier(comm));
    for (int root = 0; root < n; root++) {
        for (int i = 0; i < count; i++) a[i] = me == root ? val(root, i, salt) : -1;
        MPI_CHECK(MPI_Bcast(a, count, MPI_INT, root, comm));
        for (int i = 0; i < count; i++)
            CHECK(a[i] == val(root, i, salt), "Bcast %d ints from %d: [%d] = %d", count, root,
                  i, a[i]);
        /* Reduce, sum, then in place at the root with max. */
        for (int i = 0; i < count; i++) a[i] = val(me, i, salt), b[i] = -1;
        MPI_CHECK(MPI_Reduce(a, b, count, MPI_INT, MPI_SUM, root, comm));
        if (me == root)
            for (int i = 0; i < count; i++) {
                int want = 1000 * n * (n + 1) / 2 + n * (i * 7 + salt);
                CHECK(b[i] == want, "Reduce sum %d ints to %d: [%d] = %d, want %d", count, root,
                      i, b[i], want);
            }
        for (int i = 0; i < count; i++) a[i] = val((me + i) % n, i, salt);
        if (me == root)
            MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, a, count, MPI_INT, MPI_MAX, root, comm));
        else
            MPI_CHECK(MPI_Reduce(a, NULL, count, MPI_INT, MPI_MAX, root, comm));
        if (me == root)
            for (int i = 0; i < count; i++)
                CHECK(a[i] == val(n - 1, i, salt), "Reduce in place max %d ints to %d: [%d] = %d",
                      count, root, i, a[i]);
    }
    for (int i = 0; i < count; i++) a[i] = val(me, i, salt);
    MPI_CHECK(MPI_Allreduce(a, b, count, MPI_INT, MPI_SUM, comm));
    for (int i = 0; i < count; i++)
        CHECK(b[i] == 1000 * n * (n + 1) / 2 + n * (i * 7 + salt), "Allreduce sum [%d] = %d", i,
              b[i]);
    for (int i = 0; i < count; i++) b[i] = val((me + i) % n, i, salt);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, b, count, MPI_INT, MPI_MAX, comm));
    for (int i = 0; i < count; i++)
        CHECK(b[i] == val(n - 1, i, salt), "Allreduce in place max [%d] = %d", i, b[i]);
    if (count <= 4096) {
        double *d = malloc(sizeof(double) * count), *e = malloc(sizeof(double) * count);
        for (int i = 0; i < count; i++) d[i] = 0.5 * val(me, i, salt);
        MPI_CHECK(MPI_Allreduce(d, e, count, MPI_DOUBLE, MPI_SUM, comm));
        for (int i = 0; i < count; i++)
            CHECK(e[i] == 0.5 * (1000.0 * n * (n + 1) / 2 + n * (i * 7 + salt)),
                  "Allreduce double [%d] = %g", i, e[i]);
        free(d);
        free(e);
    }
    /* Allgather, then in place. */
    for (int i = 0; i < count; i++) a[i] = val(me, i, salt);
    for (int i = 0; i < count * n; i++) g[i] = -1;
    MPI_CHECK(MPI_Allgather(a, count, MPI_INT, g, count, MPI_INT, comm));
    for (int r = 0; r < n; r++)
        for (int i = 0; i < count; i++)
            CHECK(g[r * count + i] == val(r, i, salt), "Allgather %d ints: block %d [%d] = %d",
                  count, r, i, g[r * count + i]);
    for (int i = 0; i < count * n; i++) g[i] = i / count == me ? val(me, i % count, salt + 1) : -1;
    MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g, count, MPI_INT, comm));
    for (int r = 0; r < n; r++)
        for (int i = 0; i < count; i++)
            CHECK(g[r * count + i] == val(r, i, salt + 1),
                  "Allgather in place %d ints: block %d [%d] = %d", count, r, i,
                  g[r * count + i]);
    free(a);
    free(b);
    free(g);
}

int main(int argc, char **argv)
{
    int provided;
    t_init(&argc, &argv);
    int ferrite = t_expect_ferrite();

    /* 1. Hosts are network namespaces here: split_type must group by them. */
    char ns[NT] = "";
    ssize_t nl = readlink("/proc/self/ns/net", ns, sizeof ns - 1);
    CHECK(nl > 0, "readlink /proc/self/ns/net failed");
    ns[nl] = 0;
    char *all = malloc((size_t)NT * t_size);
    MPI_CHECK(MPI_Allgather(ns, NT, MPI_CHAR, all, NT, MPI_CHAR, MPI_COMM_WORLD));
    int want_size = 0, want_rank = 0, hosts = 0, crowded = 0;
    for (int r = 0; r < t_size; r++) {
        int same = strcmp(all + (size_t)r * NT, ns) == 0, first = 1, on = 0;
        want_size += same;
        want_rank += same && r < t_rank;
        for (int q = 0; q < t_size; q++) {
            int like = strcmp(all + (size_t)q * NT, all + (size_t)r * NT) == 0;
            first &= !(like && q < r);
            on += like;
        }
        hosts += first;
        crowded |= on > 1;
    }
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    int node_size, node_rank;
    MPI_CHECK(MPI_Comm_size(node, &node_size));
    MPI_CHECK(MPI_Comm_rank(node, &node_rank));
    CHECK(node_size == want_size && node_rank == want_rank,
          "split_type SHARED: size %d rank %d, want %d %d (ranks in this network namespace)",
          node_size, node_rank, want_size, want_rank);
    CHECK(hosts >= 2 && crowded, "needs ranks on 2 hosts or more, 2 on one (%d hosts)", hosts);
    int leader = node_rank == 0; /* in MPI_COMM_WORLD */
    if (!ferrite) {
        /* The rest checks Ferrite's knobs and pvar. */
        MPI_CHECK(MPI_Comm_free(&node));
        t_finish("coll_hier");
        return 0;
    }

    MPI_CHECK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
    int idx, cnt;
    MPI_CHECK(MPI_T_pvar_get_index("net_offhost_packets_sent", MPI_T_PVAR_CLASS_COUNTER, &idx));
    MPI_CHECK(MPI_T_pvar_session_create(&sess));
    MPI_CHECK(MPI_T_pvar_handle_alloc(sess, idx, NULL, &offhost, &cnt));
    MPI_CHECK(MPI_T_pvar_start(sess, offhost));

    MPI_Comm rev;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, 0, t_size - t_rank, &rev));
    MPI_Comm comms[2] = {MPI_COMM_WORLD, rev};
    const int counts[] = {1, 3, 250, 2000}; /* ints: 4 B to 8000 B */
    const int nc = sizeof counts / sizeof *counts;

    /* 2 and 3, the algorithms forced to `hier` (auto picks it for some sizes and ranks per
     * host only), then at 80 KiB. The first collective on each communicator sets its levels
     * up (messages among all ranks).
     * A host's leader is its lowest rank in the communicator: in `rev`, its highest world
     * rank. */
    set_algos("hier", "hier", "hier", "hier", "hier");
    for (int c = 0; c < 2; c++) MPI_CHECK(MPI_Barrier(comms[c]));
    unsigned long long hier_sent = 0, hier_sent_leader = 0;
    for (int c = 0; c < 2; c++) {
        unsigned long long before = offhost_sent();
        for (int k = 0; k < nc; k++) round_of(comms[c], counts[k], 10 * k + c);
        if (c == 0) round_of(MPI_COMM_WORLD, 20480, 5);
        unsigned long long d = offhost_sent() - before;
        int leads = c == 0 ? node_rank == 0 : node_rank == node_size - 1;
        CHECK(leads || d == 0,
              "rank %d does not lead its host in %s but sent %llu packets to other hosts in "
              "two-level collectives",
              t_rank, c ? "a reversed communicator" : "MPI_COMM_WORLD", d);
        if (leads) hier_sent_leader += d;
        else hier_sent += d;
    }

    /* The flat algorithms: non-leaders send between hosts too. */
    set_algos("dissemination", "binomial", "binomial", "recursive_doubling", "bruck");
    unsigned long long before = offhost_sent();
    for (int k = 0; k < nc; k++) round_of(MPI_COMM_WORLD, counts[k], 3);
    unsigned long long flat_sent = offhost_sent() - before;
    set_algos("auto", "auto", "auto", "auto", "auto");

    unsigned long long mine[4] = {hier_sent, hier_sent_leader, leader ? 0 : flat_sent, leader},
                       sum[4];
    MPI_CHECK(MPI_Allreduce(mine, sum, 4, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum[1] > 0, "the %llu leaders sent no packets between hosts", sum[3]);
    CHECK(sum[2] > 0, "with the flat algorithms no non-leader sent between hosts: the counter "
                      "does not see that traffic");
    if (t_rank == 0)
        printf("two levels: leaders sent %llu packets between hosts, non-leaders %llu; flat: "
               "non-leaders %llu\n",
               sum[1], sum[0], sum[2]);

    MPI_CHECK(MPI_T_pvar_stop(sess, offhost));
    MPI_CHECK(MPI_T_pvar_handle_free(sess, &offhost));
    MPI_CHECK(MPI_T_pvar_session_free(&sess));
    MPI_CHECK(MPI_T_finalize());
    MPI_CHECK(MPI_Comm_free(&rev));
    MPI_CHECK(MPI_Comm_free(&node));
    free(all);
    t_finish("coll_hier");
    return 0;
}
