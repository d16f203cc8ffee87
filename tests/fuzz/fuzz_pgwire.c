/*
 * fuzz_pgwire: arbitrary client bytes into the pgwire connection state
 * machine (a detached connection, no sockets) and into the pure framer.
 *
 * Input layout: byte 0 picks the authentication mode and the chunking of
 * the rest; the rest is what a client would send.  Handlers answer queries
 * with rows, errors, CopyBoth and CopyOut so that every send path runs, and
 * output is drained in small pieces so congestion and on_writable run too.
 * Checks: no crash, no sanitizer report, bounded output, and the invariant
 * that nothing is queued once the connection reports itself closed and
 * drained.
 */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/log.h"
#include "net/pgwire.h"

static void f_query(pgwire_conn *c, const char *sql, void *arg)
{
    (void)arg;
    const char *names[] = {"a", "b"};
    const char *vals[] = {sql, NULL};
    switch (sql[0] % 6) {
    case 0:
        pgwire_send_row_description(c, 2, names, NULL);
        pgwire_send_data_row(c, 2, vals);
        pgwire_send_command_complete(c, "SELECT 1");
        pgwire_send_ready(c);
        break;
    case 1:
        pgwire_send_error(c, "ERROR", "XX000", "fuzz error", sql);
        break;
    case 2:
        pgwire_start_copy_both(c);
        break;
    case 3:
        pgwire_start_copy_out(c);
        pgwire_send_copy_data(c, sql, strlen(sql));
        pgwire_send_copy_done(c);
        pgwire_send_command_complete(c, "COPY 1");
        pgwire_send_ready(c);
        break;
    case 4:
        pgwire_send_notice(c, "NOTICE", sql);
        pgwire_send_ready(c);
        break;
    default:
        /* Answer nothing: later input must wait, not crash. */
        break;
    }
}

static void f_copy_data(pgwire_conn *c, const uint8_t *d, size_t n, void *arg)
{
    (void)arg;
    if (n > 0 && d[0] == 'F')
        pgwire_send_error(c, "FATAL", "08P01", "fuzz fatal", NULL);
    else if (n > 0 && d[0] == 'E')
        pgwire_send_error(c, "ERROR", "XX000", "fuzz error in copy", NULL);
    else
        pgwire_send_copy_data2(c, "e:", 2, d, n);
}

static void f_copy_done(pgwire_conn *c, void *arg)
{
    (void)arg;
    pgwire_send_copy_done(c);
    pgwire_send_command_complete(c, "COPY 0");
    pgwire_send_ready(c);
}

static int f_connect(pgwire_conn *c, void *arg)
{
    (void)arg;
    const char *t = pgwire_conn_option(c, "tenant_id");
    if (t && strcmp(t, "reject") == 0) {
        pgwire_send_error(c, "FATAL", "3D000", "rejected", NULL);
        return -1;
    }
    (void)pgwire_conn_param(c, "user");
    (void)pgwire_conn_is_replication(c);
    return 0;
}

static const pgwire_handlers fuzz_handlers = {
    .on_connect = f_connect,
    .on_query = f_query,
    .on_copy_data = f_copy_data,
    .on_copy_done = f_copy_done,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        log_init("fuzz", LOG_LEVEL_FATAL);
        quiet = 1;
    }
    if (size < 1)
        return 0;
    uint8_t mode = data[0];
    data++;
    size--;

    /* The framer alone, both phases, every offset of the first bytes. */
    pgwire_frame f;
    char err[200];
    for (size_t off = 0; off < size && off < 8; off++) {
        int r = pgwire_frame_parse(data + off, size - off, off & 1, 64, 128, &f, err, sizeof err);
        if (r == 1)
            assert(f.total_len <= size - off && f.body + f.body_len <= data + size);
    }

    pgwire_config cfg = {0};
    cfg.auth = (pgwire_auth)(mode % 3);
    cfg.password = "pw";
    cfg.max_message = 4096;
    cfg.max_copy_message = 8192;
    cfg.out_high_watermark = 512;
    cfg.out_hard_limit = 64 * 1024;
    pgwire_conn *c = pgwire_conn_create_detached(&cfg, &fuzz_handlers, NULL);
    if (!c)
        return 0;
    size_t chunk = (size_t)(mode >> 2) + 1;
    uint8_t out[256];
    size_t pos = 0;
    while (pos < size) {
        size_t n = size - pos < chunk ? size - pos : chunk;
        int r = pgwire_conn_feed(c, data + pos, n);
        pos += n;
        (void)pgwire_conn_take_output(c, out, sizeof out);
        assert(pgwire_conn_pending_bytes(c) <= cfg.out_hard_limit);
        if (r != 0)
            break;
    }
    while (pgwire_conn_take_output(c, out, sizeof out) > 0)
        ;
    assert(pgwire_conn_pending_bytes(c) == 0);
    pgwire_conn_destroy_detached(c);
    return 0;
}
