/*
 * timeline.c: one timeline -- store, ingest, WAL receiver, and the page
 * read path (page cache -> store versions -> redo).  See timeline.h.
 *
 * Retention: timeline_gc() raises the GC horizon (persisted in
 * TIMELINE_GC_FILE before any value below it is removed, so a restart never
 * serves a read GC made wrong) and runs store_gc() at it.  Readers check
 * the horizon before and after reading: GC publishes the new horizon before
 * deleting, so a read that overlapped a deletion sees the new horizon on
 * its second check and fails instead of returning a page built from a
 * partial chain.
 *
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
#include <time.h>

#include "base/byteorder.h"
#include "base/clock.h"
#include "base/durable.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/sqlstate.h"
#include "base/strata_assert.h"
#include "base/walformat.h"
#include "pageserver/ingest/import.h"
#include "pageserver/ingest/ingest.h"
#include "pageserver/ingest/walreceiver.h"
#include "pageserver/remote/uploader.h"

#define DEFAULT_MAX_CHAIN 10000
#define IMAGE_WAIT_MS 30000     /* longest wait of an image worker for ingest */
#define IMAGE_WAIT_SLICE_MS 100 /* ... in slices, to notice the timeline closing */

#define GC_SQLSTATE SQLSTATE_OBJECT_NOT_IN_PREREQUISITE_STATE

/* ---- process-wide read metrics ---- */

static const double chain_bounds[] = {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
static const double redo_bounds[] = {50e-6, 100e-6, 250e-6, 500e-6, 1e-3,   2.5e-3, 5e-3,
                                     10e-3, 25e-3,  50e-3,  100e-3, 250e-3, 1,      10};

static struct {
    pthread_once_t once;
    metrics_counter *cache_hits, *cache_misses, *images, *redo_reads, *zero_pages, *pages;
    metrics_counter *cached_bases, *warm_rebuilds, *warm_dropped;
    metrics_histogram *chain, *redo_seconds;
    metrics_gauge *chain_max;
    atomic_uint_fast64_t max_chain;
    metrics_counter *gc_runs, *gc_removed, *gc_failures, *gc_refused;
} rm = {.once = PTHREAD_ONCE_INIT};

static void read_metrics_init(void)
{
    metrics_registry *r = metrics_default_registry();
    rm.pages =
        metrics_counter_register(r, "pageserver_pages_read_total",
                                 "Relation and SLRU pages materialised for readers", 0, NULL, NULL);
    rm.cache_hits =
        metrics_counter_register(r, "pageserver_page_cache_hits_total",
                                 "Page reads answered by the page cache", 0, NULL, NULL);
    rm.cache_misses = metrics_counter_register(
        r, "pageserver_page_cache_misses_total",
        "Page reads that needed redo and were not in the page cache", 0, NULL, NULL);
    rm.images = metrics_counter_register(r, "pageserver_page_images_read_total",
                                         "Page reads whose newest version was a complete image", 0,
                                         NULL, NULL);
    rm.redo_reads =
        metrics_counter_register(r, "pageserver_page_redo_reads_total",
                                 "Page reads built by applying WAL (redo)", 0, NULL, NULL);
    rm.cached_bases = metrics_counter_register(
        r, "pageserver_redo_cached_base_total",
        "Page reads whose replay started from an older version in the page cache", 0, NULL, NULL);
    rm.warm_rebuilds = metrics_counter_register(
        r, "pageserver_page_warm_rebuilds_total",
        "Pages ingest changed that were rebuilt into the page cache in the background", 0, NULL,
        NULL);
    rm.warm_dropped = metrics_counter_register(
        r, "pageserver_page_warm_dropped_total",
        "Changed cached pages not warmed because the set of waiting pages was full", 0, NULL, NULL);
    rm.zero_pages = metrics_counter_register(
        r, "pageserver_zero_pages_read_total",
        "Page reads of blocks with no version or past the relation size (all-zero pages)", 0, NULL,
        NULL);
    rm.chain = metrics_histogram_register(
        r, "pageserver_chain_length", "Versions replayed to build one page (0: image or cache)",
        chain_bounds, (int)(sizeof chain_bounds / sizeof chain_bounds[0]), 0, NULL, NULL);
    rm.redo_seconds = metrics_histogram_register(
        r, "pageserver_read_redo_seconds",
        "Time a page read spent in WAL redo (waiting for a helper and replaying)", redo_bounds,
        (int)(sizeof redo_bounds / sizeof redo_bounds[0]), 0, NULL, NULL);
    rm.chain_max =
        metrics_gauge_register(r, "pageserver_chain_length_max",
                               "Longest version chain replayed since start", 0, NULL, NULL);
    rm.gc_runs = metrics_counter_register(
        r, "pageserver_gc_runs_total", "GC passes that moved a timeline's horizon", 0, NULL, NULL);
    rm.gc_removed = metrics_counter_register(r, "pageserver_gc_values_removed_total",
                                             "Values removed by GC (all timelines)", 0, NULL, NULL);
    rm.gc_failures = metrics_counter_register(r, "pageserver_gc_failures_total",
                                              "GC passes that failed", 0, NULL, NULL);
    rm.gc_refused = metrics_counter_register(
        r, "pageserver_gc_horizon_refusals_total",
        "Reads refused because their LSN is below the timeline's GC horizon", 0, NULL, NULL);
}

static void read_metrics(void)
{
    pthread_once(&rm.once, read_metrics_init);
    imagegen_metrics_init();
}

static void observe_chain(int n)
{
    metrics_histogram_observe(rm.chain, n);
    uint_fast64_t cur = atomic_load(&rm.max_chain);
    while ((uint64_t)n > cur && !atomic_compare_exchange_weak(&rm.max_chain, &cur, (uint64_t)n))
        ;
    if ((uint64_t)n > cur)
        metrics_gauge_set(rm.chain_max, n);
    imagegen_observe_read_chain(n);
}

void timeline_get_gc_stats(timeline_gc_stats *out)
{
    read_metrics();
    out->runs = metrics_counter_value(rm.gc_runs);
    out->removed = metrics_counter_value(rm.gc_removed);
    out->failures = metrics_counter_value(rm.gc_failures);
}

void timeline_get_read_stats(timeline_read_stats *out)
{
    read_metrics();
    out->pages_read = metrics_counter_value(rm.pages);
    out->cache_hits = metrics_counter_value(rm.cache_hits);
    out->cache_misses = metrics_counter_value(rm.cache_misses);
    out->images_read = metrics_counter_value(rm.images);
    out->redo_reads = metrics_counter_value(rm.redo_reads);
    out->zero_pages = metrics_counter_value(rm.zero_pages);
    out->max_chain = atomic_load(&rm.max_chain);
    out->cached_bases = metrics_counter_value(rm.cached_bases);
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

static int read_size(timeline *tl, const pg_key *k, lsn_t lsn, uint32_t *nblocks, char *err,
                     size_t errlen);
static int read_page(timeline *tl, const pg_key *k, lsn_t lsn, uint8_t out[PG_BLCKSZ], int *chain,
                     bool *newest_complete, char *err, size_t errlen);

/* Whether page k (a relation or SLRU block) lies within its relation's or
 * SLRU's size at lsn: 1 yes, 0 no (or another kind of key), -1 error. */
static int page_exists(timeline *tl, const pg_key *k, lsn_t lsn, char *err, size_t errlen)
{
    pg_key sk;
    if (k->kind == KEY_REL_BLOCK)
        sk = pg_key_rel_size(k->spc, k->db, k->rel, k->fork);
    else if (k->kind == KEY_SLRU_BLOCK)
        sk = (pg_key){.kind = KEY_SLRU_SIZE, .fork = k->fork, .rel = k->rel};
    else
        return 0;
    uint32_t nblocks = 0;
    int rc = read_size(tl, &sk, lsn, &nblocks, err, errlen);
    return rc < 0 ? -1 : rc > 0 && k->blk < nblocks;
}

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
    int rc = page_exists(tl, k, lsn, err, errlen);
    if (rc <= 0)
        return rc; /* gone at lsn: reads do not need the page */
    int chain = 0;
    bool newest_complete = false;
    rc = read_page(tl, k, lsn, out, &chain, &newest_complete, err, errlen);
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
        metrics_counter_inc(rm.warm_dropped);
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
    int rc = page_exists(tl, k, at, err, errlen);
    if (rc <= 0)
        return rc < 0 ? -1 : 1; /* gone: nobody reads it */
    uint8_t page[PG_BLCKSZ];
    int chain = 0;
    bool newest_complete = false;
    if (read_page(tl, k, at, page, &chain, &newest_complete, err, errlen) < 0)
        return -1;
    if (chain > 0)
        metrics_counter_inc(rm.warm_rebuilds);
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
    read_metrics();
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

/* ---- retention and GC ---- */

lsn_t timeline_gc_horizon(const timeline *tl)
{
    return atomic_load(&((timeline *)tl)->gc_horizon);
}

static int64_t sample_spacing_ms(const timeline *tl)
{
    int64_t spacing = (int64_t)tl->svc.gc.pitr_window_seconds * 1000 / (TIMELINE_LSN_SAMPLES / 2);
    return spacing < 1000 ? 1000 : spacing;
}

void timeline_sample_lsn(timeline *tl, int64_t now_ms)
{
    lsn_t lsn = store_last_record_lsn(tl->st);
    pthread_mutex_lock(&tl->gc_mu);
    int newest = (tl->sample_head + TIMELINE_LSN_SAMPLES - 1) % TIMELINE_LSN_SAMPLES;
    if (tl->nsamples == 0 || now_ms - tl->samples[newest].ms >= sample_spacing_ms(tl)) {
        tl->samples[tl->sample_head].ms = now_ms;
        tl->samples[tl->sample_head].lsn = lsn;
        tl->sample_head = (tl->sample_head + 1) % TIMELINE_LSN_SAMPLES;
        if (tl->nsamples < TIMELINE_LSN_SAMPLES)
            tl->nsamples++;
    }
    pthread_mutex_unlock(&tl->gc_mu);
}

/* The LSN ingested at or before now_ms - window: the newest sample at least
 * that old; LSN_INVALID if no sample is that old yet. */
static lsn_t time_horizon(timeline *tl, int64_t now_ms)
{
    int64_t cutoff = now_ms - (int64_t)tl->svc.gc.pitr_window_seconds * 1000;
    lsn_t found = LSN_INVALID;
    pthread_mutex_lock(&tl->gc_mu);
    for (int i = 0; i < tl->nsamples; i++) {
        int idx = (tl->sample_head + TIMELINE_LSN_SAMPLES - 1 - i) % TIMELINE_LSN_SAMPLES;
        if (tl->samples[idx].ms <= cutoff) {
            found = tl->samples[idx].lsn;
            break;
        }
    }
    pthread_mutex_unlock(&tl->gc_mu);
    return found;
}

lsn_t timeline_gc_target(timeline *tl, int64_t now_ms)
{
    const timeline_gc_policy *g = &tl->svc.gc;
    if (g->pitr_window_bytes == 0 && g->pitr_window_seconds == 0)
        return LSN_INVALID;
    lsn_t last = store_last_record_lsn(tl->st);
    lsn_t target = LSN_MAX;
    if (g->pitr_window_bytes != 0)
        target = last > g->pitr_window_bytes ? last - g->pitr_window_bytes : LSN_INVALID;
    if (g->pitr_window_seconds != 0) {
        lsn_t t = time_horizon(tl, now_ms);
        if (t < target)
            target = t;
    }
    lsn_t disk = store_disk_consistent_lsn(tl->st);
    if (target > disk)
        target = disk;
    /* Every version a branch can read stays (issue #15). */
    lsn_t cap = timeline_min_branch_lsn(tl);
    if (target > cap)
        target = cap;
    if (target <= tl->meta.start_lsn)
        return LSN_INVALID;
    return target;
}

long timeline_gc(timeline *tl, int64_t now_ms, char *err, size_t errlen)
{
    read_metrics();
    if (timeline_is_deleted(tl))
        return 0;
    lsn_t target = timeline_gc_target(tl, now_ms);
    lsn_t cur = atomic_load(&tl->gc_horizon);
    if (target == LSN_INVALID || target <= cur)
        return 0;
    long removed = -1;
    /* Published under branch_mu: a branch registered meanwhile
     * (timeline_add_branch) either saw the old horizon and caps this one,
     * or sees the new one and is refused. */
    pthread_mutex_lock(&tl->branch_mu);
    for (int i = 0; i < tl->nbranches; i++)
        if (tl->branches[i].lsn < target)
            target = tl->branches[i].lsn;
    bool moves = target > cur;
    /* Durable first: after a crash the horizon still covers what GC removed. */
    int wrc = moves ? timeline_gc_file_write(tl->dir, target, err, errlen) : 0;
    if (moves && wrc == 0)
        atomic_store(&tl->gc_horizon, target);
    pthread_mutex_unlock(&tl->branch_mu);
    if (!moves)
        return 0;
    if (wrc == 0)
        removed = store_gc(tl->st, target, err, errlen);
    pthread_mutex_lock(&tl->gc_mu);
    tl->gc_last_run_time = (int64_t)time(NULL);
    if (removed >= 0) {
        tl->gc_runs++;
        tl->gc_removed += (uint64_t)removed;
        tl->gc_last_error[0] = '\0';
    } else {
        snprintf(tl->gc_last_error, sizeof tl->gc_last_error, "%s", err);
    }
    pthread_mutex_unlock(&tl->gc_mu);
    char lb[LSN_FMT_LEN];
    if (removed < 0) {
        metrics_counter_inc(rm.gc_failures);
        log_error("timeline %s: GC at %s failed: %s", tl->dir, lsn_format(target, lb), err);
        return -1;
    }
    metrics_counter_inc(rm.gc_runs);
    metrics_counter_add(rm.gc_removed, (uint64_t)removed);
    log_info("timeline %s: GC horizon %s, %ld values removed", tl->dir, lsn_format(target, lb),
             removed);
    return removed;
}

/* -1 with the GC error when lsn is below the horizon, else 0. */
static int check_horizon(timeline *tl, lsn_t lsn, char *err, size_t errlen, const char **sqlstate)
{
    lsn_t h = atomic_load(&tl->gc_horizon);
    if (lsn >= h && (tl->ancestor == NULL || lsn >= tl->meta.start_lsn))
        return 0;
    char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
    if (lsn >= h) {
        char id[STRATA_ID_HEX_LEN];
        snprintf(err, errlen,
                 "requested LSN %s is below the start %s of this timeline (a branch of timeline "
                 "%s: read the ancestor below it)",
                 lsn_format(lsn, a), lsn_format(tl->meta.start_lsn, b),
                 strata_id_format(&tl->meta.ancestor_timeline, id));
        if (sqlstate != NULL)
            *sqlstate = GC_SQLSTATE;
        return -1;
    }
    snprintf(err, errlen, "requested LSN %s is below the GC horizon %s of this timeline",
             lsn_format(lsn, a), lsn_format(h, b));
    if (sqlstate != NULL)
        *sqlstate = GC_SQLSTATE;
    metrics_counter_inc(rm.gc_refused);
    return -1;
}

/* ---- reads ---- */

static int deleted_error(const timeline *tl, char *err, size_t errlen, const char **sqlstate)
{
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    snprintf(err, errlen, "tenant %s timeline %s was deleted",
             strata_id_format(&tl->meta.tenant, t), strata_id_format(&tl->meta.timeline, l));
    if (sqlstate != NULL)
        *sqlstate = SQLSTATE_UNDEFINED_FILE;
    return -1;
}

/* Size of a KEY_REL_SIZE or KEY_SLRU_SIZE key at lsn: 1, 0 (absent or
 * tombstone) or -1. */
static int read_size(timeline *tl, const pg_key *k, lsn_t lsn, uint32_t *nblocks, char *err,
                     size_t errlen)
{
    value_ref v;
    lsn_t found;
    int rc = timeline_get_latest(tl, k, lsn, &v, &found, err, errlen);
    if (rc <= 0)
        return rc;
    int result;
    if (v.kind == VAL_SIZE && v.len == 4) {
        *nblocks = get_be32(v.payload);
        result = 1;
    } else if (v.kind == VAL_TOMBSTONE) {
        result = 0;
    } else {
        char kb[96];
        snprintf(err, errlen, "%s holds value kind %u where a size belongs",
                 pg_key_format(k, kb, sizeof kb), v.kind);
        result = -1;
    }
    free((void *)v.payload);
    return result;
}

int timeline_rel_size(timeline *tl, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork,
                      lsn_t lsn, uint32_t *nblocks, char *err, size_t errlen, const char **sqlstate)
{
    if (timeline_is_deleted(tl))
        return deleted_error(tl, err, errlen, sqlstate);
    if (check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
        return -1;
    pg_key k = pg_key_rel_size(spc, db, rel, fork);
    *nblocks = 0;
    int rc = read_size(tl, &k, lsn, nblocks, err, errlen);
    if (rc < 0 && sqlstate != NULL)
        *sqlstate = SQLSTATE_INTERNAL_ERROR;
    if (rc >= 0 && check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
        return -1;
    return rc;
}

static int read_page(timeline *tl, const pg_key *k, lsn_t lsn, uint8_t out[PG_BLCKSZ], int *chain,
                     bool *newest_complete, char *err, size_t errlen);

/*
 * A branch's own deltas of k at lsn (vl, no complete value) bottom out on
 * the ancestor's page at the branch point, read through the ancestor's own
 * read path (its page cache, its redo, its ancestors).  *merged gets vl's
 * versions plus that page as an image at the branch point (*base_page, the
 * caller frees it and merged's arrays); *base_page stays NULL when the
 * ancestor has no version either (vl is replayed as it is, as on a root).
 */
static int with_ancestor_base(timeline *tl, const pg_key *k, lsn_t lsn, const version_list *vl,
                              version_list *merged, uint8_t **base_page, char *err, size_t errlen)
{
    lsn_t at = lsn < tl->meta.ancestor_lsn ? lsn : tl->meta.ancestor_lsn;
    STRATA_ASSERT(vl->n > 0 && vl->lsn[vl->n - 1] > at);
    uint8_t *page = malloc(PG_BLCKSZ);
    if (page == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int chain = 0;
    bool complete;
    int rc = read_page(tl->ancestor, k, at, page, &chain, &complete, err, errlen);
    if (rc <= 0) {
        free(page);
        return rc;
    }
    merged->n = vl->n + 1;
    merged->lsn = malloc(sizeof *merged->lsn * (size_t)merged->n);
    merged->value = malloc(sizeof *merged->value * (size_t)merged->n);
    if (merged->lsn == NULL || merged->value == NULL) {
        free(merged->lsn);
        free(merged->value);
        free(page);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(merged->lsn, vl->lsn, sizeof *vl->lsn * (size_t)vl->n);
    memcpy(merged->value, vl->value, sizeof *vl->value * (size_t)vl->n);
    merged->lsn[vl->n] = at;
    merged->value[vl->n] = (value_ref){.kind = VAL_IMAGE, .len = PG_BLCKSZ, .payload = page};
    merged->complete = true;
    *base_page = page;
    return 0;
}

/*
 * When the page cache holds an older version of the chain vl (newest
 * first), makes it the chain's base: it is copied into base, the value at
 * its index i becomes an image pointing there (the value it replaced goes
 * to *saved), and the chain ends there, complete.  Returns i, or -1 when no
 * version of the chain is cached and vl is untouched.  The caller puts
 * *saved back and restores n and complete before version_list_free.
 * Replaying the versions above i from that image builds the same page as
 * the whole chain would: the cached page is what a read at lsn[i] returned.
 */
static int cached_base(timeline *tl, const pg_key *k, version_list *vl, uint8_t base[PG_BLCKSZ],
                       value_ref *saved)
{
    lsn_t at;
    if (tl->svc.cache == NULL || vl->n < 2 ||
        !pagecache_lookup_older(tl->svc.cache, tl->owner, k, vl->lsn[0], &at, base))
        return -1;
    for (int i = 1; i < vl->n; i++) {
        if (vl->lsn[i] != at)
            continue;
        *saved = vl->value[i];
        vl->value[i] = (value_ref){.kind = VAL_IMAGE, .len = PG_BLCKSZ, .payload = base};
        vl->n = i + 1;
        vl->complete = true;
        metrics_counter_inc(rm.cached_bases);
        return i;
    }
    return -1; /* cached at an LSN the chain does not hold (a branch's ancestor) */
}

/*
 * The page of k at lsn into out: 1 built, 0 no version at or below lsn, -1
 * error.  *chain is the number of versions replayed.  On a branch, a key
 * without own versions at lsn reads as the ancestor's at the branch point.
 */
static int read_page(timeline *tl, const pg_key *k, lsn_t lsn, uint8_t out[PG_BLCKSZ], int *chain,
                     bool *newest_complete, char *err, size_t errlen)
{
    char kb[96], lb[LSN_FMT_LEN];
    value_ref v;
    lsn_t found;
    *chain = 0;
    *newest_complete = false;
    int rc = store_get_latest(tl->st, k, lsn, &v, &found, err, errlen);
    if (rc == 0 && tl->ancestor != NULL) /* no own version: the ancestor's page */
        return read_page(tl->ancestor, k, lsn < tl->meta.ancestor_lsn ? lsn : tl->meta.ancestor_lsn,
                         out, chain, newest_complete, err, errlen);
    if (rc <= 0)
        return rc;
    uint8_t kind = v.kind;
    bool image_ok = kind == VAL_IMAGE && v.len == PG_BLCKSZ;
    if (image_ok)
        memcpy(out, v.payload, PG_BLCKSZ);
    free((void *)v.payload);
    if (image_ok || kind == VAL_ZERO_PAGE) {
        if (kind == VAL_ZERO_PAGE)
            memset(out, 0, PG_BLCKSZ);
        *newest_complete = true;
        metrics_counter_inc(rm.images);
        return 1;
    }
    if (kind == VAL_IMAGE || kind == VAL_SIZE || kind == VAL_TOMBSTONE || kind == VAL_BLOB) {
        snprintf(err, errlen, "%s at %s holds value kind %u, not a page version",
                 pg_key_format(k, kb, sizeof kb), lsn_format(found, lb), kind);
        return -1;
    }
    if (tl->svc.cache != NULL && pagecache_lookup(tl->svc.cache, tl->owner, k, found, out)) {
        metrics_counter_inc(rm.cache_hits);
        return 1;
    }
    metrics_counter_inc(rm.cache_misses);
    version_list *vl = NULL;
    if (store_get_versions(tl->st, k, lsn, tl->svc.max_chain, &vl, err, errlen) != 0)
        return -1;
    if (vl->n == 0) {
        version_list_free(vl);
        return 0;
    }
    if (tl->svc.redo == NULL) {
        snprintf(err, errlen,
                 "%s at %s needs WAL redo but no redo pool is configured (set --pg-bindir to the "
                 "patched Postgres build's bin directory)",
                 pg_key_format(k, kb, sizeof kb), lsn_format(vl->lsn[0], lb));
        version_list_free(vl);
        return -1;
    }
    uint8_t *base_page = NULL;
    version_list merged;
    version_list full = *vl; /* what to give back to version_list_free */
    value_ref cut_value;
    uint8_t cached[PG_BLCKSZ];
    int cut = cached_base(tl, k, vl, cached, &cut_value);
    if (!vl->complete && tl->ancestor != NULL &&
        with_ancestor_base(tl, k, lsn, vl, &merged, &base_page, err, errlen) != 0) {
        version_list_free(vl);
        return -1;
    }
    uint64_t redo_start = clock_mono_ns();
    rc = redo_apply(tl->svc.redo, k, base_page != NULL ? &merged : vl, out, err, errlen);
    metrics_histogram_observe(rm.redo_seconds, (double)(clock_mono_ns() - redo_start) / 1e9);
    if (base_page != NULL) {
        /* The ancestor's page was the base: every own version was replayed. */
        if (rc == 0)
            *chain = vl->n;
        free(merged.lsn);
        free(merged.value);
        free(base_page);
        if (rc == 0) {
            metrics_counter_inc(rm.redo_reads);
            if (tl->svc.cache != NULL)
                pagecache_insert(tl->svc.cache, tl->owner, k, vl->lsn[0], out);
        }
        version_list_free(vl);
        return rc == 0 ? 1 : -1;
    }
    if (rc == 0) {
        /* Deltas replayed: every version but a base image. */
        const value_ref *oldest = &vl->value[vl->n - 1];
        bool base = oldest->kind == VAL_IMAGE || oldest->kind == VAL_ZERO_PAGE;
        *chain = vl->n - (base ? 1 : 0);
        metrics_counter_inc(rm.redo_reads);
        if (tl->svc.cache != NULL)
            pagecache_insert(tl->svc.cache, tl->owner, k, vl->lsn[0], out);
    }
    if (cut >= 0) {
        vl->value[cut] = cut_value;
        *vl = full;
    }
    version_list_free(vl);
    return rc == 0 ? 1 : -1;
}

/* A read that replayed a long chain hands the page it rebuilt to image
 * generation: the next read of that page starts from it. */
static void offer_if_long(timeline *tl, const pg_key *k, lsn_t lsn, const uint8_t page[PG_BLCKSZ],
                          int chain)
{
    int32_t min = tl->svc.image_read_threshold;
    if (min == 0)
        min = TIMELINE_DEFAULT_IMAGE_READ_THRESHOLD;
    /* Below start_lsn a branch reads its ancestor's pages: not its own to store. */
    if (tl->ig == NULL || min < 0 || chain < min || lsn < tl->meta.start_lsn ||
        lsn > store_last_record_lsn(tl->st))
        return;
    imagegen_offer(tl->ig, k, lsn, page);
}

int timeline_get_rel_page(timeline *tl, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork,
                          uint32_t blk, lsn_t lsn, uint8_t out[PG_BLCKSZ], int *chain, char *err,
                          size_t errlen, const char **sqlstate)
{
    int dummy;
    if (chain == NULL)
        chain = &dummy;
    *chain = 0;
    if (timeline_is_deleted(tl))
        return deleted_error(tl, err, errlen, sqlstate);
    uint32_t nblocks = 0;
    int rc = timeline_rel_size(tl, spc, db, rel, fork, lsn, &nblocks, err, errlen, sqlstate);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        char lb[LSN_FMT_LEN];
        snprintf(err, errlen, "relation %u/%u/%u fork %u does not exist at LSN %s", spc, db, rel,
                 fork, lsn_format(lsn, lb));
        if (sqlstate != NULL)
            *sqlstate = SQLSTATE_UNDEFINED_FILE;
        return -1;
    }
    metrics_counter_inc(rm.pages);
    if (blk >= nblocks) {
        memset(out, 0, PG_BLCKSZ);
        metrics_counter_inc(rm.zero_pages);
        return 0;
    }
    pg_key k = pg_key_rel_block(spc, db, rel, fork, blk);
    bool newest_complete;
    rc = read_page(tl, &k, lsn, out, chain, &newest_complete, err, errlen);
    if (rc < 0) {
        if (sqlstate != NULL)
            *sqlstate = SQLSTATE_INTERNAL_ERROR;
        return -1;
    }
    if (rc == 0) {
        memset(out, 0, PG_BLCKSZ);
        metrics_counter_inc(rm.zero_pages);
    }
    if (check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
        return -1;
    observe_chain(*chain);
    if (rc > 0)
        offer_if_long(tl, &k, lsn, out, *chain);
    return 0;
}

/* Keys [from, to) covering every KEY_REL_SIZE key. */
static void rel_size_range(pg_key *from, pg_key *to)
{
    memset(from, 0, sizeof *from);
    memset(to, 0, sizeof *to);
    from->kind = KEY_REL_SIZE;
    to->kind = KEY_DB;
}

typedef struct storage_size_arg {
    bool by_spc; /* sum one tablespace (spc) rather than one database (db) */
    uint32_t spc;
    uint32_t db;
    uint64_t blocks;
    uint32_t relations; /* MAIN forks seen, empty ones included */
} storage_size_arg;

/* Init forks are left out: a compute keeps an unlogged relation (its init
 * fork and the main fork made from it) in local files and adds those itself. */
static int add_storage_size(const pg_key *k, lsn_t lsn, const value_ref *v, void *arg)
{
    (void)lsn;
    storage_size_arg *a = arg;
    if (k->kind != KEY_REL_SIZE || v->kind != VAL_SIZE || v->len != 4 || k->fork == FORK_INIT)
        return 0;
    if (a->by_spc ? k->spc != a->spc : k->db != a->db)
        return 0;
    a->blocks += get_be32(v->payload);
    if (k->fork == FORK_MAIN)
        a->relations++;
    return 0;
}

static int storage_size(timeline *tl, storage_size_arg *a, lsn_t lsn, char *err, size_t errlen,
                        const char **sqlstate)
{
    if (timeline_is_deleted(tl))
        return deleted_error(tl, err, errlen, sqlstate);
    if (check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
        return -1;
    pg_key from, to;
    rel_size_range(&from, &to);
    if (timeline_scan(tl, &from, &to, lsn, add_storage_size, a, err, errlen) != 0) {
        if (sqlstate != NULL)
            *sqlstate = SQLSTATE_INTERNAL_ERROR;
        return -1;
    }
    return check_horizon(tl, lsn, err, errlen, sqlstate) != 0 ? -1 : 0;
}

int timeline_db_size(timeline *tl, uint32_t db, lsn_t lsn, int64_t *bytes, char *err, size_t errlen,
                     const char **sqlstate)
{
    storage_size_arg a = {.db = db};
    if (storage_size(tl, &a, lsn, err, errlen, sqlstate) != 0)
        return -1;
    *bytes = (int64_t)(a.blocks * PG_BLCKSZ);
    return 0;
}

int timeline_spc_size(timeline *tl, uint32_t spc, lsn_t lsn, int64_t *bytes, uint32_t *relations,
                      char *err, size_t errlen, const char **sqlstate)
{
    storage_size_arg a = {.by_spc = true, .spc = spc};
    if (storage_size(tl, &a, lsn, err, errlen, sqlstate) != 0)
        return -1;
    *bytes = (int64_t)(a.blocks * PG_BLCKSZ);
    *relations = a.relations;
    return 0;
}

int timeline_get_slru_segment(timeline *tl, uint8_t kind, uint32_t segno, lsn_t lsn, uint8_t *out,
                              uint32_t max_blocks, uint32_t *nblocks, char *err, size_t errlen,
                              const char **sqlstate)
{
    if (timeline_is_deleted(tl))
        return deleted_error(tl, err, errlen, sqlstate);
    if (check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
        return -1;
    char lb[LSN_FMT_LEN];
    pg_key sk = {.kind = KEY_SLRU_SIZE, .fork = kind, .rel = segno};
    uint32_t n = 0;
    int rc = read_size(tl, &sk, lsn, &n, err, errlen);
    if (rc <= 0) {
        if (rc == 0)
            snprintf(err, errlen, "SLRU segment %u of kind %u does not exist at LSN %s", segno,
                     kind, lsn_format(lsn, lb));
        if (sqlstate != NULL)
            *sqlstate = rc == 0 ? SQLSTATE_UNDEFINED_FILE : SQLSTATE_INTERNAL_ERROR;
        return -1;
    }
    if (n > max_blocks) {
        snprintf(err, errlen, "SLRU segment %u of kind %u has %u blocks, more than %u", segno, kind,
                 n, max_blocks);
        if (sqlstate != NULL)
            *sqlstate = SQLSTATE_INTERNAL_ERROR;
        return -1;
    }
    for (uint32_t b = 0; b < n; b++) {
        pg_key k = pg_key_slru_block((slru_kind)kind, segno, b);
        int chain = 0;
        bool newest_complete;
        rc = read_page(tl, &k, lsn, out + (size_t)b * PG_BLCKSZ, &chain, &newest_complete, err,
                       errlen);
        if (rc < 0) {
            if (sqlstate != NULL)
                *sqlstate = SQLSTATE_INTERNAL_ERROR;
            return -1;
        }
        if (rc == 0)
            memset(out + (size_t)b * PG_BLCKSZ, 0, PG_BLCKSZ);
        metrics_counter_inc(rm.pages);
        observe_chain(chain);
        if (rc > 0)
            offer_if_long(tl, &k, lsn, out + (size_t)b * PG_BLCKSZ, chain);
    }
    if (check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
        return -1;
    *nblocks = n;
    return 0;
}

typedef struct list_arg {
    timeline_rel_fn fn;
    void *arg;
} list_arg;

static int list_one(const pg_key *k, lsn_t lsn, const value_ref *v, void *arg)
{
    (void)lsn;
    list_arg *a = arg;
    if (k->kind != KEY_REL_SIZE || v->kind != VAL_SIZE || v->len != 4)
        return 0;
    return a->fn(k->spc, k->db, k->rel, k->fork, get_be32(v->payload), a->arg);
}

int timeline_list_rels(timeline *tl, lsn_t lsn, timeline_rel_fn fn, void *arg, char *err,
                       size_t errlen)
{
    if (timeline_is_deleted(tl))
        return deleted_error(tl, err, errlen, NULL);
    /* fn sees the listing as it goes; a horizon that rises meanwhile makes
     * the call fail at the end, and the caller must discard what it saw. */
    if (check_horizon(tl, lsn, err, errlen, NULL) != 0)
        return -1;
    pg_key from, to;
    rel_size_range(&from, &to);
    list_arg a = {fn, arg};
    if (timeline_scan(tl, &from, &to, lsn, list_one, &a, err, errlen) != 0)
        return -1;
    return check_horizon(tl, lsn, err, errlen, NULL);
}

/* ---- the page service's fast path (no redo, no wait) ---- */

/* The newest version of k at lsn and the timeline (tl or an ancestor) that holds it. */
static int latest_from(timeline *tl, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found,
                       timeline **from, char *err, size_t errlen)
{
    for (timeline *t = tl; t != NULL; t = t->ancestor) {
        int rc = store_get_latest(t->st, k, lsn, out, found, err, errlen);
        *from = t;
        if (rc != 0 || t->ancestor == NULL)
            return rc;
        if (lsn > t->meta.ancestor_lsn)
            lsn = t->meta.ancestor_lsn;
    }
    return 0;
}

int timeline_get_latest(timeline *tl, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found_lsn,
                        char *err, size_t errlen)
{
    timeline *from;
    return latest_from(tl, k, lsn, out, found_lsn, &from, err, errlen);
}

int timeline_read_page_internal(timeline *tl, const pg_key *k, lsn_t lsn, uint8_t out[PG_BLCKSZ],
                                int *chain, bool *newest_complete, char *err, size_t errlen)
{
    return read_page(tl, k, lsn, out, chain, newest_complete, err, errlen);
}

int timeline_get_rel_page_noredo(timeline *tl, uint32_t spc, uint32_t db, uint32_t rel,
                                 uint8_t fork, uint32_t blk, lsn_t lsn, uint8_t out[PG_BLCKSZ],
                                 char *err, size_t errlen, const char **sqlstate)
{
    if (timeline_is_deleted(tl))
        return deleted_error(tl, err, errlen, sqlstate);
    uint32_t nblocks = 0;
    int rc = timeline_rel_size(tl, spc, db, rel, fork, lsn, &nblocks, err, errlen, sqlstate);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        char lb[LSN_FMT_LEN];
        snprintf(err, errlen, "relation %u/%u/%u fork %u does not exist at LSN %s", spc, db, rel,
                 fork, lsn_format(lsn, lb));
        if (sqlstate != NULL)
            *sqlstate = SQLSTATE_UNDEFINED_FILE;
        return -1;
    }
    bool zero = blk >= nblocks;
    if (!zero) {
        pg_key k = pg_key_rel_block(spc, db, rel, fork, blk);
        value_ref v;
        lsn_t found;
        timeline *from = NULL; /* where the newest version lives: its cache entry */
        rc = latest_from(tl, &k, lsn, &v, &found, &from, err, errlen);
        if (rc < 0) {
            if (sqlstate != NULL)
                *sqlstate = SQLSTATE_INTERNAL_ERROR;
            return -1;
        }
        zero = rc == 0;
        if (rc == 1) {
            bool image = v.kind == VAL_IMAGE && v.len == PG_BLCKSZ;
            bool delta = v.kind != VAL_IMAGE && v.kind != VAL_ZERO_PAGE && v.kind != VAL_SIZE &&
                         v.kind != VAL_TOMBSTONE && v.kind != VAL_BLOB;
            if (image)
                memcpy(out, v.payload, PG_BLCKSZ);
            else if (v.kind == VAL_ZERO_PAGE)
                memset(out, 0, PG_BLCKSZ);
            free((void *)v.payload);
            if (delta) {
                if (tl->svc.cache == NULL ||
                    !pagecache_lookup(tl->svc.cache, from->owner, &k, found, out))
                    return 1; /* needs redo (the full read counts the miss) */
                metrics_counter_inc(rm.cache_hits);
            } else if (image || v.kind == VAL_ZERO_PAGE) {
                metrics_counter_inc(rm.images);
            } else {
                return 1; /* a value that is no page version: the full read names it */
            }
        }
    }
    metrics_counter_inc(rm.pages);
    if (zero) {
        memset(out, 0, PG_BLCKSZ);
        metrics_counter_inc(rm.zero_pages);
    }
    if (check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
        return -1;
    observe_chain(0);
    return 0;
}
