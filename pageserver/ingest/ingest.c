/*
 * ingest.c: the core of WAL ingest -- block references, relation sizes, the
 * checkpoint, and the dispatch of records with effects beyond their blocks
 * to the rmgr-specific files (ingest_xact.c, ingest_misc.c).  See ingest.h
 * for the contract.
 *
 * Not for: reassembling records (common/pg/walformat.h), the network
 * (walreceiver.c), applying records (redo).
 *
 * Everything here runs on the store's writer thread.  Memory is bounded:
 * the size cache is a fixed-capacity open-addressing table that is emptied
 * when full (the store keeps the truth, the cache only saves reads).
 */
#include "pageserver/ingest/ingest.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "base/log.h"
#include "pageserver/ingest/ingest_internal.h"
#include "pg/pgstructs.h"

/* ---- creation -------------------------------------------------------- */

void ingest_options_default(ingest_options *o)
{
    memset(o, 0, sizeof *o);
    o->relsize_cache_entries = 65536;
    o->max_gap_fill = 65536;
    o->image_track_entries = 65536;
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

int ingest_create_with_backend(const ingest_options *o, const ingest_backend *b, ingest_state **out,
                               char *err, size_t errlen)
{
    ingest_options def;
    if (o == NULL) {
        ingest_options_default(&def);
        o = &def;
    }
    if (b == NULL || b->put == NULL || b->get_latest == NULL || b->scan == NULL ||
        b->get_page == NULL) {
        snprintf(err, errlen, "ingest backend lacks a function");
        return -1;
    }
    if (o->relsize_cache_entries < 16 || o->relsize_cache_entries > (1u << 24)) {
        snprintf(err, errlen, "relsize_cache_entries must be in [16, 16777216]");
        return -1;
    }
    ingest_state *ing = calloc(1, sizeof *ing);
    if (ing == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    ing->b = *b;
    ing->o = *o;
    ing->cache_cap = pow2_at_least(o->relsize_cache_entries * 2);
    ing->cache = calloc(ing->cache_cap, sizeof *ing->cache);
    if (ing->cache == NULL) {
        free(ing);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (o->image_threshold > 0 &&
        (o->image_track_entries < 16 || o->image_track_entries > (1u << 24))) {
        free(ing->cache);
        free(ing);
        snprintf(err, errlen, "image_track_entries must be in [16, 16777216]");
        return -1;
    }
    *out = ing;
    return 0;
}

void ingest_set_options(ingest_state *ing, const ingest_options *o)
{
    /* The cache capacities stay what they were created with. */
    size_t entries = ing->o.relsize_cache_entries;
    size_t track = ing->o.image_track_entries;
    ing->o = *o;
    ing->o.relsize_cache_entries = entries;
    ing->o.image_track_entries = track;
}

void ingest_destroy(ingest_state *ing)
{
    if (ing == NULL)
        return;
    free(ing->cache);
    free(ing->chains);
    free(ing->owned_backend_arg);
    free(ing);
}

void ingest_idle(ingest_state *ing)
{
    if (ing->o.record_hook != NULL)
        ing->o.record_hook(ing->o.record_hook_arg);
}

static void chain_note(ingest_state *ing, const pg_key *k, bool complete);

bool ingest_pressure_pending(ingest_state *ing)
{
    return ing->o.pressure_pending != NULL && ing->o.pressure_pending(ing->o.pressure_hook_arg);
}

void ingest_relieve_pressure(ingest_state *ing, lsn_t readable)
{
    assert(readable >= ing->stats.last_end);
    if (ing->o.pressure_wait != NULL)
        ing->o.pressure_wait(ing->o.pressure_hook_arg, readable);
}

void ingest_note_image(ingest_state *ing, const pg_key *k)
{
    if (ing->o.image_threshold > 0 && ing->chains != NULL)
        chain_note(ing, k, true);
}

void ingest_get_stats(const ingest_state *ing, ingest_stats *out)
{
    *out = ing->stats;
}

/* ---- puts ------------------------------------------------------------ */

static bool is_page_key(const pg_key *k)
{
    return k->kind == KEY_REL_BLOCK || k->kind == KEY_SLRU_BLOCK;
}

/* ---- image safety net ------------------------------------------------- */

static uint64_t page_hash(const pg_key *k)
{
    uint64_t h = 1469598103934665603ull;
    uint32_t parts[6] = {k->kind, k->spc, k->db, k->rel, k->fork, k->blk};
    for (int i = 0; i < 6; i++) {
        h ^= parts[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

/* The counter of page k, inserted at 0 if absent; NULL only if the table
 * cannot be allocated (the safety net then does nothing). */
static chain_entry *chain_find(ingest_state *ing, const pg_key *k)
{
    if (ing->chains == NULL) {
        ing->chains_cap = pow2_at_least(ing->o.image_track_entries * 2);
        ing->chains = calloc(ing->chains_cap, sizeof *ing->chains);
        if (ing->chains == NULL)
            return NULL;
    }
    size_t mask = ing->chains_cap - 1;
    size_t i = (size_t)page_hash(k) & mask;
    for (;;) {
        chain_entry *e = &ing->chains[i];
        if (!e->used) {
            if (ing->chains_count >= ing->o.image_track_entries) {
                /* Full: start counting afresh (chains may then grow past the
                 * threshold, never without bound while pages stay hot). */
                memset(ing->chains, 0, ing->chains_cap * sizeof *ing->chains);
                ing->chains_count = 0;
                return chain_find(ing, k);
            }
            e->used = true;
            e->k = *k;
            e->deltas = 0;
            ing->chains_count++;
            return e;
        }
        if (pg_key_compare(&e->k, k) == 0)
            return e;
        i = (i + 1) & mask;
    }
}

static void chain_note(ingest_state *ing, const pg_key *k, bool complete)
{
    chain_entry *e = chain_find(ing, k);
    if (e == NULL)
        return;
    if (complete) {
        e->deltas = 0;
        return;
    }
    if (e->deltas < UINT32_MAX)
        e->deltas++;
    if (e->deltas < ing->o.image_threshold)
        return;
    for (int i = 0; i < ing->npending; i++)
        if (pg_key_compare(&ing->pending[i], k) == 0)
            return;
    /* A full list leaves the count past the threshold: the page's next
     * delta tries again. */
    if (ing->npending < INGEST_MAX_PENDING_IMAGES)
        ing->pending[ing->npending++] = *k;
}

/* Rebuilds the pages whose chains reached the threshold in the record that
 * ends at end, and stores each as an image at end.  A page that cannot be
 * rebuilt is logged and counted, not fatal: its reads fail the same way. */
static int make_pending_images(ingest_state *ing, lsn_t end, char *err, size_t errlen)
{
    int n = ing->npending;
    ing->npending = 0;
    for (int i = 0; i < n; i++) {
        const pg_key *k = &ing->pending[i];
        uint8_t page[PG_BLCKSZ];
        char gerr[256];
        if (ing->b.get_page(ing->b.arg, k, end, page, gerr, sizeof gerr) != 0) {
            char kb[96], lb[LSN_FMT_LEN];
            log_warn("ingest: cannot rebuild %s at %s for an image: %s",
                     pg_key_format(k, kb, sizeof kb), lsn_format(end, lb), gerr);
            ing->stats.image_failures++;
            chain_entry *e = chain_find(ing, k);
            if (e != NULL)
                e->deltas = 0; /* try again only after another threshold */
            continue;
        }
        if (ingest_put(ing, k, end, VAL_IMAGE, 0, page, PG_BLCKSZ, err, errlen) != 0)
            return -1;
        ing->stats.images_generated++;
    }
    return 0;
}

int ingest_put(ingest_state *ing, const pg_key *k, lsn_t lsn, uint8_t kind, uint8_t flags,
               const uint8_t *payload, uint32_t len, char *err, size_t errlen)
{
    value_ref v = {.kind = kind, .flags = flags, .len = len, .payload = payload};
    if (ing->b.put(ing->b.arg, k, lsn, &v, err, errlen) != 0)
        return -1;
    ing->stats.values_put++;
    if (is_page_key(k)) {
        bool complete = value_is_complete(&v);
        if (ing->o.page_hook != NULL)
            ing->o.page_hook(ing->o.page_hook_arg, k, lsn, complete);
        if (ing->o.image_threshold > 0)
            chain_note(ing, k, complete);
    }
    return 0;
}

/* ---- size cache ------------------------------------------------------ */

static uint64_t size_hash(const pg_key *k)
{
    uint64_t h = 1469598103934665603ull;
    uint32_t parts[5] = {k->kind, k->spc, k->db, k->rel, k->fork};
    for (int i = 0; i < 5; i++) {
        h ^= parts[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

static bool size_key_eq(const size_entry *e, const pg_key *k)
{
    return e->kind == k->kind && e->spc == k->spc && e->db == k->db && e->rel == k->rel &&
           e->fork == k->fork;
}

static size_entry *cache_find(ingest_state *ing, const pg_key *k, bool insert)
{
    size_t mask = ing->cache_cap - 1;
    size_t i = (size_t)size_hash(k) & mask;
    for (;;) {
        size_entry *e = &ing->cache[i];
        if (!e->used) {
            if (!insert)
                return NULL;
            if (ing->cache_count >= ing->o.relsize_cache_entries) {
                /* Full: forget everything (the store has the truth). */
                memset(ing->cache, 0, ing->cache_cap * sizeof *ing->cache);
                ing->cache_count = 0;
                return cache_find(ing, k, true);
            }
            e->used = true;
            e->kind = k->kind;
            e->spc = k->spc;
            e->db = k->db;
            e->rel = k->rel;
            e->fork = k->fork;
            ing->cache_count++;
            return e;
        }
        if (size_key_eq(e, k))
            return e;
        i = (i + 1) & mask;
    }
}

int ingest_size_get(ingest_state *ing, const pg_key *sk, bool *exists, uint32_t *nblocks, char *err,
                    size_t errlen)
{
    size_entry *e = cache_find(ing, sk, false);
    if (e != NULL) {
        ing->stats.relsize_cache_hits++;
        *exists = e->exists;
        *nblocks = e->nblocks;
        return 0;
    }
    ing->stats.relsize_cache_misses++;
    value_ref v;
    lsn_t found;
    int rc = ing->b.get_latest(ing->b.arg, sk, LSN_MAX, &v, &found, err, errlen);
    if (rc < 0)
        return -1;
    bool ex = false;
    uint32_t n = 0;
    if (rc == 1) {
        if (v.kind == VAL_SIZE && v.len == 4) {
            ex = true;
            n = get_be32(v.payload);
        } else if (v.kind != VAL_TOMBSTONE) {
            char kb[96];
            snprintf(err, errlen, "%s holds value kind %u, not a size",
                     pg_key_format(sk, kb, sizeof kb), v.kind);
            free((void *)v.payload);
            return -1;
        }
        free((void *)v.payload);
    }
    e = cache_find(ing, sk, true);
    e->exists = ex;
    e->nblocks = n;
    *exists = ex;
    *nblocks = n;
    return 0;
}

int ingest_size_set(ingest_state *ing, const pg_key *sk, uint32_t nblocks, lsn_t lsn, char *err,
                    size_t errlen)
{
    uint8_t p[4];
    put_be32(p, nblocks);
    if (ingest_put(ing, sk, lsn, VAL_SIZE, 0, p, 4, err, errlen) != 0)
        return -1;
    size_entry *e = cache_find(ing, sk, true);
    e->exists = true;
    e->nblocks = nblocks;
    return 0;
}

int ingest_size_drop(ingest_state *ing, const pg_key *sk, lsn_t lsn, char *err, size_t errlen)
{
    if (ingest_put(ing, sk, lsn, VAL_TOMBSTONE, 0, NULL, 0, err, errlen) != 0)
        return -1;
    size_entry *e = cache_find(ing, sk, true);
    e->exists = false;
    e->nblocks = 0;
    return 0;
}

int ingest_rel_size(ingest_state *ing, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork,
                    uint32_t *nblocks, char *err, size_t errlen)
{
    pg_key sk = pg_key_rel_size(spc, db, rel, fork);
    bool ex;
    if (ingest_size_get(ing, &sk, &ex, nblocks, err, errlen) != 0)
        return -1;
    return ex ? 1 : 0;
}

/*
 * Makes blk part of the fork or SLRU segment whose size key is sk: a block
 * at or past the size extends it to blk + 1, and the blocks in between get
 * zero pages (at most max_gap_fill of them).  A missing fork is created.
 */
int ingest_extend(ingest_state *ing, const pg_key *sk, uint32_t blk, lsn_t lsn, char *err,
                  size_t errlen)
{
    bool ex;
    uint32_t n;
    if (ingest_size_get(ing, sk, &ex, &n, err, errlen) != 0)
        return -1;
    if (!ex) {
        n = 0;
        if (sk->kind == KEY_REL_SIZE)
            ing->stats.rels_created++;
    }
    if (ex && blk < n)
        return 0;
    if (blk == UINT32_MAX) {
        snprintf(err, errlen, "block number 4294967295 is not valid");
        return -1;
    }
    uint32_t filled = 0;
    for (uint32_t b = n; b < blk && filled < ing->o.max_gap_fill; b++, filled++) {
        pg_key bk = *sk;
        bk.kind = sk->kind == KEY_REL_SIZE ? KEY_REL_BLOCK : KEY_SLRU_BLOCK;
        bk.blk = b;
        if (ingest_put(ing, &bk, lsn, VAL_ZERO_PAGE, 0, NULL, 0, err, errlen) != 0)
            return -1;
        ing->stats.gap_zero_pages++;
    }
    return ingest_size_set(ing, sk, blk + 1, lsn, err, errlen);
}

/* ---- checkpoint -------------------------------------------------------- */

int ingest_checkpoint_load(ingest_state *ing, char *err, size_t errlen)
{
    if (ing->cp_loaded)
        return 0;
    pg_key k = {.kind = KEY_CHECKPOINT};
    value_ref v;
    lsn_t found;
    int rc = ing->b.get_latest(ing->b.arg, &k, LSN_MAX, &v, &found, err, errlen);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        if (v.kind == VAL_BLOB && v.len == PG_CHECKPOINT_SIZE) {
            memcpy(ing->cp, v.payload, PG_CHECKPOINT_SIZE);
            ing->cp_valid = true;
        }
        free((void *)v.payload);
    }
    ing->cp_loaded = true;
    return 0;
}

int ingest_checkpoint_store(ingest_state *ing, lsn_t lsn, char *err, size_t errlen)
{
    pg_key k = {.kind = KEY_CHECKPOINT};
    if (ingest_put(ing, &k, lsn, VAL_BLOB, 0, ing->cp, PG_CHECKPOINT_SIZE, err, errlen) != 0)
        return -1;
    ing->stats.checkpoint_updates++;
    ing->cp_dirty = false;
    return 0;
}

/* True if xid a logically follows b (modulo-2^32 comparison, transam.c). */
static bool xid_follows(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) > 0;
}

/*
 * Keeps the checkpoint's nextXid ahead of every xid seen, moving it in steps
 * of PG_XID_CHECKPOINT_INTERVAL so it is rewritten only once per 1024 xids.
 */
void ingest_note_xid(ingest_state *ing, uint32_t xid)
{
    if (!ing->cp_valid || xid < PG_FIRST_NORMAL_XID)
        return;
    uint64_t next = get_le64(ing->cp + PG_CP_NEXT_XID);
    uint32_t next32 = (uint32_t)next;
    if (xid_follows(next32, xid))
        return;
    uint32_t epoch = (uint32_t)(next >> 32);
    uint32_t target = xid + 1;
    uint32_t rounded =
        (target + PG_XID_CHECKPOINT_INTERVAL - 1) & ~(PG_XID_CHECKPOINT_INTERVAL - 1);
    /* Crossed 2^32: the epoch advances.  Postgres skips xids 0..2 at a
     * wraparound; keep the value a normal xid. */
    if (rounded < next32)
        epoch++;
    if (rounded < PG_FIRST_NORMAL_XID)
        rounded = PG_FIRST_NORMAL_XID;
    put_le64(ing->cp + PG_CP_NEXT_XID, ((uint64_t)epoch << 32) | rounded);
    ing->cp_dirty = true;
}

/* ---- images ---------------------------------------------------------- */

/* PostgreSQL's pglz format (common/pg_lzcompress.c), written from its
 * description: a control byte announces 8 items; a 0 bit is a literal byte,
 * a 1 bit a back-reference of 2-3 bytes (length 3..273, offset 1..4095).
 * Returns bytes produced, or -1 on malformed input. */
static long pglz_decode(const uint8_t *src, size_t slen, uint8_t *dst, size_t rawsize)
{
    size_t sp = 0, dp = 0;
    while (sp < slen && dp < rawsize) {
        uint8_t ctrl = src[sp++];
        for (int i = 0; i < 8 && sp < slen && dp < rawsize; i++, ctrl >>= 1) {
            if ((ctrl & 1) == 0) {
                dst[dp++] = src[sp++];
                continue;
            }
            if (sp + 2 > slen)
                return -1;
            size_t len = (size_t)(src[sp] & 0x0f) + 3;
            size_t off = ((size_t)(src[sp] & 0xf0) << 4) | src[sp + 1];
            sp += 2;
            if (len == 18) {
                if (sp >= slen)
                    return -1;
                len += src[sp++];
            }
            if (off == 0 || off > dp)
                return -1;
            if (len > rawsize - dp)
                len = rawsize - dp;
            for (size_t j = 0; j < len; j++, dp++)
                dst[dp] = dst[dp - off];
        }
    }
    return (long)dp;
}

/*
 * Rebuilds the 8 KB page of a block's full-page image.  Returns 1 with the
 * page, 0 if the image uses a compression this build does not decode (the
 * caller then stores the record, which redo can apply), -1 if malformed.
 */
int ingest_restore_image(const wal_block_ref *b, uint8_t page[PG_BLCKSZ], char *err, size_t errlen)
{
    uint8_t tmp[PG_BLCKSZ];
    const uint8_t *img = b->bimg;
    size_t hole_off = b->hole_offset, hole_len = b->hole_length;
    if (hole_off + hole_len > PG_BLCKSZ) {
        snprintf(err, errlen, "image hole %zu+%zu runs past the page", hole_off, hole_len);
        return -1;
    }
    size_t want = PG_BLCKSZ - hole_len;
    if (WAL_BKPIMAGE_COMPRESSED(b->bimg_info)) {
        if (b->bimg_info & WAL_BKPIMAGE_COMPRESS_PGLZ) {
            long got = pglz_decode(b->bimg, b->bimg_len, tmp, want);
            if (got != (long)want) {
                snprintf(err, errlen, "pglz image does not decompress to %zu bytes", want);
                return -1;
            }
        } else if (b->bimg_info & WAL_BKPIMAGE_COMPRESS_ZSTD) {
            size_t got = ZSTD_decompress(tmp, want, b->bimg, b->bimg_len);
            if (ZSTD_isError(got) || got != want) {
                snprintf(err, errlen, "zstd image does not decompress to %zu bytes", want);
                return -1;
            }
        } else {
            return 0; /* lz4: left to redo */
        }
        img = tmp;
    } else if (b->bimg_len != want) {
        snprintf(err, errlen, "image length %u does not match hole length %zu", b->bimg_len,
                 hole_len);
        return -1;
    }
    memcpy(page, img, hole_off);
    memset(page + hole_off, 0, hole_len);
    memcpy(page + hole_off + hole_len, img + hole_off, PG_BLCKSZ - hole_off - hole_len);
    return 1;
}

static bool page_all_zero(const uint8_t *p)
{
    for (size_t i = 0; i < PG_BLCKSZ; i++)
        if (p[i] != 0)
            return false;
    return true;
}

/* ---- block references ------------------------------------------------ */

static int ingest_blocks(ingest_state *ing, lsn_t end, const wal_record *rec, char *err,
                         size_t errlen)
{
    uint8_t info = rec->hdr.info & WAL_XLR_RMGR_INFO_MASK;
    bool standalone_fpi =
        rec->hdr.rmid == PG_RM_XLOG && (info == PG_XLOG_FPI || info == PG_XLOG_FPI_FOR_HINT);
    for (int id = 0; id <= rec->max_block_id; id++) {
        const wal_block_ref *b = &rec->blocks[id];
        if (!b->in_use)
            continue;
        if (b->fork > FORK_MAX) {
            snprintf(err, errlen, "block %d has fork %u", id, b->fork);
            return -1;
        }
        pg_key sk = pg_key_rel_size(b->spc, b->db, b->rel, b->fork);
        if (ingest_extend(ing, &sk, b->blkno, end, err, errlen) != 0)
            return -1;
        pg_key k = pg_key_rel_block(b->spc, b->db, b->rel, b->fork, b->blkno);
        if (standalone_fpi && b->has_image && b->apply_image) {
            uint8_t page[PG_BLCKSZ];
            int rc = ingest_restore_image(b, page, err, errlen);
            if (rc < 0)
                return -1;
            if (rc == 1) {
                int prc;
                if (page_all_zero(page)) {
                    prc = ingest_put(ing, &k, end, VAL_ZERO_PAGE, 0, NULL, 0, err, errlen);
                } else {
                    /* Redo stamps a restored page that is not new with the
                     * record's end (XLogReadBufferForRedoExtended). */
                    if (get_le16(page + PG_PAGE_UPPER_OFF) != 0) {
                        put_le32(page + PG_PAGE_LSN_OFF, (uint32_t)(end >> 32));
                        put_le32(page + PG_PAGE_LSN_OFF + 4, (uint32_t)end);
                    }
                    prc = ingest_put(ing, &k, end, VAL_IMAGE, 0, page, PG_BLCKSZ, err, errlen);
                }
                if (prc != 0)
                    return -1;
                ing->stats.images++;
                continue;
            }
        }
        uint8_t flags = (b->will_init || (b->has_image && b->apply_image)) ? VALUE_WILL_INIT : 0;
        if (ingest_put(ing, &k, end, VAL_WAL_RECORD, flags, rec->raw, rec->hdr.tot_len, err,
                       errlen) != 0)
            return -1;
        ing->stats.wal_records++;
    }
    return 0;
}

/* ---- XLOG rmgr ------------------------------------------------------- */

static int ingest_xlog(ingest_state *ing, lsn_t start, lsn_t end, const wal_record *rec, char *err,
                       size_t errlen)
{
    uint8_t info = rec->hdr.info & WAL_XLR_RMGR_INFO_MASK;
    const uint8_t *d = rec->main_data;
    uint32_t len = rec->main_data_len;
    switch (info) {
    case PG_XLOG_CHECKPOINT_SHUTDOWN:
    case PG_XLOG_CHECKPOINT_ONLINE: {
        if (len != PG_CHECKPOINT_SIZE) {
            snprintf(err, errlen, "checkpoint record main data is %u bytes, not %d", len,
                     PG_CHECKPOINT_SIZE);
            return -1;
        }
        uint8_t old[PG_CHECKPOINT_SIZE];
        bool had = ing->cp_valid;
        memcpy(old, ing->cp, sizeof old);
        memcpy(ing->cp, d, PG_CHECKPOINT_SIZE);
        ing->cp_valid = true;
        if (had) {
            /* Counters only move forward: ours may be ahead of an online
             * checkpoint that began before later records. */
            uint64_t onx = get_le64(old + PG_CP_NEXT_XID);
            if (onx > get_le64(ing->cp + PG_CP_NEXT_XID))
                put_le64(ing->cp + PG_CP_NEXT_XID, onx);
            uint32_t om = get_le32(old + PG_CP_NEXT_MULTI);
            if (xid_follows(om, get_le32(ing->cp + PG_CP_NEXT_MULTI)))
                put_le32(ing->cp + PG_CP_NEXT_MULTI, om);
            uint32_t oo = get_le32(old + PG_CP_NEXT_MULTI_OFFSET);
            if (xid_follows(oo, get_le32(ing->cp + PG_CP_NEXT_MULTI_OFFSET)))
                put_le32(ing->cp + PG_CP_NEXT_MULTI_OFFSET, oo);
        }
        if (info == PG_XLOG_CHECKPOINT_SHUTDOWN)
            put_le64(ing->cp + PG_CP_REDO, start);
        ing->cp_dirty = true;
        return ingest_checkpoint_record(ing, start, end, info, d, err, errlen);
    }
    case PG_XLOG_NEXTOID:
        if (len != 4) {
            snprintf(err, errlen, "nextoid record main data is %u bytes, not 4", len);
            return -1;
        }
        if (ing->cp_valid) {
            memcpy(ing->cp + PG_CP_NEXT_OID, d, 4);
            ing->cp_dirty = true;
        }
        return 0;
    case PG_XLOG_END_OF_RECOVERY:
        if (len != PG_END_OF_RECOVERY_SIZE) {
            snprintf(err, errlen, "end-of-recovery record main data is %u bytes, not %d", len,
                     PG_END_OF_RECOVERY_SIZE);
            return -1;
        }
        if (ing->cp_valid) {
            memcpy(ing->cp + PG_CP_THIS_TLI, d + PG_EOR_THIS_TLI, 4);
            memcpy(ing->cp + PG_CP_PREV_TLI, d + PG_EOR_PREV_TLI, 4);
            ing->cp_dirty = true;
        }
        return 0;
    case PG_XLOG_PARAMETER_CHANGE:
        if (len != PG_PARAM_CHANGE_SIZE) {
            snprintf(err, errlen, "parameter-change record main data is %u bytes, not %d", len,
                     PG_PARAM_CHANGE_SIZE);
            return -1;
        }
        return ingest_parameter_change(ing, end, d, err, errlen);
    default:
        return 0;
    }
}

/* ---- the entry point ------------------------------------------------- */

int ingest_record(ingest_state *ing, lsn_t start, lsn_t end, const wal_record *rec, char *err,
                  size_t errlen)
{
    if (ing->stats.last_end != LSN_INVALID && end <= ing->stats.last_end) {
        char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
        snprintf(err, errlen, "record ending at %s is not after the last ingested (%s)",
                 lsn_format(end, a), lsn_format(ing->stats.last_end, b));
        return -1;
    }
    if (ingest_checkpoint_load(ing, err, errlen) != 0)
        return -1;
    ing->npending = 0; /* a failed record's list is stale */
    if (ing->o.record_hook != NULL)
        ing->o.record_hook(ing->o.record_hook_arg);
    if (ingest_blocks(ing, end, rec, err, errlen) != 0)
        return -1;
    int rc = 0;
    switch (rec->hdr.rmid) {
    case PG_RM_XLOG:
        rc = ingest_xlog(ing, start, end, rec, err, errlen);
        break;
    case PG_RM_XACT:
        rc = ingest_xact(ing, end, rec, err, errlen);
        break;
    case PG_RM_SMGR:
        rc = ingest_smgr(ing, end, rec, err, errlen);
        break;
    case PG_RM_CLOG:
        rc = ingest_clog(ing, end, rec, err, errlen);
        break;
    case PG_RM_DBASE:
        rc = ingest_dbase(ing, end, rec, err, errlen);
        break;
    case PG_RM_MULTIXACT:
        rc = ingest_multixact(ing, end, rec, err, errlen);
        break;
    case PG_RM_RELMAP:
        rc = ingest_relmap(ing, end, rec, err, errlen);
        break;
    case PG_RM_HEAP:
    case PG_RM_HEAP2:
        rc = ingest_heap_vm(ing, end, rec, err, errlen);
        break;
    case PG_RM_LOGICALMSG:
        rc = ingest_logical_message(ing, end, rec, err, errlen);
        break;
    default:
        break;
    }
    if (rc != 0)
        return -1;
    if (ing->npending > 0 && make_pending_images(ing, end, err, errlen) != 0)
        return -1;
    ingest_note_xid(ing, rec->hdr.xid);
    if (ing->cp_dirty && ingest_checkpoint_store(ing, end, err, errlen) != 0)
        return -1;
    ing->stats.records++;
    ing->stats.last_end = end;
    return 0;
}
