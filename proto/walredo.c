/*
 * walredo.c: the redo helper pipe protocol codec.  See walredo.h.
 *
 * For: encoding and decoding the frames of walredo.h.
 * Not for: IO.  Compiled into the pageserver and into the helper (a Postgres
 * module), so libc only and no allocation.
 */
#include "proto/walredo.h"

#include <string.h>

#include "base/byteorder.h"

static void put_tag(uint8_t *p, const walredo_tag *t)
{
    put_be32(p, t->spc);
    put_be32(p + 4, t->db);
    put_be32(p + 8, t->rel);
    p[12] = t->fork;
    put_be32(p + 13, t->blk);
}

static int get_tag(const uint8_t *p, walredo_tag *t, const char **why)
{
    t->spc = get_be32(p);
    t->db = get_be32(p + 4);
    t->rel = get_be32(p + 8);
    t->fork = p[12];
    t->blk = get_be32(p + 13);
    if (t->fork > 3) {
        *why = "walredo: fork number over 3";
        return -1;
    }
    return 0;
}

bool walredo_is_request(uint8_t type)
{
    return type == WALREDO_BEGIN || type == WALREDO_PUSH_PAGE || type == WALREDO_APPLY ||
           type == WALREDO_GET_PAGE || type == WALREDO_PING;
}

bool walredo_tag_equal(const walredo_tag *a, const walredo_tag *b)
{
    return a->spc == b->spc && a->db == b->db && a->rel == b->rel && a->fork == b->fork &&
           a->blk == b->blk;
}

/* Checks a frame header's length against its type: 0, or -1 with *why. */
static int check_length(uint8_t type, uint32_t len, const char **why)
{
    switch (type) {
    case WALREDO_BEGIN:
    case WALREDO_GET_PAGE:
        if (len != WALREDO_TAG_LEN) {
            *why = "walredo: begin/get page frame is not 17 bytes";
            return -1;
        }
        return 0;
    case WALREDO_PUSH_PAGE:
        if (len != WALREDO_TAG_LEN + WALREDO_PAGE_SIZE) {
            *why = "walredo: push page frame is not tag + 8192 bytes";
            return -1;
        }
        return 0;
    case WALREDO_APPLY:
        if (len < 8 + WALREDO_MIN_RECORD || len > WALREDO_MAX_PAYLOAD) {
            *why = "walredo: apply frame length out of bounds";
            return -1;
        }
        return 0;
    case WALREDO_PING:
    case WALREDO_PONG:
        if (len != 0) {
            *why = "walredo: ping/pong frame with a payload";
            return -1;
        }
        return 0;
    case WALREDO_HELLO:
        if (len != WALREDO_MAGIC_LEN + 4) {
            *why = "walredo: hello frame is not 12 bytes";
            return -1;
        }
        return 0;
    case WALREDO_PAGE:
        if (len != WALREDO_PAGE_SIZE) {
            *why = "walredo: page frame is not 8192 bytes";
            return -1;
        }
        return 0;
    case WALREDO_ERROR:
        if (len < 1 || len > WALREDO_MAX_ERROR) {
            *why = "walredo: error frame length out of bounds";
            return -1;
        }
        return 0;
    default:
        *why = "walredo: unknown frame type";
        return -1;
    }
}

int walredo_decode(const uint8_t *buf, size_t len, walredo_msg *out, size_t *used, const char **why)
{
    if (len < WALREDO_FRAME_HEADER_LEN) {
        /* Judge the type early: garbage is refused without waiting. */
        if (len >= 1 && !walredo_is_request(buf[0]) && buf[0] != WALREDO_HELLO &&
            buf[0] != WALREDO_PAGE && buf[0] != WALREDO_PONG && buf[0] != WALREDO_ERROR) {
            *why = "walredo: unknown frame type";
            return -1;
        }
        return 0;
    }
    uint8_t type = buf[0];
    uint32_t plen = get_be32(buf + 1);
    if (check_length(type, plen, why) < 0)
        return -1;
    if (len - WALREDO_FRAME_HEADER_LEN < plen)
        return 0;

    const uint8_t *p = buf + WALREDO_FRAME_HEADER_LEN;
    memset(out, 0, sizeof *out);
    out->type = type;
    switch (type) {
    case WALREDO_BEGIN:
    case WALREDO_GET_PAGE:
        if (get_tag(p, &out->tag, why) < 0)
            return -1;
        break;
    case WALREDO_PUSH_PAGE:
        if (get_tag(p, &out->tag, why) < 0)
            return -1;
        out->page = p + WALREDO_TAG_LEN;
        break;
    case WALREDO_APPLY:
        out->end_lsn = get_be64(p);
        out->data = p + 8;
        out->data_len = plen - 8;
        if (get_le32(out->data) != out->data_len) {
            *why = "walredo: record's xl_tot_len does not match its frame";
            return -1;
        }
        break;
    case WALREDO_HELLO:
        if (memcmp(p, WALREDO_MAGIC, WALREDO_MAGIC_LEN) != 0) {
            *why = "walredo: hello frame without the magic";
            return -1;
        }
        out->version = get_be32(p + WALREDO_MAGIC_LEN);
        break;
    case WALREDO_PAGE:
        out->page = p;
        break;
    case WALREDO_ERROR:
        out->data = p;
        out->data_len = plen;
        break;
    default:
        break;
    }
    *used = WALREDO_FRAME_HEADER_LEN + (size_t)plen;
    return 1;
}

size_t walredo_encoded_len(const walredo_msg *m)
{
    uint32_t plen;
    switch (m->type) {
    case WALREDO_BEGIN:
    case WALREDO_GET_PAGE:
        plen = WALREDO_TAG_LEN;
        break;
    case WALREDO_PUSH_PAGE:
        plen = WALREDO_TAG_LEN + WALREDO_PAGE_SIZE;
        break;
    case WALREDO_APPLY:
        if (m->data_len < WALREDO_MIN_RECORD || m->data_len > WALREDO_MAX_RECORD ||
            get_le32(m->data) != m->data_len)
            return 0;
        plen = 8 + m->data_len;
        break;
    case WALREDO_PING:
    case WALREDO_PONG:
        plen = 0;
        break;
    case WALREDO_HELLO:
        plen = WALREDO_MAGIC_LEN + 4;
        break;
    case WALREDO_PAGE:
        plen = WALREDO_PAGE_SIZE;
        break;
    case WALREDO_ERROR:
        if (m->data_len < 1 || m->data_len > WALREDO_MAX_ERROR)
            return 0;
        plen = m->data_len;
        break;
    default:
        return 0;
    }
    if ((m->type == WALREDO_BEGIN || m->type == WALREDO_GET_PAGE || m->type == WALREDO_PUSH_PAGE) &&
        m->tag.fork > 3)
        return 0;
    return WALREDO_FRAME_HEADER_LEN + (size_t)plen;
}

size_t walredo_encode(const walredo_msg *m, uint8_t *out, size_t cap)
{
    size_t n = walredo_encoded_len(m);
    if (n == 0 || n > cap)
        return 0;
    out[0] = m->type;
    put_be32(out + 1, (uint32_t)(n - WALREDO_FRAME_HEADER_LEN));
    uint8_t *p = out + WALREDO_FRAME_HEADER_LEN;
    switch (m->type) {
    case WALREDO_BEGIN:
    case WALREDO_GET_PAGE:
        put_tag(p, &m->tag);
        break;
    case WALREDO_PUSH_PAGE:
        put_tag(p, &m->tag);
        memcpy(p + WALREDO_TAG_LEN, m->page, WALREDO_PAGE_SIZE);
        break;
    case WALREDO_APPLY:
        put_be64(p, m->end_lsn);
        memcpy(p + 8, m->data, m->data_len);
        break;
    case WALREDO_HELLO:
        memcpy(p, WALREDO_MAGIC, WALREDO_MAGIC_LEN);
        put_be32(p + WALREDO_MAGIC_LEN, m->version);
        break;
    case WALREDO_PAGE:
        memcpy(p, m->page, WALREDO_PAGE_SIZE);
        break;
    case WALREDO_ERROR:
        memcpy(p, m->data, m->data_len);
        break;
    default:
        break;
    }
    return n;
}

size_t walredo_encode_apply_header(lsn_t end_lsn, uint32_t rec_len,
                                   uint8_t out[WALREDO_APPLY_HEADER_LEN])
{
    if (rec_len < WALREDO_MIN_RECORD || rec_len > WALREDO_MAX_RECORD)
        return 0;
    out[0] = WALREDO_APPLY;
    put_be32(out + 1, 8 + rec_len);
    put_be64(out + 5, end_lsn);
    return WALREDO_APPLY_HEADER_LEN;
}
