/*
 * read.c: GetPage@LSN and the other reads of a timeline (timeline.h
 * "reads"): the page cache, the store's versions, the ancestor below a
 * branch point, redo, and the image offer of a read that replayed a long
 * chain; sizes, SLRU segments and listings; and the page service's fast
 * path that answers without redo.
 *
 * Reads follow docs/design.md §3.4 and §6.4 (timeline.h).  Every read checks
 * the GC horizon before and after it reads (gc.c, timeline_check_horizon).
 *
 * For: turning a key at an LSN into a page or a size, and the read metrics.
 * Not for: the version store itself (store_read.c), WAL redo (redo.c),
 * branch scans and the commit-time index (branch.c), the handle (timeline.c).
 */
#include "pageserver/timeline/timeline.h"
#include "pageserver/timeline/timeline_priv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/byteorder.h"
#include "base/clock.h"
#include "base/metrics.h"
#include "base/sqlstate.h"
#include "base/strata_assert.h"

/* ---- process-wide read metrics ---- */

static const double chain_bounds[] = {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096};
static const double redo_bounds[] = {50e-6, 100e-6, 250e-6, 500e-6, 1e-3,   2.5e-3, 5e-3,
                                     10e-3, 25e-3,  50e-3,  100e-3, 250e-3, 1,      10};

static struct {
    pthread_once_t once;
    metrics_counter *cache_hits, *cache_misses, *images, *redo_reads, *zero_pages, *pages;
    metrics_counter *cached_bases;
    metrics_histogram *chain, *redo_seconds;
    metrics_gauge *chain_max;
    atomic_uint_fast64_t max_chain;
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
}

void timeline_read_metrics_init(void)
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

void timeline_get_read_stats(timeline_read_stats *out)
{
    timeline_read_metrics_init();
    out->pages_read = metrics_counter_value(rm.pages);
    out->cache_hits = metrics_counter_value(rm.cache_hits);
    out->cache_misses = metrics_counter_value(rm.cache_misses);
    out->images_read = metrics_counter_value(rm.images);
    out->redo_reads = metrics_counter_value(rm.redo_reads);
    out->zero_pages = metrics_counter_value(rm.zero_pages);
    out->max_chain = atomic_load(&rm.max_chain);
    out->cached_bases = metrics_counter_value(rm.cached_bases);
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

/* Whether page k (a relation or SLRU block) lies within its relation's or
 * SLRU's size at lsn: 1 yes, 0 no (or another kind of key), -1 error. */
int timeline_page_exists(timeline *tl, const pg_key *k, lsn_t lsn, char *err, size_t errlen)
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

int timeline_rel_size(timeline *tl, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork,
                      lsn_t lsn, uint32_t *nblocks, char *err, size_t errlen, const char **sqlstate)
{
    if (timeline_is_deleted(tl))
        return deleted_error(tl, err, errlen, sqlstate);
    if (timeline_check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
        return -1;
    pg_key k = pg_key_rel_size(spc, db, rel, fork);
    *nblocks = 0;
    int rc = read_size(tl, &k, lsn, nblocks, err, errlen);
    if (rc < 0 && sqlstate != NULL)
        *sqlstate = SQLSTATE_INTERNAL_ERROR;
    if (rc >= 0 && timeline_check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
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

/* The start of every relation page read (timeline_get_rel_page and its
 * fast path): 0 with the fork's size in *nblocks, or -1 with err and
 * *sqlstate when the timeline was deleted, lsn is below the GC horizon, or
 * the fork does not exist at lsn (58P01). */
static int rel_page_start(timeline *tl, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork,
                          lsn_t lsn, uint32_t *nblocks, char *err, size_t errlen,
                          const char **sqlstate)
{
    if (timeline_is_deleted(tl))
        return deleted_error(tl, err, errlen, sqlstate);
    int rc = timeline_rel_size(tl, spc, db, rel, fork, lsn, nblocks, err, errlen, sqlstate);
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
    return 0;
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
    uint32_t nblocks = 0;
    if (rel_page_start(tl, spc, db, rel, fork, lsn, &nblocks, err, errlen, sqlstate) != 0)
        return -1;
    metrics_counter_inc(rm.pages);
    if (blk >= nblocks) {
        memset(out, 0, PG_BLCKSZ);
        metrics_counter_inc(rm.zero_pages);
        return 0;
    }
    pg_key k = pg_key_rel_block(spc, db, rel, fork, blk);
    bool newest_complete;
    int rc = read_page(tl, &k, lsn, out, chain, &newest_complete, err, errlen);
    if (rc < 0) {
        if (sqlstate != NULL)
            *sqlstate = SQLSTATE_INTERNAL_ERROR;
        return -1;
    }
    if (rc == 0) {
        memset(out, 0, PG_BLCKSZ);
        metrics_counter_inc(rm.zero_pages);
    }
    if (timeline_check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
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
    if (timeline_check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
        return -1;
    pg_key from, to;
    rel_size_range(&from, &to);
    if (timeline_scan(tl, &from, &to, lsn, add_storage_size, a, err, errlen) != 0) {
        if (sqlstate != NULL)
            *sqlstate = SQLSTATE_INTERNAL_ERROR;
        return -1;
    }
    return timeline_check_horizon(tl, lsn, err, errlen, sqlstate) != 0 ? -1 : 0;
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
    if (timeline_check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
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
    if (timeline_check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
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
    if (timeline_check_horizon(tl, lsn, err, errlen, NULL) != 0)
        return -1;
    pg_key from, to;
    rel_size_range(&from, &to);
    list_arg a = {fn, arg};
    if (timeline_scan(tl, &from, &to, lsn, list_one, &a, err, errlen) != 0)
        return -1;
    return timeline_check_horizon(tl, lsn, err, errlen, NULL);
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
    uint32_t nblocks = 0;
    if (rel_page_start(tl, spc, db, rel, fork, lsn, &nblocks, err, errlen, sqlstate) != 0)
        return -1;
    bool zero = blk >= nblocks;
    if (!zero) {
        pg_key k = pg_key_rel_block(spc, db, rel, fork, blk);
        value_ref v;
        lsn_t found;
        timeline *from = NULL; /* where the newest version lives: its cache entry */
        int rc = latest_from(tl, &k, lsn, &v, &found, &from, err, errlen);
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
    if (timeline_check_horizon(tl, lsn, err, errlen, sqlstate) != 0)
        return -1;
    observe_chain(0);
    return 0;
}
