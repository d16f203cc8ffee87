/*
 * pgwire.c: the server side of the PostgreSQL v3 wire protocol.  See pgwire.h.
 *
 * Layers, bottom up:
 *   - pgwire_frame_parse(): pure framing over a byte buffer;
 *   - the per-connection state machine (conn_handle_*), fed bytes by
 *     conn_process_input() and writing into the connection's output queue;
 *   - the libuv edge: accept, read into the input buffer, write the queue.
 * The state machine never touches a socket, so a detached connection (no
 * socket) runs exactly the same code for the fuzz target and tests.
 *
 * Authentication: trust, one shared password (cleartext or MD5), or an
 * authenticator (token per principal, common/net/auth.h) that may also veto
 * each query.  The process-wide default authenticator is the only mutable
 * global here; it is written before any server starts and copied into each
 * server's settings, so connections never read it.
 *
 * Not here: TLS, SCRAM, the extended query protocol, anything about SQL.
 */
#include "base/byteorder.h"
#include "net/pgwire.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/log.h"
#include "base/sqlstate.h"

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

static pgwire_authenticator default_authn;
static bool default_authn_set;

void pgwire_set_default_authenticator(const pgwire_authenticator *a)
{
    assert(a == NULL || a->check_password != NULL);
    default_authn_set = a != NULL;
    if (a != NULL)
        default_authn = *a;
    else
        memset(&default_authn, 0, sizeof default_authn);
}

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

static void conn_flush(pgwire_conn *c);
static void conn_begin_close(pgwire_conn *c);
static void conn_maybe_finish_close(pgwire_conn *c);
static void conn_process_input(pgwire_conn *c);

/* ---------------------------------------------------------------- framing */

static bool frontend_type_known(uint8_t t)
{
    switch (t) {
    case 'Q':
    case 'X':
    case 'P':
    case 'B':
    case 'E':
    case 'D':
    case 'C':
    case 'H':
    case 'S':
    case 'F':
    case 'd':
    case 'c':
    case 'f':
    case 'p':
        return true;
    default:
        return false;
    }
}

static void type_name(uint8_t t, char *buf, size_t len)
{
    if (t >= 0x21 && t < 0x7f)
        snprintf(buf, len, "'%c'", t);
    else
        snprintf(buf, len, "0x%02x", t);
}

int pgwire_frame_parse(const uint8_t *buf, size_t len, bool startup, size_t max_message,
                       size_t max_copy_message, pgwire_frame *out, char *err, size_t errlen)
{
    if (startup) {
        if (len < 4)
            return 0;
        uint32_t n = get_be32(buf);
        if (n < 8 || n > PGWIRE_STARTUP_MAX) {
            snprintf(err, errlen, "invalid length of startup packet: %u bytes (allowed 8 to %d)", n,
                     PGWIRE_STARTUP_MAX);
            return -1;
        }
        if (len < n)
            return 0;
        out->type = 0;
        out->body = buf + 4;
        out->body_len = n - 4;
        out->total_len = n;
        return 1;
    }
    if (len < 1)
        return 0;
    uint8_t t = buf[0];
    char tn[8];
    if (!frontend_type_known(t)) {
        type_name(t, tn, sizeof tn);
        snprintf(err, errlen, "invalid frontend message type %s", tn);
        return -1;
    }
    if (len < 5)
        return 0;
    uint32_t n = get_be32(buf + 1);
    size_t limit = t == 'd' ? max_copy_message : max_message;
    type_name(t, tn, sizeof tn);
    if (n < 4) {
        snprintf(err, errlen, "invalid message length %u for message type %s", n, tn);
        return -1;
    }
    if ((size_t)n - 4 > limit) {
        snprintf(err, errlen, "message of type %s too large: %u bytes (limit %zu)", tn, n - 4,
                 limit);
        return -1;
    }
    if (len - 1 < n)
        return 0;
    out->type = t;
    out->body = buf + 5;
    out->body_len = n - 4;
    out->total_len = (size_t)n + 1;
    return 1;
}

/* --------------------------------------------------------------- settings */

static void settings_init(wire_settings *ws, const pgwire_config *in)
{
    memset(ws, 0, sizeof *ws);
    ws->cfg = *in;
    snprintf(ws->host, sizeof ws->host, "%s", in->host ? in->host : "127.0.0.1");
    snprintf(ws->password, sizeof ws->password, "%s", in->password ? in->password : "");
    snprintf(ws->server_version, sizeof ws->server_version, "%s",
             in->server_version ? in->server_version : DEFAULT_SERVER_VERSION);
    ws->cfg.host = ws->host;
    ws->cfg.password = ws->password;
    ws->cfg.server_version = ws->server_version;
    if (in->authenticator != NULL) {
        ws->has_authn = true;
        ws->authn = *in->authenticator;
    } else if (in->auth == PGWIRE_AUTH_TRUST && default_authn_set) {
        ws->has_authn = true;
        ws->authn = default_authn;
    }
    ws->cfg.authenticator = ws->has_authn ? &ws->authn : NULL;
    if (ws->cfg.max_message == 0)
        ws->cfg.max_message = DEFAULT_MAX_MESSAGE;
    if (ws->cfg.max_copy_message == 0)
        ws->cfg.max_copy_message = DEFAULT_MAX_MESSAGE;
    if (ws->cfg.max_connections <= 0)
        ws->cfg.max_connections = DEFAULT_MAX_CONNECTIONS;
    if (ws->cfg.startup_timeout_ms == 0)
        ws->cfg.startup_timeout_ms = DEFAULT_STARTUP_TIMEOUT_MS;
    if (ws->cfg.out_high_watermark == 0)
        ws->cfg.out_high_watermark = DEFAULT_HIGH_WATERMARK;
    if (ws->cfg.out_low_watermark == 0 || ws->cfg.out_low_watermark > ws->cfg.out_high_watermark)
        ws->cfg.out_low_watermark = ws->cfg.out_high_watermark / 4;
    if (ws->cfg.out_hard_limit < ws->cfg.out_high_watermark)
        ws->cfg.out_hard_limit = 16 * ws->cfg.out_high_watermark;
    size_t m = ws->cfg.max_message > ws->cfg.max_copy_message ? ws->cfg.max_message
                                                              : ws->cfg.max_copy_message;
    if (m < PGWIRE_STARTUP_MAX)
        m = PGWIRE_STARTUP_MAX;
    ws->inbuf_max = m + 5;
}

/* ------------------------------------------------------------ output queue */

static bool outbuf_reserve(outbuf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return true;
    size_t want = b->len + extra;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < want)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p)
        return false;
    b->data = p;
    b->cap = cap;
    return true;
}

static void outbuf_release(outbuf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* A message being built at the end of c->pending.  ok turns false on any
 * failure (closed connection, out of memory); msg_end then drops it. */
typedef struct msg_builder {
    pgwire_conn *c;
    size_t start;
    bool ok;
} msg_builder;

static msg_builder msg_begin(pgwire_conn *c, uint8_t type)
{
    msg_builder m = {c, c->pending.len, false};
    if (c->state == CONN_CLOSED || c->close_after_flush)
        return m;
    if (!outbuf_reserve(&c->pending, 5))
        return m;
    c->pending.data[c->pending.len++] = type;
    c->pending.len += 4;
    m.ok = true;
    return m;
}

static void msg_put(msg_builder *m, const void *p, size_t n)
{
    if (!m->ok)
        return;
    if (!outbuf_reserve(&m->c->pending, n)) {
        m->ok = false;
        return;
    }
    if (n)
        memcpy(m->c->pending.data + m->c->pending.len, p, n);
    m->c->pending.len += n;
}

static void msg_put_u8(msg_builder *m, uint8_t v)
{
    msg_put(m, &v, 1);
}

static void msg_put_u16(msg_builder *m, uint16_t v)
{
    uint8_t b[2];
    put_be16(b, v);
    msg_put(m, b, 2);
}

static void msg_put_u32(msg_builder *m, uint32_t v)
{
    uint8_t b[4];
    put_be32(b, v);
    msg_put(m, b, 4);
}

static void msg_put_str(msg_builder *m, const char *s)
{
    msg_put(m, s, strlen(s) + 1);
}

static void conn_abort(pgwire_conn *c, const char *why);

/* Completes the message: fills in its length and enforces the hard limit. */
static int msg_end(msg_builder *m)
{
    pgwire_conn *c = m->c;
    if (!m->ok) {
        if (c->state != CONN_CLOSED && !c->close_after_flush) {
            c->pending.len = m->start;
            conn_abort(c, "out of memory queueing a message");
        }
        return -1;
    }
    size_t n = c->pending.len - m->start - 1;
    if (n > INT32_MAX) {
        c->pending.len = m->start;
        log_error("pgwire: %s: dropping a message of %zu bytes", c->peer, n);
        return -1;
    }
    put_be32(c->pending.data + m->start + 1, (uint32_t)n);
    size_t queued = pgwire_conn_pending_bytes(c);
    if (queued > c->ws->cfg.out_hard_limit) {
        log_warn("pgwire: %s: output queue over its hard limit (%zu > %zu bytes), closing", c->peer,
                 queued, c->ws->cfg.out_hard_limit);
        conn_abort(c, NULL);
        return -1;
    }
    if (queued > c->ws->cfg.out_high_watermark)
        c->congested = true;
    if (!c->dispatching)
        conn_flush(c);
    return 0;
}

/* One raw byte outside message framing (the answer to SSLRequest). */
static void send_raw_byte(pgwire_conn *c, uint8_t b)
{
    if (!outbuf_reserve(&c->pending, 1)) {
        conn_abort(c, "out of memory");
        return;
    }
    c->pending.data[c->pending.len++] = b;
}

/* --------------------------------------------------------- closing helpers */

/* Stops processing and closes at once, dropping queued output. */
static void conn_abort(pgwire_conn *c, const char *why)
{
    if (c->state == CONN_CLOSED && (c->closing || !c->server))
        return;
    if (why)
        log_warn("pgwire: %s: closing connection: %s", c->peer, why);
    c->state = CONN_CLOSED;
    c->copy_in = c->copy_out = false;
    c->pending.len = 0;
    conn_begin_close(c);
}

/* Stops processing input; closes once the queue is written. */
static void conn_close_after_flush(pgwire_conn *c)
{
    c->close_after_flush = true;
    c->state = CONN_CLOSED;
    c->copy_in = c->copy_out = false;
    if (!c->dispatching)
        conn_flush(c);
    conn_maybe_finish_close(c);
}

static void conn_maybe_finish_close(pgwire_conn *c)
{
    if (c->close_after_flush && !c->closing && pgwire_conn_pending_bytes(c) == 0)
        conn_begin_close(c);
}

/* An unrecoverable protocol violation: FATAL 08P01 with the reason, close. */
static void conn_protocol_error(pgwire_conn *c, const char *what)
{
    log_warn("pgwire: %s: protocol violation: %s", c->peer, what);
    pgwire_send_error(c, "FATAL", SQLSTATE_PROTOCOL_VIOLATION, what,
                      "The server closes this connection.");
    conn_close_after_flush(c);
}

/* ---------------------------------------------------------- startup phase */

static bool str_eq_ci(const char *a, const char *b)
{
    return strcasecmp(a, b) == 0;
}

/* Splits the options string as Postgres does (whitespace separates, a
 * backslash escapes the next byte) and records -c/-- settings.  Returns 0,
 * or -1 with a message in err. */
static int parse_options(pgwire_conn *c, const char *opts, char *err, size_t errlen)
{
    size_t n = strlen(opts);
    c->option_buf = malloc(n + 1);
    if (!c->option_buf) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* Tokenise into option_buf: tokens separated by NULs. */
    char *tok[2 * MAX_OPTIONS + 2];
    int ntok = 0;
    const char *p = opts;
    char *w = c->option_buf;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            break;
        if (ntok == (int)(sizeof tok / sizeof tok[0])) {
            snprintf(err, errlen, "too many words in the options parameter");
            return -1;
        }
        tok[ntok++] = w;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            if (*p == '\\' && p[1])
                p++;
            *w++ = *p++;
        }
        *w++ = '\0';
    }
    assert((size_t)(w - c->option_buf) <= n + 1);
    for (int i = 0; i < ntok; i++) {
        char *setting;
        bool dashes = false;
        if (strcmp(tok[i], "-c") == 0) {
            if (i + 1 >= ntok) {
                snprintf(err, errlen, "option -c needs name=value");
                return -1;
            }
            setting = tok[++i];
        } else if (strncmp(tok[i], "-c", 2) == 0) {
            setting = tok[i] + 2;
        } else if (strncmp(tok[i], "--", 2) == 0) {
            setting = tok[i] + 2;
            dashes = true;
        } else {
            snprintf(err, errlen, "invalid command-line argument in options: \"%.100s\"", tok[i]);
            return -1;
        }
        char *eq = strchr(setting, '=');
        if (!eq || eq == setting) {
            snprintf(err, errlen, "option \"%.100s\" is not of the form name=value", setting);
            return -1;
        }
        *eq = '\0';
        if (dashes)
            for (char *q = setting; *q; q++)
                if (*q == '-')
                    *q = '_';
        if (c->noptions == MAX_OPTIONS) {
            snprintf(err, errlen, "too many settings in options (limit %d)", MAX_OPTIONS);
            return -1;
        }
        c->option_key[c->noptions] = setting;
        c->option_val[c->noptions] = eq + 1;
        c->noptions++;
    }
    return 0;
}

static void md5_hex(const uint8_t *data, size_t len, char out[33]);

static void send_auth_ok_and_finish_startup(pgwire_conn *c);

/* Handles the StartupMessage proper (protocol 3.x). */
static void conn_handle_startup_params(pgwire_conn *c, uint32_t code, const uint8_t *b, size_t n)
{
    char err[256];
    /* Layout: (name NUL value NUL)* NUL. */
    if (n == 0 || b[n - 1] != '\0') {
        conn_protocol_error(c, "invalid startup packet layout: expected terminator as last byte");
        return;
    }
    c->param_buf = malloc(n);
    if (!c->param_buf) {
        conn_abort(c, "out of memory");
        return;
    }
    memcpy(c->param_buf, b, n);
    const char *unknown_pq[MAX_PARAMS];
    int nunknown = 0;
    /* buf[n - 1] is NUL, so every strlen below stops inside the copy. */
    size_t end = n - 1, pos = 0;
    while (pos < end) {
        const char *key = c->param_buf + pos;
        if (*key == '\0') {
            conn_protocol_error(c,
                                "invalid startup packet layout: expected terminator as last byte");
            return;
        }
        pos += strlen(key) + 1;
        const char *val = c->param_buf + pos;
        if (pos < end)
            pos += strlen(val) + 1;
        if (pos > end || val == c->param_buf + end) {
            snprintf(err, sizeof err,
                     "invalid startup packet layout: parameter \"%.64s\" has no value", key);
            conn_protocol_error(c, err);
            return;
        }
        if (strncmp(key, "_pq_.", 5) == 0) {
            if (nunknown < MAX_PARAMS)
                unknown_pq[nunknown++] = key;
            continue;
        }
        if (c->nparams == MAX_PARAMS) {
            snprintf(err, sizeof err, "too many startup parameters (limit %d)", MAX_PARAMS);
            conn_protocol_error(c, err);
            return;
        }
        c->param_key[c->nparams] = key;
        c->param_val[c->nparams] = val;
        c->nparams++;
    }
    assert(pos == end);
    const char *user = pgwire_conn_param(c, "user");
    if (!user || !*user) {
        pgwire_send_error(c, "FATAL", SQLSTATE_INVALID_AUTHORIZATION_SPECIFICATION,
                          "no PostgreSQL user name specified in startup packet", NULL);
        conn_close_after_flush(c);
        return;
    }
    const char *repl = pgwire_conn_param(c, "replication");
    if (repl) {
        if (str_eq_ci(repl, "database") || str_eq_ci(repl, "true") || str_eq_ci(repl, "on") ||
            str_eq_ci(repl, "yes") || strcmp(repl, "1") == 0)
            c->replication = true;
        else if (!(str_eq_ci(repl, "false") || str_eq_ci(repl, "off") || str_eq_ci(repl, "no") ||
                   strcmp(repl, "0") == 0)) {
            snprintf(err, sizeof err, "invalid value for parameter \"replication\": \"%.64s\"",
                     repl);
            pgwire_send_error(c, "FATAL", SQLSTATE_INVALID_PARAMETER_VALUE, err, NULL);
            conn_close_after_flush(c);
            return;
        }
    }
    const char *opts = pgwire_conn_param(c, "options");
    if (opts && parse_options(c, opts, err, sizeof err) != 0) {
        pgwire_send_error(c, "FATAL", SQLSTATE_INVALID_PARAMETER_VALUE, err, NULL);
        conn_close_after_flush(c);
        return;
    }
    if ((code & 0xFFFF) != 0 || nunknown > 0) {
        /* NegotiateProtocolVersion: we speak 3.0 and no _pq_ options. */
        msg_builder m = msg_begin(c, 'v');
        msg_put_u32(&m, PROTO_CODE(3, 0));
        msg_put_u32(&m, (uint32_t)nunknown);
        for (int i = 0; i < nunknown; i++)
            msg_put_str(&m, unknown_pq[i]);
        if (msg_end(&m) != 0)
            return;
    }
    switch (c->ws->has_authn ? PGWIRE_AUTH_PASSWORD : c->ws->cfg.auth) {
    case PGWIRE_AUTH_PASSWORD: {
        msg_builder m = msg_begin(c, 'R');
        msg_put_u32(&m, 3);
        if (msg_end(&m) == 0)
            c->state = CONN_AUTH;
        return;
    }
    case PGWIRE_AUTH_MD5: {
        if (getrandom(c->md5_salt, sizeof c->md5_salt, 0) != (ssize_t)sizeof c->md5_salt) {
            uint32_t r = (uint32_t)rand();
            memcpy(c->md5_salt, &r, 4);
        }
        msg_builder m = msg_begin(c, 'R');
        msg_put_u32(&m, 5);
        msg_put(&m, c->md5_salt, 4);
        if (msg_end(&m) == 0)
            c->state = CONN_AUTH;
        return;
    }
    case PGWIRE_AUTH_TRUST:
    default:
        send_auth_ok_and_finish_startup(c);
        return;
    }
}

static void conn_handle_startup(pgwire_conn *c, const pgwire_frame *f)
{
    uint32_t code = get_be32(f->body);
    char err[160];
    if (code == SSL_REQUEST_CODE || code == GSSENC_REQUEST_CODE) {
        if (f->body_len != 4 || c->negotiations >= MAX_NEGOTIATIONS) {
            conn_protocol_error(c, "invalid SSLRequest/GSSENCRequest packet");
            return;
        }
        c->negotiations++;
        send_raw_byte(c, 'N');
        return;
    }
    if (code == CANCEL_REQUEST_CODE) {
        /* We keep no cancellable work: close quietly, as Postgres does. */
        c->state = CONN_CLOSED;
        conn_close_after_flush(c);
        return;
    }
    if ((code >> 16) != 3) {
        snprintf(err, sizeof err, "unsupported frontend protocol %u.%u: server supports 3.0 to 3.0",
                 code >> 16, code & 0xFFFF);
        pgwire_send_error(c, "FATAL", SQLSTATE_FEATURE_NOT_SUPPORTED, err, NULL);
        conn_close_after_flush(c);
        return;
    }
    conn_handle_startup_params(c, code, f->body + 4, f->body_len - 4);
}

static void send_parameter_status(pgwire_conn *c, const char *name, const char *value)
{
    msg_builder m = msg_begin(c, 'S');
    msg_put_str(&m, name);
    msg_put_str(&m, value);
    msg_end(&m);
}

static void send_auth_ok_and_finish_startup(pgwire_conn *c)
{
    msg_builder m = msg_begin(c, 'R');
    msg_put_u32(&m, 0);
    if (msg_end(&m) != 0)
        return;
    const char *app = pgwire_conn_param(c, "application_name");
    send_parameter_status(c, "application_name", app ? app : "");
    send_parameter_status(c, "client_encoding", "UTF8");
    send_parameter_status(c, "DateStyle", "ISO, MDY");
    send_parameter_status(c, "integer_datetimes", "on");
    send_parameter_status(c, "IntervalStyle", "postgres");
    send_parameter_status(c, "is_superuser", "on");
    send_parameter_status(c, "server_encoding", "UTF8");
    send_parameter_status(c, "server_version", c->ws->cfg.server_version);
    send_parameter_status(c, "session_authorization", pgwire_conn_param(c, "user"));
    send_parameter_status(c, "standard_conforming_strings", "on");
    send_parameter_status(c, "TimeZone", "UTC");
    if (c->state == CONN_CLOSED)
        return;
    if (c->server && c->server->nestablished >= c->ws->cfg.max_connections) {
        pgwire_send_error(c, "FATAL", SQLSTATE_TOO_MANY_CONNECTIONS,
                          "sorry, too many clients already", NULL);
        conn_close_after_flush(c);
        return;
    }
    if (c->h->on_connect && c->h->on_connect(c, c->arg) != 0) {
        if (c->state != CONN_CLOSED) {
            pgwire_send_error(c, "FATAL", SQLSTATE_INVALID_AUTHORIZATION_SPECIFICATION,
                              "connection refused by the server", NULL);
            conn_close_after_flush(c);
        }
        return;
    }
    c->connected = true;
    if (c->server) {
        c->server->nestablished++;
        uv_timer_stop(&c->timer);
    }
    if (c->state == CONN_CLOSED)
        return; /* on_connect accepted and then closed: on_close follows */
    m = msg_begin(c, 'K');
    msg_put_u32(&m, c->backend_pid);
    msg_put_u32(&m, c->backend_secret);
    if (msg_end(&m) != 0)
        return;
    c->state = CONN_QUERY; /* so that pgwire_send_ready sends it */
    pgwire_send_ready(c);
}

static void conn_handle_password(pgwire_conn *c, const pgwire_frame *f)
{
    char err[200];
    if (f->type != 'p') {
        char tn[8];
        type_name(f->type, tn, sizeof tn);
        snprintf(err, sizeof err, "expected password response, got message type %s", tn);
        conn_protocol_error(c, err);
        return;
    }
    if (f->body_len == 0 || f->body[f->body_len - 1] != '\0' ||
        memchr(f->body, '\0', f->body_len) != f->body + f->body_len - 1) {
        conn_protocol_error(c, "invalid password packet format");
        return;
    }
    const char *given = (const char *)f->body;
    const char *user = pgwire_conn_param(c, "user");
    bool ok;
    if (c->ws->has_authn) {
        char sqlstate[6] = SQLSTATE_INVALID_PASSWORD;
        char principal[PGWIRE_PRINCIPAL_LEN] = "";
        if (c->ws->authn.check_password(c->ws->authn.arg, c, given, principal, sqlstate, err,
                                        sizeof err) != 0) {
            sqlstate[5] = '\0';
            log_warn("pgwire: %s: %s", c->peer, err);
            pgwire_send_error(c, "FATAL", sqlstate, err, NULL);
            conn_close_after_flush(c);
            return;
        }
        principal[sizeof principal - 1] = '\0';
        assert(principal[0] != '\0');
        memcpy(c->principal, principal, sizeof principal);
        send_auth_ok_and_finish_startup(c);
        return;
    }
    if (c->ws->cfg.auth == PGWIRE_AUTH_MD5) {
        /* "md5" + md5(md5(password || user) in hex || salt) in hex. */
        char inner[33], outer[36];
        size_t pl = strlen(c->ws->password), ul = strlen(user);
        uint8_t tmp[sizeof c->ws->password + 1024 + 36];
        if (ul > 1024) {
            ok = false;
        } else {
            memcpy(tmp, c->ws->password, pl);
            memcpy(tmp + pl, user, ul);
            md5_hex(tmp, pl + ul, inner);
            memcpy(tmp, inner, 32);
            memcpy(tmp + 32, c->md5_salt, 4);
            memcpy(outer, "md5", 3);
            md5_hex(tmp, 36, outer + 3);
            ok = strcmp(given, outer) == 0;
        }
    } else {
        size_t gl = strlen(given), pl = strlen(c->ws->password);
        unsigned diff = (unsigned)(gl ^ pl);
        for (size_t i = 0; i < gl && i < pl; i++)
            diff |= (unsigned)(given[i] ^ c->ws->password[i]);
        ok = diff == 0;
    }
    if (!ok) {
        snprintf(err, sizeof err, "password authentication failed for user \"%.64s\"", user);
        log_warn("pgwire: %s: %s", c->peer, err);
        pgwire_send_error(c, "FATAL", SQLSTATE_INVALID_PASSWORD, err, NULL);
        conn_close_after_flush(c);
        return;
    }
    send_auth_ok_and_finish_startup(c);
}

/* ------------------------------------------------------------- query phase */

static bool query_is_empty(const char *sql)
{
    for (; *sql; sql++)
        if (*sql != ' ' && *sql != '\t' && *sql != '\n' && *sql != '\r' && *sql != ';')
            return false;
    return true;
}

static void conn_handle_query(pgwire_conn *c, const pgwire_frame *f)
{
    if (f->body_len == 0 || memchr(f->body, '\0', f->body_len) != f->body + f->body_len - 1) {
        conn_protocol_error(c, "invalid Query message format: string not terminated at the end");
        return;
    }
    const char *sql = (const char *)f->body;
    c->state = CONN_QUERY;
    if (query_is_empty(sql)) {
        pgwire_send_empty_query(c);
        pgwire_send_ready(c);
        return;
    }
    if (!c->h->on_query) {
        pgwire_send_error(c, "ERROR", SQLSTATE_FEATURE_NOT_SUPPORTED,
                          "this server accepts no queries", NULL);
        return;
    }
    if (c->ws->has_authn && c->ws->authn.check_query != NULL) {
        char sqlstate[6] = SQLSTATE_INSUFFICIENT_PRIVILEGE, err[256];
        if (c->ws->authn.check_query(c->ws->authn.arg, c, sql, sqlstate, err, sizeof err) != 0) {
            sqlstate[5] = '\0';
            log_warn("pgwire: %s: %s", c->peer, err);
            pgwire_send_error(c, "ERROR", sqlstate, err, NULL);
            return;
        }
    }
    c->h->on_query(c, sql, c->arg);
}

static void conn_handle_idle(pgwire_conn *c, const pgwire_frame *f)
{
    char err[160];
    if (c->skip_till_sync && f->type != 'S' && f->type != 'X')
        return;
    switch (f->type) {
    case 'Q':
        conn_handle_query(c, f);
        return;
    case 'X':
        c->state = CONN_CLOSED;
        conn_close_after_flush(c);
        return;
    case 'S':
        c->skip_till_sync = false;
        c->state = CONN_QUERY;
        pgwire_send_ready(c);
        return;
    case 'H':
        return; /* we flush after every batch anyway */
    case 'd':
    case 'c':
    case 'f':
        return; /* stray copy messages after a failed COPY: ignored, as Postgres */
    case 'P':
    case 'B':
    case 'E':
    case 'D':
    case 'C':
        pgwire_send_error(c, "ERROR", SQLSTATE_FEATURE_NOT_SUPPORTED,
                          "extended query protocol is not supported",
                          "Use the simple query protocol.");
        c->skip_till_sync = true;
        return;
    case 'F':
        c->state = CONN_QUERY;
        pgwire_send_error(c, "ERROR", SQLSTATE_FEATURE_NOT_SUPPORTED,
                          "function call protocol is not supported", NULL);
        return;
    default:
        snprintf(err, sizeof err, "unexpected message type 0x%02x", f->type);
        conn_protocol_error(c, err);
        return;
    }
}

static void conn_handle_copy_in(pgwire_conn *c, const pgwire_frame *f)
{
    char err[160];
    switch (f->type) {
    case 'd':
        if (c->h->on_copy_data)
            c->h->on_copy_data(c, f->body, f->body_len, c->arg);
        return;
    case 'c':
    case 'f':
        if (f->type == 'f')
            log_info("pgwire: %s: client failed the COPY: %.*s", c->peer,
                     (int)(f->body_len > 200 ? 200 : f->body_len), (const char *)f->body);
        c->copy_in = false;
        if (c->h->on_copy_done)
            c->h->on_copy_done(c, c->arg);
        return;
    case 'H':
    case 'S':
        return;
    case 'X':
        c->state = CONN_CLOSED;
        conn_abort(c, NULL);
        return;
    default:
        snprintf(err, sizeof err, "unexpected message type 0x%02x during COPY", f->type);
        conn_protocol_error(c, err);
        return;
    }
}

/* Handles one frame; returns true if processing may continue. */
static void conn_handle_frame(pgwire_conn *c, const pgwire_frame *f)
{
    switch (c->state) {
    case CONN_STARTUP:
        conn_handle_startup(c, f);
        return;
    case CONN_AUTH:
        conn_handle_password(c, f);
        return;
    case CONN_IDLE:
        conn_handle_idle(c, f);
        return;
    case CONN_QUERY:
        assert(c->copy_in);
        conn_handle_copy_in(c, f);
        return;
    case CONN_CLOSED:
        return;
    }
}

static bool conn_can_take_input(const pgwire_conn *c)
{
    if (c->state == CONN_CLOSED || c->input_paused)
        return false;
    if (c->state == CONN_QUERY && !c->copy_in)
        return false; /* the next message waits for ReadyForQuery */
    return true;
}

static void conn_resume_reading(pgwire_conn *c);

/* Parses and handles every complete frame in the input buffer that the
 * current state allows.  Handlers run from here. */
static void conn_process_input(pgwire_conn *c)
{
    if (c->dispatching)
        return; /* the outer invocation's loop picks the new state up */
    c->dispatching = true;
    size_t pos = 0;
    char err[200];
    while (conn_can_take_input(c)) {
        pgwire_frame f;
        int r = pgwire_frame_parse(c->in + pos, c->in_len - pos, c->state == CONN_STARTUP,
                                   c->ws->cfg.max_message, c->ws->cfg.max_copy_message, &f, err,
                                   sizeof err);
        if (r == 0)
            break;
        if (r < 0) {
            conn_protocol_error(c, err);
            break;
        }
        pos += f.total_len;
        conn_handle_frame(c, &f);
    }
    assert(pos <= c->in_len);
    if (c->state == CONN_CLOSED) {
        c->in_len = 0;
    } else if (pos > 0) {
        memmove(c->in, c->in + pos, c->in_len - pos);
        c->in_len -= pos;
    }
    c->dispatching = false;
    conn_flush(c);
    conn_maybe_finish_close(c);
    if (c->server && c->state != CONN_CLOSED)
        conn_resume_reading(c);
}

/* ------------------------------------------------------------ public sends */

int pgwire_send_error(pgwire_conn *c, const char *severity, const char *sqlstate, const char *msg,
                      const char *detail)
{
    assert(severity && sqlstate && msg);
    msg_builder m = msg_begin(c, 'E');
    msg_put_u8(&m, 'S');
    msg_put_str(&m, severity);
    msg_put_u8(&m, 'V');
    msg_put_str(&m, severity);
    msg_put_u8(&m, 'C');
    msg_put_str(&m, strlen(sqlstate) == 5 ? sqlstate : SQLSTATE_INTERNAL_ERROR);
    msg_put_u8(&m, 'M');
    msg_put_str(&m, msg);
    if (detail) {
        msg_put_u8(&m, 'D');
        msg_put_str(&m, detail);
    }
    msg_put_u8(&m, 0);
    if (msg_end(&m) != 0)
        return -1;
    if (strcmp(severity, "FATAL") == 0 || strcmp(severity, "PANIC") == 0) {
        conn_close_after_flush(c);
        return 0;
    }
    if (strcmp(severity, "ERROR") == 0) {
        c->copy_in = c->copy_out = false;
        if (c->state == CONN_QUERY)
            return pgwire_send_ready(c);
    }
    return 0;
}

int pgwire_send_notice(pgwire_conn *c, const char *severity, const char *msg)
{
    msg_builder m = msg_begin(c, 'N');
    msg_put_u8(&m, 'S');
    msg_put_str(&m, severity);
    msg_put_u8(&m, 'V');
    msg_put_str(&m, severity);
    msg_put_u8(&m, 'C');
    msg_put_str(&m, SQLSTATE_SUCCESSFUL_COMPLETION);
    msg_put_u8(&m, 'M');
    msg_put_str(&m, msg);
    msg_put_u8(&m, 0);
    return msg_end(&m);
}

int pgwire_send_row_description(pgwire_conn *c, int ncols, const char *const names[],
                                const uint32_t type_oids[])
{
    if (ncols < 0 || ncols > 1664)
        return -1;
    msg_builder m = msg_begin(c, 'T');
    msg_put_u16(&m, (uint16_t)ncols);
    for (int i = 0; i < ncols; i++) {
        msg_put_str(&m, names[i]);
        msg_put_u32(&m, 0);                             /* table oid */
        msg_put_u16(&m, 0);                             /* column number */
        msg_put_u32(&m, type_oids ? type_oids[i] : 25); /* type oid */
        msg_put_u16(&m, 0xFFFF);                        /* typlen -1 */
        msg_put_u32(&m, 0xFFFFFFFF);                    /* typmod -1 */
        msg_put_u16(&m, 0);                             /* text format */
    }
    return msg_end(&m);
}

int pgwire_send_data_row(pgwire_conn *c, int ncols, const char *const values[])
{
    if (ncols < 0 || ncols > 1664)
        return -1;
    msg_builder m = msg_begin(c, 'D');
    msg_put_u16(&m, (uint16_t)ncols);
    for (int i = 0; i < ncols; i++) {
        if (!values[i]) {
            msg_put_u32(&m, 0xFFFFFFFF);
            continue;
        }
        size_t n = strlen(values[i]);
        msg_put_u32(&m, (uint32_t)n);
        msg_put(&m, values[i], n);
    }
    return msg_end(&m);
}

int pgwire_send_command_complete(pgwire_conn *c, const char *tag)
{
    msg_builder m = msg_begin(c, 'C');
    msg_put_str(&m, tag);
    return msg_end(&m);
}

int pgwire_send_empty_query(pgwire_conn *c)
{
    msg_builder m = msg_begin(c, 'I');
    return msg_end(&m);
}

static void conn_kick_cb(uv_timer_t *t)
{
    pgwire_conn *c = t->data;
    conn_process_input(c);
}

int pgwire_send_ready(pgwire_conn *c)
{
    if (c->state != CONN_QUERY)
        return c->state == CONN_CLOSED ? -1 : 0;
    if (c->copy_in || c->copy_out) {
        log_warn("pgwire: %s: ReadyForQuery while copy mode is open; ending copy mode", c->peer);
        c->copy_in = c->copy_out = false;
    }
    msg_builder m = msg_begin(c, 'Z');
    msg_put_u8(&m, 'I');
    if (msg_end(&m) != 0)
        return -1;
    c->state = CONN_IDLE;
    /* Input that waited for this query to end is processed on the next loop
     * iteration, not from inside the caller. */
    if (!c->dispatching && c->server && c->in_len > 0)
        uv_timer_start(&c->timer, conn_kick_cb, 0, 0);
    return 0;
}

static int start_copy(pgwire_conn *c, uint8_t type, bool both)
{
    if (c->state != CONN_QUERY || c->copy_in || c->copy_out) {
        log_error("pgwire: %s: copy mode started outside a query or twice", c->peer);
        return -1;
    }
    msg_builder m = msg_begin(c, type);
    msg_put_u8(&m, 1);  /* binary */
    msg_put_u16(&m, 0); /* no columns */
    if (msg_end(&m) != 0)
        return -1;
    c->copy_out = true;
    c->copy_in = both;
    return 0;
}

int pgwire_start_copy_both(pgwire_conn *c)
{
    return start_copy(c, 'W', true);
}

int pgwire_start_copy_out(pgwire_conn *c)
{
    return start_copy(c, 'H', false);
}

int pgwire_send_copy_data(pgwire_conn *c, const void *data, size_t n)
{
    return pgwire_send_copy_data2(c, data, n, NULL, 0);
}

int pgwire_send_copy_data2(pgwire_conn *c, const void *head, size_t head_len, const void *body,
                           size_t body_len)
{
    if (!c->copy_out) {
        if (c->state != CONN_CLOSED)
            log_error("pgwire: %s: CopyData sent outside copy mode", c->peer);
        return -1;
    }
    msg_builder m = msg_begin(c, 'd');
    msg_put(&m, head, head_len);
    msg_put(&m, body, body_len);
    return msg_end(&m);
}

int pgwire_send_copy_done(pgwire_conn *c)
{
    if (!c->copy_out)
        return -1;
    msg_builder m = msg_begin(c, 'c');
    if (msg_end(&m) != 0)
        return -1;
    c->copy_out = false;
    return 0;
}

/* ------------------------------------------------------------- accessors */

const char *pgwire_conn_param(const pgwire_conn *c, const char *name)
{
    for (int i = 0; i < c->nparams; i++)
        if (strcmp(c->param_key[i], name) == 0)
            return c->param_val[i];
    return NULL;
}

const char *pgwire_conn_option(const pgwire_conn *c, const char *name)
{
    /* The last setting of a name wins, as for Postgres GUCs. */
    for (int i = c->noptions - 1; i >= 0; i--)
        if (strcmp(c->option_key[i], name) == 0)
            return c->option_val[i];
    return NULL;
}

bool pgwire_conn_is_replication(const pgwire_conn *c)
{
    return c->replication;
}

const char *pgwire_conn_principal(const pgwire_conn *c)
{
    return c->principal[0] != '\0' ? c->principal : NULL;
}

const char *pgwire_conn_peer(const pgwire_conn *c)
{
    return c->peer;
}

void pgwire_conn_set_data(pgwire_conn *c, void *data)
{
    c->data = data;
}

void *pgwire_conn_data(const pgwire_conn *c)
{
    return c->data;
}

bool pgwire_conn_in_copy(const pgwire_conn *c)
{
    return c->copy_in || c->copy_out;
}

size_t pgwire_conn_pending_bytes(const pgwire_conn *c)
{
    return c->pending.len + c->inflight.len;
}

bool pgwire_conn_is_congested(const pgwire_conn *c)
{
    return c->congested;
}

void pgwire_conn_pause_input(pgwire_conn *c, bool pause)
{
    bool was = c->input_paused;
    c->input_paused = pause;
    if (was && !pause && !c->dispatching && c->server && c->state != CONN_CLOSED &&
        c->state != CONN_STARTUP && c->state != CONN_AUTH)
        uv_timer_start(&c->timer, conn_kick_cb, 0, 0);
}

void pgwire_conn_close(pgwire_conn *c)
{
    if (c->state == CONN_CLOSED && (c->close_after_flush || c->closing))
        return;
    conn_close_after_flush(c);
}

/* Called when queued output dropped: clears congestion, tells the producer. */
static void conn_check_writable(pgwire_conn *c)
{
    if (c->congested && pgwire_conn_pending_bytes(c) < c->ws->cfg.out_low_watermark) {
        c->congested = false;
        if (c->h->on_writable && c->state != CONN_CLOSED)
            c->h->on_writable(c, c->arg);
    }
}

/* ------------------------------------------------------- detached mode */

static void conn_init(pgwire_conn *c, const wire_settings *ws, const pgwire_handlers *h, void *arg)
{
    c->ws = ws;
    c->h = h;
    c->arg = arg;
    c->state = CONN_STARTUP;
    snprintf(c->peer, sizeof c->peer, "detached");
    if (getrandom(&c->backend_secret, sizeof c->backend_secret, 0) !=
        (ssize_t)sizeof c->backend_secret)
        c->backend_secret = (uint32_t)rand();
}

static void conn_free(pgwire_conn *c)
{
    free(c->in);
    outbuf_release(&c->pending);
    outbuf_release(&c->inflight);
    free(c->param_buf);
    free(c->option_buf);
    free(c);
}

pgwire_conn *pgwire_conn_create_detached(const pgwire_config *cfg, const pgwire_handlers *h,
                                         void *arg)
{
    pgwire_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    settings_init(&c->own_ws, cfg);
    conn_init(c, &c->own_ws, h, arg);
    c->backend_pid = 1;
    return c;
}

static bool inbuf_reserve(pgwire_conn *c, size_t want_free)
{
    if (c->in_cap - c->in_len >= want_free)
        return true;
    size_t cap = c->in_cap ? c->in_cap : INBUF_INITIAL;
    while (cap - c->in_len < want_free && cap < c->ws->inbuf_max)
        cap *= 2;
    if (cap > c->ws->inbuf_max)
        cap = c->ws->inbuf_max;
    if (cap <= c->in_cap)
        return c->in_cap > c->in_len;
    uint8_t *p = realloc(c->in, cap);
    if (!p)
        return false;
    c->in = p;
    c->in_cap = cap;
    return true;
}

int pgwire_conn_feed(pgwire_conn *c, const uint8_t *data, size_t n)
{
    assert(!c->server);
    while (n > 0 && c->state != CONN_CLOSED) {
        if (!inbuf_reserve(c, n) || c->in_cap == c->in_len)
            break; /* buffer full while input waits (paused): drop the rest */
        size_t k = c->in_cap - c->in_len;
        if (k > n)
            k = n;
        memcpy(c->in + c->in_len, data, k);
        c->in_len += k;
        data += k;
        n -= k;
        conn_process_input(c);
    }
    if (c->state != CONN_CLOSED)
        conn_process_input(c);
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
    conn_check_writable(c);
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
    conn_free(c);
}

/* ------------------------------------------------------------ libuv edge */

static void conn_write_cb(uv_write_t *req, int status)
{
    pgwire_conn *c = req->data;
    c->writing = false;
    c->inflight.len = 0;
    if (c->inflight.cap > OUTBUF_KEEP)
        outbuf_release(&c->inflight);
    if (status < 0) {
        if (status != UV_ECANCELED)
            conn_abort(c, uv_strerror(status));
        return;
    }
    if (c->closing)
        return;
    conn_flush(c);
    conn_check_writable(c);
    conn_maybe_finish_close(c);
}

static void conn_flush(pgwire_conn *c)
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
        conn_abort(c, uv_strerror(r));
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
    conn_free(c);
    server_maybe_free(s);
}

static void conn_begin_close(pgwire_conn *c)
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
    if (!inbuf_reserve(c, 4096) || c->in_cap == c->in_len) {
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
        conn_abort(c, NULL);
        return;
    }
    if (nread == 0)
        return;
    c->in_len += (size_t)nread;
    assert(c->in_len <= c->in_cap);
    conn_process_input(c);
}

static void conn_resume_reading(pgwire_conn *c)
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
    conn_close_after_flush(c);
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
    conn_init(c, &s->ws, &s->h, s->arg);
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
        conn_abort(c, "accept failed");
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    format_peer(&c->tcp, c->peer, sizeof c->peer);
    /* Sessions beyond max_connections are refused with an error after their
     * startup packet; beyond that slack, the socket is simply closed. */
    int slack = s->ws.cfg.max_connections / 10 + 8;
    if (s->nconns > s->ws.cfg.max_connections + slack) {
        conn_abort(c, "too many connections");
        return;
    }
    uv_timer_start(&c->timer, conn_startup_timeout_cb, s->ws.cfg.startup_timeout_ms, 0);
    conn_resume_reading(c);
    if (!c->reading)
        conn_abort(c, "cannot start reading");
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
    settings_init(&s->ws, cfg);
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
        conn_abort(c, NULL);
    if (s->listener_open && !uv_is_closing((uv_handle_t *)&s->listener))
        uv_close((uv_handle_t *)&s->listener, server_listener_closed_cb);
}

/* ------------------------------------------------------------------ MD5 */

/* RFC 1321, one-shot, for AuthenticationMD5Password only. */
static void md5_block(uint32_t st[4], const uint8_t blk[64])
{
    static const uint32_t k[64] = {
        0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
        0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
        0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
        0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
        0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
        0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
        0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
        0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
        0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
        0xeb86d391,
    };
    static const uint8_t r[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                                  5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                                  4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                                  6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};
    uint32_t w[16];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)blk[4 * i] | ((uint32_t)blk[4 * i + 1] << 8) |
               ((uint32_t)blk[4 * i + 2] << 16) | ((uint32_t)blk[4 * i + 3] << 24);
    uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) {
            f = (b & c) | (~b & d);
            g = i;
        } else if (i < 32) {
            f = (d & b) | (~d & c);
            g = (5 * i + 1) % 16;
        } else if (i < 48) {
            f = b ^ c ^ d;
            g = (3 * i + 5) % 16;
        } else {
            f = c ^ (b | ~d);
            g = (7 * i) % 16;
        }
        uint32_t t = d;
        d = c;
        c = b;
        uint32_t x = a + f + k[i] + w[g];
        b = b + ((x << r[i]) | (x >> (32 - r[i])));
        a = t;
    }
    st[0] += a;
    st[1] += b;
    st[2] += c;
    st[3] += d;
}

static void md5_hex(const uint8_t *data, size_t len, char out[33])
{
    uint32_t st[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    size_t i = 0;
    for (; i + 64 <= len; i += 64)
        md5_block(st, data + i);
    uint8_t tail[128] = {0};
    size_t rest = len - i;
    memcpy(tail, data + i, rest);
    tail[rest] = 0x80;
    size_t tl = rest + 1 + 8 <= 64 ? 64 : 128;
    uint64_t bits = (uint64_t)len * 8;
    for (int j = 0; j < 8; j++)
        tail[tl - 8 + j] = (uint8_t)(bits >> (8 * j));
    md5_block(st, tail);
    if (tl == 128)
        md5_block(st, tail + 64);
    static const char hex[] = "0123456789abcdef";
    for (int j = 0; j < 16; j++) {
        uint8_t byte = (uint8_t)(st[j / 4] >> (8 * (j % 4)));
        out[2 * j] = hex[byte >> 4];
        out[2 * j + 1] = hex[byte & 15];
    }
    out[32] = '\0';
}
