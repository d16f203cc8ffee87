/*
 * store.c: one timeline's page-version store (pageserver/store/store.h, docs/design.md §6.3).
 *
 * For: gluing the parts together: the open and frozen layers
 * (store_layer.c), data files (store_datafile.c), the block cache
 * (store_cache.c) and the LMDB index; the background thread that freezes
 * old layers and flushes frozen ones; the read paths that merge layers and
 * the index newest-first; restart from disk_consistent_lsn.
 * Not for: GC (store_gc.c), decoding WAL, applying deltas.
 *
 * Layout of the store directory:
 *   store.lock              held while open (durable_lock_dir)
 *   index/                  the LMDB environment: DBs "index", "files", "meta"
 *   data/<16 hex>.dat       immutable data files
 *   layer-<n>.open          open-layer backing files (discarded on restart)
 *
 * Flush order (crash-safe at every step): write + fsync the data file under a
 * temporary name, rename, fsync the directory; publish it to readers; one
 * LMDB write transaction inserts every index entry, the file record and the
 * new disk_consistent_lsn; only then is the frozen layer dropped.  A crash
 * before the commit leaves an unreferenced file, which the next open deletes.
 */
#include "pageserver/store/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/durable.h"
#include "common/log.h"
#include "common/strata_assert.h"
#include "pageserver/store/store_priv.h"

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void put_be64(uint8_t *p, uint64_t v)
{
    put_be32(p, (uint32_t)(v >> 32));
    put_be32(p + 4, (uint32_t)v);
}

static uint64_t get_be64(const uint8_t *p)
{
    return ((uint64_t)get_be32(p) << 32) | get_be32(p + 4);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void store_mdb_err(char *err, size_t errlen, const char *what, int rc)
{
    snprintf(err, errlen, "%s: %s", what,
             rc == MDB_MAP_FULL ? "index map full (raise lmdb_map_size)" : mdb_strerror(rc));
}

void store_options_default(store_options *o)
{
    o->open_layer_max_bytes = 64u * 1024 * 1024;
    o->open_layer_max_age_ms = 10000;
    o->inline_max_bytes = 256;
    o->lmdb_map_size = (size_t)64 * 1024 * 1024 * 1024;
    o->zstd_level = 1;
}

/* ---- LMDB records ---- */

int store_idxv_decode(const void *data, size_t len, store_idxv *out, const char **why)
{
    const uint8_t *p = data;
    memset(out, 0, sizeof *out);
    if (len < 1) {
        *why = "empty index value";
        return -1;
    }
    out->tag = p[0];
    if (p[0] == STORE_IDXV_INLINE) {
        value_ref v;
        size_t used;
        if (value_decode(p + 1, len - 1, &v, &used, why) != 0)
            return -1;
        if (used != len - 1) {
            *why = "inline index value has trailing bytes";
            return -1;
        }
        out->kind = v.kind;
        out->flags = v.flags;
        out->value = p + 1;
        out->value_len = (uint32_t)used;
        return 0;
    }
    if (p[0] == STORE_IDXV_FILE) {
        if (len != STORE_IDXV_FILE_LEN) {
            *why = "file index value has the wrong length";
            return -1;
        }
        out->kind = p[1];
        out->flags = p[2];
        out->file_id = get_be64(p + 3);
        out->block_off = get_be64(p + 11);
        out->block_len = get_be32(p + 19);
        out->off_in_block = get_be32(p + 23);
        out->entry_len = get_be32(p + 27);
        if (out->block_len <= STORE_DF_BLOCK_HEADER_LEN ||
            out->entry_len < PG_INDEX_KEY_LEN + VALUE_HEADER_LEN ||
            out->entry_len > STORE_DF_MAX_RAW_BLOCK) {
            *why = "file index value out of range";
            return -1;
        }
        return 0;
    }
    *why = "unknown index value tag";
    return -1;
}

void store_idxv_encode_file(const store_idxv *iv, uint8_t out[STORE_IDXV_FILE_LEN])
{
    out[0] = STORE_IDXV_FILE;
    out[1] = iv->kind;
    out[2] = iv->flags;
    put_be64(out + 3, iv->file_id);
    put_be64(out + 11, iv->block_off);
    put_be32(out + 19, iv->block_len);
    put_be32(out + 23, iv->off_in_block);
    put_be32(out + 27, iv->entry_len);
}

void store_file_rec_encode(const store_file_rec *r, uint8_t out[STORE_FILE_REC_LEN])
{
    put_be64(out, r->file_size);
    put_be64(out + 8, r->value_bytes);
    put_be64(out + 16, r->live_bytes);
    put_be64(out + 24, r->values);
    put_be64(out + 32, r->live_values);
}

int store_file_rec_decode(const void *data, size_t len, store_file_rec *r)
{
    const uint8_t *p = data;
    if (len != STORE_FILE_REC_LEN)
        return -1;
    r->file_size = get_be64(p);
    r->value_bytes = get_be64(p + 8);
    r->live_bytes = get_be64(p + 16);
    r->values = get_be64(p + 24);
    r->live_values = get_be64(p + 32);
    return 0;
}

void store_file_key(uint64_t id, uint8_t out[8])
{
    put_be64(out, id);
}

int store_file_rec_sub(store *st, MDB_txn *txn, uint64_t id, uint64_t entry_len, uint64_t count)
{
    uint8_t k[8];
    store_file_key(id, k);
    MDB_val key = {8, k}, val;
    int rc = mdb_get(txn, st->dbi_files, &key, &val);
    if (rc == MDB_NOTFOUND)
        return 0; /* the file is already gone */
    if (rc != 0)
        return rc;
    store_file_rec r;
    if (store_file_rec_decode(val.mv_data, val.mv_size, &r) != 0)
        return MDB_CORRUPTED;
    r.live_bytes = r.live_bytes >= entry_len ? r.live_bytes - entry_len : 0;
    r.live_values = r.live_values >= count ? r.live_values - count : 0;
    uint8_t enc[STORE_FILE_REC_LEN];
    store_file_rec_encode(&r, enc);
    MDB_val nv = {sizeof enc, enc};
    return mdb_put(txn, st->dbi_files, &key, &nv, 0);
}

static int meta_get_u64(store *st, MDB_txn *txn, const char *name, uint64_t *out)
{
    MDB_val key = {strlen(name), (void *)name}, val;
    int rc = mdb_get(txn, st->dbi_meta, &key, &val);
    if (rc == MDB_NOTFOUND) {
        *out = 0;
        return 0;
    }
    if (rc != 0)
        return rc;
    if (val.mv_size != 8)
        return MDB_CORRUPTED;
    *out = get_be64(val.mv_data);
    return 0;
}

static int meta_put_u64(store *st, MDB_txn *txn, const char *name, uint64_t v)
{
    uint8_t b[8];
    put_be64(b, v);
    MDB_val key = {strlen(name), (void *)name}, val = {8, b};
    return mdb_put(txn, st->dbi_meta, &key, &val, 0);
}

/* ---- data files and snapshots ---- */

store_file *store_file_open(store *st, uint64_t id, char *err, size_t errlen)
{
    char path[4400];
    store_df_path(st->data_dir, id, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "open data file %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    store_file *f = calloc(1, sizeof *f);
    if (f == NULL || fstat(fd, &sb) != 0) {
        snprintf(err, errlen, "open data file %s: %s", path, f ? strerror(errno) : "out of memory");
        free(f);
        close(fd);
        return NULL;
    }
    f->id = id;
    f->fd = fd;
    f->size = (uint64_t)sb.st_size;
    atomic_init(&f->refs, 1);
    return f;
}

void store_file_unref(store_file *f)
{
    if (f == NULL)
        return;
    int was = atomic_fetch_sub(&f->refs, 1);
    STRATA_ASSERT_MSG(was > 0, "data file %016llx released with %d references",
                      (unsigned long long)f->id, was);
    if (was == 1) {
        close(f->fd);
        free(f);
    }
}

static void snap_free(store *st, store_snap *s)
{
    store_layer_unref(s->open);
    for (int i = 0; i < s->nfrozen; i++)
        store_layer_unref(s->frozen[i]);
    for (size_t i = 0; i < s->nfiles; i++)
        store_file_unref(s->files[i]);
    free(s->files);
    uint32_t slot = s->slot;
    free(s);
    if (slot < STORE_SNAP_SLOTS)
        atomic_store(&st->snap_slots[slot], NULL);
}

store_snap *store_snap_acquire(store *st)
{
    uint64_t w = atomic_fetch_add(&st->snap_word, (uint64_t)1 << 32);
    store_snap *s = atomic_load(&st->snap_slots[(uint32_t)w]);
    STRATA_ASSERT(s != NULL); /* a pinned slot is never empty */
    return s;
}

void store_snap_release(store *st, store_snap *s)
{
    if (atomic_fetch_sub(&s->refs, 1) == 1)
        snap_free(st, s);
}

store_snap *store_snap_clone_current(store *st)
{
    store_snap *cur = atomic_load(&st->snap_slots[(uint32_t)atomic_load(&st->snap_word)]);
    store_snap *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->slot = STORE_SNAP_SLOTS;
    if (cur == NULL)
        return s;
    s->files = cur->nfiles ? malloc(cur->nfiles * sizeof *s->files) : NULL;
    if (cur->nfiles && s->files == NULL) {
        free(s);
        return NULL;
    }
    s->open = cur->open;
    store_layer_ref(s->open);
    s->nfrozen = cur->nfrozen;
    for (int i = 0; i < cur->nfrozen; i++) {
        s->frozen[i] = cur->frozen[i];
        store_layer_ref(s->frozen[i]);
    }
    s->nfiles = cur->nfiles;
    for (size_t i = 0; i < cur->nfiles; i++) {
        s->files[i] = cur->files[i];
        atomic_fetch_add(&s->files[i]->refs, 1);
    }
    return s;
}

int store_snap_publish(store *st, store_snap *s)
{
    uint32_t slot = STORE_SNAP_SLOTS;
    uint32_t cur_slot = (uint32_t)atomic_load(&st->snap_word);
    for (int tries = 0; tries < 1000 && slot == STORE_SNAP_SLOTS; tries++) {
        for (uint32_t i = 0; i < STORE_SNAP_SLOTS; i++) {
            if (i != cur_slot && atomic_load(&st->snap_slots[i]) == NULL) {
                slot = i;
                break;
            }
        }
        if (slot == STORE_SNAP_SLOTS)
            sched_yield(); /* every slot is held by a reader: wait briefly */
    }
    if (slot == STORE_SNAP_SLOTS) {
        s->slot = STORE_SNAP_SLOTS;
        atomic_store(&s->refs, 1);
        store_snap_release(st, s);
        return -1;
    }
    s->slot = slot;
    atomic_store(&s->refs, STORE_SNAP_BIAS);
    atomic_store(&st->snap_slots[slot], s);
    uint64_t old_word = atomic_exchange(&st->snap_word, (uint64_t)slot);
    store_snap *old = atomic_load(&st->snap_slots[(uint32_t)old_word]);
    if (old != NULL && old != s) {
        int64_t pinned = (int64_t)(old_word >> 32);
        int64_t delta = pinned - STORE_SNAP_BIAS;
        if (atomic_fetch_add(&old->refs, delta) + delta == 0)
            snap_free(st, old);
    }
    return 0;
}

store_file *store_snap_find_file(const store_snap *s, uint64_t id)
{
    size_t lo = 0, hi = s->nfiles;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->files[mid]->id == id)
            return s->files[mid];
        if (s->files[mid]->id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int store_snap_add_file(store_snap *s, store_file *f)
{
    store_file **nf = realloc(s->files, (s->nfiles + 1) * sizeof *nf);
    if (nf == NULL)
        return -1;
    s->files = nf;
    size_t pos = s->nfiles;
    while (pos > 0 && s->files[pos - 1]->id > f->id) {
        s->files[pos] = s->files[pos - 1];
        pos--;
    }
    s->files[pos] = f;
    s->nfiles++;
    atomic_fetch_add(&f->refs, 1);
    return 0;
}

void store_snap_remove_file(store_snap *s, uint64_t id)
{
    for (size_t i = 0; i < s->nfiles; i++) {
        if (s->files[i]->id == id) {
            store_file_unref(s->files[i]);
            memmove(&s->files[i], &s->files[i + 1], (s->nfiles - i - 1) * sizeof *s->files);
            s->nfiles--;
            return;
        }
    }
}

/* Reads the value an index entry names (see store_priv.h). */
int store_read_idxv(store *st, const store_snap *snap, const store_idxv *iv,
                    const uint8_t ikey[PG_INDEX_KEY_LEN], value_ref *out,
                    const store_cache_block **hold, char *err, size_t errlen)
{
    const char *why = NULL;
    size_t used;
    *hold = NULL;
    if (iv->tag == STORE_IDXV_INLINE) {
        if (value_decode(iv->value, iv->value_len, out, &used, &why) != 0) {
            snprintf(err, errlen, "corrupt inline index value: %s", why);
            return -1;
        }
        return 0;
    }
    const store_cache_block *blk = store_cache_lookup(st->cache, iv->file_id, iv->block_off);
    if (blk == NULL) {
        store_file *f = store_snap_find_file(snap, iv->file_id);
        if (f == NULL) {
            snprintf(err, errlen, "index names data file %016llx, which is not open",
                     (unsigned long long)iv->file_id);
            return -1;
        }
        if (iv->block_off + iv->block_len > f->size) {
            snprintf(err, errlen, "index names a block past the end of data file %016llx",
                     (unsigned long long)iv->file_id);
            return -1;
        }
        uint8_t *buf = malloc(iv->block_len);
        if (buf == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        ssize_t got = durable_pread_all(f->fd, buf, iv->block_len, iv->block_off);
        if (got != (ssize_t)iv->block_len) {
            snprintf(err, errlen, "read data file %016llx: %s", (unsigned long long)iv->file_id,
                     got < 0 ? strerror((int)-got) : "short read");
            free(buf);
            return -1;
        }
        uint8_t *raw;
        uint32_t raw_len;
        int rc = store_df_block_decode(buf, iv->block_len, &raw, &raw_len, &why);
        free(buf);
        if (rc != 0) {
            snprintf(err, errlen, "data file %016llx block at %llu: %s",
                     (unsigned long long)iv->file_id, (unsigned long long)iv->block_off, why);
            return -1;
        }
        blk = store_cache_insert(st->cache, iv->file_id, iv->block_off, raw, raw_len);
        if (blk == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
    }
    const uint8_t *found_key;
    if (store_df_entry_decode(blk->data, blk->len, iv->off_in_block, &found_key, out, &used,
                              &why) != 0 ||
        used != iv->entry_len || memcmp(found_key, ikey, PG_INDEX_KEY_LEN) != 0) {
        snprintf(err, errlen,
                 "data file %016llx block at %llu: entry at %u is not the indexed one%s%s",
                 (unsigned long long)iv->file_id, (unsigned long long)iv->block_off,
                 iv->off_in_block, why ? ": " : "", why ? why : "");
        store_cache_release(st->cache, blk);
        return -1;
    }
    *hold = blk;
    return 0;
}

/* ---- open, close ---- */

static int make_dir(const char *path, char *err, size_t errlen)
{
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "create directory %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static void *bg_main(void *arg);

/* Removes files a crash left behind: data files the index does not list,
 * temporary data files, open-layer files. */
static int remove_leftovers(store *st, char *err, size_t errlen)
{
    DIR *d = opendir(st->data_dir);
    if (d == NULL) {
        snprintf(err, errlen, "open directory %s: %s", st->data_dir, strerror(errno));
        return -1;
    }
    struct dirent *de;
    bool removed = false;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        uint64_t id;
        store_snap *cur = atomic_load(&st->snap_slots[(uint32_t)atomic_load(&st->snap_word)]);
        bool keep = store_df_parse_name(de->d_name, &id) && store_snap_find_file(cur, id) != NULL;
        if (!keep) {
            char path[4500];
            snprintf(path, sizeof path, "%s/%s", st->data_dir, de->d_name);
            log_info("store: removing leftover data file %s", path);
            if (unlink(path) != 0 && errno != ENOENT) {
                snprintf(err, errlen, "remove %s: %s", path, strerror(errno));
                closedir(d);
                return -1;
            }
            removed = true;
        }
    }
    closedir(d);
    if (removed && durable_fsync_dir(st->data_dir) != 0) {
        snprintf(err, errlen, "fsync %s failed", st->data_dir);
        return -1;
    }
    d = opendir(st->dir);
    if (d == NULL) {
        snprintf(err, errlen, "open directory %s: %s", st->dir, strerror(errno));
        return -1;
    }
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (strncmp(de->d_name, "layer-", 6) == 0 && n > 5 &&
            strcmp(de->d_name + n - 5, ".open") == 0) {
            char path[4500];
            snprintf(path, sizeof path, "%s/%s", st->dir, de->d_name);
            unlink(path);
        }
    }
    closedir(d);
    return 0;
}

static int new_open_layer(store *st, store_layer **out, char *err, size_t errlen)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/layer-%llu.open", st->dir, (unsigned long long)++st->layer_seq);
    /* About one bucket per 256 bytes of layer, so chains stay short. */
    size_t nb = st->o.open_layer_max_bytes / 256;
    if (nb > (1u << 20))
        nb = 1u << 20;
    return store_layer_create(path, (uint32_t)nb, out, err, errlen);
}

/* Loads the file list and LSNs from LMDB, opens the files and publishes the
 * first snapshot. */
static int load_state(store *st, char *err, size_t errlen)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
    if (rc != 0) {
        store_mdb_err(err, errlen, "begin transaction", rc);
        return -1;
    }
    if ((rc = mdb_dbi_open(txn, "index", MDB_CREATE, &st->dbi_index)) != 0 ||
        (rc = mdb_dbi_open(txn, "files", MDB_CREATE, &st->dbi_files)) != 0 ||
        (rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &st->dbi_meta)) != 0) {
        mdb_txn_abort(txn);
        store_mdb_err(err, errlen, "open LMDB databases", rc);
        return -1;
    }
    uint64_t dcl = 0, next_id = 0;
    if ((rc = meta_get_u64(st, txn, "disk_consistent_lsn", &dcl)) != 0 ||
        (rc = meta_get_u64(st, txn, "next_file_id", &next_id)) != 0) {
        mdb_txn_abort(txn);
        store_mdb_err(err, errlen, "read store metadata", rc);
        return -1;
    }
    store_snap *s = calloc(1, sizeof *s);
    if (s == NULL) {
        mdb_txn_abort(txn);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    MDB_cursor *cur;
    mdb_cursor_open(txn, st->dbi_files, &cur);
    MDB_val k, v;
    uint64_t bytes = 0;
    int ret = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        store_file_rec r;
        if (k.mv_size != 8 || store_file_rec_decode(v.mv_data, v.mv_size, &r) != 0) {
            snprintf(err, errlen, "corrupt file record in the index");
            ret = -1;
            break;
        }
        uint64_t id = get_be64(k.mv_data);
        store_file *f = store_file_open(st, id, err, errlen);
        if (f == NULL) {
            ret = -1;
            break;
        }
        if (f->size != r.file_size) {
            snprintf(err, errlen, "data file %016llx is %llu bytes, the index says %llu",
                     (unsigned long long)id, (unsigned long long)f->size,
                     (unsigned long long)r.file_size);
            store_file_unref(f);
            ret = -1;
            break;
        }
        if (store_snap_add_file(s, f) != 0) {
            store_file_unref(f);
            snprintf(err, errlen, "out of memory");
            ret = -1;
            break;
        }
        store_file_unref(f); /* the snapshot holds it */
        bytes += r.file_size;
        if (id >= next_id)
            next_id = id + 1;
    }
    mdb_cursor_close(cur);
    if (ret == 0)
        rc = mdb_txn_commit(txn);
    else
        mdb_txn_abort(txn);
    if (ret == 0 && rc != 0) {
        store_mdb_err(err, errlen, "commit", rc);
        ret = -1;
    }
    if (ret == 0 && new_open_layer(st, &s->open, err, errlen) != 0)
        ret = -1;
    if (ret != 0) {
        s->slot = STORE_SNAP_SLOTS;
        snap_free(st, s);
        return -1;
    }
    st->open = s->open;
    s->slot = 0;
    atomic_store(&s->refs, STORE_SNAP_BIAS);
    atomic_store(&st->snap_slots[0], s);
    atomic_store(&st->snap_word, 0);
    atomic_store(&st->disk_consistent_lsn, dcl);
    atomic_store(&st->last_record_lsn, dcl);
    atomic_store(&st->next_file_id, next_id ? next_id : 1);
    atomic_store(&st->data_files, s->nfiles);
    atomic_store(&st->data_file_bytes, bytes);
    return 0;
}

int store_open(const char *dir, const store_options *o, store **out, char *err, size_t errlen)
{
    store *st = calloc(1, sizeof *st);
    if (st == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (o != NULL)
        st->o = *o;
    else
        store_options_default(&st->o);
    if (st->o.open_layer_max_bytes < 4096)
        st->o.open_layer_max_bytes = 4096;
    if (st->o.inline_max_bytes > 4096)
        st->o.inline_max_bytes = 4096;
    st->lock_fd = -1;
    if (strlen(dir) > 3800) {
        snprintf(err, errlen, "store directory path too long");
        free(st);
        return -1;
    }
    snprintf(st->dir, sizeof st->dir, "%s", dir);
    snprintf(st->data_dir, sizeof st->data_dir, "%s/data", dir);
    pthread_mutex_init(&st->publish_mu, NULL);
    pthread_mutex_init(&st->write_mu, NULL);
    pthread_mutex_init(&st->wait_mu, NULL);
    pthread_mutex_init(&st->bg_mu, NULL);
    pthread_mutex_init(&st->gc_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&st->wait_cv, &ca);
    pthread_cond_init(&st->bg_cv, &ca);
    pthread_cond_init(&st->flush_cv, &ca);
    pthread_condattr_destroy(&ca);

    char index_dir[4300];
    snprintf(index_dir, sizeof index_dir, "%s/index", dir);
    if (make_dir(dir, err, errlen) != 0)
        goto fail;
    st->lock_fd = durable_lock_dir(dir, "store.lock");
    if (st->lock_fd < 0) {
        snprintf(err, errlen, "lock store directory %s: %s", dir,
                 st->lock_fd == -EWOULDBLOCK ? "in use by another store" : strerror(-st->lock_fd));
        goto fail;
    }
    if (make_dir(st->data_dir, err, errlen) != 0 || make_dir(index_dir, err, errlen) != 0)
        goto fail;
    st->cache = store_cache_create(STORE_BLOCK_CACHE_BYTES);
    if (st->cache == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    int rc = mdb_env_create(&st->env);
    if (rc == 0)
        rc = mdb_env_set_maxdbs(st->env, 4);
    if (rc == 0)
        rc = mdb_env_set_mapsize(st->env, st->o.lmdb_map_size);
    if (rc == 0)
        rc = mdb_env_set_maxreaders(st->env, 1024);
    /* NOTLS: read transactions belong to the call, not the thread, so a scan
     * callback may read the store again. */
    if (rc == 0)
        rc = mdb_env_open(st->env, index_dir, MDB_NOTLS | MDB_NORDAHEAD, 0600);
    if (rc != 0) {
        store_mdb_err(err, errlen, "open LMDB index", rc);
        goto fail;
    }
    if (load_state(st, err, errlen) != 0)
        goto fail;
    if (remove_leftovers(st, err, errlen) != 0)
        goto fail;
    if (pthread_create(&st->bg, NULL, bg_main, st) != 0) {
        snprintf(err, errlen, "start the store's background thread");
        goto fail;
    }
    st->bg_started = true;
    *out = st;
    return 0;
fail:
    store_close(st);
    return -1;
}

void store_close(store *st)
{
    if (st == NULL)
        return;
    if (st->bg_started) {
        pthread_mutex_lock(&st->bg_mu);
        st->stop = true;
        pthread_cond_broadcast(&st->bg_cv);
        pthread_mutex_unlock(&st->bg_mu);
        pthread_join(st->bg, NULL);
    }
    /* Drop the published reference; readers must be gone by now. */
    uint64_t w = atomic_load(&st->snap_word);
    store_snap *cur = atomic_load(&st->snap_slots[(uint32_t)w]);
    if (cur != NULL) {
        int64_t delta = (int64_t)(w >> 32) - STORE_SNAP_BIAS;
        if (atomic_fetch_add(&cur->refs, delta) + delta == 0)
            snap_free(st, cur);
    }
    if (st->env != NULL)
        mdb_env_close(st->env);
    store_cache_destroy(st->cache);
    if (st->lock_fd >= 0)
        durable_unlock_dir(st->lock_fd);
    pthread_cond_destroy(&st->wait_cv);
    pthread_cond_destroy(&st->bg_cv);
    pthread_cond_destroy(&st->flush_cv);
    pthread_mutex_destroy(&st->publish_mu);
    pthread_mutex_destroy(&st->write_mu);
    pthread_mutex_destroy(&st->wait_mu);
    pthread_mutex_destroy(&st->bg_mu);
    pthread_mutex_destroy(&st->gc_mu);
    free(st);
}

/* ---- writer ---- */

/* Freezes the open layer (write_mu held): 0 done, 1 no room for another
 * frozen layer, -1 error. */
static int freeze_locked(store *st, char *err, size_t errlen)
{
    store_layer *fresh;
    pthread_mutex_lock(&st->publish_mu);
    store_snap *cur = atomic_load(&st->snap_slots[(uint32_t)atomic_load(&st->snap_word)]);
    if (cur->nfrozen == STORE_MAX_FROZEN) {
        pthread_mutex_unlock(&st->publish_mu);
        return 1;
    }
    if (new_open_layer(st, &fresh, err, errlen) != 0) {
        pthread_mutex_unlock(&st->publish_mu);
        return -1;
    }
    store_snap *s = store_snap_clone_current(st);
    if (s == NULL) {
        pthread_mutex_unlock(&st->publish_mu);
        store_layer_unref(fresh);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    store_layer *old = s->open;
    store_layer_set_freeze_lsn(old, atomic_load(&st->last_record_lsn));
    memmove(&s->frozen[1], &s->frozen[0], (size_t)s->nfrozen * sizeof s->frozen[0]);
    s->frozen[0] = old; /* the clone's reference moves over */
    s->nfrozen++;
    s->open = fresh;
    if (store_snap_publish(st, s) != 0) {
        pthread_mutex_unlock(&st->publish_mu);
        snprintf(err, errlen, "too many snapshots held by readers");
        return -1;
    }
    st->open = fresh;
    pthread_mutex_unlock(&st->publish_mu);
    pthread_mutex_lock(&st->bg_mu);
    pthread_cond_broadcast(&st->bg_cv);
    pthread_mutex_unlock(&st->bg_mu);
    return 0;
}

/* Freezes, waiting (write_mu held) while the frozen queue is full; fails if
 * a flush fails meanwhile. */
static int freeze_wait_locked(store *st, char *err, size_t errlen)
{
    /* Only a flush attempt that starts after this call may fail it: one
     * already running may have met a full disk that has room again now. */
    pthread_mutex_lock(&st->bg_mu);
    uint64_t since = st->flush_attempts;
    pthread_mutex_unlock(&st->bg_mu);
    for (;;) {
        int rc = freeze_locked(st, err, errlen);
        if (rc <= 0)
            return rc;
        pthread_mutex_lock(&st->bg_mu);
        if (st->flush_failed_attempt > since) {
            snprintf(err, errlen, "open layer full and flushing fails: %s", st->flush_err);
            pthread_mutex_unlock(&st->bg_mu);
            return -1;
        }
        st->retry_now = true;
        pthread_cond_broadcast(&st->bg_cv);
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&st->flush_cv, &st->bg_mu, &ts);
        pthread_mutex_unlock(&st->bg_mu);
    }
}

static int check_put(const pg_key *k, const value_ref *v, uint8_t enc[PG_KEY_LEN], char *err,
                     size_t errlen)
{
    pg_key back;
    pg_key_encode(k, enc);
    if (!pg_key_decode(enc, &back)) {
        snprintf(err, errlen, "invalid key (kind %u, fork %u)", k->kind, k->fork);
        return -1;
    }
    if (v->kind < VAL_IMAGE || v->kind > VAL_ZERO_PAGE || (v->flags & ~VALUE_WILL_INIT) != 0) {
        snprintf(err, errlen, "invalid value kind %u or flags %u", v->kind, v->flags);
        return -1;
    }
    if (v->len > VALUE_MAX_PAYLOAD) {
        snprintf(err, errlen, "value of %u bytes exceeds the maximum", v->len);
        return -1;
    }
    bool ok = true;
    switch (v->kind) {
    case VAL_IMAGE:
        ok = v->len == PG_BLCKSZ;
        break;
    case VAL_SIZE:
        ok = v->len == 4;
        break;
    case VAL_TOMBSTONE:
    case VAL_ZERO_PAGE:
        ok = v->len == 0;
        break;
    default:
        break;
    }
    if (!ok) {
        snprintf(err, errlen, "value of kind %u has the wrong length %u", v->kind, v->len);
        return -1;
    }
    if (v->kind == VAL_IMAGE || v->kind == VAL_BLOB || v->kind == VAL_SIZE ||
        v->kind == VAL_TOMBSTONE || v->kind == VAL_ZERO_PAGE)
        return 0;
    /* Deltas have inner structure: validate it now, as a read would, so a
     * bad value is refused here rather than found at read time. */
    uint8_t small[4096];
    size_t n = VALUE_HEADER_LEN + (size_t)v->len;
    uint8_t *buf = n <= sizeof small ? small : malloc(n);
    if (buf == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    value_ref decoded;
    size_t used;
    const char *why = NULL;
    int rc = value_encode(v, buf, n) == n ? value_decode(buf, n, &decoded, &used, &why) : -1;
    if (buf != small)
        free(buf);
    if (rc != 0) {
        snprintf(err, errlen, "invalid value: %s", why ? why : "does not encode");
        return -1;
    }
    return 0;
}

static int put_any(store *st, const pg_key *k, lsn_t lsn, const value_ref *v, char *err,
                   size_t errlen)
{
    uint8_t enc[PG_KEY_LEN];
    if (check_put(k, v, enc, err, errlen) != 0)
        return -1;
    pthread_mutex_lock(&st->write_mu);
    store_layer *l = st->open;
    /* Hard bound on the open layer: past twice its size (a record with very
     * many values, or flushes that cannot keep up) the writer waits. */
    if (store_layer_bytes(l) >= 2 * st->o.open_layer_max_bytes ||
        store_layer_keys(l) >= 4ull * store_layer_buckets(l)) {
        if (freeze_wait_locked(st, err, errlen) != 0) {
            pthread_mutex_unlock(&st->write_mu);
            return -1;
        }
        l = st->open;
    }
    int rc = store_layer_put(l, enc, lsn, v, err, errlen);
    pthread_mutex_unlock(&st->write_mu);
    if (rc == 0) {
        atomic_fetch_add_explicit(&st->values_put, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&st->bytes_put, v->len, memory_order_relaxed);
    }
    return rc;
}

int store_put(store *st, const pg_key *k, lsn_t lsn, const value_ref *v, char *err, size_t errlen)
{
    lsn_t last = atomic_load(&st->last_record_lsn);
    bool image_like = v->kind == VAL_IMAGE || v->kind == VAL_ZERO_PAGE;
    if (lsn <= last && !image_like) {
        char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
        snprintf(err, errlen, "put at %s is not above last_record_lsn %s", lsn_format(lsn, a),
                 lsn_format(last, b));
        return -1;
    }
    return put_any(st, k, lsn, v, err, errlen);
}

int store_put_image(store *st, const pg_key *k, lsn_t lsn, const uint8_t page[PG_BLCKSZ], char *err,
                    size_t errlen)
{
    value_ref v = {.kind = VAL_IMAGE, .flags = 0, .len = PG_BLCKSZ, .payload = page};
    return put_any(st, k, lsn, &v, err, errlen);
}

void store_advance(store *st, lsn_t last_record_lsn)
{
    lsn_t prev = atomic_load(&st->last_record_lsn);
    if (last_record_lsn < prev) {
        char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
        log_error("store: advance to %s below last_record_lsn %s ignored",
                  lsn_format(last_record_lsn, a), lsn_format(prev, b));
        return;
    }
    atomic_store(&st->last_record_lsn, last_record_lsn);
    if (atomic_load(&st->waiters) > 0) {
        pthread_mutex_lock(&st->wait_mu);
        pthread_cond_broadcast(&st->wait_cv);
        pthread_mutex_unlock(&st->wait_mu);
    }
    /* Freeze at a record boundary once the layer is big enough; if the
     * frozen queue is full, the next advance (or put's hard bound) retries. */
    pthread_mutex_lock(&st->write_mu);
    if (store_layer_bytes(st->open) >= st->o.open_layer_max_bytes) {
        char err[256];
        if (freeze_locked(st, err, sizeof err) < 0)
            log_warn("store: freeze failed: %s", err);
    }
    pthread_mutex_unlock(&st->write_mu);
}

lsn_t store_last_record_lsn(const store *st)
{
    return atomic_load(&((store *)st)->last_record_lsn);
}

lsn_t store_disk_consistent_lsn(const store *st)
{
    return atomic_load(&((store *)st)->disk_consistent_lsn);
}

int store_wait_lsn(store *st, lsn_t lsn, uint32_t timeout_ms)
{
    if (atomic_load(&st->last_record_lsn) >= lsn)
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    int result = 0;
    pthread_mutex_lock(&st->wait_mu);
    atomic_fetch_add(&st->waiters, 1);
    while (atomic_load(&st->last_record_lsn) < lsn) {
        if (pthread_cond_timedwait(&st->wait_cv, &st->wait_mu, &ts) == ETIMEDOUT) {
            result = atomic_load(&st->last_record_lsn) >= lsn ? 0 : -1;
            break;
        }
    }
    atomic_fetch_sub(&st->waiters, 1);
    pthread_mutex_unlock(&st->wait_mu);
    return result;
}

/* ---- flush ---- */

typedef struct flush_entry {
    const store_layer_version *ver;
    const uint8_t *key;
    bool in_file;
    store_df_loc loc;
} flush_entry;

/* Flushes frozen layer f (the oldest): 0 or -1 with err. */
static int flush_layer(store *st, store_layer *f, char *err, size_t errlen)
{
    const store_layer_key **keys = NULL;
    size_t nkeys = 0;
    flush_entry *ents = NULL;
    size_t nents = 0, cap = 0;
    store_df_writer *w = NULL;
    store_file *file = NULL;
    bool published_file = false;
    uint8_t *buf = NULL;
    size_t buf_cap = 0;
    uint64_t file_id = 0, file_size = 0, file_value_bytes = 0, file_values = 0;
    int ret = -1;
    MDB_txn *txn = NULL;

    if (store_layer_sorted_keys(f, NULL, NULL, &keys, &nkeys) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < nkeys; i++) {
        uint32_t n;
        const store_layer_version *v = store_layer_versions(keys[i], &n);
        for (uint32_t j = 0; j < n; j++) {
            if (nents == cap) {
                cap = cap ? cap * 2 : 1024;
                flush_entry *ne = realloc(ents, cap * sizeof *ents);
                if (ne == NULL) {
                    snprintf(err, errlen, "out of memory");
                    goto out;
                }
                ents = ne;
            }
            flush_entry *e = &ents[nents++];
            e->ver = &v[j];
            e->key = keys[i]->key;
            e->in_file = v[j].len > st->o.inline_max_bytes;
            /* One spare byte: pass 2 copies inline values after a tag byte. */
            if ((size_t)v[j].len + 1 > buf_cap) {
                uint8_t *nb = realloc(buf, (size_t)v[j].len + 1);
                if (nb == NULL) {
                    snprintf(err, errlen, "out of memory");
                    goto out;
                }
                buf = nb;
                buf_cap = (size_t)v[j].len + 1;
            }
            const uint8_t *enc = store_layer_data(f, &v[j]);
            value_ref val;
            size_t used;
            const char *why;
            if (value_decode(enc, v[j].len, &val, &used, &why) != 0 || used != v[j].len) {
                snprintf(err, errlen, "open layer value fails to decode: %s", why);
                goto out;
            }
            if (!e->in_file)
                continue;
            if (w == NULL) {
                file_id = atomic_fetch_add(&st->next_file_id, 1);
                if (store_df_writer_open(st->data_dir, file_id, st->o.zstd_level, &w, err,
                                         errlen) != 0)
                    goto out;
            }
            uint8_t ikey[PG_INDEX_KEY_LEN];
            memcpy(ikey, e->key, PG_KEY_LEN);
            put_be64(ikey + PG_KEY_LEN, v[j].lsn);
            if (store_df_writer_add(w, ikey, enc, v[j].len, &e->loc, err, errlen) != 0)
                goto out;
            file_value_bytes += e->loc.entry_len;
            file_values++;
        }
    }
    if (w != NULL) {
        if (store_df_writer_finish(w, &file_size, err, errlen) != 0)
            goto out;
        file = store_file_open(st, file_id, err, errlen);
        if (file == NULL)
            goto out;
        /* Readers must be able to open the file before the index names it. */
        pthread_mutex_lock(&st->publish_mu);
        store_snap *s = store_snap_clone_current(st);
        int rc = s ? store_snap_add_file(s, file) : -1;
        if (rc == 0)
            rc = store_snap_publish(st, s);
        else if (s != NULL) {
            atomic_store(&s->refs, 1);
            store_snap_release(st, s);
        }
        pthread_mutex_unlock(&st->publish_mu);
        if (rc != 0) {
            snprintf(err, errlen, "publish data file: out of memory or snapshot slots");
            goto out;
        }
        published_file = true;
    }

    int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
    if (rc != 0) {
        store_mdb_err(err, errlen, "begin flush transaction", rc);
        txn = NULL;
        goto out;
    }
    for (size_t i = 0; i < nents; i++) {
        flush_entry *e = &ents[i];
        uint8_t ikey[PG_INDEX_KEY_LEN];
        memcpy(ikey, e->key, PG_KEY_LEN);
        put_be64(ikey + PG_KEY_LEN, e->ver->lsn);
        uint8_t fv[STORE_IDXV_FILE_LEN];
        MDB_val key = {sizeof ikey, ikey}, val;
        if (e->in_file) {
            const store_df_block_info *b = store_df_writer_block(w, e->loc.block_no);
            store_idxv iv = {.kind = e->ver->kind,
                             .flags = e->ver->flags,
                             .file_id = file_id,
                             .block_off = b->off,
                             .block_len = b->len,
                             .off_in_block = e->loc.off_in_block,
                             .entry_len = e->loc.entry_len};
            store_idxv_encode_file(&iv, fv);
            val.mv_size = sizeof fv;
            val.mv_data = fv;
        } else {
            buf[0] = STORE_IDXV_INLINE;
            if (store_layer_read(f, e->ver, buf + 1, err, errlen) != 0)
                goto out;
            val.mv_size = 1 + e->ver->len;
            val.mv_data = buf;
        }
        MDB_val old = val;
        rc = mdb_put(txn, st->dbi_index, &key, &old, MDB_NOOVERWRITE);
        if (rc == MDB_KEYEXIST) {
            /* Replacing a value at the same (key, LSN): the old one is dead. */
            store_idxv oiv;
            const char *why;
            if (store_idxv_decode(old.mv_data, old.mv_size, &oiv, &why) == 0 &&
                oiv.tag == STORE_IDXV_FILE &&
                (rc = store_file_rec_sub(st, txn, oiv.file_id, oiv.entry_len, 1)) != 0) {
                store_mdb_err(err, errlen, "update file record", rc);
                goto out;
            }
            rc = mdb_put(txn, st->dbi_index, &key, &val, 0);
        }
        if (rc != 0) {
            store_mdb_err(err, errlen, "insert index entry", rc);
            goto out;
        }
    }
    if (w != NULL) {
        store_file_rec r = {.file_size = file_size,
                            .value_bytes = file_value_bytes,
                            .live_bytes = file_value_bytes,
                            .values = file_values,
                            .live_values = file_values};
        uint8_t fk[8], fr[STORE_FILE_REC_LEN];
        store_file_key(file_id, fk);
        store_file_rec_encode(&r, fr);
        MDB_val key = {8, fk}, val = {sizeof fr, fr};
        if ((rc = mdb_put(txn, st->dbi_files, &key, &val, 0)) != 0) {
            store_mdb_err(err, errlen, "insert file record", rc);
            goto out;
        }
    }
    lsn_t flsn = store_layer_freeze_lsn(f);
    lsn_t dcl = atomic_load(&st->disk_consistent_lsn);
    if (flsn < dcl)
        flsn = dcl;
    if ((rc = meta_put_u64(st, txn, "disk_consistent_lsn", flsn)) != 0 ||
        (rc = meta_put_u64(st, txn, "next_file_id", atomic_load(&st->next_file_id))) != 0) {
        store_mdb_err(err, errlen, "update store metadata", rc);
        goto out;
    }
    rc = mdb_txn_commit(txn);
    txn = NULL;
    if (rc != 0) {
        store_mdb_err(err, errlen, "commit flush", rc);
        goto out;
    }
    /* Durable: drop the frozen layer. */
    pthread_mutex_lock(&st->publish_mu);
    store_snap *s = store_snap_clone_current(st);
    while (s == NULL) {
        /* Out of memory here would strand a flushed layer; it is tiny, retry. */
        sched_yield();
        s = store_snap_clone_current(st);
    }
    /* Only this thread removes frozen layers, and always the oldest: were an
     * older one still unflushed, disk_consistent_lsn would claim its WAL. */
    STRATA_ASSERT(s->nfrozen > 0 && s->frozen[s->nfrozen - 1] == f);
    store_layer_unref(f);
    s->nfrozen--;
    atomic_store(&st->disk_consistent_lsn, flsn);
    if (store_snap_publish(st, s) != 0)
        log_warn("store: could not publish snapshot after flush; layer kept until next change");
    pthread_mutex_unlock(&st->publish_mu);
    published_file = false; /* now owned by the index */
    if (w != NULL) {
        atomic_fetch_add(&st->data_files, 1);
        atomic_fetch_add(&st->data_file_bytes, file_size);
    }
    atomic_fetch_add(&st->flushes, 1);
    ret = 0;
out:
    if (txn != NULL)
        mdb_txn_abort(txn);
    if (published_file) {
        pthread_mutex_lock(&st->publish_mu);
        store_snap *s = store_snap_clone_current(st);
        if (s != NULL) {
            store_snap_remove_file(s, file_id);
            store_snap_publish(st, s);
        }
        pthread_mutex_unlock(&st->publish_mu);
    }
    if (ret != 0 && w != NULL) {
        char path[4400];
        store_df_path(st->data_dir, file_id, path, sizeof path);
        unlink(path);
    }
    store_file_unref(file);
    store_df_writer_free(w);
    free(buf);
    free(ents);
    free(keys);
    return ret;
}

static store_layer *oldest_frozen(store *st)
{
    store_snap *s = store_snap_acquire(st);
    store_layer *l = NULL;
    if (s->nfrozen > 0) {
        l = s->frozen[s->nfrozen - 1];
        store_layer_ref(l);
    }
    store_snap_release(st, s);
    return l;
}

static void *bg_main(void *arg)
{
    pthread_setname_np(pthread_self(), "ps-flush");
    store *st = arg;
    uint64_t retry_at = 0, backoff = 100;
    pthread_mutex_lock(&st->bg_mu);
    while (!st->stop) {
        if (st->retry_now) {
            retry_at = 0;
            st->retry_now = false;
        }
        uint64_t now = now_ms();
        store_layer *f = now >= retry_at ? oldest_frozen(st) : NULL;
        if (f != NULL) {
            uint64_t attempt = ++st->flush_attempts;
            pthread_mutex_unlock(&st->bg_mu);
            char err[512];
            int rc = flush_layer(st, f, err, sizeof err);
            store_layer_unref(f);
            pthread_mutex_lock(&st->bg_mu);
            if (rc != 0) {
                log_error("store: flush failed (retrying in %llu ms): %s",
                          (unsigned long long)backoff, err);
                snprintf(st->flush_err, sizeof st->flush_err, "%s", err);
                st->flush_failed_attempt = attempt;
                retry_at = now_ms() + backoff;
                backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
            } else {
                backoff = 100;
            }
            pthread_cond_broadcast(&st->flush_cv);
            continue;
        }
        /* Age-based freeze, so ingested data becomes durable within
         * open_layer_max_age_ms even when ingest is slow.  Never wait for
         * write_mu here: its holder may be waiting for this thread to flush
         * (a full frozen queue); a busy writer is not idle anyway. */
        pthread_mutex_unlock(&st->bg_mu);
        if (pthread_mutex_trylock(&st->write_mu) != 0) {
            pthread_mutex_lock(&st->bg_mu);
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += 10 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&st->bg_cv, &st->bg_mu, &ts);
            continue;
        }
        store_layer *open = st->open;
        /* The layer may be newer than `now`: sample the clock again, here. */
        uint64_t born = store_layer_created_ms(open), at = now_ms();
        bool stale = at >= born && at - born >= st->o.open_layer_max_age_ms &&
                     (store_layer_values(open) > 0 ||
                      atomic_load(&st->last_record_lsn) > atomic_load(&st->disk_consistent_lsn));
        int frc = 1;
        if (stale) {
            char err[256];
            frc = freeze_locked(st, err, sizeof err);
            if (frc < 0)
                log_warn("store: age freeze failed: %s", err);
        }
        pthread_mutex_unlock(&st->write_mu);
        pthread_mutex_lock(&st->bg_mu);
        if (frc == 0)
            continue;
        /* Keep the snapshot word's pin count far from overflowing. */
        if ((atomic_load(&st->snap_word) >> 32) > (1u << 30)) {
            pthread_mutex_unlock(&st->bg_mu);
            pthread_mutex_lock(&st->publish_mu);
            store_snap *s = store_snap_clone_current(st);
            if (s != NULL)
                store_snap_publish(st, s);
            pthread_mutex_unlock(&st->publish_mu);
            pthread_mutex_lock(&st->bg_mu);
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&st->bg_cv, &st->bg_mu, &ts);
    }
    pthread_mutex_unlock(&st->bg_mu);
    return NULL;
}

int store_flush(store *st, char *err, size_t errlen)
{
    lsn_t target = atomic_load(&st->last_record_lsn);
    pthread_mutex_lock(&st->bg_mu);
    uint64_t since = st->flush_attempts;
    pthread_mutex_unlock(&st->bg_mu);
    pthread_mutex_lock(&st->write_mu);
    if (store_layer_values(st->open) > 0 || atomic_load(&st->disk_consistent_lsn) < target) {
        if (freeze_wait_locked(st, err, errlen) != 0) {
            pthread_mutex_unlock(&st->write_mu);
            return -1;
        }
    }
    pthread_mutex_unlock(&st->write_mu);
    pthread_mutex_lock(&st->bg_mu);
    st->retry_now = true;
    pthread_cond_broadcast(&st->bg_cv);
    int ret = 0;
    for (;;) {
        store_layer *f = oldest_frozen(st);
        bool pending = f != NULL;
        store_layer_unref(f);
        if (!pending && atomic_load(&st->disk_consistent_lsn) >= target)
            break;
        if (st->flush_failed_attempt > since) {
            snprintf(err, errlen, "flush failed: %s", st->flush_err);
            ret = -1;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&st->flush_cv, &st->bg_mu, &ts);
    }
    pthread_mutex_unlock(&st->bg_mu);
    return ret;
}

/* ---- reads ---- */

/* One source of versions for a key: a layer (newest first by position) or
 * the LMDB cursor. */
typedef struct vsrc {
    store_layer *layer;
    const store_layer_version *v;
    int pos; /* current candidate, -1 when exhausted */
} vsrc;

typedef struct vbuild {
    int n, cap;
    lsn_t *lsn;
    value_ref *val;
    size_t *poff;
    uint8_t *bytes;
    size_t blen, bcap;
    bool complete;
} vbuild;

static int vbuild_add(vbuild *b, lsn_t lsn, const value_ref *v)
{
    if (b->n == b->cap) {
        int cap = b->cap ? b->cap * 2 : 8;
        lsn_t *nl = realloc(b->lsn, (size_t)cap * sizeof *nl);
        if (nl == NULL)
            return -1;
        b->lsn = nl;
        value_ref *nv = realloc(b->val, (size_t)cap * sizeof *nv);
        if (nv == NULL)
            return -1;
        b->val = nv;
        size_t *np = realloc(b->poff, (size_t)cap * sizeof *np);
        if (np == NULL)
            return -1;
        b->poff = np;
        b->cap = cap;
    }
    if (b->blen + v->len > b->bcap) {
        size_t cap = b->bcap ? b->bcap : 16384;
        while (cap < b->blen + v->len)
            cap *= 2;
        uint8_t *nb = realloc(b->bytes, cap);
        if (nb == NULL)
            return -1;
        b->bytes = nb;
        b->bcap = cap;
    }
    if (v->len > 0)
        memcpy(b->bytes + b->blen, v->payload, v->len);
    b->lsn[b->n] = lsn;
    b->val[b->n] = *v;
    b->poff[b->n] = b->blen;
    b->blen += v->len;
    b->n++;
    return 0;
}

static void vbuild_free(vbuild *b)
{
    free(b->lsn);
    free(b->val);
    free(b->poff);
    free(b->bytes);
}

/* Positions c at the newest entry of key (encoded) at or below lsn: 1 found
 * (k/v filled), 0 none, -1 error. */
static int cursor_seek_le(MDB_cursor *c, const uint8_t key[PG_KEY_LEN], lsn_t lsn, MDB_val *k,
                          MDB_val *v)
{
    uint8_t probe[PG_INDEX_KEY_LEN];
    memcpy(probe, key, PG_KEY_LEN);
    put_be64(probe + PG_KEY_LEN, lsn);
    k->mv_size = sizeof probe;
    k->mv_data = probe;
    int rc = mdb_cursor_get(c, k, v, MDB_SET_RANGE);
    if (rc == 0 && k->mv_size == PG_INDEX_KEY_LEN && memcmp(k->mv_data, probe, sizeof probe) == 0)
        return 1;
    if (rc == 0)
        rc = mdb_cursor_get(c, k, v, MDB_PREV);
    else if (rc == MDB_NOTFOUND)
        rc = mdb_cursor_get(c, k, v, MDB_LAST);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc != 0)
        return -1;
    return k->mv_size == PG_INDEX_KEY_LEN && memcmp(k->mv_data, key, PG_KEY_LEN) == 0;
}

static int cursor_prev_same(MDB_cursor *c, const uint8_t key[PG_KEY_LEN], MDB_val *k, MDB_val *v)
{
    int rc = mdb_cursor_get(c, k, v, MDB_PREV);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc != 0)
        return -1;
    return k->mv_size == PG_INDEX_KEY_LEN && memcmp(k->mv_data, key, PG_KEY_LEN) == 0;
}

/*
 * Collects versions of key at or below lsn, newest first, into b: down to
 * the first complete value, or max values (then *too_long when more were
 * needed).  snap and txn are the caller's.
 */
static int collect(store *st, store_snap *snap, MDB_txn *txn, const uint8_t key[PG_KEY_LEN],
                   lsn_t lsn, int max, vbuild *b, bool *too_long, char *err, size_t errlen)
{
    vsrc src[STORE_MAX_FROZEN + 1];
    int nsrc = 0;
    store_layer *layers[STORE_MAX_FROZEN + 1];
    int nl = 0;
    layers[nl++] = snap->open;
    for (int i = 0; i < snap->nfrozen; i++)
        layers[nl++] = snap->frozen[i];
    for (int i = 0; i < nl; i++) {
        const store_layer_key *lk = store_layer_find(layers[i], key);
        if (lk == NULL)
            continue;
        uint32_t n;
        const store_layer_version *v = store_layer_versions(lk, &n);
        int pos = store_layer_find_at(v, n, lsn);
        if (pos >= 0)
            src[nsrc++] = (vsrc){.layer = layers[i], .v = v, .pos = pos};
    }
    MDB_cursor *cur = NULL;
    int rc = mdb_cursor_open(txn, st->dbi_index, &cur);
    if (rc != 0) {
        store_mdb_err(err, errlen, "open cursor", rc);
        return -1;
    }
    MDB_val mk, mv;
    int have_db = cursor_seek_le(cur, key, lsn, &mk, &mv);
    int ret = 0;
    *too_long = false;
    b->complete = false;
    for (;;) {
        if (have_db < 0) {
            snprintf(err, errlen, "index cursor failed");
            ret = -1;
            break;
        }
        /* The newest candidate; on equal LSNs the newer layer wins. */
        int best = -1;
        lsn_t best_lsn = 0;
        bool best_db = false;
        for (int i = 0; i < nsrc; i++) {
            if (src[i].pos < 0)
                continue;
            lsn_t l = src[i].v[src[i].pos].lsn;
            if (best < 0 || l > best_lsn) {
                best = i;
                best_lsn = l;
            }
        }
        lsn_t db_lsn = have_db ? get_be64((const uint8_t *)mk.mv_data + PG_KEY_LEN) : 0;
        if (have_db && (best < 0 || db_lsn > best_lsn)) {
            best_db = true;
            best_lsn = db_lsn;
        }
        if (best < 0 && !best_db)
            break;
        if (b->n == max) {
            *too_long = true;
            break;
        }
        value_ref val;
        const store_cache_block *hold = NULL;
        if (best_db) {
            store_idxv iv;
            const char *why;
            if (store_idxv_decode(mv.mv_data, mv.mv_size, &iv, &why) != 0) {
                snprintf(err, errlen, "corrupt index value: %s", why);
                ret = -1;
                break;
            }
            if (store_read_idxv(st, snap, &iv, mk.mv_data, &val, &hold, err, errlen) != 0) {
                ret = -1;
                break;
            }
        } else {
            const store_layer_version *ver = &src[best].v[src[best].pos];
            size_t used;
            const char *why;
            /* In place: the snapshot holds the layer; vbuild_add copies. */
            if (value_decode(store_layer_data(src[best].layer, ver), ver->len, &val, &used,
                             &why) != 0) {
                snprintf(err, errlen, "open layer value fails to decode: %s", why);
                ret = -1;
                break;
            }
        }
        int arc = vbuild_add(b, best_lsn, &val);
        bool complete = value_is_complete(&val);
        store_cache_release(st->cache, hold);
        if (arc != 0) {
            snprintf(err, errlen, "out of memory");
            ret = -1;
            break;
        }
        if (complete) {
            b->complete = true;
            break;
        }
        /* Step every source past best_lsn (drops shadowed duplicates). */
        for (int i = 0; i < nsrc; i++)
            if (src[i].pos >= 0 && src[i].v[src[i].pos].lsn == best_lsn)
                src[i].pos--;
        if (have_db && db_lsn == best_lsn)
            have_db = cursor_prev_same(cur, key, &mk, &mv);
    }
    mdb_cursor_close(cur);
    return ret;
}

static int read_begin(store *st, store_snap **snap, MDB_txn **txn, char *err, size_t errlen)
{
    /* Snapshot first, then the LMDB transaction: a flush that commits in
     * between leaves its frozen layer in our snapshot, so nothing is missed
     * (duplicates are resolved in favour of the layer). */
    *snap = store_snap_acquire(st);
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, txn);
    if (rc != 0) {
        store_snap_release(st, *snap);
        store_mdb_err(err, errlen, "begin read transaction", rc);
        return -1;
    }
    return 0;
}

static void read_end(store *st, store_snap *snap, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    store_snap_release(st, snap);
}

/* A version_list and the one buffer its payloads point into. */
typedef struct vlist {
    version_list pub; /* first: callers get &vlist->pub */
    uint8_t *bytes;
} vlist;

int store_get_versions(store *st, const pg_key *k, lsn_t lsn, int max_versions, version_list **out,
                       char *err, size_t errlen)
{
    uint8_t key[PG_KEY_LEN];
    pg_key_encode(k, key);
    if (max_versions < 1) {
        snprintf(err, errlen, "max_versions must be positive");
        return -1;
    }
    store_snap *snap;
    MDB_txn *txn;
    if (read_begin(st, &snap, &txn, err, errlen) != 0)
        return -1;
    vbuild b = {0};
    bool too_long;
    int rc = collect(st, snap, txn, key, lsn, max_versions, &b, &too_long, err, errlen);
    read_end(st, snap, txn);
    if (rc == 0 && too_long) {
        char kb[96];
        snprintf(err, errlen, "chain too long: %s has more than %d versions to replay",
                 pg_key_format(k, kb, sizeof kb), max_versions);
        rc = -1;
    }
    if (rc != 0) {
        vbuild_free(&b);
        return -1;
    }
    vlist *vl = calloc(1, sizeof *vl);
    if (vl == NULL) {
        vbuild_free(&b);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    vl->pub.n = b.n;
    vl->pub.lsn = b.lsn;
    vl->pub.value = b.val;
    vl->pub.complete = b.complete;
    vl->bytes = b.bytes;
    for (int i = 0; i < b.n; i++)
        vl->pub.value[i].payload = b.val[i].len ? b.bytes + b.poff[i] : NULL;
    free(b.poff);
    *out = &vl->pub;
    return 0;
}

void version_list_free(version_list *pub)
{
    if (pub == NULL)
        return;
    vlist *vl = (vlist *)pub;
    free(vl->bytes);
    free(vl->pub.lsn);
    free(vl->pub.value);
    free(vl);
}

int store_get_latest(store *st, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found_lsn,
                     char *err, size_t errlen)
{
    uint8_t key[PG_KEY_LEN];
    pg_key_encode(k, key);
    store_snap *snap;
    MDB_txn *txn;
    if (read_begin(st, &snap, &txn, err, errlen) != 0)
        return -1;
    vbuild b = {0};
    bool too_long;
    int rc = collect(st, snap, txn, key, lsn, 1, &b, &too_long, err, errlen);
    read_end(st, snap, txn);
    if (rc != 0) {
        vbuild_free(&b);
        return -1;
    }
    if (b.n == 0) {
        vbuild_free(&b);
        return 0;
    }
    *out = b.val[0];
    uint8_t *p = NULL;
    if (b.val[0].len > 0) {
        p = malloc(b.val[0].len);
        if (p == NULL) {
            vbuild_free(&b);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        memcpy(p, b.bytes, b.val[0].len);
    }
    out->payload = p;
    if (found_lsn != NULL)
        *found_lsn = b.lsn[0];
    vbuild_free(&b);
    return 1;
}

/* Increments an 18-byte key as a big-endian number: the smallest key after
 * every index key that starts with key.  False on overflow. */
static bool key_successor(uint8_t key[PG_KEY_LEN])
{
    for (int i = PG_KEY_LEN - 1; i >= 0; i--) {
        if (++key[i] != 0)
            return true;
    }
    return false;
}

/* Per-layer cursor over sorted keys for a scan. */
typedef struct scan_layer {
    store_layer *layer;
    const store_layer_key **keys;
    size_t n, pos;
} scan_layer;

int store_scan(store *st, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
               void *arg, char *err, size_t errlen)
{
    uint8_t kfrom[PG_KEY_LEN], kto[PG_KEY_LEN];
    pg_key_encode(from, kfrom);
    pg_key_encode(to, kto);
    if (memcmp(kfrom, kto, PG_KEY_LEN) >= 0)
        return 0;
    store_snap *snap;
    MDB_txn *txn;
    if (read_begin(st, &snap, &txn, err, errlen) != 0)
        return -1;
    scan_layer sl[STORE_MAX_FROZEN + 1];
    int nl = 0;
    int ret = 0;
    MDB_cursor *cur = NULL;
    uint8_t *tmp = NULL;
    size_t tmp_cap = 0;
    store_layer *layers[STORE_MAX_FROZEN + 1];
    int nlayers = 0;
    layers[nlayers++] = snap->open;
    for (int i = 0; i < snap->nfrozen; i++)
        layers[nlayers++] = snap->frozen[i];
    for (int i = 0; i < nlayers; i++) {
        sl[nl] = (scan_layer){.layer = layers[i]};
        if (store_layer_sorted_keys(layers[i], kfrom, kto, &sl[nl].keys, &sl[nl].n) != 0) {
            snprintf(err, errlen, "out of memory");
            ret = -1;
            goto out;
        }
        nl++;
    }
    int rc = mdb_cursor_open(txn, st->dbi_index, &cur);
    if (rc != 0) {
        store_mdb_err(err, errlen, "open cursor", rc);
        ret = -1;
        goto out;
    }
    /* db_key: the next index key >= position whose key is < kto. */
    uint8_t pos[PG_KEY_LEN];
    memcpy(pos, kfrom, PG_KEY_LEN);
    bool db_more = true;
    uint8_t db_key[PG_KEY_LEN];
    for (;;) {
        /* Advance the LMDB side to its next key at or after pos. */
        if (db_more) {
            uint8_t probe[PG_INDEX_KEY_LEN] = {0};
            memcpy(probe, pos, PG_KEY_LEN);
            MDB_val k = {sizeof probe, probe}, v;
            rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
            if (rc == MDB_NOTFOUND || (rc == 0 && memcmp(k.mv_data, kto, PG_KEY_LEN) >= 0)) {
                db_more = false;
            } else if (rc != 0) {
                store_mdb_err(err, errlen, "scan index", rc);
                ret = -1;
                goto out;
            } else {
                memcpy(db_key, k.mv_data, PG_KEY_LEN);
            }
        }
        /* The smallest key among all sources. */
        const uint8_t *next = db_more ? db_key : NULL;
        for (int i = 0; i < nl; i++) {
            while (sl[i].pos < sl[i].n && memcmp(sl[i].keys[sl[i].pos]->key, pos, PG_KEY_LEN) < 0)
                sl[i].pos++;
            if (sl[i].pos < sl[i].n &&
                (next == NULL || memcmp(sl[i].keys[sl[i].pos]->key, next, PG_KEY_LEN) < 0))
                next = sl[i].keys[sl[i].pos]->key;
        }
        if (next == NULL)
            break;
        uint8_t key[PG_KEY_LEN];
        memcpy(key, next, PG_KEY_LEN);
        /* The newest version of key at or below lsn: layers in order, then LMDB. */
        lsn_t best_lsn = 0;
        int best = -1;
        const store_layer_version *best_ver = NULL;
        for (int i = 0; i < nl; i++) {
            if (sl[i].pos >= sl[i].n || memcmp(sl[i].keys[sl[i].pos]->key, key, PG_KEY_LEN) != 0)
                continue;
            uint32_t n;
            const store_layer_version *v = store_layer_versions(sl[i].keys[sl[i].pos], &n);
            int p = store_layer_find_at(v, n, lsn);
            if (p >= 0 && (best < 0 || v[p].lsn > best_lsn)) {
                best = i;
                best_lsn = v[p].lsn;
                best_ver = &v[p];
            }
        }
        MDB_val mk, mv;
        int have_db = 0;
        if (db_more && memcmp(db_key, key, PG_KEY_LEN) == 0) {
            have_db = cursor_seek_le(cur, key, lsn, &mk, &mv);
            if (have_db < 0) {
                snprintf(err, errlen, "scan index: cursor failed");
                ret = -1;
                goto out;
            }
        }
        value_ref val;
        const store_cache_block *hold = NULL;
        bool found = false;
        lsn_t found_lsn = 0;
        if (have_db &&
            (best < 0 || get_be64((const uint8_t *)mk.mv_data + PG_KEY_LEN) > best_lsn)) {
            store_idxv iv;
            const char *why;
            if (store_idxv_decode(mv.mv_data, mv.mv_size, &iv, &why) != 0) {
                snprintf(err, errlen, "corrupt index value: %s", why);
                ret = -1;
                goto out;
            }
            if (store_read_idxv(st, snap, &iv, mk.mv_data, &val, &hold, err, errlen) != 0) {
                ret = -1;
                goto out;
            }
            found = true;
            found_lsn = get_be64((const uint8_t *)mk.mv_data + PG_KEY_LEN);
        } else if (best >= 0) {
            if (best_ver->len > tmp_cap) {
                uint8_t *nt = realloc(tmp, best_ver->len);
                if (nt == NULL) {
                    snprintf(err, errlen, "out of memory");
                    ret = -1;
                    goto out;
                }
                tmp = nt;
                tmp_cap = best_ver->len;
            }
            size_t used;
            const char *why;
            if (store_layer_read(sl[best].layer, best_ver, tmp, err, errlen) != 0) {
                ret = -1;
                goto out;
            }
            if (value_decode(tmp, best_ver->len, &val, &used, &why) != 0) {
                snprintf(err, errlen, "open layer value fails to decode: %s", why);
                ret = -1;
                goto out;
            }
            found = true;
            found_lsn = best_lsn;
        }
        if (found) {
            pg_key pk;
            pg_key_decode(key, &pk);
            int stop = fn(&pk, found_lsn, &val, arg);
            store_cache_release(st->cache, hold);
            if (stop)
                break;
        }
        memcpy(pos, key, PG_KEY_LEN);
        if (!key_successor(pos))
            break;
        if (memcmp(pos, kto, PG_KEY_LEN) >= 0)
            break;
    }
out:
    if (cur != NULL)
        mdb_cursor_close(cur);
    for (int i = 0; i < nl; i++)
        free(sl[i].keys);
    free(tmp);
    read_end(st, snap, txn);
    return ret;
}

/* ---- stats ---- */

void store_get_stats(const store *cst, store_stats *out)
{
    store *st = (store *)cst;
    memset(out, 0, sizeof *out);
    out->values_put = atomic_load(&st->values_put);
    out->bytes_put = atomic_load(&st->bytes_put);
    out->flushes = atomic_load(&st->flushes);
    out->data_files = atomic_load(&st->data_files);
    out->data_file_bytes = atomic_load(&st->data_file_bytes);
    out->gc_removed = atomic_load(&st->gc_removed);
    store_snap *s = store_snap_acquire(st);
    out->open_layer_bytes = store_layer_bytes(s->open);
    for (int i = 0; i < s->nfrozen; i++)
        out->open_layer_bytes += store_layer_bytes(s->frozen[i]);
    store_snap_release(st, s);
    MDB_txn *txn;
    if (mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn) == 0) {
        MDB_stat ms;
        if (mdb_stat(txn, st->dbi_index, &ms) == 0)
            out->index_bytes = (uint64_t)ms.ms_psize *
                               (ms.ms_branch_pages + ms.ms_leaf_pages + ms.ms_overflow_pages);
        mdb_txn_abort(txn);
    }
}
