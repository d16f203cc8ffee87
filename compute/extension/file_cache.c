/*
 * file_cache.c: the compute's local file cache of pages -- a second tier
 * below shared_buffers, on the compute's own disk, in front of the
 * pageserver.
 *
 * Why: a stateless compute has no operating-system page cache of its data,
 * so every shared_buffers miss of stock Postgres (a pread from the kernel's
 * cache, microseconds) becomes a GetPage round trip plus, usually, WAL redo
 * at the pageserver.  A page that leaves shared_buffers is written here as
 * it is (smgrwrite, smgrextend) and read back from here while it stays.
 *
 * What keeps it a cache and the compute stateless: the file is created empty
 * (truncated) when the postmaster makes shared memory and is never read by
 * another server; WAL is the only durable record of a change, exactly as
 * without the cache (a page written here was WAL-logged or eviction-logged
 * first, by smgr.c, so the pageserver can rebuild the same page when the cache
 * has dropped it).  It is used only outside recovery: a primary is the only
 * writer of its pages, so the page it evicted last is the newest version.
 *
 * Layout: strata.file_cache_size / BLCKSZ slots in one file, slot i at
 * offset i * BLCKSZ, organised as a set-associative array of 8 ways per set
 * (the set chosen by a hash of the block's key), each set guarded by one of
 * FC_LOCKS LWLocks.  A way holds the key, a use stamp (least recently used
 * way is the victim), a pin count of processes doing I/O on the slot and a
 * generation bumped whenever the way's key changes.  I/O runs without the
 * lock: a pinned way is never chosen as a victim, so its slot is not
 * overwritten under a reader; a reader sees `valid` only after the write of
 * the slot finished.  Invalidation (truncate, unlink, dropped database)
 * clears the key at once, pinned or not; the pin holder sees the generation
 * moved and does not trust (reader) or publish (writer) the slot.
 *
 * Errors: an I/O error on the cache file is logged (once per process) and
 * the cache is treated as missing that page; queries never fail because of
 * it.
 *
 * Not for: deciding what must be WAL-logged (smgr.c), talking to the
 * pageserver (pagestore.c).
 */
#include "postgres.h"

#ifdef STRATA_HAVE_SMGR_HOOK

#include <fcntl.h>
#include <unistd.h>

#include "access/xlog.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/bufpage.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "compute/extension/smgr_int.h"

#define FC_WAYS 8
#define FC_LOCKS 128
#define FC_TRANCHE "strata_file_cache"

typedef struct fc_way {
    RelFileNode rnode;
    int32 fork;
    BlockNumber blkno;
    uint32 stamp; /* value of the use clock at the last use */
    uint32 gen;   /* bumped whenever the key is set or cleared */
    uint16 pins;  /* processes reading or writing the slot right now */
    bool used;    /* the key is set */
    bool valid;   /* the slot holds the key's page (its write finished) */
} fc_way;

typedef struct fc_header {
    uint32 nsets;           /* 0: the cache is off */
    pg_atomic_uint32 clock; /* use stamps */
    char path[MAXPGPATH];   /* absolute path of the cache file */
} fc_header;

static fc_header *fc = NULL;
static fc_way *fc_ways = NULL;
static LWLockPadded *fc_locks = NULL;
static int fc_fd = -1;            /* this process's descriptor of the file */
static bool fc_io_failed = false; /* logged an I/O error already */

static uint32 fc_nsets_for(void)
{
    uint64 slots = (uint64)strata_file_cache_size * (1024 * 1024 / BLCKSZ);

    return (uint32)Min(slots / FC_WAYS, (uint64)PG_UINT32_MAX / FC_WAYS);
}

static Size fc_shmem_size(void)
{
    return add_size(MAXALIGN(sizeof(fc_header)),
                    mul_size((Size)fc_nsets_for() * FC_WAYS, sizeof(fc_way)));
}

void strata_fc_shmem_request(void)
{
    RequestAddinShmemSpace(fc_shmem_size());
    RequestNamedLWLockTranche(FC_TRANCHE, FC_LOCKS);
}

/* The file, emptied: what an earlier server left there is not ours. */
static void fc_create_file(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, S_IRUSR | S_IWUSR);

    if (fd < 0)
        ereport(FATAL, (errcode_for_file_access(),
                        errmsg("could not create the strata file cache \"%s\": %m", path),
                        errhint("Set strata.file_cache_path to a writable place, or "
                                "strata.file_cache_size = 0.")));
    close(fd);
}

void strata_fc_shmem_startup(void)
{
    bool found;

    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    fc = ShmemInitStruct("strata file cache", fc_shmem_size(), &found);
    fc_ways = (fc_way *)((char *)fc + MAXALIGN(sizeof(fc_header)));
    if (!found) {
        fc->nsets = fc_nsets_for();
        pg_atomic_init_u32(&fc->clock, 1);
        memset(fc_ways, 0, sizeof(fc_way) * (Size)fc->nsets * FC_WAYS);
        if (strata_file_cache_path[0] == '/')
            strlcpy(fc->path, strata_file_cache_path, sizeof fc->path);
        else
            snprintf(fc->path, sizeof fc->path, "%s/%s", DataDir, strata_file_cache_path);
        if (fc->nsets > 0)
            fc_create_file(fc->path);
    }
    fc_locks = GetNamedLWLockTranche(FC_TRANCHE);
    LWLockRelease(AddinShmemInitLock);
}

/* The cache is used only by a primary: in recovery WAL changes pages that
 * this server never writes, and the cached copy would go stale. */
static bool fc_usable(void)
{
    return fc != NULL && fc->nsets > 0 && !RecoveryInProgress();
}

static bool fc_open(void)
{
    if (fc_fd >= 0)
        return true;
    fc_fd = open(fc->path, O_RDWR | O_CLOEXEC);
    if (fc_fd < 0 && !fc_io_failed) {
        fc_io_failed = true;
        ereport(LOG, (errcode_for_file_access(),
                      errmsg("strata: could not open the file cache \"%s\": %m; reading from the "
                             "pageserver instead",
                             fc->path)));
    }
    return fc_fd >= 0;
}

/* Reads or writes one slot in full; false (logged once) on an error. */
static bool fc_io(bool write, uint32 slot, char *page)
{
    off_t off = (off_t)slot * BLCKSZ;
    size_t done = 0;

    if (!fc_open())
        return false;
    while (done < BLCKSZ) {
        ssize_t n = write ? pwrite(fc_fd, page + done, BLCKSZ - done, off + (off_t)done)
                          : pread(fc_fd, page + done, BLCKSZ - done, off + (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int err = n < 0 ? errno : 0;

            if (!fc_io_failed) {
                fc_io_failed = true;
                ereport(LOG,
                        (errmsg("strata: could not %s the file cache \"%s\" at %lld: %s",
                                write ? "write" : "read", fc->path, (long long)(off + (off_t)done),
                                err != 0 ? strerror(err) : "end of file")));
            }
            return false;
        }
        done += (size_t)n;
    }
    return true;
}

static uint32 fc_key_set(RelFileNode rnode, ForkNumber fork, BlockNumber blkno)
{
    uint32 words[5] = {rnode.spcNode, rnode.dbNode, rnode.relNode, (uint32)fork, blkno};

    return hash_bytes((const unsigned char *)words, sizeof words) % fc->nsets;
}

static LWLock *fc_lock(uint32 set)
{
    return &fc_locks[set % FC_LOCKS].lock;
}

static fc_way *fc_find(uint32 set, RelFileNode rnode, ForkNumber fork, BlockNumber blkno)
{
    fc_way *ways = &fc_ways[(Size)set * FC_WAYS];

    for (int i = 0; i < FC_WAYS; i++) {
        fc_way *w = &ways[i];
        if (w->used && w->blkno == blkno && w->fork == (int32)fork &&
            RelFileNodeEquals(w->rnode, rnode))
            return w;
    }
    return NULL;
}

/* Clears a way's key (its holder, if pinned, sees the generation move). */
static void fc_clear(fc_way *w)
{
    w->used = false;
    w->valid = false;
    w->gen++;
}

/* An unpinned way to reuse: a free one, else the least recently used. */
static fc_way *fc_victim(uint32 set)
{
    fc_way *ways = &fc_ways[(Size)set * FC_WAYS];
    fc_way *best = NULL;

    for (int i = 0; i < FC_WAYS; i++) {
        fc_way *w = &ways[i];
        if (w->pins > 0)
            continue;
        if (!w->used)
            return w;
        if (best == NULL || (int32)(w->stamp - best->stamp) < 0)
            best = w;
    }
    return best;
}

static uint32 fc_slot(const fc_way *w)
{
    return (uint32)(w - fc_ways);
}

bool strata_fc_read(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, char *buffer)
{
    uint32 set, gen, slot;
    fc_way *w;
    bool ok, current;

    if (!fc_usable())
        return false;
    set = fc_key_set(rnode, fork, blkno);
    LWLockAcquire(fc_lock(set), LW_EXCLUSIVE);
    w = fc_find(set, rnode, fork, blkno);
    if (w == NULL || !w->valid) {
        LWLockRelease(fc_lock(set));
        strata_stat_add(STAT_FC_MISS, 1);
        return false;
    }
    w->pins++;
    w->stamp = pg_atomic_fetch_add_u32(&fc->clock, 1);
    gen = w->gen;
    slot = fc_slot(w);
    LWLockRelease(fc_lock(set));

    ok = fc_io(false, slot, buffer);

    LWLockAcquire(fc_lock(set), LW_EXCLUSIVE);
    Assert(w->pins > 0);
    w->pins--;
    current = w->gen == gen;
    if (!ok && current)
        fc_clear(w);
    LWLockRelease(fc_lock(set));
    /* Invalidated while we read (a truncate or drop racing the read): the
     * pageserver decides. */
    if (!ok || !current) {
        strata_stat_add(STAT_FC_MISS, 1);
        return false;
    }
    strata_stat_add(STAT_FC_HIT, 1);
    return true;
}

bool strata_fc_contains(RelFileNode rnode, ForkNumber fork, BlockNumber blkno)
{
    uint32 set;
    fc_way *w;
    bool found;

    if (!fc_usable())
        return false;
    set = fc_key_set(rnode, fork, blkno);
    LWLockAcquire(fc_lock(set), LW_SHARED);
    w = fc_find(set, rnode, fork, blkno);
    found = w != NULL && w->valid;
    LWLockRelease(fc_lock(set));
    return found;
}

void strata_fc_write(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, const char *page)
{
    uint32 set, gen, slot;
    fc_way *w;
    bool ok;

    if (!fc_usable())
        return;
    set = fc_key_set(rnode, fork, blkno);
    LWLockAcquire(fc_lock(set), LW_EXCLUSIVE);
    w = fc_find(set, rnode, fork, blkno);
    if (w != NULL && w->pins > 0) {
        /* Someone reads the older copy right now: leave that slot to it. */
        fc_clear(w);
        w = NULL;
    }
    if (w == NULL) {
        w = fc_victim(set);
        if (w == NULL) {
            /* Every way busy: not cached (and no older copy stays behind:
             * the find above cleared it). */
            LWLockRelease(fc_lock(set));
            strata_stat_add(STAT_FC_SKIP, 1);
            return;
        }
        if (w->used)
            strata_stat_add(STAT_FC_EVICT, 1);
        w->rnode = rnode;
        w->fork = (int32)fork;
        w->blkno = blkno;
        w->used = true;
    }
    w->valid = false;
    w->gen++;
    w->pins++;
    w->stamp = pg_atomic_fetch_add_u32(&fc->clock, 1);
    gen = w->gen;
    slot = fc_slot(w);
    LWLockRelease(fc_lock(set));

    ok = fc_io(true, slot, (char *)page);

    LWLockAcquire(fc_lock(set), LW_EXCLUSIVE);
    Assert(w->pins > 0);
    w->pins--;
    if (w->gen == gen) {
        if (ok)
            w->valid = true;
        else
            fc_clear(w);
    }
    LWLockRelease(fc_lock(set));
    if (ok)
        strata_stat_add(STAT_FC_STORE, 1);
}

/*
 * Clears every way matching: of database db (rnode NULL), or of one relation's
 * fork (InvalidForkNumber: every fork) from block `from` on.  Scans the whole
 * array, taking a set's lock only where an unlocked look saw a match: a key
 * of these blocks cannot appear concurrently (their buffers are gone and no
 * process writes them while they are truncated or dropped), and a way that
 * lost such a key meanwhile is re-checked under the lock.
 */
static void fc_forget(const RelFileNode *rnode, Oid db, ForkNumber fork, BlockNumber from)
{
    Size nways;
    uint64 cleared = 0;

    if (fc == NULL || fc->nsets == 0)
        return;
    nways = (Size)fc->nsets * FC_WAYS;
    pg_memory_barrier();
    for (Size i = 0; i < nways; i++) {
        fc_way *w = &fc_ways[i];
        uint32 set = (uint32)(i / FC_WAYS);
        bool match;

#define FC_MATCHES(w)                                                                              \
    ((w)->used && (rnode == NULL ? (w)->rnode.dbNode == db                                         \
                                 : (RelFileNodeEquals((w)->rnode, *rnode) &&                       \
                                    (fork == InvalidForkNumber || (w)->fork == (int32)fork) &&     \
                                    (w)->blkno >= from)))
        if (!FC_MATCHES(w))
            continue;
        LWLockAcquire(fc_lock(set), LW_EXCLUSIVE);
        match = FC_MATCHES(w);
        if (match) {
            fc_clear(w);
            cleared++;
        }
        LWLockRelease(fc_lock(set));
#undef FC_MATCHES
    }
    if (cleared > 0)
        strata_stat_add(STAT_FC_INVALIDATED, cleared);
}

void strata_fc_forget_rel(RelFileNode rnode, ForkNumber fork, BlockNumber from)
{
    fc_forget(&rnode, InvalidOid, fork, from);
}

void strata_fc_forget_db(Oid db)
{
    fc_forget(NULL, db, InvalidForkNumber, 0);
}

#endif /* STRATA_HAVE_SMGR_HOOK */
