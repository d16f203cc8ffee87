/*
 * admin.h: `strata tenant ...` and `strata timeline ...` -- the admin API
 * of a pageserver (pageserver/service/http_api.h) from the command line, and the
 * small HTTP client they use.
 *
 * Which pageserver: --pageserver HOST:PORT (its HTTP port), else the one of
 * the local cluster under --dir D (default ./.strata, cluster.json).
 * Credentials: --auth-file PATH (the daemons' auth file; its admin_token
 * is sent), else $STRATA_ADMIN_TOKEN, else none (a trusting pageserver).
 * The token travels as "Authorization: Bearer" in cleartext (loopback or a
 * private network; no TLS).
 *
 * Not for: starting daemons (cmd_cluster.c) or the page protocol
 * (cmd_page.c).
 */
#ifndef STRATA_CLI_ADMIN_H
#define STRATA_CLI_ADMIN_H

#include <stddef.h>

#include "cli/cli.h"

/* Entry points (cli/main.c passes every argument after the command word
 * in o->argc/o->argv; they parse their own options).  CLI_OK, CLI_FAIL
 * with the server's error message, or CLI_USAGE. */
int cmd_tenant(const cli_opts *o);
int cmd_timeline(const cli_opts *o);

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
