/*
 * pageserver_getpage_load.c: a GetPage@LSN load generator for the pageserver
 * benchmark (bench/pageserver_bench.py).
 *
 * For: measuring GetPage latency over loopback without the client being the
 * bottleneck.  One libpq connection, `pagestream_v1 <tenant> <timeline>`,
 * then --requests GetPage requests for blocks [--blk-from, --blk-to) of one
 * relation fork, cycling through the blocks, at most --depth in flight
 * (depth 1 = serial).  Requests are encoded and responses decoded with the
 * project's codec (proto/pagestream.c).  Latency of a request = time from
 * handing it to libpq to decoding its response (for depth > 1 it includes
 * queueing behind earlier requests, which is what a pipelining compute sees).
 *
 * Prints one line:
 *   requests N errors E zero_pages Z seconds S pages_per_s R mean_us M
 *   p50_us A p90_us B p99_us C p999_us D max_us X
 * and, with --dump FILE, every latency in nanoseconds, one per line.
 * The first error's sqlstate and message go to stderr.  Exit 0 if it ran
 * (errors are counted, not fatal), 1 if it could not connect or the
 * connection broke, 2 on bad arguments.
 *
 * Not for: correctness checking of page contents (the page oracle tests do
 * that); only that a page came back and whether it is all zeros.
 *
 * Built by bench/pageserver_bench.py with:
 *   cc -O2 -std=gnu11 -I<repo> bench/pageserver_getpage_load.c proto/pagestream.c
 *      common/base/lsn.c -lpq
 */
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "base/lsn.h"
#include "proto/pagestream.h"

#define MAX_DEPTH 1024
#define MAX_REQUESTS 10000000L

typedef struct load_options {
    const char *host, *port, *tenant, *timeline, *dump;
    uint32_t spc, db, rel, blk_from, blk_to;
    uint8_t fork;
    lsn_t lsn, nms;
    long requests;
    int depth;
} load_options;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of an ascending array of n > 0 values. */
static uint64_t percentile(const uint64_t *sorted, long n, double pct)
{
    assert(n > 0);
    long rank = (long)((pct / 100.0) * (double)n + 0.999999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return sorted[rank - 1];
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *s == '\0' || *end != '\0' || v > UINT32_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static int parse_lsn_arg(const char *s, lsn_t *out)
{
    if (strcmp(s, "latest") == 0) {
        *out = LSN_MAX;
        return 0;
    }
    return lsn_parse(s, out) ? 0 : -1;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: pageserver_getpage_load --port P --tenant HEX --timeline HEX --spc N --db N\n"
            "         --rel N [--fork 0..3] --blk-from B --blk-to B --lsn X/Y|latest [--nms X/Y]\n"
            "         [--requests N] [--depth D] [--host H] [--dump FILE]\n");
}

static int parse_args(int argc, char **argv, load_options *o)
{
    static const struct option longopts[] = {
        {"host", required_argument, NULL, 'h'},     {"port", required_argument, NULL, 'p'},
        {"tenant", required_argument, NULL, 't'},   {"timeline", required_argument, NULL, 'T'},
        {"spc", required_argument, NULL, 's'},      {"db", required_argument, NULL, 'd'},
        {"rel", required_argument, NULL, 'r'},      {"fork", required_argument, NULL, 'f'},
        {"blk-from", required_argument, NULL, 'b'}, {"blk-to", required_argument, NULL, 'B'},
        {"lsn", required_argument, NULL, 'l'},      {"nms", required_argument, NULL, 'n'},
        {"requests", required_argument, NULL, 'N'}, {"depth", required_argument, NULL, 'D'},
        {"dump", required_argument, NULL, 'o'},     {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->requests = 10000;
    o->depth = 1;
    o->spc = 1663;
    bool have_rel = false, have_lsn = false, have_to = false;
    uint32_t v;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'h':
            o->host = optarg;
            break;
        case 'p':
            o->port = optarg;
            break;
        case 't':
            o->tenant = optarg;
            break;
        case 'T':
            o->timeline = optarg;
            break;
        case 'o':
            o->dump = optarg;
            break;
        case 's':
            if (parse_u32(optarg, &o->spc))
                return -1;
            break;
        case 'd':
            if (parse_u32(optarg, &o->db))
                return -1;
            break;
        case 'r':
            if (parse_u32(optarg, &o->rel))
                return -1;
            have_rel = true;
            break;
        case 'b':
            if (parse_u32(optarg, &o->blk_from))
                return -1;
            break;
        case 'B':
            if (parse_u32(optarg, &o->blk_to))
                return -1;
            have_to = true;
            break;
        case 'f':
            if (parse_u32(optarg, &v) || v > 3)
                return -1;
            o->fork = (uint8_t)v;
            break;
        case 'l':
            if (parse_lsn_arg(optarg, &o->lsn))
                return -1;
            have_lsn = true;
            break;
        case 'n':
            if (parse_lsn_arg(optarg, &o->nms))
                return -1;
            break;
        case 'N':
            if (parse_u32(optarg, &v) || v < 1 || v > MAX_REQUESTS)
                return -1;
            o->requests = v;
            break;
        case 'D':
            if (parse_u32(optarg, &v) || v < 1 || v > MAX_DEPTH)
                return -1;
            o->depth = (int)v;
            break;
        default:
            return -1;
        }
    }
    if (optind != argc || !o->port || !o->tenant || !o->timeline || !have_rel || !have_lsn ||
        !have_to || o->blk_to <= o->blk_from || o->lsn == 0)
        return -1;
    return 0;
}

typedef struct load_state {
    PGconn *conn;
    const load_options *o;
    uint64_t *lat; /* requests latencies, ns */
    uint64_t sent_at[MAX_DEPTH];
    long sent, received, errors, zero_pages;
    bool first_error_shown;
} load_state;

static int send_one(load_state *s)
{
    const load_options *o = s->o;
    pagestream_request req = {.tag = PS_REQ_GETPAGE,
                              .reqid = (uint64_t)s->sent,
                              .request_lsn = o->lsn,
                              .not_modified_since = o->nms};
    req.u.page.rel = (pagestream_rel){o->spc, o->db, o->rel, o->fork};
    req.u.page.blkno = o->blk_from + (uint32_t)(s->sent % (long)(o->blk_to - o->blk_from));
    uint8_t buf[128];
    size_t n = pagestream_encode_request(&req, buf, sizeof buf);
    assert(n > 0);
    s->sent_at[s->sent % o->depth] = now_ns();
    if (PQputCopyData(s->conn, (const char *)buf, (int)n) != 1) {
        fprintf(stderr, "pageserver_getpage_load: send: %s", PQerrorMessage(s->conn));
        return -1;
    }
    s->sent++;
    return 0;
}

static int receive_one(load_state *s)
{
    char *buf = NULL;
    int n = PQgetCopyData(s->conn, &buf, 0);
    if (n < 0) {
        fprintf(stderr, "pageserver_getpage_load: connection ended: %s", PQerrorMessage(s->conn));
        return -1;
    }
    uint64_t t = now_ns();
    pagestream_response resp;
    const char *why = NULL;
    int rc = pagestream_decode_response((const uint8_t *)buf, (size_t)n, &resp, &why);
    long i = s->received;
    s->lat[i] = t - s->sent_at[i % s->o->depth];
    s->received++;
    if (rc != 0) {
        fprintf(stderr, "pageserver_getpage_load: undecodable response: %s\n", why);
        PQfreemem(buf);
        return -1;
    }
    if (resp.reqid != (uint64_t)i) {
        fprintf(stderr, "pageserver_getpage_load: response %" PRIu64 " out of order (want %ld)\n",
                resp.reqid, i);
        PQfreemem(buf);
        return -1;
    }
    if (resp.tag != PS_RESP_GETPAGE) {
        s->errors++;
        if (!s->first_error_shown && resp.tag == PS_RESP_ERROR) {
            fprintf(stderr, "pageserver_getpage_load: error %s: %.*s\n", resp.u.error.sqlstate,
                    (int)resp.u.error.message_len, resp.u.error.message);
            s->first_error_shown = true;
        }
    } else {
        bool zero = true;
        for (size_t k = 0; k < PAGESTREAM_BLCKSZ && zero; k++)
            zero = resp.u.page[k] == 0;
        s->zero_pages += zero;
    }
    PQfreemem(buf);
    return 0;
}

static int run_load(load_state *s)
{
    const load_options *o = s->o;
    while (s->received < o->requests) {
        while (s->sent < o->requests && s->sent - s->received < o->depth)
            if (send_one(s) != 0)
                return -1;
        if (PQflush(s->conn) != 0) {
            fprintf(stderr, "pageserver_getpage_load: flush: %s", PQerrorMessage(s->conn));
            return -1;
        }
        if (receive_one(s) != 0)
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    load_options o;
    if (parse_args(argc, argv, &o) != 0) {
        usage();
        return 2;
    }
    char conninfo[512];
    snprintf(conninfo, sizeof conninfo,
             "host=%s port=%s user=bench dbname=postgres sslmode=disable gssencmode=disable "
             "connect_timeout=10",
             o.host, o.port);
    load_state s = {.o = &o};
    s.lat = calloc((size_t)o.requests, sizeof *s.lat);
    if (!s.lat) {
        fprintf(stderr, "pageserver_getpage_load: out of memory\n");
        return 1;
    }
    s.conn = PQconnectdb(conninfo);
    if (PQstatus(s.conn) != CONNECTION_OK) {
        fprintf(stderr, "pageserver_getpage_load: connect: %s", PQerrorMessage(s.conn));
        PQfinish(s.conn);
        free(s.lat);
        return 1;
    }
    char query[128];
    snprintf(query, sizeof query, "pagestream_v1 %s %s", o.tenant, o.timeline);
    PGresult *res = PQexec(s.conn, query);
    if (PQresultStatus(res) != PGRES_COPY_BOTH) {
        fprintf(stderr, "pageserver_getpage_load: %s: %s", query, PQerrorMessage(s.conn));
        PQclear(res);
        PQfinish(s.conn);
        free(s.lat);
        return 1;
    }
    PQclear(res);

    uint64_t t0 = now_ns();
    int rc = run_load(&s);
    uint64_t elapsed = now_ns() - t0;
    PQfinish(s.conn);
    if (rc != 0 || s.received == 0) {
        free(s.lat);
        return 1;
    }
    if (o.dump) {
        FILE *f = fopen(o.dump, "w");
        if (!f) {
            fprintf(stderr, "pageserver_getpage_load: %s: %s\n", o.dump, strerror(errno));
            free(s.lat);
            return 1;
        }
        for (long i = 0; i < s.received; i++)
            fprintf(f, "%" PRIu64 "\n", s.lat[i]);
        if (fclose(f) != 0) {
            fprintf(stderr, "pageserver_getpage_load: %s: %s\n", o.dump, strerror(errno));
            free(s.lat);
            return 1;
        }
    }
    long n = s.received;
    double sum = 0;
    for (long i = 0; i < n; i++)
        sum += (double)s.lat[i];
    qsort(s.lat, (size_t)n, sizeof *s.lat, cmp_u64);
    double secs = (double)elapsed / 1e9;
    printf("requests %ld errors %ld zero_pages %ld seconds %.6f pages_per_s %.1f mean_us %.1f "
           "p50_us %.1f p90_us %.1f p99_us %.1f p999_us %.1f max_us %.1f\n",
           n, s.errors, s.zero_pages, secs, (double)n / secs, sum / (double)n / 1e3,
           (double)percentile(s.lat, n, 50) / 1e3, (double)percentile(s.lat, n, 90) / 1e3,
           (double)percentile(s.lat, n, 99) / 1e3, (double)percentile(s.lat, n, 99.9) / 1e3,
           (double)s.lat[n - 1] / 1e3);
    free(s.lat);
    return 0;
}
