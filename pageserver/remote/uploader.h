/*
 * uploader.h: one timeline's upload to object storage
 * (docs/storage.md, "Remote storage").
 *
 * For: a thread per timeline that copies every committed data file of the
 * store to the remote store, then publishes a manifest (manifest.h) naming
 * the files of one LMDB snapshot and the disk_consistent_lsn they make
 * consistent; remote_consistent_lsn is that LSN, persisted in the store's
 * LMDB metadata and what the WAL receiver reports to the safekeepers.  Then
 * remote GC: old manifests and the data objects no kept manifest names.
 * Not for: restoring from the remote store, WAL backup (the safekeepers).
 *
 * Ordering (each step is a crash point, failpoint names in uploader.c):
 *   1. upload every live data file of a snapshot not yet uploaded; take a
 *      new snapshot until one lists only uploaded files;
 *   2. PUT manifest seq+1 under a new key (a seq is never reused, also
 *      across crashes: the start lists the manifests and continues above
 *      the highest);
 *   3. persist (remote_consistent_lsn, seq) in LMDB, publish the LSN;
 *   4. delete manifests older than the newest two, then data objects that
 *      neither of them names and that are not live locally.
 * At start, a sweep deletes data objects named by no manifest and not live
 * locally (what a crash between 1 and 2, or in 4, left).
 *
 * Failures: every remote call that fails is retried with exponential
 * backoff, forever; ingest and reads never wait for the uploader.  A state
 * change (failing, recovered) is logged once, not every retry; the last
 * error stays in the status.
 *
 * Threads: uploader_start spawns the thread; uploader_notify (the store's
 * commit hook) and uploader_get_status/uploader_remote_consistent_lsn may
 * be called from any thread; uploader_stop from one thread, once, while the
 * store is still open.
 */
#ifndef STRATA_PAGESERVER_REMOTE_UPLOADER_H
#define STRATA_PAGESERVER_REMOTE_UPLOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "base/must_check.h"
#include "net/remote_storage.h"
#include "pageserver/remote/upload_status.h"
#include "pageserver/store/store.h"
#include "pageserver/timeline/files.h"

typedef struct uploader uploader;

typedef struct uploader_options {
    remote_storage *rs; /* shared, outlives the uploader */
    store *st;          /* the timeline's store, outlives the uploader */
    timeline_meta meta; /* ids, start_lsn, safekeepers (copied into manifests) */
    /* The timeline's persisted GC horizon now (any thread). */
    lsn_t (*gc_horizon)(void *arg);
    void *gc_horizon_arg;
    uint32_t backoff_min_ms; /* first retry after a failure [500] */
    uint32_t backoff_max_ms; /* ... doubling up to this [5000] */
    uint32_t idle_check_ms;  /* look for a moved disk_consistent_lsn this often [5000] */
} uploader_options;

/* Starts the thread; the store's commit hook is pointed at it.  0 or -1. */
STRATA_MUST_CHECK int uploader_start(const uploader_options *o, uploader **out, char *err,
                                     size_t errlen);
/* Stops the thread (after its current remote call) and frees.  NULL is fine. */
void uploader_stop(uploader *u);

/* A data file was committed: look again soon. */
void uploader_notify(uploader *u);

/* The consistent_lsn of the newest manifest known durable (from LMDB at
 * start, then from each PUT that returned); 0 before any. */
lsn_t uploader_remote_consistent_lsn(uploader *u);

void uploader_get_status(uploader *u, uploader_status *out);

#endif
