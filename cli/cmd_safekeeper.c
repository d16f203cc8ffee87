/*
 * cmd_safekeeper.c: `strata safekeeper replace NAME` -- a safekeeper whose
 * disk is lost is replaced by an empty one with a new node id, in the same
 * place (name, ports), through a configuration change:
 *
 *   1. the survivors' state: the newest configuration and a donor (the one
 *      holding the most committed WAL);
 *   2. the new safekeeper's data directory gets a copy of the donor's WAL
 *      up to its committed position (sk_client_copy_timeline) and starts;
 *   3. joint configuration, generation g+1: old members, and the new set
 *      (the old one without NAME's node, with the new node); a majority of
 *      the old members must take it -- from then on a proposer needs a
 *      majority of both sets, so the new node gets streamed what it lacks;
 *   4. the new node catches up to the commit position seen after the
 *      switch;
 *   5. generation g+2: the new set alone (a majority of it must take it).
 *
 * Commits go on throughout: the walproposer is told to reconnect at each
 * switch, learns the configuration in its greeting and is elected again.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cluster.h"
#include "cli/proc.h"
#include "cli/safekeepers.h"
#include "cli/sk_client.h"
#include "common/durable.h"
#include "common/log.h"

#define CATCH_UP_TIMEOUT_MS (300 * 1000)
#define START_TIMEOUT_MS (30 * 1000)

static sk_target target_of(const cluster *c, const cluster_safekeeper *sk)
{
    /* The admin token when auth is on: configuration changes need it. */
    sk_target t = {.host = sk->host, .port = sk->pg_port, .tenant = c->tenant_id,
                   .timeline = c->timeline_id, .password = cluster_admin_token(c)};
    return t;
}

/* TIMELINE_STATUS of every running safekeeper but the one at index skip;
 * up[i] says whether st[i] holds an answer. */
static void query_survivors(const cluster *c, int skip, sk_state *st, bool *up)
{
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        up[i] = false;
        if (i == skip || safekeepers_pid(c, &c->sk[i]) == 0)
            continue;
        sk_target t = target_of(c, &c->sk[i]);
        cli_err e = {{0}};
        if (sk_client_status(&t, &st[i], &e) != 0)
            log_warn("%s: %s", c->sk[i].name, e.msg);
        else
            up[i] = true;
    }
}

/* The text of one set, for messages. */
static const char *set_text(const member *set, uint32_t n, char *buf, size_t cap)
{
    membership_format_set(set, n, buf, cap);
    return buf;
}

static bool in_set(const member *set, uint32_t n, uint64_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (set[i].node_id == id)
            return true;
    return false;
}

/* Switches every reachable safekeeper of the cluster to m; returns how many
 * of the nodes in `count_in` took it. */
static int switch_all(const cluster *c, const membership *m, const member *count_in,
                      uint32_t n_count)
{
    int took = 0;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        const cluster_safekeeper *sk = &c->sk[i];
        if (safekeepers_pid(c, sk) == 0)
            continue;
        sk_target t = target_of(c, sk);
        cli_err err = {{0}};
        if (sk_client_switch(&t, m, &err) != 0) {
            log_warn("%s did not take generation %u: %s", sk->name, m->generation, err.msg);
            continue;
        }
        if (in_set(count_in, n_count, (uint64_t)sk->id))
            took++;
    }
    return took;
}

static int replace(const char *dir_opt, const char *name)
{
    cli_err err = {{0}};
    char dir[PATH_MAX];
    cluster c;
    if (cluster_resolve_dir(dir_opt, dir, &err) != 0)
        return cli_fail(&err);
    int rc = cluster_load(dir, &c, &err);
    if (rc != 0)
        return rc > 0 ? (cli_err_set(&err, "no cluster in %s", dir), cli_fail(&err))
                      : cli_fail(&err);
    const cluster_safekeeper *found = cluster_find_safekeeper(&c, name);
    if (found == NULL) {
        cli_err_set(&err, "no safekeeper named '%s' (sk1, sk2, sk3)", name);
        return cli_fail(&err);
    }
    int idx = (int)(found - c.sk);
    cluster_safekeeper *sk = &c.sk[idx];
    pid_t pid = safekeepers_pid(&c, sk);
    if (pid != 0) {
        cli_err_set(&err,
                    "%s is running (pid %d): replace is for a safekeeper that is gone; "
                    "stop it first (strata stop %s --immediate)",
                    name, (int)pid, name);
        return cli_fail(&err);
    }

    /* 1. What the survivors hold. */
    sk_state st[CLUSTER_SAFEKEEPERS];
    bool up[CLUSTER_SAFEKEEPERS];
    query_survivors(&c, idx, st, up);
    int donor = -1, conf = -1;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        if (!up[i])
            continue;
        if (conf < 0 || st[i].mconf.generation > st[conf].mconf.generation)
            conf = i;
        /* commit_lsn is what it may serve: min(commit, flush). */
        if (donor < 0 || st[i].commit_lsn > st[donor].commit_lsn)
            donor = i;
    }
    if (donor < 0) {
        cli_err_set(&err, "no other safekeeper of the cluster answers: nothing to copy from");
        return cli_fail(&err);
    }
    membership old = st[conf].mconf;
    if (old.generation == 0) {
        /* Never changed: the configuration is the cluster's three. */
        old.n_members = CLUSTER_SAFEKEEPERS;
        for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
            old.members[i].node_id = (uint64_t)c.sk[i].id;
            snprintf(old.members[i].addr, sizeof old.members[i].addr, "%s:%d", c.sk[i].host,
                     c.sk[i].pg_port);
        }
    }
    if (old.n_new_members > 0) {
        char t[MEMBERSHIP_TEXT_MAX];
        cli_err_set(&err,
                    "generation %u is a joint configuration (a change to %s did not finish); "
                    "finish or undo it before replacing another safekeeper",
                    old.generation, set_text(old.new_members, old.n_new_members, t, sizeof t));
        return cli_fail(&err);
    }
    uint64_t dead = (uint64_t)sk->id;
    if (!in_set(old.members, old.n_members, dead)) {
        char t[MEMBERSHIP_TEXT_MAX];
        cli_err_set(&err, "%s (node %" PRIu64 ") is not a member of generation %u (%s)", name,
                    dead, old.generation, set_text(old.members, old.n_members, t, sizeof t));
        return cli_fail(&err);
    }
    uint64_t new_id = 0;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if ((uint64_t)c.sk[i].id > new_id)
            new_id = (uint64_t)c.sk[i].id;
    for (uint32_t i = 0; i < old.n_members; i++)
        if (old.members[i].node_id > new_id)
            new_id = old.members[i].node_id;
    new_id++;
    printf("replacing %s (node %" PRIu64 ") by node %" PRIu64 "; donor %s; configuration "
           "generation %u\n",
           name, dead, new_id, c.sk[donor].name, old.generation);

    /* 2. An empty data directory with a copy of the donor's WAL. */
    char datadir[PATH_MAX], aside[PATH_MAX + 64];
    if (cluster_path(&c, name, datadir, &err) != 0)
        return cli_fail(&err);
    struct stat sb;
    if (stat(datadir, &sb) == 0) {
        snprintf(aside, sizeof aside, "%s.replaced-node%" PRIu64 "-%ld", datadir, dead,
                 (long)time(NULL));
        int rc = durable_rename(datadir, aside);
        if (rc != 0) {
            cli_err_set(&err, "move %s aside: %s", datadir, strerror(-rc));
            return cli_fail(&err);
        }
        printf("moved the old data directory to %s\n", aside);
    }
    if (mkdir(datadir, 0750) != 0) {
        cli_err_set(&err, "mkdir %s: %s", datadir, strerror(errno));
        return cli_fail(&err);
    }
    sk_target dt = target_of(&c, &c.sk[donor]);
    lsn_t copied = 0;
    if (sk_client_copy_timeline(&dt, datadir, new_id, &copied, &err) != 0)
        return cli_fail(&err);
    sk->id = (int)new_id;
    if (cluster_save(&c, &err) != 0)
        return cli_fail(&err);
    if (safekeepers_start(&c, sk, &err) != 0 ||
        safekeepers_wait_ready(&c, sk, START_TIMEOUT_MS, &err) != 0)
        return cli_fail(&err);
    char l[LSN_FMT_LEN];
    printf("%s started as node %" PRIu64 " with WAL up to %s\n", name, new_id,
           lsn_format(copied, l));

    /* 3. Joint configuration. */
    membership joint = old;
    joint.generation = old.generation + 1;
    joint.n_new_members = 0;
    for (uint32_t i = 0; i < old.n_members; i++) {
        member m = old.members[i];
        if (m.node_id == dead) {
            m.node_id = new_id;
            snprintf(m.addr, sizeof m.addr, "%s:%d", sk->host, sk->pg_port);
        }
        joint.new_members[joint.n_new_members++] = m;
    }
    int took = switch_all(&c, &joint, old.members, old.n_members);
    if (took < (int)old.n_members / 2 + 1) {
        cli_err_set(&err,
                    "only %d of the %u old members took joint generation %u: no majority; the "
                    "cluster keeps generation %u where it was not taken",
                    took, old.n_members, joint.generation, old.generation);
        return cli_fail(&err);
    }
    char a[MEMBERSHIP_TEXT_MAX], b[MEMBERSHIP_TEXT_MAX];
    printf("generation %u: joint %s -> %s\n", joint.generation,
           set_text(joint.members, joint.n_members, a, sizeof a),
           set_text(joint.new_members, joint.n_new_members, b, sizeof b));

    /* 4. The new member catches up to what is committed now. */
    lsn_t target = 0;
    query_survivors(&c, idx, st, up);
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if (up[i] && st[i].commit_lsn > target)
            target = st[i].commit_lsn;
    sk_target nt = target_of(&c, sk);
    long long deadline = proc_now_ms() + CATCH_UP_TIMEOUT_MS, next_print = 0;
    for (;;) {
        sk_state s;
        cli_err e = {{0}};
        lsn_t have = sk_client_status(&nt, &s, &e) == 0 ? s.flush_lsn : 0;
        if (have >= target)
            break;
        long long now = proc_now_ms();
        if (now >= deadline) {
            char h[LSN_FMT_LEN], t[LSN_FMT_LEN];
            cli_err_set(&err,
                        "%s did not catch up within %d s (has %s of %s); is a compute running? "
                        "generation %u stays joint",
                        name, CATCH_UP_TIMEOUT_MS / 1000, lsn_format(have, h),
                        lsn_format(target, t), joint.generation);
            return cli_fail(&err);
        }
        if (now >= next_print) {
            char h[LSN_FMT_LEN], t[LSN_FMT_LEN];
            printf("  %s at %s, catching up to %s\n", name, lsn_format(have, h),
                   lsn_format(target, t));
            fflush(stdout);
            next_print = now + 1000;
        }
        proc_sleep_ms(100);
    }
    printf("%s caught up to %s\n", name, lsn_format(target, l));

    /* 5. The new configuration alone. */
    membership final = {.generation = joint.generation + 1, .n_members = joint.n_new_members};
    memcpy(final.members, joint.new_members, sizeof final.members);
    took = switch_all(&c, &final, final.members, final.n_members);
    if (took < (int)final.n_members / 2 + 1) {
        cli_err_set(&err, "only %d of the %u new members took generation %u", took,
                    final.n_members, final.generation);
        return cli_fail(&err);
    }
    printf("generation %u: members %s\n", final.generation,
           set_text(final.members, final.n_members, a, sizeof a));
    return CLI_OK;
}

int cmd_safekeeper(const cli_opts *o)
{
    const char *dir = o->dir, *sub = NULL, *name = NULL;
    for (int i = 0; i < o->argc; i++) {
        const char *arg = o->argv[i];
        if (strcmp(arg, "--dir") == 0 && i + 1 < o->argc)
            dir = o->argv[++i];
        else if (strncmp(arg, "--dir=", 6) == 0)
            dir = arg + 6;
        else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            printf("usage: strata safekeeper replace NAME [--dir D]\n");
            return CLI_OK;
        } else if (arg[0] == '-') {
            fprintf(stderr, "strata safekeeper: unknown option '%s'\n", arg);
            return CLI_USAGE;
        } else if (sub == NULL)
            sub = arg;
        else if (name == NULL)
            name = arg;
        else {
            fprintf(stderr, "strata safekeeper: unexpected argument '%s'\n", arg);
            return CLI_USAGE;
        }
    }
    if (sub == NULL || strcmp(sub, "replace") != 0 || name == NULL) {
        fprintf(stderr, "usage: strata safekeeper replace NAME [--dir D]\n");
        return CLI_USAGE;
    }
    return replace(dir, name);
}
