/*
 * cmd_timeline.c: named timelines of the local cluster (docs/cli.md,
 * "Branches and computes"):
 *   strata timeline branch NAME [--from PARENT] [--lsn X/Y | --time T]
 *   strata timeline list [--json]      (the tree with branch points)
 *   strata timeline delete NAME
 *   strata restore --time T | --lsn X/Y [--from TIMELINE] [--name NAME]
 * The names live in
 * D/timelines.json (timelines.h); the pageserver makes the branch
 * (POST /v1/tenant/T/timeline with an ancestor) and its errors are shown
 * as it words them.  A branch needs nothing on the safekeepers: its first
 * compute bootstraps the timeline there at the branch LSN (compute.h).
 *
 * Not for: the id-based `strata timeline create|show|list --tenant`
 * (cmd_admin.c); starting, stopping and listing computes
 * (compute/computes.c), which `start|stop compute NAME` (cmd_cluster.c)
 * and restore use.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/client/admin_http.h"
#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "cli/cmd/cmd_timeline.h"
#include "cli/compute/compute.h"
#include "cli/compute/computes.h"
#include "cli/local/pageserver.h"
#include "cli/local/proc.h"
#include "cli/local/safekeepers.h"
#include "cli/local/timelines.h"
#include "base/strata_assert.h"

#define PS_TIMEOUT_MS 30000

/* What to branch: NAME from `from` (NULL: main) at lsn, at time, or (neither)
 * at the parent's last record. */
typedef struct branch_args {
    const char *name;
    const char *from;
    bool has_lsn;
    lsn_t lsn;
    const char *time;
} branch_args;

/* What the pageserver resolved a time to (GET .../lsn_by_time). */
typedef struct time_point {
    lsn_t lsn;
    char commit_time[64]; /* "" when it had none ("latest") */
    char kind[16];        /* "commit" or "latest" */
} time_point;

typedef struct branch_result {
    timeline_entry entry;
    long long create_ms; /* the pageserver's create call */
    bool has_tp;         /* with a time: the commit it resolved to */
    time_point tp;
} branch_result;

/* ---- the pageserver's timeline API ---- */

/* One request to the cluster's pageserver.  2xx: 0 and *out the parsed
 * body (may be NULL for an empty one).  Otherwise -1 with the
 * pageserver's own message. */
static int ps_call(const cluster *c, const char *method, const char *path, const char *body,
                   int *status, cJSON **out, cli_err *err)
{
    char *resp = NULL;
    *out = NULL;
    if (admin_http("127.0.0.1", c->pageserver_http_port, method, path, cluster_admin_token(c), body,
                   PS_TIMEOUT_MS, status, &resp, err) != 0)
        return cli_err_set(err, "the pageserver did not answer (is it running? strata status)");
    cJSON *j = cJSON_Parse(resp);
    if (*status < 200 || *status > 299) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        char text[700];
        snprintf(text, sizeof text, "%s", cJSON_IsString(e) ? e->valuestring : resp);
        text[strcspn(text, "\r\n")] = '\0';
        cJSON_Delete(j);
        free(resp);
        return cli_err_set(err, "pageserver: %s (HTTP %d)", text, *status);
    }
    free(resp);
    *out = j;
    return 0;
}

static const char *jstr(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Percent-encodes s (everything but unreserved characters) into out. */
static void url_encode(const char *s, char *out, size_t len)
{
    size_t n = 0;
    for (; *s != '\0' && n + 4 < len; s++) {
        unsigned char ch = (unsigned char)*s;
        if (isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == '~')
            out[n++] = (char)ch;
        else
            n += (size_t)snprintf(out + n, len - n, "%%%02X", ch);
    }
    out[n] = '\0';
}

static int ps_lsn_by_time(const cluster *c, const strata_id *tl, const char *when, time_point *tp,
                          cli_err *err)
{
    char tenant[STRATA_ID_HEX_LEN], timeline[STRATA_ID_HEX_LEN], enc[256], path[512];
    url_encode(when, enc, sizeof enc);
    snprintf(path, sizeof path, "/v1/tenant/%s/timeline/%s/lsn_by_time?time=%s",
             strata_id_format(&c->tenant_id, tenant), strata_id_format(tl, timeline), enc);
    int status;
    cJSON *j;
    if (ps_call(c, "GET", path, NULL, &status, &j, err) != 0)
        return -1;
    memset(tp, 0, sizeof *tp);
    const char *lsn = jstr(j, "lsn"), *ct = jstr(j, "commit_time"), *kind = jstr(j, "kind");
    bool ok = lsn != NULL && lsn_parse(lsn, &tp->lsn);
    snprintf(tp->commit_time, sizeof tp->commit_time, "%s", ct ? ct : "");
    snprintf(tp->kind, sizeof tp->kind, "%s", kind ? kind : "?");
    cJSON_Delete(j);
    return ok ? 0 : cli_err_set(err, "pageserver: lsn_by_time answered without an \"lsn\"");
}

static cJSON *branch_body(const cluster *c, const strata_id *id, const strata_id *parent,
                          const branch_args *a)
{
    char hex[STRATA_ID_HEX_LEN], lb[LSN_FMT_LEN];
    cJSON *root = cJSON_CreateObject();
    cJSON *sks = root ? cJSON_AddArrayToObject(root, "safekeepers") : NULL;
    bool ok = sks != NULL &&
              cJSON_AddStringToObject(root, "timeline_id", strata_id_format(id, hex)) != NULL &&
              cJSON_AddStringToObject(root, "ancestor_timeline_id",
                                      strata_id_format(parent, hex)) != NULL;
    if (ok && a->has_lsn)
        ok = cJSON_AddStringToObject(root, "ancestor_lsn", lsn_format(a->lsn, lb)) != NULL;
    if (ok && a->time != NULL)
        ok = cJSON_AddStringToObject(root, "ancestor_time", a->time) != NULL;
    for (int i = 0; ok && i < CLUSTER_SAFEKEEPERS; i++) {
        char addr[CLUSTER_HOST_LEN + 16];
        snprintf(addr, sizeof addr, "%s:%d", c->sk[i].host, c->sk[i].pg_port);
        cJSON *s = cJSON_CreateString(addr);
        ok = s != NULL && cJSON_AddItemToArray(sks, s);
        if (!ok)
            cJSON_Delete(s);
    }
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* The parent's last record on the pageserver; false when it did not say. */
static bool ps_last_record_lsn(const cluster *c, const strata_id *tl, lsn_t *out)
{
    char tenant[STRATA_ID_HEX_LEN], timeline[STRATA_ID_HEX_LEN], path[160];
    snprintf(path, sizeof path, "/v1/tenant/%s/timeline/%s",
             strata_id_format(&c->tenant_id, tenant), strata_id_format(tl, timeline));
    int status;
    cJSON *j;
    cli_err ignored = {{0}};
    if (ps_call(c, "GET", path, NULL, &status, &j, &ignored) != 0)
        return false;
    const char *lsn = jstr(j, "last_record_lsn");
    bool ok = lsn != NULL && lsn_parse(lsn, out);
    cJSON_Delete(j);
    return ok;
}

/*
 * The pageserver ingests the parent's WAL from the safekeepers a moment
 * after it is committed.  A branch at a committed LSN (or, without --lsn
 * and --time, at the end of the parent's committed WAL: *lsn is set to it)
 * waits until the pageserver has it, up to BRANCH_INGEST_WAIT_MS; an LSN
 * the safekeepers do not have either goes to the pageserver at once, which
 * refuses it with the window.
 */
#define BRANCH_INGEST_WAIT_MS 30000
static void wait_parent_ingested(const cluster *c, const strata_id *parent, bool *has_lsn,
                                 lsn_t *lsn)
{
    cluster pv = *c;
    pv.timeline_id = *parent;
    lsn_t commit = LSN_INVALID;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        safekeeper_timeline tl;
        safekeepers_query(&pv, &pv.sk[i], &tl);
        if (tl.known && tl.commit_lsn > commit)
            commit = tl.commit_lsn;
    }
    if (commit == LSN_INVALID || (*has_lsn && *lsn > commit))
        return;
    lsn_t last;
    /* Without an LSN: the pageserver's last record when it has all (the
     * safekeepers' commit LSN of a fresh timeline can be below its start). */
    if (!*has_lsn && ps_last_record_lsn(c, parent, &last) && last >= commit)
        return;
    if (!*has_lsn) {
        *has_lsn = true;
        *lsn = commit;
    }
    long long deadline = proc_now_ms() + BRANCH_INGEST_WAIT_MS;
    while (proc_now_ms() < deadline && (!ps_last_record_lsn(c, parent, &last) || last < *lsn))
        proc_sleep_ms(50);
}

/* Makes the branch on the pageserver and records it (saved).  The cluster
 * lock is held.  0, or -1 with the reason (the pageserver's words). */
static int timeline_branch(const cluster *c, timeline_registry *r, const branch_args *a_in,
                           branch_result *res, cli_err *err)
{
    branch_args copy = *a_in;
    const branch_args *a = &copy;
    memset(res, 0, sizeof *res);
    if (!timelines_name_ok(a->name, err))
        return -1;
    if (timelines_find(r, a->name) != NULL)
        return cli_err_set(err, "a timeline named %s exists already (strata timeline list)",
                           a->name);
    const char *parent_name = a->from != NULL ? a->from : TIMELINES_MAIN;
    const timeline_entry *parent = timelines_find(r, parent_name);
    if (parent == NULL)
        return cli_err_set(err,
                           "unknown timeline %s to branch from (strata timeline list shows "
                           "them)",
                           parent_name);
    if (!c->pageserver_imported)
        return cli_err_set(err, "branches are made by the pageserver, which does not hold the "
                                "cluster's timeline yet (strata up)");
    timeline_entry e = {0};
    if (!strata_id_generate(&e.id))
        return cli_err_set(err, "no random bytes for a timeline id");
    snprintf(e.name, sizeof e.name, "%s", a->name);
    snprintf(e.parent, sizeof e.parent, "%s", parent->name);
    if (a->time == NULL)
        wait_parent_ingested(c, &parent->id, &copy.has_lsn, &copy.lsn);
    cJSON *body = branch_body(c, &e.id, &parent->id, a);
    char *text = body ? cJSON_PrintUnformatted(body) : NULL;
    cJSON_Delete(body);
    if (text == NULL)
        return cli_err_set(err, "out of memory");
    char tenant[STRATA_ID_HEX_LEN], path[128];
    snprintf(path, sizeof path, "/v1/tenant/%s/timeline", strata_id_format(&c->tenant_id, tenant));
    long long t0 = proc_now_ms();
    int status;
    cJSON *j;
    int rc = ps_call(c, "POST", path, text, &status, &j, err);
    cJSON_free(text);
    if (rc != 0)
        return -1;
    res->create_ms = proc_now_ms() - t0;
    const char *lsn = jstr(j, "ancestor_lsn");
    if (lsn == NULL)
        lsn = jstr(j, "start_lsn");
    bool ok = lsn != NULL && lsn_parse(lsn, &e.branch_lsn) && e.branch_lsn != LSN_INVALID;
    cJSON_Delete(j);
    if (!ok)
        return cli_err_set(err,
                           "the pageserver made timeline %s but answered without its "
                           "ancestor_lsn",
                           a->name);
    if (timelines_add(r, &e, err) != 0 || timelines_save(c, r, err) != 0)
        return -1;
    res->entry = e;
    if (a->time != NULL) {
        /* Which commit that was: for the report only (the branch is made). */
        cli_err ignored = {{0}};
        if (ps_lsn_by_time(c, &parent->id, a->time, &res->tp, &ignored) == 0)
            res->has_tp = true;
    }
    return 0;
}

/* ---- option parsing of `timeline branch|list|delete` and `restore` ---- */

static int usage(const char *u, const char *fmt, const char *arg)
{
    fprintf(stderr, "strata: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nusage: %s\n", u);
    return CLI_USAGE;
}

/* "--opt V" or "--opt=V" at argv[*i]: 1 matched (*v set, NULL when the
 * value is missing), 0 not this option. */
static int opt(int argc, char **argv, int *i, const char *name, const char **v)
{
    size_t len = strlen(name);
    if (strncmp(argv[*i], name, len) == 0 && argv[*i][len] == '=') {
        *v = argv[*i] + len + 1;
        return 1;
    }
    if (strcmp(argv[*i], name) != 0)
        return 0;
    *v = *i + 1 < argc ? argv[++*i] : NULL;
    return 1;
}

typedef struct tl_args {
    const char *dir;
    bool json;
    int port;
    const char *name; /* positional, or restore's --name */
    branch_args branch;
} tl_args;

/* Parses argv[first..]: the options common to branch, list, delete and
 * restore (each caller checks which it allows).  0 or CLI_USAGE. */
static int parse_tl_args(int argc, char **argv, int first, const char *u, bool restore, tl_args *a)
{
    memset(a, 0, sizeof *a);
    a->dir = ".strata";
    for (int i = first; i < argc; i++) {
        const char *v = NULL;
        if (opt(argc, argv, &i, "--dir", &v)) {
            if (v == NULL || *v == '\0')
                return usage(u, "%s needs a directory", "--dir");
            a->dir = v;
        } else if (opt(argc, argv, &i, "--from", &v)) {
            if (v == NULL || *v == '\0')
                return usage(u, "%s needs a timeline name", "--from");
            a->branch.from = v;
        } else if (opt(argc, argv, &i, "--lsn", &v)) {
            if (v == NULL || !lsn_parse(v, &a->branch.lsn) || a->branch.lsn == LSN_INVALID)
                return usage(u, "--lsn needs an LSN X/Y, got '%s'", v ? v : "");
            a->branch.has_lsn = true;
        } else if (opt(argc, argv, &i, "--time", &v)) {
            if (v == NULL || *v == '\0' || strlen(v) > 100)
                return usage(u, "--time needs a timestamp such as '%s'", "2026-12-02 05:00:00+00");
            a->branch.time = v;
        } else if (restore && opt(argc, argv, &i, "--name", &v)) {
            if (v == NULL || *v == '\0')
                return usage(u, "%s needs a name", "--name");
            a->name = v;
        } else if (restore && opt(argc, argv, &i, "--port", &v)) {
            char *end;
            long p = v ? strtol(v, &end, 10) : 0;
            if (v == NULL || *end != '\0' || p < 1 || p > 65535)
                return usage(u, "--port needs a port number, got '%s'", v ? v : "");
            a->port = (int)p;
        } else if (strcmp(argv[i], "--json") == 0) {
            a->json = true;
        } else if (!restore && a->name == NULL && argv[i][0] != '-') {
            a->name = argv[i];
        } else {
            return usage(u, "unexpected argument '%s'", argv[i]);
        }
    }
    if (a->branch.has_lsn && a->branch.time != NULL)
        return usage(u, "%s", "give --lsn or --time, not both");
    return 0;
}

/* The cluster and its registry, locked.  Returns the lock fd or -1. */
static int open_cluster(const char *dir, cluster *c, timeline_registry *r, cli_err *err)
{
    if (cluster_load_existing(dir, c, err) != 0)
        return -1;
    int lock = cluster_lock(c->dir, err);
    if (lock < 0)
        return -1;
    if (timelines_load(c, r, err) != 0) {
        close(lock);
        return -1;
    }
    return lock;
}

static void print_branch(const branch_result *b, const char *parent)
{
    char lb[LSN_FMT_LEN], hex[STRATA_ID_HEX_LEN];
    printf("timeline %s (%s): branched from %s at %s in %.3f s\n", b->entry.name,
           strata_id_format(&b->entry.id, hex), parent, lsn_format(b->entry.branch_lsn, lb),
           (double)b->create_ms / 1000.0);
}

static const char *const branch_usage =
    "strata timeline branch NAME [--from PARENT] [--lsn X/Y | --time 'TIMESTAMP'] [--dir D]";

static int cmd_timeline_branch(const cli_opts *o)
{
    tl_args a;
    if (parse_tl_args(o->argc, o->argv, 1, branch_usage, false, &a) != 0)
        return CLI_USAGE;
    if (a.name == NULL)
        return usage(branch_usage, "%s", "timeline branch needs a NAME");
    a.branch.name = a.name;
    cli_err err = {{0}};
    cluster c;
    timeline_registry *r = malloc(sizeof *r);
    if (r == NULL)
        return cli_err_set(&err, "out of memory"), cli_fail(&err);
    int lock = open_cluster(a.dir, &c, r, &err);
    branch_result b;
    int rc = lock < 0 ? -1 : timeline_branch(&c, r, &a.branch, &b, &err);
    if (lock >= 0)
        close(lock);
    free(r);
    if (rc != 0)
        return cli_fail(&err);
    print_branch(&b, b.entry.parent);
    if (b.has_tp && b.tp.commit_time[0] != '\0')
        printf("timeline %s: the last commit at or before %s was at %s\n", b.entry.name,
               a.branch.time, b.tp.commit_time);
    return CLI_OK;
}

/* ---- timeline list: the tree ---- */

typedef struct tree_ctx {
    const cluster *c;
    timeline_registry *r;
    cJSON *ps_list; /* the pageserver's GET .../timeline, or NULL */
    pid_t pids[TIMELINES_MAX];
} tree_ctx;

static const char *ps_last_record(const tree_ctx *t, const strata_id *id)
{
    char hex[STRATA_ID_HEX_LEN];
    strata_id_format(id, hex);
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(t->ps_list, "timelines"))
    {
        const char *tid = jstr(e, "timeline_id");
        if (tid != NULL && strcmp(tid, hex) == 0)
            return jstr(e, "last_record_lsn");
    }
    return NULL;
}

/* "c1 (running), c2 (stopped)" for the computes on timeline name. */
static void computes_on(const tree_ctx *t, const char *name, char *out, size_t len)
{
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < t->r->ncomputes && n < len; i++) {
        const compute_entry *e = &t->r->computes[i];
        if (strcmp(e->timeline, name) != 0)
            continue;
        n +=
            (size_t)snprintf(out + n, len - n, "%s%s (%s%s)", n ? ", " : "", e->name,
                             e->read_only ? "read-only, " : "", t->pids[i] ? "running" : "stopped");
    }
}

static void tree_print(const tree_ctx *t, const char *parent, const char *prefix)
{
    int kids[TIMELINES_MAX], nk = 0;
    for (int i = 1; i < t->r->ntimelines; i++)
        if (strcmp(t->r->timelines[i].parent, parent) == 0)
            kids[nk++] = i;
    for (int k = 0; k < nk; k++) {
        const timeline_entry *e = &t->r->timelines[kids[k]];
        bool last = k == nk - 1;
        char lb[LSN_FMT_LEN], hex[STRATA_ID_HEX_LEN], computes[512];
        const char *lr = ps_last_record(t, &e->id);
        computes_on(t, e->name, computes, sizeof computes);
        printf("%s%s %s  %s  branched at %s  last record %s%s%s\n", prefix, last ? "└─" : "├─",
               e->name, strata_id_format(&e->id, hex), lsn_format(e->branch_lsn, lb), lr ? lr : "-",
               computes[0] ? "  computes: " : "", computes);
        char sub[1024];
        snprintf(sub, sizeof sub, "%s%s", prefix, last ? "   " : "│  ");
        tree_print(t, e->name, sub);
    }
}

static cJSON *tree_json(const tree_ctx *t)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = root ? cJSON_AddArrayToObject(root, "timelines") : NULL;
    bool ok = arr != NULL;
    for (int i = 0; ok && i < t->r->ntimelines; i++) {
        const timeline_entry *e = &t->r->timelines[i];
        char lb[LSN_FMT_LEN], hex[STRATA_ID_HEX_LEN];
        const char *lr = ps_last_record(t, &e->id);
        cJSON *o = cJSON_CreateObject(), *cs = NULL;
        ok = o != NULL && cJSON_AddItemToArray(arr, o) &&
             cJSON_AddStringToObject(o, "name", e->name) &&
             cJSON_AddStringToObject(o, "timeline_id", strata_id_format(&e->id, hex)) &&
             (i == 0 ? cJSON_AddNullToObject(o, "parent") != NULL
                     : cJSON_AddStringToObject(o, "parent", e->parent) != NULL) &&
             (i == 0 ? cJSON_AddNullToObject(o, "branch_lsn") != NULL
                     : cJSON_AddStringToObject(o, "branch_lsn", lsn_format(e->branch_lsn, lb)) !=
                           NULL) &&
             (lr ? cJSON_AddStringToObject(o, "last_record_lsn", lr) != NULL
                 : cJSON_AddNullToObject(o, "last_record_lsn") != NULL) &&
             (cs = cJSON_AddArrayToObject(o, "computes")) != NULL;
        for (int k = 0; ok && k < t->r->ncomputes; k++)
            if (strcmp(t->r->computes[k].timeline, e->name) == 0)
                ok = cJSON_AddItemToArray(cs, cJSON_CreateString(t->r->computes[k].name));
    }
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static int timeline_list(const tl_args *a)
{
    cli_err err = {{0}};
    cluster c;
    timeline_registry *r = malloc(sizeof *r);
    tree_ctx *t = malloc(sizeof *t);
    if (r == NULL || t == NULL) {
        free(r);
        free(t);
        return cli_err_set(&err, "out of memory"), cli_fail(&err);
    }
    int lock = open_cluster(a->dir, &c, r, &err);
    if (lock < 0) {
        free(r);
        free(t);
        return cli_fail(&err);
    }
    close(lock);
    memset(t, 0, sizeof *t);
    t->c = &c;
    t->r = r;
    for (int i = 0; i < r->ncomputes; i++) {
        cluster view;
        cli_err ignored = {{0}};
        if (timelines_compute_view(&c, r, &r->computes[i], &view, &ignored) == 0)
            t->pids[i] = compute_pid(&view);
    }
    char tenant[STRATA_ID_HEX_LEN], path[128];
    snprintf(path, sizeof path, "/v1/tenant/%s/timeline", strata_id_format(&c.tenant_id, tenant));
    int status;
    cli_err ps_err = {{0}};
    if (pageserver_pid(&c) == 0 || ps_call(&c, "GET", path, NULL, &status, &t->ps_list, &ps_err))
        t->ps_list = NULL;
    int rc = CLI_OK;
    if (a->json) {
        cJSON *j = tree_json(t);
        char *text = j ? cJSON_Print(j) : NULL;
        if (text != NULL)
            printf("%s\n", text);
        else
            rc = cli_err_set(&err, "out of memory"), cli_fail(&err);
        cJSON_free(text);
        cJSON_Delete(j);
    } else {
        const timeline_entry *m = &r->timelines[0];
        char lb[LSN_FMT_LEN], hex[STRATA_ID_HEX_LEN], computes[512];
        const char *lr = ps_last_record(t, &m->id);
        computes_on(t, m->name, computes, sizeof computes);
        printf("%s %s  start %s  last record %s%s%s\n", m->name, strata_id_format(&m->id, hex),
               lsn_format(m->branch_lsn, lb), lr ? lr : "-", computes[0] ? "  computes: " : "",
               computes);
        tree_print(t, m->name, "");
        if (t->ps_list == NULL)
            printf("(pageserver not reachable: last record LSNs unknown)\n");
    }
    cJSON_Delete(t->ps_list);
    free(r);
    free(t);
    return rc;
}

/* ---- timeline delete ---- */

static int timeline_delete(const cluster *c, timeline_registry *r, const char *name, cli_err *err)
{
    const timeline_entry *t = timelines_find(r, name);
    if (t == NULL)
        return cli_err_set(err, "no timeline named %s (strata timeline list shows them)", name);
    if (t == &r->timelines[0])
        return cli_err_set(err, "timeline %s is the cluster's own; it cannot be deleted", name);
    char kids[512] = "";
    size_t n = 0;
    for (int i = 1; i < r->ntimelines && n < sizeof kids; i++)
        if (strcmp(r->timelines[i].parent, name) == 0)
            n += (size_t)snprintf(kids + n, sizeof kids - n, "%s%s", n ? ", " : "",
                                  r->timelines[i].name);
    if (n > 0)
        return cli_err_set(err, "timeline %s has branches: %s (delete them first)", name, kids);
    for (int i = 0; i < r->ncomputes; i++) {
        const compute_entry *e = &r->computes[i];
        cluster view;
        if (strcmp(e->timeline, name) != 0)
            continue;
        if (timelines_compute_view(c, r, e, &view, err) != 0)
            return -1;
        pid_t pid = compute_pid(&view);
        if (pid != 0)
            return cli_err_set(err,
                               "compute %s runs on timeline %s (pid %d): stop it first "
                               "(strata stop compute %s)",
                               e->name, name, (int)pid, e->name);
    }
    char tenant[STRATA_ID_HEX_LEN], hex[STRATA_ID_HEX_LEN], path[160];
    snprintf(path, sizeof path, "/v1/tenant/%s/timeline/%s",
             strata_id_format(&c->tenant_id, tenant), strata_id_format(&t->id, hex));
    int status = 0;
    cJSON *j = NULL;
    cli_err del_err = {{0}};
    /* 404: gone already (a delete whose answer was lost). */
    if (ps_call(c, "DELETE", path, NULL, &status, &j, &del_err) != 0 && status != 404)
        return cli_err_set(err, "%s", del_err.msg);
    cJSON_Delete(j);
    /* Its stopped computes go with it. */
    for (int i = r->ncomputes - 1; i >= 1; i--) {
        compute_entry e = r->computes[i];
        cluster view;
        if (strcmp(e.timeline, name) != 0)
            continue;
        if (timelines_compute_view(c, r, &e, &view, err) != 0 ||
            compute_remove_files(&view, err) != 0)
            return -1;
        printf("compute %s: removed (it ran on timeline %s)\n", e.name, name);
        timelines_remove_compute(r, e.name);
    }
    timelines_remove(r, name);
    return timelines_save(c, r, err);
}

static const char *const list_usage = "strata timeline list [--json] [--dir D]";
static const char *const delete_usage = "strata timeline delete NAME [--dir D]";

/* True when argv holds an option only the id-based commands know. */
static bool id_based(const cli_opts *o)
{
    for (int i = 1; i < o->argc; i++) {
        const char *a = o->argv[i];
        if (strncmp(a, "--tenant", 8) == 0 || strncmp(a, "--pageserver", 12) == 0 ||
            strncmp(a, "--auth-file", 11) == 0)
            return true;
    }
    return false;
}

int cmd_timeline_named(const cli_opts *o)
{
    if (o->argc < 1)
        return -2;
    const char *sub = o->argv[0];
    if (strcmp(sub, "branch") == 0)
        return cmd_timeline_branch(o);
    if (id_based(o))
        return -2;
    tl_args a;
    if (strcmp(sub, "list") == 0) {
        if (parse_tl_args(o->argc, o->argv, 1, list_usage, false, &a) != 0)
            return CLI_USAGE;
        if (a.name != NULL || a.branch.from != NULL || a.branch.has_lsn || a.branch.time)
            return usage(list_usage, "%s", "timeline list takes no NAME, --from, --lsn or --time");
        return timeline_list(&a);
    }
    if (strcmp(sub, "delete") != 0)
        return -2;
    /* delete ID (32 hex digits: longer than any name) is the id-based one. */
    strata_id id;
    for (int i = 1; i < o->argc; i++)
        if (o->argv[i][0] != '-' && strata_id_parse(o->argv[i], &id))
            return -2;
    if (parse_tl_args(o->argc, o->argv, 1, delete_usage, false, &a) != 0)
        return CLI_USAGE;
    if (a.name == NULL)
        return usage(delete_usage, "%s", "timeline delete needs a NAME");
    cli_err err = {{0}};
    cluster c;
    timeline_registry *r = malloc(sizeof *r);
    if (r == NULL)
        return cli_err_set(&err, "out of memory"), cli_fail(&err);
    int lock = open_cluster(a.dir, &c, r, &err);
    int rc = lock < 0 ? -1 : timeline_delete(&c, r, a.name, &err);
    if (lock >= 0)
        close(lock);
    free(r);
    if (rc != 0)
        return cli_fail(&err);
    printf("timeline %s: deleted (the safekeepers keep its WAL: they have no delete yet)\n",
           a.name);
    return CLI_OK;
}

/* ---- restore ---- */

static const char *const restore_usage =
    "strata restore --time 'TIMESTAMP' | --lsn X/Y [--from TIMELINE] [--name NAME] [--port P] "
    "[--dir D]";

static int restore_locked(const tl_args *a, const cluster *c, timeline_registry *r, cli_err *err)
{
    char name[CLUSTER_COMPUTE_NAME_LEN];
    if (a->name != NULL) {
        snprintf(name, sizeof name, "%s", a->name);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(name, sizeof name, "restore-%Y%m%d-%H%M%S", &tm);
    }
    if (!timelines_name_ok(name, err))
        return -1;
    if (computes_reserved_name(name) || timelines_find_compute(r, name) != NULL)
        return cli_err_set(err, "a compute named %s exists already; give another --name", name);
    branch_args b = a->branch;
    b.name = name;
    branch_result res;
    if (timeline_branch(c, r, &b, &res, err) != 0)
        return -1;
    print_branch(&res, res.entry.parent);
    char lb[LSN_FMT_LEN];
    lsn_format(res.entry.branch_lsn, lb);
    if (b.time != NULL)
        printf("restore: %s resolved to LSN %s: %s\n", b.time, lb,
               !res.has_tp                     ? "commit time not known"
               : res.tp.commit_time[0] != '\0' ? res.tp.commit_time
                                               : "no commit at or before it (the latest state)");
    fflush(stdout);
    cli_opts co = {.compute_name = name, .timeline = name, .compute_port = a->port};
    if (computes_start_in_registry(&co, c, r, err) != 0)
        return -1;
    char connstr[512];
    cluster view;
    if (timelines_compute_view(c, r, timelines_find_compute(r, name), &view, err) != 0)
        return -1;
    cluster_compute_connstr(&view, connstr, sizeof connstr);
    printf("restored: timeline %s branched from %s at %s; compute %s: %s\n", name, res.entry.parent,
           lb, name, connstr);
    return 0;
}

int cmd_restore(const cli_opts *o)
{
    tl_args a;
    for (int i = 0; i < o->argc; i++)
        if (strcmp(o->argv[i], "-h") == 0 || strcmp(o->argv[i], "--help") == 0) {
            printf("usage: %s\n", restore_usage);
            return CLI_OK;
        }
    if (parse_tl_args(o->argc, o->argv, 0, restore_usage, true, &a) != 0)
        return CLI_USAGE;
    if (!a.branch.has_lsn && a.branch.time == NULL)
        return usage(restore_usage, "%s", "restore needs --time 'TIMESTAMP' or --lsn X/Y");
    if (a.json)
        return usage(restore_usage, "unexpected argument '%s'", "--json");
    cli_err err = {{0}};
    cluster c;
    timeline_registry *r = malloc(sizeof *r);
    if (r == NULL)
        return cli_err_set(&err, "out of memory"), cli_fail(&err);
    int lock = open_cluster(a.dir, &c, r, &err);
    int rc = lock < 0 ? -1 : restore_locked(&a, &c, r, &err);
    if (lock >= 0)
        close(lock);
    free(r);
    return rc != 0 ? cli_fail(&err) : CLI_OK;
}
