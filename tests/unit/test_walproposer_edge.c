/*
 * test_walproposer_edge.c: unit tests of the walproposer's libc edge
 * helpers: the bounded WAL window and segment reads (walbuf.h) and the
 * connection parameters, backoff and sending shared by the worker and
 * sync-safekeepers (wp_edge.h).  The
 * replication messages are tested in tests/unit/test_replication.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/walproposer/walbuf.h"
#include "compute/walproposer/wp_edge.h"

/* Byte i of a synthetic WAL stream: a function of its LSN. */
static uint8_t wal_byte(lsn_t lsn)
{
    return (uint8_t)((lsn * 2654435761u) >> 13);
}

static void fill(uint8_t *out, lsn_t lsn, size_t len)
{
    for (size_t i = 0; i < len; i++)
        out[i] = wal_byte(lsn + i);
}

static void check(const uint8_t *got, lsn_t lsn, size_t len)
{
    for (size_t i = 0; i < len; i++)
        assert_int_equal(got[i], wal_byte(lsn + i));
}

static void test_walbuf_wraps_and_keeps_newest(void **state)
{
    uint8_t mem[1000];
    uint8_t chunk[333];
    uint8_t out[1000];
    walbuf b;
    lsn_t lsn = 0x1000000 - 150; /* the ring offset wraps mid-chunk */

    (void)state;
    walbuf_init(&b, mem, sizeof(mem));
    walbuf_reset(&b, lsn);
    for (int i = 0; i < 10; i++) {
        fill(chunk, lsn, sizeof(chunk));
        assert_int_equal(walbuf_append(&b, lsn, chunk, sizeof(chunk)), 0);
        lsn += sizeof(chunk);
        assert_true(b.end - b.start <= sizeof(mem));
    }
    assert_int_equal(b.end, lsn);
    assert_int_equal(b.start, lsn - sizeof(mem));
    assert_true(walbuf_read(&b, b.start, out, sizeof(mem)));
    check(out, b.start, sizeof(mem));
    assert_true(walbuf_read(&b, lsn - 10, out, 10));
    check(out, lsn - 10, 10);
    /* Evicted and not yet written ranges are refused. */
    assert_false(walbuf_read(&b, b.start - 1, out, 10));
    assert_false(walbuf_read(&b, lsn - 5, out, 10));
    /* An empty read at the end is fine. */
    assert_true(walbuf_read(&b, lsn, out, 0));
}

static void test_walbuf_refuses_gaps(void **state)
{
    uint8_t mem[64];
    uint8_t data[8] = {0};
    walbuf b;

    (void)state;
    walbuf_init(&b, mem, sizeof(mem));
    walbuf_reset(&b, 100);
    assert_int_equal(walbuf_append(&b, 108, data, 8), -1);
    assert_int_equal(walbuf_append(&b, 92, data, 8), -1);
    assert_int_equal(b.end, 100);
    assert_int_equal(walbuf_append(&b, 100, data, 8), 0);
    assert_int_equal(b.end, 108);
}

static void test_walbuf_append_larger_than_ring(void **state)
{
    uint8_t mem[100];
    uint8_t big[250];
    uint8_t out[100];
    walbuf b;

    (void)state;
    walbuf_init(&b, mem, sizeof(mem));
    walbuf_reset(&b, 5000);
    fill(big, 5000, sizeof(big));
    assert_int_equal(walbuf_append(&b, 5000, big, sizeof(big)), 0);
    assert_int_equal(b.start, 5150);
    assert_int_equal(b.end, 5250);
    assert_true(walbuf_read(&b, 5150, out, 100));
    check(out, 5150, 100);
}

static void test_segment_names(void **state)
{
    char name[25];

    (void)state;
    walbuf_segment_name(1, 16u << 20, 0x1000000, name);
    assert_string_equal(name, "000000010000000000000001");
    walbuf_segment_name(1, 16u << 20, ((lsn_t)0x2 << 32) | 0x3FFFFFF, name);
    assert_string_equal(name, "000000010000000200000003");
    walbuf_segment_name(3, 1u << 20, ((lsn_t)0x1 << 32) | 0x500000, name);
    assert_string_equal(name, "000000030000000100000005");
}

static void write_segment(const char *dir, uint32_t seg_size, lsn_t seg_start)
{
    char name[25], path[512];
    uint8_t *data = malloc(seg_size);
    int fd;

    assert_non_null(data);
    fill(data, seg_start, seg_size);
    walbuf_segment_name(1, seg_size, seg_start, name);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, seg_size), (ssize_t)seg_size);
    close(fd);
    free(data);
}

static void test_read_segments_across_boundary(void **state)
{
    const uint32_t seg = 1u << 20;
    char dir[] = "/tmp/walbuf-test-XXXXXX";
    uint8_t *out = malloc(3 * seg);
    char err[256];
    lsn_t base = (lsn_t)7 * seg;

    (void)state;
    assert_non_null(mkdtemp(dir));
    write_segment(dir, seg, base);
    write_segment(dir, seg, base + seg);
    /* A read spanning both segments returns the exact bytes. */
    assert_int_equal(
        walbuf_read_segments(dir, 1, seg, base + seg - 1000, out, 5000, err, sizeof(err)), 0);
    check(out, base + seg - 1000, 5000);
    /* Past the last segment: a clear error naming the missing file. */
    assert_int_equal(
        walbuf_read_segments(dir, 1, seg, base + 2 * seg - 10, out, 20, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "000000010000000000000009"));
    /* Before the first: likewise. */
    assert_int_equal(walbuf_read_segments(dir, 1, seg, base - 10, out, 20, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "000000010000000000000006"));
    {
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
    }
    free(out);
}

static const char *param(const wp_edge_params *p, const char *key)
{
    for (int i = 0; p->keys[i] != NULL; i++) {
        assert_true(i < PQSTREAM_MAX_PARAMS);
        if (strcmp(p->keys[i], key) == 0)
            return p->vals[i];
    }
    return NULL;
}

static void test_safekeeper_params(void **state)
{
    strata_id tenant, timeline;
    wp_edge_params p;
    char want[128];

    (void)state;
    assert_true(strata_id_parse("0123456789abcdef0123456789abcdef", &tenant));
    assert_true(strata_id_parse("fedcba9876543210fedcba9876543210", &timeline));
    wp_edge_safekeeper_params(&p, "10.0.0.7", "5454", &tenant, &timeline, "walproposer", 0, "");
    assert_string_equal(param(&p, "host"), "10.0.0.7");
    assert_string_equal(param(&p, "port"), "5454");
    assert_string_equal(param(&p, "dbname"), "replication");
    assert_string_equal(param(&p, "application_name"), "walproposer");
    assert_string_equal(param(&p, "connect_timeout"), "1"); /* at least one second */
    snprintf(want, sizeof want, "-c tenant_id=%s -c timeline_id=%s",
             "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210");
    assert_string_equal(param(&p, "options"), want);
    assert_null(param(&p, "password"));
    snprintf(want, sizeof want, "START_WAL_PUSH (proto_version '%d')", WALPUSH_PROTO_VERSION);
    assert_string_equal(p.query, want);

    wp_edge_safekeeper_params(&p, "h", "1", &tenant, &timeline, "sync-safekeepers", 10, "pw");
    assert_string_equal(param(&p, "password"), "pw");
    assert_string_equal(param(&p, "connect_timeout"), "10");
    wp_edge_safekeeper_params(&p, "h", "1", &tenant, &timeline, "x", 10, NULL);
    assert_null(param(&p, "password"));
}

static void test_backoff_doubles_caps_and_resets(void **state)
{
    (void)state;
    assert_int_equal(wp_edge_backoff(0, 0, 50, 2000), 50);
    assert_int_equal(wp_edge_backoff(50, 0, 50, 2000), 100);
    assert_int_equal(wp_edge_backoff(800, 10, 50, 2000), 1600);
    assert_int_equal(wp_edge_backoff(1600, 0, 50, 2000), 2000);
    assert_int_equal(wp_edge_backoff(2000, 0, 50, 2000), 2000);
    /* An odd cap: doubling stops exactly at it, never beyond. */
    assert_int_equal(wp_edge_backoff(2, 0, 1, 5), 4);
    assert_int_equal(wp_edge_backoff(3, 0, 1, 5), 5);
    /* Up for a short while: still backing off (accept-then-fail). */
    assert_int_equal(wp_edge_backoff(400, 2000, 50, 2000), 800);
    /* Up for longer than the cap: a new series. */
    assert_int_equal(wp_edge_backoff(2000, 2001, 50, 2000), 50);
}

static void test_append_msg(void **state)
{
    static uint8_t wal[WALPUSH_MAX_APPEND + 1];
    static uint8_t scratch[WALPUSH_MAX_MESSAGE];
    append_request ar = {.term = 3, .begin_lsn = 0x1000000, .commit_lsn = 0xF00000};
    proposer_msg msg, back;
    const char *why = NULL;

    (void)state;
    ar.end_lsn = ar.begin_lsn + WALPUSH_MAX_APPEND + 1;
    assert_false(wp_edge_append_msg(&ar, wal, &msg));
    ar.end_lsn = ar.begin_lsn - 1;
    assert_false(wp_edge_append_msg(&ar, wal, &msg));

    /* A valid one carries the WAL and decodes back to the same request. */
    memcpy(wal, "records", 7);
    ar.end_lsn = ar.begin_lsn + 7;
    assert_true(wp_edge_append_msg(&ar, wal, &msg));
    size_t n = walpush_encode_proposer_msg(&msg, scratch, sizeof scratch);
    assert_true(n > 0);
    assert_int_equal(walpush_decode_proposer_msg(scratch, n, &back, &why), 0);
    assert_int_equal(back.kind, PMSG_APPEND);
    assert_int_equal(back.u.append.term, 3);
    assert_int_equal(back.u.append.begin_lsn, 0x1000000);
    assert_int_equal(back.u.append.end_lsn, 0x1000007);
    assert_int_equal(back.u.append.commit_lsn, 0xF00000);
    assert_int_equal(back.u.append.wal_len, 7);
    assert_memory_equal(back.u.append.wal, "records", 7);
}

static void test_take_failed_lowest_first(void **state)
{
    uint32_t failed = (1u << 4) | (1u << 1) | (1u << 31);

    (void)state;
    assert_int_equal(wp_edge_take_failed(&failed), 1);
    assert_int_equal(wp_edge_take_failed(&failed), 4);
    assert_int_equal(wp_edge_take_failed(&failed), 31);
    assert_int_equal(failed, 0);
    assert_int_equal(wp_edge_take_failed(&failed), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walbuf_wraps_and_keeps_newest),
        cmocka_unit_test(test_walbuf_refuses_gaps),
        cmocka_unit_test(test_walbuf_append_larger_than_ring),
        cmocka_unit_test(test_segment_names),
        cmocka_unit_test(test_read_segments_across_boundary),
        cmocka_unit_test(test_safekeeper_params),
        cmocka_unit_test(test_backoff_doubles_caps_and_resets),
        cmocka_unit_test(test_append_msg),
        cmocka_unit_test(test_take_failed_lowest_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
