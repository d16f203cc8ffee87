/*
 * Unit tests for pageserver/store/: the page-version store, on real files
 * in a temporary directory.  Covers reads across the open layer, frozen
 * layers and flushed data files (newest first, stopping at a complete value),
 * scans with tombstones, wait_lsn, restart from disk_consistent_lsn (clean
 * and after SIGKILL), orphan removal, checksum failures, GC (what readers at
 * the horizon need stays), concurrent readers during ingest and flushes, out
 * of space, and a timing run that prints throughput and latency figures.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pageserver/store/key.h"
#include "pageserver/store/store.h"
#include "pageserver/store/store_datafile.h"
#include "pageserver/store/store_priv.h"

#include "base/byteorder.h"

static char tmpdir[256];
static char storedir[512];

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_rf(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_store.XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    snprintf(storedir, sizeof storedir, "%s/store", tmpdir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char mnt[300];
    snprintf(mnt, sizeof mnt, "%s/small", tmpdir);
    umount2(mnt, MNT_DETACH);
    rm_rf(tmpdir);
    return 0;
}

static store_options small_opts(void)
{
    store_options o;
    store_options_default(&o);
    o.lmdb_map_size = (size_t)1 << 30;
    o.open_layer_max_age_ms = 60000; /* tests freeze explicitly unless they say otherwise */
    return o;
}

static store *open_store(const store_options *o)
{
    store *st = NULL;
    char err[512] = "";
    int rc = store_open(storedir, o, &st, err, sizeof err);
    if (rc != 0)
        fail_msg("store_open: %s", err);
    return st;
}

/* A WAL-record delta whose bytes name (tag, lsn). */
static void make_record(uint8_t *rec, uint32_t len, uint32_t tag, lsn_t lsn)
{
    memset(rec, 0, len);
    put_le32(rec, len);
    memcpy(rec + 4, &tag, 4);
    memcpy(rec + 8, &lsn, 8);
    for (uint32_t i = 24; i < len; i++)
        rec[i] = (uint8_t)(tag * 31 + lsn + i);
}

static void make_page(uint8_t *page, uint32_t tag, lsn_t lsn)
{
    for (int i = 0; i < PG_BLCKSZ; i++)
        page[i] = (uint8_t)((i % 97) ^ tag);
    memcpy(page, &lsn, 8);
    memcpy(page + 8, &tag, 4);
}

static void put_record(store *st, const pg_key *k, lsn_t lsn, uint32_t len, bool will_init)
{
    uint8_t rec[4096];
    assert_true(len <= sizeof rec);
    make_record(rec, len, k->blk, lsn);
    value_ref v = {VAL_WAL_RECORD, will_init ? VALUE_WILL_INIT : 0, len, rec};
    char err[256];
    if (store_put(st, k, lsn, &v, err, sizeof err) != 0)
        fail_msg("store_put: %s", err);
}

static void put_page(store *st, const pg_key *k, lsn_t lsn)
{
    uint8_t page[PG_BLCKSZ];
    make_page(page, k->blk, lsn);
    value_ref v = {VAL_IMAGE, 0, PG_BLCKSZ, page};
    char err[256];
    if (store_put(st, k, lsn, &v, err, sizeof err) != 0)
        fail_msg("store_put: %s", err);
}

static void put_size(store *st, const pg_key *k, lsn_t lsn, uint32_t nblocks)
{
    uint8_t b[4];
    put_be32(b, nblocks);
    value_ref v = {VAL_SIZE, 0, 4, b};
    char err[256];
    if (store_put(st, k, lsn, &v, err, sizeof err) != 0)
        fail_msg("store_put: %s", err);
}

static void put_tombstone(store *st, const pg_key *k, lsn_t lsn)
{
    value_ref v = {VAL_TOMBSTONE, 0, 0, NULL};
    char err[256];
    if (store_put(st, k, lsn, &v, err, sizeof err) != 0)
        fail_msg("store_put: %s", err);
}

/* Checks that get_versions(k, at) returns exactly the LSNs in want (newest
 * first), each value's bytes matching what put_record/put_page wrote. */
static void expect_versions(store *st, const pg_key *k, lsn_t at, const lsn_t *want, int nwant,
                            bool complete)
{
    version_list *vl = NULL;
    char err[512];
    if (store_get_versions(st, k, at, 1000, &vl, err, sizeof err) != 0)
        fail_msg("get_versions: %s", err);
    assert_int_equal(vl->n, nwant);
    assert_int_equal(vl->complete, complete);
    for (int i = 0; i < nwant; i++) {
        assert_int_equal(vl->lsn[i], want[i]);
        const value_ref *v = &vl->value[i];
        if (v->kind == VAL_IMAGE) {
            uint8_t page[PG_BLCKSZ];
            make_page(page, k->blk, want[i]);
            assert_int_equal(v->len, PG_BLCKSZ);
            assert_memory_equal(v->payload, page, PG_BLCKSZ);
        } else {
            assert_int_equal(v->kind, VAL_WAL_RECORD);
            uint8_t rec[4096];
            make_record(rec, v->len, k->blk, want[i]);
            assert_memory_equal(v->payload, rec, v->len);
        }
    }
    version_list_free(vl);
}

static int check_file_records(store *st);

static void flush(store *st)
{
    char err[512];
    if (store_flush(st, err, sizeof err) != 0)
        fail_msg("store_flush: %s", err);
}

static int count_data_files(void)
{
    char d[600];
    snprintf(d, sizeof d, "%s/data", storedir);
    DIR *dir = opendir(d);
    assert_non_null(dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL)
        if (de->d_name[0] != '.')
            n++;
    closedir(dir);
    return n;
}

/* The same chain read while it lives in the open layer, then with part of it
 * flushed (one inline, one in a data file), part frozen-then-flushed, and
 * part still open. */
static void test_versions_across_layers(void **state)
{
    (void)state;
    store_options o = small_opts();
    o.inline_max_bytes = 100; /* 64-byte records inline, 300-byte ones in files */
    store *st = open_store(&o);
    pg_key k = pg_key_rel_block(1663, 5, 16384, FORK_MAIN, 7);
    pg_key other = pg_key_rel_block(1663, 5, 16384, FORK_MAIN, 8);

    /* Nothing yet. */
    expect_versions(st, &k, LSN_MAX, NULL, 0, false);
    /* An incomplete chain: deltas only. */
    put_record(st, &k, 0x10, 64, false);
    put_record(st, &k, 0x20, 300, false);
    put_record(st, &other, 0x20, 64, true);
    store_advance(st, 0x20);
    expect_versions(st, &k, 0x20, (lsn_t[]){0x20, 0x10}, 2, false);
    expect_versions(st, &k, 0x1F, (lsn_t[]){0x10}, 1, false);
    expect_versions(st, &k, 0x0F, NULL, 0, false);
    expect_versions(st, &other, 0x30, (lsn_t[]){0x20}, 1, true); /* will_init stops the chain */

    put_page(st, &k, 0x30);
    put_record(st, &k, 0x40, 300, false);
    store_advance(st, 0x40);
    flush(st);
    assert_int_equal(store_disk_consistent_lsn(st), 0x40);
    expect_versions(st, &k, 0x40, (lsn_t[]){0x40, 0x30}, 2, true);
    expect_versions(st, &k, 0x2F, (lsn_t[]){0x20, 0x10}, 2, false);

    put_record(st, &k, 0x50, 64, false);
    put_record(st, &k, 0x60, 300, false);
    store_advance(st, 0x60);
    expect_versions(st, &k, LSN_MAX, (lsn_t[]){0x60, 0x50, 0x40, 0x30}, 4, true);
    flush(st);
    put_record(st, &k, 0x70, 64, false);
    store_advance(st, 0x70);
    expect_versions(st, &k, LSN_MAX, (lsn_t[]){0x70, 0x60, 0x50, 0x40, 0x30}, 5, true);
    expect_versions(st, &k, 0x55, (lsn_t[]){0x50, 0x40, 0x30}, 3, true);

    /* Image generation lands an image at an older LSN, in the open layer:
     * reads at or above it stop there. */
    uint8_t page[PG_BLCKSZ];
    make_page(page, k.blk, 0x60);
    char err[256];
    assert_int_equal(store_put_image(st, &k, 0x60, page, err, sizeof err), 0);
    expect_versions(st, &k, LSN_MAX, (lsn_t[]){0x70, 0x60}, 2, true);
    expect_versions(st, &k, 0x5F, (lsn_t[]){0x50, 0x40, 0x30}, 3, true);
    flush(st);
    expect_versions(st, &k, LSN_MAX, (lsn_t[]){0x70, 0x60}, 2, true);

    /* Bounded: a chain longer than max_versions is an error. */
    version_list *vl = NULL;
    assert_int_equal(store_get_versions(st, &k, 0x5F, 2, &vl, err, sizeof err), -1);
    assert_non_null(strstr(err, "chain too long"));
    assert_int_equal(store_get_versions(st, &k, 0x5F, 3, &vl, err, sizeof err), 0);
    version_list_free(vl);

    /* Puts must move forward (except images). */
    uint8_t rec[64];
    make_record(rec, 64, 7, 0x70);
    value_ref v = {VAL_WAL_RECORD, 0, 64, rec};
    assert_int_equal(store_put(st, &k, 0x70, &v, err, sizeof err), -1);
    /* Malformed values are refused at put. */
    rec[0] = 65;
    assert_int_equal(store_put(st, &k, 0x80, &v, err, sizeof err), -1);
    value_ref bad_img = {VAL_IMAGE, 0, 100, rec};
    assert_int_equal(store_put(st, &k, 0x80, &bad_img, err, sizeof err), -1);
    store_close(st);
}

static void test_get_latest(void **state)
{
    (void)state;
    store_options o = small_opts();
    store *st = open_store(&o);
    pg_key sz = pg_key_rel_size(1663, 5, 16384, FORK_MAIN);
    put_size(st, &sz, 0x100, 3);
    store_advance(st, 0x100);
    flush(st);
    put_size(st, &sz, 0x200, 9);
    store_advance(st, 0x200);
    value_ref out;
    lsn_t found;
    char err[256];
    assert_int_equal(store_get_latest(st, &sz, 0xFF, &out, &found, err, sizeof err), 0);
    assert_int_equal(store_get_latest(st, &sz, 0x1FF, &out, &found, err, sizeof err), 1);
    assert_int_equal(found, 0x100);
    assert_int_equal(out.kind, VAL_SIZE);
    assert_int_equal(out.payload[3], 3);
    free((void *)out.payload);
    assert_int_equal(store_get_latest(st, &sz, LSN_MAX, &out, &found, err, sizeof err), 1);
    assert_int_equal(found, 0x200);
    assert_int_equal(out.payload[3], 9);
    free((void *)out.payload);
    store_close(st);
}

typedef struct scan_rec {
    int n;
    pg_key keys[64];
    lsn_t lsn[64];
    uint8_t kind[64];
    uint32_t size[64];
} scan_rec;

static int scan_collect(const pg_key *k, lsn_t lsn, const value_ref *v, void *arg)
{
    scan_rec *r = arg;
    assert_true(r->n < 64);
    r->keys[r->n] = *k;
    r->lsn[r->n] = lsn;
    r->kind[r->n] = v->kind;
    r->size[r->n] = v->kind == VAL_SIZE ? (uint32_t)v->payload[3] : 0;
    r->n++;
    return 0;
}

static int scan_stop_after_two(const pg_key *k, lsn_t lsn, const value_ref *v, void *arg)
{
    (void)k;
    (void)lsn;
    (void)v;
    int *n = arg;
    return ++*n == 2;
}

static void test_scan_with_tombstones(void **state)
{
    (void)state;
    store_options o = small_opts();
    store *st = open_store(&o);
    /* Relations 100..105 of db 5, some in LMDB, some only in the layer, one
     * dropped; db 6's relation must not show up in db 5's range. */
    for (uint32_t r = 100; r < 104; r++) {
        pg_key k = pg_key_rel_size(1663, 5, r, FORK_MAIN);
        put_size(st, &k, 0x100 + r, r - 99);
    }
    pg_key elsewhere = pg_key_rel_size(1663, 6, 100, FORK_MAIN);
    put_size(st, &elsewhere, 0x200, 1);
    store_advance(st, 0x200);
    flush(st);
    pg_key k101 = pg_key_rel_size(1663, 5, 101, FORK_MAIN);
    put_tombstone(st, &k101, 0x300);
    pg_key k104 = pg_key_rel_size(1663, 5, 104, FORK_MAIN);
    put_size(st, &k104, 0x300, 7);
    pg_key k102 = pg_key_rel_size(1663, 5, 102, FORK_MAIN);
    put_size(st, &k102, 0x310, 42);
    store_advance(st, 0x310);

    pg_key from = pg_key_rel_size(1663, 5, 0, FORK_MAIN);
    pg_key to = pg_key_rel_size(1663, 6, 0, FORK_MAIN);
    char err[256];
    scan_rec r = {0};
    assert_int_equal(store_scan(st, &from, &to, LSN_MAX, scan_collect, &r, err, sizeof err), 0);
    assert_int_equal(r.n, 5);
    uint32_t want_rel[] = {100, 101, 102, 103, 104};
    uint8_t want_kind[] = {VAL_SIZE, VAL_TOMBSTONE, VAL_SIZE, VAL_SIZE, VAL_SIZE};
    uint32_t want_size[] = {1, 0, 42, 4, 7};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(r.keys[i].rel, want_rel[i]);
        assert_int_equal(r.keys[i].kind, KEY_REL_SIZE);
        assert_int_equal(r.kind[i], want_kind[i]);
        assert_int_equal(r.size[i], want_size[i]);
    }
    assert_int_equal(r.lsn[2], 0x310);
    /* At an older LSN: the state before the drop and the new relation. */
    memset(&r, 0, sizeof r);
    assert_int_equal(store_scan(st, &from, &to, 0x2FF, scan_collect, &r, err, sizeof err), 0);
    assert_int_equal(r.n, 4);
    assert_int_equal(r.kind[1], VAL_SIZE);
    assert_int_equal(r.size[2], 3);
    /* After flushing everything the answers are the same. */
    flush(st);
    memset(&r, 0, sizeof r);
    assert_int_equal(store_scan(st, &from, &to, LSN_MAX, scan_collect, &r, err, sizeof err), 0);
    assert_int_equal(r.n, 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(r.keys[i].rel, want_rel[i]);
        assert_int_equal(r.kind[i], want_kind[i]);
        assert_int_equal(r.size[i], want_size[i]);
    }
    /* A sub-range, and stopping early. */
    pg_key mid_from = pg_key_rel_size(1663, 5, 102, FORK_MAIN);
    pg_key mid_to = pg_key_rel_size(1663, 5, 104, FORK_MAIN);
    memset(&r, 0, sizeof r);
    assert_int_equal(store_scan(st, &mid_from, &mid_to, LSN_MAX, scan_collect, &r, err, sizeof err),
                     0);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.keys[0].rel, 102);
    assert_int_equal(r.keys[1].rel, 103);
    int seen = 0;
    assert_int_equal(
        store_scan(st, &from, &to, LSN_MAX, scan_stop_after_two, &seen, err, sizeof err), 0);
    assert_int_equal(seen, 2);
    store_close(st);
}

/* Without store_flush, an old open layer is frozen and flushed by the
 * background thread: disk_consistent_lsn follows ingest within max_age. */
static void test_age_freeze(void **state)
{
    (void)state;
    store_options o = small_opts();
    o.open_layer_max_age_ms = 200;
    store *st = open_store(&o);
    pg_key k = pg_key_rel_block(1663, 5, 16384, FORK_MAIN, 1);
    put_page(st, &k, 0x100);
    store_advance(st, 0x100);
    assert_int_equal(store_disk_consistent_lsn(st), 0);
    int waited = 0;
    while (store_disk_consistent_lsn(st) < 0x100 && waited < 5000) {
        usleep(10 * 1000);
        waited += 10;
    }
    assert_int_equal(store_disk_consistent_lsn(st), 0x100);
    assert_true(waited >= 150);
    /* Advancing without values also becomes durable (an empty layer). */
    store_advance(st, 0x200);
    waited = 0;
    while (store_disk_consistent_lsn(st) < 0x200 && waited < 5000) {
        usleep(10 * 1000);
        waited += 10;
    }
    assert_int_equal(store_disk_consistent_lsn(st), 0x200);
    store_close(st);
    st = open_store(&o);
    assert_int_equal(store_last_record_lsn(st), 0x200);
    expect_versions(st, &k, LSN_MAX, (lsn_t[]){0x100}, 1, true);
    store_close(st);
}

typedef struct hammer_arg {
    store *st;
    int steps;
    _Atomic int done;
    _Atomic int progress; /* steps completed */
    char err[512];
} hammer_arg;

static void *hammer_main(void *p)
{
    hammer_arg *a = p;
    for (int i = 0; i < a->steps; i++) {
        pg_key k = pg_key_rel_block(1663, 5, 1, FORK_MAIN, (uint32_t)(i % 97));
        uint8_t page[PG_BLCKSZ];
        make_page(page, k.blk, 0x100 + (lsn_t)i);
        value_ref v = {VAL_IMAGE, 0, PG_BLCKSZ, page};
        if (store_put(a->st, &k, 0x100 + (lsn_t)i, &v, a->err, sizeof a->err) != 0) {
            atomic_store(&a->done, -1);
            return NULL;
        }
        store_advance(a->st, 0x100 + (lsn_t)i);
        atomic_store(&a->progress, i + 1);
    }
    atomic_store(&a->done, 1);
    return NULL;
}

/* Regression: with a tiny open layer the frozen queue fills and the writer
 * waits for flushes while the background thread, which also freezes by age
 * (here: always), must not wait for the writer.  It once did: deadlock. */
static void test_writer_backpressure_no_deadlock(void **state)
{
    (void)state;
    store_options o = small_opts();
    o.open_layer_max_bytes = 4096;
    o.open_layer_max_age_ms = 0;
    store *st = open_store(&o);
    hammer_arg a = {.st = st, .steps = 3000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, hammer_main, &a), 0);
    /* A deadlock is no progress at all; each step may fsync a layer, which
     * takes long on a loaded machine, so judge progress, not total time. */
    int idle_ms = 0, seen = 0;
    while (atomic_load(&a.done) == 0 && idle_ms < 30000) {
        usleep(10 * 1000);
        int now = atomic_load(&a.progress);
        idle_ms = now == seen ? idle_ms + 10 : 0;
        seen = now;
    }
    if (atomic_load(&a.done) == 0)
        fail_msg("writer stuck at step %d for 30 s: deadlock between backpressure and age freezes",
                 seen);
    pthread_join(th, NULL);
    if (atomic_load(&a.done) < 0)
        fail_msg("put failed: %s", a.err);
    flush(st);
    assert_int_equal(store_disk_consistent_lsn(st), 0x100 + 2999);
    store_stats s;
    store_get_stats(st, &s);
    assert_true(s.flushes > 100);
    pg_key k = pg_key_rel_block(1663, 5, 1, FORK_MAIN, 5);
    lsn_t want = 0x100 + 2915; /* the last i with i % 97 == 5 */
    expect_versions(st, &k, LSN_MAX, &want, 1, true);
    store_close(st);
}

typedef struct waiter_arg {
    store *st;
    lsn_t lsn;
    int rc;
    uint64_t waited_ms;
} waiter_arg;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *waiter_main(void *p)
{
    waiter_arg *a = p;
    uint64_t t0 = now_ms();
    a->rc = store_wait_lsn(a->st, a->lsn, 5000);
    a->waited_ms = now_ms() - t0;
    return NULL;
}

static void test_wait_lsn(void **state)
{
    (void)state;
    store_options o = small_opts();
    store *st = open_store(&o);
    store_advance(st, 0x100);
    assert_int_equal(store_wait_lsn(st, 0x100, 0), 0);
    uint64_t t0 = now_ms();
    assert_int_equal(store_wait_lsn(st, 0x101, 150), -1);
    uint64_t waited = now_ms() - t0;
    assert_true(waited >= 140 && waited < 2000);
    waiter_arg a = {.st = st, .lsn = 0x200};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, waiter_main, &a), 0);
    usleep(100 * 1000);
    store_advance(st, 0x1FF); /* not enough */
    usleep(50 * 1000);
    store_advance(st, 0x200);
    pthread_join(th, NULL);
    assert_int_equal(a.rc, 0);
    assert_true(a.waited_ms >= 140 && a.waited_ms < 3000);
    store_close(st);
}

static void test_reopen_after_flush(void **state)
{
    (void)state;
    store_options o = small_opts();
    o.inline_max_bytes = 100;
    store *st = open_store(&o);
    pg_key k = pg_key_rel_block(1663, 5, 16384, FORK_MAIN, 1);
    pg_key sz = pg_key_rel_size(1663, 5, 16384, FORK_MAIN);
    put_page(st, &k, 0x100);
    put_record(st, &k, 0x200, 64, false);
    put_size(st, &sz, 0x200, 2);
    store_advance(st, 0x200);
    flush(st);
    put_record(st, &k, 0x300, 300, false); /* never flushed */
    store_advance(st, 0x300);
    store_stats s;
    store_get_stats(st, &s);
    assert_int_equal(s.flushes, 1);
    assert_int_equal(s.data_files, 1);
    assert_true(s.data_file_bytes > STORE_DF_HEADER_LEN + STORE_DF_BLOCK_HEADER_LEN);
    assert_true(s.index_bytes > 0);
    store_close(st);

    st = open_store(&o);
    assert_int_equal(store_last_record_lsn(st), 0x200);
    assert_int_equal(store_disk_consistent_lsn(st), 0x200);
    expect_versions(st, &k, LSN_MAX, (lsn_t[]){0x200, 0x100}, 2, true);
    value_ref out;
    lsn_t found;
    char err[256];
    assert_int_equal(store_get_latest(st, &sz, LSN_MAX, &out, &found, err, sizeof err), 1);
    assert_int_equal(out.payload[3], 2);
    free((void *)out.payload);
    /* Ingest resumes after disk_consistent_lsn: the lost value comes again. */
    put_record(st, &k, 0x300, 300, false);
    store_advance(st, 0x300);
    expect_versions(st, &k, LSN_MAX, (lsn_t[]){0x300, 0x200, 0x100}, 3, true);
    store_close(st);
}

/* A child ingests, flushes part, ingests more and is killed; the reopened
 * store has exactly the flushed part, and a data file written but never
 * indexed (as if the crash hit between file and LMDB commit) is removed. */
static void test_crash_recovery(void **state)
{
    (void)state;
    store_options o = small_opts();
    o.inline_max_bytes = 16;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        store *st = NULL;
        char err[256];
        if (store_open(storedir, &o, &st, err, sizeof err) != 0)
            _exit(2);
        for (uint32_t b = 0; b < 50; b++) {
            pg_key k = pg_key_rel_block(1663, 5, 1, FORK_MAIN, b);
            put_page(st, &k, 0x1000 + b);
        }
        store_advance(st, 0x1000 + 49);
        if (store_flush(st, err, sizeof err) != 0)
            _exit(3);
        for (uint32_t b = 0; b < 50; b++) {
            pg_key k = pg_key_rel_block(1663, 5, 1, FORK_MAIN, b);
            put_record(st, &k, 0x2000 + b, 64, false);
        }
        store_advance(st, 0x2000 + 49);
        if (write(pfd[1], "x", 1) != 1)
            _exit(4);
        pause();
        _exit(0);
    }
    close(pfd[1]);
    char c;
    assert_int_equal(read(pfd[0], &c, 1), 1);
    close(pfd[0]);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status));

    /* The orphan: a complete, valid data file that no index entry names,
     * plus a temporary file. */
    char data_dir[600], err[256];
    snprintf(data_dir, sizeof data_dir, "%s/data", storedir);
    store_df_writer *w;
    assert_int_equal(store_df_writer_open(data_dir, 0xABCDEF, 1, &w, err, sizeof err), 0);
    uint8_t ikey[PG_INDEX_KEY_LEN], val[VALUE_HEADER_LEN + 3];
    pg_key ok = pg_key_rel_block(1663, 5, 1, FORK_MAIN, 0);
    pg_index_key_encode(&ok, 0x9999, ikey);
    value_ref bv = {VAL_BLOB, 0, 3, (const uint8_t *)"abc"};
    value_encode(&bv, val, sizeof val);
    store_df_loc loc;
    assert_int_equal(store_df_writer_add(w, ikey, val, sizeof val, &loc, err, sizeof err), 0);
    uint64_t size;
    assert_int_equal(store_df_writer_finish(w, &size, err, sizeof err), 0);
    store_df_writer_free(w);
    char tmp[700];
    snprintf(tmp, sizeof tmp, "%s/0000000000000077.dat.tmp", data_dir);
    int fd = open(tmp, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(count_data_files(), 3);

    store *st = open_store(&o);
    assert_int_equal(store_last_record_lsn(st), 0x1000 + 49);
    assert_int_equal(store_disk_consistent_lsn(st), 0x1000 + 49);
    assert_int_equal(count_data_files(), 1); /* orphan and temp file gone */
    for (uint32_t b = 0; b < 50; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 1, FORK_MAIN, b);
        expect_versions(st, &k, LSN_MAX, (lsn_t[]){0x1000 + b}, 1, true);
    }
    store_close(st);
}

/* Two stores cannot share a directory; a data file the index lists but the
 * disk lacks is an error at open, not silently missing data. */
static void test_open_refuses_shared_or_damaged_dir(void **state)
{
    (void)state;
    store_options o = small_opts();
    store *st = open_store(&o);
    store *second = NULL;
    char err[512] = "";
    assert_int_equal(store_open(storedir, &o, &second, err, sizeof err), -1);
    assert_non_null(strstr(err, "in use"));
    pg_key k = pg_key_rel_block(1663, 5, 1, FORK_MAIN, 3);
    put_page(st, &k, 0x100);
    store_advance(st, 0x100);
    flush(st);
    store_close(st);
    char path[700];
    snprintf(path, sizeof path, "%s/data/0000000000000001.dat", storedir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(store_open(storedir, &o, &second, err, sizeof err), -1);
    assert_non_null(strstr(err, "0000000000000001.dat"));
}

/* A flipped byte in a data file is caught by the block checksum. */
static void test_corruption_detected(void **state)
{
    (void)state;
    store_options o = small_opts();
    store *st = open_store(&o);
    pg_key k = pg_key_rel_block(1663, 5, 1, FORK_MAIN, 3);
    put_page(st, &k, 0x100);
    store_advance(st, 0x100);
    flush(st);
    store_close(st);
    char data_dir[600];
    snprintf(data_dir, sizeof data_dir, "%s/data", storedir);
    DIR *d = opendir(data_dir);
    struct dirent *de;
    char path[1000] = "";
    while ((de = readdir(d)) != NULL)
        if (de->d_name[0] != '.')
            snprintf(path, sizeof path, "%s/%s", data_dir, de->d_name);
    closedir(d);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    off_t at = STORE_DF_HEADER_LEN + STORE_DF_BLOCK_HEADER_LEN + 10;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
    st = open_store(&o);
    version_list *vl = NULL;
    char err[512];
    assert_int_equal(store_get_versions(st, &k, LSN_MAX, 10, &vl, err, sizeof err), -1);
    assert_non_null(strstr(err, "checksum"));
    store_close(st);
}

/* GC at a horizon: readers at or above it see exactly what they saw before;
 * older versions are gone; a mostly dead data file is rewritten. */
static void test_gc(void **state)
{
    (void)state;
    store_options o = small_opts();
    o.inline_max_bytes = 100;
    store *st = open_store(&o);
    enum { NKEYS = 40 };
    /* Each key: image@1, 300-byte deltas @2..4, image@5, deltas @6..7 (LSN
     * units of 0x100). */
    for (int step = 1; step <= 7; step++) {
        for (uint32_t b = 0; b < NKEYS; b++) {
            pg_key k = pg_key_rel_block(1663, 5, 9, FORK_MAIN, b);
            lsn_t lsn = (lsn_t)step * 0x100 + b;
            if (step == 1 || step == 5)
                put_page(st, &k, lsn);
            else
                put_record(st, &k, lsn, 300, false);
        }
        store_advance(st, (lsn_t)step * 0x100 + 0xFF);
        flush(st); /* one data file per step */
    }
    pg_key sz = pg_key_rel_size(1663, 5, 9, FORK_MAIN);
    put_size(st, &sz, 0x800, 40);
    store_advance(st, 0x800);
    pg_key dropped = pg_key_rel_size(1663, 5, 10, FORK_MAIN);
    put_size(st, &dropped, 0x810, 1);
    store_advance(st, 0x810);
    put_tombstone(st, &dropped, 0x820);
    store_advance(st, 0x820);
    flush(st);
    store_stats before;
    store_get_stats(st, &before);
    assert_int_equal(before.data_files, 8);

    lsn_t horizon = 0x5FF; /* just after the second image of every key */
    char err[512];
    long removed = store_gc(st, horizon, err, sizeof err);
    if (removed < 0)
        fail_msg("store_gc: %s", err);
    /* 4 versions per key below the second image; the sizes are all above
     * the horizon. */
    assert_int_equal(removed, NKEYS * 4);
    for (uint32_t b = 0; b < NKEYS; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 9, FORK_MAIN, b);
        expect_versions(st, &k, horizon, (lsn_t[]){0x500 + b}, 1, true);
        expect_versions(st, &k, LSN_MAX, (lsn_t[]){0x700 + b, 0x600 + b, 0x500 + b}, 3, true);
        /* Below the horizon history is gone. */
        expect_versions(st, &k, 0x4FF, NULL, 0, false);
    }
    store_stats after;
    store_get_stats(st, &after);
    assert_int_equal(after.gc_removed, NKEYS * 4);
    /* The step-1 file held only images (all dead): dropped; steps 2-4 held
     * only dead deltas: dropped.  Steps 5-7 and the last (the sizes, inline
     * with their copies in a file) stay. */
    assert_int_equal(after.data_files, 4);
    assert_int_equal(count_data_files(), 4);
    assert_true(after.data_file_bytes < before.data_file_bytes);

    /* A horizon above the tombstone drops the dropped relation's size and
     * keeps its tombstone (a rebuild from data files must not bring the
     * size back: store_gc.c); the living one's size stays; the blocks'
     * newest image is still the one at step 5. */
    removed = store_gc(st, 0x900, err, sizeof err);
    assert_int_equal(removed, 1);
    value_ref out;
    lsn_t found;
    assert_int_equal(store_get_latest(st, &dropped, LSN_MAX, &out, &found, err, sizeof err), 1);
    assert_int_equal(out.kind, VAL_TOMBSTONE);
    assert_int_equal(found, 0x820);
    free((void *)out.payload);
    check_file_records(st);
    assert_int_equal(store_get_latest(st, &sz, LSN_MAX, &out, &found, err, sizeof err), 1);
    free((void *)out.payload);
    for (uint32_t b = 0; b < NKEYS; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 9, FORK_MAIN, b);
        expect_versions(st, &k, LSN_MAX, (lsn_t[]){0x700 + b, 0x600 + b, 0x500 + b}, 3, true);
    }
    /* Survives a restart. */
    store_close(st);
    st = open_store(&o);
    for (uint32_t b = 0; b < NKEYS; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 9, FORK_MAIN, b);
        expect_versions(st, &k, LSN_MAX, (lsn_t[]){0x700 + b, 0x600 + b, 0x500 + b}, 3, true);
    }
    store_close(st);
}

/* GC rewrites a file that is partly live: live entries move, the old file
 * goes, reads are unchanged. */
static void test_gc_rewrites_partly_live_file(void **state)
{
    (void)state;
    store_options o = small_opts();
    o.inline_max_bytes = 100;
    store *st = open_store(&o);
    enum { NKEYS = 30 };
    /* File 1: images of 30 keys at 0x100.  File 2: new images of keys
     * 5..29 at 0x200.  GC at 0x2FF kills 25 of file 1's 30 entries. */
    for (uint32_t b = 0; b < NKEYS; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 3, FORK_MAIN, b);
        put_page(st, &k, 0x100 + b);
    }
    store_advance(st, 0x1FF);
    flush(st);
    for (uint32_t b = 5; b < NKEYS; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 3, FORK_MAIN, b);
        put_page(st, &k, 0x200 + b);
    }
    store_advance(st, 0x2FF);
    flush(st);
    char err[512];
    long removed = store_gc(st, 0x2FF, err, sizeof err);
    assert_int_equal(removed, NKEYS - 5);
    store_stats s;
    store_get_stats(st, &s);
    /* File 1 had 30 images, 5 live (< half): rewritten into a new file. */
    assert_int_equal(s.data_files, 2);
    assert_int_equal(count_data_files(), 2);
    for (uint32_t b = 0; b < NKEYS; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 3, FORK_MAIN, b);
        lsn_t want = b < 5 ? 0x100 + b : 0x200 + b;
        expect_versions(st, &k, LSN_MAX, &want, 1, true);
    }
    store_close(st);
    st = open_store(&o);
    for (uint32_t b = 0; b < 5; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 3, FORK_MAIN, b);
        lsn_t want = 0x100 + b;
        expect_versions(st, &k, LSN_MAX, &want, 1, true);
    }
    store_close(st);
}

/* Every data file's record says how many entries (and bytes) the index
 * still points at; GC picks files to rewrite by those counts.  Checks the
 * records against a count made from the index itself; returns the number
 * of files. */
static int check_file_records(store *st)
{
    enum { MAXF = 64 };
    uint64_t ids[MAXF], live_values[MAXF] = {0}, live_bytes[MAXF] = {0};
    int nfiles = 0;
    MDB_txn *txn;
    assert_int_equal(mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn), 0);
    MDB_cursor *cur;
    MDB_val k, v;
    assert_int_equal(mdb_cursor_open(txn, st->dbi_index, &cur), 0);
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        store_idxv iv;
        const char *why = NULL;
        assert_int_equal(store_idxv_decode(v.mv_data, v.mv_size, &iv, &why), 0);
        if (!store_idxv_in_file(&iv))
            continue;
        int i = 0;
        while (i < nfiles && ids[i] != iv.file_id)
            i++;
        if (i == nfiles) {
            assert_true(nfiles < MAXF);
            ids[nfiles++] = iv.file_id;
        }
        live_values[i]++;
        live_bytes[i] += iv.entry_len;
    }
    mdb_cursor_close(cur);
    int records = 0;
    assert_int_equal(mdb_cursor_open(txn, st->dbi_files, &cur), 0);
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        store_file_rec r;
        assert_int_equal(store_file_rec_decode(v.mv_data, v.mv_size, &r), 0);
        uint64_t id = get_be64(k.mv_data);
        int i = 0;
        while (i < nfiles && ids[i] != id)
            i++;
        uint64_t want_values = i < nfiles ? live_values[i] : 0;
        uint64_t want_bytes = i < nfiles ? live_bytes[i] : 0;
        if (r.live_values != want_values || r.live_bytes != want_bytes)
            fail_msg("file %llu: record says %llu live entries (%llu bytes), the index points "
                     "at %llu (%llu bytes)",
                     (unsigned long long)id, (unsigned long long)r.live_values,
                     (unsigned long long)r.live_bytes, (unsigned long long)want_values,
                     (unsigned long long)want_bytes);
        assert_true(r.live_values <= r.values && r.live_bytes <= r.value_bytes);
        records++;
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    /* No index entry points at a file without a record. */
    assert_int_equal(records, nfiles);
    return records;
}

static void test_file_records_count_live_entries(void **state)
{
    (void)state;
    store_options o = small_opts();
    o.inline_max_bytes = 100;
    store *st = open_store(&o);
    enum { NKEYS = 30 };
    /* File 1: images of 30 keys at 0x100.  File 2: new images of keys
     * 0..9 at 0x200.  GC at 0x2FF kills 10 of file 1's entries, too few
     * for a rewrite: the record must lose exactly those. */
    for (uint32_t b = 0; b < NKEYS; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 3, FORK_MAIN, b);
        put_page(st, &k, 0x100 + b);
    }
    store_advance(st, 0x1FF);
    flush(st);
    assert_int_equal(check_file_records(st), 1);
    for (uint32_t b = 0; b < 10; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 3, FORK_MAIN, b);
        put_page(st, &k, 0x200 + b);
    }
    store_advance(st, 0x2FF);
    flush(st);
    assert_int_equal(check_file_records(st), 2);
    char err[512];
    assert_int_equal(store_gc(st, 0x2FF, err, sizeof err), 10);
    assert_int_equal(check_file_records(st), 2);
    /* A second GC at a horizon where file 1 is under half live rewrites it:
     * the counts follow the entries into the new file. */
    for (uint32_t b = 10; b < 25; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 3, FORK_MAIN, b);
        put_page(st, &k, 0x300 + b);
    }
    store_advance(st, 0x3FF);
    flush(st);
    assert_int_equal(store_gc(st, 0x3FF, err, sizeof err), 15);
    check_file_records(st);
    store_close(st);
}

/* ---- every value in a data file; rebuilding from data files ---- */

/* The data files of storedir, copied to dir/data (dir created). */
static void copy_data_files(const char *dir)
{
    char src[600], dst[600];
    snprintf(src, sizeof src, "%s/data", storedir);
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(dst, sizeof dst, "%s/data", dir);
    assert_int_equal(mkdir(dst, 0700), 0);
    DIR *d = opendir(src);
    assert_non_null(d);
    struct dirent *de;
    static uint8_t buf[1 << 16];
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char a[900], b[900];
        snprintf(a, sizeof a, "%s/%s", src, de->d_name);
        snprintf(b, sizeof b, "%s/%s", dst, de->d_name);
        int in = open(a, O_RDONLY), out = open(b, O_WRONLY | O_CREAT | O_EXCL, 0600);
        assert_true(in >= 0 && out >= 0);
        ssize_t n;
        while ((n = read(in, buf, sizeof buf)) > 0)
            assert_int_equal(write(out, buf, (size_t)n), n);
        assert_int_equal(n, 0);
        close(in);
        close(out);
    }
    closedir(d);
}

static void expect_same_versions(store *a, store *b, const pg_key *k, lsn_t at)
{
    version_list *va = NULL, *vb = NULL;
    char err[512], kb[96];
    if (store_get_versions(a, k, at, 1000, &va, err, sizeof err) != 0 ||
        store_get_versions(b, k, at, 1000, &vb, err, sizeof err) != 0)
        fail_msg("get_versions: %s", err);
    if (va->n != vb->n || va->complete != vb->complete)
        fail_msg("%s at %llx: %d versions (complete %d) vs %d (complete %d) rebuilt",
                 pg_key_format(k, kb, sizeof kb), (unsigned long long)at, va->n, va->complete,
                 vb->n, vb->complete);
    for (int i = 0; i < va->n; i++) {
        assert_int_equal(va->lsn[i], vb->lsn[i]);
        assert_int_equal(va->value[i].kind, vb->value[i].kind);
        assert_int_equal(va->value[i].flags, vb->value[i].flags);
        assert_int_equal(va->value[i].len, vb->value[i].len);
        if (va->value[i].len > 0)
            assert_memory_equal(va->value[i].payload, vb->value[i].payload, va->value[i].len);
    }
    version_list_free(va);
    version_list_free(vb);
    value_ref la, lb;
    lsn_t fa = 0, fb = 0;
    int ra = store_get_latest(a, k, at, &la, &fa, err, sizeof err);
    int rb = store_get_latest(b, k, at, &lb, &fb, err, sizeof err);
    assert_true(ra >= 0 && rb >= 0);
    assert_int_equal(ra, rb);
    if (ra == 1) {
        assert_int_equal(fa, fb);
        assert_int_equal(la.kind, lb.kind);
        assert_int_equal(la.len, lb.len);
        if (la.len > 0)
            assert_memory_equal(la.payload, lb.payload, la.len);
        free((void *)la.payload);
        free((void *)lb.payload);
    }
}

typedef struct scan_all {
    int n, cap;
    pg_key *keys;
    lsn_t *lsn;
    uint8_t *kind;
    uint32_t *len;
} scan_all;

static int scan_all_fn(const pg_key *k, lsn_t lsn, const value_ref *v, void *arg)
{
    scan_all *r = arg;
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 256;
        r->keys = realloc(r->keys, (size_t)r->cap * sizeof *r->keys);
        r->lsn = realloc(r->lsn, (size_t)r->cap * sizeof *r->lsn);
        r->kind = realloc(r->kind, (size_t)r->cap);
        r->len = realloc(r->len, (size_t)r->cap * sizeof *r->len);
        assert_true(r->keys && r->lsn && r->kind && r->len);
    }
    r->keys[r->n] = *k;
    r->lsn[r->n] = lsn;
    r->kind[r->n] = v->kind;
    r->len[r->n] = v->len;
    r->n++;
    return 0;
}

static void expect_same_scan(store *a, store *b, const pg_key *from, const pg_key *to, lsn_t at)
{
    scan_all ra = {0}, rb = {0};
    char err[256];
    assert_int_equal(store_scan(a, from, to, at, scan_all_fn, &ra, err, sizeof err), 0);
    assert_int_equal(store_scan(b, from, to, at, scan_all_fn, &rb, err, sizeof err), 0);
    assert_int_equal(ra.n, rb.n);
    for (int i = 0; i < ra.n; i++) {
        assert_int_equal(pg_key_compare(&ra.keys[i], &rb.keys[i]), 0);
        assert_int_equal(ra.lsn[i], rb.lsn[i]);
        assert_int_equal(ra.kind[i], rb.kind[i]);
        assert_int_equal(ra.len[i], rb.len[i]);
    }
    free(ra.keys), free(ra.lsn), free(ra.kind), free(ra.len);
    free(rb.keys), free(rb.lsn), free(rb.kind), free(rb.len);
}

enum { RB_BLOCKS = 120, RB_DROPPED_BLOCKS = 40, RB_STEPS = 24 };

static lsn_t rb_step_end(int s)
{
    return (lsn_t)s * 0x10000 + 0xFFFF;
}

/* Every key the rebuild test writes. */
static int rb_keys(pg_key *out)
{
    int n = 0;
    for (uint32_t b = 0; b < RB_BLOCKS; b++)
        out[n++] = pg_key_rel_block(1663, 5, 9, FORK_MAIN, b);
    for (uint32_t b = 0; b < RB_DROPPED_BLOCKS; b++)
        out[n++] = pg_key_rel_block(1663, 5, 10, FORK_MAIN, b);
    out[n++] = pg_key_rel_size(1663, 5, 9, FORK_MAIN);
    out[n++] = pg_key_rel_size(1663, 5, 10, FORK_MAIN);
    out[n++] = pg_key_rel_size(1663, 5, 11, FORK_MAIN);
    return n;
}

/* Step s of the rebuild test's history: deltas (small ones inline, larger
 * ones in the file), images, images replacing deltas at their own LSN (the
 * same (key, LSN) in two files), sizes, and a relation dropped at step 10
 * whose older versions stay in files GC does not rewrite. */
static void rb_step(store *st, int s, uint32_t *rng)
{
    lsn_t base = (lsn_t)s * 0x10000;
    for (uint32_t b = 0; b < RB_BLOCKS; b++) {
        *rng = *rng * 1103515245u + 12345u;
        uint32_t r = (*rng >> 8) % 100;
        if (s > 1 && r >= 60)
            continue; /* not touched this step */
        pg_key k = pg_key_rel_block(1663, 5, 9, FORK_MAIN, b);
        lsn_t lsn = base + 0x10 + b * 0x20;
        if (s == 1 || r < 8)
            put_page(st, &k, lsn);
        else
            put_record(st, &k, lsn, r < 40 ? 40 : 300, false);
    }
    if (s <= 9) {
        for (uint32_t b = 0; b < RB_DROPPED_BLOCKS; b++) {
            pg_key k = pg_key_rel_block(1663, 5, 10, FORK_MAIN, b);
            lsn_t lsn = base + 0x18 + b * 0x20;
            if (s == 1)
                put_page(st, &k, lsn);
            else
                put_record(st, &k, lsn, 40, false);
        }
    }
    pg_key sz9 = pg_key_rel_size(1663, 5, 9, FORK_MAIN);
    put_size(st, &sz9, base + 0x8000, RB_BLOCKS + (uint32_t)s);
    pg_key sz10 = pg_key_rel_size(1663, 5, 10, FORK_MAIN);
    pg_key sz11 = pg_key_rel_size(1663, 5, 11, FORK_MAIN);
    if (s == 1)
        put_size(st, &sz10, base + 0x8010, RB_DROPPED_BLOCKS);
    if (s == 10)
        put_tombstone(st, &sz10, base + 0x8010);
    if (s == 3)
        put_size(st, &sz11, base + 0x8020, 1);
    if (s == 5)
        put_tombstone(st, &sz11, base + 0x8020);
    store_advance(st, base + 0x9000);
    /* Image generation: pages materialised at the LSN of a delta of an
     * earlier step (often flushed already), replacing it. */
    if (s >= 3 && s % 2 == 1) {
        for (uint32_t b = (uint32_t)s % 7; b < RB_BLOCKS; b += 7) {
            pg_key k = pg_key_rel_block(1663, 5, 9, FORK_MAIN, b);
            version_list *vl = NULL;
            char err[256];
            assert_int_equal(
                store_get_versions(st, &k, base - 0x10000 + 0xFFFF, 1000, &vl, err, sizeof err), 0);
            if (vl->n > 0 && vl->value[0].kind == VAL_WAL_RECORD) {
                uint8_t page[PG_BLCKSZ];
                make_page(page, b, vl->lsn[0]);
                if (store_put_image(st, &k, vl->lsn[0], page, err, sizeof err) != 0)
                    fail_msg("store_put_image: %s", err);
            }
            version_list_free(vl);
        }
    }
    store_advance(st, rb_step_end(s));
}

static bool rb_files_from(uint64_t first_id)
{
    char d[600];
    snprintf(d, sizeof d, "%s/data", storedir);
    DIR *dir = opendir(d);
    assert_non_null(dir);
    struct dirent *de;
    bool found = false;
    uint64_t id;
    while ((de = readdir(dir)) != NULL)
        if (store_df_parse_name(de->d_name, &id) && id >= first_id)
            found = true;
    closedir(dir);
    return found;
}

/* Builds a store through puts, flushes, replaced values and GCs that
 * rewrite files; rebuilds a copy of its data files alone; both answer the
 * same at LSNs at or above the GC horizon.  Fails if GC ever copies a dead
 * entry (a rebuild would let it win) or drops a value's only file copy. */
static void test_rebuild_from_data_files(void **state)
{
    (void)state;
    store_options o = small_opts();
    o.inline_max_bytes = 100; /* 40-byte deltas and sizes inline, the rest not */
    store *st = open_store(&o);
    uint32_t rng = 7;
    char err[512];
    lsn_t horizon = 0;
    bool rewrote = false;
    for (int s = 1; s <= RB_STEPS; s++) {
        rb_step(st, s, &rng);
        if (s % 3 != 2)
            flush(st); /* some files hold two steps */
        if (s == 12 || s == 18 || s == 22) {
            horizon = rb_step_end(s - 4);
            uint64_t next = atomic_load(&st->next_file_id);
            if (store_gc(st, horizon, err, sizeof err) < 0)
                fail_msg("store_gc: %s", err);
            rewrote |= rb_files_from(next);
            check_file_records(st);
        }
    }
    flush(st);
    /* The test needs rewrites (a rewritten file is newer than the files
     * that hold dead copies of its entries). */
    assert_true(rewrote);
    lsn_t consistent = store_disk_consistent_lsn(st);
    uint64_t next_id = atomic_load(&st->next_file_id);
    store_close(st);

    char rdir[600];
    snprintf(rdir, sizeof rdir, "%s/rebuilt", tmpdir);
    copy_data_files(rdir);
    store_rebuild_stats rs;
    if (store_rebuild(rdir, &o, consistent, next_id, &rs, err, sizeof err) != 0)
        fail_msg("store_rebuild: %s", err);
    assert_true(rs.files > 0 && rs.entries > 0);
    assert_true(rs.replaced > 0); /* the images at the LSN of deltas */
    assert_true(rs.max_lsn <= consistent);

    st = open_store(&o);
    store *rb = NULL;
    if (store_open(rdir, &o, &rb, err, sizeof err) != 0)
        fail_msg("open rebuilt store: %s", err);
    assert_int_equal(store_disk_consistent_lsn(rb), consistent);
    assert_int_equal(atomic_load(&rb->next_file_id), next_id);
    check_file_records(rb);
    pg_key keys[RB_BLOCKS + RB_DROPPED_BLOCKS + 3];
    int nkeys = rb_keys(keys);
    lsn_t at[] = {horizon,         horizon + 0x8010,         rb_step_end(19) + 0x7000,
                  rb_step_end(21), rb_step_end(23) + 0x8000, LSN_MAX};
    pg_key from = {.kind = KEY_REL_BLOCK}, to = {.kind = KEY_CONTROL, .spc = UINT32_MAX};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        for (int j = 0; j < nkeys; j++)
            expect_same_versions(st, rb, &keys[j], at[i]);
        expect_same_scan(st, rb, &from, &to, at[i]);
    }
    /* GC of the rebuilt store at the same horizon takes what came back;
     * the answers stay the same and the records right. */
    if (store_gc(rb, horizon, err, sizeof err) < 0)
        fail_msg("store_gc on the rebuilt store: %s", err);
    check_file_records(rb);
    for (int j = 0; j < nkeys; j++)
        expect_same_versions(st, rb, &keys[j], horizon);
    store_close(rb);
    store_close(st);

    /* A rebuild refuses an existing index, and a damaged file. */
    assert_int_not_equal(store_rebuild(rdir, &o, consistent, next_id, NULL, err, sizeof err), 0);
    assert_non_null(strstr(err, "without an index"));
    char rdir2[600];
    snprintf(rdir2, sizeof rdir2, "%s/damaged", tmpdir);
    copy_data_files(rdir2);
    assert_int_not_equal(store_rebuild(rdir2, &o, consistent, 1, NULL, err, sizeof err), 0);
    assert_non_null(strstr(err, "outside"));
}

/* Rebuilds a copy of the store's data files (the store is closed and
 * reopened around it) and returns the rebuilt store, open. */
static store *rebuild_copy(store **st, const store_options *o, const char *name)
{
    lsn_t consistent = store_disk_consistent_lsn(*st);
    uint64_t next_id = atomic_load(&(*st)->next_file_id);
    store_close(*st);
    char rdir[600], err[512];
    snprintf(rdir, sizeof rdir, "%s/%s", tmpdir, name);
    copy_data_files(rdir);
    if (store_rebuild(rdir, o, consistent, next_id, NULL, err, sizeof err) != 0)
        fail_msg("store_rebuild: %s", err);
    store *rb = NULL;
    if (store_open(rdir, o, &rb, err, sizeof err) != 0)
        fail_msg("open rebuilt store: %s", err);
    *st = open_store(o);
    return rb;
}

/* The two ways a dead copy could win a rebuild, each built on purpose.
 * (1) Two small values at one (key, LSN) in two files (a freeze between two
 * puts of one record), then GC rewrites the older file: the dead copy must
 * not move into the rewritten, newer file.  (2) A size, then a tombstone in
 * a file GC rewrites while the size's file stays: the tombstone must stay,
 * or the rebuild brings the size back. */
static void test_rebuild_never_lets_a_dead_copy_win(void **state)
{
    (void)state;
    store_options o = small_opts();
    o.inline_max_bytes = 100;
    store *st = open_store(&o);
    pg_key k1 = pg_key_rel_block(1663, 5, 20, FORK_MAIN, 0);
    pg_key sz = pg_key_rel_size(1663, 5, 21, FORK_MAIN);
    /* File 1: the size, and images of relation 23 that stay (the file is
     * never rewritten). */
    put_size(st, &sz, 0x90, 3);
    for (uint32_t b = 0; b < 4; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 23, FORK_MAIN, b);
        put_page(st, &k, 0xA0 + b);
    }
    store_advance(st, 0xFF);
    flush(st);
    /* File 2: k1@0x100 (40 bytes) and images of blocks 0..11 of relation
     * 22 (10 die later, 2 stay). */
    put_record(st, &k1, 0x100, 40, true);
    for (uint32_t b = 0; b < 12; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 22, FORK_MAIN, b);
        put_page(st, &k, 0x110 + b);
    }
    flush(st); /* no advance: the record at 0x100 is not complete yet */
    /* File 3: the rest of that record puts k1@0x100 again (60 bytes). */
    put_record(st, &k1, 0x100, 60, true);
    store_advance(st, 0x1FF);
    flush(st);
    /* File 4: the tombstone, and relation 24's images (all die later) with
     * one that stays. */
    put_tombstone(st, &sz, 0x200);
    for (uint32_t b = 0; b < 10; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 24, FORK_MAIN, b);
        put_page(st, &k, 0x210 + b);
    }
    store_advance(st, 0x2FF);
    flush(st);
    /* File 5: newer images of relation 22 blocks 2..11 and relation 24
     * blocks 1..9. */
    for (uint32_t b = 2; b < 12; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 22, FORK_MAIN, b);
        put_page(st, &k, 0x300 + b);
    }
    for (uint32_t b = 1; b < 10; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 24, FORK_MAIN, b);
        put_page(st, &k, 0x340 + b);
    }
    store_advance(st, 0x3FF);
    flush(st);
    char err[512];
    uint64_t next = atomic_load(&st->next_file_id);
    if (store_gc(st, 0x3FF, err, sizeof err) < 0)
        fail_msg("store_gc: %s", err);
    assert_true(rb_files_from(next)); /* files 2 and 4 were rewritten */
    check_file_records(st);
    store *rb = rebuild_copy(&st, &o, "rebuilt");
    check_file_records(rb);
    lsn_t at[] = {0x3FF, LSN_MAX};
    for (int i = 0; i < 2; i++) {
        expect_same_versions(st, rb, &k1, at[i]);
        expect_same_versions(st, rb, &sz, at[i]);
    }
    version_list *vl = NULL;
    assert_int_equal(store_get_versions(rb, &k1, LSN_MAX, 10, &vl, err, sizeof err), 0);
    assert_int_equal(vl->n, 1);
    assert_int_equal(vl->value[0].len, 60);
    version_list_free(vl);
    store_close(rb);
    store_close(st);
}

/* A flipped byte in a data file fails the rebuild, naming the file. */
static void test_rebuild_refuses_damage(void **state)
{
    (void)state;
    store_options o = small_opts();
    store *st = open_store(&o);
    for (uint32_t b = 0; b < 20; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 9, FORK_MAIN, b);
        put_page(st, &k, 0x100 + b);
    }
    store_advance(st, 0x1FF);
    flush(st);
    uint64_t next_id = atomic_load(&st->next_file_id);
    store_close(st);
    char rdir[600], path[900];
    snprintf(rdir, sizeof rdir, "%s/rebuilt", tmpdir);
    copy_data_files(rdir);
    snprintf(path, sizeof path, "%s/data/%016llx.dat", rdir, 1ULL);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t c;
    assert_int_equal(pread(fd, &c, 1, 100), 1);
    c ^= 0x40;
    assert_int_equal(pwrite(fd, &c, 1, 100), 1);
    close(fd);
    char err[512];
    assert_int_not_equal(store_rebuild(rdir, &o, 0x1FF, next_id, NULL, err, sizeof err), 0);
    assert_non_null(strstr(err, "0000000000000001"));
    /* Truncated: the last block runs past the end. */
    snprintf(rdir, sizeof rdir, "%s/truncated", tmpdir);
    copy_data_files(rdir);
    snprintf(path, sizeof path, "%s/data/%016llx.dat", rdir, 1ULL);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - 10), 0);
    assert_int_not_equal(store_rebuild(rdir, &o, 0x1FF, next_id, NULL, err, sizeof err), 0);
    assert_non_null(strstr(err, "past the end"));
}

/* A store written before small values went to data files (index value tag
 * 1, no file copy) gets its inline values copied into a data file at open;
 * reads do not change, and data files alone then rebuild it. */
static void test_migrate_inline_only_store(void **state)
{
    (void)state;
    store_options o = small_opts();
    store *st = open_store(&o);
    for (uint32_t b = 0; b < 50; b++) {
        pg_key k = pg_key_rel_block(1663, 5, 9, FORK_MAIN, b);
        put_record(st, &k, 0x100 + b, 40, true);
    }
    store_advance(st, 0x1FF);
    flush(st);
    /* Make it what the old flush wrote: inline-only values, no file. */
    enum { NV = 50 };
    uint8_t keys[NV][PG_INDEX_KEY_LEN], vals[NV][128];
    size_t vlen[NV];
    MDB_txn *txn;
    MDB_cursor *cur;
    MDB_val k, v;
    int n = 0;
    assert_int_equal(mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn), 0);
    assert_int_equal(mdb_cursor_open(txn, st->dbi_index, &cur), 0);
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        assert_true(n < NV && v.mv_size < sizeof vals[0] && k.mv_size == PG_INDEX_KEY_LEN);
        assert_int_equal(((uint8_t *)v.mv_data)[0], STORE_IDXV_INLINE_FILE);
        memcpy(keys[n], k.mv_data, PG_INDEX_KEY_LEN);
        vals[n][0] = STORE_IDXV_INLINE;
        memcpy(vals[n] + 1, (uint8_t *)v.mv_data + STORE_IDXV_INLINE_FILE_HDR,
               v.mv_size - STORE_IDXV_INLINE_FILE_HDR);
        vlen[n] = v.mv_size - STORE_IDXV_INLINE_FILE_HDR + 1;
        n++;
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    assert_int_equal(mdb_txn_begin(st->env, NULL, 0, &txn), 0);
    for (int i = 0; i < n; i++) {
        MDB_val nk = {PG_INDEX_KEY_LEN, keys[i]}, nv = {vlen[i], vals[i]};
        assert_int_equal(mdb_put(txn, st->dbi_index, &nk, &nv, 0), 0);
    }
    assert_int_equal(n, 50);
    assert_int_equal(mdb_drop(txn, st->dbi_files, 0), 0);
    MDB_val fk = {6, (void *)"format"};
    assert_int_equal(mdb_del(txn, st->dbi_meta, &fk, NULL), 0);
    assert_int_equal(mdb_txn_commit(txn), 0);
    uint64_t next_id = atomic_load(&st->next_file_id);
    store_close(st);
    char path[900];
    snprintf(path, sizeof path, "%s/data/%016llx.dat", storedir, (unsigned long long)(next_id - 1));
    assert_int_equal(unlink(path), 0);
    assert_int_equal(count_data_files(), 0);

    st = open_store(&o);
    assert_int_equal(count_data_files(), 1);
    assert_int_equal(check_file_records(st), 1);
    for (uint32_t b = 0; b < 50; b++) {
        pg_key key = pg_key_rel_block(1663, 5, 9, FORK_MAIN, b);
        expect_versions(st, &key, LSN_MAX, (lsn_t[]){0x100 + b}, 1, true);
    }
    lsn_t consistent = store_disk_consistent_lsn(st);
    next_id = atomic_load(&st->next_file_id);
    store_close(st);
    /* Opening again migrates nothing more. */
    st = open_store(&o);
    assert_int_equal(count_data_files(), 1);
    store_close(st);
    char rdir[600];
    snprintf(rdir, sizeof rdir, "%s/rebuilt", tmpdir);
    copy_data_files(rdir);
    char err[512];
    if (store_rebuild(rdir, &o, consistent, next_id, NULL, err, sizeof err) != 0)
        fail_msg("store_rebuild: %s", err);
    store *rb = NULL;
    if (store_open(rdir, &o, &rb, err, sizeof err) != 0)
        fail_msg("open rebuilt store: %s", err);
    st = open_store(&o);
    for (uint32_t b = 0; b < 50; b++) {
        pg_key key = pg_key_rel_block(1663, 5, 9, FORK_MAIN, b);
        expect_same_versions(st, rb, &key, LSN_MAX);
    }
    store_close(rb);
    store_close(st);
}

/* ---- concurrency ---- */

enum { CK_KEYS = 64, CK_STEPS = 6000, CK_READERS = 3 };

/* Step i writes key i % CK_KEYS at LSN (i + 1) * 16: an image every 5th
 * version of the key, otherwise a delta. */
static lsn_t ck_lsn(int i)
{
    return (lsn_t)(i + 1) * 16;
}

typedef struct ck_arg {
    store *st;
    _Atomic bool *done;
    _Atomic lsn_t *gc_horizon;
    long reads;
    int failures;
    char why[700];
} ck_arg;

static void *ck_reader(void *p)
{
    ck_arg *a = p;
    unsigned seed = (unsigned)(uintptr_t)a;
    while (!atomic_load(a->done)) {
        lsn_t at = store_last_record_lsn(a->st);
        if (at < 16)
            continue;
        uint32_t key = (uint32_t)rand_r(&seed) % CK_KEYS;
        /* Every step up to at is visible: the newest version of key <= at. */
        int last = (int)(at / 16) - 1;
        int newest = last - ((last - (int)key) % CK_KEYS + CK_KEYS) % CK_KEYS;
        pg_key k = pg_key_rel_block(1663, 5, 77, FORK_MAIN, key);
        version_list *vl = NULL;
        char err[512];
        if (store_get_versions(a->st, &k, at, 100, &vl, err, sizeof err) != 0) {
            a->failures++;
            snprintf(a->why, sizeof a->why, "get_versions: %s", err);
            continue;
        }
        a->reads++;
        if (at < atomic_load(a->gc_horizon)) {
            /* GC at a horizon above our read LSN may have run meanwhile:
             * only readers at or above the horizon are promised anything. */
            version_list_free(vl);
            continue;
        }
        if (newest < 0) {
            if (vl->n != 0) {
                a->failures++;
                snprintf(a->why, sizeof a->why, "key %u: found versions before its first", key);
            }
            version_list_free(vl);
            continue;
        }
        /* Expected chain: versions newest, newest-K, ... down to an image. */
        int i = newest, n = 0;
        bool bad = false;
        for (;; i -= CK_KEYS, n++) {
            if (n >= vl->n || vl->lsn[n] != ck_lsn(i)) {
                bad = true;
                break;
            }
            int version = i / CK_KEYS;
            const value_ref *v = &vl->value[n];
            if (version % 5 == 0) {
                uint8_t page[PG_BLCKSZ];
                make_page(page, key, ck_lsn(i));
                bad = v->kind != VAL_IMAGE || memcmp(v->payload, page, PG_BLCKSZ) != 0;
                n++;
                break;
            }
            uint8_t rec[512];
            make_record(rec, v->len, key, ck_lsn(i));
            if (v->kind != VAL_WAL_RECORD || memcmp(v->payload, rec, v->len) != 0) {
                bad = true;
                break;
            }
        }
        if (bad || n != vl->n || !vl->complete) {
            a->failures++;
            snprintf(a->why, sizeof a->why, "key %u at %llx: chain of %d, expected through step %d",
                     key, (unsigned long long)at, vl->n, newest);
        }
        version_list_free(vl);
    }
    return NULL;
}

static void test_concurrent_readers_during_ingest(void **state)
{
    (void)state;
    store_options o = small_opts();
    o.open_layer_max_bytes = 256 * 1024; /* many freezes and flushes */
    o.inline_max_bytes = 120;
    store *st = open_store(&o);
    _Atomic bool done = false;
    _Atomic lsn_t gc_horizon = 0;
    ck_arg args[CK_READERS];
    pthread_t th[CK_READERS];
    for (int r = 0; r < CK_READERS; r++) {
        args[r] = (ck_arg){.st = st, .done = &done, .gc_horizon = &gc_horizon};
        assert_int_equal(pthread_create(&th[r], NULL, ck_reader, &args[r]), 0);
    }
    long gc_removed = 0;
    for (int i = 0; i < CK_STEPS; i++) {
        uint32_t key = (uint32_t)(i % CK_KEYS);
        pg_key k = pg_key_rel_block(1663, 5, 77, FORK_MAIN, key);
        if ((i / CK_KEYS) % 5 == 0)
            put_page(st, &k, ck_lsn(i));
        else
            put_record(st, &k, ck_lsn(i), 64 + (uint32_t)(i % 3) * 100, false);
        store_advance(st, ck_lsn(i));
        if (i % 1500 == 1499) {
            char err[256];
            /* GC while reading: keeps everything a reader at >= horizon needs. */
            lsn_t h = ck_lsn(i - 700);
            atomic_store(&gc_horizon, h);
            long removed = store_gc(st, h, err, sizeof err);
            if (removed < 0)
                fail_msg("store_gc: %s", err);
            gc_removed += removed;
        }
    }
    flush(st);
    usleep(100 * 1000);
    atomic_store(&done, true);
    long reads = 0;
    for (int r = 0; r < CK_READERS; r++) {
        pthread_join(th[r], NULL);
        if (args[r].failures)
            fail_msg("reader %d: %d failures, last: %s", r, args[r].failures, args[r].why);
        reads += args[r].reads;
    }
    store_stats s;
    store_get_stats(st, &s);
    print_message("concurrent: %ld consistent reads during %d puts, %llu flushes, %llu data "
                  "files, %ld versions GCed\n",
                  reads, CK_STEPS, (unsigned long long)s.flushes, (unsigned long long)s.data_files,
                  gc_removed);
    assert_true(reads > 100);
    assert_true(gc_removed > 0);
    assert_true(s.flushes >= 5);
    store_close(st);
}

/* ---- out of space ---- */

static void test_out_of_space(void **state)
{
    (void)state;
    char mnt[300];
    snprintf(mnt, sizeof mnt, "%s/small", tmpdir);
    assert_int_equal(mkdir(mnt, 0700), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=3m") != 0) {
        print_message("skipping: cannot mount a small tmpfs (%s)\n", strerror(errno));
        skip();
    }
    snprintf(storedir, sizeof storedir, "%s/store", mnt);
    store_options o = small_opts();
    o.lmdb_map_size = 64u * 1024 * 1024;
    o.inline_max_bytes = 16;
    store *st = open_store(&o);
    /* Ballast leaves little room. */
    char ballast[400];
    snprintf(ballast, sizeof ballast, "%s/ballast", mnt);
    int fd = open(ballast, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    static uint8_t chunk[65536];
    memset(chunk, 0x5A, sizeof chunk);
    while (write(fd, chunk, sizeof chunk) > 0) {
    }
    close(fd);
    /* Again, leaving about 0.75 MB free. */
    unlink(ballast);
    fd = open(ballast, O_CREAT | O_WRONLY, 0600);
    for (int i = 0; i < 3 * 16 - 12; i++)
        assert_int_equal(write(fd, chunk, sizeof chunk), (ssize_t)sizeof chunk);
    close(fd);

    /* Puts into the open layer file until space runs out: a clear error. */
    char err[512] = "";
    int failed_at = -1;
    for (int i = 0; i < 400; i++) {
        pg_key k = pg_key_rel_block(1663, 5, 1, FORK_MAIN, (uint32_t)i);
        uint8_t page[PG_BLCKSZ];
        make_page(page, (uint32_t)i, 0x100 + (lsn_t)i);
        value_ref v = {VAL_IMAGE, 0, PG_BLCKSZ, page};
        if (store_put(st, &k, 0x100 + (lsn_t)i, &v, err, sizeof err) != 0) {
            failed_at = i;
            break;
        }
        store_advance(st, 0x100 + (lsn_t)i);
    }
    assert_true(failed_at > 0);
    assert_non_null(strstr(err, "No space left on device"));
    /* Flushing needs room for the data file too: it fails, nothing is lost. */
    int frc = store_flush(st, err, sizeof err);
    if (frc == 0) {
        print_message("flush found room (%s); checking consistency only\n", err);
    } else {
        assert_non_null(strstr(err, "No space left on device"));
        assert_int_equal(store_disk_consistent_lsn(st), 0);
        /* The frozen layer whose flush failed still serves reads. */
        for (int i = 0; i < failed_at; i += 7) {
            pg_key k = pg_key_rel_block(1663, 5, 1, FORK_MAIN, (uint32_t)i);
            expect_versions(st, &k, LSN_MAX, (lsn_t[]){0x100 + (lsn_t)i}, 1, true);
        }
        /* Still failing while the disk is full. */
        assert_int_equal(store_flush(st, err, sizeof err), -1);
    }
    /* Space returns: retry works, everything put is readable. */
    unlink(ballast);
    flush(st);
    assert_int_equal(store_disk_consistent_lsn(st), 0x100 + (lsn_t)failed_at - 1);
    for (int i = 0; i < failed_at; i++) {
        pg_key k = pg_key_rel_block(1663, 5, 1, FORK_MAIN, (uint32_t)i);
        expect_versions(st, &k, LSN_MAX, (lsn_t[]){0x100 + (lsn_t)i}, 1, true);
    }
    store_close(st);
    st = open_store(&o);
    assert_int_equal(store_disk_consistent_lsn(st), 0x100 + (lsn_t)failed_at - 1);
    pg_key k0 = pg_key_rel_block(1663, 5, 1, FORK_MAIN, 0);
    expect_versions(st, &k0, LSN_MAX, (lsn_t[]){0x100}, 1, true);
    store_close(st);
    umount(mnt);
    snprintf(storedir, sizeof storedir, "%s/store", tmpdir);
}

/* ---- timing ---- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Not a benchmark suite: one run that prints figures for the report.
 * 16000 pages x (image + 7 deltas of 100-300 bytes) ingested, flushed, then
 * get_versions latency for a hot key (cached block) and cold keys (each
 * needs a block read + decompression).  STORE_TIMING_SCALE multiplies N.
 */
static void test_timing(void **state)
{
    (void)state;
    int scale = getenv("STORE_TIMING_SCALE") ? atoi(getenv("STORE_TIMING_SCALE")) : 1;
    if (scale < 1)
        scale = 1;
    int npages = 16000 * scale;
    store_options o = small_opts();
    o.open_layer_max_bytes = (size_t)1 << 30; /* one flush, timed on its own */
    store *st = open_store(&o);
    uint8_t page[PG_BLCKSZ];
    uint8_t rec[400];
    char err[256];
    uint64_t t0 = now_ns();
    long puts = 0;
    uint64_t bytes = 0;
    lsn_t lsn = 0x1000;
    for (int round = 0; round < 8; round++) {
        for (int b = 0; b < npages; b++) {
            pg_key k = pg_key_rel_block(1663, 5, 1000 + (uint32_t)(b / 10000), FORK_MAIN,
                                        (uint32_t)b % 10000);
            lsn += 8;
            value_ref v;
            if (round == 0) {
                /* Half random, half zero: compresses about 2:1, like a
                 * half-full heap page, unlike make_page's pattern. */
                uint64_t x = lsn * 0x9E3779B97F4A7C15ULL + 1;
                for (int i = 0; i < PG_BLCKSZ / 2; i += 8) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    memcpy(page + i, &x, 8);
                }
                memset(page + PG_BLCKSZ / 2, 0, PG_BLCKSZ / 2);
                v = (value_ref){VAL_IMAGE, 0, PG_BLCKSZ, page};
            } else {
                uint32_t len = 100 + (uint32_t)((b * 7 + round) % 200);
                make_record(rec, len, k.blk, lsn);
                v = (value_ref){VAL_WAL_RECORD, 0, len, rec};
            }
            assert_int_equal(store_put(st, &k, lsn, &v, err, sizeof err), 0);
            store_advance(st, lsn);
            puts++;
            bytes += v.len;
        }
    }
    uint64_t t1 = now_ns();
    flush(st);
    uint64_t t2 = now_ns();
    store_stats s;
    store_get_stats(st, &s);
    double put_s = (double)(t1 - t0) / 1e9, flush_s = (double)(t2 - t1) / 1e9;

    enum { NS = 2000 };
    static uint64_t hot[NS], cold[NS];
    pg_key hk = pg_key_rel_block(1663, 5, 1000, FORK_MAIN, 5);
    for (int i = 0; i < NS; i++) {
        version_list *vl;
        uint64_t a = now_ns();
        assert_int_equal(store_get_versions(st, &hk, LSN_MAX, 100, &vl, err, sizeof err), 0);
        hot[i] = now_ns() - a;
        assert_int_equal(vl->n, 8);
        version_list_free(vl);
    }
    unsigned seed = 7;
    for (int i = 0; i < NS; i++) {
        /* A different key each time, spread so most blocks are not cached
         * (the cache holds 64 MB; the data is larger at scale >= 4). */
        int b = (int)((uint32_t)rand_r(&seed) % (uint32_t)npages);
        pg_key k =
            pg_key_rel_block(1663, 5, 1000 + (uint32_t)(b / 10000), FORK_MAIN, (uint32_t)b % 10000);
        version_list *vl;
        uint64_t a = now_ns();
        assert_int_equal(store_get_versions(st, &k, LSN_MAX, 100, &vl, err, sizeof err), 0);
        cold[i] = now_ns() - a;
        assert_int_equal(vl->n, 8);
        version_list_free(vl);
    }
    qsort(hot, NS, sizeof hot[0], cmp_u64);
    qsort(cold, NS, sizeof cold[0], cmp_u64);
    print_message("timing: %ld puts (%.1f MB payload) in %.2f s = %.0f puts/s, %.1f MB/s\n", puts,
                  (double)bytes / 1e6, put_s, (double)puts / put_s, (double)bytes / 1e6 / put_s);
    print_message(
        "timing: flush of %.1f MB in %.2f s = %.1f MB/s; data file %.1f MB, index %.1f MB\n",
        (double)bytes / 1e6, flush_s, (double)bytes / 1e6 / flush_s,
        (double)s.data_file_bytes / 1e6, (double)s.index_bytes / 1e6);
    print_message("timing: per value: %.1f data-file bytes, %.1f index bytes (payload %.1f)\n",
                  (double)s.data_file_bytes / (double)puts, (double)s.index_bytes / (double)puts,
                  (double)bytes / (double)puts);
    print_message("timing: get_versions (8-version chain) hot p50 %.1f us p99 %.1f us; "
                  "random keys p50 %.1f us p99 %.1f us\n",
                  (double)hot[NS / 2] / 1e3, (double)hot[NS * 99 / 100] / 1e3,
                  (double)cold[NS / 2] / 1e3, (double)cold[NS * 99 / 100] / 1e3);
    assert_int_equal(s.values_put, (uint64_t)puts);
    store_close(st);
}

static void count_commit(void *arg, uint64_t file_id, uint64_t size)
{
    (void)file_id;
    assert_true(size > 0);
    (*(int *)arg)++;
}

/* What the uploader reads (store_remote.c): every committed file with its
 * size and LSN range in one snapshot with disk_consistent_lsn, the commit
 * hook, the persisted upload state; and a file record written before the
 * LSN range was kept still decodes, with the widest range. */
static void test_remote_view(void **state)
{
    (void)state;
    store_options o;
    store_options_default(&o);
    o.inline_max_bytes = 0; /* as with --remote: every value in a data file */
    store *st = open_store(&o);
    int commits = 0;
    store_set_commit_hook(st, count_commit, &commits);
    char err[512];
    for (int round = 0; round < 2; round++) {
        for (uint32_t b = 0; b < 5; b++) {
            lsn_t lsn = 0x1000 + round * 0x1000 + b * 0x10;
            put_record(st, &(pg_key){.kind = KEY_REL_BLOCK, .spc = 1, .db = 2, .rel = 3, .blk = b},
                       lsn, 64, true);
            store_advance(st, lsn);
        }
        if (store_flush(st, err, sizeof err) != 0)
            fail_msg("store_flush: %s", err);
    }
    assert_int_equal(commits, 2);
    store_file_list l;
    if (store_list_files(st, &l, err, sizeof err) != 0)
        fail_msg("store_list_files: %s", err);
    assert_int_equal(l.n, 2);
    assert_true(l.files[0].id < l.files[1].id && l.files[1].id < l.next_file_id);
    assert_true(l.files[0].lsn_min == 0x1000 && l.files[0].lsn_max == 0x1040);
    assert_true(l.files[1].lsn_min == 0x2000 && l.files[1].lsn_max == 0x2040);
    assert_true(l.disk_consistent_lsn == store_disk_consistent_lsn(st));
    assert_true(l.remote_consistent_lsn == 0 && l.remote_seq == 0);
    for (size_t i = 0; i < l.n; i++) {
        char path[4400];
        struct stat sb;
        store_data_file_path(st, l.files[i].id, path, sizeof path);
        assert_int_equal(stat(path, &sb), 0);
        assert_int_equal((uint64_t)sb.st_size, l.files[i].size);
    }
    store_file_list_free(&l);
    assert_int_equal(store_set_remote_state(st, 0x1040, 7, err, sizeof err), 0);
    store_set_commit_hook(st, NULL, NULL);
    store_close(st);
    st = open_store(&o);
    assert_int_equal(store_list_files(st, &l, err, sizeof err), 0);
    assert_true(l.remote_consistent_lsn == 0x1040 && l.remote_seq == 7 && l.n == 2);
    store_file_list_free(&l);
    store_close(st);

    uint8_t old[STORE_FILE_REC_LEN_V1] = {0};
    put_be64(old, 4096);
    store_file_rec r;
    assert_int_equal(store_file_rec_decode(old, sizeof old, &r), 0);
    assert_true(r.file_size == 4096 && r.lsn_min == 0 && r.lsn_max == LSN_MAX);
    uint8_t rec[STORE_FILE_REC_LEN];
    r.lsn_min = 5;
    r.lsn_max = 4;
    store_file_rec_encode(&r, rec);
    assert_int_equal(store_file_rec_decode(rec, sizeof rec, &r), -1);
    assert_int_equal(store_file_rec_decode(rec, sizeof rec - 1, &r), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_versions_across_layers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_latest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan_with_tombstones, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait_lsn, setup, teardown),
        cmocka_unit_test_setup_teardown(test_age_freeze, setup, teardown),
        cmocka_unit_test_setup_teardown(test_writer_backpressure_no_deadlock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reopen_after_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_recovery, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_refuses_shared_or_damaged_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corruption_detected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gc_rewrites_partly_live_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_records_count_live_entries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuild_from_data_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuild_never_lets_a_dead_copy_win, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuild_refuses_damage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migrate_inline_only_store, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_readers_during_ingest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_space, setup, teardown),
        cmocka_unit_test_setup_teardown(test_timing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remote_view, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
