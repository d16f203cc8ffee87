/*
 * test_pagewarm.c: unit tests of the warming set (pageserver/cache/pagewarm.h):
 * nothing is rebuilt before its quiet time; changes that arrive while a
 * page waits coalesce into one rebuild at the newest LSN; a page changed
 * more often than the quiet time waits until the changes stop; a rebuild
 * that finds its LSN not readable is retried; a full set drops and counts;
 * failures are counted and not retried.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "pageserver/cache/pagewarm.h"

typedef struct calls {
    pthread_mutex_t mu;
    int n;
    pg_key key[64];
    lsn_t lsn[64];
    int answers[8]; /* what the first calls return; then 1 */
} calls;

static int rebuild(void *arg, const pg_key *k, lsn_t lsn, char *err, size_t errlen)
{
    calls *c = arg;
    pthread_mutex_lock(&c->mu);
    int i = c->n++;
    if (i < 64) {
        c->key[i] = *k;
        c->lsn[i] = lsn;
    }
    int rc = i < 8 && c->answers[i] != 0 ? c->answers[i] : 1;
    pthread_mutex_unlock(&c->mu);
    if (rc < 0)
        snprintf(err, errlen, "test failure");
    return rc < 0 ? -1 : rc == 2 ? 0 : 1; /* answers: 2 = "not readable yet" */
}

static int ncalls(calls *c)
{
    pthread_mutex_lock(&c->mu);
    int n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits up to 10 s for at least n calls. */
static void wait_calls(calls *c, int n)
{
    for (int i = 0; i < 1000 && ncalls(c) < n; i++)
        sleep_ms(10);
    assert_true(ncalls(c) >= n);
}

static pg_key block(uint32_t blk)
{
    pg_key k = {.kind = KEY_REL_BLOCK, .spc = 1663, .db = 5, .rel = 16384, .fork = 0, .blk = blk};
    return k;
}

static pagewarm *start(calls *c, uint32_t quiet_ms, size_t capacity)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pagewarm_options o;
    pagewarm_options_default(&o);
    o.quiet_ms = quiet_ms;
    if (capacity > 0)
        o.capacity = capacity;
    pagewarm *w;
    char err[128];
    assert_int_equal(pagewarm_create(&o, rebuild, c, &w, err, sizeof err), 0);
    return w;
}

static void test_quiet_time_and_coalescing(void **state)
{
    (void)state;
    calls c;
    pagewarm *w = start(&c, 300, 0);
    pg_key k = block(7);
    for (lsn_t l = 0x100; l <= 0x500; l += 0x100)
        assert_true(pagewarm_note(w, &k, l));
    pg_key other = block(8);
    assert_true(pagewarm_note(w, &other, 0x180));
    sleep_ms(50);
    assert_int_equal(ncalls(&c), 0); /* not before its quiet time */
    wait_calls(&c, 2);
    sleep_ms(100);
    assert_int_equal(ncalls(&c), 2); /* one rebuild per page */
    /* In either order (block 7, changed after it was queued, may go to the
     * back once): each at its newest change. */
    int i7 = c.key[0].blk == 7 ? 0 : 1;
    assert_int_equal(c.key[i7].blk, 7);
    assert_int_equal(c.lsn[i7], 0x500);
    assert_int_equal(c.key[1 - i7].blk, 8);
    assert_int_equal(c.lsn[1 - i7], 0x180);
    pagewarm_stats st;
    pagewarm_get_stats(w, &st);
    assert_int_equal(st.noted, 6);
    assert_int_equal(st.coalesced, 4);
    assert_int_equal(st.rebuilt, 2);
    assert_int_equal(st.waiting, 0);
    assert_int_equal(st.dropped, 0);
    pagewarm_destroy(w);
}

static void test_hot_page_waits_until_quiet(void **state)
{
    (void)state;
    calls c;
    pagewarm *w = start(&c, 500, 0);
    pg_key hot = block(1), cold = block(2);
    assert_true(pagewarm_note(w, &hot, 1));
    assert_true(pagewarm_note(w, &cold, 1));
    /* Changes every 20 ms for over a second: the hot page is never quiet
     * that long, so its one rebuild comes after the last change, while the
     * cold page queued behind it is not held up. */
    for (lsn_t l = 2; l <= 61; l++) {
        assert_true(pagewarm_note(w, &hot, l));
        sleep_ms(20);
    }
    wait_calls(&c, 2);
    sleep_ms(100);
    assert_int_equal(ncalls(&c), 2);
    assert_int_equal(c.key[0].blk, 2);
    assert_int_equal(c.key[1].blk, 1);
    assert_int_equal(c.lsn[1], 61);
    pagewarm_destroy(w);
}

static void test_retry_and_failure(void **state)
{
    (void)state;
    calls c;
    pagewarm *w = start(&c, 20, 0);
    c.answers[0] = 2;  /* not readable yet: retried */
    c.answers[1] = 1;  /* then done */
    c.answers[2] = -1; /* a failure: not retried */
    pg_key k = block(3);
    assert_true(pagewarm_note(w, &k, 0x10));
    wait_calls(&c, 2);
    assert_int_equal(c.lsn[1], 0x10);
    assert_true(pagewarm_note(w, &k, 0x20));
    wait_calls(&c, 3);
    sleep_ms(200);
    assert_int_equal(ncalls(&c), 3);
    pagewarm_stats st;
    pagewarm_get_stats(w, &st);
    assert_int_equal(st.noted, 2); /* a retry is not a change */
    assert_int_equal(st.retried, 1);
    assert_int_equal(st.rebuilt, 1);
    assert_int_equal(st.failures, 1);
    pagewarm_destroy(w);
}

static void test_full_set_drops(void **state)
{
    (void)state;
    calls c;
    pagewarm *w = start(&c, 60000, 16); /* nothing leaves during the test */
    for (uint32_t b = 0; b < 16; b++) {
        pg_key k = block(b);
        assert_true(pagewarm_note(w, &k, 1));
    }
    pg_key k = block(100);
    assert_false(pagewarm_note(w, &k, 1));
    pg_key again = block(5);
    assert_true(pagewarm_note(w, &again, 2)); /* a waiting page still coalesces */
    pagewarm_stats st;
    pagewarm_get_stats(w, &st);
    assert_int_equal(st.dropped, 1);
    assert_int_equal(st.waiting, 16);
    assert_int_equal(ncalls(&c), 0);
    pagewarm_destroy(w); /* drops what waits, without calling back */
    assert_int_equal(ncalls(&c), 0);
}

static void test_bad_capacity(void **state)
{
    (void)state;
    pagewarm_options o;
    pagewarm_options_default(&o);
    o.capacity = 3;
    pagewarm *w = (pagewarm *)1;
    char err[128];
    calls c;
    assert_int_equal(pagewarm_create(&o, rebuild, &c, &w, err, sizeof err), -1);
    assert_null(w);
    assert_non_null(strstr(err, "capacity"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quiet_time_and_coalescing),
        cmocka_unit_test(test_hot_page_waits_until_quiet),
        cmocka_unit_test(test_retry_and_failure),
        cmocka_unit_test(test_full_set_drops),
        cmocka_unit_test(test_bad_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
