/*
 * safekeepers.c: starting, stopping and querying the local safekeepers.
 * See safekeepers.h.
 */
#include "cli/local/safekeepers.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "cli/local/cluster_remote.h"
#include "cli/local/locate.h"
#include "cli/local/probe.h"
#include "cli/local/proc.h"
#include "base/log.h"
#include "base/strata_assert.h"

#define SAFEKEEPER_PROGRAM "strata-safekeeper"
/* How long a safekeeper gets to exit after SIGTERM. */
#define SAFEKEEPER_STOP_TIMEOUT_MS 10000
#define SAFEKEEPER_QUERY_TIMEOUT_MS 2000

static int sk_paths(const cluster *c, const cluster_safekeeper *sk, char *datadir, char *pidfile,
                    char *logfile, cli_err *err)
{
    char rel[32];
    if (cluster_path(c, sk->name, datadir, err) != 0)
        return -1;
    snprintf(rel, sizeof rel, "%s.pid", sk->name);
    if (cluster_path(c, rel, pidfile, err) != 0)
        return -1;
    snprintf(rel, sizeof rel, "%s.log", sk->name);
    return cluster_path(c, rel, logfile, err);
}

pid_t safekeepers_pid(const cluster *c, const cluster_safekeeper *sk)
{
    char datadir[PATH_MAX], pidfile[PATH_MAX], logfile[PATH_MAX];
    cli_err err = {{0}};
    pid_t pid;
    if (sk_paths(c, sk, datadir, pidfile, logfile, &err) != 0 ||
        proc_pidfile_read(pidfile, &pid, &err) != 0)
        return 0;
    return proc_matches(pid, SAFEKEEPER_PROGRAM, datadir) ? pid : 0;
}

void safekeepers_list(const cluster *c, char *buf, size_t len)
{
    snprintf(buf, len, "%s:%d,%s:%d,%s:%d", c->sk[0].host, c->sk[0].pg_port, c->sk[1].host,
             c->sk[1].pg_port, c->sk[2].host, c->sk[2].pg_port);
}

int safekeepers_preflight(cli_err *err)
{
    char program[PATH_MAX];
    return locate_sibling(SAFEKEEPER_PROGRAM, program, err);
}

int safekeepers_start(const cluster *c, const cluster_safekeeper *sk, cli_err *err)
{
    char datadir[PATH_MAX], pidfile[PATH_MAX], logfile[PATH_MAX], program[PATH_MAX];
    if (sk_paths(c, sk, datadir, pidfile, logfile, err) != 0)
        return -1;
    if (safekeepers_pid(c, sk) != 0)
        return 0;
    if (locate_sibling(SAFEKEEPER_PROGRAM, program, err) != 0)
        return -1;
    if (mkdir(datadir, 0750) != 0 && errno != EEXIST)
        return cli_err_set(err, "mkdir %s: %s", datadir, strerror(errno));

    char id[16], listen_pg[32], listen_http[32];
    snprintf(id, sizeof id, "%d", sk->id);
    snprintf(listen_pg, sizeof listen_pg, "127.0.0.1:%d", sk->pg_port);
    snprintf(listen_http, sizeof listen_http, "127.0.0.1:%d", sk->http_port);
    char auth_file[PATH_MAX];
    if (cluster_path(c, CLUSTER_AUTH_FILE, auth_file, err) != 0)
        return -1;
    char *argv[16] = {program,   "--id",          id,         "--datadir", datadir, "--listen-pg",
                      listen_pg, "--listen-http", listen_http};
    int argc = 9;
    if (c->auth) {
        argv[argc++] = "--auth-file";
        argv[argc++] = auth_file;
    }
    cluster_remote_daemon_args(c, argv, &argc);
    STRATA_ASSERT(argc < (int)(sizeof argv / sizeof argv[0]));
    proc_user self = {.drop = false};
    pid_t pid;
    if (proc_spawn_detached(argv, logfile, datadir, &self, &pid, err) != 0)
        return -1;
    if (proc_pidfile_write(pidfile, pid, err) != 0) {
        /* Untracked it could never be stopped by strata: do not leave it. */
        proc_signal_and_wait(pid, SIGKILL, SAFEKEEPER_STOP_TIMEOUT_MS);
        return -1;
    }
    return 0;
}

int safekeepers_wait_ready(const cluster *c, const cluster_safekeeper *sk, int timeout_ms,
                           cli_err *err)
{
    char datadir[PATH_MAX], pidfile[PATH_MAX], logfile[PATH_MAX];
    if (sk_paths(c, sk, datadir, pidfile, logfile, err) != 0)
        return -1;
    long long deadline = proc_now_ms() + timeout_ms;
    for (;;) {
        if (safekeepers_pid(c, sk) == 0)
            return cli_err_set(err, "%s exited during startup; see %s", sk->name, logfile);
        if (probe_tcp(sk->pg_port, 500) && probe_tcp(sk->http_port, 500) &&
            safekeepers_pid(c, sk) != 0)
            return 0;
        if (proc_now_ms() >= deadline)
            return cli_err_set(err,
                               "%s did not accept connections on ports %d/%d within %d s; see %s",
                               sk->name, sk->pg_port, sk->http_port, timeout_ms / 1000, logfile);
        proc_sleep_ms(50);
    }
}

int safekeepers_stop(const cluster *c, const cluster_safekeeper *sk, bool immediate, cli_err *err)
{
    pid_t pid = safekeepers_pid(c, sk);
    if (pid == 0)
        return 0;
    if (immediate) {
        if (!proc_signal_and_wait(pid, SIGKILL, SAFEKEEPER_STOP_TIMEOUT_MS))
            return cli_err_set(err, "%s (pid %d) survived SIGKILL", sk->name, (int)pid);
        return 0;
    }
    if (proc_signal_and_wait(pid, SIGTERM, SAFEKEEPER_STOP_TIMEOUT_MS))
        return 0;
    log_warn("%s (pid %d) did not exit within %d s of SIGTERM; sending SIGKILL", sk->name, (int)pid,
             SAFEKEEPER_STOP_TIMEOUT_MS / 1000);
    if (!proc_signal_and_wait(pid, SIGKILL, SAFEKEEPER_STOP_TIMEOUT_MS))
        return cli_err_set(err, "%s (pid %d) survived SIGKILL", sk->name, (int)pid);
    return 0;
}

/* A term is a JSON number or a decimal string; an LSN an "X/Y" string. */
static bool json_term(const cJSON *v, uint64_t *out)
{
    if (cJSON_IsNumber(v) && v->valuedouble >= 0) {
        *out = (uint64_t)v->valuedouble;
        return true;
    }
    if (cJSON_IsString(v)) {
        char *end;
        errno = 0;
        unsigned long long t = strtoull(v->valuestring, &end, 10);
        if (errno == 0 && end != v->valuestring && *end == '\0') {
            *out = t;
            return true;
        }
    }
    return false;
}

static bool json_lsn(const cJSON *v, lsn_t *out)
{
    return cJSON_IsString(v) && lsn_parse(v->valuestring, out);
}

/* Reads term/flush/commit from one timeline object. */
/* One member set from the status JSON; false if malformed. */
static bool members_from_json(const cJSON *arr, member *set, uint32_t *n)
{
    *n = 0;
    if (arr == NULL)
        return true; /* a safekeeper from before configurations */
    const cJSON *m;
    cJSON_ArrayForEach(m, arr)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "node_id");
        const cJSON *addr = cJSON_GetObjectItemCaseSensitive(m, "addr");
        if (*n == MEMBERSHIP_MAX || !cJSON_IsNumber(id) || id->valuedouble < 1 ||
            !cJSON_IsString(addr) || strlen(addr->valuestring) > MEMBER_ADDR_MAX)
            return false;
        set[*n].node_id = (uint64_t)id->valuedouble;
        snprintf(set[*n].addr, sizeof set[*n].addr, "%s", addr->valuestring);
        (*n)++;
    }
    return true;
}

static bool timeline_from_json(const cJSON *tl, safekeeper_timeline *out)
{
    const cJSON *conf = cJSON_GetObjectItemCaseSensitive(tl, "configuration");
    const cJSON *gen = cJSON_GetObjectItemCaseSensitive(conf, "generation");
    if (cJSON_IsNumber(gen) && gen->valuedouble >= 0 && gen->valuedouble <= UINT32_MAX)
        out->mconf.generation = (uint32_t)gen->valuedouble;
    return json_term(cJSON_GetObjectItemCaseSensitive(tl, "term"), &out->term) &&
           json_lsn(cJSON_GetObjectItemCaseSensitive(tl, "flush_lsn"), &out->flush_lsn) &&
           json_lsn(cJSON_GetObjectItemCaseSensitive(tl, "commit_lsn"), &out->commit_lsn) &&
           members_from_json(cJSON_GetObjectItemCaseSensitive(conf, "members"), out->mconf.members,
                             &out->mconf.n_members) &&
           members_from_json(cJSON_GetObjectItemCaseSensitive(conf, "new_members"),
                             out->mconf.new_members, &out->mconf.n_new_members);
}

static bool json_id_equals(const cJSON *obj, const char *key, const strata_id *want)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    strata_id id;
    return cJSON_IsString(v) && strata_id_parse(v->valuestring, &id) && strata_id_equal(&id, want);
}

/* The "wal_backup" object of a timeline (null or absent: no backup). */
static void backup_from_json(const cJSON *b, safekeeper_timeline *out)
{
    const cJSON *lsn = cJSON_GetObjectItemCaseSensitive(b, "backup_lsn");
    if (!cJSON_IsObject(b) || !cJSON_IsString(lsn) ||
        !lsn_parse(lsn->valuestring, &out->backup_lsn))
        return;
    out->wal_backup = true;
    out->backup_failing = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "failing"));
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(b, "last_error");
    if (cJSON_IsString(e))
        snprintf(out->backup_error, sizeof out->backup_error, "%s", e->valuestring);
}

void safekeepers_query(const cluster *c, const cluster_safekeeper *sk, safekeeper_timeline *out)
{
    memset(out, 0, sizeof *out);
    if (safekeepers_pid(c, sk) == 0)
        return;
    cli_err err = {{0}};
    char *body = NULL;
    if (probe_http_get(sk->http_port, "/v1/status", NULL, SAFEKEEPER_QUERY_TIMEOUT_MS, &body,
                       &err) != 0)
        return;
    cJSON *root = cJSON_Parse(body);
    free(body);
    if (root == NULL)
        return;
    const cJSON *node = cJSON_GetObjectItemCaseSensitive(root, "node_id");
    if (cJSON_IsNumber(node) && node->valuedouble >= 0)
        out->node_id = (uint64_t)node->valuedouble;
    const cJSON *max = cJSON_GetObjectItemCaseSensitive(root, "max_wal_bytes");
    if (cJSON_IsNumber(max) && max->valuedouble >= 0)
        out->max_wal_bytes = (uint64_t)max->valuedouble;
    const cJSON *timelines = cJSON_GetObjectItemCaseSensitive(root, "timelines");
    const cJSON *tl;
    cJSON_ArrayForEach(tl, timelines)
    {
        if (json_id_equals(tl, "tenant_id", &c->tenant_id) &&
            json_id_equals(tl, "timeline_id", &c->timeline_id)) {
            out->known = timeline_from_json(tl, out);
            /* Absent from an older safekeeper: then 0 / false. */
            const cJSON *wb = cJSON_GetObjectItemCaseSensitive(tl, "wal_bytes");
            if (cJSON_IsNumber(wb) && wb->valuedouble >= 0)
                out->wal_bytes = (uint64_t)wb->valuedouble;
            out->wal_limited = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tl, "wal_limited"));
            out->failed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tl, "failed"));
            backup_from_json(cJSON_GetObjectItemCaseSensitive(tl, "wal_backup"), out);
            break;
        }
    }
    cJSON_Delete(root);
}
