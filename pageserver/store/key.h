/*
 * key.h: the pageserver's key space and value encoding (docs/design.md §6.3).
 *
 * For: naming every versioned thing the pageserver stores (relation blocks,
 * relation sizes, databases, relmaps, SLRU pages and segments, two-phase
 * files, checkpoint and control data) and the bytes stored under a (key, LSN).
 * Not for: storage layout (store.h) or how values are produced (ingest) or
 * applied (redo).
 *
 * Keys encode to PG_KEY_LEN bytes that sort, with memcmp, in the order of
 * docs/design.md §6.3: kind, then relation (spc, db, rel, fork), then block.  A full
 * index key is the encoded key followed by the big-endian LSN, so a cursor
 * positioned at (K, L) and walking backwards sees K's versions newest first.
 *
 * Existence is versioned too: a relation fork exists at LSN L iff its newest
 * KEY_REL_SIZE value at or below L is a size (not a tombstone); the same for
 * databases (KEY_DB) and SLRU segments (KEY_SLRU_SIZE).
 */
#ifndef STRATA_PAGESERVER_KEY_H
#define STRATA_PAGESERVER_KEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "pg/pgstructs.h" /* PG_BLCKSZ */

typedef enum pg_key_kind {
    KEY_REL_BLOCK = 0x00,  /* spc, db, rel, fork, blk: an 8 KB page */
    KEY_REL_SIZE = 0x01,   /* spc, db, rel, fork: nblocks (u32) or tombstone */
    KEY_DB = 0x02,         /* spc, db: the database exists (empty value) or tombstone */
    KEY_RELMAP = 0x03,     /* spc, db (spc=GLOBALTABLESPACE, db=0 for global): pg_filenode.map */
    KEY_SLRU_BLOCK = 0x04, /* fork = slru kind, rel = segno, blk = page within segment */
    KEY_SLRU_SIZE = 0x05,  /* fork = slru kind, rel = segno: nblocks (u32) or tombstone */
    KEY_TWOPHASE = 0x06,   /* rel = xid: the two-phase state file */
    KEY_CHECKPOINT = 0x07, /* the newest CheckPoint struct (for basebackup) */
    KEY_CONTROL = 0x08,    /* the pg_control file as imported */
} pg_key_kind;

/* KEY_CHECKPOINT with rel = KEY_CHECKPOINT_REL_RECORD_START: at the end LSN E
 * of the last complete record of each WAL message ingested, the start LSN of
 * that record (VAL_BLOB, u64 little-endian), so that a basebackup at E can
 * write the exact xl_prev (the store keeps record ends only). */
#define KEY_CHECKPOINT_REL_RECORD_START 1u

/* KEY_CHECKPOINT with rel = KEY_CHECKPOINT_REL_AUTO_CONF: the compute's
 * postgresql.auto.conf (VAL_BLOB, the file's bytes) as of each ALTER SYSTEM,
 * stored at the end LSN of the logical message that carried it
 * (WAL_AUTO_CONF_PREFIX); absent until the first ALTER SYSTEM. */
#define KEY_CHECKPOINT_REL_AUTO_CONF 2u

/* KEY_CHECKPOINT with rel = KEY_CHECKPOINT_REL_RECORD: every real checkpoint
 * record of the timeline's WAL (XLOG_CHECKPOINT_SHUTDOWN, _ONLINE; a
 * compute's startup checkpoint from its basebackup included), stored at the
 * record's end LSN (VAL_BLOB, KEY_CHECKPOINT_RECORD_LEN bytes): the record's
 * start LSN (u64 little-endian), its xl_info byte (the checkpoint kind),
 * then the CheckPoint struct as the record holds it (88 bytes).  A replica's
 * basebackup (basebackup.h) points its pg_control at the newest one at or
 * below its LSN: a hot standby must start at a checkpoint record it can
 * read from the safekeepers' WAL. */
#define KEY_CHECKPOINT_REL_RECORD 3u
#define KEY_CHECKPOINT_RECORD_START_OFF 0
#define KEY_CHECKPOINT_RECORD_INFO_OFF 8
#define KEY_CHECKPOINT_RECORD_CP_OFF 9
#define KEY_CHECKPOINT_RECORD_LEN (9 + 88)

/* KEY_CHECKPOINT with rel = KEY_CHECKPOINT_REL_COMMIT_TIME: the commit-time
 * index of branches and PITR (docs/storage.md, "Branches").  At the end LSN E of every commit
 * record (XLOG_XACT_COMMIT and COMMIT_PREPARED), that record's commit
 * timestamp (VAL_BLOB, i64 little-endian, Postgres microseconds since
 * 2000-01-01 UTC), so that timeline_lsn_by_time finds the end of the last
 * commit at or before a time by binary search over LSNs.  (Rel 8: the low
 * numbers are left to other checkpoint-related keys.) */
#define KEY_CHECKPOINT_REL_COMMIT_TIME 8u

/* SLRU kinds, stored in pg_key.fork for KEY_SLRU_*. */
typedef enum slru_kind {
    SLRU_CLOG = 0,
    SLRU_MULTIXACT_OFFSETS = 1,
    SLRU_MULTIXACT_MEMBERS = 2,
} slru_kind;

/* Postgres fork numbers. */
enum { FORK_MAIN = 0, FORK_FSM = 1, FORK_VM = 2, FORK_INIT = 3, FORK_MAX = 3 };

typedef struct pg_key {
    uint8_t kind;
    uint32_t spc;
    uint32_t db;
    uint32_t rel;
    uint8_t fork;
    uint32_t blk;
} pg_key;

/* kind(1) spc(4) db(4) rel(4) fork(1) blk(4), big-endian. */
#define PG_KEY_LEN 18
/* An index key: the encoded key then the big-endian LSN. */
#define PG_INDEX_KEY_LEN (PG_KEY_LEN + 8)

void pg_key_encode(const pg_key *k, uint8_t out[PG_KEY_LEN]);
/* Returns false if the bytes are not a valid key (unknown kind, fork out of range). */
bool pg_key_decode(const uint8_t in[PG_KEY_LEN], pg_key *out);
int pg_key_compare(const pg_key *a, const pg_key *b);

void pg_index_key_encode(const pg_key *k, lsn_t lsn, uint8_t out[PG_INDEX_KEY_LEN]);
bool pg_index_key_decode(const uint8_t in[PG_INDEX_KEY_LEN], pg_key *k, lsn_t *lsn);

/* Constructors for the common kinds. */
pg_key pg_key_rel_block(uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork, uint32_t blk);
pg_key pg_key_rel_size(uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork);
pg_key pg_key_slru_block(slru_kind kind, uint32_t segno, uint32_t blk);

/* Human-readable form for logs and errors, e.g. "rel 1663/5/16384.0 blk 7". */
char *pg_key_format(const pg_key *k, char *buf, size_t len);

/*
 * Values.  Every stored value is a small header followed by its payload:
 *   kind u8, flags u8, payload length u32 (big-endian), payload.
 * IMAGE-like kinds (VAL_IMAGE, VAL_SIZE, VAL_TOMBSTONE, VAL_BLOB) are complete
 * by themselves; delta kinds need the value below them unless flagged
 * VALUE_WILL_INIT.
 */
typedef enum value_kind {
    VAL_IMAGE = 1,      /* payload: PG_BLCKSZ bytes (a page) */
    VAL_WAL_RECORD = 2, /* delta; payload: the raw XLogRecord (as in WAL, header first) */
    VAL_CLOG_SET = 3, /* delta; payload: status u8, count u32, count × xid u32 (all on this page) */
    VAL_VM_CLEAR =
        4, /* delta; payload: flags u8, heap_blk_a u32, heap_blk_b u32 (0xFFFFFFFF = none) */
    VAL_MXACT_OFFSET = 5, /* delta; payload: multi u32, offset u32 */
    VAL_MXACT_MEMBERS =
        6, /* delta; payload: first member offset u32, count u32, count × (xid u32, status u8) */
    VAL_SIZE = 7,      /* payload: u32 nblocks (KEY_REL_SIZE, KEY_SLRU_SIZE) */
    VAL_TOMBSTONE = 8, /* payload empty: the thing was dropped at this LSN */
    VAL_BLOB =
        9, /* payload: opaque bytes (relmap, two-phase file, checkpoint, control, KEY_DB marker) */
    VAL_ZERO_PAGE = 10, /* image of an all-zero page, no payload */
} value_kind;

#define VALUE_WILL_INIT 0x01 /* a delta that initialises the page: the chain stops here */

#define VALUE_HEADER_LEN 6
/* Largest payload we accept (a WAL record can be big; Postgres caps at ~1 GB). */
#define VALUE_MAX_PAYLOAD (64u * 1024 * 1024)

typedef struct value_ref {
    uint8_t kind;
    uint8_t flags;
    uint32_t len;
    const uint8_t *payload; /* borrowed; valid as long as the buffer it came from */
} value_ref;

/* True if the value is complete without what lies below it. */
bool value_is_complete(const value_ref *v);

/* Writes header + payload; returns bytes written or 0 if cap is too small. */
size_t value_encode(const value_ref *v, uint8_t *out, size_t cap);
/* Decodes one value from buf; 0 or -1 with *why.  *used is the bytes consumed. */
int value_decode(const uint8_t *buf, size_t len, value_ref *out, size_t *used, const char **why);

#endif
