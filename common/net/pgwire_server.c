/*
 * pgwire_server.c: the libuv edge of the pgwire server: listen, accept,
 * read into a connection's input buffer, write its output queue, close.
 * See pgwire.h.
 *
 * For: the sockets around the state machine of pgwire.c (shared through
 * pgwire_int.h).  Not for: anything the protocol says (pgwire.c).
 */
#include "net/pgwire.h"
#include "net/pgwire_int.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/sqlstate.h"

/* ------------------------------------------------------------ libuv edge */

static void conn_write_cb(uv_write_t *req, int status)
{
    pgwire_conn *c = req->data;
    c->writing = false;
    c->inflight.len = 0;
    if (c->inflight.cap > OUTBUF_KEEP)
        pgwire_outbuf_release(&c->inflight);
    if (status < 0) {
        if (status != UV_ECANCELED)
            pgwire_conn_abort(c, uv_strerror(status));
        return;
    }
    if (c->closing)
        return;
    pgwire_conn_flush(c);
    pgwire_conn_check_writable(c);
    pgwire_conn_maybe_finish_close(c);
}

void pgwire_conn_flush(pgwire_conn *c)
{
    if (!c->server || c->closing || c->writing || c->pending.len == 0)
        return;
    outbuf t = c->inflight;
    c->inflight = c->pending;
    c->pending = t;
    assert(c->pending.len == 0);
    uv_buf_t b = uv_buf_init((char *)c->inflight.data, (unsigned)c->inflight.len);
    c->wreq.data = c;
    int r = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, conn_write_cb);
    if (r < 0) {
        c->inflight.len = 0;
        pgwire_conn_abort(c, uv_strerror(r));
        return;
    }
    c->writing = true;
}

static void server_maybe_free(pgwire_server *s)
{
    if (s->stopping && !s->listener_open && s->nconns == 0 && !s->spare_busy)
        free(s);
}

static void conn_handle_closed_cb(uv_handle_t *handle)
{
    pgwire_conn *c = handle->data;
    if (--c->handles_open > 0)
        return;
    pgwire_server *s = c->server;
    if (c->connected) {
        s->nestablished--;
        if (c->h->on_close)
            c->h->on_close(c, c->arg);
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nconns--;
    pgwire_conn_free(c);
    server_maybe_free(s);
}

void pgwire_conn_begin_close(pgwire_conn *c)
{
    c->state = CONN_CLOSED;
    if (!c->server || c->closing)
        return;
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, conn_handle_closed_cb);
    uv_close((uv_handle_t *)&c->timer, conn_handle_closed_cb);
}

static void conn_alloc_cb(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    pgwire_conn *c = handle->data;
    (void)suggested;
    if (!pgwire_inbuf_reserve(c, 4096) || c->in_cap == c->in_len) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    *buf = uv_buf_init((char *)c->in + c->in_len, (unsigned)(c->in_cap - c->in_len));
}

static void conn_read_cb(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    pgwire_conn *c = stream->data;
    (void)buf;
    if (nread == UV_ENOBUFS) {
        /* Input buffer full while input waits: stop reading until it drains. */
        uv_read_stop(stream);
        c->reading = false;
        return;
    }
    if (nread < 0) {
        if (nread != UV_EOF && nread != UV_ECONNRESET)
            log_warn("pgwire: %s: read: %s", c->peer, uv_strerror((int)nread));
        pgwire_conn_abort(c, NULL);
        return;
    }
    if (nread == 0)
        return;
    c->in_len += (size_t)nread;
    assert(c->in_len <= c->in_cap);
    pgwire_conn_process_input(c);
}

void pgwire_conn_resume_reading(pgwire_conn *c)
{
    if (c->reading || c->closing || c->close_after_flush)
        return;
    if (c->in_len == c->in_cap && c->in_cap >= c->ws->inbuf_max)
        return;
    if (uv_read_start((uv_stream_t *)&c->tcp, conn_alloc_cb, conn_read_cb) == 0)
        c->reading = true;
}

static void conn_startup_timeout_cb(uv_timer_t *t)
{
    pgwire_conn *c = t->data;
    if (c->state != CONN_STARTUP && c->state != CONN_AUTH)
        return;
    log_warn("pgwire: %s: startup not finished within %u ms", c->peer,
             c->ws->cfg.startup_timeout_ms);
    pgwire_send_error(c, "FATAL", SQLSTATE_CONNECTION_FAILURE,
                      "canceling authentication due to timeout", NULL);
    pgwire_conn_close_after_flush(c);
}

static void format_peer(uv_tcp_t *tcp, char *out, size_t len)
{
    struct sockaddr_storage ss;
    int n = sizeof ss;
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &n) == 0) {
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            uv_ip4_name(a, ip, sizeof ip);
            port = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            uv_ip6_name(a, ip, sizeof ip);
            port = ntohs(a->sin6_port);
        }
    }
    snprintf(out, len, "%s:%d", ip, port);
}

static void server_spare_closed_cb(uv_handle_t *h)
{
    pgwire_server *s = h->data;
    s->spare_busy = false;
    server_maybe_free(s);
}

static void server_connection_cb(uv_stream_t *listener, int status)
{
    pgwire_server *s = listener->data;
    if (status < 0) {
        log_warn("pgwire: accept: %s", uv_strerror(status));
        return;
    }
    pgwire_conn *c = calloc(1, sizeof *c);
    if (!c) {
        /* Accept into the spare handle and close it, so that the listener
         * keeps accepting; if the spare is busy, the next accept retries. */
        log_error("pgwire: out of memory accepting a connection");
        if (!s->spare_busy && uv_tcp_init(s->loop, &s->spare) == 0) {
            s->spare_busy = true;
            s->spare.data = s;
            uv_accept(listener, (uv_stream_t *)&s->spare);
            uv_close((uv_handle_t *)&s->spare, server_spare_closed_cb);
        }
        return;
    }
    pgwire_conn_init(c, &s->ws, &s->h, s->arg);
    c->server = s;
    c->backend_pid = ++s->next_pid;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->handles_open = 2;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        pgwire_conn_abort(c, "accept failed");
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    format_peer(&c->tcp, c->peer, sizeof c->peer);
    /* Sessions beyond max_connections are refused with an error after their
     * startup packet; beyond that slack, the socket is simply closed. */
    int slack = s->ws.cfg.max_connections / 10 + 8;
    if (s->nconns > s->ws.cfg.max_connections + slack) {
        pgwire_conn_abort(c, "too many connections");
        return;
    }
    uv_timer_start(&c->timer, conn_startup_timeout_cb, s->ws.cfg.startup_timeout_ms, 0);
    pgwire_conn_resume_reading(c);
    if (!c->reading)
        pgwire_conn_abort(c, "cannot start reading");
}

pgwire_server *pgwire_server_start(uv_loop_t *loop, const pgwire_config *cfg,
                                   const pgwire_handlers *h, void *arg, char *err, size_t errlen)
{
    pgwire_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->loop = loop;
    pgwire_settings_init(&s->ws, cfg);
    s->h = *h;
    s->arg = arg;
    if (!s->ws.has_authn &&
        (s->ws.cfg.auth == PGWIRE_AUTH_PASSWORD || s->ws.cfg.auth == PGWIRE_AUTH_MD5) &&
        !cfg->password) {
        snprintf(err, errlen, "password authentication needs a password");
        free(s);
        return NULL;
    }
    struct sockaddr_storage addr;
    int r = uv_ip4_addr(s->ws.host, cfg->port, (struct sockaddr_in *)&addr);
    if (r != 0)
        r = uv_ip6_addr(s->ws.host, cfg->port, (struct sockaddr_in6 *)&addr);
    if (r != 0) {
        snprintf(err, errlen, "invalid listen address \"%s\"", s->ws.host);
        free(s);
        return NULL;
    }
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    s->listener_open = true;
    r = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0);
    if (r == 0)
        r = uv_listen((uv_stream_t *)&s->listener, 128, server_connection_cb);
    if (r != 0) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", s->ws.host, cfg->port, uv_strerror(r));
        s->stopping = true;
        pgwire_server_stop(s);
        return NULL;
    }
    struct sockaddr_storage bound;
    int n = sizeof bound;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &n);
    s->port = bound.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&bound)->sin6_port)
                                          : ntohs(((struct sockaddr_in *)&bound)->sin_port);
    return s;
}

int pgwire_server_port(const pgwire_server *s)
{
    return s->port;
}

int pgwire_server_connection_count(const pgwire_server *s)
{
    return s->nconns;
}

static void server_listener_closed_cb(uv_handle_t *h)
{
    pgwire_server *s = h->data;
    s->listener_open = false;
    server_maybe_free(s);
}

void pgwire_server_stop(pgwire_server *s)
{
    s->stopping = true;
    for (pgwire_conn *c = s->conns; c; c = c->next)
        pgwire_conn_abort(c, NULL);
    if (s->listener_open && !uv_is_closing((uv_handle_t *)&s->listener))
        uv_close((uv_handle_t *)&s->listener, server_listener_closed_cb);
}
