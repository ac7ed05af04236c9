/* np: 1 2 */
/* The MPI tool information interface (MPI 4.1 chapter 15): MPI_T before MPI_Init and after
 * MPI_Finalize, reference-counted init/finalize, every control variable, performance
 * variable and category walked (names, lengths, truncation, get_index), control variables
 * read against the environment and written where the library honours it (the eager limit
 * seen to change the protocol, a collective's algorithm choice seen by MPI_Bcast), counters
 * started around N messages of known size moving by exactly N and N*size, levels, the
 * error codes of bad indices, handles, sessions and calls before MPI_T_init_thread. */
#include "common.h"

/* An MPI_T call that must return `want` (MPI_T functions return codes, no handlers). */
#define T(call, want)                                                                         \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_ != (want))                                                                    \
            t_fail(__FILE__, __LINE__, "%s returned %d, expected %s (%d)", #call, rc_, #want, \
                   (int)(want));                                                              \
    } while (0)
#define OK(call) T(call, MPI_SUCCESS)

enum { N = 10, SIZE = 100 };

static int cvar(const char *name)
{
    int i = -1;
    OK(MPI_T_cvar_get_index(name, &i));
    return i;
}

static int pvar(const char *name, int cls)
{
    int i = -1;
    OK(MPI_T_pvar_get_index(name, cls, &i));
    return i;
}

/* The string conventions of 15.3.3 on one name: full length with a NULL buffer and with
 * length 0, truncation to a short buffer, a NULL length leaving the buffer alone. */
static void check_strings(const char *what, int index, const char *full,
                          int (*get)(int, char *, int *))
{
    char buf[8];
    int len = 1;
    OK(get(index, NULL, &len));
    CHECK(len == (int)strlen(full) + 1, "%s %d: length %d with a NULL buffer, want %d", what,
          index, len, (int)strlen(full) + 1);
    len = 0;
    memset(buf, 'x', sizeof buf);
    OK(get(index, buf, &len));
    CHECK(len == (int)strlen(full) + 1 && buf[0] == 'x', "%s %d: length 0 must only ask", what,
          index);
    len = 4;
    OK(get(index, buf, &len));
    if (strlen(full) >= 3)
        CHECK(len == 4 && strlen(buf) == 3 && strncmp(buf, full, 3) == 0,
              "%s %d: truncated to 4 gave '%s' (len %d) of '%s'", what, index, buf, len, full);
    memset(buf, 'y', sizeof buf);
    OK(get(index, buf, NULL));
    for (size_t k = 0; k < sizeof buf; k++)
        CHECK(buf[k] == 'y', "%s %d: NULL length wrote the buffer", what, index);
}

static int cvar_name(int i, char *n, int *l)
{
    return MPI_T_cvar_get_info(i, n, l, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
}
static int pvar_name(int i, char *n, int *l)
{
    return MPI_T_pvar_get_info(i, n, l, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                               NULL);
}
static int cat_name(int i, char *n, int *l)
{
    return MPI_T_category_get_info(i, n, l, NULL, NULL, NULL, NULL, NULL);
}

static void walk(int ferrite)
{
    int ncvar, npvar, ncat;
    char name[256], desc[1024];
    OK(MPI_T_cvar_get_num(&ncvar));
    OK(MPI_T_pvar_get_num(&npvar));
    OK(MPI_T_category_get_num(&ncat));
    /* (Debian's MPICH has no pvars.) */
    CHECK(ncvar > 0 && (npvar > 0 || !ferrite) && ncat > 0, "%d cvars, %d pvars, %d categories",
          ncvar, npvar, ncat);
    for (int i = 0; i < ncvar; i++) {
        int nl = sizeof name, dl = sizeof desc, verb, bind, scope, idx = -1;
        MPI_Datatype dt;
        MPI_T_enum e;
        OK(MPI_T_cvar_get_info(i, name, &nl, &verb, &dt, &e, desc, &dl, &bind, &scope));
        CHECK(nl == (int)strlen(name) + 1 && dl == (int)strlen(desc) + 1, "cvar %d lengths", i);
        OK(MPI_T_cvar_get_index(name, &idx));
        CHECK(idx == i, "cvar %s: index %d, want %d", name, idx, i);
        check_strings("cvar", i, name, cvar_name);
        if (ferrite) {
            CHECK(strncmp(name, "FERRITE_", 8) == 0 && dl > 10, "cvar %d is %s", i, name);
            CHECK(bind == MPI_T_BIND_NO_OBJECT, "cvar %s bind %d", name, bind);
            CHECK(dt == MPI_INT || dt == MPI_UNSIGNED_LONG_LONG || dt == MPI_CHAR,
                  "cvar %s datatype", name);
            CHECK(e == MPI_T_ENUM_NULL || dt == MPI_INT, "cvar %s: enum on a non-int", name);
        }
    }
    for (int i = 0; i < npvar; i++) {
        int nl = sizeof name, dl = sizeof desc, verb, cls, bind, ro, cont, at, idx = -1;
        MPI_Datatype dt;
        MPI_T_enum e;
        OK(MPI_T_pvar_get_info(i, name, &nl, &verb, &cls, &dt, &e, desc, &dl, &bind, &ro, &cont,
                               &at));
        OK(MPI_T_pvar_get_index(name, cls, &idx));
        CHECK(idx == i, "pvar %s: index %d, want %d", name, idx, i);
        check_strings("pvar", i, name, pvar_name);
        if (ferrite) {
            T(MPI_T_pvar_get_index(name, cls == MPI_T_PVAR_CLASS_COUNTER
                                             ? MPI_T_PVAR_CLASS_LEVEL
                                             : MPI_T_PVAR_CLASS_COUNTER, &idx),
              MPI_T_ERR_INVALID_NAME);
            CHECK(dt == MPI_UNSIGNED_LONG_LONG && bind == MPI_T_BIND_NO_OBJECT,
                  "pvar %s type/bind", name);
            CHECK(cls == MPI_T_PVAR_CLASS_COUNTER ? (!ro && !cont && at) : (ro && cont),
                  "pvar %s: class %d readonly %d continuous %d atomic %d", name, cls, ro, cont,
                  at);
        }
    }
    /* Every variable in exactly one category, subcategories valid. */
    int *cv_seen = calloc(ncvar, sizeof(int)), *pv_seen = calloc(npvar, sizeof(int));
    for (int i = 0; i < ncat; i++) {
        int nl = sizeof name, dl = sizeof desc, nc, np, nsub, idx = -1;
        OK(MPI_T_category_get_info(i, name, &nl, desc, &dl, &nc, &np, &nsub));
        OK(MPI_T_category_get_index(name, &idx));
        CHECK(idx == i, "category %s: index %d, want %d", name, idx, i);
        check_strings("category", i, name, cat_name);
        int *list = malloc(sizeof(int) * (nc + np + nsub + 1));
        OK(MPI_T_category_get_cvars(i, nc, list));
        for (int k = 0; k < nc; k++) {
            CHECK(list[k] >= 0 && list[k] < ncvar, "category %s: cvar %d", name, list[k]);
            cv_seen[list[k]]++;
        }
        OK(MPI_T_category_get_pvars(i, np, list));
        for (int k = 0; k < np; k++) {
            CHECK(list[k] >= 0 && list[k] < npvar, "category %s: pvar %d", name, list[k]);
            pv_seen[list[k]]++;
        }
        OK(MPI_T_category_get_categories(i, nsub, list));
        for (int k = 0; k < nsub; k++)
            CHECK(list[k] >= 0 && list[k] < ncat && list[k] != i, "category %s: sub %d", name,
                  list[k]);
        int nev = -1;
        OK(MPI_T_category_get_num_events(i, &nev));
        CHECK(nev == 0, "category %s: %d events", name, nev);
        free(list);
    }
    if (ferrite) {
        for (int i = 0; i < ncvar; i++) CHECK(cv_seen[i] == 1, "cvar %d in %d categories", i, cv_seen[i]);
        for (int i = 0; i < npvar; i++) CHECK(pv_seen[i] == 1, "pvar %d in %d categories", i, pv_seen[i]);
    }
    free(cv_seen);
    free(pv_seen);
    int upd = -1, upd2 = -2;
    OK(MPI_T_category_changed(&upd));
    OK(MPI_T_category_changed(&upd2));
    CHECK(upd == upd2, "category update number changed without a change");
    /* Bad indices and names (Ferrite only: Debian's MPICH 4.0.2 crashes in
     * MPI_T_pvar_get_info with an invalid index). */
    if (!ferrite) return;
    int x;
    T(MPI_T_cvar_get_info(ncvar, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
      MPI_T_ERR_INVALID_INDEX);
    T(MPI_T_cvar_get_info(-1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
      MPI_T_ERR_INVALID_INDEX);
    T(MPI_T_pvar_get_info(npvar, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                          NULL),
      MPI_T_ERR_INVALID_INDEX);
    T(MPI_T_category_get_info(ncat, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
      MPI_T_ERR_INVALID_INDEX);
    T(MPI_T_category_get_cvars(-1, 1, &x), MPI_T_ERR_INVALID_INDEX);
    T(MPI_T_cvar_get_index("NO_SUCH_CVAR", &x), MPI_T_ERR_INVALID_NAME);
    T(MPI_T_pvar_get_index("no_such_pvar", MPI_T_PVAR_CLASS_COUNTER, &x), MPI_T_ERR_INVALID_NAME);
    T(MPI_T_category_get_index("no_such_category", &x), MPI_T_ERR_INVALID_NAME);
    /* Events and sources: none here, so every index is invalid. */
    {
        int nev = -1, nsrc = -1;
        OK(MPI_T_event_get_num(&nev));
        OK(MPI_T_source_get_num(&nsrc));
        CHECK(nev == 0 && nsrc == 0, "%d events, %d sources", nev, nsrc);
        T(MPI_T_event_get_info(0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                               NULL),
          MPI_T_ERR_INVALID_INDEX);
        T(MPI_T_event_get_index("no_such_event", &x), MPI_T_ERR_INVALID_NAME);
        MPI_Count ts;
        T(MPI_T_source_get_timestamp(0, &ts), MPI_T_ERR_INVALID_INDEX);
    }
}

/* Reads an int-valued cvar. */
static int read_int(int index)
{
    MPI_T_cvar_handle h;
    int count = -1, v = -12345;
    OK(MPI_T_cvar_handle_alloc(index, NULL, &h, &count));
    CHECK(count == 1, "cvar %d count %d", index, count);
    OK(MPI_T_cvar_read(h, &v));
    OK(MPI_T_cvar_handle_free(&h));
    CHECK(h == MPI_T_CVAR_HANDLE_NULL, "handle_free did not reset the handle");
    return v;
}

static void cvars_against_env(void)
{
    /* FERRITE_CONN: an enumeration; the runner sets it per connection policy. */
    int i = cvar("FERRITE_CONN");
    MPI_Datatype dt;
    MPI_T_enum e = MPI_T_ENUM_NULL;
    int scope;
    OK(MPI_T_cvar_get_info(i, NULL, NULL, NULL, &dt, &e, NULL, NULL, NULL, &scope));
    CHECK(dt == MPI_INT && e != MPI_T_ENUM_NULL && scope == MPI_T_SCOPE_CONSTANT,
          "FERRITE_CONN: datatype, enum, scope %d", scope);
    int num = -1, nl = 64;
    char ename[64], item[64];
    OK(MPI_T_enum_get_info(e, &num, ename, &nl));
    CHECK(num == 4, "FERRITE_CONN's enumeration has %d items", num);
    const char *want = getenv("FERRITE_CONN") ? getenv("FERRITE_CONN") : "ondemand";
    int v = read_int(i), found = -1;
    for (int k = 0; k < num; k++) {
        int val = -1;
        nl = sizeof item;
        OK(MPI_T_enum_get_item(e, k, &val, item, &nl));
        if (strcmp(item, want) == 0) found = val;
    }
    CHECK(found >= 0 && v == found, "FERRITE_CONN reads %d, the environment says %s (item %d)", v,
          want, found);
    T(MPI_T_enum_get_item(e, num, &v, item, &nl), MPI_T_ERR_INVALID_ITEM);
    /* A string knob against the environment, and a constant refusing writes. */
    i = cvar("FERRITE_TRANSPORTS");
    MPI_T_cvar_handle h;
    int count;
    OK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count));
    CHECK(count >= 64, "FERRITE_TRANSPORTS count %d", count);
    char *s = calloc(count, 1);
    OK(MPI_T_cvar_read(h, s));
    want = getenv("FERRITE_TRANSPORTS") ? getenv("FERRITE_TRANSPORTS") : "self,shm,tcp";
    CHECK(strcmp(s, want) == 0, "FERRITE_TRANSPORTS reads '%s', want '%s'", s, want);
    T(MPI_T_cvar_write(h, "tcp"), MPI_T_ERR_CVAR_SET_NEVER);
    OK(MPI_T_cvar_handle_free(&h));
    free(s);
    /* A number the program put in its environment before reading (knobs are read from the
     * environment at use). */
    i = cvar("FERRITE_COLL_BCAST_LARGE");
    unsigned long long u = 0;
    OK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count));
    OK(MPI_T_cvar_read(h, &u));
    CHECK(u == 4321, "FERRITE_COLL_BCAST_LARGE reads %llu, the environment says 4321", u);
    OK(MPI_T_cvar_handle_free(&h));
    T(MPI_T_cvar_read(h, &u), MPI_T_ERR_INVALID_HANDLE);
    T(MPI_T_cvar_handle_alloc(-1, NULL, &h, &count), MPI_T_ERR_INVALID_INDEX);
}

/* Whether an Isend of `len` bytes to self completes before its receive is posted: eager
 * sends do, rendezvous sends wait for the receiver. */
static int completes_unreceived(int len)
{
    char *out = calloc(len, 1), *in = calloc(len, 1);
    MPI_Request r;
    int flag = 0;
    MPI_CHECK(MPI_Isend(out, len, MPI_CHAR, t_rank, 77, MPI_COMM_WORLD, &r));
    MPI_CHECK(MPI_Test(&r, &flag, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Recv(in, len, MPI_CHAR, t_rank, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    free(out);
    free(in);
    return flag;
}

static void cvar_writes(void)
{
    /* The eager limit: written down to 64 bytes, a 1000-byte send becomes rendezvous. */
    int i = cvar("FERRITE_EAGER_LIMIT"), scope, count;
    OK(MPI_T_cvar_get_info(i, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &scope));
    CHECK(scope == MPI_T_SCOPE_LOCAL, "FERRITE_EAGER_LIMIT scope %d", scope);
    MPI_T_cvar_handle h;
    unsigned long long old, small = 64, got = 0;
    OK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count));
    OK(MPI_T_cvar_read(h, &old));
    int preset = getenv("FERRITE_EAGER_LIMIT") != NULL;
    CHECK(preset || completes_unreceived(1000), "a 1000-byte send is not eager by default");
    OK(MPI_T_cvar_write(h, &small));
    OK(MPI_T_cvar_read(h, &got));
    CHECK(got == 64, "FERRITE_EAGER_LIMIT reads %llu after writing 64", got);
    CHECK(!completes_unreceived(1000), "a 1000-byte send stayed eager with the limit at 64");
    CHECK(completes_unreceived(32), "a 32-byte send is not eager with the limit at 64");
    OK(MPI_T_cvar_write(h, &old));
    CHECK(preset || completes_unreceived(1000), "the eager limit did not come back");
    OK(MPI_T_cvar_handle_free(&h));

    /* A collective's algorithm (same on every process): a word of the enumeration is used; an
     * integer outside it is kept and the collective rejects it, as it would in the
     * environment. */
    i = cvar("FERRITE_COLL_BCAST_ALGO");
    MPI_T_enum e;
    OK(MPI_T_cvar_get_info(i, NULL, NULL, NULL, NULL, &e, NULL, NULL, NULL, &scope));
    CHECK(scope == MPI_T_SCOPE_ALL_EQ, "FERRITE_COLL_BCAST_ALGO scope %d", scope);
    int num, binomial = -1, auto_ = -1, v;
    OK(MPI_T_enum_get_info(e, &num, NULL, NULL));
    for (int k = 0; k < num; k++) {
        char item[64];
        int nl = sizeof item, val;
        OK(MPI_T_enum_get_item(e, k, &val, item, &nl));
        if (strcmp(item, "binomial") == 0) binomial = val;
        if (strcmp(item, "auto") == 0) auto_ = val;
    }
    CHECK(binomial >= 0 && auto_ >= 0, "bcast enumeration lacks binomial or auto");
    OK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count));
    int data[4] = {t_rank, 1, 2, 3};
    OK(MPI_T_cvar_write(h, &binomial));
    CHECK(read_int(i) == binomial, "bcast algorithm did not read back");
    MPI_CHECK(MPI_Bcast(data, 4, MPI_INT, 0, MPI_COMM_WORLD));
    CHECK(data[0] == 0, "Bcast with binomial gave %d", data[0]);
    v = 123;
    OK(MPI_T_cvar_write(h, &v));
    CHECK(read_int(i) == 123, "bcast algorithm 123 did not read back");
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    EXPECT_CLASS(MPI_Bcast(data, 4, MPI_INT, 0, MPI_COMM_WORLD), MPI_ERR_ARG);
    OK(MPI_T_cvar_write(h, &auto_));
    data[0] = t_rank + 5;
    MPI_CHECK(MPI_Bcast(data, 4, MPI_INT, 0, MPI_COMM_WORLD));
    CHECK(data[0] == 5, "Bcast after restoring auto gave %d", data[0]);
    OK(MPI_T_cvar_handle_free(&h));
}

static unsigned long long rd(MPI_T_pvar_session s, MPI_T_pvar_handle h)
{
    unsigned long long v = 0;
    OK(MPI_T_pvar_read(s, h, &v));
    return v;
}

static void pvars(void)
{
    enum { SENT, SBYTES, RECV, RBYTES, NC };
    const char *names[NC] = {"p2p_messages_sent", "p2p_bytes_sent", "p2p_messages_received",
                             "p2p_bytes_received"};
    MPI_T_pvar_session s, other;
    MPI_T_pvar_handle h[NC], unexp, peak, hx;
    int count;
    OK(MPI_T_pvar_session_create(&s));
    OK(MPI_T_pvar_session_create(&other));
    for (int k = 0; k < NC; k++) {
        OK(MPI_T_pvar_handle_alloc(s, pvar(names[k], MPI_T_PVAR_CLASS_COUNTER), NULL, &h[k],
                                   &count));
        CHECK(count == 1, "%s count %d", names[k], count);
    }
    OK(MPI_T_pvar_handle_alloc(s, pvar("p2p_unexpected_messages", MPI_T_PVAR_CLASS_LEVEL), NULL,
                               &unexp, &count));
    OK(MPI_T_pvar_handle_alloc(s, pvar("p2p_unexpected_messages_peak",
                                       MPI_T_PVAR_CLASS_HIGHWATERMARK),
                               NULL, &peak, &count));
    /* Not started yet: counters read 0 whatever happens. */
    char out[SIZE * N], in[SIZE * N];
    for (int k = 0; k < SIZE * N; k++) out[k] = (char)t_byte(1, k);
    MPI_CHECK(MPI_Sendrecv(out, SIZE, MPI_CHAR, t_rank, 1, in, SIZE, MPI_CHAR, t_rank, 1,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(rd(s, h[SENT]) == 0, "a counter not started moved");

    /* N messages of SIZE bytes to self, left unexpected, then received. One rank at a time
     * (a token passed in rank order), so no other rank's message arrives meanwhile. */
    int token = 0;
    if (t_rank > 0)
        MPI_CHECK(MPI_Recv(&token, 1, MPI_INT, t_rank - 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    OK(MPI_T_pvar_start(s, MPI_T_PVAR_ALL_HANDLES));
    unsigned long long unexp0 = rd(s, unexp);
    MPI_Request r[N];
    for (int m = 0; m < N; m++)
        MPI_CHECK(MPI_Isend(out + m * SIZE, SIZE, MPI_CHAR, t_rank, 100 + m, MPI_COMM_WORLD, &r[m]));
    MPI_CHECK(MPI_Probe(t_rank, 100 + N - 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(rd(s, unexp) == unexp0 + N, "unexpected queue %llu, want %llu", rd(s, unexp),
          unexp0 + N);
    CHECK(rd(s, peak) >= unexp0 + N, "unexpected peak %llu < %llu", rd(s, peak), unexp0 + N);
    for (int m = 0; m < N; m++)
        MPI_CHECK(MPI_Recv(in + m * SIZE, SIZE, MPI_CHAR, t_rank, 100 + m, MPI_COMM_WORLD,
                           MPI_STATUS_IGNORE));
    MPI_CHECK(MPI_Waitall(N, r, MPI_STATUSES_IGNORE));
    CHECK(memcmp(in, out, SIZE * N) == 0, "self messages corrupted");
    CHECK(rd(s, unexp) == unexp0, "unexpected queue %llu after receiving", rd(s, unexp));
    OK(MPI_T_pvar_stop(s, MPI_T_PVAR_ALL_HANDLES));
    unsigned long long want[NC] = {N, N * SIZE, N, N * SIZE};
    for (int k = 0; k < NC; k++)
        CHECK(rd(s, h[k]) == want[k], "%s moved by %llu, want %llu", names[k], rd(s, h[k]),
              want[k]);
    /* Stopped: another message does not count. */
    MPI_CHECK(MPI_Sendrecv(out, SIZE, MPI_CHAR, t_rank, 1, in, SIZE, MPI_CHAR, t_rank, 1,
                           MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(rd(s, h[SENT]) == N, "a stopped counter moved");

    /* write, readreset, reset; continuous variables refuse start/stop/write. */
    unsigned long long v = 1000, got = 0;
    OK(MPI_T_pvar_write(s, h[SENT], &v));
    OK(MPI_T_pvar_readreset(s, h[SENT], &got));
    CHECK(got == 1000 && rd(s, h[SENT]) == 0, "write/readreset gave %llu then %llu", got,
          rd(s, h[SENT]));
    OK(MPI_T_pvar_reset(s, MPI_T_PVAR_ALL_HANDLES));
    CHECK(rd(s, h[SBYTES]) == 0, "reset of all handles left %llu", rd(s, h[SBYTES]));
    T(MPI_T_pvar_start(s, unexp), MPI_T_ERR_PVAR_NO_STARTSTOP);
    T(MPI_T_pvar_stop(s, unexp), MPI_T_ERR_PVAR_NO_STARTSTOP);
    T(MPI_T_pvar_write(s, unexp, &v), MPI_T_ERR_PVAR_NO_WRITE);
    T(MPI_T_pvar_reset(s, peak), MPI_T_ERR_PVAR_NO_WRITE);
    T(MPI_T_pvar_readreset(s, unexp, &got), MPI_T_ERR_PVAR_NO_WRITE);
    T(MPI_T_pvar_read(s, MPI_T_PVAR_ALL_HANDLES, &got), MPI_T_ERR_INVALID_HANDLE);
    T(MPI_T_pvar_read(other, h[SENT], &got), MPI_T_ERR_INVALID_HANDLE);
    T(MPI_T_pvar_read(MPI_T_PVAR_SESSION_NULL, h[SENT], &got), MPI_T_ERR_INVALID_SESSION);
    T(MPI_T_pvar_handle_alloc(s, -1, NULL, &hx, &count), MPI_T_ERR_INVALID_INDEX);
    T(MPI_T_pvar_handle_alloc(MPI_T_PVAR_SESSION_NULL, 0, NULL, &hx, &count),
      MPI_T_ERR_INVALID_SESSION);
    if (t_rank + 1 < t_size)
        MPI_CHECK(MPI_Send(&token, 1, MPI_INT, t_rank + 1, 4, MPI_COMM_WORLD));

    /* Between two ranks: rank 1 starts its counters, says go, and rank 0 sends N messages
     * only then, so rank 1 sees exactly N arrive and rank 0 exactly N leave; rank 0 waits
     * for rank 1 to stop before it sends anything else. */
    if (t_size >= 2 && t_rank < 2) {
        OK(MPI_T_pvar_reset(s, MPI_T_PVAR_ALL_HANDLES));
        OK(MPI_T_pvar_start(s, MPI_T_PVAR_ALL_HANDLES));
        int go = 1;
        if (t_rank == 1) {
            MPI_CHECK(MPI_Send(&go, 1, MPI_INT, 0, 5, MPI_COMM_WORLD));
            for (int m = 0; m < N; m++)
                MPI_CHECK(MPI_Recv(in + m * SIZE, SIZE, MPI_CHAR, 0, 6, MPI_COMM_WORLD,
                                   MPI_STATUS_IGNORE));
        } else {
            MPI_CHECK(MPI_Recv(&go, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            for (int m = 0; m < N; m++)
                MPI_CHECK(MPI_Send(out + m * SIZE, SIZE, MPI_CHAR, 1, 6, MPI_COMM_WORLD));
        }
        OK(MPI_T_pvar_stop(s, MPI_T_PVAR_ALL_HANDLES));
        /* Rank 0 sends nothing more (a Barrier's message would count) until rank 1 stopped. */
        if (t_rank == 1)
            MPI_CHECK(MPI_Send(&go, 1, MPI_INT, 0, 7, MPI_COMM_WORLD));
        else
            MPI_CHECK(MPI_Recv(&go, 1, MPI_INT, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        if (t_rank == 1) {
            CHECK(memcmp(in, out, SIZE * N) == 0, "messages from rank 0 corrupted");
            CHECK(rd(s, h[RECV]) == N && rd(s, h[RBYTES]) == N * SIZE,
                  "rank 1 received %llu messages, %llu bytes; want %d, %d", rd(s, h[RECV]),
                  rd(s, h[RBYTES]), N, N * SIZE);
            CHECK(rd(s, h[SENT]) == 1 && rd(s, h[SBYTES]) == sizeof(int),
                  "rank 1 sent %llu messages, %llu bytes; want 1, %d", rd(s, h[SENT]),
                  rd(s, h[SBYTES]), (int)sizeof(int));
        } else {
            CHECK(rd(s, h[SENT]) == N && rd(s, h[SBYTES]) == N * SIZE,
                  "rank 0 sent %llu messages, %llu bytes; want %d, %d", rd(s, h[SENT]),
                  rd(s, h[SBYTES]), N, N * SIZE);
        }
    }
    OK(MPI_T_pvar_handle_free(s, &h[0]));
    CHECK(h[0] == MPI_T_PVAR_HANDLE_NULL, "handle_free did not reset the handle");
    OK(MPI_T_pvar_session_free(&s));
    CHECK(s == MPI_T_PVAR_SESSION_NULL, "session_free did not reset the session");
    T(MPI_T_pvar_read(s, h[1], &got), MPI_T_ERR_INVALID_SESSION);
    OK(MPI_T_pvar_session_free(&other));
}

int main(int argc, char **argv)
{
    int provided = -1, n;
    /* Before MPI_T_init_thread: not initialized. */
    T(MPI_T_cvar_get_num(&n), MPI_T_ERR_NOT_INITIALIZED);
    T(MPI_T_finalize(), MPI_T_ERR_NOT_INITIALIZED);
    /* Before MPI_Init, twice (reference counted). */
    OK(MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided));
    CHECK(provided >= MPI_THREAD_SINGLE && provided <= MPI_THREAD_MULTIPLE, "provided %d",
          provided);
    OK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
    setenv("FERRITE_COLL_BCAST_LARGE", "4321", 1);
    OK(MPI_T_cvar_get_num(&n));
    t_init(&argc, &argv);
    int ferrite = t_expect_ferrite();
    walk(ferrite);
    if (ferrite) {
        cvars_against_env();
        cvar_writes();
        pvars();
    }
    OK(MPI_T_finalize());
    OK(MPI_T_cvar_get_num(&n)); /* one user left */
    OK(MPI_T_finalize());
    T(MPI_T_cvar_get_num(&n), MPI_T_ERR_NOT_INITIALIZED);
    T(MPI_T_pvar_session_create(&(MPI_T_pvar_session){0}), MPI_T_ERR_NOT_INITIALIZED);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_CHECK(MPI_Finalize());
    /* After MPI_Finalize: MPI_T still works (MPI 4.1 15.3.4; Debian's MPICH 4.0.2 crashes
     * there, so Ferrite only). */
    if (ferrite) {
        OK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
        walk(ferrite);
        MPI_T_pvar_session s;
        MPI_T_pvar_handle h;
        int count;
        unsigned long long v = 1;
        OK(MPI_T_pvar_session_create(&s));
        OK(MPI_T_pvar_handle_alloc(s, pvar("p2p_messages_sent", MPI_T_PVAR_CLASS_COUNTER), NULL,
                                   &h, &count));
        OK(MPI_T_pvar_start(s, h));
        OK(MPI_T_pvar_read(s, h, &v));
        CHECK(v == 0, "a counter moved after MPI_Finalize");
        OK(MPI_T_pvar_session_free(&s));
        int i = cvar("FERRITE_REPORT");
        MPI_T_cvar_handle c;
        OK(MPI_T_cvar_handle_alloc(i, NULL, &c, &count));
        T(MPI_T_cvar_write(c, "1"), MPI_T_ERR_CVAR_SET_NOT_NOW);
        OK(MPI_T_cvar_handle_free(&c));
        OK(MPI_T_finalize());
    }
    if (t_rank == 0) {
        printf("done: mpit_tool\n");
        fflush(stdout);
    }
    return 0;
}
