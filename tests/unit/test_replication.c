/*
 * test_replication.c: unit tests of the physical replication codec
 * (proto/replication.h): byte layouts against the Postgres protocol
 * documentation, round trips of every message, and rejection of malformed
 * input with a reason.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "proto/replication.h"

#include "base/byteorder.h"

/* Encodes m, decodes the bytes in the given direction, re-encodes: same bytes. */
static size_t round_trip(const replication_msg *m, int from_server, uint8_t *buf, size_t cap,
                         replication_msg *out)
{
    uint8_t again[256];
    const char *why = NULL;
    size_t n = replication_encode(m, buf, cap);

    assert_true(n > 0);
    if (from_server) {
        assert_int_equal(replication_decode_server_msg(buf, n, out, &why), 0);
        assert_int_equal(replication_decode_client_msg(buf, n, out, &why), -1);
        assert_non_null(strstr(why, "unknown tag"));
        assert_int_equal(replication_decode_server_msg(buf, n, out, &why), 0);
    } else {
        assert_int_equal(replication_decode_client_msg(buf, n, out, &why), 0);
        assert_int_equal(replication_decode_server_msg(buf, n, out, &why), -1);
        assert_non_null(strstr(why, "unknown tag"));
        assert_int_equal(replication_decode_client_msg(buf, n, out, &why), 0);
    }
    assert_int_equal(out->kind, m->kind);
    assert_int_equal(replication_encode(out, again, sizeof again), n);
    assert_memory_equal(again, buf, n);
    return n;
}

static void test_xlogdata_layout_and_round_trip(void **state)
{
    uint8_t w[25 + 4] = {'w'};
    uint8_t buf[64];
    replication_msg m;
    const char *why = NULL;

    (void)state;
    put_be64(w + 1, 0x16B3740);
    put_be64(w + 9, 0x16B4000);
    put_be64(w + 17, 12345);
    memcpy(w + 25, "WAL!", 4);
    assert_int_equal(replication_decode_server_msg(w, sizeof w, &m, &why), 0);
    assert_int_equal(m.kind, REPLICATION_XLOGDATA);
    assert_int_equal(m.u.xlogdata.wal_start, 0x16B3740);
    assert_int_equal(m.u.xlogdata.wal_end, 0x16B4000);
    assert_int_equal(m.u.xlogdata.send_time, 12345);
    assert_int_equal(m.u.xlogdata.data_len, 4);
    assert_ptr_equal(m.u.xlogdata.data, w + 25); /* points into the input */

    replication_msg back;
    assert_int_equal(round_trip(&m, 1, buf, sizeof buf, &back), sizeof w);
    assert_memory_equal(buf, w, sizeof w);

    /* The header encoder writes the same first 25 bytes without the data. */
    uint8_t h[REPLICATION_XLOGDATA_HEADER_LEN];
    assert_int_equal(replication_encode_xlogdata_header(&m.u.xlogdata, h, sizeof h), 25);
    assert_memory_equal(h, w, 25);
    assert_int_equal(replication_encode_xlogdata_header(&m.u.xlogdata, h, 24), 0);
    /* Too small for header + data. */
    assert_int_equal(replication_encode(&m, buf, sizeof w - 1), 0);

    /* An empty XLogData is legal. */
    assert_int_equal(replication_decode_server_msg(w, 25, &m, &why), 0);
    assert_int_equal(m.u.xlogdata.data_len, 0);
}

static void test_keepalive_layout_and_round_trip(void **state)
{
    uint8_t k[18] = {'k'};
    uint8_t buf[32];
    replication_msg m, back;
    const char *why = NULL;

    (void)state;
    put_be64(k + 1, 0x16B4000);
    put_be64(k + 9, 99);
    k[17] = 1;
    assert_int_equal(replication_decode_server_msg(k, sizeof k, &m, &why), 0);
    assert_int_equal(m.kind, REPLICATION_KEEPALIVE);
    assert_int_equal(m.u.keepalive.wal_end, 0x16B4000);
    assert_int_equal(m.u.keepalive.send_time, 99);
    assert_true(m.u.keepalive.reply_requested);
    assert_int_equal(round_trip(&m, 1, buf, sizeof buf, &back), 18);
    assert_memory_equal(buf, k, 18);
    assert_int_equal(replication_encode(&m, buf, 17), 0);
}

static void test_status_update_layout_and_round_trip(void **state)
{
    replication_msg m = {.kind = REPLICATION_STATUS_UPDATE,
                         .u.status = {.write_lsn = 0x100,
                                      .flush_lsn = 0x200,
                                      .apply_lsn = 0x300,
                                      .send_time = 0x400,
                                      .reply_requested = true}};
    uint8_t buf[64], want[8];
    replication_msg back;

    (void)state;
    assert_int_equal(round_trip(&m, 0, buf, sizeof buf, &back), 34);
    assert_int_equal(buf[0], 'r');
    put_be64(want, 0x100);
    assert_memory_equal(buf + 1, want, 8);
    put_be64(want, 0x200);
    assert_memory_equal(buf + 9, want, 8);
    put_be64(want, 0x300);
    assert_memory_equal(buf + 17, want, 8);
    put_be64(want, 0x400);
    assert_memory_equal(buf + 25, want, 8);
    assert_int_equal(buf[33], 1);
    assert_int_equal(back.u.status.flush_lsn, 0x200);
    assert_true(back.u.status.reply_requested);
    assert_int_equal(replication_encode(&m, buf, 33), 0);
}

static void test_hs_feedback_layout_and_round_trip(void **state)
{
    uint8_t h[25] = {'h'};
    uint8_t buf[64];
    replication_msg m, back;
    const char *why = NULL;

    (void)state;
    put_be64(h + 1, 777);
    put_be32(h + 9, 1000);
    put_be32(h + 13, 2);
    put_be32(h + 17, 900);
    put_be32(h + 21, 3);
    assert_int_equal(replication_decode_client_msg(h, sizeof h, &m, &why), 0);
    assert_int_equal(m.kind, REPLICATION_HS_FEEDBACK);
    assert_int_equal(m.u.hs_feedback.send_time, 777);
    assert_int_equal(m.u.hs_feedback.xmin, 1000);
    assert_int_equal(m.u.hs_feedback.xmin_epoch, 2);
    assert_int_equal(m.u.hs_feedback.catalog_xmin, 900);
    assert_int_equal(m.u.hs_feedback.catalog_xmin_epoch, 3);
    assert_int_equal(round_trip(&m, 0, buf, sizeof buf, &back), 25);
    assert_memory_equal(buf, h, 25);
}

static void test_ps_feedback_layout_and_round_trip(void **state)
{
    uint8_t z[25] = {'z'};
    uint8_t buf[64];
    replication_msg m, back;
    const char *why = NULL;

    (void)state;
    put_be64(z + 1, 0x3000000);
    put_be64(z + 9, 0x2000000);
    put_be64(z + 17, 0x1000000);
    assert_int_equal(replication_decode_client_msg(z, sizeof z, &m, &why), 0);
    assert_int_equal(m.kind, REPLICATION_PS_FEEDBACK);
    assert_int_equal(m.u.ps_feedback.last_received_lsn, 0x3000000);
    assert_int_equal(m.u.ps_feedback.disk_consistent_lsn, 0x2000000);
    assert_int_equal(m.u.ps_feedback.remote_consistent_lsn, 0x1000000);
    assert_int_equal(round_trip(&m, 0, buf, sizeof buf, &back), 25);
    assert_memory_equal(buf, z, 25);
}

static void expect_server_error(const uint8_t *b, size_t n, const char *reason)
{
    replication_msg m;
    const char *why = NULL;
    assert_int_equal(replication_decode_server_msg(b, n, &m, &why), -1);
    assert_non_null(why);
    assert_non_null(strstr(why, reason));
}

static void expect_client_error(const uint8_t *b, size_t n, const char *reason)
{
    replication_msg m;
    const char *why = NULL;
    assert_int_equal(replication_decode_client_msg(b, n, &m, &why), -1);
    assert_non_null(why);
    assert_non_null(strstr(why, reason));
}

static void test_rejects_malformed(void **state)
{
    uint8_t w[24] = {'w'};
    uint8_t k[19] = {'k'};
    uint8_t r[35] = {'r'};
    uint8_t h[26] = {'h'};
    uint8_t z[26] = {'z'};
    uint8_t x[5] = {'x'};
    uint8_t big[30] = {'w'};

    (void)state;
    expect_server_error(w, sizeof w, "XLogData");
    expect_server_error(k, 17, "keepalive");
    expect_server_error(k, 19, "keepalive");
    k[17] = 2;
    expect_server_error(k, 18, "reply_requested");
    expect_server_error(x, sizeof x, "unknown tag");
    expect_server_error(x, 0, "empty");
    /* Data running past the end of the LSN space. */
    put_be64(big + 1, UINT64_MAX - 2);
    expect_server_error(big, sizeof big, "LSN space");

    expect_client_error(r, 33, "standby status update");
    expect_client_error(r, 35, "standby status update");
    r[33] = 7;
    expect_client_error(r, 34, "reply_requested");
    expect_client_error(h, 24, "hot standby feedback");
    expect_client_error(h, 26, "hot standby feedback");
    expect_client_error(z, 24, "pageserver feedback");
    expect_client_error(z, 26, "pageserver feedback");
    expect_client_error(x, sizeof x, "unknown tag");
    expect_client_error(x, 0, "empty");

    /* The encoder refuses what the decoder would refuse. */
    replication_msg m = {.kind = REPLICATION_XLOGDATA,
                         .u.xlogdata = {.wal_start = UINT64_MAX - 2, .data = x, .data_len = 5}};
    uint8_t buf[64];
    assert_int_equal(replication_encode(&m, buf, sizeof buf), 0);
    m.kind = (replication_msg_kind)99;
    assert_int_equal(replication_encode(&m, buf, sizeof buf), 0);
}

static void test_now_is_in_the_postgres_epoch(void **state)
{
    (void)state;
    /* 2000-01-01 is the epoch, so "now" is decades of microseconds but less
     * than a century's. */
    int64_t now = replication_now();
    assert_true(now > (int64_t)20 * 365 * 86400 * 1000000);
    assert_true(now < (int64_t)100 * 365 * 86400 * 1000000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xlogdata_layout_and_round_trip),
        cmocka_unit_test(test_keepalive_layout_and_round_trip),
        cmocka_unit_test(test_status_update_layout_and_round_trip),
        cmocka_unit_test(test_hs_feedback_layout_and_round_trip),
        cmocka_unit_test(test_ps_feedback_layout_and_round_trip),
        cmocka_unit_test(test_rejects_malformed),
        cmocka_unit_test(test_now_is_in_the_postgres_epoch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
