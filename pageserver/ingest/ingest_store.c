/*
 * ingest_store.c: the store-backed entry points of ingest and import: the
 * ingest backend over a real store (and an optional redo pool for FILE_COPY
 * database creation) -- ingest_create() -- and import_pgdata().
 *
 * Kept apart from ingest.c and import.c so that those link without the store
 * (unit tests and the fuzzer give them an in-memory backend).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pageserver/ingest/import.h"
#include "pageserver/ingest/ingest_internal.h"

/* ---- store-backed backend -------------------------------------------- */

typedef struct store_backend {
    store *st;
    redo_pool *redo;
} store_backend;

static int sb_put(void *arg, const pg_key *k, lsn_t lsn, const value_ref *v, char *err,
                  size_t errlen)
{
    return store_put(((store_backend *)arg)->st, k, lsn, v, err, errlen);
}

static int sb_get_latest(void *arg, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found,
                         char *err, size_t errlen)
{
    return store_get_latest(((store_backend *)arg)->st, k, lsn, out, found, err, errlen);
}

static int sb_scan(void *arg, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
                   void *fnarg, char *err, size_t errlen)
{
    return store_scan(((store_backend *)arg)->st, from, to, lsn, fn, fnarg, err, errlen);
}

static int sb_get_page(void *arg, const pg_key *k, lsn_t lsn, uint8_t out[PG_BLCKSZ], char *err,
                       size_t errlen)
{
    store_backend *sb = arg;
    version_list *vl = NULL;
    if (store_get_versions(sb->st, k, lsn, 4096, &vl, err, errlen) != 0)
        return -1;
    int rc = -1;
    if (vl->n == 0) {
        memset(out, 0, PG_BLCKSZ);
        rc = 0;
    } else if (vl->n == 1 && vl->value[0].kind == VAL_IMAGE) {
        memcpy(out, vl->value[0].payload, PG_BLCKSZ);
        rc = 0;
    } else if (vl->n == 1 && vl->value[0].kind == VAL_ZERO_PAGE) {
        memset(out, 0, PG_BLCKSZ);
        rc = 0;
    } else if (sb->redo != NULL) {
        rc = redo_apply(sb->redo, k, vl, out, err, errlen);
    } else {
        char kb[96];
        snprintf(err, errlen, "%s needs redo to copy and no redo pool is configured",
                 pg_key_format(k, kb, sizeof kb));
    }
    version_list_free(vl);
    return rc;
}

ingest_state *ingest_create(store *st, redo_pool *redo)
{
    store_backend *sb = calloc(1, sizeof *sb);
    if (sb == NULL)
        return NULL;
    sb->st = st;
    sb->redo = redo;
    ingest_backend b = {
        .arg = sb,
        .put = sb_put,
        .get_latest = sb_get_latest,
        .scan = sb_scan,
        .get_page = sb_get_page,
    };
    ingest_options o;
    ingest_options_default(&o);
    if (redo != NULL)
        o.image_threshold = INGEST_IMAGE_THRESHOLD;
    ingest_state *ing = NULL;
    char err[128];
    if (ingest_create_with_backend(&o, &b, &ing, err, sizeof err) != 0) {
        free(sb);
        return NULL;
    }
    ing->owned_backend_arg = sb;
    ing->stats.last_end = store_last_record_lsn(st);
    return ing;
}

ingest_state *ingest_create_over(const ingest_backend *b, bool have_redo, lsn_t last_end)
{
    ingest_options o;
    ingest_options_default(&o);
    if (have_redo)
        o.image_threshold = INGEST_IMAGE_THRESHOLD;
    ingest_state *ing = NULL;
    char err[128];
    if (ingest_create_with_backend(&o, b, &ing, err, sizeof err) != 0)
        return NULL;
    ing->stats.last_end = last_end;
    return ing;
}

int import_pgdata(store *st, const char *pgdata, lsn_t *out_lsn, import_stats *stats, char *err,
                  size_t errlen)
{
    store_backend sb = {.st = st, .redo = NULL};
    ingest_backend b = {
        .arg = &sb,
        .put = sb_put,
        .get_latest = sb_get_latest,
        .scan = sb_scan,
        .get_page = sb_get_page,
    };
    lsn_t lsn;
    if (import_pgdata_backend(&b, pgdata, store_last_record_lsn(st), &lsn, stats, err, errlen) != 0)
        return -1;
    store_advance(st, lsn);
    if (store_flush(st, err, errlen) != 0)
        return -1;
    *out_lsn = lsn;
    return 0;
}
