/*
 * fuzz_walrecord: arbitrary bytes into the WAL decoder, tracker and reader
 * (common/pg/walformat.h).
 *
 * Input layout: 8 bytes start LSN (little-endian; forced 8-aligned), 1 byte
 * chunking seed, then the WAL stream.  The stream is fed to a wal_tracker and
 * a wal_reader in chunks derived from the seed; they must never crash, must
 * agree on where valid records end, and must keep last_record_end <= next.
 * The whole input is also decoded as one record, first as is, then with
 * xl_tot_len and xl_crc patched to be right so the block parser is reached.
 * Seeds: real WAL from tests/unit/data (see corpus/fuzz_walrecord/).
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pg/walformat.h"

#define SEG_SIZE (1u << 20)

static uint8_t reader_buf[64 * 1024];
static uint8_t record_copy[1 << 20];

static size_t next_chunk(uint32_t *state, size_t left)
{
    *state = *state * 1103515245u + 12345u;
    size_t n = (*state >> 16) % 3 == 0 ? 1 + (*state >> 8) % 9000 : 1 + (*state >> 8) % 64;
    return n < left ? n : left;
}

static void fuzz_stream(lsn_t start, uint8_t seed, const uint8_t *data, size_t len)
{
    wal_tracker t;
    wal_reader r;
    const char *why;
    wal_tracker_init(&t, start, SEG_SIZE);
    wal_reader_init(&r, start, SEG_SIZE, reader_buf, sizeof reader_buf);
    bool tracker_ok = true, reader_ok = true;
    uint32_t state = seed;
    lsn_t pos = start;
    size_t off = 0;
    while (off < len && (tracker_ok || reader_ok)) {
        size_t n = next_chunk(&state, len - off);
        if (tracker_ok) {
            tracker_ok = wal_tracker_feed(&t, pos, data + off, n, &why) == 0;
            if (tracker_ok) {
                assert(wal_tracker_next(&t) == pos + n);
                assert(wal_tracker_last_record_end(&t) <= wal_tracker_next(&t));
                assert(wal_tracker_last_record_end(&t) % WAL_ALIGN == 0);
            }
        }
        size_t done = 0;
        while (reader_ok && done < n) {
            size_t used;
            int rc = wal_reader_feed(&r, pos + done, data + off + done, n - done, &used, &why);
            assert(used <= n - done);
            done += used;
            if (rc == WAL_READER_ERROR) {
                reader_ok = false;
            } else if (rc == WAL_READER_RECORD) {
                lsn_t rs, re;
                const wal_record *rec = wal_reader_record(&r, &rs, &re);
                assert(rec != NULL && rs < re && re == pos + done);
                assert(rec->max_block_id <= WAL_XLR_MAX_BLOCK_ID);
            }
        }
        if (tracker_ok && reader_ok) {
            /* Same bytes, same view of where records end. */
            assert(wal_reader_next(&r) == wal_tracker_next(&t));
            assert(wal_reader_last_record_end(&r) == wal_tracker_last_record_end(&t));
        }
        pos += n;
        off += n;
    }
    /* The reader checks more than the tracker (CRCs, block headers), so it
     * can only fail where the tracker passes, never the other way round. */
    if (!tracker_ok)
        assert(!reader_ok);
}

static void fuzz_record(const uint8_t *data, size_t len)
{
    wal_record rec;
    const char *why;
    if (wal_record_decode(data, len, &rec, &why) == 0)
        assert(rec.hdr.tot_len == len);
    if (len < WAL_RECORD_HEADER_SIZE || len > sizeof record_copy)
        return;
    memcpy(record_copy, data, len);
    uint32_t tot = (uint32_t)len;
    memcpy(record_copy, &tot, 4);
    record_copy[17] %= WAL_RM_MAX_BUILTIN_ID + 1;
    uint32_t crc = wal_record_compute_crc(record_copy, len);
    memcpy(record_copy + WAL_RECORD_CRC_OFFSET, &crc, 4);
    if (wal_record_decode(record_copy, len, &rec, &why) == 0) {
        for (int id = 0; id <= rec.max_block_id; id++) {
            const wal_block_ref *b = &rec.blocks[id];
            if (!b->in_use)
                continue;
            if (b->has_image)
                assert(b->bimg >= record_copy && b->bimg + b->bimg_len <= record_copy + len);
            if (b->has_data)
                assert(b->data >= record_copy && b->data + b->data_len <= record_copy + len);
        }
        if (rec.main_data_len > 0)
            assert(rec.main_data + rec.main_data_len == record_copy + len);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_record(data, size);
    if (size < 9)
        return 0;
    lsn_t start = 0;
    for (int i = 7; i >= 0; i--)
        start = start << 8 | data[i];
    start &= ~(lsn_t)(WAL_ALIGN - 1);
    fuzz_stream(start, data[8], data + 9, size - 9);
    return 0;
}
