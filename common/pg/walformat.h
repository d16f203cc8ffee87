/*
 * walformat.h: PostgreSQL 15 WAL format -- constants, page headers, record
 * decoding, and streaming over a byte stream of WAL.  Part of common/pg/, the
 * one home of PostgreSQL's formats (pgstructs.h holds the page, rmgr payload
 * and pg_control layouts); compute/extension/pgstructs_check.c checks every
 * constant and offset here against PostgreSQL's headers at build time.
 *
 * For: everything in Strata that must understand WAL bytes without Postgres
 * headers: the safekeeper (record boundaries of what it stores, end of WAL on
 * restart), the pageserver's ingest (block references), test tools.  Libc
 * only, no allocation, no global state: the same code is compiled into the
 * daemons and into the Postgres extension.  Not for: applying records (redo)
 * or describing rmgr-specific payloads; that belongs to the pageserver.
 *
 * The constants are PostgreSQL 15's (access/xlogrecord.h,
 * access/xlog_internal.h); WAL is little-endian as written by x86/ARM hosts.
 *
 * Record end convention used throughout: a record's end LSN is the position
 * right after its last byte rounded up to 8 (MAXALIGN), i.e. where the next
 * record may start (before skipping a page header) -- the value XLogInsert
 * returns as EndPos and that xlogreader reports as EndRecPtr.  For an
 * XLOG_SWITCH record it is the end of the segment, as in Postgres.
 */
#ifndef STRATA_PG_WALFORMAT_H
#define STRATA_PG_WALFORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"

/* ---- Constants (PostgreSQL 15) ---------------------------------------- */

#define WAL_PAGE_MAGIC 0xD110 /* XLOG_PAGE_MAGIC */
#define WAL_BLCKSZ 8192       /* XLOG_BLCKSZ */
#define WAL_PAGE_BLCKSZ 8192  /* BLCKSZ: size of a relation page (full-page images) */
#define WAL_ALIGN 8           /* MAXALIGN */
#define WAL_ALIGN_UP(x) (((x) + (WAL_ALIGN - 1)) & ~(uint64_t)(WAL_ALIGN - 1))

/* xlp_info flags */
#define WAL_XLP_FIRST_IS_CONTRECORD 0x0001
#define WAL_XLP_LONG_HEADER 0x0002
#define WAL_XLP_BKP_REMOVABLE 0x0004
#define WAL_XLP_FIRST_IS_OVERWRITE_CONTRECORD 0x0008
#define WAL_XLP_ALL_FLAGS 0x000F

#define WAL_SHORT_PHD_SIZE 24     /* SizeOfXLogShortPHD */
#define WAL_LONG_PHD_SIZE 40      /* SizeOfXLogLongPHD */
#define WAL_RECORD_HEADER_SIZE 24 /* SizeOfXLogRecord */
#define WAL_RECORD_CRC_OFFSET 20  /* offsetof(XLogRecord, xl_crc) */

/* Field offsets of XLogPageHeaderData and XLogLongPageHeaderData */
#define WAL_XLP_MAGIC_OFF 0
#define WAL_XLP_INFO_OFF 2
#define WAL_XLP_TLI_OFF 4
#define WAL_XLP_PAGEADDR_OFF 8
#define WAL_XLP_REM_LEN_OFF 16
#define WAL_XLP_SYSID_OFF 24
#define WAL_XLP_SEG_SIZE_OFF 32
#define WAL_XLP_XLOG_BLCKSZ_OFF 36

/* Field offsets of XLogRecord (xl_crc: WAL_RECORD_CRC_OFFSET) */
#define WAL_XL_TOT_LEN_OFF 0
#define WAL_XL_XID_OFF 4
#define WAL_XL_PREV_OFF 8
#define WAL_XL_INFO_OFF 16
#define WAL_XL_RMID_OFF 17

/* Headers inside a record (access/xlogrecord.h), each after its one-byte id */
#define WAL_BLOCK_HEADER_SIZE 4       /* SizeOfXLogRecordBlockHeader: id, fork_flags, data_length */
#define WAL_BLOCK_IMAGE_HEADER_SIZE 5 /* SizeOfXLogRecordBlockImageHeader */
#define WAL_BIMG_HOLE_OFFSET_OFF 2    /* offsetof(XLogRecordBlockImageHeader, hole_offset) */
#define WAL_BIMG_INFO_OFF 4           /* offsetof(XLogRecordBlockImageHeader, bimg_info) */
#define WAL_BLOCK_COMPRESS_HEADER_SIZE 2 /* SizeOfXLogRecordBlockCompressHeader */
#define WAL_RELFILENODE_SIZE 12          /* sizeof(RelFileNode) */
#define WAL_DATA_HEADER_SHORT_SIZE 2     /* SizeOfXLogRecordDataHeaderShort */
#define WAL_DATA_HEADER_LONG_SIZE 5      /* SizeOfXLogRecordDataHeaderLong */

/* Records longer than this are rejected (Postgres cannot allocate them either:
 * MaxAllocSize). */
#define WAL_MAX_RECORD_LEN 0x3FFFFFFFu

/* Segment sizes Postgres accepts: powers of two from 1 MB to 1 GB. */
#define WAL_MIN_SEG_SIZE (1u << 20)
#define WAL_MAX_SEG_SIZE (1u << 30)

/* xl_info */
#define WAL_XLR_INFO_MASK 0x0F
#define WAL_XLR_RMGR_INFO_MASK 0xF0
#define WAL_XLR_SPECIAL_REL_UPDATE 0x01
#define WAL_XLR_CHECK_CONSISTENCY 0x02

/* Resource managers */
#define WAL_RM_XLOG_ID 0
#define WAL_RM_MAX_BUILTIN_ID 21 /* RM_LOGICALMSG_ID */
#define WAL_RM_MIN_CUSTOM_ID 128
#define WAL_XLOG_SWITCH 0x40 /* RM_XLOG_ID info */

/*
 * Strata's own WAL message: after each ALTER SYSTEM the compute WAL-logs its
 * whole new postgresql.auto.conf as a non-transactional logical message
 * (RM_LOGICALMSG_ID) with this prefix (compute/extension/alter_system.c);
 * the pageserver keeps it with the timeline and ships the newest one at or
 * below a basebackup's LSN (pageserver/ingest/ingest_misc.c, basebackup.c).  The
 * file may be at most WAL_AUTO_CONF_MAX bytes: the compute refuses a larger
 * one, the pageserver rejects the record.
 */
#define WAL_AUTO_CONF_PREFIX "strata.auto_conf"
#define WAL_AUTO_CONF_MAX (256u * 1024)

/* Block reference ids and flags */
#define WAL_XLR_MAX_BLOCK_ID 32
#define WAL_XLR_BLOCK_ID_DATA_SHORT 255
#define WAL_XLR_BLOCK_ID_DATA_LONG 254
#define WAL_XLR_BLOCK_ID_ORIGIN 253
#define WAL_XLR_BLOCK_ID_TOPLEVEL_XID 252

#define WAL_BKPBLOCK_FORK_MASK 0x0F
#define WAL_BKPBLOCK_FLAG_MASK 0xF0
#define WAL_BKPBLOCK_HAS_IMAGE 0x10
#define WAL_BKPBLOCK_HAS_DATA 0x20
#define WAL_BKPBLOCK_WILL_INIT 0x40
#define WAL_BKPBLOCK_SAME_REL 0x80

#define WAL_BKPIMAGE_HAS_HOLE 0x01
#define WAL_BKPIMAGE_APPLY 0x02
#define WAL_BKPIMAGE_COMPRESS_PGLZ 0x04
#define WAL_BKPIMAGE_COMPRESS_LZ4 0x08
#define WAL_BKPIMAGE_COMPRESS_ZSTD 0x10
#define WAL_BKPIMAGE_COMPRESSED(info)                                                              \
    (((info) &                                                                                     \
      (WAL_BKPIMAGE_COMPRESS_PGLZ | WAL_BKPIMAGE_COMPRESS_LZ4 | WAL_BKPIMAGE_COMPRESS_ZSTD)) != 0)

/* Forks (ForkNumber) */
#define WAL_FORK_MAIN 0
#define WAL_FORK_FSM 1
#define WAL_FORK_VM 2
#define WAL_FORK_INIT 3
#define WAL_MAX_FORK 3

/* True if seg_size is a segment size Postgres accepts. */
bool wal_seg_size_valid(uint32_t seg_size);

/*
 * The segment size Strata's WAL readers assume (initdb's default).  The
 * pageserver's walreceiver reads segments of this size.
 */
#define WAL_SEG_SIZE_DEFAULT (16u << 20)

/*
 * The same point of the record stream as lsn, in the record-end convention
 * (top of file).  Postgres names the insert position at the start of a page
 * by the byte after the page header: GetXLogInsertRecPtr returns P + 24, or
 * P + 40 at a segment start, where the last record ended at P.  No record
 * ends in between, so WAL received up to P covers such an LSN.  Returns P
 * for an LSN just past a page header, lsn for every other LSN.  A record
 * that ends on a page after its continuation bytes is not mistaken for
 * one: only a long header is 40 bytes, and only at a segment start.
 */
lsn_t wal_lsn_before_page_header(lsn_t lsn, uint32_t seg_size);

/* ---- Page and record headers ------------------------------------------ */

typedef struct wal_page_header {
    uint16_t magic;
    uint16_t info; /* WAL_XLP_* */
    uint32_t tli;
    lsn_t pageaddr;   /* LSN of the page's first byte */
    uint32_t rem_len; /* bytes of a continued record at the page start */
    bool is_long;     /* fields below are valid */
    uint64_t sysid;
    uint32_t seg_size;
    uint32_t xlog_blcksz;
} wal_page_header;

/*
 * Parses the page header at buf (no validation).  Returns its size (24, or
 * 40 with XLP_LONG_HEADER), or 0 if len is too short for it.
 */
size_t wal_page_header_parse(const uint8_t *buf, size_t len, wal_page_header *out);

/*
 * Checks h as the header of the page starting at page_lsn of a stream with
 * segments of seg_size: magic, no unknown flags, pageaddr, long header
 * exactly at segment starts with matching seg_size and block size.  Returns 0
 * or -1 with *why (static string).  Does not judge the continuation fields.
 */
int wal_page_header_check(const wal_page_header *h, lsn_t page_lsn, uint32_t seg_size,
                          const char **why);

typedef struct wal_record_header {
    uint32_t tot_len; /* xl_tot_len: whole record including this header */
    uint32_t xid;     /* xl_xid */
    lsn_t prev;       /* xl_prev: start of the previous record */
    uint8_t info;     /* xl_info */
    uint8_t rmid;     /* xl_rmid */
    uint32_t crc;     /* xl_crc */
} wal_record_header;

/* Parses the 24-byte record header at buf (no validation). */
void wal_record_header_parse(const uint8_t *buf, wal_record_header *out);

/* Checks tot_len (24..WAL_MAX_RECORD_LEN) and rmid; 0 or -1 with *why. */
int wal_record_header_check(const wal_record_header *h, const char **why);

/* True for an XLOG_SWITCH record (rest of the segment is padding). */
bool wal_record_header_is_switch(const wal_record_header *h);

/* ---- Whole records --------------------------------------------------- */

/* One block reference of a record (Postgres's DecodedBkpBlock). */
typedef struct wal_block_ref {
    bool in_use;   /* false for ids the record does not reference */
    uint8_t fork;  /* WAL_FORK_* */
    uint8_t flags; /* WAL_BKPBLOCK_* bits of fork_flags */
    bool has_image;
    bool has_data;
    bool will_init;
    uint32_t spc, db, rel; /* RelFileNode (taken from the previous block on SAME_REL) */
    uint32_t blkno;
    /* Full-page image, when has_image.  bimg points into the record. */
    uint16_t bimg_len;
    uint16_t hole_offset;
    uint16_t hole_length;
    uint8_t bimg_info; /* WAL_BKPIMAGE_* */
    bool apply_image;  /* BKPIMAGE_APPLY: redo restores the image */
    const uint8_t *bimg;
    /* Per-block data, when has_data; points into the record. */
    uint16_t data_len;
    const uint8_t *data;
} wal_block_ref;

/* A decoded record (Postgres's DecodeXLogRecord result).  Every pointer
 * points into the raw bytes given to wal_record_decode, which must outlive
 * it.  About 2 KB: fine on the stack. */
typedef struct wal_record {
    wal_record_header hdr;
    const uint8_t *raw; /* the whole record, hdr.tot_len bytes */
    int max_block_id;   /* highest block id in use, -1 if none */
    wal_block_ref blocks[WAL_XLR_MAX_BLOCK_ID + 1];
    bool has_origin;
    uint16_t origin; /* RepOriginId */
    bool has_toplevel_xid;
    uint32_t toplevel_xid;
    uint32_t main_data_len;
    const uint8_t *main_data; /* NULL when main_data_len is 0 */
} wal_record;

/* The CRC Postgres stores in xl_crc for the tot_len >= 24 bytes at raw:
 * the record after its header, then the header up to xl_crc. */
uint32_t wal_record_compute_crc(const uint8_t *raw, size_t tot_len);

/*
 * Decodes the record in raw[0..len), which must be exactly one whole record
 * (len == xl_tot_len).  Checks the header (wal_record_header_check), the CRC,
 * every block header (ids in increasing order, data and image lengths and
 * flags consistent, SAME_REL only after a relation, valid fork) and that the
 * lengths add up to the record exactly.  Returns 0 with *out filled (pointing
 * into raw), or -1 with *why (static string).  Allocates nothing.
 */
int wal_record_decode(const uint8_t *raw, size_t len, wal_record *out, const char **why);

/* ---- Streaming record-boundary tracker --------------------------------- */

/*
 * Follows a stream of WAL bytes and knows where complete records end, using
 * only lengths and page headers: it keeps the 24 bytes of the current record
 * header (to see xl_tot_len, xl_prev, xl_rmid and XLOG_SWITCH even when the
 * header is split over a page boundary) but never buffers record bodies and
 * does not check record CRCs (wal_reader does).
 *
 * It validates what it can without the record body: page magic, flags,
 * xlp_pageaddr == position, long header exactly at segment starts (with the
 * right segment and block size), continuation flag and xlp_rem_len against
 * the bytes still owed, 24 <= xl_tot_len <= WAL_MAX_RECORD_LEN, a valid rmgr
 * id, and xl_prev == start of the previous record when that is known.  A page
 * flagged XLP_FIRST_IS_OVERWRITE_CONTRECORD abandons a record in progress
 * (Postgres wrote a new record over a torn one), as xlogreader does.
 *
 * Plain struct: copy it to snapshot the state; no heap, no cleanup.
 */
typedef struct wal_tracker {
    uint32_t seg_size;
    lsn_t start;
    lsn_t pos;         /* where the next byte goes */
    lsn_t last_end;    /* end (see top of file) of the last complete record */
    lsn_t prev_start;  /* start of that record; LSN_INVALID if unknown */
    const char *error; /* set once broken */

    bool first_page;    /* next page header is the first seen: a continuation is skipped */
    bool in_phdr;       /* collecting a page header */
    uint32_t phdr_need; /* 24, or 40 once XLP_LONG_HEADER is seen */
    uint32_t phdr_got;
    uint8_t phdr[WAL_LONG_PHD_SIZE];

    bool rec_active; /* inside a record (or its trailing padding) */
    bool rec_skip;   /* a continuation whose start we never saw */
    bool rec_switch; /* the record is an XLOG_SWITCH */
    lsn_t rec_start;
    uint32_t rec_len;  /* xl_tot_len; 0 until its 4 bytes arrived */
    uint32_t rec_got;  /* bytes of the record seen */
    uint32_t rec_left; /* record bytes still owed (valid once rec_len != 0 or rec_skip) */
    uint64_t pad_left; /* padding after the record's bytes before it counts as complete */
    uint8_t rhdr[WAL_RECORD_HEADER_SIZE];
} wal_tracker;

/*
 * Starts tracking at start, which is either a record boundary (8-aligned, not
 * inside a page header) or a page boundary.  At a page boundary the page
 * header is parsed when fed and a continuation (XLP_FIRST_IS_CONTRECORD,
 * xlp_rem_len bytes) is skipped, so a stream may start at a segment start in
 * the middle of a record; the end of that continued record then counts as a
 * complete record end.  seg_size must satisfy wal_seg_size_valid(); a bad
 * start or size makes the first wal_tracker_feed fail.
 */
void wal_tracker_init(wal_tracker *t, lsn_t start, uint32_t wal_seg_size);

/*
 * Feeds the next len bytes of WAL, which start at LSN at.  at must equal
 * wal_tracker_next(t) and at + len must not pass UINT64_MAX: if not, returns
 * -1 with *why set and the tracker is unchanged.  Returns 0, or -1 with *why (a static string) when
 * the bytes cannot be WAL; after such an error the tracker stays broken and every later feed fails
 * with the same reason.
 */
int wal_tracker_feed(wal_tracker *t, lsn_t at, const uint8_t *data, size_t len, const char **why);

/* Where the next byte goes. */
lsn_t wal_tracker_next(const wal_tracker *t);

/*
 * The end of the last complete record fed (see the convention at the top:
 * 8-aligned, the next record's start before any page header; the segment end
 * after XLOG_SWITCH).  A record counts as complete only once its bytes and
 * its alignment padding (for XLOG_SWITCH: everything up to the segment end)
 * were fed, so wal_tracker_last_record_end() <= wal_tracker_next() always.
 * Returns start until a record completes.
 */
lsn_t wal_tracker_last_record_end(const wal_tracker *t);

/* ---- Streaming record reader ------------------------------------------ */

/*
 * Reassembles whole records from WAL bytes fed in order (any chunking),
 * across page and segment boundaries, and decodes them (CRC checked).  It
 * follows the stream exactly like wal_tracker (same start rules, same
 * checks, same record ends) and copies each record's bytes, minus page
 * headers, into a buffer the caller provides.
 *
 * Bound: with wal_reader_init, a record longer than the buffer is an error
 * ("record larger than the reassembly buffer"), so memory is exactly what
 * the caller gave.  Postgres 15 writes records up to WAL_MAX_RECORD_LEN
 * (pg_logical_emit_message of 20 MB makes one record of 20 MB); a reader
 * that must follow every valid stream (a safekeeper's restart scan, the
 * pageserver's WAL receiver) uses wal_reader_init_growable, whose buffer
 * grows to the largest record seen.  WAL_READER_DEFAULT_BUF is a sensible
 * starting size for daemons.
 *
 * Typical loop:
 *     while (len > 0) {
 *         size_t used;
 *         int rc = wal_reader_feed(&r, at, data, len, &used, &why);
 *         if (rc < 0) ...error: end of valid WAL is wal_reader_last_record_end
 *         at += used; data += used; len -= used;
 *         if (rc == WAL_READER_RECORD) use wal_reader_record(&r, &start, &end);
 *     }
 */
#define WAL_READER_DEFAULT_BUF (16u << 20)

typedef struct wal_reader {
    wal_tracker tracker;
    uint8_t *buf; /* caller's reassembly buffer, cap bytes */
    size_t cap;
    uint8_t **grow_buf; /* growable: the caller's pointer and size to update */
    size_t *grow_cap;
    const char *error;
    bool have_record;
    lsn_t rec_start;
    lsn_t rec_end;
    lsn_t valid_end; /* end of the last record that decoded (or continuation skipped) */
    wal_record rec;  /* points into buf */
} wal_reader;

enum {
    WAL_READER_ERROR = -1,
    WAL_READER_NEED_MORE = 0, /* everything fed was consumed */
    WAL_READER_RECORD = 1,    /* a record is ready; *consumed may be < len */
};

/* Starts reading at start (same rules as wal_tracker_init).  buf (cap >= 24
 * bytes) is owned by the caller and must outlive the reader. */
void wal_reader_init(wal_reader *r, lsn_t start, uint32_t wal_seg_size, uint8_t *buf, size_t cap);

/*
 * Feeds WAL bytes starting at at (== wal_reader_next(r)).  Consumes bytes
 * until a record completes (returns WAL_READER_RECORD) or all are consumed
 * (WAL_READER_NEED_MORE); *consumed says how many.  On WAL_READER_ERROR,
 * *why (static string) says why the bytes at wal_reader_next() are not valid
 * WAL (including a record failing decode or CRC) and the reader stays broken;
 * a wrong at is refused without breaking it.  A record returned stays valid
 * until the next call.
 */
int wal_reader_feed(wal_reader *r, lsn_t at, const uint8_t *data, size_t len, size_t *consumed,
                    const char **why);

/* Like wal_reader_init, over a malloc'd buffer the reader may replace by a
 * larger one (realloc, updating *buf and *cap) to hold a record of up to
 * WAL_MAX_RECORD_LEN; failing that allocation is an error of the reader.
 * The caller keeps owning *buf (frees it, may reuse it for a new reader). */
void wal_reader_init_growable(wal_reader *r, lsn_t start, uint32_t wal_seg_size, uint8_t **buf,
                              size_t *cap);

/* The record of the last WAL_READER_RECORD: its start LSN and end LSN (the
 * convention at the top of this file).  NULL if none is pending. */
const wal_record *wal_reader_record(const wal_reader *r, lsn_t *start, lsn_t *end);

/* Where the next byte goes. */
lsn_t wal_reader_next(const wal_reader *r);

/* End of the last record returned, or of a continuation skipped at the
 * start (start if neither): after an error, the end of valid WAL. */
lsn_t wal_reader_last_record_end(const wal_reader *r);

#endif
