/*
 * store_priv.h: what store.c and store_gc.c share (private to the store;
 * nothing outside pageserver/store/ and its tests may include this).
 *
 * For: the store struct, the published snapshot (open layer, frozen layers,
 * open data files), the LMDB record formats (index values, file records,
 * metadata) and the helpers both the flush and GC paths use.
 * Not for: the public contract (store.h).
 *
 * Snapshot publication (readers never block): the current snapshot is named
 * by one 64-bit word, (acquire count << 32) | slot.  A reader atomically adds
 * one to the count and so pins the slot's snapshot in the same instruction
 * that finds it; there is no window in which it could be freed.  A publisher
 * (serialised by publish_mu) swaps the word to the new slot and moves the
 * old word's count into the old snapshot's reference count, which started at
 * SNAP_BIAS; readers release by decrementing that count, and whoever brings
 * it to zero frees the snapshot.
 */
#ifndef STRATA_PAGESERVER_STORE_PRIV_H
#define STRATA_PAGESERVER_STORE_PRIV_H

#include <lmdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "pageserver/store/key.h"
#include "pageserver/store/store.h"
#include "pageserver/store/store_cache.h"
#include "pageserver/store/store_datafile.h"
#include "pageserver/store/store_layer.h"

/* Frozen layers waiting for their flush; the writer waits beyond this. */
#define STORE_MAX_FROZEN 4
#define STORE_SNAP_SLOTS 256
#define STORE_SNAP_BIAS (1LL << 40)
/* Decompressed block cache. */
#define STORE_BLOCK_CACHE_BYTES (64u * 1024 * 1024)
/* GC: index deletes per LMDB write transaction. */
#define STORE_GC_BATCH 1000
/* GC rewrites a data file whose live bytes fall under this fraction. */
#define STORE_GC_REWRITE_FRACTION 0.5

/* An open data file; shared by the snapshots that list it. */
typedef struct store_file {
    uint64_t id;
    int fd;
    uint64_t size;
    _Atomic int refs;
} store_file;

typedef struct store_snap {
    _Atomic int64_t refs;
    uint32_t slot;
    store_layer *open;
    int nfrozen;
    store_layer *frozen[STORE_MAX_FROZEN]; /* newest first */
    size_t nfiles;
    store_file **files; /* sorted by id */
} store_snap;

struct store {
    char dir[4096];
    char data_dir[4200];
    store_options o;
    int lock_fd;

    MDB_env *env;
    MDB_dbi dbi_index; /* index key -> index value */
    MDB_dbi dbi_files; /* file id (u64 BE) -> file record */
    MDB_dbi dbi_meta;  /* name -> value */

    _Atomic uint64_t snap_word;
    _Atomic(store_snap *) snap_slots[STORE_SNAP_SLOTS];
    pthread_mutex_t publish_mu; /* serialises snapshot changes */

    pthread_mutex_t write_mu; /* the writer side: puts, advance's freeze, store_flush's freeze */
    store_layer *open;        /* == current snapshot's open layer; changed under write_mu */
    uint64_t layer_seq;

    _Atomic lsn_t last_record_lsn;
    _Atomic lsn_t disk_consistent_lsn;
    pthread_mutex_t wait_mu;
    pthread_cond_t wait_cv;
    _Atomic int waiters;

    /* Background thread: flushes and age-based freezes. */
    pthread_t bg;
    bool bg_started;
    pthread_mutex_t bg_mu;
    pthread_cond_t bg_cv;    /* wakes the background thread */
    pthread_cond_t flush_cv; /* a flush finished or failed */
    bool stop;
    bool retry_now;
    uint64_t flush_attempts;       /* flush attempts started */
    uint64_t flush_failed_attempt; /* the number of the last attempt that failed */
    char flush_err[512];

    _Atomic uint64_t next_file_id;
    pthread_mutex_t gc_mu; /* one GC at a time */
    store_cache *cache;

    _Atomic uint64_t values_put, bytes_put, flushes, data_files, data_file_bytes, gc_removed;
};

/* ---- snapshots (store.c) ---- */
store_snap *store_snap_acquire(store *st);
void store_snap_release(store *st, store_snap *s);
/* A copy of the current snapshot with references on everything; caller holds
 * publish_mu.  NULL on out of memory. */
store_snap *store_snap_clone_current(store *st);
/* Publishes s (from clone_current, modified); caller holds publish_mu.
 * Returns -1 when no slot is free (s is released). */
int store_snap_publish(store *st, store_snap *s);
store_file *store_snap_find_file(const store_snap *s, uint64_t id);
/* Adds f (taking a new reference) / removes the file with id, keeping order. */
int store_snap_add_file(store_snap *s, store_file *f);
void store_snap_remove_file(store_snap *s, uint64_t id);
/* Opens data file id (read-only); NULL with err. */
store_file *store_file_open(store *st, uint64_t id, char *err, size_t errlen);
void store_file_unref(store_file *f);

/* ---- LMDB records ---- */
#define STORE_IDXV_INLINE 1
#define STORE_IDXV_FILE 2
#define STORE_IDXV_FILE_LEN 31

typedef struct store_idxv {
    uint8_t tag;
    uint8_t kind, flags;
    /* inline: the encoded value */
    const uint8_t *value;
    uint32_t value_len;
    /* file */
    uint64_t file_id, block_off;
    uint32_t block_len, off_in_block, entry_len;
} store_idxv;

int store_idxv_decode(const void *data, size_t len, store_idxv *out, const char **why);
void store_idxv_encode_file(const store_idxv *iv, uint8_t out[STORE_IDXV_FILE_LEN]);

typedef struct store_file_rec {
    uint64_t file_size;
    uint64_t value_bytes; /* entry bytes written */
    uint64_t live_bytes;  /* entry bytes the index still points at */
    uint64_t values;
    uint64_t live_values;
} store_file_rec;
#define STORE_FILE_REC_LEN 40

void store_file_rec_encode(const store_file_rec *r, uint8_t out[STORE_FILE_REC_LEN]);
int store_file_rec_decode(const void *data, size_t len, store_file_rec *r);
void store_file_key(uint64_t id, uint8_t out[8]);

/* Subtracts one dead entry of entry_len bytes from file id's record in txn. */
int store_file_rec_sub(store *st, MDB_txn *txn, uint64_t id, uint64_t entry_len, uint64_t count);

/*
 * Reads the value an index value points at.  For a file entry the block is
 * pinned in *hold (release with store_cache_release) and the entry's index
 * key is checked against ikey.  0 or -1 with err.
 */
int store_read_idxv(store *st, const store_snap *snap, const store_idxv *iv,
                    const uint8_t ikey[PG_INDEX_KEY_LEN], value_ref *out,
                    const store_cache_block **hold, char *err, size_t errlen);

/* Formats an LMDB error. */
void store_mdb_err(char *err, size_t errlen, const char *what, int rc);

#endif
