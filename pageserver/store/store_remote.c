/*
 * store_remote.c: what the object-storage uploader (pageserver/remote/,
 * docs/storage.md) needs from the store, and nothing more (store.h).
 *
 * For: a consistent list of the committed data files with the
 * disk_consistent_lsn they make durable (one LMDB read transaction), the
 * upload state kept in the LMDB metadata (remote_consistent_lsn and the
 * manifest seq behind it), the path of a data file, and the hook that tells
 * the uploader a file was committed.
 * Not for: uploading, manifests, remote GC (pageserver/remote/uploader.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strata_assert.h"
#include "pageserver/store/store_priv.h"

#define META_REMOTE_LSN "remote_consistent_lsn"
#define META_REMOTE_SEQ "remote_manifest_seq"

void store_file_list_free(store_file_list *l)
{
    if (l == NULL)
        return;
    free(l->files);
    memset(l, 0, sizeof *l);
}

/* Appends every file record of txn to out.  0 or -1 with err. */
static int list_file_records(store *st, MDB_txn *txn, store_file_list *out, char *err,
                             size_t errlen)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, st->dbi_files, &cur);
    if (rc != 0) {
        store_mdb_err(err, errlen, "list data files", rc);
        return -1;
    }
    size_t cap = 0;
    MDB_val k, v;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        store_file_rec r;
        if (k.mv_size != 8 || store_file_rec_decode(v.mv_data, v.mv_size, &r) != 0) {
            mdb_cursor_close(cur);
            snprintf(err, errlen, "corrupt file record in the index");
            return -1;
        }
        if (out->n == cap) {
            cap = cap ? cap * 2 : 64;
            store_file_info *nf = realloc(out->files, cap * sizeof *nf);
            if (nf == NULL) {
                mdb_cursor_close(cur);
                snprintf(err, errlen, "out of memory listing data files");
                return -1;
            }
            out->files = nf;
        }
        store_file_info *f = &out->files[out->n++];
        *f = (store_file_info){.id = get_be64(k.mv_data),
                               .size = r.file_size,
                               .lsn_min = r.lsn_min,
                               .lsn_max = r.lsn_max};
        /* Big-endian keys: the cursor walks ids in ascending order. */
        STRATA_ASSERT(out->n == 1 || f->id > out->files[out->n - 2].id);
    }
    mdb_cursor_close(cur);
    if (rc != MDB_NOTFOUND) {
        store_mdb_err(err, errlen, "list data files", rc);
        return -1;
    }
    return 0;
}

int store_list_files(store *st, store_file_list *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0) {
        store_mdb_err(err, errlen, "begin read transaction", rc);
        return -1;
    }
    uint64_t dcl, seq, rcl;
    if ((rc = store_meta_get_u64(st, txn, "disk_consistent_lsn", &dcl)) != 0 ||
        (rc = store_meta_get_u64(st, txn, "next_file_id", &out->next_file_id)) != 0 ||
        (rc = store_meta_get_u64(st, txn, META_REMOTE_LSN, &rcl)) != 0 ||
        (rc = store_meta_get_u64(st, txn, META_REMOTE_SEQ, &seq)) != 0) {
        mdb_txn_abort(txn);
        store_mdb_err(err, errlen, "read store metadata", rc);
        return -1;
    }
    out->disk_consistent_lsn = dcl;
    out->remote_consistent_lsn = rcl;
    out->remote_seq = seq;
    rc = list_file_records(st, txn, out, err, errlen);
    mdb_txn_abort(txn);
    if (rc != 0)
        store_file_list_free(out);
    return rc;
}

void store_data_file_path(const store *st, uint64_t id, char *out, size_t len)
{
    store_df_path(st->data_dir, id, out, len);
}

int store_set_remote_state(store *st, lsn_t remote_consistent_lsn, uint64_t seq, char *err,
                           size_t errlen)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, 0, &txn);
    if (rc == 0) {
        if ((rc = store_meta_put_u64(st, txn, META_REMOTE_LSN, remote_consistent_lsn)) != 0 ||
            (rc = store_meta_put_u64(st, txn, META_REMOTE_SEQ, seq)) != 0)
            mdb_txn_abort(txn);
        else
            rc = mdb_txn_commit(txn); /* LMDB syncs the commit */
    }
    if (rc != 0) {
        store_mdb_err(err, errlen, "persist the remote upload state", rc);
        return -1;
    }
    return 0;
}

void store_set_commit_hook(store *st, store_commit_hook fn, void *arg)
{
    st->commit_hook_arg = arg;
    atomic_store(&st->commit_hook, fn);
}
