/*
 * pagewarm.h: keeping cached pages current (docs/design.md §6.4) -- a
 * bounded set of pages that ingest changed while the page cache held an
 * older version of them, and a background thread that rebuilds each one
 * once it has been quiet for a while, so that the next read of it is a
 * cache hit instead of a redo round trip.
 *
 * For: the compute that reads a page, changes it and later evicts it (its
 * buffers and file cache are smaller than the data).  Without warming, the
 * read that brings it back replays the compute's own changes on the read's
 * critical path: on a busy machine, several hand-offs between threads and
 * a redo helper process.  With it, that replay happened in the background,
 * usually one record on top of the cached version.
 * Not for: deciding which pages are cached (pagecache.h) or durable images
 * (imagegen.h: a warmed page lives only in memory).
 *
 * Quiet time: a page is rebuilt only once no change was noted for it for
 * quiet_ms, so a page changed by every transaction (a branch or teller row,
 * the heap page being appended to: pages the compute keeps in its buffers)
 * is not rebuilt over and over; changes that arrive while it waits are
 * coalesced into one rebuild at the newest LSN.
 *
 * Bounds: at most capacity pages wait; a note that finds the set full is
 * dropped and counted (that page's next read replays, as without warming).
 *
 * Threads: pagewarm_note() and pagewarm_get_stats() from any thread (one
 * short mutex, never waits for the worker); the rebuild callback runs on
 * the one worker thread.  pagewarm_destroy() stops and joins it.
 */
#ifndef STRATA_PAGESERVER_PAGEWARM_H
#define STRATA_PAGESERVER_PAGEWARM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "pageserver/store/key.h"

typedef struct pagewarm pagewarm;

/*
 * Brings page k, as of an LSN >= lsn, into the page cache.  Returns 1 when
 * done (or nothing was needed), 0 when lsn is not readable yet (the page is
 * noted again and retried after the quiet time), -1 with err (logged and
 * counted, not retried).  Called on the worker thread.
 */
typedef int (*pagewarm_fn)(void *arg, const pg_key *k, lsn_t lsn, char *err, size_t errlen);

typedef struct pagewarm_options {
    size_t capacity;   /* pages waiting at once [16, 2^20] (default 16384) */
    uint32_t quiet_ms; /* a page is rebuilt this long after its last change (default 50) */
} pagewarm_options;

#define PAGEWARM_DEFAULT_CAPACITY 16384
#define PAGEWARM_DEFAULT_QUIET_MS 50

void pagewarm_options_default(pagewarm_options *o);

/* Starts the worker; fn and arg must outlive the handle.  0, or -1 with err. */
int pagewarm_create(const pagewarm_options *o, pagewarm_fn fn, void *arg, pagewarm **out, char *err,
                    size_t errlen);

/* Stops and joins the worker (it finishes the page it is rebuilding) and
 * drops what waits.  NULL is a no-op. */
void pagewarm_destroy(pagewarm *w);

/* Page k changed at lsn: rebuild it once it has been quiet (coalesced with
 * a wait already there).  false: the set was full and the note dropped. */
bool pagewarm_note(pagewarm *w, const pg_key *k, lsn_t lsn);

typedef struct pagewarm_stats {
    uint64_t noted;     /* notes taken, coalesced ones included */
    uint64_t coalesced; /* notes for a page already waiting */
    uint64_t dropped;   /* notes refused by a full set */
    uint64_t rebuilt;   /* callback returned 1 */
    uint64_t retried;   /* callback returned 0 */
    uint64_t failures;  /* callback returned -1 */
    uint64_t waiting;   /* pages waiting now */
} pagewarm_stats;

void pagewarm_get_stats(pagewarm *w, pagewarm_stats *out);

#endif
