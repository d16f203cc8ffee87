/*
 * store_rebuild.c: rebuilding a store's LMDB index from its data files
 * alone (store_rebuild in store.h; docs/storage.md, "Rebuild").
 *
 * For: a pageserver restored from object storage (pageserver/remote/), which
 * has the data files a manifest names and nothing else.  Every value is in a
 * data file (store_flush.c), every file names its entries (index key +
 * encoded value), and of two files holding the same (key, LSN) the newer one
 * holds the live copy (store_gc.c copies only live entries into its newer
 * files).  So: read the files in ascending id order, validate every block,
 * and let each entry replace what an older file said.
 * Not for: downloading (pageserver/remote/restore.c) or opening the result
 * (store_open).
 *
 * The rebuild writes with MDB_NOSYNC and syncs once at the end; the metadata
 * (disk_consistent_lsn) goes in the last transaction, so a crash leaves an
 * index without it, which the caller throws away with the directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/durable.h"
#include "base/log.h"
#include "base/strata_assert.h"
#include "pageserver/store/store_priv.h"

/* Entries per LMDB write transaction (an LMDB transaction dirties a bounded
 * number of pages). */
#define REBUILD_TXN_PUTS 20000

typedef struct rb_file {
    uint64_t id;
    store_file_rec rec;
} rb_file;

typedef struct rebuild {
    store *st; /* env and DB handles only */
    const store_options *o;
    rb_file *files; /* sorted by id */
    size_t nfiles;
    MDB_txn *txn;
    size_t txn_puts;
    store_rebuild_stats stats;
    uint8_t *blk; /* one block as on disk */
    size_t blk_cap;
    uint8_t inl[STORE_IDXV_INLINE_FILE_HDR + VALUE_HEADER_LEN + 4096];
} rebuild;

static int cmp_file(const void *a, const void *b)
{
    uint64_t x = ((const rb_file *)a)->id, y = ((const rb_file *)b)->id;
    return x < y ? -1 : x > y;
}

static rb_file *find_file(rebuild *rb, uint64_t id)
{
    rb_file probe = {.id = id};
    return bsearch(&probe, rb->files, rb->nfiles, sizeof probe, cmp_file);
}

/* The data files in dir/data, sorted by id; anything else there is an
 * error.  0 or -1 with err. */
static int list_files(rebuild *rb, const char *data_dir, uint64_t next_file_id, char *err,
                      size_t errlen)
{
    DIR *d = opendir(data_dir);
    if (d == NULL) {
        snprintf(err, errlen, "open directory %s: %s", data_dir, strerror(errno));
        return -1;
    }
    size_t cap = 0;
    struct dirent *de;
    int ret = 0;
    while (ret == 0 && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        uint64_t id;
        if (!store_df_parse_name(de->d_name, &id)) {
            snprintf(err, errlen, "%s/%s is not a data file (want <16 hex>.dat)", data_dir,
                     de->d_name);
            ret = -1;
        } else if (id == 0 || id >= next_file_id) {
            snprintf(err, errlen, "data file %016llx is outside 1..next_file_id %llu",
                     (unsigned long long)id, (unsigned long long)next_file_id);
            ret = -1;
        } else if (rb->nfiles == cap) {
            cap = cap ? cap * 2 : 64;
            rb_file *nf = realloc(rb->files, cap * sizeof *nf);
            if (nf == NULL) {
                snprintf(err, errlen, "out of memory");
                ret = -1;
            } else
                rb->files = nf;
        }
        if (ret == 0)
            rb->files[rb->nfiles++] = (rb_file){.id = id};
    }
    closedir(d);
    if (ret == 0 && rb->nfiles > 0)
        qsort(rb->files, rb->nfiles, sizeof *rb->files, cmp_file);
    return ret;
}

/* Commits the open write transaction, if any.  0 or -1 with err. */
static int txn_commit(rebuild *rb, char *err, size_t errlen)
{
    if (rb->txn == NULL)
        return 0;
    int rc = mdb_txn_commit(rb->txn);
    rb->txn = NULL;
    rb->txn_puts = 0;
    if (rc != 0) {
        store_mdb_err(err, errlen, "rebuild: commit", rc);
        return -1;
    }
    return 0;
}

/* A write transaction with room for one more entry.  0 or -1 with err. */
static int txn_room(rebuild *rb, char *err, size_t errlen)
{
    if (rb->txn != NULL && rb->txn_puts >= REBUILD_TXN_PUTS && txn_commit(rb, err, errlen) != 0)
        return -1;
    if (rb->txn == NULL) {
        int rc = mdb_txn_begin(rb->st->env, NULL, 0, &rb->txn);
        if (rc != 0) {
            store_mdb_err(err, errlen, "rebuild: begin transaction", rc);
            return -1;
        }
    }
    rb->txn_puts++;
    return 0;
}

/* One entry of file f (the block at off, entry at eoff of used bytes) into
 * the index.  0 or -1 with err. */
static int put_entry(rebuild *rb, rb_file *f, const uint8_t *ikey, const value_ref *v, uint64_t off,
                     uint32_t blen, size_t eoff, size_t used, char *err, size_t errlen)
{
    pg_key k;
    lsn_t lsn;
    if (!pg_index_key_decode(ikey, &k, &lsn)) {
        snprintf(err, errlen, "data file %016llx at %llu+%zu: invalid key",
                 (unsigned long long)f->id, (unsigned long long)off, eoff);
        return -1;
    }
    if (lsn > rb->stats.max_lsn)
        rb->stats.max_lsn = lsn;
    size_t vlen = used - PG_INDEX_KEY_LEN;
    uint8_t fv[STORE_IDXV_FILE_LEN];
    MDB_val key = {PG_INDEX_KEY_LEN, (void *)ikey}, val;
    if (vlen <= rb->o->inline_max_bytes) {
        STRATA_ASSERT(vlen <= sizeof rb->inl - STORE_IDXV_INLINE_FILE_HDR);
        store_idxv_encode_inline_hdr(f->id, rb->inl);
        memcpy(rb->inl + STORE_IDXV_INLINE_FILE_HDR, ikey + PG_INDEX_KEY_LEN, vlen);
        val = (MDB_val){STORE_IDXV_INLINE_FILE_HDR + vlen, rb->inl};
    } else {
        store_idxv iv = {.kind = v->kind,
                         .flags = v->flags,
                         .file_id = f->id,
                         .block_off = off,
                         .block_len = blen,
                         .off_in_block = (uint32_t)eoff,
                         .entry_len = (uint32_t)used};
        store_idxv_encode_file(&iv, fv);
        val = (MDB_val){sizeof fv, fv};
    }
    if (txn_room(rb, err, errlen) != 0)
        return -1;
    MDB_val old = val;
    int rc = mdb_put(rb->txn, rb->st->dbi_index, &key, &old, MDB_NOOVERWRITE);
    if (rc == MDB_KEYEXIST) {
        /* An older file's copy, now dead. */
        store_idxv oiv;
        const char *why;
        rb_file *of = NULL;
        if (store_idxv_decode(old.mv_data, old.mv_size, &oiv, &why) == 0 &&
            store_idxv_in_file(&oiv))
            of = find_file(rb, oiv.file_id);
        if (of == NULL || of->id >= f->id) {
            char kb[96], lb[LSN_FMT_LEN];
            snprintf(err, errlen, "data file %016llx holds %s at %s twice",
                     (unsigned long long)f->id, pg_key_format(&k, kb, sizeof kb),
                     lsn_format(lsn, lb));
            return -1;
        }
        STRATA_ASSERT(of->rec.live_values > 0 && of->rec.live_bytes >= oiv.entry_len);
        of->rec.live_values--;
        of->rec.live_bytes -= oiv.entry_len;
        rb->stats.replaced++;
        rc = mdb_put(rb->txn, rb->st->dbi_index, &key, &val, 0);
    }
    if (rc != 0) {
        store_mdb_err(err, errlen, "rebuild: insert index entry", rc);
        return -1;
    }
    if (f->rec.values == 0 || lsn < f->rec.lsn_min)
        f->rec.lsn_min = lsn;
    if (f->rec.values == 0 || lsn > f->rec.lsn_max)
        f->rec.lsn_max = lsn;
    f->rec.values++;
    f->rec.value_bytes += used;
    f->rec.live_values++;
    f->rec.live_bytes += used;
    rb->stats.entries++;
    return 0;
}

/* Reads the block at off of file f (fd): validated, its entries into the
 * index.  *blen is its length on disk.  0 or -1 with err. */
static int read_block(rebuild *rb, rb_file *f, int fd, uint64_t off, uint64_t size, uint32_t *blen,
                      char *err, size_t errlen)
{
    const char *why = NULL;
    uint32_t raw_len, comp_len;
    if (size - off < STORE_DF_BLOCK_HEADER_LEN ||
        durable_pread_all(fd, rb->blk, STORE_DF_BLOCK_HEADER_LEN, off) !=
            STORE_DF_BLOCK_HEADER_LEN ||
        store_df_block_header_decode(rb->blk, STORE_DF_BLOCK_HEADER_LEN, &raw_len, &comp_len,
                                     &why) != 0) {
        snprintf(err, errlen, "data file %016llx at %llu: bad block header%s%s",
                 (unsigned long long)f->id, (unsigned long long)off, why ? ": " : "",
                 why ? why : "");
        return -1;
    }
    size_t len = STORE_DF_BLOCK_HEADER_LEN + (size_t)comp_len;
    if (len > size - off) {
        snprintf(err, errlen, "data file %016llx at %llu: block runs past the end (truncated?)",
                 (unsigned long long)f->id, (unsigned long long)off);
        return -1;
    }
    if (len > rb->blk_cap) {
        uint8_t *nb = realloc(rb->blk, len);
        if (nb == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        rb->blk = nb;
        rb->blk_cap = len;
    }
    if (durable_pread_all(fd, rb->blk, len, off) != (ssize_t)len) {
        snprintf(err, errlen, "data file %016llx: short read at %llu", (unsigned long long)f->id,
                 (unsigned long long)off);
        return -1;
    }
    uint8_t *raw = NULL;
    uint32_t rl = 0;
    if (store_df_block_decode(rb->blk, len, &raw, &rl, &why) != 0) {
        snprintf(err, errlen, "data file %016llx at %llu: %s", (unsigned long long)f->id,
                 (unsigned long long)off, why);
        return -1;
    }
    int ret = 0;
    for (size_t eoff = 0; ret == 0 && eoff < rl;) {
        const uint8_t *ikey;
        value_ref v;
        size_t used;
        if (store_df_entry_decode(raw, rl, eoff, &ikey, &v, &used, &why) != 0) {
            snprintf(err, errlen, "data file %016llx at %llu+%zu: %s", (unsigned long long)f->id,
                     (unsigned long long)off, eoff, why);
            ret = -1;
        } else {
            ret = put_entry(rb, f, ikey, &v, off, (uint32_t)len, eoff, used, err, errlen);
            eoff += used;
        }
    }
    free(raw);
    *blen = (uint32_t)len;
    return ret;
}

/* Every entry of file f into the index.  0 or -1 with err. */
static int read_file(rebuild *rb, rb_file *f, const char *data_dir, char *err, size_t errlen)
{
    char path[4400];
    store_df_path(data_dir, f->id, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    uint8_t hdr[STORE_DF_HEADER_LEN];
    uint64_t hdr_id = 0;
    const char *why = NULL;
    int ret = 0;
    if (fstat(fd, &sb) != 0) {
        snprintf(err, errlen, "stat %s: %s", path, strerror(errno));
        ret = -1;
    } else if (durable_pread_all(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr ||
               store_df_header_decode(hdr, sizeof hdr, &hdr_id, &why) != 0 || hdr_id != f->id) {
        snprintf(err, errlen, "%s: bad header%s%s", path, why ? ": " : "",
                 why ? why : (hdr_id != f->id ? " (file id differs from its name)" : ""));
        ret = -1;
    }
    uint64_t size = ret == 0 ? (uint64_t)sb.st_size : 0, off = STORE_DF_HEADER_LEN;
    while (ret == 0 && off < size) {
        uint32_t blen = 0;
        ret = read_block(rb, f, fd, off, size, &blen, err, errlen);
        off += blen;
    }
    close(fd);
    if (ret == 0) {
        f->rec.file_size = size;
        rb->stats.files++;
        rb->stats.file_bytes += size;
    }
    return ret;
}

/* The last transaction: file records and metadata; then everything synced. */
static int finish(rebuild *rb, lsn_t consistent_lsn, uint64_t next_file_id, const char *index_dir,
                  char *err, size_t errlen)
{
    if (txn_commit(rb, err, errlen) != 0)
        return -1;
    MDB_txn *txn;
    int rc = mdb_txn_begin(rb->st->env, NULL, 0, &txn);
    for (size_t i = 0; rc == 0 && i < rb->nfiles; i++) {
        uint8_t fk[8], fr[STORE_FILE_REC_LEN];
        store_file_key(rb->files[i].id, fk);
        store_file_rec_encode(&rb->files[i].rec, fr);
        MDB_val key = {8, fk}, val = {sizeof fr, fr};
        rc = mdb_put(txn, rb->st->dbi_files, &key, &val, 0);
    }
    if (rc == 0)
        rc = store_meta_put_u64(rb->st, txn, "next_file_id", next_file_id);
    if (rc == 0)
        rc = store_meta_put_u64(rb->st, txn, "format", STORE_FORMAT_VALUES_IN_FILES);
    if (rc == 0)
        rc = store_meta_put_u64(rb->st, txn, "disk_consistent_lsn", consistent_lsn);
    if (rc == 0)
        rc = mdb_txn_commit(txn);
    else if (txn != NULL)
        mdb_txn_abort(txn);
    if (rc == 0)
        rc = mdb_env_sync(rb->st->env, 1);
    if (rc != 0) {
        store_mdb_err(err, errlen, "rebuild: file records and metadata", rc);
        return -1;
    }
    if (durable_fsync_dir(index_dir) != 0) {
        snprintf(err, errlen, "rebuild: fsync %s failed", index_dir);
        return -1;
    }
    return 0;
}

/* Creates the LMDB environment in index_dir and its DBs.  0 or -1 with err. */
static int open_index(rebuild *rb, const char *index_dir, char *err, size_t errlen)
{
    char probe[4400];
    snprintf(probe, sizeof probe, "%s/data.mdb", index_dir);
    if (mkdir(index_dir, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "create directory %s: %s", index_dir, strerror(errno));
        return -1;
    }
    if (access(probe, F_OK) == 0) {
        snprintf(err, errlen, "%s exists: rebuild wants a store without an index", probe);
        return -1;
    }
    store *st = rb->st;
    int rc = mdb_env_create(&st->env);
    if (rc == 0)
        rc = mdb_env_set_maxdbs(st->env, 4);
    if (rc == 0)
        rc = mdb_env_set_mapsize(st->env, rb->o->lmdb_map_size);
    if (rc == 0)
        rc = mdb_env_open(st->env, index_dir, MDB_NOTLS | MDB_NORDAHEAD | MDB_NOSYNC, 0600);
    MDB_txn *txn = NULL;
    if (rc == 0)
        rc = mdb_txn_begin(st->env, NULL, 0, &txn);
    if (rc == 0 && (rc = mdb_dbi_open(txn, "index", MDB_CREATE, &st->dbi_index)) == 0 &&
        (rc = mdb_dbi_open(txn, "files", MDB_CREATE, &st->dbi_files)) == 0 &&
        (rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &st->dbi_meta)) == 0) {
        rc = mdb_txn_commit(txn);
        txn = NULL;
    }
    if (txn != NULL)
        mdb_txn_abort(txn);
    if (rc != 0) {
        store_mdb_err(err, errlen, "rebuild: create LMDB index", rc);
        return -1;
    }
    return 0;
}

int store_rebuild(const char *dir, const store_options *o, lsn_t consistent_lsn,
                  uint64_t next_file_id, store_rebuild_stats *stats, char *err, size_t errlen)
{
    store_options def;
    if (o == NULL) {
        store_options_default(&def);
        o = &def;
    }
    store_options opts = *o;
    if (opts.inline_max_bytes > 4096)
        opts.inline_max_bytes = 4096; /* as store_open */
    if (strlen(dir) > 3800) {
        snprintf(err, errlen, "store directory path too long");
        return -1;
    }
    char data_dir[4200], index_dir[4200];
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    snprintf(index_dir, sizeof index_dir, "%s/index", dir);
    rebuild rb = {.o = &opts};
    rb.st = calloc(1, sizeof *rb.st);
    rb.blk_cap = STORE_DF_BLOCK_HEADER_LEN;
    rb.blk = malloc(rb.blk_cap);
    int lock_fd = -1, ret = -1;
    if (rb.st == NULL || rb.blk == NULL) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    lock_fd = durable_lock_dir(dir, "store.lock");
    if (lock_fd < 0) {
        snprintf(err, errlen, "lock store directory %s: %s", dir,
                 lock_fd == -EWOULDBLOCK ? "in use by another store" : strerror(-lock_fd));
        goto out;
    }
    if (list_files(&rb, data_dir, next_file_id, err, errlen) != 0 ||
        open_index(&rb, index_dir, err, errlen) != 0)
        goto out;
    for (size_t i = 0; i < rb.nfiles; i++)
        if (read_file(&rb, &rb.files[i], data_dir, err, errlen) != 0)
            goto out;
    if (finish(&rb, consistent_lsn, next_file_id, index_dir, err, errlen) != 0)
        goto out;
    char lb[LSN_FMT_LEN];
    log_info("store: rebuilt %s from %llu data files (%llu bytes, %llu entries, %llu replaced by "
             "newer copies), consistent at %s",
             dir, (unsigned long long)rb.stats.files, (unsigned long long)rb.stats.file_bytes,
             (unsigned long long)rb.stats.entries, (unsigned long long)rb.stats.replaced,
             lsn_format(consistent_lsn, lb));
    if (stats != NULL)
        *stats = rb.stats;
    ret = 0;
out:
    if (rb.txn != NULL)
        mdb_txn_abort(rb.txn);
    if (rb.st != NULL && rb.st->env != NULL)
        mdb_env_close(rb.st->env);
    if (lock_fd >= 0)
        durable_unlock_dir(lock_fd);
    free(rb.st);
    free(rb.files);
    free(rb.blk);
    return ret;
}
