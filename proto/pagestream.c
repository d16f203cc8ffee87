/*
 * pagestream.c: the pagestream codec (docs/design.md §3.4).  See pagestream.h.
 *
 * Wire layout (big-endian, one message per CopyData payload):
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
 *     GET_SLRU_SEGMENT  nblocks u32 (<= 32) | nblocks x 8192 bytes
 *     ERROR             sqlstate 5 bytes [0-9A-Z] | len u32 (<= 1024) | message
 *                       (printable text, no NUL)
 *
 * Every message has exactly one valid length; a short, long (trailing bytes),
 * unknown-tag or out-of-range message is rejected with a reason.  The
 * encoding is canonical: decode then encode gives back the input bytes.
 *
 * For: the byte layout of every request and response, both directions.
 * Not for: LSN rules, page contents, or IO.  libc only, allocates nothing.
 */
#include "proto/pagestream.h"

#include <string.h>

#include "base/byteorder.h"

#define REQ_HEADER_LEN 25 /* tag + reqid + request_lsn + not_modified_since */
#define RESP_HEADER_LEN 9 /* tag + reqid */
#define REL_LEN 13        /* spc + db + rel + fork */
#define SLRU_KIND_MAX 2   /* SLRU_MULTIXACT_MEMBERS in pageserver/store/key.h */
#define FORK_NUMBER_MAX 3 /* INIT_FORKNUM */

static bool sqlstate_valid(const char *s)
{
    for (int i = 0; i < 5; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z')))
            return false;
    }
    return true;
}

static bool message_valid(const char *m, uint32_t len)
{
    if (len > PAGESTREAM_MAX_ERROR_MESSAGE)
        return false;
    for (uint32_t i = 0; i < len; i++) {
        if (m[i] == '\0')
            return false;
    }
    return true;
}

/* Length of a request with this tag, or 0 for an unknown tag. */
static size_t request_len(uint8_t tag)
{
    switch (tag) {
    case PS_REQ_EXISTS:
    case PS_REQ_NBLOCKS:
        return REQ_HEADER_LEN + REL_LEN;
    case PS_REQ_GETPAGE:
        return REQ_HEADER_LEN + REL_LEN + 4;
    case PS_REQ_DBSIZE:
    case PS_REQ_SPCSIZE:
        return REQ_HEADER_LEN + 4;
    case PS_REQ_GET_SLRU_SEGMENT:
        return REQ_HEADER_LEN + 5;
    default:
        return 0;
    }
}

static void decode_rel(const uint8_t *p, pagestream_rel *rel)
{
    rel->spc = get_be32(p);
    rel->db = get_be32(p + 4);
    rel->rel = get_be32(p + 8);
    rel->fork = p[12];
}

static void encode_rel(uint8_t *p, const pagestream_rel *rel)
{
    put_be32(p, rel->spc);
    put_be32(p + 4, rel->db);
    put_be32(p + 8, rel->rel);
    p[12] = rel->fork;
}

int pagestream_decode_request(const uint8_t *buf, size_t len, pagestream_request *out,
                              const char **why)
{
    memset(out, 0, sizeof *out);
    if (len < 1) {
        *why = "pagestream request: empty message";
        return -1;
    }
    size_t want = request_len(buf[0]);
    if (want == 0) {
        *why = "pagestream request: unknown tag";
        return -1;
    }
    if (len < want) {
        *why = "pagestream request: shorter than its tag requires";
        return -1;
    }
    if (len > want) {
        *why = "pagestream request: trailing bytes after the request";
        return -1;
    }
    out->tag = buf[0];
    out->reqid = get_be64(buf + 1);
    out->request_lsn = get_be64(buf + 9);
    out->not_modified_since = get_be64(buf + 17);
    const uint8_t *body = buf + REQ_HEADER_LEN;
    switch (out->tag) {
    case PS_REQ_EXISTS:
    case PS_REQ_NBLOCKS:
        decode_rel(body, &out->u.rel);
        if (out->u.rel.fork > FORK_NUMBER_MAX) {
            *why = "pagestream request: fork number out of range (0..3)";
            return -1;
        }
        return 0;
    case PS_REQ_GETPAGE:
        decode_rel(body, &out->u.page.rel);
        out->u.page.blkno = get_be32(body + REL_LEN);
        if (out->u.page.rel.fork > FORK_NUMBER_MAX) {
            *why = "pagestream request: fork number out of range (0..3)";
            return -1;
        }
        return 0;
    case PS_REQ_DBSIZE:
        out->u.dbsize.db = get_be32(body);
        return 0;
    case PS_REQ_SPCSIZE:
        out->u.spcsize.spc = get_be32(body);
        return 0;
    case PS_REQ_GET_SLRU_SEGMENT:
        out->u.slru.kind = body[0];
        out->u.slru.segno = get_be32(body + 1);
        if (out->u.slru.kind > SLRU_KIND_MAX) {
            *why = "pagestream request: SLRU kind out of range (0..2)";
            return -1;
        }
        return 0;
    default:
        break;
    }
    *why = "pagestream request: unknown tag";
    return -1;
}

size_t pagestream_encode_request(const pagestream_request *req, uint8_t *buf, size_t cap)
{
    size_t n = request_len(req->tag);
    if (n == 0 || n > cap)
        return 0;
    /* Never produce what the decoder would reject. */
    if (((req->tag == PS_REQ_EXISTS || req->tag == PS_REQ_NBLOCKS) &&
         req->u.rel.fork > FORK_NUMBER_MAX) ||
        (req->tag == PS_REQ_GETPAGE && req->u.page.rel.fork > FORK_NUMBER_MAX) ||
        (req->tag == PS_REQ_GET_SLRU_SEGMENT && req->u.slru.kind > SLRU_KIND_MAX))
        return 0;
    buf[0] = req->tag;
    put_be64(buf + 1, req->reqid);
    put_be64(buf + 9, req->request_lsn);
    put_be64(buf + 17, req->not_modified_since);
    uint8_t *body = buf + REQ_HEADER_LEN;
    switch (req->tag) {
    case PS_REQ_EXISTS:
    case PS_REQ_NBLOCKS:
        encode_rel(body, &req->u.rel);
        break;
    case PS_REQ_GETPAGE:
        encode_rel(body, &req->u.page.rel);
        put_be32(body + REL_LEN, req->u.page.blkno);
        break;
    case PS_REQ_DBSIZE:
        put_be32(body, req->u.dbsize.db);
        break;
    case PS_REQ_SPCSIZE:
        put_be32(body, req->u.spcsize.spc);
        break;
    case PS_REQ_GET_SLRU_SEGMENT:
        body[0] = req->u.slru.kind;
        put_be32(body + 1, req->u.slru.segno);
        break;
    default:
        return 0;
    }
    return n;
}

/* The length of the result a response with this tag must carry (its
 * variable part read from p, rest bytes).  0, or -1 with *why. */
static int response_body_len(uint8_t tag, const uint8_t *p, size_t rest, size_t *want,
                             const char **why)
{
    switch (tag) {
    case PS_RESP_EXISTS:
        *want = 1;
        return 0;
    case PS_RESP_NBLOCKS:
        *want = 4;
        return 0;
    case PS_RESP_GETPAGE:
        *want = PAGESTREAM_BLCKSZ;
        return 0;
    case PS_RESP_DBSIZE:
        *want = 8;
        return 0;
    case PS_RESP_SPCSIZE:
        *want = 12;
        return 0;
    case PS_RESP_GET_SLRU_SEGMENT:
        if (rest < 4) {
            *why = "pagestream response: SLRU segment shorter than its block count";
            return -1;
        }
        if (get_be32(p) > PAGESTREAM_MAX_SLRU_BLOCKS) {
            *why = "pagestream response: SLRU segment has more than 32 blocks";
            return -1;
        }
        *want = 4 + (size_t)get_be32(p) * PAGESTREAM_BLCKSZ;
        return 0;
    default: /* PS_RESP_ERROR */
        if (rest < 9) {
            *why = "pagestream response: error shorter than SQLSTATE and length";
            return -1;
        }
        if (get_be32(p + 5) > PAGESTREAM_MAX_ERROR_MESSAGE) {
            *why = "pagestream response: error message longer than 1024 bytes";
            return -1;
        }
        *want = 9 + get_be32(p + 5);
        return 0;
    }
}

/* Decodes the result at p (exactly as long as response_body_len said). */
static int decode_response_body(uint8_t tag, const uint8_t *p, pagestream_response *out,
                                const char **why)
{
    switch (tag) {
    case PS_RESP_EXISTS:
        if (p[0] > 1) {
            *why = "pagestream response: exists is neither 0 nor 1";
            return -1;
        }
        out->u.exists = p[0] == 1;
        return 0;
    case PS_RESP_NBLOCKS:
        out->u.nblocks = get_be32(p);
        return 0;
    case PS_RESP_GETPAGE:
        out->u.page = p;
        return 0;
    case PS_RESP_DBSIZE:
        out->u.db_size_bytes = (int64_t)get_be64(p);
        if (out->u.db_size_bytes < 0) {
            *why = "pagestream response: negative database size";
            return -1;
        }
        return 0;
    case PS_RESP_SPCSIZE:
        out->u.spc_size.bytes = (int64_t)get_be64(p);
        out->u.spc_size.relations = get_be32(p + 8);
        if (out->u.spc_size.bytes < 0) {
            *why = "pagestream response: negative tablespace size";
            return -1;
        }
        return 0;
    case PS_RESP_GET_SLRU_SEGMENT:
        out->u.slru.nblocks = get_be32(p);
        out->u.slru.blocks = p + 4;
        return 0;
    default: /* PS_RESP_ERROR */
        memcpy(out->u.error.sqlstate, p, 5);
        out->u.error.sqlstate[5] = '\0';
        if (!sqlstate_valid(out->u.error.sqlstate)) {
            *why = "pagestream response: SQLSTATE is not 5 characters of [0-9A-Z]";
            return -1;
        }
        out->u.error.message_len = get_be32(p + 5);
        out->u.error.message = (const char *)p + 9;
        if (!message_valid(out->u.error.message, out->u.error.message_len)) {
            *why = "pagestream response: error message contains a NUL byte";
            return -1;
        }
        return 0;
    }
}

int pagestream_decode_response(const uint8_t *buf, size_t len, pagestream_response *out,
                               const char **why)
{
    memset(out, 0, sizeof *out);
    if (len < 1) {
        *why = "pagestream response: empty message";
        return -1;
    }
    uint8_t tag = buf[0];
    if (tag != PS_RESP_EXISTS && tag != PS_RESP_NBLOCKS && tag != PS_RESP_GETPAGE &&
        tag != PS_RESP_DBSIZE && tag != PS_RESP_SPCSIZE && tag != PS_RESP_GET_SLRU_SEGMENT &&
        tag != PS_RESP_ERROR) {
        *why = "pagestream response: unknown tag";
        return -1;
    }
    if (len < RESP_HEADER_LEN) {
        *why = "pagestream response: shorter than its 9-byte header";
        return -1;
    }
    out->tag = tag;
    out->reqid = get_be64(buf + 1);
    const uint8_t *p = buf + RESP_HEADER_LEN;
    size_t rest = len - RESP_HEADER_LEN;
    size_t want;
    if (response_body_len(tag, p, rest, &want, why) != 0)
        return -1;
    if (rest < want) {
        *why = "pagestream response: shorter than its tag requires";
        return -1;
    }
    if (rest > want) {
        *why = "pagestream response: trailing bytes after the response";
        return -1;
    }
    return decode_response_body(tag, p, out, why);
}

size_t pagestream_encode_response(const pagestream_response *resp, uint8_t *buf, size_t cap)
{
    size_t n;
    switch (resp->tag) {
    case PS_RESP_EXISTS:
        n = RESP_HEADER_LEN + 1;
        break;
    case PS_RESP_NBLOCKS:
        n = RESP_HEADER_LEN + 4;
        break;
    case PS_RESP_GETPAGE:
        if (resp->u.page == NULL)
            return 0;
        n = RESP_HEADER_LEN + PAGESTREAM_BLCKSZ;
        break;
    case PS_RESP_DBSIZE:
        if (resp->u.db_size_bytes < 0)
            return 0;
        n = RESP_HEADER_LEN + 8;
        break;
    case PS_RESP_SPCSIZE:
        if (resp->u.spc_size.bytes < 0)
            return 0;
        n = RESP_HEADER_LEN + 12;
        break;
    case PS_RESP_GET_SLRU_SEGMENT:
        if (resp->u.slru.nblocks > PAGESTREAM_MAX_SLRU_BLOCKS ||
            (resp->u.slru.nblocks > 0 && resp->u.slru.blocks == NULL))
            return 0;
        n = RESP_HEADER_LEN + 4 + (size_t)resp->u.slru.nblocks * PAGESTREAM_BLCKSZ;
        break;
    case PS_RESP_ERROR:
        if (!sqlstate_valid(resp->u.error.sqlstate) ||
            (resp->u.error.message_len > 0 && resp->u.error.message == NULL) ||
            !message_valid(resp->u.error.message, resp->u.error.message_len))
            return 0;
        n = RESP_HEADER_LEN + 9 + resp->u.error.message_len;
        break;
    default:
        return 0;
    }
    if (n > cap)
        return 0;
    buf[0] = resp->tag;
    put_be64(buf + 1, resp->reqid);
    uint8_t *p = buf + RESP_HEADER_LEN;
    switch (resp->tag) {
    case PS_RESP_EXISTS:
        p[0] = resp->u.exists ? 1 : 0;
        break;
    case PS_RESP_NBLOCKS:
        put_be32(p, resp->u.nblocks);
        break;
    case PS_RESP_GETPAGE:
        memcpy(p, resp->u.page, PAGESTREAM_BLCKSZ);
        break;
    case PS_RESP_DBSIZE:
        put_be64(p, (uint64_t)resp->u.db_size_bytes);
        break;
    case PS_RESP_SPCSIZE:
        put_be64(p, (uint64_t)resp->u.spc_size.bytes);
        put_be32(p + 8, resp->u.spc_size.relations);
        break;
    case PS_RESP_GET_SLRU_SEGMENT:
        put_be32(p, resp->u.slru.nblocks);
        if (resp->u.slru.nblocks > 0)
            memcpy(p + 4, resp->u.slru.blocks, (size_t)resp->u.slru.nblocks * PAGESTREAM_BLCKSZ);
        break;
    default: /* PS_RESP_ERROR */
        memcpy(p, resp->u.error.sqlstate, 5);
        put_be32(p + 5, resp->u.error.message_len);
        if (resp->u.error.message_len > 0)
            memcpy(p + 9, resp->u.error.message, resp->u.error.message_len);
        break;
    }
    return n;
}
