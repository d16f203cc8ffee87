/*
 * walreceiver.h: one timeline's WAL stream from the safekeepers into ingest
 * (docs/design.md §3.3, §6.8).
 *
 * For: a thread per timeline that connects to one safekeeper with libpq
 * (replication=true, options '-c tenant_id=.. -c timeline_id=..'), runs
 * IDENTIFY_SYSTEM and START_REPLICATION PHYSICAL <lsn>, decodes XLogData and
 * keepalives (proto/replication.h), reassembles records with a
 * common/pg/walformat.h wal_reader, hands each to ingest_record() and then calls
 * store_advance(end) (once per XLogData message, after its last complete
 * record).  It sends a standby status update 'r' (write = flush = last
 * received record end, apply = disk_consistent) and, unless disabled, our
 * pageserver feedback 'z' (last_received, disk_consistent, remote_consistent:
 * from options.remote_consistent_lsn, or disk_consistent without a remote
 * store) every status_interval_ms and whenever a
 * keepalive asks for a reply, so safekeepers remove WAL only below what the
 * pageserver has persisted.
 *
 * Start position: the greater of store_last_record_lsn() and
 * options.start_lsn.  Streaming restarts there after every reconnect (the
 * reader is re-initialised; records at or below what was ingested are
 * skipped), so a reconnect never ingests a record twice.
 *
 * WAL the safekeepers removed (a pageserver restored from an older state):
 * with options.wal_backup, read from the safekeepers' WAL backup, then
 * streaming continues (see the option).
 *
 * Safekeeper choice: on (re)connect it probes every safekeeper with
 * IDENTIFY_SYSTEM (xlogpos = its commit LSN) and picks the most advanced one
 * that answers; while streaming it re-probes the others every
 * probe_interval_ms and switches when one is more than switch_lag_bytes ahead
 * of what was received, or when the current one has offered nothing new for
 * a whole probe interval while another has committed more.  The rules are
 * pure functions in walreceiver_choice.h; this file probes and feeds them.
 * On any error (connection, protocol, bad WAL) it
 * disconnects, waits with exponential backoff (reconnect_min_ms doubling to
 * reconnect_max_ms) and tries again, preferring another safekeeper.  An
 * ingest error (corrupt record or store failure) is fatal for the timeline:
 * the thread stops and walreceiver_status() reports it.  last_error is
 * cleared as soon as streaming works again; a probe of another safekeeper
 * that fails while streaming counts as a probe error, not a stream error.
 *
 * Not for: decoding records (ingest.h) or storage (store.h).
 *
 * Threads: walreceiver_start() spawns the thread, which is the store's one
 * writer; nobody else may put into that store or use that ingest_state while
 * it runs.  walreceiver_status() may be called from any thread;
 * walreceiver_stop() from one thread, once.
 */
#ifndef STRATA_PAGESERVER_WALRECEIVER_H
#define STRATA_PAGESERVER_WALRECEIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "pageserver/ingest/ingest.h"
#include "pageserver/store/store.h"

#define WALRECEIVER_MAX_SAFEKEEPERS 16

typedef struct walreceiver walreceiver;

typedef struct walreceiver_options {
    /* "host:port" of each safekeeper (copied by walreceiver_start). */
    const char *safekeepers[WALRECEIVER_MAX_SAFEKEEPERS];
    int n_safekeepers;
    strata_id tenant;
    strata_id timeline;
    const char *user;     /* default "strata" */
    const char *password; /* NULL: none (trust) */
    lsn_t start_lsn;      /* lowest start (e.g. the import LSN) */
    /* The safekeepers' WAL backup (safekeeper/wal_backup.h) in this object
     * store, or NULL.  When the safekeeper answers START_REPLICATION with
     * "requested WAL segment ... has already been removed" (58P01), the
     * receiver reads the closed segments from
     * tenants/<tenant>/timelines/<timeline>/wal/ instead, from the start
     * position up to the first segment the store does not have, ingests
     * them, and streams on from the safekeeper at that segment's start.
     * Without it the receiver keeps retrying the safekeepers. */
    struct remote_storage *wal_backup;
    uint32_t wal_seg_size;       /* default 16 MB */
    uint32_t status_interval_ms; /* default 1000 */
    uint32_t reconnect_min_ms;   /* default 100 */
    uint32_t reconnect_max_ms;   /* default 5000 */
    uint32_t connect_timeout_s;  /* default 5 */
    uint32_t probe_interval_ms;  /* default 10000 */
    uint64_t switch_lag_bytes;   /* default 1 GiB */
    size_t reassembly_buf;       /* initial size, grows to fit; default WAL_READER_DEFAULT_BUF */
    /* Send our 'z' feedback (default true).  A stock Postgres walsender
     * (tests) closes the connection on an unknown message: set false there,
     * and set no tenant/timeline options (send_ids false). */
    bool send_ps_feedback;
    bool send_ids; /* default true */
    /* The remote_consistent_lsn the feedback reports (object storage): what the
     * newest manifest in object storage makes consistent, called from the
     * receiver thread.  NULL (no remote store): disk_consistent_lsn, so the
     * safekeepers keep WAL only until the local store has it. */
    lsn_t (*remote_consistent_lsn)(void *arg);
    void *remote_arg;
} walreceiver_options;

void walreceiver_options_default(walreceiver_options *o);

/*
 * Starts the receiver thread for store st and ingest state ing (both must
 * outlive the receiver).  0, or -1 with err (bad options, thread creation).
 * Connection failures are not errors here: the thread retries.
 */
int walreceiver_start(const walreceiver_options *o, store *st, ingest_state *ing, walreceiver **out,
                      char *err, size_t errlen);

/* Stops the thread (interrupting a blocking read within ~100 ms), closes
 * the connection and frees.  NULL is ignored. */
void walreceiver_stop(walreceiver *wr);

typedef struct walreceiver_status_info {
    bool running; /* false after a fatal (ingest) error */
    bool connected;
    int safekeeper;           /* index into options.safekeepers, -1 if none */
    lsn_t last_received_lsn;  /* end of the last record ingested */
    lsn_t upstream_lsn;       /* the connected safekeeper's wal_end as last seen */
    uint64_t lag_bytes;       /* upstream_lsn - last_received_lsn (0 if behind) */
    uint64_t records;         /* records ingested by this receiver */
    uint64_t bytes;           /* WAL bytes received */
    uint64_t connects;        /* successful START_REPLICATIONs */
    uint64_t errors;          /* connection / protocol errors (each led to a reconnect) */
    uint64_t probe_errors;    /* other safekeepers not answering a probe while streaming */
    uint64_t switches;        /* switches to a safekeeper further ahead */
    uint64_t backup_segments; /* WAL segments read from the WAL backup */
    int64_t last_error_time;  /* Unix seconds of the most recent error, 0 if none */
    /* The most recent error; cleared ("") once a message arrives on a new
     * connection, i.e. streaming works again (errors and last_error_time
     * keep the history). */
    char last_error[256];
} walreceiver_status_info;

void walreceiver_status(walreceiver *wr, walreceiver_status_info *out);

#endif
