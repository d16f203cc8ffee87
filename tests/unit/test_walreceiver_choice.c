/* Unit tests for pageserver/ingest/walreceiver_choice.c: which safekeeper the WAL
 * receiver streams from, driven through positions and times without any
 * network (the probing itself is covered by test_pageserver_gc.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pageserver/ingest/walreceiver_choice.h"

#define LAG (1ull << 30) /* switch_lag_bytes (the default) */
#define INTERVAL 10000u  /* probe_interval_ms (the default) */
#define T0 1000000ull    /* an arbitrary monotonic clock origin */

static walreceiver_candidate up(lsn_t pos)
{
    return (walreceiver_candidate){.answered = true, .xlogpos = pos};
}

static const walreceiver_candidate DOWN = {.answered = false, .xlogpos = 0};

static walreceiver_switch decide(const walreceiver_candidate *cand, int n,
                                 const walreceiver_source *cur, uint64_t now)
{
    return walreceiver_choice_switch(cand, n, -1, cur, LAG, INTERVAL, now);
}

static void test_best_is_most_advanced(void **state)
{
    (void)state;
    walreceiver_candidate c[3] = {up(0x1000), up(0x3000), up(0x2000)};
    assert_int_equal(walreceiver_choice_best(c, 3, -1), 1);
    c[2] = up(0x3001);
    assert_int_equal(walreceiver_choice_best(c, 3, -1), 2);
    /* Position 0 (an empty safekeeper) still counts when it answers. */
    walreceiver_candidate z[1] = {up(0)};
    assert_int_equal(walreceiver_choice_best(z, 1, -1), 0);
    assert_int_equal(walreceiver_choice_best(z, 0, -1), -1);
}

static void test_best_skips_unreachable(void **state)
{
    (void)state;
    /* An unreachable one's stale position is never looked at. */
    walreceiver_candidate c[3] = {up(0x1000), {.answered = false, .xlogpos = 0x9000}, up(0x2000)};
    assert_int_equal(walreceiver_choice_best(c, 3, -1), 2);
    walreceiver_candidate none[3] = {DOWN, DOWN, DOWN};
    assert_int_equal(walreceiver_choice_best(none, 3, -1), -1);
    walreceiver_candidate last[3] = {DOWN, DOWN, up(5)};
    assert_int_equal(walreceiver_choice_best(last, 3, 2), 2); /* the only one, even if to avoid */
}

static void test_best_tie_avoids_last_failed(void **state)
{
    (void)state;
    walreceiver_candidate c[3] = {up(0x2000), up(0x2000), up(0x2000)};
    assert_int_equal(walreceiver_choice_best(c, 3, -1), 0);
    assert_int_equal(walreceiver_choice_best(c, 3, 0), 1);
    assert_int_equal(walreceiver_choice_best(c, 3, 1), 0);
    assert_int_equal(walreceiver_choice_best(c, 3, 2), 0);
    /* Being further ahead beats avoiding it. */
    c[0] = up(0x2001);
    assert_int_equal(walreceiver_choice_best(c, 3, 0), 0);
}

static void test_switch_on_lag(void **state)
{
    (void)state;
    /* Streaming from 0, which keeps offering WAL (not idle), but what was
     * received is more than the lag behind what 1 has committed. */
    walreceiver_source cur = {
        .index = 0, .received = 0x1000, .offered = 0x1000 + LAG + 2, .advanced_ms = T0};
    walreceiver_candidate c[2] = {up(0x1000 + LAG + 2), up(0x1000 + LAG + 1)};
    walreceiver_switch sw = decide(c, 2, &cur, T0 + 1);
    assert_int_equal(sw.reason, WALRECEIVER_SWITCH_LAGGING);
    assert_int_equal(sw.target, 1);
    assert_int_equal(sw.ahead_by, LAG + 1);
    assert_string_equal(walreceiver_choice_reason_name(sw.reason), "lagging");
}

static void test_no_switch_within_lag(void **state)
{
    (void)state;
    walreceiver_source cur = {.index = 0, .received = 0x1000, .offered = 0x1000, .advanced_ms = T0};
    /* Exactly the lag ahead is not "more than" the lag. */
    walreceiver_candidate c[2] = {DOWN, up(0x1000 + LAG)};
    walreceiver_switch sw = decide(c, 2, &cur, T0 + INTERVAL - 1);
    assert_int_equal(sw.reason, WALRECEIVER_STAY);
    assert_int_equal(sw.target, -1);
    /* Ahead by a little, source fresh: stay. */
    c[1] = up(0x1001);
    assert_int_equal(decide(c, 2, &cur, T0).target, -1);
    /* Behind: stay, whatever the idle time. */
    c[1] = up(0x0fff);
    assert_int_equal(decide(c, 2, &cur, T0 + 100 * INTERVAL).target, -1);
}

static void test_switch_on_stall(void **state)
{
    (void)state;
    /* 0 offered nothing new for a whole probe interval while 1 committed
     * more: switch, however small the difference. */
    walreceiver_source cur = {.index = 0, .received = 0x5000, .offered = 0x5000, .advanced_ms = T0};
    walreceiver_candidate c[3] = {DOWN, up(0x5001), up(0x5000)};
    walreceiver_switch sw = decide(c, 3, &cur, T0 + INTERVAL);
    assert_int_equal(sw.reason, WALRECEIVER_SWITCH_STALLED);
    assert_int_equal(sw.target, 1);
    assert_int_equal(sw.ahead_by, 1);
    assert_string_equal(walreceiver_choice_reason_name(sw.reason), "stalled");
    /* One millisecond short of the interval: not yet idle. */
    assert_int_equal(decide(c, 3, &cur, T0 + INTERVAL - 1).target, -1);
    /* Idle, but nobody committed more than it offers: nothing to gain. */
    c[1] = up(0x5000);
    assert_int_equal(decide(c, 3, &cur, T0 + 5 * INTERVAL).target, -1);
    /* Offered is what counts for a stall, not received: the source still
     * has WAL to send that we have not read, and the other is not past it. */
    walreceiver_source behind = {
        .index = 0, .received = 0x4000, .offered = 0x6000, .advanced_ms = T0};
    c[1] = up(0x5fff);
    assert_int_equal(decide(c, 3, &behind, T0 + 5 * INTERVAL).target, -1);
    c[1] = up(0x6001);
    sw = decide(c, 3, &behind, T0 + 5 * INTERVAL);
    assert_int_equal(sw.reason, WALRECEIVER_SWITCH_STALLED);
    assert_int_equal(sw.ahead_by, 0x2001);
}

static void test_switch_never_to_current(void **state)
{
    (void)state;
    /* The current source's own entry is ignored, even if it says ahead. */
    walreceiver_source cur = {.index = 1, .received = 0, .offered = 0, .advanced_ms = T0};
    walreceiver_candidate c[2] = {up(0x10), up(LAG * 4)};
    walreceiver_switch sw = decide(c, 2, &cur, T0 + INTERVAL);
    assert_int_equal(sw.target, 0);
    c[0] = DOWN;
    assert_int_equal(decide(c, 2, &cur, T0 + INTERVAL).target, -1);
}

static void test_switch_skips_unreachable(void **state)
{
    (void)state;
    walreceiver_source cur = {.index = 0, .received = 0x1000, .offered = 0x1000, .advanced_ms = T0};
    /* The furthest one did not answer (its entry holds a stale position):
     * the best of those that answered is taken. */
    walreceiver_candidate c[3] = {
        up(0x1000), {.answered = false, .xlogpos = LAG * 8}, up(0x1000 + LAG + 1)};
    walreceiver_switch sw = decide(c, 3, &cur, T0);
    assert_int_equal(sw.reason, WALRECEIVER_SWITCH_LAGGING);
    assert_int_equal(sw.target, 2);
    /* Nobody else answered: stay, however long the source has been idle. */
    c[2] = DOWN;
    assert_int_equal(decide(c, 3, &cur, T0 + 100 * INTERVAL).target, -1);
}

static void test_switch_tie_avoids_last_failed(void **state)
{
    (void)state;
    walreceiver_source cur = {.index = 0, .received = 0x100, .offered = 0x100, .advanced_ms = T0};
    walreceiver_candidate c[3] = {DOWN, up(0x200), up(0x200)};
    assert_int_equal(walreceiver_choice_switch(c, 3, -1, &cur, LAG, INTERVAL, T0 + INTERVAL).target,
                     1);
    assert_int_equal(walreceiver_choice_switch(c, 3, 1, &cur, LAG, INTERVAL, T0 + INTERVAL).target,
                     2);
}

/*
 * Two safekeepers that keep level, each a little ahead of the other in
 * turn (as acknowledgements race), probed every interval for many rounds,
 * first under steady writes and then with writes stopped: the receiver must
 * not move between them.  Positions never differ by more than the lag.
 */
static void test_no_flapping_between_level_peers(void **state)
{
    (void)state;
    lsn_t pos[2] = {0x10000, 0x10000};
    walreceiver_source cur = {.index = 0, .received = pos[0], .offered = pos[0], .advanced_ms = T0};
    uint64_t now = T0;
    int switches = 0;
    uint32_t seed = 12345;
    for (int round = 0; round < 2000; round++) {
        bool writing = round < 1000;
        now += INTERVAL;
        if (writing) {
            /* Each safekeeper moves by 1..8192 bytes; the one ahead varies. */
            for (int k = 0; k < 2; k++) {
                seed = seed * 1103515245u + 12345u;
                pos[k] += 1 + ((seed >> 16) & 0x1fff);
            }
            /* Never more than 8 KiB apart, as in a healthy cluster. */
            lsn_t hi = pos[0] > pos[1] ? pos[0] : pos[1];
            for (int k = 0; k < 2; k++)
                if (hi - pos[k] > 0x2000)
                    pos[k] = hi - 0x2000;
        } else if (round == 1000) {
            /* Writes stop with both at the same commit LSN. */
            lsn_t hi = pos[0] > pos[1] ? pos[0] : pos[1];
            pos[0] = pos[1] = hi;
        }
        /* The source streams everything it has committed, the last of it
         * just before the probe. */
        if (pos[cur.index] > cur.offered) {
            cur.offered = pos[cur.index];
            cur.advanced_ms = now - 1;
        }
        cur.received = cur.offered;
        walreceiver_candidate c[2] = {up(pos[0]), up(pos[1])};
        walreceiver_switch sw = decide(c, 2, &cur, now);
        if (sw.target >= 0) {
            switches++;
            cur = (walreceiver_source){.index = sw.target,
                                       .received = cur.received,
                                       .offered = pos[sw.target],
                                       .advanced_ms = now};
        }
    }
    /* Under writes the source never idles for a whole interval; once they
     * stop, neither is ahead of the other. */
    assert_int_equal(switches, 0);
}

/* A stall moves the receiver to the peer that committed more; from there
 * the stalled one, now behind, never draws it back. */
static void test_stall_switch_does_not_bounce_back(void **state)
{
    (void)state;
    lsn_t pos[2] = {0x8000, 0x8100}; /* 0 was outside the last commit's majority */
    walreceiver_source cur = {.index = 0, .received = 0x8000, .offered = 0x8000, .advanced_ms = T0};
    uint64_t now = T0 + INTERVAL;
    walreceiver_candidate c[2] = {up(pos[0]), up(pos[1])};
    walreceiver_switch sw = decide(c, 2, &cur, now);
    assert_int_equal(sw.reason, WALRECEIVER_SWITCH_STALLED);
    assert_int_equal(sw.target, 1);
    cur =
        (walreceiver_source){.index = 1, .received = pos[1], .offered = pos[1], .advanced_ms = now};
    for (int round = 0; round < 100; round++) {
        now += INTERVAL;
        assert_int_equal(decide(c, 2, &cur, now).target, -1);
        /* Even when 0 catches up to exactly the same position. */
        c[0] = up(pos[1]);
    }
}

static void test_probe_backoff(void **state)
{
    (void)state;
    assert_true(walreceiver_choice_probe_due(0, T0)); /* never failed */
    uint64_t until = walreceiver_choice_probe_backoff(T0);
    assert_int_equal(until, T0 + WALRECEIVER_PROBE_BACKOFF_MS);
    assert_false(walreceiver_choice_probe_due(until, T0));
    assert_false(walreceiver_choice_probe_due(until, until - 1));
    assert_true(walreceiver_choice_probe_due(until, until));
    assert_string_equal(walreceiver_choice_reason_name(WALRECEIVER_STAY), "stay");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_best_is_most_advanced),
        cmocka_unit_test(test_best_skips_unreachable),
        cmocka_unit_test(test_best_tie_avoids_last_failed),
        cmocka_unit_test(test_switch_on_lag),
        cmocka_unit_test(test_no_switch_within_lag),
        cmocka_unit_test(test_switch_on_stall),
        cmocka_unit_test(test_switch_never_to_current),
        cmocka_unit_test(test_switch_skips_unreachable),
        cmocka_unit_test(test_switch_tie_avoids_last_failed),
        cmocka_unit_test(test_no_flapping_between_level_peers),
        cmocka_unit_test(test_stall_switch_does_not_bounce_back),
        cmocka_unit_test(test_probe_backoff),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
