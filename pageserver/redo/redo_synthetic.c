/*
 * redo_synthetic.c: CLOG, visibility-map and multixact deltas applied in C,
 * and the visibility-map side of an smgr truncate record.
 * See redo_synthetic.h.
 *
 * The bit layouts restate PostgreSQL 15's macros (clog.c TransactionIdToByte
 * and friends, visibilitymap.c HEAPBLK_TO_MAPBYTE/OFFSET, multixact.c
 * MXOffsetToFlagsOffset and friends).  Values on the pages are in host byte
 * order (little-endian on the platforms we run), as Postgres writes them.
 *
 * Not for: anything with IO.
 */
#include "pageserver/redo/redo_synthetic.h"

#include <string.h>

#include "base/byteorder.h"

#define CLOG_STATUS_MAX 3 /* committed 1, aborted 2, sub-committed 3 */
#define VM_VALID_BITS 0x03
#define MXACT_STATUS_MAX 5 /* MultiXactStatusUpdate */

static uint64_t slru_pageno(const pg_key *k)
{
    return (uint64_t)k->rel * REDO_SLRU_PAGES_PER_SEGMENT + k->blk;
}

static int apply_clog_set(const pg_key *k, const value_ref *v, uint8_t *page, const char **why)
{
    if (k->kind != KEY_SLRU_BLOCK || k->fork != SLRU_CLOG) {
        *why = "CLOG delta on a page that is not a CLOG page";
        return -1;
    }
    if (v->len < 5 || (v->len - 5) % 4 != 0 || (v->len - 5) / 4 != get_be32(v->payload + 1)) {
        *why = "CLOG delta payload malformed";
        return -1;
    }
    uint8_t status = v->payload[0];
    if (status == 0 || status > CLOG_STATUS_MAX) {
        *why = "CLOG delta status out of range";
        return -1;
    }
    uint32_t n = get_be32(v->payload + 1);
    uint64_t pageno = slru_pageno(k);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t xid = get_be32(v->payload + 5 + 4 * (size_t)i);
        if (xid / REDO_CLOG_XACTS_PER_PAGE != pageno) {
            *why = "CLOG delta names an xid of another page";
            return -1;
        }
        uint32_t idx = xid % REDO_CLOG_XACTS_PER_PAGE;
        uint32_t byte = idx / 4;
        unsigned shift = (idx % 4) * 2;
        page[byte] = (uint8_t)((page[byte] & ~(0x3u << shift)) | ((unsigned)status << shift));
    }
    return 0;
}

static bool page_is_zero(const uint8_t *page)
{
    for (size_t i = 0; i < PG_BLCKSZ; i++)
        if (page[i] != 0)
            return false;
    return true;
}

/* PageInit(page, BLCKSZ, 0): pd_lower after the header, pd_upper and
 * pd_special at the end, layout version 4. */
static void page_init(uint8_t *page)
{
    memset(page, 0, PG_BLCKSZ);
    uint16_t lower = 24, upper = PG_BLCKSZ, special = PG_BLCKSZ;
    uint16_t size_version = PG_BLCKSZ | 4;
    memcpy(page + 12, &lower, 2);
    memcpy(page + 14, &upper, 2);
    memcpy(page + 16, &special, 2);
    memcpy(page + 18, &size_version, 2);
}

static void vm_clear_one(const pg_key *k, uint8_t *page, uint32_t heap_blk, uint8_t flags,
                         int *hits)
{
    if (heap_blk == UINT32_MAX || heap_blk / REDO_VM_HEAPBLOCKS_PER_PAGE != k->blk)
        return;
    uint32_t idx = heap_blk % REDO_VM_HEAPBLOCKS_PER_PAGE;
    uint8_t *map = page + 24;
    map[idx / 4] &= (uint8_t) ~((unsigned)flags << ((idx % 4) * 2));
    (*hits)++;
}

static int apply_vm_clear(const pg_key *k, const value_ref *v, uint8_t *page, const char **why)
{
    if (k->kind != KEY_REL_BLOCK || k->fork != FORK_VM) {
        *why = "VM clear delta on a page that is not a visibility-map page";
        return -1;
    }
    if (v->len != 9) {
        *why = "VM clear delta payload is not 9 bytes";
        return -1;
    }
    uint8_t flags = v->payload[0];
    if (flags == 0 || (flags & ~VM_VALID_BITS) != 0) {
        *why = "VM clear delta flags out of range";
        return -1;
    }
    if (page_is_zero(page))
        page_init(page);
    int hits = 0;
    vm_clear_one(k, page, get_be32(v->payload + 1), flags, &hits);
    vm_clear_one(k, page, get_be32(v->payload + 5), flags, &hits);
    if (hits == 0) {
        *why = "VM clear delta names no heap block of this page";
        return -1;
    }
    return 0;
}

static int apply_mxact_offset(const pg_key *k, const value_ref *v, uint8_t *page, const char **why)
{
    if (k->kind != KEY_SLRU_BLOCK || k->fork != SLRU_MULTIXACT_OFFSETS) {
        *why = "multixact offset delta on a page that is not a multixact offsets page";
        return -1;
    }
    if (v->len != 8) {
        *why = "multixact offset delta payload is not 8 bytes";
        return -1;
    }
    uint32_t multi = get_be32(v->payload);
    if (multi / REDO_MXACT_OFFSETS_PER_PAGE != slru_pageno(k)) {
        *why = "multixact offset delta names a multi of another page";
        return -1;
    }
    put_le32(page + 4 * (size_t)(multi % REDO_MXACT_OFFSETS_PER_PAGE), get_be32(v->payload + 4));
    return 0;
}

static int apply_mxact_members(const pg_key *k, const value_ref *v, uint8_t *page, const char **why)
{
    if (k->kind != KEY_SLRU_BLOCK || k->fork != SLRU_MULTIXACT_MEMBERS) {
        *why = "multixact members delta on a page that is not a multixact members page";
        return -1;
    }
    if (v->len < 8 || (v->len - 8) % 5 != 0 || (v->len - 8) / 5 != get_be32(v->payload + 4)) {
        *why = "multixact members delta payload malformed";
        return -1;
    }
    uint32_t first = get_be32(v->payload);
    uint32_t n = get_be32(v->payload + 4);
    uint64_t pageno = slru_pageno(k);
    int hits = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *m = v->payload + 8 + 5 * (size_t)i;
        uint32_t xid = get_be32(m);
        uint8_t status = m[4];
        if (status > MXACT_STATUS_MAX) {
            *why = "multixact member status out of range";
            return -1;
        }
        uint32_t off = first + i; /* member offsets wrap at 2^32, as in Postgres */
        if (off / REDO_MXACT_MEMBERS_PER_PAGE != pageno)
            continue;
        uint32_t group = (off / 4) % REDO_MXACT_MEMBERGROUPS_PER_PAGE;
        uint32_t flags_at = group * REDO_MXACT_MEMBERGROUP_SIZE;
        unsigned shift = (off % 4) * 8;
        uint32_t flagsval = (uint32_t)page[flags_at] | (uint32_t)page[flags_at + 1] << 8 |
                            (uint32_t)page[flags_at + 2] << 16 | (uint32_t)page[flags_at + 3] << 24;
        flagsval &= ~(0xFFu << shift);
        flagsval |= (uint32_t)status << shift;
        put_le32(page + flags_at, flagsval);
        put_le32(page + flags_at + 4 + 4 * (off % 4), xid);
        hits++;
    }
    if (hits == 0) {
        *why = "multixact members delta names no member of this page";
        return -1;
    }
    return 0;
}

/* ---- the visibility-map side of an smgr truncate ------------------------ */

#define XLOG_HEADER_LEN 24
#define RM_SMGR 2
#define SMGR_TRUNCATE_INFO 0x20
#define SMGR_TRUNCATE_VM_FLAG 0x0004
#define SMGR_TRUNCATE_LEN 20 /* xl_smgr_truncate: blkno, rnode (3 × u32), flags */

/* The main data of a raw XLogRecord with no block references (the only
 * headers before it may name an origin or a top-level xid).  NULL if the
 * record has block references or is malformed. */
static const uint8_t *record_main_data(const value_ref *v, uint32_t *len)
{
    if (v->len < XLOG_HEADER_LEN + 2 || get_le32(v->payload) != v->len)
        return NULL;
    const uint8_t *p = v->payload + XLOG_HEADER_LEN, *end = v->payload + v->len;
    while (p < end) {
        uint8_t id = *p++;
        if (id == 255) { /* XLR_BLOCK_ID_DATA_SHORT */
            if (p >= end)
                return NULL;
            *len = *p++;
        } else if (id == 254) { /* XLR_BLOCK_ID_DATA_LONG */
            if (end - p < 4)
                return NULL;
            *len = get_le32(p);
            p += 4;
        } else if (id == 253) { /* XLR_BLOCK_ID_ORIGIN */
            if (end - p < 2)
                return NULL;
            p += 2;
            continue;
        } else if (id == 252) { /* XLR_BLOCK_ID_TOPLEVEL_XID */
            if (end - p < 4)
                return NULL;
            p += 4;
            continue;
        } else {
            return NULL; /* a block reference */
        }
        if ((size_t)(end - p) != *len)
            return NULL;
        return p;
    }
    return NULL;
}

bool redo_synthetic_is_vm_truncate(const value_ref *v)
{
    return v->kind == VAL_WAL_RECORD && v->len >= XLOG_HEADER_LEN && v->payload[17] == RM_SMGR &&
           (v->payload[16] & 0xF0) == SMGR_TRUNCATE_INFO;
}

/* visibilitymap_prepare_truncate as smgr_redo runs it: on the VM page that
 * keeps the last heap blocks, clear the bits of every heap block at or past
 * the new size (the page LSN stays: redo does not set it). */
static int apply_vm_truncate(const pg_key *k, const value_ref *v, uint8_t *page, const char **why)
{
    if (k->kind != KEY_REL_BLOCK || k->fork != FORK_VM) {
        *why = "smgr truncate record on a page that is not a visibility-map page";
        return -1;
    }
    uint32_t len = 0;
    const uint8_t *d = record_main_data(v, &len);
    if (d == NULL || len != SMGR_TRUNCATE_LEN) {
        *why = "smgr truncate record malformed";
        return -1;
    }
    uint32_t blkno = get_le32(d);
    if (get_le32(d + 4) != k->spc || get_le32(d + 8) != k->db || get_le32(d + 12) != k->rel ||
        (get_le32(d + 16) & SMGR_TRUNCATE_VM_FLAG) == 0 ||
        blkno / REDO_VM_HEAPBLOCKS_PER_PAGE != k->blk) {
        *why = "smgr truncate record does not cut this visibility-map page";
        return -1;
    }
    uint32_t idx = blkno % REDO_VM_HEAPBLOCKS_PER_PAGE;
    if (idx == 0)
        return 0; /* the whole page goes: nothing to clear on it */
    if (page_is_zero(page))
        page_init(page); /* vm_readbuf initialises a new page */
    uint8_t *map = page + 24;
    uint32_t byte = idx / 4;
    unsigned shift = (idx % 4) * 2;
    memset(map + byte + 1, 0, REDO_VM_MAPSIZE - byte - 1);
    map[byte] &= (uint8_t)((1u << shift) - 1);
    return 0;
}

int redo_synthetic_apply(const pg_key *k, const value_ref *v, uint8_t page[PG_BLCKSZ],
                         const char **why)
{
    switch (v->kind) {
    case VAL_CLOG_SET:
        return apply_clog_set(k, v, page, why);
    case VAL_VM_CLEAR:
        return apply_vm_clear(k, v, page, why);
    case VAL_MXACT_OFFSET:
        return apply_mxact_offset(k, v, page, why);
    case VAL_MXACT_MEMBERS:
        return apply_mxact_members(k, v, page, why);
    case VAL_WAL_RECORD:
        if (redo_synthetic_is_vm_truncate(v))
            return apply_vm_truncate(k, v, page, why);
        *why = "not a synthetic delta kind";
        return -1;
    default:
        *why = "not a synthetic delta kind";
        return -1;
    }
}
