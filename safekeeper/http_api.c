/*
 * http_api.c: JSON views of the published timeline snapshot.  See
 * http_api.h.  Every LSN is written as Postgres writes it ("X/Y").
 */
#include "safekeeper/http_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add_lsn(cJSON *o, const char *name, lsn_t lsn)
{
    char buf[LSN_FMT_LEN];
    cJSON_AddStringToObject(o, name, lsn_format(lsn, buf));
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
    cJSON_AddNumberToObject(o, "connections", s->connections);
    cJSON_AddBoolToObject(o, "failed", s->failed);
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
    cJSON *arr = cJSON_AddArrayToObject(o, "timelines");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, timeline_json(&snap[i]));
    http_response_json(resp, 200, o);
    cJSON_Delete(o);
    free(snap);
}

static void on_timeline(const http_request *req, http_response *resp, void *arg)
{
    sk_node *node = arg;
    /* /v1/tenant/<32 hex>/timeline/<32 hex> */
    const char *p = req->path + strlen("/v1/tenant/");
    char tbuf[64], lbuf[64];
    const char *slash = strchr(p, '/');
    if (slash == NULL || (size_t)(slash - p) >= sizeof tbuf ||
        strncmp(slash, "/timeline/", 10) != 0 || strlen(slash + 10) >= sizeof lbuf) {
        http_response_error(resp, 404, "expected /v1/tenant/<tenant_id>/timeline/<timeline_id>");
        return;
    }
    memcpy(tbuf, p, (size_t)(slash - p));
    tbuf[slash - p] = '\0';
    strcpy(lbuf, slash + 10);
    strata_id tenant, timeline;
    if (!strata_id_parse(tbuf, &tenant)) {
        http_response_error(resp, 400, "invalid tenant_id \"%s\": expected 32 hex digits", tbuf);
        return;
    }
    if (!strata_id_parse(lbuf, &timeline)) {
        http_response_error(resp, 400, "invalid timeline_id \"%s\": expected 32 hex digits", lbuf);
        return;
    }
    sk_timeline_status *snap = calloc(SK_MAX_TIMELINES, sizeof *snap);
    if (snap == NULL) {
        http_response_error(resp, 500, "out of memory");
        return;
    }
    int n = sk_node_snapshot(node, snap, SK_MAX_TIMELINES, NULL);
    for (int i = 0; i < n; i++) {
        if (strata_id_equal(&snap[i].tenant_id, &tenant) &&
            strata_id_equal(&snap[i].timeline_id, &timeline)) {
            cJSON *o = timeline_json(&snap[i]);
            http_response_json(resp, 200, o);
            cJSON_Delete(o);
            free(snap);
            return;
        }
    }
    free(snap);
    http_response_error(resp, 404, "tenant %s timeline %s not found on this safekeeper", tbuf,
                        lbuf);
}

http_server *sk_http_start(sk_node *node, const char *host, int port, char *err, size_t errlen)
{
    http_config cfg = {.host = host, .port = port};
    http_server *s = http_server_new(&cfg, err, errlen);
    if (s == NULL)
        return NULL;
    if (http_server_route(s, "GET", "/v1/status", on_status, node) != 0 ||
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
