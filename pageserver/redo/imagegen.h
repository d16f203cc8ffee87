/*
 * imagegen.h: image generation pushdown (docs/design.md §6.6) -- per-page delta
 * counters, a bounded queue of pages to materialise, background workers that
 * rebuild them, and the hand-back of finished images to the store's writer.
 *
 * For: keeping the delta chain a read replays short when the compute runs
 * with full_page_writes=off (no record resets a chain).  Ingest tells
 * imagegen_note() about every page value it puts; a page whose count of
 * deltas since its newest complete value reaches the threshold is queued
 * once (a page already in flight is not queued again).  A worker rebuilds it
 * through the rebuild callback at an LSN L >= the end of the record that
 * queued it (the timeline reads at its latest ingested LSN, a record end),
 * and the writer thread, in imagegen_drain(), stores the page as an image at
 * L through the put callback.  An image is only a cached materialisation:
 * it equals what a read at L returns.
 * Not for: reading pages (timeline/read.c), storing values (store.h), deciding
 * when ingest runs (walreceiver.c).
 *
 * Bounds: the counter table holds at most track_entries pages (when full it
 * forgets the pages with the fewest deltas, so a forgotten page's chain may
 * grow past the threshold by what it had); pages enter the pipeline (queued
 * + being rebuilt + waiting for the writer) while it holds fewer than
 * queue_cap.  A page that finds it full is dropped and counted; its counter
 * stays at or past the threshold, so its next delta asks again -- and once
 * it has the hard cap of deltas it takes one of max(8, queue_cap / 8) slots
 * reserved for such pages, which workers serve first (so a hot page cannot
 * starve while a bulk load fills the queue).
 *
 * The hard cap (backpressure): H = IMAGEGEN_HARD_CAP_FACTOR * threshold.  A
 * page whose counter reaches H is "pressed".  After each record the writer's
 * caller (the WAL receiver) checks imagegen_pressure_pending() -- one
 * compare -- and when it is true makes every record ingested so far
 * readable (store_advance to the end of that record, which is fully
 * applied) and calls imagegen_backpressure(): it stores finished images,
 * puts each pressed page in the reserved lane (queued there at the readable
 * LSN if it was out of the pipeline), and waits for the workers until every
 * pressed counter is below H, or the timeout (IMAGEGEN_BACKPRESSURE_TIMEOUT_MS
 * in the receiver), after which the pages still at H are waived -- not
 * waited for again until their counters fall below H -- so ingest never
 * deadlocks; and until a worker delivers a result again, pages that reach H
 * are waived at once (also counted as timeouts): a stuck or slow-starting
 * redo pool stalls ingest for one timeout, not one per page.  Every job then needs only readable
 * LSNs (the rebuild's min_lsn
 * <= the readable LSN), so no worker waits for the waiting writer.
 *
 * The bound.  A page's counter is an upper bound of the deltas a read at the
 * newest readable LSN replays (an image at L resets it to 0 when no delta
 * was noted after L, else to the deltas noted since the page was queued, a
 * superset of those after L; a complete value resets it to 0), and a read at an older LSN replays
 * no more than the counter was when that LSN was newest.  Ingest stops after the record that brings
 * a counter to H until it is below H again, so at any readable LSN every counter is <= H + r - 1, r
 * = the most deltas one record puts on one page: r = 1 (a block reference, a CLOG page's set, a VM
 * page's clears are each one delta per record).  So: longest chain a read replays <= H = 2 *
 * threshold, i.e. threshold + a slack of one threshold, except (each counted) for
 *   - a backpressure timeout (pageserver_image_backpressure_timeouts_total):
 *     that page's chain may grow until its image is stored;
 *   - a counter forgotten by a full table (stats.forgotten): the page's chain
 *     may grow by what it had (< H);
 *   - chains already in the store when the process started (counters start
 *     at zero): at most H more than they were;
 *   - a writer that ingests without calling imagegen_backpressure() (tests,
 *     import tools).
 * It costs ingest nothing while no page is at H; bulk loads of cold pages
 * (each page gets H deltas before its first image) may wait for workers.
 *
 * Threads: imagegen_note(), imagegen_drain(), imagegen_pressure_pending()
 * and imagegen_backpressure() belong to the one writer thread of the store
 * (never concurrently with each other); only imagegen_backpressure() waits
 * for a worker, bounded by its timeout (the others take one short mutex
 * around the queue).  Workers call the rebuild
 * callback from their own threads.  imagegen_get_stats() and
 * imagegen_observe_read_chain() are for any thread.  imagegen_destroy()
 * stops and joins the workers; the writer must not use the handle during or
 * after it.
 *
 * Errors: creation fails with a message (bad options, out of memory,
 * threads).  A page that cannot be rebuilt or stored is logged and counted
 * (stats.failures), never fatal: reads of that page replay the chain as
 * before, and its counter restarts from zero so it is retried only after
 * another threshold of deltas.
 */
#ifndef STRATA_PAGESERVER_IMAGEGEN_H
#define STRATA_PAGESERVER_IMAGEGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "pageserver/store/key.h"

typedef struct imagegen imagegen;

/*
 * Rebuilds page k at some LSN >= min_lsn that readers may read (a record end
 * <= last_record_lsn); may wait for ingest to reach min_lsn.  Returns 1 with
 * the page in out and that LSN in *at; 0 when no image is useful (the page
 * does not exist there, or its newest version is already complete); -1 with
 * err.  Called on worker threads.
 */
typedef int (*imagegen_rebuild_fn)(void *arg, const pg_key *k, lsn_t min_lsn,
                                   uint8_t out[PG_BLCKSZ], lsn_t *at, char *err, size_t errlen);

/* Stores page as an image of k at lsn (<= last_record_lsn).  0 or -1 with
 * err.  Called on the writer thread inside imagegen_drain(). */
typedef int (*imagegen_put_fn)(void *arg, const pg_key *k, lsn_t lsn, const uint8_t page[PG_BLCKSZ],
                               char *err, size_t errlen);

typedef struct imagegen_options {
    uint32_t threshold;   /* deltas since the newest complete value that queue a page (>= 1) */
    size_t track_entries; /* pages counted at once [16, 2^24] (default 131072) */
    size_t queue_cap;     /* pages in the pipeline at once [1, 65536] (default 1024) */
    int workers;          /* rebuild threads [0, 64] (default 2); 0: only imagegen_work_one() */
} imagegen_options;

#define IMAGEGEN_DEFAULT_WORKERS 2
/* The hard cap H = IMAGEGEN_HARD_CAP_FACTOR * threshold (see the bound
 * above); the reserved lane serves pages at H. */
#define IMAGEGEN_HARD_CAP_FACTOR 2
#define IMAGEGEN_URGENT_FACTOR IMAGEGEN_HARD_CAP_FACTOR
/* Pressed pages listed at once (more: found again by a table scan). */
#define IMAGEGEN_PRESSED_MAX 64
/* How long the WAL receiver waits in imagegen_backpressure(). */
#define IMAGEGEN_BACKPRESSURE_TIMEOUT_MS 2000

void imagegen_options_default(imagegen_options *o);

/* Starts the workers.  rebuild, put and arg must outlive the handle.
 * 0, or -1 with err. */
int imagegen_create(const imagegen_options *o, imagegen_rebuild_fn rebuild, imagegen_put_fn put,
                    void *arg, imagegen **out, char *err, size_t errlen);

/* Stops and joins the workers (each finishes the page it is rebuilding),
 * drops what is queued or finished and not yet stored, frees.  NULL is a
 * no-op. */
void imagegen_destroy(imagegen *g);

/* ---- writer thread ---- */

/* One page value was put at lsn (a record end); complete = the value is an
 * image, a zero page or a will_init record.  Never blocks on workers. */
void imagegen_note(imagegen *g, const pg_key *k, lsn_t lsn, bool complete);

/* Stores every finished image (put callback) and settles its counter: a
 * page's deltas become 0 when the image is at or after its newest delta,
 * else those counted since it was queued (an upper bound of the deltas
 * above the image); a page still at or past the threshold (hot
 * while in flight) is queued again at once.  Stores the pages readers
 * offered too (imagegen_offer).  Returns the number of images stored. */
int imagegen_drain(imagegen *g);

/* True when ingest should make what it ingested readable and call
 * imagegen_backpressure() before the next record: some page reached the
 * hard cap, or a page was queued since the last call (readable early, its
 * rebuild starts at once rather than at the end of the WAL message, so it
 * overlaps the next threshold of deltas).  A few loads and compares. */
bool imagegen_pressure_pending(const imagegen *g);

/*
 * Backpressure: every record noted so far must be readable at readable (>=
 * each LSN noted).  Returns 0 at once when no page is at the hard cap.
 * Else drains finished images and waits (at most timeout_ms)
 * until each page at the hard cap has fewer deltas, giving those pages
 * priority.  0 when nothing was at the cap, 1 after a successful wait, -1
 * at the timeout (logged and counted; the pages still at the cap are
 * waived), or at once, without waiting, while no result has been drained
 * since the last timeout.
 */
int imagegen_backpressure(imagegen *g, lsn_t readable, int timeout_ms);

/* ---- any thread ---- */

/* Pages readers rebuilt waiting for the writer, at most (more are dropped). */
#define IMAGEGEN_OFFERS_MAX 64

/*
 * A reader rebuilt page k at lsn (<= the store's last_record_lsn) by
 * replaying a long chain: store it as an image at the next
 * imagegen_drain(), so the next read of that page starts there.  Copies the
 * page; never blocks on the writer (when IMAGEGEN_OFFERS_MAX wait already,
 * the page is dropped and counted).
 */
void imagegen_offer(imagegen *g, const pg_key *k, lsn_t lsn, const uint8_t page[PG_BLCKSZ]);

/* ---- tests ---- */

/* Rebuilds one queued page on the calling thread (for workers == 0): 1 if a
 * page was taken from the queue, 0 if the queue was empty. */
int imagegen_work_one(imagegen *g);

/* The counter of page k (0 when not tracked) and whether it is in flight.
 * Writer thread only. */
uint32_t imagegen_page_deltas(imagegen *g, const pg_key *k, bool *in_flight);

/* ---- any thread ---- */

typedef struct imagegen_stats {
    uint64_t requested; /* pages queued */
    uint64_t urgent;    /* of which in the reserved lane */
    uint64_t drops;     /* pages refused by a full pipeline */
    uint64_t written;   /* images stored */
    uint64_t written_bytes;
    uint64_t skipped;               /* rebuilds that found no image useful */
    uint64_t failures;              /* rebuilds or puts that failed */
    uint64_t forgotten;             /* counters dropped from a full table */
    uint64_t depth;                 /* pages in the pipeline now */
    uint64_t backpressure_waits;    /* imagegen_backpressure() calls that waited */
    uint64_t backpressure_timeouts; /* of which ended at the timeout */
    uint64_t backpressure_ns;       /* time spent in those waits */
    uint64_t from_reads;            /* of written: pages readers rebuilt (imagegen_offer) */
    uint64_t offer_drops;           /* offers refused: too many waiting for the writer */
} imagegen_stats;

void imagegen_get_stats(imagegen *g, imagegen_stats *out);

/* The read path's chain lengths (versions replayed per page read): feeds the
 * process-wide pageserver_read_chain_length histogram and
 * pageserver_read_chain_max gauge. */
void imagegen_observe_read_chain(int n);

/* Registers the process-wide image and read-chain metrics (idempotent), so
 * /metrics shows them, at zero, also where image generation is off. */
void imagegen_metrics_init(void);

/* The longest chain observed since start (process-wide). */
uint64_t imagegen_read_chain_max(void);

#endif
