/*
 * Unit tests for cli/client/sk_change.c: the donor, the copy end, the sync
 * position and the classification of an interrupted replace.  The scenario
 * of review finding 1 (docs/design.md §4.10) is spelled out in
 * test_lagging_commit_notice: an acknowledged commit is on sk1's and the
 * lost sk2's disks, sk1 has not heard it is committed, sk3 never got it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "cli/client/sk_change.h"
#include "proto/membership.h"

static member mk(uint64_t id, const char *addr)
{
    member m = {.node_id = id};
    snprintf(m.addr, sizeof m.addr, "%s", addr);
    return m;
}

static membership three(uint32_t generation)
{
    membership m = {.generation = generation, .n_members = 3};
    m.members[0] = mk(1, "127.0.0.1:5001");
    m.members[1] = mk(2, "127.0.0.1:5002");
    m.members[2] = mk(3, "127.0.0.1:5003");
    return m;
}

static void test_order_and_donor(void **state)
{
    (void)state;
    sk_change_pos p[3] = {
        {.up = true, .node_id = 1, .last_log_term = 3, .flush_lsn = 500, .commit_lsn = 100},
        {.up = true, .node_id = 2, .last_log_term = 4, .flush_lsn = 200, .commit_lsn = 200},
        {.up = false, .node_id = 3, .last_log_term = 9, .flush_lsn = 900, .commit_lsn = 900},
    };
    /* The term comes first: a longer WAL of an older term loses. */
    assert_true(sk_change_cmp(&p[0], &p[1]) < 0);
    assert_true(sk_change_cmp(&p[1], &p[0]) > 0);
    assert_int_equal(sk_change_cmp(&p[0], &p[0]), 0);
    /* A node that did not answer is never the donor. */
    assert_int_equal(sk_change_donor(p, 3), 1);
    p[1].up = false;
    assert_int_equal(sk_change_donor(p, 3), 0);
    p[0].up = false;
    assert_int_equal(sk_change_donor(p, 3), -1);
}

static void test_lagging_commit_notice(void **state)
{
    (void)state;
    /* X = 300 was acknowledged with sk1 and sk2 flushed; sk1 still says
     * commit 100; sk3 stopped at 150; sk2 (node 2) is lost. */
    sk_change_pos p[3] = {
        {.up = true, .node_id = 1, .last_log_term = 2, .flush_lsn = 300, .commit_lsn = 100},
        {.up = false, .node_id = 2},
        {.up = true, .node_id = 3, .last_log_term = 2, .flush_lsn = 150, .commit_lsn = 100},
    };
    int donor = sk_change_donor(p, 3);
    assert_int_equal(donor, 0);
    assert_int_equal(sk_change_copy_end(p[donor].flush_lsn, p[donor].commit_lsn), 300);

    membership old = three(0), joint;
    assert_int_equal(sk_change_joint(&old, 2, 4, "127.0.0.1:5002", &joint), 0);
    sk_change_pos sync;
    assert_true(sk_change_sync_position(joint.members, joint.n_members, p, 3, &sync));
    assert_int_equal(sync.flush_lsn, 300);
    assert_int_equal(sync.last_log_term, 2);

    /* The new node 4 copied to 150 only (the old rule): {sk1, node 4, sk3}
     * holds X on sk1 alone, a minority: not synced. */
    sk_change_pos q[4] = {
        p[0], p[1], p[2], {.up = true, .node_id = 4, .last_log_term = 2, .flush_lsn = 150}};
    assert_int_equal(sk_change_count_synced(joint.new_members, joint.n_new_members, q, 4, &sync),
                     1);
    assert_false(sk_change_synced(joint.new_members, joint.n_new_members, q, 4, &sync));
    /* Copied to the donor's flush: sk1 and node 4, a majority. */
    q[3].flush_lsn = 300;
    assert_true(sk_change_synced(joint.new_members, joint.n_new_members, q, 4, &sync));
    /* A flush at X but in an older term is not X. */
    q[3].last_log_term = 1;
    assert_false(sk_change_synced(joint.new_members, joint.n_new_members, q, 4, &sync));
}

static void test_sync_needs_a_majority_of_answers(void **state)
{
    (void)state;
    membership old = three(5);
    sk_change_pos p[3] = {
        {.up = true, .node_id = 1, .last_log_term = 2, .flush_lsn = 100},
        {.up = false, .node_id = 2},
        {.up = false, .node_id = 3},
    };
    sk_change_pos out = {.flush_lsn = 77};
    assert_false(sk_change_sync_position(old.members, old.n_members, p, 3, &out));
    assert_int_equal(out.flush_lsn, 77);
    /* A node that answers but is not a member does not count either. */
    p[1] = (sk_change_pos){.up = true, .node_id = 9, .last_log_term = 7, .flush_lsn = 900};
    assert_false(sk_change_sync_position(old.members, old.n_members, p, 3, &out));
    p[2] = (sk_change_pos){.up = true, .node_id = 3, .last_log_term = 2, .flush_lsn = 120};
    assert_true(sk_change_sync_position(old.members, old.n_members, p, 3, &out));
    assert_int_equal(out.node_id, 3);
    assert_int_equal(out.flush_lsn, 120);
}

static void test_joint_and_settle(void **state)
{
    (void)state;
    membership old = three(7), joint, fin, back;
    assert_int_equal(sk_change_joint(&old, 9, 4, "127.0.0.1:5002", &joint), -1);
    assert_int_equal(sk_change_joint(&old, 2, 3, "127.0.0.1:5002", &joint), -1);
    assert_int_equal(sk_change_joint(&old, 2, 4, "127.0.0.1:5002", &joint), 0);
    assert_int_equal(joint.generation, 8);
    assert_int_equal(joint.n_members, 3);
    assert_int_equal(joint.n_new_members, 3);
    assert_int_equal(joint.new_members[1].node_id, 4);
    assert_string_equal(joint.new_members[1].addr, "127.0.0.1:5002");
    assert_int_equal(joint.new_members[0].node_id, 1);
    assert_null(membership_check(&joint));

    sk_change_settle(&joint, true, &fin);
    assert_int_equal(fin.generation, 9);
    assert_int_equal(fin.n_new_members, 0);
    assert_int_equal(fin.members[1].node_id, 4);
    sk_change_settle(&joint, false, &back);
    assert_int_equal(back.generation, 9);
    assert_int_equal(back.members[1].node_id, 2);
    assert_null(membership_check(&back));
}

static void test_classify(void **state)
{
    (void)state;
    const char *addr = "127.0.0.1:5002";
    membership old = three(3), joint;
    uint64_t dead = 99;
    /* Nothing happened yet: the slot's node is a member. */
    assert_int_equal(sk_change_classify(&old, addr, 2, &dead), SK_CHANGE_FRESH);
    assert_int_equal(dead, 2);
    /* The cluster records node 4 in the slot, the configuration still 2. */
    assert_int_equal(sk_change_classify(&old, addr, 4, &dead), SK_CHANGE_SEEDED);
    assert_int_equal(dead, 2);
    /* The joint switch of this change. */
    assert_int_equal(sk_change_joint(&old, 2, 4, addr, &joint), 0);
    assert_int_equal(sk_change_classify(&joint, addr, 4, &dead), SK_CHANGE_RESUME_JOINT);
    assert_int_equal(dead, 2);
    /* The same joint seen from another slot, or with another new id. */
    assert_int_equal(sk_change_classify(&joint, "127.0.0.1:5001", 1, &dead),
                     SK_CHANGE_FOREIGN_JOINT);
    assert_int_equal(sk_change_classify(&joint, addr, 5, &dead), SK_CHANGE_FOREIGN_JOINT);
    /* A joint that changes two slots is not a replacement of one. */
    joint.new_members[0].node_id = 6;
    assert_int_equal(sk_change_classify(&joint, addr, 4, &dead), SK_CHANGE_FOREIGN_JOINT);
    /* No member at the slot's address: FRESH with nothing to replace. */
    assert_int_equal(sk_change_classify(&old, "127.0.0.1:6000", 8, &dead), SK_CHANGE_FRESH);
    assert_int_equal(dead, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_donor),
        cmocka_unit_test(test_lagging_commit_notice),
        cmocka_unit_test(test_sync_needs_a_majority_of_answers),
        cmocka_unit_test(test_joint_and_settle),
        cmocka_unit_test(test_classify),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
