/*
 * pgwire_int.h: what the three files of the pgwire server share: the
 * connection and server structs, their settings and the state machine's
 * entry points.  Private to common/net/pgwire*.c.
 *
 * For: pgwire.c (framing, the per-connection state machine), pgwire_server.c
 * (the libuv edge) and pgwire_detached.c (the socketless edge).
 * Not for: anyone else; the public interface is pgwire.h.
 */
#ifndef STRATA_NET_PGWIRE_INT_H
#define STRATA_NET_PGWIRE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "net/pgwire.h"

#define PROTO_CODE(major, minor) (((uint32_t)(major) << 16) | (uint32_t)(minor))
#define CANCEL_REQUEST_CODE PROTO_CODE(1234, 5678)
#define SSL_REQUEST_CODE PROTO_CODE(1234, 5679)
#define GSSENC_REQUEST_CODE PROTO_CODE(1234, 5680)

#define MAX_PARAMS 64
#define MAX_OPTIONS 32
#define MAX_NEGOTIATIONS 2 /* SSLRequest and GSSENCRequest, once each */
#define INBUF_INITIAL (16 * 1024)
#define OUTBUF_KEEP (256 * 1024) /* larger idle output buffers are freed */
#define PEER_LEN 64

#define DEFAULT_MAX_MESSAGE (1024 * 1024)
#define DEFAULT_MAX_CONNECTIONS 100
#define DEFAULT_STARTUP_TIMEOUT_MS 10000
#define DEFAULT_HIGH_WATERMARK (1024 * 1024)
#define DEFAULT_SERVER_VERSION "15.20 (strata)"

typedef enum conn_state {
    CONN_STARTUP, /* waiting for the startup packet (or SSL/GSS/cancel) */
    CONN_AUTH,    /* sent an authentication request, waiting for 'p' */
    CONN_IDLE,    /* ReadyForQuery sent */
    CONN_QUERY,   /* a Query is being answered (maybe in copy mode) */
    CONN_CLOSED,  /* no more input is processed, nothing more is queued */
} conn_state;

typedef struct outbuf {
    uint8_t *data;
    size_t len;
    size_t cap;
} outbuf;

/* Normalised configuration, shared by a server's connections. */
typedef struct wire_settings {
    pgwire_config cfg; /* defaults filled in; strings point into this struct */
    char host[64];
    char password[256];
    char server_version[64];
    size_t inbuf_max;
    bool has_authn;
    pgwire_authenticator authn;
} wire_settings;

struct pgwire_conn {
    pgwire_server *server; /* NULL when detached */
    const wire_settings *ws;
    const pgwire_handlers *h;
    void *arg;
    void *data;

    conn_state state;
    bool copy_in;        /* client may still send CopyData (CopyBoth) */
    bool copy_out;       /* we may still send CopyData */
    bool skip_till_sync; /* after rejecting an extended-protocol message */
    bool input_paused;
    bool dispatching; /* inside conn_process_input() */
    bool connected;   /* on_connect accepted it: on_close is owed */
    bool close_after_flush;
    bool closing; /* handles are being closed (socket mode) */
    bool congested;
    bool reading;
    bool writing;
    int negotiations;

    uint8_t *in;
    size_t in_len;
    size_t in_cap;

    outbuf pending;  /* queued, not yet handed to the socket */
    outbuf inflight; /* handed to uv_write, not yet completed */

    /* Startup parameters: a private copy of the packet, pointers into it. */
    char *param_buf;
    int nparams;
    const char *param_key[MAX_PARAMS];
    const char *param_val[MAX_PARAMS];
    char *option_buf;
    int noptions;
    const char *option_key[MAX_OPTIONS];
    const char *option_val[MAX_OPTIONS];
    bool replication;

    uint32_t backend_pid;
    uint32_t backend_secret;
    uint8_t md5_salt[4];
    char peer[PEER_LEN];
    char principal[PGWIRE_PRINCIPAL_LEN]; /* "" until an authenticator named one */

    /* Socket mode only. */
    uv_tcp_t tcp;
    uv_timer_t timer; /* startup timeout, later the input-resume kick */
    uv_write_t wreq;
    int handles_open;
    struct pgwire_conn *prev, *next;

    wire_settings own_ws; /* detached mode only */
};

struct pgwire_server {
    uv_loop_t *loop;
    uv_tcp_t listener;
    wire_settings ws;
    pgwire_handlers h;
    void *arg;
    int port;
    bool stopping;
    bool listener_open;
    uv_tcp_t spare; /* accepts and closes connections we cannot allocate */
    bool spare_busy;
    int nconns;       /* all open connections */
    int nestablished; /* connected ones */
    uint32_t next_pid;
    pgwire_conn *conns;
};

/* Fills ws from in, with defaults for unset fields. */
void pgwire_settings_init(wire_settings *ws, const pgwire_config *in);

/* Sets up a fresh (zeroed) connection in CONN_STARTUP; frees one whose
 * handles are closed (or a detached one), buffers included. */
void pgwire_conn_init(pgwire_conn *c, const wire_settings *ws, const pgwire_handlers *h, void *arg);
void pgwire_conn_free(pgwire_conn *c);

/* Grows the input buffer to have want_free bytes free, up to the message
 * limit; false when it cannot (full, or out of memory). */
bool pgwire_inbuf_reserve(pgwire_conn *c, size_t want_free);
void pgwire_outbuf_release(outbuf *b);

/* The state machine: consumes whole frames from the input buffer. */
void pgwire_conn_process_input(pgwire_conn *c);
/* Clears congestion and tells the producer once queued output dropped. */
void pgwire_conn_check_writable(pgwire_conn *c);
/* Closing: at once with a logged reason, after the queue is written, or
 * when the last handle is closed (no-ops when detached). */
void pgwire_conn_abort(pgwire_conn *c, const char *why);
void pgwire_conn_close_after_flush(pgwire_conn *c);
void pgwire_conn_maybe_finish_close(pgwire_conn *c);

/* The socket edge (pgwire_server.c); no-ops for a detached connection. */
void pgwire_conn_flush(pgwire_conn *c);
void pgwire_conn_begin_close(pgwire_conn *c);
void pgwire_conn_resume_reading(pgwire_conn *c);

#endif
