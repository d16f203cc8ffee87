/*
 * import.c: a cleanly shut down PostgreSQL 15 data directory into a store,
 * as images at the LSN where its WAL ends (see import.h).
 *
 * Not for: WAL ingest (ingest.c) or producing a data directory (basebackup).
 * The store-backed import_pgdata() (advance + flush after the puts) is in
 * ingest_store.c, so this file links without the store.
 *
 * Reads files with plain read(2): an import runs once per timeline, off the
 * serving path.  Memory: one 8 KB page at a time plus the list of relation
 * forks seen (their sizes are put at the end, after every segment file of a
 * fork was read).
 */
#include "pageserver/ingest/import.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/byteorder.h"
#include "base/crc32c.h"
#include "pg/walformat.h"
#include "pageserver/ingest/ingest.h"
#include "pageserver/store/key.h"
#include "pg/pgstructs.h"

#define RELSEG_BLOCKS 131072u /* RELSEG_SIZE: blocks per 1 GB segment file */

static void fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* out = a "/" b; false if it does not fit (then out is ""). */
static bool path_join(char *out, size_t cap, const char *a, const char *b)
{
    int n = snprintf(out, cap, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= cap) {
        out[0] = '\0';
        return false;
    }
    return true;
}

/* Reads up to cap bytes of path; *len gets the bytes read.  0 or -1. */
static int read_file(const char *path, uint8_t *buf, size_t cap, size_t *len, char *err,
                     size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fail(err, errlen, "open %s: %s", path, strerror(errno));
        return -1;
    }
    size_t got = 0;
    while (got < cap) {
        ssize_t n = read(fd, buf + got, cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fail(err, errlen, "read %s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    *len = got;
    return 0;
}

/* ---- pg_control and the checkpoint record --------------------------- */

typedef struct control_info {
    uint8_t file[PG_CONTROL_FILE_SIZE];
    size_t file_len;
    uint64_t system_id;
    uint32_t seg_size;
    uint32_t tli;
    lsn_t checkpoint;
    lsn_t import_lsn;
    uint8_t checkpoint_rec[PG_CHECKPOINT_SIZE];
} control_info;

static int read_checkpoint_record(const char *pgdata, control_info *ci, char *err, size_t errlen)
{
    uint32_t segs_per_xlogid = (uint32_t)(0x100000000ull / ci->seg_size);
    lsn_t seg_start = ci->checkpoint - ci->checkpoint % ci->seg_size;
    uint8_t *reassembly = malloc(64 * 1024);
    uint8_t *seg = malloc(ci->seg_size);
    if (reassembly == NULL || seg == NULL) {
        free(reassembly);
        free(seg);
        fail(err, errlen, "out of memory");
        return -1;
    }
    wal_reader r;
    wal_reader_init(&r, ci->checkpoint, ci->seg_size, reassembly, 64 * 1024);
    int rc = -1;
    lsn_t pos = ci->checkpoint;
    /* The record may run into the next segment: read at most two. */
    for (int i = 0; i < 2 && rc != 0; i++, seg_start += ci->seg_size) {
        uint64_t segno = seg_start / ci->seg_size;
        char path[4096];
        snprintf(path, sizeof path, "%s/pg_wal/%08X%08X%08X", pgdata, ci->tli,
                 (uint32_t)(segno / segs_per_xlogid), (uint32_t)(segno % segs_per_xlogid));
        size_t len;
        if (read_file(path, seg, ci->seg_size, &len, err, errlen) != 0)
            break;
        if (len != ci->seg_size) {
            fail(err, errlen, "%s is %zu bytes, not a %u-byte WAL segment", path, len,
                 ci->seg_size);
            break;
        }
        size_t off = (size_t)(pos - seg_start);
        while (off < len) {
            size_t used;
            const char *why;
            int f = wal_reader_feed(&r, pos, seg + off, len - off, &used, &why);
            if (f == WAL_READER_ERROR) {
                char l[LSN_FMT_LEN];
                fail(err, errlen, "checkpoint record at %s in %s: %s",
                     lsn_format(ci->checkpoint, l), path, why);
                goto out;
            }
            off += used;
            pos += used;
            if (f != WAL_READER_RECORD)
                continue;
            lsn_t s, e;
            const wal_record *rec = wal_reader_record(&r, &s, &e);
            if (rec->hdr.rmid != PG_RM_XLOG ||
                (rec->hdr.info & WAL_XLR_RMGR_INFO_MASK) != PG_XLOG_CHECKPOINT_SHUTDOWN ||
                rec->main_data_len != PG_CHECKPOINT_SIZE) {
                char l[LSN_FMT_LEN];
                fail(err, errlen, "the record at %s is not a shutdown checkpoint",
                     lsn_format(s, l));
                goto out;
            }
            memcpy(ci->checkpoint_rec, rec->main_data, PG_CHECKPOINT_SIZE);
            /* As ingest stores a shutdown checkpoint: redo = its own start. */
            put_le64(ci->checkpoint_rec + PG_CP_REDO, s);
            ci->import_lsn = e;
            rc = 0;
            break;
        }
    }
out:
    free(reassembly);
    free(seg);
    return rc;
}

static int read_control(const char *pgdata, control_info *ci, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/global/pg_control", pgdata);
    if (read_file(path, ci->file, sizeof ci->file, &ci->file_len, err, errlen) != 0)
        return -1;
    if (ci->file_len != PG_CONTROL_FILE_SIZE) {
        fail(err, errlen, "%s is %zu bytes, not %d", path, ci->file_len, PG_CONTROL_FILE_SIZE);
        return -1;
    }
    const uint8_t *c = ci->file;
    if (get_le32(c + PG_CTL_CRC) != crc32c(c, PG_CTL_CRC)) {
        fail(err, errlen, "%s: CRC mismatch", path);
        return -1;
    }
    if (get_le32(c + PG_CTL_VERSION) != PG_CONTROL_VERSION) {
        fail(err, errlen, "%s: pg_control version %u is not PostgreSQL 15's %d", path,
             get_le32(c + PG_CTL_VERSION), PG_CONTROL_VERSION);
        return -1;
    }
    uint32_t state = get_le32(c + PG_CTL_STATE);
    if (state != PG_DB_SHUTDOWNED) {
        fail(err, errlen, "%s: the cluster was not shut down cleanly (state %u)", path, state);
        return -1;
    }
    if (get_le32(c + PG_CTL_BLCKSZ) != PG_BLCKSZ ||
        get_le32(c + PG_CTL_XLOG_BLCKSZ) != WAL_BLCKSZ) {
        fail(err, errlen, "%s: block sizes other than 8192 are not supported", path);
        return -1;
    }
    ci->seg_size = get_le32(c + PG_CTL_XLOG_SEG_SIZE);
    if (!wal_seg_size_valid(ci->seg_size)) {
        fail(err, errlen, "%s: WAL segment size %u is not valid", path, ci->seg_size);
        return -1;
    }
    ci->system_id = get_le64(c + PG_CTL_SYSTEM_ID);
    ci->checkpoint = get_le64(c + PG_CTL_CHECKPOINT);
    ci->tli = get_le32(c + PG_CTL_CHECKPOINT_COPY + PG_CP_THIS_TLI);
    return read_checkpoint_record(pgdata, ci, err, errlen);
}

int import_read_control(const char *pgdata, lsn_t *import_lsn, lsn_t *checkpoint_lsn,
                        uint64_t *system_id, uint32_t *wal_seg_size, char *err, size_t errlen)
{
    control_info *ci = calloc(1, sizeof *ci);
    if (ci == NULL) {
        fail(err, errlen, "out of memory");
        return -1;
    }
    int rc = read_control(pgdata, ci, err, errlen);
    if (rc == 0) {
        if (import_lsn)
            *import_lsn = ci->import_lsn;
        if (checkpoint_lsn)
            *checkpoint_lsn = ci->checkpoint;
        if (system_id)
            *system_id = ci->system_id;
        if (wal_seg_size)
            *wal_seg_size = ci->seg_size;
    }
    free(ci);
    return rc;
}

/* ---- the import ------------------------------------------------------ */

typedef struct fork_size {
    uint32_t spc, db, rel;
    uint8_t fork;
    uint32_t nblocks;
} fork_size;

typedef struct importer {
    const ingest_backend *b;
    lsn_t lsn;
    import_stats stats;
    fork_size *forks;
    size_t nforks, capforks;
    uint8_t page[PG_BLCKSZ];
    char *err;
    size_t errlen;
} importer;

static int put(importer *im, const pg_key *k, uint8_t kind, const uint8_t *p, uint32_t len)
{
    value_ref v = {.kind = kind, .flags = 0, .len = len, .payload = p};
    return im->b->put(im->b->arg, k, im->lsn, &v, im->err, im->errlen);
}

static bool all_zero(const uint8_t *p)
{
    for (size_t i = 0; i < PG_BLCKSZ; i++)
        if (p[i])
            return false;
    return true;
}

static int note_fork(importer *im, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork,
                     uint32_t end_blk)
{
    for (size_t i = 0; i < im->nforks; i++) {
        fork_size *f = &im->forks[i];
        if (f->spc == spc && f->db == db && f->rel == rel && f->fork == fork) {
            if (end_blk > f->nblocks)
                f->nblocks = end_blk;
            return 0;
        }
    }
    if (im->nforks == im->capforks) {
        size_t nc = im->capforks ? im->capforks * 2 : 256;
        fork_size *nf = realloc(im->forks, nc * sizeof *nf);
        if (nf == NULL) {
            fail(im->err, im->errlen, "out of memory");
            return -1;
        }
        im->forks = nf;
        im->capforks = nc;
    }
    im->forks[im->nforks++] = (fork_size){spc, db, rel, fork, end_blk};
    return 0;
}

/*
 * Calls fn for every page of path (whose size must be a multiple of 8 KB),
 * with the page in im->page.  *npages gets the count.
 */
static int for_each_page(importer *im, const char *path, uint32_t *npages,
                         int (*fn)(importer *im, uint32_t pageno, void *arg), void *arg)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fail(im->err, im->errlen, "open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size % PG_BLCKSZ != 0) {
        fail(im->err, im->errlen, "%s: size %lld is not a multiple of 8192", path,
             (long long)sb.st_size);
        close(fd);
        return -1;
    }
    uint32_t n = (uint32_t)(sb.st_size / PG_BLCKSZ);
    for (uint32_t i = 0; i < n; i++) {
        size_t got = 0;
        while (got < PG_BLCKSZ) {
            ssize_t r =
                pread(fd, im->page + got, PG_BLCKSZ - got, (off_t)i * PG_BLCKSZ + (off_t)got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                fail(im->err, im->errlen, "read %s page %u: %s", path, i,
                     r < 0 ? strerror(errno) : "file shrank");
                close(fd);
                return -1;
            }
            got += (size_t)r;
        }
        if (fn(im, i, arg) != 0) {
            close(fd);
            return -1;
        }
    }
    close(fd);
    im->stats.files++;
    *npages = n;
    return 0;
}

typedef struct rel_target {
    uint32_t spc, db, rel, first_blk;
    uint8_t fork;
} rel_target;

static int put_rel_page(importer *im, uint32_t pageno, void *arg)
{
    const rel_target *t = arg;
    pg_key k = pg_key_rel_block(t->spc, t->db, t->rel, t->fork, t->first_blk + pageno);
    bool zero = all_zero(im->page);
    if (put(im, &k, zero ? VAL_ZERO_PAGE : VAL_IMAGE, zero ? NULL : im->page,
            zero ? 0 : PG_BLCKSZ) != 0)
        return -1;
    im->stats.blocks++;
    im->stats.zero_pages += zero;
    im->stats.bytes += PG_BLCKSZ;
    return 0;
}

/* <relfilenode>[_fsm|_vm|_init][.N]; false for anything else. */
static bool parse_rel_file(const char *name, uint32_t *rel, uint8_t *fork, uint32_t *segno)
{
    char *end;
    if (name[0] < '1' || name[0] > '9')
        return false;
    errno = 0;
    unsigned long r = strtoul(name, &end, 10);
    if (errno != 0 || r > UINT32_MAX)
        return false;
    *fork = FORK_MAIN;
    if (strncmp(end, "_fsm", 4) == 0) {
        *fork = FORK_FSM;
        end += 4;
    } else if (strncmp(end, "_vm", 3) == 0) {
        *fork = FORK_VM;
        end += 3;
    } else if (strncmp(end, "_init", 5) == 0) {
        *fork = FORK_INIT;
        end += 5;
    }
    *segno = 0;
    if (*end == '.') {
        if (end[1] < '1' || end[1] > '9')
            return false;
        unsigned long s = strtoul(end + 1, &end, 10);
        if (s > 4096)
            return false;
        *segno = (uint32_t)s;
    }
    if (*end != '\0')
        return false;
    *rel = (uint32_t)r;
    return true;
}

static int import_db_dir(importer *im, const char *dir, uint32_t spc, uint32_t db)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        fail(im->err, im->errlen, "opendir %s: %s", dir, strerror(errno));
        return -1;
    }
    pg_key dk = {.kind = KEY_DB, .spc = spc, .db = db};
    int rc = put(im, &dk, VAL_BLOB, NULL, 0);
    if (rc == 0)
        im->stats.databases++;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        char path[4096];
        path_join(path, sizeof path, dir, de->d_name);
        uint32_t rel, segno, n;
        uint8_t fork;
        if (strcmp(de->d_name, "pg_filenode.map") == 0) {
            size_t len;
            rc = read_file(path, im->page, PG_BLCKSZ, &len, im->err, im->errlen);
            if (rc == 0 && len != PG_RELMAP_FILE_SIZE) {
                fail(im->err, im->errlen, "%s is %zu bytes, not %d", path, len,
                     PG_RELMAP_FILE_SIZE);
                rc = -1;
            }
            if (rc == 0) {
                pg_key mk = {.kind = KEY_RELMAP, .spc = spc, .db = db};
                rc = put(im, &mk, VAL_BLOB, im->page, (uint32_t)len);
                im->stats.relmaps++;
                im->stats.files++;
            }
        } else if (parse_rel_file(de->d_name, &rel, &fork, &segno)) {
            rel_target t = {spc, db, rel, segno * RELSEG_BLOCKS, fork};
            rc = for_each_page(im, path, &n, put_rel_page, &t);
            if (rc == 0)
                rc = note_fork(im, spc, db, rel, fork, t.first_blk + n);
        }
        /* Everything else (PG_VERSION, pg_internal.init, pg_control, temp
         * files) is not relation data: basebackup regenerates it. */
    }
    closedir(d);
    return rc;
}

typedef struct slru_target {
    slru_kind kind;
    uint32_t segno;
} slru_target;

static int put_slru_page(importer *im, uint32_t pageno, void *arg)
{
    const slru_target *t = arg;
    if (pageno >= PG_SLRU_PAGES_PER_SEGMENT) {
        fail(im->err, im->errlen, "SLRU segment %04X has more than 32 pages", t->segno);
        return -1;
    }
    pg_key k = pg_key_slru_block(t->kind, t->segno, pageno);
    bool zero = all_zero(im->page);
    im->stats.slru_pages++;
    return put(im, &k, zero ? VAL_ZERO_PAGE : VAL_IMAGE, zero ? NULL : im->page,
               zero ? 0 : PG_BLCKSZ);
}

static int import_slru_dir(importer *im, const char *dir, slru_kind kind)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        fail(im->err, im->errlen, "opendir %s: %s", dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 4 || len > 6 || strspn(de->d_name, "0123456789ABCDEF") != len)
            continue;
        char path[4096];
        path_join(path, sizeof path, dir, de->d_name);
        slru_target t = {kind, (uint32_t)strtoul(de->d_name, NULL, 16)};
        uint32_t n;
        rc = for_each_page(im, path, &n, put_slru_page, &t);
        if (rc == 0) {
            uint8_t p[4];
            put_be32(p, n);
            pg_key sk = {.kind = KEY_SLRU_SIZE, .fork = (uint8_t)kind, .rel = t.segno};
            rc = put(im, &sk, VAL_SIZE, p, 4);
            im->stats.slru_segments++;
        }
    }
    closedir(d);
    return rc;
}

static int import_twophase(importer *im, const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0; /* no directory: nothing prepared */
    int rc = 0;
    struct dirent *de;
    uint8_t *buf = NULL;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (strlen(de->d_name) != 8 || strspn(de->d_name, "0123456789ABCDEF") != 8)
            continue;
        char path[4096];
        path_join(path, sizeof path, dir, de->d_name);
        const size_t cap = 64u << 20;
        if (buf == NULL && (buf = malloc(cap)) == NULL) {
            fail(im->err, im->errlen, "out of memory");
            rc = -1;
            break;
        }
        size_t len;
        rc = read_file(path, buf, cap, &len, im->err, im->errlen);
        if (rc != 0)
            break;
        /* The state file ends with a CRC-32C of what precedes it; the store
         * keeps the state without it (as ingest does from the record). */
        if (len < PG_XACT_PREPARE_HDR_SIZE + 4 || get_le32(buf) != PG_TWOPHASE_MAGIC ||
            crc32c(buf, len - 4) != get_le32(buf + len - 4)) {
            fail(im->err, im->errlen, "%s is not a valid two-phase state file", path);
            rc = -1;
            break;
        }
        pg_key k = {.kind = KEY_TWOPHASE, .rel = (uint32_t)strtoul(de->d_name, NULL, 16)};
        rc = put(im, &k, VAL_BLOB, buf, (uint32_t)(len - 4));
        im->stats.twophase_files++;
        im->stats.files++;
    }
    free(buf);
    closedir(d);
    return rc;
}

static int check_no_tablespaces(const char *pgdata, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/pg_tblspc", pgdata);
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            fail(err, errlen, "%s/%s: tablespaces other than the default are not supported", path,
                 de->d_name);
            rc = -1;
            break;
        }
    closedir(d);
    return rc;
}

static int import_all(importer *im, const char *pgdata, const control_info *ci)
{
    char path[4096];
    /* Databases of the default tablespace. */
    snprintf(path, sizeof path, "%s/base", pgdata);
    DIR *d = opendir(path);
    if (d == NULL) {
        fail(im->err, im->errlen, "opendir %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        char *end;
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        unsigned long db = strtoul(de->d_name, &end, 10);
        if (*end != '\0' || db > UINT32_MAX)
            continue;
        char dir[4096];
        path_join(dir, sizeof dir, path, de->d_name);
        rc = import_db_dir(im, dir, PG_DEFAULTTABLESPACE_OID, (uint32_t)db);
    }
    closedir(d);
    if (rc != 0)
        return -1;
    snprintf(path, sizeof path, "%s/global", pgdata);
    if (import_db_dir(im, path, PG_GLOBALTABLESPACE_OID, 0) != 0)
        return -1;
    for (size_t i = 0; i < im->nforks; i++) {
        const fork_size *f = &im->forks[i];
        pg_key sk = pg_key_rel_size(f->spc, f->db, f->rel, f->fork);
        uint8_t p[4] = {(uint8_t)(f->nblocks >> 24), (uint8_t)(f->nblocks >> 16),
                        (uint8_t)(f->nblocks >> 8), (uint8_t)f->nblocks};
        if (put(im, &sk, VAL_SIZE, p, 4) != 0)
            return -1;
        im->stats.rel_forks++;
    }
    static const struct {
        const char *dir;
        slru_kind kind;
    } slrus[] = {{"pg_xact", SLRU_CLOG},
                 {"pg_multixact/offsets", SLRU_MULTIXACT_OFFSETS},
                 {"pg_multixact/members", SLRU_MULTIXACT_MEMBERS}};
    for (size_t i = 0; i < sizeof slrus / sizeof slrus[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", pgdata, slrus[i].dir);
        if (import_slru_dir(im, path, slrus[i].kind) != 0)
            return -1;
    }
    snprintf(path, sizeof path, "%s/pg_twophase", pgdata);
    if (import_twophase(im, path) != 0)
        return -1;
    pg_key ck = {.kind = KEY_CONTROL};
    if (put(im, &ck, VAL_BLOB, ci->file, PG_CONTROL_FILE_SIZE) != 0)
        return -1;
    pg_key cpk = {.kind = KEY_CHECKPOINT};
    return put(im, &cpk, VAL_BLOB, ci->checkpoint_rec, PG_CHECKPOINT_SIZE);
}

int import_pgdata_backend(const ingest_backend *b, const char *pgdata, lsn_t min_lsn,
                          lsn_t *out_lsn, import_stats *stats, char *err, size_t errlen)
{
    if (check_no_tablespaces(pgdata, err, errlen) != 0)
        return -1;
    control_info *ci = calloc(1, sizeof *ci);
    importer *im = calloc(1, sizeof *im);
    if (ci == NULL || im == NULL) {
        free(ci);
        free(im);
        fail(err, errlen, "out of memory");
        return -1;
    }
    int rc = read_control(pgdata, ci, err, errlen);
    if (rc == 0 && min_lsn >= ci->import_lsn) {
        char a[LSN_FMT_LEN], l[LSN_FMT_LEN];
        fail(err, errlen, "the store is already at %s, not below the import LSN %s",
             lsn_format(min_lsn, a), lsn_format(ci->import_lsn, l));
        rc = -1;
    }
    if (rc == 0) {
        im->b = b;
        im->lsn = ci->import_lsn;
        im->err = err;
        im->errlen = errlen;
        im->stats.system_id = ci->system_id;
        im->stats.wal_seg_size = ci->seg_size;
        rc = import_all(im, pgdata, ci);
    }
    if (rc == 0) {
        *out_lsn = ci->import_lsn;
        if (stats != NULL)
            *stats = im->stats;
    }
    free(im->forks);
    free(im);
    free(ci);
    return rc;
}
