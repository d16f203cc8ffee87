/*
 * cmd_sk_join.c: `strata safekeeper seed` and `strata safekeeper join`, the
 * replacement of a lost safekeeper where no cluster.json exists (the
 * Compose stack: docs/operations.md "Replacing a safekeeper under
 * Compose").  The orchestrator starts the new node in the lost one's place
 * (same address) with an empty volume and a node id never used before;
 * the image's entrypoint runs `seed` before the daemon starts and `join`
 * once it runs.  The rules and steps are those of `strata safekeeper
 * replace` (sk_change.h, sk_fleet.h); only where the facts come from
 * differs: the environment names every safekeeper's address and this
 * node's id, and the configuration the survivors hold names the others'.
 *
 *   seed  with no copy of the timeline in the data directory and a node id
 *         that is in no set of the newest configuration: a copy of the
 *         donor's WAL up to its flush.  A node id that is a member while its
 *         directory is empty is a lost disk under its old name: refused, as
 *         voting with a forgotten promise would be unsafe.
 *   join  the joint configuration (or the one already taken for this very
 *         change), the wait for the sync position, the new set alone; an
 *         unfinished joint configuration of another change is rolled back
 *         first.  Once this node is a member of a settled configuration it
 *         does nothing, so the entrypoint runs it at every start.
 *
 * Environment: SAFEKEEPER_DATADIR, SAFEKEEPER_ID, STRATA_SK_ADDRESS (this
 * node's host:port as the others reach it), STRATA_SAFEKEEPERS (every
 * safekeeper's host:port, this one's too, in the order of node ids 1, 2, 3
 * of the first configuration), STRATA_TENANT_ID, STRATA_TIMELINE_ID,
 * STRATA_ADMIN_TOKEN.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/local/proc.h"
#include "cli/client/sk_change.h"
#include "cli/client/sk_client.h"
#include "cli/client/sk_fleet.h"
#include "base/log.h"

#define JOIN_TIMEOUT_MS (600 * 1000)
#define JOIN_READY_TIMEOUT_MS (60 * 1000)

typedef struct join_ctx {
    sk_fleet f;
    int self; /* index of this node in f */
    const char *datadir;
    membership newest;
} join_ctx;

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? v : dflt;
}

/* "host:port" (len bytes) into a fleet node. */
static int parse_addr(const char *text, size_t len, sk_fleet_node *n, cli_err *err)
{
    char buf[MEMBER_ADDR_MAX + 1];
    if (len >= sizeof buf)
        return cli_err_set(err, "'%.*s' is too long for an address", (int)len, text);
    memcpy(buf, text, len);
    buf[len] = '\0';
    char *colon = strrchr(buf, ':'), *end;
    long port = colon != NULL ? strtol(colon + 1, &end, 10) : 0;
    if (colon == NULL || colon == buf || *end != '\0' || port <= 0 || port > 65535)
        return cli_err_set(err, "'%s' is not host:port", buf);
    *colon = '\0';
    snprintf(n->host, sizeof n->host, "%s", buf);
    n->port = (int)port;
    snprintf(n->name, sizeof n->name, "%s:%ld", buf, port);
    return 0;
}

static int load_ctx(join_ctx *j, cli_err *err)
{
    memset(j, 0, sizeof *j);
    const char *list = env_or("STRATA_SAFEKEEPERS", NULL),
               *self = env_or("STRATA_SK_ADDRESS", NULL);
    const char *id = env_or("SAFEKEEPER_ID", NULL);
    j->datadir = env_or("SAFEKEEPER_DATADIR", NULL);
    if (list == NULL || self == NULL || id == NULL || j->datadir == NULL)
        return cli_err_set(err, "STRATA_SAFEKEEPERS, STRATA_SK_ADDRESS, SAFEKEEPER_ID and "
                                "SAFEKEEPER_DATADIR must be set");
    if (!strata_id_parse(env_or("STRATA_TENANT_ID", ""), &j->f.tenant) ||
        !strata_id_parse(env_or("STRATA_TIMELINE_ID", ""), &j->f.timeline))
        return cli_err_set(err, "STRATA_TENANT_ID and STRATA_TIMELINE_ID must be 32 hex digits");
    j->f.password = env_or("STRATA_ADMIN_TOKEN", NULL);
    char *end;
    unsigned long long node = strtoull(id, &end, 10);
    if (*end != '\0' || node == 0)
        return cli_err_set(err, "SAFEKEEPER_ID '%s' is not a positive integer", id);
    j->self = -1;
    for (const char *p = list; *p != '\0' && j->f.n < CLUSTER_SAFEKEEPERS;) {
        size_t len = strcspn(p, ",");
        sk_fleet_node *n = &j->f.node[j->f.n];
        if (parse_addr(p, len, n, err) != 0)
            return -1;
        n->live = true;
        n->node_id = (uint64_t)j->f.n + 1; /* until a configuration says */
        if (strlen(self) == len && strncmp(p, self, len) == 0) {
            j->self = j->f.n;
            n->node_id = node;
        }
        j->f.n++;
        p += len + (p[len] == ',');
    }
    if (j->self < 0)
        return cli_err_set(err, "STRATA_SK_ADDRESS %s is not in STRATA_SAFEKEEPERS %s", self, list);
    return 0;
}

/* The newest configuration the nodes hold (skip: not asked), and each
 * other node's id from it.  0, or -1 when no node answered. */
static int survey(join_ctx *j, int skip, sk_state *st, bool *up, cli_err *err)
{
    sk_fleet_query(&j->f, skip, st, up);
    int conf = -1;
    for (int i = 0; i < j->f.n; i++)
        if (up[i] && (conf < 0 || st[i].mconf.generation > st[conf].mconf.generation))
            conf = i;
    if (conf < 0)
        return cli_err_set(err, "no other safekeeper answers");
    j->newest = st[conf].mconf;
    if (j->newest.generation == 0) {
        j->newest.n_members = (uint32_t)j->f.n;
        for (int i = 0; i < j->f.n; i++) {
            j->newest.members[i].node_id = (uint64_t)i + 1;
            sk_fleet_addr(&j->f, i, j->newest.members[i].addr, sizeof j->newest.members[i].addr);
        }
    }
    for (int i = 0; i < j->f.n; i++) {
        char addr[MEMBER_ADDR_MAX + 1];
        sk_fleet_addr(&j->f, i, addr, sizeof addr);
        for (uint32_t k = 0; i != j->self && k < j->newest.n_members; k++)
            if (strcmp(j->newest.members[k].addr, addr) == 0)
                j->f.node[i].node_id = j->newest.members[k].node_id;
    }
    return 0;
}

static bool in_members(const membership *m, uint64_t id)
{
    for (uint32_t i = 0; i < m->n_members; i++)
        if (m->members[i].node_id == id)
            return true;
    return false;
}

static bool has_copy(const join_ctx *j)
{
    char path[PATH_MAX], a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    snprintf(path, sizeof path, "%s/%s/%s/safekeeper.control", j->datadir,
             strata_id_format(&j->f.tenant, a), strata_id_format(&j->f.timeline, b));
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int seed(join_ctx *j, cli_err *err)
{
    uint64_t id = j->f.node[j->self].node_id;
    if (has_copy(j)) {
        printf("node %" PRIu64 " holds the timeline: nothing to seed\n", id);
        return 0;
    }
    sk_state st[CLUSTER_SAFEKEEPERS];
    bool up[CLUSTER_SAFEKEEPERS];
    cli_err none = {{0}};
    if (survey(j, j->self, st, up, &none) != 0) {
        /* A new stack: the timeline is made later, on every node at once. */
        printf("no other safekeeper holds the timeline: nothing to seed\n");
        return 0;
    }
    member all[2 * MEMBERSHIP_MAX];
    int n = membership_union(&j->newest, all);
    for (int i = 0; i < n; i++)
        if (all[i].node_id == id)
            return cli_err_set(err,
                               "node %" PRIu64 " is a member of configuration generation %u but "
                               "%s holds no copy of the timeline: its disk was lost; start it "
                               "with a node id never used before to replace it",
                               id, j->newest.generation, j->datadir);
    /* This node does not run yet: no switch goes to it. */
    j->f.node[j->self].live = false;
    if (j->newest.generation == 0 && sk_fleet_make_explicit(&j->f, &j->newest, err) != 0)
        return -1;
    sk_change_pos pos[CLUSTER_SAFEKEEPERS];
    sk_fleet_positions(&j->f, st, up, pos);
    for (int i = 0; i < j->f.n; i++)
        if (!in_members(&j->newest, pos[i].node_id))
            pos[i].up = false;
    int donor = sk_change_donor(pos, j->f.n);
    sk_copy_state cs = {.mconf = &j->newest};
    if (donor < 0 ||
        !sk_change_copy_term(j->newest.members, j->newest.n_members, pos, j->f.n, &cs.term))
        return cli_err_set(err,
                           "no majority of the members of generation %u answers: the copy "
                           "could hold less than a commit, or promise less than a vote",
                           j->newest.generation);
    printf("seeding node %" PRIu64 " from %s\n", id, j->f.node[donor].name);
    sk_target dt = sk_fleet_target(&j->f, donor);
    lsn_t copied;
    if (mkdir(j->datadir, 0750) != 0 && errno != EEXIST)
        return cli_err_set(err, "mkdir %s: %s", j->datadir, strerror(errno));
    if (sk_client_copy_timeline(&dt, j->datadir, id, &cs, &copied, err) != 0)
        return -1;
    char l[LSN_FMT_LEN];
    printf("node %" PRIu64 " seeded with WAL up to %s\n", id, lsn_format(copied, l));
    return 0;
}

static int wait_self_ready(const join_ctx *j, cli_err *err)
{
    long long deadline = proc_now_ms() + JOIN_READY_TIMEOUT_MS;
    sk_target t = sk_fleet_target(&j->f, j->self);
    for (;;) {
        sk_state s;
        cli_err e = {{0}};
        if (sk_client_status(&t, &s, &e) == 0)
            return 0;
        if (proc_now_ms() >= deadline)
            return cli_err_set(err, "this safekeeper did not answer: %s", e.msg);
        proc_sleep_ms(500);
    }
}

/* One pass of join: 1 done, 0 progress made (go on), -1 failed. */
static int join_step(join_ctx *j, cli_err *err)
{
    sk_state st[CLUSTER_SAFEKEEPERS];
    bool up[CLUSTER_SAFEKEEPERS];
    if (survey(j, -1, st, up, err) != 0)
        return -1;
    sk_fleet_node *me = &j->f.node[j->self];
    char addr[MEMBER_ADDR_MAX + 1], t[MEMBERSHIP_TEXT_MAX];
    sk_fleet_addr(&j->f, j->self, addr, sizeof addr);
    uint64_t dead;
    switch (sk_change_classify(&j->newest, addr, me->node_id, &dead)) {
    case SK_CHANGE_FRESH:
        if (dead == 0)
            return cli_err_set(
                err, "no member of generation %u is at %s (%s)", j->newest.generation, addr,
                sk_fleet_set_text(j->newest.members, j->newest.n_members, t, sizeof t));
        printf("node %" PRIu64 " is a member of generation %u\n", me->node_id,
               j->newest.generation);
        return 1;
    case SK_CHANGE_FOREIGN_JOINT:
        printf("generation %u is a joint configuration of another change: rolling it back\n",
               j->newest.generation);
        return sk_fleet_settle(&j->f, &j->newest, false, err) != 0 ? -1 : 0;
    case SK_CHANGE_SEEDED: {
        membership joint;
        printf("node %" PRIu64 " replaces node %" PRIu64 " at %s\n", me->node_id, dead, addr);
        if (sk_change_joint(&j->newest, dead, me->node_id, addr, &joint) != 0)
            return cli_err_set(err, "node %" PRIu64 " cannot replace node %" PRIu64, me->node_id,
                               dead);
        return sk_fleet_switch_joint(&j->f, &joint, err) != 0 ? -1 : 0;
    }
    case SK_CHANGE_RESUME_JOINT:
        if (sk_fleet_switch_joint(&j->f, &j->newest, err) != 0 ||
            sk_fleet_wait_synced(&j->f, me->name, &j->newest, JOIN_TIMEOUT_MS, err) != 0 ||
            sk_fleet_settle(&j->f, &j->newest, true, err) != 0)
            return -1;
        return 0;
    }
    return -1;
}

static int join(join_ctx *j, cli_err *err)
{
    if (wait_self_ready(j, err) != 0)
        return -1;
    if (!has_copy(j)) {
        printf("no copy of the timeline here: nothing to join\n");
        return 0;
    }
    /* Each step moves the configuration forward by one generation; a
     * replacement takes two, a roll back one more. */
    for (int step = 0; step < 6; step++) {
        int rc = join_step(j, err);
        fflush(stdout);
        if (rc != 0)
            return rc > 0 ? 0 : -1;
    }
    return cli_err_set(err, "the configuration did not settle");
}

int cmd_safekeeper_stack(const char *sub)
{
    cli_err err = {{0}};
    join_ctx j;
    if (load_ctx(&j, &err) != 0)
        return cli_fail(&err);
    int rc = strcmp(sub, "seed") == 0 ? seed(&j, &err) : join(&j, &err);
    fflush(stdout);
    return rc == 0 ? CLI_OK : cli_fail(&err);
}
