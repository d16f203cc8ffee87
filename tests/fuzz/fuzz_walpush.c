/*
 * fuzz_walpush.c: libFuzzer target for the WAL-push codec.  Decodes arbitrary
 * bytes as a proposer message and as an acceptor message; whatever decodes
 * must re-encode to exactly the input bytes (the encoding is canonical).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/walpush.h"

static uint8_t again[WALPUSH_MAX_MESSAGE];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *why = NULL;
    proposer_msg pm;
    if (walpush_decode_proposer_msg(data, size, &pm, &why) == 0) {
        size_t n = walpush_encode_proposer_msg(&pm, again, sizeof(again));
        if (n != size || memcmp(again, data, size) != 0)
            abort();
    } else if (why == NULL) {
        abort();
    }
    why = NULL;
    acceptor_msg am;
    if (walpush_decode_acceptor_msg(data, size, &am, &why) == 0) {
        size_t n = walpush_encode_acceptor_msg(&am, again, sizeof(again));
        if (n != size || memcmp(again, data, size) != 0)
            abort();
    } else if (why == NULL) {
        abort();
    }
    return 0;
}
