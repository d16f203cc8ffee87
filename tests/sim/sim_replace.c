/*
 * sim_replace.c: the simulator's membership-change actor -- `strata
 * safekeeper replace` (cli/cmd/cmd_safekeeper.c) run against the simulated
 * cluster, deciding everything with cli/client/sk_change.c (docs/design.md §4.9,
 * §4.10).
 *
 * For: at a random point of a seed (most often right after a proposer
 * advanced the commit, before the acceptors heard of it), one safekeeper's
 * disk is lost, often with the compute that committed.  Then replace runs
 * as the CLI does:
 *
 *   0. in generation 0, generation 1 first: the cluster's three, explicit;
 *   1. TIMELINE_STATUS of the running nodes: the newest configuration,
 *      classified by sk_change_classify; the donor by sk_change_donor
 *      among a majority of the members;
 *   2. the lost node's address gets a copy of the donor's WAL up to
 *      sk_change_copy_end and a new node id (sim_acc_seed), with the
 *      newest configuration and the highest term of that majority, then
 *      starts (steps 0 and 2's configuration and term are rules the CLI
 *      lacks: see "What the copy carries" below);
 *   3. the joint configuration of sk_change_joint, switched on every
 *      running node, taken by a majority of the old members;
 *   4. across steps, while the proposers run on: the sync position
 *      (sk_change_sync_position) once a majority of the old members
 *      answered, until sk_change_synced holds for the new set (or a
 *      timeout ends the run, leaving the joint configuration);
 *   5. the settled configuration of sk_change_settle, taken by a majority
 *      of the new set.
 *
 * A run dies between any two of its stages with the seed's odds, and fails
 * where the CLI fails (no majority took a switch, no donor answered, the
 * wait timed out); a later run classifies what it finds and resumes the
 * joint configuration, rolls it back, or discards a seeded node that was
 * never switched in.  SWITCH_MEMBERSHIP requests are lost, lose their reply,
 * or arrive late (after a later switch, which the acceptor then refuses).
 * Sometimes the new node's disk is lost too during the change (a re-run
 * then rolls back).  After a finished replace the seed may lose another
 * node.
 *
 * Not for: checking anything -- sim.c's invariants see the cluster after
 * every step, whatever the actor did.
 */
#include <stdio.h>
#include <string.h>

#include "cli/client/sk_change.h"
#include "tests/sim/sim.h"

#define N_ACC SIM_N_ACC
#define MAX_LATE 16

typedef enum run_stage {
    RUN_NONE,   /* no run in progress */
    RUN_SURVEY, /* step 1, and the choice between resume, roll back, fresh */
    RUN_START,  /* step 2's end: the seeded node starts */
    RUN_JOINT,  /* step 3 */
    RUN_WAIT,   /* step 4 */
    RUN_FINISH, /* step 5 */
} run_stage;

static struct {
    /* The loss: from lose_at on, at the next commit advance, and at
     * lose_by whatever happens (0: no loss pending). */
    int lose_at, lose_by;
    int replaces_left; /* losses this seed may still have */
    bool changing;     /* a node was lost and its replace has not finished */
    int slot;          /* its address */
    /* The cluster file: the node id recorded for each address. */
    uint64_t slot_id[N_ACC];
    /* Odds (per mille) of this seed: the actor dying before a stage, a
     * switch request lost, its reply lost, the request arriving late. */
    uint32_t die_odds, switch_lost_odds, reply_lost_odds, late_odds;
    /* Odds (per mille per step) that the new node's disk is lost too while
     * the change is under way: a re-run must then roll the joint
     * configuration back. */
    uint32_t new_lost_odds;
    bool new_lost;
    /* The run in progress. */
    run_stage stage;
    int next_run; /* a run starts at this step */
    int rollbacks;
    membership joint;
    sk_change_pos target;
    int wait_until;
    struct {
        int a, due;
        membership m;
    } late[MAX_LATE];
    int n_late;
} A;

static struct {
    long losses, props_lost, runs, deaths, failures, seeds, joints, finished, rolled_back,
        discarded, late_switches, new_lost;
} stats;

/* ---- What the CLI reads ------------------------------------------------ */

/* TIMELINE_STATUS of every running node but the one at skip (-1: none), as
 * the positions sk_change decides by; node ids from the cluster file, as
 * sk_fleet_positions takes them. */
static void survey(int skip, sim_status *st, sk_change_pos *pos)
{
    for (int a = 0; a < N_ACC; a++) {
        pos[a] = (sk_change_pos){.up = false, .node_id = A.slot_id[a]};
        if (a == skip || !sim_acc_status(a, &st[a]))
            continue;
        pos[a].up = true;
        pos[a].flush_lsn = st[a].flush_lsn;
        pos[a].commit_lsn = st[a].commit_lsn;
        pos[a].last_log_term = st[a].last_log_term;
        pos[a].term = st[a].term;
    }
}

/* The newest configuration any running node holds; generation 0 is the
 * cluster's three (cmd_safekeeper.c implicit_configuration). */
static bool survey_newest(membership *m)
{
    sim_status st[N_ACC];
    sk_change_pos pos[N_ACC];
    survey(-1, st, pos);
    int conf = -1;
    for (int a = 0; a < N_ACC; a++)
        if (pos[a].up && (conf < 0 || st[a].mconf.generation > st[conf].mconf.generation))
            conf = a;
    if (conf < 0)
        return false;
    *m = st[conf].mconf;
    if (m->generation == 0) {
        m->n_members = N_ACC;
        m->n_new_members = 0;
        for (int a = 0; a < N_ACC; a++) {
            m->members[a].node_id = A.slot_id[a];
            snprintf(m->members[a].addr, sizeof m->members[a].addr, "%s", sim_addr(a));
        }
    }
    return true;
}

static bool in_set(const member *set, uint32_t n, uint64_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (set[i].node_id == id)
            return true;
    return false;
}

/* ---- What the CLI sends ------------------------------------------------ */

/* SWITCH_MEMBERSHIP to every running node; returns how many nodes of
 * count_in took it as far as the actor knows. */
static uint32_t switch_all(const membership *m, const member *count_in, uint32_t n_count)
{
    uint32_t took = 0;
    for (int a = 0; a < N_ACC; a++) {
        if (!sim_acc_running(a))
            continue;
        if (sim_chance(A.switch_lost_odds)) {
            sim_trace("replace: switch to generation %u for a%d lost", m->generation, a);
            continue;
        }
        if (A.n_late < MAX_LATE && sim_chance(A.late_odds)) {
            A.late[A.n_late].a = a;
            A.late[A.n_late].due = sim_step() + 1 + (int)sim_rnd_below(150);
            A.late[A.n_late].m = *m;
            A.n_late++;
            sim_trace("replace: switch to generation %u for a%d delayed", m->generation, a);
            continue;
        }
        int rc = sim_acc_switch(a, m);
        if (sim_chance(A.reply_lost_odds)) {
            sim_trace("replace: a%d's reply to the switch lost", a);
            continue;
        }
        if (rc == 0 && in_set(count_in, n_count, sim_acc_node_id(a)))
            took++;
    }
    return took;
}

static void deliver_late(void)
{
    for (int i = 0; i < A.n_late;) {
        if (A.late[i].due > sim_step()) {
            i++;
            continue;
        }
        sim_trace("replace: a late switch to generation %u reaches a%d", A.late[i].m.generation,
                  A.late[i].a);
        (void)sim_acc_switch(A.late[i].a, &A.late[i].m);
        stats.late_switches++;
        A.late[i] = A.late[--A.n_late];
    }
}

/* ---- One run of the command -------------------------------------------- */

/* The run ends; the operator runs the command again later. */
static void run_fail(const char *why)
{
    sim_trace("replace FAILS: %s", why);
    stats.failures++;
    A.stage = RUN_NONE;
    A.next_run = sim_step() + 20 + (int)sim_rnd_below(200);
}

/* A node id never used before (cli/client/sk_fleet.c sk_fleet_highest_id + 1). */
static uint64_t unused_node_id(const membership *m)
{
    uint64_t id = 0;
    for (int a = 0; a < N_ACC; a++)
        if (A.slot_id[a] > id)
            id = A.slot_id[a];
    for (uint32_t i = 0; i < m->n_members; i++)
        if (m->members[i].node_id > id)
            id = m->members[i].node_id;
    for (uint32_t i = 0; i < m->n_new_members; i++)
        if (m->new_members[i].node_id > id)
            id = m->new_members[i].node_id;
    return id + 1;
}

/*
 * What the copy carries besides the WAL follows two rules that
 * cmd_safekeeper.c and cli/client/sk_client.c copy_attempt lack (the simulator
 * built with STRATA_BUG_REPLACE_DONOR_STATE does as they do, taking the
 * donor's configuration and term, and loses acknowledged commits):
 *
 *   - the configuration is the one this run works from, of generation 1
 *     at least, in which the new node is not a member: it neither votes
 *     nor takes WAL before the joint switch.  The donor's may be older, or
 *     generation 0, where a node is its address, so the copy would vote at
 *     once as a second copy of its donor's votes;
 *   - the term is the highest of a majority of the members.  The replaced
 *     node's promises go with its disk; every term a proposer won was
 *     granted by a majority, so any majority knows the highest, and a new
 *     node granting a lower term would let a quorum of the new set elect
 *     that term again: a second proposer of one term takes the first one's
 *     WAL for its own.
 */

#ifndef STRATA_BUG_REPLACE_DONOR_STATE
/* Step 0 in a cluster that never changed its configuration: generation 1,
 * the implicit configuration made explicit, taken by a majority. */
static void make_explicit(const membership *implicit)
{
    membership m = *implicit;
    m.generation = 1;
    if (switch_all(&m, m.members, m.n_members) < m.n_members / 2 + 1) {
        run_fail("no majority took generation 1");
        return;
    }
    sim_trace("replace: generation 1 is the three made explicit");
    A.stage = RUN_SURVEY;
}
#endif

/* Step 2: the copy of the donor's WAL and its control file in slot s. */
static bool seed(const membership *newest, int donor, uint64_t new_id, uint64_t term)
{
    /* copy_attempt reads the donor's state again when it copies. */
    sim_status ds;
    if (!sim_acc_status(donor, &ds))
        return false;
    lsn_t end = sk_change_copy_end(ds.flush_lsn, ds.commit_lsn);
    const membership *mconf = newest;
#ifdef STRATA_BUG_REPLACE_DONOR_STATE
    mconf = NULL;
#endif
    return sim_acc_seed(A.slot, donor, new_id, end, ds.term > term ? ds.term : term, mconf);
}

/* Steps 1-2 from a settled configuration (cmd_safekeeper.c replace_fresh). */
static void run_fresh(const membership *newest, sk_change_stage stage, uint64_t dead)
{
    int s = A.slot;
    if (dead == 0) {
        run_fail("no member of the configuration is at the slot's address");
        return;
    }
    if (sim_acc_running(s) && stage == SK_CHANGE_FRESH) {
        run_fail("the node to replace is running");
        return;
    }
    if (sim_acc_running(s)) {
        sim_trace("replace: discarding node %llu, seeded but never switched in",
                  (unsigned long long)A.slot_id[s]);
        sim_acc_stop(s);
        stats.discarded++;
    }
#ifndef STRATA_BUG_REPLACE_DONOR_STATE
    if (newest->generation == 0) {
        make_explicit(newest);
        return;
    }
#endif
    uint64_t new_id = unused_node_id(newest), term;
    /* The donor among the other running members of the newest
     * configuration. */
    sim_status st[N_ACC];
    sk_change_pos pos[N_ACC];
    survey(s, st, pos);
    for (int a = 0; a < N_ACC; a++)
        if (!in_set(newest->members, newest->n_members, A.slot_id[a]))
            pos[a].up = false;
    int donor = sk_change_donor(pos, N_ACC);
    membership joint;
    if (donor < 0 || !sk_change_copy_term(newest->members, newest->n_members, pos, N_ACC, &term)) {
        run_fail("no majority of the other members answers");
        return;
    }
    if (sk_change_joint(newest, dead, new_id, sim_addr(s), &joint) != 0) {
        run_fail("the new node cannot replace the dead one");
        return;
    }
    if (!seed(newest, donor, new_id, term)) {
        run_fail("the copy failed");
        return;
    }
    A.slot_id[s] = new_id;
    A.joint = joint;
    A.stage = RUN_START;
}

/* Step 1: what the newest configuration says to do. */
static void run_survey(void)
{
    membership newest;
    if (!survey_newest(&newest)) {
        run_fail("no safekeeper answers");
        return;
    }
    uint64_t dead = 0;
    int s = A.slot;
    sk_change_stage stage = sk_change_classify(&newest, sim_addr(s), A.slot_id[s], &dead);
    sim_trace("replace: generation %u, stage %d, dead node %llu", newest.generation, (int)stage,
              (unsigned long long)dead);
    if (stage == SK_CHANGE_RESUME_JOINT &&
        (sim_acc_running(s) || (sim_acc_has_disk(s) && sim_acc_start(s)))) {
        /* The joint switch again, for members that missed it. */
        A.joint = newest;
        A.stage = RUN_JOINT;
        return;
    }
    if (stage == SK_CHANGE_FRESH || stage == SK_CHANGE_SEEDED) {
        run_fresh(&newest, stage, dead);
        return;
    }
    if (A.rollbacks > 0) {
        run_fail("the configuration is still joint after a roll back");
        return;
    }
    membership back;
    sk_change_settle(&newest, false, &back);
    sim_trace("replace: rolling back joint generation %u", newest.generation);
    if (switch_all(&back, back.members, back.n_members) < back.n_members / 2 + 1) {
        run_fail("no majority took the roll back");
        return;
    }
    stats.rolled_back++;
    A.rollbacks++;
    A.stage = RUN_SURVEY;
}

static void run_joint(void)
{
    const membership *j = &A.joint;
    if (switch_all(j, j->members, j->n_members) < j->n_members / 2 + 1) {
        run_fail("no majority of the old members took the joint configuration");
        return;
    }
    stats.joints++;
    A.target.up = false;
    /* CATCH_UP_TIMEOUT_MS, in steps. */
    A.wait_until = sim_step() + 200 + (int)sim_rnd_below(800);
    A.stage = RUN_WAIT;
}

static void run_wait(void)
{
    const membership *j = &A.joint;
    sim_status st[N_ACC];
    sk_change_pos pos[N_ACC];
    survey(-1, st, pos);
    if (!A.target.up && sk_change_sync_position(j->members, j->n_members, pos, N_ACC, &A.target))
        sim_trace("replace: sync position %llu/%llx", (unsigned long long)A.target.last_log_term,
                  (unsigned long long)A.target.flush_lsn);
    if (A.target.up && sk_change_synced(j->new_members, j->n_new_members, pos, N_ACC, &A.target)) {
        A.stage = RUN_FINISH;
        return;
    }
    if (sim_step() >= A.wait_until)
        run_fail("the new set did not reach the sync position in time");
}

static void run_finish(void)
{
    membership m;
    sk_change_settle(&A.joint, true, &m);
    if (switch_all(&m, m.members, m.n_members) < m.n_members / 2 + 1) {
        run_fail("no majority of the new set took the settled configuration");
        return;
    }
    sim_trace("replace: FINISHED at generation %u", m.generation);
    stats.finished++;
    A.stage = RUN_NONE;
    A.changing = false;
    if (A.replaces_left > 0) {
        A.lose_at = sim_step() + 50 + (int)sim_rnd_below(600);
        A.lose_by = A.lose_at + 100 + (int)sim_rnd_below(300);
    }
}

/* ---- The loss ---------------------------------------------------------- */

/*
 * The scenario a wrong copy end loses data in: a proposer just counted a
 * commit on the flushes of some acceptors and is lost together with one of
 * them before the others heard of the commit.  So the loss waits for a
 * commit advance (until lose_by) and then mostly takes the committing
 * compute and a node holding the new commit.
 */
static void maybe_lose(void)
{
    int p = sim_take_new_commit();
    if (A.lose_at == 0 || sim_step() < A.lose_at || (p < 0 && sim_step() < A.lose_by))
        return;
    int holders[N_ACC], n = 0;
    for (int a = 0; a < N_ACC; a++)
        if (sim_acc_has_disk(a) && sim_acc_holds_committed(a))
            holders[n++] = a;
    int s =
        n > 0 && sim_chance(750) ? holders[sim_rnd_below((uint32_t)n)] : (int)sim_rnd_below(N_ACC);
    if (!sim_acc_has_disk(s))
        return;
    sim_acc_lose(s);
    stats.losses++;
    if (p < 0 && sim_chance(300))
        p = (int)sim_rnd_below(3);
    if (p >= 0 && sim_chance(700)) {
        sim_prop_lose(p);
        stats.props_lost++;
    }
    A.lose_at = 0;
    A.replaces_left--;
    A.changing = true;
    A.slot = s;
    A.rollbacks = 0;
    A.new_lost = false;
    memset(&A.joint, 0, sizeof A.joint);
    A.next_run = sim_step() + (int)sim_rnd_below(80);
}

/* ---- The actor --------------------------------------------------------- */

void replace_setup(void)
{
    memset(&A, 0, sizeof A);
    for (int a = 0; a < N_ACC; a++)
        A.slot_id[a] = (uint64_t)a + 1;
    A.stage = RUN_NONE;
    if (!sim_chance(700))
        return;
    stats.seeds++;
    A.replaces_left = 1 + (int)sim_rnd_below(2);
    A.lose_at = 50 + (int)sim_rnd_below(1200);
    A.lose_by = A.lose_at + 100 + (int)sim_rnd_below(400);
    A.die_odds = sim_chance(300) ? 0 : 10 + sim_rnd_below(150);
    A.switch_lost_odds = sim_rnd_below(150);
    A.reply_lost_odds = sim_rnd_below(100);
    A.late_odds = sim_rnd_below(150);
    A.new_lost_odds = sim_chance(200) ? 1 + sim_rnd_below(10) : 0;
}

void replace_step(void)
{
    deliver_late();
    if (!A.changing) {
        maybe_lose();
        return;
    }
    (void)sim_take_new_commit();
    if (!A.new_lost && A.stage != RUN_START && sim_acc_has_disk(A.slot) &&
        sim_acc_node_id(A.slot) == A.slot_id[A.slot] && A.joint.generation > 0 &&
        sim_chance(A.new_lost_odds)) {
        sim_trace("replace: the new node's disk is lost too");
        sim_acc_lose(A.slot);
        A.new_lost = true;
        stats.new_lost++;
    }
    if (A.stage == RUN_NONE) {
        if (sim_step() < A.next_run)
            return;
        sim_trace("replace: a run starts (slot a%d)", A.slot);
        stats.runs++;
        A.rollbacks = 0;
        A.stage = RUN_SURVEY;
    }
    if (A.die_odds > 0 && sim_chance(A.die_odds)) {
        sim_trace("replace DIES before stage %d", (int)A.stage);
        stats.deaths++;
        A.stage = RUN_NONE;
        A.next_run = sim_step() + 20 + (int)sim_rnd_below(200);
        return;
    }
    switch (A.stage) {
    case RUN_SURVEY:
        run_survey();
        break;
    case RUN_START:
        if (!sim_acc_running(A.slot) && !sim_acc_start(A.slot)) {
            run_fail("the new node did not start");
            return;
        }
        A.stage = RUN_JOINT;
        break;
    case RUN_JOINT:
        run_joint();
        break;
    case RUN_WAIT:
        run_wait();
        break;
    case RUN_FINISH:
        run_finish();
        break;
    case RUN_NONE:
        break;
    }
}

void replace_print_stats(void)
{
    printf("replace: %ld seeds with losses, %ld nodes lost (%ld with their compute), %ld runs "
           "(%ld died, %ld failed), %ld joint switches, %ld finished, %ld rolled back, %ld seeded "
           "nodes discarded, %ld new nodes lost, %ld late switches\n",
           stats.seeds, stats.losses, stats.props_lost, stats.runs, stats.deaths, stats.failures,
           stats.joints, stats.finished, stats.rolled_back, stats.discarded, stats.new_lost,
           stats.late_switches);
}
