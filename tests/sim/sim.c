/*
 * sim.c: the deterministic simulator of Strata's consensus (DESIGN 6, 11).
 *
 * For: driving the real acceptor core (3 acceptors) and the real proposer
 * core (3 competing proposer slots) through seeded fault schedules -- a
 * network that drops, delays, duplicates and reorders messages (every message
 * is encoded and decoded with proto/walpush.c), disks whose writes are
 * volatile until an fdatasync, crashes that lose unsynced WAL and control
 * changes, restarts that scan the durable WAL for its end, proposers that die
 * and are replaced by new ones with new terms, sync-safekeepers runs -- and
 * checking the invariants after every step:
 *   - election safety: one proposer per term;
 *   - log safety: every acceptor's usable commit prefix equals the committed
 *     WAL, and no two proposers commit different bytes;
 *   - committed WAL is never truncated, and stays durable on a majority
 *     (which covers every commit acknowledged to a client);
 *   - an acceptor's flush_lsn never moves backwards within a term.
 *
 * Not for: performance, real IO, threads, real time.  Everything derives
 * from the seed, so `strata-sim --seed S` replays a schedule exactly.
 *
 * Usage: strata-sim --seeds N [--first-seed S] [--steps K]
 *        strata-sim --seed S [--steps K]        (one seed, with a trace)
 *        ... --expect-violation                 (exit 0 only if some seed
 *                                                 violates an invariant: for
 *                                                 the planted-bug builds)
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/walformat.h"
#include "compute/walproposer/proposer.h"
#include "proto/walpush.h"
#include "safekeeper/acceptor.h"
#include "tests/sim/simwal.h"

#define N_ACC 3
#define N_PROP 3
#define SEG (1u << 20)
#define BOOT ((lsn_t)SEG)
#define WINDOW (3u << 20)          /* LSN space [BOOT, BOOT + WINDOW) */
#define GEN_LIMIT (WINDOW - (256u << 10))
#define NET_MAX 512                /* messages in flight */
#define MAX_TERMS 4096
#define MAX_CLIENTS 4096

/* ---- Run state (one seed at a time) ------------------------------------ */

typedef struct msg {
    bool to_acceptor;
    int p, a;
    uint64_t conn_id;
    size_t len;
    uint8_t *bytes;
} msg;

typedef struct conn {
    bool up;
    uint64_t id;
    bool blocked; /* partitioned: messages are lost, connects fail */
} conn;

typedef struct acc_node {
    bool up;
    acceptor core;
    acceptor_output out;
    acceptor_persistent_state durable_control;
    uint8_t *cache;   /* what reads see */
    uint8_t *durable; /* what survives a crash */
    lsn_t cache_end, durable_end;
    lsn_t dirty_from; /* lowest cache byte written since it was last made durable */
    lsn_t hw;         /* highest cache byte ever written this seed */
    bool fsync_running;
    lsn_t fsync_covers;
    int streamer_p;
    uint64_t streamer_conn;
    /* checker state */
    lsn_t usable_checked;  /* cache[BOOT, x) verified equal to R */
    lsn_t durable_match;   /* durable[BOOT, x) known equal to R */
    lsn_t cache_match;     /* cache[BOOT, x) known equal to R */
    uint64_t last_term;
    lsn_t last_flush;
} acc_node;

typedef struct client {
    lsn_t end;
    bool acked;
} client;

typedef struct prop_node {
    bool alive;
    int uid;
    bool sync_mode;
    proposer core;
    proposer_output out;
    proposer_output out2;
    uint8_t *wal; /* WAL source: [BOOT, wal_end) */
    lsn_t wal_end;
    bool elected;
    simwal gen;
    lsn_t verified; /* wal[BOOT, x) verified equal to R */
    int n_clients;
    client *clients;
} prop_node;

static struct {
    uint64_t seed;
    uint64_t rng;
    int step;
    bool trace;
    uint64_t now_ms;
    acc_node acc[N_ACC];
    prop_node prop[N_PROP];
    conn conns[N_PROP][N_ACC];
    msg net[NET_MAX];
    int n_net;
    uint8_t *R; /* the committed WAL */
    lsn_t R_end;
    int next_uid;
    struct {
        uint64_t term;
        int uid;
    } terms[MAX_TERMS];
    int n_terms;
    const char *violation;
    char violation_buf[256];
    uint32_t partition_odds; /* per mille, per proposer, at each re-partition */
    uint32_t drop_odds;      /* per mille, per delivered message */
    /* stats */
    long old_term_commits, elections, commits_acked, crashes, restarts, syncs_done, protocol_errors;
} S;

static uint8_t msgbuf[WALPUSH_MAX_MESSAGE];

/* ---- Helpers ----------------------------------------------------------- */

static uint64_t rnd(void)
{
    /* splitmix64 */
    uint64_t z = (S.rng += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint32_t rnd_below(uint32_t n)
{
    return (uint32_t)(rnd() % n);
}

static bool chance(uint32_t percent_x10)
{
    return rnd_below(1000) < percent_x10;
}

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace(const char *fmt, ...)
{
    if (!S.trace)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("[%5d t=%6llu] ", S.step, (unsigned long long)S.now_ms);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static void violate(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violate(const char *fmt, ...)
{
    if (S.violation)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(S.violation_buf, sizeof(S.violation_buf), fmt, ap);
    va_end(ap);
    S.violation = S.violation_buf;
}

static char *fmt_lsn(lsn_t l)
{
    static char bufs[8][LSN_FMT_LEN];
    static int k;
    k = (k + 1) % 8;
    return lsn_format(l, bufs[k]);
}

static size_t off(lsn_t l)
{
    return (size_t)(l - BOOT);
}

/* ---- Network ----------------------------------------------------------- */

static void net_send(bool to_acceptor, int p, int a, const uint8_t *bytes, size_t len)
{
    if (S.n_net == NET_MAX) {
        trace("net full: dropping message p%d<->a%d", p, a);
        return;
    }
    msg *m = &S.net[S.n_net++];
    m->to_acceptor = to_acceptor;
    m->p = p;
    m->a = a;
    m->conn_id = S.conns[p][a].id;
    m->len = len;
    m->bytes = malloc(len);
    if (!m->bytes) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    memcpy(m->bytes, bytes, len);
}

/* Removes message k keeping the others in send order. */
static void net_take(int k)
{
    memmove(&S.net[k], &S.net[k + 1], (size_t)(S.n_net - k - 1) * sizeof(S.net[0]));
    S.n_net--;
}

static void prop_process(int pi, proposer_output *out);

static void conn_close(int p, int a, const char *why)
{
    if (!S.conns[p][a].up)
        return;
    S.conns[p][a].up = false;
    trace("conn p%d-a%d closed: %s", p, a, why);
    if (S.prop[p].alive) {
        proposer_disconnected(&S.prop[p].core, a, &S.prop[p].out);
        prop_process(p, &S.prop[p].out);
    }
}

/* ---- Acceptor edge ----------------------------------------------------- */

static void acc_send(int a, int p, uint64_t conn_id, const acceptor_msg *m)
{
    if (!S.conns[p][a].up || S.conns[p][a].id != conn_id)
        return;
    size_t n = walpush_encode_acceptor_msg(m, msgbuf, sizeof(msgbuf));
    if (n == 0) {
        violate("acceptor %d produced an unencodable message", a);
        return;
    }
    net_send(false, p, a, msgbuf, n);
}

/* Makes cache bytes below upto durable (an fdatasync that completed). */
static void durable_write(acc_node *n, lsn_t upto)
{
    if (n->dirty_from < upto) {
        memcpy(n->durable + off(n->dirty_from), n->cache + off(n->dirty_from),
               upto - n->dirty_from);
        if (n->durable_match > n->dirty_from)
            n->durable_match = n->dirty_from;
        n->dirty_from = n->cache_end > upto ? upto : LSN_MAX;
    }
    if (upto > n->durable_end)
        n->durable_end = upto;
}

/* Executes an acceptor output; reply_p/reply_conn name the connection of the
 * message being handled (-1 for flush completions). */
static void acc_process(int a, int reply_p, uint64_t reply_conn)
{
    acc_node *n = &S.acc[a];
    acceptor_output *out = &n->out;
    for (int i = 0; i < out->n; i++) {
        const acceptor_effect *e = &out->effects[i];
        switch (e->kind) {
        case ACC_WRITE_WAL:
            if (e->lsn < BOOT || e->lsn + e->len > BOOT + WINDOW) {
                violate("acceptor %d write outside the window", a);
                return;
            }
            memcpy(n->cache + off(e->lsn), e->data, e->len);
            if (e->lsn + e->len > n->cache_end)
                n->cache_end = e->lsn + e->len;
            if (n->cache_end > n->hw)
                n->hw = n->cache_end;
            if (e->lsn < n->usable_checked)
                n->usable_checked = e->lsn;
            if (e->lsn < n->cache_match)
                n->cache_match = e->lsn;
            if (e->lsn < n->dirty_from)
                n->dirty_from = e->lsn;
            break;
        case ACC_TRUNCATE_WAL: {
            lsn_t l = e->lsn;
            /* Committed WAL must never be truncated: if this acceptor held
             * exactly the committed WAL up to its flush (as of the previous
             * step) or up to the committed point, cutting below that loses
             * committed records. */
            lsn_t held = n->last_flush < S.R_end ? n->last_flush : S.R_end;
            if (n->durable_match >= held && held > l)
                violate("acceptor %d truncated committed WAL at %s (committed %s, it held %s)", a,
                        fmt_lsn(l), fmt_lsn(S.R_end), fmt_lsn(held));
            trace("a%d truncate at %s", a, fmt_lsn(l));
            if (l < n->cache_end) {
                memset(n->cache + off(l), 0, n->cache_end - l);
                n->cache_end = l;
            }
            if (l < n->durable_end) {
                memset(n->durable + off(l), 0, n->durable_end - l);
                n->durable_end = l;
            }
            if (n->durable_match > l)
                n->durable_match = l;
            if (n->usable_checked > l)
                n->usable_checked = l;
            if (n->cache_match > l)
                n->cache_match = l;
            if (n->dirty_from >= l)
                n->dirty_from = LSN_MAX;
            break;
        }
        case ACC_FLUSH_WAL:
            durable_write(n, n->cache_end);
            break;
        case ACC_PERSIST_CONTROL:
            n->durable_control = out->control;
            break;
        case ACC_SEND:
            if (reply_p >= 0)
                acc_send(a, reply_p, reply_conn, &out->msg);
            else if (n->streamer_p >= 0)
                acc_send(a, n->streamer_p, n->streamer_conn, &out->msg);
            break;
        }
    }
    if (out->append_accepted && reply_p >= 0) {
        n->streamer_p = reply_p;
        n->streamer_conn = reply_conn;
    }
}

/* The edge starts an fdatasync whenever none runs and one is wanted. */
static void acc_maybe_start_fsync(int a)
{
    acc_node *n = &S.acc[a];
    if (!n->up || n->fsync_running || !acceptor_flush_wanted(&n->core))
        return;
    n->fsync_covers = acceptor_flush_begin(&n->core);
    n->fsync_running = true;
}

static void acc_complete_fsync(int a)
{
    acc_node *n = &S.acc[a];
    lsn_t upto = n->fsync_covers < n->cache_end ? n->fsync_covers : n->cache_end;
    durable_write(n, upto);
    n->fsync_running = false;
    acceptor_flush_done(&n->core, &n->out);
    trace("a%d fsync done to %s, flush %s", a, fmt_lsn(upto), fmt_lsn(acceptor_flush_lsn(&n->core)));
    acc_process(a, -1, 0);
}

/* The end of the last complete record in the durable WAL from start. */
static lsn_t scan_end_of_wal(const acc_node *n, lsn_t start)
{
    if (start == 0 || n->durable_end <= start)
        return start;
    wal_tracker t;
    wal_tracker_init(&t, start, SEG);
    lsn_t at = start;
    const char *why;
    while (at < n->durable_end) {
        size_t len = n->durable_end - at > 4096 ? 4096 : n->durable_end - at;
        wal_tracker saved = t;
        if (wal_tracker_feed(&t, at, n->durable + off(at), len, &why) != 0) {
            /* Find the exact last good record: byte by byte from the copy. */
            t = saved;
            for (size_t i = 0; i < len; i++) {
                wal_tracker b = t;
                if (wal_tracker_feed(&b, at + i, n->durable + off(at + i), 1, &why) != 0)
                    break;
                t = b;
            }
            break;
        }
        at += len;
    }
    return wal_tracker_last_record_end(&t);
}

static void acc_crash(int a)
{
    acc_node *n = &S.acc[a];
    if (!n->up)
        return;
    trace("a%d CRASH (durable WAL to %s)", a, fmt_lsn(n->durable_end));
    n->up = false;
    S.crashes++;
    for (int p = 0; p < N_PROP; p++)
        conn_close(p, a, "acceptor crashed");
    if (n->hw > BOOT)
        memcpy(n->cache, n->durable, off(n->hw));
    n->cache_end = n->durable_end;
    n->dirty_from = LSN_MAX;
    n->fsync_running = false;
    n->usable_checked = BOOT;
    n->cache_match = BOOT;
}

static void acc_restart(int a)
{
    acc_node *n = &S.acc[a];
    lsn_t end = scan_end_of_wal(n, n->durable_control.timeline_start_lsn);
    const char *why = NULL;
    if (acceptor_restore(&n->core, &n->durable_control, end, &why) != 0) {
        violate("acceptor %d cannot restart: %s", a, why);
        return;
    }
    n->up = true;
    n->streamer_p = -1;
    S.restarts++;
    trace("a%d RESTART term %llu end of WAL %s", a, (unsigned long long)acceptor_term(&n->core),
          fmt_lsn(end));
}

static void acc_deliver(msg *m)
{
    acc_node *n = &S.acc[m->a];
    proposer_msg pm;
    const char *why = NULL;
    if (walpush_decode_proposer_msg(m->bytes, m->len, &pm, &why) != 0) {
        violate("proposer message failed to decode: %s", why);
        return;
    }
    if (acceptor_handle_message(&n->core, &pm, &n->out) != 0) {
        S.protocol_errors++;
        trace("a%d protocol error from p%d: %s", m->a, m->p, n->out.error);
        conn_close(m->p, m->a, n->out.error);
        return;
    }
    acc_process(m->a, m->p, m->conn_id);
}

/* ---- Proposer edge ----------------------------------------------------- */

static void record_term(uint64_t term, int uid)
{
    for (int i = 0; i < S.n_terms; i++) {
        if (S.terms[i].term == term) {
            if (S.terms[i].uid != uid)
                violate("election safety: term %llu won by proposers %d and %d",
                        (unsigned long long)term, S.terms[i].uid, uid);
            return;
        }
    }
    if (S.n_terms < MAX_TERMS) {
        S.terms[S.n_terms].term = term;
        S.terms[S.n_terms].uid = uid;
        S.n_terms++;
    }
}

/* A proposer (or sync-safekeepers) declared WAL up to c committed. */
static void on_committed(prop_node *pn, lsn_t c)
{
    if (c > pn->wal_end) {
        violate("proposer %d committed %s beyond its WAL %s", pn->uid, fmt_lsn(c),
                fmt_lsn(pn->wal_end));
        return;
    }
    lsn_t cmp_end = c < S.R_end ? c : S.R_end;
    if (pn->verified < cmp_end) {
        if (memcmp(pn->wal + off(pn->verified), S.R + off(pn->verified), cmp_end - pn->verified)) {
            violate("log safety: proposer %d committed WAL that differs from committed WAL "
                    "below %s", pn->uid, fmt_lsn(cmp_end));
            return;
        }
        pn->verified = cmp_end;
    }
    if (c > S.R_end) {
        memcpy(S.R + off(S.R_end), pn->wal + off(S.R_end), c - S.R_end);
        S.R_end = c;
    }
    if (c > pn->verified)
        pn->verified = c;
    for (int i = 0; i < pn->n_clients; i++) {
        if (!pn->clients[i].acked && pn->clients[i].end <= c) {
            pn->clients[i].acked = true;
            S.commits_acked++;
        }
    }
}

static void prop_kill(int pi, const char *why)
{
    prop_node *pn = &S.prop[pi];
    if (!pn->alive)
        return;
    trace("p%d (uid %d) stops: %s", pi, pn->uid, why);
    pn->alive = false;
    for (int a = 0; a < N_ACC; a++)
        S.conns[pi][a].up = false;
}

static void prop_on_elected(int pi, const proposer_effect *e)
{
    prop_node *pn = &S.prop[pi];
    record_term(e->u.elected.term, pn->uid);
    S.elections++;
    trace("p%d (uid %d) ELECTED term %llu start %s donor a%d (lowest streaming %s)", pi, pn->uid,
          (unsigned long long)e->u.elected.term, fmt_lsn(e->u.elected.term_start_lsn),
          e->u.elected.donor, fmt_lsn(e->u.elected.start_streaming_at));
    lsn_t ts = e->u.elected.term_start_lsn;
    acc_node *donor = &S.acc[e->u.elected.donor];
    /* The edge fetches the donor's WAL below the term start; that only
     * works while the donor is still in our term. */
    if (ts > BOOT) {
        if (!donor->up || acceptor_term(&donor->core) != e->u.elected.term) {
            prop_kill(pi, "donor moved to another term before its WAL was fetched");
            return;
        }
        if (donor->durable_end < ts) {
            violate("donor a%d holds durable WAL only to %s, below its flush %s",
                    e->u.elected.donor, fmt_lsn(donor->durable_end), fmt_lsn(ts));
            return;
        }
        memcpy(pn->wal, donor->durable, off(ts));
    }
    pn->wal_end = ts;
    pn->elected = true;
    /* Find the previous record's start so our first record's xl_prev is right. */
    lsn_t prev = 0;
    if (ts > BOOT) {
        wal_tracker t;
        const char *why = NULL;
        wal_tracker_init(&t, BOOT, SEG);
        if (wal_tracker_feed(&t, BOOT, pn->wal, off(ts), &why) != 0 ||
            wal_tracker_last_record_end(&t) != ts) {
            violate("donor WAL below the term start %s is not whole records: %s", fmt_lsn(ts),
                    why ? why : "ends mid-record");
            return;
        }
        prev = t.prev_start;
    }
    simwal_init(&pn->gen, pn->wal, BOOT, WINDOW, SEG, ts, prev);
}

static void prop_send_append(int pi, const proposer_effect *e)
{
    prop_node *pn = &S.prop[pi];
    proposer_msg m = {.kind = PMSG_APPEND};
    m.u.append = e->u.append;
    if (m.u.append.end_lsn > pn->wal_end || m.u.append.begin_lsn < BOOT) {
        violate("proposer %d asked to send WAL it does not have", pn->uid);
        return;
    }
    m.u.append.wal = pn->wal + off(m.u.append.begin_lsn);
    size_t n = walpush_encode_proposer_msg(&m, msgbuf, sizeof(msgbuf));
    if (n == 0) {
        violate("proposer %d produced an unencodable append", pn->uid);
        return;
    }
    if (S.conns[pi][e->acceptor].up)
        net_send(true, pi, e->acceptor, msgbuf, n);
}

static void prop_process(int pi, proposer_output *out)
{
    prop_node *pn = &S.prop[pi];
    bool need_wal = false;
    for (int i = 0; i < out->n && pn->alive && !S.violation; i++) {
        const proposer_effect *e = &out->effects[i];
        switch (e->kind) {
        case PROP_SEND: {
            size_t n = walpush_encode_proposer_msg(e->u.msg, msgbuf, sizeof(msgbuf));
            if (n == 0) {
                violate("proposer %d produced an unencodable message", pn->uid);
                return;
            }
            if (S.conns[pi][e->acceptor].up)
                net_send(true, pi, e->acceptor, msgbuf, n);
            break;
        }
        case PROP_APPEND:
            prop_send_append(pi, e);
            break;
        case PROP_DISCONNECT:
            S.conns[pi][e->acceptor].up = false;
            trace("p%d drops conn to a%d", pi, e->acceptor);
            break;
        case PROP_ELECTED:
            prop_on_elected(pi, e);
            need_wal = true;
            break;
        case PROP_COMMIT_ADVANCED:
            trace("p%d commit -> %s", pi, fmt_lsn(e->u.commit_lsn));
            if (e->u.commit_lsn < proposer_term_start_lsn(&pn->core))
                S.old_term_commits++;
            on_committed(pn, e->u.commit_lsn);
            break;
        case PROP_FENCED:
            prop_kill(pi, e->u.reason);
            break;
        case PROP_SYNC_DONE:
            trace("p%d SYNC DONE at %s", pi, fmt_lsn(e->u.sync_lsn));
            S.syncs_done++;
            on_committed(pn, e->u.sync_lsn);
            prop_kill(pi, "sync-safekeepers finished");
            break;
        }
    }
    if (need_wal && pn->alive && !S.violation) {
        proposer_output *o2 = out == &pn->out ? &pn->out2 : &pn->out;
        proposer_wal_available(&pn->core, pn->wal_end, o2);
        prop_process(pi, o2);
    }
}

static void prop_start(int pi)
{
    prop_node *pn = &S.prop[pi];
    proposer_config cfg = {0};
    proposer_config_defaults(&cfg);
    cfg.n_acceptors = N_ACC;
    cfg.tenant_id.b[0] = 0x11;
    cfg.timeline_id.b[0] = 0x22;
    cfg.pg_version = 150020;
    cfg.wal_seg_size = SEG;
    cfg.bootstrap_lsn = BOOT;
    cfg.sync_safekeepers = chance(150);
    cfg.heartbeat_ms = 500;
    cfg.timeout_ms = 5000;
    cfg.max_inflight_bytes = 512u << 10;
    const char *why = NULL;
    if (proposer_init(&pn->core, &cfg, S.now_ms, &why) != 0) {
        violate("proposer_init: %s", why);
        return;
    }
    pn->alive = true;
    pn->uid = S.next_uid++;
    pn->sync_mode = cfg.sync_safekeepers;
    lsn_t used = pn->gen.pos > pn->wal_end ? pn->gen.pos : pn->wal_end;
    if (used > BOOT)
        memset(pn->wal, 0, off(used));
    memset(&pn->gen, 0, sizeof(pn->gen));
    pn->wal_end = 0;
    pn->elected = false;
    pn->verified = BOOT;
    pn->n_clients = 0;
    for (int a = 0; a < N_ACC; a++)
        S.conns[pi][a].up = false;
    trace("p%d START uid %d%s", pi, pn->uid, pn->sync_mode ? " (sync-safekeepers)" : "");
}

static void prop_connect(int pi, int a)
{
    conn *c = &S.conns[pi][a];
    c->up = true;
    c->id++;
    trace("conn p%d-a%d up (#%llu)", pi, a, (unsigned long long)c->id);
    proposer_connected(&S.prop[pi].core, a, &S.prop[pi].out);
    prop_process(pi, &S.prop[pi].out);
}

static void prop_generate(int pi)
{
    prop_node *pn = &S.prop[pi];
    int k = 1 + (int)rnd_below(6);
    for (int i = 0; i < k; i++) {
        if (pn->gen.pos >= BOOT + GEN_LIMIT)
            break;
        uint32_t size;
        uint32_t r = rnd_below(100);
        if (r < 70)
            size = 20 + rnd_below(400);
        else if (r < 96)
            size = 1000 + rnd_below(9000);
        else
            size = 20000 + rnd_below(40000);
        bool commit = chance(300);
        uint32_t seed = (uint32_t)pn->uid * 1000003u + (uint32_t)rnd();
        lsn_t end = simwal_append(&pn->gen, size, commit ? 1 : 10, 0, seed);
        if (end == 0)
            break;
        if (commit && pn->n_clients < MAX_CLIENTS) {
            pn->clients[pn->n_clients].end = end;
            pn->clients[pn->n_clients].acked = false;
            pn->n_clients++;
        }
    }
    /* WAL is handed over up to the last complete record (as Postgres's
     * walsender sends what is flushed locally). */
    pn->wal_end = pn->gen.pos;
    proposer_wal_available(&pn->core, pn->wal_end, &pn->out);
    prop_process(pi, &pn->out);
}

static void prop_deliver(msg *m)
{
    prop_node *pn = &S.prop[m->p];
    acceptor_msg am;
    const char *why = NULL;
    if (walpush_decode_acceptor_msg(m->bytes, m->len, &am, &why) != 0) {
        violate("acceptor message failed to decode: %s", why);
        return;
    }
    proposer_handle_message(&pn->core, m->a, &am, &pn->out);
    prop_process(m->p, &pn->out);
}

/* ---- Invariants -------------------------------------------------------- */

/* Extends *match while buf[BOOT, lim) equals the committed WAL. */
static void extend_match(const uint8_t *buf, lsn_t *match, lsn_t lim)
{
    if (*match < BOOT)
        *match = BOOT;
    while (*match < lim) {
        lsn_t e = *match + 8192 < lim ? *match + 8192 : lim;
        if (memcmp(buf + off(*match), S.R + off(*match), e - *match) != 0) {
            while (*match < e && buf[off(*match)] == S.R[off(*match)])
                (*match)++;
            return;
        }
        *match = e;
    }
}

/*
 * The committed WAL must be "chosen": whatever majority of (running)
 * acceptors a new proposer were elected by right now, the donor it would
 * pick -- highest (last_log_term, flush_lsn), with flush_lsn as a vote would
 * report it -- holds the committed WAL.  This sees a committed prefix that a
 * future election would truncate before any such election happens.
 */
static void check_quorum_donors(void)
{
    if (S.R_end <= BOOT)
        return;
    for (uint32_t mask = 1; mask < (1u << N_ACC); mask++) {
        if (__builtin_popcount(mask) < N_ACC / 2 + 1)
            continue;
        int donor = -1;
        uint64_t best_llt = 0;
        lsn_t best_flush = 0;
        bool all_up = true;
        for (int a = 0; a < N_ACC; a++) {
            if (!(mask & (1u << a)))
                continue;
            if (!S.acc[a].up) {
                all_up = false;
                break;
            }
            lsn_t f = acceptor_written_record_end(&S.acc[a].core);
            uint64_t llt = term_history_last_log_term(&acceptor_state(&S.acc[a].core)->history, f);
            if (donor < 0 || llt > best_llt || (llt == best_llt && f > best_flush)) {
                donor = a;
                best_llt = llt;
                best_flush = f;
            }
        }
        if (!all_up || donor < 0)
            continue;
        acc_node *d = &S.acc[donor];
        extend_match(d->cache, &d->cache_match, d->cache_end < S.R_end ? d->cache_end : S.R_end);
        if (best_flush < S.R_end || d->cache_match < S.R_end) {
            violate("committed WAL up to %s is not chosen: acceptors %s%s%s would elect donor "
                    "a%d (last_log_term %llu, flush %s) holding it only to %s",
                    fmt_lsn(S.R_end), mask & 1 ? "a0 " : "", mask & 2 ? "a1 " : "",
                    mask & 4 ? "a2 " : "", donor, (unsigned long long)best_llt,
                    fmt_lsn(best_flush), fmt_lsn(d->cache_match));
            return;
        }
    }
}

static void check_invariants(void)
{
    int majority = 0;
    for (int a = 0; a < N_ACC; a++) {
        acc_node *n = &S.acc[a];
        /* Committed WAL durable on a majority. */
        lsn_t lim = n->durable_end < S.R_end ? n->durable_end : S.R_end;
        if (n->durable_match < BOOT)
            n->durable_match = BOOT;
        while (n->durable_match < lim) {
            lsn_t e = n->durable_match + 8192 < lim ? n->durable_match + 8192 : lim;
            if (memcmp(n->durable + off(n->durable_match), S.R + off(n->durable_match),
                       e - n->durable_match) != 0) {
                while (n->durable_match < e &&
                       n->durable[off(n->durable_match)] == S.R[off(n->durable_match)])
                    n->durable_match++;
                break;
            }
            n->durable_match = e;
        }
        if (n->durable_match >= S.R_end)
            majority++;
        if (!n->up)
            continue;
        /* Log safety: what this acceptor would serve as committed is the
         * committed WAL. */
        lsn_t usable = acceptor_commit_lsn(&n->core);
        if (usable > S.R_end) {
            violate("acceptor %d treats %s as committed but only %s was committed", a,
                    fmt_lsn(usable), fmt_lsn(S.R_end));
            return;
        }
        if (n->usable_checked < BOOT)
            n->usable_checked = BOOT;
        if (usable > n->usable_checked) {
            if (memcmp(n->cache + off(n->usable_checked), S.R + off(n->usable_checked),
                       usable - n->usable_checked) != 0) {
                violate("log safety: acceptor %d holds WAL below its commit point %s that "
                        "differs from the committed WAL", a, fmt_lsn(usable));
                return;
            }
            n->usable_checked = usable;
        }
        /* flush_lsn never moves backwards within a term: the term whose
         * proposer's history it follows (truncation comes with a new one). */
        const term_history *h = &acceptor_state(&n->core)->history;
        uint64_t term = h->n > 0 ? h->entries[h->n - 1].term : 0;
        lsn_t flush = acceptor_flush_lsn(&n->core);
        if (term == n->last_term && flush < n->last_flush) {
            violate("acceptor %d flush_lsn went back from %s to %s within term %llu", a,
                    fmt_lsn(n->last_flush), fmt_lsn(flush), (unsigned long long)term);
            return;
        }
        n->last_term = term;
        n->last_flush = flush;
    }
    if (S.R_end > BOOT && majority < N_ACC / 2 + 1)
        violate("committed WAL up to %s is durable on only %d acceptors", fmt_lsn(S.R_end),
                majority);
    if (!S.violation)
        check_quorum_donors();
}

/* ---- One seed ---------------------------------------------------------- */

static void run_setup(uint64_t seed, bool trace_on)
{
    for (int a = 0; a < N_ACC; a++) {
        uint8_t *c = S.acc[a].cache, *d = S.acc[a].durable;
        lsn_t hw = S.acc[a].hw;
        memset(&S.acc[a], 0, sizeof(S.acc[a]));
        S.acc[a].cache = c;
        S.acc[a].durable = d;
        if (hw > BOOT) {
            memset(c, 0, off(hw));
            memset(d, 0, off(hw));
        }
    }
    for (int p = 0; p < N_PROP; p++)
        S.prop[p].alive = false;
    for (int k = 0; k < S.n_net; k++)
        free(S.net[k].bytes);
    S.n_net = 0;
    memset(S.conns, 0, sizeof(S.conns));
    if (S.R_end > BOOT)
        memset(S.R, 0, off(S.R_end));
    S.R_end = BOOT;
    S.seed = seed;
    S.rng = seed * 0x2545F4914F6CDD1DULL + 1;
    S.step = 0;
    S.trace = trace_on;
    S.now_ms = 0;
    S.next_uid = 1;
    S.n_terms = 0;
    S.violation = NULL;
    S.partition_odds = rnd_below(700);
    S.drop_odds = chance(500) ? 10 : rnd_below(150);

    strata_id tenant = {{0x11}}, timeline = {{0x22}};
    for (int a = 0; a < N_ACC; a++) {
        acc_node *n = &S.acc[a];
        acceptor_init(&n->core, (uint64_t)a + 1, &tenant, &timeline);
        n->durable_control = *acceptor_state(&n->core);
        n->up = true;
        n->streamer_p = -1;
        n->cache_end = n->durable_end = BOOT;
        n->durable_match = n->usable_checked = n->cache_match = BOOT;
        n->dirty_from = LSN_MAX;
    }
    prop_start(0);
    if (chance(700))
        prop_start(1);
}

static void step_once(void)
{
    uint32_t r = rnd_below(1000);
    if (r < 450 && S.n_net > 0) {
        /* Deliver: usually the oldest message of some connection, sometimes
         * any message (reordering); sometimes drop or duplicate. */
        int k = (int)rnd_below((uint32_t)S.n_net);
        if (!chance(60)) {
            for (int j = 0; j < S.n_net; j++) {
                if (S.net[j].p == S.net[k].p && S.net[j].a == S.net[k].a &&
                    S.net[j].to_acceptor == S.net[k].to_acceptor) {
                    k = j;
                    break;
                }
            }
        }
        msg m = S.net[k];
        bool dup = chance(15);
        if (dup) {
            S.net[k].bytes = malloc(m.len);
            if (!S.net[k].bytes)
                exit(2);
            memcpy(S.net[k].bytes, m.bytes, m.len);
        } else {
            net_take(k);
        }
        conn *c = &S.conns[m.p][m.a];
        bool live = c->up && c->id == m.conn_id && !c->blocked &&
                    (m.to_acceptor ? S.acc[m.a].up : S.prop[m.p].alive);
        if (live && chance(S.drop_odds)) {
            trace("drop message p%d->a%d", m.p, m.a);
        } else if (live) {
            if (m.to_acceptor)
                acc_deliver(&m);
            else
                prop_deliver(&m);
        }
        free(m.bytes);
    } else if (r < 600) {
        int a = (int)rnd_below(N_ACC);
        if (S.acc[a].up && S.acc[a].fsync_running)
            acc_complete_fsync(a);
    } else if (r < 700) {
        int p = (int)rnd_below(N_PROP);
        if (S.prop[p].alive && S.prop[p].elected && !S.prop[p].sync_mode)
            prop_generate(p);
    } else if (r < 800) {
        S.now_ms += 50 + rnd_below(400);
        for (int p = 0; p < N_PROP; p++) {
            if (!S.prop[p].alive)
                continue;
            proposer_tick(&S.prop[p].core, S.now_ms, &S.prop[p].out);
            prop_process(p, &S.prop[p].out);
        }
    } else if (r < 900) {
        int p = (int)rnd_below(N_PROP), a = (int)rnd_below(N_ACC);
        if (S.prop[p].alive && !S.conns[p][a].up && !S.conns[p][a].blocked && S.acc[a].up)
            prop_connect(p, a);
    } else if (r < 930) {
        /* Re-partition: each proposer-acceptor link is cut with some odds
         * (often leaving a proposer with a single acceptor). */
        if (chance(500)) {
            int p = (int)rnd_below(N_PROP), a = (int)rnd_below(N_ACC);
            conn_close(p, a, "connection reset");
        } else {
            /* Each proposer reaches all acceptors, two, or one: the splits
             * that strand WAL of some term on a single acceptor. */
            for (int p = 0; p < N_PROP; p++) {
                uint32_t k = rnd_below(1000) < S.partition_odds ? 1 + rnd_below(2) : N_ACC;
                int first = (int)rnd_below(N_ACC);
                for (int a = 0; a < N_ACC; a++) {
                    int rank = (a - first + N_ACC) % N_ACC;
                    S.conns[p][a].blocked = (uint32_t)rank >= k;
                    if (S.conns[p][a].blocked)
                        conn_close(p, a, "network partition");
                }
            }
            trace("partition: p0 [%d%d%d] p1 [%d%d%d]", !S.conns[0][0].blocked,
                  !S.conns[0][1].blocked, !S.conns[0][2].blocked, !S.conns[1][0].blocked,
                  !S.conns[1][1].blocked, !S.conns[1][2].blocked);
        }
    } else if (r < 940) {
        acc_crash((int)rnd_below(N_ACC));
    } else if (r < 970) {
        int a = (int)rnd_below(N_ACC);
        if (!S.acc[a].up)
            acc_restart(a);
    } else if (r < 980) {
        int p = (int)rnd_below(N_PROP);
        if (S.prop[p].alive) {
            trace("p%d CRASH", p);
            prop_kill(p, "crashed");
        }
    } else {
        int p = (int)rnd_below(N_PROP);
        if (!S.prop[p].alive)
            prop_start(p);
    }
    for (int a = 0; a < N_ACC; a++)
        acc_maybe_start_fsync(a);
}

/* Returns true if the seed ran clean. */
static bool run_seed(uint64_t seed, int steps, bool trace_on)
{
    run_setup(seed, trace_on);
    for (S.step = 1; S.step <= steps && !S.violation; S.step++) {
        step_once();
        if (!S.violation)
            check_invariants();
    }
    return S.violation == NULL;
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s --seeds N [--first-seed S] [--steps K] [--expect-violation]\n"
            "       %s --seed S [--steps K]\n",
            argv0, argv0);
    return 2;
}

int main(int argc, char **argv)
{
    long seeds = -1;
    uint64_t first = 1, one = 0;
    bool single = false, expect_violation = false;
    int steps = 2000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--seeds") == 0 && v) {
            seeds = strtol(v, NULL, 10);
            i++;
        } else if (strcmp(a, "--first-seed") == 0 && v) {
            first = strtoull(v, NULL, 10);
            i++;
        } else if (strcmp(a, "--seed") == 0 && v) {
            one = strtoull(v, NULL, 10);
            single = true;
            i++;
        } else if (strcmp(a, "--steps") == 0 && v) {
            steps = (int)strtol(v, NULL, 10);
            i++;
        } else if (strcmp(a, "--expect-violation") == 0) {
            expect_violation = true;
        } else {
            return usage(argv[0]);
        }
    }
    if ((!single && seeds <= 0) || steps <= 0)
        return usage(argv[0]);

    S.R = calloc(1, WINDOW);
    for (int a = 0; a < N_ACC; a++) {
        S.acc[a].cache = calloc(1, WINDOW);
        S.acc[a].durable = calloc(1, WINDOW);
    }
    for (int p = 0; p < N_PROP; p++) {
        S.prop[p].wal = calloc(1, WINDOW);
        S.prop[p].clients = calloc(MAX_CLIENTS, sizeof(client));
    }
    if (!S.R || !S.prop[N_PROP - 1].clients || !S.acc[N_ACC - 1].durable) {
        fprintf(stderr, "out of memory\n");
        return 2;
    }

    if (single) {
        bool ok = run_seed(one, steps, true);
        printf("seed %llu: %s%s\n", (unsigned long long)one, ok ? "ok" : "VIOLATION: ",
               ok ? "" : S.violation);
        printf("elections %ld, commits acked %ld, committed to %s, acceptor crashes %ld\n",
               S.elections, S.commits_acked, fmt_lsn(S.R_end), S.crashes);
        return ok ? 0 : 1;
    }

    long failures = 0, ran = 0;
    long total_acked = 0, total_elections = 0, total_syncs = 0, total_old = 0;
    lsn_t max_committed = 0;
    for (long k = 0; k < seeds; k++) {
        uint64_t seed = first + (uint64_t)k;
        S.elections = S.commits_acked = S.syncs_done = S.old_term_commits = 0;
        bool ok = run_seed(seed, steps, false);
        ran++;
        total_acked += S.commits_acked;
        total_elections += S.elections;
        total_syncs += S.syncs_done;
        total_old += S.old_term_commits;
        if (S.R_end - BOOT > max_committed)
            max_committed = S.R_end - BOOT;
        if (!ok) {
            failures++;
            printf("seed %llu step %d: VIOLATION: %s\n", (unsigned long long)seed, S.step,
                   S.violation);
            printf("  replay: %s --seed %llu --steps %d\n", argv[0], (unsigned long long)seed,
                   steps);
            if (expect_violation)
                break;
        }
    }
    printf("%ld seeds from %llu, %d steps: %ld violations; %ld elections, %ld sync-safekeepers "
           "runs, %ld client commits acknowledged, up to %llu bytes committed in one run\n",
           ran, (unsigned long long)first, steps, failures, total_elections, total_syncs,
           total_acked, (unsigned long long)max_committed);
    if (total_old > 0)
        printf("%ld commits below the committing proposer's term start\n", total_old);
    if (expect_violation) {
        if (failures == 0)
            printf("expected the planted bug to violate an invariant, but no seed did\n");
        return failures > 0 ? 0 : 1;
    }
    if (total_acked == 0) {
        printf("no client commit was ever acknowledged: the simulation tests nothing\n");
        return 1;
    }
    return failures == 0 ? 0 : 1;
}
