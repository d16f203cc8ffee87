/*
 * pageserver.h: running the cluster's strata-pageserver and talking to its
 * HTTP API.
 *
 * The pageserver keeps its data in D/pageserver, logs to D/pageserver.log
 * and has its pid in D/pageserver.pid.  It listens on the ports of
 * cluster.json and, once bound, writes D/pageserver/pageserver.ports.  Its
 * redo helpers run the patched PostgreSQL build (locate.h).  It is optional
 * in this stage: when strata-pageserver has not been built the cluster runs
 * without it.
 *
 * Not for: the pageserver itself (pageserver/), the order in which
 * components start (cmd_cluster.c), or the page protocol (cmd_page.c).
 */
#ifndef STRATA_CLI_PAGESERVER_H
#define STRATA_CLI_PAGESERVER_H

#include <stdbool.h>
#include <sys/types.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"

#define PAGESERVER_PROGRAM "strata-pageserver"

/* What the pageserver reports about the cluster's timeline. */
typedef struct pageserver_timeline {
    bool known; /* false: not running, unreachable, or no such timeline */
    lsn_t last_record_lsn;
    lsn_t disk_consistent_lsn;
    lsn_t remote_consistent_lsn; /* = disk_consistent_lsn without --remote */
    bool remote;                 /* the pageserver uploads to object storage */
    uint64_t remote_files_pending, remote_bytes_pending;
    bool remote_failing;
    char remote_error[256]; /* the uploader's last error, "" none */
} pageserver_timeline;

/* True when strata-pageserver exists beside strata. */
bool pageserver_built(void);

/* The pid of the running pageserver, or 0 when it is not running. */
pid_t pageserver_pid(const cluster *c);

/* Checks that the program and the patched PostgreSQL exist.  0 or -1. */
int pageserver_preflight(cli_err *err);

/* Starts the pageserver unless it runs already; does not wait.  0 or -1
 * with a reason. */
int pageserver_start(const cluster *c, cli_err *err);

/* Waits (bounded) until the pageserver has written its ports file and
 * answers GET /v1/status.  0 or -1 with a reason. */
int pageserver_wait_ready(const cluster *c, int timeout_ms, cli_err *err);

/* Stops it: SIGTERM (a clean shutdown flushes its stores) then, after a
 * bounded wait, SIGKILL; immediate: SIGKILL at once.  Not running is
 * success.  0 or -1 with a reason. */
int pageserver_stop(const cluster *c, bool immediate, cli_err *err);

/* Asks the pageserver about the cluster's timeline.  Never fails:
 * out->known says whether an answer came. */
void pageserver_query(const cluster *c, pageserver_timeline *out);

/*
 * Creates the cluster's timeline on the running pageserver from pgdata, a
 * cleanly shut down data directory, which it imports as page images at the
 * LSN where that directory's WAL ends; from there it streams WAL from the
 * safekeepers.  *lsn is that LSN.  When the pageserver has the timeline
 * already (an import whose answer was lost), *lsn is the LSN it started it
 * at.  Bounded by a timeout.  0, or -1 with a reason that includes the
 * pageserver's own message.
 */
int pageserver_create_timeline(const cluster *c, const char *pgdata, lsn_t *lsn, cli_err *err);

#endif
