/*
 * auth.c: the auth file, constant-time token checks, and the pgwire and
 * HTTP adapters.  See auth.h.
 *
 * A loaded file becomes an immutable auth_table; the store swaps in a new
 * table under its mutex when the file changes and frees the old one (a
 * check holds the mutex for its whole lookup, so no reader sees a table
 * being freed).
 *
 * Not for: deciding which HTTP paths exist, or anything about TLS.
 */
#include "net/auth.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/log.h"
#include "base/lsn.h"
#include "base/metrics.h"
#include "base/sqlstate.h"

#define AUTH_FILE_MAX (1024 * 1024)
#define RECHECK_MS 1000

typedef struct tenant_token {
    char tenant[AUTH_TENANT_HEX_LEN];
    char token[AUTH_TOKEN_MAX + 1];
} tenant_token;

struct auth_table {
    bool has_admin;
    char admin[AUTH_TOKEN_MAX + 1];
    int n;
    tenant_token *tenants;
};

struct auth_store {
    char *path;
    pthread_mutex_t mu;
    auth_table *table;
    /* What the loaded file looked like, to notice a change. */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    int64_t next_check_ms;
    /* Refusals by reason (default registry; NULL series are ignored). */
    metrics_counter *refused_password, *refused_tenant, *refused_http_missing, *refused_http_token;
    metrics_counter *reloads, *reload_failures;
};

static metrics_counter *refusal_counter(const char *reason)
{
    static const char *const names[] = {"reason"};
    const char *values[] = {reason};
    return metrics_counter_register(metrics_default_registry(), "strata_auth_refusals_total",
                                    "Connections or requests refused by authentication", 1, names,
                                    values);
}

/* ------------------------------------------------------------- compare */

bool auth_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t n = la > lb ? la : lb;
    unsigned diff = (unsigned)(la != lb);
    /* Walk the longer length; read past a string's end as 0 from its NUL
     * position (never past the buffer). */
    for (size_t i = 0; i < n; i++) {
        unsigned ca = i < la ? (unsigned char)a[i] : 0u;
        unsigned cb = i < lb ? (unsigned char)b[i] : 0u;
        diff |= ca ^ cb;
    }
    return diff == 0;
}

/* --------------------------------------------------------------- table */

void auth_table_free(auth_table *t)
{
    if (t == NULL)
        return;
    /* Tokens are secrets: do not leave them in freed memory. */
    if (t->tenants != NULL) {
        memset(t->tenants, 0, (size_t)t->n * sizeof *t->tenants);
        free(t->tenants);
    }
    memset(t->admin, 0, sizeof t->admin);
    free(t);
}

static bool token_valid(const char *s, const char **why)
{
    size_t n = strlen(s);
    if (n == 0) {
        *why = "is empty";
        return false;
    }
    if (n > AUTH_TOKEN_MAX) {
        *why = "is longer than 255 characters";
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x21 || ch > 0x7e) {
            *why = "has a character that is not printable ASCII (or a space)";
            return false;
        }
    }
    return true;
}

int auth_table_parse(const char *json, size_t len, auth_table **out, char *err, size_t errlen)
{
    *out = NULL;
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (root == NULL) {
        snprintf(err, errlen, "not valid JSON");
        return -1;
    }
    auth_table *t = calloc(1, sizeof *t);
    if (t == NULL) {
        cJSON_Delete(root);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const char *why = NULL;
    if (!cJSON_IsObject(root)) {
        snprintf(err, errlen, "expected a JSON object {\"admin_token\": ..., \"tenants\": {...}}");
        goto fail;
    }
    const cJSON *tenants = NULL;
    for (const cJSON *it = root->child; it != NULL; it = it->next) {
        if (strcmp(it->string, "admin_token") == 0) {
            if (t->has_admin) {
                snprintf(err, errlen, "\"admin_token\" given twice");
                goto fail;
            }
            if (!cJSON_IsString(it) || !token_valid(it->valuestring, &why)) {
                snprintf(err, errlen, "\"admin_token\" %s",
                         cJSON_IsString(it) ? why : "must be a string");
                goto fail;
            }
            snprintf(t->admin, sizeof t->admin, "%s", it->valuestring);
            t->has_admin = true;
        } else if (strcmp(it->string, "tenants") == 0) {
            if (tenants != NULL || !cJSON_IsObject(it)) {
                snprintf(err, errlen, "\"tenants\" must be one object of tenant_id: token");
                goto fail;
            }
            tenants = it;
        } else {
            snprintf(err, errlen, "unknown key \"%.64s\" (expected admin_token, tenants)",
                     it->string);
            goto fail;
        }
    }
    int count = cJSON_GetArraySize(tenants);
    if (count > AUTH_MAX_TENANTS) {
        snprintf(err, errlen, "more than %d tenants", AUTH_MAX_TENANTS);
        goto fail;
    }
    if (count > 0) {
        t->tenants = calloc((size_t)count, sizeof *t->tenants);
        if (t->tenants == NULL) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
    }
    for (const cJSON *it = tenants ? tenants->child : NULL; it != NULL; it = it->next) {
        strata_id id;
        if (!strata_id_parse(it->string, &id)) {
            snprintf(err, errlen, "tenant \"%.64s\" is not a tenant id (32 hex digits)",
                     it->string);
            goto fail;
        }
        if (!cJSON_IsString(it) || !token_valid(it->valuestring, &why)) {
            snprintf(err, errlen, "token of tenant %.64s %s", it->string,
                     cJSON_IsString(it) ? why : "must be a string");
            goto fail;
        }
        tenant_token *tt = &t->tenants[t->n];
        strata_id_format(&id, tt->tenant);
        snprintf(tt->token, sizeof tt->token, "%s", it->valuestring);
        for (int i = 0; i < t->n; i++) {
            if (strcmp(t->tenants[i].tenant, tt->tenant) == 0) {
                snprintf(err, errlen, "tenant %s is listed twice", tt->tenant);
                goto fail;
            }
            if (strcmp(t->tenants[i].token, tt->token) == 0) {
                snprintf(err, errlen, "tenants %s and %s have the same token", t->tenants[i].tenant,
                         tt->tenant);
                goto fail;
            }
        }
        if (t->has_admin && strcmp(t->admin, tt->token) == 0) {
            snprintf(err, errlen, "tenant %s has the admin token", tt->tenant);
            goto fail;
        }
        t->n++;
    }
    cJSON_Delete(root);
    *out = t;
    return 0;
fail:
    cJSON_Delete(root);
    auth_table_free(t);
    return -1;
}

auth_principal auth_table_check(const auth_table *t, const char *token)
{
    auth_principal p = {.role = AUTH_ROLE_NONE};
    if (token == NULL || token[0] == '\0')
        return p;
    /* Every entry is compared, match or not. */
    int match = -1;
    bool admin = t->has_admin && auth_equal(token, t->admin);
    for (int i = 0; i < t->n; i++) {
        bool eq = auth_equal(token, t->tenants[i].token);
        match = eq ? i : match;
    }
    if (admin) {
        p.role = AUTH_ROLE_ADMIN;
    } else if (match >= 0) {
        p.role = AUTH_ROLE_TENANT;
        memcpy(p.tenant, t->tenants[match].tenant, sizeof p.tenant);
    }
    return p;
}

/* --------------------------------------------------------------- store */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads and parses path; fills *st with what was read.  0 or -1 with err. */
static int load_file(const char *path, auth_table **out, struct stat *st, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open auth file %s: %s", path, strerror(errno));
        return -1;
    }
    char *buf = NULL;
    int rc = -1;
    if (fstat(fd, st) != 0) {
        snprintf(err, errlen, "cannot stat auth file %s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, errlen, "auth file %s is not a regular file", path);
        goto out;
    }
    if ((st->st_mode & 077) != 0) {
        snprintf(err, errlen,
                 "auth file %s has mode %04o: it holds secrets, so group and others must have "
                 "no access (chmod 600 %s)",
                 path, (unsigned)(st->st_mode & 07777), path);
        goto out;
    }
    if (st->st_size > AUTH_FILE_MAX) {
        snprintf(err, errlen, "auth file %s is larger than %d bytes", path, AUTH_FILE_MAX);
        goto out;
    }
    size_t size = (size_t)st->st_size;
    buf = malloc(size + 1);
    if (buf == NULL) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            snprintf(err, errlen, "cannot read auth file %s: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    buf[got] = '\0';
    char perr[200];
    if (auth_table_parse(buf, got, out, perr, sizeof perr) != 0) {
        snprintf(err, errlen, "auth file %s: %s", path, perr);
        goto out;
    }
    rc = 0;
out:
    if (buf != NULL) {
        memset(buf, 0, st->st_size > 0 ? (size_t)st->st_size : 0);
        free(buf);
    }
    close(fd);
    return rc;
}

static void remember(auth_store *a, const struct stat *st)
{
    a->dev = st->st_dev;
    a->ino = st->st_ino;
    a->size = st->st_size;
    a->mtime = st->st_mtim;
}

auth_store *auth_store_open(const char *path, char *err, size_t errlen)
{
    auth_store *a = calloc(1, sizeof *a);
    if (a == NULL || (a->path = strdup(path)) == NULL) {
        free(a);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    struct stat st;
    if (load_file(path, &a->table, &st, err, errlen) != 0) {
        free(a->path);
        free(a);
        return NULL;
    }
    remember(a, &st);
    pthread_mutex_init(&a->mu, NULL);
    a->refused_password = refusal_counter("bad_password");
    a->refused_tenant = refusal_counter("other_tenant");
    a->refused_http_missing = refusal_counter("http_no_token");
    a->refused_http_token = refusal_counter("http_not_admin");
    metrics_registry *r = metrics_default_registry();
    a->reloads = metrics_counter_register(r, "strata_auth_reloads_total",
                                          "Auth file reloads that succeeded", 0, NULL, NULL);
    a->reload_failures = metrics_counter_register(
        r, "strata_auth_reload_failures_total",
        "Auth file reloads that failed (previous tokens kept)", 0, NULL, NULL);
    a->next_check_ms = mono_ms() + RECHECK_MS;
    return a;
}

void auth_store_free(auth_store *a)
{
    if (a == NULL)
        return;
    auth_table_free(a->table);
    pthread_mutex_destroy(&a->mu);
    free(a->path);
    free(a);
}

/* a->mu held. */
static int reload_locked(auth_store *a, char *err, size_t errlen)
{
    auth_table *t = NULL;
    struct stat st;
    if (load_file(a->path, &t, &st, err, errlen) != 0) {
        metrics_counter_inc(a->reload_failures);
        return -1;
    }
    auth_table_free(a->table);
    a->table = t;
    remember(a, &st);
    metrics_counter_inc(a->reloads);
    return 0;
}

int auth_store_reload(auth_store *a, char *err, size_t errlen)
{
    pthread_mutex_lock(&a->mu);
    int rc = reload_locked(a, err, errlen);
    a->next_check_ms = mono_ms() + RECHECK_MS;
    pthread_mutex_unlock(&a->mu);
    if (rc == 0)
        log_info("auth: reloaded %s", a->path);
    else
        log_error("auth: %s; keeping the previous tokens", err);
    return rc;
}

/* a->mu held: reloads when the file looks different from what was loaded. */
static void maybe_reload_locked(auth_store *a)
{
    int64_t now = mono_ms();
    if (now < a->next_check_ms)
        return;
    a->next_check_ms = now + RECHECK_MS;
    struct stat st;
    bool changed;
    if (stat(a->path, &st) != 0)
        changed = true; /* gone: reload fails, logs, keeps the old tokens */
    else
        changed = st.st_dev != a->dev || st.st_ino != a->ino || st.st_size != a->size ||
                  st.st_mtim.tv_sec != a->mtime.tv_sec || st.st_mtim.tv_nsec != a->mtime.tv_nsec;
    if (!changed)
        return;
    char err[512];
    if (reload_locked(a, err, sizeof err) == 0) {
        log_info("auth: %s changed, reloaded", a->path);
    } else {
        log_error("auth: %s; keeping the previous tokens", err);
        /* Do not log again for the same bad state. */
        if (stat(a->path, &st) == 0)
            remember(a, &st);
    }
}

auth_principal auth_store_check(auth_store *a, const char *token)
{
    pthread_mutex_lock(&a->mu);
    maybe_reload_locked(a);
    auth_principal p = auth_table_check(a->table, token);
    pthread_mutex_unlock(&a->mu);
    return p;
}

void auth_store_counts(auth_store *a, int *tenants, bool *admin)
{
    pthread_mutex_lock(&a->mu);
    *tenants = a->table->n;
    *admin = a->table->has_admin;
    pthread_mutex_unlock(&a->mu);
}

/* ----------------------------------------------------------- principals */

const char *auth_principal_format(const auth_principal *p, char out[AUTH_PRINCIPAL_LEN])
{
    if (p->role == AUTH_ROLE_ADMIN)
        snprintf(out, AUTH_PRINCIPAL_LEN, "admin");
    else if (p->role == AUTH_ROLE_TENANT)
        snprintf(out, AUTH_PRINCIPAL_LEN, "tenant:%s", p->tenant);
    else
        snprintf(out, AUTH_PRINCIPAL_LEN, "none");
    return out;
}

bool auth_principal_parse(const char *s, auth_principal *out)
{
    memset(out, 0, sizeof *out);
    if (s == NULL)
        return false;
    if (strcmp(s, "admin") == 0) {
        out->role = AUTH_ROLE_ADMIN;
        return true;
    }
    strata_id id;
    if (strncmp(s, "tenant:", 7) == 0 && strata_id_parse(s + 7, &id)) {
        out->role = AUTH_ROLE_TENANT;
        strata_id_format(&id, out->tenant);
        return true;
    }
    return false;
}

bool auth_principal_allows(const char *p, const char *tenant_hex)
{
    if (p == NULL)
        return true; /* trust */
    auth_principal pr;
    if (!auth_principal_parse(p, &pr))
        return false;
    if (pr.role == AUTH_ROLE_ADMIN)
        return true;
    strata_id id;
    char hex[STRATA_ID_HEX_LEN];
    return tenant_hex != NULL && strata_id_parse(tenant_hex, &id) &&
           strcmp(strata_id_format(&id, hex), pr.tenant) == 0;
}

/* ---------------------------------------------------------------- pgwire */

static void refuse_tenant(const char *principal, const char *tenant, char sqlstate[6], char *err,
                          size_t errlen)
{
    auth_principal pr;
    memcpy(sqlstate, SQLSTATE_INSUFFICIENT_PRIVILEGE, 6);
    if (auth_principal_parse(principal, &pr) && pr.role == AUTH_ROLE_TENANT)
        snprintf(err, errlen, "permission denied: the token of tenant %s may not use tenant %.64s",
                 pr.tenant, tenant);
    else
        snprintf(err, errlen, "permission denied for tenant %.64s", tenant);
}

static int pg_check_password(void *arg, const pgwire_conn *c, const char *password, char *principal,
                             char sqlstate[6], char *err, size_t errlen)
{
    auth_store *a = arg;
    auth_principal p = auth_store_check(a, password);
    const char *user = pgwire_conn_param(c, "user");
    if (p.role == AUTH_ROLE_NONE) {
        metrics_counter_inc(a->refused_password);
        memcpy(sqlstate, SQLSTATE_INVALID_PASSWORD, 6);
        snprintf(err, errlen,
                 "password authentication failed for user \"%.64s\": the password is not a "
                 "token this server accepts",
                 user ? user : "");
        return -1;
    }
    char text[AUTH_PRINCIPAL_LEN];
    auth_principal_format(&p, text);
    const char *tenant = pgwire_conn_option(c, "tenant_id");
    if (tenant != NULL && !auth_principal_allows(text, tenant)) {
        metrics_counter_inc(a->refused_tenant);
        refuse_tenant(text, tenant, sqlstate, err, errlen);
        return -1;
    }
    static_assert(AUTH_PRINCIPAL_LEN <= PGWIRE_PRINCIPAL_LEN, "principal fits pgwire's buffer");
    memcpy(principal, text, AUTH_PRINCIPAL_LEN);
    return 0;
}

/* The commands whose first argument is a tenant id. */
static const char *const tenant_commands[] = {"pagestream_v1", "pagestream", "basebackup"};

static int pg_check_query(void *arg, const pgwire_conn *c, const char *sql, char sqlstate[6],
                          char *err, size_t errlen)
{
    auth_store *a = arg;
    const char *principal = pgwire_conn_principal(c);
    const char *p = sql;
    while (isspace((unsigned char)*p))
        p++;
    size_t wl = strcspn(p, " \t\r\n;");
    bool names_tenant = false;
    for (size_t i = 0; i < sizeof tenant_commands / sizeof tenant_commands[0]; i++)
        if (wl == strlen(tenant_commands[i]) && strncasecmp(p, tenant_commands[i], wl) == 0)
            names_tenant = true;
    if (!names_tenant)
        return 0;
    p += wl;
    while (isspace((unsigned char)*p))
        p++;
    size_t tl = strcspn(p, " \t\r\n;");
    if (tl == 0)
        return 0; /* the command's own handler reports the syntax error */
    char tenant[72];
    snprintf(tenant, sizeof tenant, "%.*s", (int)(tl < 71 ? tl : 71), p);
    if (auth_principal_allows(principal, tenant))
        return 0;
    metrics_counter_inc(a->refused_tenant);
    refuse_tenant(principal, tenant, sqlstate, err, errlen);
    return -1;
}

void auth_pgwire_authenticator(auth_store *a, pgwire_authenticator *out)
{
    memset(out, 0, sizeof *out);
    out->check_password = pg_check_password;
    out->check_query = pg_check_query;
    out->arg = a;
}

int auth_pgwire_require_tenant(pgwire_conn *c, const char *tenant_hex)
{
    const char *principal = pgwire_conn_principal(c);
    if (auth_principal_allows(principal, tenant_hex))
        return 0;
    char sqlstate[6], err[256];
    refuse_tenant(principal, tenant_hex ? tenant_hex : "(none)", sqlstate, err, sizeof err);
    log_warn("auth: %s: %s", pgwire_conn_peer(c), err);
    pgwire_send_error(c, "ERROR", sqlstate, err, NULL);
    return -1;
}

/* ------------------------------------------------------------------ http */

/*
 * Whether req is GET /v1/tenant/<tenant_hex>/timeline/<32 hex>: the one
 * admin request a tenant's token may make, reading its own timeline (a
 * compute on another host learns the timeline's start LSN from it).
 */
static bool auth_http_own_timeline(const http_request *req, const char *tenant_hex)
{
    static const char prefix[] = "/v1/tenant/";
    static const char middle[] = "/timeline/";
    const char *path = req->path;
    if (strcmp(req->method, "GET") != 0 || strncmp(path, prefix, sizeof prefix - 1) != 0)
        return false;
    path += sizeof prefix - 1;
    if (strlen(path) != 32 + sizeof middle - 1 + 32 || strncasecmp(path, tenant_hex, 32) != 0 ||
        strncmp(path + 32, middle, sizeof middle - 1) != 0)
        return false;
    const char *tl = path + 32 + sizeof middle - 1;
    return strspn(tl, "0123456789abcdefABCDEF") == 32;
}

int auth_http_authorize(void *arg, const http_request *req, http_response *resp)
{
    auth_store *a = arg;
    if (strcmp(req->path, "/metrics") == 0 ||
        (strcmp(req->method, "GET") == 0 && strcmp(req->path, "/v1/status") == 0))
        return 0;
    const char *h = http_request_header(req, "Authorization");
    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0) {
        metrics_counter_inc(a->refused_http_missing);
        http_response_error(resp, 401,
                            "authentication required: send the header \"Authorization: Bearer "
                            "<admin token>\"");
        return -1;
    }
    const char *token = h + 7;
    while (*token == ' ')
        token++;
    auth_principal p = auth_store_check(a, token);
    if (p.role == AUTH_ROLE_ADMIN)
        return 0;
    if (p.role == AUTH_ROLE_TENANT && auth_http_own_timeline(req, p.tenant))
        return 0;
    metrics_counter_inc(a->refused_http_token);
    if (p.role == AUTH_ROLE_TENANT)
        http_response_error(resp, 403,
                            "permission denied: a tenant token may not use the admin API "
                            "(%s %s needs the admin token)",
                            req->method, req->path);
    else
        http_response_error(resp, 403, "permission denied: the bearer token is not valid");
    log_warn("auth: refused %s %s (%s)", req->method, req->path,
             p.role == AUTH_ROLE_TENANT ? "tenant token" : "invalid token");
    return -1;
}
