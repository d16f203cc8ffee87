/*
 * test_proposer.c: the proposer core (compute/walproposer/proposer.c) on
 * hand-built scenarios: term choice, donor choice and term history,
 * streaming start per acceptor, the commit rule with older-term flushes,
 * fencing, heartbeats and timeouts, sync-safekeepers completion.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "compute/walproposer/proposer.h"
#include "proto/membership.h"

#define SEG (1u << 20)
#define BOOT ((lsn_t)SEG)

static proposer prop;
static proposer_output out;
static bool defer_news; /* cfg.defer_news of the next start() */

static void start(int n, bool sync)
{
    proposer_config cfg = {0};
    proposer_config_defaults(&cfg);
    cfg.n_acceptors = n;
    cfg.tenant_id.b[0] = 1;
    cfg.timeline_id.b[0] = 2;
    cfg.pg_version = 150020;
    cfg.wal_seg_size = SEG;
    cfg.bootstrap_lsn = BOOT;
    cfg.sync_safekeepers = sync;
    cfg.defer_news = defer_news;
    const char *why = NULL;
    assert_int_equal(proposer_init(&prop, &cfg, 0, &why), 0);
}

static int count(proposer_effect_kind k)
{
    int c = 0;
    for (int i = 0; i < out.n; i++)
        c += out.effects[i].kind == k;
    return c;
}

static const proposer_effect *find(proposer_effect_kind k, int acceptor)
{
    for (int i = 0; i < out.n; i++)
        if (out.effects[i].kind == k && (acceptor < 0 || out.effects[i].acceptor == acceptor))
            return &out.effects[i];
    return NULL;
}

static void greet(int i, uint64_t term)
{
    proposer_connected(&prop, i, &out);
    const proposer_effect *e = find(PROP_SEND, i);
    assert_non_null(e);
    assert_int_equal(e->u.msg->kind, PMSG_GREETING);
    assert_int_equal(e->u.msg->u.greeting.wal_seg_size, SEG);
    acceptor_msg m = {.kind = AMSG_GREETING};
    m.u.greeting.node_id = (uint64_t)i + 1;
    m.u.greeting.term = term;
    assert_int_equal(proposer_handle_message(&prop, i, &m, &out), 0);
}

static void vote(int i, bool given, uint64_t term, lsn_t flush, int n, const uint64_t *terms,
                 const lsn_t *lsns)
{
    acceptor_msg m = {.kind = AMSG_VOTE_RESPONSE};
    m.u.vote.term = term;
    m.u.vote.vote_given = given;
    m.u.vote.flush_lsn = flush;
    m.u.vote.history.n = (uint32_t)n;
    for (int k = 0; k < n; k++) {
        m.u.vote.history.entries[k].term = terms[k];
        m.u.vote.history.entries[k].lsn = lsns[k];
    }
    assert_int_equal(proposer_handle_message(&prop, i, &m, &out), 0);
}

static void respond(int i, uint64_t term, lsn_t flush, lsn_t commit)
{
    acceptor_msg m = {.kind = AMSG_APPEND_RESPONSE};
    m.u.append.term = term;
    m.u.append.flush_lsn = flush;
    m.u.append.commit_lsn = commit;
    assert_int_equal(proposer_handle_message(&prop, i, &m, &out), 0);
}

/* ---- configurations ------------------------------------------------------ */

static void add_member(member *set, uint32_t *n, uint64_t id)
{
    set[*n].node_id = id;
    snprintf(set[*n].addr, sizeof set[*n].addr, "127.0.0.1:%d", 6000 + (int)id);
    (*n)++;
}

/* Generation gen: members old_ids, and (joint) new_ids. */
static membership conf(uint32_t gen, const uint64_t *old_ids, int n_old, const uint64_t *new_ids,
                       int n_new)
{
    membership m = {.generation = gen};
    for (int i = 0; i < n_old; i++)
        add_member(m.members, &m.n_members, old_ids[i]);
    for (int i = 0; i < n_new; i++)
        add_member(m.new_members, &m.n_new_members, new_ids[i]);
    return m;
}

static void start_conf(const membership *m)
{
    proposer_config cfg = {0};
    proposer_config_defaults(&cfg);
    member slots[PROPOSER_MAX_ACCEPTORS];
    cfg.n_acceptors = membership_union(m, slots);
    cfg.mconf = *m;
    cfg.tenant_id.b[0] = 1;
    cfg.timeline_id.b[0] = 2;
    cfg.pg_version = 150020;
    cfg.wal_seg_size = SEG;
    cfg.bootstrap_lsn = BOOT;
    const char *why = NULL;
    assert_int_equal(proposer_init(&prop, &cfg, 0, &why), 0);
}

/* Slot i greets as node `node` holding configuration m; returns what the
 * core said. */
static int greet_as(int i, uint64_t node, uint64_t term, const membership *m)
{
    proposer_connected(&prop, i, &out);
    const proposer_effect *e = find(PROP_SEND, i);
    assert_non_null(e);
    assert_int_equal(e->u.msg->kind, PMSG_GREETING);
    acceptor_msg msg = {.kind = AMSG_GREETING};
    msg.u.greeting.node_id = node;
    msg.u.greeting.term = term;
    msg.u.greeting.mconf = *m;
    return proposer_handle_message(&prop, i, &msg, &out);
}

/* Joint configuration {1,2,3} -> {1,3,4}: slots are nodes 1,2,3,4; the
 * election and the commit need a majority of both sets. */
static void test_joint_configuration_quorum(void **state)
{
    (void)state;
    membership m = conf(2, (uint64_t[]){1, 2, 3}, 3, (uint64_t[]){1, 3, 4}, 3);
    start_conf(&m);
    /* The greeting carries our configuration. */
    proposer_connected(&prop, 0, &out);
    assert_true(membership_equal(&find(PROP_SEND, 0)->u.msg->u.greeting.mconf, &m));
    acceptor_msg g = {.kind = AMSG_GREETING};
    g.u.greeting.node_id = 1;
    g.u.greeting.mconf = m;
    assert_int_equal(proposer_handle_message(&prop, 0, &g, &out), 0);
    /* Nodes 1 and 2: a majority of the old set, not of the new one. */
    assert_int_equal(greet_as(1, 2, 0, &m), 0);
    assert_int_equal(count(PROP_SEND), 0);
    assert_int_equal(proposer_get_phase(&prop), PROPOSER_COLLECTING_TERMS);
    /* Node 4 completes the new set's majority {1, 4}. */
    assert_int_equal(greet_as(3, 4, 0, &m), 0);
    assert_int_equal(proposer_get_phase(&prop), PROPOSER_VOTING);
    assert_int_equal(count(PROP_SEND), 3);
    for (int i = 0; i < out.n; i++)
        assert_int_equal(out.effects[i].u.msg->u.vote.generation, 2);

    /* Votes from nodes 1 and 2 are not enough; node 4's is. */
    vote(0, true, 1, 0, 0, NULL, NULL);
    vote(1, true, 1, 0, 0, NULL, NULL);
    assert_null(find(PROP_ELECTED, -1));
    vote(3, true, 1, 0, 0, NULL, NULL);
    assert_non_null(find(PROP_ELECTED, -1));
    const proposer_effect *el = find(PROP_SEND, 3);
    assert_non_null(el);
    assert_int_equal(el->u.msg->u.elected.generation, 2);
    const proposer_effect *ap = find(PROP_APPEND, 3);
    assert_non_null(ap);
    assert_int_equal(ap->u.append.generation, 2);

    proposer_wal_available(&prop, BOOT + 0x300, &out);
    /* Flushes on nodes 1 and 2 (old majority): no commit. */
    respond(0, 1, BOOT + 0x300, 0);
    respond(1, 1, BOOT + 0x300, 0);
    assert_true(proposer_commit_lsn(&prop) < BOOT + 0x100);
    /* Node 4 flushed less: the commit is what both majorities hold. */
    respond(3, 1, BOOT + 0x100, 0);
    assert_true(proposer_commit_lsn(&prop) == BOOT + 0x100);
    respond(3, 1, BOOT + 0x300, 0);
    assert_true(proposer_commit_lsn(&prop) == BOOT + 0x300);
}

/* A new configuration without node 2: its flushes no longer count, and a
 * node at a member's address that is not that member is refused. */
static void test_excluded_member_does_not_count(void **state)
{
    (void)state;
    membership m = conf(3, (uint64_t[]){1, 3, 4}, 3, NULL, 0);
    start_conf(&m);
    /* Slot 2 is node 4; node 2 answering there is a protocol violation. */
    assert_int_equal(greet_as(2, 2, 0, &m), -1);
    assert_non_null(find(PROP_DISCONNECT, 2));
    assert_int_equal(greet_as(0, 1, 0, &m), 0);
    assert_int_equal(greet_as(2, 4, 0, &m), 0);
    vote(0, true, 1, 0, 0, NULL, NULL);
    vote(2, true, 1, 0, 0, NULL, NULL);
    assert_non_null(find(PROP_ELECTED, -1));
    proposer_wal_available(&prop, BOOT + 0x200, &out);
    respond(0, 1, BOOT + 0x200, 0);
    assert_true(proposer_commit_lsn(&prop) < BOOT + 0x200);
    respond(2, 1, BOOT + 0x200, 0);
    assert_true(proposer_commit_lsn(&prop) == BOOT + 0x200);
}

/* A safekeeper with a newer configuration ends this proposer: the edge
 * starts over with that configuration.  An older one is a violation (our
 * greeting carried ours, which it must have adopted). */
static void test_newer_configuration_reconfigures(void **state)
{
    (void)state;
    start(3, false);
    membership none = {0};
    assert_int_equal(greet_as(0, 1, 0, &none), 0);
    membership m = conf(5, (uint64_t[]){1, 3, 4}, 3, NULL, 0);
    assert_int_equal(greet_as(1, 3, 0, &m), 0);
    const proposer_effect *e = find(PROP_RECONFIGURE, 1);
    assert_non_null(e);
    assert_true(membership_equal(e->u.mconf, &m));
    assert_int_equal(proposer_get_phase(&prop), PROPOSER_RECONFIGURE);
    /* Finished: further input does nothing. */
    proposer_tick(&prop, 100000, &out);
    assert_int_equal(out.n, 0);

    membership m6 = conf(6, (uint64_t[]){1, 3, 4}, 3, NULL, 0);
    start_conf(&m6);
    assert_int_equal(greet_as(0, 1, 0, &m), -1);
    assert_non_null(find(PROP_DISCONNECT, 0));
}

static void test_term_and_donor_choice(void **state)
{
    (void)state;
    start(3, false);
    greet(0, 2);
    assert_int_equal(count(PROP_SEND), 0); /* one greeting is not a majority */
    greet(1, 4);
    /* Majority greeted: term = max + 1 = 5, vote requests to both. */
    assert_int_equal(count(PROP_SEND), 2);
    assert_int_equal(find(PROP_SEND, 0)->u.msg->u.vote.term, 5);
    assert_int_equal(proposer_get_phase(&prop), PROPOSER_VOTING);
    greet(2, 0);
    assert_int_equal(find(PROP_SEND, 2)->u.msg->kind, PMSG_VOTE_REQUEST);

    lsn_t a = BOOT + 0x100, b = BOOT + 0x200, c = BOOT + 0x300;
    /* Acceptor 0: term 1 only, but longest.  Acceptor 1: term 2 from b. */
    vote(0, true, 5, c, 1, (uint64_t[]){1}, (lsn_t[]){BOOT});
    vote(1, true, 5, b + 0x50, 2, (uint64_t[]){1, 2}, (lsn_t[]){BOOT, b});
    /* Elected: donor is acceptor 1 (last_log_term 2 beats a longer term 1). */
    const proposer_effect *el = find(PROP_ELECTED, -1);
    assert_non_null(el);
    assert_int_equal(el->u.elected.term, 5);
    assert_int_equal(el->u.elected.donor, 1);
    assert_true(el->u.elected.term_start_lsn == b + 0x50);
    /* The term that wrote the WAL this term continues (a restarted compute
     * may go on only if that is its own last term). */
    assert_int_equal(el->u.elected.donor_last_term, 2);
    const term_history *h = proposer_history(&prop);
    assert_int_equal(h->n, 3);
    assert_int_equal(h->entries[2].term, 5);
    assert_true(h->entries[2].lsn == b + 0x50);
    /* Acceptor 0 streams from where term 1 ends in our history (b). */
    const proposer_effect *e0 = find(PROP_SEND, 0);
    assert_int_equal(e0->u.msg->kind, PMSG_ELECTED);
    assert_true(e0->u.msg->u.elected.start_streaming_at == b);
    assert_true(find(PROP_SEND, 1)->u.msg->u.elected.start_streaming_at == b + 0x50);
    assert_true(el->u.elected.start_streaming_at == b);
    /* Late voter 2 has a divergent term 3 (it never voted for us before). */
    vote(2, true, 5, a + 0x10, 2, (uint64_t[]){1, 3}, (lsn_t[]){BOOT, a});
    assert_true(find(PROP_SEND, 2)->u.msg->u.elected.start_streaming_at == a);
}

static void test_bootstrap_when_all_empty(void **state)
{
    (void)state;
    start(3, false);
    greet(0, 0);
    greet(1, 0);
    vote(0, true, 1, 0, 0, NULL, NULL);
    vote(1, true, 1, 0, 0, NULL, NULL);
    const proposer_effect *el = find(PROP_ELECTED, -1);
    assert_non_null(el);
    assert_true(el->u.elected.term_start_lsn == BOOT);
    assert_int_equal(el->u.elected.donor_last_term, 0);
    assert_true(find(PROP_SEND, 0)->u.msg->u.elected.start_streaming_at == BOOT);
    assert_int_equal(proposer_history(&prop)->n, 1);
}

/* Elected in term 5 with term start S = BOOT + 0x1000; acceptors 0 and 1 voted. */
static lsn_t elect_simple(void)
{
    lsn_t s = BOOT + 0x1000;
    start(3, false);
    greet(0, 4);
    greet(1, 4);
    vote(0, true, 5, s, 1, (uint64_t[]){4}, (lsn_t[]){BOOT});
    vote(1, true, 5, BOOT + 0x800, 1, (uint64_t[]){4}, (lsn_t[]){BOOT});
    assert_non_null(find(PROP_ELECTED, -1));
    return s;
}

static void test_commit_counts_only_current_term(void **state)
{
    (void)state;
    lsn_t s = elect_simple();
    proposer_wal_available(&prop, s + 0x10000, &out);
    assert_true(count(PROP_APPEND) >= 2);
    /* Acceptor 1 catches up to just below the term start: an older term's
     * WAL on a majority (0 has s, 1 has s - 8) must not commit anything. */
    respond(0, 5, s, 0);
    respond(1, 5, s - 8, 0);
    assert_int_equal(count(PROP_COMMIT_ADVANCED), 0);
    assert_true(proposer_commit_lsn(&prop) == 0);
    /* Both at or past the term start: commit is the majority's point. */
    respond(1, 5, s + 0x400, 0);
    respond(0, 5, s + 0x200, 0);
    const proposer_effect *c = find(PROP_COMMIT_ADVANCED, -1);
    assert_non_null(c);
    assert_true(c->u.commit_lsn == s + 0x200);
    /* The new commit goes out to acceptors at once (heartbeats). */
    const proposer_effect *hb = find(PROP_APPEND, 0);
    assert_non_null(hb);
    assert_true(hb->u.append.commit_lsn == s + 0x200);
    /* A flush beyond what was sent is a protocol violation. */
    acceptor_msg m = {.kind = AMSG_APPEND_RESPONSE};
    m.u.append.term = 5;
    m.u.append.flush_lsn = s + 0x20000;
    assert_int_equal(proposer_handle_message(&prop, 0, &m, &out), -1);
    assert_non_null(find(PROP_DISCONNECT, 0));
}

/* out holds exactly one append to each of acceptors 0 and 1, both
 * [begin, end) with commit_lsn commit. */
static void assert_appends_to_both(lsn_t begin, lsn_t end, lsn_t commit)
{
    assert_int_equal(count(PROP_APPEND), 2);
    for (int i = 0; i < 2; i++) {
        const proposer_effect *a = find(PROP_APPEND, i);
        assert_non_null(a);
        assert_true(a->u.append.begin_lsn == begin && a->u.append.end_lsn == end);
        assert_true(a->u.append.commit_lsn == commit);
    }
}

/* With cfg.defer_news a new commit waits for the next WAL append to carry
 * it; proposer_send_news sends what still waits. */
static void test_deferred_news_rides_on_the_next_append(void **state)
{
    (void)state;
    defer_news = true;
    lsn_t s = elect_simple();
    defer_news = false;
    proposer_wal_available(&prop, s + 0x400, &out);
    respond(0, 5, s + 0x400, 0);
    respond(1, 5, s + 0x400, 0);
    assert_non_null(find(PROP_COMMIT_ADVANCED, -1));
    assert_int_equal(count(PROP_APPEND), 0);
    assert_true(proposer_news_pending(&prop));
    /* New WAL: its appends carry the commit, and nothing waits any more. */
    proposer_wal_available(&prop, s + 0x500, &out);
    assert_appends_to_both(s + 0x400, s + 0x500, s + 0x400);
    assert_false(proposer_news_pending(&prop));
    /* Committed again with no WAL to follow: it goes when the edge says. */
    respond(0, 5, s + 0x500, 0);
    respond(1, 5, s + 0x500, 0);
    assert_int_equal(count(PROP_APPEND), 0);
    assert_true(proposer_news_pending(&prop));
    proposer_send_news(&prop, &out);
    assert_appends_to_both(s + 0x500, s + 0x500, s + 0x500);
    assert_false(proposer_news_pending(&prop));
    /* A tick sends waiting news too (the edge's bound if it never asks). */
    proposer_wal_available(&prop, s + 0x600, &out);
    respond(0, 5, s + 0x600, 0);
    respond(1, 5, s + 0x600, 0);
    assert_true(proposer_news_pending(&prop));
    proposer_tick(&prop, 1, &out);
    assert_int_equal(count(PROP_APPEND), 2);
    assert_false(proposer_news_pending(&prop));
}

static void test_streaming_is_bounded(void **state)
{
    (void)state;
    lsn_t s = elect_simple();
    proposer_wal_available(&prop, s + (64u << 20), &out);
    lsn_t sent = 0;
    for (int i = 0; i < out.n; i++) {
        const proposer_effect *e = &out.effects[i];
        if (e->kind == PROP_APPEND && e->acceptor == 0) {
            assert_true(e->u.append.end_lsn - e->u.append.begin_lsn <= WALPUSH_MAX_APPEND);
            assert_true(sent == 0 || e->u.append.begin_lsn == sent);
            sent = e->u.append.end_lsn;
        }
    }
    /* Window of 2 MB beyond acceptor 0's start (s). */
    assert_true(sent == s + (2u << 20));
    /* Nothing more until it acknowledges. */
    proposer_tick(&prop, 10, &out);
    assert_null(find(PROP_APPEND, 0));
    respond(0, 5, s + (1u << 20), 0);
    assert_non_null(find(PROP_APPEND, 0));
}

static void test_fencing(void **state)
{
    (void)state;
    elect_simple();
    respond(0, 7, BOOT, 0);
    const proposer_effect *f = find(PROP_FENCED, -1);
    assert_non_null(f);
    assert_non_null(strstr(f->u.reason, "higher term"));
    assert_int_equal(proposer_get_phase(&prop), PROPOSER_FENCED);
    /* Everything after is ignored. */
    proposer_tick(&prop, 100000, &out);
    assert_int_equal(out.n, 0);

    /* A refused vote before the election fences too. */
    start(3, false);
    greet(0, 1);
    greet(1, 1);
    vote(0, false, 2, 0, 0, NULL, NULL);
    assert_non_null(find(PROP_FENCED, -1));
}

static void test_heartbeat_and_timeout(void **state)
{
    (void)state;
    lsn_t s = elect_simple();
    proposer_wal_available(&prop, s, &out);
    respond(0, 5, s, 0);
    respond(1, 5, s, 0);
    proposer_tick(&prop, 500, &out);
    assert_null(find(PROP_APPEND, 0));
    proposer_tick(&prop, 1500, &out);
    const proposer_effect *hb = find(PROP_APPEND, 0);
    assert_non_null(hb);
    assert_true(hb->u.append.begin_lsn == hb->u.append.end_lsn);
    respond(1, 5, s, s);
    /* Acceptor 0 stays silent past the timeout: disconnected. */
    proposer_tick(&prop, 10500, &out);
    assert_non_null(find(PROP_DISCONNECT, 0));
    assert_null(find(PROP_DISCONNECT, 1));
}

/* Pageserver feedback one acceptor reports goes to the others at once, in
 * a heartbeat, and rides on every later append; it never moves back. */
static void test_pageserver_feedback_is_relayed(void **state)
{
    (void)state;
    lsn_t s = elect_simple();
    proposer_wal_available(&prop, s, &out);
    respond(0, 5, s, 0);
    respond(1, 5, s, 0);
    acceptor_msg m = {.kind = AMSG_APPEND_RESPONSE};
    m.u.append.term = 5;
    m.u.append.flush_lsn = s;
    m.u.append.ps_feedback.last_received_lsn = s;
    m.u.append.ps_feedback.disk_consistent_lsn = s - 0x100;
    m.u.append.ps_feedback.remote_consistent_lsn = s - 0x200;
    assert_int_equal(proposer_handle_message(&prop, 0, &m, &out), 0);
    const proposer_effect *hb = find(PROP_APPEND, 1);
    assert_non_null(hb);
    assert_true(hb->u.append.begin_lsn == hb->u.append.end_lsn);
    assert_true(hb->u.append.ps_feedback.disk_consistent_lsn == s - 0x100);
    assert_true(hb->u.append.ps_feedback.remote_consistent_lsn == s - 0x200);
    /* An acceptor that has heard less does not pull it back. */
    respond(1, 5, s, 0);
    proposer_wal_available(&prop, s + 0x100, &out);
    const proposer_effect *a = find(PROP_APPEND, 1);
    assert_non_null(a);
    assert_true(a->u.append.ps_feedback.disk_consistent_lsn == s - 0x100);
    /* Nothing new: no extra heartbeat. */
    respond(1, 5, s + 0x100, 0);
    assert_int_equal(proposer_handle_message(&prop, 0, &m, &out), 0);
    assert_null(find(PROP_APPEND, 1));
}

static void test_sync_safekeepers(void **state)
{
    (void)state;
    lsn_t s = BOOT + 0x1000;
    start(3, true);
    greet(0, 4);
    greet(1, 4);
    vote(0, true, 5, s, 1, (uint64_t[]){4}, (lsn_t[]){BOOT});
    vote(1, true, 5, BOOT + 0x800, 1, (uint64_t[]){4}, (lsn_t[]){BOOT});
    const proposer_effect *el = find(PROP_ELECTED, -1);
    assert_int_equal(el->u.elected.donor, 0);
    /* The edge fetched the donor's WAL; more would not be sent anyway. */
    proposer_wal_available(&prop, s + 0x100000, &out);
    const proposer_effect *a = find(PROP_APPEND, 1);
    assert_non_null(a);
    assert_true(a->u.append.begin_lsn == BOOT + 0x800 && a->u.append.end_lsn == s);
    respond(0, 5, s, 0);
    respond(1, 5, s, 0);
    assert_non_null(find(PROP_COMMIT_ADVANCED, -1));
    assert_null(find(PROP_SYNC_DONE, -1));
    respond(0, 5, s, s);
    assert_null(find(PROP_SYNC_DONE, -1));
    respond(1, 5, s, s);
    const proposer_effect *d = find(PROP_SYNC_DONE, -1);
    assert_non_null(d);
    assert_true(d->u.sync_lsn == s);
    assert_int_equal(proposer_get_phase(&prop), PROPOSER_SYNC_DONE);
}

/* All three acceptors stream: a majority synced is not done yet while the
 * third may still report within the linger; it is done when the third does,
 * or when the linger runs out. */
static void test_sync_lingers_for_streaming_acceptors(void **state)
{
    (void)state;
    lsn_t s = BOOT + 0x1000;
    for (int silent_third = 0; silent_third < 2; silent_third++) {
        start(3, true);
        greet(0, 4);
        greet(1, 4);
        greet(2, 4);
        vote(0, true, 5, s, 1, (uint64_t[]){4}, (lsn_t[]){BOOT});
        vote(1, true, 5, s, 1, (uint64_t[]){4}, (lsn_t[]){BOOT});
        vote(2, true, 5, s, 1, (uint64_t[]){4}, (lsn_t[]){BOOT});
        proposer_tick(&prop, 100, &out);
        respond(0, 5, s, s);
        respond(1, 5, s, s);
        assert_null(find(PROP_SYNC_DONE, -1));
        respond(2, 5, s, 0);
        assert_null(find(PROP_SYNC_DONE, -1));
        proposer_tick(&prop, 600, &out);
        assert_null(find(PROP_SYNC_DONE, -1));
        if (silent_third)
            proposer_tick(&prop, 1200, &out);
        else
            respond(2, 5, s, s);
        const proposer_effect *d = find(PROP_SYNC_DONE, -1);
        assert_non_null(d);
        assert_true(d->u.sync_lsn == s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_term_and_donor_choice),
        cmocka_unit_test(test_sync_lingers_for_streaming_acceptors),
        cmocka_unit_test(test_bootstrap_when_all_empty),
        cmocka_unit_test(test_commit_counts_only_current_term),
        cmocka_unit_test(test_deferred_news_rides_on_the_next_append),
        cmocka_unit_test(test_streaming_is_bounded),
        cmocka_unit_test(test_fencing),
        cmocka_unit_test(test_heartbeat_and_timeout),
        cmocka_unit_test(test_pageserver_feedback_is_relayed),
        cmocka_unit_test(test_sync_safekeepers),
        cmocka_unit_test(test_joint_configuration_quorum),
        cmocka_unit_test(test_excluded_member_does_not_count),
        cmocka_unit_test(test_newer_configuration_reconfigures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
