/*
 * pgwire_detached.c: a pgwire connection with no socket: the whole
 * per-connection state machine of pgwire.c, fed bytes by the caller, its
 * output queued until taken.  See pgwire.h.
 *
 * For: the fuzz target (tests/fuzz/fuzz_pgwire.c) and byte-exact tests.
 * Not for: serving clients (pgwire_server.c); nothing here runs in a daemon.
 */
#include "net/pgwire.h"
#include "net/pgwire_int.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

pgwire_conn *pgwire_conn_create_detached(const pgwire_config *cfg, const pgwire_handlers *h,
                                         void *arg)
{
    pgwire_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    pgwire_settings_init(&c->own_ws, cfg);
    pgwire_conn_init(c, &c->own_ws, h, arg);
    c->backend_pid = 1;
    return c;
}

int pgwire_conn_feed(pgwire_conn *c, const uint8_t *data, size_t n)
{
    assert(!c->server);
    while (n > 0 && c->state != CONN_CLOSED) {
        if (!pgwire_inbuf_reserve(c, n) || c->in_cap == c->in_len)
            break; /* buffer full while input waits (paused): drop the rest */
        size_t k = c->in_cap - c->in_len;
        if (k > n)
            k = n;
        memcpy(c->in + c->in_len, data, k);
        c->in_len += k;
        data += k;
        n -= k;
        pgwire_conn_process_input(c);
    }
    if (c->state != CONN_CLOSED)
        pgwire_conn_process_input(c);
    return c->state == CONN_CLOSED ? -1 : 0;
}

size_t pgwire_conn_take_output(pgwire_conn *c, uint8_t *buf, size_t cap)
{
    assert(!c->server);
    size_t k = c->pending.len < cap ? c->pending.len : cap;
    if (k == 0)
        return 0;
    memcpy(buf, c->pending.data, k);
    memmove(c->pending.data, c->pending.data + k, c->pending.len - k);
    c->pending.len -= k;
    pgwire_conn_check_writable(c);
    return k;
}

void pgwire_conn_destroy_detached(pgwire_conn *c)
{
    if (!c)
        return;
    assert(!c->server);
    c->state = CONN_CLOSED;
    if (c->connected && c->h->on_close)
        c->h->on_close(c, c->arg);
    pgwire_conn_free(c);
}
