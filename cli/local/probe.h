/*
 * probe.h: asking a component whether it is up and what it knows, over
 * loopback, always with a deadline.
 *
 * Not for: deciding what to do about the answer (callers do).
 */
#ifndef STRATA_CLI_PROBE_H
#define STRATA_CLI_PROBE_H

#include <stdbool.h>

#include "cli/cli.h"

/* Largest HTTP response body probe_http_get accepts. */
#define PROBE_HTTP_MAX_BODY (1024 * 1024)

/* True when a TCP connection to 127.0.0.1:port succeeds within timeout_ms. */
bool probe_tcp(int port, int timeout_ms);

/*
 * GET path from 127.0.0.1:port (HTTP/1.0) within timeout_ms, with
 * "Authorization: Bearer <token>" unless token is NULL.  On status 200
 * returns 0 and a NUL-terminated malloc'd body the caller frees; otherwise
 * -1 with a reason.
 */
int probe_http_get(int port, const char *path, const char *token, int timeout_ms, char **body,
                   cli_err *err);

/*
 * Sends method path (HTTP/1.0) to 127.0.0.1:port with body (JSON, or NULL
 * for none) and a bearer token (NULL: none), and reads the whole response within timeout_ms.  When
 * a response arrived, whatever its status, returns 0 with *status and a NUL-terminated malloc'd
 * body the caller frees; otherwise -1 with a reason.
 */
int probe_http_request(int port, const char *method, const char *path, const char *body,
                       const char *token, int timeout_ms, int *status, char **resp, cli_err *err);

/* True when the server at connstr accepts connections (PQping). */
bool probe_pg_ready(const char *connstr);

#endif
