/*
 * cluster.h: the local cluster's state file, D/cluster.json.
 *
 * Holds what must stay the same across `strata up` runs: the tenant and
 * timeline ids, every component's ports, the user postgres runs as, the
 * remote store's URL (cluster_remote.h), and the LSN at which the pageserver
 * imported the compute's data directory.
 * Written at the first `up`, and again when that import happens or ports
 * move (atomically, with durable_write_file: temporary file, fsync, rename,
 * directory fsync); read by every other command.
 *
 * Authentication (docs/operations.md): a cluster is made with auth on
 * unless `strata up --no-auth` says otherwise; cluster.json records which
 * ("auth": true/false; a file without the key predates auth and is off).
 * With auth, D/auth.json (mode 0600) is the daemons' auth file: a random
 * admin token and a random token of the cluster's tenant.  Every daemon
 * gets it with --auth-file; the compute holds the tenant's token only;
 * the CLI and the pageserver's WAL receivers use the admin token.
 *
 * Also the cluster lock, D/.lock (cluster_lock).
 *
 * Not for: runtime state (pids live in D/<name>.pid, see proc.h) or
 * anything about starting processes.
 */
#ifndef STRATA_CLI_CLUSTER_H
#define STRATA_CLI_CLUSTER_H

#include <limits.h>
#include <stdbool.h>

#include "cli/cli.h"
#include "base/lsn.h"

#define CLUSTER_SAFEKEEPERS 3
#define CLUSTER_FILE "cluster.json"
#define CLUSTER_FORMAT_VERSION 1

/* With --port-base N: compute N, sk<i> pg N+2i-1 and http N+2i, pageserver
 * pg N+7 and http N+8. */
#define CLUSTER_PORT_SPAN 9

#define CLUSTER_AUTH_FILE "auth.json"
/* A token: 64 hex digits (256 random bits), NUL included. */
#define CLUSTER_TOKEN_LEN 65

/* A remote store URL (file:///PATH or s3://BUCKET/PREFIX), NUL included. */
#define CLUSTER_REMOTE_LEN 4200

/* A compute's or timeline's name, NUL included (computes.h, timelines.h). */
#define CLUSTER_COMPUTE_NAME_LEN 32

/* A host name or address (no port), NUL included. */
#define CLUSTER_HOST_LEN 128

typedef struct cluster_safekeeper {
    char name[8];                /* "sk1".."sk3" */
    int id;                      /* node id, 1..3 */
    char host[CLUSTER_HOST_LEN]; /* "127.0.0.1" (not in cluster.json) */
    int pg_port;
    int http_port;
} cluster_safekeeper;

typedef struct cluster {
    char dir[PATH_MAX]; /* absolute */
    strata_id tenant_id;
    strata_id timeline_id;
    char pg_user[64]; /* OS user postgres runs as and its superuser name */
    int compute_port;
    int pageserver_pg_port;
    int pageserver_http_port;
    /* Set once the pageserver holds the timeline: the LSN it imported the
     * compute's cleanly shut down data directory at. */
    bool pageserver_imported;
    lsn_t pageserver_import_lsn;
    cluster_safekeeper sk[CLUSTER_SAFEKEEPERS];
    /* Auth on every daemon port and the admin API; the tokens are read
     * from D/auth.json by cluster_load (not kept in cluster.json). */
    bool auth;
    /* The remote store (cluster_remote.h); "" only in a cluster.json from
     * before remote storage, until the next `up` gives it the default. */
    char remote[CLUSTER_REMOTE_LEN];
    char admin_token[CLUSTER_TOKEN_LEN];
    char tenant_token[CLUSTER_TOKEN_LEN];
    /* Where the daemons are and how the compute listens.  Not in
     * cluster.json: the local cluster is 127.0.0.1 throughout
     * (cluster_load, cluster_init); a compute started against remote
     * daemons (compute_remote.h) takes hosts from its environment. */
    char pageserver_host[CLUSTER_HOST_LEN];
    char compute_listen[CLUSTER_HOST_LEN]; /* its listen_addresses */
    /* compute_start_from_pageserver prepares the data directory but does
     * not start postgres: the caller execs it (compute_remote.h). */
    bool compute_exec;
    /* Which compute the compute_* functions (compute.h) act on: "" is the
     * default compute ("compute": D/compute, cluster.json's port and
     * timeline).  Otherwise a named compute (computes.h): this cluster is
     * then a view made by computes_view, whose compute_port, timeline_id
     * and pageserver_import_lsn (the timeline's start LSN) are the named
     * compute's.  A view is never saved (cluster_save asserts it). */
    char compute_name[CLUSTER_COMPUTE_NAME_LEN];
} cluster;

/*
 * Makes dir absolute (creating nothing) into out, which has PATH_MAX bytes.
 * Returns 0, or -1 with a reason.
 */
int cluster_resolve_dir(const char *dir, char *out, cli_err *err);

/*
 * Reads D/cluster.json.  Returns 1 when the file does not exist (c is
 * untouched), 0 on success, -1 with a reason when it is unreadable or
 * malformed.  dir must be absolute (cluster_resolve_dir).
 */
int cluster_load(const char *dir, cluster *c, cli_err *err);

/*
 * cluster_resolve_dir, then cluster_load: the prologue of every command on
 * a cluster directory given on the command line.  Returns 0, 1 when there
 * is no cluster there (only c->dir is set: the resolved directory), or -1
 * with a reason.
 */
int cluster_load_dir(const char *dir_arg, cluster *c, cli_err *err);

/* The same for a command that needs the cluster: a missing one is an error
 * naming `strata up --dir`, and the tokens are exported
 * (cluster_auth_export).  Returns 0 or -1 with a reason. */
int cluster_load_existing(const char *dir_arg, cluster *c, cli_err *err);

/* Takes the cluster lock, an exclusive flock on D/.lock, waiting up to five
 * minutes for another command that holds it, so two commands that change
 * what runs never interleave on one cluster.  Returns the fd to close when
 * done, or -1 with a reason. */
int cluster_lock(const char *dir, cli_err *err);

/*
 * Fills c for a new cluster under dir: fresh ids, ports from port_base or,
 * when port_base is 0, free ephemeral ports picked now.  Writes nothing.
 */
int cluster_init(const char *dir, int port_base, cluster *c, cli_err *err);

/* Sets every host and the compute's listen address to 127.0.0.1. */
void cluster_set_local_hosts(cluster *c);

/* Assigns ports port_base .. port_base+CLUSTER_PORT_SPAN-1. */
void cluster_assign_ports(cluster *c, int port_base);

/* Writes D/cluster.json durably.  Returns 0 or -1 with a reason. */
int cluster_save(const cluster *c, cli_err *err);

/*
 * Turns auth on: reads D/auth.json, or writes a new one (mode 0600, new
 * random tokens) when it does not exist, and sets c->auth and the tokens.
 * Does not save cluster.json.  Returns 0 or -1 with a reason.
 */
int cluster_auth_enable(cluster *c, cli_err *err);

/* The admin token, or NULL when auth is off. */
const char *cluster_admin_token(const cluster *c);

/*
 * Puts the cluster's tokens where the programs it starts look for them
 * (docs/operations.md): STRATA_SAFEKEEPER_PASSWORD and
 * STRATA_PAGESERVER_PASSWORD (the tenant's token: sync-safekeepers, the
 * basebackup, the compute's strata.conf) and PAGESERVER_SAFEKEEPER_PASSWORD
 * (the admin token: the pageserver's WAL receivers).  Nothing when auth is
 * off.  Returns 0 or -1 with a reason.
 */
int cluster_auth_export(const cluster *c, cli_err *err);

/* The safekeeper called name ("sk1"..), or NULL. */
const cluster_safekeeper *cluster_find_safekeeper(const cluster *c, const char *name);

/* Formats "<dir>/<rel>" into buf (PATH_MAX bytes); -1 if too long. */
int cluster_path(const cluster *c, const char *rel, char *buf, cli_err *err);

/* Picks a free TCP port on 127.0.0.1 (bound and released at once).  0 or -1. */
int cluster_pick_free_port(int *port, cli_err *err);

/* The libpq connection string of the compute. */
void cluster_compute_connstr(const cluster *c, char *buf, size_t len);

#endif
