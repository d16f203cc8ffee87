/*
 * cmd_status.c: `strata status [--json]`, what runs under D and where.
 *
 * The JSON form is the stable interface of docs/design.md §2.5: exactly one
 * object on stdout; a component that is not running has "pid": null, and a
 * value nobody could report (an LSN of a stopped safekeeper or pageserver)
 * is null.  Ports are those of cluster.json, running or not.
 *
 * Not for: changing anything.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "cli/compute/compute.h"
#include "cli/compute/computes.h"
#include "cli/local/pageserver.h"
#include "cli/local/safekeepers.h"

typedef struct status_snapshot {
    pid_t compute_pid;
    char compute_datadir[PATH_MAX];
    char connstr[512];
    bool ps_built;
    pid_t ps_pid;
    pageserver_timeline ps_tl;
    pid_t sk_pid[CLUSTER_SAFEKEEPERS];
    safekeeper_timeline sk_tl[CLUSTER_SAFEKEEPERS];
} status_snapshot;

static int status_collect(const cluster *c, status_snapshot *s, cli_err *err)
{
    s->compute_pid = compute_pid(c);
    if (compute_datadir(c, s->compute_datadir, err) != 0)
        return -1;
    cluster_compute_connstr(c, s->connstr, sizeof s->connstr);
    s->ps_built = pageserver_built();
    s->ps_pid = pageserver_pid(c);
    pageserver_query(c, &s->ps_tl);
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        s->sk_pid[i] = safekeepers_pid(c, &c->sk[i]);
        safekeepers_query(c, &c->sk[i], &s->sk_tl[i]);
    }
    return 0;
}

static cJSON *json_pid(pid_t pid)
{
    return pid ? cJSON_CreateNumber(pid) : cJSON_CreateNull();
}

static cJSON *json_lsn(bool known, lsn_t lsn)
{
    char buf[LSN_FMT_LEN];
    return known ? cJSON_CreateString(lsn_format(lsn, buf)) : cJSON_CreateNull();
}

/* Adds item to obj, freeing it on failure; false on any failure. */
static bool add(cJSON *obj, const char *key, cJSON *item)
{
    if (item == NULL)
        return false;
    if (!cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        return false;
    }
    return true;
}

/* The newest configuration any safekeeper reports (generation 0: none). */
static const membership *newest_mconf(const status_snapshot *s)
{
    static const membership none;
    const membership *best = &none;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if (s->sk_tl[i].known && s->sk_tl[i].mconf.generation > best->generation)
            best = &s->sk_tl[i].mconf;
    return best;
}

/* A running safekeeper that holds an older configuration than another one
 * does: it missed a switch, refuses the compute and counts for nothing
 * until `strata start NAME` brings it up to date (cli/client/sk_config.h). */
static bool config_behind(const status_snapshot *s, int i)
{
    return s->sk_tl[i].known && s->sk_tl[i].mconf.generation < newest_mconf(s)->generation;
}

static cJSON *members_json(const member *set, uint32_t n)
{
    cJSON *arr = cJSON_CreateArray();
    for (uint32_t i = 0; arr != NULL && i < n; i++) {
        cJSON *m = cJSON_CreateObject();
        if (m == NULL || !cJSON_AddItemToArray(arr, m) ||
            !add(m, "node_id", cJSON_CreateNumber((double)set[i].node_id)) ||
            !add(m, "addr", cJSON_CreateString(set[i].addr))) {
            cJSON_Delete(arr);
            return NULL;
        }
    }
    return arr;
}

/* The pageserver's upload to object storage; null when it has none. */
static cJSON *remote_json(const pageserver_timeline *t)
{
    if (!t->known || !t->remote)
        return cJSON_CreateNull();
    cJSON *r = cJSON_CreateObject();
    if (r == NULL)
        return NULL;
    if (!add(r, "files_pending", cJSON_CreateNumber((double)t->remote_files_pending)) ||
        !add(r, "bytes_pending", cJSON_CreateNumber((double)t->remote_bytes_pending)) ||
        !add(r, "failing", cJSON_CreateBool(t->remote_failing)) ||
        !add(r, "last_error", cJSON_CreateString(t->remote_error))) {
        cJSON_Delete(r);
        return NULL;
    }
    return r;
}

static cJSON *status_json(const cluster *c, const status_snapshot *s)
{
    cJSON *root = cJSON_CreateObject();
    if (root == NULL)
        return NULL;
    char auth_file[PATH_MAX + 16];
    snprintf(auth_file, sizeof auth_file, "%s/%s", c->dir, CLUSTER_AUTH_FILE);
    bool ok =
        add(root, "dir", cJSON_CreateString(c->dir)) &&
        add(root, "auth", cJSON_CreateBool(c->auth)) &&
        add(root, "remote", c->remote[0] ? cJSON_CreateString(c->remote) : cJSON_CreateNull()) &&
        add(root, "auth_file", c->auth ? cJSON_CreateString(auth_file) : cJSON_CreateNull());
    cJSON *compute = cJSON_AddObjectToObject(root, "compute");
    cJSON *ps = cJSON_AddObjectToObject(root, "pageserver");
    cJSON *sks = NULL;
    ok = ok && compute != NULL && ps != NULL && add(compute, "pid", json_pid(s->compute_pid)) &&
         add(compute, "port", cJSON_CreateNumber(c->compute_port)) &&
         add(compute, "connstr", cJSON_CreateString(s->connstr)) &&
         add(compute, "datadir", cJSON_CreateString(s->compute_datadir)) &&
         add(root, "computes", computes_status_json(c)) && add(ps, "pid", json_pid(s->ps_pid)) &&
         add(ps, "pg_port", cJSON_CreateNumber(c->pageserver_pg_port)) &&
         add(ps, "http_port", cJSON_CreateNumber(c->pageserver_http_port)) &&
         add(ps, "last_record_lsn", json_lsn(s->ps_tl.known, s->ps_tl.last_record_lsn)) &&
         add(ps, "disk_consistent_lsn", json_lsn(s->ps_tl.known, s->ps_tl.disk_consistent_lsn)) &&
         add(ps, "remote_consistent_lsn",
             json_lsn(s->ps_tl.known, s->ps_tl.remote_consistent_lsn)) &&
         add(ps, "remote", remote_json(&s->ps_tl)) &&
         (sks = cJSON_AddArrayToObject(root, "safekeepers")) != NULL;
    const membership *m = newest_mconf(s);
    cJSON *conf = cJSON_AddObjectToObject(root, "configuration");
    ok = ok && conf != NULL && add(conf, "generation", cJSON_CreateNumber(m->generation)) &&
         add(conf, "members", members_json(m->members, m->n_members)) &&
         add(conf, "new_members", members_json(m->new_members, m->n_new_members));
    for (int i = 0; ok && i < CLUSTER_SAFEKEEPERS; i++) {
        const safekeeper_timeline *tl = &s->sk_tl[i];
        cJSON *sk = cJSON_CreateObject();
        if (sk == NULL || !cJSON_AddItemToArray(sks, sk)) {
            cJSON_Delete(sk);
            ok = false;
            break;
        }
        ok = add(sk, "name", cJSON_CreateString(c->sk[i].name)) &&
             add(sk, "pid", json_pid(s->sk_pid[i])) &&
             add(sk, "pg_port", cJSON_CreateNumber(c->sk[i].pg_port)) &&
             add(sk, "http_port", cJSON_CreateNumber(c->sk[i].http_port)) &&
             add(sk, "node_id",
                 tl->known ? cJSON_CreateNumber((double)tl->node_id) : cJSON_CreateNull()) &&
             add(sk, "generation",
                 tl->known ? cJSON_CreateNumber(tl->mconf.generation) : cJSON_CreateNull()) &&
             add(sk, "config_behind",
                 tl->known ? cJSON_CreateBool(config_behind(s, i)) : cJSON_CreateNull()) &&
             add(sk, "failed", tl->known ? cJSON_CreateBool(tl->failed) : cJSON_CreateNull()) &&
             add(sk, "term",
                 tl->known ? cJSON_CreateNumber((double)tl->term) : cJSON_CreateNull()) &&
             add(sk, "flush_lsn", json_lsn(tl->known, tl->flush_lsn)) &&
             add(sk, "commit_lsn", json_lsn(tl->known, tl->commit_lsn)) &&
             add(sk, "wal_bytes",
                 tl->known ? cJSON_CreateNumber((double)tl->wal_bytes) : cJSON_CreateNull()) &&
             add(sk, "max_wal_bytes",
                 tl->known ? cJSON_CreateNumber((double)tl->max_wal_bytes) : cJSON_CreateNull()) &&
             add(sk, "wal_limited",
                 tl->known ? cJSON_CreateBool(tl->wal_limited) : cJSON_CreateNull()) &&
             add(sk, "wal_backup_lsn", json_lsn(tl->known && tl->wal_backup, tl->backup_lsn)) &&
             add(sk, "wal_backup_error",
                 tl->known && tl->backup_failing ? cJSON_CreateString(tl->backup_error)
                                                 : cJSON_CreateNull());
    }
    if (!ok) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

static void print_pid(pid_t pid)
{
    if (pid)
        printf("%-8d", (int)pid);
    else
        printf("%-8s", "-");
}

/* remote_consistent_lsn and how far the upload is behind. */
static void print_remote(const pageserver_timeline *t)
{
    char rl[LSN_FMT_LEN];
    if (!t->remote) {
        printf(", no remote store");
        return;
    }
    printf(", remote_consistent %s", lsn_format(t->remote_consistent_lsn, rl));
    if (t->remote_files_pending > 0)
        printf(" (%llu files, %llu MB to upload)", (unsigned long long)t->remote_files_pending,
               (unsigned long long)(t->remote_bytes_pending >> 20));
    if (t->remote_failing)
        printf("\n%-11s upload FAILING: %s", "", t->remote_error);
}

static void status_print_human(const cluster *c, const status_snapshot *s)
{
    char tenant[STRATA_ID_HEX_LEN], timeline[STRATA_ID_HEX_LEN];
    printf("cluster   %s\n", c->dir);
    printf("tenant    %s\ntimeline  %s\n", strata_id_format(&c->tenant_id, tenant),
           strata_id_format(&c->timeline_id, timeline));
    printf("remote    %s\n", c->remote[0] ? c->remote : "(none: set at the next `strata up`)");
    if (c->auth)
        printf("auth      on: every daemon port and the admin API need a token (%s/%s)\n\n", c->dir,
               CLUSTER_AUTH_FILE);
    else
        printf("auth      OFF (--no-auth): every daemon port and the admin API trust "
               "everyone\n\n");
    printf("%-11s %-8s %-8s %-6s %-6s %-18s %-18s\n", "NAME", "STATE", "PID", "PORT", "HTTP",
           "FLUSH_LSN", "COMMIT_LSN");
    printf("%-11s %-8s ", "compute", s->compute_pid ? "running" : "stopped");
    print_pid(s->compute_pid);
    printf(" %-6d %-6s %-18s %-18s\n", c->compute_port, "-", "-", "-");
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        const safekeeper_timeline *tl = &s->sk_tl[i];
        char flush[LSN_FMT_LEN] = "-", commit[LSN_FMT_LEN] = "-";
        if (tl->known) {
            lsn_format(tl->flush_lsn, flush);
            lsn_format(tl->commit_lsn, commit);
        }
        printf("%-11s %-8s ", c->sk[i].name, s->sk_pid[i] ? "running" : "stopped");
        print_pid(s->sk_pid[i]);
        printf(" %-6d %-6d %-18s %-18s", c->sk[i].pg_port, c->sk[i].http_port, flush, commit);
        if (tl->known) {
            printf(" term %llu, wal %llu MB", (unsigned long long)tl->term,
                   (unsigned long long)(tl->wal_bytes >> 20));
            if (tl->max_wal_bytes > 0)
                printf(" of %llu MB", (unsigned long long)(tl->max_wal_bytes >> 20));
            if (tl->failed)
                printf(" FAILED: WAL storage error, serves nobody until restarted (see its log)");
            if (config_behind(s, i))
                printf(" BEHIND: configuration generation %u of %u, run `strata start %s`",
                       tl->mconf.generation, newest_mconf(s)->generation, c->sk[i].name);
            if (tl->wal_limited)
                printf(" FULL: refusing appends until WAL is removed");
            if (tl->wal_backup) {
                char b[LSN_FMT_LEN];
                printf(", backed up to %s", lsn_format(tl->backup_lsn, b));
                if (tl->backup_failing)
                    printf(" (BACKUP FAILING, WAL kept: %s)", tl->backup_error);
            }
        }
        printf("\n");
    }
    char last[LSN_FMT_LEN] = "-", disk[LSN_FMT_LEN] = "-";
    if (s->ps_tl.known) {
        lsn_format(s->ps_tl.last_record_lsn, last);
        lsn_format(s->ps_tl.disk_consistent_lsn, disk);
    }
    const membership *m = newest_mconf(s);
    if (m->generation > 0) {
        char mem[MEMBERSHIP_TEXT_MAX], nmem[MEMBERSHIP_TEXT_MAX];
        membership_format_set(m->members, m->n_members, mem, sizeof mem);
        membership_format_set(m->new_members, m->n_new_members, nmem, sizeof nmem);
        printf("%-11s generation %u: members %s%s%s\n", "config", m->generation, mem,
               m->n_new_members > 0 ? ", joint with " : "", nmem);
    }
    printf("%-11s %-8s ", "pageserver",
           s->ps_pid ? "running" : (s->ps_built ? "stopped" : "absent"));
    print_pid(s->ps_pid);
    printf(" %-6d %-6d", c->pageserver_pg_port, c->pageserver_http_port);
    if (s->ps_tl.known) {
        printf(" last_record %s, disk_consistent %s", last, disk);
        print_remote(&s->ps_tl);
    } else if (!s->ps_built)
        printf(" (strata-pageserver not built)");
    else if (s->ps_pid && !c->pageserver_imported)
        printf(" (timeline not imported yet)");
    printf("\n");
    computes_status_print(c);
    printf("\n");
    printf("connect: psql \"%s\"\n", s->connstr);
}

int cmd_status(const cli_opts *o)
{
    cli_err err = {{0}};
    cluster c;
    if (cluster_load_existing(o->dir, &c, &err) != 0)
        return cli_fail(&err);
    status_snapshot *s = calloc(1, sizeof *s);
    if (s == NULL) {
        cli_err_set(&err, "out of memory");
        return cli_fail(&err);
    }
    if (status_collect(&c, s, &err) != 0) {
        free(s);
        return cli_fail(&err);
    }
    if (!o->json) {
        status_print_human(&c, s);
        free(s);
        return CLI_OK;
    }
    cJSON *root = status_json(&c, s);
    free(s);
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (text == NULL) {
        cli_err_set(&err, "out of memory");
        return cli_fail(&err);
    }
    printf("%s\n", text);
    free(text);
    return CLI_OK;
}
