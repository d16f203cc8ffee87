/*
 * fuzz_replication.c: libFuzzer target for the physical replication codec.
 * Decodes arbitrary bytes as a server message and as a client message;
 * whatever decodes must re-encode to exactly the input bytes (the encoding
 * is canonical), and whatever fails must say why.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/replication.h"

static uint8_t again[1 << 20];

static void check(int rc, const replication_msg *m, const char *why, const uint8_t *data,
                  size_t size)
{
    if (rc != 0) {
        if (why == NULL)
            abort();
        return;
    }
    size_t n = replication_encode(m, again, sizeof again);
    if (size <= sizeof again && (n != size || memcmp(again, data, size) != 0))
        abort();
    if (m->kind == REPLICATION_XLOGDATA &&
        m->u.xlogdata.data != data + REPLICATION_XLOGDATA_HEADER_LEN)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    replication_msg m;
    const char *why = NULL;
    int rc = replication_decode_server_msg(data, size, &m, &why);
    check(rc, &m, why, data, size);
    int server_ok = rc == 0;
    why = NULL;
    rc = replication_decode_client_msg(data, size, &m, &why);
    check(rc, &m, why, data, size);
    /* The directions share no tag. */
    if (server_ok && rc == 0)
        abort();
    return 0;
}
