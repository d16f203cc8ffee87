/*
 * cmd_cluster.h: what cmd_cluster.c shares with the other commands that
 * change a cluster (cmd_timeline.c): the cluster lock, loading an existing
 * cluster, and starting a compute with its progress printed.
 */
#ifndef STRATA_CLI_CMD_CLUSTER_H
#define STRATA_CLI_CMD_CLUSTER_H

#include "cli/cli.h"
#include "cli/local/cluster.h"

/* Takes the cluster lock (D/.lock, waiting up to 5 minutes); returns the
 * fd to close when done, or -1. */
int lock_cluster(const char *dir, cli_err *err);

/* Loads the cluster of an existing directory (a missing one is an error)
 * and exports its tokens (cluster_auth_export).  0 or -1. */
int load_existing(const char *dir_arg, cluster *c, cli_err *err);

/* Starts the compute c says (c->compute_name, cluster.h) unless it runs,
 * printing each step and its time, and waits until it accepts
 * connections.  0 or -1. */
int start_compute(const cluster *c, cli_err *err);

/* Named computes (cmd_timeline.c): `strata start compute NAME ...`,
 * `strata stop compute NAME`, and stopping them all at `strata down`
 * (continues past a failure; 0 or -1 with the first). */
int start_named_compute(const cli_opts *o, const cluster *c, cli_err *err);
int stop_named_compute(const cli_opts *o, const cluster *c, cli_err *err);
int stop_named_computes(const cluster *c, cli_err *err);

#endif
