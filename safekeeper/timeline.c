/*
 * timeline.c: timelines of one safekeeper and the edge that executes the
 * acceptor core's effects.  See timeline.h for the contract.
 *
 * Execution state machine per timeline: idle, or executing one output (from
 * a proposer message or from a completed flush).  An output stops at a WAL
 * write until io_uring reports it written, and at a truncation until the
 * store has no sync round running; everything else is synchronous.  Between
 * outputs the next input is chosen: a completed flush first (it releases
 * AppendResponses), then the oldest queued message.
 */
#include "safekeeper/timeline.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/durable.h"
#include "base/log.h"
#include "base/sqlstate.h"
#include "base/strata_assert.h"
#include "pg/walformat.h"
#include "proto/walpush.h"
#include "safekeeper/control_file.h"
#include "safekeeper/wal_horizon.h"
#include "safekeeper/walsender.h"

#define SK_MAX_SENDERS 64

static const double fsync_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                      0.01,   0.025,   0.05,   0.1,   0.5,    1.0};

/* An effect that cannot run until the WAL store gets somewhere. */
typedef enum store_wait {
    WAIT_NONE = 0,
    WAIT_WRITTEN, /* every appended write completed (a vote's flush) */
    WAIT_IDLE,    /* no write or sync round left (a truncation) */
    WAIT_SEGMENT, /* a new segment is being zero-filled off the loop (an append) */
} store_wait;

struct sk_timeline {
    sk_node *node;
    int index; /* in node->timelines and node->snap */
    strata_id tenant_id;
    strata_id timeline_id;
    char dir[PATH_MAX];

    acceptor acc;
    acceptor_output out;
    proposer_msg msg; /* the message being executed (points into exec->msg) */
    wal_store *ws;
    bool failed;

    /* Execution of out. */
    bool executing;
    bool out_from_flush;
    sk_pusher *exec;
    int effect_idx;
    store_wait wait; /* what the current effect waits for from the store */
    bool sync_in_flight;
    bool sync_due;       /* in node->due: start a sync round before the loop polls */
    bool wal_limited;    /* the last append was refused for max_wal_bytes */
    uint64_t wal_bytes;  /* wal_bytes_on_disk() at the last housekeeping */
    lsn_t oldest_cached; /* oldest_segment() */
    bool flush_done_pending;

    sk_pusher *queue_head;
    sk_pusher *queue_tail;
    sk_pusher *streaming; /* where flush-time AppendResponses go */

    sk_sender *senders[SK_MAX_SENDERS];
    int n_senders;
    int connections;

    acceptor_persistent_state persisted; /* what the control file holds */
    metrics_gauge *g_flush;
    metrics_gauge *g_commit;
    metrics_gauge *g_term;
    metrics_gauge *g_failed; /* 1 once the WAL storage failed, until a restart */
    metrics_gauge *g_backup; /* NULL without --remote */
    wal_backup_tl *backup;   /* NULL without --remote */

    /* Catch-up from the WAL backup after a ProposerElected (design §5.7).
     * While recovering, proposer messages wait in the queue. */
    bool recovering;
    bool recover_fetching;  /* a fetch runs on the thread pool */
    bool recovered_any;     /* some WAL came from the store */
    sk_pusher *recover_for; /* whose ProposerElected started it (NULL: gone) */
    uint64_t recover_segno; /* the segment fetched or being fed */
    lsn_t recover_from;     /* the end of WAL it started at */
    uint32_t recover_seg;   /* the segment size (read by the fetch's thread) */
    lsn_t recover_stuck_at; /* one started there gained no complete record */
    uint8_t *recover_buf;   /* its bytes (seg_size), NULL when none */
    uint32_t recover_off;   /* the next byte of it to feed */
    int recover_rc;         /* wal_backup_fetch's result */
    char recover_err[256];
    uv_work_t recover_req;
};

static void tl_kick(sk_timeline *tl);
static void run_effects(sk_timeline *tl);

static void publish_timeline(sk_timeline *tl);
static int attach_backup(sk_timeline *tl);
static void recover_start(sk_timeline *tl, sk_pusher *p);
static bool recover_feed(sk_timeline *tl);

/* ---- helpers ---------------------------------------------------------- */

static void fatal_to(pgwire_conn *c, const char *sqlstate, const char *msg, const char *detail)
{
    if (c != NULL)
        pgwire_send_error(c, "FATAL", sqlstate, msg, detail);
}

static const char *tl_name(const sk_timeline *tl, char *buf, size_t cap)
{
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    snprintf(buf, cap, "%s/%s", strata_id_format(&tl->tenant_id, t),
             strata_id_format(&tl->timeline_id, l));
    return buf;
}

static void free_pusher_message(sk_pusher *p)
{
    free(p->msg);
    p->msg = NULL;
    p->msg_len = 0;
}

static void tl_fail(sk_timeline *tl, const char *what, int err)
{
    char name[80];
    if (!tl->failed)
        log_error("timeline %s failed: %s: %s", tl_name(tl, name, sizeof name), what,
                  err != 0 ? strerror(-err) : "");
    tl->failed = true;
    metrics_counter_inc(tl->node->metrics.errors);
    publish_timeline(tl);
}

static void wake_senders(sk_timeline *tl)
{
    /* walsender_wake may remove a sender (error): iterate over a copy. */
    sk_sender *copy[SK_MAX_SENDERS];
    int n = tl->n_senders;
    memcpy(copy, tl->senders, sizeof(copy[0]) * (size_t)n);
    for (int i = 0; i < n; i++)
        walsender_wake(copy[i]);
}

/* ---- the local WAL limit (--max-wal-bytes) ----------------------------- */

/* The start of the oldest segment on disk, cached: the store finds it by
 * listing the directory, too dear for every append and every status.  Only
 * WAL removal (housekeeping, which refreshes it) moves it up; until a
 * segment exists it is looked up again. */
static lsn_t oldest_segment(sk_timeline *tl)
{
    if (tl->oldest_cached == LSN_INVALID && tl->ws != NULL)
        tl->oldest_cached = wal_store_oldest_lsn(tl->ws);
    return tl->oldest_cached;
}

/* Bytes of segment files on disk: every segment from the oldest to the one
 * being written, each zero-filled to its full size. */
static uint64_t wal_bytes_on_disk(sk_timeline *tl)
{
    if (tl->ws == NULL)
        return 0;
    lsn_t oldest = oldest_segment(tl);
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
    lsn_t oldest = oldest_segment(tl);
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
    tl_kick(tl);
}

static void on_ws_error(void *arg, int err)
{
    sk_timeline *tl = arg;
    tl_fail(tl, "WAL write or fdatasync failed", err);
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

static int open_store(sk_timeline *tl, uint32_t seg_size)
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
    return open_store(tl, seg);
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
        tl_fail(tl, "could not start fdatasync", rc);
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
                fatal_to(old->conn, SQLSTATE_ADMIN_SHUTDOWN,
                         "another proposer connection took over this timeline", NULL);
            tl->streaming = p;
        }
        free_pusher_message(p);
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

static void run_effects(sk_timeline *tl)
{
    STRATA_ASSERT(tl->executing);
    while (tl->effect_idx < tl->out.n) {
        if (tl->failed)
            break;
        const acceptor_effect *e = &tl->out.effects[tl->effect_idx];
        int rc = 0;
        switch (e->kind) {
        case ACC_WRITE_WAL:
            rc = ensure_store(tl);
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
                    return; /* on_ws_segment_ready resumes this effect */
                }
            }
            if (rc == 0)
                rc = wal_store_append(tl->ws, e->lsn, e->data, e->len);
            if (rc != 0) {
                tl_fail(tl, "could not write WAL", rc);
                break;
            }
            metrics_counter_inc(tl->node->metrics.appends);
            metrics_counter_add(tl->node->metrics.bytes_written, e->len);
            /* Accepted: the store writes it with the next sync round (in
             * order, ahead of that round's fdatasync).  Nothing reads it
             * before then: senders stop at the flush position, and a vote's
             * flush or a truncation waits for the store below. */
            break;
        case ACC_TRUNCATE_WAL:
            rc = ensure_store(tl);
            if (rc != 0) {
                tl_fail(tl, "could not open WAL", rc);
                break;
            }
            if (!wal_store_idle(tl->ws)) {
                rc = wal_store_submit_writes(tl->ws);
                if (rc != 0) {
                    tl_fail(tl, "could not write WAL", rc);
                    break;
                }
                tl->wait = WAIT_IDLE;
                if (!store_wait_over(tl))
                    return; /* on_ws_flushed / on_ws_written resume */
                tl->wait = WAIT_NONE;
            }
            rc = wal_store_truncate(tl->ws, e->lsn);
            if (rc != 0) {
                tl_fail(tl, "could not truncate WAL", rc);
                break;
            }
            wake_senders(tl); /* term-mode senders past the cut must stop */
            break;
        case ACC_FLUSH_WAL:
            if (tl->ws != NULL && wal_store_written_lsn(tl->ws) < wal_store_write_lsn(tl->ws)) {
                rc = wal_store_submit_writes(tl->ws);
                if (rc != 0) {
                    tl_fail(tl, "could not write WAL", rc);
                    break;
                }
                tl->wait = WAIT_WRITTEN;
                if (!store_wait_over(tl))
                    return; /* on_ws_written resumes */
                tl->wait = WAIT_NONE;
            }
            if (tl->ws != NULL) {
                uint64_t t0 = uv_hrtime();
                rc = wal_store_flush_now(tl->ws);
                metrics_counter_inc(tl->node->metrics.fsyncs);
                metrics_histogram_observe(tl->node->metrics.fsync_seconds,
                                          (double)(uv_hrtime() - t0) / 1e9);
                if (rc != 0) {
                    tl_fail(tl, "could not fdatasync WAL", rc);
                    break;
                }
            }
            break;
        case ACC_PERSIST_CONTROL:
            rc = control_file_write(tl->dir, &tl->out.control);
            if (rc != 0) {
                tl_fail(tl, "could not write the control file", rc);
                break;
            }
            tl->persisted = tl->out.control;
            break;
        case ACC_SEND:
            send_output_msg(tl);
            break;
        }
        tl->effect_idx++;
    }
    if (tl->failed) {
        /* Durability can no longer be promised: stop talking to proposers. */
        if (tl->exec != NULL)
            fatal_to(tl->exec->conn, SQLSTATE_IO_ERROR, "safekeeper WAL storage failed", NULL);
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
        recover_start(tl, live ? p : NULL);
    tl_kick(tl);
}

static void start_output(sk_timeline *tl, sk_pusher *p, bool from_flush)
{
    tl->executing = true;
    tl->exec = p;
    tl->out_from_flush = from_flush;
    tl->effect_idx = 0;
    tl->wait = WAIT_NONE;
    run_effects(tl);
}

static sk_pusher *dequeue(sk_timeline *tl)
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
static void on_before_poll(uv_prepare_t *h)
{
    sk_node *node = h->data;
    while (node->n_due > 0) {
        sk_timeline *tl = node->due[--node->n_due];
        tl->sync_due = false;
        if (tl->executing)
            continue; /* its output's end kicks it again */
        maybe_start_sync(tl);
        if (tl->flush_done_pending)
            tl_kick(tl);
    }
}

/* Chooses and runs the next input while the timeline is free. */
static void tl_kick(sk_timeline *tl)
{
    lsn_t commit_before = acceptor_commit_lsn(&tl->acc);
    lsn_t flush_before = acceptor_flush_lsn(&tl->acc);
    while (!tl->executing) {
        if (tl->failed) {
            sk_pusher *p;
            while ((p = dequeue(tl)) != NULL) {
                fatal_to(p->conn, SQLSTATE_IO_ERROR, "safekeeper WAL storage failed", NULL);
                free_pusher_message(p);
            }
            break;
        }
        if (tl->flush_done_pending) {
            tl->flush_done_pending = false;
            acceptor_flush_done(&tl->acc, &tl->out);
            start_output(tl, NULL, true);
            continue;
        }
        if (tl->recovering) {
            if (recover_feed(tl))
                continue;
            if (!tl->sync_in_flight && !tl->flush_done_pending && tl->ws != NULL &&
                acceptor_flush_wanted(&tl->acc))
                sync_due(tl);
            break;
        }
        sk_pusher *p = dequeue(tl);
        if (p == NULL) {
            /* Group commit: the round starts before the loop next polls
             * (on_before_poll), after every message already read has been
             * handled, so they share it.  No timer, no added wait. */
            if (!tl->sync_in_flight && !tl->flush_done_pending && tl->ws != NULL &&
                acceptor_flush_wanted(&tl->acc))
                sync_due(tl);
            break;
        }
        const char *why = NULL;
        if (walpush_decode_proposer_msg(p->msg, p->msg_len, &tl->msg, &why) != 0) {
            metrics_counter_inc(tl->node->metrics.errors);
            fatal_to(p->conn, SQLSTATE_PROTOCOL_VIOLATION, "invalid WAL-push message", why);
            free_pusher_message(p);
            continue;
        }
        char detail[320];
        if (append_over_limit(tl, &tl->msg, detail, sizeof detail)) {
            metrics_counter_inc(tl->node->metrics.appends_refused);
            if (!tl->wal_limited) {
                char name[80];
                log_warn("timeline %s: refusing appends: %s", tl_name(tl, name, sizeof name),
                         detail);
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
            fatal_to(p->conn, SQLSTATE_DISK_FULL, "safekeeper WAL limit reached for this timeline",
                     detail);
            free_pusher_message(p);
            continue;
        }
        if (tl->wal_limited && tl->msg.kind == PMSG_APPEND && tl->msg.u.append.wal_len > 0) {
            char name[80];
            log_info("timeline %s: WAL is below --max-wal-bytes again, taking appends",
                     tl_name(tl, name, sizeof name));
            tl->wal_limited = false;
        }
        if (acceptor_handle_message(&tl->acc, &tl->msg, p->authority, &tl->out) != 0) {
            metrics_counter_inc(tl->node->metrics.errors);
            fatal_to(p->conn, SQLSTATE_PROTOCOL_VIOLATION, "WAL-push protocol violation",
                     tl->out.error);
            free_pusher_message(p);
            continue;
        }
        start_output(tl, p, false);
    }
    if (acceptor_commit_lsn(&tl->acc) != commit_before ||
        acceptor_flush_lsn(&tl->acc) != flush_before)
        wake_senders(tl);
    publish_timeline(tl);
}

/* ---- timelines on disk ------------------------------------------------ */

static sk_timeline *tl_alloc(sk_node *node, const strata_id *tenant, const strata_id *timeline)
{
    if (node->n_timelines >= SK_MAX_TIMELINES)
        return NULL;
    sk_timeline *tl = calloc(1, sizeof *tl);
    if (tl == NULL)
        return NULL;
    tl->node = node;
    tl->tenant_id = *tenant;
    tl->timeline_id = *timeline;
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    if (snprintf(tl->dir, sizeof tl->dir, "%s/%s/%s", node->datadir, strata_id_format(tenant, t),
                 strata_id_format(timeline, l)) >= (int)sizeof tl->dir) {
        free(tl);
        return NULL;
    }
    return tl;
}

static void tl_register(sk_node *node, sk_timeline *tl)
{
    metrics_registry *r = metrics_default_registry();
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    const char *names[] = {"tenant_id", "timeline_id"};
    const char *values[] = {strata_id_format(&tl->tenant_id, t),
                            strata_id_format(&tl->timeline_id, l)};
    tl->g_flush = metrics_gauge_register(
        r, "safekeeper_flush_lsn", "End of the last complete WAL record fsynced", 2, names, values);
    tl->g_commit = metrics_gauge_register(
        r, "safekeeper_commit_lsn", "Committed end of WAL served to consumers", 2, names, values);
    tl->g_term =
        metrics_gauge_register(r, "safekeeper_term", "Highest term voted for", 2, names, values);
    tl->g_failed = metrics_gauge_register(
        r, "safekeeper_timeline_failed",
        "1 when a WAL write, fdatasync or control-file write failed: the timeline serves no "
        "proposer until the safekeeper restarts",
        2, names, values);
    if (node->backup != NULL && attach_backup(tl) != 0)
        log_warn("timeline %s/%s: no memory for its WAL backup; its WAL is kept", t, l);
    tl->index = node->n_timelines;
    node->timelines[node->n_timelines++] = tl;
    pthread_mutex_lock(&node->snap_lock);
    node->snap_n = node->n_timelines;
    pthread_mutex_unlock(&node->snap_lock);
    publish_timeline(tl);
}

static int mkdir_durable(const char *path)
{
    if (mkdir(path, 0700) != 0) {
        if (errno == EEXIST)
            return 0;
        return -errno;
    }
    return durable_fsync_parent(path);
}

static sk_timeline *tl_create(sk_node *node, const strata_id *tenant, const strata_id *timeline,
                              const char **why)
{
    sk_timeline *tl = tl_alloc(node, tenant, timeline);
    if (tl == NULL) {
        *why = "too many timelines on this safekeeper";
        return NULL;
    }
    char tdir[PATH_MAX + 40], t[STRATA_ID_HEX_LEN];
    snprintf(tdir, sizeof tdir, "%s/%s", node->datadir, strata_id_format(tenant, t));
    acceptor_init(&tl->acc, node->node_id, tenant, timeline);
    if (mkdir_durable(tdir) != 0 || mkdir_durable(tl->dir) != 0 ||
        control_file_write(tl->dir, acceptor_state(&tl->acc)) != 0) {
        *why = "could not create the timeline directory or control file";
        free(tl);
        return NULL;
    }
    tl->persisted = *acceptor_state(&tl->acc);
    tl_register(node, tl);
    char name[80];
    log_info("created timeline %s", tl_name(tl, name, sizeof name));
    return tl;
}

/*
 * Finds the end of the last complete, CRC-valid record from start on by
 * decoding what is on disk (a torn tail, zeros or garbage end it).
 * Returns 0 with *end set, or a negative errno.
 */
static int find_end_of_wal(wal_store *ws, uint32_t seg_size, lsn_t start, lsn_t *end)
{
    size_t rec_cap = 1 << 20; /* grows to the largest record, up to 1 GB */
    uint8_t *rec_buf = malloc(rec_cap);
    uint8_t *buf = malloc(128 * 1024);
    if (rec_buf == NULL || buf == NULL) {
        free(rec_buf);
        free(buf);
        return -ENOMEM;
    }
    wal_reader r;
    wal_reader_init_growable(&r, start, seg_size, &rec_buf, &rec_cap);
    lsn_t pos = start;
    bool broken = false;
    int rc = 0;
    while (!broken) {
        ssize_t n = wal_store_read(ws, pos, buf, 128 * 1024);
        if (n == -ENOENT && pos == start && wal_store_newest_segment_lsn(ws) > start)
            rc = -ENOENT; /* the start is gone but WAL after it is not */
        if (n <= 0)
            break;
        const uint8_t *p = buf;
        size_t left = (size_t)n;
        while (left > 0) {
            size_t used = 0;
            const char *why = NULL;
            int rc = wal_reader_feed(&r, pos, p, left, &used, &why);
            if (rc == WAL_READER_ERROR || (rc == WAL_READER_NEED_MORE && used == 0)) {
                broken = true;
                break;
            }
            pos += used;
            p += used;
            left -= used;
        }
    }
    *end = wal_reader_last_record_end(&r);
    free(rec_buf);
    free(buf);
    return rc;
}

static int tl_load(sk_node *node, const strata_id *tenant, const strata_id *timeline, char *err,
                   size_t errlen)
{
    sk_timeline *tl = tl_alloc(node, tenant, timeline);
    if (tl == NULL) {
        snprintf(err, errlen, "too many timelines (max %d)", SK_MAX_TIMELINES);
        return -1;
    }
    acceptor_persistent_state st;
    char why_buf[512];
    int rc = control_file_read(tl->dir, &st, why_buf, sizeof why_buf);
    if (rc != 0) {
        snprintf(err, errlen, "%s", why_buf);
        free(tl);
        return -1;
    }
    if (!strata_id_equal(&st.tenant_id, tenant) || !strata_id_equal(&st.timeline_id, timeline)) {
        snprintf(err, errlen, "%s: control file names another tenant/timeline", tl->dir);
        free(tl);
        return -1;
    }
    /* A node's votes and WAL are its own: a directory written as another
     * node (a replaced one moved back from skN.replaced-node*) would answer
     * for a node it is not. */
    if (st.node_id != node->node_id) {
        snprintf(err, errlen,
                 "%s: the control file belongs to safekeeper node %llu but this safekeeper runs "
                 "as node %llu (--id); refusing to serve another node's timeline (a replaced "
                 "node's data directory moved back?)",
                 tl->dir, (unsigned long long)st.node_id, (unsigned long long)node->node_id);
        free(tl);
        return -1;
    }
    lsn_t end = LSN_INVALID;
    if (st.wal_seg_size != 0) {
        rc = open_store(tl, st.wal_seg_size);
        if (rc != 0) {
            snprintf(err, errlen, "%s: cannot open WAL: %s", tl->dir, strerror(-rc));
            free(tl);
            return -1;
        }
        /* A truncation never cuts below the scan start (the core refuses
         * to cut committed WAL, and removal keeps the start's segment). */
        lsn_t start = wal_horizon_scan_start(&st);
        if (start != LSN_INVALID) {
            rc = find_end_of_wal(tl->ws, st.wal_seg_size, start, &end);
            if (rc == -ENOENT) {
                char s[LSN_FMT_LEN];
                snprintf(err, errlen,
                         "%s: the WAL at %s, where the control file says a complete record "
                         "ends, is missing while later segments exist; refusing to truncate "
                         "them (restore the segment or replace this safekeeper)",
                         tl->dir, lsn_format(start, s));
                wal_store_close(tl->ws);
                free(tl);
                return -1;
            }
            if (rc == 0)
                rc = wal_store_truncate(tl->ws, end);
            /* What a killed process wrote may still be only in the page
             * cache: make it durable before any of it is reported flushed. */
            if (rc == 0)
                rc = wal_store_sync_range(tl->ws, start, end);
            if (rc != 0) {
                snprintf(err, errlen, "%s: cannot truncate or sync WAL at the end found: %s",
                         tl->dir, strerror(-rc));
                wal_store_close(tl->ws);
                free(tl);
                return -1;
            }
        }
    }
    const char *why = NULL;
    if (acceptor_restore(&tl->acc, &st, end, &why) != 0) {
        snprintf(err, errlen, "%s: inconsistent state: %s", tl->dir, why);
        wal_store_close(tl->ws);
        free(tl);
        return -1;
    }
    tl->persisted = st;
    tl_register(node, tl);
    char name[80], e[LSN_FMT_LEN], c[LSN_FMT_LEN];
    log_info("loaded timeline %s term=%llu end_of_wal=%s commit_lsn=%s",
             tl_name(tl, name, sizeof name), (unsigned long long)st.term, lsn_format(end, e),
             lsn_format(st.commit_lsn, c));
    return 0;
}

/* ---- WAL backup -------------------------------------------------------- */

/* Gives tl its uploader (node->backup set).  0 or -ENOMEM. */
static int attach_backup(sk_timeline *tl)
{
    sk_node *node = tl->node;
    STRATA_ASSERT(node->backup != NULL && tl->backup == NULL);
    tl->backup = wal_backup_add(node->backup, &tl->tenant_id, &tl->timeline_id, tl->dir,
                                acceptor_state(&tl->acc)->backup_lsn);
    if (tl->backup == NULL)
        return -ENOMEM;
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    const char *names[] = {"tenant_id", "timeline_id"};
    const char *values[] = {strata_id_format(&tl->tenant_id, t),
                            strata_id_format(&tl->timeline_id, l)};
    tl->g_backup = metrics_gauge_register(
        metrics_default_registry(), "safekeeper_wal_backup_lsn",
        "End of the WAL backed up to the object store without a gap", 2, names, values);
    return 0;
}

int sk_node_set_backup(sk_node *node, wal_backup *b, char *err, size_t errlen)
{
    STRATA_ASSERT(node->backup == NULL);
    node->backup = b;
    for (int i = 0; i < node->n_timelines; i++) {
        if (attach_backup(node->timelines[i]) != 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    sk_node_publish(node);
    return 0;
}

/* ---- catch-up from the WAL backup (docs/design.md §5.7) --------------- */

/*
 * A safekeeper that was down while its peers removed WAL cannot be streamed
 * its gap by a compute that no longer holds it (a new compute starts at its
 * basebackup; pg_wal keeps wal_keep_size).  After each ProposerElected it
 * takes, with --remote, the safekeeper reads the segments from its end of
 * WAL on from the store, one at a time, while the store holds them whole:
 * committed WAL, byte-identical on every safekeeper.  The bytes before its
 * end in the first segment must equal its own (else it is another history
 * and nothing is taken).  They go through the acceptor core like appends
 * (acceptor_append_recovered) and the usual group commit.  Proposer
 * messages wait meanwhile; once something was taken, the proposer's
 * connection is closed so that it reconnects and streams from the new end.
 */

static void recover_work(uv_work_t *req)
{
    sk_timeline *tl = req->data;
    uint32_t seg = tl->recover_seg; /* not the core: the loop owns it */
    tl->recover_buf = NULL;
    /* The first one only if the store also has the next: its end of WAL
     * then moves at least to the next segment (else the proposer streams). */
    bool first = tl->recover_segno == tl->recover_from / seg;
    tl->recover_rc =
        wal_backup_fetch(tl->node->backup, &tl->tenant_id, &tl->timeline_id, seg, tl->recover_segno,
                         first, &tl->recover_buf, tl->recover_err, sizeof tl->recover_err);
}

static void recover_end(sk_timeline *tl)
{
    STRATA_ASSERT(!tl->recover_fetching);
    free(tl->recover_buf);
    tl->recover_buf = NULL;
    tl->recovering = false;
    sk_pusher *p = tl->recover_for;
    tl->recover_for = NULL;
    if (!tl->recovered_any || tl->failed)
        return;
    /* A record longer than what was fetched: the proposer truncates the
     * partial tail at its next ProposerElected, which must not fetch the
     * same again. */
    if (acceptor_written_record_end(&tl->acc) <= tl->recover_from)
        tl->recover_stuck_at = tl->recover_from;
    char name[80], e[LSN_FMT_LEN];
    log_info("timeline %s: caught up from the WAL backup to %s", tl_name(tl, name, sizeof name),
             lsn_format(acceptor_write_lsn(&tl->acc), e));
    if (p == NULL || p->conn == NULL)
        return;
    /* Its appends (queued or coming) start at the old end. */
    if (p->queued) {
        sk_pusher **pp = &tl->queue_head, *prev = NULL;
        while (*pp != p) {
            prev = *pp;
            pp = &(*pp)->next_queued;
        }
        *pp = p->next_queued;
        if (tl->queue_tail == p)
            tl->queue_tail = prev;
        p->queued = false;
        p->next_queued = NULL;
        free_pusher_message(p);
    }
    fatal_to(p->conn, SQLSTATE_ADMIN_SHUTDOWN,
             "this safekeeper caught up from the WAL backup: reconnect to stream from its new end",
             NULL);
}

/* Whether the WAL this safekeeper holds in the fetched segment, below its
 * end, is the same as the store's. */
static bool recover_prefix_matches(sk_timeline *tl)
{
    uint32_t seg = acceptor_state(&tl->acc)->wal_seg_size;
    lsn_t seg_start = tl->recover_segno * seg;
    lsn_t end = acceptor_write_lsn(&tl->acc);
    lsn_t from = acceptor_state(&tl->acc)->timeline_start_lsn;
    STRATA_ASSERT(end >= seg_start && end - seg_start < seg);
    if (from < seg_start)
        from = seg_start;
    uint8_t buf[64 * 1024];
    while (from < end) {
        size_t want = end - from < sizeof buf ? (size_t)(end - from) : sizeof buf;
        ssize_t n = wal_store_read(tl->ws, from, buf, want);
        if (n <= 0 || memcmp(buf, tl->recover_buf + (from - seg_start), (size_t)n) != 0)
            return false;
        from += (lsn_t)n;
    }
    return true;
}

static void recover_fetch(sk_timeline *tl);

static void recover_after(uv_work_t *req, int status)
{
    sk_timeline *tl = req->data;
    sk_node *node = tl->node;
    tl->recover_fetching = false;
    node->fetches_in_flight--;
    char name[80];
    if (node->stopping || tl->failed || status != 0 || tl->recover_rc != 0) {
        if (tl->recover_rc < 0)
            log_warn("timeline %s: cannot read segment %llu from the WAL backup: %s",
                     tl_name(tl, name, sizeof name), (unsigned long long)tl->recover_segno,
                     tl->recover_err);
        recover_end(tl);
        if (!node->stopping)
            tl_kick(tl);
        return;
    }
    if (!recover_prefix_matches(tl)) {
        log_warn("timeline %s: the WAL backup's segment %llu differs from this safekeeper's WAL "
                 "before its end; not taking it",
                 tl_name(tl, name, sizeof name), (unsigned long long)tl->recover_segno);
        recover_end(tl);
        tl_kick(tl);
        return;
    }
    uint32_t seg = acceptor_state(&tl->acc)->wal_seg_size;
    tl->recover_off = (uint32_t)(acceptor_write_lsn(&tl->acc) - tl->recover_segno * seg);
    tl_kick(tl);
}

static void recover_fetch(sk_timeline *tl)
{
    STRATA_ASSERT(tl->recovering && !tl->recover_fetching && tl->recover_buf == NULL);
    tl->recover_req.data = tl;
    if (uv_queue_work(tl->node->loop, &tl->recover_req, recover_work, recover_after) != 0) {
        recover_end(tl);
        return;
    }
    tl->recover_fetching = true;
    tl->node->fetches_in_flight++;
}

static void recover_start(sk_timeline *tl, sk_pusher *p)
{
    lsn_t end = acceptor_write_lsn(&tl->acc);
    uint32_t seg = acceptor_state(&tl->acc)->wal_seg_size;
    if (tl->backup == NULL || tl->recovering || tl->ws == NULL || end == LSN_INVALID || seg == 0 ||
        tl->node->stopping || end == tl->recover_stuck_at)
        return;
    tl->recovering = true;
    tl->recovered_any = false;
    tl->recover_for = p;
    tl->recover_from = end;
    tl->recover_seg = seg;
    tl->recover_segno = end / seg;
    recover_fetch(tl);
}

/*
 * Gives the core the next piece of the fetched segment (an output to run:
 * true), or, when it is all given, asks for the next segment (false: wait
 * for it).  Called from tl_kick while recovering.
 */
static bool recover_feed(sk_timeline *tl)
{
    if (tl->recover_fetching || !tl->recovering)
        return false;
    uint32_t seg = acceptor_state(&tl->acc)->wal_seg_size;
    if (tl->recover_buf == NULL) {
        recover_end(tl); /* a fetch ended without a segment */
        return false;
    }
    if (tl->recover_off == seg) {
        free(tl->recover_buf);
        tl->recover_buf = NULL;
        tl->recover_segno++;
        recover_fetch(tl);
        return false;
    }
    uint32_t len = seg - tl->recover_off;
    if (len > WALPUSH_MAX_APPEND)
        len = WALPUSH_MAX_APPEND;
    lsn_t at = tl->recover_segno * seg + tl->recover_off;
    if (acceptor_append_recovered(&tl->acc, at, tl->recover_buf + tl->recover_off, len, &tl->out) !=
        0) {
        char name[80], e[LSN_FMT_LEN];
        log_warn("timeline %s: WAL from the backup at %s not taken: %s",
                 tl_name(tl, name, sizeof name), lsn_format(at, e), tl->out.error);
        recover_end(tl);
        return false;
    }
    tl->recover_off += len;
    tl->recovered_any = true;
    start_output(tl, NULL, false);
    return true;
}

/* ---- housekeeping: lazy saves and WAL removal ------------------------- */

static bool lazy_fields_changed(const acceptor_persistent_state *a,
                                const acceptor_persistent_state *b)
{
    return a->commit_lsn != b->commit_lsn || a->truncate_lsn != b->truncate_lsn ||
           a->flush_lsn != b->flush_lsn || a->backup_lsn != b->backup_lsn ||
           memcmp(&a->ps_feedback, &b->ps_feedback, sizeof a->ps_feedback) != 0;
}

/* This safekeeper's turn among the timeline's safekeepers to upload a
 * closed segment (wal_backup.h): its place in the configuration's members
 * (a replacement takes the replaced node's place), or, before any
 * configuration, (node id - 1) mod 3. */
static uint32_t backup_rank(const sk_timeline *tl)
{
    const membership *m = &acceptor_state(&tl->acc)->mconf;
    for (uint32_t i = 0; i < m->n_members; i++)
        if (m->members[i].node_id == tl->node->node_id)
            return i;
    return tl->node->node_id == 0 ? 0 : (uint32_t)((tl->node->node_id - 1) % 3);
}

/* Tells the WAL backup how far the WAL is committed and takes back how far
 * it is backed up (into the state the next control-file save stores). */
static void backup_tick(sk_timeline *tl)
{
    if (tl->backup == NULL)
        return;
    wal_backup_position pos = {.seg_size = acceptor_state(&tl->acc)->wal_seg_size,
                               .committed = acceptor_commit_lsn(&tl->acc),
                               .oldest_local = oldest_segment(tl),
                               .unneeded = wal_horizon_backup_unneeded(&tl->persisted),
                               .rank = backup_rank(tl)};
    wal_backup_update(tl->backup, &pos);
    wal_backup_status bs;
    wal_backup_get(tl->backup, &bs);
    acceptor_set_backup_lsn(&tl->acc, bs.backup_lsn);
}

static void housekeep_timeline(sk_timeline *tl)
{
    /* Also while a message executes: the backup LSN only goes into the
     * in-memory state, which the next save stores. */
    backup_tick(tl);
    if (tl->failed || tl->executing)
        return;
    const acceptor_persistent_state *st = acceptor_state(&tl->acc);
    /* Only between outputs: then the in-memory state matches the effects
     * executed so far, and only the lazily-kept fields differ. */
    if (lazy_fields_changed(st, &tl->persisted)) {
        int rc = control_file_write(tl->dir, st);
        if (rc != 0) {
            tl_fail(tl, "could not write the control file", rc);
            return;
        }
        tl->persisted = *st;
    }
    tl->wal_bytes = wal_bytes_on_disk(tl);
    /* WAL removal horizon (docs/design.md §5.5), from persisted values only;
     * only while no write or sync round runs. */
    if (tl->ws == NULL || !wal_store_idle(tl->ws))
        return;
    lsn_t horizon = wal_horizon_removal(&tl->persisted, tl->backup != NULL);
    if (horizon == LSN_INVALID)
        return; /* keep everything */
    int removed = wal_store_remove_below(tl->ws, horizon);
    if (removed != 0) {
        tl->oldest_cached = LSN_INVALID; /* looked up again */
        tl->wal_bytes = wal_bytes_on_disk(tl);
    }
    if (removed > 0) {
        char name[80], h[LSN_FMT_LEN];
        log_info("removed %d WAL segments of %s below horizon %s", removed,
                 tl_name(tl, name, sizeof name), lsn_format(horizon, h));
        metrics_counter_add(tl->node->metrics.wal_segments_removed, (uint64_t)removed);
    } else if (removed < 0) {
        log_warn("WAL removal failed: %s", strerror(-removed));
    }
}

static void on_housekeeping(uv_timer_t *t)
{
    sk_node *node = t->data;
    for (int i = 0; i < node->n_timelines; i++)
        housekeep_timeline(node->timelines[i]);
    sk_node_publish(node);
}

/* ---- node ------------------------------------------------------------- */

int sk_node_init(sk_node *node, uv_loop_t *loop, uring *ring, const char *datadir, uint64_t node_id,
                 unsigned housekeeping_ms, char *err, size_t errlen)
{
    memset(node, 0, sizeof *node);
    node->loop = loop;
    node->ring = ring;
    node->node_id = node_id;
    snprintf(node->datadir, sizeof node->datadir, "%s", datadir);
    pthread_mutex_init(&node->snap_lock, NULL);
    metrics_registry *r = metrics_default_registry();
    sk_metrics *m = &node->metrics;
    m->appends = metrics_counter_register(r, "safekeeper_appends_total",
                                          "WAL writes executed for AppendRequests", 0, NULL, NULL);
    m->bytes_written = metrics_counter_register(r, "safekeeper_wal_bytes_written_total",
                                                "WAL bytes written", 0, NULL, NULL);
    m->fsyncs = metrics_counter_register(r, "safekeeper_fdatasync_total",
                                         "WAL fdatasync calls (group-commit rounds and votes)", 0,
                                         NULL, NULL);
    m->fsync_seconds = metrics_histogram_register(
        r, "safekeeper_fdatasync_seconds", "Duration of WAL fdatasync rounds", fsync_bounds,
        (int)(sizeof fsync_bounds / sizeof fsync_bounds[0]), 0, NULL, NULL);
    m->connections_total = metrics_counter_register(r, "safekeeper_connections_total",
                                                    "Connections accepted", 0, NULL, NULL);
    m->connections =
        metrics_gauge_register(r, "safekeeper_connections", "Open connections", 0, NULL, NULL);
    m->errors = metrics_counter_register(r, "safekeeper_errors_total",
                                         "Protocol and storage errors", 0, NULL, NULL);
    m->wal_segments_removed =
        metrics_counter_register(r, "safekeeper_wal_segments_removed_total",
                                 "WAL segments removed below the horizon", 0, NULL, NULL);
    m->ps_feedback_ignored = metrics_counter_register(
        r, "safekeeper_ps_feedback_ignored_total",
        "Pageserver feedback messages dropped: the sender was not the pageserver", 0, NULL, NULL);
    m->appends_refused = metrics_counter_register(
        r, "safekeeper_appends_refused_total",
        "AppendRequests refused because the timeline's WAL would pass --max-wal-bytes", 0, NULL,
        NULL);
    m->backup.uploaded = metrics_counter_register(
        r, "safekeeper_wal_backup_segments_uploaded_total",
        "WAL segments this safekeeper PUT into the object store", 0, NULL, NULL);
    m->backup.skipped = metrics_counter_register(
        r, "safekeeper_wal_backup_segments_skipped_total",
        "WAL segments found whole in the object store already (another safekeeper put them)", 0,
        NULL, NULL);
    m->backup.bytes =
        metrics_counter_register(r, "safekeeper_wal_backup_bytes_total",
                                 "WAL bytes PUT into the object store", 0, NULL, NULL);
    m->backup.deleted = metrics_counter_register(
        r, "safekeeper_wal_backup_segments_deleted_total",
        "WAL segments this safekeeper deleted from the object store (no one needs them)", 0, NULL,
        NULL);
    m->backup.errors = metrics_counter_register(
        r, "safekeeper_wal_backup_errors_total",
        "Failed WAL backup attempts (HEAD or PUT), each retried with backoff", 0, NULL, NULL);
    node->snap = calloc(SK_MAX_TIMELINES, sizeof *node->snap);
    if (node->snap == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    DIR *d = opendir(datadir);
    if (d == NULL) {
        snprintf(err, errlen, "%s: %s", datadir, strerror(errno));
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        strata_id tenant;
        if (!strata_id_parse(de->d_name, &tenant))
            continue;
        char tdir[PATH_MAX];
        snprintf(tdir, sizeof tdir, "%s/%s", datadir, de->d_name);
        DIR *td = opendir(tdir);
        if (td == NULL)
            continue;
        struct dirent *te;
        while (rc == 0 && (te = readdir(td)) != NULL) {
            strata_id timeline;
            if (strata_id_parse(te->d_name, &timeline))
                rc = tl_load(node, &tenant, &timeline, err, errlen);
        }
        closedir(td);
    }
    closedir(d);
    if (rc != 0)
        return -1;
    uv_timer_init(loop, &node->housekeeping);
    node->housekeeping.data = node;
    uv_timer_start(&node->housekeeping, on_housekeeping, housekeeping_ms, housekeeping_ms);
    uv_prepare_init(loop, &node->before_poll);
    node->before_poll.data = node;
    uv_prepare_start(&node->before_poll, on_before_poll);
    sk_node_publish(node);
    return 0;
}

void sk_node_begin_stop(sk_node *node)
{
    node->stopping = true;
}

bool sk_node_fetching(const sk_node *node)
{
    return node->fetches_in_flight > 0;
}

void sk_node_shutdown(sk_node *node)
{
    STRATA_ASSERT(node->fetches_in_flight == 0);
    uv_timer_stop(&node->housekeeping);
    uv_close((uv_handle_t *)&node->housekeeping, NULL);
    uv_prepare_stop(&node->before_poll);
    uv_close((uv_handle_t *)&node->before_poll, NULL);
    node->n_due = 0;
    /* The backup LSN reached so far goes into the last save. */
    for (int i = 0; i < node->n_timelines; i++)
        backup_tick(node->timelines[i]);
    wal_backup_stop(node->backup);
    node->backup = NULL;
    for (int i = 0; i < node->n_timelines; i++) {
        sk_timeline *tl = node->timelines[i];
        tl->backup = NULL; /* freed with the backup */
        if (!tl->failed && !tl->executing &&
            lazy_fields_changed(acceptor_state(&tl->acc), &tl->persisted))
            control_file_write(tl->dir, acceptor_state(&tl->acc));
        wal_store_close(tl->ws);
        while (dequeue(tl) != NULL) {
        }
        free(tl);
    }
    node->n_timelines = 0;
    free(node->snap);
    node->snap = NULL;
    pthread_mutex_destroy(&node->snap_lock);
}

sk_timeline *sk_node_find(sk_node *node, const strata_id *tenant, const strata_id *timeline)
{
    for (int i = 0; i < node->n_timelines; i++) {
        sk_timeline *tl = node->timelines[i];
        if (strata_id_equal(&tl->tenant_id, tenant) && strata_id_equal(&tl->timeline_id, timeline))
            return tl;
    }
    return NULL;
}

static void fill_status(const sk_timeline *tl, sk_timeline_status *s)
{
    const acceptor_persistent_state *st = acceptor_state(&tl->acc);
    s->tenant_id = tl->tenant_id;
    s->timeline_id = tl->timeline_id;
    s->term = acceptor_term(&tl->acc);
    s->flush_lsn = acceptor_flush_lsn(&tl->acc);
    s->commit_lsn = acceptor_commit_lsn(&tl->acc);
    s->truncate_lsn = acceptor_truncate_lsn(&tl->acc);
    s->timeline_start_lsn = st->timeline_start_lsn;
    s->ps_feedback = st->ps_feedback;
    s->mconf = st->mconf;
    s->connections = tl->connections;
    s->failed = tl->failed;
    s->wal_bytes = tl->wal_bytes;
    s->wal_limited = tl->wal_limited;
    s->wal_backup = tl->backup != NULL;
    if (tl->backup != NULL)
        wal_backup_get(tl->backup, &s->backup);
    else
        memset(&s->backup, 0, sizeof s->backup);
}

static void publish_timeline(sk_timeline *tl)
{
    sk_node *node = tl->node;
    sk_timeline_status s;
    fill_status(tl, &s);
    metrics_gauge_set(tl->g_flush, (double)s.flush_lsn);
    metrics_gauge_set(tl->g_commit, (double)s.commit_lsn);
    metrics_gauge_set(tl->g_term, (double)s.term);
    metrics_gauge_set(tl->g_failed, s.failed ? 1.0 : 0.0);
    if (tl->g_backup != NULL)
        metrics_gauge_set(tl->g_backup, (double)s.backup.backup_lsn);
    metrics_gauge_set(node->metrics.connections, node->open_connections);
    pthread_mutex_lock(&node->snap_lock);
    node->snap[tl->index] = s;
    node->snap_connections = node->open_connections;
    pthread_mutex_unlock(&node->snap_lock);
}

void sk_node_publish(sk_node *node)
{
    for (int i = 0; i < node->n_timelines; i++)
        publish_timeline(node->timelines[i]);
    metrics_gauge_set(node->metrics.connections, node->open_connections);
    pthread_mutex_lock(&node->snap_lock);
    node->snap_connections = node->open_connections;
    pthread_mutex_unlock(&node->snap_lock);
}

int sk_node_snapshot(sk_node *node, sk_timeline_status *out, int cap, int *connections)
{
    pthread_mutex_lock(&node->snap_lock);
    int n = node->snap_n < cap ? node->snap_n : cap;
    if (out != NULL && n > 0)
        memcpy(out, node->snap, sizeof *out * (size_t)n);
    if (connections != NULL)
        *connections = node->snap_connections;
    pthread_mutex_unlock(&node->snap_lock);
    return n;
}

/* ---- proposer connections --------------------------------------------- */

void sk_pusher_message(sk_node *node, sk_pusher *p, const uint8_t *data, size_t n)
{
    if (p->msg != NULL) {
        /* Input is paused while a message executes; a second one means the
         * pause did not hold.  Refuse rather than queue without bound. */
        fatal_to(p->conn, SQLSTATE_INTERNAL_ERROR,
                 "internal error: WAL-push message while another is pending", NULL);
        return;
    }
    if (p->tl == NULL) {
        proposer_msg m;
        const char *why = NULL;
        if (walpush_decode_proposer_msg(data, n, &m, &why) != 0) {
            metrics_counter_inc(node->metrics.errors);
            fatal_to(p->conn, SQLSTATE_PROTOCOL_VIOLATION, "invalid WAL-push message", why);
            return;
        }
        if (m.kind != PMSG_GREETING) {
            metrics_counter_inc(node->metrics.errors);
            fatal_to(p->conn, SQLSTATE_PROTOCOL_VIOLATION,
                     "the first WAL-push message must be a ProposerGreeting", NULL);
            return;
        }
        if (!strata_id_equal(&m.u.greeting.tenant_id, &p->tenant_id) ||
            !strata_id_equal(&m.u.greeting.timeline_id, &p->timeline_id)) {
            metrics_counter_inc(node->metrics.errors);
            fatal_to(p->conn, SQLSTATE_PROTOCOL_VIOLATION,
                     "ProposerGreeting names another tenant/timeline than the connection options",
                     NULL);
            return;
        }
        sk_timeline *tl = sk_node_find(node, &p->tenant_id, &p->timeline_id);
        if (tl == NULL && !p->allow_create) {
            char msg[200], t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
            snprintf(msg, sizeof msg,
                     "timeline %s/%s does not exist on this safekeeper and this connection may "
                     "not create it",
                     strata_id_format(&p->tenant_id, t), strata_id_format(&p->timeline_id, l));
            metrics_counter_inc(node->metrics.errors);
            fatal_to(p->conn, SQLSTATE_UNDEFINED_OBJECT, msg,
                     "only the proposer that bootstraps a timeline sends START_WAL_PUSH "
                     "(allow_timeline_creation 'true'); a safekeeper that lost the timeline "
                     "must be restored or replaced, not recreated empty");
            return;
        }
        if (tl == NULL) {
            tl = tl_create(node, &p->tenant_id, &p->timeline_id, &why);
            if (tl == NULL) {
                metrics_counter_inc(node->metrics.errors);
                fatal_to(p->conn, SQLSTATE_IO_ERROR, "could not create timeline", why);
                return;
            }
        }
        p->tl = tl;
        tl->connections++;
    }
    sk_timeline *tl = p->tl;
    p->msg = malloc(n > 0 ? n : 1);
    if (p->msg == NULL) {
        fatal_to(p->conn, SQLSTATE_OUT_OF_MEMORY, "out of memory", NULL);
        return;
    }
    memcpy(p->msg, data, n);
    p->msg_len = n;
    pgwire_conn_pause_input(p->conn, true);
    p->queued = true;
    p->next_queued = NULL;
    if (tl->queue_tail != NULL)
        tl->queue_tail->next_queued = p;
    else
        tl->queue_head = p;
    tl->queue_tail = p;
    tl_kick(tl);
}

void sk_pusher_closed(sk_node *node, sk_pusher *p)
{
    (void)node;
    p->conn = NULL;
    sk_timeline *tl = p->tl;
    if (tl == NULL) {
        free_pusher_message(p);
        free(p);
        return;
    }
    tl->connections--;
    if (tl->streaming == p)
        tl->streaming = NULL;
    if (tl->recover_for == p)
        tl->recover_for = NULL;
    if (tl->exec == p && tl->executing)
        return; /* finish_output frees it */
    if (p->queued) {
        sk_pusher **pp = &tl->queue_head;
        sk_pusher *prev = NULL;
        while (*pp != NULL && *pp != p) {
            prev = *pp;
            pp = &(*pp)->next_queued;
        }
        if (*pp == p) {
            *pp = p->next_queued;
            if (tl->queue_tail == p)
                tl->queue_tail = prev;
        }
    }
    free_pusher_message(p);
    free(p);
    publish_timeline(tl);
}

/* ---- configuration ---------------------------------------------------- */

int sk_timeline_switch_membership(sk_timeline *tl, const membership *m, acceptor_authority auth,
                                  char *err, size_t errlen)
{
    if (tl->failed) {
        snprintf(err, errlen, "the timeline's WAL storage failed");
        return -1;
    }
    if (tl->executing) {
        snprintf(err, errlen, "the timeline is busy executing a message: try again");
        return -1;
    }
    uint32_t before = acceptor_state(&tl->acc)->mconf.generation;
    if (acceptor_switch_membership(&tl->acc, m, auth, &tl->out) != 0) {
        snprintf(err, errlen, "%s", tl->out.error);
        return -1;
    }
    for (int i = 0; i < tl->out.n; i++) {
        STRATA_ASSERT(tl->out.effects[i].kind == ACC_PERSIST_CONTROL);
        int rc = control_file_write(tl->dir, &tl->out.control);
        if (rc != 0) {
            tl_fail(tl, "could not write the control file", rc);
            snprintf(err, errlen, "could not write the control file: %s", strerror(-rc));
            return -1;
        }
        tl->persisted = tl->out.control;
    }
    tl->out.n = 0;
    if (m->generation != before) {
        char name[80], mem[MEMBERSHIP_TEXT_MAX], nmem[MEMBERSHIP_TEXT_MAX];
        membership_format_set(m->members, m->n_members, mem, sizeof mem);
        membership_format_set(m->new_members, m->n_new_members, nmem, sizeof nmem);
        log_info("%s: configuration generation %u -> %u: members %s%s%s",
                 tl_name(tl, name, sizeof name), before, m->generation, mem,
                 m->n_new_members > 0 ? ", joint with new members " : "", nmem);
        if (tl->streaming != NULL && tl->streaming->conn != NULL)
            fatal_to(tl->streaming->conn, SQLSTATE_ADMIN_SHUTDOWN,
                     "the timeline's safekeeper configuration changed: reconnect to learn it",
                     NULL);
    }
    publish_timeline(tl);
    return 0;
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

int sk_timeline_add_sender(sk_timeline *tl, sk_sender *s)
{
    if (tl->n_senders >= SK_MAX_SENDERS)
        return -1;
    tl->senders[tl->n_senders++] = s;
    return 0;
}

void sk_timeline_remove_sender(sk_timeline *tl, sk_sender *s)
{
    for (int i = 0; i < tl->n_senders; i++) {
        if (tl->senders[i] == s) {
            tl->senders[i] = tl->senders[--tl->n_senders];
            return;
        }
    }
}

void sk_timeline_set_ps_feedback(sk_timeline *tl, const pageserver_feedback *fb)
{
    acceptor_set_pageserver_feedback(&tl->acc, fb);
    publish_timeline(tl);
}

void sk_timeline_conn_count(sk_timeline *tl, int delta)
{
    tl->connections += delta;
    publish_timeline(tl);
}
