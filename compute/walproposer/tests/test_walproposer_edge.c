/*
 * test_walproposer_edge.c: unit tests of the walproposer's libc edge
 * helpers: the bounded WAL window and segment reads (walbuf.h).  The
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_walbuf_wraps_and_keeps_newest),
        cmocka_unit_test(test_walbuf_refuses_gaps),
        cmocka_unit_test(test_walbuf_append_larger_than_ring),
        cmocka_unit_test(test_segment_names),
        cmocka_unit_test(test_read_segments_across_boundary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
