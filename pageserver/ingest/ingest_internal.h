/*
 * ingest_internal.h: what the ingest_*.c files share (not a public API; only
 * ingest.c and ingest_*.c include it).
 *
 * The state lives in ingest.c; the rmgr handlers in ingest_xact.c (xact,
 * clog, multixact) and ingest_misc.c (smgr, dbase, relmap, heap VM clears,
 * parameter change) put values through ingest_put() and keep sizes through
 * ingest_size_*() so that the size cache stays coherent.
 */
#ifndef STRATA_PAGESERVER_INGEST_INTERNAL_H
#define STRATA_PAGESERVER_INGEST_INTERNAL_H

#include "pageserver/ingest/ingest.h"
#include "pg/pgstructs.h"

#include "base/byteorder.h"

typedef struct size_entry {
    bool used;
    bool exists;
    uint8_t kind;
    uint8_t fork;
    uint32_t spc, db, rel;
    uint32_t nblocks;
} size_entry;

typedef struct chain_entry {
    bool used;
    pg_key k;
    uint32_t deltas; /* since the page's last complete value */
} chain_entry;

#define INGEST_MAX_PENDING_IMAGES 64

struct ingest_state {
    ingest_backend b;
    ingest_options o;
    void *owned_backend_arg; /* freed by ingest_destroy (store backend) */
    size_entry *cache;       /* sizes of relation forks and SLRU segments */
    size_t cache_cap;        /* power of two, >= 2 * relsize_cache_entries */
    size_t cache_count;
    uint8_t cp[PG_CHECKPOINT_SIZE]; /* the current CheckPoint struct */
    bool cp_loaded;                 /* KEY_CHECKPOINT was looked up */
    bool cp_valid;                  /* cp holds a checkpoint */
    bool cp_dirty;                  /* changed by the record being ingested */
    ingest_stats stats;
    chain_entry *chains; /* delta counts per page (image_threshold > 0) */
    size_t chains_cap;   /* power of two, >= 2 * image_track_entries */
    size_t chains_count;
    pg_key pending[INGEST_MAX_PENDING_IMAGES]; /* pages to rebuild after this record */
    int npending;
};

/* One value at (k, lsn); counts it and calls the page hook. */
int ingest_put(ingest_state *ing, const pg_key *k, lsn_t lsn, uint8_t kind, uint8_t flags,
               const uint8_t *payload, uint32_t len, char *err, size_t errlen);

/* Sizes of relation forks (KEY_REL_SIZE) and SLRU segments (KEY_SLRU_SIZE). */
int ingest_size_get(ingest_state *ing, const pg_key *sk, bool *exists, uint32_t *nblocks, char *err,
                    size_t errlen);
int ingest_size_set(ingest_state *ing, const pg_key *sk, uint32_t nblocks, lsn_t lsn, char *err,
                    size_t errlen);
int ingest_size_drop(ingest_state *ing, const pg_key *sk, lsn_t lsn, char *err, size_t errlen);
int ingest_extend(ingest_state *ing, const pg_key *sk, uint32_t blk, lsn_t lsn, char *err,
                  size_t errlen);

int ingest_checkpoint_load(ingest_state *ing, char *err, size_t errlen);
int ingest_checkpoint_store(ingest_state *ing, lsn_t lsn, char *err, size_t errlen);
void ingest_note_xid(ingest_state *ing, uint32_t xid);
/* Notes where a checkpoint record is (key.h KEY_CHECKPOINT_REL_RECORD):
 * info is its xl_info without the XLR bits, cp its 88-byte main data. */
int ingest_checkpoint_record(ingest_state *ing, lsn_t start, lsn_t end, uint8_t info,
                             const uint8_t *cp, char *err, size_t errlen);

/* 1 page rebuilt, 0 compression not decodable here, -1 malformed. */
int ingest_restore_image(const wal_block_ref *b, uint8_t page[PG_BLCKSZ], char *err, size_t errlen);

/* rmgr handlers: 0 or -1 with err. */
int ingest_xact(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen);
int ingest_clog(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen);
int ingest_multixact(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen);
int ingest_smgr(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen);
int ingest_dbase(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen);
int ingest_relmap(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen);
int ingest_heap_vm(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen);
/* RM_LOGICALMSG: stores a WAL_AUTO_CONF_PREFIX message's file under
 * KEY_CHECKPOINT_REL_AUTO_CONF; other prefixes are ignored. */
int ingest_logical_message(ingest_state *ing, lsn_t end, const wal_record *rec, char *err,
                           size_t errlen);
int ingest_parameter_change(ingest_state *ing, lsn_t end, const uint8_t *d, char *err,
                            size_t errlen);

/* Drops every fork of a relation that exists (tombstones its sizes). */
int ingest_drop_relation(ingest_state *ing, uint32_t spc, uint32_t db, uint32_t rel, lsn_t lsn,
                         char *err, size_t errlen);

#endif
