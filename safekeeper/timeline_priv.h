/*
 * timeline_priv.h: the inside of a safekeeper timeline, shared by the files
 * that make up the timeline module (timeline.h is its public contract).
 *
 * For: struct sk_timeline and the calls the module's files make into each
 * other: timeline.c (the executor), node.c (registry, timelines on disk,
 * proposer connections, membership), housekeeping.c (lazy saves, WAL
 * removal, the backup's position) and catchup.c (catch-up from the WAL
 * backup).  Not for: anything outside those four files; conn.c, walsender.c,
 * http_api.c and main.c use timeline.h only.
 * Threading: loop thread only, like timeline.h.
 */
#ifndef STRATA_SAFEKEEPER_TIMELINE_PRIV_H
#define STRATA_SAFEKEEPER_TIMELINE_PRIV_H

#include <limits.h>
#include <stdlib.h>

#include "safekeeper/timeline.h"

#define SK_MAX_SENDERS 64

/* A registered sender (sk_timeline_add_sender). */
typedef struct sk_waiter {
    sk_wake_fn wake;
    void *arg;
} sk_waiter;

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

    sk_waiter senders[SK_MAX_SENDERS];
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

/* Sends a FATAL ErrorResponse on c unless the connection is gone. */
static inline void sk_fatal_to(pgwire_conn *c, const char *sqlstate, const char *msg,
                               const char *detail)
{
    if (c != NULL)
        pgwire_send_error(c, "FATAL", sqlstate, msg, detail);
}

/* Drops the message p holds (waiting or executed). */
static inline void sk_pusher_free_message(sk_pusher *p)
{
    free(p->msg);
    p->msg = NULL;
    p->msg_len = 0;
}

/* --- timeline.c: the executor --- */

/* "tenant/timeline" into buf, for logs. */
const char *sk_timeline_name(const sk_timeline *tl, char *buf, size_t cap);
/* The timeline's WAL storage failed: logs, counts, serves no proposer from
 * now until a restart.  err: a negative errno or 0. */
void sk_timeline_fail(sk_timeline *tl, const char *what, int err);
/* Chooses and runs the next input while the timeline is free. */
void sk_timeline_kick(sk_timeline *tl);
/* Starts executing tl->out (the core's output for p's message, for a
 * completed flush when from_flush, or for recovered WAL when p is NULL). */
void sk_timeline_start_output(sk_timeline *tl, sk_pusher *p, bool from_flush);
/* Takes the oldest queued proposer connection off the queue (NULL: none). */
sk_pusher *sk_timeline_dequeue(sk_timeline *tl);
/* Opens tl's WAL store with this segment size.  0 or a negative errno. */
int sk_timeline_open_store(sk_timeline *tl, uint32_t seg_size);
/* The start of the oldest segment on disk (cached; LSN_INVALID: none). */
lsn_t sk_timeline_oldest_segment(sk_timeline *tl);
/* Bytes of segment files on disk. */
uint64_t sk_timeline_wal_bytes(sk_timeline *tl);
/* uv_prepare callback (data: the node): starts the sync rounds that are due. */
void sk_timeline_on_before_poll(uv_prepare_t *h);

/* --- node.c --- */

/* Publishes tl's status to the snapshot and its gauges. */
void sk_node_publish_timeline(sk_timeline *tl);

/* --- housekeeping.c --- */

/* uv_timer callback (data: the node): lazy saves, WAL removal, the backup
 * position of every timeline, then a publish. */
void sk_housekeeping_on_timer(uv_timer_t *t);
/* Exchanges positions with tl's WAL backup (none: nothing). */
void sk_housekeeping_backup_tick(sk_timeline *tl);
/* At shutdown: stores the lazily-kept fields if they changed and the
 * timeline is between outputs and not failed. */
void sk_housekeeping_final_save(sk_timeline *tl);

/* --- catchup.c --- */

/* After a ProposerElected tl took (p: its connection, NULL if gone): with
 * --remote, starts fetching the WAL backup's segments from tl's end. */
void sk_catchup_start(sk_timeline *tl, sk_pusher *p);
/* While tl->recovering: gives the core the next piece of fetched WAL
 * (true: an output runs) or waits for the next fetch (false). */
bool sk_catchup_feed(sk_timeline *tl);

#endif
