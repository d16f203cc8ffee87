/*
 * daemon.c: the start-up and shutdown steps shared by the daemons; see
 * daemon.h.  Everything here runs on the main thread, before or on the
 * daemon's loop.
 */
#include "net/daemon.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/durable.h"
#include "base/log.h"

void daemon_parse_options(daemon_opts *o, int argc, char **argv, int level_idx,
                          const char *component)
{
    char err[1024];
    switch (daemon_opts_parse(o, argc, argv, err, sizeof err)) {
    case DAEMON_OPTS_HELP:
        daemon_opts_usage(o, stdout);
        exit(0);
    case DAEMON_OPTS_ERROR:
        daemon_opts_exit(o, err, true);
    case DAEMON_OPTS_OK:
        break;
    }
    int level = log_level_parse(o->values[level_idx]);
    if (level < 0) {
        snprintf(err, sizeof err, "invalid --%s \"%s\" (want debug, info, warn or error)",
                 o->table[level_idx].name, o->values[level_idx]);
        daemon_opts_exit(o, err, false);
    }
    log_init(component, (log_level)level);
}

int daemon_open_datadir(const char *datadir, mode_t mode, const char *lock_file, const char *what)
{
    if (mkdir(datadir, mode) != 0 && errno != EEXIST)
        log_fatal("cannot create data directory %s: %s", datadir, strerror(errno));
    int fd = durable_lock_dir(datadir, lock_file);
    if (fd == -EWOULDBLOCK)
        log_fatal("data directory %s is in use by another %s (see %s/%s)", datadir, what, datadir,
                  lock_file);
    if (fd < 0)
        log_fatal("cannot lock data directory %s: %s", datadir, strerror(-fd));
    signal(SIGPIPE, SIG_IGN);
    return fd;
}

auth_store *daemon_open_auth(const char *path)
{
    char err[512];
    auth_store *a = auth_store_open(path, err, sizeof err);
    if (a == NULL)
        log_fatal("%s", err);
    int ntenants;
    bool admin;
    auth_store_counts(a, &ntenants, &admin);
    log_info("auth: %s: %d tenant tokens, admin token %s", path, ntenants,
             admin ? "set" : "not set");
    return a;
}

void daemon_write_ports(const char *datadir, const char *file, int pg_port, int http_port,
                        mode_t mode)
{
    char ports[64], path[PATH_MAX];
    int n = snprintf(ports, sizeof ports, "pg=%d http=%d\n", pg_port, http_port);
    snprintf(path, sizeof path, "%s/%s", datadir, file);
    int rc = durable_write_file(path, ports, (size_t)n, mode);
    if (rc != 0)
        log_fatal("cannot write %s: %s", path, strerror(-rc));
}

static void on_sighup(uv_signal_t *sig, int signum)
{
    (void)signum;
    daemon_signals *s = sig->data;
    char err[512];
    if (s->auth != NULL)
        (void)auth_store_reload(s->auth, err, sizeof err); /* logs either way */
}

static void on_stop_signal(uv_signal_t *sig, int signum)
{
    daemon_signals *s = sig->data;
    log_info("received signal %d, shutting down", signum);
    uv_close((uv_handle_t *)&s->term, NULL);
    uv_close((uv_handle_t *)&s->intr, NULL);
    uv_close((uv_handle_t *)&s->hup, NULL);
    s->on_stop(s->arg, signum);
}

void daemon_signals_start(daemon_signals *s, uv_loop_t *loop, auth_store *auth,
                          void (*on_stop)(void *arg, int signum), void *arg)
{
    s->auth = auth;
    s->on_stop = on_stop;
    s->arg = arg;
    uv_signal_init(loop, &s->term);
    uv_signal_init(loop, &s->intr);
    uv_signal_init(loop, &s->hup);
    s->term.data = s->intr.data = s->hup.data = s;
    uv_signal_start(&s->term, on_stop_signal, SIGTERM);
    uv_signal_start(&s->intr, on_stop_signal, SIGINT);
    uv_signal_start(&s->hup, on_sighup, SIGHUP);
}
