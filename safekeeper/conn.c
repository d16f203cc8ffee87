/*
 * conn.c: per-connection state and command dispatch of the safekeeper.
 * See conn.h.  Commands are parsed by a small tokenizer (words, numbers,
 * 'quoted strings', parentheses, commas, '='), case-insensitive keywords.
 *
 * For: the tokenizer, the command handlers and TIMELINE_STATUS's row.
 * Not for: executing WAL push (timeline.c) or streaming (walsender.c).
 */
#include "safekeeper/conn.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"
#include "base/sqlstate.h"
#include "proto/membership.h"
#include "safekeeper/walsender.h"

#define MAX_TOKENS 32
#define MAX_TOKEN_LEN 640 /* a member list (MEMBERSHIP_TEXT_MAX) fits */

typedef enum conn_mode { MODE_IDLE = 0, MODE_PUSH, MODE_SEND } conn_mode;

typedef struct sk_conn {
    sk_node *node;
    pgwire_conn *c;
    strata_id tenant_id;
    strata_id timeline_id;
    conn_mode mode;
    sk_pusher *pusher;
    sk_sender *sender;
} sk_conn;

typedef struct tokens {
    int n;
    char t[MAX_TOKENS][MAX_TOKEN_LEN];
    bool quoted[MAX_TOKENS];
} tokens;

/* Splits sql into tokens; -1 with a message on bad input. */
static int tokenize(const char *sql, tokens *out, const char **why)
{
    out->n = 0;
    const char *p = sql;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '\0' || (*p == ';' && p[1 + strspn(p + 1, " \t\r\n")] == '\0'))
            return 0;
        if (out->n == MAX_TOKENS) {
            *why = "too many words in command";
            return -1;
        }
        char *dst = out->t[out->n];
        size_t len = 0;
        out->quoted[out->n] = false;
        if (*p == '(' || *p == ')' || *p == ',' || *p == '=') {
            dst[len++] = *p++;
        } else if (*p == '\'') {
            out->quoted[out->n] = true;
            p++;
            for (;;) {
                if (*p == '\0') {
                    *why = "unterminated quoted string";
                    return -1;
                }
                if (*p == '\'' && p[1] == '\'') {
                    p++;
                } else if (*p == '\'') {
                    p++;
                    break;
                }
                if (len + 1 >= MAX_TOKEN_LEN) {
                    *why = "quoted string too long";
                    return -1;
                }
                dst[len++] = *p++;
            }
        } else if (*p == '"') {
            /* A quoted identifier (slot names): keep its text. */
            p++;
            while (*p != '"') {
                if (*p == '\0' || len + 1 >= MAX_TOKEN_LEN) {
                    *why = "bad quoted identifier";
                    return -1;
                }
                dst[len++] = *p++;
            }
            p++;
        } else {
            while (*p != '\0' && !isspace((unsigned char)*p) && strchr("(),=;'", *p) == NULL) {
                if (len + 1 >= MAX_TOKEN_LEN) {
                    *why = "word too long";
                    return -1;
                }
                dst[len++] = *p++;
            }
            if (len == 0) {
                *why = "unexpected character";
                return -1;
            }
        }
        dst[len] = '\0';
        out->n++;
    }
}

static bool is_kw(const tokens *t, int i, const char *kw)
{
    return i < t->n && !t->quoted[i] && strcasecmp(t->t[i], kw) == 0;
}

static bool parse_u64(const char *s, uint64_t *out)
{
    if (*s == '\0' || strlen(s) > 20)
        return false;
    uint64_t v = 0;
    for (; *s != '\0'; s++) {
        if (!isdigit((unsigned char)*s))
            return false;
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* Parses "( name 'value' [, name 'value']... )" from index *i; calls fn for
 * each pair.  Also accepts name = value and name value.  -1 with err. */
typedef int (*option_fn)(void *arg, const char *name, const char *value, char *err, size_t errlen);

static int parse_options(const tokens *t, int *i, option_fn fn, void *arg, char *err, size_t errlen)
{
    if (!is_kw(t, *i, "("))
        return 0;
    (*i)++;
    for (;;) {
        if (*i >= t->n) {
            snprintf(err, errlen, "unterminated option list");
            return -1;
        }
        const char *name = t->t[(*i)++];
        if (is_kw(t, *i, "="))
            (*i)++;
        if (*i >= t->n || is_kw(t, *i, ")") || is_kw(t, *i, ",")) {
            snprintf(err, errlen, "option \"%s\" has no value", name);
            return -1;
        }
        const char *value = t->t[(*i)++];
        if (fn(arg, name, value, err, errlen) != 0)
            return -1;
        if (is_kw(t, *i, ",")) {
            (*i)++;
            continue;
        }
        if (is_kw(t, *i, ")")) {
            (*i)++;
            return 0;
        }
        snprintf(err, errlen, "expected \",\" or \")\" in option list");
        return -1;
    }
}

static void error_ready(sk_conn *sc, const char *sqlstate, const char *msg, const char *detail)
{
    pgwire_send_error(sc->c, "ERROR", sqlstate, msg, detail);
}

static sk_timeline *require_timeline(sk_conn *sc)
{
    sk_timeline *tl = sk_node_find(sc->node, &sc->tenant_id, &sc->timeline_id);
    if (tl == NULL) {
        char t[STRATA_ID_HEX_LEN], l[STRATA_ID_HEX_LEN], msg[160];
        snprintf(msg, sizeof msg, "tenant %s timeline %s not found on this safekeeper",
                 strata_id_format(&sc->tenant_id, t), strata_id_format(&sc->timeline_id, l));
        error_ready(sc, SQLSTATE_UNDEFINED_OBJECT, msg, NULL);
    }
    return tl;
}

/* ---- commands --------------------------------------------------------- */

static void cmd_identify_system(sk_conn *sc)
{
    sk_timeline *tl = require_timeline(sc);
    if (tl == NULL)
        return;
    const acceptor *acc = sk_timeline_acceptor(tl);
    char sysid[24], xlogpos[LSN_FMT_LEN];
    snprintf(sysid, sizeof sysid, "%" PRIu64, acceptor_state(acc)->system_id);
    lsn_format(acceptor_commit_lsn(acc), xlogpos);
    const char *names[] = {"systemid", "timeline", "xlogpos", "dbname"};
    const uint32_t oids[] = {25, 23, 25, 25};
    const char *values[] = {sysid, "1", xlogpos, NULL};
    pgwire_send_row_description(sc->c, 4, names, oids);
    pgwire_send_data_row(sc->c, 4, values);
    pgwire_send_command_complete(sc->c, "IDENTIFY_SYSTEM");
    pgwire_send_ready(sc->c);
}

static void send_one_value(sk_conn *sc, const char *name, const char *value)
{
    const char *names[] = {name};
    const char *values[] = {value};
    pgwire_send_row_description(sc->c, 1, names, NULL);
    pgwire_send_data_row(sc->c, 1, values);
    pgwire_send_command_complete(sc->c, "SHOW");
    pgwire_send_ready(sc->c);
}

static void cmd_show(sk_conn *sc, const tokens *t)
{
    if (t->n != 2) {
        error_ready(sc, SQLSTATE_SYNTAX_ERROR, "SHOW takes one parameter name", NULL);
        return;
    }
    if (strcasecmp(t->t[1], "wal_segment_size") == 0) {
        sk_timeline *tl = sk_node_find(sc->node, &sc->tenant_id, &sc->timeline_id);
        uint32_t seg = tl != NULL ? sk_timeline_seg_size(tl) : 0;
        if (seg == 0)
            seg = 16u << 20;
        char v[32];
        if (seg >= (1u << 30))
            snprintf(v, sizeof v, "%uGB", seg >> 30);
        else
            snprintf(v, sizeof v, "%uMB", seg >> 20);
        send_one_value(sc, "wal_segment_size", v);
    } else if (strcasecmp(t->t[1], "data_directory_mode") == 0) {
        send_one_value(sc, "data_directory_mode", "0700");
    } else {
        char msg[200];
        snprintf(msg, sizeof msg, "unrecognized configuration parameter \"%.120s\"", t->t[1]);
        error_ready(sc, SQLSTATE_UNDEFINED_OBJECT, msg, NULL);
    }
}

static void cmd_timeline_history(sk_conn *sc, const tokens *t)
{
    uint64_t tli;
    if (t->n != 2 || !parse_u64(t->t[1], &tli) || tli == 0 || tli > UINT32_MAX) {
        error_ready(sc, SQLSTATE_SYNTAX_ERROR, "syntax: TIMELINE_HISTORY <timeline>", NULL);
        return;
    }
    /* Timeline 1 has no history file, exactly as in Postgres. */
    char msg[160];
    snprintf(msg, sizeof msg,
             "could not open file \"pg_wal/%08X.history\": No such file or directory",
             (unsigned)tli);
    error_ready(sc, SQLSTATE_UNDEFINED_FILE, msg, NULL);
}

static void cmd_timeline_status(sk_conn *sc);

/*
 * Whether c's pageserver feedback may move the WAL removal horizon
 * (docs/design.md, WAL removal).  With token auth: only the admin token,
 * which is what the pageserver holds; a tenant's token (a compute, a
 * pg_receivewal) streams but does not move it.  Without (trust or one
 * shared password) nobody is told apart by secret, so the connection must
 * at least say it is the pageserver: application_name=strata_pageserver.
 * That keeps a stock pg_receivewal or standby from moving it by accident;
 * it is no defence against a client that lies -- there the network is
 * trusted.
 */
static bool may_move_horizon(const pgwire_conn *c)
{
    const char *who = pgwire_conn_principal(c);
    if (who != NULL)
        return strcmp(who, "admin") == 0;
    const char *app = pgwire_conn_param(c, "application_name");
    return app != NULL && strcmp(app, SK_PAGESERVER_APPLICATION_NAME) == 0;
}

/*
 * What c may do to a timeline's configuration (acceptor.h,
 * acceptor_authority).  With token authentication only the admin token may
 * change it; a tenant's token (a compute) pushes WAL and learns it.
 * Without (trust, or one shared password) every client is trusted with it,
 * as with the horizon above: the network is trusted.
 */
static acceptor_authority conn_authority(const pgwire_conn *c)
{
    const char *who = pgwire_conn_principal(c);
    return who == NULL || strcmp(who, "admin") == 0 ? ACCEPTOR_ADMIN : ACCEPTOR_STREAM;
}

/* SWITCH_MEMBERSHIP <generation> '<members>' ['<new members>']: sets the
 * timeline's configuration (see acceptor_switch_membership); the reply is
 * the configuration now in force. */
static void cmd_switch_membership(sk_conn *sc, const tokens *t)
{
    const char *syntax = "syntax: SWITCH_MEMBERSHIP <generation> '<id@host:port,...>' "
                         "['<new members>']";
    uint64_t gen;
    if (t->n < 3 || t->n > 4 || !parse_u64(t->t[1], &gen) || gen == 0 || gen > UINT32_MAX) {
        error_ready(sc, SQLSTATE_SYNTAX_ERROR, syntax, NULL);
        return;
    }
    /* Changing who counts is the operator's: with token authentication,
     * only the admin token may (a tenant's token opens its timelines' WAL).
     * The core refuses it too; asking first gives the right SQLSTATE. */
    acceptor_authority auth = conn_authority(sc->c);
    if (auth != ACCEPTOR_ADMIN) {
        error_ready(sc, SQLSTATE_INSUFFICIENT_PRIVILEGE, "SWITCH_MEMBERSHIP needs the admin token",
                    NULL);
        return;
    }
    sk_timeline *tl = require_timeline(sc);
    if (tl == NULL)
        return;
    membership m;
    memset(&m, 0, sizeof m);
    m.generation = (uint32_t)gen;
    const char *why = NULL;
    if (membership_parse_set(t->t[2], m.members, &m.n_members, &why) != 0 ||
        (t->n == 4 && membership_parse_set(t->t[3], m.new_members, &m.n_new_members, &why) != 0)) {
        error_ready(sc, SQLSTATE_INVALID_PARAMETER_VALUE, "invalid configuration", why);
        return;
    }
    char err[200];
    if (sk_timeline_switch_membership(tl, &m, auth, err, sizeof err) != 0) {
        error_ready(sc,
                    strstr(err, "busy") != NULL ? SQLSTATE_OBJECT_IN_USE
                                                : SQLSTATE_INVALID_PARAMETER_VALUE,
                    "could not switch the configuration", err);
        return;
    }
    cmd_timeline_status(sc);
}

static void cmd_timeline_status(sk_conn *sc)
{
    sk_timeline *tl = require_timeline(sc);
    if (tl == NULL)
        return;
    const acceptor *acc = sk_timeline_acceptor(tl);
    char term[24], flush[LSN_FMT_LEN], commit[LSN_FMT_LEN], start[LSN_FMT_LEN], trunc[LSN_FMT_LEN];
    snprintf(term, sizeof term, "%" PRIu64, acceptor_term(acc));
    lsn_format(acceptor_flush_lsn(acc), flush);
    lsn_format(acceptor_commit_lsn(acc), commit);
    lsn_format(acceptor_state(acc)->timeline_start_lsn, start);
    lsn_format(acceptor_truncate_lsn(acc), trunc);
    const acceptor_persistent_state *st = acceptor_state(acc);
    const membership *m = &st->mconf;
    char gen[16], mem[MEMBERSHIP_TEXT_MAX], nmem[MEMBERSHIP_TEXT_MAX];
    snprintf(gen, sizeof gen, "%u", m->generation);
    membership_format_set(m->members, m->n_members, mem, sizeof mem);
    membership_format_set(m->new_members, m->n_new_members, nmem, sizeof nmem);
    /* What a new member copying this timeline needs (strata safekeeper
     * replace): the history of the WAL held, server info, where the WAL on
     * disk begins, what the pageserver has made durable. */
    static char hist[TERM_HISTORY_MAX * 48];
    size_t hl = 0;
    hist[0] = '\0';
    for (uint32_t i = 0; i < st->history.n; i++) {
        char l[LSN_FMT_LEN];
        int w = snprintf(hist + hl, sizeof hist - hl, "%s%" PRIu64 "@%s", i > 0 ? "," : "",
                         st->history.entries[i].term, lsn_format(st->history.entries[i].lsn, l));
        if (w < 0 || (size_t)w >= sizeof hist - hl)
            break;
        hl += (size_t)w;
    }
    char pgv[16], sysid[24], segsz[16], walstart[LSN_FMT_LEN], dc[LSN_FMT_LEN], rc[LSN_FMT_LEN];
    snprintf(pgv, sizeof pgv, "%u", st->pg_version);
    snprintf(sysid, sizeof sysid, "%" PRIu64, st->system_id);
    snprintf(segsz, sizeof segsz, "%u", st->wal_seg_size);
    wal_store *ws = sk_timeline_store(tl);
    lsn_format(ws != NULL ? wal_store_oldest_lsn(ws) : LSN_INVALID, walstart);
    lsn_format(st->ps_feedback.disk_consistent_lsn, dc);
    /* A copy must not forget it: without it the copy's housekeeping could
     * remove WAL the pageserver's newest manifest does not cover. */
    lsn_format(st->ps_feedback.remote_consistent_lsn, rc);
    const char *names[] = {"term",
                           "flush_lsn",
                           "commit_lsn",
                           "timeline_start_lsn",
                           "truncate_lsn",
                           "generation",
                           "members",
                           "new_members",
                           "history",
                           "pg_version",
                           "system_id",
                           "wal_seg_size",
                           "wal_start",
                           "ps_disk_consistent_lsn",
                           "ps_remote_consistent_lsn"};
    const uint32_t oids[] = {20, 25, 25, 25, 25, 23, 25, 25, 25, 23, 25, 23, 25, 25, 25};
    const char *values[] = {term, flush, commit, start, trunc,    gen, mem, nmem,
                            hist, pgv,   sysid,  segsz, walstart, dc,  rc};
    pgwire_send_row_description(sc->c, 15, names, oids);
    pgwire_send_data_row(sc->c, 15, values);
    pgwire_send_command_complete(sc->c, "TIMELINE_STATUS");
    pgwire_send_ready(sc->c);
}

typedef struct repl_opts {
    bool with_term;
    uint64_t term;
} repl_opts;

static int repl_option(void *arg, const char *name, const char *value, char *err, size_t errlen)
{
    repl_opts *o = arg;
    if (strcasecmp(name, "term") == 0) {
        if (!parse_u64(value, &o->term)) {
            snprintf(err, errlen, "invalid term \"%s\"", value);
            return -1;
        }
        o->with_term = true;
        return 0;
    }
    snprintf(err, errlen, "unrecognized START_REPLICATION option \"%s\"", name);
    return -1;
}

static void cmd_start_replication(sk_conn *sc, const tokens *t)
{
    int i = 1;
    char err[200];
    if (is_kw(t, i, "SLOT"))
        i += 2; /* slots are not kept: the removal horizon comes from feedback */
    if (is_kw(t, i, "LOGICAL")) {
        error_ready(sc, SQLSTATE_FEATURE_NOT_SUPPORTED,
                    "logical replication is not supported by a safekeeper", NULL);
        return;
    }
    if (is_kw(t, i, "PHYSICAL"))
        i++;
    lsn_t start;
    if (i >= t->n || !lsn_parse(t->t[i], &start)) {
        error_ready(sc, SQLSTATE_SYNTAX_ERROR,
                    "syntax: START_REPLICATION [SLOT s] [PHYSICAL] X/Y [TIMELINE 1] [TERM n]",
                    NULL);
        return;
    }
    i++;
    repl_opts o = {0};
    while (i < t->n) {
        if (is_kw(t, i, "TIMELINE") && i + 1 < t->n) {
            uint64_t tli;
            if (!parse_u64(t->t[i + 1], &tli) || tli != 1) {
                char msg[160];
                snprintf(msg, sizeof msg, "requested timeline %s is not in this server's history",
                         t->t[i + 1]);
                error_ready(sc, SQLSTATE_UNDEFINED_FILE, msg, NULL);
                return;
            }
            i += 2;
        } else if (is_kw(t, i, "TERM") && i + 1 < t->n) {
            if (repl_option(&o, "term", t->t[i + 1], err, sizeof err) != 0) {
                error_ready(sc, SQLSTATE_SYNTAX_ERROR, err, NULL);
                return;
            }
            i += 2;
        } else if (is_kw(t, i, "(")) {
            if (parse_options(t, &i, repl_option, &o, err, sizeof err) != 0) {
                error_ready(sc, SQLSTATE_SYNTAX_ERROR, err, NULL);
                return;
            }
        } else {
            char msg[200];
            snprintf(msg, sizeof msg, "unexpected \"%s\" in START_REPLICATION", t->t[i]);
            error_ready(sc, SQLSTATE_SYNTAX_ERROR, msg, NULL);
            return;
        }
    }
    sk_timeline *tl = require_timeline(sc);
    if (tl == NULL)
        return;
    sk_sender *s;
    if (walsender_start(tl, sc->c, start, o.with_term, o.term, may_move_horizon(sc->c), &s) != 0)
        return;
    sc->mode = MODE_SEND;
    sc->sender = s;
}

static int push_option(void *arg, const char *name, const char *value, char *err, size_t errlen)
{
    bool *allow_create = arg;
    if (strcasecmp(name, "proto_version") == 0) {
        uint64_t v;
        if (!parse_u64(value, &v) || v != WALPUSH_PROTO_VERSION) {
            snprintf(err, errlen,
                     "unsupported WAL-push proto_version \"%s\" (this safekeeper speaks %d)", value,
                     WALPUSH_PROTO_VERSION);
            return -1;
        }
        return 0;
    }
    if (strcasecmp(name, "allow_timeline_creation") == 0) {
        if (strcasecmp(value, "true") == 0 || strcasecmp(value, "on") == 0) {
            *allow_create = true;
            return 0;
        }
        if (strcasecmp(value, "false") == 0 || strcasecmp(value, "off") == 0) {
            *allow_create = false;
            return 0;
        }
        snprintf(err, errlen, "allow_timeline_creation takes 'true' or 'false', not \"%.32s\"",
                 value);
        return -1;
    }
    snprintf(err, errlen, "unrecognized START_WAL_PUSH option \"%s\"", name);
    return -1;
}

static void cmd_start_wal_push(sk_conn *sc, const tokens *t)
{
    int i = 1;
    char err[200];
    bool allow_create = false;
    if (parse_options(t, &i, push_option, &allow_create, err, sizeof err) != 0) {
        error_ready(sc, SQLSTATE_SYNTAX_ERROR, err, NULL);
        return;
    }
    if (i != t->n) {
        error_ready(sc, SQLSTATE_SYNTAX_ERROR,
                    "syntax: START_WAL_PUSH [(proto_version '2' [, allow_timeline_creation "
                    "'true'])]",
                    NULL);
        return;
    }
    sk_pusher *p = calloc(1, sizeof *p);
    if (p == NULL) {
        error_ready(sc, SQLSTATE_OUT_OF_MEMORY, "out of memory", NULL);
        return;
    }
    p->conn = sc->c;
    p->tenant_id = sc->tenant_id;
    p->timeline_id = sc->timeline_id;
    p->allow_create = allow_create;
    p->authority = conn_authority(sc->c);
    sc->pusher = p;
    sc->mode = MODE_PUSH;
    pgwire_start_copy_both(sc->c);
}

/* ---- pgwire handlers -------------------------------------------------- */

static int get_id_option(pgwire_conn *c, const char *name, strata_id *out)
{
    const char *v = pgwire_conn_option(c, name);
    char msg[200];
    if (v == NULL) {
        snprintf(msg, sizeof msg, "missing %s in the connection options", name);
        pgwire_send_error(c, "FATAL", SQLSTATE_INVALID_AUTHORIZATION_SPECIFICATION, msg,
                          "connect with options='-c tenant_id=<32 hex> -c timeline_id=<32 hex>'");
        return -1;
    }
    if (!strata_id_parse(v, out)) {
        snprintf(msg, sizeof msg, "invalid %s \"%.64s\": expected 32 hex digits", name, v);
        pgwire_send_error(c, "FATAL", SQLSTATE_INVALID_PARAMETER_VALUE, msg, NULL);
        return -1;
    }
    return 0;
}

static int on_connect(pgwire_conn *c, void *arg)
{
    sk_node *node = arg;
    strata_id tenant, timeline;
    if (get_id_option(c, "tenant_id", &tenant) != 0 ||
        get_id_option(c, "timeline_id", &timeline) != 0) {
        metrics_counter_inc(node->metrics.errors);
        return -1;
    }
    sk_conn *sc = calloc(1, sizeof *sc);
    if (sc == NULL) {
        pgwire_send_error(c, "FATAL", SQLSTATE_OUT_OF_MEMORY, "out of memory", NULL);
        return -1;
    }
    sc->node = node;
    sc->c = c;
    sc->tenant_id = tenant;
    sc->timeline_id = timeline;
    pgwire_conn_set_data(c, sc);
    node->open_connections++;
    metrics_counter_inc(node->metrics.connections_total);
    metrics_gauge_set(node->metrics.connections, node->open_connections);
    return 0;
}

static void on_query(pgwire_conn *c, const char *sql, void *arg)
{
    (void)arg;
    sk_conn *sc = pgwire_conn_data(c);
    tokens t;
    const char *why = NULL;
    if (tokenize(sql, &t, &why) != 0) {
        error_ready(sc, SQLSTATE_SYNTAX_ERROR, "could not parse command", why);
        return;
    }
    if (t.n == 0) {
        pgwire_send_empty_query(c);
        pgwire_send_ready(c);
        return;
    }
    if (sc->mode != MODE_IDLE) {
        error_ready(sc, SQLSTATE_PROTOCOL_VIOLATION, "a command arrived while streaming", NULL);
        return;
    }
    if (is_kw(&t, 0, "IDENTIFY_SYSTEM") && t.n == 1)
        cmd_identify_system(sc);
    else if (is_kw(&t, 0, "SHOW"))
        cmd_show(sc, &t);
    else if (is_kw(&t, 0, "TIMELINE_HISTORY"))
        cmd_timeline_history(sc, &t);
    else if (is_kw(&t, 0, "START_REPLICATION"))
        cmd_start_replication(sc, &t);
    else if (is_kw(&t, 0, "START_WAL_PUSH"))
        cmd_start_wal_push(sc, &t);
    else if (is_kw(&t, 0, "TIMELINE_STATUS") && t.n == 1)
        cmd_timeline_status(sc);
    else if (is_kw(&t, 0, "SWITCH_MEMBERSHIP"))
        cmd_switch_membership(sc, &t);
    else {
        char msg[200];
        snprintf(msg, sizeof msg, "unsupported command: %.120s", sql);
        error_ready(sc, SQLSTATE_SYNTAX_ERROR, msg, NULL);
    }
}

static void on_copy_data(pgwire_conn *c, const uint8_t *data, size_t n, void *arg)
{
    sk_node *node = arg;
    sk_conn *sc = pgwire_conn_data(c);
    if (sc->mode == MODE_PUSH)
        sk_pusher_message(node, sc->pusher, data, n);
    else if (sc->mode == MODE_SEND)
        walsender_on_copy_data(sc->sender, data, n);
}

static void on_copy_done(pgwire_conn *c, void *arg)
{
    (void)arg;
    sk_conn *sc = pgwire_conn_data(c);
    if (sc->mode == MODE_SEND)
        walsender_on_copy_done(sc->sender);
    else if (sc->mode == MODE_PUSH)
        pgwire_conn_close(c); /* the proposer is done with us */
}

static void on_writable(pgwire_conn *c, void *arg)
{
    (void)arg;
    sk_conn *sc = pgwire_conn_data(c);
    if (sc != NULL && sc->mode == MODE_SEND)
        walsender_on_writable(sc->sender);
}

static void on_close(pgwire_conn *c, void *arg)
{
    sk_node *node = arg;
    sk_conn *sc = pgwire_conn_data(c);
    if (sc == NULL)
        return;
    if (sc->pusher != NULL)
        sk_pusher_closed(node, sc->pusher);
    if (sc->sender != NULL)
        walsender_closed(sc->sender);
    node->open_connections--;
    metrics_gauge_set(node->metrics.connections, node->open_connections);
    pgwire_conn_set_data(c, NULL);
    free(sc);
}

pgwire_server *sk_conn_server_start(sk_node *node, const pgwire_config *cfg, char *err,
                                    size_t errlen)
{
    pgwire_handlers h = {.on_connect = on_connect,
                         .on_query = on_query,
                         .on_copy_data = on_copy_data,
                         .on_copy_done = on_copy_done,
                         .on_writable = on_writable,
                         .on_close = on_close};
    return pgwire_server_start(node->loop, cfg, &h, node, err, errlen);
}
