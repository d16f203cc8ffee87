/*
 * store_commit.c: committing a new data file (store_priv.h, docs/storage.md).
 *
 * For: the one step the flush (store_flush.c) and the GC rewrite (store_gc.c)
 * share: write a data file, make it durable, publish it to readers, and
 * reference it from the LMDB index in the same transaction as the caller's
 * index changes.  This is the single place where "a data file became durable
 * and is now referenced" happens.
 * Not for: choosing what goes into the file or which index entries change
 * (the callers), reading files (store_read.c).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/strata_assert.h"
#include "pageserver/store/store_priv.h"

int store_new_file_add(store *st, store_new_file *nf, const uint8_t ikey[PG_INDEX_KEY_LEN],
                       const uint8_t *value, size_t len, store_df_loc *loc, char *err,
                       size_t errlen)
{
    STRATA_ASSERT(!nf->committed && nf->file == NULL);
    if (nf->w == NULL) {
        nf->id = atomic_fetch_add(&st->next_file_id, 1);
        if (store_df_writer_open(st->data_dir, nf->id, st->o.zstd_level, &nf->w, err, errlen) != 0)
            return -1;
    }
    if (store_df_writer_add(nf->w, ikey, value, len, loc, err, errlen) != 0)
        return -1;
    lsn_t lsn = get_be64(ikey + PG_KEY_LEN);
    if (nf->values == 0 || lsn < nf->lsn_min)
        nf->lsn_min = lsn;
    if (nf->values == 0 || lsn > nf->lsn_max)
        nf->lsn_max = lsn;
    nf->value_bytes += loc->entry_len;
    nf->values++;
    return 0;
}

void store_new_file_idxv(store_new_file *nf, uint8_t kind, uint8_t flags, const store_df_loc *loc,
                         uint8_t out[STORE_IDXV_FILE_LEN])
{
    STRATA_ASSERT(nf->w != NULL && !nf->committed);
    const store_df_block_info *b = store_df_writer_block(nf->w, loc->block_no);
    store_idxv iv = {.kind = kind,
                     .flags = flags,
                     .file_id = nf->id,
                     .block_off = b->off,
                     .block_len = b->len,
                     .off_in_block = loc->off_in_block,
                     .entry_len = loc->entry_len};
    store_idxv_encode_file(&iv, out);
    nf->live_bytes += loc->entry_len;
    nf->live_values++;
}

void store_new_file_inline_hdr(store_new_file *nf, const store_df_loc *loc,
                               uint8_t out[STORE_IDXV_INLINE_FILE_HDR])
{
    STRATA_ASSERT(nf->w != NULL && !nf->committed);
    store_idxv_encode_inline_hdr(nf->id, out);
    nf->live_bytes += loc->entry_len;
    nf->live_values++;
}

/* Step 1 and 2 of the contract: the file durable under its final name, then
 * listed in a published snapshot.  0 or -1 with err. */
static int make_durable_and_readable(store *st, store_new_file *nf, const char *what, char *err,
                                     size_t errlen)
{
    if (store_df_writer_finish(nf->w, &nf->size, err, errlen) != 0)
        return -1;
    nf->file = store_file_open(st, nf->id, err, errlen);
    if (nf->file == NULL)
        return -1;
    /* Readers must be able to open the file before the index names it. */
    pthread_mutex_lock(&st->publish_mu);
    store_snap *s = store_snap_clone_current(st);
    int rc = s ? store_snap_add_file(s, nf->file) : -1;
    if (rc == 0)
        rc = store_snap_publish(st, s);
    else if (s != NULL) {
        atomic_store(&s->refs, 1);
        store_snap_release(st, s);
    }
    pthread_mutex_unlock(&st->publish_mu);
    if (rc != 0) {
        snprintf(err, errlen, "%s: publish data file: out of memory or snapshot slots", what);
        return -1;
    }
    nf->published = true;
    return 0;
}

/* Step 3's own records: nf's file record (when it has one) and next_file_id.
 * 0 or an LMDB error code. */
static int put_file_records(store *st, MDB_txn *txn, const store_new_file *nf)
{
    int rc;
    if (nf->w != NULL) {
        store_file_rec r = {.file_size = nf->size,
                            .value_bytes = nf->value_bytes,
                            .live_bytes = nf->live_bytes,
                            .values = nf->values,
                            .live_values = nf->live_values,
                            .lsn_min = nf->lsn_min,
                            .lsn_max = nf->lsn_max};
        uint8_t fk[8], fr[STORE_FILE_REC_LEN];
        store_file_key(nf->id, fk);
        store_file_rec_encode(&r, fr);
        MDB_val key = {8, fk}, val = {sizeof fr, fr};
        if ((rc = mdb_put(txn, st->dbi_files, &key, &val, 0)) != 0)
            return rc;
    }
    return store_meta_put_u64(st, txn, "next_file_id", atomic_load(&st->next_file_id));
}

int store_commit_data_file(store *st, store_new_file *nf, const char *what, store_index_fn index,
                           void *arg, char *err, size_t errlen)
{
    STRATA_ASSERT(!nf->committed && !nf->published);
    if (nf->w != NULL && make_durable_and_readable(st, nf, what, err, errlen) != 0)
        return -1;
    MDB_txn *txn;
    char ctx[96];
    int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
    if (rc != 0) {
        snprintf(ctx, sizeof ctx, "%s: begin transaction", what);
        store_mdb_err(err, errlen, ctx, rc);
        return -1;
    }
    if (index(st, txn, nf, arg, err, errlen) != 0) {
        mdb_txn_abort(txn);
        return -1;
    }
    /* The index can point only at entries that were written. */
    STRATA_ASSERT(nf->live_values <= nf->values && nf->live_bytes <= nf->value_bytes);
    if ((rc = put_file_records(st, txn, nf)) != 0) {
        mdb_txn_abort(txn);
        snprintf(ctx, sizeof ctx, "%s: insert file record", what);
        store_mdb_err(err, errlen, ctx, rc);
        return -1;
    }
    if ((rc = mdb_txn_commit(txn)) != 0) {
        snprintf(ctx, sizeof ctx, "%s: commit", what);
        store_mdb_err(err, errlen, ctx, rc);
        return -1;
    }
    nf->committed = true;
    nf->published = false; /* owned by the index now */
    if (nf->w != NULL) {
        atomic_fetch_add(&st->data_files, 1);
        atomic_fetch_add(&st->data_file_bytes, nf->size);
        /* #13: the uploader (pageserver/remote/uploader.c) learns of the
         * new file here, once it is durable and referenced; it uploads the
         * files an LMDB snapshot lists, so a file never committed is never
         * uploaded. */
        store_commit_hook hook = atomic_load(&st->commit_hook);
        if (hook != NULL)
            hook(st->commit_hook_arg, nf->id, nf->size);
    }
    return 0;
}

void store_new_file_release(store *st, store_new_file *nf)
{
    if (nf->published) {
        pthread_mutex_lock(&st->publish_mu);
        store_snap *s = store_snap_clone_current(st);
        if (s != NULL) {
            store_snap_remove_file(s, nf->id);
            if (store_snap_publish(st, s) != 0)
                log_warn("store: could not publish a snapshot without uncommitted file %016llx",
                         (unsigned long long)nf->id);
        }
        pthread_mutex_unlock(&st->publish_mu);
    }
    if (!nf->committed && nf->w != NULL) {
        /* Never referenced: the next open would delete it anyway. */
        char path[4400];
        store_df_path(st->data_dir, nf->id, path, sizeof path);
        unlink(path);
    }
    store_file_unref(nf->file);
    store_df_writer_free(nf->w);
    *nf = (store_new_file){0};
}
