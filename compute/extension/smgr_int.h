/*
 * smgr_int.h: what the files of the compute's storage manager share
 * (docs/design.md §7.2-§7.4): the shared caches (smgr_cache.c), the per-backend pagestream
 * connection (pagestore.c) and the f_smgr itself (smgr.c).
 *
 * Not an API for other programs and not exported from strata.so.  Everything
 * here exists only when strata.so is built against the PATCHED server headers
 * (STRATA_HAVE_SMGR_HOOK); strata.c calls strata_smgr_setup() either way.
 *
 * Threads: Postgres processes are single-threaded.  The caches live in shared
 * memory and take their own LWLocks (never held across a call out of this
 * module); the connection is per process (static state in pagestore.c).
 * Errors: ereport(ERROR) as everywhere in Postgres, with an SQLSTATE.
 */
#ifndef STRATA_EXTENSION_SMGR_INT_H
#define STRATA_EXTENSION_SMGR_INT_H

#include "postgres.h"

#include "access/xlogdefs.h"
#include "common/relpath.h"
#include "storage/block.h"
#include "storage/relfilenode.h"

/* ---- GUCs (strata.c defines them) ---------------------------------- */
extern char *strata_pageserver;          /* "host:port"; "" = no smgr */
extern bool strata_log_evicted_pages;    /* design.md §7.4 eviction-time logging */
extern int strata_relsize_cache_size;    /* entries */
extern int strata_lwlsn_cache_size;      /* entries */
extern int strata_prefetch_depth;        /* GetPage requests in flight */
extern int strata_readahead;             /* pages read ahead of a sequential read */
extern int strata_pageserver_timeout;    /* ms */
extern int strata_file_cache_size;       /* MB; 0 = no local file cache */
extern char *strata_file_cache_path;     /* relative to the data directory unless absolute */
extern char *strata_read_lsn;            /* "X/Y" or "": see strata_read_at() */
extern XLogRecPtr strata_read_lsn_value; /* strata.read_lsn parsed; 0 when "" */

/* Upper bound of strata.prefetch_depth (the per-backend ring's size). */
#define STRATA_PREFETCH_MAX 128

/* Called from _PG_init during preload: installs the smgr hooks and the
 * shared-memory hooks when strata.pageserver is set; FATAL when it is set but
 * this server has no smgr_hook. */
extern void strata_smgr_setup(void);

/*
 * The LSN every request of this process reads at (smgr.c), or
 * InvalidXLogRecPtr for "latest" (request_lsn = LSN_MAX, not_modified_since =
 * the block's last-written LSN): a primary's own writes are the newest
 * versions.  strata.read_lsn when set (a static read-only compute; ERROR
 * when such a server is out of recovery or replays WAL); else, in recovery,
 * the replay LSN: a standby must never see a version newer than what it
 * replayed ("latest" would hand it pages the primary wrote after its replay
 * position).  The caller then sends request_lsn = not_modified_since = it,
 * which the pageserver answers at exactly that LSN once it has ingested it.
 */
XLogRecPtr strata_read_at(void);

/* ---- statistics (smgr_cache.c; shared counters) --------------------- */

/* The GetPage wait histogram: bucket 0 counts waits under 16 us, bucket k
 * (1..16) waits in [2^(k+3), 2^(k+4)) us, the last one waits of 2^20 us
 * (about a second) and more.  Its counters sum to STAT_GETPAGE_WAITS. */
#define STRATA_WAIT_BUCKETS 18
#define STRATA_WAIT_FIRST_LOG2 4

typedef enum strata_stat {
    STAT_GETPAGE = 0,       /* GetPage requests sent (prefetch included) */
    STAT_PREFETCH_SENT,     /* of them, sent ahead by smgrprefetch */
    STAT_PREFETCH_HIT,      /* reads answered by a prefetched response */
    STAT_PREFETCH_DISCARD,  /* prefetched responses thrown away */
    STAT_NBLOCKS,           /* Nblocks requests */
    STAT_EXISTS,            /* Exists requests */
    STAT_RELSIZE_HIT,       /* nblocks/exists answered by the relsize cache */
    STAT_RECONNECT,         /* connections re-established after a failure */
    STAT_WAL_FLUSH,         /* XLogFlush calls made before a request */
    STAT_LOGGED_FSM_VM,     /* eviction logging, reason (a) */
    STAT_LOGGED_INPROGRESS, /* reason (b) */
    STAT_LOGGED_CYCLEID,    /* reason (c) */
    STAT_LOGGED_ZERO_LSN,   /* reason (d) */
    STAT_LOGGED_NEW_PAGE,   /* all-zero page, LSN 0: logged so WAL has the size */
    STAT_LOGGED_EXTEND,     /* extension WAL-logged because the relsize cache was full */
    STAT_LOGGING_SKIPPED,   /* would have logged, but WAL insertion was not allowed */
    STAT_LOGGED_SEQUENCE,   /* eviction logging, reason (e): a sequence page */
    STAT_LOGGED_RELOG,      /* a page read back from our own image, changed without WAL */
    STAT_FC_HIT,            /* reads answered by the local file cache */
    STAT_FC_MISS,           /* reads the file cache did not have */
    STAT_FC_STORE,          /* pages written into the file cache */
    STAT_FC_EVICT,          /* file cache slots reused for another page */
    STAT_FC_SKIP,           /* pages not cached: every way of their set was busy */
    STAT_FC_INVALIDATED,    /* file cache entries dropped by truncate/unlink/drop database */
    STAT_READAHEAD,         /* of prefetch_sent, sent by sequential read-ahead (strata_read) */
    STAT_GETPAGE_WAITS,     /* page reads that waited for a GetPage answer (prefetched or not) */
    STAT_GETPAGE_WAIT_US,   /* their waits summed, in microseconds */
    STAT_GETPAGE_WAIT_HIST, /* first of STRATA_WAIT_BUCKETS counters: see below */
    STAT_COUNT = STAT_GETPAGE_WAIT_HIST + STRATA_WAIT_BUCKETS
} strata_stat;
extern const char *const strata_stat_names[STAT_COUNT];

void strata_stat_add(strata_stat which, uint64 n);
uint64 strata_stat_get(strata_stat which);

/* ---- shared caches (smgr_cache.c) ----------------------------------- */
Size strata_cache_shmem_size(void);
void strata_cache_shmem_request(void); /* from shmem_request_hook */
void strata_cache_shmem_startup(void); /* from shmem_startup_hook */

/* Persistence generation: raised whenever a relation's persistence as seen
 * by md (its INIT fork) may have changed -- an INIT fork was created, or a
 * relation was unlinked (its relfilenode may come back).  Each process keeps
 * a private cache of "is this relation unlogged" and drops it when the
 * generation moved.  The raise is a full memory barrier. */
uint64 strata_persistence_generation(void);
void strata_persistence_changed(void);

/* Last-written LSN of a block, or of the relation's metadata (size,
 * existence) with blkno = InvalidBlockNumber.  Never older than the newest
 * change this compute made to it: blocks not in the cache get the watermark
 * (the highest LSN ever evicted from the cache, initialised to the checkpoint
 * the server started from and raised to the end of WAL replay at the first
 * use after recovery). */
XLogRecPtr strata_lwlsn_get(RelFileNode rnode, ForkNumber fork, BlockNumber blkno);
/* Raises (never lowers) the entry to lsn; may evict another entry. */
void strata_lwlsn_set(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, XLogRecPtr lsn);
/* The same, for lsn = the end of a page image this compute just logged
 * (eviction-time logging, log_newpage of an extension). */
void strata_lwlsn_set_image(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, XLogRecPtr lsn);
/* True when the block's entry is an image this compute logged at an LSN >=
 * lsn: a page with that LSN that is dirty again was changed without WAL
 * since the image (read back from it: same LSN; or written out by a
 * checkpoint, which logs a copy and leaves the buffer's older LSN).  GIN
 * and SP-GiST builds write no WAL until log_newpage_range at their end.
 * False when the entry is gone (bounded cache; images are evicted last). */
bool strata_lwlsn_is_image(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, XLogRecPtr lsn);

/* Relsize cache.  get: true, with the size and existence, when cached. */
bool strata_relsize_get(RelFileNode rnode, ForkNumber fork, bool *exists, BlockNumber *nblocks);
/* Remembers what the pageserver answered, unless an entry exists already
 * (a local extension raced it and is newer).  Entries made this way are
 * known to the WAL. */
void strata_relsize_learn(RelFileNode rnode, ForkNumber fork, bool exists, BlockNumber nblocks);
/* Sets the size after create (0) or truncate (n); wal_known as given. */
void strata_relsize_set(RelFileNode rnode, ForkNumber fork, BlockNumber nblocks, bool wal_known);
/* After extending to blkno: size = max(size, blkno + 1).  wal_known says
 * whether WAL already shows the new block.  Returns false when no entry could
 * be made (cache full of entries the WAL does not show): the caller must then
 * WAL-log the extension. */
bool strata_relsize_extend(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, bool wal_known);
/* The WAL now shows block blkno (a record at a non-zero LSN touched it):
 * marks the entry known if blkno is its last block. */
void strata_relsize_wal_saw(RelFileNode rnode, ForkNumber fork, BlockNumber blkno);
/* Forgets every fork of a relation (unlink). */
void strata_relsize_forget(RelFileNode rnode, ForkNumber fork);

/* ---- the local file cache (file_cache.c) ----------------------------- */
/* Shared memory and the (emptied) cache file; no-ops of size 0 when
 * strata.file_cache_size is 0. */
void strata_fc_shmem_request(void);
void strata_fc_shmem_startup(void);
/* Copies the cached page into buffer; false when not cached (or in recovery,
 * or on an I/O error of the cache file, which is logged once). */
bool strata_fc_read(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, char *buffer);
/* Whether a read would hit (for prefetch). */
bool strata_fc_contains(RelFileNode rnode, ForkNumber fork, BlockNumber blkno);
/* Caches page as the block's newest version (the caller wrote or extended
 * it); the block's older copy, if any, is gone either way. */
void strata_fc_write(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, const char *page);
/* Drops the blocks >= from of a fork (InvalidForkNumber: every fork). */
void strata_fc_forget_rel(RelFileNode rnode, ForkNumber fork, BlockNumber from);
/* Drops every block of a database (created, dropped or moved). */
void strata_fc_forget_db(Oid db);

/* ---- the pagestream connection (pagestore.c) ------------------------ */
/* Synchronous requests; ERROR on pageserver error or timeout. */
bool strata_ps_exists(RelFileNode rnode, ForkNumber fork, XLogRecPtr nms);
BlockNumber strata_ps_nblocks(RelFileNode rnode, ForkNumber fork, XLogRecPtr nms);
/* Bytes of the database's (tablespace's) relations on the pageserver, init
 * forks left out; for a tablespace also how many relations it holds. */
int64 strata_ps_dbsize(Oid db, XLogRecPtr nms);
int64 strata_ps_spcsize(Oid spc, XLogRecPtr nms, uint32 *relations);
/* Reads a page into buffer: uses a prefetched answer if one is queued for
 * this block and was requested with not_modified_since >= nms; else asks.
 * zero_if_missing: the caller knows the block exists locally (a fork created
 * here whose creation the WAL does not show): a "relation does not exist"
 * answer (58P01) yields a zero page instead of an ERROR. */
void strata_ps_getpage(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, XLogRecPtr nms,
                       bool zero_if_missing, char *buffer);
/* Queues a GetPage without waiting (bounded by strata.prefetch_depth);
 * false when the ring was full or the block is already queued. */
bool strata_ps_prefetch(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, XLogRecPtr nms);
/* Whether one more prefetch fits under strata.prefetch_depth now. */
bool strata_ps_prefetch_room(void);
/* Closes the connection (process exit). */
void strata_ps_disconnect(void);

#endif
