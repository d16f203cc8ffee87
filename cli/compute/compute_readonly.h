/*
 * compute_readonly.h: starting a read-only compute, `strata start compute
 * NAME --read-only [--timeline T] [--lsn X/Y]` (docs/branches: a static
 * compute pinned at an LSN, or a replica following the timeline's WAL).
 *
 * main.c has parsed and checked the command line; computes.c has registered
 * the compute (timelines.h: read_only, has_lsn/lsn) and made its cluster view
 * (its name, port, timeline id and the timeline's start LSN); it calls
 * compute_start_read_only and then waits for it like any compute
 * (compute_wait_ready).  Stopping, status and `strata down` treat it as
 * any named compute (compute_pid, compute_stop on its view).
 *
 * Not for: writable computes (compute.h).
 */
#ifndef STRATA_CLI_COMPUTE_READONLY_H
#define STRATA_CLI_COMPUTE_READONLY_H

#include <stdbool.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "cli/compute/compute.h"

/*
 * Prepares the data directory of the read-only compute view describes
 * (pinned at lsn when has_lsn, else a replica) and starts postgres without
 * waiting.  The compute must not run.  rep says what it did.  0, or -1
 * with a reason.
 */
int compute_start_read_only(const cluster *view, bool has_lsn, lsn_t lsn, compute_start_report *rep,
                            cli_err *err);

/*
 * A running read-only compute's replay LSN and, for a replica, its lag: the
 * committed WAL its walreceiver last heard of from the safekeepers
 * (pg_stat_wal_receiver.latest_end_lsn) minus its replay LSN, in bytes; -1
 * when unknown (a static compute replays nothing).  False when the compute
 * does not answer.  The safekeepers export the same lag per standby in
 * /metrics (safekeeper_standby_replay_lag_bytes).
 */
bool compute_read_only_progress(const cluster *view, lsn_t *replay, int64_t *lag);

#endif
