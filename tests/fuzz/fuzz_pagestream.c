/*
 * fuzz_pagestream.c: libFuzzer target for the pagestream codec
 * (proto/pagestream.h).  Decodes arbitrary bytes as a request and as a
 * response; whatever decodes must re-encode to exactly the input bytes (the
 * encoding is canonical) with payload pointers into the input, whatever
 * fails must say why, and no message is both a request and a response.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/pagestream.h"

static uint8_t again[PAGESTREAM_MAX_MESSAGE + 64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pagestream_request req;
    const char *why = NULL;
    int req_rc = pagestream_decode_request(data, size, &req, &why);
    if (req_rc != 0 && why == NULL)
        abort();
    if (req_rc == 0) {
        size_t n = pagestream_encode_request(&req, again, sizeof again);
        if (n != size || memcmp(again, data, size) != 0)
            abort();
    }

    pagestream_response resp;
    why = NULL;
    int resp_rc = pagestream_decode_response(data, size, &resp, &why);
    if (resp_rc != 0 && why == NULL)
        abort();
    if (resp_rc == 0) {
        size_t n = pagestream_encode_response(&resp, again, sizeof again);
        if (n != size || memcmp(again, data, size) != 0)
            abort();
        if (resp.tag == PS_RESP_GETPAGE && resp.u.page != data + 9)
            abort();
        if (resp.tag == PS_RESP_ERROR && resp.u.error.message_len > PAGESTREAM_MAX_ERROR_MESSAGE)
            abort();
    }
    if (req_rc == 0 && resp_rc == 0)
        abort();
    return 0;
}
