/*
 * walredo.h: the pipe protocol between the pageserver's redo pool and a redo
 * helper (docs/design.md §3.6, §6.5), one codec for both ends.
 *
 * Frames travel over the helper's stdin (requests) and stdout (responses).
 * Every frame is: type u8, payload length u32 (big-endian, counts the payload
 * only), payload.  Requests:
 *
 *   'B' begin      tag                            start rebuilding one block
 *   'P' push page  tag, 8192 bytes                the base page of that block
 *   'A' apply      end LSN u64, raw XLogRecord    one WAL record for the block
 *   'G' get page   tag                            -> 'p' page or 'E' error
 *   'H' ping                                      -> 'h' pong
 *
 * tag = spc u32, db u32, rel u32, fork u8, blk u32 (17 bytes).  Responses:
 *
 *   'V' hello      magic "STRATAWR", version u32  sent once, first, unasked
 *   'p' page       8192 bytes
 *   'h' pong
 *   'E' error      message text (1..WALREDO_MAX_ERROR bytes, no NUL)
 *
 * A request is B [P] A* G; the helper answers only G and H, so many requests
 * may be written back to back (pipelined) and their answers read in order.
 * An 'E' is the helper's last frame: it exits after sending one.  The record
 * of an 'A' must be a whole XLogRecord: its xl_tot_len (little-endian, as in
 * WAL) equals the bytes given.  The apply end LSN is the record's end
 * (walformat.h's convention), the LSN redo stamps on the page.
 *
 * Users: pageserver/redo/redo.c (encodes requests, decodes responses), the helper
 * compute/walredo/walredo.c (the reverse), tests and the benchmark.
 *
 * Pure, libc only, allocation-free; a decoded message's pointers point into
 * the caller's buffer.  The encoding is canonical: whatever decodes
 * re-encodes to the same bytes.
 *
 * For: the frames between the redo pool and a helper, both ends.
 * Not for: spawning helpers or choosing what to replay (pageserver/redo/).
 */
#ifndef STRATA_PROTO_WALREDO_H
#define STRATA_PROTO_WALREDO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"

#define WALREDO_PROTO_VERSION 1
#define WALREDO_MAGIC "STRATAWR"
#define WALREDO_MAGIC_LEN 8

#define WALREDO_PAGE_SIZE 8192
#define WALREDO_FRAME_HEADER_LEN 5
#define WALREDO_TAG_LEN 17
/* Smallest and largest XLogRecord an 'A' may carry (header .. 64 MB). */
#define WALREDO_MIN_RECORD 24
#define WALREDO_MAX_RECORD (64u * 1024 * 1024)
#define WALREDO_MAX_ERROR 4096
/* Largest payload of any frame (an 'A' with the largest record). */
#define WALREDO_MAX_PAYLOAD (8 + WALREDO_MAX_RECORD)

#define WALREDO_BEGIN 'B'
#define WALREDO_PUSH_PAGE 'P'
#define WALREDO_APPLY 'A'
#define WALREDO_GET_PAGE 'G'
#define WALREDO_PING 'H'
#define WALREDO_HELLO 'V'
#define WALREDO_PAGE 'p'
#define WALREDO_PONG 'h'
#define WALREDO_ERROR 'E'

/* The block being rebuilt (a RelFileNode, fork and block number). */
typedef struct walredo_tag {
    uint32_t spc;
    uint32_t db;
    uint32_t rel;
    uint8_t fork; /* 0..3 */
    uint32_t blk;
} walredo_tag;

typedef struct walredo_msg {
    uint8_t type;        /* one of the WALREDO_* frame types */
    walredo_tag tag;     /* B, P, G */
    const uint8_t *page; /* P, p: WALREDO_PAGE_SIZE bytes */
    lsn_t end_lsn;       /* A */
    const uint8_t *data; /* A: the record; E: the message */
    uint32_t data_len;
    uint32_t version; /* V */
} walredo_msg;

/* True for the frame types a helper accepts on stdin. */
bool walredo_is_request(uint8_t type);

/*
 * Decodes one frame from the start of buf[0..len).  Returns 1 with *out
 * filled and *used = the frame's bytes, 0 if buf holds only a prefix of a
 * valid frame (read more; *used untouched), or -1 with *why (static string)
 * when the bytes cannot be a frame: unknown type, a length wrong for the type
 * or over the bounds above, a fork over 3, a bad hello magic, an XLogRecord
 * whose xl_tot_len disagrees with its frame.  The header is judged as soon as
 * its 5 bytes are there, so a hostile length is refused before anything
 * waits for it.
 */
int walredo_decode(const uint8_t *buf, size_t len, walredo_msg *out, size_t *used,
                   const char **why);

/* Encoded size of m, or 0 if m is not encodable (unknown type, bounds). */
size_t walredo_encoded_len(const walredo_msg *m);

/* Writes m into out; returns the bytes written, or 0 if m is not encodable
 * or cap is too small. */
size_t walredo_encode(const walredo_msg *m, uint8_t *out, size_t cap);

/*
 * The header of an 'A' frame (type, length, end LSN: 13 bytes) so a writer
 * can send the record from its own buffer without copying it (writev).
 * Returns 13, or 0 if rec_len is out of bounds.
 */
#define WALREDO_APPLY_HEADER_LEN 13
size_t walredo_encode_apply_header(lsn_t end_lsn, uint32_t rec_len,
                                   uint8_t out[WALREDO_APPLY_HEADER_LEN]);

bool walredo_tag_equal(const walredo_tag *a, const walredo_tag *b);

#endif
