/*
 * Unit tests for common/base/metrics.c: exact Prometheus text for counters,
 * gauges and histograms with and without labels, escaping, registration
 * rules, and concurrent updates from several threads.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/metrics.h"

static void test_render_exact(void **state)
{
    (void)state;
    metrics_registry *r = metrics_registry_new();
    assert_non_null(r);
    size_t len = 99;
    char *txt = metrics_render(r, &len);
    assert_string_equal(txt, "");
    assert_int_equal(len, 0);
    free(txt);

    metrics_counter *c =
        metrics_counter_register(r, "strata_requests_total", "Requests served.", 0, NULL, NULL);
    const char *ln[] = {"tenant", "kind"};
    const char *lv1[] = {"t1", "get"};
    const char *lv2[] = {"t\"2\\\n", "put"};
    metrics_gauge *g1 =
        metrics_gauge_register(r, "strata_lag_bytes", "Lag.\nSecond line \\ here", 2, ln, lv1);
    metrics_gauge *g2 =
        metrics_gauge_register(r, "strata_lag_bytes", "Lag.\nSecond line \\ here", 2, ln, lv2);
    const double bounds[] = {0.001, 0.01, 0.1, 1};
    metrics_histogram *h = metrics_histogram_register(r, "strata_fsync_seconds", "Fsync time.",
                                                      bounds, 4, 0, NULL, NULL);
    const char *hl[] = {"sk"};
    const char *hv[] = {"sk1"};
    metrics_histogram *hlab =
        metrics_histogram_register(r, "strata_rtt_seconds", "RTT.", bounds, 2, 1, hl, hv);
    assert_non_null(c);
    assert_non_null(g1);
    assert_non_null(g2);
    assert_non_null(h);
    assert_non_null(hlab);

    metrics_counter_inc(c);
    metrics_counter_add(c, 41);
    metrics_gauge_set(g1, 1.5);
    metrics_gauge_add(g1, 1);
    metrics_gauge_set(g2, -0.1);
    metrics_histogram_observe(h, 0.0005);
    metrics_histogram_observe(h, 0.001); /* on a bound: counts in that bucket */
    metrics_histogram_observe(h, 0.05);
    metrics_histogram_observe(h, 7);
    metrics_histogram_observe(hlab, 0.002);
    assert_int_equal(metrics_counter_value(c), 42);
    assert_true(metrics_gauge_value(g1) == 2.5);

    txt = metrics_render(r, &len);
    const char *want = "# HELP strata_requests_total Requests served.\n"
                       "# TYPE strata_requests_total counter\n"
                       "strata_requests_total 42\n"
                       "# HELP strata_lag_bytes Lag.\\nSecond line \\\\ here\n"
                       "# TYPE strata_lag_bytes gauge\n"
                       "strata_lag_bytes{tenant=\"t1\",kind=\"get\"} 2.5\n"
                       "strata_lag_bytes{tenant=\"t\\\"2\\\\\\n\",kind=\"put\"} -0.1\n"
                       "# HELP strata_fsync_seconds Fsync time.\n"
                       "# TYPE strata_fsync_seconds histogram\n"
                       "strata_fsync_seconds_bucket{le=\"0.001\"} 2\n"
                       "strata_fsync_seconds_bucket{le=\"0.01\"} 2\n"
                       "strata_fsync_seconds_bucket{le=\"0.1\"} 3\n"
                       "strata_fsync_seconds_bucket{le=\"1\"} 3\n"
                       "strata_fsync_seconds_bucket{le=\"+Inf\"} 4\n"
                       "strata_fsync_seconds_sum 7.0515\n"
                       "strata_fsync_seconds_count 4\n"
                       "# HELP strata_rtt_seconds RTT.\n"
                       "# TYPE strata_rtt_seconds histogram\n"
                       "strata_rtt_seconds_bucket{sk=\"sk1\",le=\"0.001\"} 0\n"
                       "strata_rtt_seconds_bucket{sk=\"sk1\",le=\"0.01\"} 1\n"
                       "strata_rtt_seconds_bucket{sk=\"sk1\",le=\"+Inf\"} 1\n"
                       "strata_rtt_seconds_sum{sk=\"sk1\"} 0.002\n"
                       "strata_rtt_seconds_count{sk=\"sk1\"} 1\n";
    assert_string_equal(txt, want);
    assert_int_equal(len, strlen(want));
    free(txt);
    metrics_registry_free(r);
}

static void test_special_values(void **state)
{
    (void)state;
    metrics_registry *r = metrics_registry_new();
    metrics_gauge *a = metrics_gauge_register(r, "a", "a", 0, NULL, NULL);
    metrics_gauge *b = metrics_gauge_register(r, "b", "b", 0, NULL, NULL);
    metrics_gauge *c = metrics_gauge_register(r, "c", "c", 0, NULL, NULL);
    metrics_gauge_set(a, NAN);
    metrics_gauge_set(b, -INFINITY);
    metrics_gauge_set(c, 1e300);
    char *txt = metrics_render(r, NULL);
    assert_string_equal(txt, "# HELP a a\n# TYPE a gauge\na NaN\n"
                             "# HELP b b\n# TYPE b gauge\nb -Inf\n"
                             "# HELP c c\n# TYPE c gauge\nc 1e+300\n");
    free(txt);
    metrics_registry_free(r);
}

static void test_registration_rules(void **state)
{
    (void)state;
    metrics_registry *r = metrics_registry_new();
    const char *ln[] = {"x"};
    const char *v1[] = {"1"};
    metrics_counter *c = metrics_counter_register(r, "m_total", "help", 1, ln, v1);
    assert_non_null(c);
    /* Same series again: same pointer. */
    assert_ptr_equal(metrics_counter_register(r, "m_total", "help", 1, ln, v1), c);
    /* Clashes and invalid names are refused. */
    assert_null(metrics_gauge_register(r, "m_total", "help", 1, ln, v1));
    assert_null(metrics_counter_register(r, "m_total", "other help", 1, ln, v1));
    assert_null(metrics_counter_register(r, "m_total", "help", 0, NULL, NULL));
    assert_null(metrics_counter_register(r, "9bad", "h", 0, NULL, NULL));
    assert_null(metrics_counter_register(r, "bad-name", "h", 0, NULL, NULL));
    const char *le[] = {"le"};
    const double bounds[] = {1, 2};
    const double unsorted[] = {2, 1};
    assert_null(metrics_histogram_register(r, "h1", "h", bounds, 2, 1, le, v1));
    assert_null(metrics_histogram_register(r, "h2", "h", unsorted, 2, 0, NULL, NULL));
    assert_null(metrics_histogram_register(r, "h3", "h", bounds, 0, 0, NULL, NULL));
    const char *badl[] = {"a-b"};
    assert_null(metrics_counter_register(r, "n_total", "h", 1, badl, v1));
    /* NULL series are ignored by updates. */
    metrics_counter_inc(NULL);
    metrics_gauge_set(NULL, 1);
    metrics_histogram_observe(NULL, 1);
    assert_non_null(metrics_default_registry());
    assert_ptr_equal(metrics_default_registry(), metrics_default_registry());
    metrics_registry_free(r);
}

#define THREADS 4
#define ITERS 100000

typedef struct worker_args {
    metrics_counter *c;
    metrics_gauge *g;
    metrics_histogram *h;
} worker_args;

static void *worker(void *p)
{
    worker_args *a = p;
    for (int i = 0; i < ITERS; i++) {
        metrics_counter_inc(a->c);
        metrics_gauge_add(a->g, 1);
        metrics_histogram_observe(a->h, (i % 2) ? 0.5 : 5);
    }
    return NULL;
}

static void test_concurrent_updates(void **state)
{
    (void)state;
    metrics_registry *r = metrics_registry_new();
    const double bounds[] = {1};
    worker_args a = {
        metrics_counter_register(r, "c_total", "c", 0, NULL, NULL),
        metrics_gauge_register(r, "g", "g", 0, NULL, NULL),
        metrics_histogram_register(r, "h", "h", bounds, 1, 0, NULL, NULL),
    };
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, worker, &a), 0);
    /* Render concurrently with the updates. */
    for (int i = 0; i < 20; i++)
        free(metrics_render(r, NULL));
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    char *txt = metrics_render(r, NULL);
    char want[1024];
    snprintf(want, sizeof want,
             "# HELP c_total c\n# TYPE c_total counter\nc_total %d\n"
             "# HELP g g\n# TYPE g gauge\ng %d\n"
             "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} %d\nh_bucket{le=\"+Inf\"} %d\n"
             "h_sum %d\nh_count %d\n",
             THREADS * ITERS, THREADS * ITERS, THREADS * ITERS / 2, THREADS * ITERS,
             THREADS * ITERS / 2 * 5 + THREADS * ITERS / 4, THREADS * ITERS);
    assert_string_equal(txt, want);
    free(txt);
    metrics_registry_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_exact),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_registration_rules),
        cmocka_unit_test(test_concurrent_updates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
