/*
 * Unit tests for the pure half of common/net/etcd.c: base64 and the
 * decoders of the v3 JSON gateway's answers.
 *
 * For: the answers as etcd 3.4.23 really sends them (captured with curl
 * from Debian's etcd-server on this machine, 2026-12) and corrupt ones,
 * which must give -1 and a reason naming the field.
 * Not for: requests against a running etcd (tests/integration/test_etcd.py).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "net/etcd.h"

#define HDR(rev)                                                                                   \
    "\"header\":{\"cluster_id\":\"15118495548433857066\",\"member_id\":"                           \
    "\"13668033151171901709\",\"revision\":\"" rev "\",\"raft_term\":\"2\"}"

/* Real answers (keys a/1 = "hello", a/2 = "", c/new = "x", v2 = "djI="). */
static const char RANGE_ONE[] =
    "{" HDR("3") ",\"kvs\":[{\"key\":\"YS8x\",\"create_revision\":\"2\",\"mod_revision\":\"2\","
                 "\"version\":\"1\",\"value\":\"aGVsbG8=\"}],\"count\":\"1\"}";
static const char RANGE_EMPTY_VALUE[] =
    "{" HDR("3") ",\"kvs\":[{\"key\":\"YS8y\",\"create_revision\":\"3\",\"mod_revision\":\"3\","
                 "\"version\":\"1\"}],\"count\":\"1\"}";
static const char RANGE_ABSENT[] = "{" HDR("3") "}";
static const char RANGE_LIMITED[] =
    "{" HDR("3") ",\"kvs\":[{\"key\":\"YS8x\",\"create_revision\":\"2\",\"mod_revision\":\"2\","
                 "\"version\":\"1\",\"value\":\"aGVsbG8=\"}],\"more\":true,\"count\":\"2\"}";
static const char RANGE_LEASED[] =
    "{" HDR("7") ",\"kvs\":[{\"key\":\"bC8x\",\"create_revision\":\"7\",\"mod_revision\":\"7\","
                 "\"version\":\"1\",\"value\":\"dg==\",\"lease\":\"4111120510396389910\"}],"
                 "\"count\":\"1\"}";
static const char PUT[] = "{" HDR("2") "}";
static const char DELETED_ONE[] = "{" HDR("4") ",\"deleted\":\"1\"}";
static const char DELETED_NONE[] = "{" HDR("4") "}";
static const char TXN_OK[] =
    "{" HDR("5") ",\"succeeded\":true,\"responses\":[{\"response_put\":{\"header\":"
                 "{\"revision\":\"5\"}}}]}";
static const char TXN_FAILED[] =
    "{" HDR("5") ",\"responses\":[{\"response_range\":{\"header\":{\"revision\":\"5\"},"
                 "\"kvs\":[{\"key\":\"YS8x\",\"create_revision\":\"2\",\"mod_revision\":\"5\","
                 "\"version\":\"2\",\"value\":\"djI=\"}],\"count\":\"1\"}}]}";
static const char TXN_FAILED_ABSENT[] =
    "{" HDR("6") ",\"responses\":[{\"response_range\":{\"header\":{\"revision\":\"6\"}}}]}";
static const char GRANT[] = "{" HDR("6") ",\"ID\":\"4111120510396389907\",\"TTL\":\"2\"}";
static const char KEEPALIVE[] =
    "{\"result\":{" HDR("7") ",\"ID\":\"4111120510396389910\",\"TTL\":\"5\"}}";
static const char KEEPALIVE_GONE[] = "{\"result\":{" HDR("8") ",\"ID\":\"4111120510396389910\"}}";
static const char ERROR_NOT_FOUND[] = "{\"error\":\"etcdserver: requested lease not found\","
                                      "\"message\":\"etcdserver: requested lease not found\","
                                      "\"code\":5}";

static void test_base64_round_trips(void **state)
{
    (void)state;
    const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    const char *coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (size_t i = 0; i < 7; i++) {
        char out[16];
        assert_int_equal(etcd_base64_len(strlen(plain[i])), strlen(coded[i]));
        etcd_base64_encode(plain[i], strlen(plain[i]), out);
        assert_string_equal(out, coded[i]);
        unsigned char back[16];
        size_t n = 99;
        const char *why = NULL;
        assert_int_equal(etcd_base64_decode(coded[i], strlen(coded[i]), back, &n, &why), 0);
        assert_int_equal(n, strlen(plain[i]));
        assert_memory_equal(back, plain[i], n);
    }
    unsigned char all[256], back[256];
    char text[345];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    etcd_base64_encode(all, sizeof all, text);
    size_t n = 0;
    const char *why = NULL;
    assert_int_equal(etcd_base64_decode(text, strlen(text), back, &n, &why), 0);
    assert_int_equal(n, 256);
    assert_memory_equal(back, all, 256);
}

static void test_base64_rejects_bad_text(void **state)
{
    (void)state;
    const char *bad[] = {"Zg=",  "Zg",   "Z===", "=Zg=", "Zg==Zg==", "Zm9v!A==",
                         "Zh==", "Zm9=", "Zm 9", "Zg=a", "Zm9\n"};
    const char *reason[] = {"multiple of 4", "multiple of 4", "padding",       "padding",
                            "padding",       "alphabet",      "not canonical", "not canonical",
                            "alphabet",      "padding",       "alphabet"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned char out[16];
        size_t n = 0;
        const char *why = NULL;
        if (etcd_base64_decode(bad[i], strlen(bad[i]), out, &n, &why) != -1 || why == NULL ||
            strstr(why, reason[i]) == NULL)
            fail_msg("'%s': want -1 and '%s', got '%s'", bad[i], reason[i], why ? why : "");
    }
}

static void test_range_real_answers(void **state)
{
    (void)state;
    etcd_range r;
    char err[ETCD_MAX_ERR] = "";
    assert_int_equal(etcd_decode_range(RANGE_ONE, strlen(RANGE_ONE), 1, &r, err, sizeof err), 0);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.kvs[0].key, "a/1");
    assert_int_equal(r.kvs[0].value_len, 5);
    assert_string_equal(r.kvs[0].value, "hello");
    assert_int_equal(r.kvs[0].create_revision, 2);
    assert_int_equal(r.kvs[0].mod_revision, 2);
    assert_int_equal(r.kvs[0].version, 1);
    assert_int_equal(r.kvs[0].lease, 0);
    assert_int_equal(r.revision, 3);
    assert_false(r.more);
    etcd_range_free(&r);

    assert_int_equal(
        etcd_decode_range(RANGE_EMPTY_VALUE, strlen(RANGE_EMPTY_VALUE), 1, &r, err, sizeof err), 0);
    assert_int_equal(r.kvs[0].value_len, 0);
    assert_string_equal(r.kvs[0].value, "");
    etcd_range_free(&r);

    assert_int_equal(etcd_decode_range(RANGE_ABSENT, strlen(RANGE_ABSENT), 1, &r, err, sizeof err),
                     0);
    assert_int_equal(r.n, 0);
    assert_null(r.kvs);
    assert_int_equal(r.count, 0);

    assert_int_equal(
        etcd_decode_range(RANGE_LIMITED, strlen(RANGE_LIMITED), 1, &r, err, sizeof err), 0);
    assert_true(r.more);
    assert_int_equal(r.count, 2);
    assert_int_equal(r.n, 1);
    etcd_range_free(&r);

    assert_int_equal(etcd_decode_range(RANGE_LEASED, strlen(RANGE_LEASED), 1, &r, err, sizeof err),
                     0);
    assert_true(r.kvs[0].lease == 4111120510396389910LL);
    etcd_range_free(&r);
}

static void expect_range_rejected(const char *body, size_t max, const char *reason)
{
    etcd_range r;
    char err[ETCD_MAX_ERR] = "";
    int rc = etcd_decode_range(body, strlen(body), max, &r, err, sizeof err);
    if (rc != -1 || strstr(err, reason) == NULL)
        fail_msg("body %s: rc %d err '%s', want -1 and '%s'", body, rc, err, reason);
    assert_int_equal(r.n, 0);
    assert_null(r.kvs);
}

#define KV(key, cr, mr, ver, extra)                                                                \
    "{\"key\":\"" key "\",\"create_revision\":" cr ",\"mod_revision\":" mr                         \
    ",\"version\":" ver extra "}"
#define ONE(kv) "{" HDR("9") ",\"kvs\":[" kv "],\"count\":\"1\"}"

static void test_range_rejects_corrupt_answers(void **state)
{
    (void)state;
    expect_range_rejected("", 1, "empty answer");
    expect_range_rejected("{", 1, "not JSON");
    expect_range_rejected("[]", 1, "not a JSON object");
    expect_range_rejected("{" HDR("3") "} x", 1, "bytes after");
    expect_range_rejected("{}", 1, "header missing");
    expect_range_rejected("{\"header\":{}}", 1, "header.revision missing");
    expect_range_rejected("{" HDR("0") "}", 1, "out of range");
    expect_range_rejected("{" HDR("-3") "}", 1, "out of range");
    expect_range_rejected("{" HDR("9223372036854775808") "}", 1, "not a 64-bit");
    expect_range_rejected("{" HDR("012") "}", 1, "not a 64-bit");
    expect_range_rejected("{" HDR("1e3") "}", 1, "not a 64-bit");
    expect_range_rejected("{" HDR("") "}", 1, "not a 64-bit");
    expect_range_rejected("{\"header\":{\"revision\":1.5}}", 1, "not an exact integer");
    expect_range_rejected("{\"header\":{\"revision\":1e300}}", 1, "not an exact integer");
    expect_range_rejected("{\"header\":{\"revision\":true}}", 1, "neither a string");
    expect_range_rejected("{" HDR("3") ",\"kvs\":{}}", 1, "not an array");
    expect_range_rejected("{" HDR("3") ",\"kvs\":[1],\"count\":\"1\"}", 1, "kvs[0]: not an object");
    expect_range_rejected(ONE(KV("YS8x", "\"2\"", "\"2\"", "\"1\"", "")) "", 0, "at most 0");
    expect_range_rejected(ONE(KV("YS8x!", "\"2\"", "\"2\"", "\"1\"", "")), 1,
                          "kvs[0].key: not base64");
    expect_range_rejected(ONE(KV("", "\"2\"", "\"2\"", "\"1\"", "")), 1, "kvs[0].key: empty");
    expect_range_rejected(ONE(KV("YQBi", "\"2\"", "\"2\"", "\"1\"", "")), 1, "NUL byte");
    expect_range_rejected(ONE("{\"create_revision\":\"2\"}"), 1, "kvs[0].key missing");
    expect_range_rejected(ONE(KV("YS8x", "\"2\"", "\"1\"", "\"1\"", "")), 1,
                          "kvs[0].mod_revision: 1 out of range");
    expect_range_rejected(ONE(KV("YS8x", "\"2\"", "\"2\"", "\"0\"", "")), 1, "kvs[0].version");
    expect_range_rejected(ONE(KV("YS8x", "\"2\"", "\"2\"", "\"1\"", ",\"value\":7")), 1,
                          "kvs[0].value: not a string");
    expect_range_rejected(ONE(KV("YS8x", "\"2\"", "\"2\"", "\"1\"", ",\"value\":\"a\"")), 1,
                          "kvs[0].value: not base64");
    expect_range_rejected(ONE(KV("YS8x", "\"2\"", "\"2\"", "\"1\"", ",\"lease\":\"-1\"")), 1,
                          "kvs[0].lease");
    expect_range_rejected(
        "{" HDR("3") ",\"kvs\":[" KV("YS8x", "\"2\"", "\"2\"", "\"1\"", "") "],\"count\":\"2\"}", 2,
        "disagree");
    expect_range_rejected("{" HDR("3") ",\"count\":\"1\"}", 1, "disagree");
    expect_range_rejected("{" HDR("3") ",\"more\":\"yes\"}", 1, "more: not a boolean");
    expect_range_rejected("{" HDR("3") ",\"kvs\":[" KV("YS8y", "\"2\"", "\"2\"", "\"1\"",
                                                       "") "," KV("YS8x", "\"2\"", "\"2\"", "\"1\"",
                                                                  "") "],\"count\":\"2\"}",
                          2, "ascending");
    expect_range_rejected("{" HDR("3") ",\"kvs\":[" KV("YS8x", "\"2\"", "\"2\"", "\"1\"",
                                                       "") "," KV("YS8x", "\"2\"", "\"2\"", "\"1\"",
                                                                  "") "],\"count\":\"2\"}",
                          2, "ascending");
    /* A body with a NUL inside is not read past it as if it ended there. */
    etcd_range r;
    char err[ETCD_MAX_ERR] = "";
    static const char nul[] = "{" HDR("3") "}\0garbage";
    assert_int_equal(etcd_decode_range(nul, sizeof nul - 1, 1, &r, err, sizeof err), -1);
}

static void test_put_and_delete_answers(void **state)
{
    (void)state;
    char err[ETCD_MAX_ERR] = "";
    int64_t v = -1;
    assert_int_equal(etcd_decode_header(PUT, strlen(PUT), &v, err, sizeof err), 0);
    assert_int_equal(v, 2);
    assert_int_equal(etcd_decode_delete(DELETED_ONE, strlen(DELETED_ONE), &v, err, sizeof err), 0);
    assert_int_equal(v, 1);
    assert_int_equal(etcd_decode_delete(DELETED_NONE, strlen(DELETED_NONE), &v, err, sizeof err),
                     0);
    assert_int_equal(v, 0);
    const char *bad = "{" HDR("4") ",\"deleted\":\"-1\"}";
    assert_int_equal(etcd_decode_delete(bad, strlen(bad), &v, err, sizeof err), -1);
    assert_non_null(strstr(err, "deleted"));
    assert_int_equal(etcd_decode_header("{\"a\":1}", 7, &v, err, sizeof err), -1);
    assert_non_null(strstr(err, "header missing"));
}

static void test_txn_answers(void **state)
{
    (void)state;
    etcd_txn_result t;
    char err[ETCD_MAX_ERR] = "";
    assert_int_equal(etcd_decode_txn(TXN_OK, strlen(TXN_OK), &t, err, sizeof err), 0);
    assert_true(t.succeeded);
    assert_int_equal(t.revision, 5);
    assert_null(t.current.key);
    etcd_txn_result_free(&t);

    /* "succeeded" is absent, not false, when the compare failed. */
    assert_int_equal(etcd_decode_txn(TXN_FAILED, strlen(TXN_FAILED), &t, err, sizeof err), 0);
    assert_false(t.succeeded);
    assert_string_equal(t.current.key, "a/1");
    assert_string_equal(t.current.value, "v2");
    assert_int_equal(t.current.mod_revision, 5);
    assert_int_equal(t.current.version, 2);
    etcd_txn_result_free(&t);

    assert_int_equal(
        etcd_decode_txn(TXN_FAILED_ABSENT, strlen(TXN_FAILED_ABSENT), &t, err, sizeof err), 0);
    assert_false(t.succeeded);
    assert_null(t.current.key);
    assert_int_equal(t.current.mod_revision, 0);

    const char *bad[] = {
        "{" HDR("5") ",\"succeeded\":true}",
        "{" HDR("5") ",\"succeeded\":true,\"responses\":[]}",
        "{" HDR("5") ",\"succeeded\":true,\"responses\":[{\"response_range\":{}}]}",
        "{" HDR("5") ",\"responses\":[{\"response_put\":{\"header\":{\"revision\":\"5\"}}}]}",
        "{" HDR("5") ",\"succeeded\":1,\"responses\":[]}",
        "{" HDR("5") ",\"succeeded\":true,\"responses\":[{\"response_put\":{\"header\":"
                     "{\"revision\":\"4\"}}}]}",
        "{" HDR("5") ",\"responses\":[{\"response_range\":{\"header\":{\"revision\":\"5\"},"
                     "\"kvs\":[" KV("YQ==", "\"1\"", "\"1\"", "\"1\"", "") "," KV(
                         "Yg==", "\"1\"", "\"1\"", "\"1\"", "") "],\"count\":\"2\"}}]}",
    };
    const char *reason[] = {"responses",
                            "responses",
                            "response_put missing",
                            "response_range missing",
                            "succeeded: not a boolean",
                            "put at revision 4",
                            "at most 1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        if (etcd_decode_txn(bad[i], strlen(bad[i]), &t, err, sizeof err) != -1 ||
            strstr(err, reason[i]) == NULL)
            fail_msg("%s: want -1 and '%s', got '%s'", bad[i], reason[i], err);
        assert_null(t.current.key);
    }
}

static void test_lease_answers(void **state)
{
    (void)state;
    char err[ETCD_MAX_ERR] = "";
    int64_t id = 0, ttl = 0;
    assert_int_equal(etcd_decode_lease_grant(GRANT, strlen(GRANT), &id, &ttl, err, sizeof err), 0);
    assert_true(id == 4111120510396389907LL);
    assert_int_equal(ttl, 2);
    const char *no_ttl = "{" HDR("6") ",\"ID\":\"5\"}";
    assert_int_equal(etcd_decode_lease_grant(no_ttl, strlen(no_ttl), &id, &ttl, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "TTL missing"));
    const char *refused = "{" HDR("6") ",\"ID\":\"5\",\"TTL\":\"2\",\"error\":\"no space\"}";
    assert_int_equal(etcd_decode_lease_grant(refused, strlen(refused), &id, &ttl, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "no space"));

    assert_int_equal(
        etcd_decode_keepalive(KEEPALIVE, strlen(KEEPALIVE), &id, &ttl, err, sizeof err), 0);
    assert_true(id == 4111120510396389910LL);
    assert_int_equal(ttl, 5);
    /* A stream: what follows the first object is not read. */
    char stream[512];
    snprintf(stream, sizeof stream, "%s\n{\"result\":", KEEPALIVE);
    assert_int_equal(etcd_decode_keepalive(stream, strlen(stream), &id, &ttl, err, sizeof err), 0);
    /* An expired or revoked lease: the TTL is left out. */
    assert_int_equal(
        etcd_decode_keepalive(KEEPALIVE_GONE, strlen(KEEPALIVE_GONE), &id, &ttl, err, sizeof err),
        0);
    assert_int_equal(ttl, 0);
    const char *ended = "{\"error\":{\"grpc_code\":14,\"message\":\"etcdserver: no leader\"}}";
    assert_int_equal(etcd_decode_keepalive(ended, strlen(ended), &id, &ttl, err, sizeof err), -1);
    assert_non_null(strstr(err, "no leader"));
    assert_int_equal(etcd_decode_keepalive(GRANT, strlen(GRANT), &id, &ttl, err, sizeof err), -1);
    assert_non_null(strstr(err, "result missing"));
}

static void test_error_documents(void **state)
{
    (void)state;
    etcd_error e;
    char err[ETCD_MAX_ERR] = "";
    assert_int_equal(
        etcd_decode_error(ERROR_NOT_FOUND, strlen(ERROR_NOT_FOUND), &e, err, sizeof err), 0);
    assert_string_equal(e.message, "etcdserver: requested lease not found");
    assert_int_equal(e.code, 5);
    const char *ctl = "{\"message\":\"a\\nb\\u0001\"}";
    assert_int_equal(etcd_decode_error(ctl, strlen(ctl), &e, err, sizeof err), 0);
    assert_string_equal(e.message, "a?b?");
    assert_int_equal(e.code, -1);
    assert_int_equal(etcd_decode_error("Not Found\n", 10, &e, err, sizeof err), -1);
    const char *bad_code = "{\"message\":\"x\",\"code\":99}";
    assert_int_equal(etcd_decode_error(bad_code, strlen(bad_code), &e, err, sizeof err), -1);
    assert_non_null(strstr(err, "gRPC status code"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64_round_trips),
        cmocka_unit_test(test_base64_rejects_bad_text),
        cmocka_unit_test(test_range_real_answers),
        cmocka_unit_test(test_range_rejects_corrupt_answers),
        cmocka_unit_test(test_put_and_delete_answers),
        cmocka_unit_test(test_txn_answers),
        cmocka_unit_test(test_lease_answers),
        cmocka_unit_test(test_error_documents),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
