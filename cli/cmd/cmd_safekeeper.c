/*
 * cmd_safekeeper.c: `strata safekeeper replace NAME` -- a safekeeper whose
 * disk is lost is replaced by an empty one with a new node id, in the same
 * place (name, ports), through a configuration change (docs/design.md
 * §4.10, the rules in sk_change.h):
 *
 *   1. the survivors' state: the newest configuration and a donor, the
 *      survivor with the highest (last_log_term, flush_lsn);
 *   2. the new safekeeper's data directory gets a copy of the donor's WAL
 *      up to its flush (sk_client_copy_timeline) and starts;
 *   3. joint configuration, generation g+1: old members, and the new set
 *      (the old one without NAME's node, with the new node); a majority of
 *      the old members must take it -- from then on a proposer needs a
 *      majority of both sets, so the new node gets streamed what it lacks;
 *   4. the sync position is read from a majority of the old members, and
 *      the command waits until a majority of the new set holds it;
 *   5. generation g+2: the new set alone (a majority of it must take it).
 *
 * Commits go on throughout: the walproposer is told to reconnect at each
 * switch, learns the configuration in its greeting and is elected again.
 *
 * A replace that was interrupted (the CLI died, a switch lacked a majority,
 * the wait timed out) is taken up by running it again: a joint
 * configuration that is this very change is finished (its new node started
 * again if need be), any other joint one -- or one whose new node's copy is
 * gone -- is rolled back to its old set, and a new node recorded but never
 * switched in is discarded and seeded again.
 *
 * `strata safekeeper recover --from NAME --confirm` is for two lost at once,
 * when no majority of the old members exists (cmd_sk_recover.c); this file
 * dispatches the `strata safekeeper` subcommands to it and to
 * cmd_sk_join.c.
 *
 * Not for: the rules of a change (client/sk_change.h) or how the fleet is
 * asked and switched (client/sk_fleet.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "cli/local/proc.h"
#include "cli/local/safekeepers.h"
#include "cli/client/sk_change.h"
#include "cli/client/sk_fleet.h"
#include "cli/client/sk_client.h"
#include "base/failpoint.h"
#include "base/log.h"

#define CATCH_UP_TIMEOUT_MS (300 * 1000)
#define START_TIMEOUT_MS (30 * 1000)

#define set_text sk_fleet_set_text

/* The configuration of a cluster that never changed one: its three. */
static void implicit_configuration(const cluster *c, membership *m)
{
    m->n_members = CLUSTER_SAFEKEEPERS;
    m->n_new_members = 0;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        m->members[i].node_id = (uint64_t)c->sk[i].id;
        snprintf(m->members[i].addr, sizeof m->members[i].addr, "%s:%d", c->sk[i].host,
                 c->sk[i].pg_port);
    }
}

/* What a replacement works from: the cluster, the slot being replaced (its
 * index and address), the newest configuration any safekeeper holds, the
 * node leaving, the node coming and the donor. */
typedef struct replace_plan {
    cluster c;
    int idx;
    char addr[MEMBER_ADDR_MAX + 1];
    membership newest;
    uint64_t dead, new_id;
    int donor;
    uint64_t copy_term; /* sk_change_copy_term */
} replace_plan;

/* The safekeepers as they run now. */
static sk_fleet fleet_of(const replace_plan *p)
{
    sk_fleet f;
    sk_fleet_of_cluster(&p->c, &f);
    return f;
}

static int load_slot(const char *dir_opt, const char *name, replace_plan *p, cli_err *err)
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
    int w = snprintf(p->addr, sizeof p->addr, "%s:%d", found->host, found->pg_port);
    if (w < 0 || (size_t)w >= sizeof p->addr)
        return cli_err_set(err, "%s's address %s:%d is too long for a configuration", name,
                           found->host, found->pg_port);
    return 0;
}

/* The newest configuration any running safekeeper holds (the slot's own
 * process too: a new node of an interrupted change may hold it). */
static int survey_newest(replace_plan *p, cli_err *err)
{
    sk_state st[CLUSTER_SAFEKEEPERS];
    bool up[CLUSTER_SAFEKEEPERS];
    sk_fleet f = fleet_of(p);
    sk_fleet_query(&f, -1, st, up);
    int conf = -1;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if (up[i] && (conf < 0 || st[i].mconf.generation > st[conf].mconf.generation))
            conf = i;
    if (conf < 0)
        return cli_err_set(err, "no safekeeper of the cluster answers: nothing to copy from");
    p->newest = st[conf].mconf;
    if (p->newest.generation == 0)
        implicit_configuration(&p->c, &p->newest);
    return 0;
}

/* The donor among the other running members of the newest configuration:
 * the highest (last_log_term, flush_lsn), as an election would pick. */
static int pick_donor(replace_plan *p, cli_err *err)
{
    sk_state st[CLUSTER_SAFEKEEPERS];
    bool up[CLUSTER_SAFEKEEPERS];
    sk_change_pos pos[CLUSTER_SAFEKEEPERS];
    sk_fleet f = fleet_of(p);
    sk_fleet_query(&f, p->idx, st, up);
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if (!sk_fleet_in_set(p->newest.members, p->newest.n_members, (uint64_t)p->c.sk[i].id))
            up[i] = false;
    sk_fleet_positions(&f, st, up, pos);
    p->donor = sk_change_donor(pos, CLUSTER_SAFEKEEPERS);
    if (p->donor < 0 || !sk_change_copy_term(p->newest.members, p->newest.n_members, pos,
                                             CLUSTER_SAFEKEEPERS, &p->copy_term))
        return cli_err_set(err,
                           "no majority of the members of generation %u answers: the copy "
                           "could hold less than a commit, or promise less than a vote",
                           p->newest.generation);
    return 0;
}

/* Steps 4 and 5 of the change in p->newest (joint). */
static int finish_joint(const replace_plan *p, const char *name, cli_err *err)
{
    sk_fleet f = fleet_of(p);
    if (sk_fleet_wait_synced(&f, name, &p->newest, CATCH_UP_TIMEOUT_MS, err) != 0)
        return -1;
    return sk_fleet_settle(&f, &p->newest, true, err);
}

/* A joint configuration of this change can be finished if its new node
 * runs, or can be started from the copy it was seeded with. */
static bool new_node_available(replace_plan *p)
{
    const cluster_safekeeper *sk = &p->c.sk[p->idx];
    if (safekeepers_pid(&p->c, sk) != 0)
        return true;
    char datadir[PATH_MAX], control[PATH_MAX + 200], a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    cli_err e = {{0}};
    if (cluster_path(&p->c, sk->name, datadir, &e) != 0)
        return false;
    snprintf(control, sizeof control, "%s/%s/%s/safekeeper.control", datadir,
             strata_id_format(&p->c.tenant_id, a), strata_id_format(&p->c.timeline_id, b));
    struct stat sb;
    if (stat(control, &sb) != 0)
        return false;
    printf("starting %s (node %d) again from the copy it was seeded with\n", sk->name, sk->id);
    if (safekeepers_start(&p->c, sk, &e) != 0 ||
        safekeepers_wait_ready(&p->c, sk, START_TIMEOUT_MS, &e) != 0) {
        log_warn("%s", e.msg);
        return false;
    }
    return true;
}

/* A replace from a settled configuration: steps 1-5. */
static int replace_fresh(replace_plan *p, const char *name, sk_change_stage stage, cli_err *err)
{
    const cluster_safekeeper *sk = &p->c.sk[p->idx];
    char t[MEMBERSHIP_TEXT_MAX];
    if (p->dead == 0)
        return cli_err_set(err, "no member of generation %u is at %s's address %s (%s)",
                           p->newest.generation, name, p->addr,
                           set_text(p->newest.members, p->newest.n_members, t, sizeof t));
    pid_t pid = safekeepers_pid(&p->c, sk);
    if (pid != 0 && stage == SK_CHANGE_FRESH)
        return cli_err_set(err,
                           "%s is running (pid %d): replace is for a safekeeper that is gone; "
                           "stop it first (strata stop %s --immediate)",
                           name, (int)pid, name);
    if (pid != 0) {
        printf("%s runs node %d, which an earlier replace seeded but never switched in: "
               "discarding it\n",
               name, sk->id);
        if (safekeepers_stop(&p->c, sk, true, err) != 0)
            return -1;
    }
    if (p->newest.generation == 0) {
        sk_fleet f = fleet_of(p);
        if (sk_fleet_make_explicit(&f, &p->newest, err) != 0)
            return -1;
    }
    p->new_id = sk_fleet_highest_id(&p->c, &p->newest) + 1;
    if (pick_donor(p, err) != 0)
        return -1;
    printf("replacing %s (node %" PRIu64 ") by node %" PRIu64 "; donor %s; configuration "
           "generation %u\n",
           name, p->dead, p->new_id, p->c.sk[p->donor].name, p->newest.generation);
    membership joint;
    if (sk_change_joint(&p->newest, p->dead, p->new_id, p->addr, &joint) != 0)
        return cli_err_set(err, "node %" PRIu64 " cannot replace node %" PRIu64 " in %s", p->new_id,
                           p->dead, set_text(p->newest.members, p->newest.n_members, t, sizeof t));
    sk_copy_state cs = {.mconf = &p->newest, .term = p->copy_term};
    if (sk_fleet_seed_node(&p->c, p->idx, p->donor, p->dead, p->new_id, &cs, err) != 0)
        return -1;
    /* Where a test interrupts the change (tests: test_membership_safety). */
    failpoint_hit("replace.after_seed");
    sk_fleet f = fleet_of(p);
    if (sk_fleet_switch_joint(&f, &joint, err) != 0)
        return -1;
    failpoint_hit("replace.after_joint");
    p->newest = joint;
    return finish_joint(p, name, err);
}

static int replace(const char *dir_opt, const char *name)
{
    cli_err err = {{0}};
    replace_plan p;
    if (load_slot(dir_opt, name, &p, &err) != 0)
        return cli_fail(&err);
    /* At most one roll back, then a change from the settled result. */
    for (int round = 0; round < 2; round++) {
        if (survey_newest(&p, &err) != 0)
            return cli_fail(&err);
        sk_change_stage stage =
            sk_change_classify(&p.newest, p.addr, (uint64_t)p.c.sk[p.idx].id, &p.dead);
        char a[MEMBERSHIP_TEXT_MAX];
        if (stage == SK_CHANGE_RESUME_JOINT && new_node_available(&p)) {
            p.new_id = (uint64_t)p.c.sk[p.idx].id;
            printf("resuming the change to %s (node %" PRIu64 " replacing node %" PRIu64
                   "), joint generation %u\n",
                   set_text(p.newest.new_members, p.newest.n_new_members, a, sizeof a), p.new_id,
                   p.dead, p.newest.generation);
            /* The joint switch again, for members that missed it. */
            sk_fleet f = fleet_of(&p);
            if (sk_fleet_switch_joint(&f, &p.newest, &err) != 0 ||
                finish_joint(&p, name, &err) != 0)
                return cli_fail(&err);
            return CLI_OK;
        }
        if (stage == SK_CHANGE_FRESH || stage == SK_CHANGE_SEEDED) {
            if (replace_fresh(&p, name, stage, &err) != 0)
                return cli_fail(&err);
            return CLI_OK;
        }
        printf("generation %u is a joint configuration to %s that this command cannot "
               "finish: rolling it back\n",
               p.newest.generation,
               set_text(p.newest.new_members, p.newest.n_new_members, a, sizeof a));
        sk_fleet f = fleet_of(&p);
        if (sk_fleet_settle(&f, &p.newest, false, &err) != 0)
            return cli_fail(&err);
    }
    cli_err_set(&err, "the configuration is still joint after a roll back");
    return cli_fail(&err);
}

#define SAFEKEEPER_USAGE                                                                           \
    "usage: strata safekeeper replace NAME [--dir D]\n"                                            \
    "       strata safekeeper recover --from NAME [--confirm] [--dir D]\n"                         \
    "       strata safekeeper seed | join   (a stack without cluster.json: the environment\n"      \
    "                                        names the node, docs/operations.md)\n"

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
        return cmd_safekeeper_recover(dir, from, confirm);
    if (sub != NULL && (strcmp(sub, "seed") == 0 || strcmp(sub, "join") == 0) && name == NULL &&
        from == NULL && !confirm)
        return cmd_safekeeper_stack(sub);
    fprintf(stderr, SAFEKEEPER_USAGE);
    return CLI_USAGE;
}
