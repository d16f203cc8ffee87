/*
 * walreceiver_choice.h: which safekeeper the WAL receiver streams from, as
 * pure functions of what the probes saw and the clock value passed in.
 *
 * For: the policy of walreceiver.c, kept free of connections and of the
 * clock so that unit tests can drive it through any sequence of positions
 * and times (tests/unit/test_walreceiver_choice.c).  The rules:
 *
 *   - On (re)connect: the answering safekeeper with the highest xlogpos
 *     (IDENTIFY_SYSTEM's commit LSN); on a tie, any other than the one whose
 *     stream failed last.
 *   - While streaming, after each probe of the others: switch to the best
 *     of them when the current source is *lagging* (the other's xlogpos is
 *     more than switch_lag_bytes beyond what was received) or *stalled* (what
 *     the source offers has not moved for a whole probe interval while the
 *     other has committed more; a safekeeper outside the last commit's
 *     majority learns the commit LSN only from the next compute).  Neither
 *     rule fires for a peer at the same position, so two safekeepers that
 *     keep level are not switched between.
 *   - A safekeeper that fails a probe while streaming is not probed again for
 *     WALRECEIVER_PROBE_BACKOFF_MS, so a dead one does not stall the stream
 *     for a connect timeout at every probe.
 *
 * Not for: probing (connections, IDENTIFY_SYSTEM) or streaming, which stay in
 * walreceiver.c and feed these functions.  No state, no I/O; any thread.
 */
#ifndef STRATA_PAGESERVER_WALRECEIVER_CHOICE_H
#define STRATA_PAGESERVER_WALRECEIVER_CHOICE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/lsn.h"

/* How long a safekeeper that failed a probe is left out of later probes. */
#define WALRECEIVER_PROBE_BACKOFF_MS 30000

/* What one probe learnt of one safekeeper. */
typedef struct walreceiver_candidate {
    bool answered; /* false: unreachable, failed, or not probed (excluded, backing off) */
    lsn_t xlogpos; /* its commit LSN, when answered */
} walreceiver_candidate;

/*
 * The answering candidate with the highest xlogpos among cand[0..n), or -1
 * if none answered.  Among equals the lowest index wins, except that
 * avoid (the safekeeper whose stream failed last, -1 none) is taken only
 * when no other candidate is level with it.
 */
int walreceiver_choice_best(const walreceiver_candidate *cand, int n, int avoid);

/* The source being streamed from, as the receiver tracks it. */
typedef struct walreceiver_source {
    int index;            /* its index in the candidate array */
    lsn_t received;       /* end of the last record received from it */
    lsn_t offered;        /* the highest wal_end it has sent (its commit LSN) */
    uint64_t advanced_ms; /* when offered last moved (or the stream started) */
} walreceiver_source;

typedef enum walreceiver_switch_reason {
    WALRECEIVER_STAY = 0,
    WALRECEIVER_SWITCH_LAGGING,
    WALRECEIVER_SWITCH_STALLED,
} walreceiver_switch_reason;

typedef struct walreceiver_switch {
    walreceiver_switch_reason reason;
    int target;        /* safekeeper to switch to; -1 when staying */
    uint64_t ahead_by; /* target's xlogpos - received (0 when not ahead) */
} walreceiver_switch;

/*
 * After a probe while streaming from cur: whether to leave cur, and for
 * which safekeeper.  cand[0..n) holds the probe's results; cur->index is
 * not considered a candidate whatever its entry says.  avoid is as for
 * walreceiver_choice_best.  now_ms is the time the probe *started* (on the
 * clock advanced_ms was taken from), so that a slow probe does not itself
 * count as the source being idle.
 */
walreceiver_switch walreceiver_choice_switch(const walreceiver_candidate *cand, int n, int avoid,
                                             const walreceiver_source *cur,
                                             uint64_t switch_lag_bytes, uint32_t probe_interval_ms,
                                             uint64_t now_ms);

/* Whether a safekeeper that failed a probe (backing off until skip_until_ms,
 * 0 if never) is probed at now_ms. */
bool walreceiver_choice_probe_due(uint64_t skip_until_ms, uint64_t now_ms);

/* The skip_until_ms of a safekeeper that failed a probe at now_ms. */
uint64_t walreceiver_choice_probe_backoff(uint64_t now_ms);

/* "lagging", "stalled" or "stay". */
const char *walreceiver_choice_reason_name(walreceiver_switch_reason r);

#endif
