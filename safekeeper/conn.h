/*
 * conn.h: the safekeeper's Postgres-protocol front door.
 *
 * Accepts connections through common/pgwire, resolves the tenant and
 * timeline from the startup options (-c tenant_id=<hex> -c timeline_id=<hex>)
 * and dispatches the commands a safekeeper understands (see README.md):
 * START_WAL_PUSH (to timeline.h), IDENTIFY_SYSTEM, SHOW, TIMELINE_HISTORY,
 * START_REPLICATION (to walsender.h) and TIMELINE_STATUS.
 *
 * For: a safekeeper's Postgres-protocol connections.
 * Not for: protocol framing (pgwire) or consensus (acceptor).  Loop thread.
 */
#ifndef STRATA_SAFEKEEPER_CONN_H
#define STRATA_SAFEKEEPER_CONN_H

#include <stddef.h>

#include "net/pgwire.h"
#include "safekeeper/timeline.h"

/* Starts listening per cfg; NULL with a message in err on failure. */
pgwire_server *sk_conn_server_start(sk_node *node, const pgwire_config *cfg, char *err,
                                    size_t errlen);

#endif
