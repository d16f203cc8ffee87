/*
 * pgwire.c: the server side of the PostgreSQL v3 wire protocol: framing and
 * the per-connection state machine.  See pgwire.h.
 *
 * Layers, bottom up, over three files sharing pgwire_int.h:
 *   - pgwire_frame_parse(): pure framing over a byte buffer (here);
 *   - the per-connection state machine (conn_handle_*), fed bytes by
 *     pgwire_conn_process_input() and writing into the connection's output
 *     queue (here);
 *   - its edges: the libuv server (pgwire_server.c: accept, read into the
 *     input buffer, write the queue) and the detached connection with no
 *     socket for the fuzz target and tests (pgwire_detached.c).
 * The state machine never touches a socket, so both edges run exactly the
 * same code.
 *
 * Authentication: trust, one shared password (cleartext or MD5, hashed by
 * OpenSSL), or an authenticator (token per principal, common/net/auth.h) that
 * may also veto each query.  The process-wide default authenticator is the
 * only mutable global here; it is written before any server starts and
 * copied into each server's settings, so connections never read it.
 *
 * For: the protocol and its state.  Not for: sockets (pgwire_server.c), TLS,
 * SCRAM, the extended query protocol, anything about SQL.
 */
#include "base/byteorder.h"
#include "base/hex.h"
#include "net/pgwire.h"
#include "net/pgwire_int.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/evp.h>

#include "base/log.h"
#include "base/sqlstate.h"

/* The process-wide default authenticator (see the head comment). */
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

void pgwire_settings_init(wire_settings *ws, const pgwire_config *in)
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

void pgwire_outbuf_release(outbuf *b)
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

void pgwire_conn_abort(pgwire_conn *c, const char *why);

/* Completes the message: fills in its length and enforces the hard limit. */
static int msg_end(msg_builder *m)
{
    pgwire_conn *c = m->c;
    if (!m->ok) {
        if (c->state != CONN_CLOSED && !c->close_after_flush) {
            c->pending.len = m->start;
            pgwire_conn_abort(c, "out of memory queueing a message");
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
        pgwire_conn_abort(c, NULL);
        return -1;
    }
    if (queued > c->ws->cfg.out_high_watermark)
        c->congested = true;
    if (!c->dispatching)
        pgwire_conn_flush(c);
    return 0;
}

/* One raw byte outside message framing (the answer to SSLRequest). */
static void send_raw_byte(pgwire_conn *c, uint8_t b)
{
    if (!outbuf_reserve(&c->pending, 1)) {
        pgwire_conn_abort(c, "out of memory");
        return;
    }
    c->pending.data[c->pending.len++] = b;
}

/* --------------------------------------------------------- closing helpers */

/* Stops processing and closes at once, dropping queued output. */
void pgwire_conn_abort(pgwire_conn *c, const char *why)
{
    if (c->state == CONN_CLOSED && (c->closing || !c->server))
        return;
    if (why)
        log_warn("pgwire: %s: closing connection: %s", c->peer, why);
    c->state = CONN_CLOSED;
    c->copy_in = c->copy_out = false;
    c->pending.len = 0;
    pgwire_conn_begin_close(c);
}

/* Stops processing input; closes once the queue is written. */
void pgwire_conn_close_after_flush(pgwire_conn *c)
{
    c->close_after_flush = true;
    c->state = CONN_CLOSED;
    c->copy_in = c->copy_out = false;
    if (!c->dispatching)
        pgwire_conn_flush(c);
    pgwire_conn_maybe_finish_close(c);
}

void pgwire_conn_maybe_finish_close(pgwire_conn *c)
{
    if (c->close_after_flush && !c->closing && pgwire_conn_pending_bytes(c) == 0)
        pgwire_conn_begin_close(c);
}

/* An unrecoverable protocol violation: FATAL 08P01 with the reason, close. */
static void conn_protocol_error(pgwire_conn *c, const char *what)
{
    log_warn("pgwire: %s: protocol violation: %s", c->peer, what);
    pgwire_send_error(c, "FATAL", SQLSTATE_PROTOCOL_VIOLATION, what,
                      "The server closes this connection.");
    pgwire_conn_close_after_flush(c);
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

/* The MD5 of data[0..len) in lowercase hex (out[32] = NUL), by OpenSSL.
 * False when OpenSSL refuses (e.g. MD5 disabled by a FIPS policy). */
static bool md5_hex(const uint8_t *data, size_t len, char out[33])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    if (EVP_Digest(data, len, md, &mdlen, EVP_md5(), NULL) != 1 || mdlen != 16)
        return false;
    hex_encode(md, 16, out);
    return true;
}

static void send_auth_ok_and_finish_startup(pgwire_conn *c);

/* Copies the startup packet's parameters (name NUL value NUL)* NUL into
 * c->param_buf and indexes them; the _pq_.* ones, which we do not speak, go
 * to unknown_pq[] instead.  False after answering a protocol error. */
static bool startup_store_params(pgwire_conn *c, const uint8_t *b, size_t n,
                                 const char *unknown_pq[MAX_PARAMS], int *nunknown)
{
    char err[256];
    if (n == 0 || b[n - 1] != '\0') {
        conn_protocol_error(c, "invalid startup packet layout: expected terminator as last byte");
        return false;
    }
    c->param_buf = malloc(n);
    if (!c->param_buf) {
        pgwire_conn_abort(c, "out of memory");
        return false;
    }
    memcpy(c->param_buf, b, n);
    /* buf[n - 1] is NUL, so every strlen below stops inside the copy. */
    size_t end = n - 1, pos = 0;
    while (pos < end) {
        const char *key = c->param_buf + pos;
        if (*key == '\0') {
            conn_protocol_error(c,
                                "invalid startup packet layout: expected terminator as last byte");
            return false;
        }
        pos += strlen(key) + 1;
        const char *val = c->param_buf + pos;
        if (pos < end)
            pos += strlen(val) + 1;
        if (pos > end || val == c->param_buf + end) {
            snprintf(err, sizeof err,
                     "invalid startup packet layout: parameter \"%.64s\" has no value", key);
            conn_protocol_error(c, err);
            return false;
        }
        if (strncmp(key, "_pq_.", 5) == 0) {
            if (*nunknown < MAX_PARAMS)
                unknown_pq[(*nunknown)++] = key;
            continue;
        }
        if (c->nparams == MAX_PARAMS) {
            snprintf(err, sizeof err, "too many startup parameters (limit %d)", MAX_PARAMS);
            conn_protocol_error(c, err);
            return false;
        }
        c->param_key[c->nparams] = key;
        c->param_val[c->nparams] = val;
        c->nparams++;
    }
    assert(pos == end);
    return true;
}

/* Checks the parameters Postgres itself interprets (user, replication,
 * options) and notes replication mode.  False after a FATAL error was
 * queued and the connection set to close. */
static bool startup_check_params(pgwire_conn *c)
{
    char err[256];
    const char *user = pgwire_conn_param(c, "user");
    if (!user || !*user) {
        pgwire_send_error(c, "FATAL", SQLSTATE_INVALID_AUTHORIZATION_SPECIFICATION,
                          "no PostgreSQL user name specified in startup packet", NULL);
        pgwire_conn_close_after_flush(c);
        return false;
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
            pgwire_conn_close_after_flush(c);
            return false;
        }
    }
    const char *opts = pgwire_conn_param(c, "options");
    if (opts && parse_options(c, opts, err, sizeof err) != 0) {
        pgwire_send_error(c, "FATAL", SQLSTATE_INVALID_PARAMETER_VALUE, err, NULL);
        pgwire_conn_close_after_flush(c);
        return false;
    }
    return true;
}

/* Asks for the password the configuration wants (AuthenticationCleartext
 * or MD5 with a fresh salt), or finishes the startup under trust. */
static void startup_request_auth(pgwire_conn *c)
{
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

/* Handles the StartupMessage proper (protocol 3.x). */
static void conn_handle_startup_params(pgwire_conn *c, uint32_t code, const uint8_t *b, size_t n)
{
    const char *unknown_pq[MAX_PARAMS];
    int nunknown = 0;
    if (!startup_store_params(c, b, n, unknown_pq, &nunknown) || !startup_check_params(c))
        return;
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
    startup_request_auth(c);
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
        pgwire_conn_close_after_flush(c);
        return;
    }
    if ((code >> 16) != 3) {
        snprintf(err, sizeof err, "unsupported frontend protocol %u.%u: server supports 3.0 to 3.0",
                 code >> 16, code & 0xFFFF);
        pgwire_send_error(c, "FATAL", SQLSTATE_FEATURE_NOT_SUPPORTED, err, NULL);
        pgwire_conn_close_after_flush(c);
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
        pgwire_conn_close_after_flush(c);
        return;
    }
    if (c->h->on_connect && c->h->on_connect(c, c->arg) != 0) {
        if (c->state != CONN_CLOSED) {
            pgwire_send_error(c, "FATAL", SQLSTATE_INVALID_AUTHORIZATION_SPECIFICATION,
                              "connection refused by the server", NULL);
            pgwire_conn_close_after_flush(c);
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
            pgwire_conn_close_after_flush(c);
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
            ok = md5_hex(tmp, pl + ul, inner);
            memcpy(tmp, inner, 32);
            memcpy(tmp + 32, c->md5_salt, 4);
            memcpy(outer, "md5", 3);
            ok = ok && md5_hex(tmp, 36, outer + 3) && strcmp(given, outer) == 0;
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
        pgwire_conn_close_after_flush(c);
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
        pgwire_conn_close_after_flush(c);
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
        pgwire_conn_abort(c, NULL);
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

void pgwire_conn_resume_reading(pgwire_conn *c);

/* Parses and handles every complete frame in the input buffer that the
 * current state allows.  Handlers run from here. */
void pgwire_conn_process_input(pgwire_conn *c)
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
    pgwire_conn_flush(c);
    pgwire_conn_maybe_finish_close(c);
    if (c->server && c->state != CONN_CLOSED)
        pgwire_conn_resume_reading(c);
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
        pgwire_conn_close_after_flush(c);
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
    pgwire_conn_process_input(c);
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
    pgwire_conn_close_after_flush(c);
}

/* Called when queued output dropped: clears congestion, tells the producer. */
void pgwire_conn_check_writable(pgwire_conn *c)
{
    if (c->congested && pgwire_conn_pending_bytes(c) < c->ws->cfg.out_low_watermark) {
        c->congested = false;
        if (c->h->on_writable && c->state != CONN_CLOSED)
            c->h->on_writable(c, c->arg);
    }
}

/* ------------------------------------------------- connection lifetime */

void pgwire_conn_init(pgwire_conn *c, const wire_settings *ws, const pgwire_handlers *h, void *arg)
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

void pgwire_conn_free(pgwire_conn *c)
{
    free(c->in);
    pgwire_outbuf_release(&c->pending);
    pgwire_outbuf_release(&c->inflight);
    free(c->param_buf);
    free(c->option_buf);
    free(c);
}

bool pgwire_inbuf_reserve(pgwire_conn *c, size_t want_free)
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
