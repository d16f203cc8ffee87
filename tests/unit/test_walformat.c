/*
 * Unit tests for common/walformat*.c on real WAL captured from PostgreSQL 15
 * (tests/unit/data/README.md): the record-boundary tracker fed in chunks of
 * every small size and from every kind of start position must report exactly
 * the record ends pg_waldump implies; the reader must yield exactly
 * pg_waldump's records (start, length, rmgr, xid, prev, block references)
 * with valid CRCs; corruptions are refused with a reason.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/crc32c.h"
#include "pg/walformat.h"
#include "tests/sim/simwal.c"

#define SAMPLE_START ((lsn_t)0x7F0000)
#define SAMPLE_END ((lsn_t)0x900000) /* end of segment ...08, after XLOG_SWITCH */
#define SAMPLE_SEG_SIZE (1u << 20)
#define MAX_EXPECTED 1024
#define MAX_BLOCKS 33

typedef struct expected_block {
    int id;
    uint32_t spc, db, rel, blkno;
    int fork;
    int has_image;
} expected_block;

typedef struct expected_record {
    lsn_t start;
    uint32_t tot_len;
    int rmid;
    uint32_t xid;
    lsn_t prev;
    int nblocks;
    expected_block blocks[MAX_BLOCKS];
} expected_record;

/* Loaded once in group setup; read-only afterwards. */
static uint8_t *sample;
static size_t sample_len;
static expected_record *expected;
static int n_expected;
static lsn_t *boundaries; /* record ends implied by pg_waldump, ascending */
static int n_boundaries;

static const uint8_t *at_lsn(lsn_t lsn)
{
    assert_true(lsn >= SAMPLE_START && lsn <= SAMPLE_END);
    return sample + (lsn - SAMPLE_START);
}

/* A record starting right after a page header ended at the page boundary. */
static lsn_t end_before(lsn_t next_start)
{
    if (next_start % SAMPLE_SEG_SIZE == WAL_LONG_PHD_SIZE)
        return next_start - WAL_LONG_PHD_SIZE;
    if (next_start % WAL_BLCKSZ == WAL_SHORT_PHD_SIZE)
        return next_start - WAL_SHORT_PHD_SIZE;
    return next_start;
}

static int load_sample(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/unit/data/wal_sample_0_7F0000.bin", STRATA_SOURCE_DIR);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    sample_len = SAMPLE_END - SAMPLE_START;
    sample = calloc(1, sample_len); /* zeros: the padding after XLOG_SWITCH */
    size_t got = fread(sample, 1, sample_len, f);
    fclose(f);
    if (got != 0x3F300)
        return -1;

    snprintf(path, sizeof path, "%s/tests/unit/data/wal_sample.expected", STRATA_SOURCE_DIR);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    expected = calloc(MAX_EXPECTED, sizeof *expected);
    char line[256];
    while (fgets(line, sizeof line, f) != NULL) {
        if (line[0] == 'R') {
            if (n_expected == MAX_EXPECTED)
                return -1;
            expected_record *r = &expected[n_expected++];
            unsigned long long start, prev;
            if (sscanf(line, "R %llx %u %d %u %llx", &start, &r->tot_len, &r->rmid, &r->xid,
                       &prev) != 5)
                return -1;
            r->start = start;
            r->prev = prev;
        } else if (line[0] == 'B') {
            if (n_expected == 0)
                return -1;
            expected_record *r = &expected[n_expected - 1];
            if (r->nblocks == MAX_BLOCKS)
                return -1;
            expected_block *b = &r->blocks[r->nblocks++];
            if (sscanf(line, "B %d %u %u %u %d %u %d", &b->id, &b->spc, &b->db, &b->rel, &b->fork,
                       &b->blkno, &b->has_image) != 7)
                return -1;
        }
    }
    fclose(f);
    if (n_expected < 100)
        return -1;

    /* The continuation at SAMPLE_START ends where the first record starts;
     * each record ends where the next one starts; the last is XLOG_SWITCH. */
    boundaries = calloc((size_t)n_expected + 1, sizeof *boundaries);
    for (int i = 0; i < n_expected; i++)
        boundaries[n_boundaries++] = end_before(expected[i].start);
    boundaries[n_boundaries++] = SAMPLE_END;
    return 0;
}

static int free_sample(void **state)
{
    (void)state;
    free(sample);
    free(expected);
    free(boundaries);
    return 0;
}

/* The largest boundary <= pos (start if none), given boundaries > start. */
static lsn_t expected_last_end(lsn_t start, lsn_t pos, int *cursor)
{
    while (*cursor < n_boundaries && boundaries[*cursor] <= start)
        (*cursor)++;
    lsn_t best = start;
    int i = *cursor;
    while (i < n_boundaries && boundaries[i] <= pos)
        best = boundaries[i++];
    *cursor = i > *cursor ? i - 1 : *cursor;
    return best;
}

/*
 * Feeds [start, SAMPLE_END) in chunks chosen by chunk(i) and checks after
 * every feed that last_record_end is exactly the last record end fed.
 */
static void run_tracker(lsn_t start, size_t (*chunk)(size_t i, void *arg), void *arg)
{
    wal_tracker t;
    const char *why = NULL;
    int cursor = 0;
    wal_tracker_init(&t, start, SAMPLE_SEG_SIZE);
    assert_int_equal(wal_tracker_last_record_end(&t), start);
    lsn_t pos = start;
    for (size_t i = 0; pos < SAMPLE_END; i++) {
        size_t n = chunk(i, arg);
        if (n > SAMPLE_END - pos)
            n = (size_t)(SAMPLE_END - pos);
        int rc = wal_tracker_feed(&t, pos, at_lsn(pos), n, &why);
        if (rc != 0)
            fail_msg("tracker from %llX failed at %llX: %s", (unsigned long long)start,
                     (unsigned long long)pos, why);
        pos += n;
        assert_int_equal(wal_tracker_next(&t), pos);
        lsn_t want = expected_last_end(start, pos, &cursor);
        if (wal_tracker_last_record_end(&t) != want)
            fail_msg("from %llX after %llX: last_record_end %llX, want %llX",
                     (unsigned long long)start, (unsigned long long)pos,
                     (unsigned long long)wal_tracker_last_record_end(&t), (unsigned long long)want);
    }
    assert_int_equal(wal_tracker_last_record_end(&t), SAMPLE_END);
}

static size_t fixed_chunk(size_t i, void *arg)
{
    (void)i;
    return *(size_t *)arg;
}

static size_t random_chunk(size_t i, void *arg)
{
    (void)i;
    uint64_t *s = arg;
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    /* Mostly small, sometimes large, to cross pages at every offset. */
    return (*s & 3) == 0 ? 1 + (*s >> 8) % 40000 : 1 + (*s >> 8) % 97;
}

static void test_tracker_every_chunk_size(void **state)
{
    (void)state;
    /* Every size from 1 to 64, then a spread of sizes up to past a page and
     * a segment's worth; each checks all boundaries. */
    for (size_t size = 1; size <= 64; size++)
        run_tracker(SAMPLE_START, fixed_chunk, &size);
    const size_t more[] = {65,    100,   127,   1000,   4095,     4096,
                           4097,  8191,  8192,  8193,   8215,     12345,
                           16384, 30061, 65536, 131072, 1u << 20, SAMPLE_END - SAMPLE_START};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        run_tracker(SAMPLE_START, fixed_chunk, (void *)&more[i]);
    for (uint64_t seed = 1; seed <= 40; seed++) {
        uint64_t s = seed * 0x9E3779B97F4A7C15ull;
        run_tracker(SAMPLE_START, random_chunk, &s);
    }
}

static void test_tracker_start_positions(void **state)
{
    (void)state;
    size_t one = 1, odd = 777;
    /* Segment start in the middle of a record whose header is split over
     * the segment boundary (0/7FFFF0): the continuation is skipped. */
    run_tracker(0x800000, fixed_chunk, &one);
    run_tracker(0x800000, fixed_chunk, &odd);
    /* Every page boundary of the sample before the switch. */
    for (lsn_t p = SAMPLE_START; p < 0x830000; p += WAL_BLCKSZ)
        run_tracker(p, fixed_chunk, &odd);
    /* Record boundaries: every 7th record start, and record ends at page
     * boundaries (the start is then the page boundary itself). */
    for (int i = 0; i < n_expected; i += 7)
        run_tracker(expected[i].start, fixed_chunk, &odd);
    for (int i = 0; i < n_boundaries; i++)
        if (boundaries[i] % WAL_BLCKSZ == 0 && boundaries[i] < SAMPLE_END)
            run_tracker(boundaries[i], fixed_chunk, &one);
}

static void test_tracker_segment_start_boundary(void **state)
{
    (void)state;
    /* From the segment start, the first boundary is the end of the record
     * that began in the previous segment. */
    wal_tracker t;
    const char *why;
    wal_tracker_init(&t, 0x800000, SAMPLE_SEG_SIZE);
    int i = 0;
    while (expected[i].start < 0x800000)
        i++;
    assert_int_equal(expected[i - 1].start, 0x7FFFF0); /* spans the segments */
    lsn_t pos = 0x800000;
    while (wal_tracker_last_record_end(&t) == 0x800000) {
        assert_int_equal(wal_tracker_feed(&t, pos, at_lsn(pos), 1, &why), 0);
        pos++;
    }
    assert_int_equal(wal_tracker_last_record_end(&t), expected[i].start);
    assert_int_equal(pos, expected[i].start);
}

/* Reads WAL [base, end) and checks wal_lsn_before_page_header on each
 * record: its start as the reader finds it (right after a page header when
 * the record before ended at the page boundary; the form
 * GetXLogInsertRecPtr returns) maps to the end of the record before, and
 * every record end maps to itself.  Returns how many starts followed a
 * page header. */
static int check_before_page_header(const uint8_t *mem, lsn_t base, lsn_t end, uint32_t seg_size)
{
    static uint8_t buf[1 << 21];
    wal_reader r;
    const char *why;
    wal_reader_init(&r, base, seg_size, buf, sizeof buf);
    lsn_t at = base, prev_end = LSN_INVALID;
    int after_header = 0;
    while (at < end) {
        size_t used;
        int rc = wal_reader_feed(&r, at, mem + (at - base), end - at, &used, &why);
        assert_int_not_equal(rc, WAL_READER_ERROR);
        at += used;
        if (rc != WAL_READER_RECORD)
            continue;
        lsn_t start, rec_end;
        assert_non_null(wal_reader_record(&r, &start, &rec_end));
        assert_int_equal(wal_lsn_before_page_header(rec_end, seg_size), rec_end);
        if (prev_end != LSN_INVALID) {
            assert_int_equal(wal_lsn_before_page_header(start, seg_size), prev_end);
            after_header += start != prev_end;
        }
        prev_end = rec_end;
    }
    return after_header;
}

static void test_lsn_before_page_header(void **state)
{
    (void)state;
    /* The pg_waldump sample: no record in it starts a page. */
    assert_int_equal(check_before_page_header(sample, SAMPLE_START, 0x830000, SAMPLE_SEG_SIZE), 0);

    /* Synthetic WAL over three 1 MB segments, records of 0-400 bytes of
     * payload: some end exactly at a page boundary, one at a segment start. */
    const lsn_t base = 0x3000000, cap = 3u << 20;
    uint8_t *mem = calloc(1, cap);
    assert_non_null(mem);
    simwal w;
    simwal_init(&w, mem, base, cap, SAMPLE_SEG_SIZE, base, 0);
    uint32_t x = 12345;
    lsn_t end = base;
    bool seg_hit = false;
    for (;;) {
        x = x * 1103515245u + 12345u;
        uint32_t len = (x >> 8) % 401;
        lsn_t room = SAMPLE_SEG_SIZE - w.pos % SAMPLE_SEG_SIZE;
        if (!seg_hit && w.pos > base + SAMPLE_SEG_SIZE && room <= 281 && room > 64)
            len = (uint32_t)room - 24 - 2; /* header and short data header: ends at the segment */
        lsn_t e = simwal_append(&w, len, 0, 0, x);
        if (e == 0 || e > base + cap - 8192)
            break;
        seg_hit |= e % SAMPLE_SEG_SIZE == 0;
        end = e;
    }
    assert_true(seg_hit);
    /* 9 with this seed: one record end in about 29 per page start */
    assert_true(check_before_page_header(mem, base, end, SAMPLE_SEG_SIZE) >= 5);
    free(mem);

    /* A continuation of 16 bytes ends 40 bytes into a page that is not a
     * segment start: a record end, left alone.  At a segment start, 24 is
     * inside the long header. */
    lsn_t page = 0x1232000, seg = 0x1300000;
    assert_int_equal(wal_lsn_before_page_header(page + 40, SAMPLE_SEG_SIZE), page + 40);
    assert_int_equal(wal_lsn_before_page_header(page + 24, SAMPLE_SEG_SIZE), page);
    assert_int_equal(wal_lsn_before_page_header(seg + 40, SAMPLE_SEG_SIZE), seg);
    assert_int_equal(wal_lsn_before_page_header(seg + 24, SAMPLE_SEG_SIZE), seg);
    assert_int_equal(wal_lsn_before_page_header(seg + 40, WAL_SEG_SIZE_DEFAULT), seg + 40);
    assert_int_equal(wal_lsn_before_page_header(page + 48, SAMPLE_SEG_SIZE), page + 48);
    assert_int_equal(wal_lsn_before_page_header(page, SAMPLE_SEG_SIZE), page);
}

static void test_tracker_switch(void **state)
{
    (void)state;
    const expected_record *sw = &expected[n_expected - 1];
    assert_int_equal(sw->rmid, WAL_RM_XLOG_ID);
    wal_tracker t;
    const char *why;
    wal_tracker_init(&t, sw->start, SAMPLE_SEG_SIZE);
    assert_int_equal(
        wal_tracker_feed(&t, sw->start, at_lsn(sw->start), WAL_RECORD_HEADER_SIZE, &why), 0);
    /* The switch record's bytes are in, but the segment end is not yet. */
    assert_int_equal(wal_tracker_last_record_end(&t), sw->start);
    lsn_t pos = sw->start + WAL_RECORD_HEADER_SIZE;
    assert_int_equal(wal_tracker_feed(&t, pos, at_lsn(pos), SAMPLE_END - 1 - pos, &why), 0);
    assert_int_equal(wal_tracker_last_record_end(&t), sw->start);
    assert_int_equal(wal_tracker_feed(&t, SAMPLE_END - 1, at_lsn(SAMPLE_END - 1), 1, &why), 0);
    assert_int_equal(wal_tracker_last_record_end(&t), SAMPLE_END);
}

/* Feeds a corrupted copy of the sample from start; returns the error. */
static const char *tracker_error_on(lsn_t start, lsn_t corrupt_at, uint8_t xor_mask)
{
    static uint8_t copy[SAMPLE_END - SAMPLE_START];
    memcpy(copy, sample, sample_len);
    copy[corrupt_at - SAMPLE_START] ^= xor_mask;
    wal_tracker t;
    const char *why = NULL;
    wal_tracker_init(&t, start, SAMPLE_SEG_SIZE);
    for (lsn_t pos = start; pos < SAMPLE_END; pos += 100) {
        size_t n = SAMPLE_END - pos < 100 ? (size_t)(SAMPLE_END - pos) : 100;
        if (wal_tracker_feed(&t, pos, copy + (pos - SAMPLE_START), n, &why) != 0) {
            /* Broken for good. */
            const char *again = NULL;
            assert_int_equal(wal_tracker_feed(&t, pos, copy + (pos - SAMPLE_START), n, &again), -1);
            assert_string_equal(again, why);
            return why;
        }
    }
    return NULL;
}

static void test_tracker_rejects_corruption(void **state)
{
    (void)state;
    const expected_record *r = &expected[50];
    assert_non_null(tracker_error_on(SAMPLE_START, 0x7F2000, 0x01));         /* page magic */
    assert_non_null(tracker_error_on(SAMPLE_START, 0x7F2000 + 4 * 2, 0x01)); /* xlp_info flag bit */
    assert_non_null(tracker_error_on(SAMPLE_START, 0x7F2000 + 9, 0x01));     /* xlp_pageaddr */
    assert_non_null(tracker_error_on(SAMPLE_START, 0x800000 + 2, 0x02));  /* long header missing */
    assert_non_null(tracker_error_on(SAMPLE_START, 0x800000 + 32, 0x01)); /* seg size */
    assert_non_null(tracker_error_on(SAMPLE_START, 0x800000 + 16, 0x08)); /* xlp_rem_len */
    assert_non_null(
        tracker_error_on(SAMPLE_START, 0x800000 + 2, 0x01)); /* contrecord flag cleared */
    assert_non_null(tracker_error_on(SAMPLE_START, r->start + 3, 0x80));  /* xl_tot_len huge */
    assert_non_null(tracker_error_on(SAMPLE_START, r->start + 9, 0x01));  /* xl_prev */
    assert_non_null(tracker_error_on(SAMPLE_START, r->start + 17, 0x40)); /* rmid 10|0x40 invalid */
    /* A length change is detected later by the next page header, or by the
     * next record's header. */
    assert_non_null(tracker_error_on(SAMPLE_START, r->start, 0x08));
    /* The uncorrupted sample passes (sanity of the helper itself). */
    assert_null(tracker_error_on(SAMPLE_START, SAMPLE_END - 1, 0x00));
    /* Zeros where a record should start. */
    static const uint8_t zeros[64];
    wal_tracker t;
    const char *why;
    wal_tracker_init(&t, r->start, SAMPLE_SEG_SIZE);
    assert_int_equal(wal_tracker_feed(&t, r->start, zeros, sizeof zeros, &why), -1);
    assert_non_null(strstr(why, "xl_tot_len"));
}

static uint8_t reader_buf_small[4096];

static void test_tracker_api_misuse(void **state)
{
    (void)state;
    wal_tracker t;
    const char *why;
    wal_tracker_init(&t, SAMPLE_START, SAMPLE_SEG_SIZE);
    /* Wrong position: refused, state unchanged. */
    assert_int_equal(wal_tracker_feed(&t, SAMPLE_START + 8, at_lsn(SAMPLE_START), 8, &why), -1);
    assert_int_equal(wal_tracker_next(&t), SAMPLE_START);
    assert_int_equal(wal_tracker_feed(&t, SAMPLE_START, at_lsn(SAMPLE_START), 0, &why), 0);
    assert_int_equal(wal_tracker_feed(&t, SAMPLE_START, at_lsn(SAMPLE_START), 8, &why), 0);
    /* Bad start positions and segment sizes. */
    wal_tracker_init(&t, SAMPLE_START + 4, SAMPLE_SEG_SIZE);
    assert_int_equal(wal_tracker_feed(&t, SAMPLE_START + 4, at_lsn(SAMPLE_START + 4), 4, &why), -1);
    wal_tracker_init(&t, SAMPLE_START + 16, SAMPLE_SEG_SIZE);
    assert_int_equal(wal_tracker_feed(&t, SAMPLE_START + 16, at_lsn(SAMPLE_START + 16), 8, &why),
                     -1);
    wal_tracker_init(&t, 0x800000 + 32, SAMPLE_SEG_SIZE);
    assert_int_equal(wal_tracker_feed(&t, 0x800000 + 32, at_lsn(0x800000 + 32), 8, &why), -1);
    wal_tracker_init(&t, SAMPLE_START, 12345);
    assert_int_equal(wal_tracker_feed(&t, SAMPLE_START, at_lsn(SAMPLE_START), 8, &why), -1);
    /* Positions near the largest LSN: refused rather than wrapping. */
    const lsn_t top = UINT64_MAX - 7;
    wal_tracker_init(&t, top, SAMPLE_SEG_SIZE);
    assert_int_equal(wal_tracker_feed(&t, top, at_lsn(SAMPLE_START), 16, &why), -1);
    assert_non_null(strstr(why, "largest LSN"));
    assert_int_equal(wal_tracker_next(&t), top);
    wal_reader rd;
    size_t used;
    wal_reader_init(&rd, top, SAMPLE_SEG_SIZE, reader_buf_small, sizeof reader_buf_small);
    assert_int_equal(wal_reader_feed(&rd, top, at_lsn(SAMPLE_START), 16, &used, &why),
                     WAL_READER_ERROR);
    assert_int_equal(used, 0);
    /* A copied tracker continues independently. */
    wal_tracker a, b;
    wal_tracker_init(&a, SAMPLE_START, SAMPLE_SEG_SIZE);
    assert_int_equal(wal_tracker_feed(&a, SAMPLE_START, at_lsn(SAMPLE_START), 0x3000, &why), 0);
    b = a;
    assert_int_equal(
        wal_tracker_feed(&b, SAMPLE_START + 0x3000, at_lsn(SAMPLE_START + 0x3000), 0x3000, &why),
        0);
    assert_int_equal(wal_tracker_next(&a), SAMPLE_START + 0x3000);
    assert_true(wal_tracker_last_record_end(&b) > wal_tracker_last_record_end(&a));
}

/* ---- Reader and decoder ---------------------------------------------- */

static uint8_t reader_buf[1 << 20];

/* Reads [start, SAMPLE_END) in chunks and checks every record against
 * pg_waldump; returns the number of records seen. */
static int run_reader(lsn_t start, size_t (*chunk)(size_t i, void *arg), void *arg)
{
    wal_reader r;
    const char *why = NULL;
    wal_reader_init(&r, start, SAMPLE_SEG_SIZE, reader_buf, sizeof reader_buf);
    int next = 0;
    while (next < n_expected && expected[next].start < start)
        next++;
    int seen = 0;
    lsn_t pos = start;
    for (size_t i = 0; pos < SAMPLE_END; i++) {
        size_t n = chunk(i, arg);
        if (n > SAMPLE_END - pos)
            n = (size_t)(SAMPLE_END - pos);
        const uint8_t *data = at_lsn(pos);
        while (n > 0) {
            size_t used;
            int rc = wal_reader_feed(&r, pos, data, n, &used, &why);
            if (rc == WAL_READER_ERROR)
                fail_msg("reader from %llX failed at %llX: %s", (unsigned long long)start,
                         (unsigned long long)pos, why);
            pos += used;
            data += used;
            n -= used;
            if (rc != WAL_READER_RECORD)
                continue;
            lsn_t rs, re;
            const wal_record *rec = wal_reader_record(&r, &rs, &re);
            assert_non_null(rec);
            assert_true(next < n_expected);
            const expected_record *e = &expected[next];
            assert_int_equal(rs, e->start);
            assert_int_equal(re, next + 1 < n_expected ? end_before(expected[next + 1].start)
                                                       : SAMPLE_END);
            assert_int_equal(re, pos);
            assert_int_equal(rec->hdr.tot_len, e->tot_len);
            assert_int_equal(rec->hdr.rmid, e->rmid);
            assert_int_equal(rec->hdr.xid, e->xid);
            assert_int_equal(rec->hdr.prev, e->prev);
            int nblocks = 0;
            for (int id = 0; id <= rec->max_block_id; id++) {
                const wal_block_ref *b = &rec->blocks[id];
                if (!b->in_use)
                    continue;
                assert_true(nblocks < e->nblocks);
                const expected_block *eb = &e->blocks[nblocks++];
                assert_int_equal(id, eb->id);
                assert_int_equal(b->spc, eb->spc);
                assert_int_equal(b->db, eb->db);
                assert_int_equal(b->rel, eb->rel);
                assert_int_equal(b->fork, eb->fork);
                assert_int_equal(b->blkno, eb->blkno);
                assert_int_equal(b->has_image, eb->has_image);
                if (b->has_image && !WAL_BKPIMAGE_COMPRESSED(b->bimg_info))
                    assert_int_equal(b->bimg_len + b->hole_length, WAL_PAGE_BLCKSZ);
            }
            assert_int_equal(nblocks, e->nblocks);
            next++;
            seen++;
        }
    }
    assert_int_equal(next, n_expected);
    assert_int_equal(wal_reader_last_record_end(&r), SAMPLE_END);
    return seen;
}

static void test_reader_matches_pg_waldump(void **state)
{
    (void)state;
    const size_t sizes[] = {
        1, 2, 3, 7, 8, 13, 24, 100, 4096, 8192, 8193, 65536, SAMPLE_END - SAMPLE_START};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        assert_int_equal(run_reader(SAMPLE_START, fixed_chunk, (void *)&sizes[i]), n_expected);
    for (uint64_t seed = 1; seed <= 10; seed++) {
        uint64_t s = seed * 0x9E3779B97F4A7C15ull;
        assert_int_equal(run_reader(SAMPLE_START, random_chunk, &s), n_expected);
    }
    /* From the segment start, mid-record, and from a record boundary. */
    size_t odd = 333;
    run_reader(0x800000, fixed_chunk, &odd);
    run_reader(expected[n_expected / 2].start, fixed_chunk, &odd);
}

static void test_reader_record_contents(void **state)
{
    (void)state;
    /* The 30 KB logical message spans pages; its main data holds the prefix
     * and the payload intact. */
    wal_reader r;
    const char *why;
    wal_reader_init(&r, SAMPLE_START, SAMPLE_SEG_SIZE, reader_buf, sizeof reader_buf);
    lsn_t pos = SAMPLE_START;
    bool found_message = false, found_fpi = false, found_switch = false;
    while (pos < SAMPLE_END) {
        size_t used;
        int rc = wal_reader_feed(&r, pos, at_lsn(pos), (size_t)(SAMPLE_END - pos), &used, &why);
        assert_int_not_equal(rc, WAL_READER_ERROR);
        pos += used;
        if (rc != WAL_READER_RECORD)
            continue;
        lsn_t rs, re;
        const wal_record *rec = wal_reader_record(&r, &rs, &re);
        if (rec->hdr.rmid == 21) {
            assert_true(rec->main_data_len > 30000);
            const uint8_t *m = rec->main_data;
            const uint8_t *prefix = memmem(m, rec->main_data_len, "strata", 7);
            assert_non_null(prefix);
            size_t off = (size_t)(prefix - m) + 7;
            assert_true(rec->main_data_len - off >= 30000);
            for (size_t k = 0; k < 30000; k++)
                assert_int_equal(m[off + k], 'x');
            assert_true(re - rs > 30000);
            found_message = true;
        }
        for (int id = 0; id <= rec->max_block_id; id++) {
            const wal_block_ref *b = &rec->blocks[id];
            if (b->in_use && b->has_image) {
                assert_non_null(b->bimg);
                assert_true(b->bimg >= rec->raw &&
                            b->bimg + b->bimg_len <= rec->raw + rec->hdr.tot_len);
                found_fpi = true;
            }
        }
        if (wal_record_header_is_switch(&rec->hdr)) {
            assert_int_equal(re, SAMPLE_END);
            found_switch = true;
        }
        /* Decoding the reassembled bytes again gives the same CRC. */
        assert_int_equal(wal_record_compute_crc(rec->raw, rec->hdr.tot_len), rec->hdr.crc);
    }
    assert_true(found_message && found_fpi && found_switch);
}

static void test_reader_crc_and_bounds(void **state)
{
    (void)state;
    static uint8_t copy[SAMPLE_END - SAMPLE_START];
    const expected_record *victim = &expected[100];
    memcpy(copy, sample, sample_len);
    copy[victim->start + victim->tot_len - 1 - SAMPLE_START] ^= 0x01; /* last payload byte */

    wal_reader r;
    const char *why = NULL;
    wal_reader_init(&r, SAMPLE_START, SAMPLE_SEG_SIZE, reader_buf, sizeof reader_buf);
    lsn_t pos = SAMPLE_START;
    int rc;
    do {
        size_t used;
        rc = wal_reader_feed(&r, pos, copy + (pos - SAMPLE_START), (size_t)(SAMPLE_END - pos),
                             &used, &why);
        pos += used;
    } while (rc == WAL_READER_RECORD);
    assert_int_equal(rc, WAL_READER_ERROR);
    assert_non_null(strstr(why, "CRC"));
    /* The end of valid WAL is the end of the record before the bad one. */
    assert_int_equal(wal_reader_last_record_end(&r), end_before(victim->start));
    /* The tracker alone does not check CRCs: it passes the same bytes. */
    wal_tracker t;
    wal_tracker_init(&t, SAMPLE_START, SAMPLE_SEG_SIZE);
    assert_int_equal(wal_tracker_feed(&t, SAMPLE_START, copy, sample_len, &why), 0);

    /* A record larger than the buffer is refused with a clear reason. */
    static uint8_t small[1000];
    wal_reader_init(&r, SAMPLE_START, SAMPLE_SEG_SIZE, small, sizeof small);
    pos = SAMPLE_START;
    do {
        size_t used;
        rc = wal_reader_feed(&r, pos, at_lsn(pos), (size_t)(SAMPLE_END - pos), &used, &why);
        pos += used;
    } while (rc == WAL_READER_RECORD);
    assert_int_equal(rc, WAL_READER_ERROR);
    assert_non_null(strstr(why, "reassembly buffer"));
    assert_true(wal_reader_last_record_end(&r) > SAMPLE_START);
    lsn_t stopped_at = wal_reader_last_record_end(&r);

    /* A growable reader starting as small reads every record of the sample,
     * the one that stopped the fixed buffer included (issue 11.2: records
     * up to 1 GB must never stop a safekeeper's restart scan or ingest). */
    size_t cap = 1000;
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    wal_reader_init_growable(&r, SAMPLE_START, SAMPLE_SEG_SIZE, &buf, &cap);
    pos = SAMPLE_START;
    int records = 0;
    while (pos < SAMPLE_END) {
        size_t used;
        rc = wal_reader_feed(&r, pos, at_lsn(pos), (size_t)(SAMPLE_END - pos), &used, &why);
        assert_int_not_equal(rc, WAL_READER_ERROR);
        records += rc == WAL_READER_RECORD;
        pos += used;
    }
    assert_true(cap > 1000);
    assert_true(wal_reader_last_record_end(&r) > stopped_at);
    assert_true(records > 0);
    free(buf);
}

/* Builds a record: header + the given body, with a correct CRC. */
static size_t build_record(uint8_t *out, const uint8_t *body, size_t body_len)
{
    size_t tot = WAL_RECORD_HEADER_SIZE + body_len;
    memset(out, 0, WAL_RECORD_HEADER_SIZE);
    out[0] = (uint8_t)tot;
    out[1] = (uint8_t)(tot >> 8);
    out[4] = 0x2A;  /* xid 42 */
    out[8] = 0x28;  /* prev 0/28 */
    out[16] = 0x00; /* info */
    out[17] = 10;   /* Heap */
    if (body_len > 0)
        memcpy(out + WAL_RECORD_HEADER_SIZE, body, body_len);
    uint32_t crc = wal_record_compute_crc(out, tot);
    memcpy(out + WAL_RECORD_CRC_OFFSET, &crc, 4);
    return tot;
}

static const char *decode_body(const uint8_t *body, size_t body_len, wal_record *rec)
{
    static uint8_t raw[1024];
    const char *why = NULL;
    size_t tot = build_record(raw, body, body_len);
    return wal_record_decode(raw, tot, rec, &why) == 0 ? NULL : why;
}

static void test_decode_synthetic(void **state)
{
    (void)state;
    wal_record rec;
    /* Block 0 with 2 data bytes, block 3 SAME_REL + WILL_INIT, origin,
     * top-level xid, 3 bytes of main data. */
    const uint8_t good[] = {
        0,
        WAL_BKPBLOCK_HAS_DATA | WAL_FORK_VM,
        2,
        0, /* id, fork_flags, data_len */
        0x7F,
        6,
        0,
        0,
        5,
        0,
        0,
        0,
        0x00,
        0x40,
        0,
        0, /* rel 1663/5/16384 */
        9,
        0,
        0,
        0, /* blkno 9 */
        3,
        WAL_BKPBLOCK_SAME_REL | WAL_BKPBLOCK_WILL_INIT,
        0,
        0,
        1,
        0,
        0,
        0, /* blkno 1 */
        WAL_XLR_BLOCK_ID_ORIGIN,
        7,
        0,
        WAL_XLR_BLOCK_ID_TOPLEVEL_XID,
        0x10,
        0,
        0,
        0,
        WAL_XLR_BLOCK_ID_DATA_SHORT,
        3,
        0xAA,
        0xBB, /* block 0 data */
        'a',
        'b',
        'c', /* main data */
    };
    assert_null(decode_body(good, sizeof good, &rec));
    assert_int_equal(rec.hdr.xid, 42);
    assert_int_equal(rec.max_block_id, 3);
    assert_true(rec.blocks[0].in_use && !rec.blocks[1].in_use && rec.blocks[3].in_use);
    assert_int_equal(rec.blocks[0].fork, WAL_FORK_VM);
    assert_int_equal(rec.blocks[0].spc, 1663);
    assert_int_equal(rec.blocks[0].db, 5);
    assert_int_equal(rec.blocks[0].rel, 16384);
    assert_int_equal(rec.blocks[0].blkno, 9);
    assert_int_equal(rec.blocks[0].data_len, 2);
    assert_memory_equal(rec.blocks[0].data, "\xAA\xBB", 2);
    assert_int_equal(rec.blocks[3].rel, 16384);
    assert_true(rec.blocks[3].will_init);
    assert_int_equal(rec.blocks[3].blkno, 1);
    assert_true(rec.has_origin && rec.origin == 7);
    assert_true(rec.has_toplevel_xid && rec.toplevel_xid == 0x10);
    assert_int_equal(rec.main_data_len, 3);
    assert_memory_equal(rec.main_data, "abc", 3);

    /* A record with no payload at all (like XLOG_SWITCH). */
    assert_null(decode_body(NULL, 0, &rec));
    assert_int_equal(rec.max_block_id, -1);
    assert_null(rec.main_data);

    /* Each corruption fails with its own reason. */
    uint8_t bad[sizeof good];
#define EXPECT_FAIL(patch, text)                                                                   \
    do {                                                                                           \
        memcpy(bad, good, sizeof good);                                                            \
        patch;                                                                                     \
        const char *why_ = decode_body(bad, sizeof good, &rec);                                    \
        assert_non_null(why_);                                                                     \
        if (strstr(why_, text) == NULL)                                                            \
            fail_msg("expected \"%s\", got \"%s\"", text, why_);                                   \
    } while (0)
    EXPECT_FAIL(bad[20] = 0, "out of order"); /* block 3 -> 0 */
    EXPECT_FAIL(bad[1] = WAL_BKPBLOCK_SAME_REL | WAL_BKPBLOCK_HAS_DATA, "SAME_REL");
    EXPECT_FAIL(bad[2] = 0, "no data");                    /* HAS_DATA, len 0 */
    EXPECT_FAIL(bad[22] = 1, "without BKPBLOCK_HAS_DATA"); /* block 3 data len */
    EXPECT_FAIL(bad[1] = WAL_BKPBLOCK_HAS_DATA | 5, "fork");
    EXPECT_FAIL(bad[20] = 40, "invalid block id");
    EXPECT_FAIL(bad[37] = 4, "add up"); /* main data length */
    EXPECT_FAIL(bad[37] = 2, "add up");
#undef EXPECT_FAIL

    /* A block image: uncompressed with a hole must have bimg_len + hole ==
     * 8192 and the hole inside the page. */
    uint8_t img[8300];
    size_t n = 0;
    img[n++] = 0;
    img[n++] = WAL_BKPBLOCK_HAS_IMAGE;
    img[n++] = 0;
    img[n++] = 0;
    uint16_t bimg_len = 8000, hole_off = 100;
    img[n++] = (uint8_t)bimg_len;
    img[n++] = (uint8_t)(bimg_len >> 8);
    img[n++] = (uint8_t)hole_off;
    img[n++] = (uint8_t)(hole_off >> 8);
    img[n++] = WAL_BKPIMAGE_HAS_HOLE | WAL_BKPIMAGE_APPLY;
    memset(img + n, 0, 16); /* rel 0/0/0, blkno 0 */
    n += 16;
    memset(img + n, 0x5A, bimg_len);
    n += bimg_len;
    static uint8_t raw[8400];
    const char *why;
    size_t tot = build_record(raw, img, n);
    assert_int_equal(wal_record_decode(raw, tot, &rec, &why), 0);
    assert_int_equal(rec.blocks[0].hole_length, 192);
    assert_true(rec.blocks[0].apply_image);
    assert_ptr_equal(rec.blocks[0].bimg, raw + tot - bimg_len);
    img[6] = 0x00;
    img[7] = 0x20; /* hole offset 8192: past the page */
    tot = build_record(raw, img, n);
    assert_int_equal(wal_record_decode(raw, tot, &rec, &why), -1);
    assert_non_null(strstr(why, "hole"));
    img[6] = (uint8_t)hole_off;
    img[7] = (uint8_t)(hole_off >> 8);
    img[8] = WAL_BKPIMAGE_APPLY; /* no hole flag but bimg_len < 8192 */
    tot = build_record(raw, img, n);
    assert_int_equal(wal_record_decode(raw, tot, &rec, &why), -1);

    /* CRC and length mismatches. */
    tot = build_record(raw, good, sizeof good);
    raw[tot - 1] ^= 1;
    assert_int_equal(wal_record_decode(raw, tot, &rec, &why), -1);
    assert_non_null(strstr(why, "CRC"));
    raw[tot - 1] ^= 1;
    assert_int_equal(wal_record_decode(raw, tot, &rec, &why), 0);
    assert_int_equal(wal_record_decode(raw, tot - 1, &rec, &why), -1);
    assert_int_equal(wal_record_decode(raw, 10, &rec, &why), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tracker_every_chunk_size),
        cmocka_unit_test(test_tracker_start_positions),
        cmocka_unit_test(test_tracker_segment_start_boundary),
        cmocka_unit_test(test_lsn_before_page_header),
        cmocka_unit_test(test_tracker_switch),
        cmocka_unit_test(test_tracker_rejects_corruption),
        cmocka_unit_test(test_tracker_api_misuse),
        cmocka_unit_test(test_reader_matches_pg_waldump),
        cmocka_unit_test(test_reader_record_contents),
        cmocka_unit_test(test_reader_crc_and_bounds),
        cmocka_unit_test(test_decode_synthetic),
    };
    return cmocka_run_group_tests(tests, load_sample, free_sample);
}
