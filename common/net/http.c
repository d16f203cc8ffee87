/*
 * http.c: the HTTP server on libmicrohttpd.  See http.h.
 *
 * MHD calls the access handler several times per request: once with the
 * headers (we allocate the request state and check Content-Length), once
 * per chunk of body (we append, bounded by max_body), and once with no data
 * (we route and answer).  The route table is fixed before the thread starts,
 * so the HTTP thread reads it without a lock.
 * Not here: JSON schemas of the daemons' endpoints (their own files).
 */
#include "net/http.h"

#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "base/log.h"

#define DEFAULT_MAX_BODY (1024 * 1024)
#define DEFAULT_MAX_CONNECTIONS 64
#define DEFAULT_TIMEOUT_S 30
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define JSON_CONTENT_TYPE "application/json"

typedef struct route {
    char method[16];
    char prefix[256];
    http_handler handler;
    void *arg;
} route;

struct http_server {
    http_config cfg;
    char host[64];
    struct MHD_Daemon *daemon;
    int port;
    int nroutes;
    route routes[HTTP_MAX_ROUTES];
};

/* Per-request state between the access handler's calls. */
typedef struct request_state {
    char *body;
    size_t len, cap;
    bool too_large;
} request_state;

/* ------------------------------------------------------------- responses */

int http_response_set(http_response *resp, int status, const char *content_type, const char *body,
                      size_t len)
{
    free(resp->body);
    resp->body = malloc(len + 1);
    resp->body_len = 0;
    if (!resp->body) {
        resp->status = 500;
        return -1;
    }
    if (len)
        memcpy(resp->body, body, len);
    resp->body[len] = '\0';
    resp->body_len = len;
    resp->status = status;
    resp->content_type = content_type;
    return 0;
}

int http_response_json(http_response *resp, int status, const cJSON *json)
{
    char *text = cJSON_PrintUnformatted(json);
    if (!text) {
        resp->status = 500;
        return -1;
    }
    int r = http_response_set(resp, status, JSON_CONTENT_TYPE, text, strlen(text));
    cJSON_free(text);
    return r;
}

int http_response_error(http_response *resp, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "error", msg)) {
        cJSON_Delete(o);
        resp->status = 500;
        return -1;
    }
    int r = http_response_json(resp, status, o);
    cJSON_Delete(o);
    return r;
}

/* -------------------------------------------------------------- requests */

const char *http_request_query(const http_request *req, const char *key)
{
    return MHD_lookup_connection_value(req->impl, MHD_GET_ARGUMENT_KIND, key);
}

const char *http_request_header(const http_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->impl, MHD_HEADER_KIND, name);
}

cJSON *http_request_json(const http_request *req, http_response *resp)
{
    if (req->body_len == 0) {
        http_response_error(resp, 400, "request body must be a JSON document");
        return NULL;
    }
    const char *end = NULL;
    /* body[body_len] is NUL; cJSON wants it inside the length to accept
     * the document as complete, and rejects trailing garbage before it. */
    cJSON *j = cJSON_ParseWithLengthOpts(req->body, req->body_len + 1, &end, true);
    if (!j) {
        size_t at = end && end >= req->body ? (size_t)(end - req->body) : 0;
        http_response_error(resp, 400, "invalid JSON in request body near byte %zu", at);
        return NULL;
    }
    return j;
}

/* ----------------------------------------------------------------- server */

static void metrics_handler(const http_request *req, http_response *resp, void *arg)
{
    (void)req;
    size_t len;
    char *text = metrics_render(arg, &len);
    if (!text) {
        http_response_error(resp, 500, "out of memory rendering metrics");
        return;
    }
    free(resp->body);
    resp->body = text;
    resp->body_len = len;
    resp->status = 200;
    resp->content_type = METRICS_CONTENT_TYPE;
}

http_server *http_server_new(const http_config *cfg, char *err, size_t errlen)
{
    http_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    snprintf(s->host, sizeof s->host, "%s", cfg->host ? cfg->host : "127.0.0.1");
    s->cfg.host = s->host;
    if (!s->cfg.max_body)
        s->cfg.max_body = DEFAULT_MAX_BODY;
    if (!s->cfg.max_connections)
        s->cfg.max_connections = DEFAULT_MAX_CONNECTIONS;
    if (!s->cfg.timeout_s)
        s->cfg.timeout_s = DEFAULT_TIMEOUT_S;
    if (!s->cfg.metrics)
        s->cfg.metrics = metrics_default_registry();
    if (!s->cfg.metrics) {
        snprintf(err, errlen, "out of memory");
        free(s);
        return NULL;
    }
    if (http_server_route(s, "GET", "/metrics", metrics_handler, s->cfg.metrics) != 0) {
        snprintf(err, errlen, "cannot add the /metrics route");
        free(s);
        return NULL;
    }
    return s;
}

int http_server_route(http_server *s, const char *method, const char *path_prefix, http_handler h,
                      void *arg)
{
    if (s->daemon || s->nroutes == HTTP_MAX_ROUTES || !h || path_prefix[0] != '/' ||
        strlen(method) >= sizeof s->routes[0].method ||
        strlen(path_prefix) >= sizeof s->routes[0].prefix)
        return -1;
    route *r = &s->routes[s->nroutes++];
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->prefix, sizeof r->prefix, "%s", path_prefix);
    r->handler = h;
    r->arg = arg;
    return 0;
}

static size_t prefix_match(const char *prefix, const char *path)
{
    size_t n = strlen(prefix);
    if (strncmp(prefix, path, n) != 0)
        return 0;
    if (prefix[n - 1] == '/' || path[n] == '\0' || path[n] == '/')
        return n;
    return 0;
}

/* Routes req into resp: the handler, or 404/405. */
static void dispatch(http_server *s, struct MHD_Connection *conn, http_request *req,
                     http_response *resp, char *allow, size_t allow_len)
{
    size_t best = 0;
    for (int i = 0; i < s->nroutes; i++) {
        size_t m = prefix_match(s->routes[i].prefix, req->path);
        if (m > best)
            best = m;
    }
    if (best == 0) {
        http_response_error(resp, 404, "no such endpoint: %s", req->path);
        return;
    }
    allow[0] = '\0';
    for (int i = 0; i < s->nroutes; i++) {
        const route *r = &s->routes[i];
        if (prefix_match(r->prefix, req->path) != best)
            continue;
        if (strcmp(r->method, req->method) == 0) {
            req->impl = conn;
            if (s->cfg.authorize != NULL &&
                s->cfg.authorize(s->cfg.authorize_arg, req, resp) != 0) {
                if (resp->status == 0)
                    http_response_error(resp, 403, "not allowed");
                return;
            }
            r->handler(req, resp, r->arg);
            if (resp->status == 0)
                http_response_error(resp, 500, "handler produced no response");
            return;
        }
        size_t used = strlen(allow);
        snprintf(allow + used, allow_len - used, "%s%s", used ? ", " : "", r->method);
    }
    http_response_error(resp, 405, "method %s not allowed on %s", req->method, req->path);
}

static enum MHD_Result queue(struct MHD_Connection *conn, http_response *resp, const char *allow)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(resp->body_len, resp->body, MHD_RESPMEM_MUST_COPY);
    free(resp->body);
    resp->body = NULL;
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            resp->content_type ? resp->content_type : JSON_CONTENT_TYPE);
    if (allow && *allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **con_cls)
{
    http_server *s = cls;
    request_state *st = *con_cls;
    (void)version;
    if (!st) {
        st = calloc(1, sizeof *st);
        if (!st)
            return MHD_NO;
        *con_cls = st;
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body)
            st->too_large = true; /* answered below without reading the body */
        else
            return MHD_YES;
    }
    if (*upload_data_size > 0 && !st->too_large) {
        size_t n = *upload_data_size;
        if (st->len + n > s->cfg.max_body) {
            st->too_large = true;
            free(st->body);
            st->body = NULL;
            st->len = st->cap = 0;
        } else {
            if (st->cap < st->len + n + 1) {
                size_t cap = st->cap ? st->cap : 4096;
                while (cap < st->len + n + 1)
                    cap *= 2;
                char *p = realloc(st->body, cap);
                if (!p)
                    return MHD_NO;
                st->body = p;
                st->cap = cap;
            }
            memcpy(st->body + st->len, upload_data, n);
            st->len += n;
            st->body[st->len] = '\0';
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        *upload_data_size = 0; /* discarding an oversized chunked body */
        return MHD_YES;
    }
    http_response resp = {0};
    char allow[128] = "";
    if (st->too_large) {
        http_response_error(&resp, 413, "request body too large (limit %zu bytes)",
                            s->cfg.max_body);
    } else {
        http_request req = {
            .method = method,
            .path = url,
            .body = st->body ? st->body : "",
            .body_len = st->len,
        };
        dispatch(s, conn, &req, &resp, allow, sizeof allow);
    }
    if (resp.status >= 500)
        log_warn("http: %s %s -> %d", method, url, resp.status);
    return queue(conn, &resp, allow);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    request_state *st = *con_cls;
    if (st) {
        free(st->body);
        free(st);
        *con_cls = NULL;
    }
}

int http_server_start(http_server *s, char *err, size_t errlen)
{
    assert(!s->daemon);
    struct sockaddr_in addr4;
    struct sockaddr_in6 addr6;
    struct sockaddr *addr;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    memset(&addr4, 0, sizeof addr4);
    memset(&addr6, 0, sizeof addr6);
    if (inet_pton(AF_INET, s->host, &addr4.sin_addr) == 1) {
        addr4.sin_family = AF_INET;
        addr4.sin_port = htons((uint16_t)s->cfg.port);
        addr = (struct sockaddr *)&addr4;
    } else if (inet_pton(AF_INET6, s->host, &addr6.sin6_addr) == 1) {
        addr6.sin6_family = AF_INET6;
        addr6.sin6_port = htons((uint16_t)s->cfg.port);
        addr = (struct sockaddr *)&addr6;
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, errlen, "invalid HTTP listen address \"%s\"", s->host);
        return -1;
    }
    if (s->cfg.port < 0 || s->cfg.port > 65535) {
        snprintf(err, errlen, "invalid HTTP port %d", s->cfg.port);
        return -1;
    }
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)s->cfg.port, NULL, NULL, on_access, s, MHD_OPTION_SOCK_ADDR, addr,
        MHD_OPTION_CONNECTION_LIMIT, s->cfg.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        s->cfg.timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    if (!s->daemon) {
        snprintf(err, errlen, "cannot start the HTTP server on %s:%d (address in use?)", s->host,
                 s->cfg.port);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : s->cfg.port;
    return 0;
}

int http_server_port(const http_server *s)
{
    return s->port;
}

void http_server_free(http_server *s)
{
    if (!s)
        return;
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    free(s);
}
