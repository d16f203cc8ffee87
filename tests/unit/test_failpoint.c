/*
 * Unit tests for common/base/failpoint.h: an "exit" point ends the process
 * with status 137 at that call and not before, a "sleep" point delays the
 * caller, and names that are not listed or entries that are malformed do
 * nothing.  Exits are tried in forked children.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/failpoint.h"

/* Runs failpoint_hit(hit) in a child with FAILPOINT_ENV=env; returns the
 * child's exit status, or 0 if it got past the point. */
static int child_status(const char *env, const char *hit)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv(FAILPOINT_ENV, env, 1);
        failpoint_reload();
        failpoint_hit("some.other.point");
        failpoint_hit(hit);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void test_exit_at_named_point(void **state)
{
    (void)state;
    assert_int_equal(child_status("upload.after_data=exit", "upload.after_data"), 137);
    assert_int_equal(child_status("a=sleep:1,upload.after_data=exit", "upload.after_data"), 137);
}

static void test_other_points_pass(void **state)
{
    (void)state;
    assert_int_equal(child_status("upload.after_data=exit", "upload.after_manifest"), 0);
    assert_int_equal(child_status("", "upload.after_data"), 0);
    assert_int_equal(child_status("upload.after_data", "upload.after_data"), 0);
    assert_int_equal(child_status("upload.after_data=explode", "upload.after_data"), 0);
    assert_int_equal(child_status("=exit", "upload.after_data"), 0);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

static void test_sleep_delays(void **state)
{
    (void)state;
    setenv(FAILPOINT_ENV, "slow.step=sleep:200", 1);
    failpoint_reload();
    double t0 = now_ms();
    failpoint_hit("slow.step");
    double waited = now_ms() - t0;
    assert_true(waited >= 195.0);
    t0 = now_ms();
    failpoint_hit("fast.step");
    assert_true(now_ms() - t0 < 100.0);
    unsetenv(FAILPOINT_ENV);
    failpoint_reload();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exit_at_named_point),
        cmocka_unit_test(test_other_points_pass),
        cmocka_unit_test(test_sleep_delays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
