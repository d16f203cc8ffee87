/*
 * smgr.c: the compute's storage manager (docs/design.md §7.2): permanent relations
 * live on the pageserver, temporary and unlogged ones on local md.c.
 *
 * Installed through the patched server's smgr_hook, which strata.so reaches
 * with dlsym(RTLD_DEFAULT, "smgr_hook") so that the same module still loads
 * into stock PostgreSQL (walproposer only).  See README.md for the rules:
 *
 *  - routing: temp relations (backend != InvalidBackendId) get md.c from the
 *    hook.  Every INIT fork operation goes to md.  A relation is unlogged
 *    once a local INIT fork exists (checked once per relation and process,
 *    refreshed when this process creates the INIT fork, which then also
 *    creates the MAIN fork locally, and in every process when the shared
 *    persistence generation moves); everything of an unlogged relation goes
 *    to md.
 *  - permanent relations: read = GetPage(latest, not_modified_since = the
 *    block's last-written LSN), flushing local WAL up to that LSN first;
 *    in recovery (a read-only compute) GetPage at exactly the replay LSN or
 *    strata.read_lsn instead (strata_read_at());
 *    write (eviction) sends nothing, WAL-logs the page when it carries state
 *    the WAL does not (eviction-time logging), and records the LSN.
 *  - sizes: the relsize cache, else Nblocks/Exists at the relation's
 *    last-written LSN.
 *
 * Not for: the connection (pagestore.c) or the caches (smgr_cache.c).
 */
#include "postgres.h"

#include <dlfcn.h>

#include "compute/extension/smgr_int.h"
#include "compute/extension/strata.h"

#ifdef STRATA_HAVE_SMGR_HOOK

#include "access/nbtree.h"
#include "access/htup_details.h"
#include "access/multixact.h"
#include "access/xlog.h"
#include "access/xloginsert.h"
#include "access/xlogrecovery.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_control.h"
#include "catalog/pg_database.h"
#include "commands/sequence.h"
#include "common/controldata_utils.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/ipc.h"
#include "storage/md.h"
#include "storage/procarray.h"
#include "storage/smgr.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

/* Page ids that share btree's 16-byte special space (hash.h, gist.h). */
#define STRATA_HASHO_PAGE_ID 0xFF80
#define STRATA_GIST_PAGE_ID 0xFF81
/* sequence.c's SEQ_MAGIC (not in a header). */
#define STRATA_SEQ_MAGIC 0x1717
/* Local persistence cache bound: cleared (it is only a cache of stat
 * results) when it grows past this. */
#define PERSISTENCE_CACHE_MAX 8192

typedef struct persistence_entry {
    RelFileNode rnode; /* key */
    bool unlogged;
} persistence_entry;

static HTAB *persistence = NULL;
static uint64 persistence_gen = 0; /* the shared generation the table is valid for */
static bool checkpointer_shutting_down = false;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static object_access_hook_type prev_object_access_hook = NULL;

/* ---- routing --------------------------------------------------------- */

/*
 * The process's cache of "is this relation unlogged".  Dropped whole when the
 * shared persistence generation moved: another process created an INIT fork
 * (a relation this process already saw as permanent -- e.g. an index whose
 * pages it evicted during the build -- is unlogged now, and its pages must
 * go to the local file) or unlinked a relation (its relfilenode may return
 * with another persistence).
 */
static persistence_entry *persistence_lookup(RelFileNode rnode, HASHACTION action, bool *found)
{
    uint64 gen = strata_persistence_generation();

    if (persistence == NULL || gen != persistence_gen ||
        hash_get_num_entries(persistence) >= PERSISTENCE_CACHE_MAX) {
        HASHCTL ctl;

        if (persistence != NULL)
            hash_destroy(persistence);
        memset(&ctl, 0, sizeof ctl);
        ctl.keysize = sizeof(RelFileNode);
        ctl.entrysize = sizeof(persistence_entry);
        ctl.hcxt = TopMemoryContext;
        persistence = hash_create("strata relation persistence", 256, &ctl,
                                  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
        persistence_gen = gen;
    }
    return hash_search(persistence, &rnode, action, found);
}

/* True when every operation on reln's fork must go to md.c.  An answer is
 * cached only when no persistence change happened while it was found. */
static bool is_local(SMgrRelation reln, ForkNumber fork)
{
    RelFileNode rnode = reln->smgr_rnode.node;
    persistence_entry *e;
    bool found, unlogged;
    uint64 gen;

    if (fork == INIT_FORKNUM)
        return true;
    e = persistence_lookup(rnode, HASH_FIND, &found);
    if (e != NULL)
        return e->unlogged;
    gen = persistence_gen;
    unlogged = mdexists(reln, INIT_FORKNUM);
    if (strata_persistence_generation() != gen)
        return unlogged;
    e = persistence_lookup(rnode, HASH_ENTER, &found);
    e->unlogged = unlogged;
    if (persistence_gen != gen) /* the table was renewed in between */
        hash_search(persistence, &rnode, HASH_REMOVE, &found);
    return unlogged;
}

static void mark_unlogged(SMgrRelation reln)
{
    bool found;

    persistence_lookup(reln->smgr_rnode.node, HASH_ENTER, &found)->unlogged = true;
}

/* ---- helpers ---------------------------------------------------------- */

/* The pageserver sees only WAL the safekeepers committed, and the
 * walproposer sends only flushed WAL: flush before asking for it. */
static void flush_upto(XLogRecPtr lsn)
{
    if (lsn == InvalidXLogRecPtr || RecoveryInProgress())
        return;
    if (lsn > GetFlushRecPtr(NULL)) {
        strata_stat_add(STAT_WAL_FLUSH, 1);
        XLogFlush(lsn);
    }
}

XLogRecPtr strata_read_at(void)
{
    if (strata_read_lsn_value != InvalidXLogRecPtr) {
        /* A static compute's view of every relation is the one at the LSN:
         * written to, or moved by replay, it would mix versions. */
        if (!RecoveryInProgress())
            ereport(ERROR,
                    (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                     errmsg("strata.read_lsn is set but this server is not in recovery"),
                     errdetail("A compute pinned at an LSN is a hot standby (standby.signal) "
                               "and never leaves recovery.")));
        if (AmStartupProcess())
            ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                            errmsg("a compute pinned at LSN %X/%X by strata.read_lsn cannot "
                                   "replay WAL",
                                   LSN_FORMAT_ARGS(strata_read_lsn_value)),
                            errhint("Give a static read-only compute no primary_conninfo.")));
        return strata_read_lsn_value;
    }
    if (RecoveryInProgress())
        return GetXLogReplayRecPtr(NULL);
    return InvalidXLogRecPtr;
}

/* An LSN no WAL record has: 0 (never logged), or one of the fake LSNs below
 * FirstNormalUnloggedLSN, e.g. GistBuildLSN, which a buffered GiST build
 * stamps on every page until log_newpage_range logs the finished index (and
 * that skips pages that read back as new). */
static bool lsn_is_fake(XLogRecPtr lsn)
{
    return lsn < FirstNormalUnloggedLSN;
}

static bool page_all_zero(const char *page)
{
    static const char zero[BLCKSZ];

    return memcmp(page, zero, BLCKSZ) == 0;
}

/* A heap page (no special space) with a tuple whose xmin or xmax may be a
 * transaction still running: its command ids are not in the WAL. */
static bool heap_page_in_progress(Page page)
{
    OffsetNumber maxoff;

    if (PageIsNew(page) || PageGetSpecialSize(page) != 0 ||
        ((PageHeader)page)->pd_lower < SizeOfPageHeaderData)
        return false;
    maxoff = PageGetMaxOffsetNumber(page);
    for (OffsetNumber off = FirstOffsetNumber; off <= maxoff; off++) {
        ItemId id = PageGetItemId(page, off);
        HeapTupleHeader tup;
        TransactionId xmin, xmax;

        if (!ItemIdIsNormal(id) || ItemIdGetLength(id) < SizeofHeapTupleHeader ||
            ItemIdGetOffset(id) + ItemIdGetLength(id) > BLCKSZ)
            continue;
        tup = (HeapTupleHeader)PageGetItem(page, id);
        xmin = HeapTupleHeaderGetRawXmin(tup);
        if ((tup->t_infomask & (HEAP_XMIN_COMMITTED | HEAP_XMIN_INVALID)) == 0 &&
            TransactionIdIsNormal(xmin) && TransactionIdIsInProgress(xmin))
            return true;
        xmax = HeapTupleHeaderGetRawXmax(tup);
        if ((tup->t_infomask & (HEAP_XMAX_COMMITTED | HEAP_XMAX_INVALID)) == 0 &&
            TransactionIdIsNormal(xmax)) {
            /* A multixact may hide an updater still running: log, to be safe. */
            if (tup->t_infomask & HEAP_XMAX_IS_MULTI)
                return true;
            if (TransactionIdIsInProgress(xmax))
                return true;
        }
    }
    return false;
}

/* A btree page (16-byte special space that is not hash's or GiST's) whose
 * split happened during a VACUUM: the cycle id is not in the WAL. */
static bool btree_page_has_cycleid(Page page)
{
    uint16 page_id;

    if (PageIsNew(page) || PageGetSpecialSize(page) != MAXALIGN(sizeof(BTPageOpaqueData)))
        return false;
    page_id = *(uint16 *)(page + BLCKSZ - sizeof(uint16));
    if (page_id == STRATA_HASHO_PAGE_ID || page_id == STRATA_GIST_PAGE_ID)
        return false;
    return BTPageGetOpaque(page)->btpo_cycleid != 0;
}

/*
 * A sequence's page (sequence.c: one tuple, special space = SEQ_MAGIC):
 * returns its data, or NULL.  nextval changes it without WAL for
 * log_cnt calls after each record that pre-logs SEQ_LOG_VALS values, so
 * the WAL shows a state up to 32 values ahead of the page.
 */
static Form_pg_sequence_data sequence_page_data(Page page)
{
    ItemId id;
    HeapTupleHeader tup;

    if (PageIsNew(page) || PageGetSpecialSize(page) != MAXALIGN(sizeof(uint32)) ||
        *(uint32 *)PageGetSpecialPointer(page) != STRATA_SEQ_MAGIC ||
        ((PageHeader)page)->pd_lower < SizeOfPageHeaderData + sizeof(ItemIdData) ||
        PageGetMaxOffsetNumber(page) != FirstOffsetNumber)
        return NULL;
    id = PageGetItemId(page, FirstOffsetNumber);
    if (!ItemIdIsNormal(id) || ItemIdGetLength(id) < SizeofHeapTupleHeader ||
        ItemIdGetOffset(id) + ItemIdGetLength(id) > BLCKSZ)
        return NULL;
    tup = (HeapTupleHeader)PageGetItem(page, id);
    if (tup->t_hoff < SizeofHeapTupleHeader ||
        (Size)tup->t_hoff + offsetof(FormData_pg_sequence_data, is_called) + sizeof(bool) >
            ItemIdGetLength(id) ||
        (ItemIdGetOffset(id) + tup->t_hoff) % MAXIMUM_ALIGNOF != 0)
        return NULL;
    return (Form_pg_sequence_data)((char *)tup + tup->t_hoff);
}

/* True when buffer is a shared buffer itself (FlushBuffer passes it unless
 * data checksums made it write a copy). */
static bool is_shared_buffer(const char *buffer)
{
    return BufferBlocks != NULL && buffer >= BufferBlocks &&
           buffer < BufferBlocks + (Size)NBuffers * BLCKSZ;
}

/* During the shutdown checkpoint no WAL may be inserted (CreateCheckPoint
 * PANICs on concurrent WAL): the checkpointer reads the control file state. */
static bool shutdown_checkpoint_running(void)
{
    ControlFileData *cf;
    bool crc_ok;

    if (MyBackendType != B_CHECKPOINTER)
        return false;
    if (checkpointer_shutting_down)
        return true;
    cf = get_controlfile(DataDir, &crc_ok);
    if (crc_ok && cf->state == DB_SHUTDOWNING)
        checkpointer_shutting_down = true;
    pfree(cf);
    return checkpointer_shutting_down;
}

/*
 * Eviction-time logging (docs/design.md §7.4).  Returns the LSN to record as the
 * block's last-written LSN: the new record's when the page was logged, else
 * the page's own.
 */
static XLogRecPtr log_evicted_page(SMgrRelation reln, ForkNumber fork, BlockNumber blkno,
                                   char *buffer, bool *logged)
{
    Page page = (Page)buffer;
    XLogRecPtr lsn = PageGetLSN(page);
    strata_stat reason = STAT_COUNT;
    bool page_std = false;
    PGAlignedBlock copy;
    RelFileNode rnode = reln->smgr_rnode.node;

    if (strata_log_evicted_pages) {
        if (fork == FSM_FORKNUM || fork == VISIBILITYMAP_FORKNUM)
            reason = STAT_LOGGED_FSM_VM;
        else if (lsn_is_fake(lsn) && !page_all_zero(buffer))
            reason = STAT_LOGGED_ZERO_LSN;
        else if (fork == MAIN_FORKNUM && heap_page_in_progress(page)) {
            reason = STAT_LOGGED_INPROGRESS;
            page_std = true;
        } else if (fork == MAIN_FORKNUM && btree_page_has_cycleid(page)) {
            reason = STAT_LOGGED_CYCLEID;
            page_std = true;
        } else if (fork == MAIN_FORKNUM && is_shared_buffer(buffer) &&
                   sequence_page_data(page) != NULL) {
            reason = STAT_LOGGED_SEQUENCE;
            page_std = true;
        }
    }
    /* Always, whatever strata.log_evicted_pages says: a page without a real
     * LSN is not in the WAL at all.  All zeros: logged so the WAL has the
     * size. */
    if (reason == STAT_COUNT && lsn_is_fake(lsn))
        reason = page_all_zero(buffer) ? STAT_LOGGED_NEW_PAGE : STAT_LOGGED_ZERO_LSN;
    /* Always too: the page's LSN is not newer than an image logged here
     * before (it was read back from that image, or a checkpoint logged a copy
     * of it and left the buffer's LSN as it was), and it is dirty: it changed
     * without a WAL record since (an SP-GiST or GIN build logs nothing until
     * log_newpage_range at its end; a page it had evicted once lost every
     * later change when evicted again: pg_regress box, "unexpected SPGiST
     * tuple state").  FSM and VM pages are reason (a)'s: with
     * strata.log_evicted_pages off their changes stay unlogged (the tests of
     * that gap). */
    if (reason == STAT_COUNT && strata_lwlsn_is_image(rnode, fork, blkno, lsn) &&
        (strata_log_evicted_pages || (fork != FSM_FORKNUM && fork != VISIBILITYMAP_FORKNUM)))
        reason = STAT_LOGGED_RELOG;
    *logged = false;
    if (reason == STAT_COUNT)
        return lsn;
    if (!XLogInsertAllowed() || shutdown_checkpoint_running()) {
        strata_stat_add(STAT_LOGGING_SKIPPED, 1);
        return lsn;
    }
    if (reason == STAT_LOGGED_SEQUENCE) {
        /* The page as it is: read back it continues where this compute left
         * off (the WAL alone would jump to the pre-logged value).  Its
         * log_cnt becomes 0, in the shared buffer too, so that the next
         * nextval WAL-logs before it hands out a value -- as after a
         * checkpoint (sequence.c) -- else values handed out after this image
         * without WAL would be handed out again after a crash.  The tuple is
         * changed only under the buffer's exclusive lock elsewhere; we hold
         * the share lock of the write (FlushBuffer), as a hint bit would. */
        sequence_page_data(page)->log_cnt = 0;
    }
    /* Log a copy: the caller's buffer may be the shared buffer itself, under
     * a share lock only, and log_newpage would stamp its LSN. */
    memcpy(copy.data, buffer, BLCKSZ);
    lsn = log_newpage(&rnode, fork, blkno, copy.data, page_std);
    strata_stat_add(reason, 1);
    *logged = true;
    return lsn;
}

/* ---- f_smgr ------------------------------------------------------------ */

static bool strata_exists(SMgrRelation reln, ForkNumber fork);
static BlockNumber strata_nblocks(SMgrRelation reln, ForkNumber fork);

static void strata_open(SMgrRelation reln)
{
    mdopen(reln);
}

static void strata_close(SMgrRelation reln, ForkNumber fork)
{
    mdclose(reln, fork);
}

/*
 * A relation turned out unlogged (its INIT fork is being created): its MAIN
 * fork lives locally from now on.  An index build writes the MAIN fork BEFORE
 * the INIT fork exists (index_build creates INIT after ambuild), so pages may
 * already have gone the permanent way; every such page with content was
 * WAL-logged by strata_extend/strata_write (LSN 0 pages are always logged):
 * copy them from the pageserver into the local file.
 */
static void become_unlogged(SMgrRelation reln, bool isRedo)
{
    RelFileNode rnode = reln->smgr_rnode.node;
    bool exists = false;
    BlockNumber n = 0;
    PGAlignedBlock page;

    if (!isRedo && !is_local(reln, MAIN_FORKNUM)) {
        /* Dirty buffers of the relation leave the permanent way first (and a
         * write another process is doing right now ends first: FlushBuffer
         * waits for its I/O), so that the copy below sees every page and no
         * process writes a page of it to the pageserver after the copy. */
        FlushRelationsAllBuffers(&reln, 1);
        if (!strata_relsize_get(rnode, MAIN_FORKNUM, &exists, &n)) {
            exists = strata_exists(reln, MAIN_FORKNUM);
            n = exists ? strata_nblocks(reln, MAIN_FORKNUM) : 0;
        }
    }
    mdcreate(reln, INIT_FORKNUM, isRedo);
    /* Every process re-checks the relations it saw as permanent. */
    strata_persistence_changed();
    mark_unlogged(reln);
    mdcreate(reln, MAIN_FORKNUM, true);
    for (BlockNumber blk = 0; exists && blk < n; blk++) {
        XLogRecPtr nms = strata_lwlsn_get(rnode, MAIN_FORKNUM, blk);

        flush_upto(nms);
        strata_ps_getpage(rnode, MAIN_FORKNUM, blk, nms, true, page.data);
        mdextend(reln, MAIN_FORKNUM, blk, page.data, false);
    }
    strata_relsize_forget(rnode, MAIN_FORKNUM);
}

static void strata_create(SMgrRelation reln, ForkNumber fork, bool isRedo)
{
    if (fork == INIT_FORKNUM) {
        become_unlogged(reln, isRedo);
        return;
    }
    if (is_local(reln, fork)) {
        mdcreate(reln, fork, isRedo);
        return;
    }
    /* Only a MAIN fork's creation is WAL-logged (XLOG_SMGR_CREATE); an FSM
     * or VM fork made by fsm_extend/vm_extend is unknown to the pageserver
     * until a record touches one of its pages. */
    if (!isRedo) {
        strata_relsize_set(reln->smgr_rnode.node, fork, 0, fork == MAIN_FORKNUM);
        return;
    }
    /* Redo (a read-only compute replaying WAL; a primary never replays):
     * XLogReadBufferExtended creates the fork of every block it reads, then
     * asks its size.  An existing fork stays as the pageserver has it at the
     * replay LSN; a missing one (an FSM fork the WAL never showed) exists
     * here from now on, empty, as mdcreate would make it. */
    if (!strata_exists(reln, fork))
        strata_relsize_set(reln->smgr_rnode.node, fork, 0, fork == MAIN_FORKNUM);
}

static bool strata_exists(SMgrRelation reln, ForkNumber fork)
{
    RelFileNode rnode = reln->smgr_rnode.node;
    bool exists;
    BlockNumber n;
    XLogRecPtr nms;

    if (is_local(reln, fork))
        return mdexists(reln, fork);
    if (strata_relsize_get(rnode, fork, &exists, &n)) {
        strata_stat_add(STAT_RELSIZE_HIT, 1);
        return exists;
    }
    nms = strata_lwlsn_get(rnode, fork, InvalidBlockNumber);
    flush_upto(nms);
    exists = strata_ps_exists(rnode, fork, nms);
    if (!exists)
        strata_relsize_learn(rnode, fork, false, 0);
    return exists;
}

static void strata_unlink(RelFileNodeBackend rnode, ForkNumber fork, bool isRedo)
{
    bool found;

    /* Local files, if any (unlogged relations; a data directory that once
     * held the relation), go; the pageserver learns the drop from WAL. */
    mdunlink(rnode, fork, isRedo);
    if (fork != INIT_FORKNUM)
        strata_fc_forget_rel(rnode.node, fork, 0);
    if (fork == MAIN_FORKNUM || fork == INIT_FORKNUM || fork == InvalidForkNumber)
        strata_persistence_changed(); /* the relfilenode may come back, with another persistence */
    if (fork == INIT_FORKNUM || fork == InvalidForkNumber)
        return;
    strata_relsize_forget(rnode.node, fork);
    if (!RecoveryInProgress())
        strata_lwlsn_set(rnode.node, fork, InvalidBlockNumber, GetXLogInsertRecPtr());
    if (persistence != NULL && fork == MAIN_FORKNUM)
        hash_search(persistence, &rnode.node, HASH_REMOVE, &found);
}

/*
 * Keeps the page in the local file cache as what a read must return.  When
 * eviction-time logging just logged it (image_lsn set), the cached copy
 * carries that record's LSN, as the pageserver's copy would, so that a later
 * eviction does not see "dirty without WAL since our image" (the relog rule).
 */
static void file_cache_store(RelFileNode rnode, ForkNumber fork, BlockNumber blkno,
                             const char *buffer, XLogRecPtr image_lsn)
{
    PGAlignedBlock copy;

    if (image_lsn == InvalidXLogRecPtr || PageIsNew((Page)buffer)) {
        strata_fc_write(rnode, fork, blkno, buffer);
        return;
    }
    memcpy(copy.data, buffer, BLCKSZ);
    PageSetLSN((Page)copy.data, image_lsn);
    if (DataChecksumsEnabled())
        PageSetChecksumInplace((Page)copy.data, blkno);
    strata_fc_write(rnode, fork, blkno, copy.data);
}

static void strata_extend(SMgrRelation reln, ForkNumber fork, BlockNumber blkno, char *buffer,
                          bool skipFsync)
{
    RelFileNode rnode = reln->smgr_rnode.node;
    XLogRecPtr lsn;
    bool logged = false;

    if (is_local(reln, fork)) {
        mdextend(reln, fork, blkno, buffer, skipFsync);
        return;
    }
    lsn = PageGetLSN((Page)buffer);
    /* Content the WAL does not show (an unlogged index's build before its
     * INIT fork exists, see become_unlogged): log it like an eviction would. */
    if (lsn_is_fake(lsn) && XLogInsertAllowed() && !page_all_zero(buffer)) {
        PGAlignedBlock copy;

        memcpy(copy.data, buffer, BLCKSZ);
        lsn = log_newpage(&rnode, fork, blkno, copy.data, false);
        strata_stat_add(STAT_LOGGED_ZERO_LSN, 1);
        logged = true;
    }
    if (!strata_relsize_extend(rnode, fork, blkno, !lsn_is_fake(lsn))) {
        /* No room in the relsize cache for a size the WAL does not show:
         * make the WAL show it. */
        if (lsn_is_fake(lsn) && XLogInsertAllowed()) {
            PGAlignedBlock copy;

            memcpy(copy.data, buffer, BLCKSZ);
            lsn = log_newpage(&rnode, fork, blkno, copy.data, false);
            strata_stat_add(STAT_LOGGED_EXTEND, 1);
            logged = true;
        }
    }
    /* A new page's version at the pageserver must be read after any
     * truncation this compute did: use the insert LSN for LSN-0 pages. */
    if (lsn_is_fake(lsn) && !RecoveryInProgress())
        lsn = GetXLogInsertRecPtr();
    if (logged)
        strata_lwlsn_set_image(rnode, fork, blkno, lsn);
    else
        strata_lwlsn_set(rnode, fork, blkno, lsn);
    file_cache_store(rnode, fork, blkno, buffer, logged ? lsn : InvalidXLogRecPtr);
}

/* Set while read_ahead asks: strata_prefetch then counts what it sends. */
static bool in_read_ahead = false;

static bool strata_prefetch(SMgrRelation reln, ForkNumber fork, BlockNumber blkno)
{
    XLogRecPtr nms;

    if (is_local(reln, fork))
        return mdprefetch(reln, fork, blkno);
    if (strata_prefetch_depth <= 0 || strata_fc_contains(reln->smgr_rnode.node, fork, blkno))
        return true;
    nms = strata_lwlsn_get(reln->smgr_rnode.node, fork, blkno);
    flush_upto(nms);
    if (strata_ps_prefetch(reln->smgr_rnode.node, fork, blkno, nms) && in_read_ahead)
        strata_stat_add(STAT_READAHEAD, 1);
    return true;
}

/*
 * Sequential read-ahead.  PostgreSQL 15 prefetches only for bitmap heap
 * scans: a sequential scan or an index range scan reads one page at a time,
 * and each page that misses shared_buffers and the file cache costs a round
 * trip to the pageserver.  A backend that reads block N right after block
 * N-1 of the same relation fork is taken to be scanning it: it asks for the
 * next strata.readahead pages through the prefetch slots smgrprefetch uses
 * (PrefetchSharedBuffer: pages in shared_buffers are not asked for, and
 * strata_prefetch skips those in the file cache), so the reads that follow
 * find their answers on the way.  Each page is asked for once: ra.asked
 * says how far this scan has asked.  Pages past the size the relation size
 * cache knows are never asked for.  One scan per backend is followed; a
 * read elsewhere starts over.
 */
static struct {
    RelFileNode rnode;
    ForkNumber fork;
    BlockNumber last;  /* the block read last */
    BlockNumber asked; /* asked for up to here (exclusive) */
} ra = {.fork = InvalidForkNumber};

static void read_ahead(SMgrRelation reln, ForkNumber fork, BlockNumber blkno)
{
    RelFileNode rnode = reln->smgr_rnode.node;
    bool same = ra.fork == fork && RelFileNodeEquals(ra.rnode, rnode);
    bool sequential = same && ra.last != InvalidBlockNumber && blkno == ra.last + 1;
    BlockNumber n, end;
    bool exists;

    if (!sequential) {
        ra.rnode = rnode;
        ra.fork = fork;
        ra.asked = blkno + 1;
    }
    ra.last = blkno;
    if (!sequential || strata_readahead <= 0 || strata_prefetch_depth <= 0)
        return;
    if (!strata_relsize_get(rnode, fork, &exists, &n) || !exists)
        return;
    end = (BlockNumber)Min((uint64)blkno + 1 + (uint64)strata_readahead, (uint64)n);
    if (ra.asked < blkno + 1)
        ra.asked = blkno + 1;
    in_read_ahead = true;
    PG_TRY();
    {
        while (ra.asked < end && strata_ps_prefetch_room()) {
            (void)PrefetchSharedBuffer(reln, fork, ra.asked);
            ra.asked++;
        }
    }
    PG_FINALLY();
    {
        in_read_ahead = false;
    }
    PG_END_TRY();
}

static void strata_read(SMgrRelation reln, ForkNumber fork, BlockNumber blkno, char *buffer)
{
    XLogRecPtr nms;
    bool exists, known;
    BlockNumber n;

    if (is_local(reln, fork)) {
        mdread(reln, fork, blkno, buffer);
        return;
    }
    read_ahead(reln, fork, blkno);
    if (strata_fc_read(reln->smgr_rnode.node, fork, blkno, buffer))
        return;
    nms = strata_lwlsn_get(reln->smgr_rnode.node, fork, blkno);
    flush_upto(nms);
    /* A block this compute extended may belong to a fork the WAL does not
     * show yet (FSM/VM creation is not WAL-logged): such a page is new. */
    known = strata_relsize_get(reln->smgr_rnode.node, fork, &exists, &n) && exists && blkno < n;
    strata_ps_getpage(reln->smgr_rnode.node, fork, blkno, nms, known, buffer);
    /* Kept for the next miss too: a clean page leaves shared_buffers without
     * an smgrwrite (index pages, a scan's pages). */
    strata_fc_write(reln->smgr_rnode.node, fork, blkno, buffer);
}

static void strata_write(SMgrRelation reln, ForkNumber fork, BlockNumber blkno, char *buffer,
                         bool skipFsync)
{
    XLogRecPtr lsn;
    bool logged;

    if (is_local(reln, fork)) {
        mdwrite(reln, fork, blkno, buffer, skipFsync);
        return;
    }
    lsn = log_evicted_page(reln, fork, blkno, buffer, &logged);
    if (!lsn_is_fake(lsn)) {
        if (logged)
            strata_lwlsn_set_image(reln->smgr_rnode.node, fork, blkno, lsn);
        else
            strata_lwlsn_set(reln->smgr_rnode.node, fork, blkno, lsn);
        strata_relsize_wal_saw(reln->smgr_rnode.node, fork, blkno);
    }
    file_cache_store(reln->smgr_rnode.node, fork, blkno, buffer, logged ? lsn : InvalidXLogRecPtr);
}

static void strata_writeback(SMgrRelation reln, ForkNumber fork, BlockNumber blkno, BlockNumber n)
{
    if (is_local(reln, fork))
        mdwriteback(reln, fork, blkno, n);
}

static BlockNumber strata_nblocks(SMgrRelation reln, ForkNumber fork)
{
    RelFileNode rnode = reln->smgr_rnode.node;
    bool exists;
    BlockNumber n;
    XLogRecPtr nms;

    if (is_local(reln, fork))
        return mdnblocks(reln, fork);
    if (strata_relsize_get(rnode, fork, &exists, &n)) {
        strata_stat_add(STAT_RELSIZE_HIT, 1);
        return n;
    }
    nms = strata_lwlsn_get(rnode, fork, InvalidBlockNumber);
    flush_upto(nms);
    n = strata_ps_nblocks(rnode, fork, nms);
    strata_relsize_learn(rnode, fork, true, n);
    /* A concurrent local extension may have made a newer entry. */
    if (strata_relsize_get(rnode, fork, &exists, &n))
        return n;
    return n;
}

static void strata_truncate(SMgrRelation reln, ForkNumber fork, BlockNumber old_blocks,
                            BlockNumber nblocks)
{
    if (is_local(reln, fork)) {
        mdtruncate(reln, fork, old_blocks, nblocks);
        return;
    }
    strata_relsize_set(reln->smgr_rnode.node, fork, nblocks, true);
    strata_fc_forget_rel(reln->smgr_rnode.node, fork, nblocks);
    if (!RecoveryInProgress())
        strata_lwlsn_set(reln->smgr_rnode.node, fork, InvalidBlockNumber, GetXLogInsertRecPtr());
}

static void strata_immedsync(SMgrRelation reln, ForkNumber fork)
{
    if (is_local(reln, fork))
        mdimmedsync(reln, fork);
}

static const f_smgr strata_smgr = {
    .smgr_init = NULL,
    .smgr_shutdown = NULL,
    .smgr_open = strata_open,
    .smgr_close = strata_close,
    .smgr_create = strata_create,
    .smgr_exists = strata_exists,
    .smgr_unlink = strata_unlink,
    .smgr_extend = strata_extend,
    .smgr_prefetch = strata_prefetch,
    .smgr_read = strata_read,
    .smgr_write = strata_write,
    .smgr_writeback = strata_writeback,
    .smgr_nblocks = strata_nblocks,
    .smgr_truncate = strata_truncate,
    .smgr_immedsync = strata_immedsync,
};

/* ---- sizes and tablespaces ---------------------------------------------- */

/*
 * dbsize.c and DROP TABLESPACE look at local files, which a stateless compute
 * has only for temporary and unlogged relations: the patched server asks
 * these instead (smgr.h, "Hooks for a storage manager that keeps relations
 * elsewhere").  Requests that sum over many relations ask the pageserver at
 * the end of this compute's WAL, flushed first, so that every change made
 * here before the call is counted.
 */
static XLogRecPtr wal_end_flushed(void)
{
    XLogRecPtr lsn;

    if (RecoveryInProgress())
        return strata_read_at();
    lsn = GetXLogInsertRecPtr();
    flush_upto(lsn);
    return lsn;
}

/* One fork: blocks x BLCKSZ from the smgr (the relsize cache or the
 * pageserver), 0 when the fork does not exist; -1 (stat the local files)
 * for what lives in local files. */
static int64 strata_relation_size(RelFileNode rnode, BackendId backend, ForkNumber fork)
{
    SMgrRelation reln;

    if (backend != InvalidBackendId)
        return -1;
    reln = smgropen(rnode, backend);
    if (reln->smgr_impl != &strata_smgr || is_local(reln, fork))
        return -1;
    if (!smgrexists(reln, fork))
        return 0;
    return (int64)smgrnblocks(reln, fork) * BLCKSZ;
}

/* What the pageserver holds of a database or a tablespace; dbsize.c adds
 * the local files (unlogged relations, the map and version files). */
static int64 strata_storage_size(Oid spc, Oid db)
{
    uint32 relations;

    Assert(OidIsValid(spc) != OidIsValid(db));
    if (OidIsValid(db))
        return strata_ps_dbsize(db, wal_end_flushed());
    return strata_ps_spcsize(spc, wal_end_flushed(), &relations);
}

/* DROP TABLESPACE: in use while the pageserver holds any relation of it, in
 * any database (relations dropped by committed transactions are gone at
 * their commit record). */
static bool strata_tablespace_in_use(Oid spc)
{
    uint32 relations = 0;

    (void)strata_ps_spcsize(spc, wal_end_flushed(), &relations);
    return relations > 0;
}

/* ---- hooks -------------------------------------------------------------- */

static const f_smgr *strata_smgr_choose(BackendId backend, RelFileNode rnode)
{
    /* Temporary relations: md.c (NULL).  Must not elog(ERROR). */
    if (backend != InvalidBackendId)
        return NULL;
    return &strata_smgr;
}

static void strata_smgr_init(void)
{
}

static void strata_smgr_shutdown(void)
{
    strata_ps_disconnect();
}

static void strata_shmem_request(void)
{
    if (prev_shmem_request_hook)
        prev_shmem_request_hook();
    strata_cache_shmem_request();
    strata_fc_shmem_request();
}

static void strata_shmem_startup(void)
{
    if (prev_shmem_startup_hook)
        prev_shmem_startup_hook();
    strata_cache_shmem_startup();
    strata_fc_shmem_startup();
}

/* A database created (its OID may be a dropped one's), dropped or moved to
 * another tablespace: its pages in the file cache are not its pages. */
static void strata_object_access(ObjectAccessType access, Oid classId, Oid objectId, int subId,
                                 void *arg)
{
    if (prev_object_access_hook)
        prev_object_access_hook(access, classId, objectId, subId, arg);
    if (classId == DatabaseRelationId &&
        (access == OAT_POST_CREATE || access == OAT_DROP || access == OAT_POST_ALTER))
        strata_fc_forget_db(objectId);
}

/*
 * The size and tablespace hooks came with a later revision of the patch: a
 * server without them still runs the smgr (sizes then read 0, DROP
 * TABLESPACE does not see the pageserver's relations), with a WARNING.
 */
typedef int64 (*relation_size_fn)(RelFileNode rnode, BackendId backend, ForkNumber fork);
typedef int64 (*storage_size_fn)(Oid spc, Oid db);
typedef bool (*tablespace_in_use_fn)(Oid spc);

static void install_storage_hooks(void)
{
    /* Own types with the hooks' signatures (smgr.h): this file also builds
     * against the headers of the patch's first revision. */
    relation_size_fn *rel_size = dlsym(RTLD_DEFAULT, "smgr_relation_size_hook");
    storage_size_fn *storage_size = dlsym(RTLD_DEFAULT, "smgr_storage_size_hook");
    tablespace_in_use_fn *in_use = dlsym(RTLD_DEFAULT, "smgr_tablespace_in_use_hook");
    if (rel_size == NULL || storage_size == NULL || in_use == NULL) {
        ereport(WARNING,
                (errmsg("this PostgreSQL has no smgr size hooks: pg_relation_size and "
                        "pg_database_size will read 0 and DROP TABLESPACE will not see "
                        "relations on the pageserver"),
                 errhint("Rebuild PostgreSQL with the current compute/postgres/smgr-hook.patch.")));
        return;
    }
    *rel_size = strata_relation_size;
    *storage_size = strata_storage_size;
    *in_use = strata_tablespace_in_use;
}

void strata_smgr_setup(void)
{
    smgr_hook_type *hook;
    smgr_init_hook_type *init_hook;
    smgr_shutdown_hook_type *shutdown_hook;

    if (strata_pageserver == NULL || strata_pageserver[0] == '\0')
        return;
    hook = (smgr_hook_type *)dlsym(RTLD_DEFAULT, "smgr_hook");
    init_hook = (smgr_init_hook_type *)dlsym(RTLD_DEFAULT, "smgr_init_hook");
    shutdown_hook = (smgr_shutdown_hook_type *)dlsym(RTLD_DEFAULT, "smgr_shutdown_hook");
    if (hook == NULL || init_hook == NULL || shutdown_hook == NULL)
        ereport(FATAL, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("strata.pageserver is set but this PostgreSQL has no smgr_hook"),
                        errdetail("A stateless compute needs the patched PostgreSQL 15 build "
                                  "(compute/postgres/build.sh); stock PostgreSQL can only run the "
                                  "walproposer."),
                        errhint("Start the patched postgres, or set strata.pageserver = ''.")));
    if (strata_tenant_id[0] == '\0' || strata_timeline_id[0] == '\0')
        ereport(FATAL,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("strata.pageserver requires strata.tenant_id and strata.timeline_id")));
    *hook = strata_smgr_choose;
    *init_hook = strata_smgr_init;
    *shutdown_hook = strata_smgr_shutdown;
    install_storage_hooks();
    prev_shmem_request_hook = shmem_request_hook;
    shmem_request_hook = strata_shmem_request;
    prev_shmem_startup_hook = shmem_startup_hook;
    shmem_startup_hook = strata_shmem_startup;
    prev_object_access_hook = object_access_hook;
    object_access_hook = strata_object_access;
}

/* SQL: strata_smgr_stats() returns setof (name text, value bigint). */
extern PGDLLEXPORT Datum strata_smgr_stats(PG_FUNCTION_ARGS);
PG_FUNCTION_INFO_V1(strata_smgr_stats);
Datum strata_smgr_stats(PG_FUNCTION_ARGS)
{
    ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;

    InitMaterializedSRF(fcinfo, 0);
    for (int i = 0; i < STAT_COUNT; i++) {
        Datum values[2];
        bool nulls[2] = {false, false};

        Assert(strata_stat_names[i] != NULL); /* a name for every counter */
        values[0] = CStringGetTextDatum(strata_stat_names[i]);
        values[1] = Int64GetDatum((int64)strata_stat_get((strata_stat)i));
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
    }
    return (Datum)0;
}

#else /* !STRATA_HAVE_SMGR_HOOK */

void strata_smgr_setup(void)
{
    if (strata_pageserver != NULL && strata_pageserver[0] != '\0')
        ereport(FATAL, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("strata.pageserver is set but this strata.so was built without "
                               "the smgr"),
                        errdetail("Build strata.so against the patched PostgreSQL headers "
                                  "(make build passes STRATA_PG_PREFIX).")));
}

#endif /* STRATA_HAVE_SMGR_HOOK */
