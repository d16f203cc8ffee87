/*
 * fuzz_index_value.c: libFuzzer target for the store's LMDB index values
 * (store_idxv_decode in pageserver/store/store_priv.h): inline-only (tag 1),
 * a data-file location (tag 2), and inline with the file that holds its copy
 * (tag 3).
 *
 * Whatever decodes must point inside the input, carry a value that decodes
 * again to the same kind and flags, and re-encode to the input's own bytes
 * (tags 2 and 3); the entry length of tag 3 must be the index key plus the
 * value.  Anything refused must say why.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pageserver/store/store_priv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    store_idxv iv;
    const char *why = NULL;
    if (store_idxv_decode(data, size, &iv, &why) != 0) {
        if (why == NULL)
            abort();
        return 0;
    }
    if (store_idxv_is_inline(&iv)) {
        if (iv.value < data || iv.value + iv.value_len != data + size)
            abort();
        value_ref v;
        size_t used;
        if (value_decode(iv.value, iv.value_len, &v, &used, &why) != 0 || used != iv.value_len ||
            v.kind != iv.kind || v.flags != iv.flags)
            abort();
    }
    if (iv.tag == STORE_IDXV_INLINE_FILE) {
        uint8_t hdr[STORE_IDXV_INLINE_FILE_HDR];
        store_idxv_encode_inline_hdr(iv.file_id, hdr);
        if (memcmp(hdr, data, sizeof hdr) != 0 || iv.entry_len != PG_INDEX_KEY_LEN + iv.value_len)
            abort();
    } else if (iv.tag == STORE_IDXV_FILE) {
        uint8_t enc[STORE_IDXV_FILE_LEN];
        store_idxv_encode_file(&iv, enc);
        if (size != sizeof enc || memcmp(enc, data, sizeof enc) != 0)
            abort();
    } else if (iv.tag != STORE_IDXV_INLINE) {
        abort();
    }
    return 0;
}
