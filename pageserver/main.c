/*
 * main.c: the strata-pageserver daemon -- options, then wiring: data
 * directory lock, page cache, redo pool, timelines (loaded from disk, WAL
 * receivers restarted), the page service listener, the HTTP listener, the
 * ports file, signals.  No protocol or storage logic lives here.
 *
 * Every option is a flag, an environment variable and a config-file key
 * (flag > environment > config file > default); see --help.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <uv.h>

#include "common/auth.h"
#include "common/durable.h"
#include "common/log.h"
#include "pageserver/service/http_api.h"
#include "pageserver/service/page_service.h"
#include "pageserver/pagecache.h"
#include "pageserver/redo/redo.h"
#include "pageserver/tenants.h"

#define LOCK_FILE "pageserver.lock"
#define PORTS_FILE "pageserver.ports"
#define PROGRAM "strata-pageserver"
#define STR_(x) #x
#define STR(x) STR_(x)

typedef struct option_def {
    const char *name; /* flag and config key */
    const char *env;
    const char *def; /* NULL: no default */
    const char *help;
} option_def;

enum {
    OPT_DATADIR,
    OPT_LISTEN_PG,
    OPT_LISTEN_HTTP,
    OPT_PG_BINDIR,
    OPT_REDO_HELPERS,
    OPT_WAIT_LSN_TIMEOUT,
    OPT_PAGE_CACHE_MB,
    OPT_WORKERS,
    OPT_LOG_LEVEL,
    OPT_AUTH_FILE,
    OPT_SAFEKEEPER_PASSWORD,
    OPT_WALREDO_LIB,
    OPT_PITR_BYTES,
    OPT_PITR_SECONDS,
    OPT_GC_INTERVAL,
    OPT_WR_PROBE_INTERVAL,
    OPT_WR_SWITCH_LAG,
    OPT_IMAGE_THRESHOLD,
    OPT_IMAGE_WORKERS,
    OPT_CONFIG,
    OPT_COUNT
};

static const option_def option_defs[OPT_COUNT] = {
    {"datadir", "PAGESERVER_DATADIR", NULL, "data directory, created if missing (required)"},
    {"listen-pg", "PAGESERVER_LISTEN_PG", "127.0.0.1:6400",
     "page service listen address HOST:PORT (port 0: ephemeral)"},
    {"listen-http", "PAGESERVER_LISTEN_HTTP", "127.0.0.1:9898",
     "HTTP listen address HOST:PORT (port 0: ephemeral)"},
    {"pg-bindir", "PAGESERVER_PG_BINDIR", "",
     "bin/ of the patched Postgres build (redo helpers, initdb); empty: redo and initdb fail"},
    {"redo-helpers", "PAGESERVER_REDO_HELPERS", "2", "redo helper processes in the pool"},
    {"wait-lsn-timeout", "PAGESERVER_WAIT_LSN_TIMEOUT", "60s",
     "longest wait for WAL a request needs (e.g. 60s, 500ms)"},
    {"page-cache-mb", "PAGESERVER_PAGE_CACHE_MB", "256", "materialised page cache size in MB"},
    {"workers", "PAGESERVER_WORKERS", "4", "page service worker threads"},
    {"log-level", "PAGESERVER_LOG_LEVEL", "info", "debug, info, warn or error"},
    {"auth-file", "PAGESERVER_AUTH_FILE", "",
     "JSON tokens file (mode 0600; see docs/operations.md); empty: trust every client"},
    {"safekeeper-password", "PAGESERVER_SAFEKEEPER_PASSWORD", "",
     "token the WAL receivers give safekeepers that use an auth file (prefer the env var)"},
    {"walredo-lib", "PAGESERVER_WALREDO_LIB", "",
     "path of strata_walredo.so; empty: $STRATA_WALREDO_LIB, else <exe dir>/../lib"},
    {"pitr-window-bytes", "PAGESERVER_PITR_WINDOW_BYTES", "64MB",
     "keep this much WAL readable behind the last record (e.g. 64MB, 1GB; 0: no byte window)"},
    {"pitr-window-seconds", "PAGESERVER_PITR_WINDOW_SECONDS", "0",
     "keep the last N seconds readable (0: no time window; with both, the longer one wins)"},
    {"gc-interval", "PAGESERVER_GC_INTERVAL", "60s",
     "run GC on every timeline this often (e.g. 60s, 500ms; 0: never)"},
    {"walreceiver-probe-interval", "PAGESERVER_WALRECEIVER_PROBE_INTERVAL", "10s",
     "how often a streaming WAL receiver asks the other safekeepers how far they are"},
    {"walreceiver-switch-lag", "PAGESERVER_WALRECEIVER_SWITCH_LAG", "1GB",
     "switch to a safekeeper that is this much further ahead (e.g. 1GB, 16MB)"},
    {"image-threshold", "PAGESERVER_IMAGE_THRESHOLD", STR(TIMELINE_DEFAULT_IMAGE_THRESHOLD),
     "deltas since a page's newest image that queue it for background image generation "
     "(0: off; see docs/benchmarks.md for how the default was chosen)"},
    {"image-workers", "PAGESERVER_IMAGE_WORKERS", "2",
     "image generation threads per timeline"},
    {"config", "PAGESERVER_CONFIG", NULL, "config file of 'key = value' lines (keys as flags)"},
};

typedef struct daemon_state {
    uv_loop_t *loop;
    pagecache *cache;
    redo_pool *redo;
    tenants *tenants;
    page_service *ps;
    ps_http *http;
    uv_signal_t sigterm;
    uv_signal_t sigint;
    uv_signal_t sighup;
    auth_store *auth;
    int lock_fd;
} daemon_state;

static void usage(FILE *f)
{
    fprintf(f, "Usage: " PROGRAM " --datadir DIR [options]\n\nOptions:\n");
    for (int i = 0; i < OPT_COUNT; i++)
        fprintf(f, "  --%-26s %s\n  %28s env %s, default: %s\n", option_defs[i].name,
                option_defs[i].help, "", option_defs[i].env,
                option_defs[i].def == NULL      ? "(none)"
                : option_defs[i].def[0] == '\0' ? "(empty)"
                                                : option_defs[i].def);
    fprintf(f, "  --%-26s this text\n", "help");
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
        fprintf(stderr, PROGRAM ": cannot read config file %s: %s\n", path, strerror(errno));
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
            fprintf(stderr, PROGRAM ": %s:%d: expected key = value\n", path, lineno);
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
            fprintf(stderr, PROGRAM ": %s:%d: unknown key \"%s\"\n", path, lineno, key);
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

/* A positive integer in [min, max]; exits with a usage error otherwise. */
static long parse_int(const char *name, const char *s, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max) {
        fprintf(stderr, PROGRAM ": invalid --%s \"%s\" (want an integer %ld..%ld)\n", name, s, min,
                max);
        exit(2);
    }
    return v;
}

/* "4096", "64kB", "64MB", "1GB" (powers of 1024) -> bytes in [0, 2^50];
 * exits on bad input. */
static uint64_t parse_bytes(const char *name, const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = 0;
    if (errno != 0 || end == s || s[0] == '-')
        goto bad;
    if (strcmp(end, "kB") == 0 || strcmp(end, "KB") == 0)
        shift = 10;
    else if (strcmp(end, "MB") == 0)
        shift = 20;
    else if (strcmp(end, "GB") == 0)
        shift = 30;
    else if (*end != '\0')
        goto bad;
    if (v > (1ULL << 50) >> shift)
        goto bad;
    return (uint64_t)v << shift;
bad:
    fprintf(stderr, PROGRAM ": invalid --%s \"%s\" (want bytes, e.g. 4096, 64kB, 64MB, 1GB)\n",
            name, s);
    exit(2);
}

/* "0" -> 0, else as parse_duration_ms. */
static uint32_t parse_duration_ms(const char *name, const char *s);
static uint32_t parse_duration_or_zero_ms(const char *name, const char *s)
{
    return strcmp(s, "0") == 0 ? 0 : parse_duration_ms(name, s);
}

/* "60", "60s", "500ms" -> milliseconds; exits on bad input. */
static uint32_t parse_duration_ms(const char *name, const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned long long ms;
    if (errno != 0 || end == s)
        goto bad;
    if (strcmp(end, "ms") == 0)
        ms = v;
    else if (*end == '\0' || strcmp(end, "s") == 0)
        ms = v * 1000;
    else
        goto bad;
    if (ms == 0 || ms > 24ULL * 3600 * 1000)
        goto bad;
    return (uint32_t)ms;
bad:
    fprintf(stderr, PROGRAM ": invalid --%s \"%s\" (want e.g. 60s or 500ms, at most 24 h)\n", name,
            s);
    exit(2);
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
    ps_http_stop(d->http);
    d->http = NULL;
    page_service_stop(d->ps);
    d->ps = NULL;
    /* The loop returns once the page service's handles are closed; the
     * timelines are flushed and closed after that, in main. */
}

int main(int argc, char **argv)
{
    char *values[OPT_COUNT] = {0};
    static const struct option longopts[] = {
        {"datadir", required_argument, NULL, OPT_DATADIR},
        {"listen-pg", required_argument, NULL, OPT_LISTEN_PG},
        {"listen-http", required_argument, NULL, OPT_LISTEN_HTTP},
        {"pg-bindir", required_argument, NULL, OPT_PG_BINDIR},
        {"redo-helpers", required_argument, NULL, OPT_REDO_HELPERS},
        {"wait-lsn-timeout", required_argument, NULL, OPT_WAIT_LSN_TIMEOUT},
        {"page-cache-mb", required_argument, NULL, OPT_PAGE_CACHE_MB},
        {"workers", required_argument, NULL, OPT_WORKERS},
        {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
        {"auth-file", required_argument, NULL, OPT_AUTH_FILE},
        {"safekeeper-password", required_argument, NULL, OPT_SAFEKEEPER_PASSWORD},
        {"walredo-lib", required_argument, NULL, OPT_WALREDO_LIB},
        {"pitr-window-bytes", required_argument, NULL, OPT_PITR_BYTES},
        {"pitr-window-seconds", required_argument, NULL, OPT_PITR_SECONDS},
        {"gc-interval", required_argument, NULL, OPT_GC_INTERVAL},
        {"walreceiver-probe-interval", required_argument, NULL, OPT_WR_PROBE_INTERVAL},
        {"walreceiver-switch-lag", required_argument, NULL, OPT_WR_SWITCH_LAG},
        {"image-threshold", required_argument, NULL, OPT_IMAGE_THRESHOLD},
        {"image-workers", required_argument, NULL, OPT_IMAGE_WORKERS},
        {"config", required_argument, NULL, OPT_CONFIG},
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
        free(values[ch]);
        values[ch] = strdup(optarg);
    }
    if (optind != argc) {
        fprintf(stderr, PROGRAM ": unexpected argument \"%s\"\n", argv[optind]);
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
        fprintf(stderr, PROGRAM ": invalid --log-level \"%s\"\n", values[OPT_LOG_LEVEL]);
        return 2;
    }
    log_init("pageserver", (log_level)level);
    if (values[OPT_DATADIR] == NULL || values[OPT_DATADIR][0] == '\0') {
        fprintf(stderr, PROGRAM ": --datadir is required\n");
        usage(stderr);
        return 2;
    }
    char pg_host[256], http_host[256];
    int pg_port, http_port;
    if (!parse_hostport(values[OPT_LISTEN_PG], pg_host, sizeof pg_host, &pg_port)) {
        fprintf(stderr, PROGRAM ": invalid --listen-pg \"%s\" (want HOST:PORT)\n",
                values[OPT_LISTEN_PG]);
        return 2;
    }
    if (!parse_hostport(values[OPT_LISTEN_HTTP], http_host, sizeof http_host, &http_port)) {
        fprintf(stderr, PROGRAM ": invalid --listen-http \"%s\" (want HOST:PORT)\n",
                values[OPT_LISTEN_HTTP]);
        return 2;
    }
    int helpers = (int)parse_int("redo-helpers", values[OPT_REDO_HELPERS], 1, 64);
    long cache_mb = parse_int("page-cache-mb", values[OPT_PAGE_CACHE_MB], 0, 1024L * 1024);
    int workers = (int)parse_int("workers", values[OPT_WORKERS], 1, 256);
    uint32_t wait_ms = parse_duration_ms("wait-lsn-timeout", values[OPT_WAIT_LSN_TIMEOUT]);
    const char *bindir = values[OPT_PG_BINDIR];
    const char *walredo_lib = values[OPT_WALREDO_LIB];
    uint64_t pitr_bytes = parse_bytes("pitr-window-bytes", values[OPT_PITR_BYTES]);
    uint32_t pitr_seconds =
        (uint32_t)parse_int("pitr-window-seconds", values[OPT_PITR_SECONDS], 0, 10L * 366 * 86400);
    uint32_t gc_ms = parse_duration_or_zero_ms("gc-interval", values[OPT_GC_INTERVAL]);
    uint32_t probe_ms =
        parse_duration_ms("walreceiver-probe-interval", values[OPT_WR_PROBE_INTERVAL]);
    uint64_t switch_lag = parse_bytes("walreceiver-switch-lag", values[OPT_WR_SWITCH_LAG]);
    int32_t image_threshold =
        (int32_t)parse_int("image-threshold", values[OPT_IMAGE_THRESHOLD], 0, 1000000);
    int image_workers = (int)parse_int("image-workers", values[OPT_IMAGE_WORKERS], 1, 64);
    if (walredo_lib[0] != '\0' && walredo_lib[0] != '/') {
        fprintf(stderr, PROGRAM ": --walredo-lib must be an absolute path (got \"%s\")\n",
                walredo_lib);
        exit(2);
    }
    if (switch_lag == 0) {
        fprintf(stderr, PROGRAM ": --walreceiver-switch-lag must be positive\n");
        exit(2);
    }

    const char *datadir = values[OPT_DATADIR];
    if (mkdir(datadir, 0755) != 0 && errno != EEXIST)
        log_fatal("cannot create data directory %s: %s", datadir, strerror(errno));
    static daemon_state d;
    d.lock_fd = durable_lock_dir(datadir, LOCK_FILE);
    if (d.lock_fd == -EWOULDBLOCK)
        log_fatal("data directory %s is in use by another pageserver (see %s/%s)", datadir, datadir,
                  LOCK_FILE);
    if (d.lock_fd < 0)
        log_fatal("cannot lock data directory %s: %s", datadir, strerror(-d.lock_fd));
    signal(SIGPIPE, SIG_IGN);

    char err[1024];
    if (pagecache_create((size_t)cache_mb << 20, &d.cache, err, sizeof err) != 0)
        log_fatal("%s", err);
    char redo_dir[PATH_MAX];
    snprintf(redo_dir, sizeof redo_dir, "%s/redo", datadir);
    if (bindir[0] != '\0') {
        if (mkdir(redo_dir, 0755) != 0 && errno != EEXIST)
            log_fatal("cannot create %s: %s", redo_dir, strerror(errno));
        redo_pool_options ro;
        redo_pool_options_default(&ro);
        ro.pg_bindir = bindir;
        ro.work_dir = redo_dir;
        ro.helpers = helpers;
        ro.walredo_lib = walredo_lib;
        if (redo_pool_create(&ro, &d.redo, err, sizeof err) != 0)
            log_fatal("cannot set up the redo pool: %s", err);
        redo_pool_warm(d.redo);
    } else {
        log_warn("no --pg-bindir: pages that need WAL redo and initdb will fail");
    }

    tenants_options to = {.datadir = datadir, .pg_bindir = bindir};
    to.svc.redo = d.redo;
    to.svc.cache = d.cache;
    store_options_default(&to.svc.store);
    to.svc.gc.pitr_window_bytes = pitr_bytes;
    to.svc.gc.pitr_window_seconds = pitr_seconds;
    to.svc.wr_probe_interval_ms = probe_ms;
    to.svc.wr_switch_lag_bytes = switch_lag;
    to.svc.image_threshold = image_threshold > 0 ? image_threshold : -1; /* 0: off */
    to.svc.image_workers = image_workers;
    to.gc_interval_ms = gc_ms;
    if (tenants_open(&to, &d.tenants, err, sizeof err) != 0)
        log_fatal("cannot load timelines: %s", err);

    if (values[OPT_AUTH_FILE][0] != '\0') {
        d.auth = auth_store_open(values[OPT_AUTH_FILE], err, sizeof err);
        if (d.auth == NULL)
            log_fatal("%s", err);
        int ntenants;
        bool admin;
        auth_store_counts(d.auth, &ntenants, &admin);
        log_info("auth: %s: %d tenant tokens, admin token %s", values[OPT_AUTH_FILE], ntenants,
                 admin ? "set" : "not set");
        /* Every pgwire listener of this process (the page service) asks for
         * a token from now on. */
        pgwire_authenticator authn;
        auth_pgwire_authenticator(d.auth, &authn);
        pgwire_set_default_authenticator(&authn);
    }
    /* libpq (the WAL receivers' connections) reads it from the environment. */
    if (values[OPT_SAFEKEEPER_PASSWORD][0] != '\0')
        setenv("PGPASSWORD", values[OPT_SAFEKEEPER_PASSWORD], 1);

    d.loop = uv_default_loop();
    page_service_options po = {
        .host = pg_host, .port = pg_port, .workers = workers, .wait_lsn_timeout_ms = wait_ms};
    d.ps = page_service_start(d.loop, d.tenants, &po, err, sizeof err);
    if (d.ps == NULL)
        log_fatal("cannot listen on %s: %s", values[OPT_LISTEN_PG], err);
    d.http = ps_http_start(d.tenants, d.redo, d.cache, d.auth, http_host, http_port, err,
                           sizeof err);
    if (d.http == NULL)
        log_fatal("cannot listen on %s: %s", values[OPT_LISTEN_HTTP], err);

    char ports[64], path[PATH_MAX];
    int n = snprintf(ports, sizeof ports, "pg=%d http=%d\n", page_service_port(d.ps),
                     ps_http_port(d.http));
    snprintf(path, sizeof path, "%s/%s", datadir, PORTS_FILE);
    int rc = durable_write_file(path, ports, (size_t)n, 0644);
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

    log_info("ready pg_port=%d http_port=%d datadir=%s pg_bindir=%s redo_helpers=%d "
             "page_cache_mb=%ld wait_lsn_timeout_ms=%u pitr_window_bytes=%llu "
             "pitr_window_seconds=%u gc_interval_ms=%u",
             page_service_port(d.ps), ps_http_port(d.http), datadir, bindir[0] ? bindir : "(none)",
             helpers, cache_mb, wait_ms, (unsigned long long)pitr_bytes, pitr_seconds, gc_ms);
    uv_run(d.loop, UV_RUN_DEFAULT);
    uv_loop_close(d.loop);
    /* Every timeline: stop its WAL receiver, flush its store, close. */
    tenants_close(d.tenants);
    redo_pool_destroy(d.redo);
    pagecache_destroy(d.cache);
    durable_unlock_dir(d.lock_fd);
    pgwire_set_default_authenticator(NULL);
    auth_store_free(d.auth);
    log_info("stopped");
    for (int i = 0; i < OPT_COUNT; i++)
        free(values[i]);
    return 0;
}
