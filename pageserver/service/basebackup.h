/*
 * basebackup.h: the tar stream a compute starts from (docs/design.md §3.5, §6.9).
 *
 * For: writing, at one LSN, a ustar archive of a PostgreSQL 15 data
 * directory rebuilt from the page-version store: the directory skeleton,
 * PG_VERSION files, global and per-database pg_filenode.map, the SLRUs
 * (pg_xact, pg_multixact/{offsets,members}) read through the page read path
 * (so CLOG deltas are applied), two-phase state files (CRC-32C appended),
 * an empty postgresql.conf, postgresql.auto.conf as the compute's last ALTER
 * SYSTEM at or below the LSN left it (empty before the first; key.h
 * KEY_CHECKPOINT_REL_AUTO_CONF), pg_hba.conf/pg_ident.conf placeholders, the
 * bootstrap WAL segment(s) and global/pg_control (pgcontrol.h), pg_control
 * last so that a truncated stream cannot start.  With full = true it also
 * holds every relation file (all forks, all blocks, 1 GB segments): a
 * Postgres with no smgr hook can start from it.  Without, the only
 * relation files are those of unlogged relations: the init fork and a main
 * fork with the init fork's contents (Postgres resets unlogged relations
 * only in crash recovery, which a compute started this way never runs).
 * In replica mode (basebackup_options.replica) the archive is the same
 * minus the bootstrap WAL, and pg_control starts a standby at a real
 * checkpoint record instead (see the option).
 * Not for: the network (page_service.c streams the chunks), waiting for
 * the LSN to be ingested (the caller does), compressing.
 *
 * The archive is POSIX ustar written with libarchive (every name is short
 * and every file far below 8 GB); the CLI's reader (cli/client/basebackup_tar.h,
 * fuzzed) and stock tar accept it.
 *
 * LSN rules (the caller's, documented here once): lsn must be a record end
 * as common/pg/walformat.h defines it (8-aligned) and <= the last ingested
 * record LSN; the stored pg_control and checkpoint must exist at lsn (not
 * before the timeline starts, not collected by GC).  A misaligned LSN is
 * refused; an aligned LSN in the middle of a record cannot be detected
 * here (the store keeps record ends only) -- Postgres would then refuse
 * the WAL continued after it.
 *
 * Threads: basebackup_write runs on the caller's thread (a worker, not the
 * event loop: it reads and redoes pages) and calls the sink on it.
 */
#ifndef STRATA_PAGESERVER_BASEBACKUP_H
#define STRATA_PAGESERVER_BASEBACKUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "pageserver/store/key.h"
#include "pageserver/store/store.h"
#include "pageserver/timeline/timeline.h"

/*
 * Where the data comes from.  Blobs, sizes and listings follow store.h
 * (store_get_latest, store_scan); pages follow timeline.h
 * (timeline_get_rel_page, timeline_get_slru_segment: versions plus redo).
 * Every function may be called from the basebackup thread only.
 */
typedef struct basebackup_source {
    void *arg;
    int (*get_latest)(void *arg, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found_lsn,
                      char *err, size_t errlen);
    int (*scan)(void *arg, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
                void *fnarg, char *err, size_t errlen);
    int (*rel_page)(void *arg, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork, uint32_t blk,
                    lsn_t lsn, uint8_t out[PG_BLCKSZ], char *err, size_t errlen);
    int (*slru_segment)(void *arg, uint8_t kind, uint32_t segno, lsn_t lsn, uint8_t *out,
                        uint32_t max_blocks, uint32_t *nblocks, char *err, size_t errlen);
} basebackup_source;

/* A source reading everything through the timeline tl (its store, its
 * ancestors below a branch point, redo for pages); borrowed, it must
 * outlive the basebackup.  Whether a WAL receiver runs for tl is not its
 * concern. */
typedef struct basebackup_timeline_source {
    timeline *tl;
} basebackup_timeline_source;
void basebackup_source_timeline(basebackup_source *out, basebackup_timeline_source *ts);

typedef struct basebackup_options {
    bool full;            /* include every relation file */
    lsn_t prev_lsn;       /* xl_prev of the checkpoint record; LSN_INVALID: see below */
    lsn_t timeline_start; /* the timeline's start LSN (its import LSN) */
    int64_t now;          /* seconds since the epoch for pg_control (0: time(NULL)) */
    /* Replica mode: the files at lsn, but pg_control pointing at the newest
     * real checkpoint record at or below lsn that a standby can start from
     * (key.h KEY_CHECKPOINT_REL_RECORD), minRecoveryPoint = lsn, and no WAL:
     * a hot standby that streams the timeline's WAL from the safekeepers
     * (pgcontrol.h pgcontrol_make_replica_control).  Fails (55000) when no
     * such record exists or its redo point is below gc_horizon. */
    bool replica;
    lsn_t gc_horizon; /* the timeline's GC horizon (LSN_INVALID: none); replica mode */
} basebackup_options;

/* Receives the archive in order, in chunks of at most BASEBACKUP_CHUNK
 * bytes; returns 0 to go on, -1 to abort (the basebackup then fails with
 * "cancelled"). */
#define BASEBACKUP_CHUNK (256u * 1024)
typedef int (*basebackup_sink_fn)(const uint8_t *data, size_t n, void *arg);

/* What was written (for logs and tests). */
typedef struct basebackup_result {
    lsn_t checkpoint_lsn;  /* where the checkpoint record starts (pg_control checkPoint) */
    lsn_t next_record_lsn; /* where the compute's first new record goes (before any page header) */
    lsn_t prev_lsn;        /* xl_prev written (0 if unknown) */
    uint64_t bytes;        /* archive size */
    uint32_t files;
    uint32_t rel_files; /* relation segment files (full only) */
    uint64_t rel_blocks;
    uint32_t databases; /* including global */
    uint32_t slru_segments;
    uint32_t twophase_files;
} basebackup_result;

/*
 * Writes the archive for lsn to sink.  The checkpoint record's xl_prev is
 * o->prev_lsn if set; else, at the timeline's start LSN, the imported
 * shutdown checkpoint's own start (exact); else 0 (accepted by Postgres at
 * startup; see pgcontrol.h).  0, or -1 with err and *sqlstate (22023 bad
 * LSN, 58P01 nothing stored at lsn, 57014 cancelled by the sink, XX000
 * read or redo failure).  After -1 the sink may have received part of an
 * archive (never pg_control: it is last).
 */
int basebackup_write(const basebackup_source *src, lsn_t lsn, const basebackup_options *o,
                     basebackup_sink_fn sink, void *sink_arg, basebackup_result *res, char *err,
                     size_t errlen, const char **sqlstate);

#endif
