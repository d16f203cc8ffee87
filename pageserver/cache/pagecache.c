/*
 * pagecache.c: sharded CLOCK cache of materialised pages.  See pagecache.h.
 *
 * Each shard owns a fixed array of slots (entry metadata + one 8 KB page),
 * a chained hash table of slot indices, and a clock hand.  All of a shard's
 * state is guarded by its mutex; counters are atomics so stats can be read
 * without taking any lock.
 */
#include "pageserver/cache/pagecache.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sysmem.h"

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

/* By page, not version: a page's one entry is found whatever its LSN. */
static uint64_t entry_hash(uint64_t owner, const pg_key *k)
{
    uint64_t h = mix64(owner ^ 0x9e3779b97f4a7c15ULL);
    h = mix64(h ^ ((uint64_t)k->kind << 40 | (uint64_t)k->fork << 32 | k->spc));
    h = mix64(h ^ ((uint64_t)k->db << 32 | k->rel));
    return mix64(h ^ k->blk);
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

size_t pagecache_auto_bytes(void)
{
    uint64_t share = sysmem_usable_bytes() / PAGECACHE_AUTO_SHARE;
    if (share < PAGECACHE_AUTO_MIN_BYTES)
        share = PAGECACHE_AUTO_MIN_BYTES;
    if (share > SIZE_MAX / 2)
        share = SIZE_MAX / 2;
    return (size_t)share;
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

/* The slot holding page (owner, key), whatever its version, in bucket b, or
 * NO_SLOT.  Shard locked. */
static int32_t find(const shard *s, uint32_t b, uint64_t owner, const pg_key *key)
{
    for (int32_t i = s->buckets[b]; i != NO_SLOT; i = s->slots[i].next) {
        const slot *e = &s->slots[i];
        assert(e->used && e->bucket == b);
        if (e->owner == owner && key_equal(&e->key, key))
            return i;
    }
    return NO_SLOT;
}

/* The shard and bucket of page (owner, k). */
static shard *locate(pagecache *pc, uint64_t owner, const pg_key *k, uint32_t *b)
{
    uint64_t h = entry_hash(owner, k);
    shard *s = &pc->shards[h % PAGECACHE_SHARDS];
    *b = (uint32_t)(h >> 8) & s->bucket_mask;
    return s;
}

/* The lookups: the cached version of (owner, k) if its LSN is exactly
 * version_lsn (exact) or at most it (!exact), copied into out when out is
 * not NULL; a probe (count = false) leaves the statistics and the
 * reference bit alone. */
static bool lookup(pagecache *pc, uint64_t owner, const pg_key *k, lsn_t version_lsn, bool exact,
                   bool count, lsn_t *found, uint8_t *out)
{
    uint32_t b;
    shard *s = locate(pc, owner, k, &b);
    bool hit = false;
    if (pc->enabled) {
        pthread_mutex_lock(&s->mu);
        int32_t i = find(s, b, owner, k);
        if (i != NO_SLOT) {
            slot *e = &s->slots[i];
            hit = exact ? e->lsn == version_lsn : e->lsn <= version_lsn;
            if (hit) {
                *found = e->lsn;
                if (count)
                    e->referenced = true;
                if (out != NULL)
                    memcpy(out, s->pages + (size_t)i * PG_BLCKSZ, PG_BLCKSZ);
            }
        }
        pthread_mutex_unlock(&s->mu);
    }
    if (count)
        atomic_fetch_add_explicit(hit ? &s->hits : &s->misses, 1, memory_order_relaxed);
    return hit;
}

bool pagecache_lookup(pagecache *pc, uint64_t owner, const pg_key *k, lsn_t version_lsn,
                      uint8_t out[PG_BLCKSZ])
{
    lsn_t found;
    return lookup(pc, owner, k, version_lsn, true, true, &found, out);
}

bool pagecache_lookup_older(pagecache *pc, uint64_t owner, const pg_key *k, lsn_t below,
                            lsn_t *found, uint8_t out[PG_BLCKSZ])
{
    return below > 0 && lookup(pc, owner, k, below - 1, false, false, found, out);
}

bool pagecache_holds(pagecache *pc, uint64_t owner, const pg_key *k, lsn_t below)
{
    lsn_t found;
    return below > 0 && lookup(pc, owner, k, below - 1, false, false, &found, NULL);
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
    uint32_t b;
    shard *s = locate(pc, owner, k, &b);
    pthread_mutex_lock(&s->mu);
    int32_t i = find(s, b, owner, k);
    if (i != NO_SLOT && s->slots[i].lsn > version_lsn) {
        pthread_mutex_unlock(&s->mu); /* a newer version is cached: keep it */
        return;
    }
    if (i == NO_SLOT) {
        i = take_slot(s);
        slot *e = &s->slots[i];
        e->owner = owner;
        e->key = *k;
        e->used = true;
        e->bucket = b;
        e->next = s->buckets[b];
        s->buckets[b] = i;
        s->nused++;
        assert(s->nused <= s->nslots);
    }
    /* Start unreferenced: a page read once should not outlive hot ones. */
    s->slots[i].lsn = version_lsn;
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
