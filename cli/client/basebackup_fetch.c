/*
 * basebackup_fetch.c: the basebackup client.  See basebackup_fetch.h.
 *
 * Blocking libpq (PQgetCopyData with async = 0) bounded by the socket's
 * receive timeout; each CopyData goes straight into the tar reader, whose
 * callbacks write the files.  fsync is not needed: the compute's data
 * directory is ephemeral (docs/design.md §7.6, fsync = off).
 */
#include "cli/client/basebackup_fetch.h"

#include <errno.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "cli/client/basebackup_tar.h"
#include "cli/local/proc.h"

typedef struct extract {
    bbtar_reader r;
    const char *dir;
    int fd; /* the file being written, -1 none */
    bbfetch_result *res;
} extract;

static int path_of(extract *x, const char *name, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s/%s", x->dir, name);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

static int on_begin(const bbtar_entry *e, void *arg)
{
    extract *x = arg;
    char path[PATH_MAX], msg[PATH_MAX + 64];
    if (path_of(x, e->name, path, sizeof path) != 0) {
        bbtar_fail(&x->r, "path too long");
        return -1;
    }
    if (e->is_dir) {
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            snprintf(msg, sizeof msg, "mkdir %s: %s", path, strerror(errno));
            bbtar_fail(&x->r, msg);
            return -1;
        }
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
            snprintf(msg, sizeof msg, "%s exists and is not a directory", path);
            bbtar_fail(&x->r, msg);
            return -1;
        }
        x->res->dirs++;
        return 0;
    }
    x->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (x->fd < 0) {
        snprintf(msg, sizeof msg, "create %s: %s", path, strerror(errno));
        bbtar_fail(&x->r, msg);
        return -1;
    }
    return 0;
}

static int on_data(const uint8_t *p, size_t n, void *arg)
{
    extract *x = arg;
    while (n > 0) {
        ssize_t w = write(x->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            char msg[128];
            snprintf(msg, sizeof msg, "write: %s", w < 0 ? strerror(errno) : "no progress");
            bbtar_fail(&x->r, msg);
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int on_end(const bbtar_entry *e, void *arg)
{
    extract *x = arg;
    if (e->is_dir)
        return 0;
    int rc = close(x->fd);
    x->fd = -1;
    if (rc != 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "close: %s", strerror(errno));
        bbtar_fail(&x->r, msg);
        return -1;
    }
    x->res->files++;
    return 0;
}

static const char *pq_error(PGconn *conn, const PGresult *res, char *buf, size_t len)
{
    const char *m = res != NULL ? PQresultErrorMessage(res) : "";
    if (m == NULL || m[0] == '\0')
        m = PQerrorMessage(conn);
    snprintf(buf, len, "%s", m);
    buf[strcspn(buf, "\n")] = '\0';
    return buf;
}

int bbfetch_run(const cluster *c, lsn_t lsn, bool full, const char *dir, int timeout_ms,
                bbfetch_result *res, cli_err *err)
{
    return bbfetch_run_mode(c, lsn, full ? "full" : "", dir, timeout_ms, res, err);
}

int bbfetch_run_mode(const cluster *c, lsn_t lsn, const char *mode, const char *dir, int timeout_ms,
                     bbfetch_result *res, cli_err *err)
{
    memset(res, 0, sizeof *res);
    if (mkdir(dir, 0700) != 0)
        return cli_err_set(err, "mkdir %s: %s", dir, strerror(errno));
    char port[16], tenant[STRATA_ID_HEX_LEN], timeline[STRATA_ID_HEX_LEN], lb[LSN_FMT_LEN];
    snprintf(port, sizeof port, "%d", c->pageserver_pg_port);
    /* With a pageserver --auth-file: the token in STRATA_PAGESERVER_PASSWORD. */
    const char *password = getenv("STRATA_PAGESERVER_PASSWORD");
    const char *keys[] = {"host",
                          "port",
                          "user",
                          "dbname",
                          "connect_timeout",
                          "sslmode",
                          "gssencmode",
                          "application_name",
                          "password",
                          NULL};
    const char *vals[] = {c->pageserver_host, port,      c->pg_user,          "postgres", "10",
                          "disable",          "disable", "strata-basebackup", password,   NULL};
    if (password == NULL || password[0] == '\0')
        keys[8] = NULL;
    PGconn *conn = PQconnectdbParams(keys, vals, 0);
    char why[512];
    if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
        cli_err_set(err, "connecting to the pageserver at %s:%d: %s", c->pageserver_host,
                    c->pageserver_pg_port,
                    conn ? pq_error(conn, NULL, why, sizeof why) : "out of memory");
        PQfinish(conn);
        return -1;
    }
    /* Bound every blocking read: the pageserver itself waits at most 60 s
     * for the LSN, then streams without pauses. */
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(PQsocket(conn), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char cmd[200];
    if (lsn == LSN_INVALID)
        snprintf(lb, sizeof lb, "latest");
    else
        lsn_format(lsn, lb);
    snprintf(cmd, sizeof cmd, "basebackup %s %s %s%s%s", strata_id_format(&c->tenant_id, tenant),
             strata_id_format(&c->timeline_id, timeline), lb, mode[0] ? " " : "", mode);
    int rc = -1;
    PGresult *pr = PQexec(conn, cmd);
    if (PQresultStatus(pr) != PGRES_COPY_OUT) {
        cli_err_set(err, "basebackup at %s: %s", lb, pq_error(conn, pr, why, sizeof why));
        PQclear(pr);
        PQfinish(conn);
        return -1;
    }
    PQclear(pr);
    extract x = {.dir = dir, .fd = -1, .res = res};
    bbtar_callbacks cb = {.begin = on_begin, .data = on_data, .end = on_end, .arg = &x};
    bbtar_init(&x.r, &cb);
    long long deadline = proc_now_ms() + timeout_ms;
    for (;;) {
        char *buf = NULL;
        int n = PQgetCopyData(conn, &buf, 0);
        if (n > 0) {
            res->bytes += (uint64_t)n;
            int frc = bbtar_feed(&x.r, (const uint8_t *)buf, (size_t)n);
            PQfreemem(buf);
            if (frc != 0) {
                cli_err_set(err, "basebackup at %s: %s", lb, x.r.err);
                goto out;
            }
            if (proc_now_ms() > deadline) {
                cli_err_set(err, "basebackup at %s took longer than %d s", lb, timeout_ms / 1000);
                goto out;
            }
            continue;
        }
        if (n == -1)
            break;
        cli_err_set(err, "basebackup at %s: receiving: %s", lb,
                    pq_error(conn, NULL, why, sizeof why));
        goto out;
    }
    pr = PQgetResult(conn);
    if (PQresultStatus(pr) != PGRES_COMMAND_OK) {
        cli_err_set(err, "basebackup at %s: %s", lb, pq_error(conn, pr, why, sizeof why));
        PQclear(pr);
        goto out;
    }
    PQclear(pr);
    if (bbtar_finish(&x.r) != 0) {
        cli_err_set(err, "basebackup at %s: %s", lb, x.r.err);
        goto out;
    }
    rc = 0;
out:
    if (x.fd >= 0)
        close(x.fd);
    PQfinish(conn);
    return rc;
}
