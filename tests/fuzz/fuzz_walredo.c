/*
 * fuzz_walredo.c: libFuzzer target for the redo helper pipe protocol
 * (proto/walredo.h).  Parses arbitrary bytes as a stream of frames, the way
 * both ends read a pipe: every frame that decodes must re-encode to exactly
 * its input bytes, a refusal must say why, and "need more" must only be
 * answered for a true prefix (the decoder never reads past len).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/walredo.h"

static uint8_t again[WALREDO_FRAME_HEADER_LEN + 8 + (1 << 20)];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pos = 0;
    while (pos < size) {
        walredo_msg m;
        size_t used = 0;
        const char *why = NULL;
        int rc = walredo_decode(data + pos, size - pos, &m, &used, &why);
        if (rc < 0) {
            if (why == NULL)
                abort();
            return 0;
        }
        if (rc == 0)
            return 0;
        if (used < WALREDO_FRAME_HEADER_LEN || used > size - pos)
            abort();
        size_t n = walredo_encode(&m, again, sizeof again);
        if (used <= sizeof again && (n != used || memcmp(again, data + pos, used) != 0))
            abort();
        if (m.type == WALREDO_APPLY) {
            uint8_t hdr[WALREDO_APPLY_HEADER_LEN];
            if (walredo_encode_apply_header(m.end_lsn, m.data_len, hdr) != sizeof hdr ||
                memcmp(hdr, data + pos, sizeof hdr) != 0)
                abort();
        }
        pos += used;
    }
    return 0;
}
