/*
 * basebackup.c: the basebackup tar stream.  See basebackup.h.
 *
 * Shape: list what exists at the LSN first (databases, relation forks,
 * SLRU segments, two-phase files: each listing is one store scan whose
 * callback only copies keys, so no read runs inside a scan), then write the
 * entries in a fixed order through libarchive (ustar) into a buffer that hands
 * BASEBACKUP_CHUNK-sized pieces to the sink.
 * Not for: the LSN wait or the network.
 */
#include "pageserver/service/basebackup.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <archive.h>
#include <archive_entry.h>

#include "base/byteorder.h"
#include "base/crc32c.h"
#include "base/sqlstate.h"
#include "pg/walformat.h"
#include "pageserver/service/pgcontrol.h"
#include "pg/pgstructs.h"

#define REL_SEG_BLOCKS (1u << 17) /* RELSEG_SIZE: 1 GB of 8 KB blocks */
#define MAX_SLRU_SEG_BLOCKS PG_SLRU_PAGES_PER_SEGMENT
#define MAX_LISTED 10000000 /* entries in one listing: far above any real cluster */

/* ---- the timeline source ---- */

static int ts_get_latest(void *arg, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found,
                         char *err, size_t errlen)
{
    basebackup_timeline_source *ts = arg;
    return timeline_get_latest(ts->tl, k, lsn, out, found, err, errlen);
}

static int ts_scan(void *arg, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
                   void *fnarg, char *err, size_t errlen)
{
    basebackup_timeline_source *ts = arg;
    return timeline_scan(ts->tl, from, to, lsn, fn, fnarg, err, errlen);
}

static int ts_rel_page(void *arg, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork,
                       uint32_t blk, lsn_t lsn, uint8_t out[PG_BLCKSZ], char *err, size_t errlen)
{
    basebackup_timeline_source *ts = arg;
    return timeline_get_rel_page(ts->tl, spc, db, rel, fork, blk, lsn, out, NULL, err, errlen,
                                 NULL);
}

static int ts_slru_segment(void *arg, uint8_t kind, uint32_t segno, lsn_t lsn, uint8_t *out,
                           uint32_t max_blocks, uint32_t *nblocks, char *err, size_t errlen)
{
    basebackup_timeline_source *ts = arg;
    return timeline_get_slru_segment(ts->tl, kind, segno, lsn, out, max_blocks, nblocks, err,
                                     errlen, NULL);
}

void basebackup_source_timeline(basebackup_source *out, basebackup_timeline_source *ts)
{
    out->arg = ts;
    out->get_latest = ts_get_latest;
    out->scan = ts_scan;
    out->rel_page = ts_rel_page;
    out->slru_segment = ts_slru_segment;
}

/* ---- the tar writer (libarchive, POSIX ustar) ---- */

/*
 * libarchive formats the headers, pads each entry and writes the end
 * marker; its output goes through write_cb into buf, and buf goes to the
 * sink in chunks of at most BASEBACKUP_CHUNK bytes.  libarchive's own
 * blocking is turned off (bytes_per_block 0) so nothing waits in it.
 */
typedef struct tar_writer {
    basebackup_sink_fn sink;
    void *arg;
    struct archive *a;
    struct archive_entry *e;
    uint8_t *buf; /* BASEBACKUP_CHUNK bytes */
    size_t used;
    uint64_t total;
    bool failed;
    int64_t mtime;
} tar_writer;

static int tar_flush(tar_writer *w)
{
    if (w->used == 0 || w->failed)
        return w->failed ? -1 : 0;
    if (w->sink(w->buf, w->used, w->arg) != 0) {
        w->failed = true;
        return -1;
    }
    w->used = 0;
    return 0;
}

static la_ssize_t tar_write_cb(struct archive *a, void *arg, const void *data, size_t n)
{
    (void)a;
    tar_writer *w = arg;
    const uint8_t *p = data;
    size_t left = n;
    while (left > 0) {
        if (w->failed)
            return -1;
        size_t room = BASEBACKUP_CHUNK - w->used;
        size_t take = left < room ? left : room;
        memcpy(w->buf + w->used, p, take);
        p += take;
        w->used += take;
        w->total += take;
        left -= take;
        if (w->used == BASEBACKUP_CHUNK && tar_flush(w) != 0)
            return -1;
    }
    return (la_ssize_t)n;
}

static int tar_open(tar_writer *w)
{
    w->a = archive_write_new();
    w->e = archive_entry_new();
    if (w->a == NULL || w->e == NULL)
        return -1;
    if (archive_write_set_format_ustar(w->a) != ARCHIVE_OK ||
        archive_write_set_bytes_per_block(w->a, 0) != ARCHIVE_OK ||
        archive_write_open(w->a, w, NULL, tar_write_cb, NULL) != ARCHIVE_OK)
        return -1;
    return 0;
}

/* Ends the archive (two zero blocks) and hands the rest to the sink. */
static int tar_close(tar_writer *w)
{
    if (archive_write_close(w->a) != ARCHIVE_OK)
        return -1;
    return tar_flush(w);
}

static void tar_free(tar_writer *w)
{
    if (w->e != NULL)
        archive_entry_free(w->e);
    if (w->a != NULL)
        archive_write_free(w->a);
    w->e = NULL;
    w->a = NULL;
}

/* One header: a regular file of size bytes, or a directory. */
static int tar_header(tar_writer *w, const char *name, bool dir, uint64_t size)
{
    assert(strlen(name) > 0 && strlen(name) < 100);
    if (w->failed)
        return -1;
    archive_entry_clear(w->e);
    archive_entry_set_pathname(w->e, name);
    archive_entry_set_filetype(w->e, dir ? AE_IFDIR : AE_IFREG);
    archive_entry_set_perm(w->e, dir ? 0700 : 0600);
    archive_entry_set_size(w->e, dir ? 0 : (la_int64_t)size);
    archive_entry_set_mtime(w->e, (time_t)w->mtime, 0);
    return archive_write_header(w->a, w->e) == ARCHIVE_OK ? 0 : -1;
}

/* Data of the current entry; the entries' sizes add up as declared. */
static int tar_put(tar_writer *w, const void *data, size_t n)
{
    if (w->failed)
        return -1;
    return archive_write_data(w->a, data, n) == (la_ssize_t)n ? 0 : -1;
}

static int tar_dir(tar_writer *w, const char *name)
{
    return tar_header(w, name, true, 0);
}

static int tar_file(tar_writer *w, const char *name, const void *data, size_t n)
{
    if (tar_header(w, name, false, n) != 0)
        return -1;
    return n == 0 ? 0 : tar_put(w, data, n);
}

/* ---- listings ---- */

typedef struct key_list {
    pg_key *k;
    uint32_t *size; /* VAL_SIZE payloads where listed */
    size_t n, cap;
    bool overflow;
    bool oom;
} key_list;

static int list_add(const pg_key *k, lsn_t lsn, const value_ref *v, void *arg)
{
    (void)lsn;
    key_list *l = arg;
    if (v->kind == VAL_TOMBSTONE)
        return 0;
    if (l->n == l->cap) {
        if (l->cap >= MAX_LISTED) {
            l->overflow = true;
            return 1;
        }
        size_t cap = l->cap ? l->cap * 2 : 64;
        pg_key *nk = realloc(l->k, cap * sizeof *nk);
        if (nk != NULL)
            l->k = nk;
        uint32_t *ns = realloc(l->size, cap * sizeof *ns);
        if (ns != NULL)
            l->size = ns;
        if (nk == NULL || ns == NULL) {
            l->oom = true;
            return 1;
        }
        l->cap = cap;
    }
    uint32_t size = 0;
    if (v->kind == VAL_SIZE && v->len == 4)
        size = get_be32(v->payload);
    else if (v->kind == VAL_SIZE)
        return 0;
    l->k[l->n] = *k;
    l->size[l->n] = size;
    l->n++;
    return 0;
}

static void list_free(key_list *l)
{
    free(l->k);
    free(l->size);
    memset(l, 0, sizeof *l);
}

/* Lists every live key of kind at lsn. */
static int list_kind(const basebackup_source *src, uint8_t kind, lsn_t lsn, key_list *out,
                     char *err, size_t errlen)
{
    pg_key from = {.kind = kind}, to = {.kind = (uint8_t)(kind + 1)};
    memset(out, 0, sizeof *out);
    if (src->scan(src->arg, &from, &to, lsn, list_add, out, err, errlen) != 0)
        return -1;
    if (out->oom || out->overflow) {
        snprintf(err, errlen, "%s listing keys of kind %u",
                 out->oom ? "out of memory" : "too many entries", kind);
        return -1;
    }
    return 0;
}

/* ---- the archive ---- */

typedef struct bb {
    const basebackup_source *src;
    lsn_t lsn;
    const basebackup_options *o;
    tar_writer w;
    basebackup_result *res;
    char *err;
    size_t errlen;
    const char *sqlstate;
    uint8_t *page; /* PG_BLCKSZ * MAX_SLRU_SEG_BLOCKS */
} bb;

static int read_fail(bb *b)
{
    b->sqlstate = SQLSTATE_INTERNAL_ERROR;
    return -1;
}

static int write_fail(bb *b)
{
    snprintf(b->err, b->errlen, "the basebackup was cancelled (the client went away)");
    b->sqlstate = SQLSTATE_QUERY_CANCELED;
    return -1;
}

static const char *const skeleton_dirs[] = {
    "global",
    "base",
    "pg_wal",
    "pg_wal/archive_status",
    "pg_xact",
    "pg_multixact",
    "pg_multixact/offsets",
    "pg_multixact/members",
    "pg_twophase",
    "pg_subtrans",
    "pg_notify",
    "pg_serial",
    "pg_snapshots",
    "pg_stat",
    "pg_stat_tmp",
    "pg_replslot",
    "pg_tblspc",
    "pg_logical",
    "pg_logical/snapshots",
    "pg_logical/mappings",
    "pg_commit_ts",
    "pg_dynshmem",
};

static const char hba_conf[] =
    "# pg_hba.conf written by the Strata basebackup: a placeholder the compute\n"
    "# launcher replaces.  Local and loopback connections only.\n"
    "local all all trust\n"
    "host all all 127.0.0.1/32 trust\n"
    "host all all ::1/128 trust\n";

static const char ident_conf[] = "# pg_ident.conf written by the Strata basebackup (empty map)\n";

/*
 * postgresql.auto.conf as the compute's last ALTER SYSTEM at or below the
 * LSN left it (KEY_CHECKPOINT_REL_AUTO_CONF); empty before the first.
 */
static int write_auto_conf(bb *b)
{
    pg_key k = {.kind = KEY_CHECKPOINT, .rel = KEY_CHECKPOINT_REL_AUTO_CONF};
    value_ref v;
    lsn_t found;
    int rc = b->src->get_latest(b->src->arg, &k, b->lsn, &v, &found, b->err, b->errlen);
    if (rc < 0)
        return read_fail(b);
    if (rc == 0)
        return tar_file(&b->w, "postgresql.auto.conf", "", 0) != 0 ? write_fail(b) : 0;
    if (v.kind != VAL_BLOB || v.len > WAL_AUTO_CONF_MAX) {
        snprintf(b->err, b->errlen,
                 "stored postgresql.auto.conf is a value of kind %u and %u bytes", v.kind, v.len);
        free((void *)v.payload);
        return read_fail(b);
    }
    rc = tar_file(&b->w, "postgresql.auto.conf", v.payload, v.len);
    free((void *)v.payload);
    return rc != 0 ? write_fail(b) : 0;
}

static int write_skeleton(bb *b)
{
    for (size_t i = 0; i < sizeof skeleton_dirs / sizeof skeleton_dirs[0]; i++)
        if (tar_dir(&b->w, skeleton_dirs[i]) != 0)
            return write_fail(b);
    if (tar_file(&b->w, "PG_VERSION", "15\n", 3) != 0 ||
        tar_file(&b->w, "postgresql.conf", "", 0) != 0 ||
        tar_file(&b->w, "pg_hba.conf", hba_conf, sizeof hba_conf - 1) != 0 ||
        tar_file(&b->w, "pg_ident.conf", ident_conf, sizeof ident_conf - 1) != 0)
        return write_fail(b);
    if (write_auto_conf(b) != 0)
        return -1;
    b->res->files += 5;
    return 0;
}

static int db_path(bb *b, uint32_t spc, uint32_t db, char *out, size_t len)
{
    if (spc == PG_GLOBALTABLESPACE_OID && db == 0) {
        snprintf(out, len, "global");
        return 0;
    }
    if (spc == PG_DEFAULTTABLESPACE_OID) {
        snprintf(out, len, "base/%u", db);
        return 0;
    }
    snprintf(b->err, b->errlen,
             "database %u lives in tablespace %u: only the default and global tablespaces are "
             "supported",
             db, spc);
    b->sqlstate = SQLSTATE_FEATURE_NOT_SUPPORTED;
    return -1;
}

/* A database directory, its PG_VERSION and pg_filenode.map. */
static int write_database(bb *b, uint32_t spc, uint32_t db)
{
    char dir[64], path[96];
    if (db_path(b, spc, db, dir, sizeof dir) != 0)
        return -1;
    if (db != 0 && tar_dir(&b->w, dir) != 0)
        return write_fail(b);
    if (db != 0) {
        snprintf(path, sizeof path, "%s/PG_VERSION", dir);
        if (tar_file(&b->w, path, "15\n", 3) != 0)
            return write_fail(b);
        b->res->files++;
    }
    pg_key mk = {.kind = KEY_RELMAP, .spc = spc, .db = db};
    value_ref v;
    lsn_t found;
    int rc = b->src->get_latest(b->src->arg, &mk, b->lsn, &v, &found, b->err, b->errlen);
    if (rc < 0)
        return read_fail(b);
    if (rc == 0)
        return 0; /* a database created by FILE_COPY may take its map later */
    if (v.kind != VAL_BLOB || v.len != PG_RELMAP_FILE_SIZE) {
        snprintf(b->err, b->errlen, "relmap of %s is a value of kind %u and %u bytes, not a map",
                 dir, v.kind, v.len);
        free((void *)v.payload);
        return read_fail(b);
    }
    snprintf(path, sizeof path, "%s/pg_filenode.map", dir);
    rc = tar_file(&b->w, path, v.payload, v.len);
    free((void *)v.payload);
    if (rc != 0)
        return write_fail(b);
    b->res->files++;
    b->res->databases++;
    return 0;
}

static const char *const fork_suffix[] = {"", "_fsm", "_vm", "_init"};

static int write_relation_as(bb *b, const pg_key *k, const pg_key *name_as, uint32_t nblocks);

/* Every segment file of one relation fork, blocks read at the LSN. */
static int write_relation(bb *b, const pg_key *k, uint32_t nblocks)
{
    return write_relation_as(b, k, k, nblocks);
}

/* The blocks of fork k written under the file name of fork name_as. */
static int write_relation_as(bb *b, const pg_key *k, const pg_key *name_as, uint32_t nblocks)
{
    char dir[64], path[128];
    if (db_path(b, k->spc, k->db, dir, sizeof dir) != 0)
        return -1;
    if (k->fork > FORK_MAX || name_as->fork > FORK_MAX) {
        snprintf(b->err, b->errlen, "relation %u has fork %u", k->rel, k->fork);
        return read_fail(b);
    }
    uint32_t segs = nblocks == 0 ? 1 : (nblocks + REL_SEG_BLOCKS - 1) / REL_SEG_BLOCKS;
    for (uint32_t s = 0; s < segs; s++) {
        uint32_t first = s * REL_SEG_BLOCKS;
        uint32_t n = nblocks - first < REL_SEG_BLOCKS ? nblocks - first : REL_SEG_BLOCKS;
        if (s == 0)
            snprintf(path, sizeof path, "%s/%u%s", dir, name_as->rel, fork_suffix[name_as->fork]);
        else
            snprintf(path, sizeof path, "%s/%u%s.%u", dir, name_as->rel, fork_suffix[name_as->fork],
                     s);
        if (tar_header(&b->w, path, false, (uint64_t)n * PG_BLCKSZ) != 0)
            return write_fail(b);
        for (uint32_t i = 0; i < n; i++) {
            if (b->src->rel_page(b->src->arg, k->spc, k->db, k->rel, k->fork, first + i, b->lsn,
                                 b->page, b->err, b->errlen) != 0)
                return read_fail(b);
            if (tar_put(&b->w, b->page, PG_BLCKSZ) != 0)
                return write_fail(b);
        }
        b->res->rel_files++;
        b->res->files++;
        b->res->rel_blocks += n;
    }
    return 0;
}

static const char *const slru_dir[] = {"pg_xact", "pg_multixact/offsets", "pg_multixact/members"};

static int write_slru(bb *b, const pg_key *k)
{
    if (k->fork > SLRU_MULTIXACT_MEMBERS) {
        snprintf(b->err, b->errlen, "SLRU segment of unknown kind %u", k->fork);
        return read_fail(b);
    }
    uint32_t n = 0;
    if (b->src->slru_segment(b->src->arg, k->fork, k->rel, b->lsn, b->page, MAX_SLRU_SEG_BLOCKS, &n,
                             b->err, b->errlen) != 0)
        return read_fail(b);
    char path[64];
    /* slru.c names segments with at least 4 hex digits. */
    snprintf(path, sizeof path, "%s/%04X", slru_dir[k->fork], k->rel);
    if (tar_file(&b->w, path, b->page, (size_t)n * PG_BLCKSZ) != 0)
        return write_fail(b);
    b->res->slru_segments++;
    b->res->files++;
    return 0;
}

static int write_twophase(bb *b, const pg_key *k)
{
    value_ref v;
    lsn_t found;
    int rc = b->src->get_latest(b->src->arg, k, b->lsn, &v, &found, b->err, b->errlen);
    if (rc < 0)
        return read_fail(b);
    if (rc == 0 || v.kind != VAL_BLOB) {
        if (rc == 1)
            free((void *)v.payload);
        return 0;
    }
    /* The store keeps the state without its trailing CRC-32C (ingest and
     * import strip it); the file on disk has it. */
    uint8_t *file = malloc((size_t)v.len + 4);
    if (file == NULL) {
        free((void *)v.payload);
        snprintf(b->err, b->errlen, "out of memory");
        return read_fail(b);
    }
    memcpy(file, v.payload, v.len);
    put_le32(file + v.len, crc32c(v.payload, v.len));
    free((void *)v.payload);
    char path[64];
    snprintf(path, sizeof path, "pg_twophase/%08X", k->rel);
    rc = tar_file(&b->w, path, file, (size_t)v.len + 4);
    free(file);
    if (rc != 0)
        return write_fail(b);
    b->res->twophase_files++;
    b->res->files++;
    return 0;
}

/* Reads a VAL_BLOB of exactly want bytes (or at least want when !exact). */
static int get_blob(bb *b, const pg_key *k, const char *what, size_t want, value_ref *v,
                    lsn_t *found)
{
    char lb[LSN_FMT_LEN];
    int rc = b->src->get_latest(b->src->arg, k, b->lsn, v, found, b->err, b->errlen);
    if (rc < 0)
        return read_fail(b);
    if (rc == 0) {
        snprintf(b->err, b->errlen,
                 "no %s stored at LSN %s: the LSN is before the timeline starts or was "
                 "garbage-collected",
                 what, lsn_format(b->lsn, lb));
        b->sqlstate = SQLSTATE_UNDEFINED_FILE;
        return -1;
    }
    if (v->kind != VAL_BLOB || v->len < want) {
        snprintf(b->err, b->errlen, "stored %s is a value of kind %u and %u bytes", what, v->kind,
                 v->len);
        free((void *)v->payload);
        return read_fail(b);
    }
    return 0;
}

/*
 * Replica mode: the newest checkpoint record at or below the LSN that a
 * standby can start from -- its redo point in the same WAL segment as the
 * record, because PostgreSQL reads the checkpoint record first and starts
 * streaming at its segment, and then cannot go back to an earlier segment it
 * never received (a missing segment under an active walreceiver is a PANIC
 * in XLogFileRead).  Shutdown checkpoints (redo = the record) always
 * qualify; every compute start writes one.  *start and cp are set; -1 with
 * a clear error when there is none or its redo point is below the GC
 * horizon (the replay would read pages that are no longer kept).
 *
 * Hot standby from either kind (verified in PostgreSQL 15's xlog.c and
 * xlogrecovery.c): at a shutdown checkpoint StartupXLOG builds the standby
 * snapshot itself (no transaction ran; prepared ones from pg_twophase), so
 * the standby opens as soon as it has replayed to minRecoveryPoint.  At an
 * online checkpoint it needs an XLOG_RUNNING_XACTS record: CreateCheckPoint
 * logs one (LogStandbySnapshot, wal_level >= replica, which computes run
 * with) after fixing the redo point and before inserting the checkpoint
 * record, so the replay from redo meets it; only when that record had
 * overflowed subtransactions does the standby wait for a later one
 * (STANDBY_SNAPSHOT_PENDING, procarray.c), which the next checkpoint or
 * bgwriter's periodic snapshot brings.
 */
#define REPLICA_CHECKPOINT_TRIES 64

static int replica_checkpoint(bb *b, uint32_t seg_size, lsn_t *start,
                              uint8_t cp[PG_CHECKPOINT_SIZE])
{
    pg_key k = {.kind = KEY_CHECKPOINT, .rel = KEY_CHECKPOINT_REL_RECORD};
    char lb[LSN_FMT_LEN], lb2[LSN_FMT_LEN], lb3[LSN_FMT_LEN];
    lsn_t at = b->lsn;
    for (int i = 0; i < REPLICA_CHECKPOINT_TRIES && at != LSN_INVALID; i++) {
        value_ref v;
        lsn_t found;
        int rc = b->src->get_latest(b->src->arg, &k, at, &v, &found, b->err, b->errlen);
        if (rc < 0)
            return read_fail(b);
        if (rc == 0)
            break;
        if (v.kind != VAL_BLOB || v.len != KEY_CHECKPOINT_RECORD_LEN) {
            snprintf(b->err, b->errlen,
                     "stored checkpoint record at %s is a value of kind %u "
                     "and %u bytes",
                     lsn_format(found, lb), v.kind, v.len);
            free((void *)v.payload);
            return read_fail(b);
        }
        lsn_t s = get_le64(v.payload + KEY_CHECKPOINT_RECORD_START_OFF);
        lsn_t redo = get_le64(v.payload + KEY_CHECKPOINT_RECORD_CP_OFF + PG_CP_REDO);
        /* A branch's reads fall through to its ancestor below the branch
         * point, but its safekeepers hold its WAL from the branch point
         * only: an ancestor's checkpoint (and every older one) is out. */
        if (s < b->o->timeline_start) {
            free((void *)v.payload);
            break;
        }
        bool usable = redo <= s && redo / seg_size == s / seg_size && s < found;
        if (usable)
            memcpy(cp, v.payload + KEY_CHECKPOINT_RECORD_CP_OFF, PG_CHECKPOINT_SIZE);
        free((void *)v.payload);
        if (usable) {
            if (b->o->gc_horizon != LSN_INVALID && redo < b->o->gc_horizon) {
                snprintf(b->err, b->errlen,
                         "the newest checkpoint a replica at %s can start from (redo %s) is below "
                         "the GC horizon %s; run CHECKPOINT on the timeline's primary and retry",
                         lsn_format(b->lsn, lb), lsn_format(redo, lb2),
                         lsn_format(b->o->gc_horizon, lb3));
                b->sqlstate = SQLSTATE_OBJECT_NOT_IN_PREREQUISITE_STATE;
                return -1;
            }
            *start = s;
            return 0;
        }
        at = found - 1;
    }
    snprintf(b->err, b->errlen,
             "no checkpoint record at or below LSN %s that a replica can start from: start a "
             "writable compute on the timeline (its startup writes one) or run CHECKPOINT on it",
             lsn_format(b->lsn, lb));
    b->sqlstate = SQLSTATE_OBJECT_NOT_IN_PREREQUISITE_STATE;
    return -1;
}

/* pg_control for replica mode (pgcontrol.h); no WAL goes with it. */
static int replica_control(bb *b, const value_ref *ctl, uint8_t *control)
{
    uint32_t seg_size;
    lsn_t start;
    uint8_t cp[PG_CHECKPOINT_SIZE];
    if (pgcontrol_replica_seg_size(ctl->payload, ctl->len, &seg_size, b->err, b->errlen) != 0) {
        b->sqlstate = SQLSTATE_INTERNAL_ERROR;
        return -1;
    }
    if (replica_checkpoint(b, seg_size, &start, cp) != 0)
        return -1;
    pgcontrol_make_replica_control(ctl->payload, ctl->len, start, cp, b->lsn, control);
    b->res->checkpoint_lsn = start;
    b->res->next_record_lsn = LSN_INVALID;
    b->res->prev_lsn = LSN_INVALID;
    return 0;
}

/* The pg_control to write into control (the standby's in replica mode,
 * else the one that boots at b->lsn, with boot its plan), and the LSNs
 * the result reports.  0 or -1 with b's error. */
static int plan_control(bb *b, const value_ref *ctl, const value_ref *cp, lsn_t prev, int64_t now,
                        pgcontrol_boot *boot, uint8_t *control)
{
    if (b->o->replica)
        return replica_control(b, ctl, control);
    if (pgcontrol_boot_plan(b->lsn, ctl->payload, ctl->len, cp->payload, prev, now, boot, b->err,
                            b->errlen) != 0) {
        b->sqlstate = SQLSTATE_INVALID_PARAMETER_VALUE;
        return -1;
    }
    pgcontrol_make_control(boot, ctl->payload, ctl->len, control);
    b->res->checkpoint_lsn = boot->record_start;
    b->res->next_record_lsn = boot->record_end;
    b->res->prev_lsn = prev;
    return 0;
}

/* Every relation fork of rels: all in full mode; else only unlogged
 * relations have files, their init fork and a main fork with the same
 * contents (Postgres resets unlogged relations only in crash recovery,
 * which a compute never runs).  0 or -1. */
static int write_relations(bb *b, const key_list *rels)
{
    for (size_t i = 0; i < rels->n; i++) {
        if (b->o->full) {
            if (write_relation(b, &rels->k[i], rels->size[i]) != 0)
                return -1;
            continue;
        }
        if (rels->k[i].fork != FORK_INIT)
            continue;
        pg_key main_as = rels->k[i];
        main_as.fork = FORK_MAIN;
        if (write_relation(b, &rels->k[i], rels->size[i]) != 0 ||
            write_relation_as(b, &rels->k[i], &main_as, rels->size[i]) != 0)
            return -1;
    }
    return 0;
}

/* The data directory's files at b->lsn: the skeleton, the databases, the
 * relations, the SLRUs and the two-phase files.  0 or -1. */
static int write_files(bb *b)
{
    key_list dbs = {0}, rels = {0}, slrus = {0}, twophase = {0};
    int rc = -1;
    if (list_kind(b->src, KEY_DB, b->lsn, &dbs, b->err, b->errlen) != 0 ||
        list_kind(b->src, KEY_SLRU_SIZE, b->lsn, &slrus, b->err, b->errlen) != 0 ||
        list_kind(b->src, KEY_TWOPHASE, b->lsn, &twophase, b->err, b->errlen) != 0 ||
        list_kind(b->src, KEY_REL_SIZE, b->lsn, &rels, b->err, b->errlen) != 0) {
        read_fail(b);
        goto out;
    }
    if (write_skeleton(b) != 0)
        goto out;
    bool have_global = false;
    for (size_t i = 0; i < dbs.n; i++)
        have_global |= dbs.k[i].spc == PG_GLOBALTABLESPACE_OID && dbs.k[i].db == 0;
    if (!have_global && write_database(b, PG_GLOBALTABLESPACE_OID, 0) != 0)
        goto out;
    for (size_t i = 0; i < dbs.n; i++)
        if (write_database(b, dbs.k[i].spc, dbs.k[i].db) != 0)
            goto out;
    if (write_relations(b, &rels) != 0)
        goto out;
    for (size_t i = 0; i < slrus.n; i++)
        if (write_slru(b, &slrus.k[i]) != 0)
            goto out;
    for (size_t i = 0; i < twophase.n; i++)
        if (write_twophase(b, &twophase.k[i]) != 0)
            goto out;
    rc = 0;
out:
    list_free(&dbs);
    list_free(&rels);
    list_free(&slrus);
    list_free(&twophase);
    return rc;
}

/* pg_wal/: the segments boot plans, holding the bootstrap checkpoint.  0
 * or -1. */
static int write_wal(bb *b, const pgcontrol_boot *boot)
{
    uint8_t *seg = malloc(boot->seg_size);
    if (seg == NULL) {
        snprintf(b->err, b->errlen, "out of memory");
        return read_fail(b);
    }
    int rc = 0;
    for (uint64_t s = boot->first_segno; rc == 0 && s <= boot->last_segno; s++) {
        char name[25], path[40];
        pgcontrol_segment_name(boot->tli, s, boot->seg_size, name);
        snprintf(path, sizeof path, "pg_wal/%s", name);
        pgcontrol_make_segment(boot, s, seg);
        if (tar_file(&b->w, path, seg, boot->seg_size) != 0)
            rc = write_fail(b);
        else
            b->res->files++;
    }
    free(seg);
    return rc;
}

static int write_all(bb *b)
{
    /* pg_control and the checkpoint first: nothing is written for an LSN
     * with no stored state. */
    pg_key ck = {.kind = KEY_CONTROL}, cpk = {.kind = KEY_CHECKPOINT};
    value_ref ctl, cp;
    lsn_t ctl_found, cp_found;
    if (get_blob(b, &ck, "pg_control", PG_CTL_CRC + 4, &ctl, &ctl_found) != 0)
        return -1;
    if (get_blob(b, &cpk, "checkpoint", PG_CHECKPOINT_SIZE, &cp, &cp_found) != 0) {
        free((void *)ctl.payload);
        return -1;
    }
    lsn_t prev = b->o->prev_lsn;
    if (prev == LSN_INVALID && b->lsn == b->o->timeline_start && cp_found == b->lsn)
        prev = get_le64(cp.payload + PG_CP_REDO); /* the imported shutdown checkpoint */
    int64_t now = b->o->now != 0 ? b->o->now : (int64_t)time(NULL);
    pgcontrol_boot *boot = malloc(sizeof *boot);
    uint8_t *control = malloc(PG_CONTROL_FILE_SIZE);
    int rc = -1;
    if (boot == NULL || control == NULL) {
        snprintf(b->err, b->errlen, "out of memory");
        read_fail(b);
        goto out;
    }
    if (plan_control(b, &ctl, &cp, prev, now, boot, control) != 0 || write_files(b) != 0)
        goto out;
    /* In replica mode the standby streams its WAL from the safekeepers. */
    if (!b->o->replica && write_wal(b, boot) != 0)
        goto out;
    /* pg_control last: a truncated archive has none and cannot start. */
    if (tar_file(&b->w, "global/pg_control", control, PG_CONTROL_FILE_SIZE) != 0 ||
        tar_close(&b->w) != 0) {
        write_fail(b);
        goto out;
    }
    b->res->files++;
    b->res->bytes = b->w.total;
    rc = 0;
out:
    free(boot);
    free(control);
    free((void *)ctl.payload);
    free((void *)cp.payload);
    return rc;
}

int basebackup_write(const basebackup_source *src, lsn_t lsn, const basebackup_options *o,
                     basebackup_sink_fn sink, void *sink_arg, basebackup_result *res, char *err,
                     size_t errlen, const char **sqlstate)
{
    basebackup_result local;
    if (res == NULL)
        res = &local;
    memset(res, 0, sizeof *res);
    char lb[LSN_FMT_LEN];
    if (lsn == LSN_INVALID || lsn % 8 != 0) {
        snprintf(err, errlen,
                 "LSN %s is not a record boundary (record ends are 8-byte aligned and not 0/0)",
                 lsn_format(lsn, lb));
        if (sqlstate != NULL)
            *sqlstate = SQLSTATE_INVALID_PARAMETER_VALUE;
        return -1;
    }
    bb b = {.src = src, .lsn = lsn, .o = o, .res = res, .err = err, .errlen = errlen};
    b.w.sink = sink;
    b.w.arg = sink_arg;
    b.w.mtime = o->now != 0 ? o->now : (int64_t)time(NULL);
    b.w.buf = malloc(BASEBACKUP_CHUNK);
    b.page = malloc((size_t)PG_BLCKSZ * MAX_SLRU_SEG_BLOCKS);
    int rc;
    if (b.w.buf == NULL || b.page == NULL || tar_open(&b.w) != 0) {
        snprintf(err, errlen, "out of memory (starting the archive)");
        b.sqlstate = SQLSTATE_OUT_OF_MEMORY;
        rc = -1;
    } else {
        rc = write_all(&b);
    }
    tar_free(&b.w);
    free(b.w.buf);
    free(b.page);
    if (rc != 0 && sqlstate != NULL)
        *sqlstate = b.sqlstate != NULL ? b.sqlstate : SQLSTATE_INTERNAL_ERROR;
    return rc;
}
