/*
 * cmd_page.c: `strata page get`, one page version fetched from the
 * pageserver over the pagestream protocol (docs/design.md §3.4) and written,
 * raw, to stdout: exactly PAGESTREAM_BLCKSZ bytes, nothing else.
 *
 * It speaks as a compute would: the query `pagestream_v1 <tenant>
 * <timeline>` switches the session to CopyBoth, then one GetPage request
 * goes out as a CopyData message and one response comes back.  Without
 * --lsn it asks for the latest version (request_lsn = LSN_MAX) and promises
 * no change since the pageserver's last ingested record; with --lsn X both
 * LSNs are X.  Every wait is bounded.
 *
 * Not for: the codec (proto/pagestream.c) or starting anything.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "cli/local/pageserver.h"
#include "cli/local/proc.h"
#include "proto/pagestream.h"

/* Longer than the pageserver's own wait for a not-yet-ingested LSN (60 s
 * by default), so its clearer error arrives first. */
#define PAGE_TIMEOUT_MS 90000
#define PAGE_CONNECT_TIMEOUT_S 10
#define PAGE_REQID 1

static const char *const fork_names[] = {"main", "fsm", "vm", "init"};

/* Waits until conn's socket is ready for events or the deadline passes. */
static int page_wait(PGconn *conn, short events, long long deadline, cli_err *err)
{
    for (;;) {
        long long left = deadline - proc_now_ms();
        if (left <= 0)
            return cli_err_set(err, "pageserver did not answer within %d s",
                               PAGE_TIMEOUT_MS / 1000);
        struct pollfd p = {.fd = PQsocket(conn), .events = events};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return cli_err_set(err, "poll: %s", strerror(errno));
        if (r > 0)
            return 0;
    }
}

/* The first line of libpq's message for conn. */
static const char *page_pq_error(PGconn *conn, char *buf, size_t len)
{
    snprintf(buf, len, "%s", PQerrorMessage(conn));
    buf[strcspn(buf, "\r\n")] = '\0';
    return buf;
}

/* Sends the pagestream query and waits for CopyBothResponse. */
static int page_start_stream(PGconn *conn, const cluster *c, long long deadline, cli_err *err)
{
    char tenant[STRATA_ID_HEX_LEN], timeline[STRATA_ID_HEX_LEN], query[128], why[512];
    snprintf(query, sizeof query, "pagestream_v%d %s %s", PAGESTREAM_PROTO_VERSION,
             strata_id_format(&c->tenant_id, tenant), strata_id_format(&c->timeline_id, timeline));
    if (!PQsendQuery(conn, query))
        return cli_err_set(err, "sending %s: %s", query, page_pq_error(conn, why, sizeof why));
    for (;;) {
        while (PQisBusy(conn)) {
            if (page_wait(conn, POLLIN, deadline, err) != 0)
                return -1;
            if (!PQconsumeInput(conn))
                return cli_err_set(err, "pageserver: %s", page_pq_error(conn, why, sizeof why));
        }
        PGresult *res = PQgetResult(conn);
        if (res == NULL)
            return cli_err_set(err, "pageserver ended the session before streaming");
        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_COPY_BOTH) {
            PQclear(res);
            return 0;
        }
        snprintf(why, sizeof why, "%s", PQresultErrorMessage(res));
        why[strcspn(why, "\r\n")] = '\0';
        PQclear(res);
        return cli_err_set(err, "pageserver refused %s: %s", query, why[0] ? why : PQresStatus(st));
    }
}

static int page_send(PGconn *conn, const pagestream_request *req, long long deadline, cli_err *err)
{
    uint8_t buf[128];
    char why[512];
    size_t len = pagestream_encode_request(req, buf, sizeof buf);
    if (len == 0)
        return cli_err_set(err, "encoding the GetPage request failed");
    if (PQputCopyData(conn, (const char *)buf, (int)len) != 1)
        return cli_err_set(err, "sending GetPage: %s", page_pq_error(conn, why, sizeof why));
    for (;;) {
        int r = PQflush(conn);
        if (r == 0)
            return 0;
        if (r < 0)
            return cli_err_set(err, "sending GetPage: %s", page_pq_error(conn, why, sizeof why));
        if (page_wait(conn, POLLOUT, deadline, err) != 0)
            return -1;
    }
}

/* Receives one CopyData message; *msg is libpq's, freed with PQfreemem. */
static int page_receive(PGconn *conn, char **msg, int *len, long long deadline, cli_err *err)
{
    char why[512];
    for (;;) {
        int n = PQgetCopyData(conn, msg, 1);
        if (n > 0) {
            *len = n;
            return 0;
        }
        if (n == -2)
            return cli_err_set(err, "pageserver: %s", page_pq_error(conn, why, sizeof why));
        if (n == -1) {
            /* The stream ended: the result says why. */
            PGresult *res = PQgetResult(conn);
            snprintf(why, sizeof why, "%s", res ? PQresultErrorMessage(res) : "");
            why[strcspn(why, "\r\n")] = '\0';
            PQclear(res);
            return cli_err_set(err, "pageserver ended the stream without a response%s%s",
                               why[0] ? ": " : "", why);
        }
        if (page_wait(conn, POLLIN, deadline, err) != 0)
            return -1;
        if (!PQconsumeInput(conn))
            return cli_err_set(err, "pageserver: %s", page_pq_error(conn, why, sizeof why));
    }
}

/* Checks the response and writes the page to stdout. */
static int page_output(const pagestream_request *req, const char *msg, int len, cli_err *err)
{
    pagestream_response resp;
    const char *why = NULL;
    if (pagestream_decode_response((const uint8_t *)msg, (size_t)len, &resp, &why) != 0)
        return cli_err_set(err, "malformed response from the pageserver: %s", why);
    if (resp.reqid != req->reqid)
        return cli_err_set(err, "pageserver answered request %llu, not %llu",
                           (unsigned long long)resp.reqid, (unsigned long long)req->reqid);
    if (resp.tag == PS_RESP_ERROR) {
        int mlen = resp.u.error.message_len > PAGESTREAM_MAX_ERROR_MESSAGE
                       ? PAGESTREAM_MAX_ERROR_MESSAGE
                       : (int)resp.u.error.message_len;
        return cli_err_set(err, "pageserver: %.5s: %.*s", resp.u.error.sqlstate, mlen,
                           resp.u.error.message);
    }
    if (resp.tag != PS_RESP_GETPAGE)
        return cli_err_set(err, "pageserver answered GetPage with message tag 0x%02x", resp.tag);
    if (fwrite(resp.u.page, 1, PAGESTREAM_BLCKSZ, stdout) != PAGESTREAM_BLCKSZ ||
        fflush(stdout) != 0)
        return cli_err_set(err, "writing the page to stdout: %s", strerror(errno));
    return 0;
}

int cmd_page(const cli_opts *o)
{
    cli_err err = {{0}};
    cluster c;
    if (cluster_load_existing(o->dir, &c, &err) != 0)
        return cli_fail(&err);
    if (pageserver_pid(&c) == 0) {
        cli_err_set(&err, "the pageserver under %s is not running (strata start pageserver)",
                    c.dir);
        return cli_fail(&err);
    }

    pagestream_request req = {.tag = PS_REQ_GETPAGE, .reqid = PAGE_REQID};
    req.u.page.rel = (pagestream_rel){
        .spc = o->page.spc, .db = o->page.db, .rel = o->page.rel, .fork = o->page.fork};
    req.u.page.blkno = o->page.blkno;
    if (o->page.has_lsn) {
        req.request_lsn = o->page.lsn;
        req.not_modified_since = o->page.lsn;
    } else {
        pageserver_timeline tl;
        pageserver_query(&c, &tl);
        if (!tl.known) {
            char tl_hex[STRATA_ID_HEX_LEN];
            cli_err_set(&err, "the pageserver does not report timeline %s (not imported yet?)",
                        strata_id_format(&c.timeline_id, tl_hex));
            return cli_fail(&err);
        }
        req.request_lsn = LSN_MAX;
        req.not_modified_since = tl.last_record_lsn;
    }

    char connstr[256];
    snprintf(connstr, sizeof connstr,
             "host=127.0.0.1 port=%d user=%s dbname=postgres connect_timeout=%d "
             "sslmode=disable gssencmode=disable application_name=strata-page-get",
             c.pageserver_pg_port, c.pg_user, PAGE_CONNECT_TIMEOUT_S);
    long long deadline = proc_now_ms() + PAGE_TIMEOUT_MS;
    /* With auth the tenant's token is the password (docs/operations.md). */
    const char *keys[] = {"dbname", "password", NULL};
    const char *vals[] = {connstr, c.auth ? c.tenant_token : NULL, NULL};
    if (!c.auth)
        keys[1] = NULL;
    PGconn *conn = PQconnectdbParams(keys, vals, 1);
    if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
        char why[512];
        cli_err_set(&err, "connecting to the pageserver on port %d: %s", c.pageserver_pg_port,
                    conn ? page_pq_error(conn, why, sizeof why) : "out of memory");
        PQfinish(conn);
        return cli_fail(&err);
    }
    char *msg = NULL;
    int len = 0;
    int rc = -1;
    if (PQsetnonblocking(conn, 1) != 0)
        cli_err_set(&err, "libpq: cannot make the connection non-blocking");
    else if (page_start_stream(conn, &c, deadline, &err) == 0 &&
             page_send(conn, &req, deadline, &err) == 0 &&
             page_receive(conn, &msg, &len, deadline, &err) == 0)
        rc = page_output(&req, msg, len, &err);
    if (msg != NULL)
        PQfreemem(msg);
    PQfinish(conn);
    if (rc != 0) {
        /* Say which page, so a script's log reads on its own. */
        char lsn[LSN_FMT_LEN];
        cli_err full = {{0}};
        cli_err_set(&full, "page %u/%u/%u %s block %u at %s: %s", o->page.spc, o->page.db,
                    o->page.rel, fork_names[o->page.fork], o->page.blkno,
                    o->page.has_lsn ? lsn_format(o->page.lsn, lsn) : "latest", err.msg);
        return cli_fail(&full);
    }
    return CLI_OK;
}
