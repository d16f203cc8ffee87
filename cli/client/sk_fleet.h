/*
 * sk_fleet.h: the safekeepers a membership change talks to, by address --
 * their states, a configuration switch on all of them, the wait for the
 * sync position (sk_change.h) -- with progress on stdout; and a new node
 * of a local cluster seeded from a donor (sk_fleet_seed_node).
 *
 * For: `strata safekeeper replace` and `recover` on a local cluster
 * (cmd/cmd_safekeeper.c, cmd/cmd_sk_recover.c, which know which processes
 * run) and `strata safekeeper join` in a stack without cluster.json
 * (cmd/cmd_sk_join.c, which asks every address).  Blocking, libpq through
 * sk_client.h.
 * Not for: the rules of a change (sk_change.h).
 */
#ifndef STRATA_CLI_SK_FLEET_H
#define STRATA_CLI_SK_FLEET_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "cli/client/sk_change.h"
#include "cli/client/sk_client.h"

/* One place a safekeeper runs at. */
typedef struct sk_fleet_node {
    char name[80]; /* "sk2", or host:port: for messages */
    char host[CLUSTER_HOST_LEN];
    int port;
    uint64_t node_id; /* the node there now */
    bool live;        /* worth asking (a local process runs, or nobody knows) */
} sk_fleet_node;

typedef struct sk_fleet {
    int n;
    sk_fleet_node node[CLUSTER_SAFEKEEPERS];
    strata_id tenant;
    strata_id timeline;
    const char *password; /* the admin token, or NULL */
    bool quiet;           /* a node that does not answer is not worth a warning */
} sk_fleet;

/* The fleet of a local cluster: its three, live where a process runs. */
void sk_fleet_of_cluster(const cluster *c, sk_fleet *f);

/* Where node i listens, for sk_client. */
sk_target sk_fleet_target(const sk_fleet *f, int i);

/* "host:port" of node i, as configurations name it. */
void sk_fleet_addr(const sk_fleet *f, int i, char *buf, size_t cap);

/* TIMELINE_STATUS of every live node but skip (-1: none); up[i] says
 * whether st[i] holds an answer. */
void sk_fleet_query(const sk_fleet *f, int skip, sk_state *st, bool *up);

/* The positions sk_change decides by, one per node. */
void sk_fleet_positions(const sk_fleet *f, const sk_state *st, const bool *up, sk_change_pos *pos);

/* Switches every live node to m; returns how many nodes of count_in took
 * it.  A node that refuses is logged and skipped. */
int sk_fleet_switch(const sk_fleet *f, const membership *m, const member *count_in,
                    uint32_t n_count);

/* A cluster that never changed its configuration (generation 0, where a
 * node is its address and the copy of one would vote at once as its
 * donor's twin) first gets generation 1, the same members written down,
 * taken by a majority of them; *m becomes it.  0, or -1 with err. */
int sk_fleet_make_explicit(const sk_fleet *f, membership *m, cli_err *err);

/* The joint configuration, taken by a majority of its old members (again,
 * on a re-run: the same joint configuration twice is a no-op).  0, or -1
 * with err. */
int sk_fleet_switch_joint(const sk_fleet *f, const membership *joint, cli_err *err);

/* Reads the sync position from a majority of joint's old members, then
 * waits (progress every second, at most timeout_ms) until a majority of
 * its new set holds it.  name is the node coming in, for messages.  0, or
 * -1 with err. */
int sk_fleet_wait_synced(const sk_fleet *f, const char *name, const membership *joint,
                         int timeout_ms, cli_err *err);

/* Generation + 1 with joint's new set (finish) or its old one (roll back),
 * taken by a majority of that set.  0, or -1 with err. */
int sk_fleet_settle(const sk_fleet *f, const membership *joint, bool finish, cli_err *err);

/* The text of one set, for messages; returns buf. */
const char *sk_fleet_set_text(const member *set, uint32_t n, char *buf, size_t cap);

/* True when node id is in set (n members). */
bool sk_fleet_in_set(const member *set, uint32_t n, uint64_t id);

/* ---- a local cluster's nodes, for `strata safekeeper replace|recover` ---- */

/* Where the cluster's safekeeper sk listens, with the admin token (when
 * auth is on: configuration changes need it). */
sk_target sk_fleet_target_of(const cluster *c, const cluster_safekeeper *sk);

/* The highest node id the cluster or configuration m knows: the ids above
 * it were never used. */
uint64_t sk_fleet_highest_id(const cluster *c, const membership *m);

/*
 * A new node in slot idx: its data directory moved aside (named after
 * node dead), a new one holding a copy of donor's WAL (cs: the
 * configuration and term the copy takes, NULL: the donor's), the slot's id
 * set to new_id and cluster.json saved, then the node started and waited
 * for.  Prints each step.  0, or -1 with err.
 */
int sk_fleet_seed_node(cluster *c, int idx, int donor, uint64_t dead, uint64_t new_id,
                       const sk_copy_state *cs, cli_err *err);

#endif
