/*
 * smgr_cache.c: the compute's shared caches (docs/design.md §7.3) -- the
 * last-written-LSN cache, the relation size cache -- and the smgr's shared
 * statistics counters.
 *
 * Both caches are set-associative arrays in shared memory (8 ways per set,
 * the set chosen by a hash of the key), each set guarded by one of a fixed
 * number of LWLocks of the tranche "strata_smgr".  Bounded by
 * strata.lwlsn_cache_size / strata.relsize_cache_size; nothing is allocated
 * after startup.
 *
 * Last-written LSN: an entry holds the highest LSN this compute recorded for
 * a block (or, with blkno = InvalidBlockNumber, for a relation's metadata).
 * To make room, the way with the lowest LSN is evicted and the watermark is
 * raised to it; a block without an entry gets the watermark.  So the answer
 * is never older than the newest change recorded for the block.  The
 * watermark starts at the checkpoint the server started from (pg_control, read
 * when shared memory is made), and is raised to the end of WAL replay at the
 * first use after recovery: every change made before this server started is
 * before that point, and every change it makes itself is recorded when its
 * page leaves shared buffers.  It must not start at the insert LSN: WAL
 * written at startup reaches the safekeepers only through the walproposer's
 * local replication connection, whose backend reads shared catalogs through
 * this smgr -- asking for that WAL would wait for itself (deadlock).
 *
 * Relsize: an entry holds a fork's size (or that it does not exist) and
 * whether the WAL already shows that size ("wal_known").  Only wal_known
 * entries are ever evicted: an entry made by an extension the WAL does not
 * show yet (a zero page added by RelationAddExtraBlocks, an FSM/VM page) stays
 * until a WAL record reaches its last block.  When a set holds nothing
 * evictable, strata_relsize_extend() says so and the caller WAL-logs the
 * extension instead.  Evicting raises the relation's metadata LSN to the
 * insert LSN, so the next Nblocks waits for the WAL that shows the size.
 *
 * Not for: talking to the pageserver (pagestore.c) or deciding what to log
 * (smgr.c).
 */
#include "postgres.h"

#ifdef STRATA_HAVE_SMGR_HOOK

#include "access/xlog.h"
#include "access/xlogrecovery.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "compute/extension/smgr_int.h"

#define CACHE_WAYS 8
#define CACHE_LOCKS 128
#define TRANCHE_NAME "strata_smgr"

/* The last STRATA_WAIT_BUCKETS names: each bucket's upper bound. */
const char *const strata_stat_names[STAT_COUNT] = {
    "getpage",
    "prefetch_sent",
    "prefetch_hit",
    "prefetch_discard",
    "nblocks",
    "exists",
    "relsize_hit",
    "reconnect",
    "wal_flush",
    "logged_fsm_vm",
    "logged_inprogress",
    "logged_cycleid",
    "logged_zero_lsn",
    "logged_new_page",
    "logged_extend",
    "logging_skipped",
    "logged_sequence",
    "logged_relog",
    "file_cache_hit",
    "file_cache_miss",
    "file_cache_store",
    "file_cache_evict",
    "file_cache_skip",
    "file_cache_invalidated",
    "readahead",
    "getpage_wait_count",
    "getpage_wait_us",
    "getpage_wait_lt_16us",
    "getpage_wait_lt_32us",
    "getpage_wait_lt_64us",
    "getpage_wait_lt_128us",
    "getpage_wait_lt_256us",
    "getpage_wait_lt_512us",
    "getpage_wait_lt_1024us",
    "getpage_wait_lt_2048us",
    "getpage_wait_lt_4096us",
    "getpage_wait_lt_8192us",
    "getpage_wait_lt_16384us",
    "getpage_wait_lt_32768us",
    "getpage_wait_lt_65536us",
    "getpage_wait_lt_131072us",
    "getpage_wait_lt_262144us",
    "getpage_wait_lt_524288us",
    "getpage_wait_lt_1048576us",
    "getpage_wait_ge_1048576us",
};

typedef struct lwlsn_entry {
    RelFileNode rnode;
    int32 fork;
    BlockNumber blkno;
    XLogRecPtr lsn; /* 0 = empty way */
    bool image;     /* lsn is the end of a page image this compute logged */
} lwlsn_entry;

typedef struct relsize_entry {
    RelFileNode rnode;
    int32 fork;
    BlockNumber nblocks;
    bool used;
    bool exists;
    bool wal_known;
} relsize_entry;

typedef struct cache_header {
    pg_atomic_uint64 watermark;
    pg_atomic_uint32 watermark_needs_init; /* raise to the replay end at first use */
    pg_atomic_uint64 persistence_gen;      /* see strata_persistence_generation() */
    pg_atomic_uint64 stats[STAT_COUNT];
    uint32 lw_nsets;
    uint32 rs_nsets;
    /* lwlsn_entry[lw_nsets * CACHE_WAYS] then relsize_entry[rs_nsets * CACHE_WAYS] */
} cache_header;

static cache_header *cache = NULL;
static lwlsn_entry *lw_entries = NULL;
static relsize_entry *rs_entries = NULL;
static LWLockPadded *cache_locks = NULL;

static uint32 nsets_for(int entries)
{
    uint32 n = (uint32)Max(entries / CACHE_WAYS, 1);
    return n;
}

Size strata_cache_shmem_size(void)
{
    Size sz = MAXALIGN(sizeof(cache_header));
    sz = add_size(sz,
                  mul_size(nsets_for(strata_lwlsn_cache_size) * CACHE_WAYS, sizeof(lwlsn_entry)));
    sz = add_size(
        sz, mul_size(nsets_for(strata_relsize_cache_size) * CACHE_WAYS, sizeof(relsize_entry)));
    return sz;
}

void strata_cache_shmem_request(void)
{
    RequestAddinShmemSpace(strata_cache_shmem_size());
    RequestNamedLWLockTranche(TRANCHE_NAME, CACHE_LOCKS);
}

/* The checkpoint this server starts from (0 when pg_control is unreadable:
 * then requests ask for the pageserver's latest version until the first use
 * after recovery raises the watermark). */
static XLogRecPtr startup_checkpoint_lsn(void)
{
    ControlFileData *cf;
    bool crc_ok;
    XLogRecPtr lsn = InvalidXLogRecPtr;

    cf = get_controlfile(DataDir, &crc_ok);
    if (crc_ok)
        lsn = cf->checkPoint;
    pfree(cf);
    return lsn;
}

void strata_cache_shmem_startup(void)
{
    bool found;

    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    cache = ShmemInitStruct("strata smgr caches", strata_cache_shmem_size(), &found);
    if (!found) {
        cache->lw_nsets = nsets_for(strata_lwlsn_cache_size);
        cache->rs_nsets = nsets_for(strata_relsize_cache_size);
        pg_atomic_init_u64(&cache->watermark, startup_checkpoint_lsn());
        pg_atomic_init_u32(&cache->watermark_needs_init, 1);
        pg_atomic_init_u64(&cache->persistence_gen, 0);
        for (int i = 0; i < STAT_COUNT; i++)
            pg_atomic_init_u64(&cache->stats[i], 0);
    }
    lw_entries = (lwlsn_entry *)((char *)cache + MAXALIGN(sizeof(cache_header)));
    rs_entries = (relsize_entry *)(lw_entries + (Size)cache->lw_nsets * CACHE_WAYS);
    if (!found) {
        memset(lw_entries, 0, sizeof(lwlsn_entry) * (Size)cache->lw_nsets * CACHE_WAYS);
        memset(rs_entries, 0, sizeof(relsize_entry) * (Size)cache->rs_nsets * CACHE_WAYS);
    }
    cache_locks = GetNamedLWLockTranche(TRANCHE_NAME);
    LWLockRelease(AddinShmemInitLock);
}

void strata_stat_add(strata_stat which, uint64 n)
{
    Assert(which >= 0 && which < STAT_COUNT);
    if (cache != NULL)
        pg_atomic_fetch_add_u64(&cache->stats[which], n);
}

uint64 strata_stat_get(strata_stat which)
{
    Assert(which >= 0 && which < STAT_COUNT);
    return cache != NULL ? pg_atomic_read_u64(&cache->stats[which]) : 0;
}

uint64 strata_persistence_generation(void)
{
    if (cache == NULL)
        return 0;
    pg_memory_barrier();
    return pg_atomic_read_u64(&cache->persistence_gen);
}

void strata_persistence_changed(void)
{
    if (cache != NULL)
        pg_atomic_fetch_add_u64(&cache->persistence_gen, 1);
}

static uint32 key_hash(RelFileNode rnode, ForkNumber fork, BlockNumber blkno)
{
    uint32 words[5] = {rnode.spcNode, rnode.dbNode, rnode.relNode, (uint32)fork, blkno};
    return hash_bytes((const unsigned char *)words, sizeof words);
}

static void watermark_raise(XLogRecPtr lsn)
{
    uint64 cur = pg_atomic_read_u64(&cache->watermark);
    while (cur < lsn && !pg_atomic_compare_exchange_u64(&cache->watermark, &cur, lsn))
        ;
}

static XLogRecPtr watermark_get(void)
{
    if (pg_atomic_read_u32(&cache->watermark_needs_init) != 0 && !RecoveryInProgress()) {
        /* 0 when the server started without replaying any WAL. */
        watermark_raise(GetXLogReplayRecPtr(NULL));
        pg_atomic_write_u32(&cache->watermark_needs_init, 0);
    }
    return pg_atomic_read_u64(&cache->watermark);
}

static bool lw_match(const lwlsn_entry *e, RelFileNode rnode, ForkNumber fork, BlockNumber blkno)
{
    return e->lsn != InvalidXLogRecPtr && RelFileNodeEquals(e->rnode, rnode) &&
           e->fork == (int32)fork && e->blkno == blkno;
}

XLogRecPtr strata_lwlsn_get(RelFileNode rnode, ForkNumber fork, BlockNumber blkno)
{
    uint32 set = key_hash(rnode, fork, blkno) % cache->lw_nsets;
    lwlsn_entry *ways = &lw_entries[(Size)set * CACHE_WAYS];
    LWLock *lock = &cache_locks[set % CACHE_LOCKS].lock;
    XLogRecPtr result = InvalidXLogRecPtr;
    bool found = false;

    LWLockAcquire(lock, LW_SHARED);
    for (int i = 0; i < CACHE_WAYS; i++) {
        if (lw_match(&ways[i], rnode, fork, blkno)) {
            result = ways[i].lsn;
            found = true;
            break;
        }
    }
    LWLockRelease(lock);
    if (!found)
        result = watermark_get();
    return result;
}

bool strata_lwlsn_is_image(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, XLogRecPtr lsn)
{
    uint32 set = key_hash(rnode, fork, blkno) % cache->lw_nsets;
    lwlsn_entry *ways = &lw_entries[(Size)set * CACHE_WAYS];
    LWLock *lock = &cache_locks[set % CACHE_LOCKS].lock;
    bool result = false;

    if (lsn == InvalidXLogRecPtr)
        return false;
    LWLockAcquire(lock, LW_SHARED);
    for (int i = 0; i < CACHE_WAYS; i++) {
        if (lw_match(&ways[i], rnode, fork, blkno)) {
            result = ways[i].image && lsn <= ways[i].lsn;
            break;
        }
    }
    LWLockRelease(lock);
    return result;
}

/* Victim order: empty ways, then entries that are not images (an image
 * entry is what lets strata_lwlsn_is_image see a page changed without WAL
 * since; keep those longer), each by lowest LSN. */
static bool lw_better_victim(const lwlsn_entry *cand, const lwlsn_entry *cur)
{
    if (cur->lsn == InvalidXLogRecPtr)
        return false;
    if (cand->lsn == InvalidXLogRecPtr)
        return true;
    if (cand->image != cur->image)
        return !cand->image;
    return cand->lsn < cur->lsn;
}

static void lw_set(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, XLogRecPtr lsn,
                   bool image)
{
    uint32 set = key_hash(rnode, fork, blkno) % cache->lw_nsets;
    lwlsn_entry *ways = &lw_entries[(Size)set * CACHE_WAYS];
    LWLock *lock = &cache_locks[set % CACHE_LOCKS].lock;
    int victim = -1;

    if (lsn == InvalidXLogRecPtr)
        return;
    LWLockAcquire(lock, LW_EXCLUSIVE);
    for (int i = 0; i < CACHE_WAYS; i++) {
        if (lw_match(&ways[i], rnode, fork, blkno)) {
            if (ways[i].lsn < lsn) {
                ways[i].lsn = lsn;
                ways[i].image = image;
            } else if (ways[i].lsn == lsn && image) {
                ways[i].image = true;
            }
            LWLockRelease(lock);
            return;
        }
        if (victim < 0 || lw_better_victim(&ways[i], &ways[victim]))
            victim = i;
    }
    Assert(victim >= 0);
    /* The evicted LSN must be covered by the watermark before the entry
     * disappears, or a concurrent reader could see neither. */
    if (ways[victim].lsn != InvalidXLogRecPtr)
        watermark_raise(ways[victim].lsn);
    ways[victim].rnode = rnode;
    ways[victim].fork = (int32)fork;
    ways[victim].blkno = blkno;
    /* A new entry must not claim less than the watermark that answered for
     * the block until now: answers for one block never go backwards. */
    ways[victim].lsn = Max(lsn, watermark_get());
    ways[victim].image = image && ways[victim].lsn == lsn;
    LWLockRelease(lock);
}

void strata_lwlsn_set(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, XLogRecPtr lsn)
{
    lw_set(rnode, fork, blkno, lsn, false);
}

void strata_lwlsn_set_image(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, XLogRecPtr lsn)
{
    lw_set(rnode, fork, blkno, lsn, true);
}

static bool rs_match(const relsize_entry *e, RelFileNode rnode, ForkNumber fork)
{
    return e->used && RelFileNodeEquals(e->rnode, rnode) && e->fork == (int32)fork;
}

static relsize_entry *rs_set(RelFileNode rnode, ForkNumber fork, LWLock **lock)
{
    uint32 set = key_hash(rnode, fork, InvalidBlockNumber) % cache->rs_nsets;
    *lock = &cache_locks[set % CACHE_LOCKS].lock;
    return &rs_entries[(Size)set * CACHE_WAYS];
}

bool strata_relsize_get(RelFileNode rnode, ForkNumber fork, bool *exists, BlockNumber *nblocks)
{
    LWLock *lock;
    relsize_entry *ways = rs_set(rnode, fork, &lock);
    bool found = false;

    LWLockAcquire(lock, LW_SHARED);
    for (int i = 0; i < CACHE_WAYS; i++) {
        if (rs_match(&ways[i], rnode, fork)) {
            *exists = ways[i].exists;
            *nblocks = ways[i].exists ? ways[i].nblocks : 0;
            found = true;
            break;
        }
    }
    LWLockRelease(lock);
    return found;
}

/*
 * Finds the entry for the key or makes room for it (lock held exclusively).
 * Returns NULL when the key is absent and every way holds a size the WAL does
 * not show.  *evicted_known is set when a wal_known entry was evicted.
 */
static relsize_entry *rs_slot(relsize_entry *ways, RelFileNode rnode, ForkNumber fork, bool *is_new,
                              bool *evicted)
{
    int free_way = -1, known_way = -1;

    *is_new = false;
    *evicted = false;
    for (int i = 0; i < CACHE_WAYS; i++) {
        if (rs_match(&ways[i], rnode, fork))
            return &ways[i];
        if (!ways[i].used && free_way < 0)
            free_way = i;
        if (ways[i].used && ways[i].wal_known && known_way < 0)
            known_way = i;
    }
    *is_new = true;
    if (free_way >= 0)
        return &ways[free_way];
    if (known_way >= 0) {
        *evicted = true;
        return &ways[known_way];
    }
    return NULL;
}

/*
 * rs_slot for a caller that holds the set's lock exclusively; may release and
 * re-take it.  Before a wal_known entry is evicted, the evicted relation
 * fork's metadata last-written LSN is raised to the insert LSN: the watermark
 * (rs_evicted) covers only keys without a last-written-LSN entry, and a
 * metadata entry left by an old truncate or unlink would otherwise make the
 * next Nblocks ask at that old LSN and miss extensions the WAL shows later.
 * The raise is done without the relsize lock (both caches share the lock
 * pool) and before the entry goes, so a reader never sees neither; if
 * another entry is the victim after re-locking, it is raised too (bounded;
 * the last try evicts without the raise, leaving only the watermark).
 */
#define RS_RAISE_TRIES 4
static relsize_entry *rs_slot_raising(relsize_entry *ways, LWLock *lock, RelFileNode rnode,
                                      ForkNumber fork, bool *is_new, bool *evicted)
{
    RelFileNode raised_rnode = {0, 0, 0};
    int32 raised_fork = -1;

    for (int attempt = 0;; attempt++) {
        relsize_entry *e = rs_slot(ways, rnode, fork, is_new, evicted);

        if (e == NULL || !*evicted || attempt >= RS_RAISE_TRIES || RecoveryInProgress())
            return e;
        if (raised_fork == e->fork && RelFileNodeEquals(raised_rnode, e->rnode))
            return e;
        raised_rnode = e->rnode;
        raised_fork = e->fork;
        LWLockRelease(lock);
        strata_lwlsn_set(raised_rnode, (ForkNumber)raised_fork, InvalidBlockNumber,
                         GetXLogInsertRecPtr());
        LWLockAcquire(lock, LW_EXCLUSIVE);
    }
}

static void rs_evicted(void)
{
    /* The evicted relation's next Nblocks/Exists must see every record that
     * showed its size: all of them are before the current insert LSN.
     * rs_slot_raising raised that relation's metadata entry (when it has
     * one); the watermark covers it when it has none. */
    if (!RecoveryInProgress())
        watermark_raise(GetXLogInsertRecPtr());
}

void strata_relsize_learn(RelFileNode rnode, ForkNumber fork, bool exists, BlockNumber nblocks)
{
    LWLock *lock;
    relsize_entry *ways = rs_set(rnode, fork, &lock);
    relsize_entry *e;
    bool is_new, evicted;

    LWLockAcquire(lock, LW_EXCLUSIVE);
    e = rs_slot_raising(ways, lock, rnode, fork, &is_new, &evicted);
    if (e != NULL && is_new) {
        e->rnode = rnode;
        e->fork = (int32)fork;
        e->used = true;
        e->exists = exists;
        e->nblocks = exists ? nblocks : 0;
        e->wal_known = true;
    }
    LWLockRelease(lock);
    if (evicted)
        rs_evicted();
}

void strata_relsize_set(RelFileNode rnode, ForkNumber fork, BlockNumber nblocks, bool wal_known)
{
    LWLock *lock;
    relsize_entry *ways = rs_set(rnode, fork, &lock);
    relsize_entry *e;
    bool is_new, evicted;

    LWLockAcquire(lock, LW_EXCLUSIVE);
    e = rs_slot_raising(ways, lock, rnode, fork, &is_new, &evicted);
    if (e != NULL) {
        e->rnode = rnode;
        e->fork = (int32)fork;
        e->used = true;
        e->exists = true;
        e->nblocks = nblocks;
        e->wal_known = wal_known;
    }
    LWLockRelease(lock);
    if (evicted)
        rs_evicted();
}

bool strata_relsize_extend(RelFileNode rnode, ForkNumber fork, BlockNumber blkno, bool wal_known)
{
    LWLock *lock;
    relsize_entry *ways = rs_set(rnode, fork, &lock);
    relsize_entry *e;
    bool is_new, evicted;

    Assert(blkno != InvalidBlockNumber);
    LWLockAcquire(lock, LW_EXCLUSIVE);
    e = rs_slot_raising(ways, lock, rnode, fork, &is_new, &evicted);
    if (e == NULL) {
        LWLockRelease(lock);
        return false;
    }
    if (is_new) {
        e->rnode = rnode;
        e->fork = (int32)fork;
        e->used = true;
        e->exists = true;
        e->nblocks = blkno + 1;
        e->wal_known = wal_known;
    } else if (!e->exists || blkno + 1 > e->nblocks) {
        e->exists = true;
        e->nblocks = blkno + 1;
        e->wal_known = wal_known;
    }
    LWLockRelease(lock);
    if (evicted)
        rs_evicted();
    return true;
}

void strata_relsize_wal_saw(RelFileNode rnode, ForkNumber fork, BlockNumber blkno)
{
    LWLock *lock;
    relsize_entry *ways = rs_set(rnode, fork, &lock);

    LWLockAcquire(lock, LW_EXCLUSIVE);
    for (int i = 0; i < CACHE_WAYS; i++) {
        if (rs_match(&ways[i], rnode, fork)) {
            if (ways[i].exists && blkno + 1 >= ways[i].nblocks)
                ways[i].wal_known = true;
            break;
        }
    }
    LWLockRelease(lock);
}

void strata_relsize_forget(RelFileNode rnode, ForkNumber fork)
{
    LWLock *lock;
    relsize_entry *ways = rs_set(rnode, fork, &lock);

    LWLockAcquire(lock, LW_EXCLUSIVE);
    for (int i = 0; i < CACHE_WAYS; i++) {
        if (rs_match(&ways[i], rnode, fork)) {
            ways[i].used = false;
            break;
        }
    }
    LWLockRelease(lock);
}

#endif /* STRATA_HAVE_SMGR_HOOK */
