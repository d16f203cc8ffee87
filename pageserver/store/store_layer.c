/*
 * store_layer.c: the store's in-memory layer (see store_layer.h).
 *
 * For: a single-writer, lock-free-reader index of recently ingested values
 * whose bytes live in memory chunks of LAYER_CHUNK bytes (never moved or
 * reused until the layer is freed, so a reader reads them in place without a
 * syscall, and a put costs a memcpy instead of two pwrites).  The layer's file
 * only reserves disk space for those bytes (fallocate, one call per 64 KB;
 * nothing is written), so a full disk still fails the put that needs the
 * space, and the open layer's footprint shows on disk as it always did.  The hash table has a fixed
 * bucket count chosen at creation (the store freezes the layer before chains
 * get long); nodes are prepended with a release store so a reader that
 * loads a bucket head with acquire sees a fully built node.
 * Not for: ordering across layers, durability, or eviction: a layer only
 * grows until the store freezes it, and is freed as a whole.
 */
#include "pageserver/store/store_layer.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/strata_assert.h"

/* Chunk size (a value never spans two) and the most chunks a layer holds. */
#define LAYER_CHUNK_SHIFT 20
#define LAYER_CHUNK ((uint64_t)1 << LAYER_CHUNK_SHIFT)
#define LAYER_MAX_CHUNKS 4096u
/* Disk space is reserved in steps of this many bytes. */
#define LAYER_RESERVE ((uint64_t)64 * 1024)

/* Freed chunks kept for the next layers (at most LAYER_POOL_MAX, so 24 MB
 * stay allocated when idle): a new layer then writes into memory that is
 * already mapped instead of faulting in and zeroing fresh pages. */
#define LAYER_POOL_MAX 24u
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *pool[LAYER_POOL_MAX];
static uint32_t pool_n;

static uint8_t *chunk_get(void)
{
    uint8_t *c = NULL;
    pthread_mutex_lock(&pool_mu);
    if (pool_n > 0)
        c = pool[--pool_n];
    pthread_mutex_unlock(&pool_mu);
    return c != NULL ? c : malloc(LAYER_CHUNK);
}

static void chunk_put(uint8_t *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&pool_mu);
    if (pool_n < LAYER_POOL_MAX) {
        pool[pool_n++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&pool_mu);
    free(c);
}

/* An arena allocation above ARENA_BIG bytes: malloc'd on its own. */
#define ARENA_BIG ((size_t)64 * 1024)
typedef struct layer_big {
    struct layer_big *next;
    max_align_t data[]; /* aligned for any object */
} layer_big;

struct store_layer {
    _Atomic int refs;
    int fd;
    char *path;
    uint32_t nbuckets; /* power of two */
    _Atomic(store_layer_key *) *buckets;
    _Atomic(store_layer_key *) kind_head[KEY_CONTROL + 1];
    _Atomic uint64_t file_len;  /* end of the bytes appended (published after the copy) */
    _Atomic(uint8_t *) *chunks; /* LAYER_MAX_CHUNKS slots, filled in order */
    uint32_t nchunks;           /* writer-only: chunks allocated */
    uint64_t reserved;          /* writer-only: file bytes reserved (fallocate) */
    _Atomic uint64_t nvalues;
    _Atomic uint64_t nkeys;
    _Atomic lsn_t freeze_lsn;
    uint64_t created_ms;
    /* Writer-only arena for key nodes and version arrays (replaced arrays
     * stay until the layer is freed, as readers may hold them): bump
     * allocation in pooled chunks, all returned at once with the layer. */
    uint8_t **meta;
    uint32_t nmeta, meta_cap;
    size_t meta_used;      /* in meta[nmeta - 1] */
    struct layer_big *big; /* allocations too large for a chunk */
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t key_hash(const uint8_t key[PG_KEY_LEN])
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < PG_KEY_LEN; i++) {
        h ^= key[i];
        h *= 0x100000001b3ULL;
    }
    return h ^ (h >> 29);
}

int store_layer_create(const char *path, uint32_t nbuckets, store_layer **out, char *err,
                       size_t errlen)
{
    uint32_t nb = 1024;
    while (nb < nbuckets && nb < (1u << 24))
        nb <<= 1;
    store_layer *l = calloc(1, sizeof *l);
    if (l == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    l->buckets = calloc(nb, sizeof *l->buckets);
    l->chunks = calloc(LAYER_MAX_CHUNKS, sizeof *l->chunks);
    l->path = strdup(path);
    if (l->buckets == NULL || l->chunks == NULL || l->path == NULL) {
        free(l->buckets);
        free(l->chunks);
        free(l->path);
        free(l);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    l->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (l->fd < 0) {
        snprintf(err, errlen, "create open layer file %s: %s", path, strerror(errno));
        free(l->buckets);
        free(l->chunks);
        free(l->path);
        free(l);
        return -1;
    }
    l->nbuckets = nb;
    atomic_init(&l->refs, 1);
    l->created_ms = now_ms();
    *out = l;
    return 0;
}

void store_layer_ref(store_layer *l)
{
    int was = atomic_fetch_add(&l->refs, 1);
    /* A reference can only be taken from one already held. */
    STRATA_ASSERT_MSG(was > 0, "layer referenced with %d references", was);
}

void store_layer_unref(store_layer *l)
{
    if (l == NULL)
        return;
    int was = atomic_fetch_sub(&l->refs, 1);
    STRATA_ASSERT_MSG(was > 0, "layer released with %d references", was);
    if (was > 1)
        return;
    close(l->fd);
    unlink(l->path);
    while (l->big != NULL) {
        layer_big *next = l->big->next;
        free(l->big);
        l->big = next;
    }
    for (uint32_t c = 0; c < l->nmeta; c++)
        chunk_put(l->meta[c]);
    free(l->meta);
    for (uint32_t c = 0; c < l->nchunks; c++)
        chunk_put(atomic_load_explicit(&l->chunks[c], memory_order_relaxed));
    free(l->chunks);
    free(l->buckets);
    free(l->path);
    free(l);
}

static store_layer_key *find_key(const store_layer *l, const uint8_t key[PG_KEY_LEN], uint64_t h)
{
    store_layer_key *k =
        atomic_load_explicit(&l->buckets[h & (l->nbuckets - 1)], memory_order_acquire);
    for (; k != NULL; k = k->hash_next)
        if (memcmp(k->key, key, PG_KEY_LEN) == 0)
            return k;
    return NULL;
}

const store_layer_key *store_layer_find(const store_layer *l, const uint8_t key[PG_KEY_LEN])
{
    return find_key(l, key, key_hash(key));
}

const store_layer_version *store_layer_versions(const store_layer_key *k, uint32_t *n)
{
    store_layer_vec *vec = atomic_load_explicit(&((store_layer_key *)k)->vec, memory_order_acquire);
    *n = atomic_load_explicit(&vec->n, memory_order_acquire);
    return vec->v;
}

int store_layer_find_at(const store_layer_version *v, uint32_t n, lsn_t at)
{
    /* First index with lsn > at, minus one. */
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (v[mid].lsn <= at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (int)lo - 1;
}

const uint8_t *store_layer_data(const store_layer *l, const store_layer_version *ver)
{
    uint64_t c = ver->off >> LAYER_CHUNK_SHIFT;
    STRATA_ASSERT(c < LAYER_MAX_CHUNKS);
    STRATA_ASSERT((ver->off & (LAYER_CHUNK - 1)) + ver->len <= LAYER_CHUNK);
    /* The version was published (release) after its chunk and bytes. */
    const uint8_t *chunk =
        atomic_load_explicit(&((store_layer *)l)->chunks[c], memory_order_acquire);
    STRATA_ASSERT(chunk != NULL);
    return chunk + (ver->off & (LAYER_CHUNK - 1));
}

int store_layer_read(const store_layer *l, const store_layer_version *ver, uint8_t *buf, char *err,
                     size_t errlen)
{
    (void)err;
    (void)errlen;
    memcpy(buf, store_layer_data(l, ver), ver->len);
    return 0;
}

/* Writer: makes room for len bytes at the end of the layer and returns
 * where they go (*off = their layer offset), moving to a new chunk -- after
 * writing the current one to the file -- when they do not fit.  NULL with
 * err on a write error or out of memory; the layer is then unchanged. */
static uint8_t *reserve(store_layer *l, uint32_t len, uint64_t *off, char *err, size_t errlen)
{
    uint64_t end = atomic_load_explicit(&l->file_len, memory_order_relaxed);
    if (len > LAYER_CHUNK) {
        snprintf(err, errlen, "value of %u bytes exceeds the open layer's chunk", len);
        return NULL;
    }
    uint8_t *dst = NULL;
    bool fresh = false;
    if (l->nchunks > 0) {
        uint64_t base = (uint64_t)(l->nchunks - 1) << LAYER_CHUNK_SHIFT;
        uint8_t *last = atomic_load_explicit(&l->chunks[l->nchunks - 1], memory_order_relaxed);
        if (end < base) {
            /* A put that failed after allocating this chunk left it empty. */
            *off = base;
            dst = last;
        } else if (end - base + len <= LAYER_CHUNK) {
            *off = end;
            dst = last + (end - base);
        }
    }
    if (dst == NULL) {
        if (l->nchunks == LAYER_MAX_CHUNKS) {
            snprintf(err, errlen, "open layer %s is full (%u chunks)", l->path, LAYER_MAX_CHUNKS);
            return NULL;
        }
        *off = (uint64_t)l->nchunks << LAYER_CHUNK_SHIFT;
        fresh = true;
    }
    /* Reserve the bytes' disk space (in LAYER_RESERVE steps) before taking
     * them: a full disk fails this put and leaves the layer as it was. */
    if (*off + len > l->reserved) {
        uint64_t from = *off > l->reserved ? *off : l->reserved;
        uint64_t to = (*off + len + LAYER_RESERVE - 1) & ~(LAYER_RESERVE - 1);
        if (fallocate(l->fd, 0, (off_t)from, (off_t)(to - from)) != 0) {
            if (errno != EOPNOTSUPP) {
                snprintf(err, errlen, "reserve space in open layer file %s: %s", l->path,
                         strerror(errno));
                return NULL;
            }
        }
        l->reserved = to;
    }
    if (fresh) {
        uint8_t *chunk = chunk_get();
        if (chunk == NULL) {
            snprintf(err, errlen, "out of memory");
            return NULL;
        }
        atomic_store_explicit(&l->chunks[l->nchunks], chunk, memory_order_release);
        l->nchunks++;
        dst = chunk;
        /* The skipped tail of the previous chunk counts as appended (it is
         * never read); file_len moves only when the value is published. */
    }
    return dst;
}

/* Writer: a copy of old (or a new array) with room for one more entry,
 * holding old's entries with ver inserted in LSN order (replacing an entry
 * with the same LSN). */
/* Writer: n bytes (16-byte aligned) from the layer's arena, freed with the
 * layer; NULL on out of memory. */
static void *arena_alloc(store_layer *l, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > ARENA_BIG) {
        layer_big *b = malloc(sizeof *b + n);
        if (b == NULL)
            return NULL;
        b->next = l->big;
        l->big = b;
        return b->data;
    }
    if (l->nmeta == 0 || l->meta_used + n > LAYER_CHUNK) {
        if (l->nmeta == l->meta_cap) {
            uint32_t cap = l->meta_cap ? l->meta_cap * 2 : 8;
            uint8_t **m = realloc(l->meta, cap * sizeof *m);
            if (m == NULL)
                return NULL;
            l->meta = m;
            l->meta_cap = cap;
        }
        uint8_t *c = chunk_get();
        if (c == NULL)
            return NULL;
        l->meta[l->nmeta++] = c;
        l->meta_used = 0;
    }
    void *p = l->meta[l->nmeta - 1] + l->meta_used;
    l->meta_used += n;
    return p;
}

static store_layer_vec *vec_with(store_layer *l, const store_layer_vec *old,
                                 const store_layer_version *ver)
{
    size_t n = old ? atomic_load_explicit(&old->n, memory_order_relaxed) : 0;
    /* Grow only when full: a same-LSN replacement keeps n, and doubling
     * the capacity on every one of them overflows after ~30 puts (a
     * 32-image FPI record extends one fork 32 times at one LSN). */
    size_t cap = old == NULL ? 2 : n < old->cap ? old->cap : (size_t)old->cap * 2;
    if (cap < n + 1)
        cap = n + 1;
    store_layer_vec *vec = arena_alloc(l, sizeof *vec + cap * sizeof vec->v[0]);
    if (vec == NULL)
        return NULL;
    vec->cap = (uint32_t)cap;
    /* below: entries older than ver; above: the first entry newer than it. */
    size_t below = old ? (size_t)(store_layer_find_at(old->v, (uint32_t)n, ver->lsn) + 1) : 0;
    size_t above = below;
    if (below > 0 && old->v[below - 1].lsn == ver->lsn)
        below--; /* same LSN: the new value replaces the old */
    if (below > 0)
        memcpy(vec->v, old->v, below * sizeof vec->v[0]);
    vec->v[below] = *ver;
    if (n > above)
        memcpy(vec->v + below + 1, old->v + above, (n - above) * sizeof vec->v[0]);
    atomic_init(&vec->n, (uint32_t)(below + 1 + (n - above)));
    return vec;
}

int store_layer_put(store_layer *l, const uint8_t key[PG_KEY_LEN], lsn_t lsn, const value_ref *v,
                    char *err, size_t errlen)
{
    uint8_t hdr[VALUE_HEADER_LEN];
    hdr[0] = v->kind;
    hdr[1] = v->flags;
    hdr[2] = (uint8_t)(v->len >> 24);
    hdr[3] = (uint8_t)(v->len >> 16);
    hdr[4] = (uint8_t)(v->len >> 8);
    hdr[5] = (uint8_t)v->len;

    uint64_t off;
    uint8_t *dst = reserve(l, (uint32_t)(VALUE_HEADER_LEN + v->len), &off, err, errlen);
    if (dst == NULL)
        return -1; /* file_len did not move: the layer is as it was */
    memcpy(dst, hdr, sizeof hdr);
    if (v->len > 0)
        memcpy(dst + sizeof hdr, v->payload, v->len);
    store_layer_version ver = {.lsn = lsn,
                               .off = off,
                               .len = VALUE_HEADER_LEN + v->len,
                               .kind = v->kind,
                               .flags = v->flags};

    uint64_t hsh = key_hash(key);
    store_layer_key *k = find_key(l, key, hsh);
    if (k == NULL) {
        /* On out of memory what was taken stays in the arena, unused. */
        k = arena_alloc(l, sizeof *k);
        store_layer_vec *vec = k != NULL ? vec_with(l, NULL, &ver) : NULL;
        if (vec == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        memcpy(k->key, key, PG_KEY_LEN);
        atomic_init(&k->vec, vec);
        _Atomic(store_layer_key *) *bucket = &l->buckets[hsh & (l->nbuckets - 1)];
        k->hash_next = atomic_load_explicit(bucket, memory_order_relaxed);
        uint8_t kind = key[0] <= KEY_CONTROL ? key[0] : KEY_CONTROL;
        k->kind_next = atomic_load_explicit(&l->kind_head[kind], memory_order_relaxed);
        atomic_store_explicit(bucket, k, memory_order_release);
        atomic_store_explicit(&l->kind_head[kind], k, memory_order_release);
        atomic_fetch_add_explicit(&l->nkeys, 1, memory_order_relaxed);
    } else {
        store_layer_vec *vec = atomic_load_explicit(&k->vec, memory_order_relaxed);
        uint32_t n = atomic_load_explicit(&vec->n, memory_order_relaxed);
        if (n < vec->cap && (n == 0 || vec->v[n - 1].lsn < lsn)) {
            /* The common case: a newer version appended in place. */
            vec->v[n] = ver;
            atomic_store_explicit(&vec->n, n + 1, memory_order_release);
        } else {
            store_layer_vec *nv = vec_with(l, vec, &ver);
            if (nv == NULL) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            /* The old array stays in the arena for readers that hold it. */
            atomic_store_explicit(&k->vec, nv, memory_order_release);
        }
    }
    atomic_fetch_add_explicit(&l->nvalues, 1, memory_order_relaxed);
    atomic_store_explicit(&l->file_len, off + ver.len, memory_order_release);
    return 0;
}

static int cmp_key_ptr(const void *a, const void *b)
{
    const store_layer_key *x = *(const store_layer_key *const *)a;
    const store_layer_key *y = *(const store_layer_key *const *)b;
    return memcmp(x->key, y->key, PG_KEY_LEN);
}

int store_layer_sorted_keys(const store_layer *l, const uint8_t *from, const uint8_t *to,
                            const store_layer_key ***out, size_t *n)
{
    int kind_lo = from ? from[0] : 0;
    int kind_hi = to ? to[0] : KEY_CONTROL;
    if (kind_hi > KEY_CONTROL)
        kind_hi = KEY_CONTROL;
    size_t cap = 64, cnt = 0;
    const store_layer_key **arr = malloc(cap * sizeof *arr);
    if (arr == NULL)
        return -1;
    for (int kind = kind_lo; kind <= kind_hi; kind++) {
        const store_layer_key *k =
            atomic_load_explicit(&((store_layer *)l)->kind_head[kind], memory_order_acquire);
        for (; k != NULL; k = k->kind_next) {
            if (from != NULL && memcmp(k->key, from, PG_KEY_LEN) < 0)
                continue;
            if (to != NULL && memcmp(k->key, to, PG_KEY_LEN) >= 0)
                continue;
            if (cnt == cap) {
                const store_layer_key **bigger = realloc(arr, cap * 2 * sizeof *arr);
                if (bigger == NULL) {
                    free(arr);
                    return -1;
                }
                arr = bigger;
                cap *= 2;
            }
            arr[cnt++] = k;
        }
    }
    qsort(arr, cnt, sizeof *arr, cmp_key_ptr);
    *out = arr;
    *n = cnt;
    return 0;
}

uint64_t store_layer_bytes(const store_layer *l)
{
    return atomic_load_explicit(&((store_layer *)l)->file_len, memory_order_acquire);
}

uint64_t store_layer_values(const store_layer *l)
{
    return atomic_load_explicit(&((store_layer *)l)->nvalues, memory_order_relaxed);
}

uint64_t store_layer_keys(const store_layer *l)
{
    return atomic_load_explicit(&((store_layer *)l)->nkeys, memory_order_relaxed);
}

uint32_t store_layer_buckets(const store_layer *l)
{
    return l->nbuckets;
}

void store_layer_set_freeze_lsn(store_layer *l, lsn_t lsn)
{
    atomic_store(&l->freeze_lsn, lsn);
}

lsn_t store_layer_freeze_lsn(const store_layer *l)
{
    return atomic_load(&((store_layer *)l)->freeze_lsn);
}

uint64_t store_layer_created_ms(const store_layer *l)
{
    return l->created_ms;
}
