/*
 * store_cache.h: a bounded cache of decompressed data-file blocks, private
 * to the store (pageserver/store/).
 *
 * For: keeping hot blocks decompressed so a read of a cold key costs one
 * pread + one zstd decompression and a read of a hot one costs neither.
 * Keyed by (file id, block offset); file ids are never reused, so entries of
 * deleted files are never wrong, only evicted in time.
 * Not for: materialised pages (that is the page cache above the store).
 *
 * Threads: any.  The cache is split into shards, each with its own mutex held
 * only for a hash lookup or an insert (never during IO or decompression), so
 * no single lock serialises readers.  Entries are reference counted: an
 * entry returned by lookup/insert stays valid until released, even if it is
 * evicted meanwhile.  Bounded by capacity bytes (plus entries in use).
 */
#ifndef STRATA_PAGESERVER_STORE_CACHE_H
#define STRATA_PAGESERVER_STORE_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct store_cache store_cache;

typedef struct store_cache_block {
    const uint8_t *data;
    uint32_t len;
} store_cache_block;

/* NULL on out of memory. */
store_cache *store_cache_create(size_t capacity_bytes);
void store_cache_destroy(store_cache *c);

/* A held reference to the block, or NULL on a miss. */
const store_cache_block *store_cache_lookup(store_cache *c, uint64_t file_id, uint64_t block_off);

/* Takes ownership of data (malloc'd, len bytes) and returns a held
 * reference; if another thread inserted the same block first, data is freed
 * and that entry returned.  NULL only on out of memory (data is freed). */
const store_cache_block *store_cache_insert(store_cache *c, uint64_t file_id, uint64_t block_off,
                                            uint8_t *data, uint32_t len);

void store_cache_release(store_cache *c, const store_cache_block *b);

/* Hits and misses so far (relaxed counters). */
void store_cache_counts(store_cache *c, uint64_t *hits, uint64_t *misses);

#endif
