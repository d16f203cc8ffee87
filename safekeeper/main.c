/*
 * main.c: the strata-safekeeper daemon -- options, then wiring: data
 * directory lock, io_uring, timelines, the Postgres-protocol listener, the
 * HTTP listener, the ports file, signals.  No protocol logic lives here.
 *
 * Every option is a flag, an environment variable and a config-file key
 * (flag > environment > config file > default; common/base/daemon_opts.h); see
 * --help.
 *
 * For: starting and stopping the daemon.  Not for: protocol logic or
 * timeline state (conn.c, timeline.h).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <uv.h>

#include "net/auth.h"
#include "net/daemon.h"
#include "base/daemon_opts.h"
#include "base/durable.h"
#include "base/log.h"
#include "net/pgwire.h"
#include "net/remote_storage.h"
#include "net/uring.h"
#include "safekeeper/conn.h"
#include "safekeeper/http_api.h"
#include "safekeeper/timeline.h"

#define URING_DEPTH 256
#define LOCK_FILE "safekeeper.lock"
#define PORTS_FILE "safekeeper.ports"

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
    OPT_REMOTE,
    OPT_WAL_BACKUP_DELAY_MS,
    OPT_WAL_IO,
    OPT_COUNT
};

static const daemon_opt option_table[OPT_COUNT] = {
    [OPT_ID] = {"id", "SAFEKEEPER_ID", NULL, "node id, a positive integer (required)"},
    [OPT_DATADIR] = {"datadir", "SAFEKEEPER_DATADIR", NULL,
                     "data directory, created if missing (required)"},
    [OPT_LISTEN_PG] = {"listen-pg", "SAFEKEEPER_LISTEN_PG", "127.0.0.1:5454",
                       "Postgres-protocol listen address HOST:PORT (port 0: ephemeral)"},
    [OPT_LISTEN_HTTP] = {"listen-http", "SAFEKEEPER_LISTEN_HTTP", "127.0.0.1:7676",
                         "HTTP listen address HOST:PORT (port 0: ephemeral)"},
    [OPT_PASSWORD] = {"password", "SAFEKEEPER_PASSWORD", NULL,
                      "password clients must give (MD5); trust if unset"},
    [OPT_AUTH_FILE] = {"auth-file", "SAFEKEEPER_AUTH_FILE", NULL,
                       "JSON tokens file (mode 0600; see docs/operations.md); replaces "
                       "--password"},
    [OPT_LOG_LEVEL] = {"log-level", "SAFEKEEPER_LOG_LEVEL", "info", "debug, info, warn or error"},
    [OPT_HOUSEKEEPING_MS] = {"housekeeping-ms", "SAFEKEEPER_HOUSEKEEPING_MS", "1000",
                             "period of the lazy control-file save and of WAL removal, "
                             "10..3600000 ms"},
    [OPT_CONFIG] = {"config", "SAFEKEEPER_CONFIG", NULL,
                    "config file of 'key = value' lines (keys as flags)"},
    [OPT_MAX_WAL_BYTES] = {"max-wal-bytes", "SAFEKEEPER_MAX_WAL_BYTES", "0",
                           "per-timeline bound on local WAL segment bytes (e.g. 64MB); appends "
                           "past it are refused (0: none)"},
    [OPT_REMOTE] = {"remote", "SAFEKEEPER_REMOTE", "",
                    "object store for the WAL backup: file:///PATH or s3://BUCKET[/PREFIX] "
                    "(S3 endpoint and keys from STRATA_S3_*); \"\": no WAL backup"},
    [OPT_WAL_BACKUP_DELAY_MS] = {"wal-backup-delay-ms", "SAFEKEEPER_WAL_BACKUP_DELAY_MS", "2000",
                                 "stagger step of the WAL backup: the Kth member of a timeline's "
                                 "configuration (from 0; without one, node id - 1 mod 3) waits K "
                                 "steps after a segment closes before uploading it, 0..600000"},
    [OPT_WAL_IO] = {"wal-io", "SAFEKEEPER_WAL_IO", "sync",
                    "how WAL is written and fdatasynced: sync (on the event loop's own thread: "
                    "fewest wake-ups per commit, for local disks) or uring (io_uring workers, "
                    "the loop keeps serving while a slow disk syncs)"},
};

/* The options, checked and typed. */
typedef struct sk_config {
    uint64_t id;
    const char *datadir;
    const char *listen_pg;
    const char *listen_http;
    char pg_host[256];
    char http_host[256];
    int pg_port;
    int http_port;
    const char *password;  /* NULL: no password */
    const char *auth_file; /* NULL or "": no tokens file */
    unsigned housekeeping_ms;
    uint64_t max_wal_bytes; /* 0: no bound */
    const char *remote;     /* "": no WAL backup */
    uint32_t wal_backup_delay_ms;
    const char *wal_io; /* "sync" or "uring" */
} sk_config;

typedef struct daemon_state {
    uv_loop_t *loop;
    uring *ring;
    sk_node node;
    pgwire_server *pg;
    http_server *http;
    daemon_signals signals;
    auth_store *auth;
    pgwire_authenticator authn;
    uv_timer_t drain;
    int lock_fd;
} daemon_state;

/* Reads flags, environment and config file into o, starts the log and
 * checks that the required options are there. */
static void parse_options(daemon_opts *o, int argc, char **argv)
{
    daemon_parse_options(o, argc, argv, OPT_LOG_LEVEL, "safekeeper");
    char err[256];
    if (!daemon_opts_require(o, OPT_ID, err, sizeof err) ||
        !daemon_opts_require(o, OPT_DATADIR, err, sizeof err))
        daemon_opts_exit(o, err, true);
}

/* Turns the option strings into c; exits with a message on bad values. */
static void check_options(const daemon_opts *o, sk_config *c)
{
    char **v = o->values;
    char err[1024];
    uint64_t housekeeping_ms, delay_ms;
    if (!daemon_opt_uint("id", v[OPT_ID], 1, UINT64_MAX, &c->id, err, sizeof err) ||
        !daemon_opt_hostport("listen-pg", v[OPT_LISTEN_PG], c->pg_host, sizeof c->pg_host,
                             &c->pg_port, err, sizeof err) ||
        !daemon_opt_hostport("listen-http", v[OPT_LISTEN_HTTP], c->http_host, sizeof c->http_host,
                             &c->http_port, err, sizeof err) ||
        !daemon_opt_uint("housekeeping-ms", v[OPT_HOUSEKEEPING_MS], 10, 3600000, &housekeeping_ms,
                         err, sizeof err) ||
        !daemon_opt_bytes("max-wal-bytes", v[OPT_MAX_WAL_BYTES], &c->max_wal_bytes, err,
                          sizeof err) ||
        !daemon_opt_uint("wal-backup-delay-ms", v[OPT_WAL_BACKUP_DELAY_MS], 0, 600000, &delay_ms,
                         err, sizeof err))
        daemon_opts_exit(o, err, false);
    c->wal_io = v[OPT_WAL_IO];
    if (strcmp(c->wal_io, "sync") != 0 && strcmp(c->wal_io, "uring") != 0) {
        snprintf(err, sizeof err, "--wal-io: \"%s\" is neither sync nor uring", c->wal_io);
        daemon_opts_exit(o, err, false);
    }
    c->wal_backup_delay_ms = (uint32_t)delay_ms;
    c->remote = v[OPT_REMOTE] != NULL ? v[OPT_REMOTE] : "";
    c->housekeeping_ms = (unsigned)housekeeping_ms;
    c->datadir = v[OPT_DATADIR];
    c->listen_pg = v[OPT_LISTEN_PG];
    c->listen_http = v[OPT_LISTEN_HTTP];
    c->password = v[OPT_PASSWORD];
    c->auth_file = v[OPT_AUTH_FILE];
}

/* io_uring and every timeline on disk. */
static void open_node(daemon_state *d, const sk_config *c)
{
    bool sync = strcmp(c->wal_io, "sync") == 0;
    int rc = uring_open_ex(d->loop, URING_DEPTH, sync ? URING_OPEN_BLOCKING : 0, &d->ring);
    if (rc != 0)
        log_fatal("cannot set up io_uring: %s", strerror(-rc));
    char err[512];
    if (sk_node_init(&d->node, d->loop, d->ring, c->datadir, c->id, c->housekeeping_ms, err,
                     sizeof err) != 0)
        log_fatal("cannot load timelines: %s", err);
    d->node.max_wal_bytes = c->max_wal_bytes;
    d->node.wal_io = c->wal_io;
}

/* --remote: opens the object store and starts the WAL backup; exits with
 * a message if the URL is bad or the store cannot be opened.  An
 * unreachable store is not fatal later: uploads retry and WAL is kept. */
static void start_wal_backup(daemon_state *d, const sk_config *c)
{
    if (c->remote[0] == '\0')
        return;
    remote_config rc;
    remote_err rerr = {{0}};
    remote_storage *rs = NULL;
    if (remote_config_from_url(c->remote, &rc, &rerr) != 0 || remote_open(&rc, &rs, &rerr) != 0)
        log_fatal("--remote %s: %s", c->remote, rerr.msg);
    /* A local store's root missing at start is a configuration error (an
     * S3 store is not probed: one down at start is an outage, retried). */
    struct stat sb;
    if (rc.kind == REMOTE_LOCAL && (stat(rc.root, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        log_fatal("--remote %s: %s is not a directory (create it with strata remote init)",
                  c->remote, rc.root);
    wal_backup *b = NULL;
    char err[512];
    if (wal_backup_start(rs, c->wal_backup_delay_ms, &d->node.metrics.backup, &b, err,
                         sizeof err) != 0 ||
        sk_node_set_backup(&d->node, b, err, sizeof err) != 0)
        log_fatal("--remote %s: %s", c->remote, err);
    log_info("WAL backup to %s", remote_describe(rs));
}

/* How clients authenticate: a password, a tokens file, or trust. */
static void set_up_auth(daemon_state *d, const sk_config *c, pgwire_config *pcfg)
{
    bool tokens = c->auth_file != NULL && c->auth_file[0] != '\0';
    if (c->password != NULL && tokens)
        log_fatal("give --password or --auth-file, not both");
    if (c->password != NULL) {
        pcfg->auth = PGWIRE_AUTH_MD5;
        pcfg->password = c->password;
    }
    if (tokens) {
        d->auth = daemon_open_auth(c->auth_file);
        auth_pgwire_authenticator(d->auth, &d->authn);
        pcfg->authenticator = &d->authn;
    }
}

/* The Postgres-protocol and HTTP listeners, then the ports file. */
static void start_listeners(daemon_state *d, const sk_config *c)
{
    pgwire_config pcfg = {.host = c->pg_host, .port = c->pg_port};
    set_up_auth(d, c, &pcfg);
    char err[512];
    d->pg = sk_conn_server_start(&d->node, &pcfg, err, sizeof err);
    if (d->pg == NULL)
        log_fatal("cannot listen on %s: %s", c->listen_pg, err);
    d->http = sk_http_start(&d->node, d->auth, c->http_host, c->http_port, err, sizeof err);
    if (d->http == NULL)
        log_fatal("cannot listen on %s: %s", c->listen_http, err);
    daemon_write_ports(c->datadir, PORTS_FILE, pgwire_server_port(d->pg), http_server_port(d->http),
                       0600);
}

static void on_drain(uv_timer_t *t)
{
    daemon_state *d = t->data;
    if (d->node.open_connections > 0 || sk_node_fetching(&d->node))
        return;
    uv_timer_stop(&d->drain);
    uv_close((uv_handle_t *)&d->drain, NULL);
    /* No connection refers to a timeline any more: finish the IO in flight
     * (without callbacks), save lazily-kept state, free. */
    uring_close(d->ring);
    sk_node_shutdown(&d->node);
}

/* Stops accepting, then waits (on_drain) for the open connections to end. */
static void on_stop(void *arg, int signum)
{
    (void)signum;
    daemon_state *d = arg;
    if (d->http != NULL) {
        http_server_free(d->http);
        d->http = NULL;
    }
    pgwire_server_stop(d->pg);
    d->pg = NULL;
    sk_node_begin_stop(&d->node);
    uv_timer_init(d->loop, &d->drain);
    d->drain.data = d;
    uv_timer_start(&d->drain, on_drain, 0, 10);
}

int main(int argc, char **argv)
{
    daemon_opts opts = {.program = "strata-safekeeper",
                        .synopsis = "--id N --datadir DIR [options]",
                        .table = option_table,
                        .count = OPT_COUNT,
                        .config = OPT_CONFIG};
    static sk_config c;
    static daemon_state d;
    parse_options(&opts, argc, argv);
    check_options(&opts, &c);

    d.lock_fd = daemon_open_datadir(c.datadir, 0700, LOCK_FILE, "safekeeper");
    d.loop = uv_default_loop();
    open_node(&d, &c);
    start_wal_backup(&d, &c);
    start_listeners(&d, &c);
    daemon_signals_start(&d.signals, d.loop, d.auth, on_stop, &d);

    log_info("ready node_id=%llu pg_port=%d http_port=%d datadir=%s timelines=%d",
             (unsigned long long)c.id, pgwire_server_port(d.pg), http_server_port(d.http),
             c.datadir, d.node.n_timelines);
    uv_run(d.loop, UV_RUN_DEFAULT);
    uv_loop_close(d.loop);
    durable_unlock_dir(d.lock_fd);
    auth_store_free(d.auth);
    log_info("stopped");
    daemon_opts_free(&opts);
    return 0;
}
