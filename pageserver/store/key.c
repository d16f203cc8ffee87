/*
 * key.c: the pageserver's key encoding and value codec (pageserver/store/key.h).
 *
 * For: turning a pg_key into the 18 bytes that sort with memcmp in the order
 * of docs/design.md §6.3 (and back, validating), index keys (key || big-endian LSN),
 * human-readable key names, and the value header codec (kind, flags, length,
 * payload) with per-kind payload checks.
 * Not for: where values are stored (store.c) or what they mean to redo.
 *
 * Pure functions, libc only, no allocation, no state: safe from any thread.
 */
#include "pageserver/store/key.h"

#include <stdio.h>
#include <string.h>

#include "base/byteorder.h"

/* The largest fork value a key of this kind may carry. */
static int key_max_fork(uint8_t kind)
{
    switch (kind) {
    case KEY_SLRU_BLOCK:
    case KEY_SLRU_SIZE:
        return SLRU_MULTIXACT_MEMBERS;
    default:
        return FORK_MAX;
    }
}

void pg_key_encode(const pg_key *k, uint8_t out[PG_KEY_LEN])
{
    out[0] = k->kind;
    put_be32(out + 1, k->spc);
    put_be32(out + 5, k->db);
    put_be32(out + 9, k->rel);
    out[13] = k->fork;
    put_be32(out + 14, k->blk);
}

bool pg_key_decode(const uint8_t in[PG_KEY_LEN], pg_key *out)
{
    uint8_t kind = in[0];
    if (kind > KEY_CONTROL)
        return false;
    if (in[13] > key_max_fork(kind))
        return false;
    out->kind = kind;
    out->spc = get_be32(in + 1);
    out->db = get_be32(in + 5);
    out->rel = get_be32(in + 9);
    out->fork = in[13];
    out->blk = get_be32(in + 14);
    return true;
}

static int cmp_u32(uint32_t a, uint32_t b)
{
    return a < b ? -1 : a > b ? 1 : 0;
}

/* Field by field, in encoding order, so the result equals memcmp of the
 * encodings without encoding. */
int pg_key_compare(const pg_key *a, const pg_key *b)
{
    int c;
    if ((c = cmp_u32(a->kind, b->kind)) != 0)
        return c;
    if ((c = cmp_u32(a->spc, b->spc)) != 0)
        return c;
    if ((c = cmp_u32(a->db, b->db)) != 0)
        return c;
    if ((c = cmp_u32(a->rel, b->rel)) != 0)
        return c;
    if ((c = cmp_u32(a->fork, b->fork)) != 0)
        return c;
    return cmp_u32(a->blk, b->blk);
}

void pg_index_key_encode(const pg_key *k, lsn_t lsn, uint8_t out[PG_INDEX_KEY_LEN])
{
    pg_key_encode(k, out);
    put_be64(out + PG_KEY_LEN, lsn);
}

bool pg_index_key_decode(const uint8_t in[PG_INDEX_KEY_LEN], pg_key *k, lsn_t *lsn)
{
    if (!pg_key_decode(in, k))
        return false;
    *lsn = get_be64(in + PG_KEY_LEN);
    return true;
}

pg_key pg_key_rel_block(uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork, uint32_t blk)
{
    pg_key k = {.kind = KEY_REL_BLOCK, .spc = spc, .db = db, .rel = rel, .fork = fork, .blk = blk};
    return k;
}

pg_key pg_key_rel_size(uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork)
{
    pg_key k = {.kind = KEY_REL_SIZE, .spc = spc, .db = db, .rel = rel, .fork = fork, .blk = 0};
    return k;
}

pg_key pg_key_slru_block(slru_kind kind, uint32_t segno, uint32_t blk)
{
    pg_key k = {
        .kind = KEY_SLRU_BLOCK, .spc = 0, .db = 0, .rel = segno, .fork = (uint8_t)kind, .blk = blk};
    return k;
}

static const char *slru_name(uint8_t fork)
{
    switch (fork) {
    case SLRU_CLOG:
        return "clog";
    case SLRU_MULTIXACT_OFFSETS:
        return "mxoff";
    case SLRU_MULTIXACT_MEMBERS:
        return "mxmem";
    default:
        return "slru?";
    }
}

char *pg_key_format(const pg_key *k, char *buf, size_t len)
{
    if (len == 0)
        return buf;
    switch (k->kind) {
    case KEY_REL_BLOCK:
        snprintf(buf, len, "rel %u/%u/%u.%u blk %u", k->spc, k->db, k->rel, k->fork, k->blk);
        break;
    case KEY_REL_SIZE:
        snprintf(buf, len, "relsize %u/%u/%u.%u", k->spc, k->db, k->rel, k->fork);
        break;
    case KEY_DB:
        snprintf(buf, len, "db %u/%u", k->spc, k->db);
        break;
    case KEY_RELMAP:
        snprintf(buf, len, "relmap %u/%u", k->spc, k->db);
        break;
    case KEY_SLRU_BLOCK:
        snprintf(buf, len, "slru %s seg %u blk %u", slru_name(k->fork), k->rel, k->blk);
        break;
    case KEY_SLRU_SIZE:
        snprintf(buf, len, "slrusize %s seg %u", slru_name(k->fork), k->rel);
        break;
    case KEY_TWOPHASE:
        snprintf(buf, len, "twophase xid %u", k->rel);
        break;
    case KEY_CHECKPOINT:
        snprintf(buf, len, "checkpoint");
        break;
    case KEY_CONTROL:
        snprintf(buf, len, "control");
        break;
    default:
        snprintf(buf, len, "key? kind %u %u/%u/%u.%u blk %u", k->kind, k->spc, k->db, k->rel,
                 k->fork, k->blk);
        break;
    }
    return buf;
}

bool value_is_complete(const value_ref *v)
{
    switch (v->kind) {
    case VAL_IMAGE:
    case VAL_SIZE:
    case VAL_TOMBSTONE:
    case VAL_BLOB:
    case VAL_ZERO_PAGE:
        return true;
    default:
        return (v->flags & VALUE_WILL_INIT) != 0;
    }
}

size_t value_encode(const value_ref *v, uint8_t *out, size_t cap)
{
    if (v->len > VALUE_MAX_PAYLOAD || cap < VALUE_HEADER_LEN || cap - VALUE_HEADER_LEN < v->len)
        return 0;
    out[0] = v->kind;
    out[1] = v->flags;
    put_be32(out + 2, v->len);
    if (v->len > 0)
        memcpy(out + VALUE_HEADER_LEN, v->payload, v->len);
    return VALUE_HEADER_LEN + (size_t)v->len;
}

/* Per-kind payload shape; NULL if p (len bytes) is acceptable. */
static const char *value_check_payload(uint8_t kind, const uint8_t *p, uint32_t len)
{
    switch (kind) {
    case VAL_IMAGE:
        return len == PG_BLCKSZ ? NULL : "image payload is not one page";
    case VAL_WAL_RECORD:
        /* An XLogRecord header is 24 bytes and xl_tot_len (little-endian,
         * first) covers the whole record. */
        if (len < 24)
            return "WAL record payload shorter than a record header";
        if (((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24) !=
            len)
            return "WAL record payload length differs from xl_tot_len";
        return NULL;
    case VAL_CLOG_SET:
        if (len < 5)
            return "CLOG delta payload too short";
        if ((len - 5) % 4 != 0 || (len - 5) / 4 != get_be32(p + 1))
            return "CLOG delta xid count does not match its length";
        return NULL;
    case VAL_VM_CLEAR:
        return len == 9 ? NULL : "VM clear payload is not 9 bytes";
    case VAL_MXACT_OFFSET:
        return len == 8 ? NULL : "multixact offset payload is not 8 bytes";
    case VAL_MXACT_MEMBERS:
        if (len < 8)
            return "multixact members payload too short";
        if ((len - 8) % 5 != 0 || (len - 8) / 5 != get_be32(p + 4))
            return "multixact member count does not match its length";
        return NULL;
    case VAL_SIZE:
        return len == 4 ? NULL : "size payload is not 4 bytes";
    case VAL_TOMBSTONE:
        return len == 0 ? NULL : "tombstone has a payload";
    case VAL_BLOB:
        return NULL;
    case VAL_ZERO_PAGE:
        return len == 0 ? NULL : "zero page has a payload";
    default:
        return "unknown value kind";
    }
}

int value_decode(const uint8_t *buf, size_t len, value_ref *out, size_t *used, const char **why)
{
    if (len < VALUE_HEADER_LEN) {
        *why = "value shorter than its header";
        return -1;
    }
    uint8_t kind = buf[0];
    uint8_t flags = buf[1];
    uint32_t plen = get_be32(buf + 2);
    if (kind < VAL_IMAGE || kind > VAL_ZERO_PAGE) {
        *why = "unknown value kind";
        return -1;
    }
    if ((flags & ~VALUE_WILL_INIT) != 0) {
        *why = "unknown value flags";
        return -1;
    }
    if (plen > VALUE_MAX_PAYLOAD) {
        *why = "value payload larger than the maximum";
        return -1;
    }
    if (plen > len - VALUE_HEADER_LEN) {
        *why = "value payload runs past the buffer";
        return -1;
    }
    const uint8_t *payload = buf + VALUE_HEADER_LEN;
    const char *bad = value_check_payload(kind, payload, plen);
    if (bad != NULL) {
        *why = bad;
        return -1;
    }
    out->kind = kind;
    out->flags = flags;
    out->len = plen;
    out->payload = payload;
    *used = VALUE_HEADER_LEN + (size_t)plen;
    return 0;
}
