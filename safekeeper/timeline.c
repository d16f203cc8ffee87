/*
 * timeline.c: the executor of a safekeeper timeline -- the edge that runs
 * the acceptor core's effects in order and chooses its next input.  See
 * timeline.h for the contract.
 *
 * Execution state machine per timeline: idle, or executing one output (from
 * a proposer message or from a completed flush).  An output stops at a WAL
 * write until io_uring reports it written, and at a truncation until the
 * store has no sync round running; everything else is synchronous.  Between
 * outputs the next input is chosen: a completed flush first (it releases
 * AppendResponses), then the oldest queued message.
 *
 * For: the effects (WAL write, truncation, vote flush, control file, send),
 * group commit, the WAL store's callbacks, the local WAL limit
 * (--max-wal-bytes) and what walsender.c asks of a timeline.
 * Not for: the registry of timelines, loading and creating them, proposer
 * connections and membership (node.c); lazy saves and WAL removal
 * (housekeeping.c); catch-up from the WAL backup (catchup.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/sqlstate.h"
#include "base/strata_assert.h"
#include "proto/walpush.h"
#include "proto/sk_control.h"
#include "safekeeper/timeline_priv.h"

static void run_effects(sk_timeline *tl);

/* ---- helpers ---------------------------------------------------------- */

const char *sk_timeline_name(const sk_timeline *tl, char *buf, size_t cap)
{
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    snprintf(buf, cap, "%s/%s", strata_id_format(&tl->tenant_id, t),
             strata_id_format(&tl->timeline_id, l));
    return buf;
}

void sk_timeline_fail(sk_timeline *tl, const char *what, int err)
{
    char name[80];
    if (!tl->failed)
        log_error("timeline %s failed: %s: %s", sk_timeline_name(tl, name, sizeof name), what,
                  err != 0 ? strerror(-err) : "");
    tl->failed = true;
    metrics_counter_inc(tl->node->metrics.errors);
    sk_node_publish_timeline(tl);
}

static void wake_senders(sk_timeline *tl)
{
    /* A wakeup may remove a sender (error): iterate over a copy. */
    sk_waiter copy[SK_MAX_SENDERS];
    int n = tl->n_senders;
    memcpy(copy, tl->senders, sizeof(copy[0]) * (size_t)n);
    for (int i = 0; i < n; i++)
        copy[i].wake(copy[i].arg);
}

/* ---- the local WAL limit (--max-wal-bytes) ----------------------------- */

/* The start of the oldest segment on disk, cached: the store finds it by
 * listing the directory, too dear for every append and every status.  Only
 * WAL removal (housekeeping, which refreshes it) moves it up; until a
 * segment exists it is looked up again. */
lsn_t sk_timeline_oldest_segment(sk_timeline *tl)
{
    if (tl->oldest_cached == LSN_INVALID && tl->ws != NULL)
        tl->oldest_cached = wal_store_oldest_lsn(tl->ws);
    return tl->oldest_cached;
}

/* Bytes of segment files on disk: every segment from the oldest to the one
 * being written, each zero-filled to its full size. */
uint64_t sk_timeline_wal_bytes(sk_timeline *tl)
{
    if (tl->ws == NULL)
        return 0;
    lsn_t oldest = sk_timeline_oldest_segment(tl);
    lsn_t end = wal_store_write_lsn(tl->ws);
    uint32_t seg = acceptor_state(&tl->acc)->wal_seg_size;
    if (oldest == LSN_INVALID || end == LSN_INVALID || end < oldest || seg == 0)
        return 0;
    return (end - oldest) / seg * seg + seg;
}

/* The limit in force for tl: max_wal_bytes, but never below two segments
 * (the segment holding the removal horizon stays, and the next one must
 * fit, or no removal could ever make room). */
static uint64_t wal_limit(const sk_timeline *tl)
{
    uint64_t max = tl->node->max_wal_bytes;
    uint64_t floor = 2 * (uint64_t)acceptor_state(&tl->acc)->wal_seg_size;
    return max == 0 ? 0 : (max < floor ? floor : max);
}

/*
 * Whether an AppendRequest must be refused because its WAL would take the
 * timeline's segment files past the limit.  This is a refusal, not a
 * failure: nothing was written, the core never saw the message, and once
 * housekeeping removes WAL below the horizon the proposer's next attempt is
 * taken.  Heartbeats (no WAL) always pass: they carry the commit position
 * that lets the horizon move.  On refusal writes the error detail.
 */
static bool append_over_limit(sk_timeline *tl, const proposer_msg *m, char *detail, size_t cap)
{
    uint64_t limit = wal_limit(tl);
    if (limit == 0 || m->kind != PMSG_APPEND || m->u.append.wal_len == 0 || tl->ws == NULL)
        return false;
    lsn_t oldest = sk_timeline_oldest_segment(tl);
    if (oldest == LSN_INVALID)
        return false;
    uint32_t seg = acceptor_state(&tl->acc)->wal_seg_size;
    lsn_t end = m->u.append.end_lsn;
    if (end <= oldest)
        return false;
    uint64_t needed = (end - oldest + seg - 1) / seg * seg; /* whole segments */
    if (needed <= limit)
        return false;
    char e[LSN_FMT_LEN];
    snprintf(detail, cap,
             "appending up to %s needs %llu bytes of WAL segments on this safekeeper, "
             "over its --max-wal-bytes limit of %llu; appends are taken again once WAL is "
             "removed below the pageserver's consistent LSN",
             lsn_format(end, e), (unsigned long long)needed, (unsigned long long)limit);
    return true;
}

/* ---- WAL store callbacks ---------------------------------------------- */

static bool store_wait_over(const sk_timeline *tl)
{
    switch (tl->wait) {
    case WAIT_NONE:
    case WAIT_SEGMENT: /* only on_ws_segment_ready ends it */
        return false;
    case WAIT_WRITTEN:
        return wal_store_written_lsn(tl->ws) >= wal_store_write_lsn(tl->ws);
    case WAIT_IDLE:
        return wal_store_idle(tl->ws);
    }
    return false;
}

/* The store moved: resumes the output if it waited for that. */
static void resume_if_ready(sk_timeline *tl)
{
    if (tl->executing && store_wait_over(tl)) {
        tl->wait = WAIT_NONE;
        run_effects(tl);
    }
}

static void on_ws_written(void *arg, lsn_t written)
{
    (void)written;
    resume_if_ready(arg);
}

static void on_ws_flushed(void *arg, lsn_t flushed, uint64_t usec)
{
    sk_timeline *tl = arg;
    (void)flushed;
    metrics_counter_inc(tl->node->metrics.fsyncs);
    metrics_histogram_observe(tl->node->metrics.fsync_seconds, (double)usec / 1e6);
    if (tl->sync_in_flight) {
        tl->sync_in_flight = false;
        tl->flush_done_pending = true;
    }
    if (tl->executing) {
        /* A truncation may be waiting for the round to finish. */
        resume_if_ready(tl);
        return;
    }
    sk_timeline_kick(tl);
}

static void on_ws_error(void *arg, int err)
{
    sk_timeline *tl = arg;
    sk_timeline_fail(tl, "WAL write or fdatasync failed", err);
}

/* The segment an append waited for is in place (or failed: the store
 * reported it through on_ws_error, and run_effects stops there). */
static void on_ws_segment_ready(void *arg, int err)
{
    sk_timeline *tl = arg;
    (void)err;
    if (tl->executing && tl->wait == WAIT_SEGMENT) {
        tl->wait = WAIT_NONE;
        run_effects(tl);
    }
}

int sk_timeline_open_store(sk_timeline *tl, uint32_t seg_size)
{
    wal_store_config cfg = {.dir = tl->dir,
                            .seg_size = seg_size,
                            .ring = tl->node->ring,
                            .on_flushed = on_ws_flushed,
                            .on_error = on_ws_error,
                            .on_written = on_ws_written,
                            .loop = tl->node->loop,
                            .on_segment_ready = on_ws_segment_ready,
                            .arg = tl,
                            .caller_syncs = true,
                            .link_writes = true};
    return wal_store_open(&cfg, &tl->ws);
}

/* Opens the store once the first greeting told us the segment size. */
static int ensure_store(sk_timeline *tl)
{
    if (tl->ws != NULL)
        return 0;
    uint32_t seg = acceptor_state(&tl->acc)->wal_seg_size;
    if (seg == 0)
        return -EINVAL;
    return sk_timeline_open_store(tl, seg);
}

/* ---- executing effects ------------------------------------------------ */

static void maybe_start_sync(sk_timeline *tl)
{
    STRATA_ASSERT(!tl->executing);
    if (tl->failed || tl->sync_in_flight || tl->flush_done_pending || tl->ws == NULL ||
        !acceptor_flush_wanted(&tl->acc))
        return;
    lsn_t covers = acceptor_flush_begin(&tl->acc);
    lsn_t store_covers;
    int rc = wal_store_sync_begin(tl->ws, &store_covers);
    if (rc < 0) {
        sk_timeline_fail(tl, "could not start fdatasync", rc);
        return;
    }
    /* Every WRITE_WAL completed before the output ended, so the store has
     * written exactly what the core thinks it has. */
    STRATA_ASSERT_MSG(store_covers == covers, "store covers %X/%X, acceptor %X/%X",
                      (uint32_t)(store_covers >> 32), (uint32_t)store_covers,
                      (uint32_t)(covers >> 32), (uint32_t)covers);
    if (rc == 1)
        tl->flush_done_pending = true; /* already durable (a vote flushed it) */
    else
        tl->sync_in_flight = true;
}

static void finish_output(sk_timeline *tl)
{
    tl->executing = false;
    sk_pusher *p = tl->exec;
    tl->exec = NULL;
    if (p != NULL) {
        if (tl->out.append_accepted && tl->streaming != p) {
            sk_pusher *old = tl->streaming;
            if (old != NULL && old->conn != NULL)
                sk_fatal_to(old->conn, SQLSTATE_ADMIN_SHUTDOWN,
                            "another proposer connection took over this timeline", NULL);
            tl->streaming = p;
        }
        sk_pusher_free_message(p);
        if (p->conn == NULL) {
            if (tl->streaming == p)
                tl->streaming = NULL;
            free(p);
        } else {
            pgwire_conn_pause_input(p->conn, false);
        }
    }
}

static void send_output_msg(sk_timeline *tl)
{
    pgwire_conn *c = NULL;
    if (tl->out_from_flush)
        c = tl->streaming != NULL ? tl->streaming->conn : NULL;
    else
        c = tl->exec != NULL ? tl->exec->conn : NULL;
    if (c == NULL)
        return; /* that connection is gone: drop, as acceptor.h says */
    /* The largest acceptor message: a VoteResponse with a full history. */
    uint8_t buf[64 + 16 * TERM_HISTORY_MAX];
    size_t n = walpush_encode_acceptor_msg(&tl->out.msg, buf, sizeof buf);
    STRATA_ASSERT(n > 0);
    pgwire_send_copy_data(c, buf, n);
}

/*
 * The effects below return true when the effect must wait for the store
 * (run_effects returns; a store callback resumes the same effect), false
 * when it is done or failed (sk_timeline_fail set tl->failed).
 */

static bool effect_write_wal(sk_timeline *tl, const acceptor_effect *e)
{
    int rc = ensure_store(tl);
    /* The first WAL of a timeline: the core set its position at
     * ProposerElected without a truncation; give the store it. */
    if (rc == 0 && wal_store_write_lsn(tl->ws) == LSN_INVALID) {
        if (wal_store_idle(tl->ws))
            rc = wal_store_truncate(tl->ws, e->lsn);
        else
            rc = -EINVAL;
    }
    /* A new segment is zero-filled on the thread pool, not here:
     * a 1 GB one would stall every timeline of this safekeeper. */
    if (rc == 0) {
        rc = wal_store_prepare(tl->ws, e->lsn, e->len);
        if (rc == 1) {
            tl->wait = WAIT_SEGMENT;
            return true; /* on_ws_segment_ready resumes this effect */
        }
    }
    if (rc == 0)
        rc = wal_store_append(tl->ws, e->lsn, e->data, e->len);
    if (rc != 0) {
        sk_timeline_fail(tl, "could not write WAL", rc);
        return false;
    }
    metrics_counter_inc(tl->node->metrics.appends);
    metrics_counter_add(tl->node->metrics.bytes_written, e->len);
    /* Accepted: the store writes it with the next sync round (in
     * order, ahead of that round's fdatasync).  Nothing reads it
     * before then: senders stop at the flush position, and a vote's
     * flush or a truncation waits for the store below. */
    return false;
}

static bool effect_truncate_wal(sk_timeline *tl, const acceptor_effect *e)
{
    int rc = ensure_store(tl);
    if (rc != 0) {
        sk_timeline_fail(tl, "could not open WAL", rc);
        return false;
    }
    if (!wal_store_idle(tl->ws)) {
        rc = wal_store_submit_writes(tl->ws);
        if (rc != 0) {
            sk_timeline_fail(tl, "could not write WAL", rc);
            return false;
        }
        tl->wait = WAIT_IDLE;
        if (!store_wait_over(tl))
            return true; /* on_ws_flushed / on_ws_written resume */
        tl->wait = WAIT_NONE;
    }
    rc = wal_store_truncate(tl->ws, e->lsn);
    if (rc != 0) {
        sk_timeline_fail(tl, "could not truncate WAL", rc);
        return false;
    }
    wake_senders(tl); /* term-mode senders past the cut must stop */
    return false;
}

static bool effect_flush_wal(sk_timeline *tl)
{
    int rc;
    if (tl->ws != NULL && wal_store_written_lsn(tl->ws) < wal_store_write_lsn(tl->ws)) {
        rc = wal_store_submit_writes(tl->ws);
        if (rc != 0) {
            sk_timeline_fail(tl, "could not write WAL", rc);
            return false;
        }
        tl->wait = WAIT_WRITTEN;
        if (!store_wait_over(tl))
            return true; /* on_ws_written resumes */
        tl->wait = WAIT_NONE;
    }
    if (tl->ws != NULL) {
        uint64_t t0 = uv_hrtime();
        rc = wal_store_flush_now(tl->ws);
        metrics_counter_inc(tl->node->metrics.fsyncs);
        metrics_histogram_observe(tl->node->metrics.fsync_seconds,
                                  (double)(uv_hrtime() - t0) / 1e9);
        if (rc != 0)
            sk_timeline_fail(tl, "could not fdatasync WAL", rc);
    }
    return false;
}

static void effect_persist_control(sk_timeline *tl)
{
    int rc = sk_control_write(tl->dir, &tl->out.control);
    if (rc != 0) {
        sk_timeline_fail(tl, "could not write the control file", rc);
        return;
    }
    tl->persisted = tl->out.control;
}

/* Every effect of the output ran (or the timeline failed): ends it and
 * goes on with the next input. */
static void end_output(sk_timeline *tl)
{
    if (tl->failed) {
        /* Durability can no longer be promised: stop talking to proposers. */
        if (tl->exec != NULL)
            sk_fatal_to(tl->exec->conn, SQLSTATE_IO_ERROR, "safekeeper WAL storage failed", NULL);
        tl->out.append_accepted = false;
    }
    /* A ProposerElected this acceptor took: the proposer streams from its
     * end, which the compute may no longer hold; fetch what the WAL backup
     * has first. */
    sk_pusher *p = tl->exec;
    bool elected = !tl->failed && p != NULL && !tl->out_from_flush &&
                   tl->msg.kind == PMSG_ELECTED &&
                   tl->msg.u.elected.term == acceptor_term(&tl->acc);
    bool live = p != NULL && p->conn != NULL;
    finish_output(tl);
    if (elected)
        sk_catchup_start(tl, live ? p : NULL);
    sk_timeline_kick(tl);
}

/* Runs the output's effects from tl->effect_idx on, each complete before
 * the next; returns early while one waits for the store. */
static void run_effects(sk_timeline *tl)
{
    STRATA_ASSERT(tl->executing);
    while (tl->effect_idx < tl->out.n) {
        if (tl->failed)
            break;
        const acceptor_effect *e = &tl->out.effects[tl->effect_idx];
        bool wait = false;
        switch (e->kind) {
        case ACC_WRITE_WAL:
            wait = effect_write_wal(tl, e);
            break;
        case ACC_TRUNCATE_WAL:
            wait = effect_truncate_wal(tl, e);
            break;
        case ACC_FLUSH_WAL:
            wait = effect_flush_wal(tl);
            break;
        case ACC_PERSIST_CONTROL:
            effect_persist_control(tl);
            break;
        case ACC_SEND:
            send_output_msg(tl);
            break;
        }
        if (wait)
            return;
        tl->effect_idx++;
    }
    end_output(tl);
}

void sk_timeline_start_output(sk_timeline *tl, sk_pusher *p, bool from_flush)
{
    tl->executing = true;
    tl->exec = p;
    tl->out_from_flush = from_flush;
    tl->effect_idx = 0;
    tl->wait = WAIT_NONE;
    run_effects(tl);
}

sk_pusher *sk_timeline_dequeue(sk_timeline *tl)
{
    sk_pusher *p = tl->queue_head;
    if (p != NULL) {
        tl->queue_head = p->next_queued;
        if (tl->queue_head == NULL)
            tl->queue_tail = NULL;
        p->next_queued = NULL;
        p->queued = false;
    }
    return p;
}

static void sync_due(sk_timeline *tl)
{
    sk_node *node = tl->node;
    if (tl->sync_due)
        return;
    STRATA_ASSERT(node->n_due < SK_MAX_TIMELINES);
    tl->sync_due = true;
    node->due[node->n_due++] = tl;
}

/* uv_prepare: runs once per loop iteration, right before the loop polls.
 * Starts the sync rounds that timelines asked for since the last one. */
void sk_timeline_on_before_poll(uv_prepare_t *h)
{
    sk_node *node = h->data;
    while (node->n_due > 0) {
        sk_timeline *tl = node->due[--node->n_due];
        tl->sync_due = false;
        if (tl->executing)
            continue; /* its output's end kicks it again */
        maybe_start_sync(tl);
        if (tl->flush_done_pending)
            sk_timeline_kick(tl);
    }
}

/* Chooses and runs the next input while the timeline is free. */
void sk_timeline_kick(sk_timeline *tl)
{
    lsn_t commit_before = acceptor_commit_lsn(&tl->acc);
    lsn_t flush_before = acceptor_flush_lsn(&tl->acc);
    while (!tl->executing) {
        if (tl->failed) {
            sk_pusher *p;
            while ((p = sk_timeline_dequeue(tl)) != NULL) {
                sk_fatal_to(p->conn, SQLSTATE_IO_ERROR, "safekeeper WAL storage failed", NULL);
                sk_pusher_free_message(p);
            }
            break;
        }
        if (tl->flush_done_pending) {
            tl->flush_done_pending = false;
            acceptor_flush_done(&tl->acc, &tl->out);
            sk_timeline_start_output(tl, NULL, true);
            continue;
        }
        if (tl->recovering) {
            if (sk_catchup_feed(tl))
                continue;
            if (!tl->sync_in_flight && !tl->flush_done_pending && tl->ws != NULL &&
                acceptor_flush_wanted(&tl->acc))
                sync_due(tl);
            break;
        }
        sk_pusher *p = sk_timeline_dequeue(tl);
        if (p == NULL) {
            /* Group commit: the round starts before the loop next polls
             * (sk_timeline_on_before_poll), after every message already read has been
             * handled, so they share it.  No timer, no added wait. */
            if (!tl->sync_in_flight && !tl->flush_done_pending && tl->ws != NULL &&
                acceptor_flush_wanted(&tl->acc))
                sync_due(tl);
            break;
        }
        const char *why = NULL;
        if (walpush_decode_proposer_msg(p->msg, p->msg_len, &tl->msg, &why) != 0) {
            metrics_counter_inc(tl->node->metrics.errors);
            sk_fatal_to(p->conn, SQLSTATE_PROTOCOL_VIOLATION, "invalid WAL-push message", why);
            sk_pusher_free_message(p);
            continue;
        }
        char detail[320];
        if (append_over_limit(tl, &tl->msg, detail, sizeof detail)) {
            metrics_counter_inc(tl->node->metrics.appends_refused);
            if (!tl->wal_limited) {
                char name[80];
                log_warn("timeline %s: refusing appends: %s",
                         sk_timeline_name(tl, name, sizeof name), detail);
            }
            tl->wal_limited = true;
            /* The feedback it relays and its commit position are still
             * taken (from the current term's proposer): after a reconnect
             * the proposer's first message is this WAL, not a heartbeat,
             * and without the pageserver's position this safekeeper could
             * never remove WAL and make room -- while the one the
             * pageserver streams from would, alone, short of a quorum.  The
             * commit position matters after a catch-up from the WAL backup,
             * which writes past the bound and leaves commit_lsn (and with
             * it the restart scan start) behind. */
            acceptor_note_refused_append(&tl->acc, &tl->msg.u.append);
            /* FATAL: the stream cannot skip a message, so the proposer
             * reconnects and resends from this safekeeper's flush_lsn. */
            sk_fatal_to(p->conn, SQLSTATE_DISK_FULL,
                        "safekeeper WAL limit reached for this timeline", detail);
            sk_pusher_free_message(p);
            continue;
        }
        if (tl->wal_limited && tl->msg.kind == PMSG_APPEND && tl->msg.u.append.wal_len > 0) {
            char name[80];
            log_info("timeline %s: WAL is below --max-wal-bytes again, taking appends",
                     sk_timeline_name(tl, name, sizeof name));
            tl->wal_limited = false;
        }
        if (acceptor_handle_message(&tl->acc, &tl->msg, p->authority, &tl->out) != 0) {
            metrics_counter_inc(tl->node->metrics.errors);
            sk_fatal_to(p->conn, SQLSTATE_PROTOCOL_VIOLATION, "WAL-push protocol violation",
                        tl->out.error);
            sk_pusher_free_message(p);
            continue;
        }
        sk_timeline_start_output(tl, p, false);
    }
    if (acceptor_commit_lsn(&tl->acc) != commit_before ||
        acceptor_flush_lsn(&tl->acc) != flush_before)
        wake_senders(tl);
    sk_node_publish_timeline(tl);
}

/* ---- sender side ------------------------------------------------------ */

sk_node *sk_timeline_node(const sk_timeline *tl)
{
    return tl->node;
}

void sk_timeline_ids(const sk_timeline *tl, strata_id *tenant, strata_id *timeline)
{
    *tenant = tl->tenant_id;
    *timeline = tl->timeline_id;
}

const acceptor *sk_timeline_acceptor(const sk_timeline *tl)
{
    return &tl->acc;
}

wal_store *sk_timeline_store(sk_timeline *tl)
{
    return tl->ws;
}

uint32_t sk_timeline_seg_size(const sk_timeline *tl)
{
    return acceptor_state(&tl->acc)->wal_seg_size;
}

int sk_timeline_add_sender(sk_timeline *tl, sk_wake_fn wake, void *arg)
{
    if (tl->n_senders >= SK_MAX_SENDERS)
        return -1;
    tl->senders[tl->n_senders++] = (sk_waiter){.wake = wake, .arg = arg};
    return 0;
}

void sk_timeline_remove_sender(sk_timeline *tl, void *arg)
{
    for (int i = 0; i < tl->n_senders; i++) {
        if (tl->senders[i].arg == arg) {
            tl->senders[i] = tl->senders[--tl->n_senders];
            return;
        }
    }
}

void sk_timeline_set_ps_feedback(sk_timeline *tl, const pageserver_feedback *fb)
{
    acceptor_set_pageserver_feedback(&tl->acc, fb);
    sk_node_publish_timeline(tl);
}

void sk_timeline_conn_count(sk_timeline *tl, int delta)
{
    tl->connections += delta;
    sk_node_publish_timeline(tl);
}
