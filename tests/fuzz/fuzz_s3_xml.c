/*
 * fuzz_s3_xml.c: libFuzzer target for the S3 response decoders
 * (common/net/s3_xml.h), the parsers of what an object store sends back.  Every
 * input goes through all five decoders; each must either accept it with
 * well-formed results or reject it with a reason, never crash, leak or read
 * out of bounds.
 */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/s3_xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    char err[S3XML_MAX_ERR];

    s3xml_list_page page;
    err[0] = '\0';
    if (s3xml_parse_list(body, size, &page, err) == 0) {
        assert(page.truncated == (page.next_token != NULL));
        for (size_t i = 0; i < page.n; i++)
            assert(page.entries[i].key[0] != '\0');
        s3xml_list_page_free(&page);
    } else {
        assert(err[0] != '\0' && page.n == 0 && page.entries == NULL);
    }

    char id[256];
    err[0] = '\0';
    if (s3xml_parse_initiate(body, size, id, sizeof id, err) == 0)
        assert(id[0] > ' ' && strlen(id) < sizeof id);
    else
        assert(err[0] != '\0');

    s3xml_error e;
    err[0] = '\0';
    int rc = s3xml_parse_complete(body, size, &e, err);
    assert(rc == 0 || (rc == 1 && e.code[0] != '\0') || (rc < 0 && err[0] != '\0'));

    s3xml_delete_result d;
    err[0] = '\0';
    if (s3xml_parse_delete(body, size, &d, err) == 0)
        assert(d.errors == 0 || d.first_error.code[0] != '\0');
    else
        assert(err[0] != '\0');

    err[0] = '\0';
    if (s3xml_parse_error(body, size, &e, err) == 0)
        assert(e.code[0] != '\0');
    else
        assert(err[0] != '\0');
    return 0;
}
