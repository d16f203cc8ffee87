/*
 * demo.c: `strata demo`: brings the cluster up, runs a short pgbench with
 * progress lines and ends with a summary an operator can read at a glance:
 * TPS, commit latency p50/p99, WAL bytes per transaction (from the
 * compute's WAL position before and after), images the pageserver
 * generated and the longest delta chain any read replayed (from its
 * /metrics), then how to connect and how to stop.
 *
 * Latencies come from pgbench's per-transaction log (-l), written under
 * the cluster directory and removed afterwards.
 *
 * Not for: starting components (cmd_cluster.c) or other tools (cmd_tools.c).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "cli/local/locate.h"
#include "cli/local/pageserver.h"
#include "cli/local/probe.h"
#include "cli/local/proc.h"
#include "base/lsn.h"

#define DEMO_SCALE "10"
#define DEMO_SECONDS 30
#define DEMO_CLIENTS "4"
/* Most transactions whose latency the summary keeps (30 s at a few
 * thousand TPS fits easily). */
#define DEMO_MAX_SAMPLES (4u << 20)

typedef struct demo_metrics {
    double images_written;
    double chain_max;
    bool known;
} demo_metrics;

/* The compute's current WAL insert position, or LSN_INVALID. */
static lsn_t wal_position(const char *connstr)
{
    lsn_t lsn = LSN_INVALID;
    PGconn *conn = PQconnectdb(connstr);
    if (PQstatus(conn) == CONNECTION_OK) {
        PGresult *r = PQexec(conn, "select pg_current_wal_lsn()");
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
            !lsn_parse(PQgetvalue(r, 0, 0), &lsn))
            lsn = LSN_INVALID;
        PQclear(r);
    }
    PQfinish(conn);
    return lsn;
}

/* Value of an unlabelled sample "name value" in a Prometheus text page. */
static bool metric_value(const char *page, const char *name, double *out)
{
    size_t n = strlen(name);
    for (const char *p = page; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, n) == 0 && p[n] == ' ') {
            char *end;
            double v = strtod(p + n + 1, &end);
            if (end == p + n + 1)
                return false;
            *out = v;
            return true;
        }
    }
    return false;
}

static void read_metrics(const cluster *c, demo_metrics *m)
{
    memset(m, 0, sizeof *m);
    char *body = NULL;
    cli_err err = {{0}};
    if (probe_http_get(c->pageserver_http_port, "/metrics", NULL, 2000, &body, &err) != 0)
        return;
    m->known = metric_value(body, "pageserver_image_written_total", &m->images_written) &&
               metric_value(body, "pageserver_read_chain_max", &m->chain_max);
    free(body);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/*
 * Reads every pgbench log file "<prefix>.*" in dir (one line per
 * transaction: client, number, latency in us, script, epoch s, us) into
 * lat_ms, removing the files.  Returns the number of transactions.
 */
static size_t read_latencies(const char *dir, const char *prefix, double *lat_ms, size_t max)
{
    size_t n = 0, plen = strlen(prefix);
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, plen) != 0 || e->d_name[plen] != '.')
            continue;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            long client, txno, lat_us;
            while (n < max && fscanf(f, "%ld %ld %ld %*[^\n]", &client, &txno, &lat_us) == 3)
                lat_ms[n++] = (double)lat_us / 1000.0;
            fclose(f);
        }
        unlink(path);
    }
    closedir(d);
    return n;
}

static double percentile(const double *sorted, size_t n, double q)
{
    if (n == 0)
        return 0;
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

static void print_summary(const cluster *c, const char *connstr, size_t txns, double *lat,
                          lsn_t wal0, lsn_t wal1, const demo_metrics *m0, const demo_metrics *m1)
{
    qsort(lat, txns, sizeof *lat, cmp_double);
    printf("\n== summary: pgbench TPC-B-like, %s clients, %d s, scale %s ==\n", DEMO_CLIENTS,
           DEMO_SECONDS, DEMO_SCALE);
    printf("  transactions           %zu\n", txns);
    printf("  TPS                    %.1f\n", (double)txns / DEMO_SECONDS);
    printf("  commit latency         p50 %.2f ms, p99 %.2f ms (each commit waits for 2 of 3 "
           "safekeepers' fsync)\n",
           percentile(lat, txns, 0.50), percentile(lat, txns, 0.99));
    if (wal0 != LSN_INVALID && wal1 != LSN_INVALID && wal1 >= wal0 && txns > 0)
        printf("  WAL per transaction    %.0f bytes (full_page_writes=off)\n",
               (double)(wal1 - wal0) / (double)txns);
    else
        printf("  WAL per transaction    unknown (could not read the compute's WAL position)\n");
    if (m0->known && m1->known)
        printf("  images generated       %.0f by the pageserver during the run\n"
               "  longest chain read     %.0f WAL records replayed for one page (since the "
               "pageserver started)\n",
               m1->images_written - m0->images_written, m1->chain_max);
    else
        printf("  images, chains         unknown (the pageserver's /metrics did not answer)\n");

    printf("\nThe cluster keeps running under %s.\n"
           "  connect:   strata psql --dir %s      (or psql \"%s\")\n"
           "  status:    strata status --dir %s\n"
           "  crash one: strata stop sk2 --immediate --dir %s   (commits go on)\n"
           "  stop all:  strata down --dir %s\n",
           c->dir, c->dir, connstr, c->dir, c->dir, c->dir);
    if (pageserver_pid(c) != 0)
        /* pg_class (relfilenode 1259 until rewritten) in the postgres
         * database (OID 5 since PostgreSQL 15). */
        printf("  a page:    strata page get --dir %s --rel 1663/5/1259 --blk 0 | od -A d -t x1 "
               "| head\n",
               c->dir);
}

int cmd_demo(const cli_opts *o)
{
    int rc = cmd_up(o);
    if (rc != CLI_OK)
        return rc;
    cli_err err = {{0}};
    cluster c;
    char dir[PATH_MAX], pgbench[PATH_MAX], connstr[512];
    if (cluster_resolve_dir(o->dir, dir, &err) != 0)
        return cli_fail(&err);
    rc = cluster_load(dir, &c, &err);
    if (rc == 1)
        cli_err_set(&err, "no cluster under %s", dir);
    if (rc != 0 || locate_pg_program("pgbench", pgbench, &err) != 0)
        return cli_fail(&err);
    cluster_compute_connstr(&c, connstr, sizeof connstr);
    proc_user self = {.drop = false};

    printf("\ndemo: initialising pgbench tables (scale " DEMO_SCALE ")\n");
    fflush(stdout);
    char *init[] = {pgbench, "-i", "-q", "-s", DEMO_SCALE, connstr, NULL};
    if (proc_run(init, NULL, &self, 600, &err) != 0)
        return cli_fail(&err);

    char seconds[16], prefix_opt[PATH_MAX + 64];
    snprintf(seconds, sizeof seconds, "%d", DEMO_SECONDS);
    const char *prefix = "demo_pgbench_log";
    snprintf(prefix_opt, sizeof prefix_opt, "--log-prefix=%s/%s", c.dir, prefix);
    demo_metrics m0, m1;
    read_metrics(&c, &m0);
    lsn_t wal0 = wal_position(connstr);
    printf("\ndemo: pgbench, " DEMO_CLIENTS " clients for %d s, a progress line a second; "
           "every commit waits for 2 of 3 safekeepers to fsync it\n",
           DEMO_SECONDS);
    fflush(stdout);
    char *run[] = {pgbench, "-c", DEMO_CLIENTS, "-j",       "2",     "-T", seconds,
                   "-P",    "1",  "-l",         prefix_opt, connstr, NULL};
    if (proc_run(run, NULL, &self, 600, &err) != 0)
        return cli_fail(&err);
    lsn_t wal1 = wal_position(connstr);
    read_metrics(&c, &m1);

    double *lat = malloc(DEMO_MAX_SAMPLES * sizeof *lat);
    if (lat == NULL) {
        cli_err_set(&err, "out of memory");
        return cli_fail(&err);
    }
    size_t txns = read_latencies(c.dir, prefix, lat, DEMO_MAX_SAMPLES);
    print_summary(&c, connstr, txns, lat, wal0, wal1, &m0, &m1);
    free(lat);
    if (txns == 0) {
        cli_err_set(&err, "pgbench committed no transaction (no log lines under %s)", c.dir);
        return cli_fail(&err);
    }
    return CLI_OK;
}
