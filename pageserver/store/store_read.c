/*
 * store_read.c: the store's read paths (store_get_versions, store_get_latest,
 * store_scan in store.h; docs/design.md §6.3).
 *
 * For: merging a read snapshot's layers (open, then frozen, newest first) with
 * the LMDB index under one read transaction, newest version first, and
 * reading a value an index entry names (inline, or a data file block through
 * the block cache).
 * Not for: writing (store.c), the data-file commit (store_commit.c), GC
 * (store_gc.c).
 *
 * A read takes its store snapshot before its LMDB transaction: a flush that
 * commits in between leaves its frozen layer in the snapshot, so nothing is
 * missed, and a (key, LSN) found in both is taken from the layer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/durable.h"
#include "base/strata_assert.h"
#include "pageserver/store/store.h"
#include "pageserver/store/store_priv.h"

/* Reads the value an index entry names (see store_priv.h). */
int store_read_idxv(store *st, const store_snap *snap, const store_idxv *iv,
                    const uint8_t ikey[PG_INDEX_KEY_LEN], value_ref *out,
                    const store_cache_block **hold, char *err, size_t errlen)
{
    const char *why = NULL;
    size_t used;
    *hold = NULL;
    if (store_idxv_is_inline(iv)) {
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

/* The layers of snap (open, then frozen newest first) that hold versions
 * of key at or below lsn, each positioned at its newest such version, into
 * src.  Returns how many. */
static int layer_sources(store_snap *snap, const uint8_t key[PG_KEY_LEN], lsn_t lsn, vsrc *src)
{
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
    return nsrc;
}

/* The layer source whose current version is newest (the first, that is the
 * newer layer, on equal LSNs), with its LSN in *best_lsn; -1 if none is
 * left. */
static int newest_source(const vsrc *src, int nsrc, lsn_t *best_lsn)
{
    int best = -1;
    for (int i = 0; i < nsrc; i++) {
        if (src[i].pos < 0)
            continue;
        lsn_t l = src[i].v[src[i].pos].lsn;
        if (best < 0 || l > *best_lsn) {
            best = i;
            *best_lsn = l;
        }
    }
    return best;
}

/* Reads one version into *val: the current version of layer source from,
 * or (from NULL) the index entry (mk, mv), whose bytes may be held in the
 * cache (*hold, released by the caller).  0, or -1 with err. */
static int read_version(store *st, store_snap *snap, const vsrc *from, const MDB_val *mk,
                        const MDB_val *mv, value_ref *val, const store_cache_block **hold,
                        char *err, size_t errlen)
{
    const char *why;
    if (from == NULL) {
        store_idxv iv;
        if (store_idxv_decode(mv->mv_data, mv->mv_size, &iv, &why) != 0) {
            snprintf(err, errlen, "corrupt index value: %s", why);
            return -1;
        }
        return store_read_idxv(st, snap, &iv, mk->mv_data, val, hold, err, errlen);
    }
    const store_layer_version *ver = &from->v[from->pos];
    size_t used;
    /* In place: the snapshot holds the layer; vbuild_add copies. */
    if (value_decode(store_layer_data(from->layer, ver), ver->len, val, &used, &why) != 0) {
        snprintf(err, errlen, "open layer value fails to decode: %s", why);
        return -1;
    }
    return 0;
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
    int nsrc = layer_sources(snap, key, lsn, src);
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
        lsn_t best_lsn = 0;
        bool best_db = false;
        int best = newest_source(src, nsrc, &best_lsn);
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
        if (read_version(st, snap, best_db ? NULL : &src[best], &mk, &mv, &val, &hold, err,
                         errlen) != 0) {
            ret = -1;
            break;
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

/* One store_scan: the sources merged in key order. */
typedef struct scan_state {
    store *st;
    store_snap *snap;
    lsn_t lsn;
    uint8_t kto[PG_KEY_LEN];
    scan_layer sl[STORE_MAX_FROZEN + 1]; /* open layer, then frozen, newest first */
    int nl;
    MDB_cursor *cur;
    bool db_more;               /* db_key is valid */
    uint8_t db_key[PG_KEY_LEN]; /* the index's next key >= position, < kto */
    uint8_t *tmp;               /* an open-layer value being read */
    size_t tmp_cap;
} scan_state;

/* Each layer's keys in [kfrom, kto).  0 or -1 with err. */
static int scan_open_layers(scan_state *sc, const uint8_t kfrom[PG_KEY_LEN], char *err,
                            size_t errlen)
{
    store_layer *layers[STORE_MAX_FROZEN + 1];
    int nlayers = 0;
    layers[nlayers++] = sc->snap->open;
    for (int i = 0; i < sc->snap->nfrozen; i++)
        layers[nlayers++] = sc->snap->frozen[i];
    for (int i = 0; i < nlayers; i++) {
        scan_layer *l = &sc->sl[sc->nl];
        *l = (scan_layer){.layer = layers[i]};
        if (store_layer_sorted_keys(layers[i], kfrom, sc->kto, &l->keys, &l->n) != 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        sc->nl++;
    }
    return 0;
}

/* Advances the index side to its next key at or after pos.  0 or -1 with err. */
static int scan_db_advance(scan_state *sc, const uint8_t pos[PG_KEY_LEN], char *err, size_t errlen)
{
    if (!sc->db_more)
        return 0;
    uint8_t probe[PG_INDEX_KEY_LEN] = {0};
    memcpy(probe, pos, PG_KEY_LEN);
    MDB_val k = {sizeof probe, probe}, v;
    int rc = mdb_cursor_get(sc->cur, &k, &v, MDB_SET_RANGE);
    if (rc == MDB_NOTFOUND || (rc == 0 && memcmp(k.mv_data, sc->kto, PG_KEY_LEN) >= 0)) {
        sc->db_more = false;
    } else if (rc != 0) {
        store_mdb_err(err, errlen, "scan index", rc);
        return -1;
    } else {
        memcpy(sc->db_key, k.mv_data, PG_KEY_LEN);
    }
    return 0;
}

/* The smallest key at or after pos among all sources; NULL when none is
 * left.  Moves each layer's position up to pos. */
static const uint8_t *scan_smallest_key(scan_state *sc, const uint8_t pos[PG_KEY_LEN])
{
    const uint8_t *next = sc->db_more ? sc->db_key : NULL;
    for (int i = 0; i < sc->nl; i++) {
        scan_layer *l = &sc->sl[i];
        while (l->pos < l->n && memcmp(l->keys[l->pos]->key, pos, PG_KEY_LEN) < 0)
            l->pos++;
        if (l->pos < l->n && (next == NULL || memcmp(l->keys[l->pos]->key, next, PG_KEY_LEN) < 0))
            next = l->keys[l->pos]->key;
    }
    return next;
}

/* The newest layer version of key at or below the scan's LSN: the layer's
 * index, or -1 when no layer has one. */
static int scan_newest_in_layers(scan_state *sc, const uint8_t key[PG_KEY_LEN],
                                 const store_layer_version **best_ver)
{
    int best = -1;
    for (int i = 0; i < sc->nl; i++) {
        scan_layer *l = &sc->sl[i];
        if (l->pos >= l->n || memcmp(l->keys[l->pos]->key, key, PG_KEY_LEN) != 0)
            continue;
        uint32_t n;
        const store_layer_version *v = store_layer_versions(l->keys[l->pos], &n);
        int p = store_layer_find_at(v, n, sc->lsn);
        if (p >= 0 && (best < 0 || v[p].lsn > (*best_ver)->lsn)) {
            best = i;
            *best_ver = &v[p];
        }
    }
    return best;
}

/* Decodes layer version ver of layer l into *val (through sc->tmp).  0 or -1
 * with err. */
static int scan_read_layer_value(scan_state *sc, store_layer *l, const store_layer_version *ver,
                                 value_ref *val, char *err, size_t errlen)
{
    if (ver->len > sc->tmp_cap) {
        uint8_t *nt = realloc(sc->tmp, ver->len);
        if (nt == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        sc->tmp = nt;
        sc->tmp_cap = ver->len;
    }
    size_t used;
    const char *why;
    if (store_layer_read(l, ver, sc->tmp, err, errlen) != 0)
        return -1;
    if (value_decode(sc->tmp, ver->len, val, &used, &why) != 0) {
        snprintf(err, errlen, "open layer value fails to decode: %s", why);
        return -1;
    }
    return 0;
}

/* The newest version of key at or below the scan's LSN: layers first, then
 * the index (a newer index version wins).  1 found (*val, *found_lsn; *hold
 * pins its block), 0 none, -1 with err. */
static int scan_read_key(scan_state *sc, const uint8_t key[PG_KEY_LEN], value_ref *val,
                         const store_cache_block **hold, lsn_t *found_lsn, char *err, size_t errlen)
{
    const store_layer_version *best_ver = NULL;
    int best = scan_newest_in_layers(sc, key, &best_ver);
    MDB_val mk, mv;
    int have_db = 0;
    if (sc->db_more && memcmp(sc->db_key, key, PG_KEY_LEN) == 0) {
        have_db = cursor_seek_le(sc->cur, key, sc->lsn, &mk, &mv);
        if (have_db < 0) {
            snprintf(err, errlen, "scan index: cursor failed");
            return -1;
        }
    }
    *hold = NULL;
    lsn_t db_lsn = have_db ? get_be64((const uint8_t *)mk.mv_data + PG_KEY_LEN) : 0;
    if (have_db && (best < 0 || db_lsn > best_ver->lsn)) {
        store_idxv iv;
        const char *why;
        if (store_idxv_decode(mv.mv_data, mv.mv_size, &iv, &why) != 0) {
            snprintf(err, errlen, "corrupt index value: %s", why);
            return -1;
        }
        if (store_read_idxv(sc->st, sc->snap, &iv, mk.mv_data, val, hold, err, errlen) != 0)
            return -1;
        *found_lsn = db_lsn;
    } else if (best >= 0) {
        if (scan_read_layer_value(sc, sc->sl[best].layer, best_ver, val, err, errlen) != 0)
            return -1;
        *found_lsn = best_ver->lsn;
    } else {
        return 0;
    }
    /* Both sources were searched at or below the scan's LSN. */
    STRATA_ASSERT(*found_lsn <= sc->lsn);
    return 1;
}

int store_scan(store *st, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
               void *arg, char *err, size_t errlen)
{
    scan_state sc = {.st = st, .lsn = lsn, .db_more = true};
    uint8_t kfrom[PG_KEY_LEN];
    pg_key_encode(from, kfrom);
    pg_key_encode(to, sc.kto);
    if (memcmp(kfrom, sc.kto, PG_KEY_LEN) >= 0)
        return 0;
    MDB_txn *txn;
    if (read_begin(st, &sc.snap, &txn, err, errlen) != 0)
        return -1;
    int ret = scan_open_layers(&sc, kfrom, err, errlen);
    int rc = ret == 0 ? mdb_cursor_open(txn, st->dbi_index, &sc.cur) : 0;
    if (rc != 0) {
        sc.cur = NULL;
        store_mdb_err(err, errlen, "open cursor", rc);
        ret = -1;
    }
    uint8_t pos[PG_KEY_LEN];
    memcpy(pos, kfrom, PG_KEY_LEN);
    while (ret == 0 && (ret = scan_db_advance(&sc, pos, err, errlen)) == 0) {
        const uint8_t *next = scan_smallest_key(&sc, pos);
        if (next == NULL)
            break;
        uint8_t key[PG_KEY_LEN];
        memcpy(key, next, PG_KEY_LEN);
        value_ref val;
        const store_cache_block *hold;
        lsn_t found_lsn;
        int found = scan_read_key(&sc, key, &val, &hold, &found_lsn, err, errlen);
        if (found < 0) {
            ret = -1;
            break;
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
        if (!key_successor(pos) || memcmp(pos, sc.kto, PG_KEY_LEN) >= 0)
            break;
    }
    if (sc.cur != NULL)
        mdb_cursor_close(sc.cur);
    for (int i = 0; i < sc.nl; i++)
        free(sc.sl[i].keys);
    free(sc.tmp);
    read_end(st, sc.snap, txn);
    return ret;
}
