/*
 * page_service.h: the pageserver's Postgres-protocol endpoint for computes
 * (docs/design.md §3.4): `pagestream_v1 <tenant> <timeline>` then CopyBoth, one
 * pagestream request (proto/pagestream.h) per CopyData.
 *
 * For: accepting connections (common/net/pgwire.h on the daemon's libuv loop),
 * applying the LSN rules, running requests on a bounded worker pool and
 * answering them in order per connection.  Per connection at most
 * pipeline_depth requests are in flight; beyond that (or while the output
 * queue is congested) input is paused, which is the backpressure a pipelining
 * client feels.  A request whose not_modified_since is beyond what was
 * ingested is parked on the loop thread (no worker blocked) until the WAL
 * arrives or wait_lsn_timeout_ms passes.
 * A malformed request gets a PS_RESP_ERROR (SQLSTATE 08P01) after the
 * responses before it, then a FATAL ErrorResponse, and the connection
 * closes; other connections are unaffected.  Other failures (LSN rules,
 * missing relation, redo failure, timeout) get a PS_RESP_ERROR and the
 * connection goes on.
 * Not for: basebackup (a later command on the same listener), page reads
 * themselves (timeline.h).
 *
 * Threads: start/stop and every callback run on the loop's thread; worker
 * threads only run timeline reads and hand results back through a uv_async.
 * Reads that need neither redo nor a scan (Exists, Nblocks, a GetPage whose
 * newest version is an image or is in the page cache) are answered on the
 * loop thread itself, without a hand-off (unless no_inline).
 *
 * Lifetime: page_service_stop() stops listening, closes every connection,
 * stops the workers (waiting for requests already running), and frees the
 * service once its handles are closed: keep running the loop.  The tenants
 * set must outlive the loop run.
 */
#ifndef STRATA_PAGESERVER_PAGE_SERVICE_H
#define STRATA_PAGESERVER_PAGE_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "pageserver/timeline/tenants.h"

typedef struct page_service page_service;

/* Zero fields take the default in brackets. */
typedef struct page_service_options {
    const char *host;             /* ["127.0.0.1"] */
    int port;                     /* 0 = ephemeral */
    int workers;                  /* worker threads [4] */
    int pipeline_depth;           /* requests in flight per connection [32] (max 1024) */
    uint32_t wait_lsn_timeout_ms; /* [60000] */
    int max_connections;          /* [100] */
    bool no_inline;               /* every read on a worker (comparisons, tests) [false: cheap
                                     reads are answered on the loop thread] */
} page_service_options;

/* Binds and listens.  NULL with err on failure (address in use, threads). */
page_service *page_service_start(uv_loop_t *loop, tenants *t, const page_service_options *o,
                                 char *err, size_t errlen);

int page_service_port(const page_service *ps);

/* See the lifetime note above.  ps must not be used after this call. */
void page_service_stop(page_service *ps);

#endif
