/*
 * http.h: the daemons' HTTP server (admin API and Prometheus /metrics), on
 * libmicrohttpd with its own internal polling thread.
 *
 * Routes are (method, path prefix) -> handler; the longest matching prefix
 * wins.  A prefix ending in '/' matches everything under it; any other
 * prefix matches the path exactly or followed by '/'.  Built in: GET
 * /metrics renders a metrics registry.  Errors are JSON {"error": "..."}:
 * 404 unknown path, 405 known path with another method (with Allow), 413
 * body over max_body, 400 for bodies a handler rejects (see
 * http_request_json), 500 when a handler produced nothing.
 *
 * THREADING: handlers run on the HTTP thread, one request at a time, never
 * on the daemon's event loop.  They must only read thread-safe state
 * (atomics, metrics, snapshots published for readers) or hand work to the
 * loop through a thread-safe channel (uv_async); never touch loop-owned
 * structures directly.
 *
 * Not here: TLS, streaming bodies, deciding who may do what (the
 * authorize hook of http_config asks common/net/auth.h).
 */
#ifndef STRATA_COMMON_HTTP_H
#define STRATA_COMMON_HTTP_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "base/metrics.h"

#define HTTP_MAX_ROUTES 64

typedef struct http_server http_server;

typedef struct http_request {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* URL path, without the query string */
    const char *body;   /* NUL-terminated copy of the body ("" if none) */
    size_t body_len;
    void *impl; /* private to http.c */
} http_request;

typedef struct http_response {
    int status; /* 0 = not set (becomes 500) */
    char *body; /* malloc'd; the server frees it */
    size_t body_len;
    const char *content_type; /* static string; NULL = application/json */
} http_response;

/* Fills resp (use the http_response_* helpers).  Runs on the HTTP thread. */
typedef void (*http_handler)(const http_request *req, http_response *resp, void *arg);

/* Zero or NULL fields take the default in brackets. */
typedef struct http_config {
    const char *host;          /* listen address ["127.0.0.1"] */
    int port;                  /* 0 = ephemeral, see http_server_port() */
    size_t max_body;           /* larger request bodies get 413 [1 MB] */
    unsigned max_connections;  /* concurrent connections [64] */
    unsigned timeout_s;        /* idle connection timeout [30] */
    metrics_registry *metrics; /* rendered by GET /metrics [default registry] */
    /* Optional: runs on the HTTP thread before the handler of every routed
     * request (built-in /metrics included; not for 404/405/413 answers).
     * 0 lets it through; non-zero refuses, with the response it set (403
     * if it set none).  common/net/auth.h has one (auth_http_authorize). */
    int (*authorize)(void *arg, const http_request *req, http_response *resp);
    void *authorize_arg;
} http_config;

/* A server with the built-in routes, not yet listening.  NULL with a
 * message in err on bad configuration or out of memory. */
http_server *http_server_new(const http_config *cfg, char *err, size_t errlen);

/* Adds a route; only before http_server_start().  method is e.g. "GET";
 * the strings are copied.  Returns 0, or -1 when the table is full, the
 * prefix does not start with '/', or the server is already started. */
int http_server_route(http_server *s, const char *method, const char *path_prefix, http_handler h,
                      void *arg);

/* Binds host:port and starts the HTTP thread.  Returns 0, or -1 with a
 * message in err (address in use, bad address). */
int http_server_start(http_server *s, char *err, size_t errlen);

/* The port actually bound (after start). */
int http_server_port(const http_server *s);

/* Stops the thread (waiting for a running handler to return) and frees. */
void http_server_free(http_server *s);

/* A query-string argument or header of the request, or NULL. */
const char *http_request_query(const http_request *req, const char *key);
const char *http_request_header(const http_request *req, const char *name);

/* Parses the body as JSON.  On failure returns NULL and sets a 400 error
 * response saying why; the caller returns.  Caller frees with cJSON_Delete. */
cJSON *http_request_json(const http_request *req, http_response *resp);

/* Sets status and a copy of body.  Returns 0, or -1 when out of memory
 * (the response then becomes a 500). */
int http_response_set(http_response *resp, int status, const char *content_type, const char *body,
                      size_t len);
/* Sets status and the JSON text of json (not consumed). */
int http_response_json(http_response *resp, int status, const cJSON *json);
/* Sets status and {"error": "<formatted message>"}. */
int http_response_error(http_response *resp, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
