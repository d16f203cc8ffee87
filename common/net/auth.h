/*
 * auth.h: who may talk to a daemon -- the auth file, token checking, and
 * the adapters that plug it into the wire server (pgwire.h) and the HTTP
 * server (http.h).
 *
 * The auth file (--auth-file=PATH) is JSON:
 *     {"admin_token": "...", "tenants": {"<32 hex tenant id>": "<token>", ...}}
 * Both keys are optional; tokens are 1..AUTH_TOKEN_MAX printable ASCII
 * characters (no spaces) and no two entries may share one.  The file must
 * be a regular file of mode 0600 or stricter (no group/other bits): a
 * readable token file is refused, never used.
 *
 * A token names a principal: the admin (every tenant, every admin
 * endpoint) or one tenant (only that tenant's timelines, no admin
 * endpoint).  No auth file means trust: no daemon calls in here at all.
 *
 * Reloading: auth_store_reload() re-reads the file (the daemons call it on
 * SIGHUP), and every check first looks (at most once a second) whether the
 * file's mtime, size or inode changed and reloads if so.  A reload that
 * fails (bad JSON, bad mode, file gone) is logged and keeps the previous
 * tokens, so a half-written edit never locks everybody out or lets anybody
 * in.
 *
 * Comparisons are constant-time in the token's content: a check compares
 * the given token with every configured token, to the end, always.
 *
 * Threads: an auth_store may be used from any thread (one mutex, held only
 * to look up or swap the token table; never across IO except the stat and
 * read of a reload).  Principals are plain values, copied out.
 *
 * Errors: functions that can fail return -1 with a one-line message in err.
 *
 * Not for: transport security.  Tokens travel in cleartext (a Postgres
 * cleartext password, an HTTP bearer header): use loopback or a private
 * network, TLS is not provided.
 */
#ifndef STRATA_COMMON_AUTH_H
#define STRATA_COMMON_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "net/http.h"
#include "net/pgwire.h"

#define AUTH_TOKEN_MAX 255
#define AUTH_MAX_TENANTS 4096
#define AUTH_TENANT_HEX_LEN 33 /* 32 hex digits + NUL */
/* "admin" or "tenant:<32 hex>", NUL included. */
#define AUTH_PRINCIPAL_LEN 48

typedef struct auth_store auth_store;

typedef enum auth_role {
    AUTH_ROLE_NONE = 0, /* unknown token */
    AUTH_ROLE_ADMIN,
    AUTH_ROLE_TENANT,
} auth_role;

typedef struct auth_principal {
    auth_role role;
    char tenant[AUTH_TENANT_HEX_LEN]; /* lower-case hex; "" unless AUTH_ROLE_TENANT */
} auth_principal;

/* Loads path.  NULL with err when it cannot be read, has a mode other
 * than 0600/0400, or does not hold a valid auth object.  Free with
 * auth_store_free. */
auth_store *auth_store_open(const char *path, char *err, size_t errlen);
void auth_store_free(auth_store *a);

/* Re-reads the file now.  0, or -1 with err (the old tokens stay). */
int auth_store_reload(auth_store *a, char *err, size_t errlen);

/* The principal a token names (role NONE for an unknown or empty token).
 * Reloads first when the file changed (see above). */
auth_principal auth_store_check(auth_store *a, const char *token);

/* Number of tenant tokens and whether an admin token is set (for logs). */
void auth_store_counts(auth_store *a, int *tenants, bool *admin);

/* Parses the JSON text of an auth file into a new table; for the loader,
 * the unit tests and the fuzz target.  0 or -1 with err.  The result is
 * freed with auth_table_free. */
typedef struct auth_table auth_table;
int auth_table_parse(const char *json, size_t len, auth_table **out, char *err, size_t errlen);
auth_principal auth_table_check(const auth_table *t, const char *token);
void auth_table_free(auth_table *t);

/* Constant-time equality of two NUL-terminated strings (time depends on
 * the lengths only). */
bool auth_equal(const char *a, const char *b);

/* Principal as text and back: "admin" / "tenant:<hex>".  format returns out. */
const char *auth_principal_format(const auth_principal *p, char out[AUTH_PRINCIPAL_LEN]);
bool auth_principal_parse(const char *s, auth_principal *out);

/* Whether principal text p (as pgwire_conn_principal returns it; NULL =
 * trust, allowed) may use tenant_hex (any case). */
bool auth_principal_allows(const char *p, const char *tenant_hex);

/*
 * pgwire: fills an authenticator that asks for a cleartext password,
 * takes it as a token, refuses unknown ones (28P01), and refuses
 * (42501) a tenant token whose connection names another tenant, in the
 * startup options (-c tenant_id=...) or as the first argument of a
 * pagestream_v1 / pagestream / basebackup command.  a must outlive the
 * servers that use it.
 */
void auth_pgwire_authenticator(auth_store *a, pgwire_authenticator *out);

/*
 * For command handlers: 0 when the connection's principal may use
 * tenant_hex; otherwise sends ERROR 42501 ("... may not use tenant ...")
 * and returns -1 (the handler then returns; ReadyForQuery follows).
 */
int auth_pgwire_require_tenant(pgwire_conn *c, const char *tenant_hex);

/*
 * http: an authorize hook (http_config.authorize) that requires
 * "Authorization: Bearer <admin token>" on every path under /v1/ except
 * GET /v1/status; /metrics and /v1/status stay open.  A tenant's token may
 * make one request: GET /v1/tenant/<its tenant>/timeline/<id> (a compute
 * reads its timeline's start LSN).  401 without a bearer token, 403 with a
 * token that is not the admin token.
 */
int auth_http_authorize(void *arg, const http_request *req, http_response *resp);

#endif
