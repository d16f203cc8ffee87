/*
 * store_gc.c: garbage collection of the store (store_gc in store.h,
 * docs/design.md §6.7).
 *
 * For: two passes.  (1) Walk the LMDB index key by key and delete every
 * version older than the newest complete value at or below the horizon, in
 * write transactions of at most STORE_GC_BATCH deletes so the flush (the only
 * other writer) and readers (MVCC snapshots) never wait long; each
 * transaction also lowers the live-byte counts of the data files it touched.
 * (2) Rewrite data files whose live bytes fell under
 * STORE_GC_REWRITE_FRACTION: copy live entries to a new file and repoint the
 * index to it in one transaction (store_commit_data_file, like a flush), then
 * unlink the old file.  Files with nothing live are just dropped.
 *
 * Rebuilding from data files (store_rebuild.c) reads every entry of every
 * file, dead copies included, and lets the newest file win.  Two rules keep
 * that right.  A rewrite copies an entry out of file F only when the index
 * names F as the place of that (key, LSN): a dead copy moved into a newer
 * file would beat the live one.  And a tombstone that is the newest version
 * at or below the horizon stays (only what is below it goes): were it
 * deleted and its file rewritten, older versions whose dead copies remain in
 * other files would come back from a rebuild as the key's newest value.
 * What a rebuild does bring back is only versions below a kept complete
 * value, which no reader at or above the horizon reaches.
 * Not for: the open and frozen layers (they are only flushed), or choosing
 * the horizon (the caller's PITR policy).
 *
 * Readers of an old LMDB snapshot may still name the old file: they hold a
 * store snapshot taken before their transaction, which still lists it, and
 * the file's descriptor stays open until the last such snapshot is gone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/byteorder.h"
#include "base/durable.h"
#include "base/log.h"
#include "base/strata_assert.h"
#include "pageserver/store/store.h"
#include "pageserver/store/store_priv.h"

typedef struct gc_ent {
    uint8_t ikey[PG_INDEX_KEY_LEN];
    bool complete;
    bool tombstone;
    bool in_file;
    uint64_t file_id;
    uint32_t entry_len;
} gc_ent;

typedef struct file_delta {
    uint64_t id, bytes, count;
} file_delta;

#define MAX_DELTAS 256

static bool key_successor(uint8_t key[PG_KEY_LEN])
{
    for (int i = PG_KEY_LEN - 1; i >= 0; i--)
        if (++key[i] != 0)
            return true;
    return false;
}

/* From the version at the cursor (k, v), reads key's versions at or below
 * horizon into (*ents)[0..*n), oldest first, growing *ents as needed; the
 * cursor ends past them with *rc its last LMDB result.  0, or -1 with err
 * (a corrupt index value, out of memory). */
static int gc_read_versions(MDB_cursor *cur, const uint8_t key[PG_KEY_LEN], lsn_t horizon,
                            MDB_val *k, MDB_val *v, gc_ent **ents, size_t *ents_cap, size_t *n,
                            int *rc, char *err, size_t errlen)
{
    *rc = 0;
    while (*rc == 0 && k->mv_size == PG_INDEX_KEY_LEN && memcmp(k->mv_data, key, PG_KEY_LEN) == 0 &&
           get_be64((const uint8_t *)k->mv_data + PG_KEY_LEN) <= horizon) {
        store_idxv iv;
        const char *why;
        if (store_idxv_decode(v->mv_data, v->mv_size, &iv, &why) != 0) {
            snprintf(err, errlen, "corrupt index value during GC: %s", why);
            return -1;
        }
        if (*n == *ents_cap) {
            size_t cap = *ents_cap ? *ents_cap * 2 : 256;
            gc_ent *ne = realloc(*ents, cap * sizeof *ne);
            if (ne == NULL) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            *ents = ne;
            *ents_cap = cap;
        }
        gc_ent *e = &(*ents)[(*n)++];
        memcpy(e->ikey, k->mv_data, PG_INDEX_KEY_LEN);
        value_ref probe_v = {.kind = iv.kind, .flags = iv.flags};
        e->complete = value_is_complete(&probe_v);
        e->tombstone = iv.kind == VAL_TOMBSTONE;
        e->in_file = store_idxv_in_file(&iv);
        e->file_id = iv.file_id;
        e->entry_len = iv.entry_len;
        *rc = mdb_cursor_get(cur, k, v, MDB_NEXT);
    }
    return 0;
}

/* Deletes from the index every version of ents[0..n) (one key's, oldest
 * first) below its newest complete one, counting them in *deletes and the
 * data-file bytes they free in deltas[0..*ndeltas).  0 or an LMDB error. */
static int gc_drop_dead(store *st, MDB_txn *txn, const gc_ent *ents, size_t n,
                        file_delta deltas[MAX_DELTAS], int *ndeltas, long *deletes)
{
    /* Everything below the newest complete version goes (a tombstone
     * too is complete, and stays: see the head comment). */
    size_t cut = 0;
    for (size_t i = n; i > 0; i--) {
        if (ents[i - 1].complete) {
            cut = i - 1;
            break;
        }
    }
    /* What stays must rebuild the key at the horizon: it starts at a
     * complete version. */
    STRATA_ASSERT(cut == 0 || (cut < n && ents[cut].complete));
    for (size_t i = 0; i < cut; i++) {
        const gc_ent *e = &ents[i];
        MDB_val dk = {PG_INDEX_KEY_LEN, (void *)e->ikey};
        int rc = mdb_del(txn, st->dbi_index, &dk, NULL);
        if (rc != 0)
            return rc;
        (*deletes)++;
        if (!e->in_file)
            continue;
        int d = 0;
        while (d < *ndeltas && deltas[d].id != e->file_id)
            d++;
        if (d == *ndeltas) {
            /* Room is left: the batch stops at half. */
            STRATA_ASSERT(*ndeltas < MAX_DELTAS);
            deltas[(*ndeltas)++] = (file_delta){.id = e->file_id};
        }
        deltas[d].bytes += e->entry_len;
        deltas[d].count++;
    }
    return 0;
}

/* Pass 1, one transaction: from *pos, removes dead versions until the batch
 * is full.  Sets *done at the end of the index.  Returns deletes or -1. */
static long gc_batch(store *st, lsn_t horizon, uint8_t pos[PG_KEY_LEN], bool *done, gc_ent **ents,
                     size_t *ents_cap, char *err, size_t errlen)
{
    MDB_txn *txn;
    MDB_cursor *cur;
    int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
    if (rc != 0) {
        store_mdb_err(err, errlen, "begin GC transaction", rc);
        return -1;
    }
    if ((rc = mdb_cursor_open(txn, st->dbi_index, &cur)) != 0) {
        mdb_txn_abort(txn);
        store_mdb_err(err, errlen, "open GC cursor", rc);
        return -1;
    }
    file_delta deltas[MAX_DELTAS];
    int ndeltas = 0;
    long deletes = 0;
    int keys_seen = 0;
    while (deletes < STORE_GC_BATCH && keys_seen < 20 * STORE_GC_BATCH &&
           ndeltas < MAX_DELTAS / 2) {
        uint8_t probe[PG_INDEX_KEY_LEN] = {0};
        memcpy(probe, pos, PG_KEY_LEN);
        MDB_val k = {sizeof probe, probe}, v;
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        if (rc == MDB_NOTFOUND) {
            *done = true;
            break;
        }
        if (rc != 0 || k.mv_size != PG_INDEX_KEY_LEN)
            goto fail;
        uint8_t key[PG_KEY_LEN];
        memcpy(key, k.mv_data, PG_KEY_LEN);
        keys_seen++;
        /* This key's versions at or below the horizon, oldest first. */
        size_t n = 0;
        if (gc_read_versions(cur, key, horizon, &k, &v, ents, ents_cap, &n, &rc, err, errlen) !=
            0) {
            mdb_cursor_close(cur);
            mdb_txn_abort(txn);
            return -1;
        }
        if (rc != 0 && rc != MDB_NOTFOUND)
            goto fail;
        if ((rc = gc_drop_dead(st, txn, *ents, n, deltas, &ndeltas, &deletes)) != 0)
            goto fail;
        if (!key_successor(key)) {
            *done = true;
            break;
        }
        memcpy(pos, key, PG_KEY_LEN);
    }
    mdb_cursor_close(cur);
    cur = NULL;
    for (int d = 0; d < ndeltas; d++) {
        if ((rc = store_file_rec_sub(st, txn, deltas[d].id, deltas[d].bytes, deltas[d].count)) != 0)
            goto fail;
    }
    if ((rc = mdb_txn_commit(txn)) != 0) {
        store_mdb_err(err, errlen, "commit GC transaction", rc);
        return -1;
    }
    return deletes;
fail:
    if (cur != NULL)
        mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    store_mdb_err(err, errlen, "GC index walk", rc);
    return -1;
}

/* Publishes a snapshot with file added (add != NULL) and/or file drop_id
 * removed (drop_id != 0).  publish_mu is taken here. */
static int gc_publish(store *st, store_file *add, uint64_t drop_id)
{
    pthread_mutex_lock(&st->publish_mu);
    store_snap *s = store_snap_clone_current(st);
    int rc = s ? 0 : -1;
    if (rc == 0 && add != NULL)
        rc = store_snap_add_file(s, add);
    if (rc == 0 && drop_id != 0)
        store_snap_remove_file(s, drop_id);
    if (rc == 0)
        rc = store_snap_publish(st, s);
    else if (s != NULL) {
        atomic_store(&s->refs, 1);
        store_snap_release(st, s);
    }
    pthread_mutex_unlock(&st->publish_mu);
    return rc;
}

/* Unlinks data file id, which the index no longer lists.  A failure is only
 * logged: an unlisted data file is a leftover that store_open deletes. */
static void remove_unindexed_file(store *st, uint64_t id)
{
    char path[4400];
    store_df_path(st->data_dir, id, path, sizeof path);
    int rc = durable_unlink(path);
    if (rc != 0)
        log_warn("store: GC could not remove %s (it goes at the next open): %s", path,
                 strerror(-rc));
}

/* Drops a file with nothing live from the index and the disk. */
static int gc_drop_file(store *st, uint64_t id, uint64_t size, char *err, size_t errlen)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
    if (rc != 0) {
        store_mdb_err(err, errlen, "begin GC transaction", rc);
        return -1;
    }
    uint8_t fk[8];
    store_file_key(id, fk);
    MDB_val key = {8, fk};
    rc = mdb_del(txn, st->dbi_files, &key, NULL);
    if (rc == 0)
        rc = mdb_txn_commit(txn);
    else
        mdb_txn_abort(txn);
    if (rc != 0) {
        store_mdb_err(err, errlen, "drop file record", rc);
        return -1;
    }
    if (gc_publish(st, NULL, id) != 0)
        log_warn("store: GC could not publish a snapshot without file %016llx",
                 (unsigned long long)id);
    remove_unindexed_file(st, id);
    atomic_fetch_sub(&st->data_files, 1);
    atomic_fetch_sub(&st->data_file_bytes, size);
    return 0;
}

typedef struct moved {
    uint8_t ikey[PG_INDEX_KEY_LEN];
    uint8_t kind, flags;
    uint64_t old_block_off;
    uint32_t old_off_in_block;
    store_df_loc loc;
} moved;

/* One rewrite of data file id: the entries copied out of it. */
typedef struct gc_rewrite {
    uint64_t id;
    store_file *f;
    moved *mv;
    size_t nmv, cap;
    uint8_t *blk; /* the block being read, as on disk */
    uint8_t *raw; /* ... and decompressed */
    uint8_t inl[STORE_IDXV_INLINE_FILE_HDR + VALUE_HEADER_LEN + 4096]; /* an inline index value */
} gc_rewrite;

/* Reads and decodes the block at off: rw->raw holds its *rl raw bytes, *blen
 * is its length on disk.  0 or -1 with err. */
static int gc_read_block(gc_rewrite *rw, uint64_t off, uint32_t *rl, size_t *blen, char *err,
                         size_t errlen)
{
    const char *why = NULL;
    uint8_t bh[STORE_DF_BLOCK_HEADER_LEN];
    uint32_t raw_len, comp_len;
    if (durable_pread_all(rw->f->fd, bh, sizeof bh, off) != (ssize_t)sizeof bh ||
        store_df_block_header_decode(bh, sizeof bh, &raw_len, &comp_len, &why) != 0) {
        snprintf(err, errlen, "data file %016llx at %llu: bad block header",
                 (unsigned long long)rw->id, (unsigned long long)off);
        return -1;
    }
    *blen = STORE_DF_BLOCK_HEADER_LEN + (size_t)comp_len;
    uint8_t *nb = realloc(rw->blk, *blen);
    if (nb == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    rw->blk = nb;
    if (durable_pread_all(rw->f->fd, rw->blk, *blen, off) != (ssize_t)*blen) {
        snprintf(err, errlen, "data file %016llx: short read", (unsigned long long)rw->id);
        return -1;
    }
    free(rw->raw);
    rw->raw = NULL;
    if (store_df_block_decode(rw->blk, *blen, &rw->raw, rl, &why) != 0) {
        snprintf(err, errlen, "data file %016llx at %llu: %s", (unsigned long long)rw->id,
                 (unsigned long long)off, why);
        return -1;
    }
    return 0;
}

/* Copies the live entry ikey (index value iv, used bytes at eoff of the block
 * at off) to nf and remembers where it came from.  0 or -1 with err. */
static int gc_copy_entry(store *st, gc_rewrite *rw, store_new_file *nf, const uint8_t *ikey,
                         const store_idxv *iv, uint64_t off, size_t eoff, size_t used, char *err,
                         size_t errlen)
{
    if (rw->nmv == rw->cap) {
        size_t cap = rw->cap ? rw->cap * 2 : 1024;
        moved *nm = realloc(rw->mv, cap * sizeof *nm);
        if (nm == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        rw->mv = nm;
        rw->cap = cap;
    }
    moved *m = &rw->mv[rw->nmv++];
    memcpy(m->ikey, ikey, PG_INDEX_KEY_LEN);
    m->kind = iv->kind;
    m->flags = iv->flags;
    m->old_block_off = off;
    m->old_off_in_block = (uint32_t)eoff;
    return store_new_file_add(st, nf, ikey, ikey + PG_INDEX_KEY_LEN, used - PG_INDEX_KEY_LEN,
                              &m->loc, err, errlen);
}

/* Whether the index value iv names the entry at eoff of the block at off of
 * file id as the live copy of its (key, LSN). */
static bool names_entry(const store_idxv *iv, uint64_t id, uint64_t off, size_t eoff)
{
    if (iv->tag == STORE_IDXV_FILE)
        return iv->file_id == id && iv->block_off == off && iv->off_in_block == eoff;
    /* A file holds one entry per index key, so the file id is enough. */
    return iv->tag == STORE_IDXV_INLINE_FILE && iv->file_id == id;
}

/* Copies the entries of the raw block at off (rl bytes in rw->raw) that the
 * index, as rtxn sees it, names as live.  Never a dead one: it would land in
 * a file newer than the live copy's, which a rebuild lets win.  0 or -1 with
 * err. */
static int gc_copy_block(store *st, gc_rewrite *rw, store_new_file *nf, MDB_txn *rtxn, uint64_t off,
                         uint32_t rl, char *err, size_t errlen)
{
    size_t eoff = 0;
    while (eoff < rl) {
        const uint8_t *ikey;
        value_ref v;
        size_t used;
        const char *why;
        if (store_df_entry_decode(rw->raw, rl, eoff, &ikey, &v, &used, &why) != 0) {
            snprintf(err, errlen, "data file %016llx at %llu: %s", (unsigned long long)rw->id,
                     (unsigned long long)off, why);
            return -1;
        }
        MDB_val k = {PG_INDEX_KEY_LEN, (void *)ikey}, val;
        store_idxv iv;
        int rc = mdb_get(rtxn, st->dbi_index, &k, &val);
        bool live = rc == 0 && store_idxv_decode(val.mv_data, val.mv_size, &iv, &why) == 0 &&
                    names_entry(&iv, rw->id, off, eoff);
        if (live && gc_copy_entry(st, rw, nf, ikey, &iv, off, eoff, used, err, errlen) != 0)
            return -1;
        eoff += used;
    }
    return 0;
}

/* Step 1: every live entry of the old file into nf.  0 or -1 with err. */
static int gc_copy_live(store *st, gc_rewrite *rw, store_new_file *nf, char *err, size_t errlen)
{
    const char *why = NULL;
    uint8_t hdr[STORE_DF_HEADER_LEN];
    uint64_t hdr_id;
    if (durable_pread_all(rw->f->fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr ||
        store_df_header_decode(hdr, sizeof hdr, &hdr_id, &why) != 0 || hdr_id != rw->id) {
        snprintf(err, errlen, "data file %016llx: bad header%s%s", (unsigned long long)rw->id,
                 why ? ": " : "", why ? why : "");
        return -1;
    }
    MDB_txn *rtxn;
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &rtxn);
    if (rc != 0) {
        store_mdb_err(err, errlen, "begin GC read transaction", rc);
        return -1;
    }
    int ret = 0;
    uint64_t off = STORE_DF_HEADER_LEN;
    while (ret == 0 && off < rw->f->size) {
        uint32_t rl = 0;
        size_t blen = 0;
        ret = gc_read_block(rw, off, &rl, &blen, err, errlen);
        if (ret == 0)
            ret = gc_copy_block(st, rw, nf, rtxn, off, rl, err, errlen);
        off += blen;
    }
    mdb_txn_abort(rtxn);
    return ret;
}

/* Step 2 (a store_index_fn; arg is the gc_rewrite): every moved entry that
 * still points where it was copied from now points into nf; the old file's
 * record goes. */
static int gc_repoint(store *st, MDB_txn *txn, store_new_file *nf, void *arg, char *err,
                      size_t errlen)
{
    gc_rewrite *rw = arg;
    int rc = 0;
    for (size_t i = 0; i < rw->nmv; i++) {
        moved *m = &rw->mv[i];
        MDB_val k = {PG_INDEX_KEY_LEN, m->ikey}, val;
        store_idxv iv;
        const char *why;
        /* A flush may have replaced the entry since we read it: move only
         * entries that still point where we copied from. */
        rc = mdb_get(txn, st->dbi_index, &k, &val);
        if (rc == MDB_NOTFOUND)
            continue;
        if (rc != 0)
            goto fail;
        if (store_idxv_decode(val.mv_data, val.mv_size, &iv, &why) != 0 ||
            !names_entry(&iv, rw->id, m->old_block_off, m->old_off_in_block))
            continue;
        MDB_val nv;
        uint8_t enc[STORE_IDXV_FILE_LEN];
        if (store_idxv_is_inline(&iv)) {
            /* The same value, now naming the new file's copy. */
            STRATA_ASSERT(iv.value_len + PG_INDEX_KEY_LEN == m->loc.entry_len);
            if (iv.value_len > sizeof rw->inl - STORE_IDXV_INLINE_FILE_HDR) {
                snprintf(err, errlen, "GC rewrite: inline index value of %u bytes is too long",
                         iv.value_len);
                return -1;
            }
            uint8_t *buf = rw->inl;
            store_new_file_inline_hdr(nf, &m->loc, buf);
            memcpy(buf + STORE_IDXV_INLINE_FILE_HDR, iv.value, iv.value_len);
            nv = (MDB_val){STORE_IDXV_INLINE_FILE_HDR + iv.value_len, buf};
        } else {
            store_new_file_idxv(nf, m->kind, m->flags, &m->loc, enc);
            nv = (MDB_val){sizeof enc, enc};
        }
        if ((rc = mdb_put(txn, st->dbi_index, &k, &nv, 0)) != 0)
            goto fail;
    }
    uint8_t fk[8];
    store_file_key(rw->id, fk);
    MDB_val key = {8, fk};
    rc = mdb_del(txn, st->dbi_files, &key, NULL);
    if (rc == 0 || rc == MDB_NOTFOUND)
        return 0;
fail:
    store_mdb_err(err, errlen, "GC rewrite", rc);
    return -1;
}

/* Copies file id's live entries into a new file and repoints the index; the
 * old file then leaves the snapshot and the disk. */
static int gc_rewrite_file(store *st, uint64_t id, uint64_t old_size, char *err, size_t errlen)
{
    gc_rewrite rw = {.id = id};
    store_snap *snap = store_snap_acquire(st);
    rw.f = store_snap_find_file(snap, id);
    if (rw.f != NULL)
        atomic_fetch_add(&rw.f->refs, 1);
    store_snap_release(st, snap);
    if (rw.f == NULL) {
        snprintf(err, errlen, "data file %016llx is not open", (unsigned long long)id);
        return -1;
    }
    store_new_file nf = {0};
    int ret = -1;
    if (gc_copy_live(st, &rw, &nf, err, errlen) == 0 &&
        store_commit_data_file(st, &nf, "GC rewrite", gc_repoint, &rw, err, errlen) == 0) {
        if (gc_publish(st, NULL, id) != 0)
            log_warn("store: GC could not publish a snapshot without file %016llx",
                     (unsigned long long)id);
        remove_unindexed_file(st, id);
        atomic_fetch_sub(&st->data_files, 1);
        atomic_fetch_sub(&st->data_file_bytes, old_size);
        ret = 0;
    }
    store_new_file_release(st, &nf);
    store_file_unref(rw.f);
    free(rw.mv);
    free(rw.blk);
    free(rw.raw);
    return ret;
}

long store_gc(store *st, lsn_t horizon, char *err, size_t errlen)
{
    pthread_mutex_lock(&st->gc_mu);
    long removed = 0;
    gc_ent *ents = NULL;
    size_t ents_cap = 0;
    uint8_t pos[PG_KEY_LEN] = {0};
    bool done = false;
    while (!done) {
        long n = gc_batch(st, horizon, pos, &done, &ents, &ents_cap, err, errlen);
        if (n < 0) {
            free(ents);
            pthread_mutex_unlock(&st->gc_mu);
            return -1;
        }
        removed += n;
        atomic_fetch_add(&st->gc_removed, (uint64_t)n);
    }
    free(ents);

    /* Pass 2: files worth rewriting. */
    typedef struct cand {
        uint64_t id, size, live_values;
    } cand;
    cand *cands = NULL;
    size_t ncand = 0, ccap = 0;
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0) {
        store_mdb_err(err, errlen, "begin GC read transaction", rc);
        pthread_mutex_unlock(&st->gc_mu);
        return -1;
    }
    MDB_cursor *cur;
    mdb_cursor_open(txn, st->dbi_files, &cur);
    MDB_val k, v;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        store_file_rec r;
        if (k.mv_size != 8 || store_file_rec_decode(v.mv_data, v.mv_size, &r) != 0)
            continue;
        if ((double)r.live_bytes >= STORE_GC_REWRITE_FRACTION * (double)r.value_bytes)
            continue;
        if (ncand == ccap) {
            ccap = ccap ? ccap * 2 : 16;
            cand *nc = realloc(cands, ccap * sizeof *nc);
            if (nc == NULL)
                break;
            cands = nc;
        }
        cands[ncand++] = (cand){get_be64(k.mv_data), r.file_size, r.live_values};
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    int ret = 0;
    for (size_t i = 0; i < ncand && ret == 0; i++) {
        if (cands[i].live_values == 0)
            ret = gc_drop_file(st, cands[i].id, cands[i].size, err, errlen);
        else
            ret = gc_rewrite_file(st, cands[i].id, cands[i].size, err, errlen);
    }
    free(cands);
    pthread_mutex_unlock(&st->gc_mu);
    return ret == 0 ? removed : -1;
}
