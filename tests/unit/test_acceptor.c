/*
 * test_acceptor.c: the acceptor core (safekeeper/acceptor.c) on hand-built
 * scenarios: vote persistence order, refusal of lower terms, truncation at
 * the highest common point, group commit, record-boundary flush positions,
 * contiguity, restart.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "safekeeper/acceptor.h"

#include "proto/membership.h"

/* The synthetic WAL generator lives with the simulator; compiled in here. */
#include "tests/sim/simwal.c"

#define SEG (1u << 20)
#define BOOT ((lsn_t)SEG) /* WAL starts at segment 1 */
#define WINDOW (4u << 20)

static uint8_t walmem[WINDOW];
static acceptor acc;
static acceptor_output out;
static strata_id tenant = {{1}}, timeline = {{2}};
static uint32_t generation; /* what vote/elected/append carry */
/* Whose greeting greet_conf sends: a compute's (a tenant token) unless a
 * test says the admin's. */
static acceptor_authority greet_authority = ACCEPTOR_STREAM;

static int greet_conf(const membership *m)
{
    proposer_msg msg = {.kind = PMSG_GREETING};
    msg.u.greeting.proto_version = WALPUSH_PROTO_VERSION;
    msg.u.greeting.tenant_id = tenant;
    msg.u.greeting.timeline_id = timeline;
    msg.u.greeting.pg_version = 150020;
    msg.u.greeting.wal_seg_size = SEG;
    msg.u.greeting.mconf = *m;
    return acceptor_handle_message(&acc, &msg, greet_authority, &out);
}

static void greet(void)
{
    membership none = {0};
    assert_int_equal(greet_conf(&none), 0);
}

static int vote(uint64_t term)
{
    proposer_msg m = {.kind = PMSG_VOTE_REQUEST};
    m.u.vote.term = term;
    m.u.vote.generation = generation;
    return acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out);
}

static int elected(uint64_t term, lsn_t start, const term_history *h)
{
    static proposer_msg m;
    m.kind = PMSG_ELECTED;
    m.u.elected.term = term;
    m.u.elected.generation = generation;
    m.u.elected.start_streaming_at = start;
    m.u.elected.history = *h;
    return acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out);
}

static int append(uint64_t term, lsn_t begin, lsn_t end, lsn_t commit)
{
    proposer_msg m = {.kind = PMSG_APPEND};
    m.u.append.term = term;
    m.u.append.generation = generation;
    m.u.append.begin_lsn = begin;
    m.u.append.end_lsn = end;
    m.u.append.commit_lsn = commit;
    m.u.append.wal = walmem + (begin - BOOT);
    m.u.append.wal_len = (uint32_t)(end - begin);
    return acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out);
}

static void flush_all(void)
{
    assert_true(acceptor_flush_wanted(&acc));
    acceptor_flush_begin(&acc);
    assert_int_equal(acceptor_flush_done(&acc, &out), 0);
}

static void set_history(term_history *h, int n, const uint64_t *terms, const lsn_t *lsns)
{
    h->n = (uint32_t)n;
    for (int i = 0; i < n; i++) {
        h->entries[i].term = terms[i];
        h->entries[i].lsn = lsns[i];
    }
}

/* Fills walmem with records from BOOT; ends[] receives record ends. */
static int gen_records(lsn_t *ends, int max, uint32_t size, lsn_t upto)
{
    simwal w;
    simwal_init(&w, walmem, BOOT, WINDOW, SEG, BOOT, 0);
    int n = 0;
    while (n < max && w.pos < upto) {
        ends[n] = simwal_append(&w, size + (uint32_t)(n % 7) * 100, 10, 0, (uint32_t)n);
        assert_true(ends[n] != 0);
        n++;
    }
    return n;
}

/* A fresh acceptor, greeted, voted and elected for term `term` from BOOT. */
static void setup_streaming(uint64_t term)
{
    acceptor_init(&acc, 1, &tenant, &timeline);
    greet();
    assert_int_equal(vote(term), 0);
    term_history h;
    set_history(&h, 1, (uint64_t[]){term}, (lsn_t[]){BOOT});
    assert_int_equal(elected(term, BOOT, &h), 0);
}

static membership conf(uint32_t gen, const uint64_t *ids, int n)
{
    membership m = {.generation = gen, .n_members = (uint32_t)n};
    for (int i = 0; i < n; i++) {
        m.members[i].node_id = ids[i];
        snprintf(m.members[i].addr, sizeof m.members[i].addr, "127.0.0.1:%d", 7000 + (int)ids[i]);
    }
    return m;
}

/* Configurations: switched only forward, served only to the current
 * generation and only while a member, learned from a newer proposer. */
static void test_configuration_generation(void **state)
{
    (void)state;
    generation = 0;
    acceptor_init(&acc, 1, &tenant, &timeline);
    greet();
    assert_int_equal(vote(1), 0);

    membership g2 = conf(2, (uint64_t[]){1, 2, 3}, 3);
    assert_int_equal(acceptor_switch_membership(&acc, &g2, ACCEPTOR_ADMIN, &out), 0);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.effects[0].kind, ACC_PERSIST_CONTROL);
    assert_true(membership_equal(&out.control.mconf, &g2));
    /* The old generation is refused; the greeting tells the newer one. */
    assert_int_equal(vote(2), -1);
    assert_non_null(strstr(out.error, "generation"));
    membership none = {0};
    assert_int_equal(greet_conf(&none), 0);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.effects[0].kind, ACC_SEND);
    assert_true(membership_equal(&out.msg.u.greeting.mconf, &g2));
    generation = 2;
    assert_int_equal(vote(2), 0);

    /* Same generation, same content: nothing; other content, older: no. */
    assert_int_equal(acceptor_switch_membership(&acc, &g2, ACCEPTOR_ADMIN, &out), 0);
    assert_int_equal(out.n, 0);
    membership other = conf(2, (uint64_t[]){1, 2, 4}, 3);
    assert_int_equal(acceptor_switch_membership(&acc, &other, ACCEPTOR_ADMIN, &out), -1);
    assert_non_null(strstr(out.error, "different configuration"));
    membership g1 = conf(1, (uint64_t[]){1, 2, 3}, 3);
    assert_int_equal(acceptor_switch_membership(&acc, &g1, ACCEPTOR_ADMIN, &out), -1);
    assert_non_null(strstr(out.error, "newer"));
    membership bad = g2;
    bad.generation = 9;
    bad.members[1].node_id = 1;
    assert_int_equal(acceptor_switch_membership(&acc, &bad, ACCEPTOR_ADMIN, &out), -1);
    assert_non_null(strstr(out.error, "twice"));

    /* Excluded: node 1 is not in generation 3. */
    membership g3 = conf(3, (uint64_t[]){2, 3, 4}, 3);
    assert_int_equal(acceptor_switch_membership(&acc, &g3, ACCEPTOR_ADMIN, &out), 0);
    generation = 3;
    assert_int_equal(vote(3), -1);
    assert_non_null(strstr(out.error, "not a member"));

    /* A proposer bringing generation 5 (with node 1 back): refused from a
     * tenant's connection (the next test), adopted from the admin's, the
     * control file written before the reply. */
    membership g5 = conf(5, (uint64_t[]){1, 3, 4}, 3);
    greet_authority = ACCEPTOR_ADMIN;
    assert_int_equal(greet_conf(&g5), 0);
    greet_authority = ACCEPTOR_STREAM;
    assert_int_equal(out.n, 2);
    assert_int_equal(out.effects[0].kind, ACC_PERSIST_CONTROL);
    assert_true(membership_equal(&out.control.mconf, &g5));
    assert_int_equal(out.effects[1].kind, ACC_SEND);
    assert_int_equal(out.msg.u.greeting.mconf.generation, 5);
    generation = 5;
    assert_int_equal(vote(4), 0);
    generation = 0;
}

/* Finding 8: a connection without the admin's authority can never install
 * or change a configuration.  A greeting that brings a newer one (here the
 * forged generation 0xFFFFFFFF naming another node, which would leave no
 * configuration to move to) is refused with no effect and the state is
 * unchanged; the same greeting from the admin is adopted.  A switch needs
 * the admin too. */
static void test_configuration_needs_admin(void **state)
{
    (void)state;
    generation = 0;
    setup_streaming(1);
    lsn_t ends[8];
    gen_records(ends, 8, 200, BOOT + 4 * 8192);
    assert_int_equal(append(1, BOOT, ends[3], 0), 0);
    flush_all();
    const membership before = acceptor_state(&acc)->mconf;
    assert_int_equal(before.generation, 0);

    membership forged = conf(0xFFFFFFFFu, (uint64_t[]){99}, 1);
    membership g1 = conf(1, (uint64_t[]){1, 2, 3}, 3);
    const membership *tries[] = {&forged, &g1};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(greet_conf(tries[i]), -1);
        assert_int_equal(out.n, 0);
        assert_non_null(strstr(out.error, "admin"));
        assert_true(membership_equal(&acceptor_state(&acc)->mconf, &before));
        assert_int_equal(acceptor_term(&acc), 1);
        assert_int_equal(acceptor_switch_membership(&acc, tries[i], ACCEPTOR_STREAM, &out), -1);
        assert_int_equal(out.n, 0);
        assert_non_null(strstr(out.error, "admin"));
        assert_true(membership_equal(&acceptor_state(&acc)->mconf, &before));
        assert_int_equal(acceptor_term(&acc), 1);
    }
    /* The timeline still takes WAL from the tenant's proposer. */
    assert_int_equal(append(1, ends[3], ends[5], ends[3]), 0);
    flush_all();
    assert_int_equal(acceptor_flush_lsn(&acc), ends[5]);
    /* An older or equal configuration from a tenant is not a change: the
     * reply tells ours. */
    membership none = {0};
    assert_int_equal(greet_conf(&none), 0);
    assert_int_equal(out.msg.u.greeting.mconf.generation, 0);

    /* The admin's greeting installs it, durably before the reply. */
    greet_authority = ACCEPTOR_ADMIN;
    assert_int_equal(greet_conf(&g1), 0);
    greet_authority = ACCEPTOR_STREAM;
    assert_int_equal(out.n, 2);
    assert_int_equal(out.effects[0].kind, ACC_PERSIST_CONTROL);
    assert_true(membership_equal(&out.control.mconf, &g1));
    assert_true(membership_equal(&acceptor_state(&acc)->mconf, &g1));
    /* Now a tenant greeting with generation 1 is fine, 2 is not. */
    assert_int_equal(greet_conf(&g1), 0);
    membership g2 = conf(2, (uint64_t[]){1, 2, 3}, 3);
    assert_int_equal(greet_conf(&g2), -1);
    assert_int_equal(acceptor_state(&acc)->mconf.generation, 1);
}

static void test_greeting_initialises_and_checks(void **state)
{
    (void)state;
    acceptor_init(&acc, 7, &tenant, &timeline);
    greet();
    assert_int_equal(out.n, 2);
    assert_int_equal(out.effects[0].kind, ACC_PERSIST_CONTROL);
    assert_int_equal(out.control.wal_seg_size, SEG);
    assert_int_equal(out.effects[1].kind, ACC_SEND);
    assert_int_equal(out.msg.kind, AMSG_GREETING);
    assert_int_equal(out.msg.u.greeting.node_id, 7);
    assert_int_equal(out.msg.u.greeting.term, 0);
    /* Second greeting: no persist; mismatches rejected. */
    greet();
    assert_int_equal(out.n, 1);
    proposer_msg m = {.kind = PMSG_GREETING};
    m.u.greeting.proto_version = WALPUSH_PROTO_VERSION;
    m.u.greeting.tenant_id = tenant;
    m.u.greeting.timeline_id = timeline;
    m.u.greeting.pg_version = 160001;
    m.u.greeting.wal_seg_size = SEG;
    assert_int_equal(acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out), -1);
    assert_non_null(strstr(out.error, "major"));
    assert_int_equal(out.n, 0);
    m.u.greeting.pg_version = 150007; /* same major: fine */
    assert_int_equal(acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out), 0);
    m.u.greeting.wal_seg_size = 2 * SEG;
    assert_int_equal(acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out), -1);
    m.u.greeting.wal_seg_size = SEG;
    m.u.greeting.timeline_id.b[0] = 9;
    assert_int_equal(acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out), -1);
    m.u.greeting.timeline_id = timeline;
    /* Made by sync-safekeepers (system_id 0): the first compute's greeting
     * supplies the identifier, persisted; a different one is refused. */
    assert_true(acceptor_state(&acc)->system_id == 0);
    m.u.greeting.system_id = 7713987050987644490ull;
    assert_int_equal(acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out), 0);
    assert_int_equal(out.effects[0].kind, ACC_PERSIST_CONTROL);
    assert_true(out.control.system_id == 7713987050987644490ull);
    assert_true(acceptor_state(&acc)->system_id == 7713987050987644490ull);
    assert_int_equal(acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out), 0);
    assert_int_equal(out.n, 1); /* known now: nothing to persist */
    m.u.greeting.system_id = 0; /* sync-safekeepers again: fine, kept */
    assert_int_equal(acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out), 0);
    assert_true(acceptor_state(&acc)->system_id == 7713987050987644490ull);
    m.u.greeting.system_id = 42;
    assert_int_equal(acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out), -1);
    assert_non_null(strstr(out.error, "system_id"));
}

static void test_vote_persists_before_reply(void **state)
{
    (void)state;
    lsn_t ends[64];
    int n = gen_records(ends, 64, 500, BOOT + 20000);
    setup_streaming(3);
    /* Unflushed WAL, then a vote for a higher term. */
    assert_int_equal(append(3, BOOT, ends[n - 1], 0), 0);
    assert_int_equal(out.effects[0].kind, ACC_WRITE_WAL);
    assert_int_equal(vote(5), 0);
    assert_int_equal(out.n, 3);
    assert_int_equal(out.effects[0].kind, ACC_FLUSH_WAL);
    assert_int_equal(out.effects[1].kind, ACC_PERSIST_CONTROL);
    assert_int_equal(out.control.term, 5);
    assert_int_equal(out.effects[2].kind, ACC_SEND);
    assert_true(out.msg.u.vote.vote_given);
    assert_int_equal(out.msg.u.vote.term, 5);
    /* The flush reported covers everything written (after FLUSH_WAL). */
    assert_true(out.msg.u.vote.flush_lsn == ends[n - 1]);
    assert_int_equal(out.msg.u.vote.history.n, 1);
    /* Same term again: refused, nothing persisted. */
    assert_int_equal(vote(5), 0);
    assert_int_equal(out.n, 1);
    assert_false(out.msg.u.vote.vote_given);
    assert_int_equal(out.msg.u.vote.term, 5);
    /* Lower term: refused with our term. */
    assert_int_equal(vote(4), 0);
    assert_false(out.msg.u.vote.vote_given);
    assert_int_equal(out.msg.u.vote.term, 5);
    /* Vote before greeting is a protocol error. */
    acceptor_init(&acc, 1, &tenant, &timeline);
    assert_int_equal(vote(1), -1);
}

static void test_refuses_lower_terms(void **state)
{
    (void)state;
    lsn_t ends[16];
    gen_records(ends, 16, 300, BOOT + 3000);
    setup_streaming(3);
    assert_int_equal(vote(6), 0);
    /* Old proposer's append: refused with term 6, nothing written. */
    assert_int_equal(append(3, BOOT, ends[0], 0), 0);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.effects[0].kind, ACC_SEND);
    assert_int_equal(out.msg.kind, AMSG_APPEND_RESPONSE);
    assert_int_equal(out.msg.u.append.term, 6);
    assert_false(out.append_accepted);
    assert_true(acceptor_write_lsn(&acc) == BOOT);
    /* Old proposer's ProposerElected: refused too. */
    term_history h;
    set_history(&h, 1, (uint64_t[]){4}, (lsn_t[]){BOOT});
    assert_int_equal(elected(4, BOOT, &h), 0);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.msg.u.append.term, 6);
    /* Term 6 voted but not yet elected: its appends are a protocol error. */
    assert_int_equal(append(6, BOOT, ends[0], 0), -1);
    assert_non_null(strstr(out.error, "before ProposerElected"));
}

static void test_truncates_at_highest_common_point(void **state)
{
    (void)state;
    lsn_t ends[200];
    int n = gen_records(ends, 200, 700, BOOT + 60000);
    /* Term 1 wrote up to ends[n-1], all durable. */
    setup_streaming(1);
    assert_int_equal(append(1, BOOT, ends[n - 1], 0), 0);
    flush_all();
    assert_true(acceptor_flush_lsn(&acc) == ends[n - 1]);
    assert_int_equal(vote(3), 0);
    /* Term 2 diverged at ends[10]; term 3's history: (1,BOOT),(2,ends[10]),(3,ends[20]). */
    term_history h;
    set_history(&h, 3, (uint64_t[]){1, 2, 3}, (lsn_t[]){BOOT, ends[10], ends[20]});
    /* A start that is not the common point is refused, state untouched. */
    assert_int_equal(elected(3, ends[11], &h), -1);
    assert_true(acceptor_write_lsn(&acc) == ends[n - 1]);
    assert_int_equal(elected(3, ends[10], &h), 0);
    assert_int_equal(out.n, 2);
    assert_int_equal(out.effects[0].kind, ACC_TRUNCATE_WAL);
    assert_true(out.effects[0].lsn == ends[10]);
    assert_int_equal(out.effects[1].kind, ACC_PERSIST_CONTROL);
    assert_int_equal(out.control.history.n, 3);
    assert_int_equal(out.control.term, 3);
    assert_true(acceptor_write_lsn(&acc) == ends[10]);
    assert_true(acceptor_flush_lsn(&acc) == ends[10]);
    /* Appends of term 3 continue at the truncation point only. */
    assert_int_equal(append(3, ends[11], ends[12], 0), -1);
    assert_non_null(strstr(out.error, "contiguous"));
    assert_int_equal(append(3, ends[10], ends[12], 0), 0);
    assert_true(out.append_accepted);

    /* Vote response history stops at flush_lsn. */
    assert_int_equal(vote(4), 0);
    assert_int_equal(out.msg.u.vote.history.n, 2);
    assert_true(out.msg.u.vote.flush_lsn == ends[12]);
}

static void test_committed_wal_never_truncated(void **state)
{
    (void)state;
    lsn_t ends[100];
    int n = gen_records(ends, 100, 400, BOOT + 30000);
    setup_streaming(1);
    assert_int_equal(append(1, BOOT, ends[n - 1], ends[30]), 0);
    flush_all();
    assert_int_equal(vote(2), 0);
    term_history h;
    set_history(&h, 2, (uint64_t[]){1, 2}, (lsn_t[]){BOOT, ends[20]});
    assert_int_equal(elected(2, ends[20], &h), -1);
    assert_non_null(strstr(out.error, "committed"));
}

static void test_group_commit(void **state)
{
    (void)state;
    lsn_t ends[100];
    gen_records(ends, 100, 3000, BOOT + 100000);
    setup_streaming(2);
    /* Two appends: written at once, no responses yet. */
    assert_int_equal(append(2, BOOT, ends[3], 0), 0);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.effects[0].kind, ACC_WRITE_WAL);
    assert_true(out.effects[0].data == walmem);
    lsn_t mid = ends[6] + 100; /* ends mid-record */
    assert_int_equal(append(2, ends[3], mid, ends[1]), 0);
    assert_int_equal(out.n, 1);
    assert_true(acceptor_flush_wanted(&acc));
    assert_true(acceptor_flush_begin(&acc) == mid);
    /* More arrives while the fdatasync runs. */
    assert_int_equal(append(2, mid, ends[9], ends[2]), 0);
    assert_int_equal(out.n, 1);
    assert_true(acceptor_flush_wanted(&acc));
    assert_int_equal(acceptor_flush_done(&acc, &out), 0);
    /* One response for both: flush is the last complete record it covers.
     * commit_lsn reached the term start, so it is persisted first. */
    assert_int_equal(out.n, 2);
    assert_int_equal(out.effects[0].kind, ACC_PERSIST_CONTROL);
    assert_true(out.control.commit_lsn == ends[2]);
    assert_int_equal(out.effects[1].kind, ACC_SEND);
    assert_int_equal(out.msg.kind, AMSG_APPEND_RESPONSE);
    assert_true(out.msg.u.append.flush_lsn == ends[6]);
    assert_true(out.msg.u.append.commit_lsn == ends[2]);
    assert_true(acceptor_commit_lsn(&acc) == ends[2]);
    /* The next flush covers the third append. */
    flush_all();
    assert_int_equal(out.n, 1);
    assert_true(out.msg.u.append.flush_lsn == ends[9]);
    assert_false(acceptor_flush_wanted(&acc));
    /* Heartbeat with nothing pending: immediate answer, commit capped. */
    assert_int_equal(append(2, ends[9], ends[9], ends[20]), 0);
    assert_int_equal(out.effects[out.n - 1].kind, ACC_SEND);
    assert_true(acceptor_commit_lsn(&acc) == ends[9]);
    /* Garbage instead of WAL is refused before anything is written. */
    memset(walmem + (ends[9] - BOOT), 0x5a, 64);
    assert_int_equal(append(2, ends[9], ends[9] + 64, 0), -1);
    assert_int_equal(out.n, 0);
    assert_true(acceptor_write_lsn(&acc) == ends[9]);
}

static void test_truncate_clamps_inflight_flush(void **state)
{
    (void)state;
    lsn_t ends[100];
    gen_records(ends, 100, 1000, BOOT + 60000);
    setup_streaming(1);
    assert_int_equal(append(1, BOOT, ends[10], 0), 0);
    flush_all();
    assert_int_equal(append(1, ends[10], ends[20], 0), 0);
    acceptor_flush_begin(&acc);
    /* A vote flushes synchronously; then a new term truncates to ends[20]'s
     * common point; the old fdatasync's completion must not claim more. */
    assert_int_equal(vote(2), 0);
    term_history h;
    set_history(&h, 2, (uint64_t[]){1, 2}, (lsn_t[]){BOOT, ends[20]});
    assert_int_equal(elected(2, ends[20], &h), 0);
    assert_int_equal(out.n, 1); /* nothing to truncate: just persist */
    assert_int_equal(acceptor_flush_done(&acc, &out), 0);
    assert_int_equal(out.n, 0);
    assert_true(acceptor_flush_lsn(&acc) == ends[20]);
}

/* Feedback relayed in an AppendRequest is merged field by field, never
 * moves back, and is echoed in the AppendResponse; a stale term's append
 * relays nothing. */
static void test_relayed_pageserver_feedback(void **state)
{
    (void)state;
    setup_streaming(3);
    proposer_msg m = {.kind = PMSG_APPEND};
    m.u.append.term = 3;
    m.u.append.generation = generation;
    m.u.append.begin_lsn = m.u.append.end_lsn = BOOT;
    m.u.append.ps_feedback.disk_consistent_lsn = BOOT + 0x100;
    m.u.append.ps_feedback.remote_consistent_lsn = BOOT + 0x80;
    assert_int_equal(acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out), 0);
    const pageserver_feedback *fb = &acceptor_state(&acc)->ps_feedback;
    assert_true(fb->disk_consistent_lsn == BOOT + 0x100);
    assert_true(fb->remote_consistent_lsn == BOOT + 0x80);
    assert_int_equal(out.msg.kind, AMSG_APPEND_RESPONSE);
    assert_true(out.msg.u.append.ps_feedback.disk_consistent_lsn == BOOT + 0x100);
    m.u.append.ps_feedback.disk_consistent_lsn = BOOT;
    m.u.append.ps_feedback.remote_consistent_lsn = BOOT + 0x200;
    assert_int_equal(acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out), 0);
    assert_true(fb->disk_consistent_lsn == BOOT + 0x100);
    assert_true(fb->remote_consistent_lsn == BOOT + 0x200);
    m.u.append.term = 2;
    m.u.append.ps_feedback.disk_consistent_lsn = BOOT + 0x1000;
    assert_int_equal(acceptor_handle_message(&acc, &m, ACCEPTOR_STREAM, &out), 0);
    assert_true(fb->disk_consistent_lsn == BOOT + 0x100);
}

static void test_restore(void **state)
{
    (void)state;
    lsn_t ends[50];
    gen_records(ends, 50, 200, BOOT + 8000);
    setup_streaming(4);
    acceptor_persistent_state st = *acceptor_state(&acc);
    const char *why = NULL;
    assert_int_equal(acceptor_restore(&acc, &st, ends[5], &why), 0);
    assert_true(acceptor_flush_lsn(&acc) == ends[5]);
    assert_int_equal(acceptor_term(&acc), 4);
    /* Streaming continues right at the end found by the scan. */
    assert_int_equal(append(4, ends[5], ends[8], 0), 0);
    assert_true(out.append_accepted);
    st.history.n = 2;
    st.history.entries[1] = st.history.entries[0];
    assert_int_equal(acceptor_restore(&acc, &st, ends[5], &why), -1);
    assert_non_null(why);
}

/* WAL fetched from the backup after ProposerElected: taken only then and
 * contiguously, checked like an append, flushed silently; commit comes from
 * the proposer (also in an append refused for space). */
static void test_recovered_wal(void **state)
{
    (void)state;
    lsn_t ends[100];
    gen_records(ends, 100, 3000, BOOT + 100000);
    acceptor_init(&acc, 1, &tenant, &timeline);
    greet();
    assert_int_equal(acceptor_append_recovered(&acc, BOOT, walmem, 100, &out), -1);
    assert_int_equal(vote(2), 0);
    /* Voted but not yet elected-to: not the current term's stream. */
    assert_int_equal(acceptor_append_recovered(&acc, BOOT, walmem, 100, &out), -1);
    term_history h;
    set_history(&h, 1, (uint64_t[]){2}, (lsn_t[]){BOOT});
    assert_int_equal(elected(2, BOOT, &h), 0);
    assert_int_equal(acceptor_append_recovered(&acc, ends[0], walmem, 100, &out), -1);
    assert_int_equal(out.n, 0);
    lsn_t mid = ends[5] + 100;
    assert_int_equal(acceptor_append_recovered(&acc, BOOT, walmem, (uint32_t)(mid - BOOT), &out),
                     0);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.effects[0].kind, ACC_WRITE_WAL);
    assert_true(acceptor_write_lsn(&acc) == mid);
    assert_true(acceptor_state(&acc)->commit_lsn == 0); /* the proposer's to say */
    flush_all();
    assert_int_equal(out.n, 0); /* nobody to answer */
    assert_true(acceptor_flush_lsn(&acc) == ends[5]);
    /* An append refused for space still brings its commit and feedback,
     * from the current term only. */
    append_request r = {.term = 1, .commit_lsn = ends[7]};
    r.ps_feedback.disk_consistent_lsn = ends[3];
    acceptor_note_refused_append(&acc, &r);
    assert_true(acceptor_state(&acc)->commit_lsn == 0);
    r.term = 2;
    acceptor_note_refused_append(&acc, &r);
    assert_true(acceptor_state(&acc)->commit_lsn == ends[7]);
    assert_true(acceptor_state(&acc)->ps_feedback.disk_consistent_lsn == ends[3]);
    assert_true(acceptor_commit_lsn(&acc) == ends[5]); /* capped by flush */
    /* Garbage is refused and nothing moves. */
    memset(walmem + (ends[9] - BOOT), 0x5a, 64);
    assert_int_equal(acceptor_append_recovered(&acc, mid, walmem + (mid - BOOT),
                                               (uint32_t)(ends[9] + 64 - mid), &out),
                     -1);
    assert_true(acceptor_write_lsn(&acc) == mid);
    /* The proposer streams on from where the recovery ended. */
    assert_int_equal(append(2, mid, ends[8], ends[8]), 0);
    assert_int_equal(out.n, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_configuration_needs_admin),
        cmocka_unit_test(test_greeting_initialises_and_checks),
        cmocka_unit_test(test_vote_persists_before_reply),
        cmocka_unit_test(test_refuses_lower_terms),
        cmocka_unit_test(test_truncates_at_highest_common_point),
        cmocka_unit_test(test_committed_wal_never_truncated),
        cmocka_unit_test(test_group_commit),
        cmocka_unit_test(test_truncate_clamps_inflight_flush),
        cmocka_unit_test(test_restore),
        cmocka_unit_test(test_relayed_pageserver_feedback),
        cmocka_unit_test(test_configuration_generation),
        cmocka_unit_test(test_recovered_wal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
