/*
 * libFuzzer target for the safekeeper control-file loader
 * (proto/sk_control.c, sk_control_decode).  Any input must be rejected with a message or
 * accepted; an accepted one must re-encode to the same bytes (the format has
 * exactly one encoding of each state; a version 1 or 2 file becomes the
 * current version) and decode again to the same state.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/sk_control.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static sk_control_state st, again;
    static uint8_t buf[SK_CONTROL_MAX_SIZE];
    char err[256];
    err[0] = '\0';
    if (sk_control_decode(data, size, &st, err, sizeof err) != 0) {
        if (err[0] == '\0')
            abort(); /* every rejection must say why */
        return 0;
    }
    size_t len = sk_control_encode(&st, buf, sizeof buf);
    /* A version 1 or 2 file (no configuration, no backup LSN) re-encodes as
     * the current version; otherwise the bytes must be the input's. */
    bool old =
        size >= 8 && data[4] < SK_CONTROL_VERSION && data[5] == 0 && data[6] == 0 && data[7] == 0;
    if (len == 0 || (!old && (len != size || memcmp(buf, data, size) != 0)))
        abort();
    if (sk_control_decode(buf, len, &again, err, sizeof err) != 0 ||
        memcmp(&st, &again, sizeof st) != 0)
        abort();
    return 0;
}
