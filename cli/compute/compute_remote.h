/*
 * compute_remote.h: `strata start compute --remote`, the stateless compute
 * against daemons on other hosts (a container of docker/docker-compose.yml,
 * or any machine that reaches the safekeepers and the pageserver).
 *
 * The same start as the local cluster's (compute.h,
 * compute_start_from_pageserver): sync-safekeepers, a stateless basebackup
 * from the pageserver into a new empty data directory, strata.conf with
 * full_page_writes = off and the smgr reading every page from the
 * pageserver; then this process becomes postgres (exec, as the
 * unprivileged user), so a container's main process is the postmaster and
 * its log is postgres's stderr.  Nothing is kept from an earlier start.
 *
 * Where the daemons are comes from the environment (no cluster.json):
 *   STRATA_TENANT_ID, STRATA_TIMELINE_ID   32 hex digits each (required)
 *   STRATA_SAFEKEEPERS      HOST:PORT,HOST:PORT,HOST:PORT (required, three)
 *   STRATA_PAGESERVER       HOST:PORT of its pagestream port (required)
 *   STRATA_PAGESERVER_HTTP  HOST:PORT of its HTTP API (required): the
 *                           timeline's start LSN, where a compute begins
 *                           while no safekeeper has WAL yet
 *   STRATA_COMPUTE_LISTEN   listen_addresses (default '*')
 *   STRATA_COMPUTE_PORT     port (default 5432)
 *   STRATA_COMPUTE_TRUST    an address (CIDR, or "all") whose clients the
 *                           compute trusts without a password, besides
 *                           loopback (default none)
 *   STRATA_PG_USER          the OS user postgres runs as (default postgres)
 *   STRATA_COMPUTE_WAIT_S   how long to wait for the pageserver and the
 *                           timeline (default 60)
 *   STRATA_PAGESERVER_PASSWORD, STRATA_SAFEKEEPER_PASSWORD  the tokens
 *                           (docs/operations.md "Authentication"); the
 *                           first also reads the timeline over HTTP (a
 *                           tenant's token may read its own timeline)
 * Arguments after `--` go to postgres (for example -c name=value).
 *
 * Not for: the local cluster (cmd_cluster.c), creating the timeline
 * (`strata timeline create --initdb`).
 */
#ifndef STRATA_CLI_COMPUTE_REMOTE_H
#define STRATA_CLI_COMPUTE_REMOTE_H

#include "cli/cli.h"

/* Returns only on failure (CLI_FAIL or CLI_USAGE, the reason printed). */
int cmd_start_compute_remote(const cli_opts *o);

#endif
