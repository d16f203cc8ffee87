/*
 * pqstream.c: nonblocking libpq CopyBoth streams.  See pqstream.h.
 *
 * libpq's async API is used exactly as its manual prescribes: PQconnectPoll
 * until PGRES_POLLING_OK (the socket may change while polling), then
 * PQsendQuery + PQflush, PQconsumeInput + PQisBusy + PQgetResult until the
 * CopyBoth result, then PQgetCopyData(async) and PQputCopyData + PQflush in
 * nonblocking mode.
 */
#include "compute/walproposer/pqstream.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* libpq messages span lines ("...\n\tIs the server running..."); callers
 * want a one-line reason. */
static void one_line(char *msg)
{
    size_t n;

    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    n = strlen(msg);
    while (n > 0 && msg[n - 1] == ' ')
        msg[--n] = '\0';
}

static void set_error(pqstream *s, const char *what)
{
    const char *detail = s->conn ? PQerrorMessage(s->conn) : "";

    snprintf(s->error, sizeof(s->error), "%s%s%s", what, detail[0] ? ": " : "", detail);
    one_line(s->error);
}

static pqstream_result fail(pqstream *s, const char *what)
{
    set_error(s, what);
    pqstream_close(s);
    return PQSTREAM_FAILED;
}

void pqstream_init(pqstream *s)
{
    memset(s, 0, sizeof(*s));
    s->state = PQSTREAM_IDLE;
}

pqstream_result pqstream_start(pqstream *s, const char *const *keywords, const char *const *values,
                               const char *start_query)
{
    assert(s->state == PQSTREAM_IDLE && s->conn == NULL);
    if (strlen(start_query) >= sizeof(s->query)) {
        snprintf(s->error, sizeof(s->error), "start command too long");
        return PQSTREAM_FAILED;
    }
    strcpy(s->query, start_query);
    s->error[0] = '\0';
    s->conn = PQconnectStartParams(keywords, values, 0);
    if (s->conn == NULL) {
        snprintf(s->error, sizeof(s->error), "out of memory starting a connection");
        return PQSTREAM_FAILED;
    }
    if (PQstatus(s->conn) == CONNECTION_BAD)
        return fail(s, "cannot start connection");
    s->state = PQSTREAM_CONNECTING;
    s->generation++;
    /* The manual: behave as if the last poll returned PGRES_POLLING_WRITING. */
    s->want_write = true;
    s->want_read = false;
    return PQSTREAM_OK;
}

static pqstream_result send_start_query(pqstream *s)
{
    if (PQsetnonblocking(s->conn, 1) != 0)
        return fail(s, "cannot make connection nonblocking");
    if (!PQsendQuery(s->conn, s->query))
        return fail(s, "cannot send start command");
    s->state = PQSTREAM_STARTING;
    if (pqstream_flush(s) != 0)
        return PQSTREAM_FAILED;
    return PQSTREAM_OK;
}

static pqstream_result advance_connecting(pqstream *s)
{
    switch (PQconnectPoll(s->conn)) {
    case PGRES_POLLING_READING:
        /* libpq may have moved to another address on a new socket. */
        s->generation++;
        s->want_read = true;
        s->want_write = false;
        return PQSTREAM_OK;
    case PGRES_POLLING_WRITING:
        s->generation++;
        s->want_read = false;
        s->want_write = true;
        return PQSTREAM_OK;
    case PGRES_POLLING_OK:
        s->want_read = false;
        s->want_write = false;
        return send_start_query(s);
    case PGRES_POLLING_FAILED:
    default:
        return fail(s, "connection failed");
    }
}

static pqstream_result advance_starting(pqstream *s)
{
    if (pqstream_flush(s) != 0)
        return PQSTREAM_FAILED;
    if (!PQconsumeInput(s->conn))
        return fail(s, "connection lost while starting the stream");
    while (!PQisBusy(s->conn)) {
        PGresult *res = PQgetResult(s->conn);
        ExecStatusType status;

        if (res == NULL)
            return fail(s, "server ended the start command without a CopyBoth response");
        status = PQresultStatus(res);
        if (status == PGRES_COPY_BOTH) {
            PQclear(res);
            s->state = PQSTREAM_STREAMING;
            return PQSTREAM_OK;
        }
        if (status == PGRES_FATAL_ERROR || status == PGRES_BAD_RESPONSE) {
            const char *msg = PQresultErrorMessage(res);

            snprintf(s->error, sizeof(s->error), "start command failed: %s", msg);
            PQclear(res);
            one_line(s->error);
            pqstream_close(s);
            return PQSTREAM_FAILED;
        }
        /* Anything else (e.g. a result set) is unexpected but harmless. */
        PQclear(res);
    }
    return PQSTREAM_OK;
}

pqstream_result pqstream_advance(pqstream *s)
{
    switch (s->state) {
    case PQSTREAM_CONNECTING:
        return advance_connecting(s);
    case PQSTREAM_STARTING:
        return advance_starting(s);
    case PQSTREAM_STREAMING:
        return pqstream_flush(s) == 0 ? PQSTREAM_OK : PQSTREAM_FAILED;
    case PQSTREAM_IDLE:
    default:
        return PQSTREAM_OK;
    }
}

int pqstream_recv(pqstream *s, char **msg, int *len)
{
    int r = pqstream_recv_buffered(s, msg, len);

    if (r != 0)
        return r;
    if (pqstream_consume(s) != 0)
        return -1;
    return pqstream_recv_buffered(s, msg, len);
}

int pqstream_consume(pqstream *s)
{
    assert(s->state == PQSTREAM_STREAMING);
    if (!PQconsumeInput(s->conn)) {
        fail(s, "connection lost");
        return -1;
    }
    return 0;
}

int pqstream_recv_buffered(pqstream *s, char **msg, int *len)
{
    int n;

    assert(s->state == PQSTREAM_STREAMING);
    n = PQgetCopyData(s->conn, msg, 1);
    if (n > 0) {
        *len = n;
        return 1;
    }
    if (n == 0)
        return 0;
    if (n == -1) {
        /* The copy ended: the final result says why (usually an error). */
        PGresult *res = PQgetResult(s->conn);
        if (res != NULL && PQresultStatus(res) == PGRES_FATAL_ERROR) {
            snprintf(s->error, sizeof(s->error), "stream ended: %s", PQresultErrorMessage(res));
            PQclear(res);
            one_line(s->error);
            pqstream_close(s);
            return -1;
        }
        PQclear(res);
        fail(s, "stream ended by the server");
        return -1;
    }
    fail(s, "stream read failed");
    return -1;
}

int pqstream_send(pqstream *s, const void *buf, size_t len)
{
    assert(s->state == PQSTREAM_STREAMING);
    assert(len <= 0x7fffffff);
    /* In nonblocking mode 0 means "buffer full, try later": flush then retry
     * once; libpq grows its output buffer, so a second 0 is a real failure. */
    if (PQputCopyData(s->conn, buf, (int)len) != 1) {
        if (PQflush(s->conn) < 0 || PQputCopyData(s->conn, buf, (int)len) != 1) {
            fail(s, "cannot queue message");
            return -1;
        }
    }
    return pqstream_flush(s);
}

int pqstream_flush(pqstream *s)
{
    int r;

    if (s->conn == NULL)
        return -1;
    r = PQflush(s->conn);
    if (r < 0) {
        fail(s, "cannot send");
        return -1;
    }
    s->want_write = (r == 1);
    return 0;
}

int pqstream_socket(const pqstream *s)
{
    if (s->state == PQSTREAM_IDLE || s->conn == NULL)
        return -1;
    return PQsocket(s->conn);
}

int pqstream_wait_events(const pqstream *s)
{
    int ev = 0;

    switch (s->state) {
    case PQSTREAM_IDLE:
        return 0;
    case PQSTREAM_CONNECTING:
        if (s->want_read)
            ev |= PQSTREAM_WAIT_READ;
        if (s->want_write)
            ev |= PQSTREAM_WAIT_WRITE;
        return ev;
    case PQSTREAM_STARTING:
    case PQSTREAM_STREAMING:
    default:
        ev = PQSTREAM_WAIT_READ;
        if (s->want_write)
            ev |= PQSTREAM_WAIT_WRITE;
        return ev;
    }
}

void pqstream_close(pqstream *s)
{
    if (s->conn != NULL)
        PQfinish(s->conn);
    s->conn = NULL;
    s->state = PQSTREAM_IDLE;
    s->want_read = false;
    s->want_write = false;
}

const char *pqstream_error(const pqstream *s)
{
    return s->error;
}
