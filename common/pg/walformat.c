/*
 * walformat.c: PostgreSQL 15 WAL page headers and records, decoded from
 * bytes without Postgres headers (see walformat.h for the contract).
 *
 * For: parsing and validating page headers, record headers and whole records
 * (block references, origin, top-level xid, main data, CRC).  Not for:
 * streaming over page boundaries (walformat_stream.c) or interpreting
 * rmgr-specific payloads.  Every length is checked before a byte it covers is
 * read; errors name what was wrong.
 */
#include "pg/walformat.h"

#include <assert.h>
#include <string.h>

#include "base/byteorder.h"
#include "base/crc32c.h"

bool wal_seg_size_valid(uint32_t seg_size)
{
    return seg_size >= WAL_MIN_SEG_SIZE && seg_size <= WAL_MAX_SEG_SIZE &&
           (seg_size & (seg_size - 1)) == 0;
}

lsn_t wal_lsn_before_page_header(lsn_t lsn, uint32_t seg_size)
{
    assert(wal_seg_size_valid(seg_size));
    uint64_t in_page = lsn % WAL_BLCKSZ;
    if (in_page == WAL_SHORT_PHD_SIZE)
        return lsn - WAL_SHORT_PHD_SIZE; /* at a segment start, inside the long header */
    if (in_page == WAL_LONG_PHD_SIZE && (lsn - WAL_LONG_PHD_SIZE) % seg_size == 0)
        return lsn - WAL_LONG_PHD_SIZE;
    return lsn;
}

size_t wal_page_header_parse(const uint8_t *buf, size_t len, wal_page_header *out)
{
    if (len < WAL_SHORT_PHD_SIZE)
        return 0;
    memset(out, 0, sizeof *out);
    out->magic = get_le16(buf + WAL_XLP_MAGIC_OFF);
    out->info = get_le16(buf + WAL_XLP_INFO_OFF);
    out->tli = get_le32(buf + WAL_XLP_TLI_OFF);
    out->pageaddr = get_le64(buf + WAL_XLP_PAGEADDR_OFF);
    out->rem_len = get_le32(buf + WAL_XLP_REM_LEN_OFF);
    if (!(out->info & WAL_XLP_LONG_HEADER))
        return WAL_SHORT_PHD_SIZE;
    if (len < WAL_LONG_PHD_SIZE)
        return 0;
    out->is_long = true;
    out->sysid = get_le64(buf + WAL_XLP_SYSID_OFF);
    out->seg_size = get_le32(buf + WAL_XLP_SEG_SIZE_OFF);
    out->xlog_blcksz = get_le32(buf + WAL_XLP_XLOG_BLCKSZ_OFF);
    return WAL_LONG_PHD_SIZE;
}

int wal_page_header_check(const wal_page_header *h, lsn_t page_lsn, uint32_t seg_size,
                          const char **why)
{
    assert(page_lsn % WAL_BLCKSZ == 0);
    assert(wal_seg_size_valid(seg_size));
    if (h->magic != WAL_PAGE_MAGIC) {
        *why = "bad WAL page magic";
        return -1;
    }
    if (h->info & ~WAL_XLP_ALL_FLAGS) {
        *why = "unknown flags in WAL page header";
        return -1;
    }
    if (h->pageaddr != page_lsn) {
        *why = "WAL page address does not match its position";
        return -1;
    }
    bool seg_start = page_lsn % seg_size == 0;
    if (seg_start && !h->is_long) {
        *why = "WAL segment does not start with a long page header";
        return -1;
    }
    if (!seg_start && (h->info & WAL_XLP_LONG_HEADER)) {
        *why = "long WAL page header in the middle of a segment";
        return -1;
    }
    if (h->is_long && h->seg_size != seg_size) {
        *why = "WAL segment size in long page header does not match";
        return -1;
    }
    if (h->is_long && h->xlog_blcksz != WAL_BLCKSZ) {
        *why = "WAL block size in long page header is not 8192";
        return -1;
    }
    return 0;
}

void wal_record_header_parse(const uint8_t *buf, wal_record_header *out)
{
    out->tot_len = get_le32(buf + WAL_XL_TOT_LEN_OFF);
    out->xid = get_le32(buf + WAL_XL_XID_OFF);
    out->prev = get_le64(buf + WAL_XL_PREV_OFF);
    out->info = buf[WAL_XL_INFO_OFF];
    out->rmid = buf[WAL_XL_RMID_OFF];
    out->crc = get_le32(buf + WAL_RECORD_CRC_OFFSET);
}

int wal_record_header_check(const wal_record_header *h, const char **why)
{
    if (h->tot_len < WAL_RECORD_HEADER_SIZE) {
        *why = "WAL record length (xl_tot_len) shorter than a record header";
        return -1;
    }
    if (h->tot_len > WAL_MAX_RECORD_LEN) {
        *why = "WAL record length (xl_tot_len) too large";
        return -1;
    }
    if (h->rmid > WAL_RM_MAX_BUILTIN_ID && h->rmid < WAL_RM_MIN_CUSTOM_ID) {
        *why = "invalid resource manager id in WAL record";
        return -1;
    }
    return 0;
}

bool wal_record_header_is_switch(const wal_record_header *h)
{
    return h->rmid == WAL_RM_XLOG_ID && (h->info & WAL_XLR_RMGR_INFO_MASK) == WAL_XLOG_SWITCH;
}

uint32_t wal_record_compute_crc(const uint8_t *raw, size_t tot_len)
{
    assert(tot_len >= WAL_RECORD_HEADER_SIZE);
    uint32_t crc = crc32c_init();
    crc = crc32c_update(crc, raw + WAL_RECORD_HEADER_SIZE, tot_len - WAL_RECORD_HEADER_SIZE);
    crc = crc32c_update(crc, raw, WAL_RECORD_CRC_OFFSET);
    return crc32c_final(crc);
}

/* A bounded cursor over the record's block headers. */
typedef struct cursor {
    const uint8_t *p;
    size_t left;
} cursor;

static bool take(cursor *c, size_t n, const uint8_t **out)
{
    if (c->left < n)
        return false;
    *out = c->p;
    c->p += n;
    c->left -= n;
    return true;
}

static int decode_fail(const char *reason, const char **why)
{
    *why = reason;
    return -1;
}

/* Decodes one block header (id already read) into b; *datatotal grows by
 * the payload bytes it announces. */
static int decode_block_header(cursor *c, wal_block_ref *b, const wal_block_ref **prev_rel,
                               uint64_t *datatotal, const char **why)
{
    const uint8_t *p;
    if (!take(c, WAL_BLOCK_HEADER_SIZE - 1, &p)) /* the id was taken */
        return decode_fail("WAL record too short for its block header", why);
    b->in_use = true;
    b->fork = p[0] & WAL_BKPBLOCK_FORK_MASK;
    b->flags = p[0] & WAL_BKPBLOCK_FLAG_MASK;
    b->has_image = (b->flags & WAL_BKPBLOCK_HAS_IMAGE) != 0;
    b->has_data = (b->flags & WAL_BKPBLOCK_HAS_DATA) != 0;
    b->will_init = (b->flags & WAL_BKPBLOCK_WILL_INIT) != 0;
    b->data_len = get_le16(p + 1);
    if (b->fork > WAL_MAX_FORK)
        return decode_fail("WAL block reference has an invalid fork number", why);
    if (b->has_data && b->data_len == 0)
        return decode_fail("WAL block reference has BKPBLOCK_HAS_DATA but no data", why);
    if (!b->has_data && b->data_len != 0)
        return decode_fail("WAL block reference has data without BKPBLOCK_HAS_DATA", why);
    *datatotal += b->data_len;

    if (b->has_image) {
        if (!take(c, WAL_BLOCK_IMAGE_HEADER_SIZE, &p))
            return decode_fail("WAL record too short for its block image header", why);
        b->bimg_len = get_le16(p);
        b->hole_offset = get_le16(p + WAL_BIMG_HOLE_OFFSET_OFF);
        b->bimg_info = p[WAL_BIMG_INFO_OFF];
        b->apply_image = (b->bimg_info & WAL_BKPIMAGE_APPLY) != 0;
        bool has_hole = (b->bimg_info & WAL_BKPIMAGE_HAS_HOLE) != 0;
        bool compressed = WAL_BKPIMAGE_COMPRESSED(b->bimg_info);
        if (compressed) {
            if (has_hole) {
                if (!take(c, WAL_BLOCK_COMPRESS_HEADER_SIZE, &p))
                    return decode_fail("WAL record too short for its compressed image header", why);
                b->hole_length = get_le16(p);
            } else {
                b->hole_length = 0;
            }
        } else {
            if (b->bimg_len > WAL_PAGE_BLCKSZ)
                return decode_fail("WAL block image longer than a page", why);
            b->hole_length = (uint16_t)(WAL_PAGE_BLCKSZ - b->bimg_len);
        }
        *datatotal += b->bimg_len;
        if (has_hole &&
            (b->hole_offset == 0 || b->hole_length == 0 || b->bimg_len == WAL_PAGE_BLCKSZ))
            return decode_fail("WAL block image has BKPIMAGE_HAS_HOLE but an invalid hole", why);
        if (!has_hole && (b->hole_offset != 0 || b->hole_length != 0))
            return decode_fail("WAL block image has a hole without BKPIMAGE_HAS_HOLE", why);
        if (compressed && b->bimg_len == WAL_PAGE_BLCKSZ)
            return decode_fail("WAL block image is compressed but has a full page length", why);
        if (!has_hole && !compressed && b->bimg_len != WAL_PAGE_BLCKSZ)
            return decode_fail(
                "WAL block image has neither hole nor compression but is not a full page", why);
        if ((uint32_t)b->hole_offset + b->hole_length > WAL_PAGE_BLCKSZ)
            return decode_fail("WAL block image hole extends past the page", why);
        if (b->bimg_len == 0)
            return decode_fail("WAL block image is empty", why);
    }

    if (!(b->flags & WAL_BKPBLOCK_SAME_REL)) {
        if (!take(c, WAL_RELFILENODE_SIZE, &p))
            return decode_fail("WAL record too short for its block relation", why);
        b->spc = get_le32(p);
        b->db = get_le32(p + 4);
        b->rel = get_le32(p + 8);
        *prev_rel = b;
    } else {
        if (*prev_rel == NULL)
            return decode_fail("WAL block reference has BKPBLOCK_SAME_REL but no previous relation",
                               why);
        b->spc = (*prev_rel)->spc;
        b->db = (*prev_rel)->db;
        b->rel = (*prev_rel)->rel;
    }
    if (!take(c, 4, &p))
        return decode_fail("WAL record too short for its block number", why);
    b->blkno = get_le32(p);
    return 0;
}

int wal_record_decode(const uint8_t *raw, size_t len, wal_record *out, const char **why)
{
    memset(out, 0, sizeof *out);
    out->max_block_id = -1;
    out->raw = raw;
    if (len < WAL_RECORD_HEADER_SIZE)
        return decode_fail("WAL record shorter than its header", why);
    wal_record_header_parse(raw, &out->hdr);
    if (wal_record_header_check(&out->hdr, why) != 0)
        return -1;
    if (out->hdr.tot_len != len)
        return decode_fail("WAL record length (xl_tot_len) does not match the bytes given", why);
    if (wal_record_compute_crc(raw, len) != out->hdr.crc)
        return decode_fail("WAL record CRC mismatch", why);

    /* Headers first; they announce datatotal bytes of payload that follow
     * them, in block order, then the main data. */
    cursor c = {raw + WAL_RECORD_HEADER_SIZE, len - WAL_RECORD_HEADER_SIZE};
    uint64_t datatotal = 0;
    const wal_block_ref *prev_rel = NULL;
    while (c.left > datatotal) {
        const uint8_t *p;
        if (!take(&c, 1, &p))
            return decode_fail("WAL record too short for its block id", why);
        uint8_t id = p[0];
        if (id == WAL_XLR_BLOCK_ID_DATA_SHORT) {
            if (!take(&c, WAL_DATA_HEADER_SHORT_SIZE - 1, &p))
                return decode_fail("WAL record too short for its main data length", why);
            out->main_data_len = p[0];
            datatotal += out->main_data_len;
            break; /* by convention the main data header is last */
        } else if (id == WAL_XLR_BLOCK_ID_DATA_LONG) {
            if (!take(&c, WAL_DATA_HEADER_LONG_SIZE - 1, &p))
                return decode_fail("WAL record too short for its main data length", why);
            out->main_data_len = get_le32(p);
            datatotal += out->main_data_len;
            break;
        } else if (id == WAL_XLR_BLOCK_ID_ORIGIN) {
            if (!take(&c, 2, &p))
                return decode_fail("WAL record too short for its origin", why);
            out->has_origin = true;
            out->origin = get_le16(p);
        } else if (id == WAL_XLR_BLOCK_ID_TOPLEVEL_XID) {
            if (!take(&c, 4, &p))
                return decode_fail("WAL record too short for its top-level xid", why);
            out->has_toplevel_xid = true;
            out->toplevel_xid = get_le32(p);
        } else if (id <= WAL_XLR_MAX_BLOCK_ID) {
            if ((int)id <= out->max_block_id)
                return decode_fail("WAL record has block ids out of order", why);
            out->max_block_id = id;
            if (decode_block_header(&c, &out->blocks[id], &prev_rel, &datatotal, why) != 0)
                return -1;
        } else {
            return decode_fail("WAL record has an invalid block id", why);
        }
    }
    if (c.left != datatotal)
        return decode_fail("WAL record lengths do not add up to xl_tot_len", why);

    /* Payloads, in the order the headers announced them. */
    const uint8_t *p = c.p;
    for (int id = 0; id <= out->max_block_id; id++) {
        wal_block_ref *b = &out->blocks[id];
        if (!b->in_use)
            continue;
        if (b->has_image) {
            b->bimg = p;
            p += b->bimg_len;
        }
        if (b->has_data) {
            b->data = p;
            p += b->data_len;
        }
    }
    if (out->main_data_len > 0) {
        out->main_data = p;
        p += out->main_data_len;
    }
    assert(p == raw + len);
    return 0;
}
