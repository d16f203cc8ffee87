/*
 * http_api.h: the pageserver's HTTP admin API and /metrics (docs/design.md §3.7).
 *
 *   GET    /v1/status                                  every timeline: LSNs, WAL receiver
 *   POST   /v1/tenant                                  create a tenant: {} (new random id) or
 *                                                      {"tenant_id": "<hex>"}; answers its id
 *   GET    /v1/tenant                                  every tenant with its timeline count
 *   GET    /v1/tenant/<t>                              one tenant
 *   DELETE /v1/tenant/<t>                              delete a tenant with no timelines (409
 *                                                      while it has some)
 *   GET    /v1/tenant/<t>/timeline                     the tenant's timelines (as below)
 *   POST   /v1/tenant/<t>/timeline                     create with "timeline_id" in the body
 *                                                      (or a new random id); the tenant must
 *                                                      exist; other fields as below
 *   POST   /v1/tenant/<t>/timeline/<tl>                create: {"safekeepers": ["h:p", ...],
 *                                                      "import_pgdata": "/dir"} or
 *                                                      {"initdb": true}; creates the tenant
 *                                                      when missing; answers {"lsn": "X/Y",
 *                                                      "tenant_id", "timeline_id"}
 *   GET    /v1/tenant/<t>/timeline/<tl>                LSNs, store counters, WAL receiver
 *                                                      (safekeeper streamed from, errors),
 *                                                      gc {horizon, runs, removed, ...}
 *   DELETE /v1/tenant/<t>/timeline/<tl>                delete
 *   GET    /v1/tenant/<t>/timeline/<tl>/rels?lsn=X/Y   every relation fork existing at that LSN
 *                                                      (default: last_record_lsn) with nblocks;
 *                                                      400 below the GC horizon
 *   GET    /metrics                                    Prometheus text
 * Errors are JSON {"error": "..."} with 400 (malformed), 404 (unknown), 409
 * (exists), 500 (failure); a malformed request changes nothing.  With an
 * auth store, everything but GET /v1/status and /metrics needs the admin
 * token as "Authorization: Bearer" (401 without, 403 with another token).
 *
 * Not for: the page service, or deciding what a timeline is (tenants.h).
 *
 * Threads: handlers run on the HTTP server's thread (common/net/http.h) and use
 * only thread-safe calls (tenants.h, timeline.h reads).  A refresh thread
 * copies store, redo, page-cache and per-timeline figures into the metrics
 * registry every 500 ms, so /metrics is at most that stale for them.
 */
#ifndef STRATA_PAGESERVER_HTTP_API_H
#define STRATA_PAGESERVER_HTTP_API_H

#include <stddef.h>

#include "net/auth.h"
#include "pageserver/cache/pagecache.h"
#include "pageserver/redo/redo.h"
#include "pageserver/timeline/tenants.h"

typedef struct ps_http ps_http;

/* Starts listening on host:port.  redo and cache may be NULL.  All must
 * outlive the server.  NULL with err on failure. */
ps_http *ps_http_start(tenants *t, redo_pool *redo, pagecache *cache, auth_store *auth,
                       const char *host, int port, char *err, size_t errlen);

int ps_http_port(const ps_http *h);

/* Stops the HTTP thread and the refresh thread (waiting for a running
 * handler) and frees. */
void ps_http_stop(ps_http *h);

#endif
