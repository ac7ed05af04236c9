/* np: 1 2 */
/* Generalized requests (MPI 4.1, 13.2): Test is false until MPI_Grequest_complete; query_fn
 * fills the status at Test/Wait/Request_get_status (source, tag, count read back), free_fn
 * runs once when the request is freed (by Wait, or by MPI_Request_free: then at
 * MPI_Grequest_complete), cancel_fn gets whether the request was complete; query_fn's error
 * code is what Wait returns; completing twice is MPI_ERR_REQUEST. A grequest completed by
 * another thread (MPI_THREAD_MULTIPLE) ends a Waitall that also holds a message exchange
 * with the partner, whose data is checked. */
#include "common.h"
#include <pthread.h>

typedef struct {
    int queries, frees, cancels, last_cancel_complete, query_rc;
} ctx_t;

static int query_fn(void *extra, MPI_Status *st)
{
    ctx_t *c = extra;
    c->queries++;
    st->MPI_SOURCE = 3; /* Status_set_source is MPI 4.1: not in every MPI yet */
    st->MPI_TAG = 7;
    MPI_Status_set_elements(st, MPI_INT, 5);
    MPI_Status_set_cancelled(st, 0);
    return c->query_rc;
}

static int free_fn(void *extra)
{
    ((ctx_t *)extra)->frees++;
    return MPI_SUCCESS;
}

static int cancel_fn(void *extra, int complete)
{
    ctx_t *c = extra;
    c->cancels++;
    c->last_cancel_complete = complete;
    return MPI_SUCCESS;
}

static MPI_Request thread_req;
static void *completer(void *arg)
{
    (void)arg;
    int rc = MPI_Grequest_complete(thread_req);
    return (void *)(long)rc;
}

int main(int argc, char **argv)
{
    int provided = -1;
    MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &t_rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &t_size));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    /* Erroneous calls (completing twice or MPI_REQUEST_NULL) crash Open MPI, and MPICH 4.0
     * runs free_fn at MPI_Request_free of an incomplete grequest (MPI 4.1 says: at whichever
     * of Request_free and Grequest_complete comes last): those checks are Ferrite-only. */
    int ferrite = t_expect_ferrite();

    /* Test, Cancel, Complete, Request_get_status, Wait. */
    ctx_t c = {0};
    MPI_Request rq = MPI_REQUEST_NULL;
    MPI_Status st;
    int flag = -1, count = -1;
    MPI_CHECK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &c, &rq));
    CHECK(rq != MPI_REQUEST_NULL, "Grequest_start gave MPI_REQUEST_NULL");
    MPI_CHECK(MPI_Test(&rq, &flag, &st));
    CHECK(flag == 0 && rq != MPI_REQUEST_NULL, "Test true (flag %d) before Grequest_complete", flag);
    CHECK(c.queries == 0 && c.frees == 0, "callbacks ran before completion: %d queries %d frees",
          c.queries, c.frees);
    MPI_CHECK(MPI_Cancel(&rq));
    CHECK(c.cancels == 1 && c.last_cancel_complete == 0,
          "cancel_fn: %d calls, complete=%d (expected 1, 0)", c.cancels, c.last_cancel_complete);
    MPI_CHECK(MPI_Grequest_complete(rq));
    MPI_CHECK(MPI_Cancel(&rq));
    CHECK(c.cancels == 2 && c.last_cancel_complete == 1,
          "cancel_fn after completion: %d calls, complete=%d (expected 2, 1)", c.cancels,
          c.last_cancel_complete);
    MPI_CHECK(MPI_Request_get_status(rq, &flag, &st));
    CHECK(flag == 1 && st.MPI_SOURCE == 3 && st.MPI_TAG == 7,
          "Request_get_status: flag %d source %d tag %d", flag, st.MPI_SOURCE, st.MPI_TAG);
    CHECK(c.queries >= 1 && c.frees == 0, "Request_get_status: %d queries, %d frees", c.queries,
          c.frees);
    memset(&st, 0, sizeof st);
    MPI_CHECK(MPI_Wait(&rq, &st));
    CHECK(rq == MPI_REQUEST_NULL, "Wait did not free the generalized request");
    MPI_CHECK(MPI_Get_count(&st, MPI_INT, &count));
    CHECK(st.MPI_SOURCE == 3 && st.MPI_TAG == 7 && count == 5,
          "Wait status: source %d tag %d count %d, expected 3 7 5", st.MPI_SOURCE, st.MPI_TAG,
          count);
    MPI_CHECK(MPI_Test_cancelled(&st, &flag));
    CHECK(flag == 0, "query_fn said not cancelled, Test_cancelled says %d", flag);
    CHECK(c.frees == 1, "free_fn ran %d times after Wait, expected 1", c.frees);
    if (ferrite) EXPECT_CLASS(MPI_Grequest_complete(rq), MPI_ERR_REQUEST);

    /* Request_free before completion: free_fn waits for Grequest_complete. */
    ctx_t d = {0};
    MPI_CHECK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &d, &rq));
    MPI_Request keep = rq;
    MPI_CHECK(MPI_Request_free(&rq));
    CHECK(rq == MPI_REQUEST_NULL && (d.frees == 0 || !ferrite), "Request_free: handle %d, %d "
          "frees", (int)rq, d.frees);
    MPI_CHECK(MPI_Grequest_complete(keep));
    CHECK(d.frees == 1 && d.queries == 0, "after complete of a freed grequest: %d frees, %d "
          "queries (expected 1, 0)", d.frees, d.queries);

    /* Completing twice is an error; query_fn's error code is Wait's. */
    ctx_t e = {0};
    e.query_rc = MPI_ERR_OTHER;
    MPI_CHECK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &e, &rq));
    MPI_CHECK(MPI_Grequest_complete(rq));
    if (ferrite) EXPECT_CLASS(MPI_Grequest_complete(rq), MPI_ERR_REQUEST);
    EXPECT_CLASS(MPI_Wait(&rq, &st), MPI_ERR_OTHER);
    CHECK(e.frees == 1, "free_fn ran %d times after a failing Wait", e.frees);

    /* Waitany among a pending receive and a completed grequest picks the grequest. */
    ctx_t f = {0};
    int dummy = 0, idx = -1;
    MPI_Request two[2];
    MPI_CHECK(MPI_Irecv(&dummy, 1, MPI_INT, MPI_ANY_SOURCE, 12345, MPI_COMM_SELF, &two[0]));
    MPI_CHECK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &f, &two[1]));
    MPI_CHECK(MPI_Grequest_complete(two[1]));
    MPI_CHECK(MPI_Waitany(2, two, &idx, &st));
    CHECK(idx == 1 && st.MPI_TAG == 7 && two[1] == MPI_REQUEST_NULL && f.frees == 1,
          "Waitany: index %d tag %d frees %d", idx, st.MPI_TAG, f.frees);
    MPI_CHECK(MPI_Cancel(&two[0]));
    MPI_CHECK(MPI_Wait(&two[0], MPI_STATUS_IGNORE));

    /* Another thread completes the grequest while this one waits on it and on messages. */
    if (provided == MPI_THREAD_MULTIPLE) {
        ctx_t g = {0};
        int peer = t_partner(), out[3] = {t_rank, 11, 22}, in[3] = {-1, -1, -1};
        MPI_Request rs[3];
        MPI_Status sts[3];
        MPI_CHECK(MPI_Grequest_start(query_fn, free_fn, cancel_fn, &g, &rs[0]));
        thread_req = rs[0];
        MPI_CHECK(MPI_Irecv(in, 3, MPI_INT, peer, 5, MPI_COMM_WORLD, &rs[1]));
        MPI_CHECK(MPI_Isend(out, 3, MPI_INT, peer, 5, MPI_COMM_WORLD, &rs[2]));
        pthread_t th;
        CHECK(pthread_create(&th, NULL, completer, NULL) == 0, "pthread_create failed");
        MPI_CHECK(MPI_Waitall(3, rs, sts));
        void *rc = NULL;
        pthread_join(th, &rc);
        CHECK((long)rc == MPI_SUCCESS, "Grequest_complete on the thread returned %ld", (long)rc);
        CHECK(in[0] == peer && in[1] == 11 && in[2] == 22, "received %d %d %d", in[0], in[1],
              in[2]);
        CHECK(sts[0].MPI_SOURCE == 3 && sts[0].MPI_TAG == 7 && g.frees == 1,
              "threaded grequest: source %d tag %d frees %d", sts[0].MPI_SOURCE, sts[0].MPI_TAG,
              g.frees);
    }
    t_finish("grequest");
    return 0;
}
