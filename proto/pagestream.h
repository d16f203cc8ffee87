/*
 * pagestream.h: the page service protocol, compute -> pageserver
 * (docs/design.md §3.4).
 *
 * After the query `pagestream_v1 <tenant_hex> <timeline_hex>` the server
 * answers CopyBothResponse; then every request and every response is one
 * CopyData payload.  Requests may be pipelined; responses come in order.
 * Big-endian, one-byte tag first.  Decoders validate lengths and ranges and
 * allocate nothing (page bytes point into the input buffer); encoders write
 * into a caller buffer and return the length, or 0 if it does not fit.
 *
 * LSN rules (enforced by the server, not the codec): request_lsn is the
 * version wanted (LSN_MAX = latest); not_modified_since promises the page did
 * not change between it and request_lsn; request_lsn < not_modified_since is
 * an error; a not_modified_since beyond what is ingested waits (bounded).
 *
 * Wire layout (what proto/pagestream.c implements; big-endian, one message
 * per CopyData payload, lengths in parentheses are the whole message):
 *
 *   request  = tag u8 | reqid u64 | request_lsn u64 | not_modified_since u64 | body
 *     EXISTS, NBLOCKS   body = spc u32 | db u32 | rel u32 | fork u8          (38 bytes)
 *     GETPAGE           body = spc u32 | db u32 | rel u32 | fork u8 | blk u32 (42 bytes)
 *     DBSIZE            body = db u32                                       (29 bytes)
 *     SPCSIZE           body = spc u32                                      (29 bytes)
 *     GET_SLRU_SEGMENT  body = kind u8 | segno u32                          (30 bytes)
 *
 *   response = tag u8 | reqid u64 | result
 *     EXISTS            u8 0 or 1                                          (10 bytes)
 *     NBLOCKS           u32                                                (13 bytes)
 *     GETPAGE           8192 bytes                                         (8201 bytes)
 *     DBSIZE            i64, never negative                                (17 bytes)
 *     SPCSIZE           bytes i64, never negative | relations u32         (21 bytes)
 *     GET_SLRU_SEGMENT  nblocks u32 (<= 32) | nblocks x 8192 bytes         (13 + n*8192)
 *     ERROR             sqlstate 5 bytes [0-9A-Z] | len u32 (<= 1024) | message
 *                       (printable text, no NUL)                           (18 + len)
 *
 * Ranges checked by the decoders: fork 0..3, SLRU kind 0..2 (slru_kind in
 * pageserver/store/key.h).  Every message has exactly one valid length; a short,
 * long (trailing bytes), unknown-tag or out-of-range message is rejected
 * with a reason.  The encoding is canonical: decode then encode gives back
 * the input bytes.
 *
 * For: the byte-exact messages between the compute's smgr and the
 * pageserver's page service, and their codec.  Not for: what a read means
 * (the LSN rules live in the pageserver) or IO.
 */
#ifndef STRATA_PROTO_PAGESTREAM_H
#define STRATA_PROTO_PAGESTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"

#define PAGESTREAM_PROTO_VERSION 1
#define PAGESTREAM_BLCKSZ 8192
/* Most blocks one GetSlruSegment response may carry (an SLRU segment is 32 pages). */
#define PAGESTREAM_MAX_SLRU_BLOCKS 32
#define PAGESTREAM_MAX_ERROR_MESSAGE 1024
/* Largest encoded response. */
#define PAGESTREAM_MAX_MESSAGE (64 + PAGESTREAM_MAX_SLRU_BLOCKS * PAGESTREAM_BLCKSZ)

typedef enum pagestream_tag {
    PS_REQ_EXISTS = 0,
    PS_REQ_NBLOCKS = 1,
    PS_REQ_GETPAGE = 2,
    PS_REQ_DBSIZE = 3,
    PS_REQ_GET_SLRU_SEGMENT = 4,
    PS_REQ_SPCSIZE = 5,
    /* Responses: 0x80 | request tag, or ERROR. */
    PS_RESP_EXISTS = 0x80,
    PS_RESP_NBLOCKS = 0x81,
    PS_RESP_GETPAGE = 0x82,
    PS_RESP_DBSIZE = 0x83,
    PS_RESP_GET_SLRU_SEGMENT = 0x84,
    PS_RESP_SPCSIZE = 0x85,
    PS_RESP_ERROR = 0xFF,
} pagestream_tag;

typedef struct pagestream_rel {
    uint32_t spc;
    uint32_t db;
    uint32_t rel;
    uint8_t fork; /* 0..3 */
} pagestream_rel;

typedef struct pagestream_request {
    uint8_t tag; /* PS_REQ_* */
    uint64_t reqid;
    lsn_t request_lsn;
    lsn_t not_modified_since;
    union {
        pagestream_rel rel; /* EXISTS, NBLOCKS */
        struct {
            pagestream_rel rel;
            uint32_t blkno;
        } page; /* GETPAGE */
        struct {
            uint32_t db;
        } dbsize; /* DBSIZE */
        struct {
            uint32_t spc;
        } spcsize; /* SPCSIZE */
        struct {
            uint8_t kind;
            uint32_t segno;
        } slru; /* GET_SLRU_SEGMENT; kind as slru_kind */
    } u;
} pagestream_request;

typedef struct pagestream_response {
    uint8_t tag; /* PS_RESP_* */
    uint64_t reqid;
    union {
        bool exists;
        uint32_t nblocks;
        const uint8_t *page; /* PAGESTREAM_BLCKSZ bytes */
        int64_t db_size_bytes;
        /* SPCSIZE: bytes of the tablespace's relations, and how many relations
         * (MAIN forks) it holds, empty ones included. */
        struct {
            int64_t bytes;
            uint32_t relations;
        } spc_size;
        struct {
            uint32_t nblocks;
            const uint8_t *blocks;
        } slru; /* nblocks × 8 KB */
        struct {
            char sqlstate[6];
            const char *message;
            uint32_t message_len;
        } error;
    } u;
} pagestream_response;

/* 0, or -1 with a static reason in *why. */
int pagestream_decode_request(const uint8_t *buf, size_t len, pagestream_request *out,
                              const char **why);
int pagestream_decode_response(const uint8_t *buf, size_t len, pagestream_response *out,
                               const char **why);
size_t pagestream_encode_request(const pagestream_request *req, uint8_t *buf, size_t cap);
size_t pagestream_encode_response(const pagestream_response *resp, uint8_t *buf, size_t cap);

#endif
