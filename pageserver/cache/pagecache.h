/*
 * pagecache.h: a bounded cache of materialised pages (docs/design.md §6.4),
 * keyed by (owner, key, version LSN).
 *
 * For: skipping redo for hot pages.  The page service asks the store for the
 * newest version of a key at or below the read LSN; that version's LSN
 * names an immutable page, so (owner, key, version_lsn) -> 8 KB is never
 * stale and needs no invalidation.  A page has at most one entry, its
 * newest version cached: an insert replaces an older version of the same
 * page and is dropped when a newer one is there (reads at old LSNs, rare,
 * replay).  An older version is still useful as the base of a replay
 * (pagecache_lookup_older), and pagewarm.h keeps the entry of a page that
 * ingest changed current.  owner is a number unique to one timeline
 * instance for the life of the process (a deleted and re-created timeline
 * gets a new one), so entries of a deleted timeline simply age out.
 * Not for: deciding which version to read (store.h) or producing pages
 * (redo.h).
 *
 * Threads: every function may be called from any thread.  The cache is split
 * into PAGECACHE_SHARDS shards by key hash, each with its own mutex held only
 * for a lookup or an insert (a hash probe and one 8 KB copy); there is no
 * global lock, so readers of different pages do not wait for each other.
 * Replacement is CLOCK (second chance) within a shard.
 *
 * Memory: capacity_bytes / PG_BLCKSZ slots allocated once at create; nothing
 * is allocated afterwards.  A capacity below one page per shard disables
 * the cache (every lookup misses, inserts are dropped).
 */
#ifndef STRATA_PAGESERVER_PAGECACHE_H
#define STRATA_PAGESERVER_PAGECACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "pageserver/store/key.h"

#define PAGECACHE_SHARDS 64

typedef struct pagecache pagecache;

/* A cache of at most capacity_bytes of pages.  0 or -1 with err (out of
 * memory). */
int pagecache_create(size_t capacity_bytes, pagecache **out, char *err, size_t errlen);
/* The default size ("auto"): an eighth of the memory this process may use
 * (sysmem_usable_bytes: the smaller of the RAM and the memory cgroup's
 * limit), at least PAGECACHE_AUTO_MIN_BYTES.  The slots are allocated but
 * only the pages the cache fills are ever touched, so an idle cache costs
 * little. */
#define PAGECACHE_AUTO_MIN_BYTES ((size_t)64 << 20)
#define PAGECACHE_AUTO_SHARE 8
size_t pagecache_auto_bytes(void);

/* Frees everything.  No other call may race this. */
void pagecache_destroy(pagecache *pc);

/* Copies the page cached for (owner, k, version_lsn) into out and returns
 * true, or returns false (a miss) leaving out untouched. */
bool pagecache_lookup(pagecache *pc, uint64_t owner, const pg_key *k, lsn_t version_lsn,
                      uint8_t out[PG_BLCKSZ]);

/* The cached version of (owner, k) if its LSN is below `below` (the base
 * of a replay): copies it into out, sets *found to its LSN and returns
 * true; else false.  Counted in neither hits nor misses, which stay one
 * per read. */
bool pagecache_lookup_older(pagecache *pc, uint64_t owner, const pg_key *k, lsn_t below,
                            lsn_t *found, uint8_t out[PG_BLCKSZ]);

/* Whether a version of (owner, k) below `below` is cached: a probe that
 * copies nothing and counts nothing. */
bool pagecache_holds(pagecache *pc, uint64_t owner, const pg_key *k, lsn_t below);

/* Caches a copy of page for (owner, k, version_lsn), replacing an older
 * version of that page or evicting another page if the shard is full;
 * dropped when a newer version of the page is cached.  Re-inserting an
 * existing entry refreshes it. */
void pagecache_insert(pagecache *pc, uint64_t owner, const pg_key *k, lsn_t version_lsn,
                      const uint8_t page[PG_BLCKSZ]);

typedef struct pagecache_stats {
    uint64_t hits;
    uint64_t misses;
    uint64_t inserts;
    uint64_t evictions;
    uint64_t entries;  /* pages held now */
    uint64_t capacity; /* pages it can hold */
} pagecache_stats;
void pagecache_get_stats(const pagecache *pc, pagecache_stats *out);

#endif
