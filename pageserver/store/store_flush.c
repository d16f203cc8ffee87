/*
 * store_flush.c: flushing one frozen layer (store_flush_layer in
 * store_priv.h; docs/design.md §6.3).
 *
 * For: in three steps: (1) every version of the layer in index order,
 * written to a new data file (every value: data files alone can rebuild the
 * store, store_rebuild.c); (2) one LMDB transaction, through
 * store_commit_data_file, that inserts every index entry (values up to
 * inline_max_bytes inline, naming the file that holds their copy; larger ones
 * by their place in the file) and the new disk_consistent_lsn with the data
 * file's record; (3) the layer leaves the published snapshot.  A crash before (2) commits leaves an
 * unreferenced file, which the next open deletes.
 * Not for: when to flush (the background thread in store.c), freezing.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/strata_assert.h"
#include "pageserver/store/store_priv.h"

typedef struct flush_entry {
    const store_layer_version *ver;
    const uint8_t *key;
    bool inline_value; /* the index holds the value too, not only its place */
    store_df_loc loc;
} flush_entry;

/* One flush of frozen layer f: its versions in index order. */
typedef struct flush_job {
    store_layer *f;
    const store_layer_key **keys;
    size_t nkeys;
    flush_entry *ents;
    size_t nents, cap;
    uint8_t *buf; /* an inline value behind its index value header */
    size_t buf_cap;
    lsn_t flsn; /* the disk_consistent_lsn the flush makes durable */
} flush_job;

/* Adds version v of key to job and writes it to nf.  0 or -1 with err. */
static int flush_add_version(store *st, flush_job *job, store_new_file *nf, const uint8_t *key,
                             const store_layer_version *v, char *err, size_t errlen)
{
    if (job->nents == job->cap) {
        size_t cap = job->cap ? job->cap * 2 : 1024;
        flush_entry *ne = realloc(job->ents, cap * sizeof *ne);
        if (ne == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        job->ents = ne;
        job->cap = cap;
    }
    flush_entry *e = &job->ents[job->nents++];
    e->ver = v;
    e->key = key;
    e->inline_value = v->len <= st->o.inline_max_bytes;
    /* flush_index copies inline values after their index value header. */
    size_t need = (size_t)v->len + STORE_IDXV_INLINE_FILE_HDR;
    if (e->inline_value && need > job->buf_cap) {
        uint8_t *nb = realloc(job->buf, need);
        if (nb == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        job->buf = nb;
        job->buf_cap = need;
    }
    const uint8_t *enc = store_layer_data(job->f, v);
    value_ref val;
    size_t used;
    const char *why;
    if (value_decode(enc, v->len, &val, &used, &why) != 0 || used != v->len) {
        snprintf(err, errlen, "open layer value fails to decode: %s", why);
        return -1;
    }
    uint8_t ikey[PG_INDEX_KEY_LEN];
    memcpy(ikey, key, PG_KEY_LEN);
    put_be64(ikey + PG_KEY_LEN, v->lsn);
    return store_new_file_add(st, nf, ikey, enc, v->len, &e->loc, err, errlen);
}

/* Step 1: every version of the layer, in index order, written to nf.  0 or
 * -1 with err. */
static int flush_collect(store *st, flush_job *job, store_new_file *nf, char *err, size_t errlen)
{
    if (store_layer_sorted_keys(job->f, NULL, NULL, &job->keys, &job->nkeys) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < job->nkeys; i++) {
        uint32_t n;
        const store_layer_version *v = store_layer_versions(job->keys[i], &n);
        for (uint32_t j = 0; j < n; j++)
            if (flush_add_version(st, job, nf, job->keys[i]->key, &v[j], err, errlen) != 0)
                return -1;
    }
    return 0;
}

/* Inserts one index entry.  Replacing a value at the same (key, LSN) makes
 * the old one dead, which its data file's record learns.  0 or -1 with err. */
static int flush_put_entry(store *st, MDB_txn *txn, MDB_val *key, MDB_val *val, char *err,
                           size_t errlen)
{
    MDB_val old = *val;
    int rc = mdb_put(txn, st->dbi_index, key, &old, MDB_NOOVERWRITE);
    if (rc == MDB_KEYEXIST) {
        store_idxv oiv;
        const char *why;
        if (store_idxv_decode(old.mv_data, old.mv_size, &oiv, &why) == 0 &&
            store_idxv_in_file(&oiv) &&
            (rc = store_file_rec_sub(st, txn, oiv.file_id, oiv.entry_len, 1)) != 0) {
            store_mdb_err(err, errlen, "update file record", rc);
            return -1;
        }
        rc = mdb_put(txn, st->dbi_index, key, val, 0);
    }
    if (rc != 0) {
        store_mdb_err(err, errlen, "insert index entry", rc);
        return -1;
    }
    return 0;
}

/* Step 2 (a store_index_fn; arg is the flush_job): every entry into the
 * index, and the new disk_consistent_lsn. */
static int flush_index(store *st, MDB_txn *txn, store_new_file *nf, void *arg, char *err,
                       size_t errlen)
{
    flush_job *job = arg;
    for (size_t i = 0; i < job->nents; i++) {
        flush_entry *e = &job->ents[i];
        uint8_t ikey[PG_INDEX_KEY_LEN];
        memcpy(ikey, e->key, PG_KEY_LEN);
        put_be64(ikey + PG_KEY_LEN, e->ver->lsn);
        uint8_t fv[STORE_IDXV_FILE_LEN];
        MDB_val key = {sizeof ikey, ikey}, val;
        if (!e->inline_value) {
            store_new_file_idxv(nf, e->ver->kind, e->ver->flags, &e->loc, fv);
            val.mv_size = sizeof fv;
            val.mv_data = fv;
        } else {
            store_new_file_inline_hdr(nf, &e->loc, job->buf);
            if (store_layer_read(job->f, e->ver, job->buf + STORE_IDXV_INLINE_FILE_HDR, err,
                                 errlen) != 0)
                return -1;
            val.mv_size = STORE_IDXV_INLINE_FILE_HDR + e->ver->len;
            val.mv_data = job->buf;
        }
        if (flush_put_entry(st, txn, &key, &val, err, errlen) != 0)
            return -1;
    }
    /* Every value of the layer is in this transaction. */
    STRATA_ASSERT(nf->live_values == nf->values);
    job->flsn = store_layer_freeze_lsn(job->f);
    lsn_t dcl = atomic_load(&st->disk_consistent_lsn);
    if (job->flsn < dcl)
        job->flsn = dcl;
    int rc = store_meta_put_u64(st, txn, "disk_consistent_lsn", job->flsn);
    if (rc == 0) /* every value of this store is in a data file (store_migrate.c) */
        rc = store_meta_put_u64(st, txn, "format", STORE_FORMAT_VALUES_IN_FILES);
    if (rc != 0) {
        store_mdb_err(err, errlen, "update store metadata", rc);
        return -1;
    }
    return 0;
}

/* Step 3, once the index holds everything: the frozen layer f leaves the
 * snapshot and disk_consistent_lsn moves to flsn. */
static void flush_drop_layer(store *st, store_layer *f, lsn_t flsn)
{
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
}

/* Flushes frozen layer f (see store_priv.h). */
int store_flush_layer(store *st, store_layer *f, char *err, size_t errlen)
{
    flush_job job = {.f = f};
    store_new_file nf = {0};
    int ret = -1;
    if (flush_collect(st, &job, &nf, err, errlen) == 0 &&
        store_commit_data_file(st, &nf, "flush", flush_index, &job, err, errlen) == 0) {
        flush_drop_layer(st, f, job.flsn);
        atomic_fetch_add(&st->flushes, 1);
        ret = 0;
    }
    store_new_file_release(st, &nf);
    free(job.buf);
    free(job.ents);
    free(job.keys);
    return ret;
}
