/*
 * test_import.c: import of a real, freshly initdb'd PostgreSQL 15 data
 * directory (pageserver/ingest/import.h).  Runs the stock initdb as the
 * unprivileged user postgres, imports through an in-memory backend, and
 * checks the accounting against the files on disk (every relation fork's
 * size, block and byte counts, databases, relmaps, SLRU segments), the
 * import LSN against pg_controldata, and the refusals: not shut down,
 * bad pg_control CRC, a relation file of odd size, tablespaces.
 *
 * Skipped (not failed) only when the stock PostgreSQL 15 binaries or the
 * postgres user are missing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

#include "base/crc32c.h"
#include "pageserver/ingest/import.h"
#include "pg/pgstructs.h"

#define PGBIN "/usr/lib/postgresql/15/bin"

typedef struct put_rec {
    pg_key k;
    uint8_t kind;
    uint32_t len;
    uint32_t size_value; /* VAL_SIZE payload */
    lsn_t lsn;
} put_rec;

typedef struct sink {
    put_rec *v;
    size_t n, cap;
} sink;

static int sink_put(void *arg, const pg_key *k, lsn_t lsn, const value_ref *v, char *err,
                    size_t errlen)
{
    (void)err;
    (void)errlen;
    sink *s = arg;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4096;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        assert_non_null(s->v);
    }
    put_rec *r = &s->v[s->n++];
    r->k = *k;
    r->kind = v->kind;
    r->len = v->len;
    r->lsn = lsn;
    r->size_value = 0;
    if (v->kind == VAL_SIZE)
        r->size_value = ((uint32_t)v->payload[0] << 24) | ((uint32_t)v->payload[1] << 16) |
                        ((uint32_t)v->payload[2] << 8) | v->payload[3];
    if (v->kind == VAL_IMAGE)
        assert_int_equal(v->len, PG_BLCKSZ);
    return 0;
}

static int none_latest(void *a, const pg_key *k, lsn_t l, value_ref *o, lsn_t *f, char *e, size_t n)
{
    (void)a, (void)k, (void)l, (void)o, (void)f, (void)e, (void)n;
    return 0;
}

static ingest_backend backend_for(sink *s)
{
    ingest_backend b = {.arg = s, .put = sink_put, .get_latest = none_latest};
    return b;
}

static char pgdata[256];
static bool have_pg;

static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char cmd[2048];
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
    char tmpl[] = "/tmp/strata-test-import-XXXXXX";
    if (mkdtemp(tmpl) == NULL)
        return -1;
    snprintf(pgdata, sizeof pgdata, "%s/pgdata", tmpl);
    if (run("chown postgres %s && runuser -u postgres -- %s/initdb -D %s -A trust -U postgres "
            "--no-sync >/dev/null 2>&1",
            tmpl, PGBIN, pgdata) != 0)
        return -1;
    have_pg = true;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (pgdata[0]) {
        char *slash = strrchr(pgdata, '/');
        *slash = '\0';
        run("rm -rf %s", pgdata);
    }
    return 0;
}

/* Sums relation files under dir the way Postgres lays them out. */
typedef struct disk_fork {
    uint32_t spc, db, rel;
    uint8_t fork;
    uint64_t bytes;
} disk_fork;

static size_t scan_dir(const char *dir, uint32_t spc, uint32_t db, disk_fork *out, size_t n)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char *end;
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        unsigned long rel = strtoul(de->d_name, &end, 10);
        uint8_t fork = FORK_MAIN;
        if (strcmp(end, "_fsm") == 0)
            fork = FORK_FSM;
        else if (strcmp(end, "_vm") == 0)
            fork = FORK_VM;
        else if (strcmp(end, "_init") == 0)
            fork = FORK_INIT;
        else if (*end != '\0')
            continue; /* fresh initdb: no .N segments */
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct stat sb;
        assert_int_equal(stat(path, &sb), 0);
        out[n++] = (disk_fork){spc, db, (uint32_t)rel, fork, (uint64_t)sb.st_size};
    }
    closedir(d);
    return n;
}

static lsn_t controldata_checkpoint(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/pg_controldata %s", PGBIN, pgdata);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[256];
    lsn_t lsn = 0;
    while (fgets(line, sizeof line, p) != NULL)
        if (strncmp(line, "Latest checkpoint location:", 27) == 0) {
            char *v = line + 27;
            while (*v == ' ')
                v++;
            v[strcspn(v, "\n")] = '\0';
            assert_true(lsn_parse(v, &lsn));
        }
    pclose(p);
    return lsn;
}

static void test_import_fresh_initdb(void **state)
{
    (void)state;
    if (!have_pg)
        skip();
    sink s = {0};
    ingest_backend b = backend_for(&s);
    lsn_t lsn = 0;
    import_stats st;
    char err[512];
    if (import_pgdata_backend(&b, pgdata, 0, &lsn, &st, err, sizeof err) != 0)
        fail_msg("import: %s", err);

    /* The import LSN is the end of the shutdown checkpoint record
     * pg_control points to: 24-byte header + 2-byte main data header + an
     * 88-byte CheckPoint, 8-aligned. */
    lsn_t cp = controldata_checkpoint();
    assert_true(cp != 0);
    assert_int_equal(lsn, (cp + 114 + 7) & ~(lsn_t)7);
    uint64_t import_lsn_also;
    lsn_t cp2;
    uint32_t segsz;
    assert_int_equal(
        import_read_control(pgdata, &import_lsn_also, &cp2, NULL, &segsz, err, sizeof err), 0);
    assert_int_equal(import_lsn_also, lsn);
    assert_int_equal(cp2, cp);
    assert_int_equal(segsz, 16u << 20);
    assert_int_equal(st.wal_seg_size, 16u << 20);
    assert_true(st.system_id != 0);

    /* Every value at the import LSN. */
    for (size_t i = 0; i < s.n; i++)
        assert_int_equal(s.v[i].lsn, lsn);

    /* Relation forks on disk vs what was imported. */
    disk_fork *forks = calloc(8192, sizeof *forks);
    size_t nf = 0;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/base", pgdata);
    DIR *d = opendir(dir);
    struct dirent *de;
    int ndb = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char sub[768];
        snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
        nf = scan_dir(sub, PG_DEFAULTTABLESPACE_OID, (uint32_t)atoi(de->d_name), forks, nf);
        ndb++;
    }
    closedir(d);
    snprintf(dir, sizeof dir, "%s/global", pgdata);
    nf = scan_dir(dir, PG_GLOBALTABLESPACE_OID, 0, forks, nf);
    assert_int_equal(ndb, 3); /* template1, template0, postgres */
    assert_true(nf > 500);

    uint64_t disk_bytes = 0;
    for (size_t i = 0; i < nf; i++) {
        disk_bytes += forks[i].bytes;
        pg_key sk = pg_key_rel_size(forks[i].spc, forks[i].db, forks[i].rel, forks[i].fork);
        int found = 0;
        for (size_t j = 0; j < s.n; j++)
            if (pg_key_compare(&s.v[j].k, &sk) == 0) {
                assert_int_equal(s.v[j].kind, VAL_SIZE);
                assert_int_equal(s.v[j].size_value, forks[i].bytes / PG_BLCKSZ);
                found++;
            }
        if (found != 1)
            fail_msg("fork %u/%u/%u.%u imported %d times", forks[i].spc, forks[i].db, forks[i].rel,
                     forks[i].fork, found);
    }
    size_t sizes = 0, blocks = 0, zero = 0, dbs = 0, maps = 0, clog_pages = 0, slru_sizes = 0;
    for (size_t j = 0; j < s.n; j++) {
        const put_rec *r = &s.v[j];
        sizes += r->k.kind == KEY_REL_SIZE;
        blocks += r->k.kind == KEY_REL_BLOCK;
        zero += r->k.kind == KEY_REL_BLOCK && r->kind == VAL_ZERO_PAGE;
        dbs += r->k.kind == KEY_DB;
        maps += r->k.kind == KEY_RELMAP && r->len == 512;
        clog_pages += r->k.kind == KEY_SLRU_BLOCK && r->k.fork == SLRU_CLOG;
        slru_sizes += r->k.kind == KEY_SLRU_SIZE;
    }
    assert_int_equal(sizes, nf);
    assert_int_equal(st.rel_forks, nf);
    assert_int_equal(blocks * PG_BLCKSZ, disk_bytes);
    assert_int_equal(st.blocks, blocks);
    assert_int_equal(st.bytes, disk_bytes);
    assert_int_equal(st.zero_pages, zero);
    assert_int_equal(dbs, 4); /* three databases and global */
    assert_int_equal(st.databases, 4);
    assert_int_equal(maps, 4);
    /* pg_xact/0000 is one 8 KB page after initdb; multixact has one segment each. */
    assert_int_equal(clog_pages, 1);
    assert_int_equal(slru_sizes, 3);
    assert_int_equal(st.slru_segments, 3);
    assert_int_equal(st.twophase_files, 0);
    /* Control and checkpoint. */
    size_t ctl = 0, cps = 0;
    for (size_t j = 0; j < s.n; j++) {
        ctl += s.v[j].k.kind == KEY_CONTROL && s.v[j].len == PG_CONTROL_FILE_SIZE;
        cps += s.v[j].k.kind == KEY_CHECKPOINT && s.v[j].len == PG_CHECKPOINT_SIZE;
    }
    assert_int_equal(ctl, 1);
    assert_int_equal(cps, 1);
    /* A backend already at or past the import LSN is refused. */
    sink s2 = {0};
    ingest_backend b2 = backend_for(&s2);
    assert_int_equal(import_pgdata_backend(&b2, pgdata, lsn, &lsn, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "already at"));
    free(s2.v);
    free(forks);
    free(s.v);
}

static void write_all(const char *path, const uint8_t *buf, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
}

static void expect_refused(const char *needle)
{
    sink s = {0};
    ingest_backend b = backend_for(&s);
    lsn_t lsn;
    char err[512] = "";
    assert_int_equal(import_pgdata_backend(&b, pgdata, 0, &lsn, NULL, err, sizeof err), -1);
    if (strstr(err, needle) == NULL)
        fail_msg("error \"%s\" lacks \"%s\"", err, needle);
    free(s.v);
}

static void test_import_refusals(void **state)
{
    (void)state;
    if (!have_pg)
        skip();
    char path[512];
    snprintf(path, sizeof path, "%s/global/pg_control", pgdata);
    static uint8_t orig[PG_CONTROL_FILE_SIZE], c[PG_CONTROL_FILE_SIZE];
    FILE *f = fopen(path, "rb");
    assert_int_equal(fread(orig, 1, sizeof orig, f), sizeof orig);
    fclose(f);

    /* "in production" (a running or crashed server) with a valid CRC. */
    memcpy(c, orig, sizeof c);
    put_le32(c + PG_CTL_STATE, 6 /* DB_IN_PRODUCTION */);
    put_le32(c + PG_CTL_CRC, crc32c(c, PG_CTL_CRC));
    write_all(path, c, sizeof c);
    expect_refused("not shut down cleanly");

    /* A flipped bit: the CRC catches it. */
    memcpy(c, orig, sizeof c);
    c[PG_CTL_CHECKPOINT] ^= 0x08;
    write_all(path, c, sizeof c);
    expect_refused("CRC mismatch");

    /* A checkpoint location that is not the checkpoint record. */
    memcpy(c, orig, sizeof c);
    put_le64(c + PG_CTL_CHECKPOINT, get_le64(orig + PG_CTL_CHECKPOINT) - 0x1000);
    put_le32(c + PG_CTL_CRC, crc32c(c, PG_CTL_CRC));
    write_all(path, c, sizeof c);
    expect_refused("checkpoint");
    write_all(path, orig, sizeof orig);

    /* A relation file whose size is not whole pages. */
    char rel[512];
    snprintf(rel, sizeof rel, "%s/base/1/99999", pgdata);
    uint8_t junk[100] = {1};
    write_all(rel, junk, sizeof junk);
    expect_refused("not a multiple of 8192");
    unlink(rel);

    /* A tablespace. */
    snprintf(rel, sizeof rel, "%s/pg_tblspc/16500", pgdata);
    assert_int_equal(mkdir(rel, 0700), 0);
    expect_refused("tablespaces");
    rmdir(rel);

    /* Intact again: imports. */
    sink s = {0};
    ingest_backend b = backend_for(&s);
    lsn_t lsn;
    char err[512];
    if (import_pgdata_backend(&b, pgdata, 0, &lsn, NULL, err, sizeof err) != 0)
        fail_msg("%s", err);
    free(s.v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_import_fresh_initdb),
        cmocka_unit_test(test_import_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
