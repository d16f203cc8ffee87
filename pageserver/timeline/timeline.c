/*
 * timeline.c: one timeline's handle -- building its directory, open and
 * close, references and the teardown, and the wiring of its parts: store,
 * ingest, WAL receiver, uploader, image generation and warming (and the
 * callbacks through which those read pages), status.  See timeline.h.
 *
 * The rest of the timeline: read.c (GetPage@LSN and the other reads),
 * gc.c (retention), branch.c (branches, the commit-time index), files.c
 * (timeline.json and the GC-horizon file), timeline_reaper.c (the teardown
 * thread); timeline_priv.h holds the handle's fields they share.
 *
 * For: a timeline's life from its directory to its teardown.
 * Not for: where timelines live or how they are created and deleted as
 * directories (tenants.c), scheduling GC (tenants.c), or the network.
 */
#include "pageserver/timeline/timeline.h"
#include "pageserver/timeline/timeline_priv.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/durable.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/strata_assert.h"
#include "pg/walformat.h"
#include "pageserver/ingest/import.h"
#include "pageserver/ingest/ingest.h"
#include "pageserver/ingest/walreceiver.h"
#include "pageserver/remote/uploader.h"

#define DEFAULT_MAX_CHAIN 10000
#define IMAGE_WAIT_MS 30000     /* longest wait of an image worker for ingest */
#define IMAGE_WAIT_SLICE_MS 100 /* ... in slices, to notice the timeline closing */

/* ---- process-wide warming metrics ---- */

static struct {
    metrics_counter *rebuilds, *dropped;
} wm;
static pthread_once_t wm_once = PTHREAD_ONCE_INIT;

static void warm_metrics_init(void)
{
    metrics_registry *r = metrics_default_registry();
    wm.rebuilds = metrics_counter_register(
        r, "pageserver_page_warm_rebuilds_total",
        "Pages ingest changed that were rebuilt into the page cache in the background", 0, NULL,
        NULL);
    wm.dropped = metrics_counter_register(
        r, "pageserver_page_warm_dropped_total",
        "Changed cached pages not warmed because the set of waiting pages was full", 0, NULL, NULL);
}

/* ---- building, opening, closing ---- */

/* Makes dir's store directory and opens the (new, empty) store in it. */
static int store_create(const char *dir, const timeline_services *svc, store **out, char *err,
                        size_t errlen)
{
    char sdir[PATH_MAX];
    timeline_store_dir(dir, sdir, sizeof sdir);
    if (mkdir(sdir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create %s: %s", sdir, strerror(errno));
        return -1;
    }
    return store_open(sdir, &svc->store, out, err, errlen);
}

int timeline_build_from_pgdata(const char *dir, timeline_meta *meta, const char *pgdata,
                               const timeline_services *svc, lsn_t *out_lsn, char *err,
                               size_t errlen)
{
    store *st = NULL;
    if (store_create(dir, svc, &st, err, errlen) != 0)
        return -1;
    import_stats stats;
    lsn_t lsn = LSN_INVALID;
    int rc = import_pgdata(st, pgdata, &lsn, &stats, err, errlen);
    if (rc == 0 && store_flush(st, err, errlen) != 0)
        rc = -1;
    store_close(st);
    if (rc != 0)
        return -1;
    meta->start_lsn = lsn;
    if (timeline_meta_write(dir, meta, err, errlen) != 0)
        return -1;
    char lb[LSN_FMT_LEN];
    log_info("imported %s at %s: %llu relation forks, %llu blocks, %llu databases, %llu SLRU "
             "segments",
             pgdata, lsn_format(lsn, lb), (unsigned long long)stats.rel_forks,
             (unsigned long long)stats.blocks, (unsigned long long)stats.databases,
             (unsigned long long)stats.slru_segments);
    *out_lsn = lsn;
    return 0;
}

int timeline_build_branch(const char *dir, const timeline_meta *meta, const timeline_services *svc,
                          char *err, size_t errlen)
{
    STRATA_ASSERT(meta->has_ancestor && meta->start_lsn == meta->ancestor_lsn);
    store *st = NULL;
    if (store_create(dir, svc, &st, err, errlen) != 0)
        return -1;
    /* Nothing is copied: the empty store begins at the branch point, and
     * every read below its own versions falls through to the ancestor. */
    store_advance(st, meta->ancestor_lsn);
    int rc = store_flush(st, err, errlen);
    store_close(st);
    if (rc != 0)
        return -1;
    return timeline_meta_write(dir, meta, err, errlen);
}

lsn_t timeline_remote_consistent_lsn(timeline *tl)
{
    if (tl->up == NULL)
        return store_disk_consistent_lsn(tl->st);
    lsn_t lsn = uploader_remote_consistent_lsn(tl->up);
    /* 0 would read as "not reported" to a safekeeper, which then removes
     * WAL up to disk_consistent_lsn: before the first manifest, keep
     * everything from the timeline's start. */
    return lsn != LSN_INVALID ? lsn : tl->meta.start_lsn;
}

static lsn_t remote_lsn_for_feedback(void *arg)
{
    return timeline_remote_consistent_lsn(arg);
}

static lsn_t gc_horizon_for_upload(void *arg)
{
    return timeline_gc_horizon(arg);
}

static int start_uploader(timeline *tl, char *err, size_t errlen)
{
    if (tl->svc.remote == NULL)
        return 0;
    uploader_options o = {.rs = tl->svc.remote,
                          .st = tl->st,
                          .meta = tl->meta,
                          .gc_horizon = gc_horizon_for_upload,
                          .gc_horizon_arg = tl,
                          .backoff_max_ms = tl->svc.upload_backoff_max_ms};
    return uploader_start(&o, &tl->up, err, errlen);
}

static int start_walreceiver(timeline *tl, char *err, size_t errlen)
{
    if (tl->meta.n_safekeepers == 0)
        return 0;
    walreceiver_options o;
    walreceiver_options_default(&o);
    for (int i = 0; i < tl->meta.n_safekeepers && i < WALRECEIVER_MAX_SAFEKEEPERS; i++)
        o.safekeepers[o.n_safekeepers++] = tl->meta.safekeepers[i];
    o.tenant = tl->meta.tenant;
    o.timeline = tl->meta.timeline;
    o.start_lsn = tl->meta.start_lsn;
    o.wal_backup = tl->svc.remote;
    if (tl->svc.wr_probe_interval_ms != 0)
        o.probe_interval_ms = tl->svc.wr_probe_interval_ms;
    if (tl->svc.wr_switch_lag_bytes != 0)
        o.switch_lag_bytes = tl->svc.wr_switch_lag_bytes;
    if (tl->svc.wr_status_interval_ms != 0)
        o.status_interval_ms = tl->svc.wr_status_interval_ms;
    if (tl->up != NULL) {
        o.remote_consistent_lsn = remote_lsn_for_feedback;
        o.remote_arg = tl;
    }
    walreceiver *wr = NULL;
    if (walreceiver_start(&o, tl->st, tl->ing, &wr, err, errlen) != 0)
        return -1;
    pthread_mutex_lock(&tl->wr_mu);
    tl->wr = wr;
    pthread_mutex_unlock(&tl->wr_mu);
    return 0;
}

static void stop_walreceiver(timeline *tl)
{
    pthread_mutex_lock(&tl->wr_mu);
    walreceiver *wr = tl->wr;
    tl->wr = NULL;
    pthread_mutex_unlock(&tl->wr_mu);
    walreceiver_stop(wr);
}

/* ---- image generation (docs/design.md §6.6; the machinery is imagegen.c) ---- */

/* Worker threads: the page at the latest ingested LSN (>= min_lsn), read
 * the way a reader at that LSN would read it. */
static int image_rebuild(void *arg, const pg_key *k, lsn_t min_lsn, uint8_t out[PG_BLCKSZ],
                         lsn_t *at, char *err, size_t errlen)
{
    timeline *tl = arg;
    /* Ingest advances the store once per WAL message, so the record that
     * queued the page may not be readable yet; on a loaded machine that can
     * take seconds. */
    for (int waited = 0; store_wait_lsn(tl->st, min_lsn, IMAGE_WAIT_SLICE_MS) != 0;
         waited += IMAGE_WAIT_SLICE_MS) {
        if (timeline_is_deleted(tl) || atomic_load(&tl->closing))
            return 0;
        if (waited >= IMAGE_WAIT_MS) {
            char lb[LSN_FMT_LEN];
            snprintf(err, errlen, "ingest did not reach %s within %d ms", lsn_format(min_lsn, lb),
                     IMAGE_WAIT_MS);
            return -1;
        }
    }
    if (timeline_is_deleted(tl))
        return 0;
    lsn_t lsn = store_last_record_lsn(tl->st);
    int rc = timeline_page_exists(tl, k, lsn, err, errlen);
    if (rc <= 0)
        return rc; /* gone at lsn: reads do not need the page */
    int chain = 0;
    bool newest_complete = false;
    rc = timeline_read_page_internal(tl, k, lsn, out, &chain, &newest_complete, err, errlen);
    if (rc <= 0 || newest_complete)
        return rc < 0 ? -1 : 0;
    *at = lsn;
    return 1;
}

/* Writer thread (imagegen_drain inside ingest_record). */
static int image_put(void *arg, const pg_key *k, lsn_t lsn, const uint8_t page[PG_BLCKSZ],
                     char *err, size_t errlen)
{
    timeline *tl = arg;
    STRATA_ASSERT(lsn <= store_last_record_lsn(tl->st));
    if (store_put_image(tl->st, k, lsn, page, err, errlen) != 0)
        return -1;
    ingest_note_image(tl->ing, k);
    return 0;
}

/* Writer thread: ingest put a value of page k at lsn. */
static void page_changed(void *arg, const pg_key *k, lsn_t lsn, bool complete)
{
    timeline *tl = arg;
    if (tl->ig != NULL)
        imagegen_note(tl->ig, k, lsn, complete);
    /* A page the compute read (an older version is cached) will likely be
     * read again once the compute evicts it: have its new version ready. */
    if (tl->warm != NULL && pagecache_holds(tl->svc.cache, tl->owner, k, lsn) &&
        !pagewarm_note(tl->warm, k, lsn))
        metrics_counter_inc(wm.dropped);
}

static void image_drain(void *arg)
{
    imagegen_drain(arg);
}

static bool image_pressure_pending(void *arg)
{
    return imagegen_pressure_pending(arg);
}

/* Writer thread, between records, with everything ingested readable. */
static void image_pressure_wait(void *arg, lsn_t readable)
{
    (void)imagegen_backpressure(arg, readable, IMAGEGEN_BACKPRESSURE_TIMEOUT_MS);
}

static int start_imagegen(timeline *tl, char *err, size_t errlen)
{
    int32_t threshold = tl->svc.image_threshold;
    if (threshold == 0)
        threshold = TIMELINE_DEFAULT_IMAGE_THRESHOLD;
    if (threshold < 0 || tl->svc.redo == NULL)
        return 0; /* ingest keeps its safety net */
    imagegen_options o;
    imagegen_options_default(&o);
    o.threshold = (uint32_t)threshold;
    if (tl->svc.image_workers > 0)
        o.workers = tl->svc.image_workers;
    if (tl->svc.image_queue > 0)
        o.queue_cap = tl->svc.image_queue;
    return imagegen_create(&o, image_rebuild, image_put, tl, &tl->ig, err, errlen);
}

/* The warming thread: page k as of the newest readable LSN (>= lsn) into
 * the page cache, the way a reader there would build it. */
static int warm_page(void *arg, const pg_key *k, lsn_t lsn, char *err, size_t errlen)
{
    timeline *tl = arg;
    if (timeline_is_deleted(tl) || atomic_load(&tl->closing))
        return 1;
    lsn_t at = store_last_record_lsn(tl->st);
    if (at < lsn)
        return 0; /* ingest has not made it readable yet */
    int rc = timeline_page_exists(tl, k, at, err, errlen);
    if (rc <= 0)
        return rc < 0 ? -1 : 1; /* gone: nobody reads it */
    uint8_t page[PG_BLCKSZ];
    int chain = 0;
    bool newest_complete = false;
    if (timeline_read_page_internal(tl, k, at, page, &chain, &newest_complete, err, errlen) < 0)
        return -1;
    if (chain > 0)
        metrics_counter_inc(wm.rebuilds);
    return 1;
}

static int start_warm(timeline *tl, char *err, size_t errlen)
{
    if (tl->svc.warm_quiet_ms < 0 || tl->svc.redo == NULL || tl->svc.cache == NULL)
        return 0;
    pagewarm_options o;
    pagewarm_options_default(&o);
    if (tl->svc.warm_quiet_ms > 0)
        o.quiet_ms = (uint32_t)tl->svc.warm_quiet_ms;
    return pagewarm_create(&o, warm_page, tl, &tl->warm, err, errlen);
}

/* Image generation and warming, and the ingest hooks that feed them. */
static int start_page_services(timeline *tl, char *err, size_t errlen)
{
    if (start_imagegen(tl, err, errlen) != 0 || start_warm(tl, err, errlen) != 0)
        return -1;
    if (tl->ig == NULL && tl->warm == NULL)
        return 0;
    ingest_options io;
    ingest_options_default(&io);
    io.page_hook = page_changed;
    io.page_hook_arg = tl;
    /* The safety net stays as the backstop (see ingest.h). */
    io.image_threshold = INGEST_IMAGE_THRESHOLD;
    if (tl->ig != NULL) {
        io.record_hook = image_drain;
        io.record_hook_arg = tl->ig;
        io.pressure_pending = image_pressure_pending;
        io.pressure_wait = image_pressure_wait;
        io.pressure_hook_arg = tl->ig;
    }
    ingest_set_options(tl->ing, &io);
    return 0;
}

bool timeline_image_stats(timeline *tl, imagegen_stats *out)
{
    memset(out, 0, sizeof *out);
    if (tl->ig == NULL)
        return false;
    imagegen_get_stats(tl->ig, out);
    return true;
}

/* A branch's link to its ancestor: checks it is the one timeline.json
 * names, registers the branch point with it and takes a reference. */
static int link_ancestor(timeline *tl, timeline *ancestor, char *err, size_t errlen)
{
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN], lb[LSN_FMT_LEN];
    if (!tl->meta.has_ancestor) {
        STRATA_ASSERT(ancestor == NULL);
        return 0;
    }
    strata_id_format(&tl->meta.ancestor_timeline, b);
    if (ancestor == NULL) {
        snprintf(err, errlen,
                 "timeline %s is a branch of timeline %s at %s, which is not loaded on this "
                 "pageserver (its ancestor is missing)",
                 strata_id_format(&tl->meta.timeline, a), b, lsn_format(tl->meta.ancestor_lsn, lb));
        return -1;
    }
    const timeline_meta *am = timeline_get_meta(ancestor);
    STRATA_ASSERT(strata_id_equal(&am->timeline, &tl->meta.ancestor_timeline) &&
                  strata_id_equal(&am->tenant, &tl->meta.tenant));
    if (timeline_add_branch(ancestor, &tl->meta.timeline, tl->meta.ancestor_lsn, err, errlen) != 0)
        return -1;
    timeline_ref(ancestor);
    tl->ancestor = ancestor;
    return 0;
}

int timeline_open(const char *dir, const timeline_services *svc, uint64_t owner, timeline *ancestor,
                  timeline **out, char *err, size_t errlen)
{
    *out = NULL;
    timeline_read_metrics_init();
    timeline_gc_metrics_init();
    pthread_once(&wm_once, warm_metrics_init);
    timeline *tl = calloc(1, sizeof *tl);
    if (tl == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    atomic_init(&tl->refs, 1);
    atomic_init(&tl->deleted, false);
    atomic_init(&tl->gc_horizon, LSN_INVALID);
    atomic_init(&tl->closing, false);
    pthread_mutex_init(&tl->wr_mu, NULL);
    pthread_mutex_init(&tl->gc_mu, NULL);
    pthread_mutex_init(&tl->branch_mu, NULL);
    snprintf(tl->dir, sizeof tl->dir, "%s", dir);
    tl->svc = *svc;
    if (tl->svc.max_chain <= 0)
        tl->svc.max_chain = DEFAULT_MAX_CHAIN;
    tl->owner = owner;
    char sdir[PATH_MAX];
    timeline_store_dir(dir, sdir, sizeof sdir);
    lsn_t horizon = LSN_INVALID;
    if (timeline_meta_read(dir, &tl->meta, err, errlen) != 0 ||
        link_ancestor(tl, ancestor, err, errlen) != 0 ||
        timeline_gc_file_read(dir, &horizon, err, errlen) != 0 ||
        store_open(sdir, &svc->store, &tl->st, err, errlen) != 0)
        goto fail;
    atomic_store(&tl->gc_horizon, horizon);
    tl->ing = tl->ancestor != NULL ? timeline_branch_ingest(tl) : ingest_create(tl->st, svc->redo);
    if (tl->ing == NULL) {
        snprintf(err, errlen, "out of memory creating the ingest state");
        goto fail;
    }
    if (start_page_services(tl, err, errlen) != 0 || start_uploader(tl, err, errlen) != 0)
        goto fail;
    if (start_walreceiver(tl, err, errlen) != 0)
        goto fail;
    *out = tl;
    return 0;
fail:
    uploader_stop(tl->up);
    pagewarm_destroy(tl->warm);
    imagegen_destroy(tl->ig);
    if (tl->ing != NULL)
        ingest_destroy(tl->ing);
    if (tl->st != NULL)
        store_close(tl->st);
    /* The branch point stays registered: a branch on disk that failed to
     * open must still find its versions in the ancestor once it opens
     * (creation removes it itself when it gives up, tenants.c). */
    if (tl->ancestor != NULL)
        timeline_unref(tl->ancestor);
    pthread_mutex_destroy(&tl->wr_mu);
    pthread_mutex_destroy(&tl->gc_mu);
    pthread_mutex_destroy(&tl->branch_mu);
    free(tl->branches);
    free(tl);
    return -1;
}

void timeline_ref(timeline *tl)
{
    int before = atomic_fetch_add(&tl->refs, 1);
    STRATA_ASSERT(before > 0);
}

void timeline_unref(timeline *tl)
{
    int before = atomic_fetch_sub(&tl->refs, 1);
    STRATA_ASSERT(before > 0);
    if (before != 1)
        return;
    if (tl->svc.reaper != NULL)
        timeline_reaper_take(tl->svc.reaper, tl);
    else
        timeline_destroy(tl);
}

void timeline_destroy(timeline *tl)
{
    STRATA_ASSERT(atomic_load(&tl->refs) == 0);
    bool deleted = atomic_load(&tl->deleted);
    stop_walreceiver(tl);
    atomic_store(&tl->closing, true);
    pagewarm_destroy(tl->warm);
    tl->warm = NULL;
    imagegen_destroy(tl->ig);
    tl->ig = NULL;
    if (!deleted) {
        char err[256];
        if (store_flush(tl->st, err, sizeof err) != 0)
            log_error("timeline %s: flush at close failed: %s", tl->dir, err);
    }
    /* After the last flush: nothing commits a data file any more.  What
     * is not uploaded yet is uploaded at the next start. */
    uploader_stop(tl->up);
    tl->up = NULL;
    if (deleted && tl->svc.on_deleted != NULL)
        tl->svc.on_deleted(tl->svc.on_deleted_arg, &tl->meta, tl->dir);
    ingest_destroy(tl->ing);
    store_close(tl->st);
    if (deleted) {
        /* Only logged, nothing to retry: what a crash may bring back is
         * normally the ".deleting" directory, which the next start removes
         * (tenants.c). */
        int rc = durable_remove_tree(tl->dir);
        if (rc != 0)
            log_warn("removing %s: %s", tl->dir, strerror(-rc));
        log_info("removed deleted timeline directory %s", tl->dir);
    }
    if (tl->ancestor != NULL) {
        /* Released only now when the branch was not deleted: a closing
         * pageserver keeps the parent's horizon where it was. */
        if (deleted)
            timeline_remove_branch(tl->ancestor, &tl->meta.timeline);
        timeline_unref(tl->ancestor);
    }
    pthread_mutex_destroy(&tl->wr_mu);
    pthread_mutex_destroy(&tl->gc_mu);
    pthread_mutex_destroy(&tl->branch_mu);
    free(tl->branches);
    free(tl);
}

void timeline_mark_deleted(timeline *tl, const char *dir_now)
{
    atomic_store(&tl->deleted, true);
    stop_walreceiver(tl);
    /* Deleting a branch releases the versions its ancestor kept for it. */
    if (tl->ancestor != NULL)
        timeline_remove_branch(tl->ancestor, &tl->meta.timeline);
    if (dir_now != NULL)
        snprintf(tl->dir, sizeof tl->dir, "%s", dir_now);
}

bool timeline_is_deleted(const timeline *tl)
{
    return atomic_load(&((timeline *)tl)->deleted);
}

const timeline_meta *timeline_get_meta(const timeline *tl)
{
    return &tl->meta;
}

timeline *timeline_ancestor(const timeline *tl)
{
    return tl->ancestor;
}

const char *timeline_dir(const timeline *tl)
{
    return tl->dir;
}

lsn_t timeline_last_record_lsn(const timeline *tl)
{
    /* A branch reads its ancestor at the branch point: until the ancestor
     * has ingested that far again (after a crash it reopens at its
     * disk_consistent_lsn; restored from object storage, at the manifest's
     * LSN), nothing of the branch is readable, and waiters wait. */
    if (tl->ancestor != NULL && timeline_last_record_lsn(tl->ancestor) < tl->meta.ancestor_lsn)
        return LSN_INVALID;
    return store_last_record_lsn(tl->st);
}

lsn_t timeline_disk_consistent_lsn(const timeline *tl)
{
    return store_disk_consistent_lsn(tl->st);
}

int timeline_wait_lsn(timeline *tl, lsn_t lsn, uint32_t timeout_ms)
{
    if (timeline_is_deleted(tl))
        return -1;
    /* A branch first waits for its ancestors to reach its branch point. */
    if (tl->ancestor != NULL && timeline_last_record_lsn(tl->ancestor) < tl->meta.ancestor_lsn &&
        timeline_wait_lsn(tl->ancestor, tl->meta.ancestor_lsn, timeout_ms) != 0)
        return -1;
    return store_wait_lsn(tl->st, wal_lsn_before_page_header(lsn, WAL_SEG_SIZE_DEFAULT),
                          timeout_ms);
}

void timeline_get_status(timeline *tl, timeline_status *out)
{
    memset(out, 0, sizeof *out);
    out->last_record_lsn = store_last_record_lsn(tl->st);
    out->disk_consistent_lsn = store_disk_consistent_lsn(tl->st);
    out->start_lsn = tl->meta.start_lsn;
    store_get_stats(tl->st, &out->store);
    out->remote = tl->up != NULL;
    if (tl->up != NULL)
        uploader_get_status(tl->up, &out->upload);
    else
        out->upload.remote_consistent_lsn = out->disk_consistent_lsn;
    pthread_mutex_lock(&tl->wr_mu);
    if (tl->wr != NULL) {
        walreceiver_status_info wi;
        walreceiver_status(tl->wr, &wi);
        out->walreceiver_running = wi.running;
        out->walreceiver_connected = wi.connected;
        out->upstream_lsn = wi.upstream_lsn;
        out->walreceiver_errors = wi.errors;
        out->walreceiver_probe_errors = wi.probe_errors;
        out->walreceiver_switches = wi.switches;
        out->walreceiver_backup_segments = wi.backup_segments;
        out->walreceiver_connects = wi.connects;
        out->walreceiver_error_time = wi.last_error_time;
        snprintf(out->walreceiver_error, sizeof out->walreceiver_error, "%s", wi.last_error);
        if (wi.connected && wi.safekeeper >= 0 && wi.safekeeper < tl->meta.n_safekeepers)
            snprintf(out->walreceiver_safekeeper, sizeof out->walreceiver_safekeeper, "%s",
                     tl->meta.safekeepers[wi.safekeeper]);
    }
    pthread_mutex_unlock(&tl->wr_mu);
    out->gc_horizon = atomic_load(&tl->gc_horizon);
    pthread_mutex_lock(&tl->gc_mu);
    out->gc_runs = tl->gc_runs;
    out->gc_removed = tl->gc_removed;
    out->gc_last_run_time = tl->gc_last_run_time;
    snprintf(out->gc_last_error, sizeof out->gc_last_error, "%s", tl->gc_last_error);
    pthread_mutex_unlock(&tl->gc_mu);
    if (out->upstream_lsn > out->last_record_lsn)
        out->ingest_lag_bytes = out->upstream_lsn - out->last_record_lsn;
}
