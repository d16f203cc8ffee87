/*
 * test_imagegen.c: image generation pushdown's counters and pipeline
 * (pageserver/redo/imagegen.h) over fake rebuild and put functions: a page is
 * queued once when its deltas reach the threshold (dedup while in flight),
 * complete values reset counters, a full pipeline drops and counts (and the
 * page asks again on its next delta), failures and skips settle counters,
 * the image lands at the LSN the rebuild chose, the counter table stays
 * bounded and keeps the pages that matter, real worker threads deliver every
 * page, the read-chain metrics, and backpressure at the hard cap (the
 * writer waits until the pressed page's counter is below the cap: a slow
 * worker, a page promoted from the back of the normal queue, more pressed
 * pages than the list holds; and the timeout, which waives the page until
 * its counter falls below the cap).
 *
 * Most tests run with workers = 0 and step the pipeline with
 * imagegen_work_one(), so every state in between is observed exactly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <pthread.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/metrics.h"
#include "pageserver/redo/imagegen.h"

#define MAX_PUTS 4096

typedef struct fake {
    uint32_t fail_blk; /* rebuild of this block fails */
    uint32_t skip_blk; /* rebuild of this block finds nothing to image */
    lsn_t advance;     /* rebuild answers min_lsn + advance */
    bool put_fails;
    int sleep_ms; /* each rebuild takes this long */
    int rebuilds; /* only counted with workers = 0 */
    int nputs;
    pg_key put_key[MAX_PUTS];
    lsn_t put_lsn[MAX_PUTS];
    uint8_t put_fill[MAX_PUTS];
} fake;

static int fake_rebuild(void *arg, const pg_key *k, lsn_t min_lsn, uint8_t out[PG_BLCKSZ],
                        lsn_t *at, char *err, size_t errlen)
{
    fake *f = arg;
    if (k->blk == f->fail_blk) {
        snprintf(err, errlen, "injected failure");
        return -1;
    }
    if (k->blk == f->skip_blk)
        return 0;
    if (f->sleep_ms > 0)
        usleep((useconds_t)f->sleep_ms * 1000);
    memset(out, (int)(k->blk & 0xff), PG_BLCKSZ);
    *at = min_lsn + f->advance;
    return 1;
}

static int fake_put(void *arg, const pg_key *k, lsn_t lsn, const uint8_t page[PG_BLCKSZ], char *err,
                    size_t errlen)
{
    fake *f = arg;
    if (f->put_fails) {
        snprintf(err, errlen, "injected put failure");
        return -1;
    }
    assert_true(f->nputs < MAX_PUTS);
    f->put_key[f->nputs] = *k;
    f->put_lsn[f->nputs] = lsn;
    f->put_fill[f->nputs] = page[PG_BLCKSZ - 1];
    assert_int_equal(page[0], page[PG_BLCKSZ - 1]);
    f->nputs++;
    return 0;
}

static pg_key blk(uint32_t b)
{
    return pg_key_rel_block(1663, 5, 16384, 0, b);
}

static imagegen *make(fake *f, uint32_t threshold, size_t queue_cap, size_t track, int workers)
{
    memset(f, 0, sizeof *f);
    f->fail_blk = UINT32_MAX;
    f->skip_blk = UINT32_MAX;
    imagegen_options o;
    imagegen_options_default(&o);
    o.threshold = threshold;
    o.queue_cap = queue_cap;
    o.track_entries = track;
    o.workers = workers;
    imagegen *g = NULL;
    char err[256];
    int rc = imagegen_create(&o, fake_rebuild, fake_put, f, &g, err, sizeof err);
    if (rc != 0)
        fail_msg("imagegen_create: %s", err);
    return g;
}

static void test_options_rejected(void **state)
{
    (void)state;
    imagegen_options o;
    imagegen_options_default(&o);
    assert_true(o.threshold >= 1 && o.workers >= 1 && o.queue_cap >= 1);
    imagegen *g = NULL;
    char err[256];
    fake f = {0};
    o.threshold = 0;
    assert_int_equal(imagegen_create(&o, fake_rebuild, fake_put, &f, &g, err, sizeof err), -1);
    assert_non_null(strstr(err, "threshold"));
    imagegen_options_default(&o);
    o.queue_cap = 0;
    assert_int_equal(imagegen_create(&o, fake_rebuild, fake_put, &f, &g, err, sizeof err), -1);
    imagegen_options_default(&o);
    o.track_entries = 4;
    assert_int_equal(imagegen_create(&o, fake_rebuild, fake_put, &f, &g, err, sizeof err), -1);
    imagegen_options_default(&o);
    assert_int_equal(imagegen_create(&o, NULL, fake_put, &f, &g, err, sizeof err), -1);
    assert_null(g);
}

/* Threshold, dedup while in flight, image at the rebuild's LSN, and the
 * counter afterwards = deltas since queued. */
static void test_threshold_and_dedup(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 4, 8, 1024, 0);
    pg_key a = blk(7);
    bool fl;
    for (int i = 1; i <= 3; i++)
        imagegen_note(g, &a, 0x1000 + (lsn_t)i, false);
    imagegen_stats s;
    imagegen_get_stats(g, &s);
    assert_int_equal(s.requested, 0);
    assert_int_equal(imagegen_page_deltas(g, &a, &fl), 3);
    assert_false(fl);
    imagegen_note(g, &a, 0x1004, false); /* the 4th delta reaches it */
    imagegen_get_stats(g, &s);
    assert_int_equal(s.requested, 1);
    assert_int_equal(s.depth, 1);
    assert_int_equal(imagegen_page_deltas(g, &a, &fl), 4);
    assert_true(fl);
    for (int i = 5; i <= 10; i++) /* in flight: counted, never queued twice */
        imagegen_note(g, &a, 0x1000 + (lsn_t)i, false);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.requested, 1);
    assert_int_equal(s.depth, 1);
    assert_int_equal(imagegen_drain(g), 0); /* nothing rebuilt yet */
    assert_int_equal(imagegen_work_one(g), 1);
    assert_int_equal(imagegen_work_one(g), 0);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.depth, 1); /* finished, not yet stored */
    assert_int_equal(f.nputs, 0);
    assert_int_equal(imagegen_drain(g), 1);
    assert_int_equal(f.nputs, 1);
    assert_int_equal(f.put_lsn[0], 0x1004); /* at the queuing record (advance 0) */
    assert_int_equal(f.put_fill[0], 7);
    assert_true(f.put_key[0].blk == 7 && f.put_key[0].rel == 16384);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.written, 1);
    assert_int_equal(s.written_bytes, PG_BLCKSZ);
    /* The six deltas after the queuing record are above the image: still
     * past the threshold, so the page went straight back into the queue. */
    assert_int_equal(imagegen_page_deltas(g, &a, &fl), 6);
    assert_true(fl);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.requested, 2);
    assert_int_equal(s.depth, 1);
    assert_int_equal(imagegen_work_one(g), 1);
    assert_int_equal(imagegen_drain(g), 1);
    assert_int_equal(f.put_lsn[1], 0x1004);
    assert_int_equal(imagegen_page_deltas(g, &a, &fl), 0);
    assert_false(fl);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.requested, 2);
    assert_int_equal(s.depth, 0);
    imagegen_destroy(g);
}

/* A complete value resets the counter; one that arrives while the page is
 * in flight leaves only the deltas after it. */
static void test_complete_resets(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 3, 8, 1024, 0);
    pg_key a = blk(1);
    bool fl;
    imagegen_note(g, &a, 0x10, false);
    imagegen_note(g, &a, 0x20, false);
    imagegen_note(g, &a, 0x30, true);
    assert_int_equal(imagegen_page_deltas(g, &a, &fl), 0);
    imagegen_note(g, &a, 0x40, false);
    imagegen_note(g, &a, 0x50, false);
    imagegen_stats s;
    imagegen_get_stats(g, &s);
    assert_int_equal(s.requested, 0);
    imagegen_note(g, &a, 0x60, false);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.requested, 1);
    imagegen_note(g, &a, 0x70, false);
    imagegen_note(g, &a, 0x80, true); /* an FPI while in flight */
    imagegen_note(g, &a, 0x90, false);
    assert_int_equal(imagegen_page_deltas(g, &a, &fl), 1);
    assert_true(fl);
    assert_int_equal(imagegen_work_one(g), 1);
    assert_int_equal(imagegen_drain(g), 1);
    assert_int_equal(imagegen_page_deltas(g, &a, &fl), 1);
    assert_false(fl);
    imagegen_destroy(g);
}

/* The pipeline holds at most queue_cap pages; more are dropped and counted,
 * and a dropped page is queued again once there is room (at its next delta
 * or by the drain's sweep, whichever comes first). */
static void test_full_pipeline_drops(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 1, 2, 1024, 0);
    pg_key a = blk(1), b = blk(2), c = blk(3);
    imagegen_note(g, &a, 0x10, false);
    imagegen_note(g, &b, 0x10, false);
    imagegen_note(g, &c, 0x10, false);
    imagegen_stats s;
    imagegen_get_stats(g, &s);
    assert_int_equal(s.requested, 2);
    assert_int_equal(s.drops, 1);
    assert_int_equal(s.depth, 2);
    bool fl;
    assert_int_equal(imagegen_page_deltas(g, &c, &fl), 1);
    assert_false(fl);
    /* Rebuilt but not stored still occupies the pipeline. */
    assert_int_equal(imagegen_work_one(g), 1);
    /* The second delta of c reaches the hard cap (2 * 1): it takes a
     * reserved slot although the pipeline is full. */
    imagegen_note(g, &c, 0x20, false);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.drops, 1);
    assert_int_equal(s.requested, 3);
    assert_int_equal(s.urgent, 1);
    assert_int_equal(s.depth, 3);
    assert_int_equal(imagegen_page_deltas(g, &c, &fl), 2);
    assert_true(fl);
    assert_true(imagegen_pressure_pending(g));
    assert_int_equal(imagegen_drain(g), 1);
    /* b and c still fill queue_cap: a fresh page (not at the cap) is
     * dropped. */
    pg_key d = blk(4);
    imagegen_note(g, &d, 0x30, false);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.drops, 2);
    assert_int_equal(s.depth, 2);
    assert_int_equal(imagegen_page_deltas(g, &d, &fl), 1);
    assert_false(fl);
    while (imagegen_work_one(g) == 1)
        ;
    assert_int_equal(imagegen_drain(g), 2);
    /* Drops are outstanding: each drain sweeps the counters and queues the
     * pages still at the threshold, so no dropped page is left behind even
     * if it gets no further delta.  Draining until quiet leaves none. */
    for (int i = 0; i < 8; i++) {
        while (imagegen_work_one(g) == 1)
            ;
        imagegen_drain(g);
    }
    imagegen_get_stats(g, &s);
    assert_true(s.written >= 3);
    assert_int_equal(s.depth, 0);
    const pg_key *all[] = {&a, &b, &c, &d};
    for (int i = 0; i < 4; i++) {
        assert_true(imagegen_page_deltas(g, all[i], &fl) < 1);
        assert_false(fl);
    }
    imagegen_destroy(g);
}

/* A full queue does not starve a hot page: at the hard cap
 * (IMAGEGEN_HARD_CAP_FACTOR thresholds) it takes a reserved slot, served
 * first; when those are full
 * too, a page with more than twice the deltas of the smallest takes its
 * place (that page leaves the pipeline and keeps its count). */
static void test_urgent_lane(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 4, 2, 1024, 0); /* 8 reserved slots; urgent at 8 deltas */
    lsn_t lsn = 0x100;
    pg_key a = blk(1), b = blk(2), c = blk(3);
    for (int i = 0; i < 4; i++) {
        imagegen_note(g, &a, lsn++, false);
        imagegen_note(g, &b, lsn++, false);
    }
    for (int i = 0; i < 7; i++)
        imagegen_note(g, &c, lsn++, false);
    imagegen_stats s;
    imagegen_get_stats(g, &s);
    assert_int_equal(s.requested, 2);
    assert_int_equal(s.drops, 4); /* deltas 4..7 of c */
    bool fl;
    imagegen_note(g, &c, lsn++, false); /* the 8th */
    imagegen_get_stats(g, &s);
    assert_int_equal(s.requested, 3);
    assert_int_equal(s.urgent, 1);
    assert_int_equal(imagegen_page_deltas(g, &c, &fl), 8);
    assert_true(fl);
    for (uint32_t p = 10; p < 17; p++) { /* seven more fill the reserved lane */
        pg_key k = blk(p);
        for (int i = 0; i < 8; i++)
            imagegen_note(g, &k, lsn++, false);
    }
    imagegen_get_stats(g, &s);
    assert_int_equal(s.urgent, 8);
    assert_int_equal(s.depth, 10);
    pg_key hot = blk(99);
    for (int i = 0; i < 17; i++) /* 17 / 2 = 8: not more than twice 8 */
        imagegen_note(g, &hot, lsn++, false);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.urgent, 8);
    assert_int_equal(imagegen_page_deltas(g, &hot, &fl), 17);
    assert_false(fl);
    imagegen_note(g, &hot, lsn++, false); /* 18: displaces c (8, the oldest smallest) */
    imagegen_get_stats(g, &s);
    assert_int_equal(s.urgent, 9);
    assert_int_equal(s.depth, 10);
    assert_int_equal(imagegen_page_deltas(g, &hot, &fl), 18);
    assert_true(fl);
    assert_int_equal(imagegen_page_deltas(g, &c, &fl), 8);
    assert_false(fl);
    /* Workers serve the reserved lane first: the hot page comes back first. */
    assert_int_equal(imagegen_work_one(g), 1);
    assert_int_equal(imagegen_drain(g), 1);
    assert_int_equal(f.put_key[0].blk, 99);
    while (imagegen_work_one(g) == 1)
        ;
    imagegen_drain(g);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.written, 10);
    /* c was displaced (a drop): the drain's sweep queues it again at once,
     * without waiting for another delta. */
    assert_int_equal(s.depth, 1);
    assert_int_equal(imagegen_page_deltas(g, &c, &fl), 8);
    assert_true(fl);
    assert_int_equal(imagegen_work_one(g), 1);
    assert_int_equal(imagegen_drain(g), 1);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.written, 11);
    assert_int_equal(s.depth, 0);
    imagegen_destroy(g);
}

/* Failed rebuilds and puts are counted and restart the counter; a skipped
 * page stores nothing. */
static void test_failures_and_skips(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 2, 8, 1024, 0);
    f.fail_blk = 1;
    f.skip_blk = 2;
    pg_key a = blk(1), b = blk(2), c = blk(3);
    for (int i = 0; i < 2; i++) {
        imagegen_note(g, &a, 0x10 + (lsn_t)i, false);
        imagegen_note(g, &b, 0x10 + (lsn_t)i, false);
        imagegen_note(g, &c, 0x10 + (lsn_t)i, false);
    }
    while (imagegen_work_one(g) == 1)
        ;
    f.put_fails = true;
    assert_int_equal(imagegen_drain(g), 0);
    imagegen_stats s;
    imagegen_get_stats(g, &s);
    assert_int_equal(s.requested, 3);
    assert_int_equal(s.failures, 2); /* a's rebuild, c's put */
    assert_int_equal(s.skipped, 1);
    assert_int_equal(s.written, 0);
    assert_int_equal(s.depth, 0);
    assert_int_equal(f.nputs, 0);
    bool fl;
    assert_int_equal(imagegen_page_deltas(g, &a, &fl), 0);
    assert_false(fl);
    assert_int_equal(imagegen_page_deltas(g, &b, &fl), 0);
    assert_false(fl);
    /* c's put failed: its counter restarts too, so it is not retried at
     * once; two more deltas queue it again. */
    f.put_fails = false;
    imagegen_note(g, &c, 0x20, false);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.requested, 3);
    imagegen_note(g, &c, 0x21, false);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.requested, 4);
    assert_int_equal(imagegen_work_one(g), 1);
    assert_int_equal(imagegen_drain(g), 1);
    assert_int_equal(f.put_lsn[0], 0x21);
    imagegen_destroy(g);
}

/* The table never holds more than track_entries pages; when full it keeps
 * the pages in flight and those with many deltas. */
static void test_table_bounded(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 8, 4, 16, 0);
    pg_key hot = blk(1000), busy = blk(2000);
    for (int i = 0; i < 5; i++)
        imagegen_note(g, &hot, 0x10 + (lsn_t)i, false);
    for (int i = 0; i < 8; i++)
        imagegen_note(g, &busy, 0x10 + (lsn_t)i, false);
    for (uint32_t b = 0; b < 14; b++) {
        pg_key k = blk(b);
        imagegen_note(g, &k, 0x100, false);
    }
    imagegen_stats s;
    imagegen_get_stats(g, &s);
    assert_int_equal(s.forgotten, 0);
    pg_key extra = blk(500); /* the 17th page */
    imagegen_note(g, &extra, 0x200, false);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.forgotten, 14);
    bool fl;
    assert_int_equal(imagegen_page_deltas(g, &hot, &fl), 5);
    assert_int_equal(imagegen_page_deltas(g, &busy, &fl), 8);
    assert_true(fl);
    assert_int_equal(imagegen_page_deltas(g, &extra, &fl), 1);
    pg_key k0 = blk(0);
    assert_int_equal(imagegen_page_deltas(g, &k0, &fl), 0);
    /* Many more pages than the table holds: bounded, and the one in
     * flight survives every eviction. */
    for (uint32_t b = 10000; b < 10200; b++) {
        pg_key k = blk(b);
        imagegen_note(g, &k, 0x300, false);
    }
    assert_int_equal(imagegen_page_deltas(g, &busy, &fl), 8);
    assert_true(fl);
    assert_int_equal(imagegen_work_one(g), 1);
    assert_int_equal(imagegen_drain(g), 1);
    assert_int_equal(f.nputs, 1);
    assert_int_equal(f.put_key[0].blk, 2000);
    imagegen_destroy(g);
}

/* Real worker threads: every queued page comes back, at an LSN at or after
 * the record that queued it, with its own content. */
static void test_worker_threads(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 4, 64, 4096, 2);
    f.advance = 0x8;
    lsn_t lsn = 0x10000;
    for (int round = 0; round < 4; round++)
        for (uint32_t b = 0; b < 50; b++) {
            pg_key k = blk(b);
            imagegen_note(g, &k, lsn, false);
            lsn += 0x10;
            imagegen_drain(g);
        }
    imagegen_stats s;
    for (int i = 0; i < 2000; i++) {
        imagegen_drain(g);
        imagegen_get_stats(g, &s);
        if (s.depth == 0)
            break;
        usleep(1000);
    }
    imagegen_get_stats(g, &s);
    assert_int_equal(s.depth, 0);
    assert_int_equal(s.requested, 50);
    assert_int_equal(s.drops, 0);
    assert_int_equal(s.written, 50);
    assert_int_equal(f.nputs, 50);
    bool seen[50] = {0};
    for (int i = 0; i < f.nputs; i++) {
        uint32_t b = f.put_key[i].blk;
        assert_true(b < 50);
        assert_false(seen[b]);
        seen[b] = true;
        assert_int_equal(f.put_fill[i], b);
        /* Queued by its 4th delta, in round 3 at 0x10000 + (150 + b) * 0x10. */
        assert_int_equal(f.put_lsn[i], 0x10000 + (lsn_t)(150 + b) * 0x10 + 0x8);
    }
    imagegen_destroy(g);
}

/* Destroying with work queued and finished frees everything (ASan). */
static void test_destroy_with_work(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 1, 8, 64, 0);
    for (uint32_t b = 0; b < 6; b++) {
        pg_key k = blk(b);
        imagegen_note(g, &k, 0x10, false);
    }
    assert_int_equal(imagegen_work_one(g), 1);
    assert_int_equal(imagegen_work_one(g), 1);
    imagegen_destroy(g);
    g = make(&f, 1, 8, 64, 2);
    for (uint32_t b = 0; b < 6; b++) {
        pg_key k = blk(b);
        imagegen_note(g, &k, 0x10, false);
    }
    imagegen_destroy(g);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A slow worker: the writer waits at the hard cap until the image is
 * stored, and the counter ends below the cap. */
static void test_backpressure_waits_for_slow_worker(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 4, 16, 1024, 1); /* H = 8 */
    f.sleep_ms = 300;
    pg_key a = blk(5);
    lsn_t lsn = 0x100;
    bool fl;
    for (int i = 0; i < 7; i++)
        imagegen_note(g, &a, lsn++, false);
    /* Queued at the 4th: pending so that its LSN becomes readable early,
     * but below the cap nothing waits. */
    assert_true(imagegen_pressure_pending(g));
    assert_int_equal(imagegen_backpressure(g, lsn - 1, 5000), 0);
    assert_false(imagegen_pressure_pending(g));
    imagegen_note(g, &a, lsn, false); /* the 8th */
    assert_true(imagegen_pressure_pending(g));
    assert_int_equal(imagegen_page_deltas(g, &a, &fl), 8);
    double t0 = now_s();
    assert_int_equal(imagegen_backpressure(g, lsn, 5000), 1);
    double waited = now_s() - t0;
    assert_true(waited > 0.1); /* the rebuild sleeps 300 ms from the 4th delta */
    assert_true(waited < 4.0);
    assert_false(imagegen_pressure_pending(g));
    assert_true(imagegen_page_deltas(g, &a, &fl) < 8);
    assert_true(f.nputs >= 1);
    assert_int_equal(f.put_key[0].blk, 5);
    imagegen_stats s;
    imagegen_get_stats(g, &s);
    assert_int_equal(s.backpressure_waits, 1);
    assert_int_equal(s.backpressure_timeouts, 0);
    assert_true(s.backpressure_ns >= 100000000u);
    imagegen_destroy(g);
}

/* An image at or after the page's newest delta covers every delta counted:
 * the counter restarts at zero (not at the deltas since queued). */
static void test_image_after_newest_delta_resets(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 2, 8, 1024, 0);
    pg_key a = blk(4), b = blk(6);
    imagegen_note(g, &a, 0x10, false);
    imagegen_note(g, &a, 0x11, false); /* queued at 0x11 */
    imagegen_note(g, &a, 0x12, false);
    imagegen_note(g, &b, 0x13, false);
    imagegen_note(g, &b, 0x14, false); /* queued at 0x14 */
    imagegen_note(g, &b, 0x15, false);
    f.advance = 1; /* a's image at 0x12 (its newest delta), b's at 0x15 */
    assert_int_equal(imagegen_work_one(g), 1);
    assert_int_equal(imagegen_work_one(g), 1);
    imagegen_note(g, &b, 0x16, false); /* after b's image */
    assert_int_equal(imagegen_drain(g), 2);
    bool fl;
    assert_int_equal(imagegen_page_deltas(g, &a, &fl), 0);
    assert_int_equal(imagegen_page_deltas(g, &b, &fl), 2); /* 0x15 and 0x16 since queued */
    imagegen_destroy(g);
}

typedef struct stepper {
    imagegen *g;
    int delay_ms;
    int max_jobs; /* 0: until stopped */
    atomic_bool stop;
} stepper;

/* Plays the worker for workers = 0: after delay_ms, rebuilds queued pages
 * (max_jobs of them, or until stopped). */
static void *stepper_main(void *arg)
{
    stepper *st = arg;
    usleep((useconds_t)st->delay_ms * 1000);
    int done = 0;
    while (!atomic_load(&st->stop) && (st->max_jobs == 0 || done < st->max_jobs)) {
        if (imagegen_work_one(st->g) == 1)
            done++;
        else
            usleep(1000);
    }
    return NULL;
}

/* A pressed page at the back of the normal queue is moved to the reserved
 * lane: the one job a worker runs during the wait is that page. */
static void test_backpressure_promotes_queued_page(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 2, 8, 1024, 0); /* H = 4 */
    pg_key x = blk(1), y = blk(2), p = blk(3);
    lsn_t lsn = 0x100;
    for (int i = 0; i < 2; i++) {
        imagegen_note(g, &x, lsn++, false);
        imagegen_note(g, &y, lsn++, false);
        imagegen_note(g, &p, lsn++, false);
    }
    imagegen_note(g, &p, lsn++, false);
    imagegen_note(g, &p, lsn, false);
    bool fl;
    assert_int_equal(imagegen_page_deltas(g, &p, &fl), 4);
    assert_true(fl);
    assert_true(imagegen_pressure_pending(g));
    stepper st = {.g = g, .delay_ms = 50, .max_jobs = 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stepper_main, &st), 0);
    assert_int_equal(imagegen_backpressure(g, lsn, 5000), 1);
    pthread_join(t, NULL);
    assert_int_equal(f.nputs, 1);
    assert_int_equal(f.put_key[0].blk, 3);
    assert_int_equal(imagegen_page_deltas(g, &p, &fl), 2); /* deltas since queued */
    imagegen_stats s;
    imagegen_get_stats(g, &s);
    assert_int_equal(s.urgent, 1);
    /* x and y still wait in the normal queue, p went again (>= threshold). */
    assert_int_equal(s.depth, 3);
    imagegen_destroy(g);
}

/* More pressed pages than the list holds: the table scan finds the rest,
 * and the wait ends only when all are below the cap. */
static void test_backpressure_many_pages(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 1, 256, 1024, 0); /* H = 2 */
    const uint32_t n = IMAGEGEN_PRESSED_MAX + 20;
    lsn_t lsn = 0x100;
    for (uint32_t b = 0; b < n; b++) {
        pg_key k = blk(b);
        imagegen_note(g, &k, lsn++, false);
        imagegen_note(g, &k, lsn++, false);
    }
    assert_true(imagegen_pressure_pending(g));
    stepper st = {.g = g, .delay_ms = 20};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stepper_main, &st), 0);
    assert_int_equal(imagegen_backpressure(g, lsn, 10000), 1);
    atomic_store(&st.stop, true);
    pthread_join(t, NULL);
    assert_false(imagegen_pressure_pending(g));
    for (uint32_t b = 0; b < n; b++) {
        pg_key k = blk(b);
        bool fl;
        assert_true(imagegen_page_deltas(g, &k, &fl) < 2);
    }
    assert_true(f.nputs >= (int)n);
    imagegen_destroy(g);
}

/* Nobody rebuilds: the wait gives up at the timeout, counts it, and waives
 * the page -- further deltas do not wait again until its counter has been
 * below the cap. */
static void test_backpressure_timeout(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 2, 8, 1024, 0); /* H = 4 */
    pg_key p = blk(9);
    lsn_t lsn = 0x100;
    for (int i = 0; i < 4; i++)
        imagegen_note(g, &p, lsn++, false);
    assert_true(imagegen_pressure_pending(g));
    double t0 = now_s();
    assert_int_equal(imagegen_backpressure(g, lsn, 150), -1);
    double waited = now_s() - t0;
    assert_true(waited >= 0.14 && waited < 3.0);
    assert_false(imagegen_pressure_pending(g));
    imagegen_stats s;
    imagegen_get_stats(g, &s);
    assert_int_equal(s.backpressure_waits, 1);
    assert_int_equal(s.backpressure_timeouts, 1);
    imagegen_note(g, &p, lsn++, false); /* 5: waived */
    assert_false(imagegen_pressure_pending(g));
    assert_int_equal(imagegen_backpressure(g, lsn, 150), 0);
    /* Stalled: another page reaching the cap is waived without a wait. */
    pg_key q = blk(10);
    for (int i = 0; i < 4; i++)
        imagegen_note(g, &q, lsn++, false);
    assert_true(imagegen_pressure_pending(g));
    t0 = now_s();
    assert_int_equal(imagegen_backpressure(g, lsn, 1000), -1);
    assert_true(now_s() - t0 < 0.5);
    assert_false(imagegen_pressure_pending(g));
    imagegen_get_stats(g, &s);
    assert_int_equal(s.backpressure_waits, 1);
    assert_int_equal(s.backpressure_timeouts, 2);
    assert_int_equal(imagegen_work_one(g), 1); /* p (the wait moved it to the urgent lane) */
    /* The images arrive (the stall ends): p has 3 deltas since queued,
     * below the cap... */
    assert_int_equal(imagegen_work_one(g), 1);
    assert_int_equal(imagegen_drain(g), 2);
    bool fl;
    assert_int_equal(imagegen_page_deltas(g, &p, &fl), 3);
    /* ...so reaching it again presses the page again. */
    imagegen_note(g, &p, lsn++, false);
    assert_true(imagegen_pressure_pending(g));
    /* Its image is already rebuilt: the call stores it and need not wait. */
    while (imagegen_work_one(g) == 1)
        ;
    assert_int_equal(imagegen_backpressure(g, lsn, 2000), 0);
    assert_false(imagegen_pressure_pending(g));
    assert_true(imagegen_page_deltas(g, &p, &fl) < 4);
    imagegen_get_stats(g, &s);
    assert_int_equal(s.backpressure_timeouts, 2);
    size_t len = 0;
    char *text = metrics_render(metrics_default_registry(), &len);
    assert_non_null(text);
    assert_non_null(strstr(text, "pageserver_image_backpressure_timeouts_total "));
    assert_non_null(strstr(text, "pageserver_image_backpressure_waits_total "));
    assert_non_null(strstr(text, "pageserver_image_backpressure_seconds_total "));
    free(text);
    imagegen_destroy(g);
}

static void test_read_chain_metrics(void **state)
{
    (void)state;
    imagegen_observe_read_chain(3);
    imagegen_observe_read_chain(21);
    imagegen_observe_read_chain(7);
    assert_true(imagegen_read_chain_max() >= 21);
    size_t len = 0;
    char *text = metrics_render(metrics_default_registry(), &len);
    assert_non_null(text);
    assert_non_null(strstr(text, "pageserver_read_chain_length_bucket{le=\"24\"}"));
    assert_non_null(strstr(text, "pageserver_read_chain_max 21"));
    assert_non_null(strstr(text, "pageserver_image_queue_depth"));
    assert_non_null(strstr(text, "pageserver_image_queue_drops_total"));
    free(text);
}

/* A page a reader rebuilt is stored at the next drain, at the read's LSN;
 * it resets the counter when it is at or after the newest delta, not
 * otherwise; past IMAGEGEN_OFFERS_MAX waiting, offers are dropped. */
static void test_offers_from_reads(void **state)
{
    (void)state;
    fake f;
    imagegen *g = make(&f, 100, 8, 1024, 0);
    pg_key a = blk(1), b = blk(2);
    uint8_t page[PG_BLCKSZ];
    bool fl;
    for (lsn_t l = 0x10; l <= 0x50; l += 0x10) {
        imagegen_note(g, &a, l, false);
        imagegen_note(g, &b, l, false);
    }
    memset(page, 7, sizeof page);
    imagegen_offer(g, &a, 0x50, page); /* at the newest delta */
    imagegen_offer(g, &b, 0x40, page); /* below it */
    assert_int_equal(f.nputs, 0);      /* only the writer stores */
    assert_int_equal(imagegen_drain(g), 2);
    assert_int_equal(f.nputs, 2);
    assert_int_equal(f.put_lsn[0], 0x50);
    assert_int_equal(f.put_fill[0], 7);
    assert_int_equal(imagegen_page_deltas(g, &a, &fl), 0);
    assert_int_equal(imagegen_page_deltas(g, &b, &fl), 5);
    imagegen_stats s;
    imagegen_get_stats(g, &s);
    assert_int_equal(s.written, 2);
    assert_int_equal(s.from_reads, 2);
    assert_int_equal(s.requested, 0);

    for (int i = 0; i < IMAGEGEN_OFFERS_MAX + 3; i++) {
        pg_key k = blk(100 + (uint32_t)i);
        imagegen_offer(g, &k, 0x60, page);
    }
    imagegen_get_stats(g, &s);
    assert_int_equal(s.offer_drops, 3);
    assert_int_equal(imagegen_drain(g), IMAGEGEN_OFFERS_MAX);
    assert_int_equal(imagegen_drain(g), 0);
    imagegen_offer(g, &a, 0x60, page); /* destroy frees what was never stored */
    imagegen_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options_rejected),
        cmocka_unit_test(test_threshold_and_dedup),
        cmocka_unit_test(test_complete_resets),
        cmocka_unit_test(test_full_pipeline_drops),
        cmocka_unit_test(test_urgent_lane),
        cmocka_unit_test(test_failures_and_skips),
        cmocka_unit_test(test_table_bounded),
        cmocka_unit_test(test_worker_threads),
        cmocka_unit_test(test_destroy_with_work),
        cmocka_unit_test(test_read_chain_metrics),
        cmocka_unit_test(test_image_after_newest_delta_resets),
        cmocka_unit_test(test_backpressure_waits_for_slow_worker),
        cmocka_unit_test(test_backpressure_promotes_queued_page),
        cmocka_unit_test(test_backpressure_many_pages),
        cmocka_unit_test(test_backpressure_timeout),
        cmocka_unit_test(test_offers_from_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
