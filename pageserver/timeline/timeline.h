/*
 * timeline.h: one timeline of the pageserver -- its store, its ingest and
 * WAL receiver, waiting for an LSN, and page reads (store versions + redo +
 * page cache) answering the questions of the page service and the HTTP API.
 *
 * For: everything one timeline knows, behind one handle.  A timeline lives
 * in a directory (see tenants.h for where) whose files files.h describes:
 * timeline.json (timeline_meta), the GC-horizon file and store/.
 *
 * Branches (docs/storage.md): a timeline may be a copy-on-write child of another
 * timeline of the same tenant (its ancestor) at an LSN (the branch point,
 * = its start_lsn).  Creating one copies nothing: the child starts with an
 * empty store whose last_record_lsn is the branch point.  Every read of the
 * child at LSN L takes the key's versions from the child's own store (all
 * above the branch point) and, below them, from the ancestor at
 * min(L, ancestor_lsn) -- recursively for a branch of a branch.  A chain of
 * own deltas without an own image is replayed on top of the ancestor's page
 * at the branch point, read through the ancestor's own read path (its page
 * cache and redo).  Scans (relation lists, sizes, basebackup listings) merge
 * the child's keys over the ancestor's: an own tombstone hides the
 * ancestor's value.  The child holds a reference to its ancestor for its
 * whole life, and the ancestor's GC horizon never rises above the lowest
 * branch point of its live children (timeline_add_branch).
 * Not for: the set of timelines, creating or deleting their directories
 * (tenants.h), the network (page_service.h, http_api.h).
 *
 * Reads follow docs/design.md §3.4 and §6.4: a relation fork exists at LSN L iff its
 * newest KEY_REL_SIZE value at or below L is a size; a block at or past the
 * size, or below it with no version, reads as an all-zero page (the gap of
 * an extension); a block of a fork that does not exist is an error.
 *
 * Threads: every read function may be called from any number of threads at
 * once (the store's readers never block each other; the page cache is
 * sharded).  The one writer of the store is the WAL receiver's thread, or the
 * caller of timeline_import_* before the receiver starts.  Lifetime is
 * reference counted: timeline_ref()/timeline_unref() from any thread; the
 * last unref stops the receiver, flushes and closes the store, and, when the
 * timeline was marked deleted, calls svc.on_deleted (the tenants table
 * deletes its objects from the remote store there) and removes its
 * directory -- on the reaper's thread when svc.reaper is set
 * (timeline_reaper_start), so that an event loop dropping a reference never
 * waits for any of it.
 *
 * Errors: functions that can fail return -1 (or a negative code below) with
 * a message naming the key, LSN and cause in err, and a SQLSTATE in
 * *sqlstate when that argument is not NULL.  Every read at an LSN below the
 * GC horizon fails (55000), also when GC raised the horizon while the read
 * was running (the horizon is checked again after the read).
 */
#ifndef STRATA_PAGESERVER_TIMELINE_H
#define STRATA_PAGESERVER_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "pageserver/redo/imagegen.h"
#include "pageserver/store/key.h"
#include "pageserver/cache/pagecache.h"
#include "pageserver/redo/redo.h"
#include "pageserver/remote/upload_status.h"
#include "pageserver/store/store.h"
#include "pageserver/timeline/files.h"

#define TIMELINE_LSN_SAMPLES 256 /* (time, LSN) samples kept per timeline */

/*
 * Retention (docs/design.md §6.7): the PITR window.  The GC horizon is the oldest LSN
 * that must stay readable:
 *   by bytes:   last_record_lsn - pitr_window_bytes
 *   by time:    the LSN ingested pitr_window_seconds ago (from the timeline's
 *               ring of (time, last_record_lsn) samples; the newest sample at
 *               least that old, so the horizon errs on the side of keeping)
 * With both windows set the lower horizon wins (keep what either asks for);
 * with neither, there is no GC.  The horizon never exceeds
 * disk_consistent_lsn, never goes below start_lsn, and never moves back.
 */
typedef struct timeline_gc_policy {
    uint64_t pitr_window_bytes;   /* 0: no byte window */
    uint32_t pitr_window_seconds; /* 0: no time window */
} timeline_gc_policy;

/* Services every timeline shares; owned by the daemon, outlive timelines. */
typedef struct timeline_services {
    redo_pool *redo;     /* NULL: a page needing redo fails with a clear error */
    pagecache *cache;    /* NULL: no caching */
    int max_chain;       /* longest version chain one read may replay [10000] */
    store_options store; /* options every store opens with */
    timeline_gc_policy gc;
    /* WAL receiver knobs (0: walreceiver.h defaults). */
    uint32_t wr_probe_interval_ms;
    uint64_t wr_switch_lag_bytes;
    uint32_t wr_status_interval_ms;
    /* Image generation (docs/design.md §6.6, imagegen.h): image_threshold > 0 is the
     * threshold, 0 means TIMELINE_DEFAULT_IMAGE_THRESHOLD, < 0 turns
     * background generation off (ingest's synchronous safety net at
     * INGEST_IMAGE_THRESHOLD, the backstop either way, then is the only
     * bound).  Without a redo pool it is off too.  image_workers 0: IMAGEGEN_DEFAULT_WORKERS;
     * image_queue 0: the imagegen default. */
    int32_t image_threshold;
    /* A read that replays at least this many deltas stores the page it
     * rebuilt as an image (imagegen_offer), so the next read of that page
     * starts there; needs background generation on.  0:
     * TIMELINE_DEFAULT_IMAGE_READ_THRESHOLD, < 0 off. */
    int32_t image_read_threshold;
    int image_workers;
    uint32_t image_queue;
    /* Warming (pagewarm.h): a page ingest changes while the page cache
     * holds an older version of it is rebuilt into the cache once it was
     * quiet this long.  0: PAGEWARM_DEFAULT_QUIET_MS; < 0 off.  Off without
     * a redo pool or a cache. */
    int32_t warm_quiet_ms;
    /* Object storage (pageserver/remote/uploader.h): NULL, no
     * upload and remote_consistent_lsn = disk_consistent_lsn (the local
     * disk is the only copy).  Else every timeline uploads its data files
     * and manifests there, and the WAL receiver reads WAL the safekeepers
     * removed from their WAL backup there. */
    struct remote_storage *remote;
    uint32_t upload_backoff_max_ms; /* 0: the uploader's default */
    /* NULL: the last timeline_unref tears the timeline down on the calling
     * thread.  Else on this reaper's thread (below). */
    struct timeline_reaper *reaper;
    /* Called by the teardown of a timeline marked deleted, after its
     * uploader stopped and before its store closes and its directory goes,
     * on the thread that runs the teardown; NULL: nothing.  The tenants
     * table deletes the timeline's objects from the remote store here
     * (tenants.c), so that the next start does not restore it. */
    void (*on_deleted)(void *arg, const timeline_meta *meta, const char *dir);
    void *on_deleted_arg;
} timeline_services;

/* Background generation images every page, read or not, that gathers this
 * many deltas; reads image what they rebuild past
 * TIMELINE_DEFAULT_IMAGE_READ_THRESHOLD.  Why these values: docs/benchmarks.md
 * ("Image threshold" and "Images for pages nobody reads"). */
#define TIMELINE_DEFAULT_IMAGE_THRESHOLD 128
#define TIMELINE_DEFAULT_IMAGE_READ_THRESHOLD 16

typedef struct timeline timeline;

/*
 * Builds a timeline's directory contents in dir (which exists and is empty):
 * opens a store, imports pgdata into it (import.h), writes timeline.json
 * with start_lsn = the import LSN, flushes and closes.  The caller renames
 * dir into place (tenants.h).  *out_lsn is the import LSN.  0 or -1 with err.
 */
int timeline_build_from_pgdata(const char *dir, timeline_meta *meta, const char *pgdata,
                               const timeline_services *svc, lsn_t *out_lsn, char *err,
                               size_t errlen);

/*
 * Builds a branch's directory contents in dir (which exists and is empty):
 * an empty store whose last_record_lsn and disk_consistent_lsn are
 * meta->ancestor_lsn, and timeline.json from meta (has_ancestor set,
 * start_lsn == ancestor_lsn).  Constant time: nothing of the ancestor is
 * copied.  0 or -1 with err.
 */
int timeline_build_branch(const char *dir, const timeline_meta *meta, const timeline_services *svc,
                          char *err, size_t errlen);

/*
 * Opens the timeline in dir (store reopens at its disk_consistent_lsn) and,
 * if it names safekeepers, starts its WAL receiver from
 * max(disk_consistent_lsn, start_lsn).  owner is the page-cache owner
 * number, unique per timeline instance.  The handle starts with one
 * reference.  A branch needs its ancestor open: ancestor must be the
 * timeline its timeline.json names (the child takes a reference and
 * registers its branch point with it, timeline_add_branch); a root takes
 * NULL.  0 or -1 with err.
 */
int timeline_open(const char *dir, const timeline_services *svc, uint64_t owner, timeline *ancestor,
                  timeline **out, char *err, size_t errlen);

/* ---- teardown off the caller's thread ----
 * A reaper owns one thread that runs the teardown of every timeline whose
 * last reference was dropped (in that order).  timeline_reaper_stop waits
 * until every timeline handed to it is torn down, then frees it: call it
 * only once no timeline opened with it is left (every last reference
 * dropped; the timelines' stores are then flushed and closed).  0 or -1
 * with err. */
typedef struct timeline_reaper timeline_reaper;
int timeline_reaper_start(timeline_reaper **out, char *err, size_t errlen);
void timeline_reaper_stop(timeline_reaper *r);

/* The ancestor of a branch (borrowed: the child holds a reference), or NULL. */
timeline *timeline_ancestor(const timeline *tl);

void timeline_ref(timeline *tl);
void timeline_unref(timeline *tl);

/* Marks the timeline deleted: reads fail from now on with SQLSTATE 58P01,
 * the WAL receiver stops now, and the last unref removes the directory
 * (which the caller may have renamed first: dir is updated). */
void timeline_mark_deleted(timeline *tl, const char *dir_now);
bool timeline_is_deleted(const timeline *tl);

const timeline_meta *timeline_get_meta(const timeline *tl);
const char *timeline_dir(const timeline *tl);

lsn_t timeline_last_record_lsn(const timeline *tl);
lsn_t timeline_disk_consistent_lsn(const timeline *tl);
/* What the safekeepers are told the remote store holds: the newest durable
 * manifest's consistent_lsn (start_lsn before the first one), or
 * disk_consistent_lsn without a remote store.  Any thread. */
lsn_t timeline_remote_consistent_lsn(timeline *tl);

/* last_record_lsn is the store's, except on a branch whose ancestors have
 * not ingested up to its branch point (again, after a crash or a restore):
 * LSN_INVALID until they have, so every reader waits for them. */

/* Waits until last_record_lsn >= lsn, at most timeout_ms (per ancestor
 * level a branch waits for): 0, or -1 on timeout (or when the timeline is
 * deleted meanwhile). */
int timeline_wait_lsn(timeline *tl, lsn_t lsn, uint32_t timeout_ms);

/* Image generation counters of this timeline; false (and *out zeroed) when
 * background image generation is off for it.  Any thread. */
bool timeline_image_stats(timeline *tl, imagegen_stats *out);

/* Status for HTTP and metrics: receiver state and the store's counters. */
typedef struct timeline_status {
    lsn_t last_record_lsn;
    lsn_t disk_consistent_lsn;
    lsn_t start_lsn;
    bool walreceiver_running; /* a receiver thread exists and has not failed */
    bool walreceiver_connected;
    lsn_t upstream_lsn;        /* the safekeeper's commit LSN as last seen */
    uint64_t ingest_lag_bytes; /* upstream_lsn - last_record_lsn, 0 if none */
    uint64_t walreceiver_errors;
    uint64_t walreceiver_probe_errors;
    uint64_t walreceiver_switches;
    uint64_t walreceiver_backup_segments; /* WAL segments read from the safekeepers' backup */
    uint64_t walreceiver_connects;
    int64_t walreceiver_error_time; /* Unix seconds of the last error, 0 none */
    char walreceiver_error[256];    /* "" once streaming works again */
    char walreceiver_safekeeper[TIMELINE_SAFEKEEPER_LEN]; /* streaming from, "" none */
    lsn_t gc_horizon;         /* reads below it fail; LSN_INVALID before any GC */
    uint64_t gc_runs;         /* GC passes run on this timeline (this process) */
    uint64_t gc_removed;      /* values they removed */
    int64_t gc_last_run_time; /* Unix seconds, 0 never */
    char gc_last_error[256];  /* "" if the last pass succeeded */
    store_stats store;
    bool remote;            /* an uploader runs (timeline_services.remote) */
    uploader_status upload; /* its status; without one, remote_consistent_lsn is disk's */
} timeline_status;
void timeline_get_status(timeline *tl, timeline_status *out);

/* ---- retention and GC (docs/design.md §6.7) ---- */

/* The GC horizon: reads at a lower LSN fail with "requested LSN X is below
 * the GC horizon Y of this timeline" (SQLSTATE 55000).  Any thread. */
lsn_t timeline_gc_horizon(const timeline *tl);

/* Records a (now_ms, last_record_lsn) sample in the timeline's bounded ring
 * (at most one per max(1 s, window / 128), so the ring spans two windows).
 * now_ms is CLOCK_MONOTONIC milliseconds (the same clock for every call).
 * One thread (the GC thread). */
void timeline_sample_lsn(timeline *tl, int64_t now_ms);

/* The horizon the policy asks for now (not yet applied); LSN_INVALID when
 * the policy allows no GC yet.  Any thread. */
lsn_t timeline_gc_target(timeline *tl, int64_t now_ms);

/*
 * One GC pass: computes the target; if it is above the current horizon,
 * writes it durably to TIMELINE_GC_FILE, publishes it (reads below now
 * fail), then runs store_gc() at it (small LMDB transactions: reads and
 * ingest go on).  Returns values removed (0 when the horizon did not move),
 * or -1 with err.  One thread at a time (the GC thread).
 */
long timeline_gc(timeline *tl, int64_t now_ms, char *err, size_t errlen);

/*
 * Branch points.  timeline_add_branch registers child's branch
 * point lsn with parent, atomically with a check that lsn is not below
 * parent's GC horizon (GC publishes a new horizon under the same lock): from
 * then on parent's horizon never rises above the lowest registered branch
 * point.  -1 with err (the readable window) when lsn is below the horizon.
 * Registering the same child again updates it.  timeline_remove_branch
 * drops it (no-op when absent): deleting a branch releases what it kept.
 */
int timeline_add_branch(timeline *parent, const strata_id *child, lsn_t lsn, char *err,
                        size_t errlen);
void timeline_remove_branch(timeline *parent, const strata_id *child);
/* The lowest registered branch point, or LSN_MAX without branches. */
lsn_t timeline_min_branch_lsn(timeline *tl);

/* The window a branch may be created in: [max(GC horizon, start_lsn),
 * last_record_lsn].  Any thread. */
void timeline_readable_window(timeline *tl, lsn_t *lo, lsn_t *hi);

/* Process-wide GC counters (for tests and the HTTP API). */
typedef struct timeline_gc_stats {
    uint64_t runs, removed, failures;
} timeline_gc_stats;
void timeline_get_gc_stats(timeline_gc_stats *out);

/* ---- reads (any thread; lsn is the effective read LSN) ---- */

/* 1 exists with *nblocks, 0 does not exist, -1 error. */
int timeline_rel_size(timeline *tl, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork,
                      lsn_t lsn, uint32_t *nblocks, char *err, size_t errlen,
                      const char **sqlstate);

/* The page of a relation block at lsn.  0 or -1 (58P01 when the fork does
 * not exist, XX000 otherwise).  *chain, if not NULL, is the number of
 * versions replayed (0 for a cached or stored image). */
int timeline_get_rel_page(timeline *tl, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork,
                          uint32_t blk, lsn_t lsn, uint8_t out[PG_BLCKSZ], int *chain, char *err,
                          size_t errlen, const char **sqlstate);

/* timeline_get_rel_page() without redo and without blocking on anything but
 * the store's read (for answering on a network loop thread): 0 with the page
 * in out when the newest version at lsn is an image or zero page, is in the
 * page cache, or the block has no version or is past the size; 1 when the
 * page needs redo (call timeline_get_rel_page()); -1 with err and *sqlstate
 * as timeline_get_rel_page() would fail.  Counts the read in the read stats
 * only when it returns 0 or -1. */
int timeline_get_rel_page_noredo(timeline *tl, uint32_t spc, uint32_t db, uint32_t rel,
                                 uint8_t fork, uint32_t blk, lsn_t lsn, uint8_t out[PG_BLCKSZ],
                                 char *err, size_t errlen, const char **sqlstate);

/* Sum of the sizes of the database's relation forks at lsn, in bytes (init
 * forks left out: a compute keeps those in local files). */
int timeline_db_size(timeline *tl, uint32_t db, lsn_t lsn, int64_t *bytes, char *err, size_t errlen,
                     const char **sqlstate);

/* The same for the relations of one tablespace (every database), plus how
 * many relations (MAIN forks, empty ones included) it holds: DROP TABLESPACE
 * refuses while that is not 0. */
int timeline_spc_size(timeline *tl, uint32_t spc, lsn_t lsn, int64_t *bytes, uint32_t *relations,
                      char *err, size_t errlen, const char **sqlstate);

/* An SLRU segment's pages at lsn (at most max_blocks, else an error):
 * out gets *nblocks * PG_BLCKSZ bytes.  58P01 when the segment does not
 * exist. */
int timeline_get_slru_segment(timeline *tl, uint8_t kind, uint32_t segno, lsn_t lsn, uint8_t *out,
                              uint32_t max_blocks, uint32_t *nblocks, char *err, size_t errlen,
                              const char **sqlstate);

/* Calls fn for every relation fork that exists at lsn, in key order; fn
 * returns non-zero to stop.  0 or -1. */
typedef int (*timeline_rel_fn)(uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork,
                               uint32_t nblocks, void *arg);
int timeline_list_rels(timeline *tl, lsn_t lsn, timeline_rel_fn fn, void *arg, char *err,
                       size_t errlen);

/* The newest value of k at or below lsn, falling through to the ancestors
 * below the branch point (store_get_latest's contract).  No GC horizon
 * check: for ingest, basebackup listings and the commit-time index. */
int timeline_get_latest(timeline *tl, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found_lsn,
                        char *err, size_t errlen);

/* store_scan's contract over the timeline and its ancestors: the child's
 * keys win over the ancestor's (a tombstone too). */
int timeline_scan(timeline *tl, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
                  void *arg, char *err, size_t errlen);

/* ---- the commit-time index (KEY_CHECKPOINT_REL_COMMIT_TIME, key.h) ---- */

/* Postgres timestamps: microseconds since 2000-01-01 00:00:00 UTC. */
typedef int64_t pg_timestamp;

/* Parses "2026-12-02 05:00:00+00", "2026-12-02T05:00:00Z",
 * "2026-12-02 05:00:00.25+05:30" (ISO 8601 / RFC 3339; fractional seconds
 * up to microseconds; zone Z, +HH, +HHMM or +HH:MM; none = UTC; a date alone
 * is midnight).  False on anything else. */
bool timeline_parse_time(const char *s, pg_timestamp *out);
/* "2026-12-02 05:00:00.123456+00" (fraction only when not 0). */
char *timeline_format_time(pg_timestamp t, char *buf, size_t len);

/*
 * The end LSN of the last commit record with commit time <= t on tl (or,
 * below its branch point, its ancestors): 0 with *lsn, *commit_time and
 * *latest = false; when t is at or after the newest commit, *lsn is the
 * last_record_lsn and *latest = true (*commit_time that commit's time, or
 * -1 without any).  -1 with err and *status: 400 when t is before the first
 * commit the window holds (the message names the window as times and LSNs).
 */
int timeline_lsn_by_time(timeline *tl, pg_timestamp t, lsn_t *lsn, pg_timestamp *commit_time,
                         bool *latest, int *status, char *err, size_t errlen);

/* Read counters (process-wide, all timelines). */
typedef struct timeline_read_stats {
    uint64_t pages_read;
    uint64_t cache_hits;
    uint64_t cache_misses;
    uint64_t images_read;  /* newest version was complete: no redo */
    uint64_t redo_reads;   /* pages built by redo */
    uint64_t zero_pages;   /* blocks with no version, or past the size */
    uint64_t max_chain;    /* longest chain replayed */
    uint64_t cached_bases; /* replays that started from an older cached version */
} timeline_read_stats;
void timeline_get_read_stats(timeline_read_stats *out);

#endif
