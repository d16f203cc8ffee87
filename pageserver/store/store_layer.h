/*
 * store_layer.h: the store's in-memory layer (docs/design.md §6.3, part 1), private to
 * the store (pageserver/store/).
 *
 * For: holding recently ingested values.  Value bytes are appended to
 * memory chunks of 1 MB that stay put until the layer is freed (reads copy
 * or point into them, no syscall).  The layer's file in the store directory
 * only reserves disk space for them (fallocate; nothing is written, no fsync:
 * durability comes from flushes and the safekeepers), so a full disk fails
 * a put as it always did.  Memory also holds a hash index key -> versions
 * sorted by LSN (lsn, offset, length, kind, flags) and, per key kind, a
 * list of keys for range scans and flushes.  A layer holds at most 4 GB
 * (then puts fail).
 * Not for: durability, sorting data files, or LMDB (store.c does those).
 *
 * Threads: exactly one writer (store_layer_put, store_layer_seal) and any
 * number of concurrent readers, without locks: key nodes and version arrays
 * are published with release stores and never change once a reader can see
 * them (a full version array is copied, the copy published, the old one kept
 * until the layer is freed).  Key nodes and version arrays come from the
 * layer's own arena, freed all at once with the layer.  Readers must hold a reference
 * (store_layer_ref) for as long as they use anything they found.
 *
 * Errors: functions that can fail return 0 or -1 with err filled (errno-style
 * text, e.g. "No space left on device"); a failed put leaves the layer as it
 * was before the call.
 */
#ifndef STRATA_PAGESERVER_STORE_LAYER_H
#define STRATA_PAGESERVER_STORE_LAYER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "pageserver/store/key.h"

typedef struct store_layer_version {
    lsn_t lsn;
    uint64_t off; /* of the encoded value (header + payload) in the layer file */
    uint32_t len; /* encoded length */
    uint8_t kind; /* value kind and flags, so completeness needs no read */
    uint8_t flags;
} store_layer_version;

typedef struct store_layer_vec {
    uint32_t cap;
    _Atomic uint32_t n;      /* entries [0, n) are published */
    store_layer_version v[]; /* sorted by lsn ascending, unique lsn */
} store_layer_vec;

typedef struct store_layer_key {
    uint8_t key[PG_KEY_LEN];
    _Atomic(store_layer_vec *) vec;
    struct store_layer_key *hash_next; /* immutable once published */
    struct store_layer_key *kind_next; /* immutable once published */
} store_layer_key;

typedef struct store_layer store_layer;

/* Creates an empty layer backed by a new file at path (truncated if it
 * exists).  nbuckets is rounded up to a power of two. */
int store_layer_create(const char *path, uint32_t nbuckets, store_layer **out, char *err,
                       size_t errlen);

void store_layer_ref(store_layer *l);
/* Drops a reference; the last one closes and unlinks the file and frees. */
void store_layer_unref(store_layer *l);

/* Writer: appends v (already validated) for key at lsn.  A value at an LSN
 * the key already has replaces it (newest put wins). */
int store_layer_put(store_layer *l, const uint8_t key[PG_KEY_LEN], lsn_t lsn, const value_ref *v,
                    char *err, size_t errlen);

/* Reader: the key's node, or NULL. */
const store_layer_key *store_layer_find(const store_layer *l, const uint8_t key[PG_KEY_LEN]);

/* Reader: the key's published versions (*n of them, ascending LSN).  The
 * array stays valid while the caller holds a layer reference. */
const store_layer_version *store_layer_versions(const store_layer_key *k, uint32_t *n);

/* Reader: index of the newest version with lsn <= at, or -1. */
int store_layer_find_at(const store_layer_version *v, uint32_t n, lsn_t at);

/* Reader: a version's encoded bytes (ver->len of them), in place; valid
 * while the caller holds a layer reference. */
const uint8_t *store_layer_data(const store_layer *l, const store_layer_version *ver);

/* Reader: copies a version's encoded bytes into buf (ver->len bytes).
 * Cannot fail today (kept for the callers' error paths). */
int store_layer_read(const store_layer *l, const store_layer_version *ver, uint8_t *buf, char *err,
                     size_t errlen);

/*
 * Reader: the keys in [from, to) (encoded, to may be NULL for "no end"),
 * sorted, in a malloc'd array the caller frees.  Only the per-kind key lists
 * the range can touch are visited.  0 or -1 (out of memory).
 */
int store_layer_sorted_keys(const store_layer *l, const uint8_t *from, const uint8_t *to,
                            const store_layer_key ***out, size_t *n);

/* Sizes (readable from any thread). */
uint64_t store_layer_bytes(const store_layer *l);
uint64_t store_layer_values(const store_layer *l);
uint64_t store_layer_keys(const store_layer *l);
uint32_t store_layer_buckets(const store_layer *l);

/* Per-layer metadata set by the store under its writer lock. */
void store_layer_set_freeze_lsn(store_layer *l, lsn_t lsn);
lsn_t store_layer_freeze_lsn(const store_layer *l);
uint64_t store_layer_created_ms(const store_layer *l);

#endif
