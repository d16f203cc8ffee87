/*
 * test_walpush.c: round trips and rejections of the WAL-push codec
 * (proto/walpush.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "proto/walpush.h"
#include "proto/membership.h"
#include "proto/term_history.h"

#include "base/byteorder.h"

static uint8_t buf[WALPUSH_MAX_MESSAGE];
static uint8_t wal[WALPUSH_MAX_APPEND + 1];

static void fill_id(strata_id *id, uint8_t seed)
{
    for (int i = 0; i < STRATA_ID_LEN; i++)
        id->b[i] = (uint8_t)(seed + i);
}

static void fill_history(term_history *h, uint32_t n)
{
    h->n = n;
    for (uint32_t i = 0; i < n; i++) {
        h->entries[i].term = 3 + 2 * (uint64_t)i;
        h->entries[i].lsn = 0x1000000 + 0x100 * (uint64_t)i;
    }
}

/* Encodes, decodes, re-encodes; the bytes must be identical. */
static size_t roundtrip_p(const proposer_msg *in, proposer_msg *out)
{
    size_t n = walpush_encode_proposer_msg(in, buf, sizeof(buf));
    assert_true(n > 0);
    const char *why = NULL;
    assert_int_equal(walpush_decode_proposer_msg(buf, n, out, &why), 0);
    static uint8_t again[WALPUSH_MAX_MESSAGE];
    size_t m = walpush_encode_proposer_msg(out, again, sizeof(again));
    assert_int_equal(m, n);
    assert_memory_equal(buf, again, n);
    return n;
}

static size_t roundtrip_a(const acceptor_msg *in, acceptor_msg *out)
{
    size_t n = walpush_encode_acceptor_msg(in, buf, sizeof(buf));
    assert_true(n > 0);
    const char *why = NULL;
    assert_int_equal(walpush_decode_acceptor_msg(buf, n, out, &why), 0);
    static uint8_t again[WALPUSH_MAX_MESSAGE];
    size_t m = walpush_encode_acceptor_msg(out, again, sizeof(again));
    assert_int_equal(m, n);
    assert_memory_equal(buf, again, n);
    return n;
}

static void test_proposer_greeting(void **state)
{
    (void)state;
    proposer_msg m = {.kind = PMSG_GREETING}, d;
    m.u.greeting.proto_version = WALPUSH_PROTO_VERSION;
    fill_id(&m.u.greeting.tenant_id, 1);
    fill_id(&m.u.greeting.timeline_id, 100);
    m.u.greeting.pg_version = 150020;
    m.u.greeting.system_id = 0x0123456789abcdefULL;
    m.u.greeting.wal_seg_size = 16u << 20;
    size_t n = roundtrip_p(&m, &d);
    /* Generation 0: u32 generation and two empty member sets. */
    assert_int_equal(n, 1 + 4 + 16 + 16 + 4 + 8 + 4 + 4 + 1 + 1);
    assert_int_equal(buf[0], 'g');
    assert_int_equal(d.kind, PMSG_GREETING);
    assert_true(strata_id_equal(&d.u.greeting.tenant_id, &m.u.greeting.tenant_id));
    assert_true(strata_id_equal(&d.u.greeting.timeline_id, &m.u.greeting.timeline_id));
    assert_int_equal(d.u.greeting.pg_version, 150020);
    assert_true(d.u.greeting.system_id == 0x0123456789abcdefULL);
    assert_int_equal(d.u.greeting.wal_seg_size, 16u << 20);
    /* Big-endian: system_id's first byte on the wire is 0x01. */
    assert_int_equal(buf[1 + 4 + 32 + 4], 0x01);

    const char *why = NULL;
    /* Bad protocol version. */
    buf[4] = 99;
    assert_int_equal(walpush_decode_proposer_msg(buf, n, &d, &why), -1);
    assert_non_null(strstr(why, "version"));
    buf[4] = WALPUSH_PROTO_VERSION;
    /* Segment size not a power of two, too small, too large. */
    uint32_t bad_sizes[] = {3u << 20, 1u << 19, 1u << 31, 0};
    for (size_t i = 0; i < sizeof(bad_sizes) / sizeof(bad_sizes[0]); i++) {
        proposer_msg b = m;
        b.u.greeting.wal_seg_size = bad_sizes[i];
        assert_int_equal(walpush_encode_proposer_msg(&b, buf, sizeof(buf)), 0);
        n = roundtrip_p(&m, &d);
        uint32_t s = bad_sizes[i];
        size_t off = n - 4 - 6;
        put_be32(buf + off, s);
        assert_int_equal(walpush_decode_proposer_msg(buf, n, &d, &why), -1);
        assert_non_null(strstr(why, "wal_seg_size"));
    }
}

static void test_vote_request_and_elected(void **state)
{
    (void)state;
    proposer_msg m = {.kind = PMSG_VOTE_REQUEST}, d;
    m.u.vote.term = 0xfedcba9876543210ULL;
    m.u.vote.generation = 0x01020304;
    assert_int_equal(roundtrip_p(&m, &d), 13);
    assert_true(d.u.vote.term == m.u.vote.term);
    assert_int_equal(d.u.vote.generation, 0x01020304);

    proposer_msg e = {.kind = PMSG_ELECTED};
    e.u.elected.term = 42;
    e.u.elected.generation = 7;
    e.u.elected.start_streaming_at = 0x2000028;
    fill_history(&e.u.elected.history, 3);
    size_t n = roundtrip_p(&e, &d);
    assert_int_equal(n, 1 + 8 + 4 + 8 + 4 + 3 * 16);
    assert_int_equal(d.kind, PMSG_ELECTED);
    assert_int_equal(d.u.elected.generation, 7);
    assert_int_equal(d.u.elected.history.n, 3);
    assert_true(d.u.elected.history.entries[2].lsn == 0x1000200);

    /* Full history round-trips; one more entry is rejected. */
    fill_history(&e.u.elected.history, TERM_HISTORY_MAX);
    roundtrip_p(&e, &d);
    assert_int_equal(d.u.elected.history.n, TERM_HISTORY_MAX);
    n = walpush_encode_proposer_msg(&e, buf, sizeof(buf));
    /* Patch n to TERM_HISTORY_MAX + 1 (at offset 21). */
    buf[21] = 0;
    buf[22] = 0;
    buf[23] = (uint8_t)((TERM_HISTORY_MAX + 1) >> 8);
    buf[24] = (uint8_t)(TERM_HISTORY_MAX + 1);
    const char *why = NULL;
    assert_int_equal(walpush_decode_proposer_msg(buf, n, &d, &why), -1);
    assert_non_null(strstr(why, "TERM_HISTORY_MAX"));

    /* Invalid history: terms not increasing. */
    fill_history(&e.u.elected.history, 3);
    e.u.elected.history.entries[2].term = e.u.elected.history.entries[1].term;
    assert_int_equal(walpush_encode_proposer_msg(&e, buf, sizeof(buf)), 0);
    fill_history(&e.u.elected.history, 3);
    n = walpush_encode_proposer_msg(&e, buf, sizeof(buf));
    /* entries[2].term is at 1+8+4+8+4+2*16 .. +8: make it equal to entries[1]'s (5). */
    size_t off = 1 + 8 + 4 + 8 + 4 + 2 * 16;
    memset(buf + off, 0, 8);
    buf[off + 7] = 5;
    assert_int_equal(walpush_decode_proposer_msg(buf, n, &d, &why), -1);
    assert_non_null(strstr(why, "term history"));
    /* Invalid history: lsn going backwards. */
    fill_history(&e.u.elected.history, 3);
    e.u.elected.history.entries[2].lsn = 1;
    assert_int_equal(walpush_encode_proposer_msg(&e, buf, sizeof(buf)), 0);
}

static void test_append(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(wal); i++)
        wal[i] = (uint8_t)(i * 7 + 3);
    proposer_msg m = {.kind = PMSG_APPEND}, d;
    append_request *a = &m.u.append;
    a->term = 7;
    a->begin_lsn = 0x1000028;
    a->end_lsn = a->begin_lsn + WALPUSH_MAX_APPEND;
    a->commit_lsn = 0x1000000;
    a->truncate_lsn = 0xfff000;
    a->wal = wal;
    a->wal_len = WALPUSH_MAX_APPEND;
    a->ps_feedback.last_received_lsn = 0x1000010;
    a->ps_feedback.disk_consistent_lsn = 0xff8000;
    a->ps_feedback.remote_consistent_lsn = 0xff0000;
    size_t n = roundtrip_p(&m, &d);
    assert_int_equal(n, 1 + 8 * 8 + 4 + WALPUSH_MAX_APPEND);
    assert_true(n <= WALPUSH_MAX_MESSAGE);
    assert_int_equal(d.u.append.wal_len, WALPUSH_MAX_APPEND);
    assert_ptr_equal(d.u.append.wal, buf + 69);
    assert_int_equal(d.u.append.ps_feedback.disk_consistent_lsn, 0xff8000);
    assert_int_equal(d.u.append.ps_feedback.remote_consistent_lsn, 0xff0000);
    assert_memory_equal(d.u.append.wal, wal, WALPUSH_MAX_APPEND);

    /* Heartbeat: no bytes. */
    a->end_lsn = a->begin_lsn;
    a->wal_len = 0;
    a->wal = NULL;
    assert_int_equal(roundtrip_p(&m, &d), 69);
    assert_int_equal(d.u.append.wal_len, 0);

    const char *why = NULL;
    /* wal_len mismatch: 9 bytes for an 8-byte range. */
    a->end_lsn = a->begin_lsn + 8;
    a->wal = wal;
    a->wal_len = 9;
    assert_int_equal(walpush_encode_proposer_msg(&m, buf, sizeof(buf)), 0);
    a->wal_len = 8;
    n = walpush_encode_proposer_msg(&m, buf, sizeof(buf));
    assert_int_equal(n, 77);
    static uint8_t longer[96];
    memcpy(longer, buf, n);
    longer[n] = 0xaa;
    assert_int_equal(walpush_decode_proposer_msg(longer, n + 1, &d, &why), -1);
    assert_non_null(strstr(why, "wal length"));
    assert_int_equal(walpush_decode_proposer_msg(buf, n - 1, &d, &why), -1);
    assert_non_null(strstr(why, "wal length"));

    /* end below begin. */
    a->end_lsn = a->begin_lsn - 1;
    a->wal_len = 0;
    assert_int_equal(walpush_encode_proposer_msg(&m, buf, sizeof(buf)), 0);
    a->end_lsn = a->begin_lsn;
    n = walpush_encode_proposer_msg(&m, buf, sizeof(buf));
    buf[1 + 8 + 4 + 15] = 0x27; /* end_lsn = begin - 1 */
    assert_int_equal(walpush_decode_proposer_msg(buf, n, &d, &why), -1);
    assert_non_null(strstr(why, "end_lsn below"));

    /* More than WALPUSH_MAX_APPEND bytes. */
    a->end_lsn = a->begin_lsn + WALPUSH_MAX_APPEND + 1;
    a->wal_len = WALPUSH_MAX_APPEND + 1;
    assert_int_equal(walpush_encode_proposer_msg(&m, buf, sizeof(buf)), 0);
    static uint8_t big[WALPUSH_MAX_MESSAGE + 16];
    a->end_lsn = a->begin_lsn;
    a->wal_len = 0;
    n = walpush_encode_proposer_msg(&m, big, sizeof(big));
    memset(big + n, 1, WALPUSH_MAX_APPEND + 1);
    assert_int_equal(walpush_decode_proposer_msg(big, n + WALPUSH_MAX_APPEND + 1, &d, &why), -1);
    assert_non_null(strstr(why, "WALPUSH_MAX_APPEND"));

    /* Buffer too small to encode. */
    a->end_lsn = a->begin_lsn + 100;
    a->wal_len = 100;
    assert_int_equal(walpush_encode_proposer_msg(&m, buf, 168), 0);
    assert_int_equal(walpush_encode_proposer_msg(&m, buf, 169), 169);
}

static void set_member(member *m, uint64_t id, const char *addr)
{
    m->node_id = id;
    snprintf(m->addr, sizeof m->addr, "%s", addr);
}

/* Configurations in greetings: round trip, and every malformed one is
 * refused with a reason; the pure helpers. */
static void test_membership(void **state)
{
    (void)state;
    acceptor_msg g = {.kind = AMSG_GREETING}, d;
    membership *m = &g.u.greeting.mconf;
    g.u.greeting.node_id = 4;
    g.u.greeting.term = 9;
    m->generation = 3;
    m->n_members = 3;
    set_member(&m->members[0], 1, "127.0.0.1:5001");
    set_member(&m->members[1], 2, "127.0.0.1:5002");
    set_member(&m->members[2], 3, "127.0.0.1:5003");
    m->n_new_members = 3;
    set_member(&m->new_members[0], 1, "127.0.0.1:5001");
    set_member(&m->new_members[1], 3, "127.0.0.1:5003");
    set_member(&m->new_members[2], 4, "sk4.example:5004");
    size_t n = roundtrip_a(&g, &d);
    assert_int_equal(n, 17 + 4 + 2 + 5 * (8 + 1 + 14) + (8 + 1 + 16));
    assert_true(membership_equal(&d.u.greeting.mconf, m));
    assert_true(membership_contains(m, 2) && membership_contains(m, 4));
    assert_false(membership_contains(m, 5));
    member u[2 * MEMBERSHIP_MAX];
    assert_int_equal(membership_union(m, u), 4);
    assert_true(u[0].node_id == 1 && u[1].node_id == 2 && u[2].node_id == 3 && u[3].node_id == 4);

    /* The same in a ProposerGreeting. */
    proposer_msg p = {.kind = PMSG_GREETING}, pd;
    p.u.greeting.proto_version = WALPUSH_PROTO_VERSION;
    fill_id(&p.u.greeting.tenant_id, 1);
    fill_id(&p.u.greeting.timeline_id, 2);
    p.u.greeting.wal_seg_size = 16u << 20;
    p.u.greeting.mconf = *m;
    roundtrip_p(&p, &pd);
    assert_true(membership_equal(&pd.u.greeting.mconf, m));

    /* Encoders refuse what decoders would refuse. */
    const char *why = NULL;
    acceptor_msg bad = g;
    bad.u.greeting.mconf.new_members[2].node_id = 3; /* twice in one set */
    assert_int_equal(walpush_encode_acceptor_msg(&bad, buf, sizeof buf), 0);
    assert_non_null(strstr(membership_check(&bad.u.greeting.mconf), "twice"));
    bad = g;
    bad.u.greeting.mconf.members[0].node_id = 0;
    assert_non_null(strstr(membership_check(&bad.u.greeting.mconf), "node id 0"));
    bad = g;
    bad.u.greeting.mconf.members[1].addr[3] = '\n';
    assert_non_null(strstr(membership_check(&bad.u.greeting.mconf), "non-printable"));
    bad = g;
    bad.u.greeting.mconf.n_members = 0;
    assert_non_null(strstr(membership_check(&bad.u.greeting.mconf), "at least one"));
    bad = g;
    bad.u.greeting.mconf.generation = 0;
    assert_non_null(strstr(membership_check(&bad.u.greeting.mconf), "generation 0"));

    /* Decoders: a set count over MEMBERSHIP_MAX, an address length over
     * MEMBER_ADDR_MAX, a cut message. */
    n = walpush_encode_acceptor_msg(&g, buf, sizeof buf);
    size_t count_at = 17 + 4;
    buf[count_at] = MEMBERSHIP_MAX + 1;
    assert_int_equal(walpush_decode_acceptor_msg(buf, n, &d, &why), -1);
    assert_non_null(strstr(why, "MEMBERSHIP_MAX"));
    buf[count_at] = 3;
    buf[count_at + 1 + 8] = MEMBER_ADDR_MAX + 1;
    assert_int_equal(walpush_decode_acceptor_msg(buf, n, &d, &why), -1);
    assert_non_null(strstr(why, "MEMBER_ADDR_MAX"));
    buf[count_at + 1 + 8] = 14;
    assert_int_equal(walpush_decode_acceptor_msg(buf, n, &d, &why), 0);
    for (size_t cut = 17; cut < n; cut++) {
        assert_int_equal(walpush_decode_acceptor_msg(buf, cut, &d, &why), -1);
        assert_non_null(why);
    }
}

static void test_acceptor_messages(void **state)
{
    (void)state;
    acceptor_msg g = {.kind = AMSG_GREETING}, d;
    g.u.greeting.node_id = 3;
    g.u.greeting.term = 99;
    assert_int_equal(roundtrip_a(&g, &d), 17 + 6);
    assert_int_equal(d.kind, AMSG_GREETING);
    assert_true(d.u.greeting.node_id == 3 && d.u.greeting.term == 99);

    acceptor_msg v = {.kind = AMSG_VOTE_RESPONSE};
    v.u.vote.term = 12;
    v.u.vote.vote_given = true;
    v.u.vote.flush_lsn = 0x3000100;
    v.u.vote.truncate_lsn = 0x3000000;
    fill_history(&v.u.vote.history, 2);
    size_t n = roundtrip_a(&v, &d);
    assert_int_equal(n, 1 + 8 + 1 + 8 + 8 + 4 + 2 * 16);
    assert_true(d.u.vote.vote_given);
    assert_true(d.u.vote.flush_lsn == 0x3000100);
    assert_int_equal(d.u.vote.history.n, 2);
    /* vote_given must be 0 or 1. */
    const char *why = NULL;
    buf[9] = 2;
    assert_int_equal(walpush_decode_acceptor_msg(buf, n, &d, &why), -1);
    assert_non_null(strstr(why, "vote_given"));
    /* Empty history is fine. */
    v.u.vote.history.n = 0;
    v.u.vote.vote_given = false;
    roundtrip_a(&v, &d);
    assert_false(d.u.vote.vote_given);
    assert_int_equal(d.u.vote.history.n, 0);

    acceptor_msg r = {.kind = AMSG_APPEND_RESPONSE};
    r.u.append.term = 5;
    r.u.append.flush_lsn = 11;
    r.u.append.commit_lsn = 10;
    r.u.append.ps_feedback.last_received_lsn = 9;
    r.u.append.ps_feedback.disk_consistent_lsn = 8;
    r.u.append.ps_feedback.remote_consistent_lsn = 7;
    assert_int_equal(roundtrip_a(&r, &d), 49);
    assert_true(d.u.append.ps_feedback.remote_consistent_lsn == 7);
    assert_true(d.u.append.commit_lsn == 10);
}

/* Every strict prefix of every message is rejected, and so is any extra
 * byte; unknown tags too, in both directions. */
static void test_short_trailing_unknown(void **state)
{
    (void)state;
    proposer_msg pm[4];
    memset(pm, 0, sizeof(pm));
    pm[0].kind = PMSG_GREETING;
    pm[0].u.greeting.proto_version = WALPUSH_PROTO_VERSION;
    pm[0].u.greeting.wal_seg_size = 1u << 20;
    pm[1].kind = PMSG_VOTE_REQUEST;
    pm[2].kind = PMSG_ELECTED;
    fill_history(&pm[2].u.elected.history, 2);
    pm[3].kind = PMSG_APPEND;
    pm[3].u.append.begin_lsn = 100;
    pm[3].u.append.end_lsn = 100;
    const char *why;
    for (int k = 0; k < 4; k++) {
        proposer_msg d;
        size_t n = walpush_encode_proposer_msg(&pm[k], buf, sizeof(buf));
        assert_true(n > 0);
        for (size_t cut = 0; cut < n; cut++) {
            /* A short append can decode only if it loses exactly WAL bytes,
             * which a heartbeat has none of. */
            why = NULL;
            assert_int_equal(walpush_decode_proposer_msg(buf, cut, &d, &why), -1);
            assert_non_null(why);
        }
        buf[n] = 0;
        why = NULL;
        assert_int_equal(walpush_decode_proposer_msg(buf, n + 1, &d, &why), -1);
        assert_non_null(why);
    }
    acceptor_msg am[3];
    memset(am, 0, sizeof(am));
    am[0].kind = AMSG_GREETING;
    am[1].kind = AMSG_VOTE_RESPONSE;
    fill_history(&am[1].u.vote.history, 4);
    am[2].kind = AMSG_APPEND_RESPONSE;
    for (int k = 0; k < 3; k++) {
        acceptor_msg d;
        size_t n = walpush_encode_acceptor_msg(&am[k], buf, sizeof(buf));
        assert_true(n > 0);
        for (size_t cut = 0; cut < n; cut++)
            assert_int_equal(walpush_decode_acceptor_msg(buf, cut, &d, &why), -1);
        buf[n] = 0;
        assert_int_equal(walpush_decode_acceptor_msg(buf, n + 1, &d, &why), -1);
        assert_non_null(strstr(why, "trailing"));
    }
    uint8_t unk[16] = {'x'};
    proposer_msg dp;
    acceptor_msg da;
    assert_int_equal(walpush_decode_proposer_msg(unk, sizeof(unk), &dp, &why), -1);
    assert_non_null(strstr(why, "unknown"));
    assert_int_equal(walpush_decode_acceptor_msg(unk, sizeof(unk), &da, &why), -1);
    assert_non_null(strstr(why, "unknown"));
    /* 'e' is proposer-only. */
    unk[0] = 'e';
    assert_int_equal(walpush_decode_acceptor_msg(unk, sizeof(unk), &da, &why), -1);
}

static void test_history_helpers(void **state)
{
    (void)state;
    term_history h = {0};
    assert_true(term_history_valid(&h));
    assert_int_equal(term_history_last_log_term(&h, 1000), 0);
    h.n = 3;
    h.entries[0] = (term_switch){.term = 1, .lsn = 100};
    h.entries[1] = (term_switch){.term = 4, .lsn = 200};
    h.entries[2] = (term_switch){.term = 6, .lsn = 200};
    assert_true(term_history_valid(&h));
    assert_int_equal(term_history_last_log_term(&h, 99), 0);
    assert_int_equal(term_history_last_log_term(&h, 100), 1);
    assert_int_equal(term_history_last_log_term(&h, 199), 1);
    assert_int_equal(term_history_last_log_term(&h, 200), 6);
    h.entries[2].term = 4;
    assert_false(term_history_valid(&h));
    h.n = TERM_HISTORY_MAX + 1;
    assert_false(term_history_valid(&h));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proposer_greeting),
        cmocka_unit_test(test_vote_request_and_elected),
        cmocka_unit_test(test_append),
        cmocka_unit_test(test_acceptor_messages),
        cmocka_unit_test(test_membership),
        cmocka_unit_test(test_short_trailing_unknown),
        cmocka_unit_test(test_history_helpers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
