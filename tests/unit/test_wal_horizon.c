/*
 * Unit tests for safekeeper/wal_horizon.c: how far a safekeeper may remove
 * its WAL, and how far the WAL backup may be deleted (docs/design.md §5.5).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "safekeeper/wal_horizon.h"

#define SEG 0x1000000ull

/* A timeline far along: every input well past 10 segments, the one under
 * test set lower by the test. */
static acceptor_persistent_state healthy(void)
{
    acceptor_persistent_state st;
    memset(&st, 0, sizeof st);
    st.wal_seg_size = (uint32_t)SEG;
    st.timeline_start_lsn = SEG;
    st.flush_lsn = 20 * SEG;
    st.commit_lsn = 20 * SEG;
    st.truncate_lsn = 20 * SEG;
    st.backup_lsn = 20 * SEG;
    st.ps_feedback.last_received_lsn = 20 * SEG;
    st.ps_feedback.disk_consistent_lsn = 20 * SEG;
    st.ps_feedback.remote_consistent_lsn = 20 * SEG;
    return st;
}

static void test_removal_takes_the_lowest_input(void **state)
{
    (void)state;
    acceptor_persistent_state st = healthy();
    assert_int_equal(wal_horizon_removal(&st, false), 20 * SEG);
    st.ps_feedback.disk_consistent_lsn = 11 * SEG;
    assert_int_equal(wal_horizon_removal(&st, false), 11 * SEG);
    st.ps_feedback.remote_consistent_lsn = 10 * SEG;
    assert_int_equal(wal_horizon_removal(&st, false), 10 * SEG);
    st.commit_lsn = 9 * SEG;
    assert_int_equal(wal_horizon_removal(&st, false), 9 * SEG);
    st.flush_lsn = 8 * SEG; /* the restart scan start */
    assert_int_equal(wal_horizon_removal(&st, true), 8 * SEG);
    assert_int_equal(wal_horizon_scan_start(&st), 8 * SEG);
    st.flush_lsn = 0;
    st.commit_lsn = 0;
    assert_int_equal(wal_horizon_scan_start(&st), SEG); /* not below the start */
}

/* Review finding 5: a dead peer (truncate_lsn frozen) holds WAL only when
 * there is no backup to catch up from. */
static void test_peer_horizon_only_without_backup(void **state)
{
    (void)state;
    acceptor_persistent_state st = healthy();
    st.truncate_lsn = 2 * SEG;
    assert_int_equal(wal_horizon_removal(&st, false), 2 * SEG);
    assert_int_equal(wal_horizon_removal(&st, true), 20 * SEG);
    /* With the backup, what is not in the store yet stays. */
    st.backup_lsn = 5 * SEG;
    assert_int_equal(wal_horizon_removal(&st, true), 5 * SEG);
    st.backup_lsn = 0;
    assert_int_equal(wal_horizon_removal(&st, true), 0);
}

/* Review finding 7: a disk position without a remote one (a seeded control
 * file that did not learn it) keeps everything. */
static void test_unknown_remote_position_keeps_everything(void **state)
{
    (void)state;
    acceptor_persistent_state st = healthy();
    st.ps_feedback.remote_consistent_lsn = 0;
    assert_int_equal(wal_horizon_removal(&st, false), 0);
    assert_int_equal(wal_horizon_removal(&st, true), 0);
    st = healthy();
    st.ps_feedback.disk_consistent_lsn = 0;
    assert_int_equal(wal_horizon_removal(&st, false), 0);
}

static void test_backup_unneeded(void **state)
{
    (void)state;
    acceptor_persistent_state st = healthy();
    assert_int_equal(wal_horizon_backup_unneeded(&st), 20 * SEG);
    st.ps_feedback.remote_consistent_lsn = 12 * SEG;
    assert_int_equal(wal_horizon_backup_unneeded(&st), 12 * SEG);
    /* A lagging peer catches up from the store: its flush holds it. */
    st.truncate_lsn = 3 * SEG;
    assert_int_equal(wal_horizon_backup_unneeded(&st), 3 * SEG);
    st = healthy();
    st.commit_lsn = 4 * SEG;
    assert_int_equal(wal_horizon_backup_unneeded(&st), 4 * SEG);
    st = healthy();
    st.ps_feedback.remote_consistent_lsn = 0; /* not reported: keep all */
    assert_int_equal(wal_horizon_backup_unneeded(&st), 0);
    st = healthy();
    st.truncate_lsn = 0;
    assert_int_equal(wal_horizon_backup_unneeded(&st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_removal_takes_the_lowest_input),
        cmocka_unit_test(test_peer_horizon_only_without_backup),
        cmocka_unit_test(test_unknown_remote_position_keeps_everything),
        cmocka_unit_test(test_backup_unneeded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
