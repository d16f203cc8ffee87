/*
 * inmem_smgr.c: the redo helper's storage manager.
 *
 * For: giving redo exactly one real page, the target block of the current
 * request, and making every other block look already replayed.  Installed
 * through the patched core's smgr_hook for every relation (the helper's own
 * catalogs included: its connection never reads a catalog again once the
 * request loop runs).
 *
 * Not for: keeping anything beyond one request, or any durability.  The
 * helper's shared buffers are dropped around every record by walredo.c, so
 * what this file answers is what redo sees.
 *
 * Why "largest LSN" pages: XLogReadBufferForRedo returns BLK_DONE for a page
 * whose LSN is at or past the record's, so redo skips the blocks of a record
 * that are not ours without a core hook that filters blocks.  Blocks that a
 * record initialises or restores from a full-page image are still written
 * (in a buffer only); walredo.c drops those buffers after the record, so no
 * half-replayed neighbour survives into the next record.
 */
#include "postgres.h"

#include "storage/bufpage.h"
#include "storage/smgr.h"

#include "walredo_int.h"

static RelFileNode target_rnode;
static ForkNumber target_fork = InvalidForkNumber;
static BlockNumber target_blk = InvalidBlockNumber;
static bool target_has_page = false;
static PGAlignedBlock target_page;

static bool is_target(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum)
{
    return forknum == target_fork && blocknum == target_blk &&
           RelFileNodeEquals(reln->smgr_rnode.node, target_rnode);
}

static void inmem_open(SMgrRelation reln)
{
}

static void inmem_close(SMgrRelation reln, ForkNumber forknum)
{
}

static void inmem_create(SMgrRelation reln, ForkNumber forknum, bool isRedo)
{
}

static bool inmem_exists(SMgrRelation reln, ForkNumber forknum)
{
    return true;
}

static void inmem_unlink(RelFileNodeBackend rnode, ForkNumber forknum, bool isRedo)
{
}

static void inmem_store(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum, char *buffer)
{
    if (is_target(reln, forknum, blocknum)) {
        memcpy(target_page.data, buffer, BLCKSZ);
        target_has_page = true;
    }
}

static void inmem_extend(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum, char *buffer,
                         bool skipFsync)
{
    inmem_store(reln, forknum, blocknum, buffer);
}

static bool inmem_prefetch(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum)
{
    return true;
}

static void inmem_read(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum, char *buffer)
{
    if (is_target(reln, forknum, blocknum)) {
        memcpy(buffer, target_page.data, BLCKSZ);
        return;
    }
    PageInit((Page)buffer, BLCKSZ, 0);
    PageSetLSN((Page)buffer, (XLogRecPtr)PG_UINT64_MAX);
}

static void inmem_write(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum, char *buffer,
                        bool skipFsync)
{
    inmem_store(reln, forknum, blocknum, buffer);
}

static void inmem_writeback(SMgrRelation reln, ForkNumber forknum, BlockNumber blocknum,
                            BlockNumber nblocks)
{
}

static BlockNumber inmem_nblocks(SMgrRelation reln, ForkNumber forknum)
{
    return MaxBlockNumber;
}

static void inmem_truncate(SMgrRelation reln, ForkNumber forknum, BlockNumber old_blocks,
                           BlockNumber nblocks)
{
}

static void inmem_immedsync(SMgrRelation reln, ForkNumber forknum)
{
}

static const f_smgr inmem_smgr = {
    .smgr_init = NULL,
    .smgr_shutdown = NULL,
    .smgr_open = inmem_open,
    .smgr_close = inmem_close,
    .smgr_create = inmem_create,
    .smgr_exists = inmem_exists,
    .smgr_unlink = inmem_unlink,
    .smgr_extend = inmem_extend,
    .smgr_prefetch = inmem_prefetch,
    .smgr_read = inmem_read,
    .smgr_write = inmem_write,
    .smgr_writeback = inmem_writeback,
    .smgr_nblocks = inmem_nblocks,
    .smgr_truncate = inmem_truncate,
    .smgr_immedsync = inmem_immedsync,
};

static const f_smgr *inmem_smgr_choose(BackendId backend, RelFileNode rnode)
{
    return &inmem_smgr;
}

void inmem_smgr_install(void)
{
    /* Relations opened before now are md.c's; close them so that no later
     * open can find one. */
    smgrcloseall();
    smgr_hook = inmem_smgr_choose;
}

void inmem_smgr_set_target(RelFileNode rnode, ForkNumber fork, BlockNumber blk)
{
    Assert(smgr_hook == inmem_smgr_choose);
    target_rnode = rnode;
    target_fork = fork;
    target_blk = blk;
    target_has_page = false;
    memset(target_page.data, 0, BLCKSZ);
}

void inmem_smgr_set_page(const char *page)
{
    Assert(target_fork != InvalidForkNumber);
    memcpy(target_page.data, page, BLCKSZ);
    target_has_page = true;
}

const char *inmem_smgr_page(void)
{
    return target_page.data;
}

bool inmem_smgr_has_page(void)
{
    return target_has_page;
}
