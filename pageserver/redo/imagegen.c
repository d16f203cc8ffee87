/*
 * imagegen.c: image generation pushdown -- the counter table (writer
 * thread), the bounded pipeline (queue -> workers -> finished), the workers,
 * and the process-wide metrics.  See imagegen.h for the contract.
 *
 * Not for: how a page is rebuilt or stored (the callbacks, timeline/timeline.c).
 *
 * The pipeline: one mutex guards the two queue rings, the finished ring and
 * the busy count; its critical sections are O(1) (drain copies the finished
 * entries out and works outside it).  A page enters the normal queue while
 * in_pipeline = queued + busy + finished < queue_cap.  When ingest outruns
 * the workers (a bulk load queues every page it fills) the normal queue
 * stays full and a hot page would lose every race for a slot while its
 * chain grows without bound; so a page with IMAGEGEN_URGENT_FACTOR
 * thresholds of deltas may take one of urgent_cap reserved slots, and
 * workers serve that lane first.  in_pipeline never exceeds
 * queue_cap + urgent_cap = the finished ring's size, so it cannot overflow.
 * The counter table is private to the writer thread.
 *
 * Backpressure: a counter that reaches the hard cap H puts its page on the
 * short pressed list (one compare in imagegen_note).  Between records the
 * writer, once everything ingested is readable, calls imagegen_backpressure:
 * it drains, moves each pressed page into the urgent lane (from the normal
 * queue, or enqueues it at the readable LSN when it is out of the pipeline),
 * and sleeps on done_cv until a worker files a result; it ends when every
 * pressed counter is below H, or at the timeout, when the pages still at H
 * are waived (not waited for again until their counters fall below H).
 * After a timeout, until some result is drained, pages reaching H are
 * waived at once (counted as timeouts) instead of stalling ingest again.
 */
#include "pageserver/redo/imagegen.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/metrics.h"

typedef struct ig_entry {
    pg_key k;
    uint32_t deltas;       /* since the page's newest complete value */
    uint32_t since_queued; /* deltas counted since it was queued */
    lsn_t last_delta;      /* LSN of the newest delta counted */
    bool used;
    bool in_flight;
    bool waived; /* at >= hard_cap after a backpressure timeout: not waited for */
} ig_entry;

typedef struct ig_job {
    pg_key k;
    lsn_t min_lsn;
    uint32_t deltas; /* when queued: the urgent lane keeps the largest */
} ig_job;

enum { DONE_IMAGE = 1, DONE_SKIPPED = 0, DONE_FAILED = -1 };

typedef struct ig_done {
    pg_key k;
    int result;
    lsn_t at;
    uint8_t *page; /* malloc'd for DONE_IMAGE */
} ig_done;

struct imagegen {
    imagegen_options o;
    imagegen_rebuild_fn rebuild;
    imagegen_put_fn put;
    void *arg;

    /* Writer thread only. */
    ig_entry *table;  /* allocated on first note */
    size_t table_cap; /* power of two, >= 2 * track_entries */
    size_t table_count;
    ig_done *scratch;                     /* total_cap slots for drain */
    lsn_t last_lsn;                       /* LSN of the newest noted value */
    bool dropped;                         /* a request was dropped since the last full sweep */
    size_t sweep_at;                      /* where the next sweep of the table resumes */
    uint32_t hard_cap;                    /* IMAGEGEN_HARD_CAP_FACTOR * threshold */
    pg_key pressed[IMAGEGEN_PRESSED_MAX]; /* pages that reached hard_cap */
    size_t npressed;
    bool rescan;        /* pressed overflowed: find the rest in the table */
    bool want_readable; /* a job was queued at an LSN not yet readable */
    lsn_t readable;     /* as the last imagegen_backpressure() was told */
    bool stalled;       /* a wait timed out and no result came since */

    /* Guarded by mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* workers: a job was queued, or stop */
    pthread_cond_t done_cv; /* the writer in backpressure: a result was filed */
    ig_job *queue;          /* ring of queue_cap */
    size_t qhead, qlen;
    ig_job *urgent; /* ring of urgent_cap */
    size_t uhead, ulen;
    ig_done *done; /* ring of total_cap */
    size_t dhead, dlen;
    ig_done offers[IMAGEGEN_OFFERS_MAX]; /* pages readers rebuilt (imagegen_offer) */
    size_t ohead, olen;
    size_t busy;
    bool stop;

    size_t urgent_cap, total_cap;
    uint32_t urgent_deltas; /* deltas that make a page urgent */
    pthread_t *threads;
    int nthreads;

    _Atomic uint64_t requested, urgent_requested, drops, written, written_bytes, skipped, failures,
        forgotten, bp_waits, bp_timeouts, bp_wait_ns, from_reads, offer_drops;
};

/* ---- process-wide metrics ---- */

static const double read_chain_bounds[] = {0,  1,  2,  4,   8,   12,  16,   24,  32,
                                           48, 64, 96, 128, 256, 512, 1024, 4096};

static struct {
    pthread_once_t once;
    metrics_gauge *depth;
    metrics_counter *requested, *urgent, *written, *written_bytes, *drops, *failures, *skipped;
    metrics_counter *from_reads, *offer_drops;
    metrics_histogram *read_chain;
    metrics_gauge *read_chain_max_g;
    metrics_counter *bp_waits, *bp_timeouts;
    metrics_gauge *bp_seconds;
    atomic_uint_fast64_t read_chain_max;
} im = {.once = PTHREAD_ONCE_INIT};

static void metrics_init(void)
{
    metrics_registry *r = metrics_default_registry();
    im.depth = metrics_gauge_register(
        r, "pageserver_image_queue_depth",
        "Pages queued for image generation, being rebuilt or waiting to be stored", 0, NULL, NULL);
    im.requested = metrics_counter_register(r, "pageserver_image_requests_total",
                                            "Pages queued for image generation", 0, NULL, NULL);
    im.urgent = metrics_counter_register(
        r, "pageserver_image_urgent_requests_total",
        "Pages queued in the reserved lane (a full queue and a chain of several thresholds)", 0,
        NULL, NULL);
    im.written = metrics_counter_register(r, "pageserver_image_written_total",
                                          "Images stored by image generation", 0, NULL, NULL);
    im.from_reads = metrics_counter_register(
        r, "pageserver_image_from_reads_total",
        "Images stored from a page a reader rebuilt by replaying a long chain", 0, NULL, NULL);
    im.offer_drops = metrics_counter_register(
        r, "pageserver_image_from_reads_dropped_total",
        "Pages rebuilt by readers not stored as images (too many waiting for the writer)", 0, NULL,
        NULL);
    im.written_bytes =
        metrics_counter_register(r, "pageserver_image_written_bytes_total",
                                 "Bytes of images stored by image generation", 0, NULL, NULL);
    im.drops = metrics_counter_register(
        r, "pageserver_image_queue_drops_total",
        "Pages not queued for image generation because the queue was full", 0, NULL, NULL);
    im.failures = metrics_counter_register(r, "pageserver_image_failures_total",
                                           "Pages image generation could not rebuild or store", 0,
                                           NULL, NULL);
    im.skipped = metrics_counter_register(
        r, "pageserver_image_skipped_total",
        "Queued pages that needed no image when rebuilt (gone, or already complete)", 0, NULL,
        NULL);
    im.read_chain = metrics_histogram_register(
        r, "pageserver_read_chain_length",
        "Delta records replayed to build one page for a reader (0: image or cache)",
        read_chain_bounds, (int)(sizeof read_chain_bounds / sizeof read_chain_bounds[0]), 0, NULL,
        NULL);
    im.read_chain_max_g = metrics_gauge_register(
        r, "pageserver_read_chain_max", "Longest delta chain replayed for a reader since start", 0,
        NULL, NULL);
    im.bp_waits = metrics_counter_register(
        r, "pageserver_image_backpressure_waits_total",
        "Times ingest waited for the image of a page at the hard cap of deltas", 0, NULL, NULL);
    im.bp_timeouts = metrics_counter_register(
        r, "pageserver_image_backpressure_timeouts_total",
        "Backpressure waits that gave up at the timeout (the chain bound does not hold for those "
        "pages)",
        0, NULL, NULL);
    im.bp_seconds = metrics_gauge_register(
        r, "pageserver_image_backpressure_seconds_total",
        "Seconds ingest spent waiting for images of pages at the hard cap (monotone)", 0, NULL,
        NULL);
}

static void metrics_once(void)
{
    pthread_once(&im.once, metrics_init);
}

void imagegen_metrics_init(void)
{
    metrics_once();
}

void imagegen_observe_read_chain(int n)
{
    metrics_once();
    if (n < 0)
        n = 0;
    metrics_histogram_observe(im.read_chain, n);
    uint_fast64_t cur = atomic_load(&im.read_chain_max);
    while ((uint64_t)n > cur &&
           !atomic_compare_exchange_weak(&im.read_chain_max, &cur, (uint64_t)n))
        ;
    if ((uint64_t)n > cur)
        metrics_gauge_set(im.read_chain_max_g, n);
}

uint64_t imagegen_read_chain_max(void)
{
    return atomic_load(&im.read_chain_max);
}

/* ---- creation ---- */

void imagegen_options_default(imagegen_options *o)
{
    memset(o, 0, sizeof *o);
    o->threshold = 16;
    o->track_entries = 131072;
    o->queue_cap = 1024;
    o->workers = IMAGEGEN_DEFAULT_WORKERS;
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

static void *worker_main(void *arg);

int imagegen_create(const imagegen_options *o, imagegen_rebuild_fn rebuild, imagegen_put_fn put,
                    void *arg, imagegen **out, char *err, size_t errlen)
{
    *out = NULL;
    metrics_once();
    if (rebuild == NULL || put == NULL) {
        snprintf(err, errlen, "image generation needs a rebuild and a put function");
        return -1;
    }
    if (o->threshold < 1) {
        snprintf(err, errlen, "image threshold must be at least 1");
        return -1;
    }
    if (o->track_entries < 16 || o->track_entries > (1u << 24)) {
        snprintf(err, errlen, "image track entries must be in [16, 16777216]");
        return -1;
    }
    if (o->queue_cap < 1 || o->queue_cap > 65536) {
        snprintf(err, errlen, "image queue capacity must be in [1, 65536]");
        return -1;
    }
    if (o->workers < 0 || o->workers > 64) {
        snprintf(err, errlen, "image workers must be in [0, 64]");
        return -1;
    }
    imagegen *g = calloc(1, sizeof *g);
    if (g == NULL)
        goto oom;
    g->o = *o;
    g->rebuild = rebuild;
    g->put = put;
    g->arg = arg;
    g->table_cap = pow2_at_least(o->track_entries * 2);
    g->urgent_cap = o->queue_cap / 8 > 8 ? o->queue_cap / 8 : 8;
    g->total_cap = o->queue_cap + g->urgent_cap;
    g->hard_cap = o->threshold > UINT32_MAX / IMAGEGEN_HARD_CAP_FACTOR
                      ? UINT32_MAX
                      : o->threshold * IMAGEGEN_HARD_CAP_FACTOR;
    g->urgent_deltas = g->hard_cap;
    g->queue = calloc(o->queue_cap, sizeof *g->queue);
    g->urgent = calloc(g->urgent_cap, sizeof *g->urgent);
    g->done = calloc(g->total_cap, sizeof *g->done);
    g->scratch = calloc(g->total_cap, sizeof *g->scratch);
    g->threads = calloc(o->workers > 0 ? (size_t)o->workers : 1, sizeof *g->threads);
    if (g->queue == NULL || g->urgent == NULL || g->done == NULL || g->scratch == NULL ||
        g->threads == NULL)
        goto oom;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    for (int i = 0; i < o->workers; i++) {
        int rc = pthread_create(&g->threads[i], NULL, worker_main, g);
        if (rc != 0) {
            snprintf(err, errlen, "cannot start an image worker: %s", strerror(rc));
            imagegen_destroy(g);
            return -1;
        }
        g->nthreads++;
    }
    *out = g;
    return 0;
oom:
    if (g != NULL) {
        free(g->queue);
        free(g->urgent);
        free(g->done);
        free(g->scratch);
        free(g->threads);
        free(g);
    }
    snprintf(err, errlen, "out of memory");
    return -1;
}

void imagegen_destroy(imagegen *g)
{
    if (g == NULL)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < g->nthreads; i++)
        pthread_join(g->threads[i], NULL);
    size_t in_pipeline = g->qlen + g->ulen + g->dlen + g->busy;
    for (size_t i = 0; i < g->dlen; i++)
        free(g->done[(g->dhead + i) % g->total_cap].page);
    for (size_t i = 0; i < g->olen; i++)
        free(g->offers[(g->ohead + i) % IMAGEGEN_OFFERS_MAX].page);
    metrics_gauge_add(im.depth, -(double)in_pipeline);
    pthread_cond_destroy(&g->cv);
    pthread_cond_destroy(&g->done_cv);
    pthread_mutex_destroy(&g->mu);
    free(g->queue);
    free(g->urgent);
    free(g->done);
    free(g->scratch);
    free(g->threads);
    free(g->table);
    free(g);
}

/* ---- the counter table (writer thread) ---- */

static uint64_t page_hash(const pg_key *k)
{
    uint64_t h = 1469598103934665603ull;
    uint32_t parts[6] = {k->kind, k->spc, k->db, k->rel, k->fork, k->blk};
    for (int i = 0; i < 6; i++) {
        h ^= parts[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

static bool key_eq(const pg_key *a, const pg_key *b)
{
    return a->kind == b->kind && a->spc == b->spc && a->db == b->db && a->rel == b->rel &&
           a->fork == b->fork && a->blk == b->blk;
}

static ig_entry *table_slot(ig_entry *t, size_t cap, const pg_key *k)
{
    size_t mask = cap - 1;
    size_t i = (size_t)page_hash(k) & mask;
    while (t[i].used && !key_eq(&t[i].k, k))
        i = (i + 1) & mask;
    return &t[i];
}

/*
 * The table is full: keep the pages in flight and those with at least half
 * a threshold of deltas (their chains matter most), forget the rest; if that
 * frees too little, keep only the pages in flight.  Rebuilt into a fresh
 * array; without memory for one, everything is forgotten (a page in flight
 * may then be queued twice, which costs one redundant image).
 */
static void table_evict(imagegen *g)
{
    ig_entry *fresh = calloc(g->table_cap, sizeof *fresh);
    size_t before = g->table_count;
    if (fresh == NULL) {
        memset(g->table, 0, g->table_cap * sizeof *g->table);
        g->table_count = 0;
        atomic_fetch_add(&g->forgotten, before);
        return;
    }
    uint32_t keep_min = g->o.threshold / 2;
    size_t keep = 0;
    for (size_t i = 0; i < g->table_cap; i++)
        if (g->table[i].used && (g->table[i].in_flight || g->table[i].deltas >= keep_min))
            keep++;
    if (keep > g->o.track_entries * 3 / 4)
        keep_min = UINT32_MAX;
    size_t count = 0;
    for (size_t i = 0; i < g->table_cap; i++) {
        const ig_entry *e = &g->table[i];
        if (!e->used || !(e->in_flight || e->deltas >= keep_min))
            continue;
        *table_slot(fresh, g->table_cap, &e->k) = *e;
        count++;
    }
    free(g->table);
    g->table = fresh;
    g->table_count = count;
    atomic_fetch_add(&g->forgotten, before - count);
}

/* The entry of k, inserted at zero if absent; NULL when the table cannot
 * be allocated (image generation then does nothing). */
static ig_entry *table_get(imagegen *g, const pg_key *k)
{
    if (g->table == NULL) {
        g->table = calloc(g->table_cap, sizeof *g->table);
        if (g->table == NULL)
            return NULL;
    }
    ig_entry *e = table_slot(g->table, g->table_cap, k);
    if (e->used)
        return e;
    if (g->table_count >= g->o.track_entries) {
        table_evict(g);
        e = table_slot(g->table, g->table_cap, k);
        assert(!e->used);
    }
    memset(e, 0, sizeof *e);
    e->used = true;
    e->k = *k;
    g->table_count++;
    assert(g->table_count < g->table_cap);
    return e;
}

uint32_t imagegen_page_deltas(imagegen *g, const pg_key *k, bool *in_flight)
{
    *in_flight = false;
    if (g->table == NULL)
        return 0;
    ig_entry *e = table_slot(g->table, g->table_cap, k);
    if (!e->used)
        return 0;
    *in_flight = e->in_flight;
    return e->deltas;
}

/* ---- the pipeline ---- */

static size_t in_pipeline_locked(const imagegen *g)
{
    return g->qlen + g->ulen + g->busy + g->dlen;
}

/* Queues e's page to be rebuilt at or after min_lsn, or counts a drop when
 * the pipeline is full (the counter stays: the next delta asks again). */
static void try_enqueue(imagegen *g, ig_entry *e, lsn_t min_lsn)
{
    assert(!e->in_flight);
    bool queued = false, urgent = false, displaced = false;
    ig_job job = {.k = e->k, .min_lsn = min_lsn, .deltas = e->deltas};
    pg_key displaced_key;
    pthread_mutex_lock(&g->mu);
    size_t in_pipeline = in_pipeline_locked(g);
    if (e->deltas >= g->urgent_deltas && g->ulen < g->urgent_cap && in_pipeline < g->total_cap) {
        /* At the hard cap: ingest is about to wait for it. */
        g->urgent[(g->uhead + g->ulen) % g->urgent_cap] = job;
        g->ulen++;
        queued = urgent = true;
    } else if (in_pipeline < g->o.queue_cap) {
        g->queue[(g->qhead + g->qlen) % g->o.queue_cap] = job;
        g->qlen++;
        queued = true;
    } else if (e->deltas >= g->urgent_deltas && g->ulen > 0) {
        /* The reserved lane is full too: take the place of the page with
         * the fewest deltas when this one has more than twice as many. */
        size_t min_i = 0;
        for (size_t i = 1; i < g->ulen; i++)
            if (g->urgent[(g->uhead + i) % g->urgent_cap].deltas <
                g->urgent[(g->uhead + min_i) % g->urgent_cap].deltas)
                min_i = i;
        ig_job *victim = &g->urgent[(g->uhead + min_i) % g->urgent_cap];
        if (e->deltas / 2 > victim->deltas) {
            displaced_key = victim->k;
            *victim = job;
            queued = urgent = displaced = true;
        }
    }
    if (queued)
        pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    if (!queued) {
        g->dropped = true;
        atomic_fetch_add(&g->drops, 1);
        metrics_counter_inc(im.drops);
        return;
    }
    if (displaced) {
        /* Out of the pipeline again, with its deltas: it asks again later. */
        ig_entry *v = table_slot(g->table, g->table_cap, &displaced_key);
        if (v->used) {
            v->in_flight = false;
            v->since_queued = 0;
        }
        atomic_fetch_add(&g->drops, 1);
        metrics_counter_inc(im.drops);
        metrics_gauge_add(im.depth, -1);
    }
    e->in_flight = true;
    e->since_queued = 0;
    if (min_lsn > g->readable)
        g->want_readable = true;
    atomic_fetch_add(&g->requested, 1);
    metrics_counter_inc(im.requested);
    if (urgent) {
        atomic_fetch_add(&g->urgent_requested, 1);
        metrics_counter_inc(im.urgent);
    }
    metrics_gauge_add(im.depth, 1);
}

/* e's counter just reached hard_cap (from below, so it is not waived):
 * ingest waits for its image at the next imagegen_backpressure(). */
static void press(imagegen *g, const ig_entry *e)
{
    assert(!e->waived);
    for (size_t i = 0; i < g->npressed; i++)
        if (key_eq(&g->pressed[i], &e->k))
            return;
    if (g->npressed < IMAGEGEN_PRESSED_MAX)
        g->pressed[g->npressed++] = e->k;
    else
        g->rescan = true;
}

void imagegen_note(imagegen *g, const pg_key *k, lsn_t lsn, bool complete)
{
    ig_entry *e = table_get(g, k);
    if (e == NULL)
        return;
    if (complete) {
        e->deltas = 0;
        e->since_queued = 0;
        e->waived = false;
        return;
    }
    if (e->deltas < UINT32_MAX)
        e->deltas++;
    if (e->since_queued < UINT32_MAX)
        e->since_queued++;
    e->last_delta = lsn;
    if (lsn > g->last_lsn)
        g->last_lsn = lsn;
    if (e->deltas == g->hard_cap && !e->waived)
        press(g, e);
    if (!e->in_flight && e->deltas >= g->o.threshold)
        try_enqueue(g, e, lsn);
}

#define SWEEP_STEP 4096 /* counters looked at per drain, at most */

/*
 * A page whose request was dropped (pipeline full) asks again only at its
 * next delta, so a page that turns quiet right after would keep its long
 * chain.  While drops are outstanding and the pipeline has room, each drain
 * looks at up to SWEEP_STEP counters and queues the pages at or past the
 * threshold; a full pass with nothing dropped ends the sweep.
 */
static void sweep_dropped(imagegen *g)
{
    if (!g->dropped || g->table == NULL)
        return;
    for (size_t n = 0; n < SWEEP_STEP; n++) {
        pthread_mutex_lock(&g->mu);
        bool room = in_pipeline_locked(g) < g->o.queue_cap;
        pthread_mutex_unlock(&g->mu);
        if (!room)
            return;
        if (g->sweep_at == 0)
            g->dropped = false; /* a new pass: drops from now on set it again */
        ig_entry *e = &g->table[g->sweep_at];
        g->sweep_at = (g->sweep_at + 1) % g->table_cap;
        if (e->used && !e->in_flight && e->deltas >= g->o.threshold)
            try_enqueue(g, e, g->last_lsn);
        if (g->sweep_at == 0 && !g->dropped)
            return;
    }
}

void imagegen_offer(imagegen *g, const pg_key *k, lsn_t lsn, const uint8_t page[PG_BLCKSZ])
{
    ig_done d = {.k = *k, .result = DONE_IMAGE, .at = lsn, .page = malloc(PG_BLCKSZ)};
    bool kept = false;
    if (d.page != NULL) {
        memcpy(d.page, page, PG_BLCKSZ);
        pthread_mutex_lock(&g->mu);
        if (g->olen < IMAGEGEN_OFFERS_MAX) {
            g->offers[(g->ohead + g->olen) % IMAGEGEN_OFFERS_MAX] = d;
            g->olen++;
            kept = true;
        }
        pthread_mutex_unlock(&g->mu);
    }
    if (!kept) {
        free(d.page);
        atomic_fetch_add(&g->offer_drops, 1);
        metrics_counter_inc(im.offer_drops);
    }
}

/* Writer thread: stores d's page as an image through the put callback and
 * counts it (from_read: a reader rebuilt it).  False when the put failed
 * (logged and counted). */
static bool store_image(imagegen *g, const ig_done *d, bool from_read)
{
    char err[256];
    if (g->put(g->arg, &d->k, d->at, d->page, err, sizeof err) != 0) {
        char kb[96], lb[LSN_FMT_LEN];
        log_warn("image generation: cannot store the image%s of %s at %s: %s",
                 from_read ? " a reader rebuilt" : "", pg_key_format(&d->k, kb, sizeof kb),
                 lsn_format(d->at, lb), err);
        atomic_fetch_add(&g->failures, 1);
        metrics_counter_inc(im.failures);
        return false;
    }
    atomic_fetch_add(&g->written, 1);
    atomic_fetch_add(&g->written_bytes, PG_BLCKSZ);
    metrics_counter_inc(im.written);
    metrics_counter_add(im.written_bytes, PG_BLCKSZ);
    if (from_read) {
        atomic_fetch_add(&g->from_reads, 1);
        metrics_counter_inc(im.from_reads);
    }
    return true;
}

/* Stores the n pages readers offered.  Such an image at L covers every
 * delta counted when L is at or after the newest one; else the counter
 * stays (an upper bound still).  A page in flight is settled by its job. */
static int store_offers(imagegen *g, ig_done *offers, size_t n)
{
    int stored = 0;
    for (size_t i = 0; i < n; i++) {
        ig_done *d = &offers[i];
        bool ok = store_image(g, d, true);
        free(d->page);
        if (!ok)
            continue;
        stored++;
        if (g->table == NULL)
            continue;
        ig_entry *e = table_slot(g->table, g->table_cap, &d->k);
        if (e->used && !e->in_flight && d->at >= e->last_delta) {
            e->deltas = 0;
            e->since_queued = 0;
            e->waived = false;
        }
    }
    return stored;
}

int imagegen_drain(imagegen *g)
{
    ig_done offers[IMAGEGEN_OFFERS_MAX];
    pthread_mutex_lock(&g->mu);
    size_t n = g->dlen;
    for (size_t i = 0; i < n; i++)
        g->scratch[i] = g->done[(g->dhead + i) % g->total_cap];
    g->dhead = (g->dhead + n) % g->total_cap;
    g->dlen = 0;
    size_t noffers = g->olen;
    for (size_t i = 0; i < noffers; i++)
        offers[i] = g->offers[(g->ohead + i) % IMAGEGEN_OFFERS_MAX];
    g->ohead = (g->ohead + noffers) % IMAGEGEN_OFFERS_MAX;
    g->olen = 0;
    pthread_mutex_unlock(&g->mu);
    int from_reads = noffers > 0 ? store_offers(g, offers, noffers) : 0;
    if (n == 0) {
        sweep_dropped(g);
        return from_reads;
    }
    g->stalled = false; /* the workers deliver again */
    metrics_gauge_add(im.depth, -(double)n);
    int stored = 0;
    for (size_t i = 0; i < n; i++) {
        ig_done *d = &g->scratch[i];
        bool ok = false;
        if (d->result == DONE_IMAGE && store_image(g, d, false)) {
            ok = true;
            stored++;
        }
        free(d->page);
        d->page = NULL;
        ig_entry *e = table_get(g, &d->k);
        if (e == NULL)
            continue;
        e->in_flight = false;
        if (ok && d->at >= e->last_delta) {
            e->deltas = 0; /* the image covers every delta counted */
        } else if (ok || d->result == DONE_SKIPPED) {
            /* Every delta above the image was counted since the page was
             * queued (the image is at or after the queuing record).  A
             * skipped page (gone, or complete at its newest version) keeps
             * only those too. */
            if (e->since_queued < e->deltas)
                e->deltas = e->since_queued;
        } else {
            e->deltas = 0; /* failed: retry only after another threshold */
        }
        e->since_queued = 0;
        if (e->deltas < g->hard_cap)
            e->waived = false;
        /* A page that gathered a threshold of deltas while in flight (a hot
         * page) goes again now rather than at its next delta, so it does not
         * keep a long chain if it turns quiet. */
        if (ok && e->deltas >= g->o.threshold)
            try_enqueue(g, e, d->at);
    }
    sweep_dropped(g);
    return stored + from_reads;
}

/* ---- backpressure (writer thread) ---- */

bool imagegen_pressure_pending(const imagegen *g)
{
    return g->npressed != 0 || g->rescan || g->want_readable;
}

static bool needs_wait(const imagegen *g, const ig_entry *e)
{
    return e->used && e->deltas >= g->hard_cap && !e->waived;
}

/* The pressed list overflowed: add the pages at the cap it missed (the
 * list may overflow again; then the next pass goes on). */
static void rescan_table(imagegen *g)
{
    g->rescan = false;
    if (g->table == NULL)
        return;
    for (size_t i = 0; i < g->table_cap; i++) {
        const ig_entry *e = &g->table[i];
        if (!needs_wait(g, e))
            continue;
        bool listed = false;
        for (size_t j = 0; j < g->npressed && !listed; j++)
            listed = key_eq(&g->pressed[j], &e->k);
        if (listed)
            continue;
        if (g->npressed == IMAGEGEN_PRESSED_MAX) {
            g->rescan = true;
            return;
        }
        g->pressed[g->npressed++] = e->k;
    }
}

/* Keeps the pressed pages still at the cap (and not waived). */
static void prune_pressed(imagegen *g)
{
    size_t n = 0;
    for (size_t i = 0; i < g->npressed; i++) {
        if (g->table == NULL)
            break;
        const ig_entry *e = table_slot(g->table, g->table_cap, &g->pressed[i]);
        if (needs_wait(g, e))
            g->pressed[n++] = g->pressed[i];
    }
    g->npressed = n;
}

/*
 * Puts e's page in the urgent lane: a page out of the pipeline is queued
 * there to be rebuilt at or after readable; a page in the normal queue is
 * moved there (its min_lsn is <= readable: it was queued at a noted LSN).
 * A page already in the urgent lane, being rebuilt or finished is left.
 * Nothing happens while the lane (or the whole pipeline) is full: the caller
 * retries after the next result.
 */
static void prioritise(imagegen *g, ig_entry *e, lsn_t readable)
{
    bool queued = false;
    pthread_mutex_lock(&g->mu);
    bool lane_room = g->ulen < g->urgent_cap;
    if (!e->in_flight) {
        if (lane_room && in_pipeline_locked(g) < g->total_cap) {
            ig_job job = {.k = e->k, .min_lsn = readable, .deltas = e->deltas};
            g->urgent[(g->uhead + g->ulen) % g->urgent_cap] = job;
            g->ulen++;
            queued = true;
            pthread_cond_signal(&g->cv);
        }
    } else if (lane_room) {
        size_t cap = g->o.queue_cap;
        for (size_t i = 0; i < g->qlen; i++) {
            ig_job *j = &g->queue[(g->qhead + i) % cap];
            if (!key_eq(&j->k, &e->k))
                continue;
            ig_job job = *j;
            assert(job.min_lsn <= readable);
            for (size_t m = i; m + 1 < g->qlen; m++)
                g->queue[(g->qhead + m) % cap] = g->queue[(g->qhead + m + 1) % cap];
            g->qlen--;
            g->urgent[(g->uhead + g->ulen) % g->urgent_cap] = job;
            g->ulen++;
            atomic_fetch_add(&g->urgent_requested, 1);
            metrics_counter_inc(im.urgent);
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
    if (queued) {
        e->in_flight = true;
        e->since_queued = 0;
        atomic_fetch_add(&g->requested, 1);
        atomic_fetch_add(&g->urgent_requested, 1);
        metrics_counter_inc(im.requested);
        metrics_counter_inc(im.urgent);
        metrics_gauge_add(im.depth, 1);
    }
}

/* The timeout: every page still at the cap is waived (until its counter
 * falls below the cap) so that ingest does not wait for it again. */
static void waive_all(imagegen *g)
{
    for (size_t i = 0; g->table != NULL && i < g->table_cap; i++)
        if (needs_wait(g, &g->table[i]))
            g->table[i].waived = true;
    g->npressed = 0;
    g->rescan = false;
}

int imagegen_backpressure(imagegen *g, lsn_t readable, int timeout_ms)
{
    if (!imagegen_pressure_pending(g))
        return 0;
    /* The jobs waited for may only need LSNs readers can read already. */
    assert(readable >= g->last_lsn);
    g->want_readable = false;
    if (readable > g->readable)
        g->readable = readable;
    if (g->npressed == 0 && !g->rescan)
        return 0; /* only made the queued jobs' LSNs readable early */
    assert(timeout_ms >= 0);
    uint64_t t0 = clock_mono_ns();
    uint64_t deadline = t0 + (uint64_t)timeout_ms * 1000000u;
    bool waited = false;
    int rc = 0;
    for (;;) {
        imagegen_drain(g);
        if (g->rescan)
            rescan_table(g);
        prune_pressed(g);
        if (g->npressed == 0 && !g->rescan)
            break;
        if (g->stalled) {
            /* The last wait timed out and no worker has delivered since
             * (e.g. the redo pool's first start, which makes its template
             * data directory, can take seconds): do not stall ingest again
             * for every page that reaches the cap meanwhile. */
            waive_all(g);
            atomic_fetch_add(&g->bp_timeouts, 1);
            metrics_counter_inc(im.bp_timeouts);
            return -1;
        }
        waited = true;
        for (size_t i = 0; i < g->npressed; i++)
            prioritise(g, table_slot(g->table, g->table_cap, &g->pressed[i]), readable);
        uint64_t now = clock_mono_ns();
        if (now >= deadline) {
            char kb[96];
            bool in_flight;
            uint32_t d = imagegen_page_deltas(g, &g->pressed[0], &in_flight);
            log_warn("image generation: ingest waited %d ms for the images of %zu page(s) at "
                     "the hard cap of %u deltas (e.g. %s with %u deltas, %s); going on without",
                     timeout_ms, g->npressed, g->hard_cap,
                     g->npressed > 0 ? pg_key_format(&g->pressed[0], kb, sizeof kb) : "?", d,
                     in_flight ? "in flight" : "not queued");
            waive_all(g);
            g->stalled = true;
            atomic_fetch_add(&g->bp_timeouts, 1);
            metrics_counter_inc(im.bp_timeouts);
            rc = -1;
            break;
        }
        uint64_t until = now + 50000000u < deadline ? now + 50000000u : deadline;
        struct timespec ts = {.tv_sec = (time_t)(until / 1000000000u),
                              .tv_nsec = (long)(until % 1000000000u)};
        pthread_mutex_lock(&g->mu);
        if (g->dlen == 0)
            pthread_cond_timedwait(&g->done_cv, &g->mu, &ts);
        pthread_mutex_unlock(&g->mu);
    }
    if (waited) {
        uint64_t ns = clock_mono_ns() - t0;
        atomic_fetch_add(&g->bp_waits, 1);
        atomic_fetch_add(&g->bp_wait_ns, ns);
        metrics_counter_inc(im.bp_waits);
        metrics_gauge_add(im.bp_seconds, (double)ns / 1e9);
        if (rc == 0)
            rc = 1;
    }
    return rc;
}

/* Takes one job (waiting unless nowait), rebuilds it and files the result.
 * 1 done, 0 no job (nowait and empty, or stopping). */
static int work_one(imagegen *g, bool nowait)
{
    pthread_mutex_lock(&g->mu);
    while (!g->stop && g->qlen + g->ulen == 0 && !nowait)
        pthread_cond_wait(&g->cv, &g->mu);
    if (g->stop || g->qlen + g->ulen == 0) {
        pthread_mutex_unlock(&g->mu);
        return 0;
    }
    ig_job job;
    if (g->ulen > 0) {
        job = g->urgent[g->uhead];
        g->uhead = (g->uhead + 1) % g->urgent_cap;
        g->ulen--;
    } else {
        job = g->queue[g->qhead];
        g->qhead = (g->qhead + 1) % g->o.queue_cap;
        g->qlen--;
    }
    g->busy++;
    pthread_mutex_unlock(&g->mu);

    ig_done d = {.k = job.k, .result = DONE_FAILED};
    d.page = malloc(PG_BLCKSZ);
    char err[256] = "out of memory";
    int rc = -1;
    if (d.page != NULL)
        rc = g->rebuild(g->arg, &job.k, job.min_lsn, d.page, &d.at, err, sizeof err);
    if (rc == 1) {
        d.result = DONE_IMAGE;
        assert(d.at >= job.min_lsn);
    } else {
        free(d.page);
        d.page = NULL;
        if (rc == 0) {
            d.result = DONE_SKIPPED;
            atomic_fetch_add(&g->skipped, 1);
            metrics_counter_inc(im.skipped);
        } else {
            char kb[96], lb[LSN_FMT_LEN];
            log_warn("image generation: cannot rebuild %s at or after %s: %s",
                     pg_key_format(&job.k, kb, sizeof kb), lsn_format(job.min_lsn, lb), err);
            atomic_fetch_add(&g->failures, 1);
            metrics_counter_inc(im.failures);
        }
    }
    pthread_mutex_lock(&g->mu);
    assert(g->dlen < g->total_cap);
    g->done[(g->dhead + g->dlen) % g->total_cap] = d;
    g->dlen++;
    g->busy--;
    pthread_cond_signal(&g->done_cv);
    pthread_mutex_unlock(&g->mu);
    return 1;
}

/* Names the calling thread prefix-N (N counts this file's threads) so
 * operators see it in top/perf; the kernel keeps 15 characters. */
static void thread_name(const char *prefix)
{
    static _Atomic unsigned seq;
    char name[16];
    snprintf(name, sizeof name, "%s-%u", prefix, atomic_fetch_add(&seq, 1) % 100);
    pthread_setname_np(pthread_self(), name);
}

static void *worker_main(void *arg)
{
    thread_name("ps-imagegen");
    imagegen *g = arg;
    while (work_one(g, false) == 1)
        ;
    return NULL;
}

int imagegen_work_one(imagegen *g)
{
    return work_one(g, true);
}

void imagegen_get_stats(imagegen *g, imagegen_stats *out)
{
    out->requested = atomic_load(&g->requested);
    out->urgent = atomic_load(&g->urgent_requested);
    out->drops = atomic_load(&g->drops);
    out->written = atomic_load(&g->written);
    out->written_bytes = atomic_load(&g->written_bytes);
    out->skipped = atomic_load(&g->skipped);
    out->failures = atomic_load(&g->failures);
    out->forgotten = atomic_load(&g->forgotten);
    out->backpressure_waits = atomic_load(&g->bp_waits);
    out->backpressure_timeouts = atomic_load(&g->bp_timeouts);
    out->backpressure_ns = atomic_load(&g->bp_wait_ns);
    out->from_reads = atomic_load(&g->from_reads);
    out->offer_drops = atomic_load(&g->offer_drops);
    pthread_mutex_lock(&g->mu);
    out->depth = in_pipeline_locked(g);
    pthread_mutex_unlock(&g->mu);
}
