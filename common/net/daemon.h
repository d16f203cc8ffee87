/*
 * daemon.h: the start-up and shutdown steps both daemons take the same way:
 * the log level, the data directory and its lock, the auth file, the ports
 * file, and the signals (SIGTERM/SIGINT stop, SIGHUP reloads the auth file).
 *
 * Not for: options (daemon_opts.h) or anything a daemon does differently;
 * each daemon's main.c wires its own parts between these steps.  The steps
 * that cannot go on after a failure log it and exit (status 1, or 2 for a bad
 * option value), because they run before the daemon serves anyone.
 */
#ifndef STRATA_COMMON_DAEMON_H
#define STRATA_COMMON_DAEMON_H

#include <sys/types.h>

#include <uv.h>

#include "net/auth.h"
#include "base/daemon_opts.h"

/* daemon_opts_parse, then the log (option level_idx is its level, component
 * its name).  --help prints the usage and exits 0; bad options, an unknown
 * log level included, print a message and exit 2. */
void daemon_parse_options(daemon_opts *o, int argc, char **argv, int level_idx,
                          const char *component);

/* Creates datadir (mode, if missing), takes its lock file and ignores SIGPIPE
 * (sockets then report EPIPE instead of killing the process).  Returns the
 * lock's fd for durable_unlock_dir; exits if another daemon (named what in
 * the message) holds the lock or on any other error. */
int daemon_open_datadir(const char *datadir, mode_t mode, const char *lock_file, const char *what);

/* Opens the JSON tokens file and logs what it holds; exits on error.  The
 * caller owns the store (auth_store_free). */
auth_store *daemon_open_auth(const char *path);

/* Writes "pg=<pg_port> http=<http_port>\n" durably to datadir/file (mode),
 * for tools and tests that started the daemon on port 0; exits on error. */
void daemon_write_ports(const char *datadir, const char *file, int pg_port, int http_port,
                        mode_t mode);

/* The stop and reload signals, on the daemon's loop. */
typedef struct daemon_signals {
    uv_signal_t term;
    uv_signal_t intr;
    uv_signal_t hup;
    auth_store *auth;                       /* reloaded on SIGHUP; may be NULL */
    void (*on_stop)(void *arg, int signum); /* after the handles are closing */
    void *arg;
} daemon_signals;

/* Starts watching SIGTERM, SIGINT and SIGHUP.  The first SIGTERM or SIGINT
 * closes all three handles (so the loop can end) and calls on_stop once;
 * SIGHUP re-reads auth's file, which logs the outcome either way.  s must
 * stay valid until the loop has ended. */
void daemon_signals_start(daemon_signals *s, uv_loop_t *loop, auth_store *auth,
                          void (*on_stop)(void *arg, int signum), void *arg);

#endif
