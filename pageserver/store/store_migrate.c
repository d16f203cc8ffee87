/*
 * store_migrate.c: bringing a store written before every value went to a
 * data file up to date (store_migrate_inline in store_priv.h).
 *
 * For: stores whose small values live only inline in the LMDB index (index
 * value tag 1).  Data files alone could not rebuild them (store_rebuild.c),
 * so at open every such value is written to one new data file and its index
 * value becomes tag 3 (inline, naming that file), in one commit through
 * store_commit_data_file with the "format" metadata.  Runs once: the
 * metadata says so afterwards (every flush writes it too, so a new store
 * has it from its first flush).
 * Not for: anything after open (no other writer runs yet).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/strata_assert.h"
#include "pageserver/store/store_priv.h"

typedef struct mig_ent {
    uint8_t ikey[PG_INDEX_KEY_LEN];
    store_df_loc loc;
} mig_ent;

typedef struct migration {
    mig_ent *ents;
    size_t n, cap;
    uint8_t buf[STORE_IDXV_INLINE_FILE_HDR + VALUE_HEADER_LEN + 4096];
} migration;

/* Writes every tag-1 value (as txn sees the index) to nf.  0 or -1. */
static int collect(store *st, MDB_txn *txn, migration *m, store_new_file *nf, char *err,
                   size_t errlen)
{
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, st->dbi_index, &cur);
    if (rc != 0) {
        store_mdb_err(err, errlen, "migrate: open cursor", rc);
        return -1;
    }
    MDB_val k, v;
    int ret = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0 && ret == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        store_idxv iv;
        const char *why;
        if (k.mv_size != PG_INDEX_KEY_LEN ||
            store_idxv_decode(v.mv_data, v.mv_size, &iv, &why) != 0) {
            snprintf(err, errlen, "migrate: corrupt index entry");
            ret = -1;
            break;
        }
        if (iv.tag != STORE_IDXV_INLINE)
            continue;
        if (m->n == m->cap) {
            size_t cap = m->cap ? m->cap * 2 : 1024;
            mig_ent *ne = realloc(m->ents, cap * sizeof *ne);
            if (ne == NULL) {
                snprintf(err, errlen, "out of memory");
                ret = -1;
                break;
            }
            m->ents = ne;
            m->cap = cap;
        }
        mig_ent *e = &m->ents[m->n++];
        memcpy(e->ikey, k.mv_data, PG_INDEX_KEY_LEN);
        ret = store_new_file_add(st, nf, e->ikey, iv.value, iv.value_len, &e->loc, err, errlen);
    }
    mdb_cursor_close(cur);
    if (ret == 0 && rc != MDB_NOTFOUND) {
        store_mdb_err(err, errlen, "migrate: index walk", rc);
        ret = -1;
    }
    return ret;
}

/* A store_index_fn: the collected entries become tag 3; the format is set. */
static int repoint(store *st, MDB_txn *txn, store_new_file *nf, void *arg, char *err, size_t errlen)
{
    migration *m = arg;
    int rc = 0;
    for (size_t i = 0; i < m->n && rc == 0; i++) {
        MDB_val k = {PG_INDEX_KEY_LEN, m->ents[i].ikey}, v;
        store_idxv iv;
        const char *why;
        if ((rc = mdb_get(txn, st->dbi_index, &k, &v)) != 0)
            break;
        /* Nothing else writes during open. */
        STRATA_ASSERT(store_idxv_decode(v.mv_data, v.mv_size, &iv, &why) == 0 &&
                      iv.tag == STORE_IDXV_INLINE &&
                      iv.value_len + PG_INDEX_KEY_LEN == m->ents[i].loc.entry_len);
        if (iv.value_len > sizeof m->buf - STORE_IDXV_INLINE_FILE_HDR) {
            snprintf(err, errlen, "migrate: inline value of %u bytes is too long", iv.value_len);
            return -1;
        }
        store_new_file_inline_hdr(nf, &m->ents[i].loc, m->buf);
        memcpy(m->buf + STORE_IDXV_INLINE_FILE_HDR, iv.value, iv.value_len);
        MDB_val nv = {STORE_IDXV_INLINE_FILE_HDR + iv.value_len, m->buf};
        rc = mdb_put(txn, st->dbi_index, &k, &nv, 0);
    }
    if (rc == 0)
        rc = store_meta_put_u64(st, txn, "format", STORE_FORMAT_VALUES_IN_FILES);
    if (rc != 0) {
        store_mdb_err(err, errlen, "migrate: update index", rc);
        return -1;
    }
    return 0;
}

int store_migrate_inline(store *st, char *err, size_t errlen)
{
    MDB_txn *txn;
    int rc = mdb_txn_begin(st->env, NULL, MDB_RDONLY, &txn);
    if (rc != 0) {
        store_mdb_err(err, errlen, "migrate: begin transaction", rc);
        return -1;
    }
    uint64_t format = 0;
    if ((rc = store_meta_get_u64(st, txn, "format", &format)) != 0) {
        mdb_txn_abort(txn);
        store_mdb_err(err, errlen, "migrate: read format", rc);
        return -1;
    }
    if (format >= STORE_FORMAT_VALUES_IN_FILES) {
        mdb_txn_abort(txn);
        return 0;
    }
    migration m = {0};
    store_new_file nf = {0};
    int ret = collect(st, txn, &m, &nf, err, errlen);
    mdb_txn_abort(txn);
    /* Nothing to copy: the next flush records the format (a new store's
     * open writes nothing). */
    if (ret == 0 && m.n > 0)
        ret = store_commit_data_file(st, &nf, "migrate inline values", repoint, &m, err, errlen);
    if (ret == 0 && m.n > 0)
        log_info("store: %s: copied %zu inline-only values into data file %016llx", st->dir, m.n,
                 (unsigned long long)nf.id);
    store_new_file_release(st, &nf);
    free(m.ents);
    return ret;
}
