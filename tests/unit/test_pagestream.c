/*
 * test_pagestream.c: unit tests of the pagestream codec (proto/pagestream.h):
 * byte layouts written out by hand, round trips of every request and
 * response, and rejection (with a reason) of empty, short, trailing,
 * unknown-tag and out-of-range messages.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "proto/pagestream.h"

#include "base/byteorder.h"

static uint8_t big[PAGESTREAM_MAX_MESSAGE + 16];
static uint8_t again[PAGESTREAM_MAX_MESSAGE + 16];

static size_t request_round_trip(const pagestream_request *r, pagestream_request *out)
{
    const char *why = NULL;
    size_t n = pagestream_encode_request(r, big, sizeof big);
    assert_true(n > 0);
    assert_int_equal(pagestream_decode_request(big, n, out, &why), 0);
    assert_int_equal(out->tag, r->tag);
    assert_true(out->reqid == r->reqid);
    assert_true(out->request_lsn == r->request_lsn);
    assert_true(out->not_modified_since == r->not_modified_since);
    assert_int_equal(pagestream_encode_request(out, again, sizeof again), n);
    assert_memory_equal(again, big, n);
    /* A response decoder never takes a request. */
    pagestream_response resp;
    assert_int_equal(pagestream_decode_response(big, n, &resp, &why), -1);
    /* Every strict prefix and every one-byte extension is refused. */
    for (size_t k = 0; k < n; k++) {
        why = NULL;
        assert_int_equal(pagestream_decode_request(big, k, out, &why), -1);
        assert_non_null(why);
    }
    big[n] = 0;
    why = NULL;
    assert_int_equal(pagestream_decode_request(big, n + 1, out, &why), -1);
    assert_non_null(strstr(why, "trailing"));
    assert_int_equal(pagestream_decode_request(big, n, out, &why), 0);
    return n;
}

static void test_getpage_layout(void **state)
{
    (void)state;
    uint8_t w[42] = {PS_REQ_GETPAGE};
    put_be64(w + 1, 0x0102030405060708ULL);
    put_be64(w + 9, LSN_MAX);
    put_be64(w + 17, 0x16B3728ULL);
    put_be32(w + 25, 1663);
    put_be32(w + 29, 5);
    put_be32(w + 33, 16384);
    w[37] = 2;
    put_be32(w + 38, 77);

    pagestream_request r;
    const char *why = NULL;
    assert_int_equal(pagestream_decode_request(w, sizeof w, &r, &why), 0);
    assert_int_equal(r.tag, PS_REQ_GETPAGE);
    assert_true(r.reqid == 0x0102030405060708ULL);
    assert_true(r.request_lsn == LSN_MAX);
    assert_true(r.not_modified_since == 0x16B3728ULL);
    assert_int_equal(r.u.page.rel.spc, 1663);
    assert_int_equal(r.u.page.rel.db, 5);
    assert_int_equal(r.u.page.rel.rel, 16384);
    assert_int_equal(r.u.page.rel.fork, 2);
    assert_int_equal(r.u.page.blkno, 77);
    uint8_t out[64];
    assert_int_equal(pagestream_encode_request(&r, out, sizeof out), sizeof w);
    assert_memory_equal(out, w, sizeof w);
    /* Too small a buffer: nothing written. */
    assert_int_equal(pagestream_encode_request(&r, out, sizeof w - 1), 0);
}

static void test_request_round_trips(void **state)
{
    (void)state;
    pagestream_request r, out;

    memset(&r, 0, sizeof r);
    r.tag = PS_REQ_EXISTS;
    r.reqid = 1;
    r.request_lsn = 0x10;
    r.not_modified_since = 0x8;
    r.u.rel = (pagestream_rel){1663, 1, 1259, 0};
    assert_int_equal(request_round_trip(&r, &out), 38);
    assert_int_equal(out.u.rel.rel, 1259);

    r.tag = PS_REQ_NBLOCKS;
    r.u.rel.fork = 3;
    assert_int_equal(request_round_trip(&r, &out), 38);
    assert_int_equal(out.u.rel.fork, 3);

    memset(&r, 0, sizeof r);
    r.tag = PS_REQ_GETPAGE;
    r.reqid = UINT64_MAX;
    r.request_lsn = LSN_MAX;
    r.u.page.rel = (pagestream_rel){UINT32_MAX, UINT32_MAX, UINT32_MAX, 1};
    r.u.page.blkno = UINT32_MAX;
    assert_int_equal(request_round_trip(&r, &out), 42);
    assert_int_equal(out.u.page.blkno, UINT32_MAX);

    memset(&r, 0, sizeof r);
    r.tag = PS_REQ_DBSIZE;
    r.u.dbsize.db = 16385;
    assert_int_equal(request_round_trip(&r, &out), 29);
    assert_int_equal(out.u.dbsize.db, 16385);

    memset(&r, 0, sizeof r);
    r.tag = PS_REQ_SPCSIZE;
    r.u.spcsize.spc = 16400;
    assert_int_equal(request_round_trip(&r, &out), 29);
    assert_int_equal(out.u.spcsize.spc, 16400);

    memset(&r, 0, sizeof r);
    r.tag = PS_REQ_GET_SLRU_SEGMENT;
    r.u.slru.kind = 2;
    r.u.slru.segno = 0xABCD;
    assert_int_equal(request_round_trip(&r, &out), 30);
    assert_int_equal(out.u.slru.kind, 2);
    assert_int_equal(out.u.slru.segno, 0xABCD);
}

static void test_request_rejections(void **state)
{
    (void)state;
    pagestream_request r;
    const char *why = NULL;
    uint8_t w[42] = {PS_REQ_GETPAGE};

    assert_int_equal(pagestream_decode_request(w, 0, &r, &why), -1);
    assert_non_null(strstr(why, "empty"));

    w[37] = 4; /* fork 4 */
    assert_int_equal(pagestream_decode_request(w, 42, &r, &why), -1);
    assert_non_null(strstr(why, "fork"));
    w[37] = 0xFF;
    assert_int_equal(pagestream_decode_request(w, 42, &r, &why), -1);
    assert_non_null(strstr(why, "fork"));

    w[0] = PS_REQ_EXISTS;
    w[37] = 9;
    assert_int_equal(pagestream_decode_request(w, 38, &r, &why), -1);
    assert_non_null(strstr(why, "fork"));

    w[0] = PS_REQ_GET_SLRU_SEGMENT;
    w[25] = 3; /* slru kind 3 */
    assert_int_equal(pagestream_decode_request(w, 30, &r, &why), -1);
    assert_non_null(strstr(why, "SLRU kind"));

    /* Unknown tags, including response tags and the gap after 5. */
    const uint8_t bad_tags[] = {6, 7, 0x7F, 0x80, 0x82, 0xFF, 'Q'};
    for (size_t i = 0; i < sizeof bad_tags; i++) {
        w[0] = bad_tags[i];
        why = NULL;
        assert_int_equal(pagestream_decode_request(w, 42, &r, &why), -1);
        assert_non_null(strstr(why, "unknown tag"));
    }

    /* Short: a GetPage cut one byte short. */
    w[0] = PS_REQ_GETPAGE;
    w[37] = 0;
    assert_int_equal(pagestream_decode_request(w, 41, &r, &why), -1);
    assert_non_null(strstr(why, "shorter"));
    assert_int_equal(pagestream_decode_request(w, 42, &r, &why), 0);

    /* The encoder refuses out-of-range values too. */
    uint8_t out[64];
    memset(&r, 0, sizeof r);
    r.tag = PS_REQ_GETPAGE;
    r.u.page.rel.fork = 4;
    assert_int_equal(pagestream_encode_request(&r, out, sizeof out), 0);
    r.tag = PS_REQ_GET_SLRU_SEGMENT;
    r.u.slru.kind = 3;
    assert_int_equal(pagestream_encode_request(&r, out, sizeof out), 0);
    r.tag = 9;
    assert_int_equal(pagestream_encode_request(&r, out, sizeof out), 0);
}

static size_t response_round_trip(const pagestream_response *r, pagestream_response *out)
{
    const char *why = NULL;
    size_t n = pagestream_encode_response(r, big, sizeof big);
    assert_true(n > 0);
    assert_int_equal(pagestream_decode_response(big, n, out, &why), 0);
    assert_int_equal(out->tag, r->tag);
    assert_true(out->reqid == r->reqid);
    assert_int_equal(pagestream_encode_response(out, again, sizeof again), n);
    assert_memory_equal(again, big, n);
    pagestream_request req;
    assert_int_equal(pagestream_decode_request(big, n, &req, &why), -1);
    /* Prefixes (sampled for the big ones) and an extension are refused. */
    size_t step = n > 64 ? 997 : 1;
    for (size_t k = 0; k < n; k += step) {
        why = NULL;
        assert_int_equal(pagestream_decode_response(big, k, out, &why), -1);
        assert_non_null(why);
    }
    assert_int_equal(pagestream_decode_response(big, n - 1, out, &why), -1);
    big[n] = 0;
    assert_int_equal(pagestream_decode_response(big, n + 1, out, &why), -1);
    assert_non_null(strstr(why, "trailing"));
    assert_int_equal(pagestream_decode_response(big, n, out, &why), 0);
    return n;
}

static void test_response_round_trips(void **state)
{
    (void)state;
    pagestream_response r, out;
    static uint8_t page[PAGESTREAM_BLCKSZ];
    static uint8_t blocks[3 * PAGESTREAM_BLCKSZ];
    for (size_t i = 0; i < sizeof page; i++)
        page[i] = (uint8_t)(i * 7 + 3);
    for (size_t i = 0; i < sizeof blocks; i++)
        blocks[i] = (uint8_t)(i * 13 + 1);

    memset(&r, 0, sizeof r);
    r.tag = PS_RESP_EXISTS;
    r.reqid = 42;
    r.u.exists = true;
    assert_int_equal(response_round_trip(&r, &out), 10);
    assert_true(out.u.exists);
    assert_int_equal(big[9], 1);

    r.tag = PS_RESP_NBLOCKS;
    r.u.nblocks = 0xDEADBEEF;
    assert_int_equal(response_round_trip(&r, &out), 13);
    assert_int_equal(out.u.nblocks, 0xDEADBEEF);

    r.tag = PS_RESP_GETPAGE;
    r.u.page = page;
    assert_int_equal(response_round_trip(&r, &out), 9 + PAGESTREAM_BLCKSZ);
    assert_ptr_equal(out.u.page, big + 9);
    assert_memory_equal(out.u.page, page, sizeof page);

    r.tag = PS_RESP_DBSIZE;
    r.u.db_size_bytes = 7 * 8192;
    assert_int_equal(response_round_trip(&r, &out), 17);
    assert_true(out.u.db_size_bytes == 7 * 8192);

    r.tag = PS_RESP_SPCSIZE;
    r.u.spc_size.bytes = 9 * 8192;
    r.u.spc_size.relations = 4;
    assert_int_equal(response_round_trip(&r, &out), 21);
    assert_true(out.u.spc_size.bytes == 9 * 8192);
    assert_int_equal(out.u.spc_size.relations, 4);

    r.tag = PS_RESP_GET_SLRU_SEGMENT;
    r.u.slru.nblocks = 3;
    r.u.slru.blocks = blocks;
    assert_int_equal(response_round_trip(&r, &out), 13 + sizeof blocks);
    assert_int_equal(out.u.slru.nblocks, 3);
    assert_memory_equal(out.u.slru.blocks, blocks, sizeof blocks);
    r.u.slru.nblocks = 0;
    assert_int_equal(response_round_trip(&r, &out), 13);

    memset(&r, 0, sizeof r);
    r.tag = PS_RESP_ERROR;
    r.reqid = 5;
    memcpy(r.u.error.sqlstate, "XX000", 6);
    r.u.error.message = "could not read";
    r.u.error.message_len = 14;
    assert_int_equal(response_round_trip(&r, &out), 9 + 9 + 14);
    assert_string_equal(out.u.error.sqlstate, "XX000");
    assert_int_equal(out.u.error.message_len, 14);
    assert_memory_equal(out.u.error.message, "could not read", 14);
    r.u.error.message_len = 0;
    r.u.error.message = NULL;
    assert_int_equal(response_round_trip(&r, &out), 18);
}

static void test_response_rejections(void **state)
{
    (void)state;
    pagestream_response r;
    const char *why = NULL;
    uint8_t w[64] = {0};

    w[0] = PS_RESP_EXISTS;
    w[9] = 2;
    assert_int_equal(pagestream_decode_response(w, 10, &r, &why), -1);
    assert_non_null(strstr(why, "neither"));

    w[0] = PS_RESP_DBSIZE;
    put_be64(w + 9, UINT64_MAX);
    assert_int_equal(pagestream_decode_response(w, 17, &r, &why), -1);
    assert_non_null(strstr(why, "negative"));

    w[0] = PS_RESP_SPCSIZE;
    put_be64(w + 9, UINT64_MAX);
    assert_int_equal(pagestream_decode_response(w, 21, &r, &why), -1);
    assert_non_null(strstr(why, "negative"));

    w[0] = PS_RESP_GET_SLRU_SEGMENT;
    put_be32(w + 9, 33);
    assert_int_equal(pagestream_decode_response(w, 13, &r, &why), -1);
    assert_non_null(strstr(why, "32 blocks"));
    put_be32(w + 9, 1); /* claims one block, carries none */
    assert_int_equal(pagestream_decode_response(w, 13, &r, &why), -1);
    assert_non_null(strstr(why, "shorter"));

    w[0] = PS_RESP_ERROR;
    memcpy(w + 9, "xx000", 5); /* lower case is not a SQLSTATE */
    put_be32(w + 14, 2);
    w[18] = 'h';
    w[19] = 'i';
    assert_int_equal(pagestream_decode_response(w, 20, &r, &why), -1);
    assert_non_null(strstr(why, "SQLSTATE"));
    memcpy(w + 9, "57014", 5);
    assert_int_equal(pagestream_decode_response(w, 20, &r, &why), 0);
    w[19] = '\0';
    assert_int_equal(pagestream_decode_response(w, 20, &r, &why), -1);
    assert_non_null(strstr(why, "NUL"));
    put_be32(w + 14, PAGESTREAM_MAX_ERROR_MESSAGE + 1);
    assert_int_equal(pagestream_decode_response(w, 20, &r, &why), -1);
    assert_non_null(strstr(why, "1024"));

    const uint8_t bad_tags[] = {0, 2, 0x86, 0xFE, 100, 103};
    for (size_t i = 0; i < sizeof bad_tags; i++) {
        w[0] = bad_tags[i];
        assert_int_equal(pagestream_decode_response(w, 20, &r, &why), -1);
        assert_non_null(strstr(why, "unknown tag"));
    }

    /* Encoder refusals: bad SQLSTATE, oversized message, too many blocks. */
    uint8_t out[128];
    memset(&r, 0, sizeof r);
    r.tag = PS_RESP_ERROR;
    memcpy(r.u.error.sqlstate, "ab", 3);
    assert_int_equal(pagestream_encode_response(&r, out, sizeof out), 0);
    memcpy(r.u.error.sqlstate, "XX000", 6);
    static char long_msg[PAGESTREAM_MAX_ERROR_MESSAGE + 1];
    memset(long_msg, 'a', sizeof long_msg);
    r.u.error.message = long_msg;
    r.u.error.message_len = sizeof long_msg;
    assert_int_equal(pagestream_encode_response(&r, big, sizeof big), 0);
    r.tag = PS_RESP_GET_SLRU_SEGMENT;
    r.u.slru.nblocks = 33;
    r.u.slru.blocks = big;
    assert_int_equal(pagestream_encode_response(&r, again, sizeof again), 0);
    r.tag = PS_RESP_DBSIZE;
    r.u.db_size_bytes = -1;
    assert_int_equal(pagestream_encode_response(&r, out, sizeof out), 0);
}

static void test_max_message_fits_a_full_segment(void **state)
{
    (void)state;
    pagestream_response r = {.tag = PS_RESP_GET_SLRU_SEGMENT};
    r.u.slru.nblocks = PAGESTREAM_MAX_SLRU_BLOCKS;
    r.u.slru.blocks = again;
    size_t n = pagestream_encode_response(&r, big, PAGESTREAM_MAX_MESSAGE);
    assert_int_equal(n, 13 + PAGESTREAM_MAX_SLRU_BLOCKS * PAGESTREAM_BLCKSZ);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_getpage_layout),
        cmocka_unit_test(test_request_round_trips),
        cmocka_unit_test(test_request_rejections),
        cmocka_unit_test(test_response_round_trips),
        cmocka_unit_test(test_response_rejections),
        cmocka_unit_test(test_max_message_fits_a_full_segment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
