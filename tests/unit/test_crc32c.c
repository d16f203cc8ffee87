/*
 * Unit tests for common/base/crc32c.c: known CRC-32C vectors (RFC 3720 appendix
 * B.4 and the "123456789" check value), agreement of the SSE4.2 and table
 * implementations at every alignment and length, and streaming == one-shot.
 * CRCs of real WAL records are checked in test_walformat.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "base/crc32c.h"

static void test_crc32c_known_vectors(void **state)
{
    (void)state;
    uint8_t buf[32];

    assert_int_equal(crc32c("123456789", 9), 0xE3069283u);
    assert_int_equal(crc32c("", 0), 0x00000000u);

    memset(buf, 0, sizeof buf);
    assert_int_equal(crc32c(buf, sizeof buf), 0x8A9136AAu);
    memset(buf, 0xFF, sizeof buf);
    assert_int_equal(crc32c(buf, sizeof buf), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    assert_int_equal(crc32c(buf, sizeof buf), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    assert_int_equal(crc32c(buf, sizeof buf), 0x113FDB5Cu);
}

/* xorshift so the test is deterministic without global state. */
static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void test_crc32c_paths_agree(void **state)
{
    (void)state;
    static uint8_t buf[4096 + 16];
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)next_rand(&seed);

    /* The software path against a bit-at-a-time reference on a few sizes. */
    for (size_t len = 0; len < 80; len++) {
        uint32_t ref = 0xFFFFFFFFu;
        for (size_t i = 0; i < len; i++) {
            ref ^= buf[3 + i];
            for (int b = 0; b < 8; b++)
                ref = (ref >> 1) ^ ((ref & 1) ? 0x82F63B78u : 0);
        }
        assert_int_equal(crc32c_update_sw(0xFFFFFFFFu, buf + 3, len), ref);
    }

    if (!crc32c_hw_available()) {
        print_message("SSE4.2 not available: hardware path not compared\n");
        return;
    }
    for (size_t off = 0; off < 16; off++) {
        for (size_t len = 0; len <= 300; len++) {
            uint32_t sw = crc32c_update_sw(0x12345678u, buf + off, len);
            uint32_t hw = crc32c_update_hw(0x12345678u, buf + off, len);
            assert_int_equal(sw, hw);
        }
        assert_int_equal(crc32c_update_sw(0xFFFFFFFFu, buf + off, 4096),
                         crc32c_update_hw(0xFFFFFFFFu, buf + off, 4096));
    }
}

static void test_crc32c_streaming(void **state)
{
    (void)state;
    static uint8_t buf[1000];
    uint64_t seed = 42;
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)next_rand(&seed);
    uint32_t whole = crc32c(buf, sizeof buf);
    for (size_t cut = 0; cut <= sizeof buf; cut += 7) {
        uint32_t c = crc32c_init();
        c = crc32c_update(c, buf, cut);
        c = crc32c_update(c, buf + cut, sizeof buf - cut);
        assert_int_equal(crc32c_final(c), whole);
    }
    /* A single flipped bit changes the CRC. */
    buf[500] ^= 0x10;
    assert_int_not_equal(crc32c(buf, sizeof buf), whole);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_known_vectors),
        cmocka_unit_test(test_crc32c_paths_agree),
        cmocka_unit_test(test_crc32c_streaming),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
