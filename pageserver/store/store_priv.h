/*
 * store_priv.h: what the store's files share (private to the store;
 * nothing outside pageserver/store/ and its tests may include this).
 *
 * For: the store struct, the published snapshot (open layer, frozen layers,
 * open data files), the LMDB record formats (index values, file records,
 * metadata), the data-file commit both the flush and GC use, and the other
 * helpers they share.
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

#include "base/byteorder.h"
#include "base/must_check.h"
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
    _Atomic(store_commit_hook) commit_hook; /* store_set_commit_hook */
    void *commit_hook_arg;
    pthread_mutex_t gc_mu; /* one GC at a time */
    store_cache *cache;

    _Atomic uint64_t values_put, bytes_put, flushes, data_files, data_file_bytes, gc_removed;
};

/* ---- data files and snapshots (store_snap.c) ---- */
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
/* Frees s and its references, and frees its slot (s->slot; none when it is
 * STORE_SNAP_SLOTS). */
void store_snap_free(store *st, store_snap *s);

/* ---- LMDB records (store_records.c) ---- */
/*
 * Index values.  Every value is written to a data file (so data files alone
 * can rebuild the store, store_rebuild); small ones are also kept inline for
 * reads that need no data-file block:
 *   1 | encoded value                      inline only (stores written before
 *                                          values went to data files; read,
 *                                          never written)
 *   2 | kind | flags | file id | block offset | block length | offset in
 *       block | entry length               in a data file (31 bytes)
 *   3 | file id | encoded value            inline, with its copy in data file
 *                                          file id (the file's only entry for
 *                                          this index key)
 * The file id of tag 3 is what lets GC copy an entry out of file F only when
 * F holds the live copy, and what the live counts of file records follow.
 */
#define STORE_IDXV_INLINE 1
#define STORE_IDXV_FILE 2
#define STORE_IDXV_INLINE_FILE 3
#define STORE_IDXV_FILE_LEN 31
#define STORE_IDXV_INLINE_FILE_HDR 9

/* Metadata "format": absent (or 1) in stores whose small values may live
 * only inline (tag 1); STORE_FORMAT_VALUES_IN_FILES once every value has a
 * data-file copy (store_open migrates older stores: store_migrate.c). */
#define STORE_FORMAT_VALUES_IN_FILES 2

typedef struct store_idxv {
    uint8_t tag;
    uint8_t kind, flags;
    /* inline (tags 1, 3): the encoded value */
    const uint8_t *value;
    uint32_t value_len;
    /* in a file (tags 2, 3): file_id and entry_len; the location for tag 2 */
    uint64_t file_id, block_off;
    uint32_t block_len, off_in_block, entry_len;
} store_idxv;

/* The value is in the index itself (tags 1, 3). */
static inline bool store_idxv_is_inline(const store_idxv *iv)
{
    return iv->tag == STORE_IDXV_INLINE || iv->tag == STORE_IDXV_INLINE_FILE;
}
/* A data file holds the entry (tags 2, 3): file_id and entry_len are set. */
static inline bool store_idxv_in_file(const store_idxv *iv)
{
    return iv->tag == STORE_IDXV_FILE || iv->tag == STORE_IDXV_INLINE_FILE;
}

int store_idxv_decode(const void *data, size_t len, store_idxv *out, const char **why);
void store_idxv_encode_file(const store_idxv *iv, uint8_t out[STORE_IDXV_FILE_LEN]);
/* The header of a tag-3 value; the encoded value follows it. */
void store_idxv_encode_inline_hdr(uint64_t file_id, uint8_t out[STORE_IDXV_INLINE_FILE_HDR]);

typedef struct store_file_rec {
    uint64_t file_size;
    uint64_t value_bytes; /* entry bytes written */
    uint64_t live_bytes;  /* entry bytes the index still points at */
    uint64_t values;
    uint64_t live_values;
    lsn_t lsn_min, lsn_max; /* LSN range of the entries written (for the remote manifest) */
} store_file_rec;
/* Records written before the LSN range was kept are STORE_FILE_REC_LEN_V1
 * bytes; they decode with the widest range (0, LSN_MAX) and are rewritten
 * with it, at full length, by the next update. */
#define STORE_FILE_REC_LEN 56
#define STORE_FILE_REC_LEN_V1 40

void store_file_rec_encode(const store_file_rec *r, uint8_t out[STORE_FILE_REC_LEN]);
int store_file_rec_decode(const void *data, size_t len, store_file_rec *r);
void store_file_key(uint64_t id, uint8_t out[8]);

/* Subtracts one dead entry of entry_len bytes from file id's record in txn. */
int store_file_rec_sub(store *st, MDB_txn *txn, uint64_t id, uint64_t entry_len, uint64_t count);

/*
 * Reads the value an index value points at (store_read.c).  For a file entry the block is
 * pinned in *hold (release with store_cache_release) and the entry's index
 * key is checked against ikey.  0 or -1 with err.
 */
int store_read_idxv(store *st, const store_snap *snap, const store_idxv *iv,
                    const uint8_t ikey[PG_INDEX_KEY_LEN], value_ref *out,
                    const store_cache_block **hold, char *err, size_t errlen);

/* Reads metadata value name from txn (0 when absent): 0 or an LMDB error
 * code. */
int store_meta_get_u64(store *st, MDB_txn *txn, const char *name, uint64_t *out);
/* Writes metadata value name = v in txn: 0 or an LMDB error code. */
int store_meta_put_u64(store *st, MDB_txn *txn, const char *name, uint64_t v);

/* ---- committing a new data file (store_commit.c) ---- */

/*
 * A data file being written, from its first entry to the commit that
 * references it.  Zero-initialise; store_new_file_add writes entries (the
 * file is created on the first); store_commit_data_file commits;
 * store_new_file_release always follows.
 */
typedef struct store_new_file {
    uint64_t id;                      /* valid once w != NULL */
    store_df_writer *w;               /* NULL: no entry written (no file) */
    store_file *file;                 /* open once durable */
    uint64_t size;                    /* bytes, once durable */
    uint64_t value_bytes, values;     /* entries written */
    uint64_t live_bytes, live_values; /* entries the index points at (store_new_file_idxv) */
    lsn_t lsn_min, lsn_max;           /* LSN range of the entries written */
    bool published;                   /* in the current snapshot, not referenced yet */
    bool committed;
} store_new_file;

/* Appends one entry (index key + encoded value of len bytes) to nf; *loc is
 * where it went.  0 or -1 with err. */
STRATA_MUST_CHECK int store_new_file_add(store *st, store_new_file *nf,
                                         const uint8_t ikey[PG_INDEX_KEY_LEN], const uint8_t *value,
                                         size_t len, store_df_loc *loc, char *err, size_t errlen);

/* The index value naming nf's entry at loc, and counts that entry as live in
 * nf's file record.  Only from a store_index_fn. */
void store_new_file_idxv(store_new_file *nf, uint8_t kind, uint8_t flags, const store_df_loc *loc,
                         uint8_t out[STORE_IDXV_FILE_LEN]);

/* The header of a tag-3 index value for nf's entry at loc (its encoded value
 * follows the header), and counts that entry as live.  Only from a
 * store_index_fn. */
void store_new_file_inline_hdr(store_new_file *nf, const store_df_loc *loc,
                               uint8_t out[STORE_IDXV_INLINE_FILE_HDR]);

/* The caller's index changes, written into txn (name nf's entries through
 * store_new_file_idxv).  0, or -1 with err (the transaction is aborted). */
typedef int (*store_index_fn)(store *st, MDB_txn *txn, store_new_file *nf, void *arg, char *err,
                              size_t errlen);

/*
 * Commits nf and the caller's index changes.  The single place where a data
 * file becomes durable and referenced.  In order:
 *   1. (nf has entries) finish the file: last block, fsync, rename from its
 *      temporary name, fsync the data directory.  From here a crash leaves a
 *      complete file that nothing references; the next open deletes it.
 *   2. open it and publish a snapshot listing it: a reader that finds an
 *      index entry naming the file must be able to open it.
 *   3. one LMDB write transaction: index(txn) (the caller's changes), nf's
 *      file record with the live counts index() produced, next_file_id;
 *      commit (LMDB fsyncs it).
 * 0: the file and every index change are durable together, the file counts
 * in the store's stats, and release keeps it.  -1 with err (prefixed with
 * what): nothing is committed; store_new_file_release takes the file out of
 * the snapshot and unlinks it.  After the commit, the commit hook
 * (store_set_commit_hook: the object-storage uploader) hears of
 * the file.
 */
STRATA_MUST_CHECK int store_commit_data_file(store *st, store_new_file *nf, const char *what,
                                             store_index_fn index, void *arg, char *err,
                                             size_t errlen);

/* Frees nf's writer and file reference; an uncommitted file leaves the
 * snapshot and the disk. */
void store_new_file_release(store *st, store_new_file *nf);

/* ---- migration (store_migrate.c) ---- */

/* At open, before the background thread: gives every inline-only (tag 1)
 * index value a copy in a new data file and sets the format metadata.
 * 0 or -1 with err. */
STRATA_MUST_CHECK int store_migrate_inline(store *st, char *err, size_t errlen);

/* ---- flush (store_flush.c) ---- */

/* Flushes frozen layer f, the oldest (only the background thread calls
 * this): its values go to the index and a new data file, committed with the
 * new disk_consistent_lsn through store_commit_data_file; only then does the
 * layer leave the snapshot.  0 or -1 with err (nothing changed; retry). */
STRATA_MUST_CHECK int store_flush_layer(store *st, store_layer *f, char *err, size_t errlen);

/* Formats an LMDB error (store_records.c). */
void store_mdb_err(char *err, size_t errlen, const char *what, int rc);

#endif
