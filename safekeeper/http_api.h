/*
 * http_api.h: the safekeeper's HTTP endpoints on common/http.h.
 *
 *   GET /v1/status                          node id, connections, every timeline
 *   GET /v1/tenant/<tenant>/timeline/<tl>   one timeline (404 if unknown)
 *   GET /metrics                            Prometheus text (built into common/http)
 *
 * Handlers run on the HTTP thread and read only the snapshot the loop
 * publishes (sk_node_snapshot) and the node id, which never changes.
 */
#ifndef STRATA_SAFEKEEPER_HTTP_API_H
#define STRATA_SAFEKEEPER_HTTP_API_H

#include <stddef.h>

#include "common/http.h"
#include "safekeeper/timeline.h"

/* Creates, routes and starts the server on host:port.  NULL with err. */
http_server *sk_http_start(sk_node *node, const char *host, int port, char *err, size_t errlen);

#endif
