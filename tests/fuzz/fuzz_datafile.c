/*
 * fuzz_datafile.c: libFuzzer target for the store's data-file parsers
 * (pageserver/store/store_datafile.h): the file header, block headers, block
 * decoding (checksum, zstd frame, lengths) and the entries inside a block.
 *
 * The first input byte picks a mode; the rest is a data file.  In mode 1 the
 * target recomputes each block's CRC before decoding, so mutations get past
 * the checksum and exercise decompression and the entry parser; in mode 0
 * the bytes are parsed exactly as read from disk.  Whatever parses must stay
 * inside its buffer, and every decoded entry must carry a valid key and a
 * value that re-encodes to its own bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/byteorder.h"
#include "base/crc32c.h"
#include "pageserver/store/key.h"
#include "pageserver/store/store_datafile.h"

static void fix_crc(uint8_t *blk, size_t len)
{
    uint32_t crc = crc32c_update(crc32c_init(), blk, 12);
    crc = crc32c_final(
        crc32c_update(crc, blk + STORE_DF_BLOCK_HEADER_LEN, len - STORE_DF_BLOCK_HEADER_LEN));
    put_be32(blk + 12, crc);
}

static void check_block(const uint8_t *raw, uint32_t raw_len)
{
    size_t off = 0;
    while (off < raw_len) {
        const uint8_t *ikey;
        value_ref v;
        size_t used;
        const char *why = NULL;
        if (store_df_entry_decode(raw, raw_len, off, &ikey, &v, &used, &why) != 0) {
            if (why == NULL)
                abort();
            return;
        }
        if (used < PG_INDEX_KEY_LEN + VALUE_HEADER_LEN || used > raw_len - off || ikey != raw + off)
            abort();
        pg_key k;
        lsn_t lsn;
        if (!pg_index_key_decode(ikey, &k, &lsn))
            abort();
        uint8_t *again = malloc(used - PG_INDEX_KEY_LEN);
        if (again == NULL)
            return;
        size_t n = value_encode(&v, again, used - PG_INDEX_KEY_LEN);
        if (n != used - PG_INDEX_KEY_LEN || memcmp(again, ikey + PG_INDEX_KEY_LEN, n) != 0)
            abort();
        free(again);
        off += used;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int mode = data[0] & 1;
    data++;
    size--;
    uint8_t *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    uint64_t id;
    const char *why = NULL;
    if (store_df_header_decode(buf, size, &id, &why) != 0) {
        if (why == NULL)
            abort();
        free(buf);
        return 0;
    }
    size_t off = STORE_DF_HEADER_LEN;
    while (off < size) {
        uint32_t raw_len, comp_len;
        why = NULL;
        if (store_df_block_header_decode(buf + off, size - off, &raw_len, &comp_len, &why) != 0) {
            if (why == NULL)
                abort();
            break;
        }
        size_t blen = STORE_DF_BLOCK_HEADER_LEN + (size_t)comp_len;
        if (blen > size - off)
            break;
        if (mode == 1)
            fix_crc(buf + off, blen);
        uint8_t *raw = NULL;
        uint32_t rl = 0;
        if (store_df_block_decode(buf + off, blen, &raw, &rl, &why) == 0) {
            if (rl != raw_len)
                abort();
            check_block(raw, rl);
            free(raw);
        } else if (why == NULL) {
            abort();
        }
        off += blen;
    }
    free(buf);
    return 0;
}
