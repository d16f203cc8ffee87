/*
 * tenants.h: the set of timelines a pageserver serves, and their
 * directories.
 *
 * For: finding a timeline by (tenant, timeline), creating one (import of a
 * cleanly shut down data directory, or of a fresh initdb run with the
 * patched build as the unprivileged user), deleting one, and loading every
 * timeline on disk at start.  Layout:
 *   <datadir>/tenants/<tenant>/timelines/<timeline>/          a timeline
 *   <datadir>/tenants/<tenant>/timelines/<timeline>.creating  being built
 *   <datadir>/tenants/<tenant>/timelines/<timeline>.deleting  being removed
 * A tenant is its directory <datadir>/tenants/<tenant>/: created empty by
 * tenants_create_tenant or implicitly by the first timeline created under
 * it, removed (renamed to <tenant>.deleting, then deleted) only when it has
 * no timeline left.
 * A timeline appears under its final name only once it is complete (built
 * in the .creating directory, then renamed durably), so a crash never
 * leaves a half-imported timeline; leftovers of both temporary kinds are
 * removed at load.
 * Not for: what a timeline does (timeline.h) or the network.
 *
 * Threads: every function may be called from any thread.  The set runs one
 * background GC thread (see tenants_options.gc_interval_ms).  One mutex guards
 * the table; it is held only to look up, insert or remove an entry, and
 * across the mkdir + fsync or rename of a tenant's own directory (so that
 * creating and deleting one tenant cannot interleave) -- never across an
 * import or a page read.  Creation and deletion of the same
 * timeline are serialised by a per-entry "busy" mark.
 *
 * Errors: -1 with a message in err and *status set to the HTTP status that
 * fits (400 bad request, 404 unknown, 409 exists / busy, 500 failure).
 */
#ifndef STRATA_PAGESERVER_TENANTS_H
#define STRATA_PAGESERVER_TENANTS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/lsn.h"
#include "pageserver/timeline/timeline.h"

#define TENANTS_MAX_TIMELINES 1024
#define TENANTS_MAX_TENANTS 1024

typedef struct tenants tenants;

typedef struct tenants_options {
    const char *datadir;       /* copied */
    const char *pg_bindir;     /* patched build's bin/ for initdb; "" or NULL: initdb fails */
    const char *run_as_user;   /* initdb runs as this user when we are root ["postgres"] */
    uint32_t initdb_timeout_s; /* [120] */
    timeline_services svc;     /* shared by every timeline (pointers must outlive the set) */
    /* Retention: a GC thread samples every timeline's last_record_lsn each
     * second (for the time window) and every gc_interval_ms runs
     * timeline_gc() on each timeline in turn.  0: no GC thread at all. */
    uint32_t gc_interval_ms;
} tenants_options;

/* Loads every timeline under datadir/tenants (starting their WAL
 * receivers), ancestors before their branches.  A timeline that fails to
 * open (a branch whose ancestor is missing too) is logged, stays on disk
 * and is "not loaded" (below): GC of its tenant stops.  0 or -1 with err
 * (datadir/tenants cannot be created or read). */
int tenants_open(const tenants_options *o, tenants **out, char *err, size_t errlen);

/* Stops the GC thread (waiting for the pass on the current timeline to
 * end), drops every timeline (the last reference of each flushes and
 * closes it) and frees the set.  No other call may race this. */
void tenants_close(tenants *t);

/* The timeline with a new reference (timeline_unref when done), or NULL. */
timeline *tenants_get(tenants *t, const strata_id *tenant, const strata_id *tl);

/* Up to cap timelines, each with a new reference; returns the count. */
int tenants_list(tenants *t, timeline **out, int cap);

typedef struct tenants_create_request {
    const char *safekeepers[TIMELINE_MAX_SAFEKEEPERS]; /* "host:port" */
    int n_safekeepers;
    const char *import_pgdata; /* import this directory, or */
    bool initdb;               /* run initdb and import its result, or */
    /* a branch of timeline `ancestor` of the same tenant at
     * ancestor_lsn, or at the end of the last commit at or before
     * ancestor_time (timeline_parse_time), or (neither) at the ancestor's
     * last_record_lsn; the LSN is rounded down to 8 bytes and must lie in
     * the ancestor's readable window (timeline_readable_window). */
    bool has_ancestor;
    strata_id ancestor;
    lsn_t ancestor_lsn;        /* LSN_INVALID: not given */
    const char *ancestor_time; /* NULL: not given */
} tenants_create_request;

/* Creates and opens the timeline; *out_lsn is its start LSN.  A branch:
 * 404 when the ancestor is unknown, 400 for an LSN or time outside its
 * window (the message names the window). */
int tenants_create_timeline(tenants *t, const strata_id *tenant, const strata_id *tl,
                            const tenants_create_request *req, lsn_t *out_lsn, int *status,
                            char *err, size_t errlen);

/* Creates an empty tenant: its directory, durably.  409 when it exists or
 * the table is full. */
int tenants_create_tenant(tenants *t, const strata_id *tenant, int *status, char *err,
                          size_t errlen);

/* Up to cap tenant ids (in no particular order); returns the count.  When
 * ntimelines is not NULL, ntimelines[i] is tenant i's number of timelines
 * (being created included). */
int tenants_list_tenants(tenants *t, strata_id *out, int *ntimelines, int cap);

/* True when the tenant exists. */
bool tenants_tenant_exists(tenants *t, const strata_id *tenant);

/* Deletes a tenant that has no timelines: 404 unknown, 409 while it has
 * one (or one is being created).  Nothing changes on refusal. */
int tenants_delete_tenant(tenants *t, const strata_id *tenant, int *status, char *err,
                          size_t errlen);

/* Removes the timeline from the set, stops its WAL receiver and deletes its
 * directory once the last reader lets go.  409 while it has branches,
 * loaded or not, or the tenant has a timeline not loaded whose ancestry is
 * unknown ("timeline P has branches: C1, C2 (delete them first; ...)"). */
int tenants_delete_timeline(tenants *t, const strata_id *tenant, const strata_id *tl, int *status,
                            char *err, size_t errlen);

/* ---- restore from object storage (svc.remote; pageserver/remote/restore.h) ----
 *
 * With a remote store, tenants_open starts a thread that lists the store
 * and restores, one after the other, every timeline it holds that is not on
 * disk: each appears (busy, like one being created) as soon as the listing
 * ends, and serves reads once its directory is complete, renamed into
 * place and opened (a restored timeline that fails to open is taken out of
 * its final place again, so the next start restores it afresh).  Reads for
 * a timeline that may still come (the listing has not ended, or it is
 * being restored) should wait, not fail: page_service.c does, up to its
 * wait_lsn_timeout.  A restore that fails is logged and counted; the
 * timeline is then "not loaded" (below) until the next start retries it.
 * A branch whose ancestor is not loaded is not downloaded at all. */
typedef struct tenants_restore_info {
    strata_id tenant, timeline;
    uint64_t files_done, files_total, bytes_done, bytes_total;
    lsn_t consistent_lsn; /* of the manifest (0 until fetched) */
    uint64_t seq;
    bool started; /* false: queued behind another restore */
} tenants_restore_info;

/* True when a read of (tenant, tl) should wait: the object store is still
 * being listed and the timeline is not loaded, or it is being restored.
 * info (not NULL) gets its progress.  Any thread. */
bool tenants_restore_pending(tenants *t, const strata_id *tenant, const strata_id *tl,
                             tenants_restore_info *info);

/* Up to cap restores not finished yet; returns the count. */
int tenants_list_restores(tenants *t, tenants_restore_info *out, int cap);

/* ---- timelines that exist but are not loaded (docs/design.md §6.7) ----
 *
 * A timeline this pageserver knows exists -- a directory on disk, or a
 * manifest in the object store -- but could not load (a branch whose
 * ancestor is missing, a store that does not open, a restore that failed
 * or has not run yet) is "not loaded".  Its branch point, read from its
 * timeline.json or its newest manifest, is registered with its ancestor as
 * soon as that one opens (before GC can see it), and GC stops for every
 * timeline of its tenant until it is loaded: a fail-stop, since a timeline
 * whose ancestry is unknown may be a branch of any of them.  An on-disk
 * branch is loaded as soon as its ancestor is (after a restore); anything
 * else waits for the cause to be fixed and a restart.  Each is logged with
 * its reason, listed in /v1/status ("not_loaded") and counted in
 * pageserver_timelines_not_loaded and pageserver_gc_blocked_tenants. */
typedef struct tenants_not_loaded {
    strata_id tenant, timeline;
    bool ancestry_known; /* false: neither timeline.json nor a manifest could be read */
    bool has_ancestor;   /* a branch of ancestor at ancestor_lsn (when ancestry_known) */
    strata_id ancestor;
    lsn_t ancestor_lsn;
    bool on_disk; /* its directory is under its final name */
    char reason[384];
} tenants_not_loaded;

/* Up to cap timelines that are not loaded; returns the count. */
int tenants_list_not_loaded(tenants *t, tenants_not_loaded *out, int cap);

/* True when GC of the tenant's timelines is stopped; why (not NULL) gets
 * the first timeline not loaded and its reason. */
bool tenants_gc_blocked(tenants *t, const strata_id *tenant, char *why, size_t len);

#endif
