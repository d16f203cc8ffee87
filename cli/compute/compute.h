/*
 * compute.h: running the compute, a PostgreSQL 15 built with the smgr-hook
 * patch that loads strata.so: its walproposer streams WAL to the
 * safekeepers and, when the cluster has a pageserver, its smgr reads pages
 * from it (stateless: no relation files of its own).
 *
 * Layout under D: compute/pgdata (the data directory: made anew from a
 * pageserver basebackup at every start, or by initdb once for a cluster
 * without a pageserver), compute/run (its unix socket directory),
 * compute.log, compute.pid.  The settings strata owns live in
 * pgdata/strata.conf, rewritten at every start so they follow cluster.json;
 * the operator's settings (the compute spec D/compute.settings and
 * STRATA_COMPUTE_SETTINGS, cli/compute/compute_settings.h) follow them there.
 * When strata runs as root everything under compute/ belongs to the
 * unprivileged postgres user and every postgres process runs as that user.
 *
 * A named compute (computes.h) has the same layout under D/computes/NAME
 * (pgdata, run) with D/computes/NAME.pid, NAME.log and NAME.sync.log; every
 * function here acts on the compute c->compute_name says (cluster.h).
 *
 * Not for: the walproposer and smgr themselves (compute/extension), or the
 * order in which components start (cli/cmd/cmd_cluster.c).
 */
#ifndef STRATA_CLI_COMPUTE_H
#define STRATA_CLI_COMPUTE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <libpq-fe.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"

struct compute_settings;

/* Checks settings as a start would use them (shared_preload_libraries
 * merged with strata.so, each library found); preload (preload_len bytes)
 * gets the merged list.  0 or -1 with a reason. */
int compute_settings_check(const struct compute_settings *ss, char *preload, size_t preload_len,
                           cli_err *err);

/* "compute" or the named compute's name (for messages). */
const char *compute_label(const cluster *c);

/* The postmaster's pid, or 0 when the compute is not running. */
pid_t compute_pid(const cluster *c);

/* The data directory: D/compute/pgdata, or D/computes/NAME/pgdata for a
 * named compute (c->compute_name, computes.h). */
int compute_datadir(const cluster *c, char *buf, cli_err *err);

/* Its log: D/compute.log or D/computes/NAME.log.  0 or -1. */
int compute_log_path(const cluster *c, char *buf, cli_err *err);

/* Removes a named compute's directory, pid file and logs; it must not
 * run.  0 or -1. */
int compute_remove_files(const cluster *c, cli_err *err);

/* Checks, without starting anything, that the compute can start: its
 * programs and strata.so exist and its user can reach D and strata.so. */
int compute_preflight(const cluster *c, cli_err *err);

/* Creates D/compute and, when there is no data directory yet, runs initdb
 * (into a staging directory renamed into place).  *created says whether
 * initdb ran.  Leaves a cleanly shut down data directory.  0 or -1. */
int compute_init_datadir(const cluster *c, bool *created, cli_err *err);

/* Reads pgdata/global/pg_control: *clean is true when the data directory
 * was shut down cleanly (state "shut down").  Only meaningful while the
 * compute does not run.  0, or -1 with a reason. */
int compute_cleanly_shut_down(const cluster *c, bool *clean, cli_err *err);

/* Creates the data directory if needed (initdb), writes the configuration
 * and starts postgres unless it runs already; does not wait.  0 or -1. */
int compute_start(const cluster *c, cli_err *err);

/* Waits (bounded) until the compute accepts connections.  0 or -1. */
int compute_wait_ready(const cluster *c, int timeout_ms, cli_err *err);

/* A libpq connection to c's compute that gives up after timeout_s: the
 * caller checks PQstatus and always PQfinish-es it. */
PGconn *compute_connect(const cluster *c, int timeout_s);

/*
 * Stops the compute.  Normal: fast shutdown (SIGINT), escalating to
 * immediate shutdown and SIGKILL after bounded waits; immediate shutdown
 * at once when fewer than a majority of safekeepers run (a fast shutdown
 * waits for them to hold all WAL).  immediate: SIGKILL to
 * the postmaster and all its children at once (a crash).  Not running is
 * success.  0 or -1 with a reason.
 */
int compute_stop(const cluster *c, bool immediate, cli_err *err);

/*
 * Computes started from the pageserver (docs/design.md §7.7).  Layout adds
 * D/compute/template (the patched initdb the pageserver imports the
 * timeline from; removed after the import) and D/sync-safekeepers.log.
 */

/* Runs the PATCHED initdb into D/compute/template unless it exists; out
 * (PATH_MAX bytes) gets its path.  0 or -1. */
int compute_make_template(const cluster *c, char *out, cli_err *err);
int compute_remove_template(const cluster *c, cli_err *err);

typedef struct compute_start_report {
    lsn_t lsn;           /* X: where the compute starts */
    bool empty_timeline; /* no safekeeper had WAL: X is the timeline's start */
    bool bootstrap;      /* no safekeeper had the timeline: this start created it */
    bool stateless;      /* non-full basebackup + strata.pageserver */
    bool legacy;         /* started on its own pre-pageserver data directory */
    long long sync_ms, cleanup_ms, basebackup_ms, configure_ms;
    uint64_t basebackup_bytes;
    uint32_t basebackup_files;
} compute_start_report;

/*
 * `strata start compute` with a pageserver: sync-safekeepers -> X (the
 * timeline's start LSN when no safekeeper has WAL yet), the old data
 * directory removed, a basebackup at X fetched into a new empty one
 * (stateless: no permanent relation file, pages through the strata smgr;
 * STRATA_COMPUTE_MODE=full fetches every relation file and turns the smgr
 * off), the settings of docs/design.md §7.6
 * and strata.signal (X) written, everything chowned to the postgres user,
 * the PATCHED postgres started (not waited for: compute_wait_ready).  The
 * compute must not run.  Exception (rep->legacy): a data directory made
 * before the pageserver existed, imported at a shutdown checkpoint the
 * safekeepers do not have yet, is started as it is, once, so that its
 * walproposer brings them there.  0 or -1 with a reason.
 */
int compute_start_from_pageserver(const cluster *c, compute_start_report *rep, cli_err *err);

/*
 * A read-only compute (compute_readonly.h): its data directory made anew
 * from `basebackup T TL <lsn>|latest [mode]` (lsn LSN_INVALID: latest; mode
 * "" or "replica"), configured as a stateless compute without the
 * walproposer, the lines conf_fn writes into conf (it sees the fetched data
 * directory pgdata; 0 or -1 with a reason) appended to its strata.conf (they
 * win over the operator's settings), standby.signal written, and the patched
 * postgres started (not waited for).  The compute must not run.  0 or -1.
 */
#define COMPUTE_STANDBY_CONF_MAX 2048
typedef int (*compute_standby_conf_fn)(const cluster *c, const char *pgdata, char *conf,
                                       size_t conf_len, void *arg, cli_err *err);
int compute_start_standby(const cluster *c, lsn_t lsn, const char *mode,
                          compute_standby_conf_fn conf_fn, void *conf_arg,
                          compute_start_report *rep, cli_err *err);

#endif
