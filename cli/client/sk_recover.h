/*
 * sk_recover.h: what `strata safekeeper recover` (cmd/cmd_sk_recover.c) takes
 * from the object store and does to it, so that the rebuilt timeline, the
 * WAL backup and the pageserver's uploads agree (docs/design.md §4.10):
 *
 *   - the seed: the survivor's WAL to its flush F, extended by the closed
 *     segments the WAL backup holds contiguously from F's segment on, up to
 *     the last complete record in them (committed WAL: a segment is backed
 *     up only once it lies wholly below the committed end);
 *   - the newest manifest's consistent_lsn, which must not pass the seed end;
 *   - the quarantine: wal/ objects that reach past the seed end hold the lost
 *     history and are moved to wal-lost-history/, which nothing reads.
 *
 * Not for: the configuration change, the copies to the new nodes
 * (sk_client.h), or starting and stopping daemons.  Every call blocks on the
 * store; errors come back in cli_err.
 */
#ifndef STRATA_CLI_SK_RECOVER_H
#define STRATA_CLI_SK_RECOVER_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "base/lsn.h"
#include "net/remote_storage.h"

/* Where the lost history's WAL objects go, beside wal/. */
#define SK_RECOVER_QUARANTINE_DIR "wal-lost-history"

/* What recover seeds.  When end > flush, segments first_segno..last_segno
 * wait in stage_dir (the last one zeroed past end) for sk_recover_install. */
typedef struct sk_recover_seed {
    uint32_t seg_size;
    lsn_t flush;      /* the survivor's flush F */
    lsn_t backup_end; /* end of the backup's closed segments contiguous from F's; 0: none */
    lsn_t end;        /* the seed end: the last complete record end <= backup_end, or F */
    uint64_t first_segno, last_segno;
    char stage_dir[4096];
    char note[512]; /* why the backup was not used past F, "" */
} sk_recover_seed;

/* The cluster's remote store, opened; *out is NULL when the cluster has none.
 * Close with remote_close.  0, or -1 with err. */
int sk_recover_open_store(const cluster *c, remote_storage **out, cli_err *err);

/*
 * Works out the seed from the survivor's timeline directory tl_dir (the
 * survivor idle: no compute) and the WAL backup: lists wal/, checks that the
 * survivor's bytes of its last segment below F equal the backup's, downloads
 * the contiguous segments into D/recover-wal/ and finds the last complete
 * record end in them (wal_tracker).  rs NULL: no store, the seed is F.
 * 0 with *out (out->note says why the backup was not used), or -1 with err
 * (a store failure, or the survivor's WAL disagrees with the backup).
 */
int sk_recover_stage(remote_storage *rs, const cluster *c, const char *tl_dir, uint32_t seg_size,
                     lsn_t flush, sk_recover_seed *out, cli_err *err);

/* Removes the staging directory, if any. */
void sk_recover_unstage(const sk_recover_seed *s);

/* The newest manifest of the cluster's timeline: *found, its seq and its
 * consistent_lsn.  0 (also when there is none), or -1 with err. */
int sk_recover_newest_manifest(remote_storage *rs, const cluster *c, bool *found, uint64_t *seq,
                               lsn_t *consistent, cli_err *err);

/*
 * Installs the staged segments into tl_dir, the timeline directory of the
 * survivor, which must not be running: each segment renamed into place
 * (its ".partial" removed after), then the control file's commit_lsn set to
 * s->end, so that the survivor's restart scan (from min(commit, flush)),
 * which checks every record's CRC, finds the end of WAL at s->end, and no
 * election can truncate below it.  The control file must still say flush
 * s->flush (else the survivor moved: -1).  0, or -1 with err.
 */
int sk_recover_install(const sk_recover_seed *s, const char *tl_dir, cli_err *err);

/*
 * Moves every wal/ object of the timeline whose segment ends past end to
 * wal-lost-history/<segment> (copy, then delete): the lost history, which
 * neither the safekeepers' backup (HEAD: an object of full size is done)
 * nor the pageserver's catch-up may take.  *moved counts them.  0, or -1
 * with err (objects moved before the failure stay moved).
 */
int sk_recover_quarantine(remote_storage *rs, const cluster *c, uint32_t seg_size, lsn_t end,
                          int *moved, cli_err *err);

#endif
