/*
 * wp_edge.h: the edge logic shared by the two drivers of the proposer core,
 * the walproposer background worker (compute/extension/walproposer_pg.c)
 * and strata-sync-safekeepers (sync_safekeepers.c).
 *
 * Both connect to every safekeeper the same way, back off the same way
 * after a failure and turn the core's SEND and APPEND effects into CopyData
 * on a pqstream the same way; that lives here, once.
 *
 * Not for: the Paxos rules (proposer.h), the libpq mechanics (pqstream.h),
 * where WAL comes from, logging or timers (each driver has its own: ereport
 * and TimestampTz in Postgres, stderr and a monotonic clock outside).
 * Uses libc, libpq and proto/walpush only, so it is compiled into both
 * strata.so and strata-sync-safekeepers.  No state of its own.
 */
#ifndef STRATA_WALPROPOSER_WP_EDGE_H
#define STRATA_WALPROPOSER_WP_EDGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "compute/walproposer/pqstream.h"
#include "proto/walpush.h"

/*
 * libpq parameters and start query of a WAL-push connection to one
 * safekeeper.  keys/vals are NULL-terminated, ready for pqstream_start; they
 * point into this struct and into the strings given to
 * wp_edge_safekeeper_params, which must outlive the pqstream_start call.
 */
typedef struct wp_edge_params {
    char options[128];
    char connect_timeout[16];
    char query[128]; /* START_WAL_PUSH; a caller may replace it */
    const char *keys[PQSTREAM_MAX_PARAMS];
    const char *vals[PQSTREAM_MAX_PARAMS];
} wp_edge_params;

/*
 * Fills p for safekeeper host:port serving tenant/timeline.  password NULL
 * or "" sends none; connect_timeout_s is at least 1.
 */
void wp_edge_safekeeper_params(wp_edge_params *p, const char *host, const char *port,
                               const strata_id *tenant, const strata_id *timeline,
                               const char *application_name, int connect_timeout_s,
                               const char *password);

/*
 * The delay before the next connection attempt after a failure: min_ms for
 * the first failure of a series, else twice prev_ms, at most max_ms.
 * up_ms is how long the connection that just failed had been streaming (0
 * if it never got there); one that lasted more than max_ms starts a new
 * series, so a safekeeper that accepts and then fails at once is not
 * hammered.
 */
uint32_t wp_edge_backoff(uint32_t prev_ms, uint64_t up_ms, uint32_t min_ms, uint32_t max_ms);

typedef enum wp_edge_send_result {
    WP_EDGE_SENT = 0,
    WP_EDGE_SEND_FAILED,   /* the stream closed; reason in pqstream_error() */
    WP_EDGE_ENCODE_FAILED, /* the message is invalid or does not fit scratch: a bug */
} wp_edge_send_result;

/* Encodes msg into scratch (cap bytes) and queues it on the STREAMING s. */
wp_edge_send_result wp_edge_send(pqstream *s, const proposer_msg *msg, uint8_t *scratch,
                                 size_t cap);

/*
 * Builds the AppendRequest of the core's APPEND effect ar, carrying WAL
 * [begin_lsn, end_lsn) that the caller has read into wal (end_lsn - begin_lsn
 * bytes, which must outlive *out).  False if ar is not a valid append.
 */
bool wp_edge_append_msg(const append_request *ar, const uint8_t *wal, proposer_msg *out);

/*
 * Takes the lowest acceptor index out of the failed bitmask; -1 when none
 * is set.  Drivers collect failures while running the core's effects and
 * report them one at a time, because each report produces new effects.
 */
int wp_edge_take_failed(uint32_t *failed);

#endif
