/*
 * http_api.c: JSON views of the published timeline snapshot.  See
 * http_api.h.  Every LSN is written as Postgres writes it ("X/Y").
 *
 * For: the JSON bodies and the routing of http_api.h.
 * Not for: reading timeline state other than through the snapshot.
 */
#include "safekeeper/http_api.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_lsn(cJSON *o, const char *name, lsn_t lsn)
{
    char buf[LSN_FMT_LEN];
    cJSON_AddStringToObject(o, name, lsn_format(lsn, buf));
}

static void add_members(cJSON *o, const char *name, const member *set, uint32_t n)
{
    cJSON *arr = cJSON_AddArrayToObject(o, name);
    for (uint32_t i = 0; i < n; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddNumberToObject(m, "node_id", (double)set[i].node_id);
        cJSON_AddStringToObject(m, "addr", set[i].addr);
        cJSON_AddItemToArray(arr, m);
    }
}

static cJSON *timeline_json(const sk_timeline_status *s)
{
    cJSON *o = cJSON_CreateObject();
    char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN];
    cJSON_AddStringToObject(o, "tenant_id", strata_id_format(&s->tenant_id, t));
    cJSON_AddStringToObject(o, "timeline_id", strata_id_format(&s->timeline_id, l));
    cJSON_AddNumberToObject(o, "term", (double)s->term);
    add_lsn(o, "flush_lsn", s->flush_lsn);
    add_lsn(o, "commit_lsn", s->commit_lsn);
    add_lsn(o, "truncate_lsn", s->truncate_lsn);
    add_lsn(o, "timeline_start_lsn", s->timeline_start_lsn);
    cJSON *fb = cJSON_AddObjectToObject(o, "pageserver_feedback");
    add_lsn(fb, "last_received_lsn", s->ps_feedback.last_received_lsn);
    add_lsn(fb, "disk_consistent_lsn", s->ps_feedback.disk_consistent_lsn);
    add_lsn(fb, "remote_consistent_lsn", s->ps_feedback.remote_consistent_lsn);
    cJSON *conf = cJSON_AddObjectToObject(o, "configuration");
    cJSON_AddNumberToObject(conf, "generation", s->mconf.generation);
    add_members(conf, "members", s->mconf.members, s->mconf.n_members);
    add_members(conf, "new_members", s->mconf.new_members, s->mconf.n_new_members);
    cJSON_AddNumberToObject(o, "connections", s->connections);
    cJSON_AddBoolToObject(o, "failed", s->failed);
    cJSON_AddNumberToObject(o, "wal_bytes", (double)s->wal_bytes);
    cJSON_AddBoolToObject(o, "wal_limited", s->wal_limited);
    if (s->wal_backup) {
        cJSON *b = cJSON_AddObjectToObject(o, "wal_backup");
        add_lsn(b, "backup_lsn", s->backup.backup_lsn);
        cJSON_AddNumberToObject(b, "segments_uploaded", (double)s->backup.uploaded);
        cJSON_AddNumberToObject(b, "segments_skipped", (double)s->backup.skipped);
        cJSON_AddNumberToObject(b, "segments_deleted", (double)s->backup.deleted);
        cJSON_AddNumberToObject(b, "errors", (double)s->backup.errors);
        cJSON_AddBoolToObject(b, "failing", s->backup.failing);
        cJSON_AddStringToObject(b, "last_error", s->backup.last_error);
    } else {
        cJSON_AddNullToObject(o, "wal_backup");
    }
    return o;
}

static void on_status(const http_request *req, http_response *resp, void *arg)
{
    (void)req;
    sk_node *node = arg;
    sk_timeline_status *snap = calloc(SK_MAX_TIMELINES, sizeof *snap);
    if (snap == NULL) {
        http_response_error(resp, 500, "out of memory");
        return;
    }
    int connections = 0;
    int n = sk_node_snapshot(node, snap, SK_MAX_TIMELINES, &connections);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "node_id", (double)node->node_id);
    cJSON_AddNumberToObject(o, "connections", connections);
    /* Set before the HTTP server starts, never changed. */
    cJSON_AddNumberToObject(o, "max_wal_bytes", (double)node->max_wal_bytes);
    /* Set before the HTTP server starts, never changed. */
    cJSON_AddStringToObject(o, "wal_io", node->wal_io != NULL ? node->wal_io : "uring");
    /* Set before the HTTP server starts, never changed. */
    if (node->backup != NULL)
        cJSON_AddStringToObject(o, "remote", wal_backup_describe(node->backup));
    else
        cJSON_AddNullToObject(o, "remote");
    cJSON *arr = cJSON_AddArrayToObject(o, "timelines");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, timeline_json(&snap[i]));
    http_response_json(resp, 200, o);
    cJSON_Delete(o);
    free(snap);
}

/* A snapshot of every timeline (caller frees), or NULL with a 500 set. */
static sk_timeline_status *snapshot(sk_node *node, int *n, http_response *resp)
{
    sk_timeline_status *snap = calloc(SK_MAX_TIMELINES, sizeof *snap);
    if (snap == NULL) {
        http_response_error(resp, 500, "out of memory");
        return NULL;
    }
    *n = sk_node_snapshot(node, snap, SK_MAX_TIMELINES, NULL);
    return snap;
}

static void on_tenants(const http_request *req, http_response *resp, void *arg)
{
    (void)req;
    int n;
    sk_timeline_status *snap = snapshot(arg, &n, resp);
    if (snap == NULL)
        return;
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "tenants");
    for (int i = 0; i < n; i++) {
        bool seen = false;
        int count = 0;
        for (int k = 0; k < n; k++) {
            if (!strata_id_equal(&snap[k].tenant_id, &snap[i].tenant_id))
                continue;
            seen |= k < i;
            count++;
        }
        if (seen)
            continue;
        char t[STRATA_ID_HEX_LEN];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "tenant_id", strata_id_format(&snap[i].tenant_id, t));
        cJSON_AddNumberToObject(e, "timelines", count);
        cJSON_AddItemToArray(arr, e);
    }
    http_response_json(resp, 200, o);
    cJSON_Delete(o);
    free(snap);
}

static void on_timeline(const http_request *req, http_response *resp, void *arg)
{
    sk_node *node = arg;
    /* /v1/tenant/<32 hex>/timeline[/<32 hex>] */
    const char *p = req->path + strlen("/v1/tenant/");
    char tbuf[64], lbuf[64] = "";
    const char *slash = strchr(p, '/');
    bool list = false;
    if (slash != NULL && (strcmp(slash, "/timeline") == 0 || strcmp(slash, "/timeline/") == 0))
        list = true;
    else if (slash == NULL || strncmp(slash, "/timeline/", 10) != 0 ||
             strlen(slash + 10) >= sizeof lbuf || strchr(slash + 10, '/') != NULL) {
        http_response_error(resp, 404,
                            "no such endpoint: %s (expected /v1/tenant/<tenant_id>/timeline[/"
                            "<timeline_id>])",
                            req->path);
        return;
    }
    if ((size_t)(slash - p) >= sizeof tbuf) {
        http_response_error(resp, 400, "invalid tenant_id: expected 32 hex digits");
        return;
    }
    memcpy(tbuf, p, (size_t)(slash - p));
    tbuf[slash - p] = '\0';
    if (!list)
        strcpy(lbuf, slash + 10);
    strata_id tenant, timeline;
    if (!strata_id_parse(tbuf, &tenant)) {
        http_response_error(resp, 400, "invalid tenant_id \"%s\": expected 32 hex digits", tbuf);
        return;
    }
    if (!list && !strata_id_parse(lbuf, &timeline)) {
        http_response_error(resp, 400, "invalid timeline_id \"%s\": expected 32 hex digits", lbuf);
        return;
    }
    int n;
    sk_timeline_status *snap = snapshot(node, &n, resp);
    if (snap == NULL)
        return;
    cJSON *o = NULL, *arr = NULL;
    if (list) {
        o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "tenant_id", tbuf);
        arr = cJSON_AddArrayToObject(o, "timelines");
    }
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (!strata_id_equal(&snap[i].tenant_id, &tenant))
            continue;
        if (list) {
            cJSON_AddItemToArray(arr, timeline_json(&snap[i]));
            found++;
        } else if (strata_id_equal(&snap[i].timeline_id, &timeline)) {
            o = timeline_json(&snap[i]);
            found++;
            break;
        }
    }
    free(snap);
    if (found == 0) {
        cJSON_Delete(o);
        if (list)
            http_response_error(resp, 404, "tenant %s has no timeline on this safekeeper", tbuf);
        else
            http_response_error(resp, 404, "tenant %s timeline %s not found on this safekeeper",
                                tbuf, lbuf);
        return;
    }
    http_response_json(resp, 200, o);
    cJSON_Delete(o);
}

http_server *sk_http_start(sk_node *node, auth_store *auth, const char *host, int port, char *err,
                           size_t errlen)
{
    http_config cfg = {.host = host, .port = port};
    if (auth != NULL) {
        cfg.authorize = auth_http_authorize;
        cfg.authorize_arg = auth;
    }
    http_server *s = http_server_new(&cfg, err, errlen);
    if (s == NULL)
        return NULL;
    if (http_server_route(s, "GET", "/v1/status", on_status, node) != 0 ||
        http_server_route(s, "GET", "/v1/tenant", on_tenants, node) != 0 ||
        http_server_route(s, "GET", "/v1/tenant/", on_timeline, node) != 0) {
        snprintf(err, errlen, "could not add HTTP routes");
        http_server_free(s);
        return NULL;
    }
    if (http_server_start(s, err, errlen) != 0) {
        http_server_free(s);
        return NULL;
    }
    return s;
}
