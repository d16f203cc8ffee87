/*
 * computes.h: the local cluster's computes as the commands start, stop and
 * list them: the default compute and the named ones D/timelines.json
 * records (local/timelines.h), with each step's progress printed.
 *
 * One writable compute per timeline: the safekeepers' terms enforce it (a
 * second one fences the first); computes_start refuses before that when one
 * of this cluster's computes already runs writable on the timeline.
 *
 * For: the lifecycle commands (cmd/cmd_cluster.c), `strata restore`
 * (cmd/cmd_timeline.c), `strata status` (cmd/cmd_status.c).
 * Not for: preparing and running one compute (compute.h,
 * compute_readonly.h); the cluster lock, which callers that change what
 * runs hold (cluster_lock, local/cluster.h).
 */
#ifndef STRATA_CLI_COMPUTE_COMPUTES_H
#define STRATA_CLI_COMPUTE_COMPUTES_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "cli/local/timelines.h"

/* Starts the compute c says (c->compute_name, cluster.h) unless it runs,
 * from the pageserver once it holds the timeline, and waits until it
 * accepts connections.  Returns 0 or -1 with a reason. */
int computes_start(const cluster *c, cli_err *err);

/* Refuses (-1 with a reason) when another compute of the cluster runs
 * writable on view's timeline; 0 otherwise. */
int computes_check_single_writer(const cluster *view, cli_err *err);

/* True when name is a cluster component's ("compute", "pageserver",
 * "sk1".."sk3"), which no named compute may take. */
bool computes_reserved_name(const char *name);

/* `strata start compute NAME ...` (o->compute_name, o->timeline,
 * o->compute_port, o->read_only, o->has_lsn/lsn): registers the compute
 * in r when new (saved once it is known to start) and starts it.  0 or -1. */
int computes_start_in_registry(const cli_opts *o, const cluster *c, timeline_registry *r,
                               cli_err *err);

/* The same, loading D/timelines.json first. */
int computes_start_named(const cli_opts *o, const cluster *c, cli_err *err);

/* `strata stop compute NAME [--immediate]`.  0 or -1 with a reason. */
int computes_stop_named(const cli_opts *o, const cluster *c, cli_err *err);

/* Stops every running named compute (not the default one), going on after
 * a failure; 0, or -1 with the first reason. */
int computes_stop_all_named(const cluster *c, cli_err *err);

/* `strata status`: a line per compute when there are named ones, and the
 * "computes" array of --json (NULL when out of memory). */
void computes_status_print(const cluster *c);
cJSON *computes_status_json(const cluster *c);

#endif
