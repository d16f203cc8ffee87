/*
 * ingest_tool.c: a test program that imports a shut-down data directory and
 * ingests WAL segment files after it, then prints what ingest concluded, so
 * an integration test can compare it with the real server.
 *
 *   strata-ingest-tool --import PGDATA --wal WALDIR [--tli N]
 *
 * Output lines (stdout):
 *   import <lsn>                       the import LSN
 *   end <lsn> <records> <reason>       where ingest stopped and why
 *   rel <spc> <db> <rel> <fork> <n>    every existing relation fork and its size
 *   db <spc> <db>                      every existing database
 *   xid <xid> <committed|aborted>      the CLOG status ingest set for each xid
 *   twophase <xid>                     every prepared transaction still pending
 *
 * The backend is in memory and keeps only the newest value of each key (all
 * ingest reads), so the tool checks ingest's logic, not the store.
 * Not for: production use.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pg/walformat.h"
#include "pageserver/ingest/import.h"
#include "pageserver/ingest/ingest.h"
#include "pg/pgstructs.h"

typedef struct slot {
    bool used;
    pg_key k;
    lsn_t lsn;
    uint8_t kind, flags;
    uint32_t len;
    uint8_t *payload;
} slot;

static slot *tab;
static size_t cap = 1 << 16, count;

static uint64_t khash(const pg_key *k)
{
    uint8_t b[PG_KEY_LEN];
    pg_key_encode(k, b);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < PG_KEY_LEN; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static slot *find(const pg_key *k, bool insert)
{
    if (insert && (count + 1) * 2 > cap) {
        slot *old = tab;
        size_t oc = cap;
        cap *= 2;
        tab = calloc(cap, sizeof *tab);
        if (tab == NULL)
            abort();
        count = 0;
        for (size_t i = 0; i < oc; i++)
            if (old[i].used) {
                slot *s = find(&old[i].k, true);
                *s = old[i];
            }
        free(old);
    }
    size_t i = (size_t)khash(k) & (cap - 1);
    while (tab[i].used) {
        if (pg_key_compare(&tab[i].k, k) == 0)
            return &tab[i];
        i = (i + 1) & (cap - 1);
    }
    if (!insert)
        return NULL;
    tab[i].used = true;
    tab[i].k = *k;
    count++;
    return &tab[i];
}

static int m_put(void *arg, const pg_key *k, lsn_t lsn, const value_ref *v, char *err,
                 size_t errlen)
{
    (void)arg;
    slot *s = find(k, true);
    free(s->payload);
    s->payload = malloc(v->len ? v->len : 1);
    if (s->payload == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (v->len)
        memcpy(s->payload, v->payload, v->len);
    s->lsn = lsn;
    s->kind = v->kind;
    s->flags = v->flags;
    s->len = v->len;
    /* CLOG deltas are kept per xid as pseudo keys so none is lost. */
    if (k->kind == KEY_SLRU_BLOCK && k->fork == SLRU_CLOG && v->kind == VAL_CLOG_SET) {
        uint32_t n = ((uint32_t)v->payload[1] << 24) | ((uint32_t)v->payload[2] << 16) |
                     ((uint32_t)v->payload[3] << 8) | v->payload[4];
        for (uint32_t i = 0; i < n; i++) {
            const uint8_t *x = v->payload + 5 + 4 * i;
            pg_key xk = {.kind = 0xEE,
                         .rel = ((uint32_t)x[0] << 24) | ((uint32_t)x[1] << 16) |
                                ((uint32_t)x[2] << 8) | x[3]};
            slot *xs = find(&xk, true);
            xs->kind = v->payload[0];
        }
    }
    return 0;
}

static int m_latest(void *arg, const pg_key *k, lsn_t lsn, value_ref *out, lsn_t *found, char *err,
                    size_t errlen)
{
    (void)arg, (void)lsn, (void)err, (void)errlen;
    slot *s = find(k, false);
    if (s == NULL)
        return 0;
    uint8_t *p = malloc(s->len ? s->len : 1);
    if (p == NULL)
        return -1;
    memcpy(p, s->payload, s->len);
    *out = (value_ref){.kind = s->kind, .flags = s->flags, .len = s->len, .payload = p};
    *found = s->lsn;
    return 1;
}

static int cmp_slot(const void *a, const void *b)
{
    return pg_key_compare(&(*(slot *const *)a)->k, &(*(slot *const *)b)->k);
}

static slot **sorted(const pg_key *from, const pg_key *to, size_t *n)
{
    slot **v = malloc((count + 1) * sizeof *v);
    *n = 0;
    for (size_t i = 0; i < cap; i++)
        if (tab[i].used && (from == NULL || (pg_key_compare(&tab[i].k, from) >= 0 &&
                                             pg_key_compare(&tab[i].k, to) < 0)))
            v[(*n)++] = &tab[i];
    qsort(v, *n, sizeof *v, cmp_slot);
    return v;
}

static int m_scan(void *arg, const pg_key *from, const pg_key *to, lsn_t lsn, store_scan_fn fn,
                  void *fnarg, char *err, size_t errlen)
{
    (void)arg, (void)lsn, (void)err, (void)errlen;
    size_t n;
    slot **v = sorted(from, to, &n);
    for (size_t i = 0; i < n; i++) {
        value_ref val = {
            .kind = v[i]->kind, .flags = v[i]->flags, .len = v[i]->len, .payload = v[i]->payload};
        if (fn(&v[i]->k, v[i]->lsn, &val, fnarg) != 0)
            break;
    }
    free(v);
    return 0;
}

static int m_page(void *arg, const pg_key *k, lsn_t lsn, uint8_t out[PG_BLCKSZ], char *err,
                  size_t errlen)
{
    (void)arg, (void)lsn;
    slot *s = find(k, false);
    if (s == NULL || s->kind == VAL_ZERO_PAGE) {
        memset(out, 0, PG_BLCKSZ);
        return 0;
    }
    if (s->kind == VAL_IMAGE) {
        memcpy(out, s->payload, PG_BLCKSZ);
        return 0;
    }
    char kb[96];
    snprintf(err, errlen, "%s is not an image (this tool has no redo)",
             pg_key_format(k, kb, sizeof kb));
    return -1;
}

static void usage(void)
{
    fprintf(stderr, "usage: strata-ingest-tool --import PGDATA --wal WALDIR [--tli N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *pgdata = NULL, *waldir = NULL;
    unsigned tli = 1;
    static const struct option opts[] = {{"import", required_argument, NULL, 'i'},
                                         {"wal", required_argument, NULL, 'w'},
                                         {"tli", required_argument, NULL, 't'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'i')
            pgdata = optarg;
        else if (c == 'w')
            waldir = optarg;
        else if (c == 't')
            tli = (unsigned)strtoul(optarg, NULL, 10);
        else
            usage();
    }
    if (pgdata == NULL || waldir == NULL)
        usage();
    tab = calloc(cap, sizeof *tab);
    ingest_backend b = {.put = m_put, .get_latest = m_latest, .scan = m_scan, .get_page = m_page};
    char err[512], l1[LSN_FMT_LEN];
    lsn_t lsn;
    import_stats st;
    if (import_pgdata_backend(&b, pgdata, 0, &lsn, &st, err, sizeof err) != 0) {
        fprintf(stderr, "import: %s\n", err);
        return 1;
    }
    printf("import %s\n", lsn_format(lsn, l1));
    ingest_state *ing;
    if (ingest_create_with_backend(NULL, &b, &ing, err, sizeof err) != 0) {
        fprintf(stderr, "ingest: %s\n", err);
        return 1;
    }
    uint32_t seg = st.wal_seg_size;
    uint32_t per_id = (uint32_t)(0x100000000ull / seg);
    size_t bufcap = WAL_READER_DEFAULT_BUF;
    uint8_t *rbuf = malloc(bufcap), *sbuf = malloc(seg);
    wal_reader r;
    wal_reader_init(&r, lsn, seg, rbuf, bufcap);
    lsn_t pos = lsn;
    uint64_t records = 0;
    const char *reason = "no more segments";
    for (uint64_t segno = lsn / seg;; segno++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%08X%08X%08X", waldir, tli, (uint32_t)(segno / per_id),
                 (uint32_t)(segno % per_id));
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            break;
        size_t got = fread(sbuf, 1, seg, f);
        fclose(f);
        if (got != seg) {
            reason = "short segment";
            break;
        }
        size_t off = (size_t)(pos - segno * seg);
        bool stop = false;
        while (off < seg) {
            size_t used;
            const char *why;
            int rc = wal_reader_feed(&r, pos, sbuf + off, seg - off, &used, &why);
            if (rc == WAL_READER_ERROR) {
                reason = why; /* the end of valid WAL */
                stop = true;
                break;
            }
            off += used;
            pos += used;
            if (rc != WAL_READER_RECORD)
                continue;
            lsn_t s, e;
            const wal_record *rec = wal_reader_record(&r, &s, &e);
            if (ingest_record(ing, s, e, rec, err, sizeof err) != 0) {
                fprintf(stderr, "ingest of the record at %s: %s\n", lsn_format(s, l1), err);
                return 1;
            }
            records++;
        }
        if (stop)
            break;
    }
    printf("end %s %" PRIu64 " %s\n", lsn_format(wal_reader_last_record_end(&r), l1), records,
           reason);
    size_t n;
    slot **all = sorted(NULL, NULL, &n);
    for (size_t i = 0; i < n; i++) {
        const slot *s = all[i];
        if (s->k.kind == KEY_REL_SIZE && s->kind == VAL_SIZE)
            printf("rel %u %u %u %u %u\n", s->k.spc, s->k.db, s->k.rel, s->k.fork,
                   ((uint32_t)s->payload[0] << 24) | ((uint32_t)s->payload[1] << 16) |
                       ((uint32_t)s->payload[2] << 8) | s->payload[3]);
        else if (s->k.kind == KEY_DB && s->kind == VAL_BLOB)
            printf("db %u %u\n", s->k.spc, s->k.db);
        else if (s->k.kind == KEY_TWOPHASE && s->kind == VAL_BLOB)
            printf("twophase %u\n", s->k.rel);
        else if (s->k.kind == 0xEE)
            printf("xid %u %s\n", s->k.rel,
                   s->kind == PG_XACT_STATUS_COMMITTED ? "committed" : "aborted");
    }
    free(all);
    ingest_destroy(ing);
    for (size_t i = 0; i < cap; i++)
        free(tab[i].payload);
    free(tab);
    free(rbuf);
    free(sbuf);
    return 0;
}
