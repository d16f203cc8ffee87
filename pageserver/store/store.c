/*
 * store.c: one timeline's page-version store (pageserver/store/store.h,
 * docs/design.md §6.3).
 *
 * For: open and close (restart from disk_consistent_lsn), the writer side
 * (puts into the open layer, freezing it), and the background thread that
 * freezes old layers and flushes frozen ones.  The other parts: the open and
 * frozen layers (store_layer.c), data files (store_datafile.c), the block
 * cache (store_cache.c), snapshots (store_snap.c), LMDB records
 * (store_records.c), the flush of a layer (store_flush.c), the data-file
 * commit (store_commit.c), reads (store_read.c).
 * Not for: GC (store_gc.c), decoding WAL, applying deltas.
 *
 * Layout of the store directory:
 *   store.lock              held while open (durable_lock_dir)
 *   index/                  the LMDB environment: DBs "index", "files", "meta"
 *   data/<16 hex>.dat       immutable data files
 *   layer-<n>.open          open-layer backing files (discarded on restart)
 *
 * Flush order (crash-safe at every step; store_commit_data_file): write +
 * fsync the data file under a temporary name, rename, fsync the directory;
 * publish it to readers; one LMDB write transaction inserts every index
 * entry, the file record and the new disk_consistent_lsn; only then is the
 * frozen layer dropped.  A crash before the commit leaves an unreferenced
 * file, which the next open deletes.
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

#include "base/durable.h"
#include "base/log.h"
#include "base/strata_assert.h"
#include "pageserver/store/store_priv.h"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void store_options_default(store_options *o)
{
    o->open_layer_max_bytes = 64u * 1024 * 1024;
    o->open_layer_max_age_ms = 10000;
    o->inline_max_bytes = 256;
    o->lmdb_map_size = (size_t)64 * 1024 * 1024 * 1024;
    o->zstd_level = 1;
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
    if ((rc = store_meta_get_u64(st, txn, "disk_consistent_lsn", &dcl)) != 0 ||
        (rc = store_meta_get_u64(st, txn, "next_file_id", &next_id)) != 0) {
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
        store_snap_free(st, s);
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
    if (store_migrate_inline(st, err, errlen) != 0)
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
            store_snap_free(st, cur);
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
            int rc = store_flush_layer(st, f, err, sizeof err);
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
