/*
 * Unit tests for cli/compute/compute_settings.c: parsing and checking `--set
 * name=value` and STRATA_COMPUTE_SETTINGS lines, quoting for
 * postgresql.conf, the shared_preload_libraries merge, and the compute spec
 * file kept in the cluster directory (real files in a temporary directory).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cli/compute/compute_settings.h"

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/strata-settings-XXXXXX");
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void parse_fails(const char *text, const char *needle)
{
    compute_setting s;
    cli_err err = {{0}};
    assert_int_equal(compute_setting_parse(text, "--set", &s, &err), -1);
    if (strstr(err.msg, needle) == NULL)
        fail_msg("error \"%s\" for \"%s\" lacks \"%s\"", err.msg, text, needle);
}

static void test_parse(void **state)
{
    (void)state;
    compute_setting s;
    cli_err err = {{0}};
    assert_int_equal(compute_setting_parse("Work_Mem=7MB", "--set", &s, &err), 0);
    assert_string_equal(s.name, "work_mem");
    assert_string_equal(s.value, "7MB");
    /* The value is literal: '=' and quotes stay, empty is a value. */
    assert_int_equal(compute_setting_parse("search_path=a=b 'c'", "--set", &s, &err), 0);
    assert_string_equal(s.value, "a=b 'c'");
    assert_int_equal(compute_setting_parse("pg_stat_statements.max=5000", "--set", &s, &err), 0);
    assert_int_equal(compute_setting_parse("application_name=", "--set", &s, &err), 0);
    assert_string_equal(s.value, "");
    parse_fails("work_mem", "not name=value");
    parse_fails("=1", "not a setting name");
    parse_fails("work mem=1", "not a setting name");
    parse_fails("1abc=1", "not a setting name");
    parse_fails("a.b.c=1", "not a setting name");
    parse_fails("a.=1", "not a setting name");
    parse_fails("x;drop=1", "not a setting name");
    parse_fails("port=5433", "set by Strata");
    parse_fails("Strata.Safekeepers=x:1", "set by Strata");
    parse_fails("synchronous_commit=off", "set by Strata");
    parse_fails("synchronous_commit=off", "set by Strata");
    parse_fails("work_mem=1\n2", "control character");
    char big[COMPUTE_SETTING_VALUE_MAX + 16];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    memcpy(big, "a=", 2);
    parse_fails(big, "at most");
}

static void test_text_and_render(void **state)
{
    (void)state;
    compute_settings ss;
    cli_err err = {{0}};
    assert_int_equal(compute_settings_parse_text("# comment\n\n  work_mem=7MB \r\n"
                                                 "statement_timeout=123s\nwork_mem=8MB\n"
                                                 "application_name=it's a \\ test",
                                                 "env", &ss, &err),
                     0);
    assert_int_equal(ss.n, 3);
    assert_string_equal(ss.s[0].value, "8MB"); /* a later line replaces */
    char buf[1024] = "";
    size_t used = 0;
    assert_int_equal(compute_settings_render(&ss, buf, sizeof buf, &used, &err), 0);
    assert_string_equal(buf, "work_mem = '8MB'\nstatement_timeout = '123s'\n"
                             "application_name = 'it''s a \\\\ test'\n");
    compute_settings_remove(&ss, "statement_timeout");
    assert_int_equal(ss.n, 2);
    assert_string_equal(ss.s[1].name, "application_name");
    assert_int_equal(compute_settings_parse_text("ok=1\nport=1\n", "env", &ss, &err), -1);
    assert_non_null(strstr(err.msg, "env line 2"));
}

static void test_preload(void **state)
{
    (void)state;
    char lib[300], out[1024];
    snprintf(lib, sizeof lib, "%s/pg_stat_statements.so", tmpdir);
    FILE *f = fopen(lib, "w");
    assert_non_null(f);
    fclose(f);
    cli_err err = {{0}};
    const char *so = "/opt/strata/lib/strata.so";
    assert_int_equal(compute_settings_preload(NULL, so, tmpdir, out, sizeof out, &err), 0);
    assert_string_equal(out, so);
    assert_int_equal(
        compute_settings_preload("strata, pg_stat_statements", so, tmpdir, out, sizeof out, &err),
        0);
    assert_string_equal(out, "/opt/strata/lib/strata.so,pg_stat_statements");
    assert_int_equal(compute_settings_preload("\"pg_stat_statements\",/x/strata.so", so, tmpdir,
                                              out, sizeof out, &err),
                     0);
    assert_string_equal(out, "/opt/strata/lib/strata.so,pg_stat_statements");
    assert_int_equal(
        compute_settings_preload("strata,no_such_lib", so, tmpdir, out, sizeof out, &err), -1);
    assert_non_null(strstr(err.msg, "no_such_lib not found"));
    memset(&err, 0, sizeof err);
    assert_int_equal(compute_settings_preload("strata,,x", so, tmpdir, out, sizeof out, &err), -1);
    assert_non_null(strstr(err.msg, "not a comma-separated list"));
}

static void test_spec_file(void **state)
{
    (void)state;
    cluster c;
    memset(&c, 0, sizeof c);
    snprintf(c.dir, sizeof c.dir, "%s", tmpdir);
    compute_settings ss, back;
    cli_err err = {{0}};
    assert_int_equal(compute_settings_load(&c, &ss, &err), 0);
    assert_int_equal(ss.n, 0);
    compute_setting s;
    assert_int_equal(compute_setting_parse("statement_timeout=123s", "--set", &s, &err), 0);
    assert_int_equal(compute_settings_put(&ss, &s, &err), 0);
    assert_int_equal(compute_setting_parse("application_name=a'b", "--set", &s, &err), 0);
    assert_int_equal(compute_settings_put(&ss, &s, &err), 0);
    assert_int_equal(compute_settings_save(&c, &ss, &err), 0);
    assert_int_equal(compute_settings_load(&c, &back, &err), 0);
    assert_int_equal(back.n, 2);
    assert_string_equal(back.s[0].name, "statement_timeout");
    assert_string_equal(back.s[1].value, "a'b");
    setenv("STRATA_COMPUTE_SETTINGS", "work_mem=9MB\nlisten_addresses=*", 1);
    assert_int_equal(compute_settings_from_env(&back, &err), 0);
    assert_int_equal(back.n, 2);
    setenv("STRATA_COMPUTE_SETTINGS", "port=1", 1);
    assert_int_equal(compute_settings_from_env(&back, &err), -1);
    unsetenv("STRATA_COMPUTE_SETTINGS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_text_and_render),
        cmocka_unit_test(test_preload),
        cmocka_unit_test(test_spec_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
