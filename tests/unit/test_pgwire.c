/*
 * Unit tests for common/net/pgwire.c: a real server on a libuv loop in a thread
 * on 127.0.0.1, driven by real libpq (startup, SSLRequest, password and MD5
 * auth, queries, errors, CopyBoth, CopyOut with backpressure) and by raw
 * sockets for malformed input; plus the pure framer and a detached
 * connection for the startup-options parser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/pgwire.h"

/* ------------------------------------------------------------ test server */

#define FLOOD_CHUNK 8192

typedef struct conn_state {
    uv_timer_t timer; /* SLEEP query */
    bool timer_used;
    pgwire_conn *c;
    /* FLOOD: CopyOut of n chunks, paced by backpressure. */
    uint32_t flood_total, flood_sent;
} conn_state;

typedef struct test_server {
    uv_loop_t loop;
    uv_async_t stop_async;
    pthread_t thread;
    pgwire_server *srv;
    int port;
    pthread_mutex_t mu;
    /* Observations from the loop thread, under mu. */
    int connects, closes;
    char last_user[64], last_db[64], last_app[64], last_tenant[64], last_timeline[64];
    bool last_replication;
    int congestion_pauses;
    size_t max_pending;
    int overflow_sent;
} test_server;

static void cs_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

static void conn_state_free(conn_state *cs)
{
    if (cs->timer_used) {
        uv_timer_stop(&cs->timer);
        cs->timer.data = cs;
        uv_close((uv_handle_t *)&cs->timer, cs_timer_closed);
    } else {
        free(cs);
    }
}

static int h_connect(pgwire_conn *c, void *arg)
{
    test_server *ts = arg;
    const char *reject = pgwire_conn_option(c, "reject");
    if (reject && strcmp(reject, "1") == 0) {
        pgwire_send_error(c, "FATAL", "3D000", "tenant does not exist", "rejected on purpose");
        return -1;
    }
    conn_state *cs = calloc(1, sizeof *cs);
    assert_non_null(cs);
    cs->c = c;
    pgwire_conn_set_data(c, cs);
    pthread_mutex_lock(&ts->mu);
    ts->connects++;
    const char *v;
    snprintf(ts->last_user, sizeof ts->last_user, "%s",
             (v = pgwire_conn_param(c, "user")) ? v : "");
    snprintf(ts->last_db, sizeof ts->last_db, "%s",
             (v = pgwire_conn_param(c, "database")) ? v : "");
    snprintf(ts->last_app, sizeof ts->last_app, "%s",
             (v = pgwire_conn_param(c, "application_name")) ? v : "");
    snprintf(ts->last_tenant, sizeof ts->last_tenant, "%s",
             (v = pgwire_conn_option(c, "tenant_id")) ? v : "");
    snprintf(ts->last_timeline, sizeof ts->last_timeline, "%s",
             (v = pgwire_conn_option(c, "timeline_id")) ? v : "");
    ts->last_replication = pgwire_conn_is_replication(c);
    pthread_mutex_unlock(&ts->mu);
    return 0;
}

static void h_close(pgwire_conn *c, void *arg)
{
    test_server *ts = arg;
    pthread_mutex_lock(&ts->mu);
    ts->closes++;
    pthread_mutex_unlock(&ts->mu);
    conn_state_free(pgwire_conn_data(c));
}

static void send_one_row(pgwire_conn *c, const char *col, const char *val)
{
    const char *names[] = {col};
    const char *vals[] = {val};
    pgwire_send_row_description(c, 1, names, NULL);
    pgwire_send_data_row(c, 1, vals);
    pgwire_send_command_complete(c, "SELECT 1");
    pgwire_send_ready(c);
}

static void sleep_done(uv_timer_t *t)
{
    conn_state *cs = t->data;
    send_one_row(cs->c, "slept", "yes");
}

static void flood_pump(test_server *ts, conn_state *cs)
{
    pgwire_conn *c = cs->c;
    uint8_t chunk[FLOOD_CHUNK];
    while (cs->flood_sent < cs->flood_total) {
        if (pgwire_conn_is_congested(c)) {
            pthread_mutex_lock(&ts->mu);
            ts->congestion_pauses++;
            pthread_mutex_unlock(&ts->mu);
            return; /* on_writable resumes */
        }
        uint32_t seq = cs->flood_sent;
        memset(chunk, (int)(seq & 0xFF), sizeof chunk);
        memcpy(chunk, &seq, sizeof seq);
        assert_int_equal(pgwire_send_copy_data(c, chunk, sizeof chunk), 0);
        cs->flood_sent++;
        size_t p = pgwire_conn_pending_bytes(c);
        pthread_mutex_lock(&ts->mu);
        if (p > ts->max_pending)
            ts->max_pending = p;
        pthread_mutex_unlock(&ts->mu);
    }
    pgwire_send_copy_done(c);
    pgwire_send_command_complete(c, "COPY 0");
    pgwire_send_ready(c);
    cs->flood_total = 0;
}

static void h_writable(pgwire_conn *c, void *arg)
{
    conn_state *cs = pgwire_conn_data(c);
    if (cs->flood_total > 0)
        flood_pump(arg, cs);
}

static void h_query(pgwire_conn *c, const char *sql, void *arg)
{
    test_server *ts = arg;
    conn_state *cs = pgwire_conn_data(c);
    if (strncmp(sql, "ECHO ", 5) == 0) {
        send_one_row(c, "echo", sql + 5);
    } else if (strcmp(sql, "NULLROW") == 0) {
        const char *names[] = {"a", "b"};
        const uint32_t oids[] = {23, 25};
        const char *vals[] = {"42", NULL};
        pgwire_send_row_description(c, 2, names, oids);
        pgwire_send_data_row(c, 2, vals);
        pgwire_send_command_complete(c, "SELECT 1");
        pgwire_send_ready(c);
    } else if (strcmp(sql, "FAIL") == 0) {
        pgwire_send_error(c, "ERROR", "XX000", "requested failure", "details here");
    } else if (strcmp(sql, "FATAL") == 0) {
        pgwire_send_error(c, "FATAL", "57P01", "terminating connection on request", NULL);
    } else if (strcmp(sql, "SLEEP") == 0) {
        if (!cs->timer_used) {
            uv_timer_init(&ts->loop, &cs->timer);
            cs->timer_used = true;
        }
        cs->timer.data = cs;
        uv_timer_start(&cs->timer, sleep_done, 50, 0);
    } else if (strcmp(sql, "COPYBOTH") == 0) {
        assert_int_equal(pgwire_start_copy_both(c), 0);
        assert_true(pgwire_conn_in_copy(c));
    } else if (strncmp(sql, "COPYOUT ", 8) == 0) {
        int n = atoi(sql + 8);
        pgwire_start_copy_out(c);
        for (int i = 0; i < n; i++) {
            char line[32];
            int len = snprintf(line, sizeof line, "row %d\n", i);
            pgwire_send_copy_data(c, line, (size_t)len);
        }
        pgwire_send_copy_done(c);
        pgwire_send_command_complete(c, "COPY");
        pgwire_send_ready(c);
    } else if (strcmp(sql, "OVERFLOW") == 0) {
        /* A producer that ignores backpressure hits the hard limit. */
        static const uint8_t chunk[FLOOD_CHUNK];
        pgwire_start_copy_out(c);
        int sent = 0;
        while (sent < 100000 && pgwire_send_copy_data(c, chunk, sizeof chunk) == 0)
            sent++;
        pthread_mutex_lock(&ts->mu);
        ts->overflow_sent = sent;
        pthread_mutex_unlock(&ts->mu);
    } else if (strncmp(sql, "FLOOD ", 6) == 0) {
        cs->flood_total = (uint32_t)atoi(sql + 6);
        cs->flood_sent = 0;
        pgwire_start_copy_out(c);
        flood_pump(ts, cs);
    } else {
        pgwire_send_error(c, "ERROR", "42601", "unknown test command", sql);
    }
}

static void resume_input(uv_timer_t *t)
{
    conn_state *cs = t->data;
    pgwire_send_copy_data(cs->c, "resumed", 7);
    pgwire_conn_pause_input(cs->c, false);
}

/* CopyBoth: echo every message back with a prefix; "pause" stops input
 * for 100 ms. */
static void h_copy_data(pgwire_conn *c, const uint8_t *d, size_t n, void *arg)
{
    test_server *ts = arg;
    conn_state *cs = pgwire_conn_data(c);
    assert_int_equal(pgwire_send_copy_data2(c, "echo:", 5, d, n), 0);
    if (n == 5 && memcmp(d, "pause", 5) == 0) {
        pgwire_conn_pause_input(c, true);
        if (!cs->timer_used) {
            uv_timer_init(&ts->loop, &cs->timer);
            cs->timer_used = true;
        }
        cs->timer.data = cs;
        uv_timer_start(&cs->timer, resume_input, 100, 0);
    }
}

static void h_copy_done(pgwire_conn *c, void *arg)
{
    (void)arg;
    pgwire_send_copy_done(c);
    assert_false(pgwire_conn_in_copy(c));
    pgwire_send_command_complete(c, "COPY 0");
    pgwire_send_ready(c);
}

static const pgwire_handlers test_handlers = {
    .on_connect = h_connect,
    .on_query = h_query,
    .on_copy_data = h_copy_data,
    .on_copy_done = h_copy_done,
    .on_writable = h_writable,
    .on_close = h_close,
};

static void stop_cb(uv_async_t *a)
{
    test_server *ts = a->data;
    pgwire_server_stop(ts->srv);
    uv_close((uv_handle_t *)&ts->stop_async, NULL);
}

static void *loop_thread(void *arg)
{
    test_server *ts = arg;
    uv_run(&ts->loop, UV_RUN_DEFAULT);
    return NULL;
}

static test_server *server_start(const pgwire_config *cfg)
{
    test_server *ts = calloc(1, sizeof *ts);
    assert_non_null(ts);
    pthread_mutex_init(&ts->mu, NULL);
    assert_int_equal(uv_loop_init(&ts->loop), 0);
    char err[256];
    ts->srv = pgwire_server_start(&ts->loop, cfg, &test_handlers, ts, err, sizeof err);
    if (!ts->srv)
        fail_msg("pgwire_server_start: %s", err);
    ts->port = pgwire_server_port(ts->srv);
    assert_true(ts->port > 0);
    uv_async_init(&ts->loop, &ts->stop_async, stop_cb);
    ts->stop_async.data = ts;
    assert_int_equal(pthread_create(&ts->thread, NULL, loop_thread, ts), 0);
    return ts;
}

/* Stops the server, waits for the loop to finish and checks that every
 * accepted session got its on_close. */
static void server_stop(test_server *ts)
{
    uv_async_send(&ts->stop_async);
    pthread_join(ts->thread, NULL);
    assert_int_equal(uv_loop_close(&ts->loop), 0);
    assert_int_equal(ts->connects, ts->closes);
    pthread_mutex_destroy(&ts->mu);
    free(ts);
}

static pgwire_config base_config(void)
{
    pgwire_config cfg = {0};
    cfg.host = "127.0.0.1";
    cfg.port = 0;
    return cfg;
}

static PGconn *pq_connect(int port, const char *extra)
{
    char ci[512];
    snprintf(ci, sizeof ci, "host=127.0.0.1 port=%d user=tester dbname=db1 connect_timeout=5 %s",
             port, extra ? extra : "");
    return PQconnectdb(ci);
}

/* ------------------------------------------------------------ raw client */

static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static void raw_send(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        assert_true(w > 0);
        b += w;
        n -= (size_t)w;
    }
}

/* Reads exactly n bytes within 5 s; returns false on EOF/error/timeout. */
static bool raw_read_exact(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 5000) <= 0)
            return false;
        ssize_t r = recv(fd, b, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        b += r;
        n -= (size_t)r;
    }
    return true;
}

/* Reads one backend message; body is NUL-terminated for convenience.
 * Returns the type byte, or -1 on EOF. */
static int raw_read_msg(int fd, char *body, size_t cap, size_t *len)
{
    uint8_t hdr[5];
    if (!raw_read_exact(fd, hdr, 5))
        return -1;
    uint32_t n =
        ((uint32_t)hdr[1] << 24) | ((uint32_t)hdr[2] << 16) | ((uint32_t)hdr[3] << 8) | hdr[4];
    assert_true(n >= 4 && n - 4 < cap);
    assert_true(raw_read_exact(fd, body, n - 4));
    body[n - 4] = '\0';
    if (len)
        *len = n - 4;
    return hdr[0];
}

/* Finds field f of an ErrorResponse body. */
static const char *err_field(const char *body, size_t len, char f)
{
    size_t i = 0;
    while (i < len && body[i]) {
        char t = body[i++];
        if (t == f)
            return body + i;
        i += strlen(body + i) + 1;
    }
    return "";
}

static bool raw_eof(int fd)
{
    char b;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, 5000) <= 0)
        return false;
    return recv(fd, &b, 1, 0) <= 0;
}

static size_t build_startup(uint8_t *buf, uint32_t code, const char *const kv[], int nkv)
{
    size_t pos = 8;
    for (int i = 0; i < nkv; i++) {
        size_t l = strlen(kv[i]) + 1;
        memcpy(buf + pos, kv[i], l);
        pos += l;
    }
    buf[pos++] = 0;
    uint32_t n = htonl((uint32_t)pos), c = htonl(code);
    memcpy(buf, &n, 4);
    memcpy(buf + 4, &c, 4);
    return pos;
}

/* Startup as user "raw" with trust auth; reads up to ReadyForQuery. */
static int raw_session(int port)
{
    int fd = raw_connect(port);
    uint8_t pkt[256];
    const char *kv[] = {"user", "raw", "database", "x"};
    raw_send(fd, pkt, build_startup(pkt, 196608, kv, 4));
    char body[1024];
    int t;
    bool auth_ok = false, key = false;
    while ((t = raw_read_msg(fd, body, sizeof body, NULL)) != 'Z') {
        assert_true(t > 0);
        if (t == 'R')
            auth_ok = memcmp(body, "\0\0\0\0", 4) == 0;
        if (t == 'K')
            key = true;
    }
    assert_true(auth_ok);
    assert_true(key);
    return fd;
}

static void raw_send_msg(int fd, char type, const void *body, size_t n)
{
    uint8_t hdr[5];
    hdr[0] = (uint8_t)type;
    uint32_t l = htonl((uint32_t)n + 4);
    memcpy(hdr + 1, &l, 4);
    raw_send(fd, hdr, 5);
    if (n)
        raw_send(fd, body, n);
}

/* Expects a FATAL ErrorResponse whose message contains want, then EOF. */
static void expect_fatal_and_eof(int fd, const char *sqlstate, const char *want)
{
    char body[2048];
    size_t len;
    int t = raw_read_msg(fd, body, sizeof body, &len);
    assert_int_equal(t, 'E');
    assert_string_equal(err_field(body, len, 'S'), "FATAL");
    assert_string_equal(err_field(body, len, 'V'), "FATAL");
    assert_string_equal(err_field(body, len, 'C'), sqlstate);
    if (!strstr(err_field(body, len, 'M'), want))
        fail_msg("message \"%s\" lacks \"%s\"", err_field(body, len, 'M'), want);
    assert_true(raw_eof(fd));
}

static void expect_echo_works(int port)
{
    PGconn *c = pq_connect(port, NULL);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    PGresult *r = PQexec(c, "ECHO still-alive");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(r, 0, 0), "still-alive");
    PQclear(r);
    PQfinish(c);
}

/* ------------------------------------------------------------------ tests */

static void test_libpq_session(void **state)
{
    (void)state;
    pgwire_config cfg = base_config();
    test_server *ts = server_start(&cfg);
    PGconn *c = pq_connect(ts->port, "sslmode=prefer application_name=unit "
                                     "options='-c tenant_id=0123abcd -c timeline_id=99ff'");
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("connect: %s", PQerrorMessage(c));
    assert_string_equal(PQparameterStatus(c, "server_version"), "15.20 (strata)");
    assert_string_equal(PQparameterStatus(c, "server_encoding"), "UTF8");
    assert_string_equal(PQparameterStatus(c, "client_encoding"), "UTF8");
    assert_string_equal(PQparameterStatus(c, "integer_datetimes"), "on");
    assert_string_equal(PQparameterStatus(c, "standard_conforming_strings"), "on");
    assert_int_equal(PQserverVersion(c), 150020);
    assert_true(PQbackendPID(c) > 0);
    assert_null(PQgetssl(c)); /* SSLRequest was answered 'N' and the session continued */

    PGresult *r = PQexec(c, "ECHO hello world");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    assert_string_equal(PQfname(r, 0), "echo");
    assert_string_equal(PQgetvalue(r, 0, 0), "hello world");
    PQclear(r);

    r = PQexec(c, "NULLROW");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQftype(r, 0), 23);
    assert_string_equal(PQgetvalue(r, 0, 0), "42");
    assert_true(PQgetisnull(r, 0, 1));
    PQclear(r);

    r = PQexec(c, "FAIL");
    assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
    assert_string_equal(PQresultErrorField(r, PG_DIAG_SQLSTATE), "XX000");
    assert_string_equal(PQresultErrorField(r, PG_DIAG_SEVERITY), "ERROR");
    assert_string_equal(PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY), "requested failure");
    assert_string_equal(PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL), "details here");
    PQclear(r);

    r = PQexec(c, "   ;  "); /* empty query */
    assert_int_equal(PQresultStatus(r), PGRES_EMPTY_QUERY);
    PQclear(r);

    /* The session survives an ERROR. */
    r = PQexec(c, "ECHO after");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(r, 0, 0), "after");
    PQclear(r);

    /* Extended protocol is refused with 0A000 and the session continues. */
    r = PQexecParams(c, "ECHO $1", 0, NULL, NULL, NULL, NULL, 0);
    assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
    assert_string_equal(PQresultErrorField(r, PG_DIAG_SQLSTATE), "0A000");
    PQclear(r);
    r = PQexec(c, "ECHO again");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    PQclear(r);

    pthread_mutex_lock(&ts->mu);
    assert_string_equal(ts->last_user, "tester");
    assert_string_equal(ts->last_db, "db1");
    assert_string_equal(ts->last_app, "unit");
    assert_string_equal(ts->last_tenant, "0123abcd");
    assert_string_equal(ts->last_timeline, "99ff");
    assert_false(ts->last_replication);
    pthread_mutex_unlock(&ts->mu);
    PQfinish(c);

    /* sslmode=require must fail cleanly: we answered 'N'. */
    c = pq_connect(ts->port, "sslmode=require");
    assert_int_not_equal(PQstatus(c), CONNECTION_OK);
    assert_non_null(strstr(PQerrorMessage(c), "SSL"));
    PQfinish(c);
    server_stop(ts);
}

static void test_libpq_replication_copy_both(void **state)
{
    (void)state;
    pgwire_config cfg = base_config();
    cfg.max_copy_message = 256 * 1024;
    test_server *ts = server_start(&cfg);
    PGconn *c = pq_connect(ts->port, "replication=database");
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("connect: %s", PQerrorMessage(c));
    pthread_mutex_lock(&ts->mu);
    assert_true(ts->last_replication);
    pthread_mutex_unlock(&ts->mu);

    PGresult *r = PQexec(c, "COPYBOTH");
    assert_int_equal(PQresultStatus(r), PGRES_COPY_BOTH);
    PQclear(r);
    /* Several messages, one of them large (a WAL-push sized append). */
    size_t big_len = 200 * 1024;
    char *big = malloc(big_len);
    assert_non_null(big);
    for (size_t i = 0; i < big_len; i++)
        big[i] = (char)(i * 7);
    assert_int_equal(PQputCopyData(c, "hello", 5), 1);
    assert_int_equal(PQputCopyData(c, big, (int)big_len), 1);
    assert_int_equal(PQputCopyData(c, "bye", 3), 1);
    assert_int_equal(PQflush(c), 0);
    char *buf;
    int n = PQgetCopyData(c, &buf, 0);
    assert_int_equal(n, 10);
    assert_memory_equal(buf, "echo:hello", 10);
    PQfreemem(buf);
    n = PQgetCopyData(c, &buf, 0);
    assert_int_equal(n, (int)big_len + 5);
    assert_memory_equal(buf + 5, big, big_len);
    PQfreemem(buf);
    n = PQgetCopyData(c, &buf, 0);
    assert_int_equal(n, 8);
    assert_memory_equal(buf, "echo:bye", 8);
    PQfreemem(buf);
    free(big);

    assert_int_equal(PQputCopyEnd(c, NULL), 1);
    assert_int_equal(PQgetCopyData(c, &buf, 0), -1); /* server CopyDone */
    r = PQgetResult(c);
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    r = PQgetResult(c);
    assert_null(r);

    r = PQexec(c, "ECHO after copy");
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(r, 0, 0), "after copy");
    PQclear(r);
    PQfinish(c);
    server_stop(ts);
}

static void test_libpq_copy_out(void **state)
{
    (void)state;
    pgwire_config cfg = base_config();
    test_server *ts = server_start(&cfg);
    PGconn *c = pq_connect(ts->port, NULL);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    PGresult *r = PQexec(c, "COPYOUT 100");
    assert_int_equal(PQresultStatus(r), PGRES_COPY_OUT);
    PQclear(r);
    char *buf;
    int i = 0, n;
    while ((n = PQgetCopyData(c, &buf, 0)) > 0) {
        char want[32];
        snprintf(want, sizeof want, "row %d\n", i++);
        assert_int_equal(n, (int)strlen(want));
        assert_memory_equal(buf, want, (size_t)n);
        PQfreemem(buf);
    }
    assert_int_equal(n, -1);
    assert_int_equal(i, 100);
    r = PQgetResult(c);
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    assert_null(PQgetResult(c));
    PQfinish(c);
    server_stop(ts);
}

/* A slow reader: the producer must see congestion, pause, resume on
 * on_writable, and the queue must stay near the watermark. */
static void test_backpressure(void **state)
{
    (void)state;
    pgwire_config cfg = base_config();
    cfg.out_high_watermark = 64 * 1024;
    cfg.out_low_watermark = 16 * 1024;
    cfg.out_hard_limit = 1024 * 1024;
    test_server *ts = server_start(&cfg);
    PGconn *c = pq_connect(ts->port, NULL);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    const uint32_t total = 4096; /* 32 MB: more than the socket buffers hold */
    char q[32];
    snprintf(q, sizeof q, "FLOOD %u", total);
    assert_int_equal(PQsendQuery(c, q), 1);
    usleep(300 * 1000); /* let the kernel buffers and our queue fill */
    PGresult *r = PQgetResult(c);
    assert_int_equal(PQresultStatus(r), PGRES_COPY_OUT);
    PQclear(r);
    char *buf;
    int n;
    uint32_t expect = 0;
    while ((n = PQgetCopyData(c, &buf, 0)) > 0) {
        assert_int_equal(n, FLOOD_CHUNK);
        uint32_t seq;
        memcpy(&seq, buf, 4);
        assert_int_equal(seq, expect);
        assert_int_equal((uint8_t)buf[FLOOD_CHUNK - 1], expect & 0xFF);
        expect++;
        PQfreemem(buf);
        if (expect % 512 == 0)
            usleep(20 * 1000);
    }
    assert_int_equal(expect, total);
    r = PQgetResult(c);
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    PQfinish(c);
    pthread_mutex_lock(&ts->mu);
    assert_true(ts->congestion_pauses > 0);
    /* At most one chunk past the watermark is ever queued. */
    assert_true(ts->max_pending <= cfg.out_high_watermark + FLOOD_CHUNK + 5);
    pthread_mutex_unlock(&ts->mu);
    server_stop(ts);
}

static void test_hard_limit_and_stop(void **state)
{
    (void)state;
    pgwire_config cfg = base_config();
    cfg.out_high_watermark = 64 * 1024;
    cfg.out_hard_limit = 1024 * 1024;
    test_server *ts = server_start(&cfg);
    PGconn *c = pq_connect(ts->port, NULL);
    assert_int_equal(PQstatus(c), CONNECTION_OK);
    PGresult *r = PQexec(c, "OVERFLOW");
    /* The connection is dropped; whatever arrived first, it ends in error. */
    if (PQresultStatus(r) == PGRES_COPY_OUT) {
        PQclear(r);
        char *buf;
        int n;
        while ((n = PQgetCopyData(c, &buf, 0)) > 0)
            PQfreemem(buf);
        assert_int_equal(n, -2);
        r = PQgetResult(c);
    }
    assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
    PQclear(r);
    PQfinish(c);
    /* The client can see the connection drop while the server's handler is
     * still returning from its send loop: wait (bounded) for its count. */
    int overflow_sent = 0;
    for (int i = 0; i < 500 && overflow_sent == 0; i++) {
        pthread_mutex_lock(&ts->mu);
        overflow_sent = ts->overflow_sent;
        pthread_mutex_unlock(&ts->mu);
        if (overflow_sent == 0)
            usleep(10 * 1000);
    }
    /* Queued bytes never exceeded the hard limit: 1 MB / (8 KB + 5). */
    assert_int_equal(overflow_sent, (int)(cfg.out_hard_limit / (FLOOD_CHUNK + 5)));

    /* Stopping the server with sessions open (one in CopyBoth) closes them
     * all and runs on_close for each (checked by server_stop). */
    PGconn *a = pq_connect(ts->port, NULL), *b = pq_connect(ts->port, "replication=true");
    assert_int_equal(PQstatus(a), CONNECTION_OK);
    assert_int_equal(PQstatus(b), CONNECTION_OK);
    r = PQexec(b, "COPYBOTH");
    assert_int_equal(PQresultStatus(r), PGRES_COPY_BOTH);
    PQclear(r);
    server_stop(ts);
    r = PQexec(a, "ECHO gone");
    assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
    PQclear(r);
    char *buf;
    assert_int_equal(PQgetCopyData(b, &buf, 0), -2);
    PQfinish(a);
    PQfinish(b);
}

static void test_password_auth(void **state)
{
    (void)state;
    pgwire_auth modes[] = {PGWIRE_AUTH_PASSWORD, PGWIRE_AUTH_MD5};
    for (int m = 0; m < 2; m++) {
        pgwire_config cfg = base_config();
        cfg.auth = modes[m];
        cfg.password = "s3cret";
        test_server *ts = server_start(&cfg);
        PGconn *c = pq_connect(ts->port, "password=s3cret");
        if (PQstatus(c) != CONNECTION_OK)
            fail_msg("mode %d: %s", m, PQerrorMessage(c));
        PGresult *r = PQexec(c, "ECHO in");
        assert_string_equal(PQgetvalue(r, 0, 0), "in");
        PQclear(r);
        PQfinish(c);

        c = pq_connect(ts->port, "password=wrong");
        assert_int_equal(PQstatus(c), CONNECTION_BAD);
        assert_non_null(
            strstr(PQerrorMessage(c), "password authentication failed for user \"tester\""));
        PQfinish(c);

        c = pq_connect(ts->port, "password=");
        assert_int_equal(PQstatus(c), CONNECTION_BAD);
        PQfinish(c);
        server_stop(ts);
    }
}

static void test_on_connect_reject_and_max_connections(void **state)
{
    (void)state;
    pgwire_config cfg = base_config();
    cfg.max_connections = 2;
    test_server *ts = server_start(&cfg);
    PGconn *c = pq_connect(ts->port, "options='-c reject=1'");
    assert_int_equal(PQstatus(c), CONNECTION_BAD);
    assert_non_null(strstr(PQerrorMessage(c), "tenant does not exist"));
    PQfinish(c);

    PGconn *a = pq_connect(ts->port, NULL), *b = pq_connect(ts->port, NULL);
    assert_int_equal(PQstatus(a), CONNECTION_OK);
    assert_int_equal(PQstatus(b), CONNECTION_OK);
    c = pq_connect(ts->port, NULL);
    assert_int_equal(PQstatus(c), CONNECTION_BAD);
    assert_non_null(strstr(PQerrorMessage(c), "too many clients"));
    PQfinish(c);
    PQfinish(a);
    /* The slot frees once the server has seen the close. */
    for (int i = 0; i < 100; i++) {
        c = pq_connect(ts->port, NULL);
        if (PQstatus(c) == CONNECTION_OK)
            break;
        PQfinish(c);
        c = NULL;
        usleep(10 * 1000);
    }
    assert_non_null(c);
    PQfinish(c);
    PQfinish(b);

    /* A FATAL from a query handler closes that session only. */
    c = pq_connect(ts->port, NULL);
    PGresult *r = PQexec(c, "FATAL");
    assert_int_equal(PQresultStatus(r), PGRES_FATAL_ERROR);
    assert_non_null(strstr(PQerrorMessage(c), "terminating connection on request"));
    PQclear(r);
    assert_int_equal(PQstatus(c), CONNECTION_BAD);
    PQfinish(c);
    server_stop(ts);
}

static void test_raw_malformed(void **state)
{
    (void)state;
    pgwire_config cfg = base_config();
    cfg.max_message = 64 * 1024;
    cfg.max_copy_message = 128 * 1024;
    cfg.startup_timeout_ms = 300;
    test_server *ts = server_start(&cfg);

    /* Oversized length on a Query. */
    int fd = raw_session(ts->port);
    uint8_t hdr[5] = {'Q', 0x00, 0x20, 0x00, 0x00}; /* 2 MB */
    raw_send(fd, hdr, 5);
    expect_fatal_and_eof(fd, "08P01", "message of type 'Q' too large: 2097148 bytes (limit 65536)");
    close(fd);
    expect_echo_works(ts->port);

    /* Oversized CopyData in CopyBoth has its own (WAL-push) limit. */
    fd = raw_session(ts->port);
    raw_send_msg(fd, 'Q', "COPYBOTH", 9);
    char body[1024];
    assert_int_equal(raw_read_msg(fd, body, sizeof body, NULL), 'W');
    uint8_t big[5] = {'d', 0x00, 0x02, 0x00, 0x10}; /* 128 KB + 12 */
    raw_send(fd, big, 5);
    expect_fatal_and_eof(fd, "08P01", "message of type 'd' too large: 131084 bytes (limit 131072)");
    close(fd);

    /* Garbage type byte. */
    fd = raw_session(ts->port);
    raw_send(fd, "\x01garbage", 8);
    expect_fatal_and_eof(fd, "08P01", "invalid frontend message type 0x01");
    close(fd);

    /* Length field smaller than itself. */
    fd = raw_session(ts->port);
    uint8_t shortlen[5] = {'Q', 0, 0, 0, 2};
    raw_send(fd, shortlen, 5);
    expect_fatal_and_eof(fd, "08P01", "invalid message length 2");
    close(fd);

    /* Query string not terminated. */
    fd = raw_session(ts->port);
    raw_send_msg(fd, 'Q', "ECHO x", 6);
    expect_fatal_and_eof(fd, "08P01", "invalid Query message format");
    close(fd);

    /* Bad startup packet length. */
    fd = raw_connect(ts->port);
    uint8_t bad_start[8] = {0, 0, 0, 3, 0, 3, 0, 0};
    raw_send(fd, bad_start, 8);
    expect_fatal_and_eof(fd, "08P01", "invalid length of startup packet: 3 bytes");
    close(fd);

    /* Truncated startup packet: the startup timeout ends it. */
    fd = raw_connect(ts->port);
    uint8_t trunc[10] = {0, 0, 0, 100, 0, 3, 0, 0, 'u', 's'};
    raw_send(fd, trunc, sizeof trunc);
    expect_fatal_and_eof(fd, "08006", "canceling authentication due to timeout");
    close(fd);

    /* Startup without a user. */
    fd = raw_connect(ts->port);
    uint8_t pkt[256];
    const char *kv[] = {"database", "x"};
    raw_send(fd, pkt, build_startup(pkt, 196608, kv, 2));
    expect_fatal_and_eof(fd, "28000", "no PostgreSQL user name specified");
    close(fd);

    /* Protocol 2 is refused. */
    fd = raw_connect(ts->port);
    const char *kv2[] = {"user", "x"};
    raw_send(fd, pkt, build_startup(pkt, 2 << 16, kv2, 2));
    expect_fatal_and_eof(fd, "0A000", "unsupported frontend protocol 2.0");
    close(fd);

    /* A parameter without a value. */
    fd = raw_connect(ts->port);
    const char *kv3[] = {"user"};
    raw_send(fd, pkt, build_startup(pkt, 196608, kv3, 1));
    expect_fatal_and_eof(fd, "08P01", "parameter \"user\" has no value");
    close(fd);

    /* Bad options. */
    fd = raw_connect(ts->port);
    const char *kv4[] = {"user", "x", "options", "-c novalue"};
    raw_send(fd, pkt, build_startup(pkt, 196608, kv4, 4));
    expect_fatal_and_eof(fd, "22023", "not of the form name=value");
    close(fd);

    expect_echo_works(ts->port);
    server_stop(ts);
}

static void test_raw_negotiation_cancel_pipelining(void **state)
{
    (void)state;
    pgwire_config cfg = base_config();
    test_server *ts = server_start(&cfg);
    uint8_t pkt[256];

    /* SSLRequest then GSSENCRequest, both 'N', then a normal startup. */
    int fd = raw_connect(ts->port);
    uint8_t ssl[8] = {0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f};
    uint8_t gss[8] = {0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30};
    char answer;
    raw_send(fd, ssl, 8);
    assert_true(raw_read_exact(fd, &answer, 1));
    assert_int_equal(answer, 'N');
    raw_send(fd, gss, 8);
    assert_true(raw_read_exact(fd, &answer, 1));
    assert_int_equal(answer, 'N');
    const char *kv[] = {"user", "u"};
    raw_send(fd, pkt, build_startup(pkt, 196608, kv, 2));
    char body[2048];
    size_t len;
    int t;
    while ((t = raw_read_msg(fd, body, sizeof body, &len)) != 'Z')
        assert_true(t > 0);

    /* Pipelined queries: the second waits for the first's (delayed)
     * ReadyForQuery, and answers arrive in order. */
    uint8_t two[64];
    size_t n2 = 0;
    const char *q1 = "SLEEP", *q2 = "ECHO second";
    for (int i = 0; i < 2; i++) {
        const char *q = i ? q2 : q1;
        uint32_t l = htonl((uint32_t)strlen(q) + 5);
        two[n2++] = 'Q';
        memcpy(two + n2, &l, 4);
        n2 += 4;
        memcpy(two + n2, q, strlen(q) + 1);
        n2 += strlen(q) + 1;
    }
    raw_send(fd, two, n2);
    const char *want_rows[] = {"yes", "second"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'T');
        assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'D');
        assert_memory_equal(body + 6, want_rows[i], strlen(want_rows[i]));
        assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'C');
        assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'Z');
    }

    /* Paused input: messages sent meanwhile are delivered, in order, only
     * after the handler resumes. */
    raw_send_msg(fd, 'Q', "COPYBOTH", 9);
    assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'W');
    raw_send_msg(fd, 'd', "pause", 5);
    raw_send_msg(fd, 'd', "m1", 2);
    raw_send_msg(fd, 'd', "m2", 2);
    raw_send_msg(fd, 'c', NULL, 0);
    const char *want_copy[] = {"echo:pause", "resumed", "echo:m1", "echo:m2"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'd');
        assert_int_equal(len, strlen(want_copy[i]));
        assert_memory_equal(body, want_copy[i], len);
    }
    assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'c');
    assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'C');
    assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'Z');

    /* Extended protocol: one 0A000, everything skipped until Sync, then Z. */
    raw_send_msg(fd, 'P', "\0ECHO 1\0\0\0", 10);
    raw_send_msg(fd, 'B', "\0\0\0\0\0\0\0\0", 8);
    raw_send_msg(fd, 'E', "\0\0\0\0\0", 5);
    raw_send_msg(fd, 'S', NULL, 0);
    assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'E');
    assert_string_equal(err_field(body, len, 'C'), "0A000");
    assert_string_equal(err_field(body, len, 'S'), "ERROR");
    assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'Z');
    /* Flush is ignored; the session still answers. */
    raw_send_msg(fd, 'H', NULL, 0);
    raw_send_msg(fd, 'Q', "ECHO z", 7);
    assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'T');
    assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'D');
    assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'C');
    assert_int_equal(raw_read_msg(fd, body, sizeof body, &len), 'Z');
    /* Terminate closes quietly. */
    raw_send_msg(fd, 'X', NULL, 0);
    assert_true(raw_eof(fd));
    close(fd);

    /* CancelRequest: closed without a reply. */
    fd = raw_connect(ts->port);
    uint8_t cancel[16] = {0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 1, 0, 0, 0, 2};
    raw_send(fd, cancel, 16);
    assert_true(raw_eof(fd));
    close(fd);
    server_stop(ts);
}

/* --------------------------------------------------- pure and detached */

static void test_frame_parse(void **state)
{
    (void)state;
    pgwire_frame f;
    char err[200];
    const uint8_t q[] = {'Q', 0, 0, 0, 6, 'a', 0, 'X'};
    assert_int_equal(pgwire_frame_parse(q, 3, false, 100, 100, &f, err, sizeof err), 0);
    assert_int_equal(pgwire_frame_parse(q, 6, false, 100, 100, &f, err, sizeof err), 0);
    assert_int_equal(pgwire_frame_parse(q, 8, false, 100, 100, &f, err, sizeof err), 1);
    assert_int_equal(f.type, 'Q');
    assert_int_equal(f.body_len, 2);
    assert_int_equal(f.total_len, 7);
    assert_ptr_equal(f.body, q + 5);
    const uint8_t big[] = {'d', 0, 0, 0, 105};
    assert_int_equal(pgwire_frame_parse(big, 5, false, 1000, 100, &f, err, sizeof err), -1);
    assert_string_equal(err, "message of type 'd' too large: 101 bytes (limit 100)");
    const uint8_t bad[] = {'z', 0, 0, 0, 4};
    assert_int_equal(pgwire_frame_parse(bad, 1, false, 100, 100, &f, err, sizeof err), -1);
    assert_string_equal(err, "invalid frontend message type 'z'");
    const uint8_t st[] = {0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f};
    assert_int_equal(pgwire_frame_parse(st, 7, true, 100, 100, &f, err, sizeof err), 0);
    assert_int_equal(pgwire_frame_parse(st, 8, true, 100, 100, &f, err, sizeof err), 1);
    assert_int_equal(f.type, 0);
    assert_int_equal(f.body_len, 4);
    const uint8_t huge[] = {0, 1, 0, 0};
    assert_int_equal(pgwire_frame_parse(huge, 4, true, 100, 100, &f, err, sizeof err), -1);
    assert_string_equal(err, "invalid length of startup packet: 65536 bytes (allowed 8 to 10000)");
}

static int detached_connects;

static int d_connect(pgwire_conn *c, void *arg)
{
    (void)arg;
    detached_connects++;
    assert_string_equal(pgwire_conn_option(c, "tenant_id"), "t1");
    assert_string_equal(pgwire_conn_option(c, "timeline_id"), "tl two");
    assert_string_equal(pgwire_conn_option(c, "foo_bar"), "x");
    assert_string_equal(pgwire_conn_option(c, "dup"), "second");
    assert_null(pgwire_conn_option(c, "missing"));
    assert_string_equal(pgwire_conn_param(c, "user"), "u");
    assert_true(pgwire_conn_is_replication(c));
    return 0;
}

static void test_detached_options(void **state)
{
    (void)state;
    pgwire_config cfg = base_config();
    pgwire_handlers h = {.on_connect = d_connect};
    pgwire_conn *c = pgwire_conn_create_detached(&cfg, &h, NULL);
    assert_non_null(c);
    uint8_t pkt[512];
    const char *kv[] = {
        "user",
        "u",
        "replication",
        "true",
        "options",
        "-c tenant_id=t1  -ctimeline_id=tl\\ two --foo-bar=x -c dup=first -c dup=second"};
    size_t n = build_startup(pkt, 196608, kv, 6);
    /* Byte by byte: framing must cope with any split. */
    for (size_t i = 0; i < n; i++)
        assert_int_equal(pgwire_conn_feed(c, pkt + i, 1), 0);
    assert_int_equal(detached_connects, 1);
    uint8_t out[4096];
    size_t got = pgwire_conn_take_output(c, out, sizeof out);
    /* AuthenticationOk first, ReadyForQuery 'I' last. */
    assert_true(got > 9 + 6);
    assert_memory_equal(out, "R\0\0\0\x08\0\0\0\0", 9);
    assert_memory_equal(out + got - 6, "Z\0\0\0\x05I", 6);
    assert_int_equal(pgwire_conn_pending_bytes(c), 0);
    /* A query with no handler gets an ERROR and ReadyForQuery. */
    const uint8_t q[] = {'Q', 0, 0, 0, 6, 'x', 0};
    assert_int_equal(pgwire_conn_feed(c, q, sizeof q), 0);
    got = pgwire_conn_take_output(c, out, sizeof out);
    assert_int_equal(out[0], 'E');
    assert_memory_equal(out + got - 6, "Z\0\0\0\x05I", 6);
    const uint8_t x[] = {'X', 0, 0, 0, 4};
    assert_int_equal(pgwire_conn_feed(c, x, sizeof x), -1);
    pgwire_conn_destroy_detached(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frame_parse),
        cmocka_unit_test(test_detached_options),
        cmocka_unit_test(test_libpq_session),
        cmocka_unit_test(test_libpq_replication_copy_both),
        cmocka_unit_test(test_libpq_copy_out),
        cmocka_unit_test(test_backpressure),
        cmocka_unit_test(test_hard_limit_and_stop),
        cmocka_unit_test(test_password_auth),
        cmocka_unit_test(test_on_connect_reject_and_max_connections),
        cmocka_unit_test(test_raw_malformed),
        cmocka_unit_test(test_raw_negotiation_cancel_pipelining),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
