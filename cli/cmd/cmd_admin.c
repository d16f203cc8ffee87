/*
 * cmd_admin.c: `strata tenant create|list|show|delete` and `strata timeline
 * create|list|show|delete` over a pageserver's admin API (docs/cli.md).
 * Errors print the server's own message and HTTP status.
 *
 * Which pageserver: --pageserver HOST:PORT (its HTTP port), else the one of
 * the local cluster under --dir D (default ./.strata, cluster.json).
 * Credentials: --auth-file PATH (the daemons' auth file; its admin_token
 * is sent), else $STRATA_ADMIN_TOKEN, else none (a trusting pageserver).
 *
 * Not for: the HTTP transport (client/admin_http.c) or what the endpoints do
 * (pageserver/service/http_api.c).
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli/client/admin_http.h"
#include "cli/local/cluster.h"
#include "cli/cmd/cmd_timeline.h"
#include "base/lsn.h"

#define CREATE_TIMEOUT_MS 300000 /* an initdb + import */
#define TIMEOUT_MS 30000
#define MAX_SAFEKEEPERS 8

typedef struct admin_args {
    const char *sub; /* create, list, show, delete */
    const char *dir;
    const char *pageserver; /* HOST:PORT of its HTTP API */
    const char *auth_file;
    const char *id;     /* positional ID or --id */
    const char *tenant; /* --tenant */
    const char *import; /* --import DIR */
    const char *safekeepers;
    bool initdb;
    bool json;
} admin_args;

/* Where to send and with what token, resolved from the arguments. */
typedef struct target {
    char host[256];
    int port;
    char token[512];
    bool has_token;
    bool have_cluster;
    cluster c;
} target;

static int usage(const char *what, const char *msg, const char *arg)
{
    fprintf(stderr, "strata: ");
    fprintf(stderr, msg, arg);
    fprintf(stderr, "\nusage: %s\n(strata --help lists the commands)\n", what);
    return CLI_USAGE;
}

static const char *const tenant_usage =
    "strata tenant create [--id TENANT] | list | show TENANT | delete TENANT\n"
    "       [--dir D] [--pageserver HOST:PORT] [--auth-file PATH] [--json]";
static const char *const timeline_usage =
    "strata timeline branch NAME [--from PARENT] [--lsn X/Y | --time 'TIMESTAMP'] | list [--json] "
    "| delete NAME [--dir D]\n"
    "       (the local cluster's named timelines; docs/cli.md)\n"
    "strata timeline create [--id TIMELINE] [--initdb | --import PGDATA] "
    "[--safekeepers H:P,...]\n"
    "       | list | show TIMELINE | delete TIMELINE\n"
    "       [--tenant TENANT] [--dir D] [--pageserver HOST:PORT] [--auth-file PATH] [--json]";

/* "--opt V" or "--opt=V" at argv[*i]; NULL if argv[*i] is not --opt. */
static const char *opt_value(int argc, char **argv, int *i, const char *opt, bool *missing)
{
    size_t len = strlen(opt);
    *missing = false;
    if (strncmp(argv[*i], opt, len) == 0 && argv[*i][len] == '=')
        return argv[*i] + len + 1;
    if (strcmp(argv[*i], opt) == 0) {
        if (*i + 1 < argc)
            return argv[++*i];
        *missing = true;
    }
    return NULL;
}

static int parse_args(const cli_opts *o, bool timeline_cmd, admin_args *a)
{
    const char *u = timeline_cmd ? timeline_usage : tenant_usage;
    memset(a, 0, sizeof *a);
    a->dir = ".strata";
    if (o->argc < 1)
        return usage(u, "%s", "a subcommand is needed: create, list, show or delete");
    a->sub = o->argv[0];
    if (strcmp(a->sub, "-h") == 0 || strcmp(a->sub, "--help") == 0) {
        printf("usage: %s\n", u);
        return -2;
    }
    if (strcmp(a->sub, "create") != 0 && strcmp(a->sub, "list") != 0 &&
        strcmp(a->sub, "show") != 0 && strcmp(a->sub, "delete") != 0)
        return usage(u, "unknown subcommand '%s' (branch, create, list, show, delete)", a->sub);
    bool create = strcmp(a->sub, "create") == 0;
    bool needs_id = strcmp(a->sub, "show") == 0 || strcmp(a->sub, "delete") == 0;
    for (int i = 1; i < o->argc; i++) {
        char **argv = o->argv;
        const char *arg = argv[i], *v;
        bool missing;
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            printf("usage: %s\n", u);
            return -2;
        } else if ((v = opt_value(o->argc, argv, &i, "--dir", &missing)) || missing) {
            if (v == NULL || *v == '\0')
                return usage(u, "%s needs a directory", "--dir");
            a->dir = v;
        } else if ((v = opt_value(o->argc, argv, &i, "--pageserver", &missing)) || missing) {
            if (v == NULL || *v == '\0')
                return usage(u, "%s needs HOST:PORT (the pageserver's HTTP port)", "--pageserver");
            a->pageserver = v;
        } else if ((v = opt_value(o->argc, argv, &i, "--auth-file", &missing)) || missing) {
            if (v == NULL || *v == '\0')
                return usage(u, "%s needs a path", "--auth-file");
            a->auth_file = v;
        } else if (strcmp(arg, "--json") == 0) {
            a->json = true;
        } else if (create && ((v = opt_value(o->argc, argv, &i, "--id", &missing)) || missing)) {
            if (v == NULL)
                return usage(u, "%s needs an id (32 hex digits)", "--id");
            a->id = v;
        } else if (timeline_cmd &&
                   ((v = opt_value(o->argc, argv, &i, "--tenant", &missing)) || missing)) {
            if (v == NULL)
                return usage(u, "%s needs a tenant id (32 hex digits)", "--tenant");
            a->tenant = v;
        } else if (timeline_cmd && create && strcmp(arg, "--initdb") == 0) {
            a->initdb = true;
        } else if (timeline_cmd && create &&
                   ((v = opt_value(o->argc, argv, &i, "--import", &missing)) || missing)) {
            if (v == NULL || v[0] != '/')
                return usage(u, "%s needs an absolute data directory path", "--import");
            a->import = v;
        } else if (timeline_cmd && create &&
                   ((v = opt_value(o->argc, argv, &i, "--safekeepers", &missing)) || missing)) {
            if (v == NULL)
                return usage(u, "%s needs HOST:PORT,HOST:PORT,...", "--safekeepers");
            a->safekeepers = v;
        } else if (needs_id && a->id == NULL && arg[0] != '-') {
            a->id = arg;
        } else {
            return usage(u, "unexpected argument '%s'", arg);
        }
    }
    if (needs_id && a->id == NULL)
        return usage(u, "%s needs an id", a->sub);
    if (a->initdb && a->import != NULL)
        return usage(u, "%s", "give --initdb or --import, not both");
    strata_id id;
    if (a->id != NULL && !strata_id_parse(a->id, &id))
        return usage(u, "invalid id '%s' (want 32 hex digits)", a->id);
    if (a->tenant != NULL && !strata_id_parse(a->tenant, &id))
        return usage(u, "invalid tenant id '%s' (want 32 hex digits)", a->tenant);
    return 0;
}

/* The admin token of an auth file (JSON, see docs/operations.md). */
static int token_from_file(const char *path, char *out, size_t cap, cli_err *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return cli_err_set(err, "cannot read %s: %s", path, strerror(errno));
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    cJSON *root = cJSON_Parse(buf);
    memset(buf, 0, sizeof buf);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "admin_token");
    if (!cJSON_IsString(t) || t->valuestring[0] == '\0' || strlen(t->valuestring) >= cap) {
        cJSON_Delete(root);
        return cli_err_set(err, "%s has no \"admin_token\" string", path);
    }
    snprintf(out, cap, "%s", t->valuestring);
    cJSON_Delete(root);
    return 0;
}

static int resolve_target(const admin_args *a, target *t, cli_err *err)
{
    memset(t, 0, sizeof *t);
    char dir[PATH_MAX];
    if (cluster_resolve_dir(a->dir, dir, err) != 0)
        return -1;
    int rc = cluster_load(dir, &t->c, err);
    if (rc < 0)
        return -1;
    t->have_cluster = rc == 0;
    if (a->pageserver != NULL) {
        const char *colon = strrchr(a->pageserver, ':');
        char *end;
        long port = colon ? strtol(colon + 1, &end, 10) : -1;
        if (colon == NULL || colon == a->pageserver ||
            (size_t)(colon - a->pageserver) >= sizeof t->host || colon[1] == '\0' || *end != '\0' ||
            port <= 0 || port > 65535)
            return cli_err_set(err, "--pageserver needs HOST:PORT, got '%s'", a->pageserver);
        memcpy(t->host, a->pageserver, (size_t)(colon - a->pageserver));
        t->host[colon - a->pageserver] = '\0';
        t->port = (int)port;
    } else if (t->have_cluster) {
        snprintf(t->host, sizeof t->host, "127.0.0.1");
        t->port = t->c.pageserver_http_port;
    } else {
        return cli_err_set(err, "no cluster under %s and no --pageserver HOST:PORT given", dir);
    }
    if (a->auth_file != NULL) {
        if (token_from_file(a->auth_file, t->token, sizeof t->token, err) != 0)
            return -1;
        t->has_token = true;
    } else if (a->pageserver == NULL && t->have_cluster && t->c.auth) {
        /* The local cluster's own pageserver: its admin token. */
        snprintf(t->token, sizeof t->token, "%s", t->c.admin_token);
        t->has_token = true;
    } else {
        const char *env = getenv("STRATA_ADMIN_TOKEN");
        if (env != NULL && *env != '\0') {
            snprintf(t->token, sizeof t->token, "%s", env);
            t->has_token = true;
        }
    }
    return 0;
}

/* Sends the request; on a 2xx answer returns the parsed JSON body (and
 * prints it raw with --json), else NULL with the server's message. */
static cJSON *call(const admin_args *a, const target *t, const char *method, const char *path,
                   const char *body, int timeout_ms, cli_err *err)
{
    int status = 0;
    char *resp = NULL;
    if (admin_http(t->host, t->port, method, path, t->has_token ? t->token : NULL, body, timeout_ms,
                   &status, &resp, err) != 0)
        return NULL;
    cJSON *j = cJSON_Parse(resp);
    if (status < 200 || status > 299) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
        cli_err_set(err, "%s %s: HTTP %d: %s", method, path, status,
                    cJSON_IsString(e) ? e->valuestring : resp);
        if (status == 401 && !t->has_token)
            snprintf(err->msg + strlen(err->msg), sizeof err->msg - strlen(err->msg),
                     " (give --auth-file or set STRATA_ADMIN_TOKEN)");
        cJSON_Delete(j);
        free(resp);
        return NULL;
    }
    if (j == NULL) {
        cli_err_set(err, "%s %s: the answer is not JSON: %.200s", method, path, resp);
        free(resp);
        return NULL;
    }
    if (a->json)
        printf("%s\n", resp);
    free(resp);
    return j;
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "?";
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

int cmd_tenant(const cli_opts *o)
{
    admin_args a;
    int rc = parse_args(o, false, &a);
    if (rc != 0)
        return rc == -2 ? CLI_OK : rc;
    cli_err err = {{0}};
    target t;
    if (resolve_target(&a, &t, &err) != 0)
        return cli_fail(&err);
    char path[128], body[128];
    cJSON *j = NULL;
    if (strcmp(a.sub, "create") == 0) {
        if (a.id != NULL)
            snprintf(body, sizeof body, "{\"tenant_id\": \"%s\"}", a.id);
        else
            snprintf(body, sizeof body, "{}");
        if ((j = call(&a, &t, "POST", "/v1/tenant", body, TIMEOUT_MS, &err)) == NULL)
            return cli_fail(&err);
        if (!a.json)
            printf("%s\n", str(j, "tenant_id"));
    } else if (strcmp(a.sub, "list") == 0) {
        if ((j = call(&a, &t, "GET", "/v1/tenant", NULL, TIMEOUT_MS, &err)) == NULL)
            return cli_fail(&err);
        if (!a.json) {
            printf("%-32s  %s\n", "TENANT", "TIMELINES");
            const cJSON *e;
            cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "tenants"))
                printf("%-32s  %.0f\n", str(e, "tenant_id"), num(e, "timelines"));
        }
    } else {
        bool del = strcmp(a.sub, "delete") == 0;
        snprintf(path, sizeof path, "/v1/tenant/%s", a.id);
        if ((j = call(&a, &t, del ? "DELETE" : "GET", path, NULL, TIMEOUT_MS, &err)) == NULL)
            return cli_fail(&err);
        if (!a.json && del)
            printf("deleted tenant %s\n", a.id);
        else if (!a.json)
            printf("tenant_id  %s\ntimelines  %.0f\n", str(j, "tenant_id"), num(j, "timelines"));
    }
    cJSON_Delete(j);
    return CLI_OK;
}

static int cmd_timeline_by_id(const cli_opts *o);

static void print_timeline(const cJSON *tl)
{
    const cJSON *store = cJSON_GetObjectItemCaseSensitive(tl, "store");
    const cJSON *gc = cJSON_GetObjectItemCaseSensitive(tl, "gc");
    const cJSON *wr = cJSON_GetObjectItemCaseSensitive(tl, "walreceiver");
    printf("tenant_id            %s\n", str(tl, "tenant_id"));
    printf("timeline_id          %s\n", str(tl, "timeline_id"));
    printf("start_lsn            %s\n", str(tl, "start_lsn"));
    printf("last_record_lsn      %s\n", str(tl, "last_record_lsn"));
    printf("disk_consistent_lsn  %s\n", str(tl, "disk_consistent_lsn"));
    printf("gc_horizon           %s\n", str(gc, "horizon"));
    printf("walreceiver          %s %s\n", str(wr, "state"), str(wr, "safekeeper"));
    printf("data_file_bytes      %.0f\n", num(store, "data_file_bytes"));
    printf("index_bytes          %.0f\n", num(store, "index_bytes"));
    printf("open_layer_bytes     %.0f\n", num(store, "open_layer_bytes"));
}

/* The local cluster's safekeepers as a JSON array text, into out. */
static void cluster_safekeepers_json(const target *t, const char *list, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    if (list != NULL) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", list);
        int k = 0;
        for (char *s = strtok(buf, ","); s != NULL && k < MAX_SAFEKEEPERS;
             s = strtok(NULL, ","), k++)
            n += (size_t)snprintf(out + n, cap - n, "%s\"%s\"", k ? ", " : "", s);
    } else if (t->have_cluster) {
        for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
            n += (size_t)snprintf(out + n, cap - n, "%s\"127.0.0.1:%d\"", i ? ", " : "",
                                  t->c.sk[i].pg_port);
    }
    snprintf(out + n, cap - n, "]");
}

/* `timeline --dir D SUB ...` is `timeline SUB --dir D ...`: argv reordered
 * into out (o->argc + 1 entries) so that the subcommand comes first. */
static void subcommand_first(const cli_opts *o, char **out, cli_opts *ro)
{
    *ro = *o;
    int i = 0;
    while (i < o->argc && (strncmp(o->argv[i], "--dir=", 6) == 0 ||
                           (strcmp(o->argv[i], "--dir") == 0 && i + 1 < o->argc)))
        i += strcmp(o->argv[i], "--dir") == 0 ? 2 : 1;
    if (i == 0 || i >= o->argc)
        return;
    int n = 0;
    out[n++] = o->argv[i];
    for (int k = 0; k < o->argc; k++)
        if (k != i)
            out[n++] = o->argv[k];
    out[n] = NULL;
    ro->argv = out;
}

int cmd_timeline(const cli_opts *o_in)
{
    char **reordered = calloc((size_t)o_in->argc + 1, sizeof *reordered);
    if (reordered == NULL) {
        fprintf(stderr, "strata: out of memory\n");
        return CLI_FAIL;
    }
    cli_opts ro;
    subcommand_first(o_in, reordered, &ro);
    const cli_opts *o = &ro;
    /* branch, and list/delete by name: the local cluster's named timelines. */
    int named = cmd_timeline_named(o);
    if (named != -2) {
        free(reordered);
        return named;
    }
    int rc = cmd_timeline_by_id(o);
    free(reordered);
    return rc;
}

static int cmd_timeline_by_id(const cli_opts *o)
{
    admin_args a;
    int rc = parse_args(o, true, &a);
    if (rc != 0)
        return rc == -2 ? CLI_OK : rc;
    cli_err err = {{0}};
    target t;
    if (resolve_target(&a, &t, &err) != 0)
        return cli_fail(&err);
    char tenant[STRATA_ID_HEX_LEN];
    if (a.tenant != NULL) {
        snprintf(tenant, sizeof tenant, "%s", a.tenant);
    } else if (t.have_cluster) {
        strata_id_format(&t.c.tenant_id, tenant);
    } else {
        cli_err_set(&err, "which tenant? give --tenant TENANT (no cluster under %s)", a.dir);
        return cli_fail(&err);
    }
    if (a.safekeepers != NULL && strlen(a.safekeepers) > 900) {
        cli_err_set(&err, "--safekeepers is too long");
        return cli_fail(&err);
    }
    char path[256], body[2048], sks[1100];
    cJSON *j = NULL;
    if (strcmp(a.sub, "create") == 0) {
        cluster_safekeepers_json(&t, a.safekeepers, sks, sizeof sks);
        int n = snprintf(body, sizeof body, "{\"safekeepers\": %s, ", sks);
        if (a.import != NULL)
            n += snprintf(body + n, sizeof body - (size_t)n, "\"import_pgdata\": \"%s\"", a.import);
        else
            n += snprintf(body + n, sizeof body - (size_t)n, "\"initdb\": true");
        if (a.id != NULL)
            n += snprintf(body + n, sizeof body - (size_t)n, ", \"timeline_id\": \"%s\"", a.id);
        snprintf(body + n, sizeof body - (size_t)n, "}");
        snprintf(path, sizeof path, "/v1/tenant/%s/timeline", tenant);
        if ((j = call(&a, &t, "POST", path, body, CREATE_TIMEOUT_MS, &err)) == NULL)
            return cli_fail(&err);
        if (!a.json)
            printf("created timeline %s of tenant %s at %s\n", str(j, "timeline_id"), tenant,
                   str(j, "lsn"));
    } else if (strcmp(a.sub, "list") == 0) {
        snprintf(path, sizeof path, "/v1/tenant/%s/timeline", tenant);
        if ((j = call(&a, &t, "GET", path, NULL, TIMEOUT_MS, &err)) == NULL)
            return cli_fail(&err);
        if (!a.json) {
            printf("%-32s  %-12s  %-12s  %-12s  %s\n", "TIMELINE", "START", "LAST_RECORD",
                   "DISK_CONSIST", "STORE_BYTES");
            const cJSON *e;
            cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(j, "timelines"))
            {
                const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "store");
                printf("%-32s  %-12s  %-12s  %-12s  %.0f\n", str(e, "timeline_id"),
                       str(e, "start_lsn"), str(e, "last_record_lsn"),
                       str(e, "disk_consistent_lsn"),
                       num(st, "data_file_bytes") + num(st, "index_bytes") +
                           num(st, "open_layer_bytes"));
            }
        }
    } else {
        bool del = strcmp(a.sub, "delete") == 0;
        snprintf(path, sizeof path, "/v1/tenant/%s/timeline/%s", tenant, a.id);
        if ((j = call(&a, &t, del ? "DELETE" : "GET", path, NULL, TIMEOUT_MS, &err)) == NULL)
            return cli_fail(&err);
        if (!a.json && del)
            printf("deleted timeline %s of tenant %s\n", a.id, tenant);
        else if (!a.json)
            print_timeline(j);
    }
    cJSON_Delete(j);
    return CLI_OK;
}
