/*
 * wal_store.h: one timeline's WAL on a safekeeper's disk.
 *
 * WAL lives in segment files of seg_size bytes (the timeline's
 * wal_seg_size), named as Postgres names them for timeline 1
 * ("%08X%08X%08X"); the segment being written ends in ".partial" until it is
 * complete and synced.  A new segment is created zero-filled under a
 * temporary name, fsynced and renamed into place, so fdatasync never changes
 * a file's size.
 *
 * Writes are asynchronous (common/net/uring.h) and issued as appends arrive.
 * Group commit: at most one sync round (fdatasync of every segment touched)
 * is in flight; when it completes the store reports, through on_flushed,
 * the LSN whose writes had all completed before that round started, and if
 * more was written meanwhile it starts the next round at once.  No timers.
 *
 * What this is not: it knows nothing about WAL records, terms or commit;
 * the caller decides which flushed LSN is a record boundary and what may be
 * sent.  Reads use pread and are synchronous.
 *
 * New segments: with cfg->loop, wal_store_prepare zero-fills a missing
 * segment on libuv's thread pool (a 1 GB segment takes seconds; the loop
 * must keep serving every other timeline meanwhile) and calls
 * on_segment_ready on the loop thread when it is in place.  A store without
 * a loop, or an append that was not prepared, creates it synchronously.
 *
 * Threading: everything runs on the loop thread that owns the uring, except
 * the zero-filling of a segment, which touches only its own file.
 * Callbacks run from ring completions and must not close the store.
 * Errors: functions return 0 / a count or a negative errno.  A failed write
 * or fdatasync is fatal for the store (as in Postgres, a failed fsync cannot
 * be retried safely): on_error runs once and later calls fail with -EIO.
 *
 * For: a timeline's WAL segment files.  Not for: deciding what to write or
 * remove (acceptor.c, housekeeping.c).
 */
#ifndef STRATA_SAFEKEEPER_WAL_STORE_H
#define STRATA_SAFEKEEPER_WAL_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "net/uring.h"

typedef struct wal_store wal_store;

/* flushed_lsn: everything below it is on disk.  sync_usec: how long the
 * sync round took (for the latency histogram). */
typedef void (*wal_store_flushed_fn)(void *arg, lsn_t flushed_lsn, uint64_t sync_usec);
/* err: negative errno of the failed write or sync. */
typedef void (*wal_store_error_fn)(void *arg, int err);
/* written_lsn: every write below it has completed (not yet durable). */
typedef void (*wal_store_written_fn)(void *arg, lsn_t written_lsn);
/* A segment wal_store_prepare started is in place (err 0), or its creation
 * failed (err a negative errno; on_error ran first and the store failed). */
typedef void (*wal_store_segment_fn)(void *arg, int err);

typedef struct wal_store_config {
    const char *dir;   /* the timeline directory (exists); copied */
    uint32_t seg_size; /* power of two, 64 KB .. 1 GB */
    uring *ring;       /* shared, not owned */
    wal_store_flushed_fn on_flushed;
    wal_store_error_fn on_error;
    wal_store_written_fn on_written; /* may be NULL */
    /* With both: wal_store_prepare creates segments off the loop thread. */
    uv_loop_t *loop;
    wal_store_segment_fn on_segment_ready;
    void *arg;
    /* false: the store starts a sync round by itself whenever writes have
     * completed and none is running.  true: the caller decides when, with
     * wal_store_sync_begin (the acceptor core drives group commit). */
    bool caller_syncs;
    /* With caller_syncs: appended writes wait for the next sync round and
     * go to the kernel with it, each segment's writes linked ahead of its
     * fdatasync in one submission (one completion for the lot).  A round
     * then covers everything appended (wal_store_write_lsn), not only what
     * has completed; wal_store_submit_writes sends waiting writes alone. */
    bool link_writes;
} wal_store_config;

typedef struct wal_store_stats {
    uint64_t appends;
    uint64_t bytes_written;
    uint64_t sync_rounds;
    uint64_t fdatasyncs;
    uint64_t segments_created;
    uint64_t segments_removed;
    unsigned max_syncs_in_flight; /* the group-commit invariant: stays <= 1 */
} wal_store_stats;

/*
 * Opens the store over the segments already in cfg->dir.  The write
 * position is unknown (0) until wal_store_truncate sets it: a restart first
 * reads to find the true end of WAL, then truncates there.
 */
int wal_store_open(const wal_store_config *cfg, wal_store **out);

/* Closes files and frees.  In-flight IO refers to the store: close it only
 * when wal_store_idle() or after uring_close() drained the ring (in the same
 * loop iteration: the ring's memory lives until the loop runs again).  A
 * segment still being zero-filled finishes on its own, unreported. */
void wal_store_close(wal_store *ws);

/*
 * Makes sure every segment [lsn, lsn+len) touches exists and is open, so
 * that an append there never creates one on the caller's thread.  0: they
 * are; 1: a missing one is being zero-filled on the thread pool (call again
 * after on_segment_ready); a negative errno on failure.  Without a loop in
 * the config, always 0 (the append creates).
 */
int wal_store_prepare(wal_store *ws, lsn_t lsn, size_t len);

/*
 * Appends len bytes at lsn, which must equal wal_store_write_lsn() (else
 * -EINVAL).  Data is copied; the write is issued now (or queued if the ring
 * is full) and covered by a following sync round.  Returns 0 or a negative
 * errno (-EIO after a failure, -ENOMEM, or a segment-creation error).
 * A segment wal_store_prepare did not make is created synchronously.
 */
int wal_store_append(wal_store *ws, lsn_t lsn, const void *data, size_t len);

/*
 * Makes lsn the end of WAL: zeroes the rest of its segment, removes later
 * segments, renames its segment back to ".partial" if needed, all durably
 * (fdatasync + directory fsync) before returning.  Requires the store to be
 * idle (-EBUSY otherwise).  Sets write and flush positions to lsn.
 */
int wal_store_truncate(wal_store *ws, lsn_t lsn);

/*
 * caller_syncs mode: starts one sync round covering every completed write
 * (with link_writes: every appended write; those not yet written are
 * written first, and on_flushed still reports only what is durable).
 * Returns 0 and sets *covers to the LSN on_flushed will report; 1 if there is
 * nothing to sync (everything written is already durable, *covers set, no
 * callback follows); -EBUSY if a round is running; -EIO after a failure.
 */
int wal_store_sync_begin(wal_store *ws, lsn_t *covers);

/*
 * link_writes mode: sends every write still waiting for a round to the
 * kernel now, on its own (a caller that needs wal_store_written_lsn() to
 * reach wal_store_write_lsn(), e.g. before a vote's flush or a truncation).
 * 0 or a negative errno.
 */
int wal_store_submit_writes(wal_store *ws);

/*
 * Synchronous fdatasync of every segment with completed writes (for a vote,
 * which must not wait behind the group-commit round).  Afterwards
 * wal_store_flush_lsn() >= the written position.  0 or a negative errno.
 */
int wal_store_flush_now(wal_store *ws);

/* Every write below it has completed. */
lsn_t wal_store_written_lsn(const wal_store *ws);

/*
 * Reads up to len bytes at lsn, never across a segment boundary.  Returns
 * bytes read (0 if the segment ends there), -ENOENT if the segment does not
 * exist (removed, or never written).  Reads whatever is on disk: callers
 * limit themselves to what they know was written.
 */
ssize_t wal_store_read(wal_store *ws, lsn_t lsn, void *buf, size_t len);

/*
 * fsyncs every existing segment from the one holding from to the one holding
 * to, then the directory.  A restart calls it on what it scanned: a killed
 * process's writes may be in the page cache only, and must be durable before
 * they are reported flushed (as Postgres's SyncDataDirectory does).
 */
int wal_store_sync_range(wal_store *ws, lsn_t from, lsn_t to);

/* Start LSN of the highest-numbered segment on disk; LSN_INVALID if none. */
lsn_t wal_store_newest_segment_lsn(wal_store *ws);

/* Deletes every segment wholly below the segment holding horizon (never
 * that one).  Returns the number of segments removed or a negative errno. */
int wal_store_remove_below(wal_store *ws, lsn_t horizon);

/* The lowest LSN still held on disk (start of the oldest segment), or 0 if
 * there is none. */
lsn_t wal_store_oldest_lsn(const wal_store *ws);

/* End of the data accepted by wal_store_append (maybe not yet written). */
lsn_t wal_store_write_lsn(const wal_store *ws);
/* Everything below is durable. */
lsn_t wal_store_flush_lsn(const wal_store *ws);
/* No write or sync round queued or in flight (truncate is allowed). */
bool wal_store_idle(const wal_store *ws);
/* Bytes accepted but not yet durable (for input backpressure). */
uint64_t wal_store_unflushed_bytes(const wal_store *ws);
const wal_store_stats *wal_store_get_stats(const wal_store *ws);

/* Segment file name for segno (timeline 1) into buf (>= 25 bytes). */
void wal_store_segment_name(uint32_t seg_size, uint64_t segno, char *buf);

#endif
