/*
 * term_history.h: a timeline's term history -- which Paxos term wrote the
 * WAL from which LSN on (docs/design.md §4) -- and the pure rules read off it.
 *
 * For: the type both sides of WAL push hold (acceptor, proposer, CLI, the
 * control file) and the two questions they ask of it.  Not for: its wire
 * or disk encoding (walpush.c, sk_control.c) or deciding elections
 * (safekeeper/acceptor.c, compute/walproposer/proposer.c).
 * Pure: libc only, no allocation, no state.
 */
#ifndef STRATA_PROTO_TERM_HISTORY_H
#define STRATA_PROTO_TERM_HISTORY_H

#include <stdbool.h>
#include <stdint.h>

#include "base/lsn.h"

/* Most entries a term history may hold; a longer one is a protocol error. */
#define TERM_HISTORY_MAX 256

/* The term that wrote WAL from lsn on (until the next entry's lsn). */
typedef struct term_switch {
    uint64_t term;
    lsn_t lsn;
} term_switch;

/* Entries in strictly increasing term order, lsn non-decreasing. */
typedef struct term_history {
    uint32_t n;
    term_switch entries[TERM_HISTORY_MAX];
} term_history;

/* The term of the last entry whose lsn <= flush_lsn, or 0 if none. */
uint64_t term_history_last_log_term(const term_history *h, lsn_t flush_lsn);

/* True if entries are strictly increasing in term, non-decreasing in lsn. */
bool term_history_valid(const term_history *h);

#endif
