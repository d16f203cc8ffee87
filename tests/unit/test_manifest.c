/*
 * Unit tests for pageserver/remote/manifest.c: a manifest survives the
 * encode/decode round trip exactly; the decoder refuses every malformed or
 * inconsistent manifest with a message naming the field; the keys have the
 * agreed layout and parse back; manifest_fetch_newest finds the highest seq
 * in a real file:// store.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "pageserver/remote/manifest.h"

#define T_HEX "0123456789abcdef0123456789abcdef"
#define L_HEX "fedcba9876543210fedcba9876543210"

static manifest_file sample_files[] = {
    {.id = 1, .size = 4096, .lsn_min = 0x1000028, .lsn_max = 0x1500000},
    {.id = 7, .size = 0, .lsn_min = 0, .lsn_max = 0},
    {.id = (UINT64_C(1) << 53) - 2,
     .size = (UINT64_C(1) << 53) - 1,
     .lsn_min = 0xFFFFFFFF00000000,
     .lsn_max = 0xFFFFFFFFFFFFFFFF},
};

static void sample(manifest *m)
{
    memset(m, 0, sizeof *m);
    assert_true(strata_id_parse(T_HEX, &m->tenant));
    assert_true(strata_id_parse(L_HEX, &m->timeline));
    m->seq = 42;
    m->consistent_lsn = 0x2000000;
    m->gc_horizon = 0x1800000;
    m->start_lsn = 0x1000028;
    m->n_safekeepers = 3;
    strcpy(m->safekeepers[0], "127.0.0.1:5454");
    strcpy(m->safekeepers[1], "sk-2.example:5454");
    strcpy(m->safekeepers[2], "[::1]:5455");
    m->next_file_id = (UINT64_C(1) << 53) - 1;
    m->n_files = 3;
    m->files = sample_files;
}

static void test_round_trip(void **state)
{
    (void)state;
    manifest m, back;
    sample(&m);
    char *text;
    size_t len;
    char err[512] = "";
    if (manifest_encode(&m, &text, &len, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(strlen(text), len);
    assert_int_equal(manifest_decode(text, len, &back, err, sizeof err), 0);
    assert_int_equal(back.seq, m.seq);
    assert_true(strata_id_equal(&back.tenant, &m.tenant));
    assert_true(strata_id_equal(&back.timeline, &m.timeline));
    assert_true(back.consistent_lsn == m.consistent_lsn);
    assert_true(back.gc_horizon == m.gc_horizon);
    assert_true(back.start_lsn == m.start_lsn);
    assert_int_equal(back.n_safekeepers, 3);
    for (int i = 0; i < 3; i++)
        assert_string_equal(back.safekeepers[i], m.safekeepers[i]);
    assert_true(back.next_file_id == m.next_file_id);
    assert_int_equal(back.n_files, 3);
    assert_memory_equal(back.files, sample_files, sizeof sample_files);
    /* The encoding is canonical: encoding the decoded manifest gives the same bytes. */
    char *again;
    size_t again_len;
    assert_int_equal(manifest_encode(&back, &again, &again_len, err, sizeof err), 0);
    assert_int_equal(again_len, len);
    assert_memory_equal(again, text, len);
    free(again);
    manifest_free(&back);
    assert_null(back.files);

    /* No files, no safekeepers, trailing whitespace. */
    m.n_files = 0;
    m.files = NULL;
    m.n_safekeepers = 0;
    m.gc_horizon = 0;
    free(text);
    assert_int_equal(manifest_encode(&m, &text, &len, err, sizeof err), 0);
    char *padded = malloc(len + 3);
    memcpy(padded, text, len);
    memcpy(padded + len, " \n\t", 3);
    assert_int_equal(manifest_decode(padded, len + 3, &back, err, sizeof err), 0);
    assert_int_equal(back.n_files, 0);
    assert_int_equal(back.n_safekeepers, 0);
    manifest_free(&back);
    free(padded);
    free(text);
}

/* A valid manifest's text with one substitution. */
static const char *good_text =
    "{\"version\": 1, \"tenant_id\": \"" T_HEX "\", \"timeline_id\": \"" L_HEX "\","
    " \"seq\": 3, \"consistent_lsn\": \"0/3000000\", \"gc_horizon\": \"0/0\","
    " \"start_lsn\": \"0/1000028\", \"safekeepers\": [\"a:1\", \"b:2\"],"
    " \"next_file_id\": 10,"
    " \"files\": [{\"id\": 2, \"size\": 100, \"lsn_min\": \"0/1000028\", \"lsn_max\": "
    "\"0/2000000\"},"
    " {\"id\": 5, \"size\": 200, \"lsn_min\": \"0/2000000\", \"lsn_max\": \"0/3000000\"}]}";

static char *replace(const char *from, const char *to)
{
    const char *at = strstr(good_text, from);
    assert_non_null(at);
    size_t n = strlen(good_text) - strlen(from) + strlen(to);
    char *s = malloc(n + 1);
    size_t pre = (size_t)(at - good_text);
    memcpy(s, good_text, pre);
    strcpy(s + pre, to);
    strcat(s, at + strlen(from));
    return s;
}

static void expect_refused_text(const char *text, size_t len, const char *reason)
{
    manifest m;
    char err[512] = "";
    assert_int_equal(manifest_decode(text, len, &m, err, sizeof err), -1);
    assert_null(m.files);
    if (strstr(err, reason) == NULL)
        fail_msg("error \"%s\" does not mention \"%s\"", err, reason);
}

static void expect_refused(const char *from, const char *to, const char *reason)
{
    char *s = replace(from, to);
    expect_refused_text(s, strlen(s), reason);
    free(s);
}

static void test_good_text_decodes(void **state)
{
    (void)state;
    manifest m;
    char err[512] = "";
    assert_int_equal(manifest_decode(good_text, strlen(good_text), &m, err, sizeof err), 0);
    assert_int_equal(m.seq, 3);
    assert_int_equal(m.n_files, 2);
    assert_int_equal(m.files[1].id, 5);
    assert_true(m.files[1].lsn_max == 0x3000000);
    manifest_free(&m);
    /* Unknown members are ignored (a later writer may add optional ones). */
    char *s = replace("\"seq\": 3", "\"future\": {\"x\": [1]}, \"seq\": 3");
    assert_int_equal(manifest_decode(s, strlen(s), &m, err, sizeof err), 0);
    manifest_free(&m);
    free(s);
}

static void test_refuses_version(void **state)
{
    (void)state;
    expect_refused("\"version\": 1", "\"version\": 2", "version 2");
    expect_refused("\"version\": 1", "\"version\": 0", "version 0");
    expect_refused("\"version\": 1", "\"version\": \"1\"", "version is not an integer");
    expect_refused("\"version\": 1, ", "", "version is missing");
}

static void test_refuses_ids(void **state)
{
    (void)state;
    expect_refused("\"tenant_id\": \"" T_HEX "\"", "\"tenant_id\": \"0123\"", "tenant_id");
    expect_refused(L_HEX, "fedcba9876543210fedcba987654321g", "timeline_id");
    expect_refused(L_HEX, "fedcba9876543210fedcba98765432100", "timeline_id");
    expect_refused("\"tenant_id\": \"" T_HEX "\"", "\"tenant_id\": 5", "tenant_id");
}

static void test_refuses_numbers(void **state)
{
    (void)state;
    expect_refused("\"seq\": 3", "\"seq\": 0", "seq 0");
    expect_refused("\"seq\": 3", "\"seq\": -3", "seq is not an integer");
    expect_refused("\"seq\": 3", "\"seq\": 3.5", "seq is not an integer");
    expect_refused("\"seq\": 3", "\"seq\": 1e300", "seq is not an integer");
    expect_refused("\"seq\": 3", "\"seq\": 9007199254740993", "seq");
    expect_refused("\"seq\": 3", "\"seq\": null", "seq is not an integer");
    expect_refused("\"size\": 100", "\"size\": -1", "files[0].size");
    expect_refused("\"next_file_id\": 10", "\"next_file_id\": \"10\"", "next_file_id");
}

static void test_refuses_file_ids(void **state)
{
    (void)state;
    expect_refused("\"id\": 5", "\"id\": 2", "files[1].id 2 is not above files[0].id 2");
    expect_refused("\"id\": 5", "\"id\": 1", "sorted and unique");
    expect_refused("\"id\": 2", "\"id\": 0", "files[0].id 0 is out of range");
    expect_refused("\"next_file_id\": 10", "\"next_file_id\": 5",
                   "files[1].id 5 is not below next_file_id 5");
    expect_refused("\"id\": 5, ", "", "files[1].id is missing");
    expect_refused("\"files\": [{", "\"files\": [7, {", "files[0] is not an object");
    expect_refused("\"files\": [", "\"files\": 5, \"x\": [", "files is not an array");
}

static void test_refuses_lsns(void **state)
{
    (void)state;
    expect_refused("\"consistent_lsn\": \"0/3000000\"", "\"consistent_lsn\": \"3000000\"",
                   "consistent_lsn is not an LSN");
    expect_refused("\"start_lsn\": \"0/1000028\"", "\"start_lsn\": \"0/1000028x\"", "start_lsn");
    expect_refused("\"gc_horizon\": \"0/0\"", "\"gc_horizon\": 0", "gc_horizon");
    expect_refused("\"gc_horizon\": \"0/0\"", "\"gc_horizon\": \"0/3000001\"",
                   "gc_horizon 0/3000001 is above consistent_lsn 0/3000000");
    expect_refused("\"lsn_min\": \"0/2000000\"", "\"lsn_min\": \"0/3000001\"",
                   "files[1] (id 5): lsn_min 0/3000001 > lsn_max 0/3000000");
    expect_refused("\"lsn_max\": \"0/2000000\"", "\"lsn_max\": \"G/0\"",
                   "files[0].lsn_max is not an LSN");
    expect_refused("\"lsn_max\": \"0/2000000\"", "\"lsn_max\": \"100000000/0\"", "lsn_max");
}

static void test_refuses_safekeepers(void **state)
{
    (void)state;
    char many[2048] = "[";
    for (int i = 0; i <= TIMELINE_MAX_SAFEKEEPERS; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%s\"s%d:1\"", i ? ", " : "", i);
    strcat(many, "]");
    expect_refused("[\"a:1\", \"b:2\"]", many, "17 safekeepers (at most 16)");
    expect_refused("\"b:2\"", "\"\"", "safekeepers[1]");
    expect_refused("\"b:2\"", "\"b\\n:2\"", "safekeepers[1]");
    expect_refused("\"b:2\"", "2", "safekeepers[1]");
    char long_addr[TIMELINE_SAFEKEEPER_LEN + 3];
    memset(long_addr, 'x', sizeof long_addr);
    long_addr[0] = '"';
    long_addr[TIMELINE_SAFEKEEPER_LEN + 1] = '"';
    long_addr[TIMELINE_SAFEKEEPER_LEN + 2] = '\0';
    expect_refused("\"a:1\"", long_addr, "safekeepers[0]");
    expect_refused("[\"a:1\", \"b:2\"]", "\"a:1\"", "safekeepers is not an array");
}

/* A branch's manifest (issue #15): the two ancestor members round-trip,
 * go together, and name another timeline at start_lsn. */
static void test_branch_members(void **state)
{
    (void)state;
    const char *anc = "\"ancestor_timeline_id\": \"00112233445566778899aabbccddeeff\", "
                      "\"ancestor_lsn\": \"0/1000028\", \"seq\": 3";
    char *s = replace("\"seq\": 3", anc);
    manifest m, back;
    char err[512] = "";
    assert_int_equal(manifest_decode(s, strlen(s), &m, err, sizeof err), 0);
    free(s);
    assert_true(m.has_ancestor);
    assert_int_equal(m.ancestor_lsn, 0x1000028);
    char *text;
    size_t len;
    assert_int_equal(manifest_encode(&m, &text, &len, err, sizeof err), 0);
    assert_int_equal(manifest_decode(text, len, &back, err, sizeof err), 0);
    assert_true(back.has_ancestor && back.ancestor_lsn == m.ancestor_lsn &&
                strata_id_equal(&back.ancestor_timeline, &m.ancestor_timeline));
    free(text);
    manifest_free(&back);
    manifest_free(&m);
    /* Without them: no ancestor, and the encoding has none either. */
    assert_int_equal(manifest_decode(good_text, strlen(good_text), &m, err, sizeof err), 0);
    assert_false(m.has_ancestor);
    assert_int_equal(manifest_encode(&m, &text, &len, err, sizeof err), 0);
    assert_null(strstr(text, "ancestor"));
    free(text);
    manifest_free(&m);
    expect_refused("\"seq\": 3", "\"ancestor_lsn\": \"0/1000028\", \"seq\": 3",
                   "ancestor_timeline_id and ancestor_lsn go together");
    expect_refused("\"seq\": 3",
                   "\"ancestor_timeline_id\": \"00112233445566778899aabbccddeeff\", "
                   "\"ancestor_lsn\": \"0/2000000\", \"seq\": 3",
                   "ancestor_lsn 0/2000000 is not start_lsn 0/1000028");
    expect_refused("\"seq\": 3",
                   "\"ancestor_timeline_id\": \"" L_HEX "\", \"ancestor_lsn\": "
                   "\"0/1000028\", \"seq\": 3",
                   "ancestor_timeline_id is the timeline itself");
    expect_refused("\"seq\": 3",
                   "\"ancestor_timeline_id\": 7, \"ancestor_lsn\": \"0/1000028\", \"seq\": 3",
                   "ancestor_timeline_id");
}

static void test_refuses_bad_json(void **state)
{
    (void)state;
    size_t n = strlen(good_text);
    for (size_t cut = 0; cut < n; cut += 7)
        expect_refused_text(good_text, cut, cut == 0 ? "empty" : "invalid manifest");
    expect_refused_text(good_text, n - 1, "not valid JSON");
    char *s = replace("]}", "]} {}");
    expect_refused_text(s, strlen(s), "trailing bytes");
    free(s);
    expect_refused_text("[1, 2]", 6, "not a JSON object");
    expect_refused_text("\"x\"", 3, "not a JSON object");
    expect_refused_text("\xff\xfe", 2, "not valid JSON");
}

static void test_encode_refuses_what_decode_would(void **state)
{
    (void)state;
    manifest m;
    sample(&m);
    manifest_file unsorted[] = {{.id = 3, .size = 1}, {.id = 3, .size = 1}};
    m.files = unsorted;
    m.n_files = 2;
    char *text = (char *)"untouched";
    size_t len = 99;
    char err[512] = "";
    assert_int_equal(manifest_encode(&m, &text, &len, err, sizeof err), -1);
    assert_null(text);
    assert_non_null(strstr(err, "sorted and unique"));
    sample(&m);
    m.seq = 0;
    assert_int_equal(manifest_encode(&m, &text, &len, err, sizeof err), -1);
    sample(&m);
    m.n_safekeepers = TIMELINE_MAX_SAFEKEEPERS + 1;
    assert_int_equal(manifest_encode(&m, &text, &len, err, sizeof err), -1);
    sample(&m);
    m.next_file_id = UINT64_C(1) << 53;
    assert_int_equal(manifest_encode(&m, &text, &len, err, sizeof err), -1);
}

static void test_keys(void **state)
{
    (void)state;
    strata_id t, l;
    assert_true(strata_id_parse(T_HEX, &t));
    assert_true(strata_id_parse(L_HEX, &l));
    char k[MANIFEST_KEY_LEN], p[MANIFEST_KEY_LEN];
    manifest_key(&t, &l, 0x2a, k, sizeof k);
    assert_string_equal(k, "tenants/" T_HEX "/timelines/" L_HEX "/manifest/000000000000002a.json");
    manifest_prefix(&t, &l, p, sizeof p);
    uint64_t v;
    assert_true(manifest_key_seq(p, k, &v));
    assert_int_equal(v, 0x2a);
    manifest_data_key(&t, &l, 0xabc, k, sizeof k);
    assert_string_equal(k, "tenants/" T_HEX "/timelines/" L_HEX "/data/0000000000000abc.dat");
    manifest_data_prefix(&t, &l, p, sizeof p);
    assert_true(manifest_data_key_id(p, k, &v));
    assert_int_equal(v, 0xabc);
    assert_false(manifest_key_seq(p, k, &v));
    char bad[2 * MANIFEST_KEY_LEN];
    snprintf(bad, sizeof bad, "%s0000000000000ABC.dat", p);
    assert_false(manifest_data_key_id(p, bad, &v));
    snprintf(bad, sizeof bad, "%s0000000000000abc.dat.tmp", p);
    assert_false(manifest_data_key_id(p, bad, &v));
    snprintf(bad, sizeof bad, "%sabc.dat", p);
    assert_false(manifest_data_key_id(p, bad, &v));
}

static void put_text(remote_storage *rs, const char *key, const char *text)
{
    remote_err re;
    if (remote_put_buf(rs, key, text, strlen(text), &re) != 0)
        fail_msg("put %s: %s", key, re.msg);
}

static void test_fetch_newest(void **state)
{
    (void)state;
    char root[] = "/tmp/test_manifest_XXXXXX";
    assert_non_null(mkdtemp(root));
    char url[128];
    snprintf(url, sizeof url, "file://%s", root);
    remote_config cfg;
    remote_err re;
    remote_storage *rs;
    assert_int_equal(remote_config_from_url(url, &cfg, &re), 0);
    assert_int_equal(remote_open(&cfg, &rs, &re), 0);
    manifest m;
    sample(&m);
    char err[512] = "", key[2 * MANIFEST_KEY_LEN];
    manifest got;
    assert_int_equal(manifest_fetch_newest(rs, &m.tenant, &m.timeline, &got, err, sizeof err),
                     -ENOENT);
    for (uint64_t seq = 1; seq <= 17; seq += 8) {
        m.seq = seq;
        char *text;
        size_t len;
        assert_int_equal(manifest_encode(&m, &text, &len, err, sizeof err), 0);
        manifest_key(&m.tenant, &m.timeline, seq, key, sizeof key);
        put_text(rs, key, text);
        free(text);
    }
    /* Objects that are not manifests are ignored. */
    char p[MANIFEST_KEY_LEN];
    manifest_prefix(&m.tenant, &m.timeline, p, sizeof p);
    snprintf(key, sizeof key, "%sREADME", p);
    put_text(rs, key, "not a manifest");
    if (manifest_fetch_newest(rs, &m.tenant, &m.timeline, &got, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(got.seq, 17);
    assert_int_equal(got.n_files, 3);
    manifest_free(&got);

    /* The newest one is corrupt: a clear -EPROTO, not an older manifest. */
    manifest_key(&m.tenant, &m.timeline, 18, key, sizeof key);
    put_text(rs, key, "{\"version\": 1, \"seq\"");
    assert_int_equal(manifest_fetch_newest(rs, &m.tenant, &m.timeline, &got, err, sizeof err),
                     -EPROTO);
    assert_non_null(strstr(err, "0000000000000012.json"));
    /* A manifest stored under another seq's key is refused too. */
    m.seq = 5;
    char *text;
    size_t len;
    assert_int_equal(manifest_encode(&m, &text, &len, err, sizeof err), 0);
    put_text(rs, key, text);
    free(text);
    assert_int_equal(manifest_fetch_newest(rs, &m.tenant, &m.timeline, &got, err, sizeof err),
                     -EPROTO);
    remote_close(rs);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_good_text_decodes),
        cmocka_unit_test(test_refuses_version),
        cmocka_unit_test(test_refuses_ids),
        cmocka_unit_test(test_refuses_numbers),
        cmocka_unit_test(test_refuses_file_ids),
        cmocka_unit_test(test_refuses_lsns),
        cmocka_unit_test(test_refuses_safekeepers),
        cmocka_unit_test(test_branch_members),
        cmocka_unit_test(test_refuses_bad_json),
        cmocka_unit_test(test_encode_refuses_what_decode_would),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_fetch_newest),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
