/*
 * restore.h: a timeline rebuilt from object storage (docs/storage.md,
 * docs/operations.md "Recovering a lost pageserver volume").
 *
 * For: finding the timelines an object store holds (those with at least one
 * manifest), and building one timeline's directory from its newest
 * manifest: every data file downloaded (eagerly, with progress; there is no
 * on-demand download), sizes checked, the store's index rebuilt from the
 * files (store_rebuild), the upload state (manifest seq, consistent LSN)
 * recorded so the uploader never reuses a seq, timeline.json and the GC
 * horizon written from the manifest.  The caller (tenants.c) builds in the
 * timeline's ".creating" directory and renames it into place, so a crash
 * mid-restore leaves nothing that looks like a timeline.
 * Not for: uploading (uploader.h), the manifest format (manifest.h), serving
 * reads while a restore runs (tenants.h, page_service.c wait).
 *
 * Threads: blocking (the remote store and the disk); one worker thread per
 * restore.  The progress counters may be read from any thread.
 */
#ifndef STRATA_PAGESERVER_REMOTE_RESTORE_H
#define STRATA_PAGESERVER_REMOTE_RESTORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "base/must_check.h"
#include "net/remote_storage.h"
#include "pageserver/store/store.h"

/* Where one restore is; written by the restoring thread, read by any. */
typedef struct restore_progress {
    _Atomic uint64_t files_done, files_total;
    _Atomic uint64_t bytes_done, bytes_total;
    _Atomic lsn_t consistent_lsn; /* of the manifest, once fetched */
    _Atomic uint64_t seq;         /* the manifest's seq, once fetched */
    _Atomic int64_t started_ms;   /* CLOCK_MONOTONIC */
    _Atomic bool cancel;          /* set by another thread: stop between files */
    /* Called (on the restoring thread) after each downloaded file; may be NULL. */
    void (*on_progress)(void *arg);
    void *progress_arg;
} restore_progress;

typedef struct restore_timeline_id {
    strata_id tenant, timeline;
} restore_timeline_id;

/* Every (tenant, timeline) with a key under tenants/<t>/timelines/<l>/manifest/,
 * in key order (malloc'd; free(*out)).  0 or -1 with err. */
STRATA_MUST_CHECK int restore_list_timelines(remote_storage *rs, restore_timeline_id **out,
                                             size_t *n, char *err, size_t errlen);

/*
 * Builds the timeline directory dir (exists, empty) from the newest
 * manifest of (tenant, timeline): dir/store/data/<id>.dat for every file,
 * each checked against the manifest's size, then store_rebuild at the
 * manifest's consistent_lsn and next_file_id (so with so's options), the
 * remote state (consistent_lsn, seq) in the store, and timeline.json +
 * gc_horizon.  Logs progress (files n/m, bytes, MB/s).  *out_lsn is the
 * consistent LSN the timeline resumes WAL from.  0, or -1 with err (the
 * caller removes dir).
 */
STRATA_MUST_CHECK int restore_timeline(remote_storage *rs, const strata_id *tenant,
                                       const strata_id *timeline, const char *dir,
                                       const store_options *so, restore_progress *p, lsn_t *out_lsn,
                                       char *err, size_t errlen);

/*
 * Deletes a deleted timeline's pageserver objects from the store: every
 * manifest first (from then on the timeline does not exist remotely, so no
 * later start restores it), then every data object, then the safekeepers'
 * WAL backup (wal/): with the timeline gone no one reads it, and the
 * safekeepers delete only below the pageserver's positions, so it would
 * stay for ever.  (A safekeeper that still serves the timeline may put a
 * segment after this; deleting the timeline on the safekeepers too ends
 * that.)  Called once the
 * timeline's uploader has stopped (tenants.c, from the teardown of a
 * deleted timeline: timeline_services.on_deleted).  0, or -1 with err (the caller logs it; a
 * timeline whose manifests remain comes back at the next start).
 */
STRATA_MUST_CHECK int restore_forget_timeline(remote_storage *rs, const strata_id *tenant,
                                              const strata_id *timeline, char *err, size_t errlen);

#endif
