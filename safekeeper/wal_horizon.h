/*
 * wal_horizon.h: how far a safekeeper may forget WAL -- the local removal
 * horizon (docs/design.md §5.5) and the WAL backup's deletion horizon --
 * as pure functions of the values its control file holds.
 *
 * For: the rules, in one place, so that unit tests pin them and the
 * housekeeping (housekeeping.c) and the backup worker (wal_backup.c) share
 * them.  Not for: IO; the callers remove segments and delete objects.
 * Both return LSN_INVALID (0) for "keep everything".
 */
#ifndef STRATA_SAFEKEEPER_WAL_HORIZON_H
#define STRATA_SAFEKEEPER_WAL_HORIZON_H

#include <stdbool.h>

#include "base/lsn.h"
#include "safekeeper/acceptor.h"

/* Where a restart starts decoding: the stored min(commit_lsn, flush_lsn),
 * not below timeline_start_lsn (§5.4).  Its segment must stay. */
lsn_t wal_horizon_scan_start(const acceptor_persistent_state *st);

/*
 * The LSN below which whole local segments may be removed, from the
 * persisted state st:
 *   min(pageserver disk_consistent_lsn, remote_consistent_lsn, commit_lsn,
 *       the restart scan start,
 *       backup ? the WAL backup LSN : the proposer's truncate_lsn)
 * Nothing while the pageserver has not reported its disk position, and
 * nothing while it has but its remote position is 0: every pageserver
 * reports a remote position (its disk position when it does not upload),
 * so 0 there means a seeded control file that did not learn it, and the
 * WAL between the two may be covered by no manifest.
 * With the backup on, a peer that lags behind fetches from the object
 * store, so the peer horizon does not hold local WAL (one dead safekeeper
 * must not stop the others at --max-wal-bytes); without it the peers'
 * WAL is the lagging one's only source, and truncate_lsn holds it.
 */
lsn_t wal_horizon_removal(const acceptor_persistent_state *st, bool backup);

/*
 * The LSN below which no one needs WAL from the WAL backup any more:
 *   min(pageserver remote_consistent_lsn, disk_consistent_lsn, commit_lsn,
 *       the proposer's truncate_lsn)
 * A pageserver restored from its newest manifest (remote_consistent_lsn)
 * reads the WAL after it from the safekeepers or the backup; a lagging
 * safekeeper catches up from its flush position on, which truncate_lsn
 * (the lowest flush of every configured acceptor, frozen while one has not
 * reported) never passes.  The backup deletes whole segments below it (and
 * below its own backup LSN).
 * Nothing until every input was reported.
 */
lsn_t wal_horizon_backup_unneeded(const acceptor_persistent_state *st);

#endif
