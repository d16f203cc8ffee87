/*
 * cmd_sk_recover.c: `strata safekeeper recover --from NAME --confirm`: the other two
 * safekeepers are lost at once, so no majority of the old configuration can
 * take a joint one and `replace` refuses.  What is left of the timeline's
 * WAL is the survivor's, to its flush F, and the WAL backup's closed
 * segments: those past F are committed WAL the survivor never received.
 * The seed is both (sk_recover.h): the survivor is stopped, given those
 * segments and restarted, and the lost members are rebuilt from it, in
 * their places with new node ids; a new configuration generation is then
 * installed on the three by fiat.  That is safe only if the lost members
 * can never vote again with the old view, hence the checks: neither runs
 * nor answers on its port, and their data directories are moved aside.  A
 * member that came back anyway keeps generation g, which every proposer of
 * g+1 is refused by (a tenant token may not install g+1 on it); with its
 * data moved back into a new node's place it does not even start (its
 * control file names its old id).
 *
 * The store must agree with the seed, so recover refuses while the
 * pageserver or its newest manifest is past the seed end (their state holds
 * lost commits the new history would contradict), and moves the backup's
 * objects past the seed end to the quarantine before the new nodes start.
 *
 * For: `strata safekeeper recover --from NAME [--confirm]`, reached from
 * the subcommand dispatch in cmd_safekeeper.c through cli.h.
 * Not for: replacing one lost safekeeper while a majority lives
 * (cmd_safekeeper.c), the object store's side (client/sk_recover.h).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/client/sk_change.h"
#include "cli/client/sk_client.h"
#include "cli/client/sk_fleet.h"
#include "cli/client/sk_recover.h"
#include "cli/compute/compute.h"
#include "cli/local/cluster.h"
#include "cli/local/pageserver.h"
#include "cli/local/proc.h"
#include "cli/local/safekeepers.h"
#include "base/durable.h"
#include "base/strata_assert.h"

#define RECOVER_START_TIMEOUT_MS (30 * 1000)

#define set_text sk_fleet_set_text

typedef struct recover_plan {
    cluster c;
    int survivor;
    sk_state st;
    membership old;
    uint64_t new_id[CLUSTER_SAFEKEEPERS]; /* 0 for the survivor */
    char tl_dir[PATH_MAX];                /* the survivor's timeline directory */
    remote_storage *rs;                   /* NULL: no remote store */
    sk_recover_seed seed;
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
    sk_target t = sk_fleet_target_of(c, s);
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
        sk_target o = sk_fleet_target_of(c, sk);
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
    /* A running compute would elect itself on the survivor under the copy,
     * and its own WAL past the survivor's flush may be the lost history's. */
    pid_t cpid = compute_pid(c);
    if (cpid != 0)
        return cli_err_set(err,
                           "the compute is running (pid %d): stop it first (strata stop compute "
                           "--immediate); it cannot commit without a quorum anyway",
                           (int)cpid);
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
    if (p->old.generation > 0 && !sk_fleet_in_set(p->old.members, p->old.n_members, sid) &&
        !sk_fleet_in_set(p->old.new_members, p->old.n_new_members, sid)) {
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
    uint64_t next = sk_fleet_highest_id(c, &p->old);
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        p->new_id[i] = i == p->survivor ? 0 : ++next;
    return 0;
}

/* The seed: the survivor's WAL plus the backup's closed segments past it. */
static int recover_plan_seed(recover_plan *p, cli_err *err)
{
    const cluster *c = &p->c;
    char datadir[PATH_MAX], t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    if (cluster_path(c, c->sk[p->survivor].name, datadir, err) != 0)
        return -1;
    int n = snprintf(p->tl_dir, sizeof p->tl_dir, "%s/%s/%s", datadir,
                     strata_id_format(&c->tenant_id, t), strata_id_format(&c->timeline_id, l));
    if (n < 0 || (size_t)n >= sizeof p->tl_dir)
        return cli_err_set(err, "path too long under %s", datadir);
    if (sk_recover_open_store(c, &p->rs, err) != 0)
        return -1;
    return sk_recover_stage(p->rs, c, p->tl_dir, p->st.wal_seg_size, p->st.flush_lsn, &p->seed,
                            err);
}

/* What to do about a pageserver or manifest past the seed end. */
#define RECOVER_PS_WAY                                                                             \
    "restore the pageserver to a state at or below %s (stop it and put back a copy of its "        \
    "directory from before, or delete it with the timeline's manifests past %s and let it "        \
    "restore from an older one), or recreate the timeline and load the data again; then run "      \
    "recover again"

/* A lost pageserver's directory: gone, or emptied for its restore. */
static bool dir_missing_or_empty(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return errno == ENOENT;
    struct dirent *de;
    bool empty = true;
    while (empty && (de = readdir(d)) != NULL)
        empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
    closedir(d);
    return empty;
}

/* The pageserver must not have ingested past the seed end: its store would
 * hold commits of the lost history, and its WAL receiver would ask for the
 * new history at an LSN inside it. */
static int recover_check_pageserver(const recover_plan *p, cli_err *err)
{
    const cluster *c = &p->c;
    char e[LSN_FMT_LEN], a[LSN_FMT_LEN], b[LSN_FMT_LEN], psdir[PATH_MAX];
    lsn_format(p->seed.end, e);
    if (!pageserver_built())
        return 0;
    pid_t pid = pageserver_pid(c);
    if (pid == 0) {
        if (cluster_path(c, "pageserver", psdir, err) != 0)
            return -1;
        if (dir_missing_or_empty(psdir))
            return 0; /* lost too: it will restore from a manifest, checked next */
        return cli_err_set(err,
                           "the pageserver is not running but its directory %s remains: start "
                           "it (strata start pageserver) so that recover can check how far it "
                           "ingested, or move the directory aside if it is lost too",
                           psdir);
    }
    pageserver_timeline pt;
    pageserver_query(c, &pt);
    if (!pt.known)
        return cli_err_set(err,
                           "the pageserver runs (pid %d) but does not report the timeline (still "
                           "restoring?): recover must know how far it ingested; run it again "
                           "once `strata status` shows it",
                           (int)pid);
    if (pt.last_record_lsn <= p->seed.end && pt.disk_consistent_lsn <= p->seed.end)
        return 0;
    return cli_err_set(err,
                       "the pageserver has ingested the timeline to %s (disk_consistent_lsn %s), "
                       "past the end of the WAL recover can seed, %s (the survivor's flush and "
                       "the WAL backup's closed segments): its store holds commits of the lost "
                       "history, which the new history from %s would contradict. "
                       "To go on: " RECOVER_PS_WAY,
                       lsn_format(pt.last_record_lsn, a), lsn_format(pt.disk_consistent_lsn, b), e,
                       e, e, e);
}

/* Nor may the newest manifest: a pageserver restored from it would. */
static int recover_check_manifest(const recover_plan *p, cli_err *err)
{
    if (p->rs == NULL)
        return 0;
    bool found;
    uint64_t seq = 0;
    lsn_t consistent = 0;
    if (sk_recover_newest_manifest(p->rs, &p->c, &found, &seq, &consistent, err) != 0)
        return -1;
    if (!found || consistent <= p->seed.end)
        return 0;
    char a[LSN_FMT_LEN], e[LSN_FMT_LEN];
    lsn_format(p->seed.end, e);
    return cli_err_set(
        err,
        "the newest manifest in the object store (seq %" PRIu64 ") is consistent "
        "at %s, past the end of the WAL recover can seed, %s: a pageserver "
        "restored from it would hold commits of the lost history. To go on: " RECOVER_PS_WAY,
        seq, lsn_format(consistent, a), e, e, e);
}

/* What is lost whatever happens, said before and after. */
static void recover_caveat(const recover_plan *p)
{
    const cluster *c = &p->c;
    const sk_recover_seed *s = &p->seed;
    safekeeper_timeline tl;
    safekeepers_query(c, &c->sk[p->survivor], &tl);
    char a[LSN_FMT_LEN], b[LSN_FMT_LEN], d[LSN_FMT_LEN], e[LSN_FMT_LEN];
    printf("survivor %s: commit %s, flush %s", c->sk[p->survivor].name,
           lsn_format(p->st.commit_lsn, a), lsn_format(p->st.flush_lsn, b));
    if (tl.known && tl.wal_backup)
        printf(", WAL backup to %s", lsn_format(tl.backup_lsn, d));
    else
        printf(", no WAL backup");
    if (s->end > s->flush)
        printf("\nseed: %s's WAL to %s, then the WAL backup's closed segments to %s, whose last "
               "complete record ends at %s: the timeline's WAL ends at %s\n",
               c->sk[p->survivor].name, b, lsn_format(s->backup_end, d), lsn_format(s->end, e), e);
    else
        printf("\nseed: %s's WAL to %s (%s)\n", c->sk[p->survivor].name, b, s->note);
    if (s->end > s->flush && s->note[0] != '\0')
        printf("note: the seed ends early: %s\n", s->note);
    printf("caveat: commits acknowledged only by the two lost safekeepers past %s are gone: the "
           "newest, partial segment was never in the WAL backup, nor a record that crosses into "
           "it; every node gets the seed (%s's commit LSN is %s; the tail past it is kept too), "
           "and WAL backup objects past it are moved to %s/\n",
           lsn_format(s->end, e), c->sk[p->survivor].name, a, SK_RECOVER_QUARANTINE_DIR);
}

/* The survivor gets the backup's segments past its flush: stopped (cleanly,
 * so that its control file holds its flush), the segments installed, and
 * started again; its restart scan must find the seed end. */
static int recover_extend_survivor(recover_plan *p, cli_err *err)
{
    const cluster *c = &p->c;
    const cluster_safekeeper *sk = &c->sk[p->survivor];
    if (p->seed.end <= p->seed.flush)
        return 0;
    if (safekeepers_stop(c, sk, false, err) != 0 ||
        sk_recover_install(&p->seed, p->tl_dir, err) != 0 || safekeepers_start(c, sk, err) != 0 ||
        safekeepers_wait_ready(c, sk, RECOVER_START_TIMEOUT_MS, err) != 0)
        return -1;
    sk_target t = sk_fleet_target_of(c, sk);
    if (sk_client_status(&t, &p->st, err) != 0)
        return -1;
    char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
    if (p->st.flush_lsn != p->seed.end)
        return cli_err_set(err,
                           "%s restarted with WAL to %s, not to the seed end %s: a segment from "
                           "the WAL backup did not decode (see %s.log); nothing else was changed",
                           sk->name, lsn_format(p->st.flush_lsn, a), lsn_format(p->seed.end, b),
                           sk->name);
    printf("%s now holds WAL to %s (segments from the WAL backup added)\n", sk->name,
           lsn_format(p->seed.end, a));
    return 0;
}

/* The backup's objects past the seed end hold the lost history. */
static int recover_quarantine(const recover_plan *p, cli_err *err)
{
    if (p->rs == NULL)
        return 0;
    int moved = 0;
    int rc = sk_recover_quarantine(p->rs, &p->c, p->seed.seg_size, p->seed.end, &moved, err);
    if (moved > 0 || rc == 0) {
        char e[LSN_FMT_LEN];
        printf("moved %d WAL backup object(s) past %s to %s/\n", moved, lsn_format(p->seed.end, e),
               SK_RECOVER_QUARANTINE_DIR);
    }
    return rc;
}

/* Seeds and starts each lost member from the survivor, as replace does,
 * with all of the survivor's WAL: an acknowledged commit may lie beyond the
 * commit LSN the survivor heard, and once every member holds that tail,
 * whichever majority elects the next proposer keeps it. */
static int recover_seed(recover_plan *p, cli_err *err)
{
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        if (i == p->survivor)
            continue;
        if (sk_fleet_seed_node(&p->c, i, p->survivor, (uint64_t)p->c.sk[i].id, p->new_id[i], NULL,
                               err) != 0)
            return -1;
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
        sk_target t = sk_fleet_target_of(c, sk);
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

/* Everything after the survivor was found: plan, checks, and with confirm
 * the changes, in an order a re-run can take up after a crash (the
 * survivor extended before the quarantine, so a re-run finds the seed on
 * the survivor). */
static int recover_run(recover_plan *p, const char *from, bool confirm, cli_err *err)
{
    if (recover_plan_ids(p, from, err) != 0 || recover_plan_seed(p, err) != 0 ||
        recover_check_pageserver(p, err) != 0 || recover_check_manifest(p, err) != 0)
        return -1;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if (i != p->survivor)
            printf("%s (node %d) is lost: neither running nor answering; it becomes node "
                   "%" PRIu64 ", seeded from %s\n",
                   p->c.sk[i].name, p->c.sk[i].id, p->new_id[i], from);
    recover_caveat(p);
    if (!confirm)
        return cli_err_set(err,
                           "not confirmed: this overrides configuration generation %u without a "
                           "majority of it; run again with --confirm once the lost safekeepers "
                           "can never come back with their old data",
                           p->old.generation);
    /* Asked again once the survivor is extended: a pageserver may still
     * have held WAL of the lost two in its socket when it was first asked. */
    if (recover_extend_survivor(p, err) != 0 || recover_check_pageserver(p, err) != 0 ||
        recover_quarantine(p, err) != 0 || recover_seed(p, err) != 0 || recover_switch(p, err) != 0)
        return -1;
    char a[LSN_FMT_LEN];
    printf("recovered from %s: the timeline's WAL is %s's, up to %s; start the compute to "
           "elect a proposer in the new configuration\n",
           from, from, lsn_format(p->seed.end, a));
    return 0;
}

int cmd_safekeeper_recover(const char *dir_opt, const char *from, bool confirm)
{
    cli_err err = {{0}};
    recover_plan p;
    memset(&p, 0, sizeof p);
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
    if (recover_check_lost(&p, from, &err) != 0)
        return cli_fail(&err);
    rc = recover_run(&p, from, confirm, &err);
    sk_recover_unstage(&p.seed);
    if (p.rs != NULL)
        remote_close(p.rs);
    return rc == 0 ? CLI_OK : cli_fail(&err);
}
