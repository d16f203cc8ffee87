/*
 * pgwire.h: the server side of the PostgreSQL v3 wire protocol, on libuv.
 *
 * The one wire-protocol server of every Strata daemon (safekeeper now,
 * pageserver later).  It does the startup handshake (SSLRequest and
 * GSSENCRequest answered 'N', CancelRequest closed quietly), trust or
 * password authentication, simple Query, CopyBoth and CopyOut, and strict
 * framing: a malformed message gets an ErrorResponse saying what was wrong
 * and closes that connection only.  It is NOT a SQL engine: what a query
 * means is the caller's business (handlers below).  No TLS, no extended
 * query protocol (Parse/Bind/Execute get SQLSTATE 0A000).
 *
 * Threading: single-threaded.  The caller owns the uv_loop_t; every function
 * here and every handler runs on that loop's thread.
 *
 * Lifetime: a pgwire_conn is owned by the server.  It stays valid from
 * on_connect until on_close returns, and must not be touched after that.
 * Closing is asynchronous: after pgwire_conn_close() or pgwire_server_stop()
 * the handles close on the next loop iterations, then on_close runs once.
 *
 * Backpressure: each connection has a bounded output queue.  Above the high
 * watermark pgwire_conn_is_congested() is true and producers (a walsender)
 * must stop producing; on_writable fires when the queue drains below the low
 * watermark.  A producer that ignores this and reaches the hard limit gets
 * its connection closed.  Input is bounded by max_message/max_copy_message.
 */
#ifndef STRATA_COMMON_PGWIRE_H
#define STRATA_COMMON_PGWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

typedef struct pgwire_server pgwire_server;
typedef struct pgwire_conn pgwire_conn;

/* Callbacks into the daemon.  Any may be NULL.  arg is pgwire_server_start's. */
typedef struct pgwire_handlers {
    /* After startup and authentication, before ReadyForQuery.  Return 0 to
     * accept, or -1 after pgwire_send_error(c, "FATAL", ...) to refuse. */
    int (*on_connect)(pgwire_conn *c, void *arg);
    /* A simple Query.  The handler answers with rows/CommandComplete and then
     * pgwire_send_ready() (now or later: further input waits until then), or
     * starts copy mode, or sends an ERROR (ReadyForQuery is then automatic). */
    void (*on_query)(pgwire_conn *c, const char *sql, void *arg);
    /* One CopyData payload from the client (copy-both mode only). */
    void (*on_copy_data)(pgwire_conn *c, const uint8_t *data, size_t n, void *arg);
    /* The client sent CopyDone (or CopyFail) and will send no more CopyData. */
    void (*on_copy_done)(pgwire_conn *c, void *arg);
    /* The output queue fell below the low watermark after being congested. */
    void (*on_writable)(pgwire_conn *c, void *arg);
    /* The connection is gone; free your per-connection state.  Called once
     * for every connection that reached on_connect (and returned 0). */
    void (*on_close)(pgwire_conn *c, void *arg);
} pgwire_handlers;

typedef enum pgwire_auth {
    PGWIRE_AUTH_TRUST = 0,    /* no password asked */
    PGWIRE_AUTH_PASSWORD = 1, /* AuthenticationCleartextPassword */
    PGWIRE_AUTH_MD5 = 2,      /* AuthenticationMD5Password */
} pgwire_auth;

#define PGWIRE_PRINCIPAL_LEN 64

/*
 * Token authentication (common/net/auth.h builds one): the server asks for a
 * cleartext password and the authenticator decides who it names.  When a
 * server has one, cfg.auth and cfg.password are not used.  Both callbacks
 * run on the loop thread.
 */
typedef struct pgwire_authenticator {
    /* 0 with a NUL-terminated principal (e.g. "admin") written into
     * principal[0..PGWIRE_PRINCIPAL_LEN), or -1 with a 5-character SQLSTATE
     * in sqlstate and a message in err: the connection then gets FATAL. */
    int (*check_password)(void *arg, const pgwire_conn *c, const char *password, char *principal,
                          char sqlstate[6], char *err, size_t errlen);
    /* Optional.  Runs before each non-empty Query reaches on_query: 0 lets
     * it through; -1 with sqlstate and err answers ERROR instead (the
     * connection stays, ReadyForQuery follows). */
    int (*check_query)(void *arg, const pgwire_conn *c, const char *sql, char sqlstate[6],
                       char *err, size_t errlen);
    void *arg;
} pgwire_authenticator;

/*
 * The process-wide authenticator (copied), used by every server started
 * afterwards whose config names none and asks for TRUST; NULL removes it.
 * Lets a daemon's main turn authentication on for listeners that other
 * modules create.  Call before starting servers, from one thread.
 */
void pgwire_set_default_authenticator(const pgwire_authenticator *a);

/* Zero or NULL fields take the default in brackets. */
typedef struct pgwire_config {
    const char *host;            /* listen address ["127.0.0.1"] */
    int port;                    /* 0 = ephemeral, see pgwire_server_port() */
    pgwire_auth auth;            /* [TRUST]; PASSWORD/MD5 need password */
    const char *password;        /* the one accepted password (copied) */
    size_t max_message;          /* largest non-CopyData message body [1 MB] */
    size_t max_copy_message;     /* largest CopyData payload [1 MB] */
    int max_connections;         /* established sessions [100] */
    unsigned startup_timeout_ms; /* startup + auth must finish within [10000] */
    size_t out_high_watermark;   /* congested above this many queued bytes [1 MB] */
    size_t out_low_watermark;    /* on_writable below this [high / 4] */
    size_t out_hard_limit;       /* close the connection above this [16 * high] */
    const char *server_version;  /* ParameterStatus server_version ["15.20 (strata)"] */
    /* Token authentication (copied); NULL: the process default, if any,
     * when auth is TRUST (see pgwire_set_default_authenticator). */
    const pgwire_authenticator *authenticator;
} pgwire_config;

/* Binds and listens on cfg->host:cfg->port on loop.  Returns NULL with a
 * message in err on failure (bad address, port in use, out of memory).
 * cfg and h are copied; arg is passed to every handler. */
pgwire_server *pgwire_server_start(uv_loop_t *loop, const pgwire_config *cfg,
                                   const pgwire_handlers *h, void *arg, char *err, size_t errlen);

/* The port actually bound (useful when cfg->port was 0). */
int pgwire_server_port(const pgwire_server *s);

/* Number of open connections (any state). */
int pgwire_server_connection_count(const pgwire_server *s);

/* Stops listening and closes every connection (on_close runs for each).  The
 * server frees itself once all its handles are closed: keep running the
 * loop (e.g. uv_run(loop, UV_RUN_DEFAULT) returns when done).  s must not be
 * used after this call. */
void pgwire_server_stop(pgwire_server *s);

/* A startup parameter ("user", "database", "options", "replication",
 * "application_name", ...) or NULL if the client did not send it. */
const char *pgwire_conn_param(const pgwire_conn *c, const char *name);

/* A setting from the startup "options" parameter, given as
 * "-c name=value", "-cname=value" or "--name=value" (backslash escapes a
 * space), e.g. pgwire_conn_option(c, "tenant_id").  NULL if absent. */
const char *pgwire_conn_option(const pgwire_conn *c, const char *name);

/* True if the startup packet asked for a replication connection
 * (replication=true/on/yes/1 or database). */
bool pgwire_conn_is_replication(const pgwire_conn *c);

/* Who the authenticator said this connection is (e.g. "admin",
 * "tenant:<hex>"), or NULL when the server has no authenticator (trust or
 * a single shared password). */
const char *pgwire_conn_principal(const pgwire_conn *c);

/* "ip:port" of the client, for logs; never NULL. */
const char *pgwire_conn_peer(const pgwire_conn *c);

/* Caller's per-connection pointer (NULL initially); not freed by pgwire. */
void pgwire_conn_set_data(pgwire_conn *c, void *data);
void *pgwire_conn_data(const pgwire_conn *c);

/*
 * Sending.  Each call queues one message and returns 0, or -1 if the
 * connection is closing (the message is dropped; on_close will follow) or
 * the message is invalid for the current state (logged).  Output is flushed
 * by the loop; never blocks.
 */

/* ErrorResponse with fields S, V, C, M and D (detail may be NULL).
 * "ERROR": the connection stays; an open copy mode ends and, if a query is
 * in progress, ReadyForQuery follows.  "FATAL"/"PANIC": the connection is
 * closed after the queue is flushed. */
int pgwire_send_error(pgwire_conn *c, const char *severity, const char *sqlstate, const char *msg,
                      const char *detail);
/* NoticeResponse (severity e.g. "NOTICE", "WARNING"). */
int pgwire_send_notice(pgwire_conn *c, const char *severity, const char *msg);
/* RowDescription, text format; type_oids may be NULL (all text, OID 25). */
int pgwire_send_row_description(pgwire_conn *c, int ncols, const char *const names[],
                                const uint32_t type_oids[]);
/* DataRow in text format; a NULL value is SQL NULL. */
int pgwire_send_data_row(pgwire_conn *c, int ncols, const char *const values[]);
int pgwire_send_command_complete(pgwire_conn *c, const char *tag);
/* EmptyQueryResponse (the answer to an empty query string). */
int pgwire_send_empty_query(pgwire_conn *c);
/* ReadyForQuery; ends the current query (further queued input is then
 * processed).  A no-op returning 0 when no query is in progress. */
int pgwire_send_ready(pgwire_conn *c);

/* CopyBothResponse 'W' / CopyOutResponse 'H' (binary, 0 columns).  Only
 * while a query is in progress. */
int pgwire_start_copy_both(pgwire_conn *c);
int pgwire_start_copy_out(pgwire_conn *c);
/* One CopyData message (server to client; not limited by max_copy_message). */
int pgwire_send_copy_data(pgwire_conn *c, const void *data, size_t n);
/* One CopyData message whose payload is head followed by body (e.g. an
 * XLogData header and the WAL bytes), without copying them together first. */
int pgwire_send_copy_data2(pgwire_conn *c, const void *head, size_t head_len, const void *body,
                           size_t body_len);
/* CopyDone from the server: no more CopyData from us.  Copy mode ends when
 * both sides have sent CopyDone (CopyOut: at once).  The handler then sends
 * CommandComplete and ReadyForQuery. */
int pgwire_send_copy_done(pgwire_conn *c);

/* True while copy mode is open in either direction (CopyDone not yet
 * sent by the server, or not yet received from a CopyBoth client). */
bool pgwire_conn_in_copy(const pgwire_conn *c);

/* Bytes queued but not yet written to the socket. */
size_t pgwire_conn_pending_bytes(const pgwire_conn *c);
/* True above the high watermark (stays true until below the low one). */
bool pgwire_conn_is_congested(const pgwire_conn *c);

/* Stops (true) or resumes (false) delivering input to handlers, e.g. while
 * a CopyData is being made durable.  Reading stops once the buffer fills. */
void pgwire_conn_pause_input(pgwire_conn *c, bool pause);

/* Closes the connection after flushing what is queued.  Idempotent. */
void pgwire_conn_close(pgwire_conn *c);

/*
 * The parser, as pure functions over a byte buffer (no sockets), for the
 * connection code and the fuzz target.
 */

#define PGWIRE_STARTUP_MAX 10000 /* longest startup packet, as Postgres */

typedef struct pgwire_frame {
    uint8_t type;        /* message type byte; 0 for a startup-phase packet */
    const uint8_t *body; /* points into the input buffer */
    size_t body_len;
    size_t total_len; /* bytes this frame occupies in the input */
} pgwire_frame;

/* Splits the next frame off buf[0..len).  startup selects the untyped
 * startup framing (int32 length first).  Returns 1 with *out filled, 0 if
 * more bytes are needed, or -1 with a message in err (bad length, too
 * large, unknown type byte). */
int pgwire_frame_parse(const uint8_t *buf, size_t len, bool startup, size_t max_message,
                       size_t max_copy_message, pgwire_frame *out, char *err, size_t errlen);

/*
 * A detached connection: the whole per-connection state machine with no
 * socket, for the fuzz target and byte-exact tests.  Output accumulates
 * until taken.  Handlers run as usual; on_close runs from destroy (or when
 * the state machine decides to close, see pgwire_conn_feed).
 */
pgwire_conn *pgwire_conn_create_detached(const pgwire_config *cfg, const pgwire_handlers *h,
                                         void *arg);
/* Feeds input bytes.  Returns 0 while the connection is open, -1 once it is
 * closed or closing (further input is ignored). */
int pgwire_conn_feed(pgwire_conn *c, const uint8_t *data, size_t n);
/* Moves up to cap queued output bytes into buf; returns the count. */
size_t pgwire_conn_take_output(pgwire_conn *c, uint8_t *buf, size_t cap);
void pgwire_conn_destroy_detached(pgwire_conn *c);

#endif
