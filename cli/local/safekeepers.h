/*
 * safekeepers.h: running the cluster's three strata-safekeeper daemons.
 *
 * Safekeeper skN keeps its data in D/skN, logs to D/skN.log and has its pid
 * in D/skN.pid.  It listens on the ports of cluster.json.
 *
 * Not for: the safekeeper itself (safekeeper/), or the order in which
 * components start (cmd_cluster.c).
 */
#ifndef STRATA_CLI_SAFEKEEPERS_H
#define STRATA_CLI_SAFEKEEPERS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "proto/membership.h"

/* What a safekeeper reports about the cluster's timeline. */
typedef struct safekeeper_timeline {
    bool known; /* false: not running, unreachable, or no such timeline yet */
    uint64_t term;
    lsn_t flush_lsn;
    lsn_t commit_lsn;
    uint64_t node_id;
    membership mconf;       /* the timeline's configuration as this one holds it */
    uint64_t wal_bytes;     /* its segment files on disk */
    uint64_t max_wal_bytes; /* the safekeeper's --max-wal-bytes; 0: no bound */
    bool wal_limited;       /* refusing appends at that bound */
    bool failed;            /* its WAL storage failed: it serves no proposer until restarted */
    bool wal_backup;        /* the safekeeper has --remote */
    lsn_t backup_lsn;       /* WAL below it is in the object store */
    bool backup_failing;    /* the last upload attempt failed */
    char backup_error[256]; /* its error, "" if none */
} safekeeper_timeline;

/* The pid of the running safekeeper, or 0 when it is not running. */
pid_t safekeepers_pid(const cluster *c, const cluster_safekeeper *sk);

/* Checks that the safekeeper program exists.  0 or -1 with a reason. */
int safekeepers_preflight(cli_err *err);

/* Starts sk unless it runs already; does not wait.  0 or -1 with reason. */
int safekeepers_start(const cluster *c, const cluster_safekeeper *sk, cli_err *err);

/* Waits (bounded) until sk accepts connections on both ports.  0 or -1. */
int safekeepers_wait_ready(const cluster *c, const cluster_safekeeper *sk, int timeout_ms,
                           cli_err *err);

/* Stops sk: SIGTERM then, after a bounded wait, SIGKILL; immediate: SIGKILL
 * at once.  Not running is success.  0 or -1 with a reason. */
int safekeepers_stop(const cluster *c, const cluster_safekeeper *sk, bool immediate, cli_err *err);

/* Asks sk's HTTP API about the cluster's timeline.  Never fails: out->known
 * says whether an answer came. */
void safekeepers_query(const cluster *c, const cluster_safekeeper *sk, safekeeper_timeline *out);

/* "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3": the safekeepers' pg ports. */
void safekeepers_list(const cluster *c, char *buf, size_t len);

#endif
