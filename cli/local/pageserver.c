/*
 * pageserver.c: starting, stopping and querying the local pageserver.
 * See pageserver.h.
 *
 * The pageserver runs as the calling user; when that is root it starts its
 * redo helpers (postgres processes) as the unprivileged postgres user
 * itself, so D/pageserver is world-traversable (0755) for them to reach
 * their work directory.
 */
#include "cli/local/pageserver.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/local/cluster_remote.h"
#include "cli/local/locate.h"
#include "cli/local/probe.h"
#include "cli/local/proc.h"
#include "base/log.h"
#include "base/strata_assert.h"

/* How long the pageserver gets to exit after SIGTERM (it flushes). */
#define PAGESERVER_STOP_TIMEOUT_MS 30000
#define PAGESERVER_KILL_TIMEOUT_MS 10000
#define PAGESERVER_QUERY_TIMEOUT_MS 2000
/* An import of a fresh initdb takes seconds; leave room for a slow disk. */
#define PAGESERVER_IMPORT_TIMEOUT_MS 300000
#define PAGESERVER_PORTS_FILE "pageserver.ports"

typedef struct pageserver_paths {
    char datadir[PATH_MAX]; /* D/pageserver */
    char ports[PATH_MAX];   /* D/pageserver/pageserver.ports */
    char pidfile[PATH_MAX]; /* D/pageserver.pid */
    char logfile[PATH_MAX]; /* D/pageserver.log */
} pageserver_paths;

static int ps_paths(const cluster *c, pageserver_paths *p, cli_err *err)
{
    return cluster_path(c, "pageserver", p->datadir, err) != 0 ||
                   cluster_path(c, "pageserver/" PAGESERVER_PORTS_FILE, p->ports, err) != 0 ||
                   cluster_path(c, "pageserver.pid", p->pidfile, err) != 0 ||
                   cluster_path(c, "pageserver.log", p->logfile, err) != 0
               ? -1
               : 0;
}

bool pageserver_built(void)
{
    char program[PATH_MAX];
    cli_err err = {{0}};
    return locate_sibling(PAGESERVER_PROGRAM, program, &err) == 0;
}

pid_t pageserver_pid(const cluster *c)
{
    pageserver_paths p;
    cli_err err = {{0}};
    pid_t pid;
    if (ps_paths(c, &p, &err) != 0 || proc_pidfile_read(p.pidfile, &pid, &err) != 0)
        return 0;
    return proc_matches(pid, PAGESERVER_PROGRAM, p.datadir) ? pid : 0;
}

int pageserver_preflight(cli_err *err)
{
    char program[PATH_MAX], bindir[PATH_MAX];
    if (locate_sibling(PAGESERVER_PROGRAM, program, err) != 0)
        return -1;
    return locate_patched_pg_bindir(bindir, err);
}

int pageserver_start(const cluster *c, cli_err *err)
{
    pageserver_paths p;
    char program[PATH_MAX], bindir[PATH_MAX];
    if (ps_paths(c, &p, err) != 0)
        return -1;
    if (pageserver_pid(c) != 0)
        return 0;
    if (locate_sibling(PAGESERVER_PROGRAM, program, err) != 0 ||
        locate_patched_pg_bindir(bindir, err) != 0)
        return -1;
    if (mkdir(p.datadir, 0755) != 0 && errno != EEXIST)
        return cli_err_set(err, "mkdir %s: %s", p.datadir, strerror(errno));
    /* The ports file of a previous run would make us think it is ready. */
    if (unlink(p.ports) != 0 && errno != ENOENT)
        return cli_err_set(err, "removing the old %s: %s", p.ports, strerror(errno));

    char listen_pg[32], listen_http[32];
    snprintf(listen_pg, sizeof listen_pg, "127.0.0.1:%d", c->pageserver_pg_port);
    snprintf(listen_http, sizeof listen_http, "127.0.0.1:%d", c->pageserver_http_port);
    char auth_file[PATH_MAX];
    if (cluster_path(c, CLUSTER_AUTH_FILE, auth_file, err) != 0)
        return -1;
    char *argv[16] = {program,         "--datadir", p.datadir,     "--listen-pg", listen_pg,
                      "--listen-http", listen_http, "--pg-bindir", bindir};
    int argc = 9;
    /* Its WAL receivers take the admin token from PAGESERVER_SAFEKEEPER_PASSWORD
     * (cluster_auth_export): flags show in ps. */
    if (c->auth) {
        argv[argc++] = "--auth-file";
        argv[argc++] = auth_file;
    }
    cluster_remote_daemon_args(c, argv, &argc);
    STRATA_ASSERT(argc < (int)(sizeof argv / sizeof argv[0]));
    proc_user self = {.drop = false};
    pid_t pid;
    if (proc_spawn_detached(argv, p.logfile, p.datadir, &self, &pid, err) != 0)
        return -1;
    if (proc_pidfile_write(p.pidfile, pid, err) != 0) {
        /* Untracked it could never be stopped by strata: do not leave it. */
        proc_signal_and_wait(pid, SIGKILL, PAGESERVER_KILL_TIMEOUT_MS);
        return -1;
    }
    return 0;
}

/* Reads "pg=P http=Q" from the ports file; 1 while it does not exist. */
static int ps_read_ports(const char *path, int *pg, int *http, cli_err *err)
{
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        if (errno == ENOENT)
            return 1;
        return cli_err_set(err, "open %s: %s", path, strerror(errno));
    }
    char line[128];
    bool got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    /* Written atomically, so a partial line means a foreign writer. */
    if (!got || sscanf(line, "pg=%d http=%d", pg, http) != 2)
        return cli_err_set(err, "%s: expected \"pg=P http=Q\"", path);
    return 0;
}

int pageserver_wait_ready(const cluster *c, int timeout_ms, cli_err *err)
{
    pageserver_paths p;
    if (ps_paths(c, &p, err) != 0)
        return -1;
    long long deadline = proc_now_ms() + timeout_ms;
    for (;;) {
        if (pageserver_pid(c) == 0)
            return cli_err_set(err, "pageserver exited during startup; see %s", p.logfile);
        int pg = 0, http = 0;
        int rc = ps_read_ports(p.ports, &pg, &http, err);
        if (rc < 0)
            return -1;
        if (rc == 0) {
            if (pg != c->pageserver_pg_port || http != c->pageserver_http_port)
                return cli_err_set(err,
                                   "pageserver bound ports %d/%d, not the %d/%d of cluster.json; "
                                   "see %s",
                                   pg, http, c->pageserver_pg_port, c->pageserver_http_port,
                                   p.logfile);
            cli_err probe_err = {{0}};
            char *body = NULL;
            if (probe_http_get(http, "/v1/status", NULL, 1000, &body, &probe_err) == 0) {
                free(body);
                return 0;
            }
        }
        if (proc_now_ms() >= deadline)
            return cli_err_set(err, "pageserver was not ready on ports %d/%d within %d s; see %s",
                               c->pageserver_pg_port, c->pageserver_http_port, timeout_ms / 1000,
                               p.logfile);
        proc_sleep_ms(50);
    }
}

int pageserver_stop(const cluster *c, bool immediate, cli_err *err)
{
    pid_t pid = pageserver_pid(c);
    if (pid == 0)
        return 0;
    if (!immediate) {
        if (proc_signal_and_wait(pid, SIGTERM, PAGESERVER_STOP_TIMEOUT_MS))
            return 0;
        log_warn("pageserver (pid %d) did not exit within %d s of SIGTERM; sending SIGKILL",
                 (int)pid, PAGESERVER_STOP_TIMEOUT_MS / 1000);
    }
    /* Its redo helpers too: they die with it anyway, but asynchronously, and
     * whoever stopped it may remove its directory next. */
    if (!proc_kill_tree(pid, PAGESERVER_KILL_TIMEOUT_MS))
        return cli_err_set(err, "pageserver (pid %d) or one of its redo helpers survived SIGKILL",
                           (int)pid);
    return 0;
}

static void ps_timeline_path(const cluster *c, char *buf, size_t len)
{
    char tenant[STRATA_ID_HEX_LEN], timeline[STRATA_ID_HEX_LEN];
    snprintf(buf, len, "/v1/tenant/%s/timeline/%s", strata_id_format(&c->tenant_id, tenant),
             strata_id_format(&c->timeline_id, timeline));
}

static bool json_lsn(const cJSON *obj, const char *key, lsn_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) && lsn_parse(v->valuestring, out);
}

void pageserver_query(const cluster *c, pageserver_timeline *out)
{
    memset(out, 0, sizeof *out);
    if (pageserver_pid(c) == 0)
        return;
    char path[128];
    ps_timeline_path(c, path, sizeof path);
    cli_err err = {{0}};
    char *body = NULL;
    if (probe_http_get(c->pageserver_http_port, path, cluster_admin_token(c),
                       PAGESERVER_QUERY_TIMEOUT_MS, &body, &err) != 0)
        return;
    cJSON *root = cJSON_Parse(body);
    free(body);
    if (root == NULL)
        return;
    out->known = json_lsn(root, "last_record_lsn", &out->last_record_lsn) &&
                 json_lsn(root, "disk_consistent_lsn", &out->disk_consistent_lsn);
    /* A pageserver without the upload (older) reports no "remote". */
    out->remote_consistent_lsn = out->disk_consistent_lsn;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "remote");
    if (cJSON_IsObject(r)) {
        const cJSON *v;
        out->remote = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "configured"));
        json_lsn(r, "remote_consistent_lsn", &out->remote_consistent_lsn);
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(r, "files_pending")))
            out->remote_files_pending = (uint64_t)v->valuedouble;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(r, "bytes_pending")))
            out->remote_bytes_pending = (uint64_t)v->valuedouble;
        out->remote_failing = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "failing"));
        if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(r, "last_error")))
            snprintf(out->remote_error, sizeof out->remote_error, "%s", v->valuestring);
    }
    cJSON_Delete(root);
}

/* The pageserver's own words from an error body, or the body itself. */
static void ps_error_text(const char *body, char *out, size_t len)
{
    cJSON *root = cJSON_Parse(body);
    const char *text = body;
    if (root != NULL) {
        const char *keys[] = {"error", "message", "msg"};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
            if (cJSON_IsString(v)) {
                text = v->valuestring;
                break;
            }
        }
    }
    snprintf(out, len, "%s", text);
    out[strcspn(out, "\r\n")] = '\0';
    cJSON_Delete(root);
}

static char *ps_create_body(const cluster *c, const char *pgdata)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *sks = root ? cJSON_AddArrayToObject(root, "safekeepers") : NULL;
    bool ok = sks != NULL && cJSON_AddStringToObject(root, "import_pgdata", pgdata) != NULL;
    for (int i = 0; ok && i < CLUSTER_SAFEKEEPERS; i++) {
        char addr[32];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", c->sk[i].pg_port);
        cJSON *s = cJSON_CreateString(addr);
        ok = s != NULL && cJSON_AddItemToArray(sks, s);
        if (!ok)
            cJSON_Delete(s);
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}

int pageserver_create_timeline(const cluster *c, const char *pgdata, lsn_t *lsn, cli_err *err)
{
    char path[128];
    ps_timeline_path(c, path, sizeof path);
    char *body = ps_create_body(c, pgdata);
    if (body == NULL)
        return cli_err_set(err, "out of memory");
    int status = 0;
    char *resp = NULL;
    int rc = probe_http_request(c->pageserver_http_port, "POST", path, body, cluster_admin_token(c),
                                PAGESERVER_IMPORT_TIMEOUT_MS, &status, &resp, err);
    free(body);
    if (rc != 0)
        return -1;
    if (status == 409) {
        /* It has the timeline already: an earlier import whose answer was
         * lost (strata died or timed out before recording it).  Adopt the
         * LSN it started the timeline at. */
        char *got = NULL;
        cli_err get_err = {{0}};
        bool adopted = false;
        if (probe_http_get(c->pageserver_http_port, path, cluster_admin_token(c),
                           PAGESERVER_QUERY_TIMEOUT_MS, &got, &get_err) == 0) {
            cJSON *root = cJSON_Parse(got);
            adopted = root != NULL && json_lsn(root, "start_lsn", lsn);
            cJSON_Delete(root);
            free(got);
        }
        if (adopted) {
            free(resp);
            return 0;
        }
    }
    if (status < 200 || status > 299) {
        char why[512];
        ps_error_text(resp, why, sizeof why);
        free(resp);
        return cli_err_set(err, "pageserver refused to import %s (HTTP %d): %s", pgdata, status,
                           why);
    }
    cJSON *root = cJSON_Parse(resp);
    free(resp);
    bool ok = root != NULL && json_lsn(root, "lsn", lsn);
    cJSON_Delete(root);
    if (!ok)
        return cli_err_set(err, "pageserver imported %s but answered without an \"lsn\"", pgdata);
    return 0;
}
