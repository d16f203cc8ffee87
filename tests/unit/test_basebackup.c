/*
 * test_basebackup.c: pg_control + bootstrap WAL generation (pageserver/
 * pgcontrol.h) and the basebackup tar (pageserver/service/basebackup.h).
 *
 * What it shows:
 *   - for record starts mid-page, at a page boundary, at a segment boundary,
 *     split over two pages and split over two segments, the segment(s)
 *     carry a valid long header on page 0 and a checkpoint record that our
 *     streaming WAL reader (common/pg/walformat.h: page headers, continuation
 *     flags and lengths, record CRC) reads back at the planned start, ending
 *     at the planned end, with redo = its own start, also when read from
 *     the segment's first byte (every page before the record continues a
 *     fake record up to it); pg_control has the
 *     right CRC, state, checkPoint and checkpoint copy;
 *   - bad LSNs (0, misaligned) and a bad pg_control CRC are refused;
 *   - a replica's pg_control (state, checkPoint, checkpoint copy,
 *     minRecoveryPoint, CRC) and its refusal of a bad stored pg_control;
 *   - the CLI's tar reader (cli/client/basebackup_tar.h) reads both archives fed
 *     in odd-sized pieces, entry for entry and byte for byte what the
 *     writer reports, and refuses absolute names, "..", links, bad
 *     checksums, non-octal sizes, oversized files, truncation, a lone zero
 *     block and data after the end;
 *   - a real initdb imported into a store gives a full tar that stock
 *     PostgreSQL 15 starts from without replaying WAL ("database system was
 *     shut down"), with every row there, accepting writes, and whose new WAL
 *     (pg_waldump) continues right after our checkpoint record; the non-full
 *     tar has no relation files and the same pg_control and WAL bytes.
 * The initdb part is skipped (not failed) when the stock binaries or the
 * postgres user are missing.
 */
#include <errno.h>
#include <pwd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "cli/client/basebackup_tar.h"
#include "base/byteorder.h"
#include "base/crc32c.h"
#include "pg/walformat.h"
#include "pageserver/service/basebackup.h"
#include "pageserver/ingest/import.h"
#include "pageserver/service/pgcontrol.h"
#include "pg/pgstructs.h"

#define PGBIN "/usr/lib/postgresql/15/bin"
#define SEG (16u << 20)

static void fake_control(uint8_t *c, uint8_t *cp)
{
    memset(c, 0, PG_CONTROL_FILE_SIZE);
    memset(cp, 0, PG_CHECKPOINT_SIZE);
    put_le64(c + PG_CTL_SYSTEM_ID, 0x1234567890ABCDEFull);
    put_le32(c + PG_CTL_VERSION, PG_CONTROL_VERSION);
    put_le32(c + PG_CTL_STATE, 6); /* in production */
    put_le32(c + PG_CTL_BLCKSZ, 8192);
    put_le32(c + PG_CTL_XLOG_BLCKSZ, 8192);
    put_le32(c + PG_CTL_XLOG_SEG_SIZE, SEG);
    put_le64(c + PG_CTL_MIN_RECOVERY_POINT, 0x5000);
    put_le32(c + PG_CTL_CRC, crc32c(c, PG_CTL_CRC));
    put_le32(cp + PG_CP_THIS_TLI, 1);
    put_le32(cp + PG_CP_PREV_TLI, 1);
    put_le64(cp + PG_CP_NEXT_XID, 745);
    put_le32(cp + PG_CP_NEXT_OID, 16390);
    put_le32(cp + PG_CP_OLDEST_ACTIVE_XID, 700);
}

/* Plans at lsn, builds the segments and reads the record back. */
static void check_layout(lsn_t lsn, lsn_t want_start, bool two_segments)
{
    uint8_t ctl[PG_CONTROL_FILE_SIZE], cp[PG_CHECKPOINT_SIZE];
    fake_control(ctl, cp);
    pgcontrol_boot b;
    char err[256];
    lsn_t prev = lsn - 64;
    assert_int_equal(
        pgcontrol_boot_plan(lsn, ctl, sizeof ctl, cp, prev, 1700000000, &b, err, sizeof err), 0);
    assert_int_equal(b.record_start, want_start);
    assert_int_equal(b.last_segno - b.first_segno, two_segments ? 1 : 0);
    assert_true(b.record_end % 8 == 0 && b.record_end > b.record_start);

    size_t nseg = (size_t)(b.last_segno - b.first_segno + 1);
    uint8_t *wal = malloc(nseg * SEG);
    assert_non_null(wal);
    for (size_t i = 0; i < nseg; i++) {
        pgcontrol_make_segment(&b, b.first_segno + i, wal + i * SEG);
        wal_page_header h;
        const char *why = NULL;
        assert_int_equal(wal_page_header_parse(wal + i * SEG, SEG, &h), WAL_LONG_PHD_SIZE);
        assert_int_equal(wal_page_header_check(&h, (b.first_segno + i) * SEG, SEG, &why), 0);
        assert_int_equal(h.sysid, 0x1234567890ABCDEFull);
    }
    /* The page holding the record start has a valid header, no continuation. */
    lsn_t base = b.first_segno * SEG;
    lsn_t page = want_start - want_start % 8192;
    wal_page_header h;
    const char *why = NULL;
    wal_page_header_parse(wal + (page - base), 8192, &h);
    assert_int_equal(wal_page_header_check(&h, page, SEG, &why), 0);
    /* It skips readers searching from the page start to the record. */
    uint32_t hsz = page % SEG == 0 ? WAL_LONG_PHD_SIZE : WAL_SHORT_PHD_SIZE;
    assert_int_equal(h.rem_len, want_start - page - hsz);
    assert_int_equal((h.info & WAL_XLP_FIRST_IS_CONTRECORD) != 0, h.rem_len != 0);

    /* Our streaming reader: page headers, continuation, CRC. */
    uint8_t *buf = malloc(WAL_READER_DEFAULT_BUF);
    wal_reader r;
    wal_reader_init(&r, b.record_start, SEG, buf, WAL_READER_DEFAULT_BUF);
    size_t off = (size_t)(b.record_start - base), used = 0;
    int rc = wal_reader_feed(&r, b.record_start, wal + off, nseg * SEG - off, &used, &why);
    assert_int_equal(rc, WAL_READER_RECORD);
    lsn_t s, e;
    const wal_record *rec = wal_reader_record(&r, &s, &e);
    assert_non_null(rec);
    assert_int_equal(s, b.record_start);
    assert_int_equal(e, b.record_end);
    assert_int_equal(rec->hdr.rmid, PG_RM_XLOG);
    assert_int_equal(rec->hdr.info, PG_XLOG_CHECKPOINT_SHUTDOWN);
    assert_int_equal(rec->hdr.prev, prev);
    assert_int_equal(rec->main_data_len, PG_CHECKPOINT_SIZE);
    assert_int_equal(get_le64(rec->main_data + PG_CP_REDO), b.record_start);
    assert_int_equal(get_le32(rec->main_data + PG_CP_OLDEST_ACTIVE_XID), 0);
    assert_int_equal(get_le32(rec->main_data + PG_CP_NEXT_OID), 16390);
    /* The segment is valid WAL from its first byte (the walproposer streams
     * an empty timeline from there): a reader started at the segment start
     * skips the fake continuation and finds the same record. */
    {
        wal_reader r2;
        uint8_t *buf2 = malloc(WAL_READER_DEFAULT_BUF);
        wal_reader_init(&r2, base, SEG, buf2, WAL_READER_DEFAULT_BUF);
        size_t at = 0;
        int rc2 = 0;
        while (at < nseg * SEG) {
            size_t u = 0;
            rc2 = wal_reader_feed(&r2, base + at, wal + at, nseg * SEG - at, &u, &why);
            assert_int_not_equal(rc2, WAL_READER_ERROR);
            at += u;
            if (rc2 == WAL_READER_RECORD)
                break;
        }
        assert_int_equal(rc2, WAL_READER_RECORD);
        lsn_t s2, e2;
        assert_non_null(wal_reader_record(&r2, &s2, &e2));
        assert_int_equal(s2, b.record_start);
        assert_int_equal(e2, b.record_end);
        free(buf2);
    }
    /* Everything else is zero: after the record the reader sees no record. */
    size_t consumed_to = off + used;
    for (size_t i = consumed_to; i < nseg * SEG; i++)
        if (wal[i] != 0) {
            /* Only page headers may follow. */
            lsn_t at = base + i;
            lsn_t pg = at - at % 8192;
            assert_true(at - pg < WAL_LONG_PHD_SIZE);
        }

    uint8_t out[PG_CONTROL_FILE_SIZE];
    pgcontrol_make_control(&b, ctl, sizeof ctl, out);
    assert_int_equal(get_le32(out + PG_CTL_CRC), crc32c(out, PG_CTL_CRC));
    assert_int_equal(get_le32(out + PG_CTL_STATE), PG_DB_SHUTDOWNED);
    assert_int_equal(get_le64(out + PG_CTL_CHECKPOINT), b.record_start);
    assert_memory_equal(out + PG_CTL_CHECKPOINT_COPY, rec->main_data, PG_CHECKPOINT_SIZE);
    assert_int_equal(get_le64(out + PG_CTL_MIN_RECOVERY_POINT), 0);
    free(buf);
    free(wal);
}

static void test_layouts(void **state)
{
    (void)state;
    check_layout(0x1000028, 0x1000028, false);           /* just after page 0's header */
    check_layout(0x1003A40, 0x1003A40, false);           /* mid page */
    check_layout(0x1004000, 0x1004000 + 24, false);      /* page boundary */
    check_layout(0x2000000, 0x2000000 + 40, false);      /* segment boundary */
    check_layout(0x1006000 - 48, 0x1006000 - 48, false); /* split over two pages */
    check_layout(0x2000000 - 56, 0x2000000 - 56, true);  /* split over two segments */
}

static void test_refusals(void **state)
{
    (void)state;
    uint8_t ctl[PG_CONTROL_FILE_SIZE], cp[PG_CHECKPOINT_SIZE];
    fake_control(ctl, cp);
    pgcontrol_boot b;
    char err[256];
    assert_int_equal(pgcontrol_boot_plan(0, ctl, sizeof ctl, cp, 0, 1, &b, err, sizeof err), -1);
    assert_non_null(strstr(err, "record boundary"));
    assert_int_equal(pgcontrol_boot_plan(0x1000004, ctl, sizeof ctl, cp, 0, 1, &b, err, sizeof err),
                     -1);
    assert_int_equal(
        pgcontrol_boot_plan(0x1000100, ctl, sizeof ctl, cp, 0x1000100, 1, &b, err, sizeof err), -1);
    ctl[PG_CTL_STATE] ^= 1;
    assert_int_equal(pgcontrol_boot_plan(0x1000100, ctl, sizeof ctl, cp, 0, 1, &b, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "CRC"));
    char name[25];
    pgcontrol_segment_name(1, 0x1FF, SEG, name);
    assert_string_equal(name, "0000000100000001000000FF");
}

/* A replica's pg_control: the stored one pointing at a real checkpoint
 * record, in recovery, with minRecoveryPoint where the files were taken. */
static void test_replica_control(void **state)
{
    (void)state;
    uint8_t ctl[PG_CONTROL_FILE_SIZE], cp[PG_CHECKPOINT_SIZE], out[PG_CONTROL_FILE_SIZE];
    fake_control(ctl, cp);
    uint32_t seg = 0;
    char err[256];
    assert_int_equal(pgcontrol_replica_seg_size(ctl, sizeof ctl, &seg, err, sizeof err), 0);
    assert_int_equal(seg, SEG);
    put_le64(cp + PG_CP_REDO, 0x1000100);
    put_le32(cp + PG_CP_THIS_TLI, 1);
    pgcontrol_make_replica_control(ctl, sizeof ctl, 0x1000200, cp, 0x1800000, out);
    assert_int_equal(get_le32(out + PG_CTL_CRC), crc32c(out, PG_CTL_CRC));
    assert_int_equal(get_le32(out + PG_CTL_STATE), PG_DB_SHUTDOWNED_IN_RECOVERY);
    assert_int_equal(get_le64(out + PG_CTL_CHECKPOINT), 0x1000200);
    assert_memory_equal(out + PG_CTL_CHECKPOINT_COPY, cp, PG_CHECKPOINT_SIZE);
    assert_int_equal(get_le64(out + PG_CTL_MIN_RECOVERY_POINT), 0x1800000);
    assert_int_equal(get_le32(out + PG_CTL_MIN_RECOVERY_POINT_TLI), 1);
    assert_int_equal(get_le64(out + PG_CTL_BACKUP_START_POINT), 0);
    assert_int_equal(out[PG_CTL_BACKUP_END_REQUIRED], 0);
    assert_int_equal(get_le64(out + PG_CTL_SYSTEM_ID), get_le64(ctl + PG_CTL_SYSTEM_ID));
    ctl[PG_CTL_STATE] ^= 1; /* the CRC no longer matches */
    assert_int_equal(pgcontrol_replica_seg_size(ctl, sizeof ctl, &seg, err, sizeof err), -1);
    assert_non_null(strstr(err, "CRC"));
}

/* ---- a real initdb ---- */

static char tmpdir[256];
static bool have_pg;

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

static int setup(void **state)
{
    (void)state;
    if (access(PGBIN "/initdb", X_OK) != 0 || getpwnam("postgres") == NULL)
        return 0;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/strata-test-bb-XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    /* A database of our own with a table, so the data check is real. */
    if (run("chown postgres %s && cd /tmp && runuser -u postgres -- %s/initdb -D %s/src -A trust "
            "-U postgres --no-sync >/dev/null 2>&1",
            tmpdir, PGBIN, tmpdir) != 0)
        return -1;
    have_pg = true;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (tmpdir[0] && getenv("STRATA_KEEP_TMP") == NULL)
        run("rm -rf %s", tmpdir);
    return 0;
}

/* A source over a bare store: pages must be stored images (an import). */
static int st_latest(void *arg, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found, char *err,
                     size_t errlen)
{
    return store_get_latest(arg, k, lsn, out, found, err, errlen);
}

static int st_scan(void *arg, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
                   void *fnarg, char *err, size_t errlen)
{
    return store_scan(arg, from, to, lsn, fn, fnarg, err, errlen);
}

static int image_at(store *st, const pg_key *k, lsn_t lsn, uint8_t *out, char *err, size_t errlen)
{
    value_ref v;
    lsn_t found;
    int rc = store_get_latest(st, k, lsn, &v, &found, err, errlen);
    if (rc < 0)
        return -1;
    if (rc == 0 || v.kind == VAL_ZERO_PAGE) {
        memset(out, 0, PG_BLCKSZ);
    } else if (v.kind == VAL_IMAGE && v.len == PG_BLCKSZ) {
        memcpy(out, v.payload, PG_BLCKSZ);
    } else {
        snprintf(err, errlen, "value kind %u needs redo", v.kind);
        free((void *)v.payload);
        return -1;
    }
    if (rc == 1)
        free((void *)v.payload);
    return 0;
}

static int st_page(void *arg, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork, uint32_t blk,
                   lsn_t lsn, uint8_t out[PG_BLCKSZ], char *err, size_t errlen)
{
    pg_key k = pg_key_rel_block(spc, db, rel, fork, blk);
    return image_at(arg, &k, lsn, out, err, errlen);
}

static int st_slru(void *arg, uint8_t kind, uint32_t segno, lsn_t lsn, uint8_t *out,
                   uint32_t max_blocks, uint32_t *nblocks, char *err, size_t errlen)
{
    pg_key sk = {.kind = KEY_SLRU_SIZE, .fork = kind, .rel = segno};
    value_ref v;
    lsn_t found;
    if (store_get_latest(arg, &sk, lsn, &v, &found, err, errlen) != 1)
        return -1;
    uint32_t n = get_be32(v.payload);
    free((void *)v.payload);
    if (n > max_blocks)
        return -1;
    for (uint32_t b = 0; b < n; b++) {
        pg_key k = pg_key_slru_block((slru_kind)kind, segno, b);
        if (image_at(arg, &k, lsn, out + (size_t)b * PG_BLCKSZ, err, errlen) != 0)
            return -1;
    }
    *nblocks = n;
    return 0;
}

static int file_sink(const uint8_t *data, size_t n, void *arg)
{
    return fwrite(data, 1, n, arg) == n ? 0 : -1;
}

static int cancel_sink(const uint8_t *data, size_t n, void *arg)
{
    (void)data;
    (void)n;
    (void)arg;
    return -1;
}

static bool files_equal(const char *a, const char *b)
{
    return run("cmp -s %s %s", a, b) == 0;
}

static int free_port(void)
{
    return 20000 + (int)(getpid() % 20000);
}

static void psql_scalar(int port, const char *sql, char *out, size_t len)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "runuser -u postgres -- %s/psql -X -A -t -h 127.0.0.1 -p %d -U postgres -d postgres "
             "-c \"%s\" 2>&1",
             PGBIN, port, sql);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    out[strcspn(out, "\n")] = '\0';
    pclose(p);
}

/* An LSN as pg_waldump prints it. */
static char *dump_lsn(lsn_t l, char *buf)
{
    snprintf(buf, 32, "%X/%08X", (unsigned)(l >> 32), (unsigned)l);
    return buf;
}

/* ---- the tar reader ---- */

typedef struct tar_count {
    uint32_t files, dirs;
    uint64_t bytes, data_bytes;
    bool refuse_dir_named_bad;
} tar_count;

static int tc_begin(const bbtar_entry *e, void *arg)
{
    tar_count *t = arg;
    if (e->is_dir)
        t->dirs++;
    else
        t->files++;
    t->bytes += e->size;
    return 0;
}

static int tc_data(const uint8_t *p, size_t n, void *arg)
{
    (void)p;
    ((tar_count *)arg)->data_bytes += n;
    return 0;
}

/* Reads the archive in path in pieces of step bytes. */
static int read_tar_file(const char *path, size_t step, tar_count *t, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    bbtar_reader r;
    bbtar_callbacks cb = {.begin = tc_begin, .data = tc_data, .arg = t};
    bbtar_init(&r, &cb);
    uint8_t *buf = malloc(step);
    size_t n;
    int rc = 0;
    while (rc == 0 && (n = fread(buf, 1, step, f)) > 0)
        rc = bbtar_feed(&r, buf, n);
    if (rc == 0)
        rc = bbtar_finish(&r);
    snprintf(err, errlen, "%s", r.err);
    free(buf);
    fclose(f);
    return rc;
}

/* One ustar header with a valid checksum. */
static void make_header(uint8_t h[512], const char *name, char type, const char *size_field)
{
    memset(h, 0, 512);
    memcpy(h, name, strlen(name));
    memcpy(h + 100, "0000600", 7);
    memcpy(h + 108, "0000000", 7);
    memcpy(h + 116, "0000000", 7);
    memcpy(h + 124, size_field, strlen(size_field));
    memcpy(h + 136, "00000000000", 11);
    memset(h + 148, ' ', 8);
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
}

/* Feeds blocks; returns the reader's verdict after finish. */
static int feed_blocks(const uint8_t *blocks, size_t n, char *err, size_t errlen)
{
    tar_count t = {0};
    bbtar_reader r;
    bbtar_callbacks cb = {.begin = tc_begin, .data = tc_data, .arg = &t};
    bbtar_init(&r, &cb);
    int rc = bbtar_feed(&r, blocks, n);
    if (rc == 0)
        rc = bbtar_finish(&r);
    snprintf(err, errlen, "%s", r.err);
    return rc;
}

static void expect_refused(const char *name, char type, const char *size, const char *why)
{
    uint8_t a[512 * 4];
    memset(a, 0, sizeof a);
    make_header(a, name, type, size);
    char err[400];
    assert_int_equal(feed_blocks(a, sizeof a, err, sizeof err), -1);
    if (strstr(err, why) == NULL)
        fail_msg("%s: expected \"%s\" in \"%s\"", name, why, err);
}

static void test_tar_reader(void **state)
{
    (void)state;
    char err[400];
    /* A good archive: a directory, a 3-byte file, the end. */
    uint8_t good[512 * 5];
    memset(good, 0, sizeof good);
    make_header(good, "base", '5', "00000000000");
    make_header(good + 512, "base/PG_VERSION", '0', "00000000003");
    memcpy(good + 1024, "15\n", 3);
    assert_int_equal(feed_blocks(good, sizeof good, err, sizeof err), 0);
    /* Fed byte by byte too. */
    {
        tar_count t = {0};
        bbtar_reader r;
        bbtar_callbacks cb = {.begin = tc_begin, .data = tc_data, .arg = &t};
        bbtar_init(&r, &cb);
        for (size_t i = 0; i < sizeof good; i++)
            assert_int_equal(bbtar_feed(&r, good + i, 1), 0);
        assert_int_equal(bbtar_finish(&r), 0);
        assert_int_equal(t.files, 1);
        assert_int_equal(t.dirs, 1);
        assert_int_equal(t.data_bytes, 3);
    }
    /* Truncations. */
    assert_int_equal(feed_blocks(good, 512 * 3, err, sizeof err), -1);
    assert_non_null(strstr(err, "truncated"));
    assert_int_equal(feed_blocks(good, 1024 + 2, err, sizeof err), -1);
    assert_non_null(strstr(err, "inside a file"));
    /* Data after the end. */
    uint8_t after[512 * 6];
    memset(after, 0, sizeof after);
    memcpy(after, good, sizeof good);
    after[sizeof after - 1] = 1;
    assert_int_equal(feed_blocks(after, sizeof after, err, sizeof err), -1);
    assert_non_null(strstr(err, "after the end"));
    /* A lone zero block before an entry. */
    uint8_t lone[512 * 5];
    memset(lone, 0, sizeof lone);
    make_header(lone + 512, "x", '0', "00000000000");
    assert_int_equal(feed_blocks(lone, sizeof lone, err, sizeof err), -1);
    assert_non_null(strstr(err, "lone zero block"));
    /* Bad checksum. */
    uint8_t bad[512 * 3];
    memset(bad, 0, sizeof bad);
    make_header(bad, "x", '0', "00000000000");
    bad[0] = 'y';
    assert_int_equal(feed_blocks(bad, sizeof bad, err, sizeof err), -1);
    assert_non_null(strstr(err, "checksum"));

    expect_refused("/etc/passwd", '0', "00000000000", "unsafe name");
    expect_refused("../x", '0', "00000000000", "unsafe name");
    expect_refused("base/../../x", '0', "00000000000", "unsafe name");
    expect_refused("base/./x", '0', "00000000000", "unsafe name");
    expect_refused("base//x", '0', "00000000000", "unsafe name");
    expect_refused("a\nb", '0', "00000000000", "unsafe name");
    expect_refused("link", '2', "00000000000", "entry type");
    expect_refused("hard", '1', "00000000000", "entry type");
    expect_refused("pax", 'x', "00000000000", "entry type");
    expect_refused("dev", '3', "00000000000", "entry type");
    expect_refused("big", '0', "20000000001", "larger than 1 GB");
    expect_refused("nonoctal", '0', "0000000009", "octal");
    expect_refused("dirdata", '5', "00000000001", "directory with data");
    assert_true(bbtar_name_is_safe("pg_wal/000000010000000000000001"));
    assert_false(bbtar_name_is_safe(""));
    assert_false(bbtar_name_is_safe(".."));
}

static void test_initdb_tar_starts(void **state)
{
    (void)state;
    if (!have_pg)
        skip();
    char err[512], path[512];
    /* Some data of our own, then a clean shutdown. */
    int port = free_port();
    assert_int_equal(run("cd /tmp && runuser -u postgres -- %s/pg_ctl -D %s/src -w -l %s/src.log "
                         "-o '-p %d -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off' start "
                         ">/dev/null",
                         PGBIN, tmpdir, tmpdir, port),
                     0);
    char out[256];
    psql_scalar(port, "create database app", out, sizeof out);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "runuser -u postgres -- %s/psql -X -q -h 127.0.0.1 -p %d -U postgres -d app -c "
             "\"create table t(a int primary key, b text); insert into t select g, md5(g::text) "
             "from generate_series(1,5000) g;\" >/dev/null",
             PGBIN, port);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(run("cd /tmp && runuser -u postgres -- %s/pg_ctl -D %s/src -w -m fast stop "
                         ">/dev/null",
                         PGBIN, tmpdir),
                     0);

    snprintf(path, sizeof path, "%s/store", tmpdir);
    mkdir(path, 0700);
    store_options so;
    store_options_default(&so);
    store *st = NULL;
    assert_int_equal(store_open(path, &so, &st, err, sizeof err), 0);
    lsn_t lsn = 0;
    snprintf(path, sizeof path, "%s/src", tmpdir);
    assert_int_equal(import_pgdata(st, path, &lsn, NULL, err, sizeof err), 0);

    basebackup_source src = {.arg = st,
                             .get_latest = st_latest,
                             .scan = st_scan,
                             .rel_page = st_page,
                             .slru_segment = st_slru};
    basebackup_options o = {.full = true, .timeline_start = lsn, .now = 1700000000};
    basebackup_result full_res, light_res;
    const char *sqlstate = NULL;
    char full_tar[300], light_tar[300];
    snprintf(full_tar, sizeof full_tar, "%s/full.tar", tmpdir);
    snprintf(light_tar, sizeof light_tar, "%s/light.tar", tmpdir);
    FILE *f = fopen(full_tar, "w");
    assert_int_equal(
        basebackup_write(&src, lsn, &o, file_sink, f, &full_res, err, sizeof err, &sqlstate), 0);
    fclose(f);
    o.full = false;
    f = fopen(light_tar, "w");
    assert_int_equal(
        basebackup_write(&src, lsn, &o, file_sink, f, &light_res, err, sizeof err, &sqlstate), 0);
    fclose(f);
    /* The CLI's reader reads both, in odd-sized pieces, entry for entry. */
    tar_count tf = {0}, tl = {0};
    assert_int_equal(read_tar_file(full_tar, 777, &tf, err, sizeof err), 0);
    assert_int_equal(read_tar_file(light_tar, 65536 + 3, &tl, err, sizeof err), 0);
    assert_int_equal(tf.files, full_res.files);
    assert_int_equal(tl.files, light_res.files);
    assert_int_equal(tf.bytes, tf.data_bytes);
    assert_true(tf.dirs > 20);
    assert_true(full_res.rel_files > 100);
    assert_int_equal(light_res.rel_files, 0);
    assert_int_equal(full_res.checkpoint_lsn, lsn);
    assert_true(full_res.prev_lsn != 0 && full_res.prev_lsn < lsn); /* the imported checkpoint */
    assert_int_equal(full_res.databases, 5);                        /* global, 1, 4, 5, app */

    /* Bad requests. */
    assert_int_equal(
        basebackup_write(&src, lsn + 4, &o, file_sink, NULL, NULL, err, sizeof err, &sqlstate), -1);
    assert_string_equal(sqlstate, "22023");
    assert_int_equal(
        basebackup_write(&src, 0x100000, &o, file_sink, NULL, NULL, err, sizeof err, &sqlstate),
        -1);
    assert_string_equal(sqlstate, "58P01");
    assert_int_equal(
        basebackup_write(&src, lsn, &o, cancel_sink, NULL, NULL, err, sizeof err, &sqlstate), -1);
    assert_string_equal(sqlstate, "57014");
    store_close(st);

    /* Untar both as postgres; the light one has no relation files but the
     * same pg_control and WAL. */
    assert_int_equal(run("cd %s && install -d -o postgres -m 700 full light && "
                         "runuser -u postgres -- tar -xf full.tar -C full && "
                         "runuser -u postgres -- tar -xf light.tar -C light",
                         tmpdir),
                     0);
    char a[600], b[600], wal[40];
    uint64_t segno = lsn / SEG;
    pgcontrol_segment_name(1, segno, SEG, wal);
    snprintf(a, sizeof a, "%s/full/global/pg_control", tmpdir);
    snprintf(b, sizeof b, "%s/light/global/pg_control", tmpdir);
    assert_true(files_equal(a, b));
    snprintf(a, sizeof a, "%s/full/pg_wal/%s", tmpdir, wal);
    snprintf(b, sizeof b, "%s/light/pg_wal/%s", tmpdir, wal);
    assert_true(files_equal(a, b));
    assert_int_equal(
        run("test -e %s/light/global/1262 || test -e %s/light/base/1/1259", tmpdir, tmpdir) == 0,
        false);
    assert_int_equal(run("cmp -s %s/src/base/1/PG_VERSION %s/light/base/1/PG_VERSION && "
                         "cmp -s %s/src/global/pg_filenode.map %s/light/global/pg_filenode.map && "
                         "cmp -s %s/src/pg_xact/0000 %s/light/pg_xact/0000",
                         tmpdir, tmpdir, tmpdir, tmpdir, tmpdir, tmpdir),
                     0);

    /* Start stock postgres on the full one. */
    port++;
    assert_int_equal(run("cd /tmp && runuser -u postgres -- %s/pg_ctl -D %s/full -w -l %s/full.log "
                         "-o '-p %d -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off' start "
                         ">/dev/null",
                         PGBIN, tmpdir, tmpdir, port),
                     0);
    snprintf(cmd, sizeof cmd,
             "runuser -u postgres -- %s/psql -X -A -t -h 127.0.0.1 -p %d -U postgres -d app -c "
             "\"select count(*), md5(string_agg(b, ',' order by a)) from t\"",
             PGBIN, port);
    FILE *p = popen(cmd, "r");
    char got[256] = "";
    assert_non_null(fgets(got, sizeof got, p));
    pclose(p);
    assert_int_equal(strncmp(got, "5000|", 5), 0);
    /* Writes work, and the WAL continues right after our checkpoint record. */
    snprintf(cmd, sizeof cmd,
             "runuser -u postgres -- %s/psql -X -q -h 127.0.0.1 -p %d -U postgres -d app -c "
             "\"insert into t values (5001, 'new'); checkpoint;\"",
             PGBIN, port);
    assert_int_equal(system(cmd), 0);
    char lb[32], lb2[32];
    /* The second record's xl_prev must be our checkpoint: pg_waldump follows the chain. */
    assert_int_equal(run("cd /tmp && runuser -u postgres -- %s/pg_waldump -p %s/full/pg_wal -s %s "
                         "2>/dev/null | head -2 | tee %s/waldump.txt | grep -q 'prev %s'",
                         PGBIN, tmpdir, dump_lsn(full_res.checkpoint_lsn, lb), tmpdir,
                         dump_lsn(full_res.checkpoint_lsn, lb2)),
                     0);
    assert_int_equal(run("grep -q 'CHECKPOINT_SHUTDOWN' %s/waldump.txt && "
                         "grep -q 'lsn: %s' %s/waldump.txt",
                         tmpdir, dump_lsn(full_res.next_record_lsn, lb), tmpdir),
                     0);
    assert_int_equal(run("grep -q 'database system was shut down at' %s/full.log && "
                         "! grep -q 'redo starts' %s/full.log",
                         tmpdir, tmpdir),
                     0);
    assert_int_equal(run("cd /tmp && runuser -u postgres -- %s/pg_ctl -D %s/full -w -m fast stop "
                         ">/dev/null",
                         PGBIN, tmpdir),
                     0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layouts),           cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_replica_control),   cmocka_unit_test(test_tar_reader),
        cmocka_unit_test(test_initdb_tar_starts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
