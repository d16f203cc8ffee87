/*
 * Unit tests for common/base/strata_assert.h: STRATA_ASSERT stays on where plain
 * assert() is compiled out.  This file is built with NDEBUG, as release
 * builds are; each failing assertion runs in a forked child whose stderr the
 * parent reads, and the child must die of SIGABRT after printing one line
 * that names the place and the condition.
 */
#ifndef NDEBUG
#define NDEBUG
#endif
#include <assert.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/strata_assert.h"

#ifndef NDEBUG
#error "this test must be built with NDEBUG, like a release build"
#endif

/* The line of fire_plain's STRATA_ASSERT, five lines down. */
static const int plain_line = __LINE__ + 5;
static void fire_plain(void)
{
    volatile int x = 1;
    assert(x == 2); /* compiled out: must not be what stops the child */
    STRATA_ASSERT(x == 2);
}

static void fire_msg(void)
{
    volatile int x = 1;
    STRATA_ASSERT_MSG(x == 2, "x is %d, want %d", x, 2);
}

static void fire_long_detail(void)
{
    char big[3000];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    volatile int x = 1;
    STRATA_ASSERT_MSG(x == 2, "%s", big);
}

/* Runs fn in a child with stderr on a pipe; returns the child's wait
 * status and what it wrote (NUL-terminated, at most cap - 1 bytes). */
static int run_child(void (*fn)(void), char *out, size_t cap)
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        close(pfd[0]);
        dup2(pfd[1], STDERR_FILENO);
        fn();
        _exit(0); /* reached only if the assertion did not fire */
    }
    close(pfd[1]);
    size_t len = 0;
    for (;;) {
        ssize_t n = read(pfd[0], out + len, cap - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == cap - 1)
            break;
    }
    out[len] = '\0';
    close(pfd[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void assert_aborted(int status)
{
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
}

/* One line, ending in a newline, nothing after it. */
static void assert_one_line(const char *out)
{
    const char *nl = strchr(out, '\n');
    assert_non_null(nl);
    assert_int_equal(nl[1], '\0');
}

static void test_failure_aborts_with_ndebug(void **state)
{
    (void)state;
    char out[2048];
    int status = run_child(fire_plain, out, sizeof out);
    assert_aborted(status);
    assert_one_line(out);
    char want[256];
    snprintf(want, sizeof want, "test_strata_assert.c:%d in fire_plain(): x == 2\n", plain_line);
    assert_non_null(strstr(out, "strata: assertion failed at "));
    assert_non_null(strstr(out, want));
}

static void test_detail_follows_condition(void **state)
{
    (void)state;
    char out[2048];
    int status = run_child(fire_msg, out, sizeof out);
    assert_aborted(status);
    assert_one_line(out);
    assert_non_null(strstr(out, "in fire_msg(): x == 2: x is 1, want 2\n"));
}

static void test_long_detail_is_cut_to_one_line(void **state)
{
    (void)state;
    char out[4096];
    int status = run_child(fire_long_detail, out, sizeof out);
    assert_aborted(status);
    assert_one_line(out);
    assert_true(strlen(out) <= 1024);
    assert_non_null(strstr(out, "x == 2: zzz"));
}

static void test_true_condition_evaluated_once(void **state)
{
    (void)state;
    int n = 0;
    STRATA_ASSERT(++n == 1);
    assert_int_equal(n, 1);
    STRATA_ASSERT_MSG(++n == 2, "n is %d", n);
    assert_int_equal(n, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failure_aborts_with_ndebug),
        cmocka_unit_test(test_detail_follows_condition),
        cmocka_unit_test(test_long_detail_is_cut_to_one_line),
        cmocka_unit_test(test_true_condition_evaluated_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
