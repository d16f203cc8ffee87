/*
 * wal_horizon.c: the local WAL removal horizon and the WAL backup's deletion
 * horizon.  See wal_horizon.h.
 *
 * For: the two horizon functions.  Not for: IO (the callers remove and
 * delete).
 */
#include "safekeeper/wal_horizon.h"

static lsn_t lsn_min(lsn_t a, lsn_t b)
{
    return a < b ? a : b;
}

lsn_t wal_horizon_scan_start(const acceptor_persistent_state *st)
{
    lsn_t start = lsn_min(st->commit_lsn, st->flush_lsn);
    return start < st->timeline_start_lsn ? st->timeline_start_lsn : start;
}

lsn_t wal_horizon_removal(const acceptor_persistent_state *st, bool backup)
{
    const pageserver_feedback *fb = &st->ps_feedback;
    if (fb->disk_consistent_lsn == LSN_INVALID || fb->remote_consistent_lsn == LSN_INVALID)
        return LSN_INVALID;
    lsn_t h = lsn_min(fb->disk_consistent_lsn, fb->remote_consistent_lsn);
    h = lsn_min(h, st->commit_lsn);
    h = lsn_min(h, wal_horizon_scan_start(st));
    /* With the backup, WAL leaves only once it is in the store (0: none of
     * it yet); without it, only once every peer holds it. */
    h = lsn_min(h, backup ? st->backup_lsn : st->truncate_lsn);
    return h;
}

lsn_t wal_horizon_backup_unneeded(const acceptor_persistent_state *st)
{
    const pageserver_feedback *fb = &st->ps_feedback;
    lsn_t h = lsn_min(fb->remote_consistent_lsn, fb->disk_consistent_lsn);
    h = lsn_min(h, st->commit_lsn);
    return lsn_min(h, st->truncate_lsn);
}
