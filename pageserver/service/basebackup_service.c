/*
 * basebackup_service.c: the "basebackup" command (see basebackup_service.h).
 *
 * Shape: the loop thread parses the command, takes a timeline reference and
 * starts a job: a thread of its own that waits (bounded) for the LSN to be
 * ingested, checks the GC horizon and runs basebackup_write, whose sink
 * appends each chunk to the job's bounded queue (blocking while it is full)
 * and wakes the loop with uv_async.  The loop sends queued chunks as
 * CopyData while the connection is not congested (a 5 ms timer retries
 * while it is), then CopyDone, CommandComplete and ReadyForQuery, or an
 * ErrorResponse.  Only the loop thread touches the pgwire_conn.
 *
 * Disconnects: basebackup_service_conn_closed() (called by the page
 * service's on_close) marks the job cancelled and forgets the connection;
 * the thread sees the flag in the sink or the LSN wait and ends, and the
 * loop then frees the job.
 * Not for: the archive's contents (basebackup.c).
 */
#include "pageserver/service/basebackup_service.h"

#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/metrics.h"
#include "base/sqlstate.h"
#include "pageserver/service/basebackup.h"
#include "pageserver/timeline/timeline.h"

#define BB_MAX_CONCURRENT 4    /* basebackups running at once (process-wide) */
#define BB_QUEUE_CHUNKS 8      /* chunks queued between thread and loop */
#define BB_WAIT_SLICE_MS 100   /* LSN wait slices (a cancel is seen within one) */
#define BB_CONGESTED_POLL_MS 5 /* retry interval while the connection is congested */

typedef struct bb_chunk {
    struct bb_chunk *next;
    size_t len;
    uint8_t data[];
} bb_chunk;

typedef struct bb_job {
    /* loop thread only */
    uv_loop_t *loop;
    pgwire_conn *c; /* NULL once the connection closed */
    bool copy_started;
    bool thread_joined;
    int handles_open;
    uv_async_t async;
    uv_timer_t timer;
    struct bb_job *next_active;

    /* set before the thread starts, read-only after */
    timeline *tl;
    lsn_t lsn; /* LSN_INVALID: latest */
    bool full;
    bool replica; /* basebackup.h replica mode */
    uint32_t wait_ms;
    uint64_t start_ns;
    char ids[80]; /* "tenant/timeline" for logs */
    pthread_t thread;

    /* guarded by mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bb_chunk *head, *tail;
    int queued;
    bool cancelled;
    bool finished; /* the thread wrote its result below */
    int rc;
    char sqlstate[6];
    char err[512];
    basebackup_result res;
} bb_job;

/* Loop-thread state (the page service runs one loop). */
static bb_job *active_jobs;
static atomic_int running_jobs;

static pthread_once_t metrics_once = PTHREAD_ONCE_INIT;
static metrics_counter *m_total, *m_failures, *m_cancelled;
static metrics_histogram *m_seconds;
static metrics_gauge *m_running;

static void register_metrics(void)
{
    metrics_registry *r = metrics_default_registry();
    m_total = metrics_counter_register(r, "pageserver_basebackups_total",
                                       "Basebackup commands accepted", 0, NULL, NULL);
    m_failures = metrics_counter_register(r, "pageserver_basebackup_failures_total",
                                          "Basebackups that ended with an error", 0, NULL, NULL);
    m_cancelled = metrics_counter_register(r, "pageserver_basebackups_cancelled_total",
                                           "Basebackups whose client went away", 0, NULL, NULL);
    static const double bounds[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
    m_seconds = metrics_histogram_register(r, "pageserver_basebackup_seconds",
                                           "Duration of successful basebackups", bounds,
                                           (int)(sizeof bounds / sizeof bounds[0]), 0, NULL, NULL);
    m_running = metrics_gauge_register(r, "pageserver_basebackups_running",
                                       "Basebackups in progress", 0, NULL, NULL);
}

/* ---- the thread ---- */

static void job_fail(bb_job *j, const char *sqlstate, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void job_fail(bb_job *j, const char *sqlstate, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->err, sizeof j->err, fmt, ap);
    va_end(ap);
    snprintf(j->sqlstate, sizeof j->sqlstate, "%s", sqlstate);
    j->rc = -1;
}

static bool job_cancelled(bb_job *j)
{
    pthread_mutex_lock(&j->mu);
    bool c = j->cancelled;
    pthread_mutex_unlock(&j->mu);
    return c;
}

static int sink(const uint8_t *data, size_t n, void *arg)
{
    bb_job *j = arg;
    bb_chunk *ch = malloc(sizeof *ch + n);
    if (ch == NULL)
        return -1;
    ch->next = NULL;
    ch->len = n;
    memcpy(ch->data, data, n);
    pthread_mutex_lock(&j->mu);
    while (j->queued >= BB_QUEUE_CHUNKS && !j->cancelled)
        pthread_cond_wait(&j->cv, &j->mu);
    if (j->cancelled) {
        pthread_mutex_unlock(&j->mu);
        free(ch);
        return -1;
    }
    if (j->tail != NULL)
        j->tail->next = ch;
    else
        j->head = ch;
    j->tail = ch;
    j->queued++;
    pthread_mutex_unlock(&j->mu);
    uv_async_send(&j->async);
    return 0;
}

/* Waits for the LSN in slices so that a cancel ends the wait early. */
static int wait_ingested(bb_job *j)
{
    uint64_t waited = 0;
    while (timeline_last_record_lsn(j->tl) < j->lsn) {
        if (job_cancelled(j))
            return -1;
        if (waited >= j->wait_ms) {
            char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
            job_fail(j, SQLSTATE_QUERY_CANCELED,
                     "timed out after %u ms waiting for WAL at LSN %s to be ingested; last "
                     "ingested LSN is %s",
                     j->wait_ms, lsn_format(j->lsn, a),
                     lsn_format(timeline_last_record_lsn(j->tl), b));
            return -1;
        }
        if (timeline_is_deleted(j->tl)) {
            job_fail(j, SQLSTATE_UNDEFINED_FILE, "the timeline was deleted");
            return -1;
        }
        uint32_t slice = j->wait_ms - waited < BB_WAIT_SLICE_MS ? (uint32_t)(j->wait_ms - waited)
                                                                : BB_WAIT_SLICE_MS;
        timeline_wait_lsn(j->tl, j->lsn, slice);
        waited += slice;
    }
    return 0;
}

/* The start of the record that ends at lsn, if the WAL receiver noted it. */
static lsn_t record_start_at(bb_job *j)
{
    pg_key k = {.kind = KEY_CHECKPOINT, .rel = KEY_CHECKPOINT_REL_RECORD_START};
    value_ref v;
    lsn_t found = LSN_INVALID;
    char err[256];
    int rc = timeline_get_latest(j->tl, &k, j->lsn, &v, &found, err, sizeof err);
    if (rc != 1)
        return LSN_INVALID;
    lsn_t s = LSN_INVALID;
    if (found == j->lsn && v.kind == VAL_BLOB && v.len == 8) {
        for (int i = 7; i >= 0; i--)
            s = s << 8 | v.payload[i];
    }
    free((void *)v.payload);
    return s < j->lsn ? s : LSN_INVALID;
}

static void *job_main(void *arg)
{
    pthread_setname_np(pthread_self(), "ps-basebackup");
    bb_job *j = arg;
    j->rc = 0;
    if (j->lsn == LSN_INVALID)
        j->lsn = timeline_last_record_lsn(j->tl);
    if (wait_ingested(j) == 0) {
        lsn_t horizon = timeline_gc_horizon(j->tl);
        const timeline_meta *meta = timeline_get_meta(j->tl);
        char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
        if (horizon != LSN_INVALID && j->lsn < horizon) {
            job_fail(j, SQLSTATE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                     "requested LSN %s is below the GC horizon %s of this timeline",
                     lsn_format(j->lsn, a), lsn_format(horizon, b));
        } else if (j->lsn < meta->start_lsn) {
            job_fail(j, SQLSTATE_INVALID_PARAMETER_VALUE,
                     "requested LSN %s is before the timeline's start %s", lsn_format(j->lsn, a),
                     lsn_format(meta->start_lsn, b));
        } else {
            basebackup_timeline_source ts = {.tl = j->tl};
            basebackup_source src;
            basebackup_source_timeline(&src, &ts);
            basebackup_options o = {.full = j->full,
                                    .prev_lsn = j->replica ? LSN_INVALID : record_start_at(j),
                                    .timeline_start = meta->start_lsn,
                                    .replica = j->replica,
                                    .gc_horizon = horizon};
            if (!j->replica && o.prev_lsn == LSN_INVALID && j->lsn != meta->start_lsn)
                log_warn("basebackup %s at %s: the start of the record ending there is not "
                         "known; writing xl_prev 0 (stock WAL readers stop at the checkpoint)",
                         j->ids, lsn_format(j->lsn, a));
            const char *sqlstate = NULL;
            if (basebackup_write(&src, j->lsn, &o, sink, j, &j->res, j->err, sizeof j->err,
                                 &sqlstate) != 0) {
                snprintf(j->sqlstate, sizeof j->sqlstate, "%s",
                         sqlstate ? sqlstate : SQLSTATE_INTERNAL_ERROR);
                j->rc = -1;
            }
        }
    }
    if (j->rc == 0 && job_cancelled(j))
        job_fail(j, SQLSTATE_QUERY_CANCELED, "cancelled");
    pthread_mutex_lock(&j->mu);
    j->finished = true;
    pthread_mutex_unlock(&j->mu);
    uv_async_send(&j->async);
    return NULL;
}

/* ---- the loop side ---- */

static void job_handle_closed(uv_handle_t *h)
{
    bb_job *j = h->data;
    if (--j->handles_open > 0)
        return;
    while (j->head != NULL) {
        bb_chunk *ch = j->head;
        j->head = ch->next;
        free(ch);
    }
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    timeline_unref(j->tl);
    free(j);
}

static void job_unlink(bb_job *j)
{
    for (bb_job **p = &active_jobs; *p != NULL; p = &(*p)->next_active)
        if (*p == j) {
            *p = j->next_active;
            break;
        }
}

/* The thread has finished: join it, answer the client, free the job. */
static void job_finish(bb_job *j)
{
    pthread_join(j->thread, NULL);
    j->thread_joined = true;
    atomic_fetch_sub(&running_jobs, 1);
    metrics_gauge_add(m_running, -1);
    job_unlink(j);
    char a[LSN_FMT_LEN];
    double secs = (double)(uv_hrtime() - j->start_ns) / 1e9;
    if (j->c == NULL) {
        metrics_counter_inc(m_cancelled);
        log_info("basebackup %s at %s: the client went away", j->ids, lsn_format(j->lsn, a));
    } else if (j->rc != 0) {
        metrics_counter_inc(m_failures);
        log_warn("basebackup %s at %s failed: %s", j->ids, lsn_format(j->lsn, a), j->err);
        pgwire_send_error(j->c, "ERROR", j->sqlstate[0] ? j->sqlstate : SQLSTATE_INTERNAL_ERROR,
                          j->err, NULL);
    } else {
        if (!j->copy_started)
            pgwire_start_copy_out(j->c);
        pgwire_send_copy_done(j->c);
        pgwire_send_command_complete(j->c, "BASEBACKUP");
        pgwire_send_ready(j->c);
        metrics_histogram_observe(m_seconds, secs);
        log_info("basebackup %s at %s%s%s: %" PRIu64 " bytes, %u files (%u relation files), "
                 "xl_prev %s, in %.3f s",
                 j->ids, lsn_format(j->lsn, a), j->full ? " full" : "",
                 j->replica ? " replica" : "", j->res.bytes, j->res.files, j->res.rel_files,
                 j->res.prev_lsn ? "known" : "0", secs);
    }
    uv_close((uv_handle_t *)&j->async, job_handle_closed);
    uv_close((uv_handle_t *)&j->timer, job_handle_closed);
}

static void on_timer(uv_timer_t *t);

static void job_pump(bb_job *j)
{
    if (j->thread_joined)
        return;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        bb_chunk *ch = NULL;
        bool finished = j->finished;
        if (j->c == NULL) {
            /* Cancelled: drop what is queued so the thread is not blocked. */
            while (j->head != NULL) {
                bb_chunk *d = j->head;
                j->head = d->next;
                free(d);
            }
            j->tail = NULL;
            j->queued = 0;
            pthread_cond_broadcast(&j->cv);
        } else if (j->head != NULL && !pgwire_conn_is_congested(j->c)) {
            ch = j->head;
            j->head = ch->next;
            if (j->head == NULL)
                j->tail = NULL;
            j->queued--;
            pthread_cond_broadcast(&j->cv);
        }
        bool more = j->head != NULL;
        pthread_mutex_unlock(&j->mu);
        if (ch != NULL) {
            if (!j->copy_started) {
                pgwire_start_copy_out(j->c);
                j->copy_started = true;
            }
            pgwire_send_copy_data(j->c, ch->data, ch->len);
            free(ch);
            continue;
        }
        if (more) {
            /* Congested: try again shortly (the page service owns on_writable). */
            if (!uv_is_active((uv_handle_t *)&j->timer))
                uv_timer_start(&j->timer, on_timer, BB_CONGESTED_POLL_MS, 0);
            return;
        }
        if (finished)
            job_finish(j);
        return;
    }
}

static void on_async(uv_async_t *a)
{
    job_pump(a->data);
}

static void on_timer(uv_timer_t *t)
{
    job_pump(t->data);
}

void basebackup_service_conn_closed(pgwire_conn *c)
{
    for (bb_job *j = active_jobs; j != NULL; j = j->next_active) {
        if (j->c != c)
            continue;
        j->c = NULL;
        pthread_mutex_lock(&j->mu);
        j->cancelled = true;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        uv_async_send(&j->async);
    }
}

void basebackup_service_conn_writable(pgwire_conn *c)
{
    for (bb_job *j = active_jobs; j != NULL; j = j->next_active)
        if (j->c == c)
            job_pump(j);
}

static const char usage[] =
    "usage: basebackup <tenant_id> <timeline_id> <lsn>|latest [full|replica]";

int basebackup_service_split_words(char *s, char *words[], int max)
{
    int n = 0;
    char *save = NULL;
    for (char *w = strtok_r(s, " \t\r\n;", &save); w != NULL;
         w = strtok_r(NULL, " \t\r\n;", &save)) {
        if (n == max)
            return max + 1;
        words[n++] = w;
    }
    return n;
}

/* Splits the command in buf (a copy of the query, changed in place) into
 * w (*n words) and parses its ids and LSN (LSN_INVALID: latest).  False
 * after answering the error. */
static bool parse_query(pgwire_conn *c, char *buf, char *w[6], int *n, strata_id *tenant,
                        strata_id *tlid, lsn_t *lsn)
{
    char msg[400];
    *n = basebackup_service_split_words(buf, w, 5);
    if (*n < 4 || *n > 5 || strcmp(w[0], "basebackup") != 0 ||
        (*n == 5 && strcmp(w[4], "full") != 0 && strcmp(w[4], "replica") != 0)) {
        pgwire_send_error(c, "ERROR", SQLSTATE_SYNTAX_ERROR, "malformed basebackup command", usage);
        return false;
    }
    if (!strata_id_parse(w[1], tenant) || !strata_id_parse(w[2], tlid)) {
        bool tenant_ok = strata_id_parse(w[1], tenant);
        snprintf(msg, sizeof msg, "invalid %s \"%.40s\": expected 32 hex digits",
                 tenant_ok ? "timeline_id" : "tenant_id", tenant_ok ? w[2] : w[1]);
        pgwire_send_error(c, "ERROR", SQLSTATE_INVALID_PARAMETER_VALUE, msg, usage);
        return false;
    }
    *lsn = LSN_INVALID;
    if (strcmp(w[3], "latest") == 0)
        return true;
    if (!lsn_parse(w[3], lsn) || *lsn == LSN_INVALID) {
        snprintf(msg, sizeof msg, "invalid LSN \"%.40s\": expected X/Y in hex or latest", w[3]);
        pgwire_send_error(c, "ERROR", SQLSTATE_INVALID_PARAMETER_VALUE, msg, usage);
        return false;
    }
    if (*lsn % 8 != 0) {
        snprintf(msg, sizeof msg,
                 "LSN %.40s is not a record boundary (record ends are 8-byte aligned)", w[3]);
        pgwire_send_error(c, "ERROR", SQLSTATE_INVALID_PARAMETER_VALUE, msg, NULL);
        return false;
    }
    return true;
}

/* Starts the job of one admitted basebackup of tl (the caller's reference
 * passes to it; running_jobs counts it already).  w are the command's
 * words.  On failure answers the error and undoes the admission. */
static void start_job(uv_loop_t *loop, pgwire_conn *c, timeline *tl, lsn_t lsn, char *w[6], int n)
{
    char msg[400];
    bb_job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        atomic_fetch_sub(&running_jobs, 1);
        timeline_unref(tl);
        pgwire_send_error(c, "ERROR", SQLSTATE_OUT_OF_MEMORY, "out of memory", NULL);
        return;
    }
    j->loop = loop;
    j->c = c;
    j->tl = tl;
    j->lsn = lsn;
    j->full = n == 5 && strcmp(w[4], "full") == 0;
    j->replica = n == 5 && strcmp(w[4], "replica") == 0;
    j->wait_ms = BASEBACKUP_SERVICE_WAIT_MS;
    j->start_ns = uv_hrtime();
    snprintf(j->ids, sizeof j->ids, "%.32s/%.32s", w[1], w[2]);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    uv_async_init(loop, &j->async, on_async);
    j->async.data = j;
    uv_timer_init(loop, &j->timer);
    j->timer.data = j;
    j->handles_open = 2;
    metrics_counter_inc(m_total);
    metrics_gauge_add(m_running, 1);
    int rc = pthread_create(&j->thread, NULL, job_main, j);
    if (rc != 0) {
        atomic_fetch_sub(&running_jobs, 1);
        metrics_gauge_add(m_running, -1);
        metrics_counter_inc(m_failures);
        j->thread_joined = true;
        snprintf(msg, sizeof msg, "cannot start the basebackup thread: %s", strerror(rc));
        pgwire_send_error(c, "ERROR", SQLSTATE_INSUFFICIENT_RESOURCES, msg, NULL);
        uv_close((uv_handle_t *)&j->async, job_handle_closed);
        uv_close((uv_handle_t *)&j->timer, job_handle_closed);
        return;
    }
    j->next_active = active_jobs;
    active_jobs = j;
}

void basebackup_service_query(uv_loop_t *loop, pgwire_conn *c, tenants *t, const char *sql)
{
    pthread_once(&metrics_once, register_metrics);
    char buf[256], msg[400];
    if (strlen(sql) >= sizeof buf) {
        pgwire_send_error(c, "ERROR", SQLSTATE_SYNTAX_ERROR, "command too long", usage);
        return;
    }
    strcpy(buf, sql);
    char *w[6];
    int n = 0;
    strata_id tenant, tlid;
    lsn_t lsn = LSN_INVALID;
    if (!parse_query(c, buf, w, &n, &tenant, &tlid, &lsn))
        return;
    timeline *tl = tenants_get(t, &tenant, &tlid);
    if (tl == NULL) {
        snprintf(msg, sizeof msg, "tenant %s timeline %s not found on this pageserver", w[1], w[2]);
        pgwire_send_error(c, "ERROR", SQLSTATE_UNDEFINED_FILE, msg, NULL);
        return;
    }
    if (atomic_fetch_add(&running_jobs, 1) >= BB_MAX_CONCURRENT) {
        atomic_fetch_sub(&running_jobs, 1);
        timeline_unref(tl);
        snprintf(msg, sizeof msg, "too many basebackups in progress (at most %d); try again",
                 BB_MAX_CONCURRENT);
        pgwire_send_error(c, "ERROR", SQLSTATE_TOO_MANY_CONNECTIONS, msg, NULL);
        return;
    }
    start_job(loop, c, tl, lsn, w, n);
}
