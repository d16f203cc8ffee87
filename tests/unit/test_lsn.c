/* Unit tests for common/base/lsn.c: LSN and id formatting and parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "base/lsn.h"

static void test_lsn_roundtrip(void **state)
{
    (void)state;
    char buf[LSN_FMT_LEN];
    lsn_t out;
    const lsn_t cases[] = {
        0, 1, 0x16B3748, 0x100000000ULL, 0xFFFFFFFFFFFFFFFFULL, 0xABCDEF0012345678ULL};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lsn_format(cases[i], buf);
        assert_true(lsn_parse(buf, &out));
        assert_int_equal(out, cases[i]);
    }
    assert_string_equal(lsn_format(0x16B3748, buf), "0/16B3748");
    assert_string_equal(lsn_format(0x100000028ULL, buf), "1/28");
}

static void test_lsn_parse_rejects(void **state)
{
    (void)state;
    lsn_t out;
    const char *bad[] = {"",    "/",           "0/",          "/0",   "0",   "0/0/0",
                         "g/0", "0/123456789", "123456789/0", "0/1 ", " 0/1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(lsn_parse(bad[i], &out));
    assert_true(lsn_parse("a/B", &out));
    assert_int_equal(out, 0xA0000000BULL);
}

static void test_id_roundtrip(void **state)
{
    (void)state;
    strata_id id, back;
    char hex[STRATA_ID_HEX_LEN];
    assert_true(strata_id_generate(&id));
    strata_id_format(&id, hex);
    assert_int_equal(strlen(hex), 32);
    assert_true(strata_id_parse(hex, &back));
    assert_true(strata_id_equal(&id, &back));
    assert_false(strata_id_parse("00", &back));
    assert_false(strata_id_parse("0123456789abcdef0123456789abcdeg", &back));
    assert_false(strata_id_parse("0123456789abcdef0123456789abcdef0", &back));
    assert_true(strata_id_parse("0123456789ABCDEF0123456789abcdef", &back));
    assert_int_equal(back.b[0], 0x01);
    assert_int_equal(back.b[15], 0xef);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lsn_roundtrip),
        cmocka_unit_test(test_lsn_parse_rejects),
        cmocka_unit_test(test_id_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
