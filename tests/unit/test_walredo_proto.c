/*
 * test_walredo_proto.c: unit tests of the redo helper pipe protocol
 * (proto/walredo.h): byte layouts written out by hand, round trips of every
 * frame, stream parsing one byte at a time, and refusal of malformed frames
 * with a reason.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "proto/walredo.h"

#include "base/byteorder.h"

/* A fake XLogRecord of len bytes: xl_tot_len little-endian, rest a pattern. */
static uint8_t *fake_record(uint32_t len)
{
    uint8_t *r = malloc(len);
    assert_non_null(r);
    for (uint32_t i = 0; i < len; i++)
        r[i] = (uint8_t)(i * 7 + 1);
    put_le32(r, len);
    return r;
}

static void test_begin_layout(void **state)
{
    (void)state;
    walredo_msg m = {.type = WALREDO_BEGIN,
                     .tag = {.spc = 1663, .db = 5, .rel = 16384, .fork = 2, .blk = 0x01020304}};
    uint8_t out[64];
    size_t n = walredo_encode(&m, out, sizeof out);
    const uint8_t want[] = {'B', 0, 0, 0, 17,   0, 0, 0x06, 0x7F, 0, 0,
                            0,   5, 0, 0, 0x40, 0, 2, 1,    2,    3, 4};
    assert_int_equal(n, sizeof want);
    assert_memory_equal(out, want, sizeof want);

    walredo_msg d;
    size_t used = 0;
    const char *why = NULL;
    assert_int_equal(walredo_decode(out, n, &d, &used, &why), 1);
    assert_int_equal(used, n);
    assert_int_equal(d.type, WALREDO_BEGIN);
    assert_true(walredo_tag_equal(&d.tag, &m.tag));
}

static void test_apply_layout_and_header(void **state)
{
    (void)state;
    uint8_t *rec = fake_record(100);
    walredo_msg m = {
        .type = WALREDO_APPLY, .end_lsn = 0x0000000100000028ULL, .data = rec, .data_len = 100};
    uint8_t out[256];
    size_t n = walredo_encode(&m, out, sizeof out);
    assert_int_equal(n, 5 + 8 + 100);
    assert_int_equal(out[0], 'A');
    uint8_t len_be[4];
    put_be32(len_be, 108);
    assert_memory_equal(out + 1, len_be, 4);
    const uint8_t lsn_be[] = {0, 0, 0, 1, 0, 0, 0, 0x28};
    assert_memory_equal(out + 5, lsn_be, 8);
    assert_memory_equal(out + 13, rec, 100);

    /* The split header is the same 13 bytes. */
    uint8_t hdr[WALREDO_APPLY_HEADER_LEN];
    assert_int_equal(walredo_encode_apply_header(m.end_lsn, 100, hdr), 13);
    assert_memory_equal(hdr, out, 13);
    assert_int_equal(walredo_encode_apply_header(1, 23, hdr), 0);
    assert_int_equal(walredo_encode_apply_header(1, WALREDO_MAX_RECORD + 1, hdr), 0);

    walredo_msg d;
    size_t used;
    const char *why = NULL;
    assert_int_equal(walredo_decode(out, n, &d, &used, &why), 1);
    assert_int_equal(d.end_lsn, m.end_lsn);
    assert_int_equal(d.data_len, 100);
    assert_ptr_equal(d.data, out + 13);
    free(rec);
}

/* Every frame type: encode, decode, re-encode gives the same bytes. */
static void test_round_trip_every_frame(void **state)
{
    (void)state;
    static uint8_t page[WALREDO_PAGE_SIZE];
    for (size_t i = 0; i < sizeof page; i++)
        page[i] = (uint8_t)(i ^ (i >> 8));
    uint8_t *rec = fake_record(24);
    const char msg[] = "PANIC: failed to add tuple";
    walredo_tag tag = {.spc = 1, .db = 2, .rel = 3, .fork = 0, .blk = 4};
    walredo_msg ms[] = {
        {.type = WALREDO_BEGIN, .tag = tag},
        {.type = WALREDO_PUSH_PAGE, .tag = tag, .page = page},
        {.type = WALREDO_APPLY, .end_lsn = 77, .data = rec, .data_len = 24},
        {.type = WALREDO_GET_PAGE, .tag = tag},
        {.type = WALREDO_PING},
        {.type = WALREDO_HELLO, .version = WALREDO_PROTO_VERSION},
        {.type = WALREDO_PAGE, .page = page},
        {.type = WALREDO_PONG},
        {.type = WALREDO_ERROR, .data = (const uint8_t *)msg, .data_len = sizeof msg - 1},
    };
    static uint8_t a[2 * WALREDO_PAGE_SIZE], b[2 * WALREDO_PAGE_SIZE];
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        size_t n = walredo_encode(&ms[i], a, sizeof a);
        assert_int_not_equal(n, 0);
        assert_int_equal(n, walredo_encoded_len(&ms[i]));
        walredo_msg d;
        size_t used = 0;
        const char *why = NULL;
        assert_int_equal(walredo_decode(a, n, &d, &used, &why), 1);
        assert_int_equal(used, n);
        assert_int_equal(d.type, ms[i].type);
        assert_int_equal(walredo_encode(&d, b, sizeof b), n);
        assert_memory_equal(a, b, n);
        /* Too small a buffer encodes nothing. */
        assert_int_equal(walredo_encode(&ms[i], a, n - 1), 0);
    }
    assert_true(walredo_is_request('B') && walredo_is_request('H'));
    assert_false(walredo_is_request('p') || walredo_is_request('V'));
    free(rec);
}

/* A stream of pipelined frames decodes one frame at a time, whatever the
 * chunking: every prefix of a frame asks for more. */
static void test_stream_prefixes(void **state)
{
    (void)state;
    static uint8_t page[WALREDO_PAGE_SIZE];
    memset(page, 0xAB, sizeof page);
    uint8_t *rec = fake_record(300);
    walredo_tag tag = {.spc = 1663, .db = 1, .rel = 1259, .fork = 0, .blk = 9};
    walredo_msg ms[] = {
        {.type = WALREDO_BEGIN, .tag = tag},
        {.type = WALREDO_PUSH_PAGE, .tag = tag, .page = page},
        {.type = WALREDO_APPLY, .end_lsn = 0x16B3740, .data = rec, .data_len = 300},
        {.type = WALREDO_APPLY, .end_lsn = 0x16B3800, .data = rec, .data_len = 300},
        {.type = WALREDO_GET_PAGE, .tag = tag},
        {.type = WALREDO_PING},
    };
    static uint8_t stream[4 * WALREDO_PAGE_SIZE];
    size_t total = 0;
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        total += walredo_encode(&ms[i], stream + total, sizeof stream - total);

    size_t pos = 0;
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        walredo_msg d;
        size_t used = 0;
        const char *why = NULL;
        size_t frame = walredo_encoded_len(&ms[i]);
        for (size_t k = 0; k < frame; k += (k < 32 ? 1 : 997))
            assert_int_equal(walredo_decode(stream + pos, k, &d, &used, &why), 0);
        assert_int_equal(walredo_decode(stream + pos, total - pos, &d, &used, &why), 1);
        assert_int_equal(used, frame);
        assert_int_equal(d.type, ms[i].type);
        if (d.type == WALREDO_APPLY)
            assert_int_equal(d.end_lsn, ms[i].end_lsn);
        pos += used;
    }
    assert_int_equal(pos, total);
    free(rec);
}

static void expect_refused(const uint8_t *buf, size_t len, const char *what)
{
    walredo_msg d;
    size_t used = 0;
    const char *why = NULL;
    assert_int_equal(walredo_decode(buf, len, &d, &used, &why), -1);
    assert_non_null(why);
    assert_non_null(strstr(why, what));
}

static void test_rejects_malformed(void **state)
{
    (void)state;
    uint8_t f[64] = {0};

    /* Unknown type: refused from its first byte. */
    f[0] = 'Z';
    expect_refused(f, 1, "unknown frame type");
    expect_refused(f, 5, "unknown frame type");

    /* Lengths wrong for the type. */
    f[0] = 'B';
    put_be32(f + 1, 16);
    expect_refused(f, 5, "17 bytes");
    f[0] = 'P';
    put_be32(f + 1, 17 + 8191);
    expect_refused(f, 5, "tag + 8192");
    f[0] = 'H';
    put_be32(f + 1, 1);
    expect_refused(f, 5, "payload");
    f[0] = 'p';
    put_be32(f + 1, 4096);
    expect_refused(f, 5, "8192");
    f[0] = 'E';
    put_be32(f + 1, 0);
    expect_refused(f, 5, "error frame length");
    put_be32(f + 1, WALREDO_MAX_ERROR + 1);
    expect_refused(f, 5, "error frame length");

    /* A hostile apply length is refused from the header alone. */
    f[0] = 'A';
    put_be32(f + 1, 0xFFFFFFFFu);
    expect_refused(f, 5, "apply frame length");
    put_be32(f + 1, 8 + 23);
    expect_refused(f, 5, "apply frame length");

    /* xl_tot_len must match the frame. */
    put_be32(f + 1, 8 + 24);
    put_le32(f + 13, 25);
    expect_refused(f, 5 + 8 + 24, "xl_tot_len");

    /* Fork over 3. */
    memset(f, 0, sizeof f);
    f[0] = 'G';
    put_be32(f + 1, 17);
    f[5 + 12] = 4;
    expect_refused(f, 5 + 17, "fork");
    walredo_msg m = {.type = WALREDO_GET_PAGE, .tag = {.fork = 4}};
    assert_int_equal(walredo_encoded_len(&m), 0);

    /* Hello needs the magic. */
    memset(f, 0, sizeof f);
    f[0] = 'V';
    put_be32(f + 1, 12);
    memcpy(f + 5, "STRATAWX", 8);
    expect_refused(f, 5 + 12, "magic");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_begin_layout),
        cmocka_unit_test(test_apply_layout_and_header),
        cmocka_unit_test(test_round_trip_every_frame),
        cmocka_unit_test(test_stream_prefixes),
        cmocka_unit_test(test_rejects_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
