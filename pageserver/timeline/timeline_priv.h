/*
 * timeline_priv.h: the timeline handle's fields and the functions the
 * timeline's files call in each other, shared by timeline.c (the handle:
 * open, close, wiring), read.c (reads), gc.c (retention), branch.c
 * (branches, the commit-time index) and timeline_reaper.c (teardown).
 * For: those files.
 * Not for: anything else, the tenants files included (they use timeline.h).
 */
#ifndef STRATA_PAGESERVER_TIMELINE_PRIV_H
#define STRATA_PAGESERVER_TIMELINE_PRIV_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#include "pageserver/ingest/ingest.h"
#include "pageserver/ingest/walreceiver.h"
#include "pageserver/cache/pagewarm.h"
#include "pageserver/remote/uploader.h"
#include "pageserver/timeline/timeline.h"

struct timeline {
    atomic_int refs;
    timeline *reap_next; /* the reaper's queue (timeline_reaper.c), after the last unref */
    atomic_bool deleted;
    char dir[PATH_MAX];
    timeline_meta meta;
    timeline_services svc;
    uint64_t owner;
    store *st;
    ingest_state *ing;
    imagegen *ig;          /* NULL: background image generation off */
    pagewarm *warm;        /* NULL: warming off */
    atomic_bool closing;   /* the last reference is going: image workers stop waiting */
    pthread_mutex_t wr_mu; /* guards wr against stop racing status */
    walreceiver *wr;
    uploader *up; /* NULL: no remote store */

    /* Retention. */
    _Atomic lsn_t gc_horizon;
    pthread_mutex_t gc_mu; /* guards the samples and the gc_* figures below */
    struct {
        int64_t ms;
        lsn_t lsn;
    } samples[TIMELINE_LSN_SAMPLES];
    int nsamples, sample_head; /* ring: next write at sample_head */
    uint64_t gc_runs, gc_removed;
    int64_t gc_last_run_time;
    char gc_last_error[256];

    /* Branches (branch.c). */
    timeline *ancestor;        /* referenced for this timeline's life; NULL for a root */
    pthread_mutex_t branch_mu; /* guards branches[] and publishing gc_horizon */
    struct timeline_branch_point {
        strata_id child;
        lsn_t lsn;
    } * branches;
    int nbranches, branches_cap;
};

/* timeline.c: the teardown after the last unref (stops every thread of
 * the timeline, flushes or, when deleted, calls svc.on_deleted and removes
 * its directory, frees it).  Blocks for as long as those take. */
void timeline_destroy(timeline *tl);
/* timeline_reaper.c: queues tl (no reference left) for timeline_destroy on
 * the reaper's thread.  Any thread; never blocks on the teardown. */
void timeline_reaper_take(timeline_reaper *r, timeline *tl);

/* branch.c: the ingest backend of a branch (reads fall through to
 * the ancestors); NULL on out-of-memory.  Freed by timeline_branch_ingest_free. */
ingest_state *timeline_branch_ingest(timeline *tl);
/* read.c: the page of k at lsn into out (1 built, 0 no version at or
 * below lsn, -1 error; *chain versions replayed), through the page cache,
 * the store, the ancestors and redo -- for a child falling through
 * (branch.c) and for image generation and warming (timeline.c). */
int timeline_read_page_internal(timeline *tl, const pg_key *k, lsn_t lsn, uint8_t out[PG_BLCKSZ],
                                int *chain, bool *newest_complete, char *err, size_t errlen);
/* read.c: whether page k (a relation or SLRU block) lies within its
 * relation's or SLRU's size at lsn: 1 yes, 0 no (or another kind of key),
 * -1 error. */
int timeline_page_exists(timeline *tl, const pg_key *k, lsn_t lsn, char *err, size_t errlen);
/* read.c, gc.c: register the process-wide metrics (idempotent; before the
 * first read or GC pass: timeline_open). */
void timeline_read_metrics_init(void);
void timeline_gc_metrics_init(void);
/* gc.c: -1 with the GC error (SQLSTATE 55000) when lsn is below tl's GC
 * horizon or, on a branch, below its start; else 0. */
int timeline_check_horizon(timeline *tl, lsn_t lsn, char *err, size_t errlen,
                           const char **sqlstate);

#endif
