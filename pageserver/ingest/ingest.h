/*
 * ingest.h: turning decoded WAL records into store values (docs/design.md §6.2).
 *
 * For: the pageserver's WAL ingest.  Given one decoded record (common/
 * walformat.h) and its start and end LSN, ingest_record() puts every value
 * the record implies into the store at LSN = the record's end:
 *   - each block reference -> KEY_REL_BLOCK: VAL_IMAGE for a standalone FPI
 *     (XLOG_FPI, XLOG_FPI_FOR_HINT; holes re-expanded, zstd/pglz images
 *     decompressed, all-zero pages as VAL_ZERO_PAGE), otherwise VAL_WAL_RECORD
 *     holding the raw record, flagged VALUE_WILL_INIT when the block has
 *     BKPBLOCK_WILL_INIT or an image with BKPIMAGE_APPLY;
 *   - relation sizes (KEY_REL_SIZE VAL_SIZE) when a block lies past the end,
 *     with VAL_ZERO_PAGE for the gap (bounded by ingest_options.max_gap_fill;
 *     past that the size still grows and readers treat a block below the size
 *     with no version as a zero page); smgr create / truncate;
 *   - databases (KEY_DB), relmaps (KEY_RELMAP), CLOG (VAL_CLOG_SET on
 *     KEY_SLRU_BLOCK), multixact offsets/members, two-phase state
 *     (KEY_TWOPHASE), visibility-map clears (VAL_VM_CLEAR), tombstones for
 *     dropped relations and databases, the checkpoint (KEY_CHECKPOINT), and
 *     the compute's postgresql.auto.conf from its WAL_AUTO_CONF_PREFIX
 *     logical messages (KEY_CHECKPOINT_REL_AUTO_CONF);
 * The caller (the WAL receiver, the ingest test tool) then calls
 * store_advance(end) -- ingest never advances the store itself, so a caller
 * may advance once per batch of records.
 *
 * Not for: reading WAL from the network (walreceiver.h), reassembling or
 * CRC-checking records (common/pg/walformat.h), applying records (redo.h).
 *
 * Threads: an ingest_state belongs to the store's one writer thread; no
 * function here may be called concurrently on the same state.
 *
 * State: a bounded in-memory cache of relation sizes (loaded lazily from the
 * store), the current CheckPoint struct (loaded lazily from KEY_CHECKPOINT),
 * and counters.  Ingest reads the store with lsn = LSN_MAX and relies on
 * the store returning the writer's own puts even before store_advance
 * (read-your-writes for the writer thread).
 *
 * Errors: ingest_record() returns -1 with err filled when the record's main
 * data is malformed for its type (lengths that do not add up, counts out of
 * range), when a needed store read or put fails, or when a compressed image
 * cannot be decompressed.  On error some values of the record may already
 * have been put (all at LSN = end); the caller must not store_advance past
 * the record and should stop ingesting this timeline (the record is either
 * corrupt WAL or a bug; retrying the same record after a transient store
 * error is allowed and idempotent per key).
 */
#ifndef STRATA_PAGESERVER_INGEST_H
#define STRATA_PAGESERVER_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "pg/walformat.h"
#include "pageserver/store/key.h"
#include "pageserver/redo/redo.h"
#include "pageserver/store/store.h"

typedef struct ingest_state ingest_state;

/*
 * Where ingest reads and writes.  ingest_create() builds one over a store
 * (and an optional redo pool); tests and fuzzers may supply their own (an
 * in-memory map).  Each function follows the store.h function of the same
 * name.  get_page materialises a page at lsn (needed only by CREATE DATABASE
 * with the FILE_COPY strategy); with no redo pool the store-backed version
 * succeeds only when the newest version is complete by itself (an image or a
 * zero page).
 */
typedef struct ingest_backend {
    void *arg;
    int (*put)(void *arg, const pg_key *k, lsn_t lsn, const value_ref *v, char *err, size_t errlen);
    /* 1 found (out->payload malloc'd, caller frees), 0 not found, -1 error. */
    int (*get_latest)(void *arg, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found_lsn,
                      char *err, size_t errlen);
    int (*scan)(void *arg, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
                void *fnarg, char *err, size_t errlen);
    int (*get_page)(void *arg, const pg_key *k, lsn_t lsn, uint8_t out[PG_BLCKSZ], char *err,
                    size_t errlen);
} ingest_backend;

/*
 * Called once for every page value ingest puts (KEY_REL_BLOCK and
 * KEY_SLRU_BLOCK keys), with complete = value_is_complete(v): the hook for
 * image generation (docs/design.md §6.6) to count deltas per page since its newest
 * image.  Runs on the writer thread inside ingest_record(); must not block.
 */
typedef void (*ingest_page_hook)(void *arg, const pg_key *k, lsn_t lsn, bool complete);

/*
 * Called at the start of every ingest_record(), before any value of the
 * record is put: the writer thread's turn to store what background image
 * generation finished (imagegen_drain), at LSNs <= the last record ingested.
 * Must not block on other threads.
 */
typedef void (*ingest_record_hook)(void *arg);

/*
 * Backpressure (imagegen.h, the hard cap): pending says whether the caller
 * should stop before the next record; wait runs then, between records, after
 * the caller made every record ingested so far readable at `readable` (the
 * last record's end); it may block, bounded by its own timeout.
 */
typedef bool (*ingest_pressure_pending_hook)(void *arg);
typedef void (*ingest_pressure_wait_hook)(void *arg, lsn_t readable);

typedef struct ingest_options {
    size_t relsize_cache_entries; /* bound of the relation-size cache (default 65536) */
    uint32_t max_gap_fill;        /* most VAL_ZERO_PAGE puts for one extension (default 65536) */
    ingest_page_hook page_hook;   /* optional */
    void *page_hook_arg;
    ingest_record_hook record_hook; /* optional */
    void *record_hook_arg;
    ingest_pressure_pending_hook pressure_pending; /* optional, with pressure_wait */
    ingest_pressure_wait_hook pressure_wait;
    void *pressure_hook_arg;
    /* Image safety net (0 = off; ingest_create sets INGEST_IMAGE_THRESHOLD
     * when it has a redo pool): a page that gathers this many deltas since
     * its last complete value is rebuilt through backend get_page at the end
     * of the record that reached the count, and stored as VAL_IMAGE at that
     * record's LSN (replacing that record's delta, same content).  Keeps
     * every chain a read replays under the count, so a hot page (an index
     * metapage, a CLOG page) never outgrows the read side's chain limit.
     * Runs on the writer thread and blocks ingest on redo: with background
     * image generation (imagegen.h, docs/design.md §6.6) on it is only the backstop
     * that guarantees the bound when the workers cannot keep up (its
     * counters also restart at the images they store, ingest_note_image),
     * so it rarely fires. */
    uint32_t image_threshold;
    size_t image_track_entries; /* pages counted at once (default 65536) */
} ingest_options;

#define INGEST_IMAGE_THRESHOLD 1000

void ingest_options_default(ingest_options *o);

/* Ingest over store st; redo may be NULL (see ingest_backend.get_page).
 * Both must outlive the state.  NULL on out-of-memory. */
ingest_state *ingest_create(store *st, redo_pool *redo);

/* Ingest of a branch (timeline/branch.c): the backend writes to the
 * branch's store and reads through to its ancestors; as ingest_create
 * otherwise (the safety net on when have_redo), resuming after last_end
 * (the store's last_record_lsn).  b is copied; b->arg must outlive the
 * state.  NULL on out-of-memory. */
ingest_state *ingest_create_over(const ingest_backend *b, bool have_redo, lsn_t last_end);

/* Ingest over any backend (copied; its arg must outlive the state).
 * 0, or -1 with err (bad options, out of memory). */
int ingest_create_with_backend(const ingest_options *o, const ingest_backend *b, ingest_state **out,
                               char *err, size_t errlen);

/* Replaces the options of a state (e.g. to install the hooks).  A state
 * created with image_threshold 0 keeps no chain table: raising it later
 * allocates one on the first page put. */
void ingest_set_options(ingest_state *ing, const ingest_options *o);

void ingest_destroy(ingest_state *ing);

/*
 * Puts every value of rec (which started at start and ends at end, the
 * walformat.h convention) at LSN end.  end must be greater than the end of
 * every record ingested before.  0, or -1 with err (see the top of the file).
 */
int ingest_record(ingest_state *ing, lsn_t start, lsn_t end, const wal_record *rec, char *err,
                  size_t errlen);

/*
 * The writer thread has no record to ingest now (its WAL receiver waits for
 * WAL, after store_advance): runs the record hook, so images that background
 * generation finished are stored without waiting for the next record.
 * Writer thread only; never blocks on other threads.
 */
void ingest_idle(ingest_state *ing);

/*
 * Backpressure between records (see ingest_pressure_wait_hook): true when
 * the caller should make what it ingested readable and call
 * ingest_relieve_pressure(ing, end of the last record) before the next
 * record.  Cheap (an indirect call and a compare); false without hooks.
 * Writer thread only.
 */
bool ingest_pressure_pending(ingest_state *ing);
void ingest_relieve_pressure(ingest_state *ing, lsn_t readable);

/* An image of page k was stored outside ingest (background generation) at
 * an LSN <= the last record: the safety net's count for k starts again.
 * Writer thread only. */
void ingest_note_image(ingest_state *ing, const pg_key *k);

/* Counters for /metrics and tests. */
typedef struct ingest_stats {
    uint64_t records;
    uint64_t values_put;
    uint64_t images;         /* VAL_IMAGE + VAL_ZERO_PAGE from FPIs */
    uint64_t wal_records;    /* VAL_WAL_RECORD puts (one per block reference) */
    uint64_t gap_zero_pages; /* VAL_ZERO_PAGE puts filling extension gaps */
    uint64_t clog_deltas;
    uint64_t vm_clears;
    uint64_t mxact_deltas;
    uint64_t rels_created;
    uint64_t rels_dropped;
    uint64_t checkpoint_updates;
    uint64_t relsize_cache_hits;
    uint64_t relsize_cache_misses;
    uint64_t images_generated; /* images stored by the safety net */
    uint64_t image_failures;   /* pages it could not rebuild (logged) */
    uint64_t auto_confs;       /* postgresql.auto.conf versions (ALTER SYSTEM) stored */
    lsn_t last_end;            /* end of the last record ingested */
} ingest_stats;

void ingest_get_stats(const ingest_state *ing, ingest_stats *out);

/*
 * The relation fork's size as ingest knows it (cache, then store): 1 with
 * *nblocks, 0 if the fork does not exist, -1 on a store error.  For tests and
 * for the walreceiver's status; writer thread only.
 */
int ingest_rel_size(ingest_state *ing, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork,
                    uint32_t *nblocks, char *err, size_t errlen);

#endif
