/* Shared helpers for the C conformance programs: every check prints what was wrong, on
 * which rank and where, then ends the job with a non-zero status. */
#ifndef FERRITE_TEST_COMMON_H
#define FERRITE_TEST_COMMON_H

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int t_rank = -1;
static int t_size = -1;

static __attribute__((unused, noreturn, format(printf, 3, 4))) void
t_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "FAILED: rank %d at %s:%d: ", t_rank, file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    fflush(stdout);
    /* MPI_Abort ends the whole job; exit() is the fallback if it returns. */
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
}

#define FAIL(...) t_fail(__FILE__, __LINE__, __VA_ARGS__)
#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond)) t_fail(__FILE__, __LINE__, __VA_ARGS__);                                 \
    } while (0)

static __attribute__((unused)) const char *t_errstr(int code)
{
    static char buf[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    buf[0] = 0;
    if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) snprintf(buf, sizeof buf, "(no string)");
    return buf;
}

static __attribute__((unused)) int t_class(int code)
{
    int cls = -1;
    if (MPI_Error_class(code, &cls) != MPI_SUCCESS) return -1;
    return cls;
}

/* A call that must succeed. */
#define MPI_CHECK(call)                                                                       \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_ != MPI_SUCCESS)                                                               \
            t_fail(__FILE__, __LINE__, "%s returned %d (class %d): %s", #call, rc_,           \
                   t_class(rc_), t_errstr(rc_));                                              \
    } while (0)

/* A call that must fail with the given error class (under MPI_ERRORS_RETURN). The error
 * string of the returned code must not be empty. */
#define EXPECT_CLASS(call, cls)                                                               \
    do {                                                                                      \
        int ec_ = (call);                                                                     \
        int got_ = t_class(ec_);                                                              \
        if (ec_ == MPI_SUCCESS || got_ != (cls))                                              \
            t_fail(__FILE__, __LINE__, "%s returned %d (class %d), expected class %s (%d)",   \
                   #call, ec_, got_, #cls, (int)(cls));                                       \
        char s_[MPI_MAX_ERROR_STRING + 1];                                                    \
        int l_ = -1;                                                                          \
        s_[0] = 0;                                                                            \
        MPI_CHECK(MPI_Error_string(ec_, s_, &l_));                                            \
        if (l_ <= 0 || (int)strlen(s_) != l_)                                                 \
            t_fail(__FILE__, __LINE__, "%s: error string for code %d is empty or its length " \
                   "%d is wrong", #call, ec_, l_);                                            \
    } while (0)

static __attribute__((unused)) void t_init(int *argc, char ***argv)
{
    MPI_CHECK(MPI_Init(argc, argv));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &t_rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &t_size));
}

/* Whether the library is Ferrite (from its version string). */
static __attribute__((unused)) int t_is_ferrite(void)
{
    char v[MPI_MAX_LIBRARY_VERSION_STRING + 1];
    int len = 0;
    memset(v, 0, sizeof v);
    MPI_CHECK(MPI_Get_library_version(v, &len));
    return strstr(v, "Ferrite") != NULL;
}

/* The runner sets FERRITE_TESTS_EXPECT=ferrite when it tests Ferrite, so a library that
 * does not say it is Ferrite cannot silently skip the Ferrite-only checks. */
static __attribute__((unused)) int t_expect_ferrite(void)
{
    const char *e = getenv("FERRITE_TESTS_EXPECT");
    int expected = e && strcmp(e, "ferrite") == 0;
    int is = t_is_ferrite();
    CHECK(!expected || is, "FERRITE_TESTS_EXPECT=ferrite but MPI_Get_library_version does "
          "not name Ferrite");
    return is;
}

/* MPI_Init_thread asking for MPI_THREAD_MULTIPLE, with t_rank and t_size set and
 * MPI_Query_thread agreeing. Returns 0 when that level is not provided: a failure on
 * Ferrite; elsewhere MPI is finalized and a "skipped" line printed, and the program
 * returns 0. */
static __attribute__((unused)) int t_init_multiple(int *argc, char ***argv)
{
    int provided = -1, q = -1;
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &t_rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &t_size));
    MPI_CHECK(MPI_Query_thread(&q));
    CHECK(q == provided, "Query_thread says %d, Init_thread provided %d", q, provided);
    if (provided >= MPI_THREAD_MULTIPLE) return 1;
    CHECK(!t_expect_ferrite(), "Ferrite provides thread level %d, not MULTIPLE", provided);
    MPI_CHECK(MPI_Finalize());
    if (t_rank == 0) printf("skipped: MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
    return 0;
}

/* In a thread of a test: record the first failure in errmsg[t] (a char[][256] the program
 * defines; main reports it after the join) and leave the thread. */
#define TFAIL(t, ...)                                                                          \
    do {                                                                                      \
        snprintf(errmsg[t], sizeof errmsg[t], __VA_ARGS__);                                   \
        return NULL;                                                                          \
    } while (0)
#define TOK(t, call)                                                                          \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_ != MPI_SUCCESS) TFAIL(t, "thread %d: %s returned %d", t, #call, rc_);          \
    } while (0)

/* Partner for pairwise tests: 0<->1, 2<->3, ...; the odd last rank (and rank 0 of a
 * one-rank job) talks to itself. */
static __attribute__((unused)) int t_partner(void)
{
    int p = t_rank ^ 1;
    return p < t_size ? p : t_rank;
}

static __attribute__((unused)) void t_finish(const char *name)
{
    MPI_CHECK(MPI_Finalize());
    if (t_rank == 0) {
        printf("done: %s\n", name);
        fflush(stdout);
    }
}

/* Deterministic payload byte for message `msg` at offset `i`. */
static inline unsigned char t_byte(unsigned long msg, unsigned long i)
{
    return (unsigned char)((msg * 131u + i * 7u + (i >> 8) * 13u + 1u) & 0xff);
}

#endif
