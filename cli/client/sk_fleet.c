/*
 * sk_fleet.c: the safekeepers of a membership change, by address, and the
 * local cluster's nodes a change seeds.  See sk_fleet.h.
 */
#include "cli/client/sk_fleet.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli/local/proc.h"
#include "cli/local/safekeepers.h"
#include "base/durable.h"
#include "base/log.h"
#include "base/strata_assert.h"

/* How long a seeded node may take to answer after its start. */
#define SEED_START_TIMEOUT_MS (30 * 1000)

void sk_fleet_of_cluster(const cluster *c, sk_fleet *f)
{
    memset(f, 0, sizeof *f);
    f->n = CLUSTER_SAFEKEEPERS;
    f->tenant = c->tenant_id;
    f->timeline = c->timeline_id;
    /* The admin token when auth is on: configuration changes need it. */
    f->password = cluster_admin_token(c);
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        sk_fleet_node *n = &f->node[i];
        snprintf(n->name, sizeof n->name, "%s", c->sk[i].name);
        snprintf(n->host, sizeof n->host, "%s", c->sk[i].host);
        n->port = c->sk[i].pg_port;
        n->node_id = (uint64_t)c->sk[i].id;
        n->live = safekeepers_pid(c, &c->sk[i]) != 0;
    }
}

sk_target sk_fleet_target(const sk_fleet *f, int i)
{
    sk_target t = {.host = f->node[i].host,
                   .port = f->node[i].port,
                   .tenant = f->tenant,
                   .timeline = f->timeline,
                   .password = f->password};
    return t;
}

void sk_fleet_addr(const sk_fleet *f, int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s:%d", f->node[i].host, f->node[i].port);
}

void sk_fleet_query(const sk_fleet *f, int skip, sk_state *st, bool *up)
{
    for (int i = 0; i < f->n; i++) {
        up[i] = false;
        if (i == skip || !f->node[i].live)
            continue;
        sk_target t = sk_fleet_target(f, i);
        cli_err e = {{0}};
        up[i] = sk_client_status(&t, &st[i], &e) == 0;
        if (!up[i] && !f->quiet)
            log_warn("%s: %s", f->node[i].name, e.msg);
    }
}

void sk_fleet_positions(const sk_fleet *f, const sk_state *st, const bool *up, sk_change_pos *pos)
{
    for (int i = 0; i < f->n; i++) {
        pos[i] = (sk_change_pos){.up = up[i], .node_id = f->node[i].node_id};
        if (!up[i])
            continue;
        pos[i].flush_lsn = st[i].flush_lsn;
        pos[i].commit_lsn = st[i].commit_lsn;
        pos[i].last_log_term = term_history_last_log_term(&st[i].history, st[i].flush_lsn);
        pos[i].term = st[i].term;
    }
}

const char *sk_fleet_set_text(const member *set, uint32_t n, char *buf, size_t cap)
{
    membership_format_set(set, n, buf, cap);
    return buf;
}

bool sk_fleet_in_set(const member *set, uint32_t n, uint64_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (set[i].node_id == id)
            return true;
    return false;
}

int sk_fleet_switch(const sk_fleet *f, const membership *m, const member *count_in,
                    uint32_t n_count)
{
    int took = 0;
    for (int i = 0; i < f->n; i++) {
        if (!f->node[i].live)
            continue;
        sk_target t = sk_fleet_target(f, i);
        cli_err err = {{0}};
        if (sk_client_switch(&t, m, &err) != 0) {
            log_warn("%s did not take generation %u: %s", f->node[i].name, m->generation, err.msg);
            continue;
        }
        if (sk_fleet_in_set(count_in, n_count, f->node[i].node_id))
            took++;
    }
    return took;
}

int sk_fleet_make_explicit(const sk_fleet *f, membership *m, cli_err *err)
{
    STRATA_ASSERT(m->generation == 0 && m->n_new_members == 0);
    membership one = *m;
    one.generation = 1;
    int took = sk_fleet_switch(f, &one, one.members, one.n_members);
    if (took < (int)one.n_members / 2 + 1)
        return cli_err_set(err, "only %d of the %u members took generation 1", took, one.n_members);
    char a[MEMBERSHIP_TEXT_MAX];
    printf("generation 1: members %s (the first configuration, written down)\n",
           sk_fleet_set_text(one.members, one.n_members, a, sizeof a));
    fflush(stdout);
    *m = one;
    return 0;
}

int sk_fleet_switch_joint(const sk_fleet *f, const membership *joint, cli_err *err)
{
    int took = sk_fleet_switch(f, joint, joint->members, joint->n_members);
    if (took < (int)joint->n_members / 2 + 1)
        return cli_err_set(err,
                           "only %d of the %u old members took joint generation %u: no majority; "
                           "run the command again once they answer",
                           took, joint->n_members, joint->generation);
    char a[MEMBERSHIP_TEXT_MAX], b[MEMBERSHIP_TEXT_MAX];
    printf("generation %u: joint %s -> %s\n", joint->generation,
           sk_fleet_set_text(joint->members, joint->n_members, a, sizeof a),
           sk_fleet_set_text(joint->new_members, joint->n_new_members, b, sizeof b));
    fflush(stdout);
    return 0;
}

static void print_wait(const sk_change_pos *target, uint32_t synced, uint32_t of)
{
    char h[LSN_FMT_LEN];
    if (target->up)
        printf("  %u of %u new members at %s\n", synced, of, lsn_format(target->flush_lsn, h));
    else
        printf("  waiting for a majority of the old members to answer\n");
    fflush(stdout);
}

int sk_fleet_wait_synced(const sk_fleet *f, const char *name, const membership *joint,
                         int timeout_ms, cli_err *err)
{
    long long deadline = proc_now_ms() + timeout_ms, next_print = 0;
    sk_change_pos target = {.up = false};
    char h[LSN_FMT_LEN];
    for (;;) {
        sk_state st[CLUSTER_SAFEKEEPERS];
        bool up[CLUSTER_SAFEKEEPERS];
        sk_change_pos pos[CLUSTER_SAFEKEEPERS];
        sk_fleet_query(f, -1, st, up);
        sk_fleet_positions(f, st, up, pos);
        if (!target.up &&
            sk_change_sync_position(joint->members, joint->n_members, pos, f->n, &target))
            printf("sync position %s (term %" PRIu64 "), from a majority of the old members\n",
                   lsn_format(target.flush_lsn, h), target.last_log_term);
        uint32_t synced = target.up
                              ? sk_change_count_synced(joint->new_members, joint->n_new_members,
                                                       pos, f->n, &target)
                              : 0;
        if (synced >= joint->n_new_members / 2 + 1)
            break;
        long long now = proc_now_ms();
        if (now >= deadline)
            return cli_err_set(err,
                               "%s: %s within %d s; generation %u stays joint (is a compute "
                               "running? run the command again to resume)",
                               name,
                               target.up ? "no majority of the new set reached the sync position"
                                         : "no majority of the old members answered",
                               timeout_ms / 1000, joint->generation);
        if (now >= next_print) {
            print_wait(&target, synced, joint->n_new_members);
            next_print = now + 1000;
        }
        proc_sleep_ms(100);
    }
    printf("%s caught up: a majority of the new set holds %s\n", name,
           lsn_format(target.flush_lsn, h));
    fflush(stdout);
    return 0;
}

int sk_fleet_settle(const sk_fleet *f, const membership *joint, bool finish, cli_err *err)
{
    membership m;
    sk_change_settle(joint, finish, &m);
    int took = sk_fleet_switch(f, &m, m.members, m.n_members);
    if (took < (int)m.n_members / 2 + 1)
        return cli_err_set(err, "only %d of the %u members took generation %u", took, m.n_members,
                           m.generation);
    char a[MEMBERSHIP_TEXT_MAX];
    printf("generation %u: members %s%s\n", m.generation,
           sk_fleet_set_text(m.members, m.n_members, a, sizeof a),
           finish ? "" : " (the unfinished change rolled back)");
    fflush(stdout);
    return 0;
}

/* ---- a local cluster's nodes ---- */

sk_target sk_fleet_target_of(const cluster *c, const cluster_safekeeper *sk)
{
    /* The admin token when auth is on: configuration changes need it. */
    sk_target t = {.host = sk->host,
                   .port = sk->pg_port,
                   .tenant = c->tenant_id,
                   .timeline = c->timeline_id,
                   .password = cluster_admin_token(c)};
    return t;
}

/* The highest node id the cluster or configuration m knows: the ids above
 * it were never used. */
uint64_t sk_fleet_highest_id(const cluster *c, const membership *m)
{
    uint64_t id = 0;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if ((uint64_t)c->sk[i].id > id)
            id = (uint64_t)c->sk[i].id;
    member all[2 * MEMBERSHIP_MAX];
    int n = membership_union(m, all);
    for (int i = 0; i < n; i++)
        if (all[i].node_id > id)
            id = all[i].node_id;
    return id;
}

int sk_fleet_seed_node(cluster *c, int idx, int donor, uint64_t dead, uint64_t new_id,
                       const sk_copy_state *cs, cli_err *err)
{
    cluster_safekeeper *sk = &c->sk[idx];
    char datadir[PATH_MAX], aside[PATH_MAX + 64];
    if (cluster_path(c, sk->name, datadir, err) != 0)
        return -1;
    struct stat sb;
    if (stat(datadir, &sb) == 0) {
        snprintf(aside, sizeof aside, "%s.replaced-node%" PRIu64 "-%ld", datadir, dead,
                 (long)time(NULL));
        int rc = durable_rename(datadir, aside);
        if (rc != 0)
            return cli_err_set(err, "move %s aside: %s", datadir, strerror(-rc));
        printf("moved the old data directory to %s\n", aside);
    }
    if (mkdir(datadir, 0750) != 0)
        return cli_err_set(err, "mkdir %s: %s", datadir, strerror(errno));
    sk_target dt = sk_fleet_target_of(c, &c->sk[donor]);
    lsn_t copied = 0;
    if (sk_client_copy_timeline(&dt, datadir, new_id, cs, &copied, err) != 0)
        return -1;
    sk->id = (int)new_id;
    if (cluster_save(c, err) != 0)
        return -1;
    if (safekeepers_start(c, sk, err) != 0 ||
        safekeepers_wait_ready(c, sk, SEED_START_TIMEOUT_MS, err) != 0)
        return -1;
    char l[LSN_FMT_LEN];
    printf("%s started as node %" PRIu64 " with WAL up to %s\n", sk->name, new_id,
           lsn_format(copied, l));
    fflush(stdout);
    return 0;
}
