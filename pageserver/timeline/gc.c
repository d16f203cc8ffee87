/*
 * gc.c: a timeline's retention (docs/design.md §6.7): the (time, LSN)
 * samples, the GC horizon the policy asks for, the GC pass, and the
 * horizon check every read makes.  See timeline.h "retention and GC".
 *
 * timeline_gc() raises the GC horizon (persisted in TIMELINE_GC_FILE,
 * files.h, before any value below it is removed, so a restart never serves
 * a read GC made wrong) and runs store_gc() at it.  Readers check the
 * horizon before and after reading (timeline_check_horizon): GC publishes
 * the new horizon before deleting, so a read that overlapped a deletion
 * sees the new horizon on its second check and fails instead of returning
 * a page built from a partial chain.
 *
 * For: the horizon and the pass over one timeline.
 * Not for: scheduling GC over the timelines (tenants.c), removing values
 * (store_gc.c), the branch points that cap the horizon (branch.c).
 */
#include "pageserver/timeline/timeline.h"
#include "pageserver/timeline/timeline_priv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/metrics.h"
#include "base/sqlstate.h"

#define GC_SQLSTATE SQLSTATE_OBJECT_NOT_IN_PREREQUISITE_STATE

/* Process-wide GC counters. */
static struct {
    metrics_counter *runs, *removed, *failures, *refused;
} gm;
static pthread_once_t gm_once = PTHREAD_ONCE_INIT;

static void gc_metrics_init(void)
{
    metrics_registry *r = metrics_default_registry();
    gm.runs = metrics_counter_register(r, "pageserver_gc_runs_total",
                                       "GC passes that moved a timeline's horizon", 0, NULL, NULL);
    gm.removed = metrics_counter_register(r, "pageserver_gc_values_removed_total",
                                          "Values removed by GC (all timelines)", 0, NULL, NULL);
    gm.failures = metrics_counter_register(r, "pageserver_gc_failures_total",
                                           "GC passes that failed", 0, NULL, NULL);
    gm.refused = metrics_counter_register(
        r, "pageserver_gc_horizon_refusals_total",
        "Reads refused because their LSN is below the timeline's GC horizon", 0, NULL, NULL);
}

static void gc_metrics(void)
{
    pthread_once(&gm_once, gc_metrics_init);
}

void timeline_gc_metrics_init(void)
{
    gc_metrics();
}

void timeline_get_gc_stats(timeline_gc_stats *out)
{
    gc_metrics();
    out->runs = metrics_counter_value(gm.runs);
    out->removed = metrics_counter_value(gm.removed);
    out->failures = metrics_counter_value(gm.failures);
}

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
    /* Every version a branch can read stays. */
    lsn_t cap = timeline_min_branch_lsn(tl);
    if (target > cap)
        target = cap;
    if (target <= tl->meta.start_lsn)
        return LSN_INVALID;
    return target;
}

long timeline_gc(timeline *tl, int64_t now_ms, char *err, size_t errlen)
{
    gc_metrics();
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
        metrics_counter_inc(gm.failures);
        log_error("timeline %s: GC at %s failed: %s", tl->dir, lsn_format(target, lb), err);
        return -1;
    }
    metrics_counter_inc(gm.runs);
    metrics_counter_add(gm.removed, (uint64_t)removed);
    log_info("timeline %s: GC horizon %s, %ld values removed", tl->dir, lsn_format(target, lb),
             removed);
    return removed;
}

int timeline_check_horizon(timeline *tl, lsn_t lsn, char *err, size_t errlen, const char **sqlstate)
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
    metrics_counter_inc(gm.refused);
    return -1;
}
