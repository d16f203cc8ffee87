/*
 * Unit tests for common/net/auth.c: the auth file parser (every refusal with
 * its message), constant-time comparison, token lookup, the store's file
 * mode check and reloads (explicit and on change, a broken edit keeping
 * the old tokens), principals, and the pgwire authenticator driven through
 * a detached pgwire connection (right token, wrong token, other tenant in
 * the startup options, other tenant in a pagestream/basebackup command).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/auth.h"

#define T1 "0123456789abcdef0123456789abcdef"
#define T2 "fedcba9876543210fedcba9876543210"
#define GOOD                                                                                       \
    "{\"admin_token\": \"adm-secret\", \"tenants\": {\"" T1 "\": \"tok1\", \"" T2 "\": \"tok2\"}}"

static auth_table *parse_ok(const char *json)
{
    auth_table *t = NULL;
    char err[256] = "";
    int rc = auth_table_parse(json, strlen(json), &t, err, sizeof err);
    if (rc != 0)
        fail_msg("parse failed: %s", err);
    return t;
}

static void parse_fails(const char *json, const char *want)
{
    auth_table *t = (auth_table *)1;
    char err[256] = "";
    assert_int_equal(auth_table_parse(json, strlen(json), &t, err, sizeof err), -1);
    assert_null(t);
    if (strstr(err, want) == NULL)
        fail_msg("error \"%s\" does not contain \"%s\"", err, want);
}

static void test_equal(void **state)
{
    (void)state;
    assert_true(auth_equal("", ""));
    assert_true(auth_equal("abc", "abc"));
    assert_false(auth_equal("abc", "abd"));
    assert_false(auth_equal("abc", "ab"));
    assert_false(auth_equal("ab", "abc"));
    assert_false(auth_equal("", "a"));
}

static void test_parse_and_check(void **state)
{
    (void)state;
    auth_table *t = parse_ok(GOOD);
    auth_principal p = auth_table_check(t, "adm-secret");
    assert_int_equal(p.role, AUTH_ROLE_ADMIN);
    p = auth_table_check(t, "tok2");
    assert_int_equal(p.role, AUTH_ROLE_TENANT);
    assert_string_equal(p.tenant, T2);
    p = auth_table_check(t, "tok1");
    assert_string_equal(p.tenant, T1);
    assert_int_equal(auth_table_check(t, "tok").role, AUTH_ROLE_NONE);
    assert_int_equal(auth_table_check(t, "tok11").role, AUTH_ROLE_NONE);
    assert_int_equal(auth_table_check(t, "").role, AUTH_ROLE_NONE);
    assert_int_equal(auth_table_check(t, NULL).role, AUTH_ROLE_NONE);
    auth_table_free(t);

    /* Upper-case tenant ids are normalised; an empty object is valid (and
     * then nothing is accepted). */
    t = parse_ok("{\"tenants\": {\"0123456789ABCDEF0123456789ABCDEF\": \"x\"}}");
    assert_string_equal(auth_table_check(t, "x").tenant, T1);
    assert_int_equal(auth_table_check(t, "adm-secret").role, AUTH_ROLE_NONE);
    auth_table_free(t);
    t = parse_ok("{}");
    assert_int_equal(auth_table_check(t, "x").role, AUTH_ROLE_NONE);
    auth_table_free(t);
}

static void test_parse_refusals(void **state)
{
    (void)state;
    parse_fails("", "not valid JSON");
    parse_fails("{\"admin_token\": \"a\"", "not valid JSON");
    parse_fails("[]", "expected a JSON object");
    parse_fails("{\"admin\": \"a\"}", "unknown key \"admin\"");
    parse_fails("{\"admin_token\": 5}", "\"admin_token\" must be a string");
    parse_fails("{\"admin_token\": \"\"}", "\"admin_token\" is empty");
    parse_fails("{\"admin_token\": \"has space\"}", "not printable ASCII");
    parse_fails("{\"tenants\": []}", "\"tenants\" must be one object");
    parse_fails("{\"tenants\": {\"abc\": \"t\"}}", "tenant \"abc\" is not a tenant id");
    parse_fails("{\"tenants\": {\"" T1 "\": 1}}", "token of tenant " T1 " must be a string");
    parse_fails("{\"tenants\": {\"" T1 "\": \"same\", \"" T2 "\": \"same\"}}",
                "have the same token");
    parse_fails("{\"tenants\": {\"" T1 "\": \"a\", \"" T1 "\": \"b\"}}", "listed twice");
    parse_fails("{\"admin_token\": \"a\", \"tenants\": {\"" T1 "\": \"a\"}}",
                "has the admin token");
    char longtok[400];
    memset(longtok, 'x', 300);
    longtok[300] = '\0';
    char json[512];
    snprintf(json, sizeof json, "{\"admin_token\": \"%s\"}", longtok);
    parse_fails(json, "longer than 255");
}

static void test_principals(void **state)
{
    (void)state;
    auth_principal p = {.role = AUTH_ROLE_TENANT};
    memcpy(p.tenant, T1, sizeof p.tenant);
    char text[AUTH_PRINCIPAL_LEN];
    assert_string_equal(auth_principal_format(&p, text), "tenant:" T1);
    auth_principal q;
    assert_true(auth_principal_parse(text, &q));
    assert_int_equal(q.role, AUTH_ROLE_TENANT);
    assert_string_equal(q.tenant, T1);
    assert_true(auth_principal_parse("admin", &q));
    assert_int_equal(q.role, AUTH_ROLE_ADMIN);
    assert_false(auth_principal_parse("tenant:xyz", &q));
    assert_false(auth_principal_parse("root", &q));

    assert_true(auth_principal_allows(NULL, T2)); /* trust */
    assert_true(auth_principal_allows("admin", T2));
    assert_true(auth_principal_allows("tenant:" T1, T1));
    assert_true(auth_principal_allows("tenant:" T1, "0123456789ABCDEF0123456789ABCDEF"));
    assert_false(auth_principal_allows("tenant:" T1, T2));
    assert_false(auth_principal_allows("tenant:" T1, "not-an-id"));
    assert_false(auth_principal_allows("tenant:" T1, NULL));
    assert_false(auth_principal_allows("garbage", T1));
}

/* ---- the store over a real file ---- */

static char tmpdir[64];

static void write_file(const char *path, const char *text, mode_t mode)
{
    char tmp[128];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(chmod(tmp, mode), 0);
    assert_int_equal(rename(tmp, path), 0);
}

static void test_store(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_auth_XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    char path[128], err[512];
    snprintf(path, sizeof path, "%s/auth.json", tmpdir);

    assert_null(auth_store_open(path, err, sizeof err));
    assert_non_null(strstr(err, "cannot open auth file"));

    write_file(path, GOOD, 0644);
    assert_null(auth_store_open(path, err, sizeof err));
    assert_non_null(strstr(err, "has mode 0644"));
    assert_non_null(strstr(err, "chmod 600"));

    write_file(path, "{\"admin_token\": ", 0600);
    assert_null(auth_store_open(path, err, sizeof err));
    assert_non_null(strstr(err, "not valid JSON"));

    write_file(path, GOOD, 0600);
    auth_store *a = auth_store_open(path, err, sizeof err);
    assert_non_null(a);
    int n = 0;
    bool admin = false;
    auth_store_counts(a, &n, &admin);
    assert_int_equal(n, 2);
    assert_true(admin);
    assert_int_equal(auth_store_check(a, "tok1").role, AUTH_ROLE_TENANT);

    /* Explicit reload (SIGHUP): a new token replaces the old one. */
    write_file(path, "{\"admin_token\": \"adm2\"}", 0600);
    assert_int_equal(auth_store_reload(a, err, sizeof err), 0);
    assert_int_equal(auth_store_check(a, "tok1").role, AUTH_ROLE_NONE);
    assert_int_equal(auth_store_check(a, "adm2").role, AUTH_ROLE_ADMIN);

    /* A broken edit or a readable file is refused and the old tokens stay. */
    write_file(path, "{broken", 0600);
    assert_int_equal(auth_store_reload(a, err, sizeof err), -1);
    assert_int_equal(auth_store_check(a, "adm2").role, AUTH_ROLE_ADMIN);
    write_file(path, GOOD, 0640);
    assert_int_equal(auth_store_reload(a, err, sizeof err), -1);
    assert_non_null(strstr(err, "has mode 0640"));
    assert_int_equal(auth_store_check(a, "adm2").role, AUTH_ROLE_ADMIN);
    assert_int_equal(auth_store_check(a, "tok1").role, AUTH_ROLE_NONE);

    /* A change on disk is picked up without a signal within about 1 s. */
    write_file(path, GOOD, 0600);
    usleep(1200 * 1000);
    assert_int_equal(auth_store_check(a, "tok1").role, AUTH_ROLE_TENANT);
    assert_int_equal(auth_store_check(a, "adm2").role, AUTH_ROLE_NONE);
    assert_int_equal(auth_store_check(a, "adm-secret").role, AUTH_ROLE_ADMIN);

    /* The file removed: the old tokens stay (logged). */
    unlink(path);
    usleep(1200 * 1000);
    assert_int_equal(auth_store_check(a, "tok1").role, AUTH_ROLE_TENANT);
    auth_store_free(a);
    rmdir(tmpdir);
}

/* ---- the pgwire authenticator through a detached connection ---- */

static int queries_seen;
static char last_principal[AUTH_PRINCIPAL_LEN];

static int h_connect(pgwire_conn *c, void *arg)
{
    (void)arg;
    const char *p = pgwire_conn_principal(c);
    snprintf(last_principal, sizeof last_principal, "%s", p ? p : "(null)");
    return 0;
}

static void h_query(pgwire_conn *c, const char *sql, void *arg)
{
    (void)sql;
    (void)arg;
    queries_seen++;
    pgwire_send_command_complete(c, "OK");
    pgwire_send_ready(c);
}

static size_t build_startup(uint8_t *buf, const char *const kv[], int nkv)
{
    size_t pos = 8;
    for (int i = 0; i < nkv; i++) {
        size_t l = strlen(kv[i]) + 1;
        memcpy(buf + pos, kv[i], l);
        pos += l;
    }
    buf[pos++] = 0;
    uint32_t n = htonl((uint32_t)pos), c = htonl(196608);
    memcpy(buf, &n, 4);
    memcpy(buf + 4, &c, 4);
    return pos;
}

static size_t build_msg(uint8_t *buf, char type, const char *s)
{
    size_t l = strlen(s) + 1;
    buf[0] = (uint8_t)type;
    uint32_t n = htonl((uint32_t)(l + 4));
    memcpy(buf + 1, &n, 4);
    memcpy(buf + 5, s, l);
    return l + 5;
}

/* Finds the first ErrorResponse in out: its C and M fields.  False if none. */
static bool find_error(const uint8_t *out, size_t len, char *code, char *msg, size_t msgcap)
{
    size_t pos = 0;
    while (pos + 5 <= len) {
        uint32_t n;
        memcpy(&n, out + pos + 1, 4);
        n = ntohl(n);
        if (out[pos] == 'E') {
            const char *f = (const char *)out + pos + 5;
            const char *end = (const char *)out + pos + 1 + n;
            while (f < end && *f) {
                if (*f == 'C')
                    snprintf(code, 6, "%s", f + 1);
                if (*f == 'M')
                    snprintf(msg, msgcap, "%s", f + 1);
                f += strlen(f) + 1;
            }
            return true;
        }
        pos += 1 + n;
    }
    return false;
}

/* Startup (with options, may be NULL), then password; returns the conn
 * (NULL when it closed) and the output so far. */
static pgwire_conn *session(const pgwire_config *cfg, const pgwire_handlers *h, const char *options,
                            const char *password, uint8_t *out, size_t *outlen)
{
    pgwire_conn *c = pgwire_conn_create_detached(cfg, h, NULL);
    assert_non_null(c);
    uint8_t pkt[512];
    const char *kv[] = {"user", "u", "options", options};
    size_t n = build_startup(pkt, kv, options ? 4 : 2);
    assert_int_equal(pgwire_conn_feed(c, pkt, n), 0);
    size_t got = pgwire_conn_take_output(c, out, 4096);
    /* AuthenticationCleartextPassword. */
    assert_int_equal(got, 9);
    assert_memory_equal(out, "R\0\0\0\x08\0\0\0\x03", 9);
    n = build_msg(pkt, 'p', password);
    int rc = pgwire_conn_feed(c, pkt, n);
    *outlen = pgwire_conn_take_output(c, out, 4096);
    if (rc != 0) {
        pgwire_conn_destroy_detached(c);
        return NULL;
    }
    return c;
}

static void test_pgwire_authenticator(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_auth_XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    char path[128], err[512];
    snprintf(path, sizeof path, "%s/auth.json", tmpdir);
    write_file(path, GOOD, 0600);
    auth_store *a = auth_store_open(path, err, sizeof err);
    assert_non_null(a);
    pgwire_authenticator authn;
    auth_pgwire_authenticator(a, &authn);
    pgwire_config cfg = {.authenticator = &authn};
    pgwire_handlers h = {.on_connect = h_connect, .on_query = h_query};
    uint8_t out[4096];
    size_t len;
    char code[8], msg[256];

    /* Wrong token: FATAL 28P01, closed, on_connect never ran. */
    last_principal[0] = '\0';
    assert_null(session(&cfg, &h, NULL, "nope", out, &len));
    assert_true(find_error(out, len, code, msg, sizeof msg));
    assert_string_equal(code, "28P01");
    assert_non_null(strstr(msg, "password authentication failed for user \"u\""));
    assert_string_equal(last_principal, "");

    /* Another tenant in the startup options: 42501, closed. */
    assert_null(session(&cfg, &h, "-c tenant_id=" T2, "tok1", out, &len));
    assert_true(find_error(out, len, code, msg, sizeof msg));
    assert_string_equal(code, "42501");
    assert_string_equal(msg,
                        "permission denied: the token of tenant " T1 " may not use tenant " T2);
    assert_string_equal(last_principal, "");

    /* The tenant's own token: accepted, principal exposed. */
    pgwire_conn *c = session(&cfg, &h, "-c tenant_id=" T1, "tok1", out, &len);
    assert_non_null(c);
    assert_false(find_error(out, len, code, msg, sizeof msg));
    assert_memory_equal(out, "R\0\0\0\x08\0\0\0\0", 9);
    assert_string_equal(last_principal, "tenant:" T1);

    /* Commands naming a tenant are checked before the handler sees them. */
    uint8_t q[256];
    queries_seen = 0;
    const char *refused[] = {"pagestream_v1 " T2 " " T1, "  BASEBACKUP " T2 " " T1 " 0/0",
                             "pagestream " T2 " x"};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(pgwire_conn_feed(c, q, build_msg(q, 'Q', refused[i])), 0);
        len = pgwire_conn_take_output(c, out, sizeof out);
        assert_true(find_error(out, len, code, msg, sizeof msg));
        assert_string_equal(code, "42501");
        assert_non_null(strstr(msg, "may not use tenant " T2));
        assert_memory_equal(out + len - 6, "Z\0\0\0\x05I", 6);
    }
    assert_int_equal(queries_seen, 0);
    const char *allowed[] = {"pagestream_v1 " T1 " " T2, "basebackup " T1 " x 0/0",
                             "IDENTIFY_SYSTEM", "pagestream_v1"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pgwire_conn_feed(c, q, build_msg(q, 'Q', allowed[i])), 0);
        len = pgwire_conn_take_output(c, out, sizeof out);
        assert_false(find_error(out, len, code, msg, sizeof msg));
    }
    assert_int_equal(queries_seen, 4);
    /* The explicit check for handlers. */
    assert_int_equal(auth_pgwire_require_tenant(c, T1), 0);
    pgwire_conn_destroy_detached(c);

    /* The admin token may use any tenant. */
    c = session(&cfg, &h, "-c tenant_id=" T2, "adm-secret", out, &len);
    assert_non_null(c);
    assert_string_equal(last_principal, "admin");
    queries_seen = 0;
    assert_int_equal(pgwire_conn_feed(c, q, build_msg(q, 'Q', refused[0])), 0);
    len = pgwire_conn_take_output(c, out, sizeof out);
    assert_false(find_error(out, len, code, msg, sizeof msg));
    assert_int_equal(queries_seen, 1);
    pgwire_conn_destroy_detached(c);

    /* The process default applies to TRUST servers without an authenticator. */
    pgwire_set_default_authenticator(&authn);
    pgwire_config trust = {0};
    assert_null(session(&trust, &h, NULL, "wrong", out, &len));
    assert_true(find_error(out, len, code, msg, sizeof msg));
    assert_string_equal(code, "28P01");
    pgwire_set_default_authenticator(NULL);
    c = pgwire_conn_create_detached(&trust, &h, NULL);
    uint8_t pkt[128];
    const char *kv[] = {"user", "u"};
    assert_int_equal(pgwire_conn_feed(c, pkt, build_startup(pkt, kv, 2)), 0);
    len = pgwire_conn_take_output(c, out, sizeof out);
    assert_memory_equal(out, "R\0\0\0\x08\0\0\0\0", 9); /* trust again */
    assert_string_equal(last_principal, "(null)");
    pgwire_conn_destroy_detached(c);

    auth_store_free(a);
    unlink(path);
    rmdir(tmpdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_equal),          cmocka_unit_test(test_parse_and_check),
        cmocka_unit_test(test_parse_refusals), cmocka_unit_test(test_principals),
        cmocka_unit_test(test_store),          cmocka_unit_test(test_pgwire_authenticator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
