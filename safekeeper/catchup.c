/*
 * catchup.c: a safekeeper timeline's catch-up from the WAL backup
 * (docs/design.md §5.7), part of the timeline module (timeline_priv.h).
 *
 * A safekeeper that was down while its peers removed WAL cannot be streamed
 * its gap by a compute that no longer holds it (a new compute starts at its
 * basebackup; pg_wal keeps wal_keep_size).  After each ProposerElected it
 * takes, with --remote, the safekeeper reads the segments from its end of
 * WAL on from the store, one at a time, while the store holds them whole:
 * committed WAL, byte-identical on every safekeeper.  The bytes before its
 * end in the first segment must equal its own (else it is another history
 * and nothing is taken).  They go through the acceptor core like appends
 * (acceptor_append_recovered) and the usual group commit.  Proposer
 * messages wait meanwhile; once something was taken, the proposer's
 * connection is closed so that it reconnects and streams from the new end.
 *
 * For: the fetches (on libuv's thread pool), the prefix check and feeding
 * the fetched WAL to the core.  Not for: running the effects (timeline.c)
 * or talking to the object store (wal_backup.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/sqlstate.h"
#include "base/strata_assert.h"
#include "proto/walpush.h"
#include "safekeeper/timeline_priv.h"

static void recover_work(uv_work_t *req)
{
    sk_timeline *tl = req->data;
    uint32_t seg = tl->recover_seg; /* not the core: the loop owns it */
    tl->recover_buf = NULL;
    /* The first one only if the store also has the next: its end of WAL
     * then moves at least to the next segment (else the proposer streams). */
    bool first = tl->recover_segno == tl->recover_from / seg;
    tl->recover_rc =
        wal_backup_fetch(tl->node->backup, &tl->tenant_id, &tl->timeline_id, seg, tl->recover_segno,
                         first, &tl->recover_buf, tl->recover_err, sizeof tl->recover_err);
}

static void recover_end(sk_timeline *tl)
{
    STRATA_ASSERT(!tl->recover_fetching);
    free(tl->recover_buf);
    tl->recover_buf = NULL;
    tl->recovering = false;
    sk_pusher *p = tl->recover_for;
    tl->recover_for = NULL;
    if (!tl->recovered_any || tl->failed)
        return;
    /* A record longer than what was fetched: the proposer truncates the
     * partial tail at its next ProposerElected, which must not fetch the
     * same again. */
    if (acceptor_written_record_end(&tl->acc) <= tl->recover_from)
        tl->recover_stuck_at = tl->recover_from;
    char name[80], e[LSN_FMT_LEN];
    log_info("timeline %s: caught up from the WAL backup to %s",
             sk_timeline_name(tl, name, sizeof name), lsn_format(acceptor_write_lsn(&tl->acc), e));
    if (p == NULL || p->conn == NULL)
        return;
    /* Its appends (queued or coming) start at the old end. */
    if (p->queued) {
        sk_pusher **pp = &tl->queue_head, *prev = NULL;
        while (*pp != p) {
            prev = *pp;
            pp = &(*pp)->next_queued;
        }
        *pp = p->next_queued;
        if (tl->queue_tail == p)
            tl->queue_tail = prev;
        p->queued = false;
        p->next_queued = NULL;
        sk_pusher_free_message(p);
    }
    sk_fatal_to(
        p->conn, SQLSTATE_ADMIN_SHUTDOWN,
        "this safekeeper caught up from the WAL backup: reconnect to stream from its new end",
        NULL);
}

/* Whether the WAL this safekeeper holds in the fetched segment, below its
 * end, is the same as the store's. */
static bool recover_prefix_matches(sk_timeline *tl)
{
    uint32_t seg = acceptor_state(&tl->acc)->wal_seg_size;
    lsn_t seg_start = tl->recover_segno * seg;
    lsn_t end = acceptor_write_lsn(&tl->acc);
    lsn_t from = acceptor_state(&tl->acc)->timeline_start_lsn;
    STRATA_ASSERT(end >= seg_start && end - seg_start < seg);
    if (from < seg_start)
        from = seg_start;
    uint8_t buf[64 * 1024];
    while (from < end) {
        size_t want = end - from < sizeof buf ? (size_t)(end - from) : sizeof buf;
        ssize_t n = wal_store_read(tl->ws, from, buf, want);
        if (n <= 0 || memcmp(buf, tl->recover_buf + (from - seg_start), (size_t)n) != 0)
            return false;
        from += (lsn_t)n;
    }
    return true;
}

static void recover_fetch(sk_timeline *tl);

static void recover_after(uv_work_t *req, int status)
{
    sk_timeline *tl = req->data;
    sk_node *node = tl->node;
    tl->recover_fetching = false;
    node->fetches_in_flight--;
    char name[80];
    if (node->stopping || tl->failed || status != 0 || tl->recover_rc != 0) {
        if (tl->recover_rc < 0)
            log_warn("timeline %s: cannot read segment %llu from the WAL backup: %s",
                     sk_timeline_name(tl, name, sizeof name), (unsigned long long)tl->recover_segno,
                     tl->recover_err);
        recover_end(tl);
        if (!node->stopping)
            sk_timeline_kick(tl);
        return;
    }
    if (!recover_prefix_matches(tl)) {
        log_warn("timeline %s: the WAL backup's segment %llu differs from this safekeeper's WAL "
                 "before its end; not taking it",
                 sk_timeline_name(tl, name, sizeof name), (unsigned long long)tl->recover_segno);
        recover_end(tl);
        sk_timeline_kick(tl);
        return;
    }
    uint32_t seg = acceptor_state(&tl->acc)->wal_seg_size;
    tl->recover_off = (uint32_t)(acceptor_write_lsn(&tl->acc) - tl->recover_segno * seg);
    sk_timeline_kick(tl);
}

static void recover_fetch(sk_timeline *tl)
{
    STRATA_ASSERT(tl->recovering && !tl->recover_fetching && tl->recover_buf == NULL);
    tl->recover_req.data = tl;
    if (uv_queue_work(tl->node->loop, &tl->recover_req, recover_work, recover_after) != 0) {
        recover_end(tl);
        return;
    }
    tl->recover_fetching = true;
    tl->node->fetches_in_flight++;
}

void sk_catchup_start(sk_timeline *tl, sk_pusher *p)
{
    lsn_t end = acceptor_write_lsn(&tl->acc);
    uint32_t seg = acceptor_state(&tl->acc)->wal_seg_size;
    if (tl->backup == NULL || tl->recovering || tl->ws == NULL || end == LSN_INVALID || seg == 0 ||
        tl->node->stopping || end == tl->recover_stuck_at)
        return;
    tl->recovering = true;
    tl->recovered_any = false;
    tl->recover_for = p;
    tl->recover_from = end;
    tl->recover_seg = seg;
    tl->recover_segno = end / seg;
    recover_fetch(tl);
}

/*
 * Gives the core the next piece of the fetched segment (an output to run:
 * true), or, when it is all given, asks for the next segment (false: wait
 * for it).  Called from sk_timeline_kick while recovering.
 */
bool sk_catchup_feed(sk_timeline *tl)
{
    if (tl->recover_fetching || !tl->recovering)
        return false;
    uint32_t seg = acceptor_state(&tl->acc)->wal_seg_size;
    if (tl->recover_buf == NULL) {
        recover_end(tl); /* a fetch ended without a segment */
        return false;
    }
    if (tl->recover_off == seg) {
        free(tl->recover_buf);
        tl->recover_buf = NULL;
        tl->recover_segno++;
        recover_fetch(tl);
        return false;
    }
    uint32_t len = seg - tl->recover_off;
    if (len > WALPUSH_MAX_APPEND)
        len = WALPUSH_MAX_APPEND;
    lsn_t at = tl->recover_segno * seg + tl->recover_off;
    if (acceptor_append_recovered(&tl->acc, at, tl->recover_buf + tl->recover_off, len, &tl->out) !=
        0) {
        char name[80], e[LSN_FMT_LEN];
        log_warn("timeline %s: WAL from the backup at %s not taken: %s",
                 sk_timeline_name(tl, name, sizeof name), lsn_format(at, e), tl->out.error);
        recover_end(tl);
        return false;
    }
    tl->recover_off += len;
    tl->recovered_any = true;
    sk_timeline_start_output(tl, NULL, false);
    return true;
}
