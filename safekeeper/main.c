/*
 * main.c: the strata-safekeeper daemon -- options, then wiring: data
 * directory lock, io_uring, timelines, the Postgres-protocol listener, the
 * HTTP listener, the ports file, signals.  No protocol logic lives here.
 *
 * Every option is a flag, an environment variable and a config-file key
 * (flag > environment > config file > default); see --help.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "common/auth.h"
#include "common/durable.h"
#include "common/log.h"
#include "common/pgwire.h"
#include "common/uring.h"
#include "safekeeper/conn.h"
#include "safekeeper/http_api.h"
#include "safekeeper/timeline.h"

#define URING_DEPTH 256
#define LOCK_FILE "safekeeper.lock"
#define PORTS_FILE "safekeeper.ports"

typedef struct option_def {
    const char *name; /* flag and config key */
    const char *env;
    const char *def; /* NULL: no default */
    const char *help;
} option_def;

enum {
    OPT_ID,
    OPT_DATADIR,
    OPT_LISTEN_PG,
    OPT_LISTEN_HTTP,
    OPT_PASSWORD,
    OPT_AUTH_FILE,
    OPT_LOG_LEVEL,
    OPT_HOUSEKEEPING_MS,
    OPT_CONFIG,
    OPT_MAX_WAL_BYTES,
    OPT_COUNT
};

static const option_def option_defs[OPT_COUNT] = {
    {"id", "SAFEKEEPER_ID", NULL, "node id, a positive integer (required)"},
    {"datadir", "SAFEKEEPER_DATADIR", NULL, "data directory, created if missing (required)"},
    {"listen-pg", "SAFEKEEPER_LISTEN_PG", "127.0.0.1:5454",
     "Postgres-protocol listen address HOST:PORT (port 0: ephemeral)"},
    {"listen-http", "SAFEKEEPER_LISTEN_HTTP", "127.0.0.1:7676",
     "HTTP listen address HOST:PORT (port 0: ephemeral)"},
    {"password", "SAFEKEEPER_PASSWORD", NULL, "password clients must give (MD5); trust if unset"},
    {"auth-file", "SAFEKEEPER_AUTH_FILE", NULL,
     "JSON tokens file (mode 0600; see docs/operations.md); replaces --password"},
    {"log-level", "SAFEKEEPER_LOG_LEVEL", "info", "debug, info, warn or error"},
    {"housekeeping-ms", "SAFEKEEPER_HOUSEKEEPING_MS", "1000",
     "period of the lazy control-file save and of WAL removal, 10..3600000 ms"},
    {"config", "SAFEKEEPER_CONFIG", NULL, "config file of 'key = value' lines (keys as flags)"},
    {"max-wal-bytes", "SAFEKEEPER_MAX_WAL_BYTES", "0",
     "per-timeline bound on local WAL segment bytes; appends past it are refused (0: none)"},
};

typedef struct daemon_state {
    uv_loop_t *loop;
    uring *ring;
    sk_node node;
    pgwire_server *pg;
    http_server *http;
    uv_signal_t sigterm;
    uv_signal_t sigint;
    uv_signal_t sighup;
    auth_store *auth;
    pgwire_authenticator authn;
    uv_timer_t drain;
    int lock_fd;
} daemon_state;

static void usage(FILE *f)
{
    fprintf(f, "Usage: strata-safekeeper --id N --datadir DIR [options]\n\nOptions:\n");
    for (int i = 0; i < OPT_COUNT; i++)
        fprintf(f, "  --%-12s %s\n  %14s env %s, default: %s\n", option_defs[i].name,
                option_defs[i].help, "", option_defs[i].env,
                option_defs[i].def != NULL ? option_defs[i].def : "(none)");
    fprintf(f, "  --%-12s this text\n", "help");
}

static int find_option(const char *key)
{
    for (int i = 0; i < OPT_COUNT; i++) {
        const char *n = option_defs[i].name;
        size_t len = strlen(n);
        if (strlen(key) != len)
            continue;
        bool same = true;
        for (size_t k = 0; k < len && same; k++)
            same = key[k] == n[k] || (n[k] == '-' && key[k] == '_');
        if (same)
            return i;
    }
    return -1;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* Fills values[] from the config file where still unset; exits on errors. */
static void load_config(const char *path, char *values[OPT_COUNT])
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "strata-safekeeper: cannot read config file %s: %s\n", path,
                strerror(errno));
        exit(2);
    }
    char line[1024];
    int lineno = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        lineno++;
        char *s = trim(line);
        if (*s == '\0' || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (eq == NULL) {
            fprintf(stderr, "strata-safekeeper: %s:%d: expected key = value\n", path, lineno);
            exit(2);
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        size_t vlen = strlen(value);
        if (vlen >= 2 && (value[0] == '"' || value[0] == '\'') && value[vlen - 1] == value[0]) {
            value[vlen - 1] = '\0';
            value++;
        }
        int idx = find_option(key);
        if (idx < 0 || idx == OPT_CONFIG) {
            fprintf(stderr, "strata-safekeeper: %s:%d: unknown key \"%s\"\n", path, lineno, key);
            exit(2);
        }
        if (values[idx] == NULL)
            values[idx] = strdup(value);
    }
    fclose(f);
}

static bool parse_hostport(const char *s, char *host, size_t hostcap, int *port)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL || colon == s || (size_t)(colon - s) >= hostcap)
        return false;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (colon[1] == '\0' || *end != '\0' || p < 0 || p > 65535)
        return false;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    *port = (int)p;
    return true;
}

static void on_drain(uv_timer_t *t)
{
    daemon_state *d = t->data;
    if (d->node.open_connections > 0)
        return;
    uv_timer_stop(&d->drain);
    uv_close((uv_handle_t *)&d->drain, NULL);
    /* No connection refers to a timeline any more: finish the IO in flight
     * (without callbacks), save lazily-kept state, free. */
    uring_close(d->ring);
    sk_node_shutdown(&d->node);
}

static void on_sighup(uv_signal_t *sig, int signum)
{
    (void)signum;
    daemon_state *d = sig->data;
    char err[512];
    if (d->auth != NULL)
        (void)auth_store_reload(d->auth, err, sizeof err); /* logs either way */
}

static void on_signal(uv_signal_t *sig, int signum)
{
    daemon_state *d = sig->data;
    log_info("received signal %d, shutting down", signum);
    uv_close((uv_handle_t *)&d->sigterm, NULL);
    uv_close((uv_handle_t *)&d->sigint, NULL);
    uv_close((uv_handle_t *)&d->sighup, NULL);
    if (d->http != NULL) {
        http_server_free(d->http);
        d->http = NULL;
    }
    pgwire_server_stop(d->pg);
    d->pg = NULL;
    uv_timer_init(d->loop, &d->drain);
    d->drain.data = d;
    uv_timer_start(&d->drain, on_drain, 0, 10);
}

int main(int argc, char **argv)
{
    char *values[OPT_COUNT] = {0};
    static const struct option longopts[] = {
        {"id", required_argument, NULL, OPT_ID},
        {"datadir", required_argument, NULL, OPT_DATADIR},
        {"listen-pg", required_argument, NULL, OPT_LISTEN_PG},
        {"listen-http", required_argument, NULL, OPT_LISTEN_HTTP},
        {"password", required_argument, NULL, OPT_PASSWORD},
        {"auth-file", required_argument, NULL, OPT_AUTH_FILE},
        {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
        {"housekeeping-ms", required_argument, NULL, OPT_HOUSEKEEPING_MS},
        {"config", required_argument, NULL, OPT_CONFIG},
        {"max-wal-bytes", required_argument, NULL, OPT_MAX_WAL_BYTES},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (ch == 'h') {
            usage(stdout);
            return 0;
        }
        if (ch < 0 || ch >= OPT_COUNT) {
            usage(stderr);
            return 2;
        }
        values[ch] = strdup(optarg);
    }
    if (optind != argc) {
        fprintf(stderr, "strata-safekeeper: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    for (int i = 0; i < OPT_COUNT; i++) {
        const char *env = getenv(option_defs[i].env);
        if (values[i] == NULL && env != NULL && *env != '\0')
            values[i] = strdup(env);
    }
    if (values[OPT_CONFIG] != NULL)
        load_config(values[OPT_CONFIG], values);
    for (int i = 0; i < OPT_COUNT; i++) {
        if (values[i] == NULL && option_defs[i].def != NULL)
            values[i] = strdup(option_defs[i].def);
    }

    int level = log_level_parse(values[OPT_LOG_LEVEL]);
    if (level < 0) {
        fprintf(stderr, "strata-safekeeper: invalid --log-level \"%s\"\n", values[OPT_LOG_LEVEL]);
        return 2;
    }
    log_init("safekeeper", (log_level)level);

    char *end = NULL;
    unsigned long long id = values[OPT_ID] != NULL ? strtoull(values[OPT_ID], &end, 10) : 0;
    if (values[OPT_ID] == NULL || *end != '\0' || id == 0) {
        fprintf(stderr, "strata-safekeeper: --id must be a positive integer\n");
        usage(stderr);
        return 2;
    }
    if (values[OPT_DATADIR] == NULL) {
        fprintf(stderr, "strata-safekeeper: --datadir is required\n");
        usage(stderr);
        return 2;
    }
    char pg_host[256], http_host[256];
    int pg_port, http_port;
    if (!parse_hostport(values[OPT_LISTEN_PG], pg_host, sizeof pg_host, &pg_port)) {
        fprintf(stderr, "strata-safekeeper: invalid --listen-pg \"%s\" (want HOST:PORT)\n",
                values[OPT_LISTEN_PG]);
        return 2;
    }
    if (!parse_hostport(values[OPT_LISTEN_HTTP], http_host, sizeof http_host, &http_port)) {
        fprintf(stderr, "strata-safekeeper: invalid --listen-http \"%s\" (want HOST:PORT)\n",
                values[OPT_LISTEN_HTTP]);
        return 2;
    }

    unsigned long long housekeeping_ms = strtoull(values[OPT_HOUSEKEEPING_MS], &end, 10);
    if (*end != '\0' || housekeeping_ms < 10 || housekeeping_ms > 3600000) {
        fprintf(stderr, "strata-safekeeper: invalid --housekeeping-ms \"%s\" (10..3600000)\n",
                values[OPT_HOUSEKEEPING_MS]);
        return 2;
    }

    const char *datadir = values[OPT_DATADIR];
    if (mkdir(datadir, 0700) != 0 && errno != EEXIST)
        log_fatal("cannot create data directory %s: %s", datadir, strerror(errno));
    static daemon_state d;
    d.lock_fd = durable_lock_dir(datadir, LOCK_FILE);
    if (d.lock_fd == -EWOULDBLOCK)
        log_fatal("data directory %s is in use by another safekeeper (see %s/%s)", datadir, datadir,
                  LOCK_FILE);
    if (d.lock_fd < 0)
        log_fatal("cannot lock data directory %s: %s", datadir, strerror(-d.lock_fd));

    signal(SIGPIPE, SIG_IGN);
    d.loop = uv_default_loop();
    int rc = uring_open(d.loop, URING_DEPTH, &d.ring);
    if (rc != 0)
        log_fatal("cannot set up io_uring: %s", strerror(-rc));
    char err[512];
    if (sk_node_init(&d.node, d.loop, d.ring, datadir, id, (unsigned)housekeeping_ms, err,
                     sizeof err) != 0)
        log_fatal("cannot load timelines: %s", err);
    d.node.max_wal_bytes = strtoull(values[OPT_MAX_WAL_BYTES], &end, 10);
    if (*end != '\0' || values[OPT_MAX_WAL_BYTES][0] == '-')
        log_fatal("invalid --max-wal-bytes \"%s\" (bytes, 0 for no limit)",
                  values[OPT_MAX_WAL_BYTES]);

    pgwire_config pcfg = {.host = pg_host, .port = pg_port};
    if (values[OPT_PASSWORD] != NULL && values[OPT_AUTH_FILE] != NULL &&
        values[OPT_AUTH_FILE][0] != '\0')
        log_fatal("give --password or --auth-file, not both");
    if (values[OPT_PASSWORD] != NULL) {
        pcfg.auth = PGWIRE_AUTH_MD5;
        pcfg.password = values[OPT_PASSWORD];
    }
    if (values[OPT_AUTH_FILE] != NULL && values[OPT_AUTH_FILE][0] != '\0') {
        d.auth = auth_store_open(values[OPT_AUTH_FILE], err, sizeof err);
        if (d.auth == NULL)
            log_fatal("%s", err);
        int ntenants;
        bool admin;
        auth_store_counts(d.auth, &ntenants, &admin);
        log_info("auth: %s: %d tenant tokens, admin token %s", values[OPT_AUTH_FILE], ntenants,
                 admin ? "set" : "not set");
        auth_pgwire_authenticator(d.auth, &d.authn);
        pcfg.authenticator = &d.authn;
    }
    d.pg = sk_conn_server_start(&d.node, &pcfg, err, sizeof err);
    if (d.pg == NULL)
        log_fatal("cannot listen on %s: %s", values[OPT_LISTEN_PG], err);
    d.http = sk_http_start(&d.node, d.auth, http_host, http_port, err, sizeof err);
    if (d.http == NULL)
        log_fatal("cannot listen on %s: %s", values[OPT_LISTEN_HTTP], err);

    char ports[64], path[PATH_MAX];
    int n = snprintf(ports, sizeof ports, "pg=%d http=%d\n", pgwire_server_port(d.pg),
                     http_server_port(d.http));
    snprintf(path, sizeof path, "%s/%s", datadir, PORTS_FILE);
    rc = durable_write_file(path, ports, (size_t)n, 0600);
    if (rc != 0)
        log_fatal("cannot write %s: %s", path, strerror(-rc));

    uv_signal_init(d.loop, &d.sigterm);
    uv_signal_init(d.loop, &d.sigint);
    d.sigterm.data = d.sigint.data = &d;
    uv_signal_start(&d.sigterm, on_signal, SIGTERM);
    uv_signal_start(&d.sigint, on_signal, SIGINT);
    uv_signal_init(d.loop, &d.sighup);
    d.sighup.data = &d;
    uv_signal_start(&d.sighup, on_sighup, SIGHUP);

    log_info("ready node_id=%llu pg_port=%d http_port=%d datadir=%s timelines=%d", id,
             pgwire_server_port(d.pg), http_server_port(d.http), datadir, d.node.n_timelines);
    uv_run(d.loop, UV_RUN_DEFAULT);
    uv_loop_close(d.loop);
    durable_unlock_dir(d.lock_fd);
    auth_store_free(d.auth);
    log_info("stopped");
    for (int i = 0; i < OPT_COUNT; i++)
        free(values[i]);
    return 0;
}
