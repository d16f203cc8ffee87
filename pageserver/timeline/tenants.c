/*
 * tenants.c: the table of timelines and their directories.  See tenants.h.
 *
 * The GC thread: every GC_TICK_MS (or gc_interval when shorter) it takes
 * references to the timelines, samples each one's LSN, and when the interval
 * has passed runs timeline_gc() on each in turn, checking for a stop between
 * timelines.  It holds no lock while GC runs, so creation, deletion and
 * reads go on; a timeline deleted meanwhile is skipped (timeline_gc checks).
 *
 * Not for: page reads, ingest or the GC policy itself (timeline.c).
 */
#include "pageserver/timeline/tenants.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/strata_assert.h"
#include "pageserver/remote/manifest.h"
#include "pageserver/remote/restore.h"

#define GC_TICK_MS 1000
#define CREATING_SUFFIX ".creating"
#define DELETING_SUFFIX ".deleting"

typedef struct entry {
    strata_id tenant;
    strata_id timeline;
    timeline *tl; /* NULL while busy (being created) */
    bool busy;
    restore_progress *restore; /* busy being restored from object storage, else NULL */
} entry;

struct tenants {
    char datadir[PATH_MAX];
    char pg_bindir[PATH_MAX];
    char run_as_user[64];
    uint32_t initdb_timeout_s;
    timeline_services svc;
    pthread_mutex_t mu;
    int n;
    entry entries[TENANTS_MAX_TIMELINES];
    int ntenants;
    strata_id tenant_ids[TENANTS_MAX_TENANTS];
    atomic_uint_fast64_t next_owner;

    /* GC thread. */
    uint32_t gc_interval_ms;
    pthread_t gc_thread;
    bool gc_started;
    pthread_mutex_t gc_mu;
    pthread_cond_t gc_cv; /* CLOCK_MONOTONIC */
    bool gc_quit;

    /* Restore from object storage (svc.remote): one thread lists the store
     * and restores every timeline it holds that is not on disk, in turn. */
    pthread_t restore_thread;
    bool restore_started;
    bool restore_listing;  /* the listing has not finished: any timeline may come */
    bool restore_unlisted; /* the listing failed: what the store holds is unknown */
    _Atomic bool restore_quit;
    restore_progress *restoring; /* the one being restored now (t->mu) */

    /* Timelines that exist but are not loaded (tenants.h), t->mu. */
    tenants_not_loaded *absent;
    int nabsent, absent_cap;
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool gc_should_quit(tenants *t)
{
    pthread_mutex_lock(&t->gc_mu);
    bool q = t->gc_quit;
    pthread_mutex_unlock(&t->gc_mu);
    return q;
}

/* True while timelines may still come from object storage: GC waits, so
 * that a branch restored after its ancestor still finds its branch point
 * (issue #15; the ancestor's horizon is capped only once the branch is
 * open).  Also after a failed listing, until a restart lists again: any
 * timeline there may be a branch of one on disk. */
static bool restores_pending(tenants *t)
{
    pthread_mutex_lock(&t->mu);
    bool pending = t->restore_listing || t->restore_unlisted;
    for (int i = 0; i < t->n && !pending; i++)
        pending = t->entries[i].restore != NULL;
    pthread_mutex_unlock(&t->mu);
    return pending;
}

static void *gc_main(void *arg)
{
    pthread_setname_np(pthread_self(), "ps-gc");
    tenants *t = arg;
    timeline **list = calloc(TENANTS_MAX_TIMELINES, sizeof *list);
    if (list == NULL) {
        log_error("GC thread: out of memory; no GC will run");
        return NULL;
    }
    uint32_t tick = t->gc_interval_ms < GC_TICK_MS ? t->gc_interval_ms : GC_TICK_MS;
    int64_t next_gc = mono_ms() + t->gc_interval_ms;
    pthread_mutex_lock(&t->gc_mu);
    while (!t->gc_quit) {
        pthread_mutex_unlock(&t->gc_mu);
        int n = tenants_list(t, list, TENANTS_MAX_TIMELINES);
        int64_t now = mono_ms();
        for (int i = 0; i < n; i++)
            timeline_sample_lsn(list[i], now);
        if (now >= next_gc && !restores_pending(t)) {
            for (int i = 0; i < n && !gc_should_quit(t); i++) {
                char err[512];
                /* Fail-stop: a timeline of the tenant that is not loaded
                 * may be a branch of this one (tenants.h). */
                if (tenants_gc_blocked(t, &timeline_get_meta(list[i])->tenant, NULL, 0))
                    continue;
                /* Failures are logged and counted by timeline_gc; the next
                 * pass tries again. */
                (void)timeline_gc(list[i], mono_ms(), err, sizeof err);
            }
            next_gc = mono_ms() + t->gc_interval_ms;
        }
        for (int i = 0; i < n; i++)
            timeline_unref(list[i]);
        pthread_mutex_lock(&t->gc_mu);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += (long)tick * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        while (!t->gc_quit && pthread_cond_timedwait(&t->gc_cv, &t->gc_mu, &ts) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&t->gc_mu);
    free(list);
    return NULL;
}

static int gc_start(tenants *t, char *err, size_t errlen)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->gc_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&t->gc_mu, NULL);
    if (t->gc_interval_ms == 0)
        return 0;
    int rc = pthread_create(&t->gc_thread, NULL, gc_main, t);
    if (rc != 0) {
        snprintf(err, errlen, "cannot start the GC thread: %s", strerror(rc));
        return -1;
    }
    t->gc_started = true;
    return 0;
}

static void gc_stop(tenants *t)
{
    pthread_mutex_lock(&t->gc_mu);
    t->gc_quit = true;
    pthread_cond_broadcast(&t->gc_cv);
    pthread_mutex_unlock(&t->gc_mu);
    if (t->gc_started)
        pthread_join(t->gc_thread, NULL);
    t->gc_started = false;
    pthread_mutex_destroy(&t->gc_mu);
    pthread_cond_destroy(&t->gc_cv);
}

static int fail(int *status, int code, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int fail(int *status, int code, char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    if (status != NULL)
        *status = code;
    return -1;
}

/* vsnprintf into out; false when the result did not fit (paths longer
 * than PATH_MAX are refused, never silently cut). */
static bool path_fmt(char *out, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool path_fmt(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, len, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < len;
}

/* Removes one of our directories; a failure is only logged (a leftover is
 * removed again at the next start). */
static void remove_tree(const char *path)
{
    int rc = durable_remove_tree(path);
    if (rc != 0)
        log_warn("cannot remove %s: %s", path, strerror(-rc));
}

static bool timeline_path(const tenants *t, const strata_id *tenant, const strata_id *tl,
                          const char *suffix, char *out, size_t len)
{
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    return path_fmt(out, len, "%s/tenants/%s/timelines/%s%s", t->datadir,
                    strata_id_format(tenant, a), strata_id_format(tl, b), suffix);
}

/* Index of (tenant, tl) in the table, or -1.  t->mu held. */
static int find(const tenants *t, const strata_id *tenant, const strata_id *tl)
{
    for (int i = 0; i < t->n; i++) {
        if (strata_id_equal(&t->entries[i].tenant, tenant) &&
            strata_id_equal(&t->entries[i].timeline, tl))
            return i;
    }
    return -1;
}

static void remove_at(tenants *t, int i)
{
    t->entries[i] = t->entries[t->n - 1];
    t->n--;
}

/* Index of tenant in tenant_ids, or -1.  t->mu held. */
static int find_tenant(const tenants *t, const strata_id *tenant)
{
    for (int i = 0; i < t->ntenants; i++)
        if (strata_id_equal(&t->tenant_ids[i], tenant))
            return i;
    return -1;
}

/* Adds tenant unless known; false when the table is full.  t->mu held. */
static bool add_tenant(tenants *t, const strata_id *tenant)
{
    if (find_tenant(t, tenant) >= 0)
        return true;
    if (t->ntenants == TENANTS_MAX_TENANTS)
        return false;
    t->tenant_ids[t->ntenants++] = *tenant;
    return true;
}

static bool tenant_path(const tenants *t, const strata_id *tenant, const char *suffix, char *out,
                        size_t len)
{
    char a[STRATA_ID_HEX_LEN];
    return path_fmt(out, len, "%s/tenants/%s%s", t->datadir, strata_id_format(tenant, a), suffix);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The open timeline (tenant, id) without a new reference, or NULL (t->mu
 * held, or before any other thread runs). */
static timeline *loaded(tenants *t, const strata_id *tenant, const strata_id *id)
{
    int i = find(t, tenant, id);
    return i >= 0 ? t->entries[i].tl : NULL;
}

/* ---- timelines that exist but are not loaded (tenants.h) ---- */

static struct {
    metrics_gauge *not_loaded, *gc_blocked;
} nlmet;
static pthread_once_t nlmet_once = PTHREAD_ONCE_INIT;

static void nlmet_init(void)
{
    metrics_registry *r = metrics_default_registry();
    nlmet.not_loaded = metrics_gauge_register(
        r, "pageserver_timelines_not_loaded",
        "Timelines on disk or in object storage that are not loaded (GC of their tenant stops)", 0,
        NULL, NULL);
    nlmet.gc_blocked = metrics_gauge_register(
        r, "pageserver_gc_blocked_tenants",
        "Tenants whose GC is stopped because a timeline is not loaded", 0, NULL, NULL);
}

/* Index of (tenant, tl) in t->absent, or -1.  t->mu held. */
static int find_absent(const tenants *t, const strata_id *tenant, const strata_id *tl)
{
    for (int i = 0; i < t->nabsent; i++)
        if (strata_id_equal(&t->absent[i].tenant, tenant) &&
            strata_id_equal(&t->absent[i].timeline, tl))
            return i;
    return -1;
}

/* Index of the first timeline of tenant not loaded, or -1.  t->mu held. */
static int first_absent(const tenants *t, const strata_id *tenant)
{
    for (int i = 0; i < t->nabsent; i++)
        if (strata_id_equal(&t->absent[i].tenant, tenant))
            return i;
    return -1;
}

static void absent_gauges_locked(const tenants *t)
{
    int blocked = 0;
    for (int i = 0; i < t->nabsent; i++)
        blocked += first_absent(t, &t->absent[i].tenant) == i;
    metrics_gauge_set(nlmet.not_loaded, t->nabsent);
    metrics_gauge_set(nlmet.gc_blocked, blocked);
}

/* Records (or updates) n as not loaded, with a reason from fmt; logged
 * when the reason is new, as an error when error is set (a failure, not a
 * restore that is merely queued).  Out of memory ends the process:
 * forgetting one would let GC run without its branch point.  t->mu held. */
static void note_absent(tenants *t, const tenants_not_loaded *n, bool error, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void note_absent(tenants *t, const tenants_not_loaded *n, bool error, const char *fmt, ...)
{
    /* n is the caller's copy: the array below may move. */
    uintptr_t at = (uintptr_t)n, lo = (uintptr_t)t->absent;
    uintptr_t hi = lo + sizeof *t->absent * (size_t)t->absent_cap;
    STRATA_ASSERT(at < lo || at >= hi);
    char reason[sizeof n->reason];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    int i = find_absent(t, &n->tenant, &n->timeline);
    if (i < 0 && t->nabsent == t->absent_cap) {
        int cap = t->absent_cap ? t->absent_cap * 2 : 8;
        tenants_not_loaded *a = realloc(t->absent, sizeof *a * (size_t)cap);
        if (a == NULL) {
            /* Never forget one: GC would then run without its branch point. */
            log_fatal("out of memory recording a timeline that is not loaded");
        }
        t->absent = a;
        t->absent_cap = cap;
    }
    bool same = i >= 0 && strcmp(t->absent[i].reason, reason) == 0;
    if (i < 0)
        i = t->nabsent++;
    t->absent[i] = *n;
    snprintf(t->absent[i].reason, sizeof t->absent[i].reason, "%s", reason);
    absent_gauges_locked(t);
    if (same)
        return;
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    strata_id_format(&n->tenant, a);
    strata_id_format(&n->timeline, b);
    if (error)
        log_error("tenant %s timeline %s is not loaded: %s; GC of tenant %s stops until every "
                  "timeline of it is loaded",
                  a, b, reason, a);
    else
        log_info("tenant %s timeline %s is not loaded yet (%s); GC of tenant %s stops until it is",
                 a, b, reason, a);
}

/* (tenant, tl) is loaded now.  t->mu held. */
static void clear_absent(tenants *t, const strata_id *tenant, const strata_id *tl)
{
    int i = find_absent(t, tenant, tl);
    if (i < 0)
        return;
    t->absent[i] = t->absent[--t->nabsent];
    absent_gauges_locked(t);
    if (first_absent(t, tenant) < 0) {
        char a[STRATA_ID_HEX_LEN];
        log_info("every timeline of tenant %s is loaded; its GC resumes",
                 strata_id_format(tenant, a));
    }
}

/* Registers with parent (opened, not yet visible to GC) the branch point
 * of every timeline not loaded that names it as its ancestor, so that GC
 * keeps what those branches will read once they load.  t->mu held. */
static void hold_branch_points(tenants *t, timeline *parent)
{
    const timeline_meta *pm = timeline_get_meta(parent);
    for (int i = 0; i < t->nabsent; i++) {
        const tenants_not_loaded *n = &t->absent[i];
        if (!n->ancestry_known || !n->has_ancestor || !strata_id_equal(&n->tenant, &pm->tenant) ||
            !strata_id_equal(&n->ancestor, &pm->timeline))
            continue;
        char err[256], b[STRATA_ID_HEX_LEN];
        if (timeline_add_branch(parent, &n->timeline, n->ancestor_lsn, err, sizeof err) != 0)
            log_error("timeline %s: cannot hold the branch point of its branch %s, which is not "
                      "loaded (its pages there are gone): %s",
                      timeline_dir(parent), strata_id_format(&n->timeline, b), err);
    }
}

int tenants_list_not_loaded(tenants *t, tenants_not_loaded *out, int cap)
{
    pthread_mutex_lock(&t->mu);
    int n = t->nabsent < cap ? t->nabsent : cap;
    for (int i = 0; i < n; i++)
        out[i] = t->absent[i];
    pthread_mutex_unlock(&t->mu);
    return n;
}

bool tenants_gc_blocked(tenants *t, const strata_id *tenant, char *why, size_t len)
{
    pthread_mutex_lock(&t->mu);
    int i = first_absent(t, tenant);
    if (i >= 0 && why != NULL) {
        char b[STRATA_ID_HEX_LEN];
        snprintf(why, len, "timeline %s is not loaded: %s",
                 strata_id_format(&t->absent[i].timeline, b), t->absent[i].reason);
    }
    pthread_mutex_unlock(&t->mu);
    return i >= 0;
}

typedef struct pending_tl {
    char path[PATH_MAX];
    strata_id id;
    timeline_meta meta;
    bool done;
} pending_tl;

/* What a timeline.json says about a timeline that is not loaded. */
static tenants_not_loaded absent_from_meta(const timeline_meta *m, bool on_disk)
{
    return (tenants_not_loaded){.tenant = m->tenant,
                                .timeline = m->timeline,
                                .ancestry_known = true,
                                .has_ancestor = m->has_ancestor,
                                .ancestor = m->ancestor_timeline,
                                .ancestor_lsn = m->ancestor_lsn,
                                .on_disk = on_disk};
}

/* Opens one timeline directory (its ancestor, if any, loaded already). */
static void load_one(tenants *t, pending_tl *p, const strata_id *tenant)
{
    char err[512];
    timeline *tl = NULL;
    timeline *anc = p->meta.has_ancestor ? loaded(t, tenant, &p->meta.ancestor_timeline) : NULL;
    if (timeline_open(p->path, &t->svc, atomic_fetch_add(&t->next_owner, 1), anc, &tl, err,
                      sizeof err) != 0) {
        log_error("cannot open timeline %s: %s", p->path, err);
        tenants_not_loaded n = absent_from_meta(&p->meta, true);
        note_absent(t, &n, true, "%s does not open: %s", p->path, err);
        return;
    }
    char lb[LSN_FMT_LEN];
    log_info("loaded timeline %s at disk_consistent_lsn %s", p->path,
             lsn_format(timeline_disk_consistent_lsn(tl), lb));
    t->entries[t->n++] = (entry){.tenant = *tenant, .timeline = p->id, .tl = tl};
}

/* A timeline directory whose timeline.json cannot be trusted: its
 * ancestry is unknown, so it stops GC of the whole tenant. */
static void note_unreadable(tenants *t, const strata_id *tenant, const strata_id *id,
                            const char *path, const char *why)
{
    tenants_not_loaded n = {.tenant = *tenant, .timeline = *id, .on_disk = true};
    note_absent(t, &n, true, "%s: %s", path, why);
}

/* Reads the timeline directories of one tenant into *out (count returned). */
static int list_tenant(tenants *t, const char *tls, const strata_id *tenant, pending_tl **out)
{
    *out = NULL;
    DIR *d = opendir(tls);
    if (d == NULL)
        return 0;
    int n = 0, cap = 0;
    pending_tl *list = NULL;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char path[PATH_MAX];
        if (de->d_name[0] == '.' || !path_fmt(path, sizeof path, "%s/%s", tls, de->d_name))
            continue;
        if (ends_with(de->d_name, CREATING_SUFFIX) || ends_with(de->d_name, DELETING_SUFFIX)) {
            log_info("removing leftover %s", path);
            remove_tree(path);
            continue;
        }
        strata_id id;
        if (!strata_id_parse(de->d_name, &id)) {
            log_warn("ignoring %s: not a timeline id", path);
            continue;
        }
        timeline_meta m;
        char err[512];
        if (timeline_meta_read(path, &m, err, sizeof err) != 0) {
            log_error("cannot open timeline %s: %s", path, err);
            note_unreadable(t, tenant, &id, path, err);
            continue;
        }
        if (!strata_id_equal(&m.tenant, tenant) || !strata_id_equal(&m.timeline, &id)) {
            log_error("ignoring %s: its %s names another tenant or timeline", path,
                      TIMELINE_META_FILE);
            note_unreadable(t, tenant, &id, path,
                            "its " TIMELINE_META_FILE " names another tenant or timeline");
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            pending_tl *l = realloc(list, sizeof *l * (size_t)cap);
            if (l == NULL) {
                log_error("out of memory listing %s", tls);
                break;
            }
            list = l;
        }
        list[n] = (pending_tl){.id = id, .meta = m};
        snprintf(list[n].path, sizeof list[n].path, "%s", path);
        n++;
    }
    closedir(d);
    *out = list;
    return n;
}

/* Opens every timeline of one tenant directory: roots first, then each
 * branch once its ancestor is open.  A branch whose ancestor never opens
 * (missing, or failed) is logged and left on disk. */
static void load_tenant(tenants *t, const char *tenant_dir, const strata_id *tenant)
{
    char tls[PATH_MAX];
    if (!path_fmt(tls, sizeof tls, "%s/timelines", tenant_dir))
        return;
    pending_tl *list = NULL;
    int n = list_tenant(t, tls, tenant, &list);
    for (bool progress = true; progress;) {
        progress = false;
        for (int i = 0; i < n; i++) {
            pending_tl *p = &list[i];
            if (p->done ||
                (p->meta.has_ancestor && loaded(t, tenant, &p->meta.ancestor_timeline) == NULL))
                continue;
            p->done = progress = true;
            if (t->n == TENANTS_MAX_TIMELINES) {
                log_error("ignoring %s: more than %d timelines", p->path, TENANTS_MAX_TIMELINES);
                continue;
            }
            load_one(t, p, tenant);
        }
    }
    for (int i = 0; i < n; i++) {
        if (list[i].done)
            continue;
        char a[STRATA_ID_HEX_LEN], lb[LSN_FMT_LEN];
        log_error("cannot open timeline %s: it is a branch of timeline %s at %s, which is "
                  "missing or failed to open (left on disk)",
                  list[i].path, strata_id_format(&list[i].meta.ancestor_timeline, a),
                  lsn_format(list[i].meta.ancestor_lsn, lb));
        tenants_not_loaded nl = absent_from_meta(&list[i].meta, true);
        note_absent(t, &nl, true, "its ancestor %s is missing or failed to open", a);
    }
    free(list);
    /* Before GC starts: every loaded timeline keeps what its branches that
     * did not load will read. */
    for (int i = 0; i < t->n; i++)
        if (t->entries[i].tl != NULL && strata_id_equal(&t->entries[i].tenant, tenant))
            hold_branch_points(t, t->entries[i].tl);
}

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
    int k = find_absent(t, &id->tenant, &id->timeline);
    if (k < 0 || !t->absent[k].has_ancestor ||
        loaded(t, &id->tenant, &t->absent[k].ancestor) != NULL)
        return 0;
    char a[STRATA_ID_HEX_LEN];
    return fail(NULL, 0, err, errlen, "its ancestor timeline %s is not loaded",
                strata_id_format(&t->absent[k].ancestor, a));
}

/* Downloads one claimed timeline into building, then renames it to final
 * (durably).  0, or -1 with err (building may remain: the caller removes it). */
static int restore_publish(tenants *t, const restore_timeline_id *id, restore_progress *p,
                           const char *final, const char *building, lsn_t *lsn, char *err,
                           size_t errlen)
{
    remove_tree(building);
    int mrc = durable_mkdir_p(building, 0755);
    if (mrc != 0)
        return fail(NULL, 0, err, errlen, "cannot create %s: %s", building, strerror(-mrc));
    if (restore_timeline(t->svc.remote, &id->tenant, &id->timeline, building, &t->svc.store, p, lsn,
                         err, errlen) != 0)
        return -1;
    int r = durable_rename(building, final);
    if (r == 0)
        r = durable_fsync_parent(final);
    if (r != 0)
        return fail(NULL, 0, err, errlen, "cannot rename %s to %s: %s", building, final,
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
    int i = find(t, &id->tenant, &id->timeline);
    STRATA_ASSERT(i >= 0 && t->entries[i].restore != NULL);
    if (tl != NULL && add_tenant(t, &id->tenant)) {
        hold_branch_points(t, tl);
        t->entries[i].tl = tl;
        t->entries[i].busy = false;
        t->entries[i].restore = NULL;
        clear_absent(t, &id->tenant, &id->timeline);
    } else {
        if (tl != NULL) {
            err = "restored, but the tenant table is full";
            stays = true;
            timeline_unref(tl);
        }
        remove_at(t, i);
        int k = find_absent(t, &id->tenant, &id->timeline);
        tenants_not_loaded nl =
            k >= 0 ? t->absent[k]
                   : (tenants_not_loaded){.tenant = id->tenant, .timeline = id->timeline};
        nl.on_disk = stays;
        note_absent(t, &nl, true, "its restore from %s failed: %s", remote_describe(t->svc.remote),
                    err);
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
    bool paths =
        timeline_path(t, &id->tenant, &id->timeline, "", final, sizeof final) &&
        timeline_path(t, &id->tenant, &id->timeline, CREATING_SUFFIX, building, sizeof building);
    pthread_mutex_lock(&t->mu);
    int i = find(t, &id->tenant, &id->timeline);
    STRATA_ASSERT(i >= 0 && t->entries[i].restore != NULL);
    restore_progress *p = t->entries[i].restore;
    t->restoring = p;
    p->on_progress = restore_on_progress;
    p->progress_arg = t;
    restore_gauges_locked(t);
    int rc = paths ? check_ancestor_loaded(t, id, err, sizeof err)
                   : fail(NULL, 0, err, sizeof err, "timeline path too long under %s", t->datadir);
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
            remove_tree(building);
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
    if (!timeline_path(t, &n->tenant, &n->timeline, "", path, sizeof path))
        return false;
    pthread_mutex_lock(&t->mu);
    timeline *anc = loaded(t, &n->tenant, &n->ancestor);
    bool go = anc != NULL && find(t, &n->tenant, &n->timeline) < 0 && t->n < TENANTS_MAX_TIMELINES;
    if (go) {
        timeline_ref(anc);
        /* Busy meanwhile, as a timeline being created. */
        t->entries[t->n++] = (entry){.tenant = n->tenant, .timeline = n->timeline, .busy = true};
    }
    pthread_mutex_unlock(&t->mu);
    if (!go)
        return false;
    timeline *tl = NULL;
    int rc = timeline_open(path, &t->svc, atomic_fetch_add(&t->next_owner, 1), anc, &tl, err,
                           sizeof err);
    timeline_unref(anc);
    pthread_mutex_lock(&t->mu);
    int i = find(t, &n->tenant, &n->timeline);
    STRATA_ASSERT(i >= 0 && t->entries[i].busy && t->entries[i].tl == NULL);
    if (rc == 0) {
        hold_branch_points(t, tl);
        t->entries[i].tl = tl;
        t->entries[i].busy = false;
        clear_absent(t, &n->tenant, &n->timeline);
        log_info("loaded timeline %s now that its ancestor is", path);
    } else {
        remove_at(t, i);
        note_absent(t, n, true, "%s does not open: %s", path, err);
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
                strata_id_equal(&n->tenant, tenant) && loaded(t, tenant, &n->ancestor) != NULL)
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
        if (find(t, &ids[i].tenant, &ids[i].timeline) >= 0 ||
            !timeline_path(t, &ids[i].tenant, &ids[i].timeline, "", final, sizeof final))
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
        t->entries[t->n++] = (entry){
            .tenant = ids[i].tenant, .timeline = ids[i].timeline, .busy = true, .restore = p};
        ids[k++] = ids[i];
    }
    t->restore_listing = false;
    restore_gauges_locked(t);
    pthread_mutex_unlock(&t->mu);
    return k;
}

/* Orders the k claimed timelines so that every branch comes after its
 * ancestor (issue #15: a branch opens only once its ancestor is open): the
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
        note_absent(t, &nl, false, "queued for a restore from %s", remote_describe(t->svc.remote));
        timeline *parent = nl.has_ancestor ? loaded(t, &nl.tenant, &nl.ancestor) : NULL;
        if (parent != NULL)
            hold_branch_points(t, parent);
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
            int j = find(t, &ids[i].tenant, &ids[i].timeline);
            free(t->entries[j].restore);
            remove_at(t, j);
            pthread_mutex_unlock(&t->mu);
            continue;
        }
        restore_one(t, &ids[i]);
        load_waiting_branches(t, &ids[i].tenant);
    }
    free(ids);
    return NULL;
}

static int restore_start(tenants *t, char *err, size_t errlen)
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

static void restore_stop(tenants *t)
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

static void fill_info(const entry *e, tenants_restore_info *out)
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
    int i = find(t, tenant, tl);
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

/* Loads every tenant directory under root.  0, or -1 with err. */
static int load_tenants(tenants *t, const char *root, char *err, size_t errlen)
{
    DIR *d = opendir(root);
    if (d == NULL)
        return fail(NULL, 500, err, errlen, "cannot read %s: %s", root, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        strata_id tenant;
        if (de->d_name[0] == '.')
            continue;
        char path[PATH_MAX];
        if (!path_fmt(path, sizeof path, "%s/%s", root, de->d_name))
            continue;
        if (ends_with(de->d_name, DELETING_SUFFIX)) {
            log_info("removing leftover %s", path);
            remove_tree(path);
            continue;
        }
        if (!strata_id_parse(de->d_name, &tenant)) {
            log_warn("ignoring %s: not a tenant id", path);
            continue;
        }
        if (!add_tenant(t, &tenant)) {
            log_error("ignoring %s: more than %d tenants", path, TENANTS_MAX_TENANTS);
            continue;
        }
        load_tenant(t, path, &tenant);
    }
    closedir(d);
    return 0;
}

/* timeline_services.on_deleted: the objects of a deleted timeline leave the
 * remote store (else the next start would restore it from there).  On the
 * thread of the timeline's teardown, after its uploader stopped. */
static void forget_remote(void *arg, const timeline_meta *m, const char *dir)
{
    remote_storage *rs = arg;
    char err[512];
    if (restore_forget_timeline(rs, &m->tenant, &m->timeline, err, sizeof err) != 0)
        log_error("timeline %s: deleting its objects from %s failed (it comes back at the "
                  "next start; delete it again): %s",
                  dir, remote_describe(rs), err);
}

int tenants_open(const tenants_options *o, tenants **out, char *err, size_t errlen)
{
    *out = NULL;
    tenants *t = calloc(1, sizeof *t);
    if (t == NULL)
        return fail(NULL, 500, err, errlen, "out of memory");
    snprintf(t->datadir, sizeof t->datadir, "%s", o->datadir);
    snprintf(t->pg_bindir, sizeof t->pg_bindir, "%s", o->pg_bindir ? o->pg_bindir : "");
    snprintf(t->run_as_user, sizeof t->run_as_user, "%s",
             o->run_as_user ? o->run_as_user : "postgres");
    t->initdb_timeout_s = o->initdb_timeout_s ? o->initdb_timeout_s : 120;
    t->svc = o->svc;
    if (t->svc.remote != NULL) {
        t->svc.on_deleted = forget_remote;
        t->svc.on_deleted_arg = t->svc.remote;
    }
    atomic_init(&t->next_owner, 1);
    pthread_mutex_init(&t->mu, NULL);
    pthread_once(&nlmet_once, nlmet_init);
    char root[PATH_MAX];
    int rc = 0;
    if (!path_fmt(root, sizeof root, "%s/tenants", t->datadir))
        rc = fail(NULL, 500, err, errlen, "data directory path too long: %s", t->datadir);
    else if ((rc = durable_mkdir_p(root, 0755)) != 0)
        rc = fail(NULL, 500, err, errlen, "cannot create %s: %s", root, strerror(-rc));
    /* The last reference of a timeline is often dropped on an event loop:
     * its teardown runs on the reaper's thread instead (timeline.h). */
    if (rc == 0)
        rc = timeline_reaper_start(&t->svc.reaper, err, errlen);
    if (rc == 0)
        rc = load_tenants(t, root, err, errlen);
    if (rc != 0) {
        STRATA_ASSERT(t->n == 0); /* load_tenants fails before loading anything */
        timeline_reaper_stop(t->svc.reaper);
        pthread_mutex_destroy(&t->mu);
        free(t);
        return -1;
    }
    /* GC only now: every timeline that did not load has its branch point
     * held by its loaded ancestor (load_tenant). */
    t->gc_interval_ms = o->gc_interval_ms;
    if (gc_start(t, err, errlen) != 0 || restore_start(t, err, errlen) != 0) {
        tenants_close(t);
        return -1;
    }
    *out = t;
    return 0;
}

void tenants_close(tenants *t)
{
    if (t == NULL)
        return;
    restore_stop(t);
    gc_stop(t);
    for (int i = 0; i < t->n; i++) {
        if (t->entries[i].tl != NULL)
            timeline_unref(t->entries[i].tl);
    }
    /* Returns once every store is flushed and closed. */
    timeline_reaper_stop(t->svc.reaper);
    pthread_mutex_destroy(&t->mu);
    free(t->absent);
    free(t);
}

timeline *tenants_get(tenants *t, const strata_id *tenant, const strata_id *tl)
{
    pthread_mutex_lock(&t->mu);
    int i = find(t, tenant, tl);
    timeline *r = i >= 0 ? t->entries[i].tl : NULL;
    if (r != NULL)
        timeline_ref(r);
    pthread_mutex_unlock(&t->mu);
    return r;
}

int tenants_list(tenants *t, timeline **out, int cap)
{
    int n = 0;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->n && n < cap; i++) {
        if (t->entries[i].tl != NULL) {
            timeline_ref(t->entries[i].tl);
            out[n++] = t->entries[i].tl;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return n;
}

/*
 * Runs argv (argv[0] absolute) with stdout and stderr to logpath, as user
 * when we are root, waiting at most timeout_s.  0 or -1 with err.
 */
static int run_as(char *const argv[], const char *logpath, const char *user, uint32_t timeout_s,
                  char *err, size_t errlen)
{
    uid_t uid = 0;
    gid_t gid = 0;
    bool drop = geteuid() == 0;
    if (drop) {
        struct passwd *pw = getpwnam(user);
        if (pw == NULL)
            return fail(NULL, 500, err, errlen, "user \"%s\" does not exist", user);
        uid = pw->pw_uid;
        gid = pw->pw_gid;
    }
    int logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (logfd < 0)
        return fail(NULL, 500, err, errlen, "cannot create %s: %s", logpath, strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(logfd);
        return fail(NULL, 500, err, errlen, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        dup2(logfd, STDOUT_FILENO);
        dup2(logfd, STDERR_FILENO);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        if (drop && (setgroups(0, NULL) != 0 || setgid(gid) != 0 || setuid(uid) != 0)) {
            dprintf(STDERR_FILENO, "cannot become user %s: %s\n", user, strerror(errno));
            _exit(126);
        }
        execv(argv[0], argv);
        dprintf(STDERR_FILENO, "cannot execute %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(logfd);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int wstatus = 0;
    for (;;) {
        pid_t r = waitpid(pid, &wstatus, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR)
            return fail(NULL, 500, err, errlen, "waitpid: %s", strerror(errno));
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > (time_t)timeout_s) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
                ;
            return fail(NULL, 500, err, errlen, "%s did not finish within %u s; see %s", argv[0],
                        timeout_s, logpath);
        }
        usleep(20000);
    }
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
        return 0;
    /* The log's last line is usually the reason. */
    char tail[256] = "";
    FILE *f = fopen(logpath, "r");
    if (f != NULL) {
        char line[256];
        while (fgets(line, sizeof line, f) != NULL) {
            if (line[0] != '\n')
                snprintf(tail, sizeof tail, "%s", line);
        }
        fclose(f);
        tail[strcspn(tail, "\n")] = '\0';
    }
    if (WIFEXITED(wstatus))
        return fail(NULL, 500, err, errlen, "%s exited with status %d: %s", argv[0],
                    WEXITSTATUS(wstatus), tail);
    return fail(NULL, 500, err, errlen, "%s was killed by signal %d", argv[0],
                WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0);
}

/* Runs the patched initdb into a fresh temporary directory; *tmpdir is the
 * directory to remove afterwards, pgdata inside it the result. */
static int run_initdb(tenants *t, char *tmpdir, size_t tmplen, char *pgdata, size_t pglen,
                      char *err, size_t errlen)
{
    if (t->pg_bindir[0] == '\0')
        return fail(NULL, 500, err, errlen,
                    "initdb needs the patched Postgres build: start the pageserver with "
                    "--pg-bindir");
    char initdb[PATH_MAX];
    if (!path_fmt(initdb, sizeof initdb, "%s/initdb", t->pg_bindir))
        return fail(NULL, 500, err, errlen, "--pg-bindir is too long");
    if (access(initdb, X_OK) != 0)
        return fail(NULL, 500, err, errlen, "cannot execute %s: %s", initdb, strerror(errno));
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, tmplen, "%s/strata-initdb-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(tmpdir) == NULL)
        return fail(NULL, 500, err, errlen, "mkdtemp %s: %s", tmpdir, strerror(errno));
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam(t->run_as_user);
        if (pw == NULL || chown(tmpdir, pw->pw_uid, pw->pw_gid) != 0) {
            fail(NULL, 500, err, errlen, "cannot give %s to user %s: %s", tmpdir, t->run_as_user,
                 pw == NULL ? "no such user" : strerror(errno));
            remove_tree(tmpdir);
            return -1;
        }
    }
    snprintf(pgdata, pglen, "%s/pgdata", tmpdir);
    char logpath[PATH_MAX];
    snprintf(logpath, sizeof logpath, "%s/initdb.log", tmpdir);
    char *argv[] = {initdb, "-D",         pgdata,      "--auth=trust",      "-E",
                    "UTF8", "--locale=C", "--no-sync", "--no-instructions", NULL};
    if (run_as(argv, logpath, t->run_as_user, t->initdb_timeout_s, err, errlen) != 0) {
        remove_tree(tmpdir);
        return -1;
    }
    return 0;
}

/* Imports the request's data directory (or a fresh initdb run, in tmpdir,
 * which the caller removes) into building.  0, or -1 with *code. */
static int build_import(tenants *t, const tenants_create_request *req, const char *building,
                        timeline_meta *meta, char *tmpdir, size_t tmplen, lsn_t *lsn, int *code,
                        char *err, size_t errlen)
{
    char pgdata[PATH_MAX];
    struct stat sb;
    const char *source = req->import_pgdata;
    if (req->initdb) {
        if (run_initdb(t, tmpdir, tmplen, pgdata, sizeof pgdata, err, errlen) != 0)
            return -1;
        source = pgdata;
    } else if (stat(source, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        return fail(code, 400, err, errlen, "import_pgdata %s is not a directory", source);
    }
    if (timeline_build_from_pgdata(building, meta, source, &t->svc, lsn, err, errlen) != 0) {
        /* A directory that is not a clean Postgres data directory is the
         * caller's mistake; everything else is ours. */
        *code = req->initdb ? 500 : 400;
        return -1;
    }
    return 0;
}

/* True while a deleted timeline of that id is being torn down (its
 * .deleting directory is removed last). */
static bool deleting_in_progress(const tenants *t, const strata_id *tenant, const strata_id *tl)
{
    char gone[PATH_MAX];
    struct stat sb;
    return timeline_path(t, tenant, tl, DELETING_SUFFIX, gone, sizeof gone) && stat(gone, &sb) == 0;
}

/* A branch's LSN from the request (rounded down to 8 bytes), checked
 * against the ancestor's readable window.  0, or -1 with *code. */
static int branch_lsn(timeline *anc, const tenants_create_request *req, lsn_t *out, int *code,
                      char *err, size_t errlen)
{
    char a[STRATA_ID_HEX_LEN], lb[LSN_FMT_LEN], lo_b[LSN_FMT_LEN], hi_b[LSN_FMT_LEN],
        hb[LSN_FMT_LEN], tb[48] = "";
    strata_id_format(&req->ancestor, a);
    lsn_t lo, hi, lsn = LSN_INVALID;
    timeline_readable_window(anc, &lo, &hi);
    if (req->ancestor_time != NULL) {
        pg_timestamp when, ct;
        bool latest;
        if (!timeline_parse_time(req->ancestor_time, &when))
            return fail(code, 400, err, errlen,
                        "invalid ancestor_time \"%s\": expected an ISO 8601 / RFC 3339 "
                        "timestamp such as 2026-12-02 05:00:00+00 or 2026-12-02T05:00:00Z",
                        req->ancestor_time);
        if (timeline_lsn_by_time(anc, when, &lsn, &ct, &latest, code, err, errlen) != 0)
            return -1;
        snprintf(tb, sizeof tb, "time %s resolves to ", req->ancestor_time);
    } else {
        lsn = req->ancestor_lsn != LSN_INVALID ? req->ancestor_lsn : hi;
    }
    lsn &= ~(lsn_t)7;
    if (lsn < lo || lsn > hi) {
        lsn_t h = timeline_gc_horizon(anc);
        return fail(code, 400, err, errlen,
                    "%sLSN %s is outside the readable window %s..%s of timeline %s (GC horizon "
                    "%s, last record %s)",
                    tb, lsn_format(lsn, lb), lsn_format(lo, lo_b), lsn_format(hi, hi_b), a,
                    lsn_format(h, hb), lsn_format(hi, hi_b));
    }
    *out = lsn;
    return 0;
}

/* Resolves a branch request: the ancestor (a new reference in *anc), the
 * branch point (registered with the ancestor, so GC keeps it from now on)
 * and the child's timeline.json fields.  0, or -1 with *code. */
static int prepare_branch(tenants *t, const strata_id *tenant, const strata_id *tlid,
                          const tenants_create_request *req, timeline_meta *meta, timeline **anc,
                          int *code, char *err, size_t errlen)
{
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    if (strata_id_equal(&req->ancestor, tlid))
        return fail(code, 400, err, errlen, "a timeline cannot be its own ancestor");
    *anc = tenants_get(t, tenant, &req->ancestor);
    if (*anc == NULL)
        return fail(code, 404, err, errlen,
                    "ancestor timeline %s not found in tenant %s on this pageserver",
                    strata_id_format(&req->ancestor, a), strata_id_format(tenant, b));
    lsn_t lsn = LSN_INVALID;
    if (branch_lsn(*anc, req, &lsn, code, err, errlen) != 0)
        return -1;
    /* Registered before anything is built: a GC pass from now on keeps it. */
    if (timeline_add_branch(*anc, tlid, lsn, err, errlen) != 0) {
        *code = 400;
        return -1;
    }
    meta->has_ancestor = true;
    meta->ancestor_timeline = req->ancestor;
    meta->ancestor_lsn = lsn;
    meta->start_lsn = lsn;
    return 0;
}

int tenants_create_timeline(tenants *t, const strata_id *tenant, const strata_id *tlid,
                            const tenants_create_request *req, lsn_t *out_lsn, int *status,
                            char *err, size_t errlen)
{
    if (req->has_ancestor && (req->import_pgdata != NULL || req->initdb))
        return fail(status, 400, err, errlen,
                    "a branch (\"ancestor_timeline_id\") takes neither \"import_pgdata\" nor "
                    "\"initdb\"");
    if (!req->has_ancestor && (req->import_pgdata != NULL) == req->initdb)
        return fail(status, 400, err, errlen,
                    "give exactly one of \"import_pgdata\" (a directory), \"initdb\": true and "
                    "\"ancestor_timeline_id\"");
    if (req->ancestor_lsn != LSN_INVALID && req->ancestor_time != NULL)
        return fail(status, 400, err, errlen,
                    "give at most one of \"ancestor_lsn\" and \"ancestor_time\"");
    if (!req->has_ancestor && (req->ancestor_lsn != LSN_INVALID || req->ancestor_time != NULL))
        return fail(status, 400, err, errlen,
                    "\"ancestor_lsn\" and \"ancestor_time\" need \"ancestor_timeline_id\"");
    if (req->n_safekeepers < 0 || req->n_safekeepers > TIMELINE_MAX_SAFEKEEPERS)
        return fail(status, 400, err, errlen, "at most %d safekeepers", TIMELINE_MAX_SAFEKEEPERS);
    timeline_meta meta = {.tenant = *tenant, .timeline = *tlid};
    for (int i = 0; i < req->n_safekeepers; i++) {
        const char *s = req->safekeepers[i];
        const char *colon = s ? strrchr(s, ':') : NULL;
        if (s == NULL || colon == NULL || colon == s || colon[1] == '\0' ||
            strlen(s) >= TIMELINE_SAFEKEEPER_LEN ||
            strspn(colon + 1, "0123456789") != strlen(colon + 1))
            return fail(status, 400, err, errlen, "safekeeper address \"%s\" is not HOST:PORT",
                        s ? s : "(null)");
        snprintf(meta.safekeepers[meta.n_safekeepers++], TIMELINE_SAFEKEEPER_LEN, "%s", s);
    }

    char final[PATH_MAX], building[PATH_MAX], tmpdir[PATH_MAX] = "";
    if (!timeline_path(t, tenant, tlid, "", final, sizeof final) ||
        !timeline_path(t, tenant, tlid, CREATING_SUFFIX, building, sizeof building))
        return fail(status, 500, err, errlen, "timeline path too long under %s", t->datadir);

    pthread_mutex_lock(&t->mu);
    int i = find(t, tenant, tlid);
    bool absent = find_absent(t, tenant, tlid) >= 0;
    bool full = t->n == TENANTS_MAX_TIMELINES ||
                (find_tenant(t, tenant) < 0 && t->ntenants == TENANTS_MAX_TENANTS);
    if (i < 0 && !full && !absent)
        t->entries[t->n++] = (entry){.tenant = *tenant, .timeline = *tlid, .busy = true};
    pthread_mutex_unlock(&t->mu);
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    strata_id_format(tenant, a);
    strata_id_format(tlid, b);
    if (i >= 0)
        return fail(status, 409, err, errlen, "tenant %s timeline %s already exists", a, b);
    if (absent)
        return fail(status, 409, err, errlen,
                    "tenant %s timeline %s exists but is not loaded (see /v1/status)", a, b);
    if (full)
        return fail(status, 409, err, errlen, "this pageserver already has %d timelines",
                    TENANTS_MAX_TIMELINES);

    timeline *tl = NULL, *anc = NULL;
    lsn_t lsn = LSN_INVALID;
    int code = 500;
    remove_tree(building);
    struct stat sb;
    if (stat(final, &sb) == 0) {
        code = 409;
        fail(NULL, 0, err, errlen, "%s exists on disk but is not loaded; remove it first", final);
        goto out;
    }
    /* The reaper has not finished a deletion of the same id: its last step
     * deletes the id's objects in the remote store, which would take the
     * new timeline's uploads with them. */
    if (deleting_in_progress(t, tenant, tlid)) {
        code = 409;
        fail(NULL, 0, err, errlen, "tenant %s timeline %s is still being deleted; try again", a, b);
        goto out;
    }
    int mrc = durable_mkdir_p(building, 0755);
    if (mrc != 0) {
        fail(NULL, 0, err, errlen, "cannot create %s: %s", building, strerror(-mrc));
        goto out;
    }
    if (req->has_ancestor) {
        if (prepare_branch(t, tenant, tlid, req, &meta, &anc, &code, err, errlen) != 0 ||
            timeline_build_branch(building, &meta, &t->svc, err, errlen) != 0)
            goto out;
        lsn = meta.start_lsn;
    } else if (build_import(t, req, building, &meta, tmpdir, sizeof tmpdir, &lsn, &code, err,
                            errlen) != 0) {
        goto out;
    }
    int rc = durable_rename(building, final);
    if (rc == 0)
        rc = durable_fsync_parent(final);
    if (rc != 0) {
        fail(NULL, 0, err, errlen, "cannot rename %s to %s: %s", building, final, strerror(-rc));
        goto out;
    }
    if (timeline_open(final, &t->svc, atomic_fetch_add(&t->next_owner, 1), anc, &tl, err, errlen) !=
        0)
        goto out;
    code = 201;
out:
    if (anc != NULL) {
        if (code != 201)
            timeline_remove_branch(anc, tlid);
        timeline_unref(anc);
    }
    if (tmpdir[0] != '\0')
        remove_tree(tmpdir);
    if (code != 201)
        remove_tree(building);
    pthread_mutex_lock(&t->mu);
    i = find(t, tenant, tlid);
    if (i >= 0 && tl != NULL) {
        t->entries[i].tl = tl;
        t->entries[i].busy = false;
        bool added = add_tenant(t, tenant);
        assert(added); /* room was checked when the entry was inserted */
        (void)added;
    } else if (i >= 0) {
        remove_at(t, i);
    }
    pthread_mutex_unlock(&t->mu);
    if (code != 201) {
        if (status != NULL)
            *status = code;
        return -1;
    }
    char lb[LSN_FMT_LEN];
    log_info("created tenant %s timeline %s at %s", a, b, lsn_format(lsn, lb));
    *out_lsn = lsn;
    if (status != NULL)
        *status = code;
    return 0;
}

/* Appends id to the list in out ("C1, C2"). */
static void list_append(char *out, size_t len, size_t *used, bool *any, const strata_id *id)
{
    char c[STRATA_ID_HEX_LEN];
    int w = snprintf(out + *used, len - *used, "%s%s", *any ? ", " : "", strata_id_format(id, c));
    if (w > 0 && (size_t)w < len - *used)
        *used += (size_t)w;
    *any = true;
}

/* Lists the branches of (tenant, tl), loaded or not (tenants.h: one not
 * loaded still needs its branch point), and the timelines of the tenant not
 * loaded whose ancestry is unknown, into out ("C1, C2"); true when there is
 * one.  t->mu held. */
static bool branches_of(tenants *t, const strata_id *tenant, const strata_id *tl, char *out,
                        size_t len)
{
    size_t used = 0;
    bool any = false;
    for (int k = 0; k < t->n; k++) {
        const entry *e = &t->entries[k];
        if (e->tl == NULL || !strata_id_equal(&e->tenant, tenant))
            continue;
        const timeline_meta *m = timeline_get_meta(e->tl);
        if (m->has_ancestor && strata_id_equal(&m->ancestor_timeline, tl))
            list_append(out, len, &used, &any, &e->timeline);
    }
    /* One whose ancestry is unknown may be a branch of tl too. */
    for (int k = 0; k < t->nabsent; k++) {
        const tenants_not_loaded *n = &t->absent[k];
        if (strata_id_equal(&n->tenant, tenant) &&
            (!n->ancestry_known || (n->has_ancestor && strata_id_equal(&n->ancestor, tl))))
            list_append(out, len, &used, &any, &n->timeline);
    }
    return any;
}

int tenants_delete_timeline(tenants *t, const strata_id *tenant, const strata_id *tlid, int *status,
                            char *err, size_t errlen)
{
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    strata_id_format(tenant, a);
    strata_id_format(tlid, b);
    char final[PATH_MAX], gone[PATH_MAX];
    if (!timeline_path(t, tenant, tlid, "", final, sizeof final) ||
        !timeline_path(t, tenant, tlid, DELETING_SUFFIX, gone, sizeof gone))
        return fail(status, 500, err, errlen, "timeline path too long under %s", t->datadir);
    pthread_mutex_lock(&t->mu);
    int i = find(t, tenant, tlid);
    timeline *tl = NULL;
    bool busy = false;
    char children[1024] = "";
    if (i >= 0 && !t->entries[i].busy && branches_of(t, tenant, tlid, children, sizeof children)) {
        pthread_mutex_unlock(&t->mu);
        return fail(status, 409, err, errlen,
                    "timeline %s has branches: %s (delete them first; "
                    "/v1/status lists those not loaded)",
                    b, children);
    }
    if (i >= 0) {
        busy = t->entries[i].busy;
        if (!busy) {
            tl = t->entries[i].tl;
            remove_at(t, i);
        }
    }
    pthread_mutex_unlock(&t->mu);
    if (i < 0)
        return fail(status, 404, err, errlen, "tenant %s timeline %s not found", a, b);
    if (busy)
        return fail(status, 409, err, errlen, "tenant %s timeline %s is being created", a, b);
    remove_tree(gone);
    /* Renamed first, so a crash before the removal finishes leaves a
     * .deleting directory that the next start removes, never a timeline
     * that comes back. */
    int rc = durable_rename(final, gone);
    if (rc != 0)
        log_error("cannot rename %s to %s: %s; removing in place", final, gone, strerror(-rc));
    timeline_mark_deleted(tl, rc == 0 ? gone : final);
    timeline_unref(tl);
    log_info("deleted tenant %s timeline %s", a, b);
    if (status != NULL)
        *status = 200;
    return 0;
}

int tenants_create_tenant(tenants *t, const strata_id *tenant, int *status, char *err,
                          size_t errlen)
{
    char a[STRATA_ID_HEX_LEN], path[PATH_MAX];
    strata_id_format(tenant, a);
    if (!tenant_path(t, tenant, "", path, sizeof path))
        return fail(status, 500, err, errlen, "tenant path too long under %s", t->datadir);
    pthread_mutex_lock(&t->mu);
    int rc = 0;
    if (find_tenant(t, tenant) >= 0) {
        rc = fail(status, 409, err, errlen, "tenant %s already exists", a);
    } else if (t->ntenants == TENANTS_MAX_TENANTS) {
        rc = fail(status, 409, err, errlen, "this pageserver already has %d tenants",
                  TENANTS_MAX_TENANTS);
    } else if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        rc = fail(status, 500, err, errlen, "cannot create %s: %s", path, strerror(errno));
    } else {
        /* Held across the directory fsync so that a concurrent delete of the
         * same id cannot rename it away half made. */
        int frc = durable_fsync_parent(path);
        if (frc != 0) {
            rc = fail(status, 500, err, errlen, "cannot make %s durable: %s", path, strerror(-frc));
            rmdir(path);
        } else {
            t->tenant_ids[t->ntenants++] = *tenant;
        }
    }
    pthread_mutex_unlock(&t->mu);
    if (rc != 0)
        return -1;
    log_info("created tenant %s", a);
    if (status != NULL)
        *status = 201;
    return 0;
}

int tenants_list_tenants(tenants *t, strata_id *out, int *ntimelines, int cap)
{
    pthread_mutex_lock(&t->mu);
    int n = 0;
    for (int i = 0; i < t->ntenants && n < cap; i++, n++) {
        out[n] = t->tenant_ids[i];
        if (ntimelines != NULL) {
            ntimelines[n] = 0;
            for (int k = 0; k < t->n; k++)
                if (strata_id_equal(&t->entries[k].tenant, &out[n]))
                    ntimelines[n]++;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return n;
}

bool tenants_tenant_exists(tenants *t, const strata_id *tenant)
{
    pthread_mutex_lock(&t->mu);
    bool r = find_tenant(t, tenant) >= 0;
    pthread_mutex_unlock(&t->mu);
    return r;
}

int tenants_delete_tenant(tenants *t, const strata_id *tenant, int *status, char *err,
                          size_t errlen)
{
    char a[STRATA_ID_HEX_LEN], path[PATH_MAX], gone[PATH_MAX];
    strata_id_format(tenant, a);
    if (!tenant_path(t, tenant, "", path, sizeof path) ||
        !tenant_path(t, tenant, DELETING_SUFFIX, gone, sizeof gone))
        return fail(status, 500, err, errlen, "tenant path too long under %s", t->datadir);
    pthread_mutex_lock(&t->mu);
    int i = find_tenant(t, tenant);
    int timelines = 0;
    for (int k = 0; k < t->n; k++)
        if (strata_id_equal(&t->entries[k].tenant, tenant))
            timelines++;
    int rc = 0;
    if (i < 0) {
        rc = fail(status, 404, err, errlen, "tenant %s not found", a);
    } else if (timelines > 0) {
        rc = fail(status, 409, err, errlen, "tenant %s still has %d timeline%s: delete %s first", a,
                  timelines, timelines == 1 ? "" : "s", timelines == 1 ? "it" : "them");
    } else {
        /* Renamed under the lock: a timeline created right after this starts
         * from a fresh directory, never inside the one being removed. */
        remove_tree(gone);
        int r = durable_rename(path, gone);
        if (r != 0 && r != -ENOENT) {
            rc = fail(status, 500, err, errlen, "cannot rename %s to %s: %s", path, gone,
                      strerror(-r));
        } else {
            t->tenant_ids[i] = t->tenant_ids[t->ntenants - 1];
            t->ntenants--;
        }
    }
    pthread_mutex_unlock(&t->mu);
    if (rc != 0)
        return -1;
    remove_tree(gone);
    log_info("deleted tenant %s", a);
    if (status != NULL)
        *status = 200;
    return 0;
}
