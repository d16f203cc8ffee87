/*
 * Unit tests for common/net/http.c: a real server on 127.0.0.1 port 0 and a
 * raw-socket HTTP/1.1 client.  Routing (prefixes, longest match), JSON
 * bodies, the error statuses (404, 405 with Allow, 400, 413 with and
 * without Content-Length, 500) and GET /metrics with exact text.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/http.h"

typedef struct reply {
    int status;
    char headers[4096];
    char *body;
} reply;

/* Sends raw request bytes, reads until the server closes (or 5 s). */
static void http_raw(int port, const char *req, size_t req_len, reply *out)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    size_t off = 0;
    while (off < req_len) {
        ssize_t w = send(fd, req + off, req_len - off, MSG_NOSIGNAL);
        if (w < 0)
            break; /* the server may answer 413 and close before reading it all */
        off += (size_t)w;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 5000) <= 0)
            break;
        if (len + 1 >= cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    buf[len] = '\0';
    close(fd);
    assert_true(sscanf(buf, "HTTP/1.1 %d", &out->status) == 1);
    char *sep = strstr(buf, "\r\n\r\n");
    assert_non_null(sep);
    size_t hl = (size_t)(sep - buf);
    assert_true(hl < sizeof out->headers);
    memcpy(out->headers, buf, hl);
    out->headers[hl] = '\0';
    out->body = strdup(sep + 4);
    free(buf);
}

static void http_do(int port, const char *method, const char *path, const char *body, reply *out)
{
    char req[8192];
    size_t bl = body ? strlen(body) : 0;
    int n = snprintf(req, sizeof req,
                     "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     method, path, bl, body ? body : "");
    assert_true(n > 0 && (size_t)n < sizeof req);
    http_raw(port, req, (size_t)n, out);
}

static void assert_json_error(const reply *r, int status, const char *contains)
{
    assert_int_equal(r->status, status);
    assert_non_null(strstr(r->headers, "Content-Type: application/json"));
    cJSON *j = cJSON_Parse(r->body);
    assert_non_null(j);
    cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    assert_true(cJSON_IsString(e));
    if (!strstr(e->valuestring, contains))
        fail_msg("error \"%s\" lacks \"%s\"", e->valuestring, contains);
    cJSON_Delete(j);
}

static void h_status(const http_request *req, http_response *resp, void *arg)
{
    (void)req;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", arg);
    const char *verbose = http_request_query(req, "verbose");
    if (verbose)
        cJSON_AddStringToObject(o, "verbose", verbose);
    http_response_json(resp, 200, o);
    cJSON_Delete(o);
}

static void h_echo(const http_request *req, http_response *resp, void *arg)
{
    (void)arg;
    cJSON *j = http_request_json(req, resp);
    if (!j)
        return;
    cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "value");
    if (!cJSON_IsString(v)) {
        cJSON_Delete(j);
        http_response_error(resp, 400, "\"value\" must be a string");
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "got", v->valuestring);
    cJSON_AddNumberToObject(o, "len", (double)req->body_len);
    http_response_json(resp, 201, o);
    cJSON_Delete(o);
    cJSON_Delete(j);
}

static void h_tenant(const http_request *req, http_response *resp, void *arg)
{
    (void)arg;
    const char *rest = req->path + strlen("/v1/tenant/");
    http_response_set(resp, 200, "text/plain", rest, strlen(rest));
}

static void h_timeline(const http_request *req, http_response *resp, void *arg)
{
    (void)arg;
    http_response_set(resp, 200, "text/plain", "timeline", 8);
    (void)req;
}

static void h_silent(const http_request *req, http_response *resp, void *arg)
{
    (void)req;
    (void)resp;
    (void)arg;
}

static void test_http_routes_and_errors(void **state)
{
    (void)state;
    metrics_registry *m = metrics_registry_new();
    metrics_counter *c =
        metrics_counter_register(m, "strata_http_test_total", "Test counter.", 0, NULL, NULL);
    metrics_counter_add(c, 7);
    http_config cfg = {.host = "127.0.0.1", .port = 0, .max_body = 1024, .metrics = m};
    char err[256];
    http_server *s = http_server_new(&cfg, err, sizeof err);
    assert_non_null(s);
    assert_int_equal(http_server_route(s, "GET", "/v1/status", h_status, "ok"), 0);
    assert_int_equal(http_server_route(s, "POST", "/v1/echo", h_echo, NULL), 0);
    assert_int_equal(http_server_route(s, "GET", "/v1/tenant/", h_tenant, NULL), 0);
    assert_int_equal(http_server_route(s, "GET", "/v1/tenant/x/timeline", h_timeline, NULL), 0);
    assert_int_equal(http_server_route(s, "DELETE", "/v1/tenant/x/timeline", h_timeline, NULL), 0);
    assert_int_equal(http_server_route(s, "GET", "/v1/silent", h_silent, NULL), 0);
    assert_int_equal(http_server_route(s, "GET", "no-slash", h_silent, NULL), -1);
    if (http_server_start(s, err, sizeof err) != 0)
        fail_msg("start: %s", err);
    assert_int_equal(http_server_route(s, "GET", "/late", h_silent, NULL), -1);
    int port = http_server_port(s);
    assert_true(port > 0);

    reply r;
    http_do(port, "GET", "/v1/status?verbose=yes", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"status\":\"ok\",\"verbose\":\"yes\"}");
    free(r.body);

    http_do(port, "POST", "/v1/echo", "{\"value\": \"hi\"}", &r);
    assert_int_equal(r.status, 201);
    assert_string_equal(r.body, "{\"got\":\"hi\",\"len\":15}");
    free(r.body);

    http_do(port, "POST", "/v1/echo", "{\"value\": ", &r);
    assert_json_error(&r, 400, "invalid JSON");
    free(r.body);
    http_do(port, "POST", "/v1/echo", "{} trailing", &r);
    assert_json_error(&r, 400, "invalid JSON");
    free(r.body);
    http_do(port, "POST", "/v1/echo", NULL, &r);
    assert_json_error(&r, 400, "must be a JSON document");
    free(r.body);
    http_do(port, "POST", "/v1/echo", "{\"value\": 3}", &r);
    assert_json_error(&r, 400, "\"value\" must be a string");
    free(r.body);

    /* Prefix routing and longest match. */
    http_do(port, "GET", "/v1/tenant/abc/def", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "abc/def");
    free(r.body);
    http_do(port, "GET", "/v1/tenant/x/timeline", NULL, &r);
    assert_string_equal(r.body, "timeline");
    free(r.body);
    /* "/v1/status" does not match "/v1/statusX". */
    http_do(port, "GET", "/v1/statusX", NULL, &r);
    assert_json_error(&r, 404, "no such endpoint: /v1/statusX");
    free(r.body);
    http_do(port, "GET", "/nope", NULL, &r);
    assert_json_error(&r, 404, "no such endpoint");
    free(r.body);

    /* Wrong method: 405 with the allowed ones. */
    http_do(port, "POST", "/v1/status", "{}", &r);
    assert_json_error(&r, 405, "method POST not allowed on /v1/status");
    assert_non_null(strstr(r.headers, "Allow: GET"));
    free(r.body);
    http_do(port, "PUT", "/v1/tenant/x/timeline", NULL, &r);
    assert_json_error(&r, 405, "not allowed");
    assert_non_null(strstr(r.headers, "Allow: GET, DELETE"));
    free(r.body);

    /* A handler that sets nothing. */
    http_do(port, "GET", "/v1/silent", NULL, &r);
    assert_json_error(&r, 500, "no response");
    free(r.body);

    /* Body over max_body, announced by Content-Length. */
    char big[4096];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    http_do(port, "POST", "/v1/echo", big, &r);
    assert_json_error(&r, 413, "request body too large (limit 1024 bytes)");
    free(r.body);

    /* ... and sent chunked, without a length. */
    char chunked[8192];
    big[700] = '\0'; /* two chunks of 700: over the limit only together */
    int n = snprintf(chunked, sizeof chunked,
                     "POST /v1/echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n",
                     (unsigned)strlen(big), big, (unsigned)strlen(big), big);
    assert_true(n > 0 && (size_t)n < sizeof chunked);
    http_raw(port, chunked, (size_t)n, &r);
    assert_json_error(&r, 413, "too large");
    free(r.body);

    /* A body within the limit still works after those. */
    http_do(port, "POST", "/v1/echo", "{\"value\":\"again\"}", &r);
    assert_int_equal(r.status, 201);
    free(r.body);

    /* Built-in /metrics renders the registry. */
    http_do(port, "GET", "/metrics", NULL, &r);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.headers, "Content-Type: text/plain; version=0.0.4"));
    assert_string_equal(r.body, "# HELP strata_http_test_total Test counter.\n"
                                "# TYPE strata_http_test_total counter\n"
                                "strata_http_test_total 7\n");
    free(r.body);
    metrics_counter_inc(c);
    http_do(port, "GET", "/metrics", NULL, &r);
    assert_non_null(strstr(r.body, "strata_http_test_total 8\n"));
    free(r.body);
    http_do(port, "POST", "/metrics", "{}", &r);
    assert_json_error(&r, 405, "not allowed");
    free(r.body);

    http_server_free(s);
    metrics_registry_free(m);
}

static void test_http_bind_errors(void **state)
{
    (void)state;
    char err[256];
    http_config cfg = {.host = "127.0.0.1"};
    http_server *a = http_server_new(&cfg, err, sizeof err);
    assert_non_null(a);
    assert_int_equal(http_server_start(a, err, sizeof err), 0);
    /* Same port again: a clear error, not a crash. */
    http_config cfg2 = {.host = "127.0.0.1", .port = http_server_port(a)};
    http_server *b = http_server_new(&cfg2, err, sizeof err);
    assert_non_null(b);
    assert_int_equal(http_server_start(b, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot start the HTTP server"));
    http_server_free(b);
    http_config cfg3 = {.host = "not-an-ip"};
    http_server *c = http_server_new(&cfg3, err, sizeof err);
    assert_int_equal(http_server_start(c, err, sizeof err), -1);
    assert_non_null(strstr(err, "invalid HTTP listen address"));
    http_server_free(c);
    /* The default registry serves when none is given. */
    metrics_counter *dc = metrics_counter_register(
        metrics_default_registry(), "strata_default_probe_total", "Probe.", 0, NULL, NULL);
    metrics_counter_inc(dc);
    reply r;
    http_do(http_server_port(a), "GET", "/metrics", NULL, &r);
    assert_non_null(strstr(r.body, "strata_default_probe_total 1\n"));
    free(r.body);
    http_server_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_routes_and_errors),
        cmocka_unit_test(test_http_bind_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
