/*
 * wal_backup.h: the safekeeper's WAL backup -- closed, committed WAL
 * segments copied to the object store (common/net/remote_storage.h), so
 * that WAL survives even when the pageserver and two safekeepers lose their
 * disks (docs/storage.md).
 *
 * Layout (docs/storage.md): a segment goes to
 *     tenants/<tenant>/timelines/<timeline>/wal/<24 hex segment name>
 * byte-identical to the safekeeper's segment file, which is byte-identical
 * to Postgres's pg_wal segment (zeros before the timeline's start in its
 * first segment).  Only segments wholly below the committed end
 * (min(commit_lsn, flush_lsn)) go: they never change again.
 *
 * Order and the backup LSN: each timeline's segments are uploaded one after
 * another, lowest first; the backup LSN is the end of the highest segment
 * such that it and every segment before it (from where the backup started)
 * is in the store.  The timeline stores it in its control file and keeps
 * local WAL at and above it (housekeeping.c).
 *
 * Three safekeepers, one copy: before a PUT the key is HEADed; an object
 * of the full segment size is counted as backed up ("skipped").  Each
 * safekeeper waits rank * delay_ms after a segment closes before looking
 * (the rank is the caller's: housekeeping.c takes this node's place in the
 * timeline's configuration, 0, 1, 2, else (node id - 1) mod 3), so in the
 * common case the first uploads and the others find it there.  Two PUTs of the same segment are
 * harmless: the bytes are the same and a PUT replaces atomically.
 *
 * Deletion: what no one needs any more (the caller's horizon, wal_horizon.h
 * wal_horizon_backup_unneeded: the pageserver's newest manifest covers it
 * and every safekeeper holds it) is not kept: the timeline's rank-0
 * safekeeper deletes the wal/ objects wholly below min(that horizon, its
 * backup LSN), listing wal/ each time the horizon passes a segment
 * boundary and deleting every older name.  A safekeeper that finds a
 * segment missing below its own view of that horizon counts it as backed
 * up (skipped) instead of putting it back; one whose view lagged may still
 * put it back, and the next pass deletes it again.  A store that does not
 * answer a HEAD never counts as "missing": the segment waits, and the
 * local WAL with it.  A deletion failure is logged and retried 30 s later.  So the store holds the
 * WAL from about the pageserver's remote_consistent_lsn on, not every segment ever written.
 *
 * Failures: a failed HEAD or PUT is retried with backoff (1 s doubling to
 * 30 s) for as long as it fails; the first failure and the recovery are
 * logged, not every attempt.  The error is kept for the status.
 *
 * Threads: one worker thread per safekeeper serves every timeline in turn
 * (each timeline has its own state here); the blocking remote calls run
 * only there, never on the event loop.  wal_backup_add, _update and _get
 * are for the loop thread and take a mutex briefly.
 *
 * Failpoints (common/base/failpoint.h):
 *   wal_backup.after_put   the PUT of a segment returned, the backup LSN
 *                          is not yet advanced (a crash here re-finds the
 *                          segment by HEAD after restart)
 *
 * For: the uploader's contract with the loop (add, update, get), the fetch
 * of a segment for catch-up, and the status.  Not for: when WAL may be
 * deleted (wal_horizon.h) or the object store's protocols
 * (common/net/remote_storage.h).
 */
#ifndef STRATA_SAFEKEEPER_WAL_BACKUP_H
#define STRATA_SAFEKEEPER_WAL_BACKUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "base/metrics.h"
#include "base/must_check.h"
#include "pg/walformat.h"
#include "net/remote_storage.h"

typedef struct wal_backup wal_backup;
typedef struct wal_backup_tl wal_backup_tl;

/* Counters the worker adds to (atomic; shared by every timeline). */
typedef struct wal_backup_metrics {
    metrics_counter *uploaded; /* segments PUT */
    metrics_counter *skipped;  /* segments found in the store already */
    metrics_counter *bytes;    /* bytes PUT */
    metrics_counter *errors;   /* failed HEADs and PUTs */
    metrics_counter *deleted;  /* objects deleted below the horizon */
} wal_backup_metrics;

/* What the status shows of one timeline's backup. */
typedef struct wal_backup_status {
    lsn_t backup_lsn;
    uint64_t uploaded;
    uint64_t skipped;
    uint64_t errors;
    uint64_t deleted;     /* objects this safekeeper deleted (rank 0 only) */
    bool failing;         /* the last attempt failed; retrying */
    char last_error[512]; /* "" if there never was one */
} wal_backup_status;

/* Starts the worker for the store rs (owned from then on: closed by
 * wal_backup_stop); delay_ms is the stagger step.  0, or -1 with err. */
STRATA_MUST_CHECK int wal_backup_start(remote_storage *rs, uint32_t delay_ms,
                                       const wal_backup_metrics *m, wal_backup **out, char *err,
                                       size_t errlen);

/* Stops the worker (an upload in flight finishes first), frees every
 * timeline's state and closes the store.  NULL is a no-op. */
void wal_backup_stop(wal_backup *b);

/* "file:///..." or "s3://...", for messages. */
const char *wal_backup_describe(const wal_backup *b);

/* Adds a timeline whose WAL lives in dir; backup_lsn is what its control
 * file holds (0: none).  NULL if out of memory. */
wal_backup_tl *wal_backup_add(wal_backup *b, const strata_id *tenant, const strata_id *timeline,
                              const char *dir, lsn_t backup_lsn);

/* What the loop tells the worker of one timeline. */
typedef struct wal_backup_position {
    uint32_t seg_size;
    lsn_t committed;    /* min(commit_lsn, flush_lsn) */
    lsn_t oldest_local; /* start of the oldest local segment (0: none) */
    lsn_t unneeded;     /* no one needs WAL below it from the store (0: unknown) */
    uint32_t rank;      /* this safekeeper's place: it waits rank * delay_ms */
} wal_backup_position;

/* Tells the worker where the timeline's WAL stands, and wakes it when a
 * segment closed. */
void wal_backup_update(wal_backup_tl *t, const wal_backup_position *pos);

/* Copies the timeline's backup status. */
void wal_backup_get(wal_backup_tl *t, wal_backup_status *out);

/*
 * Reads segment segno of a timeline from the store for a safekeeper that
 * lags behind (catchup.c): 0 with *out (seg_size bytes, malloc'd,
 * the caller frees), 1 when the store holds no whole copy of it (with
 * need_next: of it or of the segment after it), or -1 with err.  Blocking: for a worker thread (the
 * loop's thread pool); any number may run beside the backup's own worker, but none may outlive
 * wal_backup_stop.
 */
int wal_backup_fetch(wal_backup *b, const strata_id *tenant, const strata_id *timeline,
                     uint32_t seg_size, uint64_t segno, bool need_next, uint8_t **out, char *err,
                     size_t errlen);

/* The object key of a segment: tenants/<t>/timelines/<tl>/wal/<name>. */
void wal_backup_key(const strata_id *tenant, const strata_id *timeline, uint32_t seg_size,
                    uint64_t segno, char *out, size_t cap);

#endif
