/*
 * test_pagecache.c: unit tests of the page cache (pageserver/cache/pagecache.h):
 * hits and misses by owner, key and version LSN; one entry per page, the
 * newest version winning, and the older-version lookup; the capacity bound and
 * CLOCK's second chance for hot pages; a disabled cache; and many threads
 * reading and inserting at once without ever seeing a torn or wrong page.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sysmem.h"
#include "pageserver/cache/pagecache.h"

static pg_key block(uint32_t rel, uint32_t blk)
{
    pg_key k = {.kind = KEY_REL_BLOCK, .spc = 1663, .db = 5, .rel = rel, .fork = 0, .blk = blk};
    return k;
}

/* A page whose every byte depends on (owner, key, lsn). */
static void fill(uint8_t page[PG_BLCKSZ], uint64_t owner, const pg_key *k, lsn_t lsn)
{
    uint64_t seed = owner * 1000003u ^ (uint64_t)k->rel * 7919u ^ (uint64_t)k->blk * 31u ^ lsn;
    for (size_t i = 0; i < PG_BLCKSZ; i += 8) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        memcpy(page + i, &seed, 8);
    }
}

static void test_hit_miss_by_owner_key_lsn(void **state)
{
    (void)state;
    pagecache *pc;
    char err[128];
    assert_int_equal(pagecache_create(4u << 20, &pc, err, sizeof err), 0);
    static uint8_t page[PG_BLCKSZ], out[PG_BLCKSZ], want[PG_BLCKSZ];
    pg_key k = block(16384, 3);
    fill(page, 1, &k, 0x100);
    assert_false(pagecache_lookup(pc, 1, &k, 0x100, out));
    pagecache_insert(pc, 1, &k, 0x100, page);
    memset(out, 0, sizeof out);
    assert_true(pagecache_lookup(pc, 1, &k, 0x100, out));
    assert_memory_equal(out, page, PG_BLCKSZ);

    /* Another LSN, owner, block, fork or kind is another entry. */
    assert_false(pagecache_lookup(pc, 1, &k, 0x101, out));
    assert_false(pagecache_lookup(pc, 2, &k, 0x100, out));
    pg_key other = block(16384, 4);
    assert_false(pagecache_lookup(pc, 1, &other, 0x100, out));
    other = k;
    other.fork = 1;
    assert_false(pagecache_lookup(pc, 1, &other, 0x100, out));
    other = k;
    other.kind = KEY_SLRU_BLOCK;
    assert_false(pagecache_lookup(pc, 1, &other, 0x100, out));

    /* Re-insert replaces the bytes. */
    fill(want, 9, &k, 0x100);
    pagecache_insert(pc, 1, &k, 0x100, want);
    assert_true(pagecache_lookup(pc, 1, &k, 0x100, out));
    assert_memory_equal(out, want, PG_BLCKSZ);

    pagecache_stats st;
    pagecache_get_stats(pc, &st);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 6);
    assert_int_equal(st.inserts, 2);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.capacity, (4u << 20) / PG_BLCKSZ);
    pagecache_destroy(pc);
}

static void test_one_version_per_page(void **state)
{
    (void)state;
    pagecache *pc;
    char err[128];
    assert_int_equal(pagecache_create(4u << 20, &pc, err, sizeof err), 0);
    static uint8_t v1[PG_BLCKSZ], v2[PG_BLCKSZ], out[PG_BLCKSZ];
    pg_key k = block(16384, 9);
    fill(v1, 1, &k, 0x100);
    fill(v2, 1, &k, 0x200);
    lsn_t found = 0;
    assert_false(pagecache_holds(pc, 1, &k, 0x1000));
    assert_false(pagecache_lookup_older(pc, 1, &k, 0x1000, &found, out));
    pagecache_insert(pc, 1, &k, 0x100, v1);

    /* Older-version lookups: strictly below `below`. */
    assert_false(pagecache_holds(pc, 1, &k, 0x100));
    assert_true(pagecache_holds(pc, 1, &k, 0x101));
    assert_false(pagecache_holds(pc, 2, &k, 0x101));
    assert_false(pagecache_lookup_older(pc, 1, &k, 0x100, &found, out));
    assert_true(pagecache_lookup_older(pc, 1, &k, 0x180, &found, out));
    assert_int_equal(found, 0x100);
    assert_memory_equal(out, v1, PG_BLCKSZ);

    /* A newer version replaces the entry; an older one does not. */
    pagecache_insert(pc, 1, &k, 0x200, v2);
    assert_false(pagecache_lookup(pc, 1, &k, 0x100, out));
    assert_true(pagecache_lookup(pc, 1, &k, 0x200, out));
    assert_memory_equal(out, v2, PG_BLCKSZ);
    pagecache_insert(pc, 1, &k, 0x100, v1);
    assert_true(pagecache_lookup(pc, 1, &k, 0x200, out));
    assert_memory_equal(out, v2, PG_BLCKSZ);

    pagecache_stats st;
    pagecache_get_stats(pc, &st);
    assert_int_equal(st.entries, 1);
    assert_int_equal(st.inserts, 2); /* the dropped older insert is not one */
    /* Only pagecache_lookup counts: 2 hits and 1 miss above. */
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 1);
    pagecache_destroy(pc);
}

static void test_auto_size(void **state)
{
    (void)state;
    uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t cg = sysmem_cgroup_limit_bytes();
    assert_true(cg < ((uint64_t)1 << 60)); /* v1's "no limit" reads as none */
    uint64_t mem = cg > 0 && cg < phys ? cg : phys;
    assert_int_equal(sysmem_usable_bytes(), mem);
    size_t want = mem / PAGECACHE_AUTO_SHARE;
    if (want < PAGECACHE_AUTO_MIN_BYTES)
        want = PAGECACHE_AUTO_MIN_BYTES;
    assert_int_equal(pagecache_auto_bytes(), want);
}

static void test_bounded_and_clock_keeps_hot_pages(void **state)
{
    (void)state;
    pagecache *pc;
    char err[128];
    /* Two pages per shard. */
    size_t cap = (size_t)2 * PAGECACHE_SHARDS * PG_BLCKSZ;
    assert_int_equal(pagecache_create(cap, &pc, err, sizeof err), 0);
    static uint8_t page[PG_BLCKSZ], out[PG_BLCKSZ];

    /* A hot page, read after each insert, survives a flood of cold ones. */
    pg_key hot = block(1, 0);
    fill(page, 1, &hot, 5);
    pagecache_insert(pc, 1, &hot, 5, page);
    for (uint32_t i = 0; i < 5000; i++) {
        assert_true(pagecache_lookup(pc, 1, &hot, 5, out));
        pg_key cold = block(2, i);
        fill(page, 1, &cold, 7);
        pagecache_insert(pc, 1, &cold, 7, page);
    }
    fill(page, 1, &hot, 5);
    assert_true(pagecache_lookup(pc, 1, &hot, 5, out));
    assert_memory_equal(out, page, PG_BLCKSZ);

    pagecache_stats st;
    pagecache_get_stats(pc, &st);
    assert_true(st.entries <= 2 * PAGECACHE_SHARDS);
    assert_int_equal(st.capacity, 2 * PAGECACHE_SHARDS);
    assert_true(st.evictions >= 5000 - 2 * PAGECACHE_SHARDS);

    /* Most cold pages are gone; the recent ones that are left are right. */
    int present = 0;
    for (uint32_t i = 0; i < 5000; i++) {
        pg_key cold = block(2, i);
        if (pagecache_lookup(pc, 1, &cold, 7, out)) {
            fill(page, 1, &cold, 7);
            assert_memory_equal(out, page, PG_BLCKSZ);
            present++;
        }
    }
    assert_true(present > 0 && present <= 2 * PAGECACHE_SHARDS);
    pagecache_destroy(pc);
}

static void test_disabled_cache(void **state)
{
    (void)state;
    pagecache *pc;
    char err[128];
    assert_int_equal(pagecache_create(PG_BLCKSZ, &pc, err, sizeof err), 0);
    static uint8_t page[PG_BLCKSZ], out[PG_BLCKSZ];
    pg_key k = block(1, 1);
    pagecache_insert(pc, 1, &k, 1, page);
    assert_false(pagecache_lookup(pc, 1, &k, 1, out));
    pagecache_stats st;
    pagecache_get_stats(pc, &st);
    assert_int_equal(st.capacity, 0);
    assert_int_equal(st.misses, 1);
    pagecache_destroy(pc);
}

typedef struct worker_arg {
    pagecache *pc;
    int id;
    uint64_t hits;
} worker_arg;

static void *worker(void *p)
{
    worker_arg *a = p;
    static _Thread_local uint8_t page[PG_BLCKSZ], out[PG_BLCKSZ];
    uint64_t x = (uint64_t)a->id + 1;
    for (int i = 0; i < 5000; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t owner = (x >> 60) & 1;
        pg_key k = block((uint32_t)(x >> 40) & 3, (uint32_t)(x >> 20) & 255);
        lsn_t lsn = (x >> 8) & 3;
        if (pagecache_lookup(a->pc, owner, &k, lsn, out)) {
            fill(page, owner, &k, lsn);
            if (memcmp(out, page, PG_BLCKSZ) != 0)
                return (void *)1;
            a->hits++;
        } else {
            fill(page, owner, &k, lsn);
            pagecache_insert(a->pc, owner, &k, lsn, page);
        }
    }
    return NULL;
}

static void test_concurrent_readers_and_writers(void **state)
{
    (void)state;
    pagecache *pc;
    char err[128];
    /* 512 pages for 8192 distinct entries: lots of eviction under contention. */
    assert_int_equal(pagecache_create(512 * PG_BLCKSZ, &pc, err, sizeof err), 0);
    enum { N = 4 };
    pthread_t th[N];
    worker_arg args[N];
    for (int i = 0; i < N; i++) {
        args[i] = (worker_arg){.pc = pc, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    uint64_t hits = 0;
    for (int i = 0; i < N; i++) {
        void *rv;
        pthread_join(th[i], &rv);
        assert_null(rv);
        hits += args[i].hits;
    }
    pagecache_stats st;
    pagecache_get_stats(pc, &st);
    assert_true(hits > 0);
    assert_int_equal(st.hits, hits);
    assert_int_equal(st.hits + st.misses, N * 5000);
    assert_true(st.entries <= st.capacity);
    pagecache_destroy(pc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_miss_by_owner_key_lsn),
        cmocka_unit_test(test_one_version_per_page),
        cmocka_unit_test(test_auto_size),
        cmocka_unit_test(test_bounded_and_clock_keeps_hot_pages),
        cmocka_unit_test(test_disabled_cache),
        cmocka_unit_test(test_concurrent_readers_and_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
