/*
 * store.h: one timeline's page-version store (docs/design.md §6.3).
 *
 * For: keeping every version of every key (key.h) as (key, LSN) -> value, and
 * answering "which versions of K does a reader need at LSN L".  Three parts
 * behind this one interface: the open layer (in memory, backed by an
 * append-only file, hash index key -> [(lsn, offset)]), frozen layers being
 * flushed, and immutable data files (zstd-compressed blocks, written and
 * fsynced through io_uring) indexed by one LMDB environment
 * (index key = key || lsn -> file, offset, length, kind; small deltas inline).
 * Not for: decoding WAL (ingest), applying deltas (redo), or the network.
 *
 * Threads: exactly one writer thread (the WAL receiver / ingest) calls the
 * put and advance functions.  Any number of reader threads call the get,
 * scan and wait functions concurrently; readers never take a global mutex
 * (LMDB read transactions are MVCC snapshots; the open/frozen layer set is
 * published as an immutable, reference-counted snapshot swapped atomically).
 * The store runs its own background thread for flushes and GC.
 *
 * Durability: store_disk_consistent_lsn() is the LSN up to which every
 * ingested value is durable in data files + LMDB.  After a crash the store
 * reopens at that LSN (values above it are gone) and ingest resumes from it;
 * the safekeepers keep the WAL after it.
 */
#ifndef STRATA_PAGESERVER_STORE_H
#define STRATA_PAGESERVER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "base/must_check.h"
#include "pageserver/store/key.h"

typedef struct store store;

typedef struct store_options {
    size_t open_layer_max_bytes;    /* freeze the open layer past this (default 64 MB) */
    uint32_t open_layer_max_age_ms; /* or past this age (default 10 s) */
    uint32_t inline_max_bytes;      /* deltas up to this size live inline in LMDB (default 256) */
    size_t lmdb_map_size;           /* LMDB map size (default 64 GB, sparse) */
    int zstd_level;                 /* default 1 */
} store_options;

void store_options_default(store_options *o);

/* Opens (creating if empty) the store in dir.  0, or -1 with err filled. */
int store_open(const char *dir, const store_options *o, store **out, char *err, size_t errlen);
/* Flushes nothing; stops background work and frees.  Safe after a failed flush. */
void store_close(store *st);

/* ---- writer thread only ---- */

/*
 * Adds value v for key k at lsn.  lsn must be > store_last_record_lsn()
 * (values of the record being ingested), except for images produced by image
 * generation (store_put_image), which may land at any LSN <= last_record_lsn.
 * Copies the payload.  0, or -1 with err (e.g. out of space: a clear error,
 * the store stays consistent and the put may be retried).
 */
STRATA_MUST_CHECK int store_put(store *st, const pg_key *k, lsn_t lsn, const value_ref *v,
                                char *err, size_t errlen);

/* Image generation (docs/design.md §6.6): store a materialised page at an older LSN. */
STRATA_MUST_CHECK int store_put_image(store *st, const pg_key *k, lsn_t lsn,
                                      const uint8_t page[PG_BLCKSZ], char *err, size_t errlen);

/* Every value of every record ending at or before lsn has been put: readers
 * may now read at lsn.  Wakes store_wait_lsn() waiters.  lsn never decreases. */
void store_advance(store *st, lsn_t last_record_lsn);

/* ---- any thread ---- */

lsn_t store_last_record_lsn(const store *st);
lsn_t store_disk_consistent_lsn(const store *st);

/* Waits until last_record_lsn >= lsn or timeout_ms passes: 0, or -1 on timeout. */
int store_wait_lsn(store *st, lsn_t lsn, uint32_t timeout_ms);

/*
 * The versions of k a reader needs at lsn: newest first, from the newest
 * value at or below lsn down to (and including) the first complete value
 * (value_is_complete), or down to the oldest if none is complete.  The
 * values' payloads are copied into the list, which the caller frees.
 * A key with no version at or below lsn gives n == 0.
 * Bounded: at most max_versions (else -1 with err "chain too long").
 */
typedef struct version_list {
    int n;
    lsn_t *lsn;       /* n entries, descending */
    value_ref *value; /* n entries; payloads point into the list's own memory */
    bool complete;    /* the oldest entry is a complete value */
} version_list;

int store_get_versions(store *st, const pg_key *k, lsn_t lsn, int max_versions, version_list **out,
                       char *err, size_t errlen);
void version_list_free(version_list *vl);

/* The newest value of k at or below lsn (for sizes, blobs): 1 found (copied
 * into *out, caller frees out->payload with free()), 0 not found, -1 error. */
int store_get_latest(store *st, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found_lsn,
                     char *err, size_t errlen);

/* Calls fn for every distinct key in [from, to) that has a version at or
 * below lsn, in key order, with its newest such value (borrowed for the call).
 * fn returns 0 to go on, non-zero to stop.  Used to list relations of a
 * database, SLRU segments, databases. */
typedef int (*store_scan_fn)(const pg_key *k, lsn_t lsn, const value_ref *v, void *arg);
int store_scan(store *st, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
               void *arg, char *err, size_t errlen);

/* ---- maintenance ---- */

/* Freezes the open layer and flushes everything ingested so far; returns when
 * disk_consistent_lsn >= the last_record_lsn at the call.  0 or -1. */
STRATA_MUST_CHECK int store_flush(store *st, char *err, size_t errlen);

/* Drops versions no reader at or above horizon can need (older than the
 * newest complete value at or below horizon), in small steps, without
 * blocking readers or the writer.  Returns values removed, or -1. */
STRATA_MUST_CHECK long store_gc(store *st, lsn_t horizon, char *err, size_t errlen);

/*
 * Rebuilds a store from its data files alone (docs/storage.md, "Rebuild"):
 * dir/data/ holds data files "<16 hex id>.dat" (durable already, e.g.
 * downloaded from object storage) and nothing else; dir has no index yet.
 * Every file is read in ascending id order and every block validated (CRC,
 * lengths, entries, keys); each entry becomes an index entry, and an entry
 * for a (key, LSN) an older file also holds replaces it (the newest file
 * holds the live copy: store_gc.c says why).  Writes the file records (live
 * counts from the rebuilt index), disk_consistent_lsn = consistent_lsn and
 * next_file_id (every file id must be below it), then syncs the index.
 * store_open opens the result.  A crash midway leaves a directory to
 * rebuild from scratch (the caller's temporary directory).  Versions that GC
 * had removed from the index but whose dead copies remain in a file come
 * back; all of them lie below a kept complete value, so readers at or above
 * the GC horizon see the same as before (the next GC removes them again).
 * o: inline_max_bytes and lmdb_map_size (NULL: defaults).  0, or -1 with err.
 */
typedef struct store_rebuild_stats {
    uint64_t files, file_bytes; /* data files read, their bytes */
    uint64_t entries;           /* entries read */
    uint64_t replaced;          /* entries a newer file's copy replaced */
    lsn_t max_lsn;              /* the highest LSN of any entry */
} store_rebuild_stats;
STRATA_MUST_CHECK int store_rebuild(const char *dir, const store_options *o, lsn_t consistent_lsn,
                                    uint64_t next_file_id, store_rebuild_stats *stats, char *err,
                                    size_t errlen);

/* ---- object storage (store_remote.c, used by pageserver/remote/) ---- */

/* One committed data file as the LMDB "files" table lists it. */
typedef struct store_file_info {
    uint64_t id, size;
    lsn_t lsn_min, lsn_max; /* LSN range of its entries; (0, LSN_MAX) for files
                             * written before the range was recorded */
} store_file_info;

/* What one LMDB read transaction sees: the live data files and the LSN they
 * make consistent together, plus the upload state persisted with
 * store_set_remote_state. */
typedef struct store_file_list {
    lsn_t disk_consistent_lsn;
    uint64_t next_file_id;
    lsn_t remote_consistent_lsn; /* 0: never persisted */
    uint64_t remote_seq;         /* the manifest seq that made it durable */
    size_t n;
    store_file_info *files; /* sorted by id; malloc'd */
} store_file_list;

/* Fills *out from one read transaction (a consistent snapshot).  Any
 * thread.  0 or -1 with err; free with store_file_list_free. */
STRATA_MUST_CHECK int store_list_files(store *st, store_file_list *out, char *err, size_t errlen);
void store_file_list_free(store_file_list *l);

/* The local path of data file id (immutable once committed; store GC may
 * unlink it once the index no longer lists it). */
void store_data_file_path(const store *st, uint64_t id, char *out, size_t len);

/* Persists (remote_consistent_lsn, seq) in the LMDB metadata in one durable
 * write transaction.  Any thread.  0 or -1 with err. */
STRATA_MUST_CHECK int store_set_remote_state(store *st, lsn_t remote_consistent_lsn, uint64_t seq,
                                             char *err, size_t errlen);

/* Called on the committing thread (flush or GC) right after a new data file
 * is committed; must not block.  Set once, before any writer runs. */
typedef void (*store_commit_hook)(void *arg, uint64_t file_id, uint64_t size);
void store_set_commit_hook(store *st, store_commit_hook fn, void *arg);

/* Counters for /metrics and status (a consistent-enough snapshot). */
typedef struct store_stats {
    uint64_t values_put;
    uint64_t bytes_put;
    uint64_t flushes;
    uint64_t data_files;
    uint64_t data_file_bytes;
    uint64_t index_bytes;
    uint64_t open_layer_bytes;
    uint64_t gc_removed;
} store_stats;
void store_get_stats(const store *st, store_stats *out);

#endif
