/*
 * tenants_priv.h: the tenants table's fields and the helpers its three
 * files share -- tenants.c (the table, loading, deleting, GC thread),
 * tenants_create.c (creating and branching timelines) and
 * tenants_restore.c (restoring timelines from object storage).
 * For: those three files.
 * Not for: anything outside them (the rest of the pageserver uses tenants.h).
 *
 * Locking: t->mu guards entries[], tenant_ids[], absent[] and restoring;
 * the helpers below marked "t->mu held" expect the caller to hold it.
 */
#ifndef STRATA_PAGESERVER_TENANTS_PRIV_H
#define STRATA_PAGESERVER_TENANTS_PRIV_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "pageserver/remote/restore.h"
#include "pageserver/timeline/tenants.h"

#define CREATING_SUFFIX ".creating"
#define DELETING_SUFFIX ".deleting"

typedef struct tenants_entry {
    strata_id tenant;
    strata_id timeline;
    timeline *tl; /* NULL while busy (being created) */
    bool busy;
    restore_progress *restore; /* busy being restored from object storage, else NULL */
} tenants_entry;

struct tenants {
    char datadir[PATH_MAX];
    char pg_bindir[PATH_MAX];
    char run_as_user[64];
    uint32_t initdb_timeout_s;
    timeline_services svc;
    pthread_mutex_t mu;
    int n;
    tenants_entry entries[TENANTS_MAX_TIMELINES];
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

/* vsnprintf into err, *status = code (when status is not NULL); -1. */
int tenants_fail(int *status, int code, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* vsnprintf into out; false when the result did not fit (paths longer
 * than PATH_MAX are refused, never silently cut). */
bool tenants_path_fmt(char *out, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Removes one of our directories; a failure is only logged (a leftover is
 * removed again at the next start). */
void tenants_remove_tree(const char *path);
/* <datadir>/tenants/<tenant>/timelines/<tl><suffix> into out; false when
 * too long. */
bool tenants_timeline_path(const tenants *t, const strata_id *tenant, const strata_id *tl,
                           const char *suffix, char *out, size_t len);

/* The table (t->mu held): the index of (tenant, tl) or -1; removing entry
 * i; the index of tenant in tenant_ids or -1; adding a tenant unless known
 * (false when the table is full); the open timeline (tenant, id) without a
 * new reference, or NULL. */
int tenants_find(const tenants *t, const strata_id *tenant, const strata_id *tl);
void tenants_remove_at(tenants *t, int i);
int tenants_find_tenant(const tenants *t, const strata_id *tenant);
bool tenants_add_tenant(tenants *t, const strata_id *tenant);
timeline *tenants_loaded(tenants *t, const strata_id *tenant, const strata_id *id);

/* Timelines that exist but are not loaded (tenants.h; t->mu held): the
 * index of (tenant, tl) in absent[] or -1; recording one with a reason
 * (tenants.c says how it is logged); forgetting one that loaded now;
 * registering with parent the branch points of its branches not loaded. */
int tenants_find_absent(const tenants *t, const strata_id *tenant, const strata_id *tl);
void tenants_note_absent(tenants *t, const tenants_not_loaded *n, bool error, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void tenants_clear_absent(tenants *t, const strata_id *tenant, const strata_id *tl);
void tenants_hold_branch_points(tenants *t, timeline *parent);

/* tenants_restore.c: starts the restore thread when svc.remote is set (0,
 * or -1 with err), and stops it (cancelling the restore running now). */
int tenants_restore_start(tenants *t, char *err, size_t errlen);
void tenants_restore_stop(tenants *t);

#endif
