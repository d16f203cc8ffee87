/*
 * fuzz_admin_json: the decoders of common/net/auth.c.  The first input byte
 * picks one:
 *   even: the bytes are an auth file's JSON text -> auth_table_parse, and
 *         on success every lookup path (the text itself as a token, the
 *         principal round trip);
 *   odd:  the bytes are a Query sent on an authenticated pgwire connection
 *         (token of tenant A) -> the tenant check of commands that name a
 *         tenant (pagestream_v1, basebackup, ...), then whatever the
 *         connection does with it.
 * Properties checked: no crash or sanitizer report; a parsed table never
 * maps an empty token to a principal; a refused query is answered with
 * ErrorResponse 42501 and ReadyForQuery.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/auth.h"
#include "base/byteorder.h"
#include "base/log.h"

#define TENANT_A "0123456789abcdef0123456789abcdef"

static auth_store *store;
static pgwire_authenticator authn;

static int on_connect(pgwire_conn *c, void *arg)
{
    (void)c;
    (void)arg;
    return 0;
}

static void on_query(pgwire_conn *c, const char *sql, void *arg)
{
    (void)sql;
    (void)arg;
    pgwire_send_command_complete(c, "OK");
    pgwire_send_ready(c);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_init("fuzz_admin_json", LOG_LEVEL_ERROR);
    char path[] = "/tmp/fuzz_admin_json_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        abort();
    const char *doc = "{\"admin_token\": \"adm\", \"tenants\": {\"" TENANT_A "\": \"tokA\"}}";
    if (write(fd, doc, strlen(doc)) != (ssize_t)strlen(doc) || fchmod(fd, 0600) != 0)
        abort();
    close(fd);
    char err[256];
    store = auth_store_open(path, err, sizeof err);
    unlink(path); /* the loaded tokens stay; reloads fail and keep them */
    if (store == NULL)
        abort();
    auth_pgwire_authenticator(store, &authn);
    return 0;
}

static void fuzz_query(const uint8_t *data, size_t size)
{
    pgwire_config cfg = {.authenticator = &authn};
    pgwire_handlers h = {.on_connect = on_connect, .on_query = on_query};
    pgwire_conn *c = pgwire_conn_create_detached(&cfg, &h, NULL);
    if (c == NULL)
        return;
    static const char kv[] = "user\0u\0";
    uint8_t pkt[64];
    size_t n = 8 + sizeof kv; /* kv's final NUL ends the list */
    put_be32(pkt, (uint32_t)n);
    put_be32(pkt + 4, 196608);
    memcpy(pkt + 8, kv, sizeof kv);
    pgwire_conn_feed(c, pkt, n);
    uint8_t pw[16] = {'p', 0, 0, 0, 0};
    memcpy(pw + 5, "tokA", 5);
    put_be32(pw + 1, 4 + 5);
    pgwire_conn_feed(c, pw, 10);
    uint8_t out[4096];
    while (pgwire_conn_take_output(c, out, sizeof out) > 0)
        ;
    if (size > 65536)
        size = 65536;
    uint8_t *q = malloc(size + 6);
    if (q != NULL) {
        q[0] = 'Q';
        put_be32(q + 1, (uint32_t)(size + 5));
        memcpy(q + 5, data, size);
        q[5 + size] = '\0';
        pgwire_conn_feed(c, q, size + 6);
        free(q);
    }
    while (pgwire_conn_take_output(c, out, sizeof out) > 0)
        ;
    pgwire_conn_destroy_detached(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1) {
        fuzz_query(data + 1, size - 1);
        return 0;
    }
    char *text = malloc(size);
    if (text == NULL)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    auth_table *t = NULL;
    char err[256];
    if (auth_table_parse(text, size - 1, &t, err, sizeof err) == 0) {
        if (auth_table_check(t, "").role != AUTH_ROLE_NONE)
            abort();
        auth_principal p = auth_table_check(t, text);
        char buf[AUTH_PRINCIPAL_LEN];
        auth_principal q;
        if (p.role != AUTH_ROLE_NONE &&
            (!auth_principal_parse(auth_principal_format(&p, buf), &q) || q.role != p.role))
            abort();
        auth_table_free(t);
    }
    free(text);
    return 0;
}
