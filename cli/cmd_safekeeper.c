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
 *
 * `strata safekeeper recover --from NAME --confirm` is for two lost at once,
 * when no majority of the old members exists (see recover() below).
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
#include "base/durable.h"
#include "base/log.h"
#include "base/strata_assert.h"

#define CATCH_UP_TIMEOUT_MS (300 * 1000)
#define START_TIMEOUT_MS (30 * 1000)

static sk_target target_of(const cluster *c, const cluster_safekeeper *sk)
{
    /* The admin token when auth is on: configuration changes need it. */
    sk_target t = {.host = sk->host,
                   .port = sk->pg_port,
                   .tenant = c->tenant_id,
                   .timeline = c->timeline_id,
                   .password = cluster_admin_token(c)};
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

/* What a replacement works from: the cluster, the safekeeper being replaced
 * (its index), the survivors' newest configuration, the donor and the new
 * node id. */
typedef struct replace_plan {
    cluster c;
    int idx;
    int donor;
    membership old;
    uint64_t dead, new_id;
    bool to_flush; /* copy the donor's WAL up to its flush, not its commit */
} replace_plan;

/* Step 0: the named safekeeper exists and is not running. */
static int load_target(const char *dir_opt, const char *name, replace_plan *p, cli_err *err)
{
    char dir[PATH_MAX];
    if (cluster_resolve_dir(dir_opt, dir, err) != 0)
        return -1;
    int rc = cluster_load(dir, &p->c, err);
    if (rc > 0)
        cli_err_set(err, "no cluster in %s", dir);
    if (rc != 0)
        return -1;
    const cluster_safekeeper *found = cluster_find_safekeeper(&p->c, name);
    if (found == NULL) {
        cli_err_set(err, "no safekeeper named '%s' (sk1, sk2, sk3)", name);
        return -1;
    }
    p->idx = (int)(found - p->c.sk);
    pid_t pid = safekeepers_pid(&p->c, found);
    if (pid != 0) {
        cli_err_set(err,
                    "%s is running (pid %d): replace is for a safekeeper that is gone; "
                    "stop it first (strata stop %s --immediate)",
                    name, (int)pid, name);
        return -1;
    }
    p->dead = (uint64_t)found->id;
    return 0;
}

/* Step 1: the survivors' newest configuration and the donor (most committed
 * WAL); the configuration must be settled and hold the node being replaced. */
static int survey(replace_plan *p, const char *name, cli_err *err)
{
    const cluster *c = &p->c;
    sk_state st[CLUSTER_SAFEKEEPERS];
    bool up[CLUSTER_SAFEKEEPERS];
    query_survivors(c, p->idx, st, up);
    int conf = -1;
    p->donor = -1;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        if (!up[i])
            continue;
        if (conf < 0 || st[i].mconf.generation > st[conf].mconf.generation)
            conf = i;
        /* commit_lsn is what it may serve: min(commit, flush). */
        if (p->donor < 0 || st[i].commit_lsn > st[p->donor].commit_lsn)
            p->donor = i;
    }
    if (p->donor < 0) {
        cli_err_set(err, "no other safekeeper of the cluster answers: nothing to copy from");
        return -1;
    }
    membership *old = &p->old;
    *old = st[conf].mconf;
    if (old->generation == 0) {
        /* Never changed: the configuration is the cluster's three. */
        old->n_members = CLUSTER_SAFEKEEPERS;
        for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
            old->members[i].node_id = (uint64_t)c->sk[i].id;
            snprintf(old->members[i].addr, sizeof old->members[i].addr, "%s:%d", c->sk[i].host,
                     c->sk[i].pg_port);
        }
    }
    char t[MEMBERSHIP_TEXT_MAX];
    if (old->n_new_members > 0) {
        cli_err_set(err,
                    "generation %u is a joint configuration (a change to %s did not finish); "
                    "finish or undo it before replacing another safekeeper",
                    old->generation, set_text(old->new_members, old->n_new_members, t, sizeof t));
        return -1;
    }
    if (!in_set(old->members, old->n_members, p->dead)) {
        cli_err_set(err, "%s (node %" PRIu64 ") is not a member of generation %u (%s)", name,
                    p->dead, old->generation, set_text(old->members, old->n_members, t, sizeof t));
        return -1;
    }
    /* A node id never used before, by the cluster or the configuration. */
    p->new_id = 0;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if ((uint64_t)c->sk[i].id > p->new_id)
            p->new_id = (uint64_t)c->sk[i].id;
    for (uint32_t i = 0; i < old->n_members; i++)
        if (old->members[i].node_id > p->new_id)
            p->new_id = old->members[i].node_id;
    p->new_id++;
    return 0;
}

/* Step 2: an empty data directory (the old one moved aside) with a copy of
 * the donor's WAL; the new node starts in the old one's place. */
static int seed_new_node(replace_plan *p, const char *name, cli_err *err)
{
    cluster_safekeeper *sk = &p->c.sk[p->idx];
    char datadir[PATH_MAX], aside[PATH_MAX + 64];
    if (cluster_path(&p->c, name, datadir, err) != 0)
        return -1;
    struct stat sb;
    if (stat(datadir, &sb) == 0) {
        snprintf(aside, sizeof aside, "%s.replaced-node%" PRIu64 "-%ld", datadir, p->dead,
                 (long)time(NULL));
        int rc = durable_rename(datadir, aside);
        if (rc != 0) {
            cli_err_set(err, "move %s aside: %s", datadir, strerror(-rc));
            return -1;
        }
        printf("moved the old data directory to %s\n", aside);
    }
    if (mkdir(datadir, 0750) != 0) {
        cli_err_set(err, "mkdir %s: %s", datadir, strerror(errno));
        return -1;
    }
    sk_target dt = target_of(&p->c, &p->c.sk[p->donor]);
    lsn_t copied = 0;
    if (sk_client_copy_timeline(&dt, datadir, p->new_id, p->to_flush, &copied, err) != 0)
        return -1;
    sk->id = (int)p->new_id;
    if (cluster_save(&p->c, err) != 0)
        return -1;
    if (safekeepers_start(&p->c, sk, err) != 0 ||
        safekeepers_wait_ready(&p->c, sk, START_TIMEOUT_MS, err) != 0)
        return -1;
    char l[LSN_FMT_LEN];
    printf("%s started as node %" PRIu64 " with WAL up to %s\n", name, p->new_id,
           lsn_format(copied, l));
    return 0;
}

/* Step 3: generation g+1, the old members and the new set, taken by a
 * majority of the old members. */
static int switch_joint(const replace_plan *p, membership *joint, cli_err *err)
{
    const cluster_safekeeper *sk = &p->c.sk[p->idx];
    *joint = p->old;
    joint->generation = p->old.generation + 1;
    joint->n_new_members = 0;
    for (uint32_t i = 0; i < p->old.n_members; i++) {
        member m = p->old.members[i];
        if (m.node_id == p->dead) {
            m.node_id = p->new_id;
            snprintf(m.addr, sizeof m.addr, "%s:%d", sk->host, sk->pg_port);
        }
        joint->new_members[joint->n_new_members++] = m;
    }
    int took = switch_all(&p->c, joint, p->old.members, p->old.n_members);
    if (took < (int)p->old.n_members / 2 + 1) {
        cli_err_set(err,
                    "only %d of the %u old members took joint generation %u: no majority; the "
                    "cluster keeps generation %u where it was not taken",
                    took, p->old.n_members, joint->generation, p->old.generation);
        return -1;
    }
    char a[MEMBERSHIP_TEXT_MAX], b[MEMBERSHIP_TEXT_MAX];
    printf("generation %u: joint %s -> %s\n", joint->generation,
           set_text(joint->members, joint->n_members, a, sizeof a),
           set_text(joint->new_members, joint->n_new_members, b, sizeof b));
    return 0;
}

/* Step 4: the new member catches up to what the survivors have committed
 * now, with progress every second. */
static int wait_caught_up(const replace_plan *p, const char *name, uint32_t joint_generation,
                          cli_err *err)
{
    sk_state st[CLUSTER_SAFEKEEPERS];
    bool up[CLUSTER_SAFEKEEPERS];
    lsn_t target = 0;
    query_survivors(&p->c, p->idx, st, up);
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if (up[i] && st[i].commit_lsn > target)
            target = st[i].commit_lsn;
    sk_target nt = target_of(&p->c, &p->c.sk[p->idx]);
    long long deadline = proc_now_ms() + CATCH_UP_TIMEOUT_MS, next_print = 0;
    char h[LSN_FMT_LEN], t[LSN_FMT_LEN];
    for (;;) {
        sk_state s;
        cli_err e = {{0}};
        lsn_t have = sk_client_status(&nt, &s, &e) == 0 ? s.flush_lsn : 0;
        if (have >= target)
            break;
        long long now = proc_now_ms();
        if (now >= deadline) {
            cli_err_set(err,
                        "%s did not catch up within %d s (has %s of %s); is a compute running? "
                        "generation %u stays joint",
                        name, CATCH_UP_TIMEOUT_MS / 1000, lsn_format(have, h),
                        lsn_format(target, t), joint_generation);
            return -1;
        }
        if (now >= next_print) {
            printf("  %s at %s, catching up to %s\n", name, lsn_format(have, h),
                   lsn_format(target, t));
            fflush(stdout);
            next_print = now + 1000;
        }
        proc_sleep_ms(100);
    }
    printf("%s caught up to %s\n", name, lsn_format(target, t));
    return 0;
}

/* Step 5: generation g+2, the new set alone, taken by a majority of it. */
static int switch_final(const replace_plan *p, const membership *joint, cli_err *err)
{
    membership final = {.generation = joint->generation + 1, .n_members = joint->n_new_members};
    memcpy(final.members, joint->new_members, sizeof final.members);
    int took = switch_all(&p->c, &final, final.members, final.n_members);
    if (took < (int) final.n_members / 2 + 1) {
        cli_err_set(err, "only %d of the %u new members took generation %u", took, final.n_members,
                    final.generation);
        return -1;
    }
    char a[MEMBERSHIP_TEXT_MAX];
    printf("generation %u: members %s\n", final.generation,
           set_text(final.members, final.n_members, a, sizeof a));
    return 0;
}

static int replace(const char *dir_opt, const char *name)
{
    cli_err err = {{0}};
    replace_plan p = {.to_flush = false};
    membership joint;
    if (load_target(dir_opt, name, &p, &err) != 0 || survey(&p, name, &err) != 0)
        return cli_fail(&err);
    printf("replacing %s (node %" PRIu64 ") by node %" PRIu64 "; donor %s; configuration "
           "generation %u\n",
           name, p.dead, p.new_id, p.c.sk[p.donor].name, p.old.generation);
    if (seed_new_node(&p, name, &err) != 0 || switch_joint(&p, &joint, &err) != 0 ||
        wait_caught_up(&p, name, joint.generation, &err) != 0 ||
        switch_final(&p, &joint, &err) != 0)
        return cli_fail(&err);
    return CLI_OK;
}

/* ---- recover: quorum lost, one survivor ------------------------------- */

/*
 * `strata safekeeper recover --from NAME --confirm`: the other two
 * safekeepers are lost at once, so no majority of the old configuration can
 * take a joint one and `replace` refuses.  The survivor's WAL is then all
 * that is left of the timeline (with the WAL backup below it): the lost
 * members are rebuilt from it, in their places with new node ids, and a new
 * configuration generation is installed on the survivor and the new nodes
 * by fiat.  That is safe only if the lost members can never vote again with
 * the old view, hence the checks: neither runs nor answers on its port, and
 * their data directories are moved aside.  A member that came back anyway
 * keeps generation g, which every proposer of g+1 is refused by (a tenant
 * token may not install g+1 on it); with its data moved back into a new
 * node's place it does not even start (its control file names its old id).
 */
typedef struct recover_plan {
    cluster c;
    int survivor;
    sk_state st;
    membership old;
    uint64_t new_id[CLUSTER_SAFEKEEPERS]; /* 0 for the survivor */
} recover_plan;

/* The survivor answers and every other safekeeper is gone. */
static int recover_check_lost(recover_plan *p, const char *from, cli_err *err)
{
    const cluster *c = &p->c;
    const cluster_safekeeper *s = &c->sk[p->survivor];
    if (safekeepers_pid(c, s) == 0) {
        cli_err_set(err,
                    "%s is not running: start it first (strata start %s); recover "
                    "rebuilds the others from it",
                    from, from);
        return -1;
    }
    sk_target t = target_of(c, s);
    if (sk_client_status(&t, &p->st, err) != 0)
        return -1;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        if (i == p->survivor)
            continue;
        const cluster_safekeeper *sk = &c->sk[i];
        pid_t pid = safekeepers_pid(c, sk);
        if (pid != 0) {
            cli_err_set(err,
                        "%s is running (pid %d): recover is for two lost safekeepers; with one "
                        "lost use `strata safekeeper replace`, or stop it first if it is "
                        "really to be discarded (strata stop %s --immediate)",
                        sk->name, (int)pid, sk->name);
            return -1;
        }
        sk_target o = target_of(c, sk);
        sk_state st;
        cli_err e = {{0}};
        if (sk_client_status(&o, &st, &e) == 0) {
            cli_err_set(err,
                        "%s answers on %s:%d (generation %u) though no process of this "
                        "cluster runs there: it is not lost; refusing to override a "
                        "configuration it can still vote in",
                        sk->name, sk->host, sk->pg_port, st.mconf.generation);
            return -1;
        }
    }
    return 0;
}

/* The survivor's configuration; it must be a member of it and hold WAL.
 * The new node ids are above every id in use. */
static int recover_plan_ids(recover_plan *p, const char *from, cli_err *err)
{
    const cluster *c = &p->c;
    uint64_t sid = (uint64_t)c->sk[p->survivor].id;
    p->old = p->st.mconf;
    char t[MEMBERSHIP_TEXT_MAX];
    if (p->old.generation > 0 && !in_set(p->old.members, p->old.n_members, sid) &&
        !in_set(p->old.new_members, p->old.n_new_members, sid)) {
        cli_err_set(err,
                    "%s (node %" PRIu64 ") is not a member of its generation %u (%s): "
                    "its WAL is not the timeline's",
                    from, sid, p->old.generation,
                    set_text(p->old.members, p->old.n_members, t, sizeof t));
        return -1;
    }
    if (p->st.commit_lsn == 0) {
        cli_err_set(err, "%s holds no committed WAL of the timeline: nothing to recover from",
                    from);
        return -1;
    }
    uint64_t next = 0;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if ((uint64_t)c->sk[i].id > next)
            next = (uint64_t)c->sk[i].id;
    for (uint32_t i = 0; i < p->old.n_members; i++)
        if (p->old.members[i].node_id > next)
            next = p->old.members[i].node_id;
    for (uint32_t i = 0; i < p->old.n_new_members; i++)
        if (p->old.new_members[i].node_id > next)
            next = p->old.new_members[i].node_id;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        p->new_id[i] = i == p->survivor ? 0 : ++next;
    return 0;
}

/* What is lost whatever happens, said before and after. */
static void recover_caveat(const recover_plan *p)
{
    const cluster *c = &p->c;
    safekeeper_timeline tl;
    safekeepers_query(c, &c->sk[p->survivor], &tl);
    char a[LSN_FMT_LEN], b[LSN_FMT_LEN], d[LSN_FMT_LEN];
    printf("survivor %s: commit %s, flush %s", c->sk[p->survivor].name,
           lsn_format(p->st.commit_lsn, a), lsn_format(p->st.flush_lsn, b));
    if (tl.known && tl.wal_backup)
        printf(", WAL backup to %s", lsn_format(tl.backup_lsn, d));
    else
        printf(", no WAL backup");
    printf("\ncaveat: commits acknowledged only by the two lost safekeepers are gone; what "
           "survives is the survivor's WAL, up to its flush %s (its commit LSN is %s; every "
           "new node gets the whole of it, so the next election keeps it all), and the WAL "
           "backup below it (closed segments only, never the newest partial one)\n",
           lsn_format(p->st.flush_lsn, b), lsn_format(p->st.commit_lsn, a));
}

/* Seeds and starts each lost member from the survivor, as replace does,
 * but with all of the survivor's WAL: an acknowledged commit may lie beyond
 * the commit LSN the survivor heard, and once every member holds that tail,
 * whichever majority elects the next proposer keeps it. */
static int recover_seed(recover_plan *p, cli_err *err)
{
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        if (i == p->survivor)
            continue;
        replace_plan rp = {.c = p->c,
                           .idx = i,
                           .donor = p->survivor,
                           .old = p->old,
                           .dead = (uint64_t)p->c.sk[i].id,
                           .new_id = p->new_id[i],
                           .to_flush = true};
        if (seed_new_node(&rp, p->c.sk[i].name, err) != 0)
            return -1;
        p->c.sk[i].id = rp.c.sk[i].id;
        STRATA_ASSERT((uint64_t)p->c.sk[i].id == p->new_id[i]);
    }
    return 0;
}

/* Generation g+1: the survivor and the new nodes, taken by every one of
 * them (the old members are not asked: there is no majority of them). */
static int recover_switch(const recover_plan *p, cli_err *err)
{
    const cluster *c = &p->c;
    membership m = {.generation = p->old.generation + 1, .n_members = CLUSTER_SAFEKEEPERS};
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        m.members[i].node_id = (uint64_t)c->sk[i].id;
        snprintf(m.members[i].addr, sizeof m.members[i].addr, "%s:%d", c->sk[i].host,
                 c->sk[i].pg_port);
    }
    /* The survivor first: if it refuses, the new nodes keep the copied
     * configuration and nothing is forced. */
    int order[CLUSTER_SAFEKEEPERS] = {p->survivor};
    for (int i = 0, k = 1; i < CLUSTER_SAFEKEEPERS; i++)
        if (i != p->survivor)
            order[k++] = i;
    for (int k = 0; k < CLUSTER_SAFEKEEPERS; k++) {
        const cluster_safekeeper *sk = &c->sk[order[k]];
        sk_target t = target_of(c, sk);
        if (sk_client_switch(&t, &m, err) != 0) {
            cli_err_set(err, "%s did not take generation %u: %s", sk->name, m.generation, err->msg);
            return -1;
        }
    }
    char a[MEMBERSHIP_TEXT_MAX];
    printf("generation %u: members %s (forced from %s, without a majority of generation %u)\n",
           m.generation, set_text(m.members, m.n_members, a, sizeof a), c->sk[p->survivor].name,
           p->old.generation);
    return 0;
}

static int recover(const char *dir_opt, const char *from, bool confirm)
{
    cli_err err = {{0}};
    recover_plan p;
    char dir[PATH_MAX];
    if (cluster_resolve_dir(dir_opt, dir, &err) != 0)
        return cli_fail(&err);
    int rc = cluster_load(dir, &p.c, &err);
    if (rc > 0)
        cli_err_set(&err, "no cluster in %s", dir);
    if (rc != 0)
        return cli_fail(&err);
    const cluster_safekeeper *s = cluster_find_safekeeper(&p.c, from);
    if (s == NULL) {
        cli_err_set(&err, "no safekeeper named '%s' (sk1, sk2, sk3)", from);
        return cli_fail(&err);
    }
    p.survivor = (int)(s - p.c.sk);
    if (recover_check_lost(&p, from, &err) != 0 || recover_plan_ids(&p, from, &err) != 0)
        return cli_fail(&err);
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if (i != p.survivor)
            printf("%s (node %d) is lost: neither running nor answering; it becomes node "
                   "%" PRIu64 ", seeded from %s\n",
                   p.c.sk[i].name, p.c.sk[i].id, p.new_id[i], from);
    recover_caveat(&p);
    if (!confirm) {
        cli_err_set(&err,
                    "not confirmed: this overrides configuration generation %u without a "
                    "majority of it; run again with --confirm once the lost safekeepers "
                    "can never come back with their old data",
                    p.old.generation);
        return cli_fail(&err);
    }
    if (recover_seed(&p, &err) != 0 || recover_switch(&p, &err) != 0)
        return cli_fail(&err);
    char a[LSN_FMT_LEN];
    printf("recovered from %s: the timeline's WAL is %s's, up to %s; start the compute to "
           "elect a proposer in the new configuration\n",
           from, from, lsn_format(p.st.flush_lsn, a));
    return CLI_OK;
}

#define SAFEKEEPER_USAGE                                                                           \
    "usage: strata safekeeper replace NAME [--dir D]\n"                                            \
    "       strata safekeeper recover --from NAME [--confirm] [--dir D]\n"

int cmd_safekeeper(const cli_opts *o)
{
    const char *dir = o->dir, *sub = NULL, *name = NULL, *from = NULL;
    bool confirm = false;
    for (int i = 0; i < o->argc; i++) {
        const char *arg = o->argv[i];
        if (strcmp(arg, "--dir") == 0 && i + 1 < o->argc)
            dir = o->argv[++i];
        else if (strncmp(arg, "--dir=", 6) == 0)
            dir = arg + 6;
        else if (strcmp(arg, "--from") == 0 && i + 1 < o->argc)
            from = o->argv[++i];
        else if (strncmp(arg, "--from=", 7) == 0)
            from = arg + 7;
        else if (strcmp(arg, "--confirm") == 0)
            confirm = true;
        else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            printf(SAFEKEEPER_USAGE);
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
    if (sub != NULL && strcmp(sub, "replace") == 0 && name != NULL && from == NULL && !confirm)
        return replace(dir, name);
    if (sub != NULL && strcmp(sub, "recover") == 0 && name == NULL && from != NULL)
        return recover(dir, from, confirm);
    fprintf(stderr, SAFEKEEPER_USAGE);
    return CLI_USAGE;
}
