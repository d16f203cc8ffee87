/*
 * tenants.c: the table of timelines and their directories: loading every
 * timeline on disk at start, finding, listing, deleting timelines, the
 * tenants' own directories, the timelines that exist but are not loaded,
 * and the GC thread.  See tenants.h.  Creating a timeline is
 * tenants_create.c, restoring from object storage tenants_restore.c;
 * tenants_priv.h holds the table's fields the three share.
 *
 * The GC thread: every GC_TICK_MS (or gc_interval when shorter) it takes
 * references to the timelines, samples each one's LSN, and when the interval
 * has passed runs timeline_gc() on each in turn, checking for a stop between
 * timelines.  It holds no lock while GC runs, so creation, deletion and
 * reads go on; a timeline deleted meanwhile is skipped (timeline_gc checks).
 *
 * For: the set of timelines and its directories.
 * Not for: page reads, ingest or the GC policy itself (timeline.h, gc.c).
 */
#include "pageserver/timeline/tenants.h"
#include "pageserver/timeline/tenants_priv.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/strata_assert.h"
#include "pageserver/remote/restore.h"

#define GC_TICK_MS 1000

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
 * (the ancestor's horizon is capped only once the branch is
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

int tenants_fail(int *status, int code, char *err, size_t errlen, const char *fmt, ...)
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
bool tenants_path_fmt(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, len, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < len;
}

/* Removes one of our directories; a failure is only logged (a leftover is
 * removed again at the next start). */
void tenants_remove_tree(const char *path)
{
    int rc = durable_remove_tree(path);
    if (rc != 0)
        log_warn("cannot remove %s: %s", path, strerror(-rc));
}

bool tenants_timeline_path(const tenants *t, const strata_id *tenant, const strata_id *tl,
                           const char *suffix, char *out, size_t len)
{
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    return tenants_path_fmt(out, len, "%s/tenants/%s/timelines/%s%s", t->datadir,
                            strata_id_format(tenant, a), strata_id_format(tl, b), suffix);
}

/* Index of (tenant, tl) in the table, or -1.  t->mu held. */
int tenants_find(const tenants *t, const strata_id *tenant, const strata_id *tl)
{
    for (int i = 0; i < t->n; i++) {
        if (strata_id_equal(&t->entries[i].tenant, tenant) &&
            strata_id_equal(&t->entries[i].timeline, tl))
            return i;
    }
    return -1;
}

void tenants_remove_at(tenants *t, int i)
{
    t->entries[i] = t->entries[t->n - 1];
    t->n--;
}

/* Index of tenant in tenant_ids, or -1.  t->mu held. */
int tenants_find_tenant(const tenants *t, const strata_id *tenant)
{
    for (int i = 0; i < t->ntenants; i++)
        if (strata_id_equal(&t->tenant_ids[i], tenant))
            return i;
    return -1;
}

/* Adds tenant unless known; false when the table is full.  t->mu held. */
bool tenants_add_tenant(tenants *t, const strata_id *tenant)
{
    if (tenants_find_tenant(t, tenant) >= 0)
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
    return tenants_path_fmt(out, len, "%s/tenants/%s%s", t->datadir, strata_id_format(tenant, a),
                            suffix);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The open timeline (tenant, id) without a new reference, or NULL (t->mu
 * held, or before any other thread runs). */
timeline *tenants_loaded(tenants *t, const strata_id *tenant, const strata_id *id)
{
    int i = tenants_find(t, tenant, id);
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
int tenants_find_absent(const tenants *t, const strata_id *tenant, const strata_id *tl)
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
void tenants_note_absent(tenants *t, const tenants_not_loaded *n, bool error, const char *fmt, ...)
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
    int i = tenants_find_absent(t, &n->tenant, &n->timeline);
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
void tenants_clear_absent(tenants *t, const strata_id *tenant, const strata_id *tl)
{
    int i = tenants_find_absent(t, tenant, tl);
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
void tenants_hold_branch_points(tenants *t, timeline *parent)
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
    timeline *anc =
        p->meta.has_ancestor ? tenants_loaded(t, tenant, &p->meta.ancestor_timeline) : NULL;
    if (timeline_open(p->path, &t->svc, atomic_fetch_add(&t->next_owner, 1), anc, &tl, err,
                      sizeof err) != 0) {
        log_error("cannot open timeline %s: %s", p->path, err);
        tenants_not_loaded n = absent_from_meta(&p->meta, true);
        tenants_note_absent(t, &n, true, "%s does not open: %s", p->path, err);
        return;
    }
    char lb[LSN_FMT_LEN];
    log_info("loaded timeline %s at disk_consistent_lsn %s", p->path,
             lsn_format(timeline_disk_consistent_lsn(tl), lb));
    t->entries[t->n++] = (tenants_entry){.tenant = *tenant, .timeline = p->id, .tl = tl};
}

/* A timeline directory whose timeline.json cannot be trusted: its
 * ancestry is unknown, so it stops GC of the whole tenant. */
static void note_unreadable(tenants *t, const strata_id *tenant, const strata_id *id,
                            const char *path, const char *why)
{
    tenants_not_loaded n = {.tenant = *tenant, .timeline = *id, .on_disk = true};
    tenants_note_absent(t, &n, true, "%s: %s", path, why);
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
        if (de->d_name[0] == '.' || !tenants_path_fmt(path, sizeof path, "%s/%s", tls, de->d_name))
            continue;
        if (ends_with(de->d_name, CREATING_SUFFIX) || ends_with(de->d_name, DELETING_SUFFIX)) {
            log_info("removing leftover %s", path);
            tenants_remove_tree(path);
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
    if (!tenants_path_fmt(tls, sizeof tls, "%s/timelines", tenant_dir))
        return;
    pending_tl *list = NULL;
    int n = list_tenant(t, tls, tenant, &list);
    for (bool progress = true; progress;) {
        progress = false;
        for (int i = 0; i < n; i++) {
            pending_tl *p = &list[i];
            if (p->done || (p->meta.has_ancestor &&
                            tenants_loaded(t, tenant, &p->meta.ancestor_timeline) == NULL))
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
        tenants_note_absent(t, &nl, true, "its ancestor %s is missing or failed to open", a);
    }
    free(list);
    /* Before GC starts: every loaded timeline keeps what its branches that
     * did not load will read. */
    for (int i = 0; i < t->n; i++)
        if (t->entries[i].tl != NULL && strata_id_equal(&t->entries[i].tenant, tenant))
            tenants_hold_branch_points(t, t->entries[i].tl);
}

/* Loads every tenant directory under root.  0, or -1 with err. */
static int load_tenants(tenants *t, const char *root, char *err, size_t errlen)
{
    DIR *d = opendir(root);
    if (d == NULL)
        return tenants_fail(NULL, 500, err, errlen, "cannot read %s: %s", root, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        strata_id tenant;
        if (de->d_name[0] == '.')
            continue;
        char path[PATH_MAX];
        if (!tenants_path_fmt(path, sizeof path, "%s/%s", root, de->d_name))
            continue;
        if (ends_with(de->d_name, DELETING_SUFFIX)) {
            log_info("removing leftover %s", path);
            tenants_remove_tree(path);
            continue;
        }
        if (!strata_id_parse(de->d_name, &tenant)) {
            log_warn("ignoring %s: not a tenant id", path);
            continue;
        }
        if (!tenants_add_tenant(t, &tenant)) {
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
        return tenants_fail(NULL, 500, err, errlen, "out of memory");
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
    if (!tenants_path_fmt(root, sizeof root, "%s/tenants", t->datadir))
        rc = tenants_fail(NULL, 500, err, errlen, "data directory path too long: %s", t->datadir);
    else if ((rc = durable_mkdir_p(root, 0755)) != 0)
        rc = tenants_fail(NULL, 500, err, errlen, "cannot create %s: %s", root, strerror(-rc));
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
    if (gc_start(t, err, errlen) != 0 || tenants_restore_start(t, err, errlen) != 0) {
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
    tenants_restore_stop(t);
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
    int i = tenants_find(t, tenant, tl);
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
        const tenants_entry *e = &t->entries[k];
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
    if (!tenants_timeline_path(t, tenant, tlid, "", final, sizeof final) ||
        !tenants_timeline_path(t, tenant, tlid, DELETING_SUFFIX, gone, sizeof gone))
        return tenants_fail(status, 500, err, errlen, "timeline path too long under %s",
                            t->datadir);
    pthread_mutex_lock(&t->mu);
    int i = tenants_find(t, tenant, tlid);
    timeline *tl = NULL;
    bool busy = false;
    char children[1024] = "";
    if (i >= 0 && !t->entries[i].busy && branches_of(t, tenant, tlid, children, sizeof children)) {
        pthread_mutex_unlock(&t->mu);
        return tenants_fail(status, 409, err, errlen,
                            "timeline %s has branches: %s (delete them first; "
                            "/v1/status lists those not loaded)",
                            b, children);
    }
    if (i >= 0) {
        busy = t->entries[i].busy;
        if (!busy) {
            tl = t->entries[i].tl;
            tenants_remove_at(t, i);
        }
    }
    pthread_mutex_unlock(&t->mu);
    if (i < 0)
        return tenants_fail(status, 404, err, errlen, "tenant %s timeline %s not found", a, b);
    if (busy)
        return tenants_fail(status, 409, err, errlen, "tenant %s timeline %s is being created", a,
                            b);
    tenants_remove_tree(gone);
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
        return tenants_fail(status, 500, err, errlen, "tenant path too long under %s", t->datadir);
    pthread_mutex_lock(&t->mu);
    int rc = 0;
    if (tenants_find_tenant(t, tenant) >= 0) {
        rc = tenants_fail(status, 409, err, errlen, "tenant %s already exists", a);
    } else if (t->ntenants == TENANTS_MAX_TENANTS) {
        rc = tenants_fail(status, 409, err, errlen, "this pageserver already has %d tenants",
                          TENANTS_MAX_TENANTS);
    } else if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        rc = tenants_fail(status, 500, err, errlen, "cannot create %s: %s", path, strerror(errno));
    } else {
        /* Held across the directory fsync so that a concurrent delete of the
         * same id cannot rename it away half made. */
        int frc = durable_fsync_parent(path);
        if (frc != 0) {
            rc = tenants_fail(status, 500, err, errlen, "cannot make %s durable: %s", path,
                              strerror(-frc));
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
    bool r = tenants_find_tenant(t, tenant) >= 0;
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
        return tenants_fail(status, 500, err, errlen, "tenant path too long under %s", t->datadir);
    pthread_mutex_lock(&t->mu);
    int i = tenants_find_tenant(t, tenant);
    int timelines = 0;
    for (int k = 0; k < t->n; k++)
        if (strata_id_equal(&t->entries[k].tenant, tenant))
            timelines++;
    int rc = 0;
    if (i < 0) {
        rc = tenants_fail(status, 404, err, errlen, "tenant %s not found", a);
    } else if (timelines > 0) {
        rc = tenants_fail(status, 409, err, errlen,
                          "tenant %s still has %d timeline%s: delete %s first", a, timelines,
                          timelines == 1 ? "" : "s", timelines == 1 ? "it" : "them");
    } else {
        /* Renamed under the lock: a timeline created right after this starts
         * from a fresh directory, never inside the one being removed. */
        tenants_remove_tree(gone);
        int r = durable_rename(path, gone);
        if (r != 0 && r != -ENOENT) {
            rc = tenants_fail(status, 500, err, errlen, "cannot rename %s to %s: %s", path, gone,
                              strerror(-r));
        } else {
            t->tenant_ids[i] = t->tenant_ids[t->ntenants - 1];
            t->ntenants--;
        }
    }
    pthread_mutex_unlock(&t->mu);
    if (rc != 0)
        return -1;
    tenants_remove_tree(gone);
    log_info("deleted tenant %s", a);
    if (status != NULL)
        *status = 200;
    return 0;
}
