/*
 * http_api.c: the pageserver's admin endpoints and the metrics refresh.
 * See http_api.h.  Every LSN is written as Postgres writes it ("X/Y").
 */
#include "pageserver/http_api.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/http.h"
#include "common/log.h"
#include "common/metrics.h"

#define REFRESH_MS 500
#define LIST_MAX TENANTS_MAX_TIMELINES

typedef struct tl_series {
    strata_id tenant, timeline;
    metrics_gauge *last_record, *disk_consistent, *lag, *gc_horizon;
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

static cJSON *timeline_json(timeline *tl)
{
    const timeline_meta *m = timeline_get_meta(tl);
    timeline_status st;
    timeline_get_status(tl, &st);
    cJSON *o = cJSON_CreateObject();
    char a[STRATA_ID_HEX_LEN], b[STRATA_ID_HEX_LEN];
    cJSON_AddStringToObject(o, "tenant_id", strata_id_format(&m->tenant, a));
    cJSON_AddStringToObject(o, "timeline_id", strata_id_format(&m->timeline, b));
    add_lsn(o, "start_lsn", st.start_lsn);
    add_lsn(o, "last_record_lsn", st.last_record_lsn);
    add_lsn(o, "disk_consistent_lsn", st.disk_consistent_lsn);
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
    cJSON *s = cJSON_AddObjectToObject(o, "store");
    cJSON_AddNumberToObject(s, "values_put", (double)st.store.values_put);
    cJSON_AddNumberToObject(s, "bytes_put", (double)st.store.bytes_put);
    cJSON_AddNumberToObject(s, "flushes", (double)st.store.flushes);
    cJSON_AddNumberToObject(s, "data_files", (double)st.store.data_files);
    cJSON_AddNumberToObject(s, "data_file_bytes", (double)st.store.data_file_bytes);
    cJSON_AddNumberToObject(s, "index_bytes", (double)st.store.index_bytes);
    cJSON_AddNumberToObject(s, "open_layer_bytes", (double)st.store.open_layer_bytes);
    cJSON_AddNumberToObject(s, "gc_removed", (double)st.store.gc_removed);
    return o;
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
        cJSON_AddItemToArray(arr, timeline_json(list[i]));
        timeline_unref(list[i]);
    }
    free(list);
    http_response_json(resp, 200, o);
    cJSON_Delete(o);
}

/* Parses /v1/tenant/<t>/timeline/<tl>[/<rest>]: 0, or -1 with a response. */
static int parse_timeline_path(const http_request *req, http_response *resp, strata_id *tenant,
                               strata_id *tl, const char **rest)
{
    const char *p = req->path + strlen("/v1/tenant/");
    char a[64], b[64];
    const char *slash = strchr(p, '/');
    if (slash == NULL || (size_t)(slash - p) >= sizeof a || strncmp(slash, "/timeline/", 10) != 0) {
        http_response_error(resp, 404, "expected /v1/tenant/<tenant_id>/timeline/<timeline_id>");
        return -1;
    }
    memcpy(a, p, (size_t)(slash - p));
    a[slash - p] = '\0';
    const char *q = slash + 10;
    const char *end = strchr(q, '/');
    size_t len = end ? (size_t)(end - q) : strlen(q);
    if (len >= sizeof b) {
        http_response_error(resp, 400, "invalid timeline_id: expected 32 hex digits");
        return -1;
    }
    memcpy(b, q, len);
    b[len] = '\0';
    *rest = end ? end : "";
    if (!strata_id_parse(a, tenant)) {
        http_response_error(resp, 400, "invalid tenant_id \"%s\": expected 32 hex digits", a);
        return -1;
    }
    if (!strata_id_parse(b, tl)) {
        http_response_error(resp, 400, "invalid timeline_id \"%s\": expected 32 hex digits", b);
        return -1;
    }
    return 0;
}

static timeline *get_or_404(ps_http *h, const strata_id *tenant, const strata_id *tlid,
                            http_response *resp)
{
    timeline *tl = tenants_get(h->tenants, tenant, tlid);
    if (tl == NULL) {
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

static void create_timeline(ps_http *h, const strata_id *tenant, const strata_id *tlid,
                            const http_request *req, http_response *resp)
{
    cJSON *body = http_request_json(req, resp);
    if (body == NULL)
        return;
    tenants_create_request cr = {0};
    const cJSON *e;
    if (!cJSON_IsObject(body)) {
        http_response_error(resp, 400, "the body must be a JSON object");
        goto out;
    }
    cJSON_ArrayForEach(e, body)
    {
        if (strcmp(e->string, "safekeepers") == 0) {
            if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) > TIMELINE_MAX_SAFEKEEPERS) {
                http_response_error(resp, 400,
                                    "\"safekeepers\" must be an array of at most %d "
                                    "\"host:port\" strings",
                                    TIMELINE_MAX_SAFEKEEPERS);
                goto out;
            }
            const cJSON *s;
            cJSON_ArrayForEach(s, e)
            {
                if (!cJSON_IsString(s)) {
                    http_response_error(resp, 400, "\"safekeepers\" entries must be strings");
                    goto out;
                }
                cr.safekeepers[cr.n_safekeepers++] = s->valuestring;
            }
        } else if (strcmp(e->string, "import_pgdata") == 0) {
            if (!cJSON_IsString(e) || e->valuestring[0] != '/') {
                http_response_error(resp, 400, "\"import_pgdata\" must be an absolute path");
                goto out;
            }
            cr.import_pgdata = e->valuestring;
        } else if (strcmp(e->string, "initdb") == 0) {
            if (!cJSON_IsBool(e)) {
                http_response_error(resp, 400, "\"initdb\" must be true or false");
                goto out;
            }
            cr.initdb = cJSON_IsTrue(e);
        } else {
            http_response_error(resp, 400,
                                "unknown field \"%s\" (expected safekeepers, "
                                "import_pgdata, initdb)",
                                e->string);
            goto out;
        }
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
    add_lsn(o, "lsn", lsn);
    http_response_json(resp, 201, o);
    cJSON_Delete(o);
out:
    cJSON_Delete(body);
}

static void on_timeline(const http_request *req, http_response *resp, void *arg)
{
    ps_http *h = arg;
    strata_id tenant, tlid;
    const char *rest;
    if (parse_timeline_path(req, resp, &tenant, &tlid, &rest) != 0)
        return;
    bool get = strcmp(req->method, "GET") == 0;
    if (strcmp(rest, "/rels") == 0 && get) {
        timeline *tl = get_or_404(h, &tenant, &tlid, resp);
        if (tl != NULL) {
            get_rels(h, tl, req, resp);
            timeline_unref(tl);
        }
        return;
    }
    if (rest[0] != '\0' && strcmp(rest, "/") != 0) {
        http_response_error(resp, 404, "no such endpoint: %s", req->path);
        return;
    }
    if (get) {
        timeline *tl = get_or_404(h, &tenant, &tlid, resp);
        if (tl != NULL) {
            cJSON *o = timeline_json(tl);
            timeline_unref(tl);
            http_response_json(resp, 200, o);
            cJSON_Delete(o);
        }
    } else if (strcmp(req->method, "POST") == 0) {
        create_timeline(h, &tenant, &tlid, req, resp);
    } else {
        int status = 500;
        char err[512];
        if (tenants_delete_timeline(h->tenants, &tenant, &tlid, &status, err, sizeof err) != 0) {
            http_response_error(resp, status, "%s", err);
            return;
        }
        http_response_set(resp, 200, NULL, "{}", 2);
    }
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

ps_http *ps_http_start(tenants *t, redo_pool *redo, pagecache *cache, const char *host, int port,
                       char *err, size_t errlen)
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
    h->server = http_server_new(&cfg, err, errlen);
    if (h->server == NULL)
        goto fail;
    if (http_server_route(h->server, "GET", "/v1/status", on_status, h) != 0 ||
        http_server_route(h->server, "GET", "/v1/tenant/", on_timeline, h) != 0 ||
        http_server_route(h->server, "POST", "/v1/tenant/", on_timeline, h) != 0 ||
        http_server_route(h->server, "DELETE", "/v1/tenant/", on_timeline, h) != 0) {
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
