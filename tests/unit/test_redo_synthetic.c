/*
 * test_redo_synthetic.c: unit tests of the C synthetic redo
 * (pageserver/redo/redo_synthetic.h).  Expected bits are computed here from the
 * layouts as Postgres documents them (a bit index into the page, not the
 * module's byte/shift arithmetic), and a few positions are written out by
 * hand; the rest of the page must stay untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "pageserver/redo/redo_synthetic.h"

#include "base/byteorder.h"

/* Two-bit field number n counted from bit 0 of byte base (LSB first). */
static unsigned get2(const uint8_t *page, size_t base, uint64_t n)
{
    uint64_t bit = (uint64_t)base * 8 + n * 2;
    return (page[bit / 8] >> (bit % 8)) & 3;
}

static uint8_t page[PG_BLCKSZ], before[PG_BLCKSZ];

static int apply(const pg_key *k, uint8_t kind, const uint8_t *payload, uint32_t len,
                 const char **why)
{
    value_ref v = {.kind = kind, .len = len, .payload = payload};
    *why = NULL;
    return redo_synthetic_apply(k, &v, page, why);
}

static void test_clog_set(void **state)
{
    (void)state;
    /* xids on CLOG page 3 = segment 0, page 3: 3 * 32768 .. */
    uint32_t base = 3 * 32768;
    uint32_t xids[] = {base, base + 1, base + 5, base + 32767};
    uint8_t payload[5 + 4 * 4];
    payload[0] = 1; /* committed */
    put_be32(payload + 1, 4);
    for (int i = 0; i < 4; i++)
        put_be32(payload + 5 + 4 * i, xids[i]);
    memset(page, 0, sizeof page);
    page[100] = 0xFF; /* xids 400..403 of the page: all sub-committed, untouched */
    memcpy(before, page, sizeof page);
    pg_key k = pg_key_slru_block(SLRU_CLOG, 0, 3);
    const char *why;
    assert_int_equal(apply(&k, VAL_CLOG_SET, payload, sizeof payload, &why), 0);
    for (uint32_t x = 0; x < 32768; x++) {
        unsigned want = get2(before, 0, x);
        for (int i = 0; i < 4; i++)
            if (xids[i] - base == x)
                want = 1;
        assert_int_equal(get2(page, 0, x), want);
    }
    /* By hand: xid base+1 is bits 2-3 of byte 0, base+5 bits 2-3 of byte 1,
     * base+32767 the top two bits of the last byte. */
    assert_int_equal(page[0], 0x05);
    assert_int_equal(page[1], 0x04);
    assert_int_equal(page[8191], 0x40);

    /* Aborting over it replaces the two bits. */
    payload[0] = 2;
    put_be32(payload + 1, 1);
    put_be32(payload + 5, base + 1);
    assert_int_equal(apply(&k, VAL_CLOG_SET, payload, 9, &why), 0);
    assert_int_equal(page[0], 0x09);

    /* An xid of another page, a bad status, a bad count, the wrong page kind. */
    put_be32(payload + 5, base + 32768);
    assert_int_equal(apply(&k, VAL_CLOG_SET, payload, 9, &why), -1);
    assert_non_null(why);
    put_be32(payload + 5, base);
    payload[0] = 4;
    assert_int_equal(apply(&k, VAL_CLOG_SET, payload, 9, &why), -1);
    payload[0] = 1;
    put_be32(payload + 1, 2);
    assert_int_equal(apply(&k, VAL_CLOG_SET, payload, 9, &why), -1);
    put_be32(payload + 1, 1);
    pg_key mk = pg_key_slru_block(SLRU_MULTIXACT_OFFSETS, 0, 3);
    assert_int_equal(apply(&mk, VAL_CLOG_SET, payload, 9, &why), -1);

    /* Segment 2, page 5 holds xids from (2 * 32 + 5) * 32768. */
    k = pg_key_slru_block(SLRU_CLOG, 2, 5);
    put_be32(payload + 5, (2 * 32 + 5) * 32768u + 9);
    memset(page, 0, sizeof page);
    assert_int_equal(apply(&k, VAL_CLOG_SET, payload, 9, &why), 0);
    assert_int_equal(page[2], 0x04);
}

static void test_vm_clear(void **state)
{
    (void)state;
    /* Heap blocks per VM page: (8192 - 24) bytes * 4. */
    assert_int_equal(REDO_VM_HEAPBLOCKS_PER_PAGE, 32672);
    memset(page, 0xFF, sizeof page);
    memcpy(before, page, sizeof page);
    pg_key k = pg_key_rel_block(1663, 5, 16384, FORK_VM, 1);
    uint32_t a = 32672 + 10, b = 32672 + 32671;
    uint8_t payload[9];
    payload[0] = 0x03; /* all-visible and all-frozen */
    put_be32(payload + 1, a);
    put_be32(payload + 5, b);
    const char *why;
    assert_int_equal(apply(&k, VAL_VM_CLEAR, payload, 9, &why), 0);
    for (uint32_t h = 0; h < 32672; h++) {
        unsigned want = (h == 10 || h == 32671) ? 0 : 3;
        assert_int_equal(get2(page, 24, h), want);
    }
    assert_memory_equal(page, before, 24); /* header untouched */
    /* By hand: heap block 10 is bits 4-5 of map byte 2 = page byte 26. */
    assert_int_equal(page[26], 0xCF);
    assert_int_equal(page[8191], 0x3F);

    /* Only all-frozen (0x02), second block on another VM page: skipped. */
    memset(page, 0xFF, sizeof page);
    payload[0] = 0x02;
    put_be32(payload + 1, 32672 + 1);
    put_be32(payload + 5, 5); /* VM page 0 */
    assert_int_equal(apply(&k, VAL_VM_CLEAR, payload, 9, &why), 0);
    assert_int_equal(page[24], 0xF7);
    assert_int_equal(get2(page, 24, 5), 3);

    /* A zero page is initialised first: pd_lower 24, pd_upper and pd_special
     * 8192, page size and layout version 4. */
    memset(page, 0, sizeof page);
    payload[0] = 0x01;
    put_be32(payload + 1, 32672);
    put_be32(payload + 5, UINT32_MAX);
    assert_int_equal(apply(&k, VAL_VM_CLEAR, payload, 9, &why), 0);
    const uint8_t hdr[24] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 24, 0, 0, 0x20, 0, 0x20, 4, 0x20};
    assert_memory_equal(page, hdr, 24);

    /* Refusals: no block of this page, bad flags, wrong fork, bad length. */
    put_be32(payload + 1, 3);
    assert_int_equal(apply(&k, VAL_VM_CLEAR, payload, 9, &why), -1);
    payload[0] = 0x04;
    put_be32(payload + 1, 32672);
    assert_int_equal(apply(&k, VAL_VM_CLEAR, payload, 9, &why), -1);
    payload[0] = 0x01;
    pg_key main_fork = pg_key_rel_block(1663, 5, 16384, FORK_MAIN, 1);
    assert_int_equal(apply(&main_fork, VAL_VM_CLEAR, payload, 9, &why), -1);
    assert_int_equal(apply(&k, VAL_VM_CLEAR, payload, 8, &why), -1);
    assert_non_null(why);
}

static void test_mxact_offset(void **state)
{
    (void)state;
    memset(page, 0, sizeof page);
    /* 2048 offsets (u32) per page; multi 2048 * 33 + 7 is on segment 1 page 1. */
    pg_key k = pg_key_slru_block(SLRU_MULTIXACT_OFFSETS, 1, 1);
    uint8_t payload[8];
    put_be32(payload, 2048 * 33 + 7);
    put_be32(payload + 4, 0xA1B2C3D4);
    const char *why;
    assert_int_equal(apply(&k, VAL_MXACT_OFFSET, payload, 8, &why), 0);
    assert_int_equal(get_le32(page + 28), 0xA1B2C3D4);
    for (size_t i = 0; i < sizeof page; i++)
        if (i < 28 || i >= 32)
            assert_int_equal(page[i], 0);
    put_be32(payload, 2048 * 33 - 1);
    assert_int_equal(apply(&k, VAL_MXACT_OFFSET, payload, 8, &why), -1);
    assert_non_null(why);
}

static void test_mxact_members(void **state)
{
    (void)state;
    /* 409 groups of 20 bytes (4 flag bytes, 4 xids) per page: 1636 members. */
    assert_int_equal(REDO_MXACT_MEMBERS_PER_PAGE, 1636);
    memset(page, 0, sizeof page);
    pg_key k = pg_key_slru_block(SLRU_MULTIXACT_MEMBERS, 0, 1);
    /* Offsets 1636 + 3 .. 1636 + 5: the last member of group 0 and the first
     * two of group 1. */
    uint8_t payload[8 + 3 * 5];
    put_be32(payload, 1636 + 3);
    put_be32(payload + 4, 3);
    uint32_t xids[] = {1000, 1001, 1002};
    uint8_t st[] = {1, 5, 3};
    for (int i = 0; i < 3; i++) {
        put_be32(payload + 8 + 5 * i, xids[i]);
        payload[8 + 5 * i + 4] = st[i];
    }
    const char *why;
    assert_int_equal(apply(&k, VAL_MXACT_MEMBERS, payload, sizeof payload, &why), 0);
    /* Group 0: flag byte 3, xid slot 3 at 4 + 12. */
    assert_int_equal(page[3], 1);
    assert_int_equal(get_le32(page + 16), 1000);
    /* Group 1 at byte 20: flag bytes 20, 21; xids at 24, 28. */
    assert_int_equal(page[20], 5);
    assert_int_equal(page[21], 3);
    assert_int_equal(get_le32(page + 24), 1001);
    assert_int_equal(get_le32(page + 28), 1002);
    int nonzero = 0;
    for (size_t i = 0; i < sizeof page; i++)
        nonzero += page[i] != 0;
    assert_int_equal(nonzero, 3 + 2 + 2 + 2); /* 3 flag bytes, 3 small xids (2 bytes each) */

    /* Rewriting a member replaces its flag byte only. */
    payload[8 + 4] = 2;
    put_be32(payload + 4, 1);
    assert_int_equal(apply(&k, VAL_MXACT_MEMBERS, payload, 13, &why), 0);
    assert_int_equal(page[3], 2);
    assert_int_equal(page[20], 5);

    /* Members of another page only, a bad status, wrong page kind. */
    put_be32(payload, 5);
    assert_int_equal(apply(&k, VAL_MXACT_MEMBERS, payload, 13, &why), -1);
    put_be32(payload, 1636);
    payload[8 + 4] = 6;
    assert_int_equal(apply(&k, VAL_MXACT_MEMBERS, payload, 13, &why), -1);
    payload[8 + 4] = 0;
    pg_key clog = pg_key_slru_block(SLRU_CLOG, 0, 1);
    assert_int_equal(apply(&clog, VAL_MXACT_MEMBERS, payload, 13, &why), -1);
    assert_int_equal(apply(&k, VAL_MXACT_MEMBERS, payload, 12, &why), -1);
    assert_int_equal(apply(&k, VAL_IMAGE, payload, 13, &why), -1);
    assert_non_null(why);
}

/* A raw smgr truncate record (XLogRecord header, short main data header,
 * xl_smgr_truncate) cutting relation 1663/5/rel to blkno heap blocks. */
static uint32_t truncate_record(uint8_t *r, uint32_t rel, uint32_t blkno, uint32_t flags)
{
    memset(r, 0, 46);
    uint32_t tot = 24 + 2 + 20;
    memcpy(r, &tot, 4);
    r[16] = 0x20 | 0x01; /* XLOG_SMGR_TRUNCATE | XLR_SPECIAL_REL_UPDATE */
    r[17] = 2;           /* RM_SMGR_ID */
    r[24] = 255;         /* XLR_BLOCK_ID_DATA_SHORT */
    r[25] = 20;
    uint32_t md[5] = {blkno, 1663, 5, rel, flags};
    memcpy(r + 26, md, sizeof md);
    return tot;
}

static void test_vm_truncate(void **state)
{
    (void)state;
    uint8_t rec[46];
    uint32_t len = truncate_record(rec, 16384, 32672 + 9, 7);
    value_ref v = {.kind = VAL_WAL_RECORD, .len = len, .payload = rec};
    assert_true(redo_synthetic_is_vm_truncate(&v));
    value_ref other = {.kind = VAL_WAL_RECORD, .len = len, .payload = rec};
    uint8_t heap[46];
    memcpy(heap, rec, sizeof heap);
    heap[17] = 10; /* RM_HEAP_ID */
    other.payload = heap;
    assert_false(redo_synthetic_is_vm_truncate(&other));

    /* Page 1 keeps heap blocks 32672..32680: their bits stay, the rest go. */
    memset(page, 0xFF, sizeof page);
    memcpy(before, page, sizeof page);
    pg_key k = pg_key_rel_block(1663, 5, 16384, FORK_VM, 1);
    const char *why;
    assert_int_equal(apply(&k, VAL_WAL_RECORD, rec, len, &why), 0);
    for (uint32_t h = 0; h < 32672; h++)
        assert_int_equal(get2(page, 24, h), h < 9 ? 3u : 0u);
    assert_memory_equal(page, before, 24); /* header (and LSN) untouched */
    /* By hand: heap block 9 is bits 2-3 of map byte 2 = page byte 26. */
    assert_int_equal(page[26], 0x03);
    assert_int_equal(page[25], 0xFF);

    /* A page never written is initialised first, as vm_readbuf does. */
    memset(page, 0, sizeof page);
    assert_int_equal(apply(&k, VAL_WAL_RECORD, rec, len, &why), 0);
    assert_int_equal(get_le32(page + 12) & 0xFFFF, 24);
    assert_int_equal(page[14] | page[15] << 8, PG_BLCKSZ);

    /* A cut at a page boundary leaves the kept page alone. */
    len = truncate_record(rec, 16384, 32672, 7);
    pg_key k0 = pg_key_rel_block(1663, 5, 16384, FORK_VM, 0);
    memset(page, 0xFF, sizeof page);
    memcpy(before, page, sizeof page);
    why = NULL;
    assert_int_equal(apply(&k0, VAL_WAL_RECORD, rec, len, &why), -1); /* cuts page 1, not 0 */
    assert_non_null(why);
    len = truncate_record(rec, 16384, 32672 * 2, 7);
    assert_int_equal(apply(&k, VAL_WAL_RECORD, rec, len, &why), -1);
    len = truncate_record(rec, 16384, 32672, 7);
    assert_int_equal(apply(&k, VAL_WAL_RECORD, rec, len, &why), 0);
    assert_memory_equal(page, before, sizeof page);

    /* Refusals: another relation, no VM flag, not a VM page, malformed. */
    len = truncate_record(rec, 16385, 32672 + 9, 7);
    assert_int_equal(apply(&k, VAL_WAL_RECORD, rec, len, &why), -1);
    len = truncate_record(rec, 16384, 32672 + 9, 1);
    assert_int_equal(apply(&k, VAL_WAL_RECORD, rec, len, &why), -1);
    len = truncate_record(rec, 16384, 32672 + 9, 7);
    pg_key main_k = pg_key_rel_block(1663, 5, 16384, FORK_MAIN, 1);
    assert_int_equal(apply(&main_k, VAL_WAL_RECORD, rec, len, &why), -1);
    rec[25] = 19;
    assert_int_equal(apply(&k, VAL_WAL_RECORD, rec, len, &why), -1);
    rec[25] = 20;
    rec[24] = 0; /* a block reference */
    assert_int_equal(apply(&k, VAL_WAL_RECORD, rec, len, &why), -1);
    assert_int_equal(apply(&k, VAL_WAL_RECORD, heap, len, &why), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clog_set),     cmocka_unit_test(test_vm_clear),
        cmocka_unit_test(test_mxact_offset), cmocka_unit_test(test_mxact_members),
        cmocka_unit_test(test_vm_truncate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
