/*
 * admin_http.h: the small HTTP client the CLI talks to a pageserver's admin
 * API (pageserver/service/http_api.h) with: one request per connection, a
 * deadline on every step.  The token travels as "Authorization: Bearer" in
 * cleartext (loopback or a private network; no TLS).
 *
 * For: `strata tenant|timeline` (cmd/cmd_admin.c), named timelines
 * (cmd/cmd_timeline.c) and a compute started against remote daemons
 * (compute/compute_remote.c).
 * Not for: which pageserver or token a command uses (cmd/cmd_admin.c), the
 * loopback probes of the local cluster (local/probe.h).
 */
#ifndef STRATA_CLI_CLIENT_ADMIN_HTTP_H
#define STRATA_CLI_CLIENT_ADMIN_HTTP_H

#include <stddef.h>

#include "cli/cli.h"

/*
 * One HTTP/1.0 request to host:port: method, path, optional bearer token
 * and JSON body (NULL: none), within timeout_ms.  When a response arrived
 * (any status) returns 0 with *status and a NUL-terminated malloc'd body
 * the caller frees; otherwise -1 with a reason.  Bodies above 4 MB are an
 * error.
 */
int admin_http(const char *host, int port, const char *method, const char *path, const char *token,
               const char *body, int timeout_ms, int *status, char **resp, cli_err *err);

#endif
