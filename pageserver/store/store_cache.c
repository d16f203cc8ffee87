/*
 * store_cache.c: the sharded, bounded, reference-counted block cache (see
 * store_cache.h).
 *
 * Each shard is a small chained hash table plus an LRU list, guarded by the
 * shard's mutex; capacity is divided evenly between shards.  An entry's
 * reference count includes one for being in the table; eviction drops that
 * one and the last release frees the memory.
 */
#include "pageserver/store/store_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "base/strata_assert.h"

#define NSHARDS 16
#define SHARD_BUCKETS 1024

typedef struct entry {
    store_cache_block pub; /* first: callers get &entry->pub */
    uint64_t file_id, block_off;
    _Atomic int refs;
    bool in_table;
    struct entry *hash_next;
    struct entry *lru_prev, *lru_next; /* most recent at head */
} entry;

typedef struct shard {
    pthread_mutex_t mu;
    entry *buckets[SHARD_BUCKETS];
    entry *lru_head, *lru_tail;
    size_t bytes;
} shard;

struct store_cache {
    size_t shard_cap;
    _Atomic uint64_t hits, misses;
    shard shards[NSHARDS];
};

static uint64_t mix(uint64_t file_id, uint64_t off)
{
    uint64_t h = file_id * 0x9E3779B97F4A7C15ULL ^ off;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 29);
}

store_cache *store_cache_create(size_t capacity_bytes)
{
    store_cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->shard_cap = capacity_bytes / NSHARDS;
    for (int i = 0; i < NSHARDS; i++)
        pthread_mutex_init(&c->shards[i].mu, NULL);
    return c;
}

static void entry_unref(entry *e)
{
    int was = atomic_fetch_sub(&e->refs, 1);
    STRATA_ASSERT_MSG(was > 0, "cache entry released with %d references", was);
    if (was == 1) {
        free((void *)e->pub.data);
        free(e);
    }
}

void store_cache_destroy(store_cache *c)
{
    if (c == NULL)
        return;
    for (int i = 0; i < NSHARDS; i++) {
        shard *s = &c->shards[i];
        entry *e = s->lru_head;
        while (e != NULL) {
            entry *next = e->lru_next;
            entry_unref(e);
            e = next;
        }
        pthread_mutex_destroy(&s->mu);
    }
    free(c);
}

static void lru_unlink(shard *s, entry *e)
{
    if (e->lru_prev)
        e->lru_prev->lru_next = e->lru_next;
    else
        s->lru_head = e->lru_next;
    if (e->lru_next)
        e->lru_next->lru_prev = e->lru_prev;
    else
        s->lru_tail = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void lru_push_head(shard *s, entry *e)
{
    e->lru_prev = NULL;
    e->lru_next = s->lru_head;
    if (s->lru_head)
        s->lru_head->lru_prev = e;
    s->lru_head = e;
    if (s->lru_tail == NULL)
        s->lru_tail = e;
}

static void table_remove(shard *s, entry *e, uint64_t h)
{
    entry **pp = &s->buckets[(h >> 4) % SHARD_BUCKETS];
    while (*pp != e)
        pp = &(*pp)->hash_next;
    *pp = e->hash_next;
    lru_unlink(s, e);
    s->bytes -= e->pub.len;
    e->in_table = false;
}

static entry *table_find(shard *s, uint64_t h, uint64_t file_id, uint64_t off)
{
    for (entry *e = s->buckets[(h >> 4) % SHARD_BUCKETS]; e != NULL; e = e->hash_next)
        if (e->file_id == file_id && e->block_off == off)
            return e;
    return NULL;
}

const store_cache_block *store_cache_lookup(store_cache *c, uint64_t file_id, uint64_t block_off)
{
    uint64_t h = mix(file_id, block_off);
    shard *s = &c->shards[h % NSHARDS];
    pthread_mutex_lock(&s->mu);
    entry *e = table_find(s, h, file_id, block_off);
    if (e != NULL) {
        atomic_fetch_add(&e->refs, 1);
        lru_unlink(s, e);
        lru_push_head(s, e);
    }
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add_explicit(e ? &c->hits : &c->misses, 1, memory_order_relaxed);
    return e ? &e->pub : NULL;
}

const store_cache_block *store_cache_insert(store_cache *c, uint64_t file_id, uint64_t block_off,
                                            uint8_t *data, uint32_t len)
{
    entry *n = calloc(1, sizeof *n);
    if (n == NULL) {
        free(data);
        return NULL;
    }
    n->pub.data = data;
    n->pub.len = len;
    n->file_id = file_id;
    n->block_off = block_off;
    atomic_init(&n->refs, 2); /* the table's and the caller's */
    uint64_t h = mix(file_id, block_off);
    shard *s = &c->shards[h % NSHARDS];
    entry *evicted = NULL;
    pthread_mutex_lock(&s->mu);
    entry *old = table_find(s, h, file_id, block_off);
    if (old != NULL) {
        atomic_fetch_add(&old->refs, 1);
        pthread_mutex_unlock(&s->mu);
        free(data);
        free(n);
        return &old->pub;
    }
    entry **bucket = &s->buckets[(h >> 4) % SHARD_BUCKETS];
    n->hash_next = *bucket;
    *bucket = n;
    n->in_table = true;
    lru_push_head(s, n);
    s->bytes += len;
    /* Evict least recently used entries (never the new one) past capacity;
     * they are chained through hash_next once out of the table. */
    while (s->bytes > c->shard_cap && s->lru_tail != NULL && s->lru_tail != n) {
        entry *victim = s->lru_tail;
        table_remove(s, victim, mix(victim->file_id, victim->block_off));
        victim->hash_next = evicted;
        evicted = victim;
    }
    pthread_mutex_unlock(&s->mu);
    while (evicted != NULL) {
        entry *next = evicted->hash_next;
        entry_unref(evicted);
        evicted = next;
    }
    return &n->pub;
}

void store_cache_release(store_cache *c, const store_cache_block *b)
{
    (void)c;
    if (b != NULL)
        entry_unref((entry *)b);
}

void store_cache_counts(store_cache *c, uint64_t *hits, uint64_t *misses)
{
    *hits = atomic_load_explicit(&c->hits, memory_order_relaxed);
    *misses = atomic_load_explicit(&c->misses, memory_order_relaxed);
}
