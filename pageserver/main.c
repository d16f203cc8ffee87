/*
 * main.c: the strata-pageserver daemon -- options, then wiring: data
 * directory lock, page cache, redo pool, timelines (loaded from disk, WAL
 * receivers restarted), the page service listener, the HTTP listener, the
 * ports file, signals.  No protocol or storage logic lives here.
 *
 * Every option is a flag, an environment variable and a config-file key
 * (flag > environment > config file > default; common/base/daemon_opts.h); see
 * --help.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <uv.h>

#include "net/auth.h"
#include "net/daemon.h"
#include "net/remote_storage.h"
#include "base/daemon_opts.h"
#include "base/durable.h"
#include "base/log.h"
#include "pageserver/service/http_api.h"
#include "pageserver/service/page_service.h"
#include "pageserver/cache/pagecache.h"
#include "pageserver/redo/redo.h"
#include "pageserver/timeline/tenants.h"

#define LOCK_FILE "pageserver.lock"
#define PORTS_FILE "pageserver.ports"
#define STR_(x) #x
#define STR(x) STR_(x)

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
    OPT_IMAGE_READ_THRESHOLD,
    OPT_IMAGE_WORKERS,
    OPT_PAGE_WARM_QUIET,
    OPT_REMOTE,
    OPT_CONFIG,
    OPT_COUNT
};

static const daemon_opt option_table[OPT_COUNT] = {
    [OPT_DATADIR] = {"datadir", "PAGESERVER_DATADIR", NULL,
                     "data directory, created if missing (required)"},
    [OPT_LISTEN_PG] = {"listen-pg", "PAGESERVER_LISTEN_PG", "127.0.0.1:6400",
                       "page service listen address HOST:PORT (port 0: ephemeral)"},
    [OPT_LISTEN_HTTP] = {"listen-http", "PAGESERVER_LISTEN_HTTP", "127.0.0.1:9898",
                         "HTTP listen address HOST:PORT (port 0: ephemeral)"},
    [OPT_PG_BINDIR] = {"pg-bindir", "PAGESERVER_PG_BINDIR", "",
                       "bin/ of the patched Postgres build (redo helpers, initdb); empty: redo "
                       "and initdb fail"},
    [OPT_REDO_HELPERS] = {"redo-helpers", "PAGESERVER_REDO_HELPERS", "2",
                          "redo helper processes in the pool"},
    [OPT_WAIT_LSN_TIMEOUT] = {"wait-lsn-timeout", "PAGESERVER_WAIT_LSN_TIMEOUT", "60s",
                              "longest wait for WAL a request needs (e.g. 60s, 500ms)"},
    [OPT_PAGE_CACHE_MB] = {"page-cache-mb", "PAGESERVER_PAGE_CACHE_MB", "auto",
                           "materialised page cache size in MB (auto: an eighth of the RAM or "
                           "of the memory cgroup's limit, whichever is smaller; 0: off)"},
    [OPT_WORKERS] = {"workers", "PAGESERVER_WORKERS", "4", "page service worker threads"},
    [OPT_LOG_LEVEL] = {"log-level", "PAGESERVER_LOG_LEVEL", "info", "debug, info, warn or error"},
    [OPT_AUTH_FILE] = {"auth-file", "PAGESERVER_AUTH_FILE", "",
                       "JSON tokens file (mode 0600; see docs/operations.md); empty: trust every "
                       "client"},
    [OPT_SAFEKEEPER_PASSWORD] = {"safekeeper-password", "PAGESERVER_SAFEKEEPER_PASSWORD", "",
                                 "token the WAL receivers give safekeepers that use an auth file "
                                 "(prefer the env var)"},
    [OPT_WALREDO_LIB] = {"walredo-lib", "PAGESERVER_WALREDO_LIB", "",
                         "path of strata_walredo.so; empty: $STRATA_WALREDO_LIB, else <exe "
                         "dir>/../lib"},
    [OPT_PITR_BYTES] = {"pitr-window-bytes", "PAGESERVER_PITR_WINDOW_BYTES", "64MB",
                        "keep this much WAL readable behind the last record (e.g. 64MB, 1GB; 0: "
                        "no byte window)"},
    [OPT_PITR_SECONDS] = {"pitr-window-seconds", "PAGESERVER_PITR_WINDOW_SECONDS", "0",
                          "keep the last N seconds readable (0: no time window; with both, the "
                          "longer one wins)"},
    [OPT_GC_INTERVAL] = {"gc-interval", "PAGESERVER_GC_INTERVAL", "60s",
                         "run GC on every timeline this often (e.g. 60s, 500ms; 0: never)"},
    [OPT_WR_PROBE_INTERVAL] = {"walreceiver-probe-interval",
                               "PAGESERVER_WALRECEIVER_PROBE_INTERVAL", "10s",
                               "how often a streaming WAL receiver asks the other safekeepers how "
                               "far they are"},
    [OPT_WR_SWITCH_LAG] = {"walreceiver-switch-lag", "PAGESERVER_WALRECEIVER_SWITCH_LAG", "1GB",
                           "switch to a safekeeper that is this much further ahead (e.g. 1GB, "
                           "16MB)"},
    [OPT_IMAGE_THRESHOLD] = {"image-threshold", "PAGESERVER_IMAGE_THRESHOLD",
                             STR(TIMELINE_DEFAULT_IMAGE_THRESHOLD),
                             "deltas since a page's newest image that queue it for background "
                             "image generation (0: off; see docs/benchmarks.md for how the "
                             "default was chosen)"},
    [OPT_IMAGE_READ_THRESHOLD] = {"image-read-threshold", "PAGESERVER_IMAGE_READ_THRESHOLD",
                                  STR(TIMELINE_DEFAULT_IMAGE_READ_THRESHOLD),
                                  "a read that replays this many deltas stores the page it "
                                  "rebuilt as an image, so the next read starts there (0: off)"},
    [OPT_IMAGE_WORKERS] = {"image-workers", "PAGESERVER_IMAGE_WORKERS", "2",
                           "image generation threads per timeline"},
    [OPT_PAGE_WARM_QUIET] = {"page-warm-quiet", "PAGESERVER_PAGE_WARM_QUIET", "0",
                             "rebuild a cached page this long after ingest last changed it, so "
                             "its next read is a cache hit (e.g. 50ms; 0: off, the default: it "
                             "costs a redo per change, see docs/benchmarks.md)"},
    [OPT_REMOTE] = {"remote", "PAGESERVER_REMOTE", "",
                    "object store every timeline uploads its data files and manifests to, and "
                    "where WAL the safekeepers removed is read from their WAL backup: "
                    "file:///PATH or s3://BUCKET/PREFIX (endpoint and keys from STRATA_S3_*); "
                    "empty: none, the local disk is the only copy"},
    [OPT_CONFIG] = {"config", "PAGESERVER_CONFIG", NULL,
                    "config file of 'key = value' lines (keys as flags)"},
};

/* The options, checked and typed. */
typedef struct ps_config {
    const char *datadir;
    const char *listen_pg;
    const char *listen_http;
    char pg_host[256];
    char http_host[256];
    int pg_port;
    int http_port;
    const char *pg_bindir; /* "": no redo pool */
    const char *walredo_lib;
    const char *auth_file;           /* "": trust */
    const char *safekeeper_password; /* "": none */
    int redo_helpers;
    uint64_t page_cache_mb;
    int workers;
    uint32_t wait_lsn_timeout_ms;
    uint64_t pitr_window_bytes;
    uint32_t pitr_window_seconds;
    uint32_t gc_interval_ms;
    uint32_t wr_probe_interval_ms;
    uint64_t wr_switch_lag_bytes;
    int32_t image_threshold;
    int32_t image_read_threshold;
    int image_workers;
    uint32_t page_warm_quiet_ms; /* 0: off */
    const char *remote;          /* "": no object store */
} ps_config;

typedef struct daemon_state {
    uv_loop_t *loop;
    pagecache *cache;
    redo_pool *redo;
    tenants *tenants;
    page_service *ps;
    ps_http *http;
    daemon_signals signals;
    auth_store *auth;
    remote_storage *remote; /* NULL: --remote not set */
    int lock_fd;
} daemon_state;

/* Option idx as an integer in [min, max]; exits on bad input. */
static uint64_t opt_uint(const daemon_opts *o, int idx, uint64_t min, uint64_t max)
{
    uint64_t v;
    char err[256];
    if (!daemon_opt_uint(o->table[idx].name, o->values[idx], min, max, &v, err, sizeof err))
        daemon_opts_exit(o, err, false);
    return v;
}

static uint64_t opt_bytes(const daemon_opts *o, int idx)
{
    uint64_t v;
    char err[256];
    if (!daemon_opt_bytes(o->table[idx].name, o->values[idx], &v, err, sizeof err))
        daemon_opts_exit(o, err, false);
    return v;
}

static uint32_t opt_duration_ms(const daemon_opts *o, int idx, bool zero_ok)
{
    uint32_t v;
    char err[256];
    if (!daemon_opt_duration_ms(o->table[idx].name, o->values[idx], zero_ok, &v, err, sizeof err))
        daemon_opts_exit(o, err, false);
    return v;
}

static void opt_hostport(const daemon_opts *o, int idx, char *host, size_t hostcap, int *port)
{
    char err[512];
    if (!daemon_opt_hostport(o->table[idx].name, o->values[idx], host, hostcap, port, err,
                             sizeof err))
        daemon_opts_exit(o, err, false);
}

/* Reads flags, environment and config file into o, starts the log and
 * checks that the required options are there. */
static void parse_options(daemon_opts *o, int argc, char **argv)
{
    daemon_parse_options(o, argc, argv, OPT_LOG_LEVEL, "pageserver");
    char err[256];
    if (!daemon_opts_require(o, OPT_DATADIR, err, sizeof err))
        daemon_opts_exit(o, err, true);
}

/* Turns the option strings into c; exits with a message on bad values. */
static void check_options(const daemon_opts *o, ps_config *c)
{
    char **v = o->values;
    c->datadir = v[OPT_DATADIR];
    c->listen_pg = v[OPT_LISTEN_PG];
    c->listen_http = v[OPT_LISTEN_HTTP];
    opt_hostport(o, OPT_LISTEN_PG, c->pg_host, sizeof c->pg_host, &c->pg_port);
    opt_hostport(o, OPT_LISTEN_HTTP, c->http_host, sizeof c->http_host, &c->http_port);
    c->redo_helpers = (int)opt_uint(o, OPT_REDO_HELPERS, 1, 64);
    c->page_cache_mb = strcmp(v[OPT_PAGE_CACHE_MB], "auto") == 0
                           ? (uint64_t)(pagecache_auto_bytes() >> 20)
                           : opt_uint(o, OPT_PAGE_CACHE_MB, 0, 1024 * 1024);
    c->workers = (int)opt_uint(o, OPT_WORKERS, 1, 256);
    c->wait_lsn_timeout_ms = opt_duration_ms(o, OPT_WAIT_LSN_TIMEOUT, false);
    c->pg_bindir = v[OPT_PG_BINDIR];
    c->walredo_lib = v[OPT_WALREDO_LIB];
    c->auth_file = v[OPT_AUTH_FILE];
    c->safekeeper_password = v[OPT_SAFEKEEPER_PASSWORD];
    c->pitr_window_bytes = opt_bytes(o, OPT_PITR_BYTES);
    c->pitr_window_seconds = (uint32_t)opt_uint(o, OPT_PITR_SECONDS, 0, 10ULL * 366 * 86400);
    c->gc_interval_ms = opt_duration_ms(o, OPT_GC_INTERVAL, true);
    c->wr_probe_interval_ms = opt_duration_ms(o, OPT_WR_PROBE_INTERVAL, false);
    c->wr_switch_lag_bytes = opt_bytes(o, OPT_WR_SWITCH_LAG);
    c->image_threshold = (int32_t)opt_uint(o, OPT_IMAGE_THRESHOLD, 0, 1000000);
    c->image_read_threshold = (int32_t)opt_uint(o, OPT_IMAGE_READ_THRESHOLD, 0, 1000000);
    c->image_workers = (int)opt_uint(o, OPT_IMAGE_WORKERS, 1, 64);
    c->page_warm_quiet_ms = opt_duration_ms(o, OPT_PAGE_WARM_QUIET, true);
    c->remote = o->values[OPT_REMOTE];
    if (c->walredo_lib[0] != '\0' && c->walredo_lib[0] != '/') {
        char err[PATH_MAX + 64];
        snprintf(err, sizeof err, "--walredo-lib must be an absolute path (got \"%s\")",
                 c->walredo_lib);
        daemon_opts_exit(o, err, false);
    }
    if (c->wr_switch_lag_bytes == 0)
        daemon_opts_exit(o, "--walreceiver-switch-lag must be positive", false);
}

/* The page cache and, with a Postgres bin/, the redo helper pool. */
static void open_cache_and_redo(daemon_state *d, const ps_config *c)
{
    char err[1024];
    if (pagecache_create((size_t)c->page_cache_mb << 20, &d->cache, err, sizeof err) != 0)
        log_fatal("%s", err);
    if (c->pg_bindir[0] == '\0') {
        log_warn("no --pg-bindir: pages that need WAL redo and initdb will fail");
        return;
    }
    char redo_dir[PATH_MAX];
    snprintf(redo_dir, sizeof redo_dir, "%s/redo", c->datadir);
    if (mkdir(redo_dir, 0755) != 0 && errno != EEXIST)
        log_fatal("cannot create %s: %s", redo_dir, strerror(errno));
    redo_pool_options ro;
    redo_pool_options_default(&ro);
    ro.pg_bindir = c->pg_bindir;
    ro.work_dir = redo_dir;
    ro.helpers = c->redo_helpers;
    ro.walredo_lib = c->walredo_lib;
    if (redo_pool_create(&ro, &d->redo, err, sizeof err) != 0)
        log_fatal("cannot set up the redo pool: %s", err);
    redo_pool_warm(d->redo);
}

/* The object store of --remote, checked now so that a bad URL, missing S3
 * keys or a missing local root stop the start with a clear message. */
static void open_remote(daemon_state *d, const ps_config *c)
{
    if (c->remote[0] == '\0') {
        log_info("no --remote: data files are not uploaded, remote_consistent_lsn is "
                 "disk_consistent_lsn");
        return;
    }
    remote_config cfg;
    remote_err re;
    if (remote_config_from_url(c->remote, &cfg, &re) != 0 ||
        remote_open(&cfg, &d->remote, &re) != 0)
        log_fatal("--remote %s: %s", c->remote, re.msg);
    struct stat st;
    if (cfg.kind == REMOTE_LOCAL && (stat(cfg.root, &st) != 0 || !S_ISDIR(st.st_mode)))
        log_fatal("--remote %s: %s is not a directory (create it with: strata remote init %s)",
                  c->remote, cfg.root, c->remote);
    log_info("uploading to %s", remote_describe(d->remote));
}

/* Every timeline on disk, with its WAL receiver and GC. */
static void open_tenants(daemon_state *d, const ps_config *c)
{
    tenants_options to = {.datadir = c->datadir, .pg_bindir = c->pg_bindir};
    to.svc.redo = d->redo;
    to.svc.cache = d->cache;
    store_options_default(&to.svc.store);
    to.svc.gc.pitr_window_bytes = c->pitr_window_bytes;
    to.svc.gc.pitr_window_seconds = c->pitr_window_seconds;
    to.svc.wr_probe_interval_ms = c->wr_probe_interval_ms;
    to.svc.wr_switch_lag_bytes = c->wr_switch_lag_bytes;
    to.svc.image_threshold = c->image_threshold > 0 ? c->image_threshold : -1; /* 0: off */
    to.svc.image_read_threshold = c->image_read_threshold > 0 ? c->image_read_threshold : -1;
    to.svc.image_workers = c->image_workers;
    to.svc.warm_quiet_ms = c->page_warm_quiet_ms > 0 ? (int32_t)c->page_warm_quiet_ms : -1;
    /* Every value is in a data file (small ones inline in LMDB too, tag 3
     * in docs/storage.md), so the uploaded data files hold everything a
     * restore needs. */
    to.svc.remote = d->remote;
    to.gc_interval_ms = c->gc_interval_ms;
    char err[1024];
    if (tenants_open(&to, &d->tenants, err, sizeof err) != 0)
        log_fatal("cannot load timelines: %s", err);
}

/* Tokens for our clients, and the one the WAL receivers give safekeepers. */
static void set_up_auth(daemon_state *d, const ps_config *c)
{
    if (c->auth_file[0] != '\0') {
        d->auth = daemon_open_auth(c->auth_file);
        /* Every pgwire listener of this process (the page service) asks for
         * a token from now on. */
        pgwire_authenticator authn;
        auth_pgwire_authenticator(d->auth, &authn);
        pgwire_set_default_authenticator(&authn);
    }
    /* libpq (the WAL receivers' connections) reads it from the environment. */
    if (c->safekeeper_password[0] != '\0')
        setenv("PGPASSWORD", c->safekeeper_password, 1);
}

/* The page service and HTTP listeners, then the ports file naming them. */
static void start_listeners(daemon_state *d, const ps_config *c)
{
    char err[1024];
    page_service_options po = {.host = c->pg_host,
                               .port = c->pg_port,
                               .workers = c->workers,
                               .wait_lsn_timeout_ms = c->wait_lsn_timeout_ms};
    d->ps = page_service_start(d->loop, d->tenants, &po, err, sizeof err);
    if (d->ps == NULL)
        log_fatal("cannot listen on %s: %s", c->listen_pg, err);
    d->http = ps_http_start(d->tenants, d->redo, d->cache, d->auth, c->http_host, c->http_port, err,
                            sizeof err);
    if (d->http == NULL)
        log_fatal("cannot listen on %s: %s", c->listen_http, err);
    daemon_write_ports(c->datadir, PORTS_FILE, page_service_port(d->ps), ps_http_port(d->http),
                       0644);
}

static void on_stop(void *arg, int signum)
{
    (void)signum;
    daemon_state *d = arg;
    ps_http_stop(d->http);
    d->http = NULL;
    page_service_stop(d->ps);
    d->ps = NULL;
    /* The loop returns once the page service's handles are closed; the
     * timelines are flushed and closed after that, in main. */
}

/* After the loop: every timeline stops its WAL receiver, flushes its store
 * and closes; then the rest in reverse order of opening. */
static void shut_down(daemon_state *d)
{
    uv_loop_close(d->loop);
    tenants_close(d->tenants);
    remote_close(d->remote);
    redo_pool_destroy(d->redo);
    pagecache_destroy(d->cache);
    durable_unlock_dir(d->lock_fd);
    pgwire_set_default_authenticator(NULL);
    auth_store_free(d->auth);
    log_info("stopped");
}

int main(int argc, char **argv)
{
    daemon_opts opts = {.program = "strata-pageserver",
                        .synopsis = "--datadir DIR [options]",
                        .table = option_table,
                        .count = OPT_COUNT,
                        .config = OPT_CONFIG};
    static ps_config c;
    static daemon_state d;
    parse_options(&opts, argc, argv);
    check_options(&opts, &c);

    d.lock_fd = daemon_open_datadir(c.datadir, 0755, LOCK_FILE, "pageserver");
    open_cache_and_redo(&d, &c);
    open_remote(&d, &c);
    open_tenants(&d, &c);
    set_up_auth(&d, &c);
    d.loop = uv_default_loop();
    start_listeners(&d, &c);
    daemon_signals_start(&d.signals, d.loop, d.auth, on_stop, &d);

    log_info("ready pg_port=%d http_port=%d datadir=%s pg_bindir=%s redo_helpers=%d "
             "page_cache_mb=%llu wait_lsn_timeout_ms=%u pitr_window_bytes=%llu "
             "pitr_window_seconds=%u gc_interval_ms=%u",
             page_service_port(d.ps), ps_http_port(d.http), c.datadir,
             c.pg_bindir[0] ? c.pg_bindir : "(none)", c.redo_helpers,
             (unsigned long long)c.page_cache_mb, c.wait_lsn_timeout_ms,
             (unsigned long long)c.pitr_window_bytes, c.pitr_window_seconds, c.gc_interval_ms);
    uv_run(d.loop, UV_RUN_DEFAULT);
    shut_down(&d);
    daemon_opts_free(&opts);
    return 0;
}
