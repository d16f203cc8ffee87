/*
 * page_service.c: pagestream connections, the LSN rules, the worker pool
 * and in-order responses.  See page_service.h.
 *
 * Shape: every request becomes a job with a sequence number in its
 * connection's ring of pipeline_depth slots.  The loop thread decodes,
 * applies the LSN rules, parks jobs that must wait for WAL (polled by a 1 ms
 * timer that runs only while something is parked), answers cheap reads
 * itself (Exists, Nblocks, a GetPage that needs no redo: see try_inline) and
 * queues the rest for the workers.  A worker runs the read, encodes the
 * response into the job and pushes the job onto the done list; the loop
 * drains that list (uv_async) and sends every finished job at the head of
 * each ring, so responses leave in request order whatever order the reads
 * finish in.
 *
 * Why inline: on this class of VM a sleeping thread takes 50-400 us to wake,
 * and the worker path costs two hand-offs (loop -> worker condvar, worker ->
 * loop uv_async) on top of the client's own.  A cheap read is a size lookup
 * plus one store lookup (an LMDB read or the open layer, at worst one pread
 * and one zstd block decompression, which the store's block cache absorbs
 * for hot data) or a page-cache copy: tens of microseconds, less than one
 * hand-off.  Anything that needs redo (a helper round trip) or a scan
 * (DbSize) or several pages (SLRU segments) still goes to a worker, so the
 * loop never waits on a helper.
 *
 * A connection's state is reference counted on the loop thread: one
 * reference for the pgwire connection (dropped in on_close) and one per job
 * not yet retired, so a worker never sees freed memory when a client
 * disconnects mid-request.
 */
#include "pageserver/service/page_service.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/metrics.h"
#include "net/pgwire.h"
#include "base/sqlstate.h"
#include "base/strata_assert.h"
#include "pg/walformat.h"
#include "pageserver/service/basebackup_service.h"
#include "proto/pagestream.h"

#define MAX_PIPELINE_DEPTH 1024
#define PARK_POLL_MS 1

typedef struct ps_conn ps_conn;

typedef struct job {
    ps_conn *conn;
    uint64_t seq;
    pagestream_request req;
    lsn_t wait_lsn;       /* parked until last_record_lsn reaches it */
    uint64_t deadline_ns; /* parked until then at most */
    uint64_t start_ns;
    /* The stages of a GetPage (pageserver_getpage_stage_seconds): parked
     * for WAL until dispatched, queued until a worker took it (0 when
     * answered inline), read until read_ns, then the reply until sent. */
    uint64_t dispatch_ns, picked_ns, read_ns;
    bool done;
    bool close_after; /* a decode error: close once this is sent */
    char fatal_message[PAGESTREAM_MAX_ERROR_MESSAGE + 1];
    uint8_t *resp;
    size_t resp_len;
    struct job *next; /* in the work queue, the done list or the parked list */
} job;

struct ps_conn {
    page_service *ps;
    pgwire_conn *c; /* NULL once pgwire closed it */
    timeline *tl;   /* set by the pagestream query */
    int refs;
    uint64_t next_seq;  /* sequence number of the next request */
    uint64_t flush_seq; /* sequence number of the next response to send */
    int inflight;
    bool failed; /* a malformed request was seen: take no more */
    bool paused;
    job **ring; /* pipeline_depth slots, indexed by seq % depth */
    /* A query for a timeline being restored from object storage waits here
     * (defer_while_restoring); the open timer holds one reference. */
    uv_timer_t restore_timer;
    bool restore_timer_open;
    char *restore_sql;
    strata_id restore_tenant, restore_tl;
    uint64_t restore_deadline_ns;
};

/* Metrics by request type (index = PS_REQ_* tag). */
#define N_TYPES 6
static const char *const type_names[N_TYPES] = {"exists", "nblocks",      "getpage",
                                                "dbsize", "slru_segment", "spcsize"};

struct page_service {
    uv_loop_t *loop;
    tenants *tenants;
    page_service_options opt;
    pgwire_server *server;
    uv_async_t async;
    uv_timer_t park_timer;
    int handles_open;
    int conns_live; /* ps_conn objects not yet freed (they point at ps) */
    bool stopping;
    job *parked; /* loop thread only */
    int nparked;

    pthread_mutex_t mu; /* guards queue, done list, quit */
    pthread_cond_t cv;
    job *queue_head, *queue_tail;
    job *done_head;
    bool quit;
    pthread_t *threads;
    int nthreads;

    metrics_counter *requests[N_TYPES];
    metrics_counter *errors[N_TYPES];
    metrics_counter *protocol_errors;
    metrics_counter *wait_timeouts;
    metrics_histogram *getpage_seconds;
    metrics_histogram *stage_seconds[4]; /* park, queue, read, reply */
    metrics_gauge *connections;
    metrics_gauge *parked_gauge;
};

/* ---- responses ---- */

static void set_error(job *j, const char *sqlstate, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_error(job *j, const char *sqlstate, const char *fmt, ...)
{
    char msg[PAGESTREAM_MAX_ERROR_MESSAGE + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pagestream_response r = {.tag = PS_RESP_ERROR, .reqid = j->req.reqid};
    memcpy(r.u.error.sqlstate, sqlstate, 5);
    r.u.error.sqlstate[5] = '\0';
    r.u.error.message = msg;
    r.u.error.message_len = (uint32_t)strlen(msg);
    free(j->resp);
    j->resp_len = 0;
    j->resp = malloc(64 + r.u.error.message_len);
    if (j->resp != NULL)
        j->resp_len = pagestream_encode_response(&r, j->resp, 64 + r.u.error.message_len);
    if (j->req.tag < N_TYPES)
        metrics_counter_inc(j->conn->ps->errors[j->req.tag]);
}

static void set_response(job *j, const pagestream_response *r, size_t cap)
{
    free(j->resp);
    j->resp = malloc(cap);
    j->resp_len = j->resp != NULL ? pagestream_encode_response(r, j->resp, cap) : 0;
    if (j->resp_len == 0)
        set_error(j, SQLSTATE_INTERNAL_ERROR, "out of memory encoding the response");
}

/* Runs a job's read at lsn (any thread). */
static void execute(job *j, lsn_t lsn)
{
    timeline *tl = j->conn->tl;
    const pagestream_request *q = &j->req;
    pagestream_response r = {.tag = (uint8_t)(0x80 | q->tag), .reqid = q->reqid};
    char err[PAGESTREAM_MAX_ERROR_MESSAGE - 64];
    const char *sqlstate = SQLSTATE_INTERNAL_ERROR;
    char lb[LSN_FMT_LEN];
    int rc;
    switch (q->tag) {
    case PS_REQ_EXISTS:
    case PS_REQ_NBLOCKS: {
        uint32_t n = 0;
        rc = timeline_rel_size(tl, q->u.rel.spc, q->u.rel.db, q->u.rel.rel, q->u.rel.fork, lsn, &n,
                               err, sizeof err, &sqlstate);
        if (rc < 0)
            break;
        if (q->tag == PS_REQ_EXISTS) {
            r.u.exists = rc == 1;
        } else if (rc == 0) {
            snprintf(err, sizeof err, "relation %u/%u/%u fork %u does not exist at LSN %s",
                     q->u.rel.spc, q->u.rel.db, q->u.rel.rel, q->u.rel.fork, lsn_format(lsn, lb));
            sqlstate = SQLSTATE_UNDEFINED_FILE;
            rc = -1;
            break;
        } else {
            r.u.nblocks = n;
        }
        set_response(j, &r, 32);
        return;
    }
    case PS_REQ_GETPAGE: {
        uint8_t page[PG_BLCKSZ];
        rc = timeline_get_rel_page(tl, q->u.page.rel.spc, q->u.page.rel.db, q->u.page.rel.rel,
                                   q->u.page.rel.fork, q->u.page.blkno, lsn, page, NULL, err,
                                   sizeof err, &sqlstate);
        if (rc < 0)
            break;
        r.u.page = page;
        set_response(j, &r, 16 + PG_BLCKSZ);
        return;
    }
    case PS_REQ_DBSIZE: {
        int64_t bytes = 0;
        rc = timeline_db_size(tl, q->u.dbsize.db, lsn, &bytes, err, sizeof err, &sqlstate);
        if (rc < 0)
            break;
        r.u.db_size_bytes = bytes;
        set_response(j, &r, 32);
        return;
    }
    case PS_REQ_SPCSIZE: {
        int64_t bytes = 0;
        uint32_t relations = 0;
        rc = timeline_spc_size(tl, q->u.spcsize.spc, lsn, &bytes, &relations, err, sizeof err,
                               &sqlstate);
        if (rc < 0)
            break;
        r.u.spc_size.bytes = bytes;
        r.u.spc_size.relations = relations;
        set_response(j, &r, 32);
        return;
    }
    case PS_REQ_GET_SLRU_SEGMENT: {
        uint8_t *blocks = malloc((size_t)PAGESTREAM_MAX_SLRU_BLOCKS * PG_BLCKSZ);
        if (blocks == NULL) {
            snprintf(err, sizeof err, "out of memory");
            rc = -1;
            break;
        }
        uint32_t n = 0;
        rc = timeline_get_slru_segment(tl, q->u.slru.kind, q->u.slru.segno, lsn, blocks,
                                       PAGESTREAM_MAX_SLRU_BLOCKS, &n, err, sizeof err, &sqlstate);
        if (rc == 0) {
            r.u.slru.nblocks = n;
            r.u.slru.blocks = blocks;
            set_response(j, &r, 16 + (size_t)n * PG_BLCKSZ);
        }
        free(blocks);
        if (rc == 0)
            return;
        break;
    }
    default:
        snprintf(err, sizeof err, "request tag %u is not served", q->tag);
        break;
    }
    set_error(j, sqlstate, "%s", err);
}

/*
 * Answers j now, on the calling (loop) thread, when that costs no redo and
 * no scan: Exists and Nblocks (one size lookup), and a GetPage whose newest
 * version is an image or zero page, is in the page cache, or does not exist.
 * True if j has its response; false if it must go to a worker.  This saves
 * the two thread hand-offs (to a worker and back through the uv_async) that
 * dominated the latency of cheap requests.
 */
static bool try_inline(job *j, lsn_t lsn)
{
    const pagestream_request *q = &j->req;
    if (q->tag == PS_REQ_EXISTS || q->tag == PS_REQ_NBLOCKS) {
        execute(j, lsn);
        return true;
    }
    if (q->tag != PS_REQ_GETPAGE)
        return false;
    uint8_t page[PG_BLCKSZ];
    char err[PAGESTREAM_MAX_ERROR_MESSAGE - 64];
    const char *sqlstate = SQLSTATE_INTERNAL_ERROR;
    int rc = timeline_get_rel_page_noredo(j->conn->tl, q->u.page.rel.spc, q->u.page.rel.db,
                                          q->u.page.rel.rel, q->u.page.rel.fork, q->u.page.blkno,
                                          lsn, page, err, sizeof err, &sqlstate);
    if (rc == 1)
        return false;
    if (rc < 0) {
        set_error(j, sqlstate, "%s", err);
        return true;
    }
    pagestream_response r = {.tag = PS_RESP_GETPAGE, .reqid = q->reqid};
    r.u.page = page;
    set_response(j, &r, 16 + PG_BLCKSZ);
    return true;
}

/* ---- worker pool ---- */

/* Names the calling thread prefix-N (N counts this file's threads) so
 * operators see it in top/perf; the kernel keeps 15 characters. */
static void thread_name(const char *prefix)
{
    static _Atomic unsigned seq;
    char name[16];
    snprintf(name, sizeof name, "%s-%u", prefix, atomic_fetch_add(&seq, 1) % 100);
    pthread_setname_np(pthread_self(), name);
}

static void *worker_main(void *arg)
{
    thread_name("ps-worker");
    page_service *ps = arg;
    pthread_mutex_lock(&ps->mu);
    for (;;) {
        while (!ps->quit && ps->queue_head == NULL)
            pthread_cond_wait(&ps->cv, &ps->mu);
        if (ps->quit)
            break;
        job *j = ps->queue_head;
        ps->queue_head = j->next;
        if (ps->queue_head == NULL)
            ps->queue_tail = NULL;
        pthread_mutex_unlock(&ps->mu);

        /* Read at min(last ingested, request_lsn), decided now: the WAL the
         * request waited for (if any) is in. */
        j->picked_ns = clock_mono_ns();
        lsn_t last = timeline_last_record_lsn(j->conn->tl);
        execute(j, j->req.request_lsn < last ? j->req.request_lsn : last);
        j->read_ns = clock_mono_ns();

        pthread_mutex_lock(&ps->mu);
        j->next = ps->done_head;
        ps->done_head = j;
        uv_async_send(&ps->async);
    }
    pthread_mutex_unlock(&ps->mu);
    return NULL;
}

static void enqueue(page_service *ps, job *j)
{
    j->next = NULL;
    pthread_mutex_lock(&ps->mu);
    if (ps->queue_tail != NULL)
        ps->queue_tail->next = j;
    else
        ps->queue_head = j;
    ps->queue_tail = j;
    pthread_cond_signal(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
}

/* Answers j inline when cheap (try_inline), else queues it for a worker. */
static void dispatch(page_service *ps, job *j)
{
    lsn_t last = timeline_last_record_lsn(j->conn->tl);
    j->dispatch_ns = j->picked_ns = clock_mono_ns();
    if (!ps->opt.no_inline &&
        try_inline(j, j->req.request_lsn < last ? j->req.request_lsn : last)) {
        j->read_ns = clock_mono_ns();
        j->done = true;
    } else {
        enqueue(ps, j);
    }
}

/* ---- connections (loop thread) ---- */

static void service_maybe_free(page_service *ps);

static void conn_unref(ps_conn *pc)
{
    STRATA_ASSERT(pc->refs > 0);
    if (--pc->refs > 0)
        return;
    page_service *ps = pc->ps;
    STRATA_ASSERT(pc->inflight == 0 || pc->c == NULL);
    for (int i = 0; i < pc->ps->opt.pipeline_depth; i++)
        STRATA_ASSERT(pc->ring[i] == NULL);
    if (pc->tl != NULL)
        timeline_unref(pc->tl);
    free(pc->ring);
    free(pc);
    STRATA_ASSERT(ps->conns_live > 0);
    ps->conns_live--;
    service_maybe_free(ps);
}

static void job_free(job *j)
{
    free(j->resp);
    free(j);
}

/* Pauses input while full, congested or failed; resumes otherwise. */
static void conn_update_pause(ps_conn *pc)
{
    if (pc->c == NULL)
        return;
    bool want =
        pc->failed || pc->inflight >= pc->ps->opt.pipeline_depth || pgwire_conn_is_congested(pc->c);
    if (want != pc->paused) {
        pc->paused = want;
        pgwire_conn_pause_input(pc->c, want);
    }
}

/* A GetPage's latency and its stages.  A request answered before it was
 * dispatched (an error) has only the total. */
static void observe_getpage(page_service *ps, const job *j)
{
    uint64_t now = clock_mono_ns();
    metrics_histogram_observe(ps->getpage_seconds, (double)(now - j->start_ns) / 1e9);
    if (j->read_ns == 0)
        return;
    STRATA_ASSERT(j->start_ns <= j->dispatch_ns && j->dispatch_ns <= j->picked_ns &&
                  j->picked_ns <= j->read_ns && j->read_ns <= now);
    const uint64_t stage[4] = {j->dispatch_ns - j->start_ns, j->picked_ns - j->dispatch_ns,
                               j->read_ns - j->picked_ns, now - j->read_ns};
    for (int i = 0; i < 4; i++)
        metrics_histogram_observe(ps->stage_seconds[i], (double)stage[i] / 1e9);
}

/* Sends every finished response at the head of the ring. */
static void conn_flush(ps_conn *pc)
{
    int depth = pc->ps->opt.pipeline_depth;
    pc->refs++; /* retiring the last job must not free pc under us */
    while (pc->flush_seq < pc->next_seq) {
        job **slot = &pc->ring[pc->flush_seq % (uint64_t)depth];
        job *j = *slot;
        STRATA_ASSERT(j != NULL && j->seq == pc->flush_seq);
        if (!j->done)
            break;
        *slot = NULL;
        pc->flush_seq++;
        pc->inflight--;
        if (pc->c != NULL) {
            if (j->resp_len > 0)
                pgwire_send_copy_data(pc->c, j->resp, j->resp_len);
            if (j->close_after) {
                pgwire_send_error(pc->c, "FATAL", SQLSTATE_PROTOCOL_VIOLATION, j->fatal_message,
                                  NULL);
                pgwire_conn_close(pc->c);
            }
        }
        if (j->req.tag == PS_REQ_GETPAGE)
            observe_getpage(pc->ps, j);
        job_free(j);
        conn_unref(pc);
    }
    conn_update_pause(pc);
    conn_unref(pc);
}

/* A new job in the next ring slot (one conn reference), or NULL. */
static job *job_new(ps_conn *pc)
{
    job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return NULL;
    int depth = pc->ps->opt.pipeline_depth;
    STRATA_ASSERT(pc->inflight < depth);
    j->conn = pc;
    j->seq = pc->next_seq++;
    j->start_ns = clock_mono_ns();
    STRATA_ASSERT(pc->ring[j->seq % (uint64_t)depth] == NULL);
    pc->ring[j->seq % (uint64_t)depth] = j;
    pc->inflight++;
    pc->refs++;
    return j;
}

static void on_park_timer(uv_timer_t *t);

static void park(page_service *ps, job *j)
{
    j->next = ps->parked;
    ps->parked = j;
    ps->nparked++;
    metrics_gauge_set(ps->parked_gauge, ps->nparked);
    if (!uv_is_active((uv_handle_t *)&ps->park_timer))
        uv_timer_start(&ps->park_timer, on_park_timer, PARK_POLL_MS, PARK_POLL_MS);
}

static void on_copy_data(pgwire_conn *c, const uint8_t *data, size_t n, void *arg)
{
    page_service *ps = arg;
    ps_conn *pc = pgwire_conn_data(c);
    if (pc == NULL || pc->tl == NULL || pc->failed || ps->stopping)
        return;
    job *j = job_new(pc);
    if (j == NULL) {
        pgwire_send_error(c, "FATAL", SQLSTATE_OUT_OF_MEMORY, "out of memory", NULL);
        return;
    }
    const char *why = NULL;
    char lb[LSN_FMT_LEN], lb2[LSN_FMT_LEN];
    if (pagestream_decode_request(data, n, &j->req, &why) != 0) {
        /* Echo the reqid when the bytes carry one, so a client can match. */
        memset(&j->req, 0, sizeof j->req);
        j->req.tag = 0xFF;
        for (size_t i = 1; i < 9 && n >= 9; i++)
            j->req.reqid = j->req.reqid << 8 | data[i];
        snprintf(j->fatal_message, sizeof j->fatal_message,
                 "malformed pagestream request (%zu bytes): %s", n, why);
        set_error(j, SQLSTATE_PROTOCOL_VIOLATION, "%s", j->fatal_message);
        metrics_counter_inc(ps->protocol_errors);
        log_warn("pagestream %s: %s; closing", pgwire_conn_peer(c), j->fatal_message);
        j->close_after = true;
        j->done = true;
        pc->failed = true;
        conn_flush(pc);
        return;
    }
    metrics_counter_inc(ps->requests[j->req.tag]);
    const pagestream_request *q = &j->req;
    /* A compute whose insert position is a page start asks with the LSN
     * after the page header; WAL up to the page start has every record
     * before that LSN, and a quiet compute may send no more. */
    lsn_t need = wal_lsn_before_page_header(q->not_modified_since, WAL_SEG_SIZE_DEFAULT);
    if (q->request_lsn == LSN_INVALID) {
        set_error(j, SQLSTATE_INVALID_PARAMETER_VALUE, "request_lsn 0/0 is not a valid LSN");
        j->done = true;
    } else if (q->request_lsn < q->not_modified_since) {
        set_error(j, SQLSTATE_INVALID_PARAMETER_VALUE,
                  "request_lsn %s is older than not_modified_since %s",
                  lsn_format(q->request_lsn, lb), lsn_format(q->not_modified_since, lb2));
        j->done = true;
    } else if (need > timeline_last_record_lsn(pc->tl)) {
        j->wait_lsn = need;
        j->deadline_ns = j->start_ns + (uint64_t)ps->opt.wait_lsn_timeout_ms * 1000000u;
        park(ps, j);
    } else {
        dispatch(ps, j);
    }
    if (j->done)
        conn_flush(pc);
    else
        conn_update_pause(pc);
}

/* The park timer: dispatch jobs whose WAL arrived, fail those out of time. */
static void on_park_timer(uv_timer_t *t)
{
    page_service *ps = t->data;
    uint64_t now = clock_mono_ns();
    job **link = &ps->parked;
    while (*link != NULL) {
        job *j = *link;
        ps_conn *pc = j->conn;
        lsn_t last = timeline_last_record_lsn(pc->tl);
        bool ready = last >= j->wait_lsn;
        bool expired = !ready && (now >= j->deadline_ns || pc->c == NULL);
        if (!ready && !expired) {
            link = &j->next;
            continue;
        }
        *link = j->next;
        ps->nparked--;
        if (ready) {
            dispatch(ps, j);
            if (j->done)
                conn_flush(pc);
            continue;
        }
        char lb[LSN_FMT_LEN], lb2[LSN_FMT_LEN];
        set_error(j, SQLSTATE_QUERY_CANCELED,
                  "timed out after %u ms waiting for WAL at LSN %s to arrive; last ingested LSN "
                  "is %s",
                  ps->opt.wait_lsn_timeout_ms, lsn_format(j->wait_lsn, lb), lsn_format(last, lb2));
        metrics_counter_inc(ps->wait_timeouts);
        j->done = true;
        conn_flush(pc);
    }
    metrics_gauge_set(ps->parked_gauge, ps->nparked);
    if (ps->parked == NULL)
        uv_timer_stop(&ps->park_timer);
}

static void on_async(uv_async_t *a)
{
    page_service *ps = a->data;
    pthread_mutex_lock(&ps->mu);
    job *list = ps->done_head;
    ps->done_head = NULL;
    pthread_mutex_unlock(&ps->mu);
    while (list != NULL) {
        job *j = list;
        list = j->next;
        j->done = true;
        conn_flush(j->conn);
    }
}

static int on_connect(pgwire_conn *c, void *arg)
{
    page_service *ps = arg;
    ps_conn *pc = calloc(1, sizeof *pc);
    job **ring = calloc((size_t)ps->opt.pipeline_depth, sizeof *ring);
    if (pc == NULL || ring == NULL) {
        free(pc);
        free(ring);
        pgwire_send_error(c, "FATAL", SQLSTATE_OUT_OF_MEMORY, "out of memory", NULL);
        return -1;
    }
    pc->ps = ps;
    pc->c = c;
    pc->refs = 1;
    pc->ring = ring;
    pgwire_conn_set_data(c, pc);
    ps->conns_live++;
    metrics_gauge_add(ps->connections, 1);
    return 0;
}

static void on_restore_timer_closed(uv_handle_t *h)
{
    conn_unref(h->data);
}

static void on_close(pgwire_conn *c, void *arg)
{
    page_service *ps = arg;
    basebackup_service_conn_closed(c);
    ps_conn *pc = pgwire_conn_data(c);
    if (pc == NULL)
        return;
    pgwire_conn_set_data(c, NULL);
    pc->c = NULL;
    free(pc->restore_sql);
    pc->restore_sql = NULL;
    if (pc->restore_timer_open) {
        pc->restore_timer_open = false;
        uv_timer_stop(&pc->restore_timer);
        uv_close((uv_handle_t *)&pc->restore_timer, on_restore_timer_closed);
    }
    metrics_gauge_add(ps->connections, -1);
    conn_unref(pc);
}

static void on_writable(pgwire_conn *c, void *arg)
{
    (void)arg;
    basebackup_service_conn_writable(c);
    ps_conn *pc = pgwire_conn_data(c);
    if (pc != NULL)
        conn_update_pause(pc);
}

/* ---- waiting for a timeline restored from object storage ---- */

#define RESTORE_POLL_MS 20

static void on_query(pgwire_conn *c, const char *sql, void *arg);

/* The restore poll: runs the query again once the timeline is there (or
 * will not come), fails it with the restore's progress after
 * wait_lsn_timeout_ms. */
static void on_restore_timer(uv_timer_t *tm)
{
    ps_conn *pc = tm->data;
    page_service *ps = pc->ps;
    if (pc->c == NULL || pc->restore_sql == NULL) {
        uv_timer_stop(tm);
        return;
    }
    tenants_restore_info info;
    bool pending =
        tenants_restore_pending(ps->tenants, &pc->restore_tenant, &pc->restore_tl, &info);
    if (pending && clock_mono_ns() < pc->restore_deadline_ns)
        return;
    uv_timer_stop(tm);
    char *sql = pc->restore_sql;
    pc->restore_sql = NULL;
    if (!pending) {
        on_query(pc->c, sql, ps);
    } else {
        char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN], msg[400];
        snprintf(msg, sizeof msg,
                 "timed out after %u ms waiting for tenant %s timeline %s to be restored from "
                 "object storage (%s: files %llu/%llu, %.1f of %.1f MB)",
                 ps->opt.wait_lsn_timeout_ms, strata_id_format(&pc->restore_tenant, a),
                 strata_id_format(&pc->restore_tl, b), info.started ? "downloading" : "queued",
                 (unsigned long long)info.files_done, (unsigned long long)info.files_total,
                 (double)info.bytes_done / 1e6, (double)info.bytes_total / 1e6);
        metrics_counter_inc(ps->wait_timeouts);
        pgwire_send_error(pc->c, "ERROR", SQLSTATE_QUERY_CANCELED, msg, NULL);
    }
    free(sql);
}

/* A pagestream or basebackup query (words w, n of them) for a timeline
 * that is not here yet but is being restored from object storage (or may
 * be: the store's listing has not ended) waits on a timer instead of
 * failing with "not found"; the loop goes on meanwhile.  True when
 * deferred. */
static bool defer_while_restoring(page_service *ps, pgwire_conn *c, ps_conn *pc, const char *sql,
                                  char *const *w, int n)
{
    strata_id tenant, tl;
    if (pc == NULL || n < 3 || !strata_id_parse(w[1], &tenant) || !strata_id_parse(w[2], &tl))
        return false;
    timeline *found = tenants_get(ps->tenants, &tenant, &tl);
    if (found != NULL) {
        timeline_unref(found);
        return false;
    }
    if (!tenants_restore_pending(ps->tenants, &tenant, &tl, NULL))
        return false;
    char *copy = strdup(sql);
    if (copy == NULL)
        return false;
    if (!pc->restore_timer_open) {
        uv_timer_init(ps->loop, &pc->restore_timer);
        pc->restore_timer.data = pc;
        pc->restore_timer_open = true;
        pc->refs++; /* dropped when the handle closes (on_close) */
    }
    free(pc->restore_sql);
    pc->restore_sql = copy;
    pc->restore_tenant = tenant;
    pc->restore_tl = tl;
    pc->restore_deadline_ns = clock_mono_ns() + (uint64_t)ps->opt.wait_lsn_timeout_ms * 1000000u;
    uv_timer_start(&pc->restore_timer, on_restore_timer, RESTORE_POLL_MS, RESTORE_POLL_MS);
    log_info("%s: %s waits for the restore of its timeline", pgwire_conn_peer(c), w[0]);
    (void)c;
    return true;
}

static void on_query(pgwire_conn *c, const char *sql, void *arg)
{
    page_service *ps = arg;
    ps_conn *pc = pgwire_conn_data(c);
    char buf[256];
    if (strlen(sql) >= sizeof buf) {
        pgwire_send_error(c, "ERROR", SQLSTATE_SYNTAX_ERROR, "command too long", NULL);
        return;
    }
    strcpy(buf, sql);
    char *w[4];
    int n = basebackup_service_split_words(buf, w, 3);
    if (n == 0) {
        pgwire_send_empty_query(c);
        pgwire_send_ready(c);
        return;
    }
    if ((strcmp(w[0], "basebackup") == 0 || strcmp(w[0], "pagestream_v1") == 0) &&
        defer_while_restoring(ps, c, pc, sql, w, n))
        return;
    if (strcmp(w[0], "basebackup") == 0) {
        basebackup_service_query(ps->loop, c, ps->tenants, sql);
        return;
    }
    if (strcmp(w[0], "pagestream_v1") != 0) {
        char msg[400];
        snprintf(msg, sizeof msg,
                 "unknown command \"%.64s\": this is a pageserver (try "
                 "pagestream_v1 <tenant_id> <timeline_id>)",
                 w[0]);
        pgwire_send_error(c, "ERROR", SQLSTATE_SYNTAX_ERROR, msg, NULL);
        return;
    }
    if (n != 3) {
        pgwire_send_error(c, "ERROR", SQLSTATE_SYNTAX_ERROR,
                          "usage: pagestream_v1 <tenant_id> <timeline_id>", NULL);
        return;
    }
    strata_id tenant, tlid;
    char msg[300];
    if (!strata_id_parse(w[1], &tenant) || !strata_id_parse(w[2], &tlid)) {
        snprintf(msg, sizeof msg, "invalid %s \"%.40s\": expected 32 hex digits",
                 strata_id_parse(w[1], &tenant) ? "timeline_id" : "tenant_id",
                 strata_id_parse(w[1], &tenant) ? w[2] : w[1]);
        pgwire_send_error(c, "ERROR", SQLSTATE_INVALID_PARAMETER_VALUE, msg, NULL);
        return;
    }
    if (pc->tl != NULL) {
        pgwire_send_error(c, "ERROR", SQLSTATE_PROTOCOL_VIOLATION,
                          "this connection already streams pages", NULL);
        return;
    }
    timeline *tl = tenants_get(ps->tenants, &tenant, &tlid);
    if (tl == NULL) {
        snprintf(msg, sizeof msg, "tenant %s timeline %s not found on this pageserver", w[1], w[2]);
        pgwire_send_error(c, "ERROR", SQLSTATE_UNDEFINED_FILE, msg, NULL);
        return;
    }
    pc->tl = tl;
    log_debug("pagestream %s: tenant %s timeline %s", pgwire_conn_peer(c), w[1], w[2]);
    pgwire_start_copy_both(c);
}

static void on_copy_done(pgwire_conn *c, void *arg)
{
    (void)arg;
    /* The client is done: answer what is in flight, then end the copy. */
    ps_conn *pc = pgwire_conn_data(c);
    if (pc != NULL && pc->inflight == 0) {
        pgwire_send_copy_done(c);
        pgwire_send_command_complete(c, "COPY 0");
        pgwire_send_ready(c);
    } else {
        pgwire_conn_close(c);
    }
}

/* ---- lifecycle ---- */

static void register_metrics(page_service *ps)
{
    metrics_registry *r = metrics_default_registry();
    static const char *const label[] = {"type"};
    for (int i = 0; i < N_TYPES; i++) {
        const char *v[] = {type_names[i]};
        ps->requests[i] = metrics_counter_register(r, "pageserver_pagestream_requests_total",
                                                   "Pagestream requests by type", 1, label, v);
        ps->errors[i] = metrics_counter_register(
            r, "pageserver_pagestream_errors_total",
            "Pagestream requests answered with an error, by type", 1, label, v);
    }
    ps->protocol_errors = metrics_counter_register(
        r, "pageserver_pagestream_protocol_errors_total",
        "Malformed pagestream requests (each closed its connection)", 0, NULL, NULL);
    ps->wait_timeouts = metrics_counter_register(
        r, "pageserver_wait_lsn_timeouts_total",
        "Requests that timed out waiting for WAL to be ingested", 0, NULL, NULL);
    static const double bounds[] = {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
                                    25e-3, 50e-3,  100e-3, 250e-3, 1,    5,      60};
    ps->getpage_seconds = metrics_histogram_register(
        r, "pageserver_getpage_seconds",
        "GetPage latency from request received to response queued, including waits", bounds,
        (int)(sizeof bounds / sizeof bounds[0]), 0, NULL, NULL);
    static const char *const stage_label[] = {"stage"};
    static const char *const stages[4] = {"park", "queue", "read", "reply"};
    for (int i = 0; i < 4; i++) {
        const char *v[] = {stages[i]};
        ps->stage_seconds[i] = metrics_histogram_register(
            r, "pageserver_getpage_stage_seconds",
            "GetPage latency by stage: parked waiting for WAL, queued for a worker (0 when "
            "answered inline), reading the page, waiting to be sent after earlier responses",
            bounds, (int)(sizeof bounds / sizeof bounds[0]), 1, stage_label, v);
    }
    ps->connections = metrics_gauge_register(r, "pageserver_pagestream_connections",
                                             "Open page service connections", 0, NULL, NULL);
    ps->parked_gauge = metrics_gauge_register(
        r, "pageserver_requests_waiting_for_wal",
        "Requests parked until their not_modified_since LSN is ingested", 0, NULL, NULL);
}

/* The service is freed once it is stopped, its own handles are closed and
 * the last connection's state is gone: pgwire may report a connection
 * closed (on_close) after the service's handles finished closing. */
static void service_maybe_free(page_service *ps)
{
    if (!ps->stopping || ps->handles_open > 0 || ps->conns_live > 0)
        return;
    pthread_mutex_destroy(&ps->mu);
    pthread_cond_destroy(&ps->cv);
    free(ps->threads);
    free(ps);
}

static void on_handle_closed(uv_handle_t *h)
{
    page_service *ps = h->data;
    STRATA_ASSERT(ps->handles_open > 0);
    ps->handles_open--;
    service_maybe_free(ps);
}

static void stop_workers(page_service *ps)
{
    pthread_mutex_lock(&ps->mu);
    ps->quit = true;
    pthread_cond_broadcast(&ps->cv);
    pthread_mutex_unlock(&ps->mu);
    for (int i = 0; i < ps->nthreads; i++)
        pthread_join(ps->threads[i], NULL);
    ps->nthreads = 0;
}

page_service *page_service_start(uv_loop_t *loop, tenants *t, const page_service_options *o,
                                 char *err, size_t errlen)
{
    page_service *ps = calloc(1, sizeof *ps);
    if (ps == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    ps->loop = loop;
    ps->tenants = t;
    ps->opt = *o;
    if (ps->opt.workers <= 0)
        ps->opt.workers = 4;
    if (ps->opt.pipeline_depth <= 0)
        ps->opt.pipeline_depth = 32;
    if (ps->opt.pipeline_depth > MAX_PIPELINE_DEPTH)
        ps->opt.pipeline_depth = MAX_PIPELINE_DEPTH;
    if (ps->opt.wait_lsn_timeout_ms == 0)
        ps->opt.wait_lsn_timeout_ms = 60000;
    pthread_mutex_init(&ps->mu, NULL);
    pthread_cond_init(&ps->cv, NULL);
    register_metrics(ps);

    uv_async_init(loop, &ps->async, on_async);
    ps->async.data = ps;
    uv_timer_init(loop, &ps->park_timer);
    ps->park_timer.data = ps;
    ps->handles_open = 2;

    ps->threads = calloc((size_t)ps->opt.workers, sizeof *ps->threads);
    for (int i = 0; ps->threads != NULL && i < ps->opt.workers; i++) {
        if (pthread_create(&ps->threads[i], NULL, worker_main, ps) != 0)
            break;
        ps->nthreads++;
    }
    if (ps->nthreads != ps->opt.workers) {
        snprintf(err, errlen, "cannot start %d page service workers", ps->opt.workers);
        goto fail;
    }

    pgwire_config cfg = {.host = o->host,
                         .port = o->port,
                         .max_connections = o->max_connections,
                         .max_copy_message = 4096,
                         .out_high_watermark = 4u << 20};
    pgwire_handlers h = {.on_connect = on_connect,
                         .on_query = on_query,
                         .on_copy_data = on_copy_data,
                         .on_copy_done = on_copy_done,
                         .on_writable = on_writable,
                         .on_close = on_close};
    ps->server = pgwire_server_start(loop, &cfg, &h, ps, err, errlen);
    if (ps->server == NULL)
        goto fail;
    return ps;
fail:
    ps->stopping = true;
    stop_workers(ps);
    uv_close((uv_handle_t *)&ps->async, on_handle_closed);
    uv_close((uv_handle_t *)&ps->park_timer, on_handle_closed);
    return NULL;
}

int page_service_port(const page_service *ps)
{
    return pgwire_server_port(ps->server);
}

void page_service_stop(page_service *ps)
{
    ps->stopping = true;
    pgwire_server_stop(ps->server);
    ps->server = NULL;
    stop_workers(ps);
    /* Retire everything: finished jobs, queued jobs, parked jobs. */
    on_async(&ps->async);
    pthread_mutex_lock(&ps->mu);
    job *q = ps->queue_head;
    ps->queue_head = ps->queue_tail = NULL;
    pthread_mutex_unlock(&ps->mu);
    for (job *list = q; list != NULL;) {
        job *j = list;
        list = j->next;
        set_error(j, SQLSTATE_ADMIN_SHUTDOWN, "the pageserver is shutting down");
        j->done = true;
        conn_flush(j->conn);
    }
    while (ps->parked != NULL) {
        job *j = ps->parked;
        ps->parked = j->next;
        set_error(j, SQLSTATE_ADMIN_SHUTDOWN, "the pageserver is shutting down");
        j->done = true;
        conn_flush(j->conn);
    }
    ps->nparked = 0;
    uv_timer_stop(&ps->park_timer);
    uv_close((uv_handle_t *)&ps->async, on_handle_closed);
    uv_close((uv_handle_t *)&ps->park_timer, on_handle_closed);
}
