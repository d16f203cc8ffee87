/*
 * http_api.c: the pageserver's admin endpoints and the metrics refresh.
 * See http_api.h.  Every LSN is written as Postgres writes it ("X/Y").
 */
#include "pageserver/service/http_api.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "net/auth.h"
#include "net/http.h"
#include "base/log.h"
#include "base/metrics.h"

#define REFRESH_MS 500
#define LIST_MAX TENANTS_MAX_TIMELINES

typedef struct tl_series {
    strata_id tenant, timeline;
    metrics_gauge *last_record, *disk_consistent, *lag, *gc_horizon, *store_bytes;
    metrics_gauge *remote_consistent, *files_pending, *bytes_pending;
} tl_series;

struct ps_http {
    http_server *server;
    tenants *tenants;
    redo_pool *redo;
    pagecache *cache;

    pthread_t refresher;
    bool refresher_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit;

    /* Refresh-thread state. */
    metrics_gauge *timelines, *cache_entries, *cache_capacity, *lag_max;
    metrics_gauge *store_gauges[8];
    metrics_counter *redo_counters[6];
    uint64_t redo_last[6];
    metrics_counter *cache_counters[3];
    uint64_t cache_last[3];
    tl_series *series;
    int nseries;
};

static void add_lsn(cJSON *o, const char *name, lsn_t lsn)
{
    char buf[LSN_FMT_LEN];
    cJSON_AddStringToObject(o, name, lsn_format(lsn, buf));
}

/* The upload to object storage (docs/storage.md, "Remote storage"). */
static void add_remote(cJSON *o, const timeline_status *st)
{
    const uploader_status *u = &st->upload;
    add_lsn(o, "remote_consistent_lsn", u->remote_consistent_lsn);
    cJSON *r = cJSON_AddObjectToObject(o, "remote");
    cJSON_AddBoolToObject(r, "configured", st->remote);
    add_lsn(r, "remote_consistent_lsn", u->remote_consistent_lsn);
    uint64_t lag = st->disk_consistent_lsn > u->remote_consistent_lsn
                       ? st->disk_consistent_lsn - u->remote_consistent_lsn
                       : 0;
    cJSON_AddNumberToObject(r, "lag_bytes", (double)lag);
    cJSON_AddNumberToObject(r, "manifest_seq", (double)u->manifest_seq);
    cJSON_AddNumberToObject(r, "files_pending", (double)u->files_pending);
    cJSON_AddNumberToObject(r, "bytes_pending", (double)u->bytes_pending);
    cJSON_AddNumberToObject(r, "files_uploaded", (double)u->files_uploaded);
    cJSON_AddNumberToObject(r, "bytes_uploaded", (double)u->bytes_uploaded);
    cJSON_AddNumberToObject(r, "manifests_uploaded", (double)u->manifests_uploaded);
    cJSON_AddNumberToObject(r, "objects_deleted", (double)u->objects_deleted);
    cJSON_AddNumberToObject(r, "errors", (double)u->errors);
    cJSON_AddBoolToObject(r, "failing", u->failing);
    cJSON_AddStringToObject(r, "last_error", u->last_error);
    cJSON_AddNumberToObject(r, "last_error_time", (double)u->last_error_time);
    cJSON_AddNumberToObject(r, "last_upload_time", (double)u->last_upload_time);
}

/* "ancestor_timeline_id" and "ancestor_lsn": null for a root (a branch has both). */
static void add_ancestor(cJSON *o, const timeline_meta *m)
{
    char a[STRATA_ID_HEX_LEN];
    if (!m->has_ancestor) {
        cJSON_AddNullToObject(o, "ancestor_timeline_id");
        cJSON_AddNullToObject(o, "ancestor_lsn");
        return;
    }
    cJSON_AddStringToObject(o, "ancestor_timeline_id", strata_id_format(&m->ancestor_timeline, a));
    add_lsn(o, "ancestor_lsn", m->ancestor_lsn);
}

static cJSON *timeline_json(ps_http *h, timeline *tl)
{
    const timeline_meta *m = timeline_get_meta(tl);
    timeline_status st;
    timeline_get_status(tl, &st);
    cJSON *o = cJSON_CreateObject();
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    cJSON_AddStringToObject(o, "tenant_id", strata_id_format(&m->tenant, a));
    cJSON_AddStringToObject(o, "timeline_id", strata_id_format(&m->timeline, b));
    add_lsn(o, "start_lsn", st.start_lsn);
    add_ancestor(o, m);
    add_lsn(o, "last_record_lsn", st.last_record_lsn);
    add_lsn(o, "disk_consistent_lsn", st.disk_consistent_lsn);
    add_remote(o, &st);
    cJSON *sks = cJSON_AddArrayToObject(o, "safekeepers");
    for (int i = 0; i < m->n_safekeepers; i++)
        cJSON_AddItemToArray(sks, cJSON_CreateString(m->safekeepers[i]));
    cJSON *wr = cJSON_AddObjectToObject(o, "walreceiver");
    const char *state = m->n_safekeepers == 0      ? "none"
                        : !st.walreceiver_running  ? "failed"
                        : st.walreceiver_connected ? "streaming"
                                                   : "connecting";
    cJSON_AddStringToObject(wr, "state", state);
    add_lsn(wr, "upstream_lsn", st.upstream_lsn);
    cJSON_AddNumberToObject(wr, "lag_bytes", (double)st.ingest_lag_bytes);
    cJSON_AddStringToObject(wr, "safekeeper", st.walreceiver_safekeeper);
    cJSON_AddNumberToObject(wr, "connects", (double)st.walreceiver_connects);
    cJSON_AddNumberToObject(wr, "switches", (double)st.walreceiver_switches);
    cJSON_AddNumberToObject(wr, "backup_segments", (double)st.walreceiver_backup_segments);
    cJSON_AddNumberToObject(wr, "errors", (double)st.walreceiver_errors);
    cJSON_AddNumberToObject(wr, "probe_errors", (double)st.walreceiver_probe_errors);
    cJSON_AddStringToObject(wr, "last_error", st.walreceiver_error);
    cJSON_AddNumberToObject(wr, "last_error_time", (double)st.walreceiver_error_time);
    cJSON *gc = cJSON_AddObjectToObject(o, "gc");
    add_lsn(gc, "horizon", st.gc_horizon);
    cJSON_AddNumberToObject(gc, "runs", (double)st.gc_runs);
    cJSON_AddNumberToObject(gc, "removed", (double)st.gc_removed);
    cJSON_AddNumberToObject(gc, "last_run_time", (double)st.gc_last_run_time);
    cJSON_AddStringToObject(gc, "last_error", st.gc_last_error);
    char why[512];
    if (tenants_gc_blocked(h->tenants, &m->tenant, why, sizeof why))
        cJSON_AddStringToObject(gc, "blocked", why);
    else
        cJSON_AddNullToObject(gc, "blocked");
    cJSON *s = cJSON_AddObjectToObject(o, "store");
    cJSON_AddNumberToObject(s, "values_put", (double)st.store.values_put);
    cJSON_AddNumberToObject(s, "bytes_put", (double)st.store.bytes_put);
    cJSON_AddNumberToObject(s, "flushes", (double)st.store.flushes);
    cJSON_AddNumberToObject(s, "data_files", (double)st.store.data_files);
    cJSON_AddNumberToObject(s, "data_file_bytes", (double)st.store.data_file_bytes);
    cJSON_AddNumberToObject(s, "index_bytes", (double)st.store.index_bytes);
    cJSON_AddNumberToObject(s, "open_layer_bytes", (double)st.store.open_layer_bytes);
    cJSON_AddNumberToObject(s, "gc_removed", (double)st.store.gc_removed);
    add_lsn(o, "gc_horizon_lsn", st.gc_horizon);
    cJSON *z = cJSON_AddObjectToObject(o, "sizes");
    cJSON_AddNumberToObject(z, "data_file_bytes", (double)st.store.data_file_bytes);
    cJSON_AddNumberToObject(z, "index_bytes", (double)st.store.index_bytes);
    cJSON_AddNumberToObject(z, "open_layer_bytes", (double)st.store.open_layer_bytes);
    cJSON_AddNumberToObject(
        z, "total_bytes",
        (double)(st.store.data_file_bytes + st.store.index_bytes + st.store.open_layer_bytes));
    return o;
}

/* One restore from object storage in progress (tenants.h). */
static cJSON *restore_json(const tenants_restore_info *r)
{
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tenant_id", strata_id_format(&r->tenant, a));
    cJSON_AddStringToObject(o, "timeline_id", strata_id_format(&r->timeline, b));
    cJSON_AddStringToObject(o, "state", r->started ? "downloading" : "queued");
    cJSON_AddNumberToObject(o, "files_done", (double)r->files_done);
    cJSON_AddNumberToObject(o, "files_total", (double)r->files_total);
    cJSON_AddNumberToObject(o, "bytes_done", (double)r->bytes_done);
    cJSON_AddNumberToObject(o, "bytes_total", (double)r->bytes_total);
    cJSON_AddNumberToObject(o, "manifest_seq", (double)r->seq);
    add_lsn(o, "consistent_lsn", r->consistent_lsn);
    return o;
}

/* "restoring": the timelines being restored from object storage. */
static void add_restores(ps_http *h, cJSON *o)
{
    enum { MAX_SHOWN = 64 };
    tenants_restore_info r[MAX_SHOWN];
    int n = tenants_list_restores(h->tenants, r, MAX_SHOWN);
    cJSON *arr = cJSON_AddArrayToObject(o, "restoring");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, restore_json(&r[i]));
}

/* "not_loaded": timelines that exist but are not loaded (tenants.h). */
static void add_not_loaded(ps_http *h, cJSON *o)
{
    enum { MAX_SHOWN = 64 };
    tenants_not_loaded *r = calloc(MAX_SHOWN, sizeof *r);
    int n = r != NULL ? tenants_list_not_loaded(h->tenants, r, MAX_SHOWN) : 0;
    cJSON *arr = cJSON_AddArrayToObject(o, "not_loaded");
    for (int i = 0; i < n; i++) {
        char a[STRATA_ID_HEX_LEN];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "tenant_id", strata_id_format(&r[i].tenant, a));
        cJSON_AddStringToObject(e, "timeline_id", strata_id_format(&r[i].timeline, a));
        if (r[i].ancestry_known && r[i].has_ancestor) {
            cJSON_AddStringToObject(e, "ancestor_timeline_id", strata_id_format(&r[i].ancestor, a));
            add_lsn(e, "ancestor_lsn", r[i].ancestor_lsn);
        } else {
            cJSON_AddNullToObject(e, "ancestor_timeline_id");
            cJSON_AddNullToObject(e, "ancestor_lsn");
        }
        cJSON_AddBoolToObject(e, "ancestry_known", r[i].ancestry_known);
        cJSON_AddBoolToObject(e, "on_disk", r[i].on_disk);
        cJSON_AddStringToObject(e, "reason", r[i].reason);
        cJSON_AddItemToArray(arr, e);
    }
    free(r);
}

static void on_status(const http_request *req, http_response *resp, void *arg)
{
    (void)req;
    ps_http *h = arg;
    timeline **list = calloc(LIST_MAX, sizeof *list);
    if (list == NULL) {
        http_response_error(resp, 500, "out of memory");
        return;
    }
    int n = tenants_list(h->tenants, list, LIST_MAX);
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "timelines");
    for (int i = 0; i < n; i++) {
        cJSON_AddItemToArray(arr, timeline_json(h, list[i]));
        timeline_unref(list[i]);
    }
    free(list);
    add_restores(h, o);
    add_not_loaded(h, o);
    http_response_json(resp, 200, o);
    cJSON_Delete(o);
}

static timeline *get_or_404(ps_http *h, const strata_id *tenant, const strata_id *tlid,
                            http_response *resp)
{
    timeline *tl = tenants_get(h->tenants, tenant, tlid);
    tenants_restore_info r;
    if (tl == NULL && tenants_restore_pending(h->tenants, tenant, tlid, &r)) {
        char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
        http_response_error(resp, 503,
                            "tenant %s timeline %s is being restored from object storage "
                            "(files %llu/%llu, %.1f of %.1f MB); try again",
                            strata_id_format(tenant, a), strata_id_format(tlid, b),
                            (unsigned long long)r.files_done, (unsigned long long)r.files_total,
                            (double)r.bytes_done / 1e6, (double)r.bytes_total / 1e6);
    } else if (tl == NULL) {
        char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
        http_response_error(resp, 404, "tenant %s timeline %s not found on this pageserver",
                            strata_id_format(tenant, a), strata_id_format(tlid, b));
    }
    return tl;
}

typedef struct rels_arg {
    cJSON *arr;
    bool oom;
} rels_arg;

static int add_rel(uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork, uint32_t nblocks,
                   void *arg)
{
    rels_arg *a = arg;
    cJSON *o = cJSON_CreateObject();
    if (o == NULL) {
        a->oom = true;
        return 1;
    }
    cJSON_AddNumberToObject(o, "spc", spc);
    cJSON_AddNumberToObject(o, "db", db);
    cJSON_AddNumberToObject(o, "rel", rel);
    cJSON_AddNumberToObject(o, "fork", fork);
    cJSON_AddNumberToObject(o, "nblocks", nblocks);
    cJSON_AddItemToArray(a->arr, o);
    return 0;
}

static void get_rels(ps_http *h, timeline *tl, const http_request *req, http_response *resp)
{
    const char *q = http_request_query(req, "lsn");
    lsn_t last = timeline_last_record_lsn(tl), lsn = last;
    if (q != NULL && !lsn_parse(q, &lsn)) {
        http_response_error(resp, 400, "invalid lsn \"%s\": expected X/Y in hex", q);
        return;
    }
    char lb[LSN_FMT_LEN], lb2[LSN_FMT_LEN];
    if (lsn > last) {
        http_response_error(resp, 400, "lsn %s is beyond the last ingested LSN %s",
                            lsn_format(lsn, lb), lsn_format(last, lb2));
        return;
    }
    (void)h;
    const timeline_meta *m = timeline_get_meta(tl);
    if (m->has_ancestor && lsn < m->start_lsn) {
        http_response_error(resp, 400,
                            "requested LSN %s is below the start %s of this timeline (a branch: "
                            "list its ancestor below it)",
                            lsn_format(lsn, lb), lsn_format(m->start_lsn, lb2));
        return;
    }
    lsn_t horizon = timeline_gc_horizon(tl);
    if (lsn < horizon) {
        http_response_error(resp, 400,
                            "requested LSN %s is below the GC horizon %s of this timeline",
                            lsn_format(lsn, lb), lsn_format(horizon, lb2));
        return;
    }
    cJSON *o = cJSON_CreateObject();
    add_lsn(o, "lsn", lsn);
    rels_arg a = {.arr = cJSON_AddArrayToObject(o, "rels")};
    char err[512];
    if (timeline_list_rels(tl, lsn, add_rel, &a, err, sizeof err) != 0 || a.oom) {
        http_response_error(resp, 500, "listing relations failed: %s",
                            a.oom ? "out of memory" : err);
    } else {
        http_response_json(resp, 200, o);
    }
    cJSON_Delete(o);
}

/* GET .../timeline/<tl>/lsn_by_time?time=<timestamp>: the end of the last
 * commit at or before the time (timeline_lsn_by_time). */
static void get_lsn_by_time(timeline *tl, const http_request *req, http_response *resp)
{
    const char *q = http_request_query(req, "time");
    pg_timestamp when;
    if (q == NULL || !timeline_parse_time(q, &when)) {
        http_response_error(resp, 400,
                            "invalid or missing time \"%s\": expected ?time= an ISO 8601 / RFC "
                            "3339 timestamp such as 2026-12-02T05:00:00Z (URL-encoded)",
                            q ? q : "");
        return;
    }
    lsn_t lsn;
    pg_timestamp ct;
    bool latest;
    int status = 500;
    char err[1024], tb[48];
    if (timeline_lsn_by_time(tl, when, &lsn, &ct, &latest, &status, err, sizeof err) != 0) {
        http_response_error(resp, status, "%s", err);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    add_lsn(o, "lsn", lsn);
    if (ct >= 0 || !latest)
        cJSON_AddStringToObject(o, "commit_time", timeline_format_time(ct, tb, sizeof tb));
    else
        cJSON_AddNullToObject(o, "commit_time");
    cJSON_AddStringToObject(o, "kind", latest ? "latest" : "commit");
    http_response_json(resp, 200, o);
    cJSON_Delete(o);
}

/* Reads a timeline creation body (an object) into *cr; its "timeline_id"
 * (allowed only when tlid_in is NULL) into *tlid_buf with *have_id set.
 * False after answering 400 naming the field.  cr's strings point into
 * body. */
static bool parse_create_body(const cJSON *body, const strata_id *tlid_in,
                              tenants_create_request *cr, strata_id *tlid_buf, bool *have_id,
                              http_response *resp)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, body)
    {
        if (strcmp(e->string, "safekeepers") == 0) {
            if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) > TIMELINE_MAX_SAFEKEEPERS) {
                http_response_error(resp, 400,
                                    "\"safekeepers\" must be an array of at most %d "
                                    "\"host:port\" strings",
                                    TIMELINE_MAX_SAFEKEEPERS);
                return false;
            }
            const cJSON *s;
            cJSON_ArrayForEach(s, e)
            {
                if (!cJSON_IsString(s)) {
                    http_response_error(resp, 400, "\"safekeepers\" entries must be strings");
                    return false;
                }
                cr->safekeepers[cr->n_safekeepers++] = s->valuestring;
            }
        } else if (strcmp(e->string, "import_pgdata") == 0) {
            if (!cJSON_IsString(e) || e->valuestring[0] != '/') {
                http_response_error(resp, 400, "\"import_pgdata\" must be an absolute path");
                return false;
            }
            cr->import_pgdata = e->valuestring;
        } else if (strcmp(e->string, "initdb") == 0) {
            if (!cJSON_IsBool(e)) {
                http_response_error(resp, 400, "\"initdb\" must be true or false");
                return false;
            }
            cr->initdb = cJSON_IsTrue(e);
        } else if (strcmp(e->string, "ancestor_timeline_id") == 0) {
            if (!cJSON_IsString(e) || !strata_id_parse(e->valuestring, &cr->ancestor)) {
                http_response_error(resp, 400, "\"ancestor_timeline_id\" must be 32 hex digits");
                return false;
            }
            cr->has_ancestor = true;
        } else if (strcmp(e->string, "ancestor_lsn") == 0) {
            if (!cJSON_IsString(e) || !lsn_parse(e->valuestring, &cr->ancestor_lsn) ||
                cr->ancestor_lsn == LSN_INVALID) {
                http_response_error(resp, 400,
                                    "\"ancestor_lsn\" must be an LSN X/Y in hex, not 0/0");
                return false;
            }
        } else if (strcmp(e->string, "ancestor_time") == 0) {
            if (!cJSON_IsString(e)) {
                http_response_error(resp, 400, "\"ancestor_time\" must be a timestamp string");
                return false;
            }
            cr->ancestor_time = e->valuestring;
        } else if (tlid_in == NULL && strcmp(e->string, "timeline_id") == 0) {
            if (!cJSON_IsString(e) || !strata_id_parse(e->valuestring, tlid_buf)) {
                http_response_error(resp, 400, "\"timeline_id\" must be 32 hex digits");
                return false;
            }
            *have_id = true;
        } else {
            http_response_error(resp, 400,
                                "unknown field \"%s\" (expected %ssafekeepers, "
                                "import_pgdata, initdb, ancestor_timeline_id, ancestor_lsn, "
                                "ancestor_time)",
                                e->string, tlid_in == NULL ? "timeline_id, " : "");
            return false;
        }
    }
    return true;
}

/* POST .../timeline/<tl> (tlid given) or POST .../timeline (tlid NULL: the
 * body's "timeline_id", else a new random id; the tenant must exist). */
static void create_timeline(ps_http *h, const strata_id *tenant, const strata_id *tlid_in,
                            const http_request *req, http_response *resp)
{
    cJSON *body = http_request_json(req, resp);
    if (body == NULL)
        return;
    tenants_create_request cr = {0};
    strata_id tlid_buf;
    const strata_id *tlid = tlid_in;
    bool have_id = false;
    if (!cJSON_IsObject(body)) {
        http_response_error(resp, 400, "the body must be a JSON object");
        goto out;
    }
    if (!parse_create_body(body, tlid_in, &cr, &tlid_buf, &have_id, resp))
        goto out;
    if (tlid_in == NULL) {
        char a[STRATA_ID_HEX_LEN];
        if (!tenants_tenant_exists(h->tenants, tenant)) {
            http_response_error(resp, 404,
                                "tenant %s not found on this pageserver (create it with POST "
                                "/v1/tenant)",
                                strata_id_format(tenant, a));
            goto out;
        }
        if (!have_id && !strata_id_generate(&tlid_buf)) {
            http_response_error(resp, 500, "cannot generate a timeline id: getrandom failed");
            goto out;
        }
        tlid = &tlid_buf;
    }
    lsn_t lsn = LSN_INVALID;
    int status = 500;
    char err[1024];
    if (tenants_create_timeline(h->tenants, tenant, tlid, &cr, &lsn, &status, err, sizeof err) !=
        0) {
        http_response_error(resp, status, "%s", err);
        goto out;
    }
    cJSON *o = cJSON_CreateObject();
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    add_lsn(o, "lsn", lsn);
    cJSON_AddStringToObject(o, "tenant_id", strata_id_format(tenant, a));
    cJSON_AddStringToObject(o, "timeline_id", strata_id_format(tlid, b));
    add_lsn(o, "start_lsn", lsn);
    timeline_meta am = {
        .has_ancestor = cr.has_ancestor, .ancestor_timeline = cr.ancestor, .ancestor_lsn = lsn};
    add_ancestor(o, &am);
    http_response_json(resp, 201, o);
    cJSON_Delete(o);
out:
    cJSON_Delete(body);
}

/* Splits the path below /v1/tenant/ into at most 4 segments of < 64
 * characters (a trailing '/' is ignored).  The count, or -1 when the path
 * is not of that shape. */
#define SEG_MAX 4
#define SEG_LEN 64
static int split_path(const char *p, char seg[SEG_MAX][SEG_LEN])
{
    int n = 0;
    while (*p != '\0') {
        size_t len = strcspn(p, "/");
        if (len == 0 || len >= SEG_LEN || n == SEG_MAX)
            return -1;
        memcpy(seg[n], p, len);
        seg[n][len] = '\0';
        n++;
        p += len;
        if (*p == '/')
            p++;
    }
    return n;
}

static bool parse_id_or_400(const char *what, const char *s, strata_id *id, http_response *resp)
{
    if (strata_id_parse(s, id))
        return true;
    http_response_error(resp, 400, "invalid %s \"%s\": expected 32 hex digits", what, s);
    return false;
}

static void list_tenants(ps_http *h, http_response *resp)
{
    strata_id *ids = calloc(TENANTS_MAX_TENANTS, sizeof *ids);
    int *counts = calloc(TENANTS_MAX_TENANTS, sizeof *counts);
    if (ids == NULL || counts == NULL) {
        free(ids);
        free(counts);
        http_response_error(resp, 500, "out of memory");
        return;
    }
    int n = tenants_list_tenants(h->tenants, ids, counts, TENANTS_MAX_TENANTS);
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "tenants");
    for (int i = 0; i < n; i++) {
        char a[STRATA_ID_HEX_LEN];
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "tenant_id", strata_id_format(&ids[i], a));
        cJSON_AddNumberToObject(t, "timelines", counts[i]);
        cJSON_AddItemToArray(arr, t);
    }
    http_response_json(resp, 200, o);
    cJSON_Delete(o);
    free(ids);
    free(counts);
}

/* POST /v1/tenant: {} or {"tenant_id": "<hex>"}; an empty body is {}. */
static void create_tenant(ps_http *h, const http_request *req, http_response *resp)
{
    strata_id id;
    bool have_id = false;
    if (req->body_len > 0) {
        cJSON *body = http_request_json(req, resp);
        if (body == NULL)
            return;
        if (!cJSON_IsObject(body)) {
            cJSON_Delete(body);
            http_response_error(resp, 400, "the body must be a JSON object");
            return;
        }
        const cJSON *e;
        cJSON_ArrayForEach(e, body)
        {
            if (strcmp(e->string, "tenant_id") != 0) {
                http_response_error(resp, 400, "unknown field \"%s\" (expected tenant_id)",
                                    e->string);
                cJSON_Delete(body);
                return;
            }
            if (!cJSON_IsString(e) || !strata_id_parse(e->valuestring, &id)) {
                http_response_error(resp, 400, "\"tenant_id\" must be 32 hex digits");
                cJSON_Delete(body);
                return;
            }
            have_id = true;
        }
        cJSON_Delete(body);
    }
    if (!have_id && !strata_id_generate(&id)) {
        http_response_error(resp, 500, "cannot generate a tenant id: getrandom failed");
        return;
    }
    int status = 500;
    char err[512];
    if (tenants_create_tenant(h->tenants, &id, &status, err, sizeof err) != 0) {
        http_response_error(resp, status, "%s", err);
        return;
    }
    char a[STRATA_ID_HEX_LEN];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tenant_id", strata_id_format(&id, a));
    http_response_json(resp, 201, o);
    cJSON_Delete(o);
}

static void on_tenant_root(const http_request *req, http_response *resp, void *arg)
{
    ps_http *h = arg;
    if (strcmp(req->method, "GET") == 0)
        list_tenants(h, resp);
    else
        create_tenant(h, req, resp);
}

/* The timelines of one tenant, each as GET .../timeline/<tl> shows it. */
static void list_timelines(ps_http *h, const strata_id *tenant, http_response *resp)
{
    char a[STRATA_ID_HEX_LEN];
    if (!tenants_tenant_exists(h->tenants, tenant)) {
        http_response_error(resp, 404, "tenant %s not found on this pageserver",
                            strata_id_format(tenant, a));
        return;
    }
    timeline **list = calloc(LIST_MAX, sizeof *list);
    if (list == NULL) {
        http_response_error(resp, 500, "out of memory");
        return;
    }
    int n = tenants_list(h->tenants, list, LIST_MAX);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "tenant_id", strata_id_format(tenant, a));
    cJSON *arr = cJSON_AddArrayToObject(o, "timelines");
    for (int i = 0; i < n; i++) {
        if (strata_id_equal(&timeline_get_meta(list[i])->tenant, tenant))
            cJSON_AddItemToArray(arr, timeline_json(h, list[i]));
        timeline_unref(list[i]);
    }
    free(list);
    http_response_json(resp, 200, o);
    cJSON_Delete(o);
}

/*
 * Everything under /v1/tenant/:
 *   <t>                              GET (its timelines' ids), DELETE
 *   <t>/timeline                     GET list, POST create (id in the body or new)
 *   <t>/timeline/<tl>                GET, POST create, DELETE
 *   <t>/timeline/<tl>/rels           GET
 *   <t>/timeline/<tl>/lsn_by_time    GET ?time=<timestamp>
 */
/* GET, POST or DELETE /v1/tenant/<tenant_id>. */
static void on_tenant(ps_http *h, const strata_id *tenant, const http_request *req,
                      http_response *resp)
{
    bool get = strcmp(req->method, "GET") == 0;
    bool post = strcmp(req->method, "POST") == 0;
    char a[STRATA_ID_HEX_LEN];
    if (post) {
        http_response_error(resp, 405,
                            "method POST not allowed on %s (create a tenant with "
                            "POST /v1/tenant)",
                            req->path);
    } else if (get) {
        strata_id id;
        int count = 0;
        bool found = false;
        strata_id *ids = calloc(TENANTS_MAX_TENANTS, sizeof *ids);
        int *counts = calloc(TENANTS_MAX_TENANTS, sizeof *counts);
        if (ids != NULL && counts != NULL) {
            int m = tenants_list_tenants(h->tenants, ids, counts, TENANTS_MAX_TENANTS);
            for (int i = 0; i < m; i++)
                if (strata_id_equal(&ids[i], tenant)) {
                    found = true;
                    count = counts[i];
                    id = ids[i];
                }
        }
        free(ids);
        free(counts);
        if (!found) {
            http_response_error(resp, 404, "tenant %s not found on this pageserver",
                                strata_id_format(tenant, a));
            return;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "tenant_id", strata_id_format(&id, a));
        cJSON_AddNumberToObject(o, "timelines", count);
        http_response_json(resp, 200, o);
        cJSON_Delete(o);
    } else {
        int status = 500;
        char err[512];
        if (tenants_delete_tenant(h->tenants, tenant, &status, err, sizeof err) != 0)
            http_response_error(resp, status, "%s", err);
        else
            http_response_set(resp, 200, NULL, "{}", 2);
    }
}

/* GET, POST or DELETE /v1/tenant/<tenant_id>/timeline/<timeline_id>. */
static void on_timeline(ps_http *h, const strata_id *tenant, const strata_id *tlid,
                        const http_request *req, http_response *resp)
{
    bool get = strcmp(req->method, "GET") == 0;
    bool post = strcmp(req->method, "POST") == 0;
    bool del = strcmp(req->method, "DELETE") == 0;
    if (get) {
        timeline *tl = get_or_404(h, tenant, tlid, resp);
        if (tl != NULL) {
            cJSON *o = timeline_json(h, tl);
            timeline_unref(tl);
            http_response_json(resp, 200, o);
            cJSON_Delete(o);
        }
    } else if (post) {
        create_timeline(h, tenant, tlid, req, resp);
    } else {
        assert(del);
        (void)del;
        int status = 500;
        char err[512];
        if (tenants_delete_timeline(h->tenants, tenant, tlid, &status, err, sizeof err) != 0) {
            http_response_error(resp, status, "%s", err);
            return;
        }
        http_response_set(resp, 200, NULL, "{}", 2);
    }
}

static void on_tenant_tree(const http_request *req, http_response *resp, void *arg)
{
    ps_http *h = arg;
    char seg[SEG_MAX][SEG_LEN];
    int n = split_path(req->path + strlen("/v1/tenant/"), seg);
    bool get = strcmp(req->method, "GET") == 0;
    bool post = strcmp(req->method, "POST") == 0;
    if (n < 1 || (n >= 2 && strcmp(seg[1], "timeline") != 0) ||
        (n == 4 && strcmp(seg[3], "rels") != 0 && strcmp(seg[3], "lsn_by_time") != 0)) {
        http_response_error(resp, 404,
                            "no such endpoint: %s (expected /v1/tenant/<tenant_id>[/timeline[/"
                            "<timeline_id>[/rels|/lsn_by_time]]])",
                            req->path);
        return;
    }
    strata_id tenant, tlid;
    if (!parse_id_or_400("tenant_id", seg[0], &tenant, resp))
        return;
    if (n >= 3 && !parse_id_or_400("timeline_id", seg[2], &tlid, resp))
        return;
    if (n == 1) {
        on_tenant(h, &tenant, req, resp);
        return;
    }
    if (n == 2) {
        if (get)
            list_timelines(h, &tenant, resp);
        else if (post)
            create_timeline(h, &tenant, NULL, req, resp);
        else
            http_response_error(resp, 405, "method %s not allowed on %s", req->method, req->path);
        return;
    }
    if (n == 4) {
        if (!get) {
            http_response_error(resp, 405, "method %s not allowed on %s", req->method, req->path);
            return;
        }
        timeline *tl = get_or_404(h, &tenant, &tlid, resp);
        if (tl != NULL) {
            if (strcmp(seg[3], "rels") == 0)
                get_rels(h, tl, req, resp);
            else
                get_lsn_by_time(tl, req, resp);
            timeline_unref(tl);
        }
        return;
    }
    on_timeline(h, &tenant, &tlid, req, resp);
}

/* ---- metrics refresh ---- */

static metrics_gauge *gauge(const char *name, const char *help)
{
    return metrics_gauge_register(metrics_default_registry(), name, help, 0, NULL, NULL);
}

static metrics_counter *counter(const char *name, const char *help)
{
    return metrics_counter_register(metrics_default_registry(), name, help, 0, NULL, NULL);
}

static void register_metrics(ps_http *h)
{
    h->timelines = gauge("pageserver_timelines", "Timelines loaded");
    h->cache_entries = gauge("pageserver_page_cache_entries", "Pages held by the page cache");
    h->cache_capacity = gauge("pageserver_page_cache_capacity", "Pages the page cache can hold");
    h->lag_max = gauge("pageserver_ingest_lag_bytes_max",
                       "Largest ingest lag of any timeline (safekeeper commit - last record)");
    static const char *const sn[8][2] = {
        {"pageserver_store_values_put", "Values put into stores (all timelines)"},
        {"pageserver_store_bytes_put", "Bytes put into stores"},
        {"pageserver_store_flushes", "Open-layer flushes"},
        {"pageserver_store_data_files", "Data files"},
        {"pageserver_store_data_file_bytes", "Bytes in data files"},
        {"pageserver_store_index_bytes", "Bytes in the LMDB indexes"},
        {"pageserver_store_open_layer_bytes", "Bytes in open layers"},
        {"pageserver_store_gc_removed", "Values removed by GC"},
    };
    for (int i = 0; i < 8; i++)
        h->store_gauges[i] = gauge(sn[i][0], sn[i][1]);
    static const char *const rn[6][2] = {
        {"pageserver_redo_requests_total", "Pages submitted to the redo pool"},
        {"pageserver_redo_records_applied_total", "WAL records applied by redo helpers"},
        {"pageserver_redo_synthetic_applied_total", "Synthetic deltas applied in C"},
        {"pageserver_redo_helper_restarts_total", "Redo helper processes (re)started"},
        {"pageserver_redo_timeouts_total", "Redo requests that timed out"},
        {"pageserver_redo_failures_total", "Redo requests that failed"},
    };
    for (int i = 0; i < 6; i++)
        h->redo_counters[i] = counter(rn[i][0], rn[i][1]);
    h->cache_counters[0] = counter("pageserver_page_cache_inserts_total", "Pages cached");
    h->cache_counters[1] = counter("pageserver_page_cache_evictions_total", "Pages evicted");
    h->cache_counters[2] = counter("pageserver_page_cache_lookups_total", "Page cache lookups");
}

static void add_delta(metrics_counter *c, uint64_t now, uint64_t *last)
{
    if (now > *last)
        metrics_counter_add(c, now - *last);
    *last = now;
}

static tl_series *series_for(ps_http *h, const timeline_meta *m)
{
    for (int i = 0; i < h->nseries; i++) {
        if (strata_id_equal(&h->series[i].tenant, &m->tenant) &&
            strata_id_equal(&h->series[i].timeline, &m->timeline))
            return &h->series[i];
    }
    if (h->nseries == LIST_MAX)
        return NULL;
    tl_series *s = &h->series[h->nseries++];
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    static const char *const names[] = {"tenant_id", "timeline_id"};
    const char *values[] = {strata_id_format(&m->tenant, a), strata_id_format(&m->timeline, b)};
    metrics_registry *r = metrics_default_registry();
    s->tenant = m->tenant;
    s->timeline = m->timeline;
    s->last_record = metrics_gauge_register(
        r, "pageserver_last_record_lsn", "End of the last WAL record ingested", 2, names, values);
    s->disk_consistent =
        metrics_gauge_register(r, "pageserver_disk_consistent_lsn",
                               "LSN up to which the store is durable", 2, names, values);
    s->lag = metrics_gauge_register(
        r, "pageserver_ingest_lag_bytes",
        "Safekeeper commit LSN minus last ingested record LSN (WAL not yet ingested)", 2, names,
        values);
    s->gc_horizon = metrics_gauge_register(
        r, "pageserver_gc_horizon_lsn",
        "GC horizon: reads below this LSN are refused (0: no GC yet)", 2, names, values);
    s->store_bytes = metrics_gauge_register(
        r, "pageserver_timeline_store_bytes",
        "Bytes the timeline's store holds: data files + LMDB index + open layers", 2, names,
        values);
    s->remote_consistent = metrics_gauge_register(
        r, "pageserver_remote_consistent_lsn",
        "LSN the newest manifest in object storage makes consistent (what safekeepers keep WAL "
        "above); disk_consistent_lsn without --remote",
        2, names, values);
    s->files_pending = metrics_gauge_register(r, "pageserver_remote_files_pending",
                                              "Live data files not yet uploaded", 2, names, values);
    s->bytes_pending =
        metrics_gauge_register(r, "pageserver_remote_bytes_pending",
                               "Bytes of live data files not yet uploaded", 2, names, values);
    return s;
}

static void refresh(ps_http *h, timeline **list)
{
    int n = tenants_list(h->tenants, list, LIST_MAX);
    metrics_gauge_set(h->timelines, n);
    uint64_t sums[8] = {0};
    uint64_t lag_max = 0;
    for (int i = 0; i < h->nseries; i++) {
        /* Timelines that are gone read as zero. */
        metrics_gauge_set(h->series[i].lag, 0);
        metrics_gauge_set(h->series[i].store_bytes, 0);
    }
    for (int i = 0; i < n; i++) {
        timeline_status st;
        timeline_get_status(list[i], &st);
        tl_series *s = series_for(h, timeline_get_meta(list[i]));
        if (s != NULL) {
            metrics_gauge_set(s->last_record, (double)st.last_record_lsn);
            metrics_gauge_set(s->disk_consistent, (double)st.disk_consistent_lsn);
            metrics_gauge_set(s->lag, (double)st.ingest_lag_bytes);
            metrics_gauge_set(s->gc_horizon, (double)st.gc_horizon);
            metrics_gauge_set(s->remote_consistent, (double)st.upload.remote_consistent_lsn);
            metrics_gauge_set(s->files_pending, (double)st.upload.files_pending);
            metrics_gauge_set(s->bytes_pending, (double)st.upload.bytes_pending);
            metrics_gauge_set(s->store_bytes,
                              (double)(st.store.data_file_bytes + st.store.index_bytes +
                                       st.store.open_layer_bytes));
        }
        if (st.ingest_lag_bytes > lag_max)
            lag_max = st.ingest_lag_bytes;
        const uint64_t v[8] = {st.store.values_put,       st.store.bytes_put,
                               st.store.flushes,          st.store.data_files,
                               st.store.data_file_bytes,  st.store.index_bytes,
                               st.store.open_layer_bytes, st.store.gc_removed};
        for (int k = 0; k < 8; k++)
            sums[k] += v[k];
        timeline_unref(list[i]);
    }
    for (int k = 0; k < 8; k++)
        metrics_gauge_set(h->store_gauges[k], (double)sums[k]);
    metrics_gauge_set(h->lag_max, (double)lag_max);
    if (h->redo != NULL) {
        redo_stats rs;
        redo_get_stats(h->redo, &rs);
        const uint64_t v[6] = {rs.requests,        rs.records_applied, rs.synthetic_applied,
                               rs.helper_restarts, rs.timeouts,        rs.failures};
        for (int k = 0; k < 6; k++)
            add_delta(h->redo_counters[k], v[k], &h->redo_last[k]);
    }
    if (h->cache != NULL) {
        pagecache_stats cs;
        pagecache_get_stats(h->cache, &cs);
        metrics_gauge_set(h->cache_entries, (double)cs.entries);
        metrics_gauge_set(h->cache_capacity, (double)cs.capacity);
        add_delta(h->cache_counters[0], cs.inserts, &h->cache_last[0]);
        add_delta(h->cache_counters[1], cs.evictions, &h->cache_last[1]);
        add_delta(h->cache_counters[2], cs.hits + cs.misses, &h->cache_last[2]);
    }
}

static void *refresh_main(void *arg)
{
    pthread_setname_np(pthread_self(), "ps-http-stats");
    ps_http *h = arg;
    timeline **list = calloc(LIST_MAX, sizeof *list);
    pthread_mutex_lock(&h->mu);
    while (!h->quit) {
        pthread_mutex_unlock(&h->mu);
        if (list != NULL)
            refresh(h, list);
        pthread_mutex_lock(&h->mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += REFRESH_MS * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        while (!h->quit && pthread_cond_timedwait(&h->cv, &h->mu, &ts) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&h->mu);
    free(list);
    return NULL;
}

ps_http *ps_http_start(tenants *t, redo_pool *redo, pagecache *cache, auth_store *auth,
                       const char *host, int port, char *err, size_t errlen)
{
    ps_http *h = calloc(1, sizeof *h);
    tl_series *series = calloc(LIST_MAX, sizeof *series);
    if (h == NULL || series == NULL) {
        free(h);
        free(series);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->tenants = t;
    h->redo = redo;
    h->cache = cache;
    h->series = series;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    register_metrics(h);
    http_config cfg = {.host = host, .port = port};
    if (auth != NULL) {
        cfg.authorize = auth_http_authorize;
        cfg.authorize_arg = auth;
    }
    h->server = http_server_new(&cfg, err, errlen);
    if (h->server == NULL)
        goto fail;
    if (http_server_route(h->server, "GET", "/v1/status", on_status, h) != 0 ||
        http_server_route(h->server, "GET", "/v1/tenant", on_tenant_root, h) != 0 ||
        http_server_route(h->server, "POST", "/v1/tenant", on_tenant_root, h) != 0 ||
        http_server_route(h->server, "GET", "/v1/tenant/", on_tenant_tree, h) != 0 ||
        http_server_route(h->server, "POST", "/v1/tenant/", on_tenant_tree, h) != 0 ||
        http_server_route(h->server, "DELETE", "/v1/tenant/", on_tenant_tree, h) != 0) {
        snprintf(err, errlen, "could not add HTTP routes");
        goto fail;
    }
    if (http_server_start(h->server, err, errlen) != 0)
        goto fail;
    if (pthread_create(&h->refresher, NULL, refresh_main, h) != 0) {
        snprintf(err, errlen, "cannot start the metrics refresh thread");
        goto fail;
    }
    h->refresher_started = true;
    return h;
fail:
    ps_http_stop(h);
    return NULL;
}

int ps_http_port(const ps_http *h)
{
    return http_server_port(h->server);
}

void ps_http_stop(ps_http *h)
{
    if (h == NULL)
        return;
    if (h->server != NULL)
        http_server_free(h->server);
    pthread_mutex_lock(&h->mu);
    h->quit = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (h->refresher_started)
        pthread_join(h->refresher, NULL);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h->series);
    free(h);
}
