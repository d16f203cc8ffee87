/* Unit tests for common/base/daemon_opts.c: flags, environment, config file and
 * defaults in their precedence, the typed value parsers, and the message
 * each kind of bad input gets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/daemon_opts.h"

enum { T_DATADIR, T_PORT, T_LISTEN_PG, T_EMPTY_DEFAULT, T_CONFIG, T_COUNT };

static const daemon_opt table[T_COUNT] = {
    [T_DATADIR] = {"datadir", "TESTD_DATADIR", NULL, "data directory (required)"},
    [T_PORT] = {"port", "TESTD_PORT", "5432", "a number"},
    [T_LISTEN_PG] = {"listen-pg", "TESTD_LISTEN_PG", "127.0.0.1:6400", "an address"},
    [T_EMPTY_DEFAULT] = {"auth-file", "TESTD_AUTH_FILE", "", "empty by default"},
    [T_CONFIG] = {"config", "TESTD_CONFIG", NULL, "config file"},
};

static char conf_path[64];

static daemon_opts fresh(void)
{
    daemon_opts o = {.program = "testd",
                     .synopsis = "--datadir DIR [options]",
                     .table = table,
                     .count = T_COUNT,
                     .config = T_CONFIG};
    return o;
}

static void write_conf(const char *text)
{
    FILE *f = fopen(conf_path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    strcpy(conf_path, "/tmp/strata-daemon-opts-XXXXXX");
    int fd = mkstemp(conf_path);
    if (fd < 0)
        return -1;
    close(fd);
    for (int i = 0; i < T_COUNT; i++)
        unsetenv(table[i].env);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(conf_path);
    for (int i = 0; i < T_COUNT; i++)
        unsetenv(table[i].env);
    return 0;
}

/* Parses argv (NULL-terminated, without the program name). */
static daemon_opts_result parse(daemon_opts *o, const char *const *args, char *err, size_t len)
{
    char *argv[16] = {"testd"};
    int argc = 1;
    for (; args[argc - 1] != NULL; argc++)
        argv[argc] = (char *)args[argc - 1];
    err[0] = '\0';
    return daemon_opts_parse(o, argc, argv, err, len);
}

static void expect_error(const char *const *args, const char *message)
{
    daemon_opts o = fresh();
    char err[512];
    assert_int_equal(parse(&o, args, err, sizeof err), DAEMON_OPTS_ERROR);
    assert_string_equal(err, message);
    daemon_opts_free(&o);
}

static void test_defaults_and_flag_forms(void **state)
{
    (void)state;
    daemon_opts o = fresh();
    char err[256];
    const char *args[] = {"--datadir", "/d", "--port=7", "--listen-pg", "h:1", "--port", "8", NULL};
    assert_int_equal(parse(&o, args, err, sizeof err), DAEMON_OPTS_OK);
    assert_string_equal(o.values[T_DATADIR], "/d");
    assert_string_equal(o.values[T_PORT], "8"); /* the last of a repeated flag */
    assert_string_equal(o.values[T_LISTEN_PG], "h:1");
    assert_string_equal(o.values[T_EMPTY_DEFAULT], "");
    assert_null(o.values[T_CONFIG]);
    assert_true(daemon_opts_require(&o, T_DATADIR, err, sizeof err));
    daemon_opts_free(&o);
    assert_null(o.values);
}

static void test_precedence_flag_env_file_default(void **state)
{
    (void)state;
    write_conf("# a comment\n\n  port = 3\nlisten_pg = 'file:1'\nauth-file=\"/a\"\n"
               "datadir = /from-file\n");
    setenv("TESTD_CONFIG", conf_path, 1);
    setenv("TESTD_LISTEN_PG", "env:2", 1);
    setenv("TESTD_DATADIR", "", 1); /* empty: unset */
    daemon_opts o = fresh();
    char err[256];
    const char *args[] = {"--port", "1", NULL};
    assert_int_equal(parse(&o, args, err, sizeof err), DAEMON_OPTS_OK);
    assert_string_equal(o.values[T_PORT], "1");           /* flag over file */
    assert_string_equal(o.values[T_LISTEN_PG], "env:2");  /* environment over file */
    assert_string_equal(o.values[T_EMPTY_DEFAULT], "/a"); /* file over default, unquoted */
    assert_string_equal(o.values[T_DATADIR], "/from-file");
    daemon_opts_free(&o);
    unsetenv("TESTD_CONFIG");
    unsetenv("TESTD_LISTEN_PG");
    unsetenv("TESTD_DATADIR");
}

static void test_first_key_in_file_wins(void **state)
{
    (void)state;
    write_conf("port = 1\nport = 2\n");
    daemon_opts o = fresh();
    char err[256];
    const char *args[] = {"--config", conf_path, NULL};
    assert_int_equal(parse(&o, args, err, sizeof err), DAEMON_OPTS_OK);
    assert_string_equal(o.values[T_PORT], "1");
    daemon_opts_free(&o);
}

static void test_help(void **state)
{
    (void)state;
    const char *forms[][4] = {{"--help", NULL}, {"-h", NULL}, {"--port", "1", "--help"}};
    for (size_t i = 0; i < 3; i++) {
        daemon_opts o = fresh();
        char err[64];
        assert_int_equal(parse(&o, forms[i], err, sizeof err), DAEMON_OPTS_HELP);
        daemon_opts_free(&o);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    daemon_opts o = fresh();
    daemon_opts_usage(&o, f);
    fclose(f);
    assert_non_null(strstr(text, "Usage: testd --datadir DIR [options]"));
    assert_non_null(strstr(text, "--listen-pg"));
    assert_non_null(strstr(text, "env TESTD_DATADIR, default: (none)"));
    assert_non_null(strstr(text, "env TESTD_PORT, default: 5432"));
    assert_non_null(strstr(text, "env TESTD_AUTH_FILE, default: (empty)"));
    assert_non_null(strstr(text, "--help"));
    free(text);
}

static void test_bad_argv(void **state)
{
    (void)state;
    expect_error((const char *[]){"--nosuch", "1", NULL}, "unknown option \"--nosuch\"");
    expect_error((const char *[]){"--nosuch=1", NULL}, "unknown option \"--nosuch\"");
    expect_error((const char *[]){"-x", NULL}, "unknown option \"-x\"");
    /* '_' is for config keys; flags are spelt with '-'. */
    expect_error((const char *[]){"--listen_pg", "h:1", NULL}, "unknown option \"--listen_pg\"");
    expect_error((const char *[]){"--datadir", NULL}, "option --datadir needs a value");
    expect_error((const char *[]){"stray", NULL}, "unexpected argument \"stray\"");
}

static void test_bad_config_file(void **state)
{
    (void)state;
    char want[256];
    const char *args[] = {"--config", conf_path, NULL};

    write_conf("port = 1\nnosuch = 2\n");
    snprintf(want, sizeof want, "%s:2: unknown key \"nosuch\"", conf_path);
    expect_error(args, want);

    write_conf("# ok\njust words\n");
    snprintf(want, sizeof want, "%s:2: expected key = value", conf_path);
    expect_error(args, want);

    write_conf("config = /other\n"); /* the file cannot name another file */
    snprintf(want, sizeof want, "%s:1: unknown key \"config\"", conf_path);
    expect_error(args, want);

    char line[2048];
    memset(line, 'x', sizeof line);
    memcpy(line, "port = ", 7);
    line[sizeof line - 2] = '\n';
    line[sizeof line - 1] = '\0';
    write_conf(line);
    snprintf(want, sizeof want, "%s:1: line longer than 1022 bytes", conf_path);
    expect_error(args, want);

    expect_error((const char *[]){"--config", "/nonexistent/strata.conf", NULL},
                 "cannot read config file /nonexistent/strata.conf: No such file or directory");
}

static void test_require(void **state)
{
    (void)state;
    daemon_opts o = fresh();
    char err[256];
    const char *args[] = {"--datadir", "", NULL};
    assert_int_equal(parse(&o, args, err, sizeof err), DAEMON_OPTS_OK);
    assert_false(daemon_opts_require(&o, T_DATADIR, err, sizeof err));
    assert_string_equal(err, "--datadir is required");
    assert_false(daemon_opts_require(&o, T_CONFIG, err, sizeof err));
    assert_string_equal(err, "--config is required");
    daemon_opts_free(&o);
}

static void test_uint(void **state)
{
    (void)state;
    uint64_t v;
    char err[256];
    assert_true(daemon_opt_uint("workers", "4", 1, 256, &v, err, sizeof err));
    assert_int_equal(v, 4);
    assert_true(daemon_opt_uint("id", "18446744073709551615", 1, UINT64_MAX, &v, err, sizeof err));
    assert_int_equal(v, UINT64_MAX);
    const char *bad[] = {"", "abc", "4x", " 4", "+4", "-1", "0", "257", "18446744073709551616"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_false(daemon_opt_uint("workers", bad[i], 1, 256, &v, err, sizeof err));
        char want[128];
        snprintf(want, sizeof want, "invalid --workers \"%s\" (want an integer 1..256)", bad[i]);
        assert_string_equal(err, want);
    }
}

static void test_bytes(void **state)
{
    (void)state;
    uint64_t v;
    char err[256];
    struct {
        const char *s;
        uint64_t want;
    } good[] = {{"0", 0},
                {"4096", 4096},
                {"64kB", 64 << 10},
                {"64KB", 64 << 10},
                {"64MB", 64ULL << 20},
                {"1GB", 1ULL << 30},
                {"1048576GB", 1ULL << 50}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        assert_true(daemon_opt_bytes("lag", good[i].s, &v, err, sizeof err));
        assert_int_equal(v, good[i].want);
    }
    const char *bad[] = {"",    "lots", "-5",        "5 MB",
                         "5mb", "5TB",  "1048577GB", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_false(daemon_opt_bytes("lag", bad[i], &v, err, sizeof err));
        char want[128];
        snprintf(want, sizeof want, "invalid --lag \"%s\" (want bytes, e.g. 4096, 64kB, 64MB, 1GB)",
                 bad[i]);
        assert_string_equal(err, want);
    }
}

static void test_duration(void **state)
{
    (void)state;
    uint32_t v;
    char err[256];
    assert_true(daemon_opt_duration_ms("t", "60", false, &v, err, sizeof err));
    assert_int_equal(v, 60000);
    assert_true(daemon_opt_duration_ms("t", "60s", false, &v, err, sizeof err));
    assert_int_equal(v, 60000);
    assert_true(daemon_opt_duration_ms("t", "500ms", false, &v, err, sizeof err));
    assert_int_equal(v, 500);
    assert_true(daemon_opt_duration_ms("t", "86400s", false, &v, err, sizeof err));
    assert_int_equal(v, 86400000);
    assert_true(daemon_opt_duration_ms("gc", "0", true, &v, err, sizeof err));
    assert_int_equal(v, 0);
    assert_false(daemon_opt_duration_ms("t", "0", false, &v, err, sizeof err));
    assert_string_equal(err, "invalid --t \"0\" (want e.g. 60s or 500ms, at most 24 h)");
    const char *bad[] = {"", "soon", "-1s", "0ms", "86401s", "5m", "1h", "18446744073709551s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_false(daemon_opt_duration_ms("gc", bad[i], true, &v, err, sizeof err));
        char want[128];
        snprintf(want, sizeof want,
                 "invalid --gc \"%s\" (want e.g. 60s or 500ms, at most 24 h; 0: never)", bad[i]);
        assert_string_equal(err, want);
    }
}

static void test_hostport(void **state)
{
    (void)state;
    char host[16], err[256];
    int port;
    assert_true(
        daemon_opt_hostport("listen-pg", "127.0.0.1:0", host, sizeof host, &port, err, sizeof err));
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 0);
    assert_true(
        daemon_opt_hostport("listen-pg", "::1:65535", host, sizeof host, &port, err, sizeof err));
    assert_string_equal(host, "::1");
    assert_int_equal(port, 65535);
    const char *bad[] = {"",       "host",       ":80",     "host:",
                         "host:x", "host:65536", "host:-1", "a-host-name-too-long-for-16:80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_false(
            daemon_opt_hostport("listen-pg", bad[i], host, sizeof host, &port, err, sizeof err));
        char want[128];
        snprintf(want, sizeof want, "invalid --listen-pg \"%s\" (want HOST:PORT)", bad[i]);
        assert_string_equal(err, want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_flag_forms),
        cmocka_unit_test(test_precedence_flag_env_file_default),
        cmocka_unit_test(test_first_key_in_file_wins),
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_bad_argv),
        cmocka_unit_test(test_bad_config_file),
        cmocka_unit_test(test_require),
        cmocka_unit_test(test_uint),
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_duration),
        cmocka_unit_test(test_hostport),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
