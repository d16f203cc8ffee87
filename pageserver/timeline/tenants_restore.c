/*
 * tenants_restore.c: timelines restored from object storage at start
 * (tenants.h "restore"; the download itself is pageserver/remote/restore.h).
 *
 * One thread lists the timelines the remote store holds, claims those not
 * on disk as busy entries of the table, orders them so that every branch
 * comes after its ancestor (read from its newest manifest), and restores
 * each in turn into its .creating directory, renames it into place and
 * opens it; a branch left on disk because its ancestor was missing loads
 * once that ancestor is restored.  Progress shows in tenants_restore_pending,
 * tenants_list_restores and the restore gauges.
 *
 * For: the restore thread and what it does to the table.
 * Not for: the table itself, loading from disk, GC (tenants.c), creating
 * timelines (tenants_create.c).
 */
#include "pageserver/timeline/tenants.h"
#include "pageserver/timeline/tenants_priv.h"

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
#include "pageserver/remote/manifest.h"
#include "pageserver/remote/restore.h"

/* ---- restore from object storage (pageserver/remote/restore.h) ---- */

static struct {
    metrics_gauge *pending, *files_total, *files_done, *bytes_total, *bytes_done;
    metrics_counter *completed, *failed;
} rmet;
static pthread_once_t rmet_once = PTHREAD_ONCE_INIT;

static void rmet_init(void)
{
    metrics_registry *r = metrics_default_registry();
    rmet.pending = metrics_gauge_register(r, "pageserver_remote_restore_timelines_pending",
                                          "Timelines waiting for or in a restore from object "
                                          "storage",
                                          0, NULL, NULL);
    rmet.files_total =
        metrics_gauge_register(r, "pageserver_remote_restore_files_total",
                               "Data files of the restore running now", 0, NULL, NULL);
    rmet.files_done =
        metrics_gauge_register(r, "pageserver_remote_restore_files_done",
                               "Data files the running restore has downloaded", 0, NULL, NULL);
    rmet.bytes_total = metrics_gauge_register(r, "pageserver_remote_restore_bytes_total",
                                              "Bytes of the restore running now", 0, NULL, NULL);
    rmet.bytes_done =
        metrics_gauge_register(r, "pageserver_remote_restore_bytes_done",
                               "Bytes the running restore has downloaded", 0, NULL, NULL);
    rmet.completed =
        metrics_counter_register(r, "pageserver_remote_restores_completed_total",
                                 "Timelines restored from object storage", 0, NULL, NULL);
    rmet.failed =
        metrics_counter_register(r, "pageserver_remote_restores_failed_total",
                                 "Restores from object storage that failed", 0, NULL, NULL);
}

/* The gauges from the table (t->mu held). */
static void restore_gauges_locked(tenants *t)
{
    int pending = 0;
    for (int i = 0; i < t->n; i++)
        pending += t->entries[i].restore != NULL;
    restore_progress *p = t->restoring;
    metrics_gauge_set(rmet.pending, pending);
    metrics_gauge_set(rmet.files_total, p ? (double)atomic_load(&p->files_total) : 0);
    metrics_gauge_set(rmet.files_done, p ? (double)atomic_load(&p->files_done) : 0);
    metrics_gauge_set(rmet.bytes_total, p ? (double)atomic_load(&p->bytes_total) : 0);
    metrics_gauge_set(rmet.bytes_done, p ? (double)atomic_load(&p->bytes_done) : 0);
}

static void restore_on_progress(void *arg)
{
    tenants *t = arg;
    pthread_mutex_lock(&t->mu);
    restore_gauges_locked(t);
    pthread_mutex_unlock(&t->mu);
}

/* A branch is restored only once its ancestor is loaded (else it could
 * not open, and nothing would be gained by downloading it): -1 with err
 * when the ancestry the queue read from its manifest names one that is
 * not.  t->mu held. */
static int check_ancestor_loaded(tenants *t, const restore_timeline_id *id, char *err,
                                 size_t errlen)
{
    int k = tenants_find_absent(t, &id->tenant, &id->timeline);
    if (k < 0 || !t->absent[k].has_ancestor ||
        tenants_loaded(t, &id->tenant, &t->absent[k].ancestor) != NULL)
        return 0;
    char a[STRATA_ID_HEX_LEN];
    return tenants_fail(NULL, 0, err, errlen, "its ancestor timeline %s is not loaded",
                        strata_id_format(&t->absent[k].ancestor, a));
}

/* Downloads one claimed timeline into building, then renames it to final
 * (durably).  0, or -1 with err (building may remain: the caller removes it). */
static int restore_publish(tenants *t, const restore_timeline_id *id, restore_progress *p,
                           const char *final, const char *building, lsn_t *lsn, char *err,
                           size_t errlen)
{
    tenants_remove_tree(building);
    int mrc = durable_mkdir_p(building, 0755);
    if (mrc != 0)
        return tenants_fail(NULL, 0, err, errlen, "cannot create %s: %s", building, strerror(-mrc));
    if (restore_timeline(t->svc.remote, &id->tenant, &id->timeline, building, &t->svc.store, p, lsn,
                         err, errlen) != 0)
        return -1;
    int r = durable_rename(building, final);
    if (r == 0)
        r = durable_fsync_parent(final);
    if (r != 0)
        return tenants_fail(NULL, 0, err, errlen, "cannot rename %s to %s: %s", building, final,
                            strerror(-r));
    return 0;
}

/* Opens the timeline just restored into final.  When it does not open it
 * leaves its final place again (renamed back to building and removed), so
 * that the next start restores it afresh rather than finding a directory
 * nobody loads; *stays is set when even that rename failed.  0 or -1 with err. */
static int restore_open(tenants *t, const restore_timeline_id *id, const char *final,
                        const char *building, timeline **out, bool *stays, char *err, size_t errlen)
{
    timeline_meta meta;
    timeline *anc = NULL;
    int rc = timeline_meta_read(final, &meta, err, errlen);
    if (rc == 0 && meta.has_ancestor)
        anc = tenants_get(t, &id->tenant, &meta.ancestor_timeline);
    if (rc == 0)
        rc = timeline_open(final, &t->svc, atomic_fetch_add(&t->next_owner, 1), anc, out, err,
                           errlen);
    if (anc != NULL)
        timeline_unref(anc);
    if (rc == 0)
        return 0;
    int r = durable_rename(final, building);
    if (r != 0) {
        log_error("cannot move %s, which failed to open, back to %s: %s", final, building,
                  strerror(-r));
        *stays = true;
    }
    return -1;
}

/* The table after restore_one: the timeline serves reads (having first
 * taken over the branch points of its branches not loaded yet), or it is
 * recorded as not loaded with the reason. */
static void restore_finish(tenants *t, const restore_timeline_id *id, timeline *tl, bool stays,
                           const char *err)
{
    pthread_mutex_lock(&t->mu);
    int i = tenants_find(t, &id->tenant, &id->timeline);
    STRATA_ASSERT(i >= 0 && t->entries[i].restore != NULL);
    if (tl != NULL && tenants_add_tenant(t, &id->tenant)) {
        tenants_hold_branch_points(t, tl);
        t->entries[i].tl = tl;
        t->entries[i].busy = false;
        t->entries[i].restore = NULL;
        tenants_clear_absent(t, &id->tenant, &id->timeline);
    } else {
        if (tl != NULL) {
            err = "restored, but the tenant table is full";
            stays = true;
            timeline_unref(tl);
        }
        tenants_remove_at(t, i);
        int k = tenants_find_absent(t, &id->tenant, &id->timeline);
        tenants_not_loaded nl =
            k >= 0 ? t->absent[k]
                   : (tenants_not_loaded){.tenant = id->tenant, .timeline = id->timeline};
        nl.on_disk = stays;
        tenants_note_absent(t, &nl, true, "its restore from %s failed: %s",
                            remote_describe(t->svc.remote), err);
    }
    t->restoring = NULL;
    restore_gauges_locked(t);
    pthread_mutex_unlock(&t->mu);
}

/* Restores one claimed timeline into its .creating directory, renames it
 * into place and opens it; the entry then serves reads, or goes. */
static void restore_one(tenants *t, const restore_timeline_id *id)
{
    char final[PATH_MAX], building[PATH_MAX], err[1024] = "", a[STRATA_ID_HEX_LEN],
                                              b[STRATA_ID_HEX_LEN];
    strata_id_format(&id->tenant, a);
    strata_id_format(&id->timeline, b);
    bool paths = tenants_timeline_path(t, &id->tenant, &id->timeline, "", final, sizeof final) &&
                 tenants_timeline_path(t, &id->tenant, &id->timeline, CREATING_SUFFIX, building,
                                       sizeof building);
    pthread_mutex_lock(&t->mu);
    int i = tenants_find(t, &id->tenant, &id->timeline);
    STRATA_ASSERT(i >= 0 && t->entries[i].restore != NULL);
    restore_progress *p = t->entries[i].restore;
    t->restoring = p;
    p->on_progress = restore_on_progress;
    p->progress_arg = t;
    restore_gauges_locked(t);
    int rc = paths ? check_ancestor_loaded(t, id, err, sizeof err)
                   : tenants_fail(NULL, 0, err, sizeof err, "timeline path too long under %s",
                                  t->datadir);
    pthread_mutex_unlock(&t->mu);

    timeline *tl = NULL;
    lsn_t lsn = LSN_INVALID;
    bool stays = false;
    if (rc == 0)
        rc = restore_publish(t, id, p, final, building, &lsn, err, sizeof err);
    if (rc == 0)
        rc = restore_open(t, id, final, building, &tl, &stays, err, sizeof err);
    if (rc != 0) {
        log_error("restore of tenant %s timeline %s from %s failed: %s", a, b,
                  remote_describe(t->svc.remote), err);
        if (paths)
            tenants_remove_tree(building);
        metrics_counter_inc(rmet.failed);
    } else {
        char lb[LSN_FMT_LEN];
        log_info("restored tenant %s timeline %s; its WAL resumes at %s", a, b,
                 lsn_format(lsn, lb));
        metrics_counter_inc(rmet.completed);
    }
    restore_finish(t, id, tl, stays, err);
    free(p);
}

/* Opens one branch on disk that was waiting for its ancestor (n, a copy).
 * True when it loaded. */
static bool load_waiting_one(tenants *t, const tenants_not_loaded *n)
{
    char path[PATH_MAX], err[512];
    if (!tenants_timeline_path(t, &n->tenant, &n->timeline, "", path, sizeof path))
        return false;
    pthread_mutex_lock(&t->mu);
    timeline *anc = tenants_loaded(t, &n->tenant, &n->ancestor);
    bool go = anc != NULL && tenants_find(t, &n->tenant, &n->timeline) < 0 &&
              t->n < TENANTS_MAX_TIMELINES;
    if (go) {
        timeline_ref(anc);
        /* Busy meanwhile, as a timeline being created. */
        t->entries[t->n++] =
            (tenants_entry){.tenant = n->tenant, .timeline = n->timeline, .busy = true};
    }
    pthread_mutex_unlock(&t->mu);
    if (!go)
        return false;
    timeline *tl = NULL;
    int rc = timeline_open(path, &t->svc, atomic_fetch_add(&t->next_owner, 1), anc, &tl, err,
                           sizeof err);
    timeline_unref(anc);
    pthread_mutex_lock(&t->mu);
    int i = tenants_find(t, &n->tenant, &n->timeline);
    STRATA_ASSERT(i >= 0 && t->entries[i].busy && t->entries[i].tl == NULL);
    if (rc == 0) {
        tenants_hold_branch_points(t, tl);
        t->entries[i].tl = tl;
        t->entries[i].busy = false;
        tenants_clear_absent(t, &n->tenant, &n->timeline);
        log_info("loaded timeline %s now that its ancestor is", path);
    } else {
        tenants_remove_at(t, i);
        tenants_note_absent(t, n, true, "%s does not open: %s", path, err);
    }
    pthread_mutex_unlock(&t->mu);
    return rc == 0;
}

/* Loads the branches of tenant left on disk because their ancestor was
 * missing, now that it may be loaded (after a restore); in rounds, so that
 * a branch of such a branch follows. */
static void load_waiting_branches(tenants *t, const strata_id *tenant)
{
    for (bool progress = true; progress;) {
        progress = false;
        pthread_mutex_lock(&t->mu);
        int nc = 0;
        tenants_not_loaded *cand = calloc(t->nabsent ? (size_t)t->nabsent : 1, sizeof *cand);
        for (int i = 0; cand != NULL && i < t->nabsent; i++) {
            const tenants_not_loaded *n = &t->absent[i];
            if (n->on_disk && n->ancestry_known && n->has_ancestor &&
                strata_id_equal(&n->tenant, tenant) &&
                tenants_loaded(t, tenant, &n->ancestor) != NULL)
                cand[nc++] = *n;
        }
        pthread_mutex_unlock(&t->mu);
        for (int i = 0; i < nc; i++)
            progress |= load_waiting_one(t, &cand[i]);
        free(cand);
    }
}

/* Claims (as busy entries) the listed timelines this pageserver does not
 * have; returns how many, moved to the front of ids.  Ends the listing. */
static size_t restore_claim(tenants *t, restore_timeline_id *ids, size_t n)
{
    size_t k = 0;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < n; i++) {
        char final[PATH_MAX];
        struct stat sb;
        if (tenants_find(t, &ids[i].tenant, &ids[i].timeline) >= 0 ||
            !tenants_timeline_path(t, &ids[i].tenant, &ids[i].timeline, "", final, sizeof final))
            continue;
        if (stat(final, &sb) == 0) {
            log_warn("not restoring %s: it is on disk (but was not loaded)", final);
            continue;
        }
        restore_progress *p = calloc(1, sizeof *p);
        if (t->n == TENANTS_MAX_TIMELINES || p == NULL) {
            log_error("not restoring %s: table full or out of memory", final);
            free(p);
            continue;
        }
        t->entries[t->n++] = (tenants_entry){
            .tenant = ids[i].tenant, .timeline = ids[i].timeline, .busy = true, .restore = p};
        ids[k++] = ids[i];
    }
    t->restore_listing = false;
    restore_gauges_locked(t);
    pthread_mutex_unlock(&t->mu);
    return k;
}

/* Orders the k claimed timelines so that every branch comes after its
 * ancestor (a branch opens only once its ancestor is open): the
 * ancestor of each is read from its newest manifest.  A timeline whose
 * manifest cannot be read keeps its place (its restore fails and says why). */
static void order_restores(tenants *t, restore_timeline_id *ids, size_t k)
{
    strata_id *anc = calloc(k ? k : 1, sizeof *anc);
    bool *has = calloc(k ? k : 1, sizeof *has), *placed = calloc(k ? k : 1, sizeof *placed);
    restore_timeline_id *out = calloc(k ? k : 1, sizeof *out);
    if (anc == NULL || has == NULL || placed == NULL || out == NULL)
        goto done; /* the listing order: branches may then fail to open */
    for (size_t i = 0; i < k; i++) {
        manifest m;
        char err[512];
        tenants_not_loaded nl = {.tenant = ids[i].tenant, .timeline = ids[i].timeline};
        if (manifest_fetch_newest(t->svc.remote, &ids[i].tenant, &ids[i].timeline, &m, err,
                                  sizeof err) == 0) {
            has[i] = m.has_ancestor;
            anc[i] = m.ancestor_timeline;
            nl.ancestry_known = true;
            nl.has_ancestor = m.has_ancestor;
            nl.ancestor = m.ancestor_timeline;
            nl.ancestor_lsn = m.ancestor_lsn;
            manifest_free(&m);
        }
        /* Its branch point is held from now on, whatever its restore does:
         * by an ancestor loaded from disk at once, by one still to come
         * when it opens (hold_branch_points). */
        pthread_mutex_lock(&t->mu);
        tenants_note_absent(t, &nl, false, "queued for a restore from %s",
                            remote_describe(t->svc.remote));
        timeline *parent = nl.has_ancestor ? tenants_loaded(t, &nl.tenant, &nl.ancestor) : NULL;
        if (parent != NULL)
            tenants_hold_branch_points(t, parent);
        pthread_mutex_unlock(&t->mu);
    }
    size_t n = 0;
    for (bool progress = true; progress;) {
        progress = false;
        for (size_t i = 0; i < k; i++) {
            bool waits = false;
            for (size_t j = 0; has[i] && j < k && !waits; j++)
                waits = !placed[j] && j != i && strata_id_equal(&ids[j].tenant, &ids[i].tenant) &&
                        strata_id_equal(&ids[j].timeline, &anc[i]);
            if (placed[i] || waits)
                continue;
            out[n++] = ids[i];
            placed[i] = progress = true;
        }
    }
    for (size_t i = 0; i < k; i++) /* a cycle: cannot happen, keep them anyway */
        if (!placed[i])
            out[n++] = ids[i];
    STRATA_ASSERT(n == k);
    memcpy(ids, out, sizeof *ids * k);
done:
    free(anc);
    free(has);
    free(placed);
    free(out);
}

static void *restore_main(void *arg)
{
    pthread_setname_np(pthread_self(), "ps-restore");
    tenants *t = arg;
    restore_timeline_id *ids = NULL;
    size_t n = 0;
    char err[1024];
    if (restore_list_timelines(t->svc.remote, &ids, &n, err, sizeof err) != 0) {
        log_error("cannot list timelines in %s (none is restored, and no GC runs; restart to "
                  "retry): %s",
                  remote_describe(t->svc.remote), err);
        pthread_mutex_lock(&t->mu);
        t->restore_unlisted = true;
        pthread_mutex_unlock(&t->mu);
    }
    size_t k = restore_claim(t, ids, n);
    order_restores(t, ids, k);
    if (k > 0)
        log_info("restoring %zu timelines from %s", k, remote_describe(t->svc.remote));
    for (size_t i = 0; i < k; i++) {
        if (atomic_load(&t->restore_quit)) {
            /* Unclaim the rest: they are restored at the next start. */
            pthread_mutex_lock(&t->mu);
            int j = tenants_find(t, &ids[i].tenant, &ids[i].timeline);
            free(t->entries[j].restore);
            tenants_remove_at(t, j);
            pthread_mutex_unlock(&t->mu);
            continue;
        }
        restore_one(t, &ids[i]);
        load_waiting_branches(t, &ids[i].tenant);
    }
    free(ids);
    return NULL;
}

int tenants_restore_start(tenants *t, char *err, size_t errlen)
{
    if (t->svc.remote == NULL)
        return 0;
    pthread_once(&rmet_once, rmet_init);
    t->restore_listing = true;
    int rc = pthread_create(&t->restore_thread, NULL, restore_main, t);
    if (rc != 0) {
        t->restore_listing = false;
        snprintf(err, errlen, "cannot start the restore thread: %s", strerror(rc));
        return -1;
    }
    t->restore_started = true;
    return 0;
}

void tenants_restore_stop(tenants *t)
{
    if (!t->restore_started)
        return;
    atomic_store(&t->restore_quit, true);
    pthread_mutex_lock(&t->mu);
    if (t->restoring != NULL)
        atomic_store(&t->restoring->cancel, true);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->restore_thread, NULL);
    t->restore_started = false;
}

static void fill_info(const tenants_entry *e, tenants_restore_info *out)
{
    const restore_progress *p = e->restore;
    *out = (tenants_restore_info){.tenant = e->tenant,
                                  .timeline = e->timeline,
                                  .files_done = atomic_load(&p->files_done),
                                  .files_total = atomic_load(&p->files_total),
                                  .bytes_done = atomic_load(&p->bytes_done),
                                  .bytes_total = atomic_load(&p->bytes_total),
                                  .consistent_lsn = atomic_load(&p->consistent_lsn),
                                  .seq = atomic_load(&p->seq),
                                  .started = atomic_load(&p->started_ms) != 0};
}

bool tenants_restore_pending(tenants *t, const strata_id *tenant, const strata_id *tl,
                             tenants_restore_info *info)
{
    pthread_mutex_lock(&t->mu);
    int i = tenants_find(t, tenant, tl);
    bool restoring = i >= 0 && t->entries[i].restore != NULL;
    bool pending = restoring || (i < 0 && t->restore_listing);
    if (info != NULL) {
        if (restoring)
            fill_info(&t->entries[i], info);
        else
            *info = (tenants_restore_info){.tenant = *tenant, .timeline = *tl};
    }
    pthread_mutex_unlock(&t->mu);
    return pending;
}

int tenants_list_restores(tenants *t, tenants_restore_info *out, int cap)
{
    int n = 0;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n && n < cap; i++)
        if (t->entries[i].restore != NULL)
            fill_info(&t->entries[i], &out[n++]);
    pthread_mutex_unlock(&t->mu);
    return n;
}
