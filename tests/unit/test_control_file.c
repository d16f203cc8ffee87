/*
 * Unit tests for proto/sk_control.c, the safekeeper control file: round
 * trips in memory and on disk, and rejection (with a message naming the
 * problem) of every kind of corruption.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "proto/sk_control.h"

#include "base/byteorder.h"
#include "base/crc32c.h"

static void sample(sk_control_state *st, uint32_t nhist)
{
    memset(st, 0, sizeof *st);
    for (int i = 0; i < STRATA_ID_LEN; i++) {
        st->tenant_id.b[i] = (uint8_t)(0x10 + i);
        st->timeline_id.b[i] = (uint8_t)(0xA0 + i);
    }
    st->pg_version = 150020;
    st->system_id = 0x7312345678ABCDEFULL;
    st->wal_seg_size = 16u << 20;
    st->node_id = 2;
    st->term = 1000 + nhist;
    st->history.n = nhist;
    for (uint32_t i = 0; i < nhist; i++) {
        st->history.entries[i].term = 3 + 2 * i;
        st->history.entries[i].lsn = 0x1696F28 + 0x100 * i;
    }
    st->timeline_start_lsn = 0x1696F28;
    st->flush_lsn = 0x3000128;
    st->commit_lsn = 0x3000000;
    st->truncate_lsn = 0x2000000;
    st->ps_feedback.last_received_lsn = 0x2F00000;
    st->ps_feedback.disk_consistent_lsn = 0x2E00000;
    st->ps_feedback.remote_consistent_lsn = 0x2D00000;
    st->backup_lsn = 0x2000000;
    /* A joint configuration: {1,2,3} -> {1,3,4}. */
    st->mconf.generation = 4;
    st->mconf.n_members = 3;
    st->mconf.n_new_members = 3;
    const uint64_t old_ids[] = {1, 2, 3}, new_ids[] = {1, 3, 4};
    for (int i = 0; i < 3; i++) {
        st->mconf.members[i].node_id = old_ids[i];
        snprintf(st->mconf.members[i].addr, sizeof st->mconf.members[i].addr, "127.0.0.1:%d",
                 5430 + (int)old_ids[i]);
        st->mconf.new_members[i].node_id = new_ids[i];
        snprintf(st->mconf.new_members[i].addr, sizeof st->mconf.new_members[i].addr,
                 "127.0.0.1:%d", 5430 + (int)new_ids[i]);
    }
}

/* Bytes of the sample's configuration in the body. */
#define SAMPLE_MCONF_SIZE (12 + 6 * SK_CONTROL_MEMBER_SIZE)

static void test_roundtrip(void **state)
{
    (void)state;
    static uint8_t buf[SK_CONTROL_MAX_SIZE];
    const uint32_t sizes[] = {0, 1, 3, TERM_HISTORY_MAX};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        sk_control_state st, back;
        sample(&st, sizes[k]);
        size_t len = sk_control_encode(&st, buf, sizeof buf);
        assert_int_equal(len, 12 + 124 + 16 * sizes[k] + SAMPLE_MCONF_SIZE + 8 + 4);
        char err[200] = "";
        assert_int_equal(sk_control_decode(buf, len, &back, err, sizeof err), 0);
        assert_memory_equal(&back, &st, sizeof st);
        /* One byte short of room: refused, nothing written past cap. */
        assert_int_equal(sk_control_encode(&st, buf, len - 1), 0);
        /* Generation 0 (no configuration known) round-trips too. */
        memset(&st.mconf, 0, sizeof st.mconf);
        len = sk_control_encode(&st, buf, sizeof buf);
        assert_int_equal(len, 12 + 124 + 16 * sizes[k] + 12 + 8 + 4);
        assert_int_equal(sk_control_decode(buf, len, &back, err, sizeof err), 0);
        assert_memory_equal(&back, &st, sizeof st);
    }
    /* The largest file fits SK_CONTROL_MAX_SIZE. */
    sk_control_state big;
    sample(&big, TERM_HISTORY_MAX);
    big.mconf.n_members = big.mconf.n_new_members = MEMBERSHIP_MAX;
    for (int i = 0; i < MEMBERSHIP_MAX; i++) {
        big.mconf.members[i].node_id = 10 + (uint64_t)i;
        big.mconf.new_members[i].node_id = 20 + (uint64_t)i;
        memset(big.mconf.members[i].addr, 'a', MEMBER_ADDR_MAX);
        memset(big.mconf.new_members[i].addr, 'b', MEMBER_ADDR_MAX);
    }
    assert_int_equal(sk_control_encode(&big, buf, sizeof buf), SK_CONTROL_MAX_SIZE);
    sk_control_state st;
    sample(&st, 1);
    st.history.n = TERM_HISTORY_MAX + 1;
    assert_int_equal(sk_control_encode(&st, buf, sizeof buf), 0);
}

/* Encodes st, lets mutate change the bytes, optionally fixes the CRC, and
 * expects decode to fail with a message containing want. */
static void expect_rejected(const sk_control_state *st, void (*mutate)(uint8_t *, size_t *),
                            bool fix_crc, const char *want)
{
    static uint8_t buf[SK_CONTROL_MAX_SIZE + 64];
    size_t len = sk_control_encode(st, buf, SK_CONTROL_MAX_SIZE);
    assert_true(len > 0);
    if (mutate != NULL)
        mutate(buf, &len);
    if (fix_crc) {
        uint32_t crc = crc32c(buf, len - 4);
        for (int i = 0; i < 4; i++)
            buf[len - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
    }
    sk_control_state out;
    char err[200] = "";
    assert_int_equal(sk_control_decode(buf, len, &out, err, sizeof err), -1);
    if (strstr(err, want) == NULL)
        fail_msg("error \"%s\" does not mention \"%s\"", err, want);
}

static void mut_magic(uint8_t *b, size_t *len)
{
    (void)len;
    b[0] ^= 0xFF;
}
static void mut_version(uint8_t *b, size_t *len)
{
    (void)len;
    put_le32(b + 4, 4);
}
static void mut_short(uint8_t *b, size_t *len)
{
    (void)b;
    *len = 50;
}
static void mut_drop_last(uint8_t *b, size_t *len)
{
    (void)b;
    *len -= 1;
}
static void mut_body_len(uint8_t *b, size_t *len)
{
    (void)len;
    put_le32(b + 8, 124 + 16 * 2);
}
static void mut_extra(uint8_t *b, size_t *len)
{
    /* Two more bytes in the body, body length adjusted to match. */
    memmove(b + *len - 2, b + *len - 4, 4);
    *len += 2;
    put_le32(b + 8, (uint32_t)(*len - 16));
}
/* Body offsets: tenant 12, timeline 28, pg_version 44, system_id 48,
 * seg size 56, node 60, term 68, start 76, flush 84, commit 92, trunc 100,
 * feedback 108..131, n 132, entries 136. */
static void mut_hist_n(uint8_t *b, size_t *len)
{
    (void)len;
    put_le32(b + 132, 4);
}
static void mut_hist_huge(uint8_t *b, size_t *len)
{
    (void)len;
    put_le32(b + 132, 100000);
}
static void mut_hist_order(uint8_t *b, size_t *len)
{
    (void)len;
    memset(b + 136 + 16, 0, 8); /* second entry's term = 0 < first */
}
/* The configuration of sample(st, 3) starts at body offset 136 + 48. */
#define MCONF_AT (136 + 48)
static void mut_members_many(uint8_t *b, size_t *len)
{
    (void)len;
    put_le32(b + MCONF_AT + 4, 8);
}
static void mut_member_addr(uint8_t *b, size_t *len)
{
    (void)len;
    memset(b + MCONF_AT + 8 + 8, 'x', MEMBER_ADDR_MAX + 1); /* no NUL */
}
static void mut_member_twice(uint8_t *b, size_t *len)
{
    (void)len;
    /* Second member's node id becomes the first's (1). */
    memcpy(b + MCONF_AT + 8 + SK_CONTROL_MEMBER_SIZE, b + MCONF_AT + 8, 8);
}
static void mut_members_cut(uint8_t *b, size_t *len)
{
    (void)len;
    put_le32(b + MCONF_AT + 4, 7); /* more members than the body holds */
}
static void mut_zero_tenant(uint8_t *b, size_t *len)
{
    (void)len;
    memset(b + 12, 0, 16);
}
static void mut_seg_size(uint8_t *b, size_t *len)
{
    (void)len;
    put_le32(b + 56, 3u << 20);
}
static void mut_term_low(uint8_t *b, size_t *len)
{
    (void)len;
    memset(b + 68, 0, 8);
}

static void mut_backup_unaligned(uint8_t *b, size_t *len)
{
    /* The backup LSN is the 8 bytes before the CRC. */
    put_le64(b + *len - 12, 0x2000001);
}

static void test_corruption_rejected(void **state)
{
    (void)state;
    sk_control_state st;
    sample(&st, 3);
    expect_rejected(&st, mut_magic, false, "bad magic");
    expect_rejected(&st, mut_version, false, "unsupported format version 4");
    expect_rejected(&st, mut_short, false, "too short");
    expect_rejected(&st, mut_drop_last, false, "does not match file size");
    expect_rejected(&st, mut_body_len, false, "does not match file size");
    expect_rejected(&st, mut_extra, true, "does not match its configuration");
    expect_rejected(&st, mut_members_many, true, "8 members in a set");
    expect_rejected(&st, mut_member_addr, true, "not terminated");
    expect_rejected(&st, mut_member_twice, true, "appears twice");
    expect_rejected(&st, mut_members_cut, true, "cut short");
    /* The body holds the configuration after the history, so a count one
     * too high reads a fourth entry that does not continue the history. */
    expect_rejected(&st, mut_hist_n, true, "history entry 3 is out of order");
    expect_rejected(&st, mut_hist_huge, true, "100000 entries");
    expect_rejected(&st, mut_hist_order, true, "out of order");
    expect_rejected(&st, mut_zero_tenant, true, "zero tenant");
    expect_rejected(&st, mut_seg_size, true, "invalid wal_seg_size");
    expect_rejected(&st, mut_term_low, true, "below its history");
    expect_rejected(&st, mut_backup_unaligned, true, "not a segment boundary");
}

/* A version 1 file (before configurations) reads as generation 0. */
static void test_version1_reads_as_generation0(void **state)
{
    (void)state;
    sk_control_state st, back;
    sample(&st, 2);
    memset(&st.mconf, 0, sizeof st.mconf);
    st.backup_lsn = 0;
    static uint8_t buf[SK_CONTROL_MAX_SIZE];
    size_t len = sk_control_encode(&st, buf, sizeof buf);
    /* Version 1 had no configuration and no backup LSN: drop their 20
     * bytes (the end of the body), then rewrite version, body length and
     * CRC. */
    len -= 20;
    put_le32(buf + 4, 1);
    put_le32(buf + 8, (uint32_t)(len - 16));
    uint32_t crc = crc32c(buf, len - 4);
    for (int i = 0; i < 4; i++)
        buf[len - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
    char err[200] = "";
    assert_int_equal(sk_control_decode(buf, len, &back, err, sizeof err), 0);
    assert_memory_equal(&back, &st, sizeof st);
    assert_int_equal(back.mconf.generation, 0);
}

/* A version 2 file (before the WAL backup) reads with backup LSN 0. */
static void test_version2_reads_without_backup(void **state)
{
    (void)state;
    sk_control_state st, back;
    sample(&st, 3);
    static uint8_t buf[SK_CONTROL_MAX_SIZE];
    size_t len = sk_control_encode(&st, buf, sizeof buf);
    /* Version 2 ended with the configuration: drop the backup LSN. */
    len -= 8;
    put_le32(buf + 4, 2);
    put_le32(buf + 8, (uint32_t)(len - 16));
    uint32_t crc = crc32c(buf, len - 4);
    for (int i = 0; i < 4; i++)
        buf[len - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
    char err[200] = "";
    assert_int_equal(sk_control_decode(buf, len, &back, err, sizeof err), 0);
    st.backup_lsn = 0;
    assert_memory_equal(&back, &st, sizeof st);
    /* The same bytes claiming version 3 lack the backup LSN: refused. */
    put_le32(buf + 4, 3);
    crc = crc32c(buf, len - 4);
    for (int i = 0; i < 4; i++)
        buf[len - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
    assert_int_equal(sk_control_decode(buf, len, &back, err, sizeof err), -1);
}

static void test_every_bit_flip_rejected(void **state)
{
    (void)state;
    sk_control_state st, out;
    sample(&st, 2);
    static uint8_t buf[SK_CONTROL_MAX_SIZE];
    size_t len = sk_control_encode(&st, buf, sizeof buf);
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            buf[i] ^= (uint8_t)(1u << bit);
            char err[200];
            assert_int_equal(sk_control_decode(buf, len, &out, err, sizeof err), -1);
            buf[i] ^= (uint8_t)(1u << bit);
        }
    }
    char err[200];
    assert_int_equal(sk_control_decode(buf, len, &out, err, sizeof err), 0);
}

static void test_file_roundtrip(void **state)
{
    (void)state;
    char dir[] = "/tmp/strata-ctl-XXXXXX";
    assert_non_null(mkdtemp(dir));
    sk_control_state st, back;
    char err[300] = "";
    assert_int_equal(sk_control_read(dir, &back, err, sizeof err), -ENOENT);

    sample(&st, 5);
    assert_int_equal(sk_control_write(dir, &st), 0);
    assert_int_equal(sk_control_read(dir, &back, err, sizeof err), 0);
    assert_memory_equal(&back, &st, sizeof st);

    st.term++;
    st.commit_lsn += 8;
    assert_int_equal(sk_control_write(dir, &st), 0);
    assert_int_equal(sk_control_read(dir, &back, err, sizeof err), 0);
    assert_memory_equal(&back, &st, sizeof st);

    /* A corrupt file on disk: clear error naming the file. */
    char path[300];
    snprintf(path, sizeof path, "%s/%s", dir, SK_CONTROL_FILE_NAME);
    FILE *f = fopen(path, "r+");
    assert_non_null(f);
    fseek(f, 80, SEEK_SET);
    fputc(0x5A, f);
    fclose(f);
    assert_int_equal(sk_control_read(dir, &back, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "CRC mismatch"));
    assert_non_null(strstr(err, SK_CONTROL_FILE_NAME));

    /* Too large. */
    f = fopen(path, "w");
    for (int i = 0; i < SK_CONTROL_MAX_SIZE + 1; i++)
        fputc(0, f);
    fclose(f);
    assert_int_equal(sk_control_read(dir, &back, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "larger than"));

    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_corruption_rejected),
        cmocka_unit_test(test_version1_reads_as_generation0),
        cmocka_unit_test(test_version2_reads_without_backup),
        cmocka_unit_test(test_every_bit_flip_rejected),
        cmocka_unit_test(test_file_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
