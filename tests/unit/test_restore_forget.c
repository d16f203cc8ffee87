/*
 * Unit test for pageserver/remote/restore.c restore_forget_timeline: a
 * deleted timeline's objects leave the store, the safekeepers' WAL backup
 * (wal/) included (review finding 10), and no other timeline's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "net/remote_storage.h"
#include "pageserver/remote/restore.h"

#define T_HEX "0123456789abcdef0123456789abcdef"
#define A_HEX "fedcba9876543210fedcba9876543210"
#define B_HEX "00000000000000000000000000000b0b"
#define PREFIX_A "tenants/" T_HEX "/timelines/" A_HEX "/"
#define PREFIX_B "tenants/" T_HEX "/timelines/" B_HEX "/"

static char tmpdir[64];

static remote_storage *open_local(void)
{
    char url[128];
    remote_config cfg;
    remote_err err = {{0}};
    remote_storage *rs;
    strcpy(tmpdir, "/tmp/strata-forget-XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    snprintf(url, sizeof url, "file://%s/", tmpdir);
    assert_int_equal(remote_config_from_url(url, &cfg, &err), 0);
    assert_int_equal(remote_open(&cfg, &rs, &err), 0);
    assert_int_equal(remote_init(rs, &err), 0);
    return rs;
}

static void put(remote_storage *rs, const char *key)
{
    remote_err err = {{0}};
    if (remote_put_buf(rs, key, "x", 1, &err) != 0)
        fail_msg("put %s: %s", key, err.msg);
}

static size_t count(remote_storage *rs, const char *prefix)
{
    remote_listing l;
    remote_err err = {{0}};
    assert_int_equal(remote_list(rs, prefix, &l, &err), 0);
    size_t n = l.n;
    remote_listing_free(&l);
    return n;
}

static void test_forget_deletes_manifests_data_and_wal(void **state)
{
    (void)state;
    remote_storage *rs = open_local();
    put(rs, PREFIX_A "manifest/0000000000000001.json");
    put(rs, PREFIX_A "data/0000000000000001.dat");
    put(rs, PREFIX_A "wal/000000010000000000000001");
    put(rs, PREFIX_A "wal/000000010000000000000002");
    put(rs, PREFIX_B "wal/000000010000000000000001");
    strata_id t, a;
    assert_true(strata_id_parse(T_HEX, &t));
    assert_true(strata_id_parse(A_HEX, &a));
    char err[256];
    assert_int_equal(restore_forget_timeline(rs, &t, &a, err, sizeof err), 0);
    assert_int_equal(count(rs, PREFIX_A), 0);
    assert_int_equal(count(rs, PREFIX_B), 1);
    remote_close(rs);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forget_deletes_manifests_data_and_wal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
