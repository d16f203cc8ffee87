/*
 * simwal.c: synthetic PostgreSQL 15 WAL (see simwal.h).
 */
#include "tests/sim/simwal.h"

#include <stdbool.h>
#include <string.h>

#include "base/byteorder.h"
#include "base/crc32c.h"
#include "pg/walformat.h"

void simwal_init(simwal *w, uint8_t *mem, lsn_t base, size_t cap, uint32_t seg_size, lsn_t pos,
                 lsn_t prev_start)
{
    w->mem = mem;
    w->base = base;
    w->cap = cap;
    w->seg_size = seg_size;
    w->pos = pos;
    w->prev_start = prev_start;
}

/* Writes the page header at page boundary at; returns its size. */
static uint32_t page_header(simwal *w, lsn_t at, uint32_t rem_len)
{
    uint8_t *p = w->mem + (at - w->base);
    bool is_long = at % w->seg_size == 0;
    uint32_t size = is_long ? WAL_LONG_PHD_SIZE : WAL_SHORT_PHD_SIZE;
    memset(p, 0, size);
    uint16_t info = 0;
    if (rem_len > 0)
        info |= WAL_XLP_FIRST_IS_CONTRECORD;
    if (is_long)
        info |= WAL_XLP_LONG_HEADER;
    put_le16(p, WAL_PAGE_MAGIC);
    put_le16(p + 2, info);
    put_le32(p + 4, 1); /* timeline 1 */
    put_le64(p + 8, at);
    put_le32(p + 16, rem_len);
    if (is_long) {
        put_le64(p + 24, 0x5354524154410001ULL); /* system id */
        put_le32(p + 32, w->seg_size);
        put_le32(p + 36, WAL_BLCKSZ);
    }
    return size;
}

lsn_t simwal_append(simwal *w, uint32_t payload_len, uint8_t rmid, uint8_t info, uint32_t seed)
{
    /* Build the record contiguously first (bounded by SIMWAL_MAX_PAYLOAD). */
    static uint8_t rec[WAL_RECORD_HEADER_SIZE + 5 + SIMWAL_MAX_PAYLOAD];
    uint32_t body = payload_len < 256 ? 2 + payload_len : 5 + payload_len;
    uint32_t tot = WAL_RECORD_HEADER_SIZE + body;
    if (tot > sizeof(rec))
        return 0;
    /* Worst case: the record plus a header per page it touches, plus padding. */
    lsn_t worst =
        w->pos + tot + (tot / (WAL_BLCKSZ - WAL_LONG_PHD_SIZE) + 2) * WAL_LONG_PHD_SIZE + 8;
    if (w->pos < w->base || worst > w->base + w->cap)
        return 0;

    uint8_t *b = rec + WAL_RECORD_HEADER_SIZE;
    if (payload_len < 256) {
        b[0] = WAL_XLR_BLOCK_ID_DATA_SHORT;
        b[1] = (uint8_t)payload_len;
        b += 2;
    } else {
        b[0] = WAL_XLR_BLOCK_ID_DATA_LONG;
        put_le32(b + 1, payload_len);
        b += 5;
    }
    /* Pseudo-random filler for the first 4 KB, then copies of it, each with
     * its offset stamped in (cheap for records of a segment's size, and
     * still no two 4 KB blocks of a record alike). */
    uint64_t x = (uint64_t)seed * 0x9E3779B97F4A7C15ULL + 1;
    uint32_t head = payload_len < 4096 ? payload_len : 4096;
    for (uint32_t i = 0; i < head; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint32_t n = head - i < 8 ? head - i : 8;
        memcpy(b + i, &x, n);
    }
    for (uint32_t i = head; i < payload_len; i += 4096) {
        uint32_t n = payload_len - i < 4096 ? payload_len - i : 4096;
        memcpy(b + i, b, n);
        memcpy(b + i, &i, n < 4 ? n : 4);
    }

    lsn_t at = w->pos;
    if (at % WAL_BLCKSZ == 0)
        at += page_header(w, at, 0);
    lsn_t start = at;

    memset(rec, 0, WAL_RECORD_HEADER_SIZE);
    put_le32(rec, tot);
    put_le32(rec + 4, seed);          /* xl_xid */
    put_le64(rec + 8, w->prev_start); /* xl_prev */
    rec[16] = info;
    rec[17] = rmid;
    uint32_t crc = crc32c_init();
    crc = crc32c_update(crc, rec + WAL_RECORD_HEADER_SIZE, tot - WAL_RECORD_HEADER_SIZE);
    crc = crc32c_update(crc, rec, WAL_RECORD_CRC_OFFSET);
    put_le32(rec + WAL_RECORD_CRC_OFFSET, crc32c_final(crc));

    uint32_t done = 0;
    while (done < tot) {
        if (at % WAL_BLCKSZ == 0)
            at += page_header(w, at, tot - done);
        uint32_t room = (uint32_t)(WAL_BLCKSZ - at % WAL_BLCKSZ);
        uint32_t n = tot - done < room ? tot - done : room;
        memcpy(w->mem + (at - w->base), rec + done, n);
        at += n;
        done += n;
    }
    lsn_t end = WAL_ALIGN_UP(at);
    memset(w->mem + (at - w->base), 0, end - at);
    w->prev_start = start;
    w->pos = end;
    return end;
}
