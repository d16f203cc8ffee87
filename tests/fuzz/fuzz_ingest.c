/*
 * fuzz_ingest: arbitrary records into WAL ingest (pageserver/ingest/ingest.h).
 *
 * Input: byte 0 selects the mode.
 *   mode even: the rest is one raw XLogRecord; xl_tot_len and xl_crc are
 *     patched to be right so that wal_record_decode accepts what it can and
 *     the rmgr payloads reach ingest.
 *   mode odd: a record built directly: rmid (byte 1, mod 22), info (byte 2),
 *     xid (bytes 3-6), block count (byte 7, mod 3), per block 9 bytes
 *     (rel u32, fork u8, blkno u32 mod 4096); the rest is the main data --
 *     this reaches every length check with any main data at all (rmid 21,
 *     logical messages, reaches the postgresql.auto.conf decoder; seed
 *     corpus/fuzz_ingest/auto_conf is a valid one).
 * The in-memory backend is seeded with a checkpoint, a pg_control, sizes for
 * a relation's four forks and a CLOG segment, so truncation, VM clears,
 * database copy/drop and parameter changes run over real state.  The record
 * is ingested twice (LSNs 0x1000 and 0x2000).  Ingest must never crash, must
 * fill err when it fails, and must keep every put value decodable.
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "pg/walformat.h"
#include "pageserver/ingest/ingest.h"
#include "pg/pgstructs.h"

#define MAX_VALUES 8192

typedef struct fval {
    pg_key k;
    lsn_t lsn;
    uint8_t kind, flags;
    uint32_t len;
    uint8_t *payload;
} fval;

static fval vals[MAX_VALUES];
static size_t nvals;

static int f_put(void *arg, const pg_key *k, lsn_t lsn, const value_ref *v, char *err,
                 size_t errlen)
{
    (void)arg;
    if (nvals == MAX_VALUES) {
        snprintf(err, errlen, "fuzz backend full");
        return -1;
    }
    /* What ingest puts must be a valid value. */
    uint8_t enc[VALUE_HEADER_LEN + 16];
    if (v->len <= 16) {
        size_t n = value_encode(v, enc, sizeof enc);
        assert(n == VALUE_HEADER_LEN + v->len);
        value_ref back;
        size_t used;
        const char *why;
        assert(value_decode(enc, n, &back, &used, &why) == 0);
    }
    assert(v->len <= VALUE_MAX_PAYLOAD);
    fval *f = &vals[nvals++];
    f->k = *k;
    f->lsn = lsn;
    f->kind = v->kind;
    f->flags = v->flags;
    f->len = v->len;
    f->payload = malloc(v->len ? v->len : 1);
    assert(f->payload != NULL);
    if (v->len)
        memcpy(f->payload, v->payload, v->len);
    return 0;
}

static const fval *f_find(const pg_key *k, lsn_t lsn)
{
    const fval *best = NULL;
    for (size_t i = 0; i < nvals; i++)
        if (vals[i].lsn <= lsn && pg_key_compare(&vals[i].k, k) == 0 &&
            (best == NULL || vals[i].lsn >= best->lsn))
            best = &vals[i];
    return best;
}

static int f_latest(void *arg, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found, char *err,
                    size_t errlen)
{
    (void)arg, (void)err, (void)errlen;
    const fval *f = f_find(k, lsn);
    if (f == NULL)
        return 0;
    uint8_t *p = malloc(f->len ? f->len : 1);
    assert(p != NULL);
    memcpy(p, f->payload, f->len);
    *out = (value_ref){.kind = f->kind, .flags = f->flags, .len = f->len, .payload = p};
    *found = f->lsn;
    return 1;
}

static int f_scan(void *arg, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
                  void *fnarg, char *err, size_t errlen)
{
    (void)arg, (void)err, (void)errlen;
    /* Distinct keys in range, newest value each (order is not needed here). */
    for (size_t i = 0; i < nvals; i++) {
        const pg_key *k = &vals[i].k;
        if (pg_key_compare(k, from) < 0 || pg_key_compare(k, to) >= 0 || vals[i].lsn > lsn)
            continue;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = pg_key_compare(&vals[j].k, k) == 0;
        if (seen)
            continue;
        const fval *f = f_find(k, lsn);
        value_ref v = {.kind = f->kind, .flags = f->flags, .len = f->len, .payload = f->payload};
        if (fn(k, f->lsn, &v, fnarg) != 0)
            break;
    }
    return 0;
}

static int f_page(void *arg, const pg_key *k, lsn_t lsn, uint8_t out[PG_BLCKSZ], char *err,
                  size_t errlen)
{
    (void)arg;
    const fval *f = f_find(k, lsn);
    if (f != NULL && f->kind == VAL_IMAGE) {
        memcpy(out, f->payload, PG_BLCKSZ);
        return 0;
    }
    if (f != NULL && f->kind != VAL_ZERO_PAGE) {
        snprintf(err, errlen, "no redo");
        return -1;
    }
    memset(out, 0, PG_BLCKSZ);
    return 0;
}

static void seed_state(void)
{
    static uint8_t cp[PG_CHECKPOINT_SIZE], ctl[PG_CONTROL_FILE_SIZE];
    put_le64(cp + PG_CP_NEXT_XID, 1000);
    put_le32(cp + PG_CP_NEXT_MULTI, 1);
    char err[64];
    pg_key ck = {.kind = KEY_CHECKPOINT}, cc = {.kind = KEY_CONTROL};
    value_ref v = {.kind = VAL_BLOB, .len = sizeof cp, .payload = cp};
    f_put(NULL, &ck, 1, &v, err, sizeof err);
    v.len = sizeof ctl;
    v.payload = ctl;
    f_put(NULL, &cc, 1, &v, err, sizeof err);
    uint8_t sz[4] = {0, 0, 0, 40};
    v = (value_ref){.kind = VAL_SIZE, .len = 4, .payload = sz};
    for (uint8_t f = 0; f <= FORK_MAX; f++) {
        pg_key k = pg_key_rel_size(1663, 5, 16384, f);
        f_put(NULL, &k, 1, &v, err, sizeof err);
    }
    pg_key s = {.kind = KEY_SLRU_SIZE, .fork = SLRU_CLOG, .rel = 0};
    f_put(NULL, &s, 1, &v, err, sizeof err);
}

static uint8_t raw[1 << 16];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > sizeof raw)
        return 0;
    wal_record rec;
    memset(&rec, 0, sizeof rec);
    if ((data[0] & 1) == 0) {
        size_t len = size - 1;
        if (len < WAL_RECORD_HEADER_SIZE)
            return 0;
        memcpy(raw, data + 1, len);
        put_le32(raw, (uint32_t)len);
        put_le32(raw + WAL_RECORD_CRC_OFFSET, wal_record_compute_crc(raw, len));
        const char *why;
        if (wal_record_decode(raw, len, &rec, &why) != 0)
            return 0;
    } else {
        if (size < 8)
            return 0;
        size_t off = 8;
        int nb = data[7] % 3;
        if (size < off + 9 * (size_t)nb)
            return 0;
        rec.hdr.rmid = data[1] % 22;
        rec.hdr.info = data[2];
        rec.hdr.xid = get_le32(data + 3);
        rec.max_block_id = nb - 1;
        for (int i = 0; i < nb; i++, off += 9) {
            wal_block_ref *b = &rec.blocks[i];
            b->in_use = true;
            b->spc = 1663;
            b->db = 5;
            b->rel = get_le32(data + off) % 4 == 0 ? 16384 : get_le32(data + off);
            b->fork = data[off + 4] % 4;
            b->blkno = get_le32(data + off + 5) % 4096;
            b->will_init = data[off + 4] & 0x80;
        }
        /* The stored record: a minimal valid header. */
        memset(raw, 0, WAL_RECORD_HEADER_SIZE);
        put_le32(raw, WAL_RECORD_HEADER_SIZE);
        raw[17] = rec.hdr.rmid;
        rec.raw = raw;
        rec.hdr.tot_len = WAL_RECORD_HEADER_SIZE;
        size_t mlen = size - off;
        if (mlen > sizeof raw - 4096)
            return 0;
        memcpy(raw + 4096, data + off, mlen);
        rec.main_data_len = (uint32_t)mlen;
        rec.main_data = mlen ? raw + 4096 : NULL;
    }

    nvals = 0;
    seed_state();
    ingest_backend be = {.put = f_put, .get_latest = f_latest, .scan = f_scan, .get_page = f_page};
    ingest_options o;
    ingest_options_default(&o);
    o.max_gap_fill = 8;
    o.relsize_cache_entries = 16;
    ingest_state *ing = NULL;
    char err[256];
    int rc = ingest_create_with_backend(&o, &be, &ing, err, sizeof err);
    assert(rc == 0);
    for (lsn_t end = 0x1000; end <= 0x2000; end += 0x1000) {
        err[0] = '\0';
        rc = ingest_record(ing, end - 0x100, end, &rec, err, sizeof err);
        assert(rc == 0 || (rc == -1 && err[0] != '\0'));
    }
    ingest_destroy(ing);
    for (size_t i = 0; i < nvals; i++)
        free(vals[i].payload);
    nvals = 0;
    return 0;
}
