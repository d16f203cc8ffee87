/*
 * strata-redo-tool: rebuilds pages from real WAL through the redo pool
 * (pageserver/redo/redo.h), for the walredo integration test and the redo
 * benchmark.  A test tool, not for operators.
 *
 *   strata-redo-tool replay --pg-bindir B --work-dir W --out DIR
 *                    [--helpers N] [--timeout-ms T] [--pick N] [--min-records M]
 *                    STARTSEG [ENDSEG]
 *
 * Reads the WAL in the segment files (as strata-waldump does), and for every
 * block of a relation keeps, like ingest, the records since the last one that
 * initialises the block (a full-page image it applies, or will_init).  It
 * picks up to --pick blocks (default 20) that have such a start and at least
 * --min-records records after it (default 1; main fork), the ones with the
 * most records first, rebuilds each with redo_apply at the end of the WAL,
 * writes DIR/SPC_DB_REL_FORK_BLK (8192 bytes) and prints one line per page:
 *
 *   page SPC DB REL FORK BLK records N lsn X/Y
 *
 * (--corrupt flips a byte of each page's newest record first, to see the
 * helper refuse it.)
 * then "stats requests R records A restarts S timeouts T failures F".
 * A page whose redo fails prints "fail SPC DB REL FORK BLK: reason" and the
 * exit status is 1.  Usage errors exit 2.
 *
 *   strata-redo-tool bench --pg-bindir B --work-dir W [--helpers N]
 *                    [--threads T] [--seconds S] [--records K] STARTSEG [ENDSEG]
 *
 * Measures redo throughput: T threads each rebuild, round robin, the picked
 * blocks with K records each (base = the FPI-carrying record, so a request is
 * begin + K records + get page), for S seconds; prints requests per second and
 * the p50/p99 request latency in microseconds.
 */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/lsn.h"
#include "pg/walformat.h"
#include "pageserver/store/key.h"
#include "pageserver/redo/redo.h"
#include "pageserver/store/store.h"

typedef struct rec {
    lsn_t end;
    uint8_t *raw;
    uint32_t len;
} rec;

typedef struct block {
    uint32_t spc, db, rel, blk;
    uint8_t fork;
    int *recs; /* indices into records, oldest first, from the last init */
    int n, cap;
    bool has_init;
} block;

static rec *records;
static int nrecords, caprecords;
static block *blocks;
static int nblocks, capblocks;

/* Open addressing over blocks (index + 1, 0 = empty). */
static int *slots;
static size_t nslots;

static uint64_t block_hash(uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork, uint32_t blk)
{
    uint64_t h = 1469598103934665603ULL;
    uint32_t v[5] = {spc, db, rel, fork, blk};
    for (int i = 0; i < 5; i++) {
        h ^= v[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (q == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return q;
}

static block *find_block(const wal_block_ref *b)
{
    if (nslots == 0 || (size_t)nblocks * 2 >= nslots) {
        size_t ns = nslots ? nslots * 2 : 4096;
        int *s = calloc(ns, sizeof *s);
        if (s == NULL)
            exit(1);
        for (int i = 0; i < nblocks; i++) {
            block *x = &blocks[i];
            size_t j = block_hash(x->spc, x->db, x->rel, x->fork, x->blk) & (ns - 1);
            while (s[j])
                j = (j + 1) & (ns - 1);
            s[j] = i + 1;
        }
        free(slots);
        slots = s;
        nslots = ns;
    }
    size_t j = block_hash(b->spc, b->db, b->rel, b->fork, b->blkno) & (nslots - 1);
    while (slots[j]) {
        block *x = &blocks[slots[j] - 1];
        if (x->spc == b->spc && x->db == b->db && x->rel == b->rel && x->fork == b->fork &&
            x->blk == b->blkno)
            return x;
        j = (j + 1) & (nslots - 1);
    }
    if (nblocks == capblocks) {
        capblocks = capblocks ? capblocks * 2 : 1024;
        blocks = xrealloc(blocks, sizeof *blocks * (size_t)capblocks);
    }
    block *x = &blocks[nblocks++];
    memset(x, 0, sizeof *x);
    x->spc = b->spc;
    x->db = b->db;
    x->rel = b->rel;
    x->fork = b->fork;
    x->blk = b->blkno;
    slots[j] = nblocks;
    return x;
}

static void add_record(const wal_record *r, lsn_t end)
{
    if (nrecords == caprecords) {
        caprecords = caprecords ? caprecords * 2 : 4096;
        records = xrealloc(records, sizeof *records * (size_t)caprecords);
    }
    int idx = nrecords++;
    records[idx].end = end;
    records[idx].len = r->hdr.tot_len;
    records[idx].raw = xrealloc(NULL, r->hdr.tot_len);
    memcpy(records[idx].raw, r->raw, r->hdr.tot_len);
    for (int id = 0; id <= r->max_block_id; id++) {
        const wal_block_ref *b = &r->blocks[id];
        if (!b->in_use)
            continue;
        block *x = find_block(b);
        bool init = b->will_init || (b->has_image && b->apply_image);
        if (init) {
            x->n = 0;
            x->has_init = true;
        }
        if (x->n == x->cap) {
            x->cap = x->cap ? x->cap * 2 : 8;
            x->recs = xrealloc(x->recs, sizeof *x->recs * (size_t)x->cap);
        }
        /* A record may name the same block twice; keep it once. */
        if (x->n == 0 || x->recs[x->n - 1] != idx)
            x->recs[x->n++] = idx;
    }
}

static int parse_segname(const char *path, uint32_t *tli, uint64_t *log, uint64_t *seg)
{
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path);
    const char *name = basename(copy);
    unsigned int t;
    unsigned long long l, s;
    char tail;
    if (strlen(name) != 24 || sscanf(name, "%8X%8llX%8llX%c", &t, &l, &s, &tail) != 3)
        return -1;
    *tli = t;
    *log = l;
    *seg = s;
    return 0;
}

/* Reads every record of the segments; returns the end of valid WAL. */
static lsn_t read_wal(const char *first, const char *last)
{
    uint32_t tli, tli2;
    uint64_t log1, seg1, log2, seg2;
    if (parse_segname(first, &tli, &log1, &seg1) != 0 ||
        parse_segname(last, &tli2, &log2, &seg2) != 0) {
        fprintf(stderr, "bad segment file name\n");
        exit(2);
    }
    FILE *f = fopen(first, "rb");
    uint8_t hdr[WAL_LONG_PHD_SIZE];
    if (f == NULL || fread(hdr, 1, sizeof hdr, f) != sizeof hdr) {
        fprintf(stderr, "cannot read %s\n", first);
        exit(1);
    }
    fclose(f);
    wal_page_header ph;
    wal_page_header_parse(hdr, sizeof hdr, &ph);
    uint32_t seg_size = ph.seg_size;
    uint64_t segs_per_id = 0x100000000ULL / seg_size;
    uint64_t first_no = log1 * segs_per_id + seg1, last_no = log2 * segs_per_id + seg2;
    static uint8_t rbuf[WAL_READER_DEFAULT_BUF];
    wal_reader r;
    wal_reader_init(&r, first_no * seg_size, seg_size, rbuf, sizeof rbuf);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", first);
    char *d = dirname(dir);
    uint8_t *seg = malloc(seg_size);
    for (uint64_t no = first_no; no <= last_no; no++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%08X%08X%08X", d, tli, (uint32_t)(no / segs_per_id),
                 (uint32_t)(no % segs_per_id));
        f = fopen(path, "rb");
        if (f == NULL || fread(seg, 1, seg_size, f) != seg_size) {
            fprintf(stderr, "cannot read %s\n", path);
            exit(1);
        }
        fclose(f);
        lsn_t at = no * seg_size;
        size_t off = 0;
        while (off < seg_size) {
            size_t used = 0;
            const char *why = NULL;
            int rc = wal_reader_feed(&r, at + off, seg + off, seg_size - off, &used, &why);
            off += used;
            if (rc < 0) {
                free(seg);
                return wal_reader_last_record_end(&r);
            }
            if (rc == WAL_READER_RECORD) {
                lsn_t start, end;
                const wal_record *rec = wal_reader_record(&r, &start, &end);
                add_record(rec, end);
            }
        }
    }
    free(seg);
    return wal_reader_last_record_end(&r);
}

static int cmp_blocks(const void *a, const void *b)
{
    const block *x = *(block *const *)a, *y = *(block *const *)b;
    return y->n - x->n;
}

/* Blocks of relation main forks with an init record and >= min records after it. */
static block **pick_blocks(int max, int min_records, int *count)
{
    block **pick = xrealloc(NULL, sizeof *pick * (size_t)(nblocks + 1));
    int n = 0;
    for (int i = 0; i < nblocks; i++)
        if (blocks[i].has_init && blocks[i].fork == 0 && blocks[i].n >= 1 + min_records)
            pick[n++] = &blocks[i];
    qsort(pick, (size_t)n, sizeof *pick, cmp_blocks);
    /* Spread over relations: first the best block of each, then the rest. */
    block **out = xrealloc(NULL, sizeof *out * (size_t)(n + 1));
    int m = 0;
    bool *used = calloc((size_t)n + 1, 1);
    for (int i = 0; i < n && m < max; i++) {
        bool seen = false;
        for (int j = 0; j < m; j++)
            if (out[j]->rel == pick[i]->rel)
                seen = true;
        if (!seen) {
            out[m++] = pick[i];
            used[i] = true;
        }
    }
    for (int i = 0; i < n && m < max; i++)
        if (!used[i])
            out[m++] = pick[i];
    free(used);
    free(pick);
    *count = m;
    return out;
}

/* The version list of x, newest first, from its first `take` records. */
static version_list *make_versions(const block *x, int take)
{
    version_list *vl = xrealloc(NULL, sizeof *vl);
    vl->n = take;
    vl->lsn = xrealloc(NULL, sizeof *vl->lsn * (size_t)take);
    vl->value = xrealloc(NULL, sizeof *vl->value * (size_t)take);
    vl->complete = true;
    for (int i = 0; i < take; i++) {
        const rec *r = &records[x->recs[take - 1 - i]];
        vl->lsn[i] = r->end;
        vl->value[i] = (value_ref){.kind = VAL_WAL_RECORD,
                                   .flags = i == take - 1 ? VALUE_WILL_INIT : 0,
                                   .len = r->len,
                                   .payload = r->raw};
    }
    return vl;
}

static void free_versions(version_list *vl)
{
    free(vl->lsn);
    free(vl->value);
    free(vl);
}

typedef struct opts {
    const char *bindir, *workdir, *out;
    int helpers, pick, min_records, threads, seconds, bench_records;
    bool corrupt;
    uint32_t timeout_ms;
} opts;

static redo_pool *make_pool(const opts *o)
{
    redo_pool_options po;
    redo_pool_options_default(&po);
    po.pg_bindir = o->bindir;
    po.work_dir = o->workdir;
    po.helpers = o->helpers;
    if (o->timeout_ms)
        po.timeout_ms = o->timeout_ms;
    redo_pool *p;
    char err[1024];
    if (redo_pool_create(&po, &p, err, sizeof err) != 0) {
        fprintf(stderr, "redo_pool_create: %s\n", err);
        exit(1);
    }
    return p;
}

static int do_replay(const opts *o)
{
    block **pick;
    int n;
    pick = pick_blocks(o->pick, o->min_records, &n);
    redo_pool *p = make_pool(o);
    int failures = 0;
    static uint8_t page[PG_BLCKSZ];
    for (int i = 0; i < n; i++) {
        block *x = pick[i];
        version_list *vl = make_versions(x, x->n);
        uint8_t *copy = NULL;
        if (o->corrupt) {
            /* Flip a byte of the newest record's body: its CRC must catch it. */
            copy = xrealloc(NULL, vl->value[0].len);
            memcpy(copy, vl->value[0].payload, vl->value[0].len);
            copy[vl->value[0].len - 1] ^= 0x5A;
            vl->value[0].payload = copy;
        }
        pg_key k = pg_key_rel_block(x->spc, x->db, x->rel, x->fork, x->blk);
        char err[2048];
        if (redo_apply(p, &k, vl, page, err, sizeof err) != 0) {
            printf("fail %u %u %u %u %u: %s\n", x->spc, x->db, x->rel, x->fork, x->blk, err);
            failures++;
        } else {
            char path[4200], lb[LSN_FMT_LEN];
            snprintf(path, sizeof path, "%s/%u_%u_%u_%u_%u", o->out, x->spc, x->db, x->rel, x->fork,
                     x->blk);
            FILE *f = fopen(path, "wb");
            if (f == NULL || fwrite(page, 1, sizeof page, f) != sizeof page || fclose(f) != 0) {
                fprintf(stderr, "cannot write %s\n", path);
                return 1;
            }
            printf("page %u %u %u %u %u records %d lsn %s\n", x->spc, x->db, x->rel, x->fork,
                   x->blk, x->n, lsn_format(vl->lsn[0], lb));
        }
        fflush(stdout);
        free(copy);
        free_versions(vl);
    }
    redo_stats st;
    redo_get_stats(p, &st);
    printf("stats requests %" PRIu64 " records %" PRIu64 " restarts %" PRIu64 " timeouts %" PRIu64
           " failures %" PRIu64 "\n",
           st.requests, st.records_applied, st.helper_restarts, st.timeouts, st.failures);
    redo_pool_destroy(p);
    free(pick);
    return failures ? 1 : 0;
}

/* ---- bench ---- */

typedef struct bench_shared {
    redo_pool *pool;
    version_list **lists;
    block **blocks;
    int nlists;
    uint64_t stop_ns;
    int records;
} bench_shared;

typedef struct bench_thread {
    bench_shared *s;
    int id;
    uint64_t *lat;
    size_t nlat, caplat;
    uint64_t errors;
} bench_thread;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void *bench_main(void *arg)
{
    bench_thread *t = arg;
    bench_shared *s = t->s;
    uint8_t page[PG_BLCKSZ];
    for (uint64_t i = (uint64_t)t->id;; i++) {
        uint64_t a = now_ns();
        if (a >= s->stop_ns)
            break;
        int j = (int)(i % (uint64_t)s->nlists);
        block *x = s->blocks[j];
        pg_key k = pg_key_rel_block(x->spc, x->db, x->rel, x->fork, x->blk);
        char err[1024];
        if (redo_apply(s->pool, &k, s->lists[j], page, err, sizeof err) != 0) {
            if (t->errors++ == 0)
                fprintf(stderr, "bench: %s\n", err);
            continue;
        }
        if (t->nlat == t->caplat) {
            t->caplat = t->caplat ? t->caplat * 2 : 65536;
            t->lat = xrealloc(t->lat, sizeof *t->lat * t->caplat);
        }
        t->lat[t->nlat++] = now_ns() - a;
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct prepare_args {
    bench_shared *s;
    int helpers;
    bool failed;
} prepare_args;

/* Makes each request's base image, then sends a few requests more. */
static void *prepare_main(void *arg)
{
    prepare_args *w = arg;
    bench_shared *s = w->s;
    uint8_t page[PG_BLCKSZ];
    char err[1024];
    /* Each request: push the page as of the image record, then K records. */
    for (int i = 0; i < s->nlists; i++) {
        block *x = s->blocks[i];
        version_list *init = make_versions(x, 1);
        pg_key k = pg_key_rel_block(x->spc, x->db, x->rel, x->fork, x->blk);
        uint8_t *image = xrealloc(NULL, PG_BLCKSZ);
        if (redo_apply(s->pool, &k, init, image, err, sizeof err) != 0) {
            fprintf(stderr, "bench: base image: %s\n", err);
            w->failed = true;
            return NULL;
        }
        version_list *vl = make_versions(x, 1 + s->records);
        vl->value[s->records] = (value_ref){.kind = VAL_IMAGE, .len = PG_BLCKSZ, .payload = image};
        s->lists[i] = vl;
        free_versions(init);
    }
    for (int i = 0; i < w->helpers * 2; i++) {
        block *x = s->blocks[i % s->nlists];
        pg_key k = pg_key_rel_block(x->spc, x->db, x->rel, x->fork, x->blk);
        if (redo_apply(s->pool, &k, s->lists[i % s->nlists], page, err, sizeof err) != 0) {
            fprintf(stderr, "bench warm-up: %s\n", err);
            w->failed = true;
            return NULL;
        }
    }
    return NULL;
}

static int do_bench(const opts *o)
{
    int n;
    block **pick = pick_blocks(1000, o->bench_records, &n);
    if (n == 0) {
        fprintf(stderr, "bench: no block with %d records after an image\n", o->bench_records);
        return 1;
    }
    bench_shared s = {
        .pool = make_pool(o), .blocks = pick, .nlists = n, .records = o->bench_records};
    s.lists = xrealloc(NULL, sizeof *s.lists * (size_t)n);
    /* Prepared on a thread that then ends, as a pageserver's basebackup job
     * is: the helpers it started must outlive it. */
    prepare_args w = {.s = &s, .helpers = o->helpers};
    pthread_t prep;
    pthread_create(&prep, NULL, prepare_main, &w);
    pthread_join(prep, NULL);
    if (w.failed)
        return 1;
    bench_thread *th = calloc((size_t)o->threads, sizeof *th);
    pthread_t *tid = calloc((size_t)o->threads, sizeof *tid);
    uint64_t start = now_ns();
    s.stop_ns = start + (uint64_t)o->seconds * 1000000000ULL;
    for (int i = 0; i < o->threads; i++) {
        th[i].s = &s;
        th[i].id = i;
        pthread_create(&tid[i], NULL, bench_main, &th[i]);
    }
    size_t total = 0;
    uint64_t errors = 0;
    for (int i = 0; i < o->threads; i++) {
        pthread_join(tid[i], NULL);
        total += th[i].nlat;
        errors += th[i].errors;
    }
    double secs = (double)(now_ns() - start) / 1e9;
    uint64_t *all = xrealloc(NULL, sizeof *all * (total + 1));
    size_t m = 0;
    for (int i = 0; i < o->threads; i++) {
        memcpy(all + m, th[i].lat, sizeof *all * th[i].nlat);
        m += th[i].nlat;
        free(th[i].lat);
    }
    qsort(all, total, sizeof *all, cmp_u64);
    double p50 = total ? (double)all[total / 2] / 1000.0 : 0;
    double p99 = total ? (double)all[total * 99 / 100] / 1000.0 : 0;
    printf("bench helpers %d threads %d records_per_request %d requests %zu errors %" PRIu64
           " seconds %.2f requests_per_s %.0f records_per_s %.0f p50_us %.1f p99_us %.1f\n",
           o->helpers, o->threads, o->bench_records, total, errors, secs, (double)total / secs,
           (double)total * o->bench_records / secs, p50, p99);
    redo_stats st;
    redo_get_stats(s.pool, &st);
    printf("stats requests %" PRIu64 " records %" PRIu64 " restarts %" PRIu64 " timeouts %" PRIu64
           " failures %" PRIu64 "\n",
           st.requests, st.records_applied, st.helper_restarts, st.timeouts, st.failures);
    redo_pool_destroy(s.pool);
    return errors ? 1 : 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: strata-redo-tool replay|bench --pg-bindir B --work-dir W [--out DIR] "
                    "[--helpers N] [--timeout-ms T] [--pick N] [--min-records M] [--threads T] "
                    "[--seconds S] [--records K] STARTSEG [ENDSEG]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    const char *mode = argv[1];
    opts o = {
        .helpers = 1, .pick = 20, .min_records = 1, .threads = 1, .seconds = 5, .bench_records = 1};
    const char *segs[2] = {NULL, NULL};
    int nsegs = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strncmp(a, "--", 2) == 0 && strcmp(a, "--corrupt") != 0 && v == NULL)
            usage();
        if (!strcmp(a, "--pg-bindir"))
            o.bindir = v, i++;
        else if (!strcmp(a, "--work-dir"))
            o.workdir = v, i++;
        else if (!strcmp(a, "--out"))
            o.out = v, i++;
        else if (!strcmp(a, "--helpers"))
            o.helpers = atoi(v), i++;
        else if (!strcmp(a, "--timeout-ms"))
            o.timeout_ms = (uint32_t)atoi(v), i++;
        else if (!strcmp(a, "--pick"))
            o.pick = atoi(v), i++;
        else if (!strcmp(a, "--min-records"))
            o.min_records = atoi(v), i++;
        else if (!strcmp(a, "--threads"))
            o.threads = atoi(v), i++;
        else if (!strcmp(a, "--seconds"))
            o.seconds = atoi(v), i++;
        else if (!strcmp(a, "--corrupt"))
            o.corrupt = true;
        else if (!strcmp(a, "--records"))
            o.bench_records = atoi(v), i++;
        else if (strncmp(a, "--", 2) == 0)
            usage();
        else if (nsegs < 2)
            segs[nsegs++] = a;
        else
            usage();
    }
    if (nsegs == 0 || o.bindir == NULL || o.workdir == NULL || o.helpers < 1 || o.threads < 1 ||
        o.bench_records < 1)
        usage();
    lsn_t end = read_wal(segs[0], nsegs == 2 ? segs[1] : segs[0]);
    char lb[LSN_FMT_LEN];
    fprintf(stderr, "wal: %d records, %d blocks, end %s\n", nrecords, nblocks, lsn_format(end, lb));
    if (!strcmp(mode, "replay")) {
        if (o.out == NULL)
            usage();
        return do_replay(&o);
    }
    if (!strcmp(mode, "bench"))
        return do_bench(&o);
    usage();
    return 2;
}
