/*
 * import.h: loading a cleanly shut down PostgreSQL 15 data directory into a
 * store as page images (docs/design.md §6.1).
 *
 * For: the timeline's starting point.  import_pgdata() reads pg_control
 * (CRC checked; state must be "shut down"), reads the checkpoint record it
 * points to from pg_wal (common/pg/walformat.h; must be a shutdown checkpoint)
 * and takes the record's end as the import LSN.  At that LSN it puts:
 *   - every relation file base/<db>/<relfilenode>[_fsm|_vm|_init][.N] and
 *     global/<relfilenode>...: one VAL_IMAGE per block (all-zero blocks as
 *     VAL_ZERO_PAGE) and KEY_REL_SIZE per fork;
 *   - KEY_DB per database directory (and for global: spc 1664, db 0);
 *   - KEY_RELMAP per pg_filenode.map (VAL_BLOB, 512 bytes);
 *   - pg_xact and pg_multixact/{offsets,members} segments: KEY_SLRU_BLOCK
 *     images per page and KEY_SLRU_SIZE per segment;
 *   - pg_twophase/<xid> files: KEY_TWOPHASE blobs;
 *   - global/pg_control: KEY_CONTROL blob; the checkpoint: KEY_CHECKPOINT
 *     (the CheckPoint struct bytes of the record, as ingest stores it).
 * Then store_advance(lsn) and store_flush().  Only the default tablespace
 * layout is supported (pg_tblspc must be empty: an error otherwise).
 *
 * Not for: tar streams or basebackups (the other direction), or running
 * Postgres (the caller ran initdb / stopped the server).
 *
 * Threads: runs on the caller's thread, which must be the store's only
 * writer for the duration; the store should be empty (store_last_record_lsn
 * below the import LSN, else an error).
 *
 * Errors: -1 with err naming the file and the cause (unreadable file, file
 * size not a multiple of 8192, bad pg_control CRC or version, not shut
 * down, checkpoint record missing or not a shutdown checkpoint, store put
 * failure).  Nothing is advanced on error.
 */
#ifndef STRATA_PAGESERVER_IMPORT_H
#define STRATA_PAGESERVER_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "pageserver/ingest/ingest.h"
#include "pageserver/store/store.h"

typedef struct import_stats {
    uint64_t files;      /* files read (relation segments, SLRU segments, maps, ...) */
    uint64_t rel_forks;  /* relation forks imported (KEY_REL_SIZE values) */
    uint64_t blocks;     /* relation blocks (images + zero pages) */
    uint64_t zero_pages; /* of which all-zero */
    uint64_t bytes;      /* bytes of relation files read */
    uint64_t databases;  /* KEY_DB values (including global) */
    uint64_t relmaps;
    uint64_t slru_segments;
    uint64_t slru_pages;
    uint64_t twophase_files;
    uint64_t system_id;    /* from pg_control */
    uint32_t wal_seg_size; /* from pg_control */
} import_stats;

/*
 * Imports pgdata into st; on success *out_lsn is the import LSN (the end of
 * the shutdown checkpoint record) and, if stats is not NULL, *stats says
 * what was imported.  0 or -1 with err.
 */
int import_pgdata(store *st, const char *pgdata, lsn_t *out_lsn, import_stats *stats, char *err,
                  size_t errlen);

/*
 * The same import through an ingest backend (ingest.h) instead of a store:
 * every value is put at the import LSN through b->put; nothing is advanced
 * or flushed (the caller owns that).  min_lsn is the backend's last LSN (the
 * import LSN must be above it).  For tests and tools.  0 or -1 with err.
 */
int import_pgdata_backend(const ingest_backend *b, const char *pgdata, lsn_t min_lsn,
                          lsn_t *out_lsn, import_stats *stats, char *err, size_t errlen);

/*
 * Reads pg_control and the checkpoint record only (no store): the import
 * LSN, the checkpoint record's start, the system id and WAL segment size.
 * For callers that must know the LSN before importing (the safekeepers start
 * the timeline there).  0 or -1 with err.
 */
int import_read_control(const char *pgdata, lsn_t *import_lsn, lsn_t *checkpoint_lsn,
                        uint64_t *system_id, uint32_t *wal_seg_size, char *err, size_t errlen);

#endif
