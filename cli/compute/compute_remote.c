/*
 * compute_remote.c: `strata start compute --remote`.  See compute_remote.h.
 *
 * The cluster value this builds has no cluster.json behind it: ids, hosts
 * and ports come from the environment, D holds only the compute's own
 * files, and compute_exec asks compute_start_from_pageserver to stop short
 * of starting postgres, which this process then becomes.
 */
#include "cli/compute/compute_remote.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli/client/admin_http.h"
#include "cli/local/cluster.h"
#include "cli/compute/compute.h"
#include "cli/local/locate.h"
#include "cli/local/proc.h"

#define REMOTE_HTTP_TIMEOUT_MS 5000
#define REMOTE_DEFAULT_WAIT_S 60
#define REMOTE_MAX_POSTGRES_ARGS 64

/* The value of environment variable name, or NULL when unset or empty. */
static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* "HOST:PORT" into host (CLUSTER_HOST_LEN bytes) and *port. */
static int parse_host_port(const char *what, const char *s, size_t len, char *host, int *port,
                           cli_err *err)
{
    const char *colon = memrchr(s, ':', len);
    if (colon == NULL || colon == s || (size_t)(colon - s) >= CLUSTER_HOST_LEN)
        return cli_err_set(err, "%s: \"%.*s\" is not HOST:PORT", what, (int)len, s);
    char digits[8];
    size_t ndig = len - (size_t)(colon - s) - 1;
    if (ndig == 0 || ndig >= sizeof digits)
        return cli_err_set(err, "%s: \"%.*s\" has no valid port", what, (int)len, s);
    memcpy(digits, colon + 1, ndig);
    digits[ndig] = '\0';
    char *end;
    long v = strtol(digits, &end, 10);
    if (*end != '\0' || v < 1 || v > 65535)
        return cli_err_set(err, "%s: \"%.*s\" has no valid port", what, (int)len, s);
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    /* The host goes into strata.conf between quotes and into a libpq
     * connection string: plain names and addresses only. */
    if (strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_[]:") !=
        strlen(host))
        return cli_err_set(err, "%s: host \"%s\" has characters a host name cannot have", what,
                           host);
    *port = (int)v;
    return 0;
}

static int required(const char *name, const char **out, cli_err *err)
{
    *out = env(name);
    if (*out == NULL)
        return cli_err_set(err,
                           "%s is not set (strata start compute --remote takes the "
                           "daemons' addresses from the environment)",
                           name);
    return 0;
}

/* Fills c from the environment (see compute_remote.h); dir is absolute. */
static int remote_cluster(const char *dir, cluster *c, char *http_host, int *http_port,
                          cli_err *err)
{
    memset(c, 0, sizeof *c);
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    const char *tenant, *timeline, *sks, *ps, *ps_http;
    if (required("STRATA_TENANT_ID", &tenant, err) != 0 ||
        required("STRATA_TIMELINE_ID", &timeline, err) != 0 ||
        required("STRATA_SAFEKEEPERS", &sks, err) != 0 ||
        required("STRATA_PAGESERVER", &ps, err) != 0 ||
        required("STRATA_PAGESERVER_HTTP", &ps_http, err) != 0)
        return -1;
    if (!strata_id_parse(tenant, &c->tenant_id) || strlen(tenant) != 32)
        return cli_err_set(err, "STRATA_TENANT_ID must be 32 hex digits, not \"%s\"", tenant);
    if (!strata_id_parse(timeline, &c->timeline_id) || strlen(timeline) != 32)
        return cli_err_set(err, "STRATA_TIMELINE_ID must be 32 hex digits, not \"%s\"", timeline);
    const char *p = sks;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || (i < CLUSTER_SAFEKEEPERS - 1) != (comma != NULL))
            return cli_err_set(err,
                               "STRATA_SAFEKEEPERS must name %d safekeepers as "
                               "HOST:PORT,HOST:PORT,HOST:PORT, not \"%s\"",
                               CLUSTER_SAFEKEEPERS, sks);
        if (parse_host_port("STRATA_SAFEKEEPERS", p, len, c->sk[i].host, &c->sk[i].pg_port, err) !=
            0)
            return -1;
        snprintf(c->sk[i].name, sizeof c->sk[i].name, "sk%d", i + 1);
        c->sk[i].id = i + 1;
        p = comma != NULL ? comma + 1 : p + len;
    }
    if (parse_host_port("STRATA_PAGESERVER", ps, strlen(ps), c->pageserver_host,
                        &c->pageserver_pg_port, err) != 0 ||
        parse_host_port("STRATA_PAGESERVER_HTTP", ps_http, strlen(ps_http), http_host, http_port,
                        err) != 0)
        return -1;
    c->pageserver_http_port = *http_port;
    const char *listen = env("STRATA_COMPUTE_LISTEN");
    listen = listen != NULL ? listen : "*";
    if (strlen(listen) >= sizeof c->compute_listen || strpbrk(listen, "'\\\n") != NULL)
        return cli_err_set(err, "STRATA_COMPUTE_LISTEN \"%s\" is not a listen_addresses value",
                           listen);
    snprintf(c->compute_listen, sizeof c->compute_listen, "%s", listen);
    c->compute_port = 5432;
    const char *port = env("STRATA_COMPUTE_PORT");
    if (port != NULL) {
        char *end;
        long v = strtol(port, &end, 10);
        if (*end != '\0' || v < 1 || v > 65535)
            return cli_err_set(err, "STRATA_COMPUTE_PORT must be a port number, not \"%s\"", port);
        c->compute_port = (int)v;
    }
    const char *user = env("STRATA_PG_USER");
    user = user != NULL ? user : "postgres";
    if (strlen(user) >= sizeof c->pg_user)
        return cli_err_set(err, "STRATA_PG_USER is too long");
    snprintf(c->pg_user, sizeof c->pg_user, "%s", user);
    c->compute_exec = true;
    return 0;
}

/*
 * The timeline's start LSN from GET /v1/tenant/T/timeline/TL, waiting up to
 * wait_s for the pageserver to answer and to have the timeline (it may be
 * starting, or the timeline being created).
 */
static int remote_timeline_start(const cluster *c, const char *host, int port, int wait_s,
                                 lsn_t *start, cli_err *err)
{
    char tenant[STRATA_ID_HEX_LEN], timeline[STRATA_ID_HEX_LEN], path[128];
    snprintf(path, sizeof path, "/v1/tenant/%s/timeline/%s",
             strata_id_format(&c->tenant_id, tenant), strata_id_format(&c->timeline_id, timeline));
    const char *token = env("STRATA_ADMIN_TOKEN");
    token = token != NULL ? token : env("STRATA_PAGESERVER_PASSWORD");
    long long deadline = proc_now_ms() + (long long)wait_s * 1000;
    bool said = false;
    for (;;) {
        cli_err why = {{0}};
        int status = 0;
        char *body = NULL;
        int rc = admin_http(host, port, "GET", path, token, NULL, REMOTE_HTTP_TIMEOUT_MS, &status,
                            &body, &why);
        if (rc == 0 && status == 200) {
            cJSON *root = cJSON_Parse(body);
            const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "start_lsn");
            bool ok =
                cJSON_IsString(s) && lsn_parse(s->valuestring, start) && *start != LSN_INVALID;
            cJSON_Delete(root);
            free(body);
            if (!ok)
                return cli_err_set(err, "GET %s:%d%s: no start_lsn in the answer", host, port,
                                   path);
            return 0;
        }
        if (rc == 0 && status != 404) {
            cli_err_set(err, "GET %s:%d%s: HTTP %d: %s", host, port, path, status, body);
            free(body);
            return -1;
        }
        free(body);
        if (proc_now_ms() >= deadline)
            return cli_err_set(err,
                               "the pageserver at %s:%d has no timeline %s of tenant %s "
                               "after %d s (%s)",
                               host, port, timeline, tenant, wait_s,
                               rc == 0 ? "HTTP 404: create it with `strata timeline create`"
                                       : why.msg);
        if (!said) {
            printf("compute: waiting for the pageserver at %s:%d to have the timeline\n", host,
                   port);
            fflush(stdout);
            said = true;
        }
        proc_sleep_ms(500);
    }
}

/* pg_hba.conf: loopback, plus the STRATA_COMPUTE_TRUST address when set. */
static int remote_hba(const cluster *c, cli_err *err)
{
    const char *trust = env("STRATA_COMPUTE_TRUST");
    if (trust == NULL)
        return 0;
    if (strspn(trust, "0123456789abcdefABCDEF.:/all") != strlen(trust) || strlen(trust) > 64)
        return cli_err_set(err,
                           "STRATA_COMPUTE_TRUST must be an address in CIDR form or all, "
                           "not \"%s\"",
                           trust);
    char pgdata[PATH_MAX], path[PATH_MAX + 16];
    if (compute_datadir(c, pgdata, err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/pg_hba.conf", pgdata);
    FILE *f = fopen(path, "ae");
    if (f == NULL)
        return cli_err_set(err, "open %s: %s", path, strerror(errno));
    fprintf(f,
            "# STRATA_COMPUTE_TRUST: clients trusted without a password.\n"
            "host    all          all   %-12s  trust\n",
            trust);
    if (fclose(f) != 0)
        return cli_err_set(err, "write %s: %s", path, strerror(errno));
    return 0;
}

/* Becomes postgres -D PGDATA ARGS... as the postgres user.  Returns only
 * on failure. */
static int remote_exec_postgres(const cluster *c, const cli_opts *o, cli_err *err)
{
    char bindir[PATH_MAX], postgres[PATH_MAX + 16], pgdata[PATH_MAX];
    proc_user user;
    if (locate_patched_pg_bindir(bindir, err) != 0 || compute_datadir(c, pgdata, err) != 0 ||
        proc_user_for_postgres(c->pg_user, &user, err) != 0)
        return -1;
    snprintf(postgres, sizeof postgres, "%s/postgres", bindir);
    if (o->argc > REMOTE_MAX_POSTGRES_ARGS)
        return cli_err_set(err, "at most %d arguments for postgres", REMOTE_MAX_POSTGRES_ARGS);
    char *argv[REMOTE_MAX_POSTGRES_ARGS + 4];
    int n = 0;
    argv[n++] = postgres;
    argv[n++] = "-D";
    argv[n++] = pgdata;
    for (int i = 0; i < o->argc; i++)
        argv[n++] = o->argv[i];
    argv[n] = NULL;
    if (chdir(pgdata) != 0)
        return cli_err_set(err, "chdir %s: %s", pgdata, strerror(errno));
    if (user.drop &&
        (initgroups(user.name, user.gid) != 0 || setgid(user.gid) != 0 || setuid(user.uid) != 0))
        return cli_err_set(err, "becoming user %s: %s", user.name, strerror(errno));
    fflush(stdout);
    fflush(stderr);
    execv(postgres, argv);
    return cli_err_set(err, "exec %s: %s", postgres, strerror(errno));
}

int cmd_start_compute_remote(const cli_opts *o)
{
    cli_err err = {{0}};
    char dir[PATH_MAX], http_host[CLUSTER_HOST_LEN];
    int http_port = 0;
    cluster c;
    if (strcmp(o->name, "compute") != 0) {
        fprintf(stderr, "strata: --remote starts a compute only, not %s\n", o->name);
        return CLI_USAGE;
    }
    if (cluster_resolve_dir(o->dir, dir, &err) != 0 ||
        remote_cluster(dir, &c, http_host, &http_port, &err) != 0)
        return cli_fail(&err);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        cli_err_set(&err, "mkdir %s: %s", dir, strerror(errno));
        return cli_fail(&err);
    }
    int wait_s = REMOTE_DEFAULT_WAIT_S;
    const char *w = env("STRATA_COMPUTE_WAIT_S");
    if (w != NULL) {
        char *end;
        long v = strtol(w, &end, 10);
        if (*end != '\0' || v < 1 || v > 3600) {
            cli_err_set(&err, "STRATA_COMPUTE_WAIT_S must be 1..3600 seconds, not \"%s\"", w);
            return cli_fail(&err);
        }
        wait_s = (int)v;
    }
    char sks[3 * (CLUSTER_HOST_LEN + 8)], lb[LSN_FMT_LEN];
    snprintf(sks, sizeof sks, "%s:%d,%s:%d,%s:%d", c.sk[0].host, c.sk[0].pg_port, c.sk[1].host,
             c.sk[1].pg_port, c.sk[2].host, c.sk[2].pg_port);
    printf("compute: starting on %s:%d (safekeepers %s, pageserver %s:%d)\n", c.compute_listen,
           c.compute_port, sks, c.pageserver_host, c.pageserver_pg_port);
    fflush(stdout);
    long long t0 = proc_now_ms();
    lsn_t start;
    if (remote_timeline_start(&c, http_host, http_port, wait_s, &start, &err) != 0)
        return cli_fail(&err);
    c.pageserver_imported = true;
    c.pageserver_import_lsn = start;
    printf("compute: the timeline starts at %s (%.3f s)\n", lsn_format(start, lb),
           (double)(proc_now_ms() - t0) / 1000.0);
    compute_start_report rep;
    int rc = compute_start_from_pageserver(&c, &rep, &err);
    if (rep.sync_ms > 0 || rep.lsn != LSN_INVALID)
        printf("compute: sync-safekeepers: start at %s%s (%.3f s)\n", lsn_format(rep.lsn, lb),
               rep.empty_timeline ? ", the timeline's start (no WAL on the safekeepers yet)" : "",
               (double)rep.sync_ms / 1000.0);
    if (rc != 0 || remote_hba(&c, &err) != 0)
        return cli_fail(&err);
    printf("compute: %s basebackup at %s: %u files, %.1f MB (%.3f s)\n",
           rep.stateless ? "stateless" : "full", lb, rep.basebackup_files,
           (double)rep.basebackup_bytes / 1e6, (double)rep.basebackup_ms / 1000.0);
    printf("compute: configured in %.3f s; postgres starts now (%.3f s after the start)\n",
           (double)rep.configure_ms / 1000.0, (double)(proc_now_ms() - t0) / 1000.0);
    remote_exec_postgres(&c, o, &err);
    return cli_fail(&err);
}
