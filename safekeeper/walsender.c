/*
 * walsender.c: physical replication out of a safekeeper.  See walsender.h.
 *
 * A sender reads WAL with pread through the timeline's store and queues
 * XLogData messages on its connection until the connection is congested or
 * it has reached the end it may serve; the timeline wakes it when commit or
 * flush positions move, the connection when its queue drains.
 *
 * For: a sender's state, its production and the feedback it takes.
 * Not for: command parsing (conn.c) or the message layouts
 * (proto/replication.c).
 */
#include "safekeeper/walsender.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/sqlstate.h"
#include "proto/replication.h"

struct sk_sender {
    sk_timeline *tl;
    pgwire_conn *c;
    lsn_t pos;
    bool with_term;
    uint64_t term;
    bool done;                /* copy mode ended or an error was sent */
    bool ps_feedback_trusted; /* the pageserver's connection (walsender.h) */
    bool ps_feedback_warned;  /* logged the first ignored 'z' */
    uv_timer_t keepalive;
    /* A standby's replay progress (its status updates), for the lag
     * series; NULL until the first update, and for the pageserver's
     * connection (its progress is ps_feedback). */
    lsn_t apply_lsn;
    metrics_gauge *g_lag;
    metrics_gauge *g_apply;
    uint8_t buf[WALSENDER_MAX_CHUNK];
};

/*
 * The lag series of a standby (a read-only compute, a stock standby): the
 * committed end of WAL minus the LSN the standby says it replayed
 * (apply_lsn of its status updates), in bytes, and that LSN itself, labelled
 * with the timeline and the standby's application_name.  Updated on each
 * status update and whenever this sender sends WAL.  Series outlive the
 * connection (metrics.h has no expiry): on close the apply series stays and
 * the lag goes to -1, "not connected".
 */
static void lag_register(sk_sender *s)
{
    if (s->ps_feedback_trusted || s->g_lag != NULL)
        return;
    strata_id tenant, timeline;
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    const char *app = pgwire_conn_param(s->c, "application_name");
    sk_timeline_ids(s->tl, &tenant, &timeline);
    const char *names[] = {"tenant_id", "timeline_id", "application_name"};
    const char *values[] = {strata_id_format(&tenant, t), strata_id_format(&timeline, l),
                            app != NULL && app[0] != '\0' ? app : "unnamed"};
    metrics_registry *r = metrics_default_registry();
    s->g_lag = metrics_gauge_register(
        r, "safekeeper_standby_replay_lag_bytes",
        "Committed WAL a standby streaming from this safekeeper has not replayed yet (bytes; "
        "-1 once it disconnected)",
        3, names, values);
    s->g_apply = metrics_gauge_register(r, "safekeeper_standby_apply_lsn",
                                        "Replay LSN a standby last reported", 3, names, values);
}

static void lag_update(sk_sender *s)
{
    if (s->g_lag == NULL)
        return;
    lsn_t commit = acceptor_commit_lsn(sk_timeline_acceptor(s->tl));
    metrics_gauge_set(s->g_lag, commit > s->apply_lsn ? (double)(commit - s->apply_lsn) : 0);
    metrics_gauge_set(s->g_apply, (double)s->apply_lsn);
}

static lsn_t serve_end(const sk_sender *s)
{
    const acceptor *acc = sk_timeline_acceptor(s->tl);
    return s->with_term ? acceptor_flush_lsn(acc) : acceptor_commit_lsn(acc);
}

static void removed_error(sk_sender *s, lsn_t lsn, const char *severity)
{
    char name[32], msg[128];
    uint32_t seg = sk_timeline_seg_size(s->tl);
    wal_store_segment_name(seg, lsn / seg, name);
    snprintf(msg, sizeof msg, "requested WAL segment %s has already been removed", name);
    pgwire_send_error(s->c, severity, SQLSTATE_UNDEFINED_FILE, msg, NULL);
}

static void stop(sk_sender *s, const char *sqlstate, const char *msg, const char *detail)
{
    if (s->done)
        return;
    s->done = true;
    uv_timer_stop(&s->keepalive);
    pgwire_send_error(s->c, "FATAL", sqlstate, msg, detail);
}

static void send_keepalive(sk_sender *s, bool reply_requested)
{
    replication_msg k = {.kind = REPLICATION_KEEPALIVE,
                         .u.keepalive = {.wal_end = serve_end(s),
                                         .send_time = replication_now(),
                                         .reply_requested = reply_requested}};
    uint8_t m[REPLICATION_KEEPALIVE_LEN];
    size_t n = replication_encode(&k, m, sizeof m);
    assert(n == sizeof m);
    pgwire_send_copy_data(s->c, m, n);
}

static void on_keepalive(uv_timer_t *t)
{
    sk_sender *s = t->data;
    if (!s->done && !pgwire_conn_is_congested(s->c))
        send_keepalive(s, false);
}

static void pump(sk_sender *s)
{
    if (s->done)
        return;
    if (s->with_term && acceptor_term(sk_timeline_acceptor(s->tl)) != s->term) {
        char detail[96];
        snprintf(detail, sizeof detail, "streaming was started for term %llu, now %llu",
                 (unsigned long long)s->term,
                 (unsigned long long)acceptor_term(sk_timeline_acceptor(s->tl)));
        stop(s, SQLSTATE_T_R_SERIALIZATION_FAILURE, "the safekeeper's term changed", detail);
        return;
    }
    wal_store *ws = sk_timeline_store(s->tl);
    lsn_t end = serve_end(s);
    while (ws != NULL && s->pos < end && !pgwire_conn_is_congested(s->c)) {
        size_t want =
            end - s->pos < WALSENDER_MAX_CHUNK ? (size_t)(end - s->pos) : WALSENDER_MAX_CHUNK;
        ssize_t n = wal_store_read(ws, s->pos, s->buf, want);
        if (n == -ENOENT) {
            s->done = true;
            uv_timer_stop(&s->keepalive);
            removed_error(s, s->pos, "FATAL");
            return;
        }
        if (n <= 0) {
            stop(s, SQLSTATE_IO_ERROR, "could not read WAL",
                 n < 0 ? strerror((int)-n) : "short read");
            return;
        }
        replication_xlogdata x = {.wal_start = s->pos,
                                  .wal_end = end,
                                  .send_time = replication_now(),
                                  .data_len = (size_t)n};
        uint8_t h[REPLICATION_XLOGDATA_HEADER_LEN];
        size_t hl = replication_encode_xlogdata_header(&x, h, sizeof h);
        assert(hl == sizeof h); /* pos + n <= end: cannot pass the LSN space */
        if (pgwire_send_copy_data2(s->c, h, hl, s->buf, (size_t)n) != 0)
            return; /* closing */
        s->pos += (lsn_t)n;
    }
    lag_update(s);
}

/* The timeline's wakeup (sk_timeline_add_sender). */
static void wake_sender(void *arg)
{
    walsender_wake(arg);
}

int walsender_start(sk_timeline *tl, pgwire_conn *c, lsn_t start, bool with_term, uint64_t term,
                    bool ps_feedback_trusted, sk_sender **out)
{
    *out = NULL;
    const acceptor *acc = sk_timeline_acceptor(tl);
    if (with_term && acceptor_term(acc) != term) {
        char msg[128];
        snprintf(msg, sizeof msg, "term %llu does not match the safekeeper's current term %llu",
                 (unsigned long long)term, (unsigned long long)acceptor_term(acc));
        pgwire_send_error(c, "ERROR", SQLSTATE_T_R_SERIALIZATION_FAILURE, msg, NULL);
        return -1;
    }
    wal_store *ws = sk_timeline_store(tl);
    lsn_t oldest = ws != NULL ? wal_store_oldest_lsn(ws) : LSN_INVALID;
    if (ws == NULL || oldest == LSN_INVALID) {
        pgwire_send_error(c, "ERROR", SQLSTATE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                          "the timeline holds no WAL yet", NULL);
        return -1;
    }
    sk_sender *s = calloc(1, sizeof *s);
    if (s == NULL) {
        pgwire_send_error(c, "ERROR", SQLSTATE_OUT_OF_MEMORY, "out of memory", NULL);
        return -1;
    }
    s->tl = tl;
    s->c = c;
    s->pos = start;
    s->with_term = with_term;
    s->term = term;
    s->ps_feedback_trusted = ps_feedback_trusted;
    if (start < oldest) {
        removed_error(s, start, "ERROR");
        free(s);
        return -1;
    }
    lsn_t end = serve_end(s);
    if (start > end) {
        char msg[160], a[LSN_FMT_LEN], b[LSN_FMT_LEN];
        snprintf(msg, sizeof msg,
                 "requested starting point %s is ahead of the WAL flush position of this server %s",
                 lsn_format(start, a), lsn_format(end, b));
        pgwire_send_error(c, "ERROR", SQLSTATE_OBJECT_NOT_IN_PREREQUISITE_STATE, msg, NULL);
        free(s);
        return -1;
    }
    if (sk_timeline_add_sender(tl, wake_sender, s) != 0) {
        pgwire_send_error(c, "ERROR", SQLSTATE_TOO_MANY_CONNECTIONS,
                          "too many WAL senders on this timeline", NULL);
        free(s);
        return -1;
    }
    uv_timer_init(sk_timeline_node(tl)->loop, &s->keepalive);
    s->keepalive.data = s;
    pgwire_start_copy_both(c);
    uv_timer_start(&s->keepalive, on_keepalive, WALSENDER_KEEPALIVE_MS, WALSENDER_KEEPALIVE_MS);
    sk_timeline_conn_count(tl, 1);
    *out = s;
    pump(s);
    return 0;
}

void walsender_on_copy_data(sk_sender *s, const uint8_t *data, size_t n)
{
    if (s->done)
        return;
    replication_msg m;
    const char *why;
    if (replication_decode_client_msg(data, n, &m, &why) != 0) {
        char msg[128], detail[64];
        snprintf(msg, sizeof msg, "invalid message in replication stream: %s", why);
        if (n == 0)
            snprintf(detail, sizeof detail, "empty CopyData message");
        else
            snprintf(detail, sizeof detail, "message type 0x%02x, length %zu", data[0], n);
        stop(s, SQLSTATE_PROTOCOL_VIOLATION, msg, detail);
        return;
    }
    switch (m.kind) {
    case REPLICATION_STATUS_UPDATE:
        if (m.u.status.apply_lsn != LSN_INVALID) {
            lag_register(s);
            s->apply_lsn = m.u.status.apply_lsn;
            lag_update(s);
        }
        if (m.u.status.reply_requested)
            send_keepalive(s, false);
        return;
    case REPLICATION_HS_FEEDBACK:
        return; /* no xmin horizon to hold on a safekeeper */
    case REPLICATION_PS_FEEDBACK:
        if (!s->ps_feedback_trusted) {
            /* It would move the WAL removal horizon: a pg_receivewal or a
             * script must not make us delete WAL the pageserver needs. */
            metrics_counter_inc(sk_timeline_node(s->tl)->metrics.ps_feedback_ignored);
            if (!s->ps_feedback_warned)
                log_warn("ignoring pageserver feedback from %s: the connection is not the "
                         "pageserver's (needs the admin token, or application_name=%s without "
                         "token auth)",
                         pgwire_conn_peer(s->c), SK_PAGESERVER_APPLICATION_NAME);
            s->ps_feedback_warned = true;
            return;
        }
        sk_timeline_set_ps_feedback(s->tl, &m.u.ps_feedback);
        return;
    default:
        assert(!"client decoder returned a server message");
        return;
    }
}

void walsender_on_copy_done(sk_sender *s)
{
    if (s->done)
        return;
    s->done = true;
    uv_timer_stop(&s->keepalive);
    pgwire_send_copy_done(s->c);
    pgwire_send_command_complete(s->c, "START_STREAMING");
    pgwire_send_ready(s->c);
}

void walsender_on_writable(sk_sender *s)
{
    pump(s);
}

void walsender_wake(sk_sender *s)
{
    pump(s);
}

static void on_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

void walsender_closed(sk_sender *s)
{
    if (s->g_lag != NULL)
        metrics_gauge_set(s->g_lag, -1);
    sk_timeline_remove_sender(s->tl, s);
    sk_timeline_conn_count(s->tl, -1);
    s->done = true;
    uv_timer_stop(&s->keepalive);
    uv_close((uv_handle_t *)&s->keepalive, on_timer_closed);
}
