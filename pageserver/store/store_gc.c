/*
 * store_gc.c: garbage collection of the store (store_gc in store.h,
 * docs/design.md §6.7).
 *
 * For: two passes.  (1) Walk the LMDB index key by key and delete every
 * version older than the newest complete value at or below the horizon (a
 * tombstone that is itself the newest version at or below the horizon goes
 * too: "absent" and "dropped" read the same), in write transactions of at
 * most STORE_GC_BATCH deletes so the flush (the only other writer) and
 * readers (MVCC snapshots) never wait long; each transaction also lowers the
 * live-byte counts of the data files it touched.  (2) Rewrite data files
 * whose live bytes fell under STORE_GC_REWRITE_FRACTION: copy live entries to
 * a new file (written and fsynced like a flush), make it readable, repoint
 * the index in one transaction, then unlink the old file.  Files with nothing
 * live are just dropped.
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

#include "common/durable.h"
#include "common/log.h"
#include "common/strata_assert.h"
#include "pageserver/store/store.h"
#include "pageserver/store/store_priv.h"

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

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
        while (rc == 0 && k.mv_size == PG_INDEX_KEY_LEN &&
               memcmp(k.mv_data, key, PG_KEY_LEN) == 0 &&
               get_be64((const uint8_t *)k.mv_data + PG_KEY_LEN) <= horizon) {
            store_idxv iv;
            const char *why;
            if (store_idxv_decode(v.mv_data, v.mv_size, &iv, &why) != 0) {
                snprintf(err, errlen, "corrupt index value during GC: %s", why);
                mdb_cursor_close(cur);
                mdb_txn_abort(txn);
                return -1;
            }
            if (n == *ents_cap) {
                size_t cap = *ents_cap ? *ents_cap * 2 : 256;
                gc_ent *ne = realloc(*ents, cap * sizeof *ne);
                if (ne == NULL) {
                    snprintf(err, errlen, "out of memory");
                    mdb_cursor_close(cur);
                    mdb_txn_abort(txn);
                    return -1;
                }
                *ents = ne;
                *ents_cap = cap;
            }
            gc_ent *e = &(*ents)[n++];
            memcpy(e->ikey, k.mv_data, PG_INDEX_KEY_LEN);
            value_ref probe_v = {.kind = iv.kind, .flags = iv.flags};
            e->complete = value_is_complete(&probe_v);
            e->tombstone = iv.kind == VAL_TOMBSTONE;
            e->in_file = iv.tag == STORE_IDXV_FILE;
            e->file_id = iv.file_id;
            e->entry_len = iv.entry_len;
            rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        }
        if (rc != 0 && rc != MDB_NOTFOUND)
            goto fail;
        /* Everything below the newest complete version goes. */
        size_t cut = 0;
        for (size_t i = n; i > 0; i--) {
            if ((*ents)[i - 1].complete) {
                cut = i - 1;
                if ((*ents)[i - 1].tombstone && i == n)
                    cut = n;
                break;
            }
        }
        /* What stays must rebuild the key at the horizon: it starts at a
         * complete version, or nothing stays after a newest tombstone. */
        STRATA_ASSERT(cut == 0 || (cut == n ? (*ents)[n - 1].tombstone : (*ents)[cut].complete));
        for (size_t i = 0; i < cut; i++) {
            gc_ent *e = &(*ents)[i];
            MDB_val dk = {PG_INDEX_KEY_LEN, e->ikey};
            rc = mdb_del(txn, st->dbi_index, &dk, NULL);
            if (rc != 0)
                goto fail;
            deletes++;
            if (!e->in_file)
                continue;
            int d = 0;
            while (d < ndeltas && deltas[d].id != e->file_id)
                d++;
            if (d == ndeltas) {
                /* Room is left: the loop stops at half. */
                STRATA_ASSERT(ndeltas < MAX_DELTAS);
                deltas[ndeltas++] = (file_delta){.id = e->file_id};
            }
            deltas[d].bytes += e->entry_len;
            deltas[d].count++;
        }
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

/* Copies file id's live entries into a new file and repoints the index. */
static int gc_rewrite_file(store *st, uint64_t id, uint64_t old_size, char *err, size_t errlen)
{
    store_snap *snap = store_snap_acquire(st);
    store_file *f = store_snap_find_file(snap, id);
    if (f != NULL)
        atomic_fetch_add(&f->refs, 1);
    store_snap_release(st, snap);
    if (f == NULL) {
        snprintf(err, errlen, "data file %016llx is not open", (unsigned long long)id);
        return -1;
    }
    int ret = -1;
    MDB_txn *rtxn = NULL, *txn = NULL;
    store_df_writer *w = NULL;
    store_file *nf = NULL;
    moved *mv = NULL;
    size_t nmv = 0, mv_cap = 0;
    uint8_t *blk = NULL, *raw = NULL;
    uint64_t new_id = 0, new_size = 0, new_bytes = 0;
    bool published = false;
    const char *why = NULL;

    uint8_t hdr[STORE_DF_HEADER_LEN];
    uint64_t hdr_id;
    if (durable_pread_all(f->fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr ||
        store_df_header_decode(hdr, sizeof hdr, &hdr_id, &why) != 0 || hdr_id != id) {
        snprintf(err, errlen, "data file %016llx: bad header%s%s", (unsigned long long)id,
                 why ? ": " : "", why ? why : "");
        goto out;
    }
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &rtxn);
    if (rc != 0) {
        store_mdb_err(err, errlen, "begin GC read transaction", rc);
        rtxn = NULL;
        goto out;
    }
    uint64_t off = STORE_DF_HEADER_LEN;
    while (off < f->size) {
        uint8_t bh[STORE_DF_BLOCK_HEADER_LEN];
        uint32_t raw_len, comp_len;
        if (durable_pread_all(f->fd, bh, sizeof bh, off) != (ssize_t)sizeof bh ||
            store_df_block_header_decode(bh, sizeof bh, &raw_len, &comp_len, &why) != 0) {
            snprintf(err, errlen, "data file %016llx at %llu: bad block header",
                     (unsigned long long)id, (unsigned long long)off);
            goto out;
        }
        size_t blen = STORE_DF_BLOCK_HEADER_LEN + (size_t)comp_len;
        uint8_t *nb = realloc(blk, blen);
        if (nb == NULL) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
        blk = nb;
        if (durable_pread_all(f->fd, blk, blen, off) != (ssize_t)blen) {
            snprintf(err, errlen, "data file %016llx: short read", (unsigned long long)id);
            goto out;
        }
        free(raw);
        raw = NULL;
        uint32_t rl;
        if (store_df_block_decode(blk, blen, &raw, &rl, &why) != 0) {
            snprintf(err, errlen, "data file %016llx at %llu: %s", (unsigned long long)id,
                     (unsigned long long)off, why);
            goto out;
        }
        size_t eoff = 0;
        while (eoff < rl) {
            const uint8_t *ikey;
            value_ref v;
            size_t used;
            if (store_df_entry_decode(raw, rl, eoff, &ikey, &v, &used, &why) != 0) {
                snprintf(err, errlen, "data file %016llx at %llu: %s", (unsigned long long)id,
                         (unsigned long long)off, why);
                goto out;
            }
            MDB_val k = {PG_INDEX_KEY_LEN, (void *)ikey}, val;
            store_idxv iv;
            rc = mdb_get(rtxn, st->dbi_index, &k, &val);
            bool live = rc == 0 && store_idxv_decode(val.mv_data, val.mv_size, &iv, &why) == 0 &&
                        iv.tag == STORE_IDXV_FILE && iv.file_id == id && iv.block_off == off &&
                        iv.off_in_block == eoff;
            if (live) {
                if (w == NULL) {
                    new_id = atomic_fetch_add(&st->next_file_id, 1);
                    if (store_df_writer_open(st->data_dir, new_id, st->o.zstd_level, &w, err,
                                             errlen) != 0)
                        goto out;
                }
                if (nmv == mv_cap) {
                    mv_cap = mv_cap ? mv_cap * 2 : 1024;
                    moved *nm = realloc(mv, mv_cap * sizeof *mv);
                    if (nm == NULL) {
                        snprintf(err, errlen, "out of memory");
                        goto out;
                    }
                    mv = nm;
                }
                moved *m = &mv[nmv++];
                memcpy(m->ikey, ikey, PG_INDEX_KEY_LEN);
                m->kind = iv.kind;
                m->flags = iv.flags;
                m->old_block_off = off;
                m->old_off_in_block = (uint32_t)eoff;
                if (store_df_writer_add(w, ikey, ikey + PG_INDEX_KEY_LEN, used - PG_INDEX_KEY_LEN,
                                        &m->loc, err, errlen) != 0)
                    goto out;
                new_bytes += used;
            }
            eoff += used;
        }
        off += blen;
    }
    mdb_txn_abort(rtxn);
    rtxn = NULL;
    if (w != NULL) {
        if (store_df_writer_finish(w, &new_size, err, errlen) != 0)
            goto out;
        nf = store_file_open(st, new_id, err, errlen);
        if (nf == NULL)
            goto out;
        if (gc_publish(st, nf, 0) != 0) {
            snprintf(err, errlen, "publish rewritten file: out of memory or snapshot slots");
            goto out;
        }
        published = true;
    }
    rc = mdb_txn_begin(st->env, NULL, 0, &txn);
    if (rc != 0) {
        store_mdb_err(err, errlen, "begin GC transaction", rc);
        txn = NULL;
        goto out;
    }
    uint64_t live_bytes = 0, live_values = 0;
    for (size_t i = 0; i < nmv; i++) {
        moved *m = &mv[i];
        MDB_val k = {PG_INDEX_KEY_LEN, m->ikey}, val;
        store_idxv iv;
        /* A flush may have replaced the entry since we read it: move only
         * entries that still point where we copied from. */
        rc = mdb_get(txn, st->dbi_index, &k, &val);
        if (rc == MDB_NOTFOUND)
            continue;
        if (rc != 0)
            goto mdb_fail;
        if (store_idxv_decode(val.mv_data, val.mv_size, &iv, &why) != 0 ||
            iv.tag != STORE_IDXV_FILE || iv.file_id != id || iv.block_off != m->old_block_off ||
            iv.off_in_block != m->old_off_in_block)
            continue;
        const store_df_block_info *b = store_df_writer_block(w, m->loc.block_no);
        store_idxv niv = {.kind = m->kind,
                          .flags = m->flags,
                          .file_id = new_id,
                          .block_off = b->off,
                          .block_len = b->len,
                          .off_in_block = m->loc.off_in_block,
                          .entry_len = m->loc.entry_len};
        uint8_t enc[STORE_IDXV_FILE_LEN];
        store_idxv_encode_file(&niv, enc);
        MDB_val nv = {sizeof enc, enc};
        if ((rc = mdb_put(txn, st->dbi_index, &k, &nv, 0)) != 0)
            goto mdb_fail;
        live_bytes += m->loc.entry_len;
        live_values++;
    }
    uint8_t fk[8];
    store_file_key(id, fk);
    MDB_val key = {8, fk};
    rc = mdb_del(txn, st->dbi_files, &key, NULL);
    if (rc != 0 && rc != MDB_NOTFOUND)
        goto mdb_fail;
    if (w != NULL) {
        store_file_rec r = {.file_size = new_size,
                            .value_bytes = new_bytes,
                            .live_bytes = live_bytes,
                            .values = nmv,
                            .live_values = live_values};
        uint8_t nk[8], fr[STORE_FILE_REC_LEN];
        store_file_key(new_id, nk);
        store_file_rec_encode(&r, fr);
        MDB_val k2 = {8, nk}, v2 = {sizeof fr, fr};
        if ((rc = mdb_put(txn, st->dbi_files, &k2, &v2, 0)) != 0)
            goto mdb_fail;
        uint8_t nid[8];
        store_file_key(atomic_load(&st->next_file_id), nid);
        MDB_val mk = {strlen("next_file_id"), "next_file_id"}, mvv = {8, nid};
        if ((rc = mdb_put(txn, st->dbi_meta, &mk, &mvv, 0)) != 0)
            goto mdb_fail;
    }
    rc = mdb_txn_commit(txn);
    txn = NULL;
    if (rc != 0)
        goto mdb_fail;
    published = false; /* the new file is indexed now */
    if (gc_publish(st, NULL, id) != 0)
        log_warn("store: GC could not publish a snapshot without file %016llx",
                 (unsigned long long)id);
    remove_unindexed_file(st, id);
    if (w != NULL) {
        atomic_fetch_add(&st->data_files, 1);
        atomic_fetch_add(&st->data_file_bytes, new_size);
    }
    atomic_fetch_sub(&st->data_files, 1);
    atomic_fetch_sub(&st->data_file_bytes, old_size);
    ret = 0;
    goto out;
mdb_fail:
    store_mdb_err(err, errlen, "GC rewrite", rc);
out:
    if (rtxn != NULL)
        mdb_txn_abort(rtxn);
    if (txn != NULL)
        mdb_txn_abort(txn);
    if (published)
        gc_publish(st, NULL, new_id);
    if (ret != 0 && w != NULL) {
        char p[4400];
        store_df_path(st->data_dir, new_id, p, sizeof p);
        unlink(p);
    }
    store_file_unref(nf);
    store_df_writer_free(w);
    store_file_unref(f);
    free(mv);
    free(blk);
    free(raw);
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
