/*
 * redo.h: turning a page's versions into the page (docs/design.md §3.6, §6.5).
 *
 * For: given the versions of one page from store_get_versions() (newest
 * first, ending at a complete value or not), producing the 8 KB page.
 * Postgres WAL records are applied by a pool of redo helpers (postgres
 * processes of the patched build running compute/walredo, one page at a
 * time, over a pipe protocol in proto/walredo.h); the deltas the pageserver
 * synthesises (CLOG bits, VM clears, multixact offsets/members) are applied
 * in C here, without a helper.  Which runs go where is decided by a pure
 * planner (redo_plan), so it can be unit-tested without processes.
 *
 * Not for: finding versions (store.h) or caching pages (the page service).
 *
 * Threads: redo_apply() may be called from many threads at once; the pool
 * hands each request to an idle helper (bounded queue), pipelines requests,
 * restarts helpers that die, kills helpers that exceed the timeout, and
 * retries a request once on a fresh helper before failing it.
 */
#ifndef STRATA_PAGESERVER_REDO_H
#define STRATA_PAGESERVER_REDO_H

#include <stddef.h>
#include <stdint.h>

#include "pageserver/store/key.h"
#include "pageserver/store/store.h"

typedef struct redo_pool redo_pool;

typedef struct redo_pool_options {
    const char *pg_bindir; /* the patched build's bin/ (postgres) */
    const char *work_dir;  /* where helpers keep their tiny data directory */
    /* Path of strata_walredo.so (the file must have that name; copied).
     * NULL or "": $STRATA_WALREDO_LIB if set, else <exe dir>/../lib/strata_walredo.so.
     * Checked when the first helper starts (a missing file fails that request). */
    const char *walredo_lib;
    const char *run_as_user; /* drop privileges to this user when root (default "postgres") */
    int helpers;             /* pool size (default 2) */
    uint32_t timeout_ms;     /* per request (default 10000) */
} redo_pool_options;

void redo_pool_options_default(redo_pool_options *o);

/* Starts nothing yet (helpers start lazily).  0 or -1 with err. */
int redo_pool_create(const redo_pool_options *o, redo_pool **out, char *err, size_t errlen);

/* Makes the helpers' template data directory (initdb, once per work_dir and
 * pg_bindir) on a background thread now, instead of at the first redo, which
 * would otherwise wait for it (seconds).  A failure is logged and tried again
 * at the first redo.  Call once, from the thread that owns the pool, before
 * sharing it; redo_pool_destroy() joins the thread. */
void redo_pool_warm(redo_pool *p);
void redo_pool_destroy(redo_pool *p);

/*
 * Builds the page for key k (a KEY_REL_BLOCK or KEY_SLRU_BLOCK) at the newest
 * version in vl.  An incomplete list starts from an all-zero page.  Writes
 * PG_BLCKSZ bytes to out.  0, or -1 with err naming the key, LSN and cause.
 */
int redo_apply(redo_pool *p, const pg_key *k, const version_list *vl, uint8_t out[PG_BLCKSZ],
               char *err, size_t errlen);

typedef struct redo_stats {
    uint64_t requests;
    uint64_t records_applied;
    uint64_t synthetic_applied;
    uint64_t helper_restarts;
    uint64_t timeouts;
    uint64_t failures;
} redo_stats;
void redo_get_stats(const redo_pool *p, redo_stats *out);

#endif
