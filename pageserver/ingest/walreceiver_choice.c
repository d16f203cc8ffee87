/*
 * walreceiver_choice.c: the WAL receiver's choice of safekeeper (see
 * walreceiver_choice.h for the rules).
 *
 * Not for: anything that touches the network or reads the clock.
 */
#include "pageserver/ingest/walreceiver_choice.h"

#include <assert.h>
#include <stddef.h>

/* walreceiver_choice_best, with candidate exclude (-1 none) left out. */
static int best_except(const walreceiver_candidate *cand, int n, int exclude, int avoid)
{
    assert(n >= 0 && (n == 0 || cand != NULL));
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (i == exclude || !cand[i].answered)
            continue;
        /* In index order: a later candidate wins only by being further
         * ahead, or by being level with the one to avoid. */
        if (best < 0 || cand[i].xlogpos > cand[best].xlogpos ||
            (cand[i].xlogpos == cand[best].xlogpos && best == avoid))
            best = i;
    }
    return best;
}

int walreceiver_choice_best(const walreceiver_candidate *cand, int n, int avoid)
{
    return best_except(cand, n, -1, avoid);
}

walreceiver_switch walreceiver_choice_switch(const walreceiver_candidate *cand, int n, int avoid,
                                             const walreceiver_source *cur,
                                             uint64_t switch_lag_bytes, uint32_t probe_interval_ms,
                                             uint64_t now_ms)
{
    assert(cur != NULL && cur->index >= 0 && cur->index < n);
    walreceiver_switch out = {.reason = WALRECEIVER_STAY, .target = -1, .ahead_by = 0};
    int best = best_except(cand, n, cur->index, avoid);
    if (best < 0)
        return out;
    lsn_t other = cand[best].xlogpos;
    /* A clock that went backwards (it should not: callers use a monotonic
     * one) makes the source look fresh, never idle. */
    bool idle = now_ms >= cur->advanced_ms && now_ms - cur->advanced_ms >= probe_interval_ms;
    bool lagging = other > cur->received && other - cur->received > switch_lag_bytes;
    bool stalled = idle && other > cur->offered;
    if (!lagging && !stalled)
        return out;
    out.reason = lagging ? WALRECEIVER_SWITCH_LAGGING : WALRECEIVER_SWITCH_STALLED;
    out.target = best;
    out.ahead_by = other > cur->received ? other - cur->received : 0;
    return out;
}

bool walreceiver_choice_probe_due(uint64_t skip_until_ms, uint64_t now_ms)
{
    return now_ms >= skip_until_ms;
}

uint64_t walreceiver_choice_probe_backoff(uint64_t now_ms)
{
    return now_ms + WALRECEIVER_PROBE_BACKOFF_MS;
}

const char *walreceiver_choice_reason_name(walreceiver_switch_reason r)
{
    switch (r) {
    case WALRECEIVER_SWITCH_LAGGING:
        return "lagging";
    case WALRECEIVER_SWITCH_STALLED:
        return "stalled";
    case WALRECEIVER_STAY:
        break;
    }
    return "stay";
}
