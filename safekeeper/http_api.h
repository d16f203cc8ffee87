/*
 * http_api.h: the safekeeper's HTTP endpoints on common/net/http.h.
 *
 *   GET /v1/status                          node id, connections, every timeline
 *   GET /v1/tenant                          every tenant holding a timeline here, with
 *                                           its timeline count
 *   GET /v1/tenant/<tenant>/timeline        that tenant's timelines (404 if it has none)
 *   GET /v1/tenant/<tenant>/timeline/<tl>   one timeline (404 if unknown)
 *   GET /metrics                            Prometheus text (built into common/http)
 * No DELETE (405): a safekeeper's timelines live on its event loop and
 * hold WAL that may not be on the pageserver yet; removing one is not an
 * HTTP-thread operation (see docs/operations.md).  Timelines are created
 * by the first START_WAL_PUSH that names them.
 * With an auth store, everything but /v1/status and /metrics needs the
 * admin token (common/net/auth.h).
 *
 * Handlers run on the HTTP thread and read only the snapshot the loop
 * publishes (sk_node_snapshot) and the node id, which never changes.
 *
 * For: the safekeeper's HTTP endpoints.  Not for: rendering /metrics
 * (common/net/http) or the timelines' state itself (timeline.h).
 */
#ifndef STRATA_SAFEKEEPER_HTTP_API_H
#define STRATA_SAFEKEEPER_HTTP_API_H

#include <stddef.h>

#include "net/auth.h"
#include "net/http.h"
#include "safekeeper/timeline.h"

/* Creates, routes and starts the server on host:port.  auth may be NULL
 * (trust); it must outlive the server.  NULL with err. */
http_server *sk_http_start(sk_node *node, auth_store *auth, const char *host, int port, char *err,
                           size_t errlen);

#endif
