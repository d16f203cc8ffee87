/*
 * walsender.h: the safekeeper's side of standard physical replication
 * (START_REPLICATION), for pg_receivewal, a stock standby's walreceiver
 * and the pageserver (docs/design.md §3.3).
 *
 * Streams XLogData ('w') of WAL only up to the timeline's committed end
 * (min(commit_lsn, flush_lsn)), or up to flush_lsn when started with a term
 * equal to the safekeeper's current term (sync-safekeepers reading a donor).
 * Chunks are at most 128 KB.  Sends keepalives ('k') periodically and when a
 * status update asks for one.  Accepts standby status updates ('r'),
 * hot-standby feedback ('h') and the pageserver's feedback ('z' + three
 * LSNs), which is stored per timeline and feeds the WAL removal horizon --
 * but only from a connection that walsender_start was told is the
 * pageserver's (see conn.c, may_move_horizon); any other sender's 'z' is
 * dropped, logged once per connection and counted
 * (safekeeper_ps_feedback_ignored_total), and its streaming goes on.
 * A standby's status updates with an apply position feed the lag series
 * safekeeper_standby_replay_lag_bytes and safekeeper_standby_apply_lsn
 * (labels tenant_id, timeline_id, application_name).
 * Production stops while the connection is congested and resumes from
 * on_writable.
 *
 * For: a safekeeper's replication connections.
 * Not for: command parsing (conn.c), WAL storage (wal_store.h) or the
 * message layouts (proto/replication.h).
 * Threading: loop thread only.
 */
#ifndef STRATA_SAFEKEEPER_WALSENDER_H
#define STRATA_SAFEKEEPER_WALSENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "net/pgwire.h"
#include "safekeeper/timeline.h"

typedef struct sk_sender sk_sender;

/* Largest XLogData payload (WAL bytes) per message. */
#define WALSENDER_MAX_CHUNK (128 * 1024)
/* What the pageserver's walreceiver sends as application_name; without
 * token auth it is what marks a connection as the pageserver's. */
#define SK_PAGESERVER_APPLICATION_NAME "strata_pageserver"
/* Keepalive period when nothing else is sent. */
#define WALSENDER_KEEPALIVE_MS 10000

/*
 * Starts streaming from start on tl to c (in a query: this sends either an
 * ErrorResponse and returns -1, or CopyBothResponse and returns 0 with
 * *out set).  with_term: stream up to flush_lsn, allowed only while the
 * safekeeper's term equals term.  ps_feedback_trusted: the connection is the
 * pageserver's, so its feedback may move the WAL removal horizon.
 */
int walsender_start(sk_timeline *tl, pgwire_conn *c, lsn_t start, bool with_term, uint64_t term,
                    bool ps_feedback_trusted, sk_sender **out);

/* One CopyData from the client. */
void walsender_on_copy_data(sk_sender *s, const uint8_t *data, size_t n);
/* The client ended copy mode. */
void walsender_on_copy_done(sk_sender *s);
/* The connection drained below its low watermark. */
void walsender_on_writable(sk_sender *s);
/* The timeline's positions moved: send what became available. */
void walsender_wake(sk_sender *s);
/* The connection closed: unregisters and frees s (after its timer closed). */
void walsender_closed(sk_sender *s);

#endif
