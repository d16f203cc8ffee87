/*
 * timeline.h: the safekeeper's timelines and the IO edge of the acceptor.
 *
 * One safekeeper serves many timelines, each in
 * <datadir>/<tenant_hex>/<timeline_hex>/ (control file + WAL segments).  A
 * timeline owns its acceptor core (acceptor.h), its WAL store
 * (wal_store.h) and the queue of proposer messages waiting for the core.
 *
 * Executing the core's effects: the core returns an ordered effect list;
 * this module runs the effects one after another, each complete before the
 * next (a WAL write completes when io_uring says so; truncation, the vote
 * flush and the control file are synchronous and durable), and only then
 * feeds the core its next input.  While a message is being executed its
 * connection's input is paused, so a proposer has at most one message in
 * flight here and the queue is bounded by the number of connections.
 * A WRITE_WAL is complete once the store has accepted it: the store writes
 * it, in order, linked ahead of the next sync round's fdatasync (one
 * submission, one completion); a vote's FLUSH_WAL and a TRUNCATE_WAL wait
 * for the store to have written (or finished) everything first.
 * Group commit: when the core is between inputs, wants a flush and none is
 * running, one sync round starts, right before the loop next polls (so the
 * messages already read share it; no timer); its completion is the core's
 * next input.
 *
 * The module is four files sharing timeline_priv.h: timeline.c (the
 * executor and the sender side), node.c (the registry, timelines on disk,
 * proposer connections, membership), housekeeping.c (lazy saves, WAL
 * removal, the backup position) and catchup.c (catch-up from the WAL
 * backup).
 *
 * For: everything a safekeeper does with its timelines.
 * Not for: parsing commands or the replication protocol (conn.c,
 * walsender.c).  Threading: loop thread only, except sk_node_snapshot_*,
 * which any thread may call (the HTTP server).
 */
#ifndef STRATA_SAFEKEEPER_TIMELINE_H
#define STRATA_SAFEKEEPER_TIMELINE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "base/lsn.h"
#include "base/metrics.h"
#include "net/pgwire.h"
#include "net/uring.h"
#include "safekeeper/acceptor.h"
#include "safekeeper/wal_backup.h"
#include "safekeeper/wal_store.h"

#define SK_MAX_TIMELINES 1024

typedef struct sk_timeline sk_timeline;
/* A waiter on a timeline's positions (walsender.c registers one per
 * sender): called with its arg when commit or flush moved or WAL was cut. */
typedef void (*sk_wake_fn)(void *arg);

/* The daemon's series in the default metrics registry (common/base/metrics.h);
 * updates are atomic, /metrics renders them from the HTTP thread. */
typedef struct sk_metrics {
    metrics_counter *appends;
    metrics_counter *bytes_written;
    metrics_counter *fsyncs;
    metrics_histogram *fsync_seconds;
    metrics_counter *connections_total;
    metrics_gauge *connections;
    metrics_counter *errors;
    metrics_counter *wal_segments_removed;
    metrics_counter *ps_feedback_ignored;
    metrics_counter *appends_refused; /* over max_wal_bytes */
    wal_backup_metrics backup;        /* safekeeper_wal_backup_* */
} sk_metrics;

/* What HTTP shows of one timeline. */
typedef struct sk_timeline_status {
    strata_id tenant_id;
    strata_id timeline_id;
    uint64_t term;
    lsn_t flush_lsn;
    lsn_t commit_lsn;
    lsn_t truncate_lsn;
    lsn_t timeline_start_lsn;
    pageserver_feedback ps_feedback;
    membership mconf;
    int connections;
    bool failed;
    uint64_t wal_bytes; /* segment files on disk, in bytes */
    bool wal_limited;   /* refusing appends: at max_wal_bytes */
    bool wal_backup;    /* --remote is set: the fields below mean something */
    wal_backup_status backup;
} sk_timeline_status;

typedef struct sk_node {
    uv_loop_t *loop;
    uring *ring;
    char datadir[4096];
    uint64_t node_id;
    int n_timelines;
    sk_timeline *timelines[SK_MAX_TIMELINES];
    uv_timer_t housekeeping;  /* lazy control-file saves, WAL removal */
    uv_prepare_t before_poll; /* starts the group-commit rounds that are due */
    int n_due;
    sk_timeline *due[SK_MAX_TIMELINES]; /* timelines wanting a sync round */
    sk_metrics metrics;
    int open_connections;
    /* --max-wal-bytes: a timeline whose segment files would pass this many
     * bytes refuses appends (0: no limit).  Set after sk_node_init. */
    uint64_t max_wal_bytes;
    /* --wal-io: "sync" or "uring" (common/net/uring.h).  Set after
     * sk_node_init; NULL reads as "uring". */
    const char *wal_io;
    /* --remote: the WAL backup (NULL: none).  Set by sk_node_set_backup. */
    wal_backup *backup;
    /* Catch-up fetches from the WAL backup running on libuv's thread pool
     * (they use backup: shutdown waits for them), and the stop began. */
    int fetches_in_flight;
    bool stopping;

    /* Published for other threads (HTTP). */
    pthread_mutex_t snap_lock;
    int snap_n;
    sk_timeline_status *snap; /* SK_MAX_TIMELINES entries */
    int snap_connections;
} sk_node;

/* One proposer connection's link to a timeline (conn.c owns it). */
typedef struct sk_pusher {
    pgwire_conn *conn; /* NULL once the connection closed */
    strata_id tenant_id;
    strata_id timeline_id;
    sk_timeline *tl; /* NULL until the greeting found or created it */
    /* START_WAL_PUSH (allow_timeline_creation 'true'): the greeting may
     * create the timeline when this safekeeper lacks it.  Without it a
     * missing timeline is refused: a safekeeper that lost its data must not
     * come back as an empty, voting member. */
    bool allow_create;
    /* What the connection's token allows (acceptor.h): only the admin's
     * greetings may install a newer configuration. */
    acceptor_authority authority;
    uint8_t *msg; /* the message waiting or being executed (owned) */
    size_t msg_len;
    bool queued;
    struct sk_pusher *next_queued;
} sk_pusher;

/* Loads every timeline under datadir (control file, end of WAL, acceptor
 * restore) and starts the housekeeping timer (lazy control-file saves and
 * WAL removal every housekeeping_ms).  0, or -1 with err. */
int sk_node_init(sk_node *node, uv_loop_t *loop, uring *ring, const char *datadir, uint64_t node_id,
                 unsigned housekeeping_ms, char *err, size_t errlen);

/* Turns the WAL backup on (b owned by the node from then on, stopped by
 * sk_node_shutdown): every timeline, loaded or created later, backs up its
 * closed segments, and its WAL removal waits for them.  Call once, right
 * after sk_node_init.  0, or -1 with err. */
int sk_node_set_backup(sk_node *node, wal_backup *b, char *err, size_t errlen);

/* The daemon is stopping: no catch-up starts or goes on from now. */
void sk_node_begin_stop(sk_node *node);

/* Whether catch-up fetches still run on the thread pool (sk_node_shutdown
 * must wait until none does). */
bool sk_node_fetching(const sk_node *node);

/* Saves lazily-kept state, stops timers, closes stores.  Call after the
 * ring was closed (nothing in flight), connections are gone and nothing is
 * fetching. */
void sk_node_shutdown(sk_node *node);

/* The timeline, or NULL if this safekeeper does not have it. */
sk_timeline *sk_node_find(sk_node *node, const strata_id *tenant, const strata_id *timeline);

/* Copies the published state (any thread).  Returns the number of
 * timelines written to out (at most cap). */
int sk_node_snapshot(sk_node *node, sk_timeline_status *out, int cap, int *connections);

/* Republishes the snapshot now (loop thread). */
void sk_node_publish(sk_node *node);

/* --- proposer side --- */

/* Takes one WAL-push CopyData payload from p's connection: copies it,
 * pauses the connection's input, and executes it when the timeline is free.
 * Errors are answered on the connection (FATAL ErrorResponse). */
void sk_pusher_message(sk_node *node, sk_pusher *p, const uint8_t *data, size_t n);

/* p's connection closed: unlinks it (frees p now or when its message
 * finishes executing). */
void sk_pusher_closed(sk_node *node, sk_pusher *p);

/*
 * Switches tl to configuration m now (acceptor_switch_membership with the
 * caller's authority, then the control file, durably) and drops the
 * streaming proposer connection so that its proposer reconnects and learns
 * m at once.  0, or -1 with err: no admin authority, an invalid or older
 * configuration, a failed timeline, or the timeline busy executing a
 * message (err says "busy"; try again).
 */
int sk_timeline_switch_membership(sk_timeline *tl, const membership *m, acceptor_authority auth,
                                  char *err, size_t errlen);

/* --- sender side (walsender.c) --- */

sk_node *sk_timeline_node(const sk_timeline *tl);
/* The timeline's tenant and timeline ids. */
void sk_timeline_ids(const sk_timeline *tl, strata_id *tenant, strata_id *timeline);
const acceptor *sk_timeline_acceptor(const sk_timeline *tl);
/* NULL while the timeline has no WAL yet. */
wal_store *sk_timeline_store(sk_timeline *tl);
uint32_t sk_timeline_seg_size(const sk_timeline *tl);
/* Registers wake(arg) for wakeups when commit/flush positions move or WAL
 * is truncated; -1 if full.  A wakeup may remove senders. */
int sk_timeline_add_sender(sk_timeline *tl, sk_wake_fn wake, void *arg);
/* Unregisters the sender registered with arg. */
void sk_timeline_remove_sender(sk_timeline *tl, void *arg);
/* Pageserver feedback from a sender connection (stored lazily). */
void sk_timeline_set_ps_feedback(sk_timeline *tl, const pageserver_feedback *fb);
void sk_timeline_conn_count(sk_timeline *tl, int delta);

#endif
