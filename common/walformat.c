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
#include "common/walformat.h"

#include <assert.h>
#include <string.h>

#include "common/crc32c.h"

static inline uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

bool wal_seg_size_valid(uint32_t seg_size)
{
    return seg_size >= WAL_MIN_SEG_SIZE && seg_size <= WAL_MAX_SEG_SIZE && (seg_size & (seg_size - 1)) == 0;
}

size_t wal_page_header_parse(const uint8_t *buf, size_t len, wal_page_header *out)
{
    if (len < WAL_SHORT_PHD_SIZE)
        return 0;
    memset(out, 0, sizeof *out);
    out->magic = get_u16(buf);
    out->info = get_u16(buf + 2);
    out->tli = get_u32(buf + 4);
    out->pageaddr = get_u64(buf + 8);
    out->rem_len = get_u32(buf + 16);
    if (!(out->info & WAL_XLP_LONG_HEADER))
        return WAL_SHORT_PHD_SIZE;
    if (len < WAL_LONG_PHD_SIZE)
        return 0;
    out->is_long = true;
    out->sysid = get_u64(buf + 24);
    out->seg_size = get_u32(buf + 32);
    out->xlog_blcksz = get_u32(buf + 36);
    return WAL_LONG_PHD_SIZE;
}

int wal_page_header_check(const wal_page_header *h, lsn_t page_lsn, uint32_t seg_size, const char **why)
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
    out->tot_len = get_u32(buf);
    out->xid = get_u32(buf + 4);
    out->prev = get_u64(buf + 8);
    out->info = buf[16];
    out->rmid = buf[17];
    out->crc = get_u32(buf + WAL_RECORD_CRC_OFFSET);
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
