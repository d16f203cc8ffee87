/* Unit tests for pageserver/store/key.c: key encoding order, index keys, key
 * formatting, and the value codec. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pageserver/store/key.h"

/* A deterministic xorshift generator so failures reproduce. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rng_next(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

/* Small value ranges so random keys often share prefixes. */
static uint32_t pick_u32(void)
{
    static const uint32_t edge[] = {0,          1,           2,           255,        256,
                                    0x7FFFFFFF, 0x80000000u, 0xFFFFFFFEu, 0xFFFFFFFFu};
    uint64_t r = rng_next();
    if (r % 3 == 0)
        return edge[(r >> 8) % (sizeof edge / sizeof edge[0])];
    return (uint32_t)((r >> 16) % 4);
}

static pg_key random_key(void)
{
    pg_key k;
    k.kind = (uint8_t)(rng_next() % (KEY_CONTROL + 1));
    k.spc = pick_u32();
    k.db = pick_u32();
    k.rel = pick_u32();
    k.fork = (uint8_t)(rng_next() % 3);
    k.blk = pick_u32();
    return k;
}

static int sign(int x)
{
    return (x > 0) - (x < 0);
}

static void test_key_roundtrip_and_order(void **state)
{
    (void)state;
    for (int i = 0; i < 20000; i++) {
        pg_key a = random_key(), b = random_key(), back;
        uint8_t ea[PG_KEY_LEN], eb[PG_KEY_LEN];
        pg_key_encode(&a, ea);
        pg_key_encode(&b, eb);
        assert_true(pg_key_decode(ea, &back));
        assert_int_equal(pg_key_compare(&a, &back), 0);
        assert_memory_equal(&a.spc, &back.spc, sizeof a.spc);
        assert_int_equal(back.blk, a.blk);
        /* memcmp order == logical order, in both directions. */
        assert_int_equal(sign(memcmp(ea, eb, PG_KEY_LEN)), sign(pg_key_compare(&a, &b)));
        assert_int_equal(sign(pg_key_compare(&b, &a)), -sign(pg_key_compare(&a, &b)));
    }
}

static void test_key_order_matches_design(void **state)
{
    (void)state;
    /* Kind first, then relation, then block: relation 2's block 0 sorts
     * after relation 1's last block, every REL_BLOCK before any REL_SIZE. */
    pg_key a = pg_key_rel_block(1663, 5, 1, FORK_VM, 0xFFFFFFFFu);
    pg_key b = pg_key_rel_block(1663, 5, 2, FORK_MAIN, 0);
    pg_key c = pg_key_rel_size(0, 0, 0, FORK_MAIN);
    pg_key d = pg_key_slru_block(SLRU_CLOG, 0, 0);
    assert_true(pg_key_compare(&a, &b) < 0);
    assert_true(pg_key_compare(&b, &c) < 0);
    assert_true(pg_key_compare(&c, &d) < 0);
    pg_key e = pg_key_rel_block(1663, 5, 1, FORK_MAIN, 7);
    pg_key f = pg_key_rel_block(1663, 5, 1, FORK_MAIN, 0x100);
    assert_true(pg_key_compare(&e, &f) < 0); /* numeric, not lexical, block order */
}

static void test_key_decode_rejects(void **state)
{
    (void)state;
    uint8_t enc[PG_KEY_LEN];
    pg_key k = pg_key_rel_block(1, 2, 3, FORK_INIT, 4), out;
    pg_key_encode(&k, enc);
    assert_true(pg_key_decode(enc, &out));
    enc[13] = FORK_MAX + 1; /* fork out of range */
    assert_false(pg_key_decode(enc, &out));
    pg_key_encode(&k, enc);
    enc[0] = KEY_CONTROL + 1; /* unknown kind */
    assert_false(pg_key_decode(enc, &out));
    pg_key s = pg_key_slru_block(SLRU_MULTIXACT_MEMBERS, 9, 31);
    pg_key_encode(&s, enc);
    assert_true(pg_key_decode(enc, &out));
    assert_int_equal(out.fork, SLRU_MULTIXACT_MEMBERS);
    enc[13] = 3; /* no fourth SLRU */
    assert_false(pg_key_decode(enc, &out));
}

/* An index key walk: sorting (key, lsn) pairs by memcmp of their index keys
 * and walking backwards from (K, L) yields K's versions <= L newest first. */
static int cmp_index_key(const void *a, const void *b)
{
    return memcmp(a, b, PG_INDEX_KEY_LEN);
}

static void test_index_key_lsn_descending_walk(void **state)
{
    (void)state;
    enum { N = 600 };
    uint8_t(*ik)[PG_INDEX_KEY_LEN] = calloc(N, PG_INDEX_KEY_LEN);
    assert_non_null(ik);
    pg_key keys[3] = {pg_key_rel_block(1663, 5, 16384, 0, 6),
                      pg_key_rel_block(1663, 5, 16384, 0, 7),
                      pg_key_rel_block(1663, 5, 16384, 0, 8)};
    for (int i = 0; i < N; i++) {
        /* LSNs that cross byte boundaries, in random insertion order. */
        lsn_t lsn = ((lsn_t)(i / 3) << 20) + (rng_next() % 1000) * 0x101 + 1;
        pg_index_key_encode(&keys[i % 3], lsn, ik[i]);
    }
    qsort(ik, N, PG_INDEX_KEY_LEN, cmp_index_key);
    uint8_t probe[PG_INDEX_KEY_LEN];
    lsn_t read_lsn = ((lsn_t)100 << 20) + 77;
    pg_index_key_encode(&keys[1], read_lsn, probe);
    /* Last entry <= probe. */
    int pos = -1;
    for (int i = 0; i < N; i++)
        if (memcmp(ik[i], probe, PG_INDEX_KEY_LEN) <= 0)
            pos = i;
    assert_true(pos >= 0);
    lsn_t prev = LSN_MAX;
    int seen = 0;
    for (int i = pos; i >= 0; i--) {
        pg_key k;
        lsn_t lsn;
        assert_true(pg_index_key_decode(ik[i], &k, &lsn));
        if (pg_key_compare(&k, &keys[1]) != 0)
            break;
        assert_true(lsn <= read_lsn);
        assert_true(lsn <= prev);
        prev = lsn;
        seen++;
    }
    /* Every version of keys[1] at or below read_lsn was visited. */
    int expect = 0;
    for (int i = 0; i < N; i++) {
        pg_key k;
        lsn_t lsn;
        assert_true(pg_index_key_decode(ik[i], &k, &lsn));
        if (pg_key_compare(&k, &keys[1]) == 0 && lsn <= read_lsn)
            expect++;
    }
    assert_int_equal(seen, expect);
    assert_true(seen > 10);
    free(ik);
}

static void test_key_format(void **state)
{
    (void)state;
    char buf[96];
    pg_key k = pg_key_rel_block(1663, 5, 16384, 0, 7);
    assert_string_equal(pg_key_format(&k, buf, sizeof buf), "rel 1663/5/16384.0 blk 7");
    k = pg_key_rel_size(1663, 5, 16384, FORK_VM);
    assert_string_equal(pg_key_format(&k, buf, sizeof buf), "relsize 1663/5/16384.2");
    k = pg_key_slru_block(SLRU_CLOG, 3, 2);
    assert_string_equal(pg_key_format(&k, buf, sizeof buf), "slru clog seg 3 blk 2");
    char small[8];
    pg_key_format(&k, small, sizeof small);
    assert_int_equal(strlen(small), 7); /* truncated, terminated */
}

static uint8_t big[VALUE_HEADER_LEN + PG_BLCKSZ + 64];

static void test_value_roundtrip(void **state)
{
    (void)state;
    uint8_t page[PG_BLCKSZ];
    for (int i = 0; i < PG_BLCKSZ; i++)
        page[i] = (uint8_t)(i * 7);
    uint8_t rec[40] = {40, 0, 0, 0};
    uint8_t clog[5 + 8] = {1, 0, 0, 0, 2};
    uint8_t size4[4] = {0, 0, 1, 0};
    struct {
        value_ref v;
        bool complete;
    } cases[] = {
        {{VAL_IMAGE, 0, PG_BLCKSZ, page}, true},
        {{VAL_WAL_RECORD, 0, sizeof rec, rec}, false},
        {{VAL_WAL_RECORD, VALUE_WILL_INIT, sizeof rec, rec}, true},
        {{VAL_CLOG_SET, 0, sizeof clog, clog}, false},
        {{VAL_SIZE, 0, 4, size4}, true},
        {{VAL_TOMBSTONE, 0, 0, NULL}, true},
        {{VAL_BLOB, 0, 3, (const uint8_t *)"abc"}, true},
        {{VAL_ZERO_PAGE, 0, 0, NULL}, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = value_encode(&cases[i].v, big, sizeof big);
        assert_int_equal(n, VALUE_HEADER_LEN + cases[i].v.len);
        value_ref out;
        size_t used = 0;
        const char *why = NULL;
        assert_int_equal(value_decode(big, n, &out, &used, &why), 0);
        assert_int_equal(used, n);
        assert_int_equal(out.kind, cases[i].v.kind);
        assert_int_equal(out.flags, cases[i].v.flags);
        assert_int_equal(out.len, cases[i].v.len);
        if (out.len > 0)
            assert_memory_equal(out.payload, cases[i].v.payload, out.len);
        assert_int_equal(value_is_complete(&out), cases[i].complete);
        /* Every truncation is rejected with a reason. */
        for (size_t cut = 0; cut < n; cut += (n > 64 ? 997 : 1)) {
            why = NULL;
            assert_int_equal(value_decode(big, cut, &out, &used, &why), -1);
            assert_non_null(why);
        }
        /* Encoding into too small a buffer writes nothing. */
        assert_int_equal(value_encode(&cases[i].v, big, n - 1), 0);
    }
}

static void test_value_decode_rejects(void **state)
{
    (void)state;
    value_ref out;
    size_t used;
    const char *why;
    uint8_t b[64] = {0};
    /* unknown kind */
    b[0] = 11;
    why = NULL;
    assert_int_equal(value_decode(b, 6, &out, &used, &why), -1);
    assert_non_null(why);
    /* unknown flag bit */
    b[0] = VAL_BLOB;
    b[1] = 0x02;
    why = NULL;
    assert_int_equal(value_decode(b, 6, &out, &used, &why), -1);
    /* huge length */
    b[1] = 0;
    b[2] = 0xFF;
    why = NULL;
    assert_int_equal(value_decode(b, 64, &out, &used, &why), -1);
    assert_non_null(why);
    /* image of the wrong size */
    b[0] = VAL_IMAGE;
    b[2] = 0;
    b[5] = 10;
    why = NULL;
    assert_int_equal(value_decode(b, 64, &out, &used, &why), -1);
    /* size of the wrong width */
    b[0] = VAL_SIZE;
    b[5] = 3;
    why = NULL;
    assert_int_equal(value_decode(b, 64, &out, &used, &why), -1);
    /* CLOG delta whose count disagrees with its length */
    b[0] = VAL_CLOG_SET;
    b[5] = 9; /* status + count + one xid */
    b[6] = 1;
    b[7] = 0, b[8] = 0, b[9] = 0, b[10] = 2;
    why = NULL;
    assert_int_equal(value_decode(b, 64, &out, &used, &why), -1);
    b[10] = 1;
    assert_int_equal(value_decode(b, 64, &out, &used, &why), 0);
    assert_int_equal(used, 15);
    /* WAL record whose xl_tot_len disagrees */
    memset(b, 0, sizeof b);
    b[0] = VAL_WAL_RECORD;
    b[5] = 30;
    b[6] = 31;
    why = NULL;
    assert_int_equal(value_decode(b, 64, &out, &used, &why), -1);
    b[6] = 30;
    assert_int_equal(value_decode(b, 64, &out, &used, &why), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_roundtrip_and_order),
        cmocka_unit_test(test_key_order_matches_design),
        cmocka_unit_test(test_key_decode_rejects),
        cmocka_unit_test(test_index_key_lsn_descending_walk),
        cmocka_unit_test(test_key_format),
        cmocka_unit_test(test_value_roundtrip),
        cmocka_unit_test(test_value_decode_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
