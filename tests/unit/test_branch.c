/*
 * Unit tests for branches (issue #15, pageserver/timeline/branch.c and the
 * read path of pageserver/timeline/read.c) on real timelines in a temporary directory: a
 * root timeline A whose store is filled directly, and a branch B of it at
 * 0x200 with a few values of its own.  Covers the read merge (own versions
 * over the ancestor's at the branch point, own tombstones hiding the
 * ancestor's relations, merged relation lists, sizes), reads below the
 * branch's start, the commit-time index (lsn_by_time through the branch
 * into its ancestor, "latest", too early), the GC cap at the lowest branch
 * point and its release, timeline.json's ancestor fields, opening a branch
 * without its ancestor, and the timestamp parser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/byteorder.h"
#include "base/failpoint.h"
#include "pageserver/timeline/timeline.h"

#define SPC 1663
#define DB 5

static char tmpdir[256], adir[512], bdir[512];
static strata_id tenant = {{1}}, ida = {{0xA}}, idb = {{0xB}};

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void make_page(uint8_t *page, uint32_t tag)
{
    for (int i = 0; i < PG_BLCKSZ; i++)
        page[i] = (uint8_t)((i % 89) ^ tag);
}

static void put(store *st, const pg_key *k, lsn_t lsn, uint8_t kind, const void *p, uint32_t len)
{
    value_ref v = {kind, 0, len, p};
    char err[256];
    if (store_put(st, k, lsn, &v, err, sizeof err) != 0)
        fail_msg("store_put: %s", err);
}

static void put_size(store *st, uint32_t rel, lsn_t lsn, uint32_t n)
{
    uint8_t b[4];
    put_be32(b, n);
    pg_key k = pg_key_rel_size(SPC, DB, rel, FORK_MAIN);
    put(st, &k, lsn, VAL_SIZE, b, 4);
}

static void put_image(store *st, uint32_t rel, uint32_t blk, lsn_t lsn, uint32_t tag)
{
    uint8_t page[PG_BLCKSZ];
    make_page(page, tag);
    pg_key k = pg_key_rel_block(SPC, DB, rel, FORK_MAIN, blk);
    put(st, &k, lsn, VAL_IMAGE, page, PG_BLCKSZ);
}

static void put_commit(store *st, lsn_t lsn, int64_t t)
{
    uint8_t b[8];
    put_le64(b, (uint64_t)t);
    pg_key k = {.kind = KEY_CHECKPOINT, .rel = KEY_CHECKPOINT_REL_COMMIT_TIME};
    put(st, &k, lsn, VAL_BLOB, b, 8);
}

static store *open_dir_store(const char *dir)
{
    char sdir[600], err[256];
    snprintf(sdir, sizeof sdir, "%s/store", dir);
    mkdir(sdir, 0700);
    store_options o;
    store_options_default(&o);
    o.lmdb_map_size = (size_t)1 << 28;
    store *st = NULL;
    if (store_open(sdir, &o, &st, err, sizeof err) != 0)
        fail_msg("store_open: %s", err);
    return st;
}

static void close_flushed(store *st, lsn_t last)
{
    char err[256];
    store_advance(st, last);
    if (store_flush(st, err, sizeof err) != 0)
        fail_msg("store_flush: %s", err);
    store_close(st);
}

static timeline_services services(uint64_t window)
{
    timeline_services s;
    memset(&s, 0, sizeof s);
    store_options_default(&s.store);
    s.store.lmdb_map_size = (size_t)1 << 28;
    s.image_threshold = -1;
    s.gc.pitr_window_bytes = window;
    return s;
}

/* A at 0x100..0x300 (rels 1, 2, 3; commits at 0x180, 0x200, 0x300), and the
 * branch B at 0x200 (own: rel 1 blk 1 at 0x280, rel 2 dropped, rel 4
 * created, a commit at 0x280). */
static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_branch.XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    snprintf(adir, sizeof adir, "%s/a", tmpdir);
    snprintf(bdir, sizeof bdir, "%s/b", tmpdir);
    mkdir(adir, 0700);
    mkdir(bdir, 0700);
    char err[256];
    store *st = open_dir_store(adir);
    put_size(st, 1, 0x100, 3);
    put_size(st, 2, 0x100, 1);
    put_size(st, 3, 0x100, 2);
    put_image(st, 1, 0, 0x100, 10);
    put_image(st, 1, 1, 0x100, 11);
    put_commit(st, 0x180, 1000);
    put_commit(st, 0x200, 2000);
    put_image(st, 1, 0, 0x300, 30); /* after the branch point */
    put_commit(st, 0x300, 3000);
    close_flushed(st, 0x300);
    timeline_meta ma = {.tenant = tenant, .timeline = ida, .start_lsn = 0x100};
    if (timeline_write_files(adir, &ma, LSN_INVALID, err, sizeof err) != 0)
        fail_msg("%s", err);

    timeline_meta mb = {.tenant = tenant,
                        .timeline = idb,
                        .start_lsn = 0x200,
                        .has_ancestor = true,
                        .ancestor_timeline = ida,
                        .ancestor_lsn = 0x200};
    timeline_services svc = services(0);
    if (timeline_build_branch(bdir, &mb, &svc, err, sizeof err) != 0)
        fail_msg("%s", err);
    st = open_dir_store(bdir);
    assert_int_equal(store_last_record_lsn(st), 0x200);
    put_image(st, 1, 1, 0x280, 28);
    pg_key dropped = pg_key_rel_size(SPC, DB, 2, FORK_MAIN);
    put(st, &dropped, 0x280, VAL_TOMBSTONE, NULL, 0);
    put_size(st, 4, 0x280, 1);
    put_commit(st, 0x280, 2500);
    close_flushed(st, 0x280);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

static void open_both(uint64_t window, timeline **a, timeline **b)
{
    char err[512];
    timeline_services svc = services(window);
    if (timeline_open(adir, &svc, 1, NULL, a, err, sizeof err) != 0)
        fail_msg("open A: %s", err);
    if (timeline_open(bdir, &svc, 2, *a, b, err, sizeof err) != 0)
        fail_msg("open B: %s", err);
    assert_ptr_equal(timeline_ancestor(*b), *a);
}

static void expect_page(timeline *tl, uint32_t rel, uint32_t blk, lsn_t lsn, uint32_t tag)
{
    uint8_t got[PG_BLCKSZ], want[PG_BLCKSZ];
    char err[512];
    if (timeline_get_rel_page(tl, SPC, DB, rel, FORK_MAIN, blk, lsn, got, NULL, err, sizeof err,
                              NULL) != 0)
        fail_msg("page %u/%u at %llx: %s", rel, blk, (unsigned long long)lsn, err);
    make_page(want, tag);
    assert_memory_equal(got, want, PG_BLCKSZ);
    /* The page service's fast path agrees. */
    assert_int_equal(timeline_get_rel_page_noredo(tl, SPC, DB, rel, FORK_MAIN, blk, lsn, got, err,
                                                  sizeof err, NULL),
                     0);
    assert_memory_equal(got, want, PG_BLCKSZ);
}

static int size_of(timeline *tl, uint32_t rel, lsn_t lsn)
{
    uint32_t n = 0;
    char err[512];
    int rc = timeline_rel_size(tl, SPC, DB, rel, FORK_MAIN, lsn, &n, err, sizeof err, NULL);
    if (rc < 0)
        fail_msg("rel_size: %s", err);
    return rc == 0 ? -1 : (int)n;
}

typedef struct rels_seen {
    uint32_t rel[8];
    int n;
} rels_seen;

static int note_rel(uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork, uint32_t nblocks,
                    void *arg)
{
    (void)spc;
    (void)db;
    (void)fork;
    (void)nblocks;
    rels_seen *r = arg;
    if (r->n < 8)
        r->rel[r->n++] = rel;
    return 0;
}

static void test_reads_merge_own_over_ancestor(void **state)
{
    (void)state;
    timeline *a, *b;
    open_both(0, &a, &b);
    /* Block 0: no own version, the ancestor's at the branch point (not its
     * newer 0x300 image). */
    expect_page(b, 1, 0, 0x280, 10);
    expect_page(a, 1, 0, 0x300, 30);
    /* Block 1: the branch's own image above the branch point. */
    expect_page(b, 1, 1, 0x280, 28);
    expect_page(b, 1, 1, 0x200, 11);
    expect_page(a, 1, 1, 0x300, 11);
    /* Sizes: through to the ancestor; an own tombstone hides it. */
    assert_int_equal(size_of(b, 1, 0x280), 3);
    assert_int_equal(size_of(b, 2, 0x200), 1);
    assert_int_equal(size_of(b, 2, 0x280), -1);
    assert_int_equal(size_of(b, 4, 0x200), -1);
    assert_int_equal(size_of(b, 4, 0x280), 1);
    assert_int_equal(size_of(a, 2, 0x300), 1);
    /* The relation list merges in key order, without the dropped one. */
    rels_seen r = {0};
    char err[512];
    assert_int_equal(timeline_list_rels(b, 0x280, note_rel, &r, err, sizeof err), 0);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.rel[0], 1);
    assert_int_equal(r.rel[1], 3);
    assert_int_equal(r.rel[2], 4);
    int64_t bytes = 0;
    assert_int_equal(timeline_db_size(b, DB, 0x280, &bytes, err, sizeof err, NULL), 0);
    assert_int_equal(bytes, (3 + 2 + 1) * PG_BLCKSZ);
    /* Below the branch's start: refused, naming it. */
    uint32_t n;
    const char *sqlstate = NULL;
    assert_int_equal(
        timeline_rel_size(b, SPC, DB, 1, FORK_MAIN, 0x1F8, &n, err, sizeof err, &sqlstate), -1);
    assert_non_null(strstr(err, "below the start 0/200"));
    assert_non_null(sqlstate);
    assert_int_equal(timeline_last_record_lsn(b), 0x280);
    timeline_unref(b);
    timeline_unref(a);
}

static void test_lsn_by_time_falls_through(void **state)
{
    (void)state;
    timeline *a, *b;
    open_both(0, &a, &b);
    lsn_t lsn;
    pg_timestamp ct;
    bool latest;
    int status = 0;
    char err[512];
    assert_int_equal(timeline_lsn_by_time(b, 2600, &lsn, &ct, &latest, &status, err, sizeof err),
                     0);
    assert_true(latest);
    assert_int_equal(lsn, 0x280);
    assert_int_equal(ct, 2500);
    assert_int_equal(timeline_lsn_by_time(b, 2499, &lsn, &ct, &latest, &status, err, sizeof err),
                     0);
    assert_false(latest);
    assert_int_equal(lsn, 0x200); /* the ancestor's commit below the branch point */
    assert_int_equal(ct, 2000);
    assert_int_equal(timeline_lsn_by_time(b, 1500, &lsn, &ct, &latest, &status, err, sizeof err),
                     0);
    assert_int_equal(lsn, 0x180);
    assert_int_equal(timeline_lsn_by_time(a, 2999, &lsn, &ct, &latest, &status, err, sizeof err),
                     0);
    assert_int_equal(lsn, 0x200); /* A never saw the branch's commit */
    assert_int_equal(timeline_lsn_by_time(a, 3000, &lsn, &ct, &latest, &status, err, sizeof err),
                     0);
    assert_true(latest);
    assert_int_equal(lsn, 0x300);
    assert_int_equal(timeline_lsn_by_time(b, 999, &lsn, &ct, &latest, &status, err, sizeof err),
                     -1);
    assert_int_equal(status, 400);
    assert_non_null(strstr(err, "before the readable window"));
    assert_non_null(strstr(err, "0/180"));
    timeline_unref(b);
    timeline_unref(a);
}

static void test_gc_is_capped_at_the_branch_point(void **state)
{
    (void)state;
    timeline *a, *b;
    open_both(0x10, &a, &b);
    char err[512];
    assert_int_equal(timeline_min_branch_lsn(a), 0x200);
    /* The window alone asks for 0x2F0: the branch holds it at 0x200. */
    assert_int_equal(timeline_gc_target(a, 0), 0x200);
    assert_true(timeline_gc(a, 0, err, sizeof err) >= 0);
    assert_int_equal(timeline_gc_horizon(a), 0x200);
    expect_page(b, 1, 0, 0x280, 10);
    /* A new branch below the horizon is refused. */
    strata_id idc = {{0xC}};
    assert_int_equal(timeline_add_branch(a, &idc, 0x180, err, sizeof err), -1);
    assert_non_null(strstr(err, "below the GC horizon 0/200"));
    /* Deleting the branch releases it. */
    timeline_mark_deleted(b, NULL);
    assert_int_equal(timeline_min_branch_lsn(a), LSN_MAX);
    assert_true(timeline_gc(a, 0, err, sizeof err) >= 0);
    assert_int_equal(timeline_gc_horizon(a), 0x2F0);
    timeline_unref(b);
    timeline_unref(a);
}

static void test_branch_needs_its_ancestor(void **state)
{
    (void)state;
    timeline *b = NULL;
    char err[512];
    timeline_services svc = services(0);
    assert_int_equal(timeline_open(bdir, &svc, 3, NULL, &b, err, sizeof err), -1);
    assert_non_null(strstr(err, "its ancestor is missing"));
    timeline_meta m;
    assert_int_equal(timeline_meta_read(bdir, &m, err, sizeof err), 0);
    assert_true(m.has_ancestor);
    assert_true(strata_id_equal(&m.ancestor_timeline, &ida));
    assert_int_equal(m.ancestor_lsn, 0x200);
    const char *bad[] = {
        "{\"tenant_id\":\"01000000000000000000000000000000\",\"timeline_id\":"
        "\"0b000000000000000000000000000000\",\"start_lsn\":\"0/200\",\"safekeepers\":[],"
        "\"ancestor_timeline_id\":\"0a000000000000000000000000000000\"}",
        "{\"tenant_id\":\"01000000000000000000000000000000\",\"timeline_id\":"
        "\"0b000000000000000000000000000000\",\"start_lsn\":\"0/200\",\"safekeepers\":[],"
        "\"ancestor_timeline_id\":\"0a000000000000000000000000000000\",\"ancestor_lsn\":\"0/100\"}",
        "{\"tenant_id\":\"01000000000000000000000000000000\",\"timeline_id\":"
        "\"0b000000000000000000000000000000\",\"start_lsn\":\"0/200\",\"safekeepers\":[],"
        "\"ancestor_timeline_id\":\"0b000000000000000000000000000000\",\"ancestor_lsn\":\"0/200\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(timeline_meta_parse(bad[i], strlen(bad[i]), "x", &m, err, sizeof err), -1);
        assert_non_null(strstr(err, "go together"));
    }
    char *text = timeline_meta_to_json(&(timeline_meta){.tenant = tenant,
                                                        .timeline = idb,
                                                        .start_lsn = 0x200,
                                                        .has_ancestor = true,
                                                        .ancestor_timeline = ida,
                                                        .ancestor_lsn = 0x200});
    assert_non_null(text);
    assert_int_equal(timeline_meta_parse(text, strlen(text), "x", &m, err, sizeof err), 0);
    assert_true(m.has_ancestor && m.ancestor_lsn == 0x200);
    free(text);
}

static void test_timestamps(void **state)
{
    (void)state;
    pg_timestamp t;
    assert_true(timeline_parse_time("2000-01-01 00:00:00+00", &t));
    assert_int_equal(t, 0);
    assert_true(timeline_parse_time("2000-01-01T00:00:01Z", &t));
    assert_int_equal(t, 1000000);
    assert_true(timeline_parse_time("2000-01-01 01:00:00+01:00", &t));
    assert_int_equal(t, 0);
    assert_true(timeline_parse_time("2000-01-01 00:00:00.5", &t));
    assert_int_equal(t, 500000);
    assert_true(timeline_parse_time("2000-01-01 00:00:00 00", &t)); /* '+' lost in a query */
    assert_int_equal(t, 0);
    assert_true(timeline_parse_time("2000-01-02", &t));
    assert_int_equal(t, 86400LL * 1000000);
    assert_true(timeline_parse_time("1999-12-31 23:00:00-0100", &t));
    assert_int_equal(t, 0);
    assert_true(timeline_parse_time("2024-02-29 12:00:00.123456789+00", &t));
    const char *bad[] = {"",
                         "yesterday",
                         "2026-02-30 00:00:00",
                         "2026-13-01",
                         "2026-01-01 24:00:00",
                         "2026-01-01 00:00:00+",
                         "2026-01-01 00:00:00.",
                         "2026-01-01 00:00:00Zjunk",
                         "2026-1-01"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(timeline_parse_time(bad[i], &t));
    char buf[48];
    assert_string_equal(timeline_format_time(0, buf, sizeof buf), "2000-01-01 00:00:00+00");
    assert_string_equal(timeline_format_time(1500000, buf, sizeof buf),
                        "2000-01-01 00:00:01.500000+00");
    assert_true(timeline_parse_time("2026-12-02 05:00:00.25+00", &t));
    assert_string_equal(timeline_format_time(t, buf, sizeof buf), "2026-12-02 05:00:00.250000+00");
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* With a reaper, dropping the last reference returns at once, however slow
 * the teardown (here 300 ms each, by failpoint); stopping the reaper waits
 * for every teardown, the ancestor's that the branch's released included,
 * and a deleted branch's directory is gone by then. */
static void test_reaper_tears_down_off_the_callers_thread(void **state)
{
    (void)state;
    char err[256];
    timeline_services svc = services(0);
    assert_int_equal(timeline_reaper_start(&svc.reaper, err, sizeof err), 0);
    timeline *a = NULL, *b = NULL;
    assert_int_equal(timeline_open(adir, &svc, 1, NULL, &a, err, sizeof err), 0);
    assert_int_equal(timeline_open(bdir, &svc, 2, a, &b, err, sizeof err), 0);
    setenv(FAILPOINT_ENV, "reaper.before_teardown=sleep:300", 1);
    failpoint_reload();
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    timeline_mark_deleted(b, NULL);
    timeline_unref(b);
    timeline_unref(a); /* B still holds A: A's teardown follows B's */
    assert_true(seconds_since(&t0) < 0.2);
    timeline_reaper_stop(svc.reaper);
    assert_true(seconds_since(&t0) >= 0.6);
    struct stat sb;
    assert_int_equal(stat(bdir, &sb), -1);
    assert_int_equal(stat(adir, &sb), 0);
    unsetenv(FAILPOINT_ENV);
    failpoint_reload();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reads_merge_own_over_ancestor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lsn_by_time_falls_through, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gc_is_capped_at_the_branch_point, setup, teardown),
        cmocka_unit_test_setup_teardown(test_branch_needs_its_ancestor, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reaper_tears_down_off_the_callers_thread, setup,
                                        teardown),
        cmocka_unit_test(test_timestamps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
