/*
 * store_records.c: the LMDB records of the store (store_priv.h): index
 * values (inline, a data file location, or inline with the data file that
 * holds its copy), file records and their live
 * counts, and the metadata values (disk_consistent_lsn, next_file_id).
 *
 * For: encoding and decoding them exactly, and the small updates both the
 * flush and GC make (a dead entry lowers its file's live counts).
 * Not for: deciding what to write (store.c, store_flush.c, store_gc.c).
 */
#include <stdio.h>
#include <string.h>

#include "pageserver/store/store_priv.h"

void store_mdb_err(char *err, size_t errlen, const char *what, int rc)
{
    snprintf(err, errlen, "%s: %s", what,
             rc == MDB_MAP_FULL ? "index map full (raise lmdb_map_size)" : mdb_strerror(rc));
}

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
    if (p[0] == STORE_IDXV_INLINE_FILE) {
        value_ref v;
        size_t used;
        if (len < STORE_IDXV_INLINE_FILE_HDR) {
            *why = "inline index value too short for its file id";
            return -1;
        }
        if (value_decode(p + STORE_IDXV_INLINE_FILE_HDR, len - STORE_IDXV_INLINE_FILE_HDR, &v,
                         &used, why) != 0)
            return -1;
        if (used != len - STORE_IDXV_INLINE_FILE_HDR) {
            *why = "inline index value has trailing bytes";
            return -1;
        }
        out->kind = v.kind;
        out->flags = v.flags;
        out->value = p + STORE_IDXV_INLINE_FILE_HDR;
        out->value_len = (uint32_t)used;
        out->file_id = get_be64(p + 1);
        out->entry_len = PG_INDEX_KEY_LEN + (uint32_t)used;
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

void store_idxv_encode_inline_hdr(uint64_t file_id, uint8_t out[STORE_IDXV_INLINE_FILE_HDR])
{
    out[0] = STORE_IDXV_INLINE_FILE;
    put_be64(out + 1, file_id);
}

void store_file_rec_encode(const store_file_rec *r, uint8_t out[STORE_FILE_REC_LEN])
{
    put_be64(out, r->file_size);
    put_be64(out + 8, r->value_bytes);
    put_be64(out + 16, r->live_bytes);
    put_be64(out + 24, r->values);
    put_be64(out + 32, r->live_values);
    put_be64(out + 40, r->lsn_min);
    put_be64(out + 48, r->lsn_max);
}

int store_file_rec_decode(const void *data, size_t len, store_file_rec *r)
{
    const uint8_t *p = data;
    if (len != STORE_FILE_REC_LEN && len != STORE_FILE_REC_LEN_V1)
        return -1;
    r->file_size = get_be64(p);
    r->value_bytes = get_be64(p + 8);
    r->live_bytes = get_be64(p + 16);
    r->values = get_be64(p + 24);
    r->live_values = get_be64(p + 32);
    r->lsn_min = len == STORE_FILE_REC_LEN ? get_be64(p + 40) : 0;
    r->lsn_max = len == STORE_FILE_REC_LEN ? get_be64(p + 48) : LSN_MAX;
    return r->lsn_min <= r->lsn_max ? 0 : -1;
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

int store_meta_get_u64(store *st, MDB_txn *txn, const char *name, uint64_t *out)
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

int store_meta_put_u64(store *st, MDB_txn *txn, const char *name, uint64_t v)
{
    uint8_t b[8];
    put_be64(b, v);
    MDB_val key = {strlen(name), (void *)name}, val = {8, b};
    return mdb_put(txn, st->dbi_meta, &key, &val, 0);
}
