/*
 * computes.c: the local cluster's computes, the default one and the named
 * ones of D/timelines.json, as the commands start, stop and list them,
 * each step's progress printed (computes.h).
 *
 * For: `strata up|start|stop|down` (cmd/cmd_cluster.c), `strata restore`
 * (cmd/cmd_timeline.c) and the computes of `strata status`
 * (cmd/cmd_status.c).
 * Not for: how a compute is prepared and run (compute.c,
 * compute_readonly.c) or the registry's file (local/timelines.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <libpq-fe.h>

#include "cli/cli.h"
#include "cli/compute/compute.h"
#include "cli/compute/compute_readonly.h"
#include "cli/compute/computes.h"
#include "cli/local/cluster.h"
#include "cli/local/proc.h"
#include "cli/local/timelines.h"

#define COMPUTE_READY_TIMEOUT_MS 120000

/* ---- the default compute, or a writable named one ---- */

/* A compute on a new empty data directory from a basebackup (docs/design.md §7.7),
 * each step's time printed. */
static int start_compute_from_pageserver(const cluster *c, cli_err *err)
{
    const char *who = compute_label(c);
    long long t0 = proc_now_ms();
    compute_start_report rep;
    int rc = compute_start_from_pageserver(c, &rep, err);
    char lb[LSN_FMT_LEN];
    if (rep.sync_ms > 0 || rep.lsn != LSN_INVALID)
        printf("%s: sync-safekeepers: start at %s%s (%.3f s)\n", who, lsn_format(rep.lsn, lb),
               rep.empty_timeline ? ", the timeline's start (no WAL on the safekeepers yet)" : "",
               (double)rep.sync_ms / 1000.0);
    if (rc != 0)
        return -1;
    if (rep.legacy) {
        printf("%s: the safekeepers lack the imported shutdown checkpoint: starting once on "
               "the data directory made before the pageserver\n",
               who);
        fflush(stdout);
        if (compute_wait_ready(c, COMPUTE_READY_TIMEOUT_MS, err) != 0)
            return -1;
        printf("%s: ready in %.3f s (pid %d)\n", who, (double)(proc_now_ms() - t0) / 1000.0,
               (int)compute_pid(c));
        return 0;
    }
    printf("%s: old data directory set aside, removed in the background (%.3f s)\n", who,
           (double)rep.cleanup_ms / 1000.0);
    printf("%s: %s basebackup at %s: %u files, %.1f MB (%.3f s)\n", who,
           rep.stateless ? "stateless" : "full", lb, rep.basebackup_files,
           (double)rep.basebackup_bytes / 1e6, (double)rep.basebackup_ms / 1000.0);
    printf("%s: configured and postgres started (%.3f s)\n", who,
           (double)rep.configure_ms / 1000.0);
    fflush(stdout);
    long long t1 = proc_now_ms();
    if (compute_wait_ready(c, COMPUTE_READY_TIMEOUT_MS, err) != 0)
        return -1;
    long long t2 = proc_now_ms();
    printf("%s: accepting connections (%.3f s)\n", who, (double)(t2 - t1) / 1000.0);
    printf("%s: ready in %.3f s from start to first query (pid %d)\n", who,
           (double)(t2 - t0) / 1000.0, (int)compute_pid(c));
    return 0;
}

int computes_start(const cluster *c, cli_err *err)
{
    const char *who = compute_label(c);
    pid_t pid = compute_pid(c);
    if (pid != 0) {
        printf("%s: already running (pid %d)\n", who, (int)pid);
        return 0;
    }
    if (computes_check_single_writer(c, err) != 0)
        return -1;
    printf("%s: starting on 127.0.0.1:%d\n", who, c->compute_port);
    fflush(stdout);
    if (c->pageserver_imported)
        return start_compute_from_pageserver(c, err);
    long long t0 = proc_now_ms();
    if (compute_start(c, err) != 0 || compute_wait_ready(c, COMPUTE_READY_TIMEOUT_MS, err) != 0)
        return -1;
    printf("%s: ready in %.1f s (pid %d)\n", who, (double)(proc_now_ms() - t0) / 1000.0,
           (int)compute_pid(c));
    return 0;
}

/* ---- named computes ---- */

bool computes_reserved_name(const char *name)
{
    static const char *const names[] = {"compute", "pageserver", "sk1", "sk2", "sk3"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i]) == 0)
            return true;
    return false;
}

int computes_check_single_writer(const cluster *view, cli_err *err)
{
    /* The registry's defaults come from cluster.json, not from a view. */
    cluster base;
    int loaded = cluster_load(view->dir, &base, err);
    if (loaded != 0)
        return loaded < 0 ? -1 : cli_err_set(err, "no cluster under %s", view->dir);
    timeline_registry *r = malloc(sizeof *r);
    if (r == NULL)
        return cli_err_set(err, "out of memory");
    int rc = timelines_load(&base, r, err);
    const char *self = compute_label(view);
    for (int i = 0; rc == 0 && i < r->ncomputes; i++) {
        const compute_entry *e = &r->computes[i];
        cluster other;
        if (strcmp(e->name, self) == 0 || e->read_only)
            continue;
        if (timelines_compute_view(&base, r, e, &other, err) != 0) {
            rc = -1;
            break;
        }
        if (!strata_id_equal(&other.timeline_id, &view->timeline_id))
            continue;
        pid_t pid = compute_pid(&other);
        if (pid != 0)
            rc = cli_err_set(err,
                             "compute %s (pid %d) runs writable on timeline %s already: one "
                             "writable compute per timeline (stop it first: strata stop "
                             "compute%s%s)",
                             e->name, (int)pid, e->timeline, i == 0 ? "" : " ",
                             i == 0 ? "" : e->name);
    }
    free(r);
    return rc;
}

/* Finds or registers compute o->compute_name (saved); *e points into r. */
static int named_compute_entry(const cli_opts *o, const cluster *c, timeline_registry *r,
                               compute_entry **e, cli_err *err)
{
    const char *name = o->compute_name;
    if (!timelines_name_ok(name, err))
        return -1;
    if (computes_reserved_name(name))
        return cli_err_set(err, "%s is the name of a cluster component; pick another", name);
    const char *tl = o->timeline != NULL ? o->timeline : TIMELINES_MAIN;
    if (timelines_find(r, tl) == NULL)
        return cli_err_set(err, "unknown timeline %s (strata timeline list shows them)", tl);
    *e = timelines_find_compute(r, name);
    if (*e != NULL) {
        if (o->timeline != NULL && strcmp((*e)->timeline, o->timeline) != 0)
            return cli_err_set(err, "compute %s runs on timeline %s, not %s (pick another name)",
                               name, (*e)->timeline, o->timeline);
        if (o->read_only != (*e)->read_only || o->has_lsn != (*e)->has_lsn ||
            (o->has_lsn && o->lsn != (*e)->lsn))
            return cli_err_set(err,
                               "compute %s was made %s; start it as it was or pick another "
                               "name",
                               name, (*e)->read_only ? "read-only" : "writable");
        if (o->compute_port == 0 || o->compute_port == (*e)->port)
            return 0;
        (*e)->port = o->compute_port;
        return timelines_save(c, r, err);
    }
    compute_entry ne = {0};
    snprintf(ne.name, sizeof ne.name, "%s", name);
    snprintf(ne.timeline, sizeof ne.timeline, "%s", tl);
    ne.read_only = o->read_only;
    ne.has_lsn = o->has_lsn;
    ne.lsn = o->lsn;
    ne.port = o->compute_port;
    if (ne.port == 0 && cluster_pick_free_port(&ne.port, err) != 0)
        return -1;
    /* Saved by the caller once it is known to start. */
    if (timelines_add_compute(r, &ne, err) != 0)
        return -1;
    *e = timelines_find_compute(r, name);
    return 0;
}

static int start_read_only(const cluster *view, const compute_entry *e, cli_err *err)
{
    compute_start_report rep;
    long long t0 = proc_now_ms();
    printf("%s: starting read-only on 127.0.0.1:%d\n", e->name, e->port);
    fflush(stdout);
    if (compute_start_read_only(view, e->has_lsn, e->lsn, &rep, err) != 0 ||
        compute_wait_ready(view, COMPUTE_READY_TIMEOUT_MS, err) != 0)
        return -1;
    printf("%s: ready in %.3f s (pid %d)\n", e->name, (double)(proc_now_ms() - t0) / 1000.0,
           (int)compute_pid(view));
    return 0;
}

int computes_start_in_registry(const cli_opts *o, const cluster *c, timeline_registry *r,
                               cli_err *err)
{
    if (!c->pageserver_imported)
        return cli_err_set(err, "named computes start from the pageserver, which does not hold "
                                "the cluster's timeline yet (strata up)");
    compute_entry *e = NULL;
    cluster view;
    if (named_compute_entry(o, c, r, &e, err) != 0 ||
        timelines_compute_view(c, r, e, &view, err) != 0)
        return -1;
    /* Refusals first: a compute that cannot start is not registered. */
    if (!e->read_only && compute_pid(&view) == 0 && computes_check_single_writer(&view, err) != 0)
        return -1;
    if (timelines_save(c, r, err) != 0)
        return -1;
    int rc = e->read_only ? start_read_only(&view, e, err) : computes_start(&view, err);
    if (rc != 0)
        return -1;
    char connstr[512];
    cluster_compute_connstr(&view, connstr, sizeof connstr);
    printf("%s: on timeline %s: %s\n", e->name, e->timeline, connstr);
    return 0;
}

int computes_start_named(const cli_opts *o, const cluster *c, cli_err *err)
{
    timeline_registry *r = malloc(sizeof *r);
    if (r == NULL)
        return cli_err_set(err, "out of memory");
    int rc = timelines_load(c, r, err) != 0 ? -1 : computes_start_in_registry(o, c, r, err);
    free(r);
    return rc;
}

int computes_stop_named(const cli_opts *o, const cluster *c, cli_err *err)
{
    timeline_registry *r = malloc(sizeof *r);
    if (r == NULL)
        return cli_err_set(err, "out of memory");
    int rc = timelines_load(c, r, err);
    compute_entry *e = rc == 0 ? timelines_find_compute(r, o->compute_name) : NULL;
    cluster view;
    if (rc == 0 && e == NULL)
        rc = cli_err_set(err, "no compute named %s (strata status lists them)", o->compute_name);
    if (rc == 0)
        rc = timelines_compute_view(c, r, e, &view, err);
    if (rc == 0)
        rc = compute_stop(&view, o->immediate, err);
    if (rc == 0)
        printf("%s: stopped%s\n", o->compute_name, o->immediate ? " (SIGKILL)" : "");
    free(r);
    return rc;
}

int computes_stop_all_named(const cluster *c, cli_err *err)
{
    timeline_registry *r = malloc(sizeof *r);
    if (r == NULL)
        return cli_err_set(err, "out of memory");
    int rc = timelines_load(c, r, err);
    for (int i = 1; rc == 0 && i < r->ncomputes; i++) {
        cluster view;
        if (timelines_compute_view(c, r, &r->computes[i], &view, err) != 0) {
            rc = -1;
            break;
        }
        pid_t pid = compute_pid(&view);
        if (pid == 0)
            continue;
        printf("%s: stopping (pid %d)\n", r->computes[i].name, (int)pid);
        fflush(stdout);
        cli_err one = {{0}};
        if (compute_stop(&view, false, &one) != 0)
            rc = cli_err_set(err, "%s", one.msg);
    }
    free(r);
    return rc;
}

/* ---- status ---- */

/* The compute's flush LSN (writable) or replay LSN (in recovery), asked of
 * it over SQL; false when it did not answer. */
static bool compute_lsn(const cluster *view, lsn_t *out)
{
    PGconn *conn = compute_connect(view, 2);
    bool ok = false;
    if (PQstatus(conn) == CONNECTION_OK) {
        PGresult *res = PQexec(conn, "SELECT CASE WHEN pg_is_in_recovery() THEN "
                                     "pg_last_wal_replay_lsn() ELSE pg_current_wal_flush_lsn() "
                                     "END");
        ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
             !PQgetisnull(res, 0, 0) && lsn_parse(PQgetvalue(res, 0, 0), out);
        PQclear(res);
    }
    PQfinish(conn);
    return ok;
}

typedef struct compute_status {
    const compute_entry *e;
    const timeline_entry *t;
    pid_t pid;
    bool has_lsn;
    lsn_t lsn;
    int64_t lag; /* a replica's replay lag in bytes; -1: none or unknown */
    char connstr[512];
} compute_status;

static int computes_collect(const cluster *c, timeline_registry *r, compute_status *out)
{
    int n = 0;
    for (int i = 0; i < r->ncomputes; i++) {
        cluster view;
        cli_err ignored = {{0}};
        if (timelines_compute_view(c, r, &r->computes[i], &view, &ignored) != 0)
            continue;
        compute_status *s = &out[n++];
        memset(s, 0, sizeof *s);
        s->e = &r->computes[i];
        s->t = timelines_find(r, s->e->timeline);
        s->pid = compute_pid(&view);
        cluster_compute_connstr(&view, s->connstr, sizeof s->connstr);
        s->lag = -1;
        if (s->e->read_only)
            s->has_lsn = s->pid != 0 && compute_read_only_progress(&view, &s->lsn, &s->lag);
        else
            s->has_lsn = s->pid != 0 && compute_lsn(&view, &s->lsn);
    }
    return n;
}

void computes_status_print(const cluster *c)
{
    timeline_registry *r = malloc(sizeof *r);
    compute_status *s = malloc(sizeof *s * TIMELINES_MAX);
    cli_err err = {{0}};
    if (r == NULL || s == NULL || timelines_load(c, r, &err) != 0 || r->ncomputes < 2) {
        free(r);
        free(s);
        return; /* the default compute alone: the table above says it all */
    }
    int n = computes_collect(c, r, s);
    printf("\n%-16s %-8s %-8s %-16s %-9s %-14s %-6s %s\n", "COMPUTE", "STATE", "PID", "TIMELINE",
           "MODE", "LSN", "PORT", "LAG");
    for (int i = 0; i < n; i++) {
        char lb[LSN_FMT_LEN] = "-", pid[16] = "-";
        if (s[i].has_lsn)
            lsn_format(s[i].lsn, lb);
        if (s[i].pid)
            snprintf(pid, sizeof pid, "%d", (int)s[i].pid);
        char lag[32] = "-";
        if (s[i].lag >= 0)
            snprintf(lag, sizeof lag, "%lld bytes", (long long)s[i].lag);
        else if (s[i].e->read_only && s[i].e->has_lsn)
            snprintf(lag, sizeof lag, "pinned");
        printf("%-16s %-8s %-8s %-16s %-9s %-14s %-6d %s\n", s[i].e->name,
               s[i].pid ? "running" : "stopped", pid, s[i].e->timeline,
               s[i].e->read_only ? "read-only" : "writable", lb, s[i].e->port, lag);
    }
    free(r);
    free(s);
}

cJSON *computes_status_json(const cluster *c)
{
    timeline_registry *r = malloc(sizeof *r);
    compute_status *s = malloc(sizeof *s * TIMELINES_MAX);
    cJSON *arr = cJSON_CreateArray();
    cli_err err = {{0}};
    bool ok = r != NULL && s != NULL && arr != NULL;
    /* An unreadable timelines.json: the default compute alone. */
    if (ok && timelines_load(c, r, &err) != 0)
        timelines_defaults(c, r);
    int n = ok ? computes_collect(c, r, s) : 0;
    for (int i = 0; ok && i < n; i++) {
        char lb[LSN_FMT_LEN], hex[STRATA_ID_HEX_LEN];
        cJSON *o = cJSON_CreateObject();
        ok = o != NULL && cJSON_AddItemToArray(arr, o) &&
             cJSON_AddStringToObject(o, "name", s[i].e->name) &&
             cJSON_AddStringToObject(o, "timeline", s[i].e->timeline) &&
             cJSON_AddStringToObject(o, "timeline_id",
                                     s[i].t ? strata_id_format(&s[i].t->id, hex) : "") &&
             cJSON_AddBoolToObject(o, "read_only", s[i].e->read_only) &&
             (s[i].has_lsn ? cJSON_AddStringToObject(o, "lsn", lsn_format(s[i].lsn, lb)) != NULL
                           : cJSON_AddNullToObject(o, "lsn") != NULL) &&
             cJSON_AddNumberToObject(o, "port", s[i].e->port) &&
             (s[i].lag >= 0 ? cJSON_AddNumberToObject(o, "lag_bytes", (double)s[i].lag) != NULL
                            : cJSON_AddNullToObject(o, "lag_bytes") != NULL) &&
             cJSON_AddStringToObject(o, "connstr", s[i].connstr) &&
             (s[i].pid ? cJSON_AddNumberToObject(o, "pid", s[i].pid) != NULL
                       : cJSON_AddNullToObject(o, "pid") != NULL) &&
             cJSON_AddBoolToObject(o, "running", s[i].pid != 0);
    }
    free(r);
    free(s);
    if (!ok) {
        cJSON_Delete(arr);
        return NULL;
    }
    return arr;
}
