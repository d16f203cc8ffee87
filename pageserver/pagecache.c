/*
 * pagecache.c: sharded CLOCK cache of materialised pages.  See pagecache.h.
 *
 * Each shard owns a fixed array of slots (entry metadata + one 8 KB page),
 * a chained hash table of slot indices, and a clock hand.  All of a shard's
 * state is guarded by its mutex; counters are atomics so stats can be read
 * without taking any lock.
 */
#include "pageserver/pagecache.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_SLOT (-1)

typedef struct slot {
    uint64_t owner;
    lsn_t lsn;
    pg_key key;
    bool used;
    bool referenced;
    int32_t next; /* next slot in the same hash chain, or NO_SLOT */
    uint32_t bucket;
} slot;

typedef struct shard {
    pthread_mutex_t mu;
    int32_t nslots;
    int32_t nused;
    int32_t hand;
    uint32_t bucket_mask;
    int32_t *buckets; /* bucket_mask + 1 heads */
    slot *slots;
    uint8_t *pages; /* nslots * PG_BLCKSZ */
    _Atomic uint64_t hits, misses, inserts, evictions;
} shard;

struct pagecache {
    bool enabled;
    shard shards[PAGECACHE_SHARDS];
};

static uint64_t mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static uint64_t entry_hash(uint64_t owner, const pg_key *k, lsn_t lsn)
{
    uint64_t h = mix64(owner ^ 0x9e3779b97f4a7c15ULL);
    h = mix64(h ^ ((uint64_t)k->kind << 40 | (uint64_t)k->fork << 32 | k->spc));
    h = mix64(h ^ ((uint64_t)k->db << 32 | k->rel));
    h = mix64(h ^ k->blk);
    return mix64(h ^ lsn);
}

static bool key_equal(const pg_key *a, const pg_key *b)
{
    return a->kind == b->kind && a->spc == b->spc && a->db == b->db && a->rel == b->rel &&
           a->fork == b->fork && a->blk == b->blk;
}

int pagecache_create(size_t capacity_bytes, pagecache **out, char *err, size_t errlen)
{
    *out = NULL;
    pagecache *pc = calloc(1, sizeof *pc);
    if (pc == NULL) {
        snprintf(err, errlen, "page cache: out of memory");
        return -1;
    }
    size_t per_shard = capacity_bytes / PG_BLCKSZ / PAGECACHE_SHARDS;
    if (per_shard > INT32_MAX / 4)
        per_shard = INT32_MAX / 4;
    pc->enabled = per_shard > 0;
    for (int i = 0; i < PAGECACHE_SHARDS; i++) {
        shard *s = &pc->shards[i];
        pthread_mutex_init(&s->mu, NULL);
        if (!pc->enabled)
            continue;
        uint32_t nb = 1;
        while (nb < 2 * per_shard)
            nb <<= 1;
        s->nslots = (int32_t)per_shard;
        s->bucket_mask = nb - 1;
        s->buckets = malloc(nb * sizeof *s->buckets);
        s->slots = calloc(per_shard, sizeof *s->slots);
        s->pages = malloc(per_shard * PG_BLCKSZ);
        if (s->buckets == NULL || s->slots == NULL || s->pages == NULL) {
            pagecache_destroy(pc);
            snprintf(err, errlen, "page cache: out of memory allocating %zu bytes", capacity_bytes);
            return -1;
        }
        for (uint32_t b = 0; b < nb; b++)
            s->buckets[b] = NO_SLOT;
    }
    *out = pc;
    return 0;
}

void pagecache_destroy(pagecache *pc)
{
    if (pc == NULL)
        return;
    for (int i = 0; i < PAGECACHE_SHARDS; i++) {
        shard *s = &pc->shards[i];
        pthread_mutex_destroy(&s->mu);
        free(s->buckets);
        free(s->slots);
        free(s->pages);
    }
    free(pc);
}

/* The slot holding (owner, key, lsn) in bucket b, or NO_SLOT.  Shard locked. */
static int32_t find(const shard *s, uint32_t b, uint64_t owner, const pg_key *key, lsn_t lsn)
{
    for (int32_t i = s->buckets[b]; i != NO_SLOT; i = s->slots[i].next) {
        const slot *e = &s->slots[i];
        assert(e->used && e->bucket == b);
        if (e->owner == owner && e->lsn == lsn && key_equal(&e->key, key))
            return i;
    }
    return NO_SLOT;
}

bool pagecache_lookup(pagecache *pc, uint64_t owner, const pg_key *k, lsn_t version_lsn,
                      uint8_t out[PG_BLCKSZ])
{
    uint64_t h = entry_hash(owner, k, version_lsn);
    shard *s = &pc->shards[h % PAGECACHE_SHARDS];
    if (!pc->enabled) {
        atomic_fetch_add_explicit(&s->misses, 1, memory_order_relaxed);
        return false;
    }
    uint32_t b = (uint32_t)(h >> 8) & s->bucket_mask;
    pthread_mutex_lock(&s->mu);
    int32_t i = find(s, b, owner, k, version_lsn);
    if (i != NO_SLOT) {
        s->slots[i].referenced = true;
        memcpy(out, s->pages + (size_t)i * PG_BLCKSZ, PG_BLCKSZ);
    }
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add_explicit(i != NO_SLOT ? &s->hits : &s->misses, 1, memory_order_relaxed);
    return i != NO_SLOT;
}

static void unlink_slot(shard *s, int32_t victim)
{
    slot *e = &s->slots[victim];
    int32_t *link = &s->buckets[e->bucket];
    while (*link != victim) {
        assert(*link != NO_SLOT);
        link = &s->slots[*link].next;
    }
    *link = e->next;
    e->used = false;
    e->next = NO_SLOT;
    s->nused--;
}

/* A free slot, evicting the first unreferenced one the hand finds (second
 * chance).  Terminates within two sweeps: the first clears every bit. */
static int32_t take_slot(shard *s)
{
    for (int32_t n = 0; n < 2 * s->nslots + 1; n++) {
        int32_t i = s->hand;
        s->hand = (s->hand + 1) % s->nslots;
        slot *e = &s->slots[i];
        if (!e->used)
            return i;
        if (e->referenced) {
            e->referenced = false;
            continue;
        }
        unlink_slot(s, i);
        atomic_fetch_add_explicit(&s->evictions, 1, memory_order_relaxed);
        return i;
    }
    assert(!"clock found no slot in two sweeps");
    return NO_SLOT;
}

void pagecache_insert(pagecache *pc, uint64_t owner, const pg_key *k, lsn_t version_lsn,
                      const uint8_t page[PG_BLCKSZ])
{
    if (!pc->enabled)
        return;
    uint64_t h = entry_hash(owner, k, version_lsn);
    shard *s = &pc->shards[h % PAGECACHE_SHARDS];
    uint32_t b = (uint32_t)(h >> 8) & s->bucket_mask;
    pthread_mutex_lock(&s->mu);
    int32_t i = find(s, b, owner, k, version_lsn);
    if (i == NO_SLOT) {
        i = take_slot(s);
        slot *e = &s->slots[i];
        e->owner = owner;
        e->lsn = version_lsn;
        e->key = *k;
        e->used = true;
        e->bucket = b;
        e->next = s->buckets[b];
        s->buckets[b] = i;
        s->nused++;
        assert(s->nused <= s->nslots);
    }
    /* Start unreferenced: a page read once should not outlive hot ones. */
    s->slots[i].referenced = false;
    memcpy(s->pages + (size_t)i * PG_BLCKSZ, page, PG_BLCKSZ);
    pthread_mutex_unlock(&s->mu);
    atomic_fetch_add_explicit(&s->inserts, 1, memory_order_relaxed);
}

void pagecache_get_stats(const pagecache *pc, pagecache_stats *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < PAGECACHE_SHARDS; i++) {
        shard *s = (shard *)&pc->shards[i];
        out->hits += atomic_load_explicit(&s->hits, memory_order_relaxed);
        out->misses += atomic_load_explicit(&s->misses, memory_order_relaxed);
        out->inserts += atomic_load_explicit(&s->inserts, memory_order_relaxed);
        out->evictions += atomic_load_explicit(&s->evictions, memory_order_relaxed);
        out->capacity += (uint64_t)s->nslots;
        pthread_mutex_lock(&s->mu);
        out->entries += (uint64_t)s->nused;
        pthread_mutex_unlock(&s->mu);
    }
}
