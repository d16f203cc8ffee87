/*
 * fuzz_value.c: libFuzzer target for the pageserver's value codec and key
 * decoder (pageserver/store/key.h).  Decodes arbitrary bytes as a sequence of
 * values; whatever decodes must re-encode to exactly the bytes it came from
 * (the encoding is canonical) and must stay inside the input.  The first
 * PG_INDEX_KEY_LEN bytes are also tried as an index key: a decoded key must
 * re-encode to the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pageserver/store/key.h"

static uint8_t again[VALUE_HEADER_LEN + 1024 * 1024];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= PG_INDEX_KEY_LEN) {
        pg_key k;
        lsn_t lsn;
        uint8_t enc[PG_INDEX_KEY_LEN];
        if (pg_index_key_decode(data, &k, &lsn)) {
            pg_index_key_encode(&k, lsn, enc);
            if (memcmp(enc, data, PG_INDEX_KEY_LEN) != 0)
                abort();
        }
    }
    size_t off = 0;
    while (off < size) {
        value_ref v;
        size_t used = 0;
        const char *why = NULL;
        if (value_decode(data + off, size - off, &v, &used, &why) != 0) {
            if (why == NULL)
                abort();
            break;
        }
        if (used < VALUE_HEADER_LEN || used > size - off)
            abort();
        if (v.len > 0 && (v.payload < data + off || v.payload + v.len > data + off + used))
            abort();
        (void)value_is_complete(&v);
        if (used <= sizeof again) {
            size_t n = value_encode(&v, again, sizeof again);
            if (n != used || memcmp(again, data + off, used) != 0)
                abort();
        }
        off += used;
    }
    return 0;
}
