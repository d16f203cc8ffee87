/*
 * store_datafile.h: the store's immutable data files (docs/design.md §6.3, part 2),
 * private to the store (pageserver/store/) and its tests.
 *
 * For: the on-disk format of a data file and the code that writes one
 * (through a private io_uring on the calling thread) and parses what is read
 * back.  A data file is
 *
 *   file header (32 bytes): "STRATADF", version u32, reserved u32,
 *                           file id u64, crc32c of the preceding 24 bytes u32,
 *                           zero u32
 *   blocks, back to back:   magic u32 "SBLK", raw length u32, compressed
 *                           length u32, crc32c u32 (of the first 12 header
 *                           bytes then the compressed bytes), then the zstd
 *                           frame of the raw block
 *   a raw block:            entries back to back: index key (key || LSN,
 *                           PG_INDEX_KEY_LEN bytes) then an encoded value
 *                           (key.h: header + payload)
 *
 * All integers big-endian.  A raw block is about STORE_DF_BLOCK_TARGET bytes
 * (one large value may make it bigger).  Entries are self-describing so a
 * reader can check that what it found is what the index promised, and GC can
 * walk a file without the index.
 * Not for: the index (LMDB, store_records.c, store_commit.c) or caching
 * (store_cache.h).
 *
 * Threads: a writer belongs to one thread.  The parsers are pure functions.
 * Errors: 0 or -1 with err/why filled; parsers validate every length, magic
 * and checksum before trusting a byte.
 */
#ifndef STRATA_PAGESERVER_STORE_DATAFILE_H
#define STRATA_PAGESERVER_STORE_DATAFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "pageserver/store/key.h"

#define STORE_DF_HEADER_LEN 32
#define STORE_DF_BLOCK_HEADER_LEN 16
#define STORE_DF_VERSION 1
#define STORE_DF_BLOCK_TARGET (64u * 1024)
/* The largest raw block: a block just under target plus the largest entry. */
#define STORE_DF_MAX_RAW_BLOCK                                                                     \
    (STORE_DF_BLOCK_TARGET + PG_INDEX_KEY_LEN + VALUE_HEADER_LEN + VALUE_MAX_PAYLOAD)

void store_df_header_encode(uint64_t file_id, uint8_t out[STORE_DF_HEADER_LEN]);
int store_df_header_decode(const uint8_t *buf, size_t len, uint64_t *file_id, const char **why);

/* Validates a block header (magic, lengths within bounds): 0 or -1. */
int store_df_block_header_decode(const uint8_t *buf, size_t len, uint32_t *raw_len,
                                 uint32_t *comp_len, const char **why);

/*
 * Validates and decompresses one whole block (header + compressed bytes,
 * exactly len bytes) into a malloc'd buffer of *raw_len bytes (caller frees
 * *raw).  Checks magic, lengths, CRC, that the frame decompresses to exactly
 * the declared length.
 */
int store_df_block_decode(const uint8_t *buf, size_t len, uint8_t **raw, uint32_t *raw_len,
                          const char **why);

/* Parses the entry at off of a raw block: its index key (pointing into raw)
 * and value; *used is the entry's length.  0 or -1 with why. */
int store_df_entry_decode(const uint8_t *raw, size_t raw_len, size_t off, const uint8_t **ikey,
                          value_ref *v, size_t *used, const char **why);

/* Where a writer put one entry; block_off/block_len are known once the block
 * is finished (store_df_writer_block). */
typedef struct store_df_loc {
    uint32_t block_no;
    uint32_t off_in_block;
    uint32_t entry_len;
} store_df_loc;

typedef struct store_df_block_info {
    uint64_t off;
    uint32_t len; /* header + compressed */
} store_df_block_info;

typedef struct store_df_writer store_df_writer;

/* Creates "<dir>/<16 hex id>.dat.tmp" and writes the header. */
int store_df_writer_open(const char *dir, uint64_t file_id, int zstd_level, store_df_writer **out,
                         char *err, size_t errlen);
/* Appends an entry (index key + encoded value). */
int store_df_writer_add(store_df_writer *w, const uint8_t ikey[PG_INDEX_KEY_LEN],
                        const uint8_t *value, size_t value_len, store_df_loc *loc, char *err,
                        size_t errlen);
/* Writes the last block, fsyncs the file, renames it to "<id>.dat" and
 * fsyncs the directory.  *size is the file's length.  Either way the caller
 * then frees the writer (which, after an error, removes the temporary file). */
int store_df_writer_finish(store_df_writer *w, uint64_t *size, char *err, size_t errlen);
/* Valid after a successful finish, before free: a block's place. */
const store_df_block_info *store_df_writer_block(const store_df_writer *w, uint32_t block_no);
uint32_t store_df_writer_nblocks(const store_df_writer *w);
/* Frees the writer; removes the temporary file if not finished. */
void store_df_writer_free(store_df_writer *w);

/* "<dir>/<16 hex id>.dat" into buf. */
void store_df_path(const char *dir, uint64_t file_id, char *buf, size_t len);
/* Parses a file name "<16 hex>.dat"; false for anything else. */
bool store_df_parse_name(const char *name, uint64_t *file_id);

#endif
