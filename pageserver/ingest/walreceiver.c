/*
 * walreceiver.c: one timeline's WAL stream from a safekeeper into ingest
 * (see walreceiver.h for the contract).
 *
 * Not for: decoding records (common/pg/walformat.h, ingest.c) or storage.
 *
 * One thread.  It blocks only in libpq calls bounded by connect_timeout and
 * in poll() with a 100 ms tick, so walreceiver_stop() returns promptly.  The
 * status is copied under a mutex; nothing else is shared.
 */
#include "pageserver/ingest/walreceiver.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "base/log.h"
#include "base/sqlstate.h"
#include "base/strata_assert.h"
#include "pg/walformat.h"
#include "net/remote_storage.h"
#include "pageserver/ingest/walreceiver_choice.h"
#include "proto/replication.h"

struct walreceiver {
    walreceiver_options o;
    char *sk[WALRECEIVER_MAX_SAFEKEEPERS];
    char *user, *password;
    store *st;
    ingest_state *ing;
    uint8_t *buf; /* reassembly buffer, grown by the reader to the largest record */
    size_t buf_cap;
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t mu; /* guards status */
    walreceiver_status_info status;
    int last_failed; /* safekeeper index that failed last, -1 none */
    int switch_to;   /* receiver thread only: a probe chose it, -1 none */
    bool probing;    /* receiver thread only: probing others while streaming */
    /* Receiver thread only: a safekeeper that failed a probe is not probed
     * again before this time, so that a dead one does not keep stalling the
     * stream for a connect timeout at every probe. */
    uint64_t probe_skip_until_ms[WALRECEIVER_MAX_SAFEKEEPERS];
};

void walreceiver_options_default(walreceiver_options *o)
{
    memset(o, 0, sizeof *o);
    o->user = "strata";
    o->wal_seg_size = WAL_SEG_SIZE_DEFAULT;
    o->status_interval_ms = 1000;
    o->reconnect_min_ms = 100;
    o->reconnect_max_ms = 5000;
    o->connect_timeout_s = 5;
    o->probe_interval_ms = 10000;
    o->switch_lag_bytes = 1ull << 30;
    o->reassembly_buf = WAL_READER_DEFAULT_BUF;
    o->send_ps_feedback = true;
    o->send_ids = true;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void set_error(walreceiver *wr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(walreceiver *wr, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&wr->mu);
    if (wr->probing) {
        /* A safekeeper we are not streaming from did not answer a probe:
         * not an error of the stream, which is fine. */
        wr->status.probe_errors++;
    } else {
        wr->status.errors++;
        wr->status.last_error_time = time(NULL);
        snprintf(wr->status.last_error, sizeof wr->status.last_error, "%s", msg);
    }
    pthread_mutex_unlock(&wr->mu);
    log_write(wr->probing ? LOG_LEVEL_INFO : LOG_LEVEL_WARN, "walreceiver: %s%s",
              wr->probing ? "probe: " : "", msg);
}

/* Streaming works again: the last error is history (its time and the
 * error count stay). */
static void clear_error(walreceiver *wr)
{
    pthread_mutex_lock(&wr->mu);
    wr->status.last_error[0] = '\0';
    pthread_mutex_unlock(&wr->mu);
}

/* Builds a libpq connection string for safekeeper i.  0 or -1. */
static int conninfo(const walreceiver *wr, int i, char *out, size_t cap)
{
    const char *hp = wr->sk[i];
    const char *colon = strrchr(hp, ':');
    if (colon == NULL || colon == hp)
        return -1;
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    int n = snprintf(out, cap,
                     "host=%.*s port=%s user=%s dbname=replication replication=true "
                     "connect_timeout=%u application_name=strata_pageserver",
                     (int)(colon - hp), hp, colon + 1, wr->user, wr->o.connect_timeout_s);
    if (n < 0 || (size_t)n >= cap)
        return -1;
    if (wr->o.send_ids) {
        int m = snprintf(out + n, cap - (size_t)n, " options='-c tenant_id=%s -c timeline_id=%s'",
                         strata_id_format(&wr->o.tenant, t), strata_id_format(&wr->o.timeline, l));
        if (m < 0 || (size_t)m >= cap - (size_t)n)
            return -1;
        n += m;
    }
    if (wr->password != NULL) {
        int m = snprintf(out + n, cap - (size_t)n, " password=%s", wr->password);
        if (m < 0 || (size_t)m >= cap - (size_t)n)
            return -1;
    }
    return 0;
}

static PGconn *connect_sk(walreceiver *wr, int i)
{
    char ci[1024];
    if (conninfo(wr, i, ci, sizeof ci) != 0) {
        set_error(wr, "safekeeper \"%s\" is not host:port", wr->sk[i]);
        return NULL;
    }
    PGconn *c = PQconnectdb(ci);
    if (PQstatus(c) != CONNECTION_OK) {
        set_error(wr, "connect to %s: %s", wr->sk[i], PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    return c;
}

/* IDENTIFY_SYSTEM's xlogpos: 0, or -1 on error. */
static int identify(walreceiver *wr, PGconn *c, int i, lsn_t *xlogpos)
{
    PGresult *r = PQexec(c, "IDENTIFY_SYSTEM");
    int rc = -1;
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1 || PQnfields(r) < 3)
        set_error(wr, "IDENTIFY_SYSTEM on %s: %s", wr->sk[i], PQerrorMessage(c));
    else if (!lsn_parse(PQgetvalue(r, 0, 2), xlogpos))
        set_error(wr, "IDENTIFY_SYSTEM on %s: bad xlogpos \"%s\"", wr->sk[i], PQgetvalue(r, 0, 2));
    else
        rc = 0;
    PQclear(r);
    return rc;
}

/* Probes every safekeeper except exclude (-1 none) with IDENTIFY_SYSTEM
 * into cand[0..n_safekeepers).  While streaming (wr->probing), one that is
 * backing off after a failed probe is left out, and one that fails now
 * starts backing off.  A stop request leaves the rest unprobed. */
static void probe(walreceiver *wr, int exclude, walreceiver_candidate *cand)
{
    for (int i = 0; i < wr->o.n_safekeepers; i++)
        cand[i] = (walreceiver_candidate){.answered = false, .xlogpos = 0};
    for (int i = 0; i < wr->o.n_safekeepers && !atomic_load(&wr->stop); i++) {
        if (i == exclude ||
            (wr->probing && !walreceiver_choice_probe_due(wr->probe_skip_until_ms[i], now_ms())))
            continue;
        PGconn *c = connect_sk(wr, i);
        cand[i].answered = c != NULL && identify(wr, c, i, &cand[i].xlogpos) == 0;
        if (!cand[i].answered && wr->probing)
            wr->probe_skip_until_ms[i] = walreceiver_choice_probe_backoff(now_ms());
        PQfinish(c);
    }
}

/* The safekeeper to (re)connect to (walreceiver_choice_best over a probe of
 * all), or -1 if none answers. */
static int choose(walreceiver *wr)
{
    walreceiver_candidate cand[WALRECEIVER_MAX_SAFEKEEPERS];
    probe(wr, -1, cand);
    return walreceiver_choice_best(cand, wr->o.n_safekeepers, wr->last_failed);
}

static int send_copy(walreceiver *wr, PGconn *c, const replication_msg *m)
{
    uint8_t buf[64];
    size_t n = replication_encode(m, buf, sizeof buf);
    if (n == 0 || PQputCopyData(c, (const char *)buf, (int)n) != 1 || PQflush(c) != 0) {
        set_error(wr, "sending feedback: %s", PQerrorMessage(c));
        return -1;
    }
    return 0;
}

static int send_status(walreceiver *wr, PGconn *c, lsn_t received)
{
    lsn_t disk = store_disk_consistent_lsn(wr->st);
    replication_msg m = {.kind = REPLICATION_STATUS_UPDATE};
    m.u.status.write_lsn = received;
    m.u.status.flush_lsn = received;
    m.u.status.apply_lsn = disk;
    m.u.status.send_time = replication_now();
    if (send_copy(wr, c, &m) != 0)
        return -1;
    if (!wr->o.send_ps_feedback)
        return 0;
    replication_msg z = {.kind = REPLICATION_PS_FEEDBACK};
    z.u.ps_feedback.last_received_lsn = received;
    z.u.ps_feedback.disk_consistent_lsn = disk;
    z.u.ps_feedback.remote_consistent_lsn =
        wr->o.remote_consistent_lsn ? wr->o.remote_consistent_lsn(wr->o.remote_arg) : disk;
    return send_copy(wr, c, &z);
}

/* STREAM_CONTINUE: the steps of stream() only, "keep streaming". */
enum { STREAM_RETRY = 0, STREAM_FATAL = -1, STREAM_SWITCH = 1, STREAM_CONTINUE = 2 };

/* Records, at the end e of the last record of a message, that record's
 * start s (see KEY_CHECKPOINT_REL_RECORD_START): a basebackup at e then
 * writes the exact xl_prev.  A store failure is fatal like an ingest one. */
static int put_record_start(walreceiver *wr, lsn_t s, lsn_t e)
{
    pg_key k = {.kind = KEY_CHECKPOINT, .rel = KEY_CHECKPOINT_REL_RECORD_START};
    uint8_t payload[8];
    for (int i = 0; i < 8; i++)
        payload[i] = (uint8_t)(s >> (8 * i));
    value_ref v = {.kind = VAL_BLOB, .len = sizeof payload, .payload = payload};
    char err[256];
    if (store_put(wr->st, &k, e, &v, err, sizeof err) != 0) {
        char a[LSN_FMT_LEN];
        set_error(wr, "storing the record start at %s: %s", lsn_format(e, a), err);
        store_advance(wr->st, e);
        return -1;
    }
    return 0;
}

/* Feeds one XLogData into the reader and ingests every record completed. */
static int ingest_xlogdata(walreceiver *wr, wal_reader *r, const replication_xlogdata *x)
{
    if (x->wal_start != wal_reader_next(r)) {
        char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
        set_error(wr, "XLogData starts at %s, expected %s", lsn_format(x->wal_start, a),
                  lsn_format(wal_reader_next(r), b));
        return STREAM_RETRY;
    }
    const uint8_t *data = x->data;
    size_t len = x->data_len;
    lsn_t at = x->wal_start, last = LSN_INVALID, last_start = LSN_INVALID;
    lsn_t advanced = LSN_INVALID; /* made readable mid-message (backpressure) */
    uint64_t nrec = 0;
    while (len > 0) {
        size_t used;
        const char *why;
        int rc = wal_reader_feed(r, at, data, len, &used, &why);
        if (rc == WAL_READER_ERROR) {
            char a[LSN_FMT_LEN];
            set_error(wr, "bad WAL at %s: %s", lsn_format(wal_reader_next(r), a), why);
            break;
        }
        at += used;
        data += used;
        len -= used;
        if (rc != WAL_READER_RECORD)
            continue;
        lsn_t s, e;
        const wal_record *rec = wal_reader_record(r, &s, &e);
        if (e <= store_last_record_lsn(wr->st))
            continue;
        char err[256];
        if (ingest_record(wr->ing, s, e, rec, err, sizeof err) != 0) {
            char a[LSN_FMT_LEN];
            set_error(wr, "ingest of the record at %s: %s", lsn_format(s, a), err);
            if (last != LSN_INVALID)
                store_advance(wr->st, last);
            return STREAM_FATAL;
        }
        last = e;
        last_start = s;
        nrec++;
        if (ingest_pressure_pending(wr->ing)) {
            /* Image generation wants what is ingested readable now: a
             * page reached its hard cap (ingest then waits, bounded, for
             * its image), or a page was queued, whose rebuild may start at
             * once.  The record is fully applied: make everything up to
             * its end readable, with its start for basebackup's xl_prev. */
            if (put_record_start(wr, s, e) != 0)
                return STREAM_FATAL;
            store_advance(wr->st, e);
            advanced = e;
            ingest_relieve_pressure(wr->ing, e);
        }
    }
    if (last != LSN_INVALID && last != advanced) {
        if (put_record_start(wr, last_start, last) != 0)
            return STREAM_FATAL;
        store_advance(wr->st, last);
    }
    pthread_mutex_lock(&wr->mu);
    wr->status.bytes += x->data_len;
    wr->status.records += nrec;
    if (last != LSN_INVALID)
        wr->status.last_received_lsn = last;
    if (x->wal_end > wr->status.upstream_lsn)
        wr->status.upstream_lsn = x->wal_end;
    pthread_mutex_unlock(&wr->mu);
    return len == 0 ? 1 : STREAM_RETRY;
}

/* One connection's streaming state (stream() and its steps). */
typedef struct stream_conn {
    PGconn *c;
    int i; /* the safekeeper streamed from */
    wal_reader r;
    uint64_t next_status, next_probe;
    lsn_t cur_end;            /* how far this safekeeper offers WAL (its commit LSN) */
    uint64_t last_advance_ms; /* ... and when that last moved */
    bool healthy;             /* a message arrived on this connection */
} stream_conn;

/* stream_open's answer when the safekeeper no longer holds the start. */
#define OPEN_REMOVED 1

/* Where streaming (or the WAL backup) starts: where the store's WAL ends,
 * not below the timeline's start. */
static lsn_t start_position(const walreceiver *wr)
{
    lsn_t start = store_last_record_lsn(wr->st);
    return start < wr->o.start_lsn ? wr->o.start_lsn : start;
}

/* Connects to safekeeper i and starts replication where the store's WAL
 * ends, or, with resume, where that reader stands (it becomes the
 * stream's).  0 (sc ready), OPEN_REMOVED (the safekeeper removed the WAL
 * there), or -1 (the error is recorded either way). */
static int stream_open(walreceiver *wr, int i, stream_conn *sc, const wal_reader *resume)
{
    PGconn *c = connect_sk(wr, i);
    if (c == NULL)
        return -1;
    lsn_t pos;
    if (identify(wr, c, i, &pos) != 0) {
        PQfinish(c);
        return -1;
    }
    lsn_t start = resume != NULL ? wal_reader_next(resume) : start_position(wr);
    char q[96], a[LSN_FMT_LEN];
    snprintf(q, sizeof q, "START_REPLICATION PHYSICAL %s", lsn_format(start, a));
    PGresult *res = PQexec(c, q);
    if (PQresultStatus(res) != PGRES_COPY_BOTH) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        bool removed = state != NULL && strcmp(state, SQLSTATE_UNDEFINED_FILE) == 0 &&
                       strstr(PQerrorMessage(c), "has already been removed") != NULL;
        set_error(wr, "%s on %s: %s", q, wr->sk[i], PQerrorMessage(c));
        PQclear(res);
        PQfinish(c);
        return removed ? OPEN_REMOVED : -1;
    }
    PQclear(res);
    pthread_mutex_lock(&wr->mu);
    wr->status.connected = true;
    wr->status.safekeeper = i;
    wr->status.connects++;
    if (wr->status.last_received_lsn < start)
        wr->status.last_received_lsn = start;
    if (pos > wr->status.upstream_lsn)
        wr->status.upstream_lsn = pos;
    pthread_mutex_unlock(&wr->mu);
    log_write(LOG_LEVEL_INFO, "walreceiver: streaming from %s at %s", wr->sk[i], a);

    *sc = (stream_conn){.c = c,
                        .i = i,
                        .next_probe = now_ms() + wr->o.probe_interval_ms,
                        .cur_end = pos,
                        .last_advance_ms = now_ms()};
    /* Records up to PostgreSQL's 1 GB limit: the buffer grows to fit. */
    if (resume != NULL)
        sc->r = *resume; /* a record cut at the segment end completes now */
    else
        wal_reader_init_growable(&sc->r, start, wr->o.wal_seg_size, &wr->buf, &wr->buf_cap);
    return 0;
}

/* The WAL backup's key of segment segno (safekeeper/wal_backup.h's layout:
 * tenants/<t>/timelines/<tl>/wal/<24 hex>, timeline 1). */
static void backup_key(const walreceiver *wr, uint64_t segno, char *out, size_t cap)
{
    uint64_t per_xlogid = 0x100000000ull / wr->o.wal_seg_size;
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    snprintf(out, cap, "tenants/%s/timelines/%s/wal/%08X%08X%08X",
             strata_id_format(&wr->o.tenant, t), strata_id_format(&wr->o.timeline, l), 1u,
             (unsigned)(segno / per_xlogid), (unsigned)(segno % per_xlogid));
}

/* How backup_catch_up ended. */
enum { CATCH_UP_OK = 0, CATCH_UP_FAILED = 1, CATCH_UP_FATAL = 2 };

/* Ingests one segment's bytes [pos, pos + len) read from the backup. */
static int ingest_backup_bytes(walreceiver *wr, wal_reader *r, lsn_t pos, const uint8_t *data,
                               size_t len)
{
    const size_t chunk = 128 * 1024; /* like a safekeeper's XLogData */
    for (size_t off = 0; off < len && !atomic_load(&wr->stop); off += chunk) {
        replication_xlogdata x = {.wal_start = pos + off,
                                  .wal_end = pos + len,
                                  .data = data + off,
                                  .data_len = len - off < chunk ? len - off : chunk};
        int rc = ingest_xlogdata(wr, r, &x);
        if (rc == STREAM_FATAL)
            return CATCH_UP_FATAL;
        if (rc == STREAM_RETRY)
            return CATCH_UP_FAILED;
    }
    return atomic_load(&wr->stop) ? CATCH_UP_FAILED : CATCH_UP_OK;
}

/*
 * The safekeeper removed the WAL where the store ends: reads the closed
 * segments of the WAL backup from there into r (initialised here), ingesting
 * their records, up to the first segment the backup does not have.
 * CATCH_UP_OK leaves r at that segment's start, with any record that
 * crosses into it pending: streaming resumes there.
 */
static int backup_catch_up(walreceiver *wr, wal_reader *r)
{
    uint32_t seg = wr->o.wal_seg_size;
    lsn_t start = start_position(wr), pos = start;
    wal_reader_init_growable(r, start, seg, &wr->buf, &wr->buf_cap);
    uint8_t *data = malloc(seg);
    if (data == NULL) {
        set_error(wr, "WAL backup: out of memory");
        return CATCH_UP_FAILED;
    }
    int rc = CATCH_UP_OK, n = 0;
    char key[REMOTE_MAX_KEY], a[LSN_FMT_LEN], b[LSN_FMT_LEN];
    while (rc == CATCH_UP_OK && !atomic_load(&wr->stop)) {
        backup_key(wr, pos / seg, key, sizeof key);
        size_t want = seg - (size_t)(pos % seg), got = 0;
        remote_err re = {{0}};
        int grc = remote_get_range(wr->o.wal_backup, key, pos % seg, want, data, &got, &re);
        if (grc == -ENOENT)
            break; /* not backed up (yet): the safekeepers have it */
        if (grc != 0) {
            set_error(wr, "WAL backup %s: %s", remote_describe(wr->o.wal_backup), re.msg);
            rc = CATCH_UP_FAILED;
        } else if (got != want) {
            set_error(wr, "WAL backup: %s holds %zu bytes from offset %u, expected %zu", key, got,
                      (unsigned)(pos % seg), want);
            rc = CATCH_UP_FAILED;
        } else {
            rc = ingest_backup_bytes(wr, r, pos, data, got);
            pos += got;
            n++;
            pthread_mutex_lock(&wr->mu);
            wr->status.backup_segments++;
            pthread_mutex_unlock(&wr->mu);
        }
    }
    free(data);
    if (rc == CATCH_UP_OK && n == 0) {
        set_error(wr,
                  "the WAL at %s was removed on the safekeepers and is not in the WAL backup "
                  "%s (%s)",
                  lsn_format(start, a), remote_describe(wr->o.wal_backup), key);
        rc = CATCH_UP_FAILED;
    }
    if (rc == CATCH_UP_OK)
        log_write(LOG_LEVEL_INFO,
                  "walreceiver: read %d WAL segment(s) %s..%s from the WAL backup %s; streaming "
                  "from the safekeepers from there",
                  n, lsn_format(start, a), lsn_format(pos, b), remote_describe(wr->o.wal_backup));
    return atomic_load(&wr->stop) && rc == CATCH_UP_OK ? CATCH_UP_FAILED : rc;
}

/* Probes the other safekeepers (now: when this probe started).
 * STREAM_SWITCH when one should be streamed from instead (wr->switch_to
 * names it), else STREAM_CONTINUE. */
static int stream_probe(walreceiver *wr, stream_conn *sc, uint64_t now)
{
    /* The probe's start is "now" for the policy: the probe's own time, when
     * nothing is read, does not count as idle. */
    walreceiver_candidate cand[WALRECEIVER_MAX_SAFEKEEPERS];
    wr->probing = true;
    probe(wr, sc->i, cand);
    wr->probing = false;
    sc->next_probe = now_ms() + wr->o.probe_interval_ms;
    walreceiver_source src = {.index = sc->i,
                              .received = wal_reader_last_record_end(&sc->r),
                              .offered = sc->cur_end,
                              .advanced_ms = sc->last_advance_ms};
    walreceiver_switch sw =
        walreceiver_choice_switch(cand, wr->o.n_safekeepers, wr->last_failed, &src,
                                  wr->o.switch_lag_bytes, wr->o.probe_interval_ms, now);
    if (sw.target < 0)
        return STREAM_CONTINUE;
    int j = sw.target;
    STRATA_ASSERT(j < wr->o.n_safekeepers && j != sc->i);
    log_write(LOG_LEVEL_INFO,
              "walreceiver: switching from %s to %s (%s, ahead by %" PRIu64 " bytes)",
              wr->sk[sc->i], wr->sk[j], walreceiver_choice_reason_name(sw.reason), sw.ahead_by);
    pthread_mutex_lock(&wr->mu);
    wr->status.switches++;
    pthread_mutex_unlock(&wr->mu);
    wr->switch_to = j;
    return STREAM_SWITCH;
}

/* Nothing to read: feedback when due, probing when due, idle ingest work,
 * then up to 100 ms waiting for input.  STREAM_CONTINUE, STREAM_SWITCH or
 * STREAM_RETRY. */
static int stream_idle(walreceiver *wr, stream_conn *sc)
{
    uint64_t now = now_ms();
    if (now >= sc->next_status) {
        if (send_status(wr, sc->c, wal_reader_last_record_end(&sc->r)) != 0)
            return STREAM_RETRY;
        sc->next_status = now + wr->o.status_interval_ms;
    }
    if (wr->o.n_safekeepers > 1 && now >= sc->next_probe &&
        stream_probe(wr, sc, now) == STREAM_SWITCH)
        return STREAM_SWITCH;
    /* Nothing to ingest now: store the images background generation
     * finished instead of holding them until the next record. */
    if (wr->ing != NULL)
        ingest_idle(wr->ing);
    struct pollfd pfd = {.fd = PQsocket(sc->c), .events = POLLIN};
    int pr = poll(&pfd, 1, 100);
    if (pr < 0 && errno != EINTR) {
        set_error(wr, "poll: %s", strerror(errno));
        return STREAM_RETRY;
    }
    if (pr > 0 && PQconsumeInput(sc->c) == 0) {
        set_error(wr, "connection to %s: %s", wr->sk[sc->i], PQerrorMessage(sc->c));
        return STREAM_RETRY;
    }
    return STREAM_CONTINUE;
}

/* The safekeeper offers WAL up to wal_end. */
static void stream_offered(stream_conn *sc, lsn_t wal_end)
{
    if (wal_end > sc->cur_end) {
        sc->cur_end = wal_end;
        sc->last_advance_ms = now_ms();
    }
}

/* Handles one CopyData message (n bytes).  STREAM_CONTINUE, STREAM_RETRY or
 * STREAM_FATAL. */
static int stream_message(walreceiver *wr, stream_conn *sc, const char *msg, int n)
{
    replication_msg m;
    const char *why;
    if (replication_decode_server_msg((const uint8_t *)msg, (size_t)n, &m, &why) != 0) {
        set_error(wr, "bad message from %s: %s", wr->sk[sc->i], why);
        return STREAM_RETRY;
    }
    if (!sc->healthy) {
        sc->healthy = true;
        clear_error(wr);
    }
    if (m.kind == REPLICATION_XLOGDATA) {
        stream_offered(sc, m.u.xlogdata.wal_end);
        int rc = ingest_xlogdata(wr, &sc->r, &m.u.xlogdata);
        if (rc == STREAM_FATAL || rc == STREAM_RETRY)
            return rc;
    } else if (m.kind == REPLICATION_KEEPALIVE) {
        stream_offered(sc, m.u.keepalive.wal_end);
        pthread_mutex_lock(&wr->mu);
        if (m.u.keepalive.wal_end > wr->status.upstream_lsn)
            wr->status.upstream_lsn = m.u.keepalive.wal_end;
        pthread_mutex_unlock(&wr->mu);
        if (m.u.keepalive.reply_requested)
            sc->next_status = 0;
    }
    return STREAM_CONTINUE;
}

/* Streams from safekeeper i until an error, a stop or a switch:
 * STREAM_RETRY, STREAM_FATAL or STREAM_SWITCH. */
static int stream(walreceiver *wr, int i)
{
    stream_conn sc;
    int orc = stream_open(wr, i, &sc, NULL);
    if (orc == OPEN_REMOVED && wr->o.wal_backup != NULL) {
        wal_reader r;
        int crc = backup_catch_up(wr, &r);
        if (crc == CATCH_UP_FATAL)
            return STREAM_FATAL;
        orc = crc == CATCH_UP_OK ? stream_open(wr, i, &sc, &r) : -1;
    }
    if (orc != 0)
        return STREAM_RETRY;
    int result = STREAM_CONTINUE;
    while (result == STREAM_CONTINUE && !atomic_load(&wr->stop)) {
        char *msg = NULL;
        int n = PQgetCopyData(sc.c, &msg, 1);
        if (n == 0) {
            result = stream_idle(wr, &sc);
        } else if (n == -1) {
            set_error(wr, "%s ended the stream: %s", wr->sk[i], PQerrorMessage(sc.c));
            result = STREAM_RETRY;
        } else if (n < 0) {
            set_error(wr, "reading from %s: %s", wr->sk[i], PQerrorMessage(sc.c));
            result = STREAM_RETRY;
        } else {
            result = stream_message(wr, &sc, msg, n);
            PQfreemem(msg);
        }
    }
    PQfinish(sc.c);
    pthread_mutex_lock(&wr->mu);
    wr->status.connected = false;
    wr->status.safekeeper = -1;
    pthread_mutex_unlock(&wr->mu);
    /* A stop ends the stream like an error: the caller sees stop and exits. */
    return result == STREAM_CONTINUE ? STREAM_RETRY : result;
}

static void sleep_interruptible(walreceiver *wr, uint32_t ms)
{
    uint64_t until = now_ms() + ms;
    while (!atomic_load(&wr->stop) && now_ms() < until) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void *run(void *arg)
{
    pthread_setname_np(pthread_self(), "ps-ingest");
    walreceiver *wr = arg;
    uint32_t backoff = wr->o.reconnect_min_ms;
    while (!atomic_load(&wr->stop)) {
        int i = wr->switch_to;
        wr->switch_to = -1;
        if (i < 0)
            i = choose(wr);
        if (i < 0) {
            sleep_interruptible(wr, backoff);
            backoff = backoff * 2 > wr->o.reconnect_max_ms ? wr->o.reconnect_max_ms : backoff * 2;
            continue;
        }
        uint64_t before;
        pthread_mutex_lock(&wr->mu);
        before = wr->status.records;
        pthread_mutex_unlock(&wr->mu);
        int rc = stream(wr, i);
        if (rc == STREAM_FATAL) {
            pthread_mutex_lock(&wr->mu);
            wr->status.running = false;
            pthread_mutex_unlock(&wr->mu);
            log_write(LOG_LEVEL_ERROR, "walreceiver: stopped on an ingest error");
            return NULL;
        }
        if (rc == STREAM_SWITCH)
            continue;
        wr->last_failed = i;
        pthread_mutex_lock(&wr->mu);
        bool progressed = wr->status.records > before;
        pthread_mutex_unlock(&wr->mu);
        if (progressed)
            backoff = wr->o.reconnect_min_ms;
        sleep_interruptible(wr, backoff);
        backoff = backoff * 2 > wr->o.reconnect_max_ms ? wr->o.reconnect_max_ms : backoff * 2;
    }
    return NULL;
}

static void free_wr(walreceiver *wr)
{
    for (int i = 0; i < WALRECEIVER_MAX_SAFEKEEPERS; i++)
        free(wr->sk[i]);
    free(wr->user);
    free(wr->password);
    free(wr->buf);
    pthread_mutex_destroy(&wr->mu);
    free(wr);
}

int walreceiver_start(const walreceiver_options *o, store *st, ingest_state *ing, walreceiver **out,
                      char *err, size_t errlen)
{
    if (o->n_safekeepers < 1 || o->n_safekeepers > WALRECEIVER_MAX_SAFEKEEPERS) {
        snprintf(err, errlen, "need 1 to %d safekeepers", WALRECEIVER_MAX_SAFEKEEPERS);
        return -1;
    }
    if (!wal_seg_size_valid(o->wal_seg_size) || o->reassembly_buf < 64 * 1024 ||
        o->status_interval_ms == 0 || o->reconnect_min_ms == 0 ||
        o->reconnect_max_ms < o->reconnect_min_ms) {
        snprintf(err, errlen, "invalid walreceiver options");
        return -1;
    }
    walreceiver *wr = calloc(1, sizeof *wr);
    if (wr == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_init(&wr->mu, NULL);
    wr->o = *o;
    bool ok = true;
    for (int i = 0; i < o->n_safekeepers; i++) {
        wr->sk[i] = o->safekeepers[i] ? strdup(o->safekeepers[i]) : NULL;
        ok = ok && wr->sk[i] != NULL;
        wr->o.safekeepers[i] = wr->sk[i];
    }
    wr->user = strdup(o->user ? o->user : "strata");
    wr->password = o->password ? strdup(o->password) : NULL;
    wr->buf = malloc(o->reassembly_buf);
    wr->buf_cap = o->reassembly_buf;
    if (!ok || wr->user == NULL || (o->password && !wr->password) || wr->buf == NULL) {
        free_wr(wr);
        snprintf(err, errlen, "out of memory or a missing safekeeper address");
        return -1;
    }
    wr->o.user = wr->user;
    wr->o.password = wr->password;
    wr->st = st;
    wr->ing = ing;
    wr->last_failed = -1;
    wr->switch_to = -1;
    wr->status.running = true;
    wr->status.safekeeper = -1;
    wr->status.last_received_lsn = store_last_record_lsn(st);
    atomic_init(&wr->stop, false);
    int rc = pthread_create(&wr->thread, NULL, run, wr);
    if (rc != 0) {
        free_wr(wr);
        snprintf(err, errlen, "pthread_create: %s", strerror(rc));
        return -1;
    }
    *out = wr;
    return 0;
}

void walreceiver_stop(walreceiver *wr)
{
    if (wr == NULL)
        return;
    atomic_store(&wr->stop, true);
    pthread_join(wr->thread, NULL);
    free_wr(wr);
}

void walreceiver_status(walreceiver *wr, walreceiver_status_info *out)
{
    pthread_mutex_lock(&wr->mu);
    *out = wr->status;
    pthread_mutex_unlock(&wr->mu);
    out->lag_bytes =
        out->upstream_lsn > out->last_received_lsn ? out->upstream_lsn - out->last_received_lsn : 0;
}
