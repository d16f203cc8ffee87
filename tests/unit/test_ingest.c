/*
 * test_ingest.c: WAL ingest (pageserver/ingest/ingest.h) on real PostgreSQL 15 WAL
 * (tests/unit/data/wal_sample_*, checked against its pg_waldump listing) and
 * on hand-built records for every rmgr effect: sizes and gap fill, smgr
 * truncate of FSM/VM, CLOG deltas across pages, two-phase state, dropped
 * relations, multixact offsets/members across pages, database copy and drop,
 * relmap, VM clears, the checkpoint, and rejection of malformed main data.
 *
 * Ingest runs over an in-memory backend here (a list of (key, LSN, value)),
 * so what it puts is observed exactly, without the store -- except the last
 * test, which runs a many-block FPI record over the real store.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/byteorder.h"
#include "pg/walformat.h"
#include "pageserver/ingest/ingest.h"
#include "pg/pgstructs.h"

/* ---- in-memory backend ---------------------------------------------- */

typedef struct mem_value {
    pg_key k;
    lsn_t lsn;
    uint8_t kind, flags;
    uint32_t len;
    uint8_t *payload;
} mem_value;

typedef struct mem_store {
    mem_value *v;
    size_t n, cap;
    uint8_t page_fill; /* get_page answers pages filled with this byte (0 = from images) */
} mem_store;

static int mem_put(void *arg, const pg_key *k, lsn_t lsn, const value_ref *v, char *err,
                   size_t errlen)
{
    (void)err;
    (void)errlen;
    mem_store *m = arg;
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 1024;
        m->v = realloc(m->v, m->cap * sizeof *m->v);
        assert_non_null(m->v);
    }
    /* One value per (key, LSN): a second put at the same LSN replaces. */
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i].lsn == lsn && pg_key_compare(&m->v[i].k, k) == 0) {
            free(m->v[i].payload);
            m->v[i] = m->v[--m->n];
            break;
        }
    mem_value *e = &m->v[m->n++];
    e->k = *k;
    e->lsn = lsn;
    e->kind = v->kind;
    e->flags = v->flags;
    e->len = v->len;
    e->payload = malloc(v->len ? v->len : 1);
    if (v->len)
        memcpy(e->payload, v->payload, v->len);
    return 0;
}

static const mem_value *mem_latest(const mem_store *m, const pg_key *k, lsn_t lsn)
{
    const mem_value *best = NULL;
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i].lsn <= lsn && pg_key_compare(&m->v[i].k, k) == 0 &&
            (best == NULL || m->v[i].lsn > best->lsn))
            best = &m->v[i];
    return best;
}

static int mem_get_latest(void *arg, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found,
                          char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    const mem_value *e = mem_latest(arg, k, lsn);
    if (e == NULL)
        return 0;
    uint8_t *p = malloc(e->len ? e->len : 1);
    memcpy(p, e->payload, e->len);
    *out = (value_ref){.kind = e->kind, .flags = e->flags, .len = e->len, .payload = p};
    *found = e->lsn;
    return 1;
}

static int cmp_keys(const void *a, const void *b)
{
    return pg_key_compare(a, b);
}

static int mem_scan(void *arg, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
                    void *fnarg, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    mem_store *m = arg;
    pg_key *keys = calloc(m->n + 1, sizeof *keys);
    size_t nk = 0;
    for (size_t i = 0; i < m->n; i++) {
        const pg_key *k = &m->v[i].k;
        if (pg_key_compare(k, from) < 0 || pg_key_compare(k, to) >= 0 || m->v[i].lsn > lsn)
            continue;
        bool dup = false;
        for (size_t j = 0; j < nk && !dup; j++)
            dup = pg_key_compare(&keys[j], k) == 0;
        if (!dup)
            keys[nk++] = *k;
    }
    qsort(keys, nk, sizeof *keys, cmp_keys);
    for (size_t j = 0; j < nk; j++) {
        const mem_value *e = mem_latest(m, &keys[j], lsn);
        value_ref v = {.kind = e->kind, .flags = e->flags, .len = e->len, .payload = e->payload};
        if (fn(&keys[j], e->lsn, &v, fnarg) != 0)
            break;
    }
    free(keys);
    return 0;
}

static int mem_get_page(void *arg, const pg_key *k, lsn_t lsn, uint8_t out[PG_BLCKSZ], char *err,
                        size_t errlen)
{
    const mem_value *e = mem_latest(arg, k, lsn);
    if (e != NULL && e->kind == VAL_IMAGE) {
        memcpy(out, e->payload, PG_BLCKSZ);
        return 0;
    }
    if (e == NULL || e->kind == VAL_ZERO_PAGE) {
        memset(out, 0, PG_BLCKSZ);
        return 0;
    }
    const mem_store *m = arg;
    if (m->page_fill != 0) {
        memset(out, m->page_fill, PG_BLCKSZ);
        return 0;
    }
    snprintf(err, errlen, "no redo in this test");
    return -1;
}

static void mem_free(mem_store *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->v[i].payload);
    free(m->v);
    memset(m, 0, sizeof *m);
}

static ingest_state *new_ingest(mem_store *m, const ingest_options *o)
{
    ingest_backend b = {.arg = m,
                        .put = mem_put,
                        .get_latest = mem_get_latest,
                        .scan = mem_scan,
                        .get_page = mem_get_page};
    ingest_state *ing = NULL;
    char err[256];
    int rc = ingest_create_with_backend(o, &b, &ing, err, sizeof err);
    if (rc != 0)
        fail_msg("%s", err);
    return ing;
}

static const mem_value *value_at(const mem_store *m, const pg_key *k, lsn_t lsn)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i].lsn == lsn && pg_key_compare(&m->v[i].k, k) == 0)
            return &m->v[i];
    return NULL;
}

static size_t count_kind(const mem_store *m, uint8_t key_kind, uint8_t val_kind)
{
    size_t c = 0;
    for (size_t i = 0; i < m->n; i++)
        c += m->v[i].k.kind == key_kind && m->v[i].kind == val_kind;
    return c;
}

static uint32_t size_of(ingest_state *ing, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork)
{
    uint32_t n = 0;
    char err[256];
    int rc = ingest_rel_size(ing, spc, db, rel, fork, &n, err, sizeof err);
    assert_int_not_equal(rc, -1);
    return rc == 1 ? n : UINT32_MAX;
}

/* ---- the real WAL sample --------------------------------------------- */

#define SAMPLE_START ((lsn_t)0x7F0000)
#define SAMPLE_END ((lsn_t)0x900000)
#define SAMPLE_SEG_SIZE (1u << 20)
#define MAX_EXPECTED 1024
#define MAX_BLOCKS 33

typedef struct exp_block {
    int id;
    uint32_t spc, db, rel, blkno;
    int fork, has_image;
} exp_block;

typedef struct exp_record {
    lsn_t start;
    uint32_t tot_len, xid;
    int rmid, nblocks;
    exp_block blocks[MAX_BLOCKS];
} exp_record;

static uint8_t *sample;
static exp_record *expected;
static int n_expected;

static int load_sample(void **state)
{
    (void)state;
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/unit/data/wal_sample_0_7F0000.bin", STRATA_SOURCE_DIR);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    sample = calloc(1, SAMPLE_END - SAMPLE_START);
    size_t got = fread(sample, 1, SAMPLE_END - SAMPLE_START, f);
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
            exp_record *r = &expected[n_expected++];
            unsigned long long start, prev;
            if (sscanf(line, "R %llx %u %d %u %llx", &start, &r->tot_len, &r->rmid, &r->xid,
                       &prev) != 5)
                return -1;
            r->start = start;
        } else if (line[0] == 'B') {
            exp_record *r = &expected[n_expected - 1];
            exp_block *b = &r->blocks[r->nblocks++];
            if (sscanf(line, "B %d %u %u %u %d %u %d", &b->id, &b->spc, &b->db, &b->rel, &b->fork,
                       &b->blkno, &b->has_image) != 7)
                return -1;
        }
    }
    fclose(f);
    return n_expected > 100 ? 0 : -1;
}

static int free_sample(void **state)
{
    (void)state;
    free(sample);
    free(expected);
    return 0;
}

static uint8_t reader_buf[1 << 20];

/* Ingests the whole sample; fills ends[i] with record i's end LSN. */
static void ingest_sample(ingest_state *ing, lsn_t *ends)
{
    wal_reader r;
    wal_reader_init(&r, SAMPLE_START, SAMPLE_SEG_SIZE, reader_buf, sizeof reader_buf);
    lsn_t pos = SAMPLE_START;
    int i = 0;
    const char *why;
    char err[256];
    while (pos < SAMPLE_END) {
        size_t used;
        int rc = wal_reader_feed(&r, pos, sample + (pos - SAMPLE_START), (size_t)(SAMPLE_END - pos),
                                 &used, &why);
        if (rc == WAL_READER_ERROR)
            fail_msg("reader: %s", why);
        pos += used;
        if (rc != WAL_READER_RECORD)
            continue;
        lsn_t s, e;
        const wal_record *rec = wal_reader_record(&r, &s, &e);
        assert_true(i < n_expected);
        assert_int_equal(s, expected[i].start);
        ends[i++] = e;
        if (ingest_record(ing, s, e, rec, err, sizeof err) != 0)
            fail_msg("ingest of record at %llX: %s", (unsigned long long)s, err);
    }
    assert_int_equal(i, n_expected);
}

static void test_sample_block_values(void **state)
{
    (void)state;
    mem_store m = {0};
    ingest_state *ing = new_ingest(&m, NULL);
    lsn_t *ends = calloc((size_t)n_expected, sizeof *ends);
    ingest_sample(ing, ends);

    size_t block_values = 0, images = 0;
    for (int i = 0; i < n_expected; i++) {
        const exp_record *e = &expected[i];
        for (int b = 0; b < e->nblocks; b++) {
            const exp_block *eb = &e->blocks[b];
            pg_key k = pg_key_rel_block(eb->spc, eb->db, eb->rel, (uint8_t)eb->fork, eb->blkno);
            const mem_value *v = value_at(&m, &k, ends[i]);
            if (v == NULL)
                fail_msg("no value for block %d of record %d at %llX", eb->id, i,
                         (unsigned long long)ends[i]);
            block_values++;
            if (e->rmid == PG_RM_XLOG && eb->has_image) {
                /* Standalone FPI: the page itself, LSN stamped with the end. */
                assert_true(v->kind == VAL_IMAGE || v->kind == VAL_ZERO_PAGE);
                if (v->kind == VAL_IMAGE) {
                    assert_int_equal(v->len, PG_BLCKSZ);
                    lsn_t pl = ((lsn_t)get_le32(v->payload) << 32) | get_le32(v->payload + 4);
                    assert_int_equal(pl, ends[i]);
                }
                images++;
            } else {
                assert_int_equal(v->kind, VAL_WAL_RECORD);
                assert_int_equal(v->len, e->tot_len);
                /* The stored bytes are the intact record: its CRC holds. */
                assert_int_equal(wal_record_compute_crc(v->payload, v->len),
                                 get_le32(v->payload + WAL_RECORD_CRC_OFFSET));
                if (eb->has_image)
                    assert_true(v->flags & VALUE_WILL_INIT);
            }
        }
    }
    ingest_stats st;
    ingest_get_stats(ing, &st);
    assert_int_equal(st.records, (uint64_t)n_expected);
    assert_int_equal(st.images + st.wal_records, block_values);
    assert_int_equal(st.images, images);
    assert_true(block_values > 500);

    /* Sizes: ingest started mid-history with no import, so each relation
     * fork is as long as its highest referenced block (no truncation in
     * the sample) -- and every block below is a value (zero-filled gap). */
    for (int i = 0; i < n_expected; i++)
        for (int b = 0; b < expected[i].nblocks; b++) {
            const exp_block *eb = &expected[i].blocks[b];
            uint32_t maxblk = 0;
            for (int j = 0; j < n_expected; j++)
                for (int c = 0; c < expected[j].nblocks; c++) {
                    const exp_block *o = &expected[j].blocks[c];
                    if (o->spc == eb->spc && o->db == eb->db && o->rel == eb->rel &&
                        o->fork == eb->fork && o->blkno > maxblk)
                        maxblk = o->blkno;
                }
            assert_int_equal(size_of(ing, eb->spc, eb->db, eb->rel, (uint8_t)eb->fork), maxblk + 1);
            for (uint32_t blk = 0; blk <= maxblk; blk++) {
                pg_key k = pg_key_rel_block(eb->spc, eb->db, eb->rel, (uint8_t)eb->fork, blk);
                assert_non_null(mem_latest(&m, &k, LSN_MAX));
            }
        }

    /* Every transaction record with an xid set its CLOG bit on the xid's
     * page at the record's end. */
    int xact_records = 0;
    for (int i = 0; i < n_expected; i++) {
        if (expected[i].rmid != PG_RM_XACT || expected[i].xid == 0)
            continue;
        uint32_t xid = expected[i].xid, page = xid / PG_CLOG_XACTS_PER_PAGE;
        pg_key k = pg_key_slru_block(SLRU_CLOG, page / 32, page % 32);
        const mem_value *v = value_at(&m, &k, ends[i]);
        assert_non_null(v);
        assert_int_equal(v->kind, VAL_CLOG_SET);
        assert_true(v->payload[0] == PG_XACT_STATUS_COMMITTED ||
                    v->payload[0] == PG_XACT_STATUS_ABORTED);
        bool found = false;
        for (uint32_t x = 0; x < get_be32(v->payload + 1); x++)
            found |= get_be32(v->payload + 5 + 4 * x) == xid;
        assert_true(found);
        xact_records++;
    }
    assert_true(xact_records >= 2);

    /* The sample holds no checkpoint record and ingest had no base
     * checkpoint: it must not invent one (nextXid tracking needs a base;
     * see test_checkpoint_records). */
    pg_key ck = {.kind = KEY_CHECKPOINT};
    assert_null(mem_latest(&m, &ck, LSN_MAX));

    /* Re-ingesting an old record is refused. */
    char err[256];
    wal_record dummy = {0};
    assert_int_equal(ingest_record(ing, 0, ends[0], &dummy, err, sizeof err), -1);

    free(ends);
    ingest_destroy(ing);
    mem_free(&m);
}

/* ---- hand-built records ---------------------------------------------- */

typedef struct rec_builder {
    wal_record rec;
    uint8_t raw[64];
    uint8_t main[4096];
} rec_builder;

static wal_record *mk(rec_builder *b, uint8_t rmid, uint8_t info, uint32_t xid, uint32_t main_len)
{
    memset(&b->rec, 0, sizeof b->rec);
    memset(b->raw, 0, sizeof b->raw);
    put_le32(b->raw, sizeof b->raw); /* xl_tot_len, for VAL_WAL_RECORD puts */
    b->raw[17] = rmid;
    b->rec.hdr.tot_len = sizeof b->raw;
    b->rec.hdr.rmid = rmid;
    b->rec.hdr.info = info;
    b->rec.hdr.xid = xid;
    b->rec.raw = b->raw;
    b->rec.max_block_id = -1;
    b->rec.main_data = main_len ? b->main : NULL;
    b->rec.main_data_len = main_len;
    return &b->rec;
}

static void add_block(wal_record *r, int id, uint32_t rel, uint8_t fork, uint32_t blk,
                      bool will_init)
{
    wal_block_ref *b = &r->blocks[id];
    b->in_use = true;
    b->spc = 1663;
    b->db = 5;
    b->rel = rel;
    b->fork = fork;
    b->blkno = blk;
    b->will_init = will_init;
    if (id > r->max_block_id)
        r->max_block_id = id;
}

static void ingest_ok(ingest_state *ing, lsn_t end, wal_record *r)
{
    char err[256];
    if (ingest_record(ing, end - 8, end, r, err, sizeof err) != 0)
        fail_msg("ingest at %llX: %s", (unsigned long long)end, err);
}

static void ingest_bad(ingest_state *ing, lsn_t end, wal_record *r, const char *needle)
{
    char err[256] = "";
    assert_int_equal(ingest_record(ing, end - 8, end, r, err, sizeof err), -1);
    if (strstr(err, needle) == NULL)
        fail_msg("error \"%s\" lacks \"%s\"", err, needle);
}

static void smgr_create(ingest_state *ing, rec_builder *b, lsn_t end, uint32_t rel, uint32_t fork)
{
    wal_record *r = mk(b, PG_RM_SMGR, PG_XLOG_SMGR_CREATE, 0, PG_SMGR_CREATE_SIZE);
    put_le32(b->main, 1663);
    put_le32(b->main + 4, 5);
    put_le32(b->main + 8, rel);
    put_le32(b->main + 12, fork);
    ingest_ok(ing, end, r);
}

static void test_sizes_and_truncate(void **state)
{
    (void)state;
    mem_store m = {0};
    ingest_options o;
    ingest_options_default(&o);
    o.max_gap_fill = 3;
    ingest_state *ing = new_ingest(&m, &o);
    rec_builder *b = calloc(1, sizeof *b);

    smgr_create(ing, b, 0x1000, 100, FORK_MAIN);
    assert_int_equal(size_of(ing, 1663, 5, 100, FORK_MAIN), 0);
    assert_int_equal(size_of(ing, 1663, 5, 100, FORK_FSM), UINT32_MAX);
    /* A second create does not reset the size. */
    wal_record *r = mk(b, PG_RM_HEAP, PG_XLOG_HEAP_INSERT, 700, PG_HEAP_INSERT_SIZE);
    memset(b->main, 0, PG_HEAP_INSERT_SIZE);
    add_block(r, 0, 100, FORK_MAIN, 2, true);
    ingest_ok(ing, 0x1010, r);
    assert_int_equal(size_of(ing, 1663, 5, 100, FORK_MAIN), 3);
    for (uint32_t blk = 0; blk < 2; blk++) {
        pg_key k = pg_key_rel_block(1663, 5, 100, FORK_MAIN, blk);
        const mem_value *v = value_at(&m, &k, 0x1010);
        assert_non_null(v);
        assert_int_equal(v->kind, VAL_ZERO_PAGE);
    }
    pg_key k2 = pg_key_rel_block(1663, 5, 100, FORK_MAIN, 2);
    const mem_value *v2 = value_at(&m, &k2, 0x1010);
    assert_int_equal(v2->kind, VAL_WAL_RECORD);
    assert_int_equal(v2->flags, VALUE_WILL_INIT);
    smgr_create(ing, b, 0x1020, 100, FORK_MAIN);
    assert_int_equal(size_of(ing, 1663, 5, 100, FORK_MAIN), 3);

    /* Gap fill is bounded: a block far out extends the size anyway. */
    r = mk(b, PG_RM_HEAP, PG_XLOG_HEAP_INSERT, 700, PG_HEAP_INSERT_SIZE);
    add_block(r, 0, 100, FORK_MAIN, 79999, false);
    ingest_ok(ing, 0x1030, r);
    assert_int_equal(size_of(ing, 1663, 5, 100, FORK_MAIN), 80000);
    ingest_stats st;
    ingest_get_stats(ing, &st);
    assert_int_equal(st.gap_zero_pages, 2 + 3);

    /* FSM and VM forks appear through block references. */
    r = mk(b, PG_RM_HEAP2, 0x40 /* VISIBLE */, 0, 5);
    add_block(r, 0, 100, FORK_VM, 2, false);
    add_block(r, 1, 100, FORK_FSM, 20, false);
    ingest_ok(ing, 0x1040, r);
    assert_int_equal(size_of(ing, 1663, 5, 100, FORK_VM), 3);
    assert_int_equal(size_of(ing, 1663, 5, 100, FORK_FSM), 21);

    /* Truncate everything to 40000 heap blocks. */
    r = mk(b, PG_RM_SMGR, PG_XLOG_SMGR_TRUNCATE, 0, PG_SMGR_TRUNCATE_SIZE);
    put_le32(b->main, 40000);
    put_le32(b->main + 4, 1663);
    put_le32(b->main + 8, 5);
    put_le32(b->main + 12, 100);
    put_le32(b->main + 16, PG_SMGR_TRUNCATE_HEAP | PG_SMGR_TRUNCATE_FSM | PG_SMGR_TRUNCATE_VM);
    ingest_ok(ing, 0x1050, r);
    assert_int_equal(size_of(ing, 1663, 5, 100, FORK_MAIN), 40000);
    /* VM: 40000 / 32672 = page 1, partially kept: the record goes on it. */
    assert_int_equal(size_of(ing, 1663, 5, 100, FORK_VM), 2);
    pg_key vk = pg_key_rel_block(1663, 5, 100, FORK_VM, 1);
    const mem_value *vv = value_at(&m, &vk, 0x1050);
    assert_non_null(vv);
    assert_int_equal(vv->kind, VAL_WAL_RECORD);
    /* FSM: leaf page 40000 / 4069 = 9, physical block 11, partially kept:
     * zeroed; the fork keeps 12 blocks. */
    assert_int_equal(size_of(ing, 1663, 5, 100, FORK_FSM), 12);
    pg_key fk = pg_key_rel_block(1663, 5, 100, FORK_FSM, 11);
    const mem_value *fv = value_at(&m, &fk, 0x1050);
    assert_non_null(fv);
    assert_int_equal(fv->kind, VAL_ZERO_PAGE);

    /* A "truncation" to a larger size changes nothing. */
    put_le32(b->main, 50000);
    put_le32(b->main + 16, PG_SMGR_TRUNCATE_HEAP);
    ingest_ok(ing, 0x1060, r);
    assert_int_equal(size_of(ing, 1663, 5, 100, FORK_MAIN), 40000);

    /* Malformed smgr records. */
    r = mk(b, PG_RM_SMGR, PG_XLOG_SMGR_CREATE, 0, 15);
    ingest_bad(ing, 0x1070, r, "smgr create");
    r = mk(b, PG_RM_SMGR, PG_XLOG_SMGR_CREATE, 0, 16);
    put_le32(b->main + 12, 9);
    ingest_bad(ing, 0x1078, r, "fork 9");
    r = mk(b, PG_RM_SMGR, PG_XLOG_SMGR_TRUNCATE, 0, 24);
    ingest_bad(ing, 0x1080, r, "truncate");

    /* A tiny cache still answers right (it is emptied when full). */
    ingest_destroy(ing);
    ingest_options_default(&o);
    o.relsize_cache_entries = 16;
    ing = new_ingest(&m, &o);
    for (uint32_t rel = 200; rel < 240; rel++)
        smgr_create(ing, b, 0x2000 + 16 * rel, rel, FORK_MAIN);
    for (uint32_t rel = 200; rel < 240; rel++)
        assert_int_equal(size_of(ing, 1663, 5, rel, FORK_MAIN), 0);
    assert_int_equal(size_of(ing, 1663, 5, 100, FORK_MAIN), 40000);

    free(b);
    ingest_destroy(ing);
    mem_free(&m);
}

/* Builds a commit/abort body: time, xinfo, subxacts, rels, [twophase xid]. */
static uint32_t xact_body(uint8_t *p, const uint32_t *subs, int nsubs, const uint32_t *rels,
                          int nrels, uint32_t twophase_xid)
{
    uint32_t off = 8, xinfo = 0;
    memset(p, 0, 8);
    uint32_t xinfo_off = off;
    off += 4;
    if (nsubs > 0) {
        xinfo |= PG_XINFO_HAS_SUBXACTS;
        put_le32(p + off, (uint32_t)nsubs);
        off += 4;
        for (int i = 0; i < nsubs; i++, off += 4)
            put_le32(p + off, subs[i]);
    }
    if (nrels > 0) {
        xinfo |= PG_XINFO_HAS_RELFILENODES;
        put_le32(p + off, (uint32_t)nrels);
        off += 4;
        for (int i = 0; i < nrels; i++, off += 12) {
            put_le32(p + off, 1663);
            put_le32(p + off + 4, 5);
            put_le32(p + off + 8, rels[i]);
        }
    }
    if (twophase_xid) {
        xinfo |= PG_XINFO_HAS_TWOPHASE | PG_XINFO_HAS_GID;
        put_le32(p + off, twophase_xid);
        off += 4;
        memcpy(p + off, "gid1", 5);
        off += 5;
    }
    put_le32(p + xinfo_off, xinfo);
    return off;
}

static void test_xact_clog_twophase(void **state)
{
    (void)state;
    mem_store m = {0};
    ingest_state *ing = new_ingest(&m, NULL);
    rec_builder *b = calloc(1, sizeof *b);

    /* CLOG zero page: segment 1 page 2 (page 34). */
    wal_record *r = mk(b, PG_RM_CLOG, PG_CLOG_ZEROPAGE, 0, 4);
    put_le32(b->main, 34);
    ingest_ok(ing, 0x100, r);
    pg_key zk = pg_key_slru_block(SLRU_CLOG, 1, 2);
    assert_int_equal(value_at(&m, &zk, 0x100)->kind, VAL_ZERO_PAGE);
    pg_key szk = {.kind = KEY_SLRU_SIZE, .fork = SLRU_CLOG, .rel = 1};
    const mem_value *sz = mem_latest(&m, &szk, LSN_MAX);
    assert_int_equal(get_be32(sz->payload), 3);

    /* A relation to drop at commit. */
    smgr_create(ing, b, 0x110, 300, FORK_MAIN);
    smgr_create(ing, b, 0x118, 300, FORK_FSM);

    /* Commit of xid 32767 with subxacts on the next CLOG page. */
    uint32_t subs[] = {32769, 32768, 40000};
    uint32_t rels[] = {300};
    uint32_t len = xact_body(b->main, subs, 3, rels, 1, 0);
    r = mk(b, PG_RM_XACT, PG_XLOG_XACT_COMMIT | PG_XLOG_XACT_HAS_INFO, 32767, len);
    ingest_ok(ing, 0x200, r);
    pg_key p0 = pg_key_slru_block(SLRU_CLOG, 0, 0), p1 = pg_key_slru_block(SLRU_CLOG, 0, 1);
    const mem_value *c0 = value_at(&m, &p0, 0x200), *c1 = value_at(&m, &p1, 0x200);
    assert_non_null(c0);
    assert_non_null(c1);
    assert_int_equal(c0->payload[0], PG_XACT_STATUS_COMMITTED);
    assert_int_equal(get_be32(c0->payload + 1), 1);
    assert_int_equal(get_be32(c0->payload + 5), 32767);
    assert_int_equal(get_be32(c1->payload + 1), 3);
    assert_int_equal(get_be32(c1->payload + 5), 32768); /* sorted */
    assert_int_equal(get_be32(c1->payload + 13), 40000);
    assert_int_equal(size_of(ing, 1663, 5, 300, FORK_MAIN), UINT32_MAX);
    assert_int_equal(size_of(ing, 1663, 5, 300, FORK_FSM), UINT32_MAX);

    /* Abort without info. */
    r = mk(b, PG_RM_XACT, PG_XLOG_XACT_ABORT, 41000, 8);
    memset(b->main, 0, 8);
    ingest_ok(ing, 0x300, r);
    const mem_value *ca = value_at(&m, &p1, 0x300);
    assert_int_equal(ca->payload[0], PG_XACT_STATUS_ABORTED);

    /* Prepare, then commit prepared. */
    r = mk(b, PG_RM_XACT, PG_XLOG_XACT_PREPARE, 42000, 100);
    memset(b->main, 0, 100);
    put_le32(b->main, PG_TWOPHASE_MAGIC);
    put_le32(b->main + 4, 104);
    put_le32(b->main + PG_XACT_PREPARE_XID, 42000);
    ingest_ok(ing, 0x400, r);
    pg_key tk = {.kind = KEY_TWOPHASE, .rel = 42000};
    assert_int_equal(value_at(&m, &tk, 0x400)->kind, VAL_BLOB);
    assert_int_equal(value_at(&m, &tk, 0x400)->len, 100);
    len = xact_body(b->main, NULL, 0, NULL, 0, 42000);
    r = mk(b, PG_RM_XACT, PG_XLOG_XACT_COMMIT_PREPARED | PG_XLOG_XACT_HAS_INFO, 0, len);
    ingest_ok(ing, 0x500, r);
    assert_int_equal(value_at(&m, &tk, 0x500)->kind, VAL_TOMBSTONE);
    assert_int_equal(get_be32(value_at(&m, &p1, 0x500)->payload + 5), 42000);

    /* Malformed: a subxact count past the data, a prepare with a bad
     * length, an unterminated GID. */
    len = xact_body(b->main, subs, 3, NULL, 0, 0);
    put_le32(b->main + 12, 1000000);
    r = mk(b, PG_RM_XACT, PG_XLOG_XACT_COMMIT | PG_XLOG_XACT_HAS_INFO, 50000, len);
    ingest_bad(ing, 0x600, r, "subtransactions");
    put_le32(b->main + 12, 0x80000000u);
    ingest_bad(ing, 0x608, r, "subtransactions");
    r = mk(b, PG_RM_XACT, PG_XLOG_XACT_PREPARE, 42001, 100);
    put_le32(b->main + 4, 999);
    ingest_bad(ing, 0x610, r, "prepare");
    len = xact_body(b->main, NULL, 0, NULL, 0, 42000);
    r = mk(b, PG_RM_XACT, PG_XLOG_XACT_COMMIT_PREPARED | PG_XLOG_XACT_HAS_INFO, 0, len - 1);
    b->main[len - 2] = 'x'; /* the GID's NUL is gone */
    ingest_bad(ing, 0x618, r, "GID");
    r = mk(b, PG_RM_XACT, PG_XLOG_XACT_COMMIT, 50000, 7);
    ingest_bad(ing, 0x620, r, "shorter");

    /* CLOG truncate drops whole segments before the cutoff. */
    r = mk(b, PG_RM_CLOG, PG_CLOG_ZEROPAGE, 0, 4);
    put_le32(b->main, 0);
    ingest_ok(ing, 0x700, r);
    pg_key seg0 = {.kind = KEY_SLRU_SIZE, .fork = SLRU_CLOG, .rel = 0};
    assert_int_equal(mem_latest(&m, &seg0, LSN_MAX)->kind, VAL_SIZE);
    r = mk(b, PG_RM_CLOG, PG_CLOG_TRUNCATE, 0, 12);
    put_le32(b->main, 40); /* cutoff page 40: segment 0 (pages 0-31) goes */
    put_le32(b->main + 4, 40 * PG_CLOG_XACTS_PER_PAGE);
    put_le32(b->main + 8, 1);
    ingest_ok(ing, 0x710, r);
    assert_int_equal(mem_latest(&m, &seg0, LSN_MAX)->kind, VAL_TOMBSTONE);
    assert_int_equal(mem_latest(&m, &szk, LSN_MAX)->kind, VAL_SIZE);

    free(b);
    ingest_destroy(ing);
    mem_free(&m);
}

static void test_multixact(void **state)
{
    (void)state;
    mem_store m = {0};
    ingest_state *ing = new_ingest(&m, NULL);
    rec_builder *b = calloc(1, sizeof *b);
    /* Members 1634..1637 straddle members pages 0 and 1 (1636 per page). */
    wal_record *r = mk(b, PG_RM_MULTIXACT, PG_XLOG_MULTIXACT_CREATE_ID, 0, 12 + 4 * 8);
    put_le32(b->main, 2049); /* offsets page 1 */
    put_le32(b->main + 4, 1634);
    put_le32(b->main + 8, 4);
    for (int i = 0; i < 4; i++) {
        put_le32(b->main + 12 + 8 * i, 900 + (uint32_t)i);
        put_le32(b->main + 16 + 8 * i, (uint32_t)i);
    }
    ingest_ok(ing, 0x100, r);
    pg_key ok = pg_key_slru_block(SLRU_MULTIXACT_OFFSETS, 0, 1);
    const mem_value *ov = value_at(&m, &ok, 0x100);
    assert_int_equal(ov->kind, VAL_MXACT_OFFSET);
    assert_int_equal(get_be32(ov->payload), 2049);
    assert_int_equal(get_be32(ov->payload + 4), 1634);
    pg_key m0 = pg_key_slru_block(SLRU_MULTIXACT_MEMBERS, 0, 0);
    pg_key m1 = pg_key_slru_block(SLRU_MULTIXACT_MEMBERS, 0, 1);
    const mem_value *v0 = value_at(&m, &m0, 0x100), *v1 = value_at(&m, &m1, 0x100);
    assert_int_equal(v0->kind, VAL_MXACT_MEMBERS);
    assert_int_equal(get_be32(v0->payload), 1634);
    assert_int_equal(get_be32(v0->payload + 4), 2);
    assert_int_equal(get_be32(v1->payload), 1636);
    assert_int_equal(get_be32(v1->payload + 4), 2);
    assert_int_equal(get_be32(v1->payload + 8), 902);
    assert_int_equal(v1->payload[12], 2);

    /* Malformed counts. */
    put_le32(b->main + 8, 5);
    ingest_bad(ing, 0x200, r, "members");
    put_le32(b->main + 8, 0xFFFFFFFFu);
    ingest_bad(ing, 0x208, r, "members");
    r = mk(b, PG_RM_MULTIXACT, PG_XLOG_MULTIXACT_TRUNCATE_ID, 0, 19);
    ingest_bad(ing, 0x210, r, "truncate");

    free(b);
    ingest_destroy(ing);
    mem_free(&m);
}

static void test_dbase_relmap_vm(void **state)
{
    (void)state;
    mem_store m = {0};
    ingest_options o;
    ingest_options_default(&o);
    o.max_gap_fill = 0; /* keep the in-memory list small: heap blocks go far out */
    ingest_state *ing = new_ingest(&m, &o);
    rec_builder *b = calloc(1, sizeof *b);

    /* Source database 5: relation 400 with an image and a zero page. */
    wal_record *r = mk(b, PG_RM_XLOG, PG_XLOG_FPI, 0, 0);
    static uint8_t img[PG_BLCKSZ];
    memset(img, 0x5A, sizeof img);
    put_le16(img + PG_PAGE_UPPER_OFF, 0x100);
    add_block(r, 0, 400, FORK_MAIN, 1, false);
    r->blocks[0].has_image = true;
    r->blocks[0].apply_image = true;
    r->blocks[0].bimg = img;
    r->blocks[0].bimg_len = PG_BLCKSZ;
    ingest_ok(ing, 0x100, r);
    pg_key ik = pg_key_rel_block(1663, 5, 400, FORK_MAIN, 1);
    const mem_value *iv = value_at(&m, &ik, 0x100);
    assert_int_equal(iv->kind, VAL_IMAGE);
    assert_int_equal(get_le32(iv->payload + 4), 0x100); /* page LSN = record end */
    assert_int_equal(iv->payload[100], 0x5A);

    /* A hole is re-expanded. */
    r->blocks[0].blkno = 2;
    r->blocks[0].hole_offset = 200;
    r->blocks[0].hole_length = 1000;
    r->blocks[0].bimg_len = PG_BLCKSZ - 1000;
    ingest_ok(ing, 0x108, r);
    pg_key hk = pg_key_rel_block(1663, 5, 400, FORK_MAIN, 2);
    const mem_value *hv = value_at(&m, &hk, 0x108);
    assert_int_equal(hv->payload[199], 0x5A);
    assert_int_equal(hv->payload[200], 0);
    assert_int_equal(hv->payload[1199], 0);
    assert_int_equal(hv->payload[1200], 0x5A);
    /* An inconsistent image length is rejected. */
    r->blocks[0].bimg_len = 100;
    ingest_bad(ing, 0x110, r, "image length");

    /* Relmap of database 5. */
    r = mk(b, PG_RM_RELMAP, PG_XLOG_RELMAP_UPDATE, 0, 12 + 512);
    put_le32(b->main, 5);
    put_le32(b->main + 4, 1663);
    put_le32(b->main + 8, 512);
    memset(b->main + 12, 0x33, 512);
    ingest_ok(ing, 0x200, r);
    pg_key mk5 = {.kind = KEY_RELMAP, .spc = 1663, .db = 5};
    assert_int_equal(value_at(&m, &mk5, 0x200)->len, 512);
    r->main_data_len = 12 + 511;
    ingest_bad(ing, 0x208, r, "relmap");

    /* FILE_COPY database 6 from 5: sizes, blocks and the relmap. */
    r = mk(b, PG_RM_DBASE, PG_XLOG_DBASE_CREATE_FILE_COPY, 0, 16);
    put_le32(b->main, 6);
    put_le32(b->main + 4, 1663);
    put_le32(b->main + 8, 5);
    put_le32(b->main + 12, 1663);
    ingest_ok(ing, 0x300, r);
    uint32_t n6 = 0;
    char err[256];
    assert_int_equal(ingest_rel_size(ing, 1663, 6, 400, FORK_MAIN, &n6, err, sizeof err), 1);
    assert_int_equal(n6, 3);
    pg_key d0 = pg_key_rel_block(1663, 6, 400, FORK_MAIN, 0);
    pg_key d1 = pg_key_rel_block(1663, 6, 400, FORK_MAIN, 1);
    assert_int_equal(value_at(&m, &d0, 0x300)->kind, VAL_ZERO_PAGE);
    iv = value_at(&m, &ik, 0x100); /* pointers into m move as it grows */
    assert_memory_equal(value_at(&m, &d1, 0x300)->payload, iv->payload, PG_BLCKSZ);
    pg_key mk6 = {.kind = KEY_RELMAP, .spc = 1663, .db = 6};
    assert_int_equal(value_at(&m, &mk6, 0x300)->len, 512);
    pg_key db6 = {.kind = KEY_DB, .spc = 1663, .db = 6};
    assert_int_equal(value_at(&m, &db6, 0x300)->kind, VAL_BLOB);

    /* WAL_LOG create of database 7: just the database. */
    r = mk(b, PG_RM_DBASE, PG_XLOG_DBASE_CREATE_WAL_LOG, 0, 8);
    put_le32(b->main, 7);
    put_le32(b->main + 4, 1663);
    ingest_ok(ing, 0x310, r);
    pg_key db7 = {.kind = KEY_DB, .spc = 1663, .db = 7};
    assert_int_equal(value_at(&m, &db7, 0x310)->kind, VAL_BLOB);

    /* Drop database 6: its relations, relmap and marker go. */
    r = mk(b, PG_RM_DBASE, PG_XLOG_DBASE_DROP, 0, 12);
    put_le32(b->main, 6);
    put_le32(b->main + 4, 1);
    put_le32(b->main + 8, 1663);
    ingest_ok(ing, 0x400, r);
    assert_int_equal(ingest_rel_size(ing, 1663, 6, 400, FORK_MAIN, &n6, err, sizeof err), 0);
    assert_int_equal(value_at(&m, &db6, 0x400)->kind, VAL_TOMBSTONE);
    assert_int_equal(count_kind(&m, KEY_REL_SIZE, VAL_TOMBSTONE), 1);
    assert_int_equal(value_at(&m, &mk6, 0x400)->kind, VAL_TOMBSTONE);
    assert_int_equal(size_of(ing, 1663, 5, 400, FORK_MAIN), 3); /* source untouched */
    put_le32(b->main + 4, 2);
    ingest_bad(ing, 0x408, r, "tablespaces");

    /* VM clears: an update moving a tuple between heap blocks on two VM
     * pages clears both; a VM page past the VM's end is left alone. */
    r = mk(b, PG_RM_HEAP2, 0x40, 0, 5);
    add_block(r, 0, 400, FORK_VM, 1, false);
    ingest_ok(ing, 0x500, r); /* VM of 400 now has 2 pages */
    r = mk(b, PG_RM_HEAP, PG_XLOG_HEAP_UPDATE, 800, PG_HEAP_UPDATE_SIZE);
    memset(b->main, 0, PG_HEAP_UPDATE_SIZE);
    b->main[7] = PG_XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED | PG_XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED;
    add_block(r, 0, 400, FORK_MAIN, 32672 + 5, false); /* new: VM page 1 */
    add_block(r, 1, 400, FORK_MAIN, 7, false);         /* old: VM page 0 */
    ingest_ok(ing, 0x510, r);
    pg_key v0 = pg_key_rel_block(1663, 5, 400, FORK_VM, 0);
    pg_key v1 = pg_key_rel_block(1663, 5, 400, FORK_VM, 1);
    const mem_value *c0 = value_at(&m, &v0, 0x510), *c1 = value_at(&m, &v1, 0x510);
    assert_int_equal(c0->kind, VAL_VM_CLEAR);
    assert_int_equal(c0->payload[0], PG_VM_VALID_BITS);
    assert_int_equal(get_be32(c0->payload + 1), 7);
    assert_int_equal(get_be32(c0->payload + 5), UINT32_MAX);
    assert_int_equal(get_be32(c1->payload + 1), 32672 + 5);
    /* Both on one VM page: one delta with both. */
    r->blocks[0].blkno = 9;
    ingest_ok(ing, 0x518, r);
    c0 = value_at(&m, &v0, 0x518);
    assert_int_equal(get_be32(c0->payload + 1), 9);
    assert_int_equal(get_be32(c0->payload + 5), 7);
    assert_null(value_at(&m, &v1, 0x518));
    /* Lock clearing all-frozen on a heap block whose VM page is past the end. */
    r = mk(b, PG_RM_HEAP, PG_XLOG_HEAP_LOCK, 800, PG_HEAP_LOCK_SIZE);
    memset(b->main, 0, 8);
    b->main[7] = PG_XLH_LOCK_ALL_FROZEN_CLEARED;
    add_block(r, 0, 400, FORK_MAIN, 3 * 32672, false);
    ingest_ok(ing, 0x520, r);
    ingest_stats st;
    ingest_get_stats(ing, &st);
    assert_int_equal(st.vm_clears, 3);
    r->blocks[0].blkno = 4;
    ingest_ok(ing, 0x528, r);
    assert_int_equal(value_at(&m, &v0, 0x528)->payload[0], PG_VM_ALL_FROZEN);
    r->main_data_len = 7;
    ingest_bad(ing, 0x530, r, "heap lock");

    free(b);
    ingest_destroy(ing);
    mem_free(&m);
}

static void test_checkpoint_records(void **state)
{
    (void)state;
    mem_store m = {0};
    ingest_state *ing = new_ingest(&m, NULL);
    rec_builder *b = calloc(1, sizeof *b);
    wal_record *r = mk(b, PG_RM_XLOG, PG_XLOG_CHECKPOINT_ONLINE, 0, PG_CHECKPOINT_SIZE);
    memset(b->main, 0, PG_CHECKPOINT_SIZE);
    put_le64(b->main + PG_CP_NEXT_XID, 1000);
    put_le32(b->main + PG_CP_NEXT_OID, 20000);
    ingest_ok(ing, 0x100, r);
    pg_key ck = {.kind = KEY_CHECKPOINT};
    assert_int_equal(get_le32(value_at(&m, &ck, 0x100)->payload + PG_CP_NEXT_OID), 20000);
    /* An xid beyond nextXid moves it up, rounded to 1024. */
    r = mk(b, PG_RM_HEAP, PG_XLOG_HEAP_INSERT, 1500, PG_HEAP_INSERT_SIZE);
    memset(b->main, 0, 3);
    add_block(r, 0, 500, FORK_MAIN, 0, true);
    ingest_ok(ing, 0x200, r);
    assert_int_equal(get_le64(value_at(&m, &ck, 0x200)->payload + PG_CP_NEXT_XID), 2048);
    /* An xid below it does not rewrite the checkpoint. */
    r->hdr.xid = 1600;
    ingest_ok(ing, 0x300, r);
    assert_null(value_at(&m, &ck, 0x300));
    /* NEXTOID. */
    r = mk(b, PG_RM_XLOG, PG_XLOG_NEXTOID, 0, 4);
    put_le32(b->main, 30000);
    ingest_ok(ing, 0x400, r);
    assert_int_equal(get_le32(value_at(&m, &ck, 0x400)->payload + PG_CP_NEXT_OID), 30000);
    /* A later online checkpoint with an older nextXid keeps ours. */
    r = mk(b, PG_RM_XLOG, PG_XLOG_CHECKPOINT_ONLINE, 0, PG_CHECKPOINT_SIZE);
    memset(b->main, 0, PG_CHECKPOINT_SIZE);
    put_le64(b->main + PG_CP_NEXT_XID, 1700);
    put_le32(b->main + PG_CP_NEXT_OID, 31000);
    ingest_ok(ing, 0x500, r);
    const mem_value *cv = value_at(&m, &ck, 0x500);
    assert_int_equal(get_le64(cv->payload + PG_CP_NEXT_XID), 2048);
    assert_int_equal(get_le32(cv->payload + PG_CP_NEXT_OID), 31000);
    /* Bad lengths. */
    r->main_data_len = 80;
    ingest_bad(ing, 0x600, r, "checkpoint");
    r = mk(b, PG_RM_XLOG, PG_XLOG_NEXTOID, 0, 3);
    ingest_bad(ing, 0x608, r, "nextoid");
    r = mk(b, PG_RM_XLOG, PG_XLOG_PARAMETER_CHANGE, 0, 27);
    ingest_bad(ing, 0x610, r, "parameter");

    free(b);
    ingest_destroy(ing);
    mem_free(&m);
}

/* An xl_logical_message with prefix and message into main (cap bytes);
 * returns the main data length. */
static uint32_t logical_message(uint8_t *main, size_t cap, const char *prefix, const char *msg,
                                size_t msg_len)
{
    size_t plen = strlen(prefix) + 1;
    assert_true(PG_LOGICAL_MESSAGE_HDR_SIZE + plen + msg_len <= cap);
    memset(main, 0, PG_LOGICAL_MESSAGE_HDR_SIZE);
    put_le64(main + PG_LOGICAL_MESSAGE_PREFIX_SIZE_OFF, plen);
    put_le64(main + PG_LOGICAL_MESSAGE_SIZE_OFF, msg_len);
    memcpy(main + PG_LOGICAL_MESSAGE_HDR_SIZE, prefix, plen);
    memcpy(main + PG_LOGICAL_MESSAGE_HDR_SIZE + plen, msg, msg_len);
    return (uint32_t)(PG_LOGICAL_MESSAGE_HDR_SIZE + plen + msg_len);
}

static void test_auto_conf_messages(void **state)
{
    (void)state;
    mem_store m = {0};
    ingest_state *ing = new_ingest(&m, NULL);
    rec_builder *b = calloc(1, sizeof *b);
    pg_key k = {.kind = KEY_CHECKPOINT, .rel = KEY_CHECKPOINT_REL_AUTO_CONF};
    const char conf1[] = "# auto\nwork_mem = '7MB'\n";
    uint32_t len =
        logical_message(b->main, sizeof b->main, WAL_AUTO_CONF_PREFIX, conf1, sizeof conf1 - 1);
    wal_record *r = mk(b, PG_RM_LOGICALMSG, PG_XLOG_LOGICAL_MESSAGE, 0, len);
    ingest_ok(ing, 0x100, r);
    const mem_value *v = value_at(&m, &k, 0x100);
    assert_non_null(v);
    assert_int_equal(v->kind, VAL_BLOB);
    assert_int_equal(v->len, sizeof conf1 - 1);
    assert_memory_equal(v->payload, conf1, sizeof conf1 - 1);
    /* Another prefix is somebody else's message: nothing stored. */
    len = logical_message(b->main, sizeof b->main, "app", "x", 1);
    r = mk(b, PG_RM_LOGICALMSG, PG_XLOG_LOGICAL_MESSAGE, 0, len);
    ingest_ok(ing, 0x200, r);
    assert_null(value_at(&m, &k, 0x200));
    /* ALTER SYSTEM RESET ALL: an empty file is a version too. */
    len = logical_message(b->main, sizeof b->main, WAL_AUTO_CONF_PREFIX, "", 0);
    r = mk(b, PG_RM_LOGICALMSG, PG_XLOG_LOGICAL_MESSAGE, 0, len);
    ingest_ok(ing, 0x300, r);
    assert_int_equal(value_at(&m, &k, 0x300)->len, 0);
    /* Malformed: short header, sizes that do not add up, no NUL after the
     * prefix, a NUL in the file. */
    r = mk(b, PG_RM_LOGICALMSG, PG_XLOG_LOGICAL_MESSAGE, 0, 10);
    ingest_bad(ing, 0x400, r, "too short");
    len = logical_message(b->main, sizeof b->main, WAL_AUTO_CONF_PREFIX, "ab", 2);
    r = mk(b, PG_RM_LOGICALMSG, PG_XLOG_LOGICAL_MESSAGE, 0, len);
    put_le64(b->main + PG_LOGICAL_MESSAGE_SIZE_OFF, UINT64_MAX);
    ingest_bad(ing, 0x408, r, "bytes of payload");
    put_le64(b->main + PG_LOGICAL_MESSAGE_SIZE_OFF, 2);
    put_le64(b->main + PG_LOGICAL_MESSAGE_PREFIX_SIZE_OFF, UINT64_MAX - 1);
    ingest_bad(ing, 0x410, r, "bytes of payload");
    put_le64(b->main + PG_LOGICAL_MESSAGE_PREFIX_SIZE_OFF, strlen(WAL_AUTO_CONF_PREFIX));
    put_le64(b->main + PG_LOGICAL_MESSAGE_SIZE_OFF, 3);
    ingest_bad(ing, 0x418, r, "NUL-terminated");
    len = logical_message(b->main, sizeof b->main, WAL_AUTO_CONF_PREFIX, "a\0b", 3);
    r = mk(b, PG_RM_LOGICALMSG, PG_XLOG_LOGICAL_MESSAGE, 0, len);
    ingest_bad(ing, 0x420, r, "NUL byte");
    /* Larger than WAL_AUTO_CONF_MAX: refused. */
    size_t big_cap = WAL_AUTO_CONF_MAX + 4096;
    uint8_t *big = malloc(big_cap);
    char *text = malloc(WAL_AUTO_CONF_MAX + 1);
    memset(text, '#', WAL_AUTO_CONF_MAX + 1);
    len = logical_message(big, big_cap, WAL_AUTO_CONF_PREFIX, text, WAL_AUTO_CONF_MAX + 1);
    r = mk(b, PG_RM_LOGICALMSG, PG_XLOG_LOGICAL_MESSAGE, 0, 0);
    r->main_data = big;
    r->main_data_len = len;
    ingest_bad(ing, 0x428, r, "at most");
    /* Exactly the limit is fine. */
    len = logical_message(big, big_cap, WAL_AUTO_CONF_PREFIX, text, WAL_AUTO_CONF_MAX);
    r->main_data_len = len;
    ingest_ok(ing, 0x430, r);
    assert_int_equal(value_at(&m, &k, 0x430)->len, WAL_AUTO_CONF_MAX);
    free(big);
    free(text);
    free(b);
    ingest_destroy(ing);
    mem_free(&m);
}

static int hook_calls, hook_complete;
static void count_hook(void *arg, const pg_key *k, lsn_t lsn, bool complete)
{
    (void)arg;
    (void)lsn;
    assert_true(k->kind == KEY_REL_BLOCK || k->kind == KEY_SLRU_BLOCK);
    hook_calls++;
    hook_complete += complete;
}

static void test_page_hook(void **state)
{
    (void)state;
    mem_store m = {0};
    ingest_options o;
    ingest_options_default(&o);
    o.page_hook = count_hook;
    ingest_state *ing = new_ingest(&m, &o);
    rec_builder *b = calloc(1, sizeof *b);
    wal_record *r = mk(b, PG_RM_HEAP, PG_XLOG_HEAP_INSERT, 700, PG_HEAP_INSERT_SIZE);
    memset(b->main, 0, 3);
    add_block(r, 0, 600, FORK_MAIN, 1, true); /* gap page 0 + block 1 */
    ingest_ok(ing, 0x100, r);
    r->blocks[0].will_init = false;
    ingest_ok(ing, 0x108, r);
    assert_int_equal(hook_calls, 3);
    assert_int_equal(hook_complete, 2);
    free(b);
    ingest_destroy(ing);
    mem_free(&m);
}

/* The image safety net: the 4th delta since a page's last complete value
 * makes ingest rebuild the page and store it as an image at that record's
 * LSN (replacing the delta); counting starts again from there, a failed
 * rebuild is counted and not fatal, and other pages keep their own counts. */
static void test_image_threshold(void **state)
{
    (void)state;
    mem_store m = {0};
    m.page_fill = 0xAB;
    ingest_options o;
    ingest_options_default(&o);
    o.image_threshold = 4;
    ingest_state *ing = new_ingest(&m, &o);
    rec_builder *b = calloc(1, sizeof *b);
    wal_record *r = mk(b, PG_RM_HEAP, PG_XLOG_HEAP_INSERT, 700, PG_HEAP_INSERT_SIZE);
    memset(b->main, 0, 3);
    add_block(r, 0, 610, FORK_MAIN, 0, true);
    ingest_ok(ing, 0x100, r); /* will-init: complete, count 0 */
    r->blocks[0].will_init = false;
    pg_key k = pg_key_rel_block(1663, 5, 610, FORK_MAIN, 0);
    pg_key k1 = pg_key_rel_block(1663, 5, 610, FORK_MAIN, 1);
    lsn_t lsn = 0x100;
    for (int i = 1; i <= 9; i++) {
        lsn += 8;
        /* Block 1 gets a delta every other record. */
        r->max_block_id = -1;
        add_block(r, 0, 610, FORK_MAIN, 0, false);
        if (i % 2 == 0)
            add_block(r, 1, 610, FORK_MAIN, 1, i == 2);
        ingest_ok(ing, lsn, r);
        const mem_value *v = value_at(&m, &k, lsn);
        assert_non_null(v);
        if (i == 4 || i == 8) {
            assert_int_equal(v->kind, VAL_IMAGE);
            assert_int_equal(v->payload[100], 0xAB);
        } else {
            assert_int_equal(v->kind, VAL_WAL_RECORD);
        }
    }
    ingest_stats st;
    ingest_get_stats(ing, &st);
    assert_int_equal(st.images_generated, 2);
    assert_int_equal(st.image_failures, 0);
    /* Block 1: will-init at i=2, deltas at 4, 6, 8: three, no image. */
    for (lsn_t l = 0x100; l <= lsn; l += 8) {
        const mem_value *v = value_at(&m, &k1, l);
        assert_true(v == NULL || v->kind == VAL_WAL_RECORD || v->kind == VAL_ZERO_PAGE);
    }

    /* A rebuild that fails is logged and counted; ingest goes on. */
    m.page_fill = 0;
    r->max_block_id = -1;
    add_block(r, 0, 610, FORK_MAIN, 0, false);
    for (int i = 0; i < 4; i++) {
        lsn += 8;
        ingest_ok(ing, lsn, r);
    }
    ingest_get_stats(ing, &st);
    assert_int_equal(st.images_generated, 2);
    assert_int_equal(st.image_failures, 1);
    assert_int_equal(value_at(&m, &k, lsn)->kind, VAL_WAL_RECORD);
    free(b);
    ingest_destroy(ing);
    mem_free(&m);
}

/* ---- over the real store ---------------------------------------------- */

/*
 * A standalone FPI record with 32 images of a new relation (what
 * log_newpage_range writes for a GIN or GiST build) over the real store:
 * each block extends the fork, so the size key gets 32 versions at the same
 * LSN.  The open layer used to double a key's version capacity on every
 * same-LSN replacement and failed with "out of memory" near the 30th.
 */
static void test_fpi_32_blocks_real_store(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_ingest_store.XXXXXX";
    assert_non_null(mkdtemp(dir));
    store_options so;
    store_options_default(&so);
    store *st = NULL;
    char err[256];
    if (store_open(dir, &so, &st, err, sizeof err) != 0)
        fail_msg("store_open: %s", err);
    store_advance(st, 0x1000000);
    ingest_state *ing = ingest_create(st, NULL);
    assert_non_null(ing);

    static uint8_t images[WAL_XLR_MAX_BLOCK_ID + 1][PG_BLCKSZ];
    rec_builder *b = calloc(1, sizeof *b);
    assert_non_null(b);
    wal_record *r = mk(b, PG_RM_XLOG, PG_XLOG_FPI, 0, 0);
    for (int id = 0; id < 32; id++) {
        memset(images[id], 0, PG_BLCKSZ);
        put_le16(images[id] + PG_PAGE_UPPER_OFF, 8000);
        images[id][100] = (uint8_t)(id + 1);
        add_block(r, id, 24576, 0, (uint32_t)id, false);
        r->blocks[id].has_image = true;
        r->blocks[id].apply_image = true;
        r->blocks[id].bimg = images[id];
        r->blocks[id].bimg_len = PG_BLCKSZ;
    }
    lsn_t end = 0x1000100;
    ingest_ok(ing, end, r);
    store_advance(st, end);

    uint32_t n = 0;
    assert_int_equal(ingest_rel_size(ing, 1663, 5, 24576, 0, &n, err, sizeof err), 1);
    assert_int_equal(n, 32);
    pg_key sk = pg_key_rel_size(1663, 5, 24576, 0);
    value_ref v;
    lsn_t found;
    assert_int_equal(store_get_latest(st, &sk, end, &v, &found, err, sizeof err), 1);
    assert_int_equal(v.kind, VAL_SIZE);
    assert_int_equal(get_be32(v.payload), 32);
    assert_true(found == end);
    free((void *)v.payload);
    for (uint32_t blk = 0; blk < 32; blk++) {
        pg_key k = pg_key_rel_block(1663, 5, 24576, 0, blk);
        assert_int_equal(store_get_latest(st, &k, end, &v, &found, err, sizeof err), 1);
        assert_int_equal(v.kind, VAL_IMAGE);
        assert_int_equal(v.payload[100], blk + 1);
        free((void *)v.payload);
    }
    free(b);
    ingest_destroy(ing);
    store_close(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sample_block_values), cmocka_unit_test(test_sizes_and_truncate),
        cmocka_unit_test(test_xact_clog_twophase),  cmocka_unit_test(test_multixact),
        cmocka_unit_test(test_dbase_relmap_vm),     cmocka_unit_test(test_checkpoint_records),
        cmocka_unit_test(test_auto_conf_messages),  cmocka_unit_test(test_page_hook),
        cmocka_unit_test(test_image_threshold),     cmocka_unit_test(test_fpi_32_blocks_real_store),
    };
    return cmocka_run_group_tests(tests, load_sample, free_sample);
}
