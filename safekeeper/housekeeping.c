/*
 * housekeeping.c: a safekeeper's periodic work on each of its timelines
 * (every --housekeeping-ms), part of the timeline module (timeline_priv.h).
 *
 * For: lazy control-file saves (commit, truncate and flush positions, the
 * pageserver's feedback, the backup LSN), WAL removal below the horizon
 * (wal_horizon.h, docs/design.md §5.5), the WAL backup's position and this
 * node's turn to upload, and the last save at shutdown.
 * Not for: the horizon rules themselves (wal_horizon.c), uploading
 * (wal_backup.c) or the effects the core asks for (timeline.c).
 * Saves and removals happen only between outputs, so the in-memory state
 * matches the effects executed so far.
 */
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "proto/sk_control.h"
#include "safekeeper/timeline_priv.h"
#include "safekeeper/wal_horizon.h"

static bool lazy_fields_changed(const acceptor_persistent_state *a,
                                const acceptor_persistent_state *b)
{
    return a->commit_lsn != b->commit_lsn || a->truncate_lsn != b->truncate_lsn ||
           a->flush_lsn != b->flush_lsn || a->backup_lsn != b->backup_lsn ||
           memcmp(&a->ps_feedback, &b->ps_feedback, sizeof a->ps_feedback) != 0;
}

/* This safekeeper's turn among the timeline's safekeepers to upload a
 * closed segment (wal_backup.h): its place in the configuration's members
 * (a replacement takes the replaced node's place), or, before any
 * configuration, (node id - 1) mod 3. */
static uint32_t backup_rank(const sk_timeline *tl)
{
    const membership *m = &acceptor_state(&tl->acc)->mconf;
    for (uint32_t i = 0; i < m->n_members; i++)
        if (m->members[i].node_id == tl->node->node_id)
            return i;
    return tl->node->node_id == 0 ? 0 : (uint32_t)((tl->node->node_id - 1) % 3);
}

/* Tells the WAL backup how far the WAL is committed and takes back how far
 * it is backed up (into the state the next control-file save stores). */
void sk_housekeeping_backup_tick(sk_timeline *tl)
{
    if (tl->backup == NULL)
        return;
    wal_backup_position pos = {.seg_size = acceptor_state(&tl->acc)->wal_seg_size,
                               .committed = acceptor_commit_lsn(&tl->acc),
                               .oldest_local = sk_timeline_oldest_segment(tl),
                               .unneeded = wal_horizon_backup_unneeded(&tl->persisted),
                               .rank = backup_rank(tl)};
    wal_backup_update(tl->backup, &pos);
    wal_backup_status bs;
    wal_backup_get(tl->backup, &bs);
    acceptor_set_backup_lsn(&tl->acc, bs.backup_lsn);
}

static void housekeep_timeline(sk_timeline *tl)
{
    /* Also while a message executes: the backup LSN only goes into the
     * in-memory state, which the next save stores. */
    sk_housekeeping_backup_tick(tl);
    if (tl->failed || tl->executing)
        return;
    const acceptor_persistent_state *st = acceptor_state(&tl->acc);
    /* Only between outputs: then the in-memory state matches the effects
     * executed so far, and only the lazily-kept fields differ. */
    if (lazy_fields_changed(st, &tl->persisted)) {
        int rc = sk_control_write(tl->dir, st);
        if (rc != 0) {
            sk_timeline_fail(tl, "could not write the control file", rc);
            return;
        }
        tl->persisted = *st;
    }
    tl->wal_bytes = sk_timeline_wal_bytes(tl);
    /* WAL removal horizon (docs/design.md §5.5), from persisted values only;
     * only while no write or sync round runs. */
    if (tl->ws == NULL || !wal_store_idle(tl->ws))
        return;
    lsn_t horizon = wal_horizon_removal(&tl->persisted, tl->backup != NULL);
    if (horizon == LSN_INVALID)
        return; /* keep everything */
    int removed = wal_store_remove_below(tl->ws, horizon);
    if (removed != 0) {
        tl->oldest_cached = LSN_INVALID; /* looked up again */
        tl->wal_bytes = sk_timeline_wal_bytes(tl);
    }
    if (removed > 0) {
        char name[80], h[LSN_FMT_LEN];
        log_info("removed %d WAL segments of %s below horizon %s", removed,
                 sk_timeline_name(tl, name, sizeof name), lsn_format(horizon, h));
        metrics_counter_add(tl->node->metrics.wal_segments_removed, (uint64_t)removed);
    } else if (removed < 0) {
        log_warn("WAL removal failed: %s", strerror(-removed));
    }
}

void sk_housekeeping_on_timer(uv_timer_t *t)
{
    sk_node *node = t->data;
    for (int i = 0; i < node->n_timelines; i++)
        housekeep_timeline(node->timelines[i]);
    sk_node_publish(node);
}

void sk_housekeeping_final_save(sk_timeline *tl)
{
    if (!tl->failed && !tl->executing &&
        lazy_fields_changed(acceptor_state(&tl->acc), &tl->persisted))
        sk_control_write(tl->dir, acceptor_state(&tl->acc));
}
