/*
 * sim.c: the deterministic simulator of Strata's consensus (docs/design.md §4.9, §10).
 *
 * For: driving the real acceptor core (3 acceptors) and the real proposer
 * core (3 competing proposer slots) through seeded fault schedules -- a
 * network that drops, delays, duplicates and reorders messages (every message
 * is encoded and decoded with proto/walpush.c), disks whose writes are
 * volatile until an fdatasync, crashes (a process kill keeps the page cache
 * but loses unsubmitted writes, a power loss keeps only what was synced plus
 * random pages the disk wrote back, a clean stop does the shutdown save),
 * also between two effects of one output with a torn WAL write, restarts as
 * safekeeper/node.c does them (scan from the control file's
 * min(commit_lsn, flush_lsn) with the real reader, truncate, sync), lazy
 * control-file saves and WAL removal driven by a simulated pageserver's
 * feedback, records up to 1.5 segments, proposers that die and are replaced
 * by new computes, walproposers that restart keeping their compute's local
 * WAL (and follow walproposer_pg.c's rules for it), sync-safekeepers runs,
 * membership changes (sim_replace.c: a node's disk is lost and `strata
 * safekeeper replace` runs, with its own crashes and lost switches; the
 * proposers learn each configuration from the greetings and restart with
 * its members, as walproposer_pg.c does on PROP_RECONFIGURE) -- and
 * checking the invariants after every step:
 *   - election safety: one proposer per term, across configurations too;
 *   - log safety: every acceptor's usable commit prefix equals the committed
 *     WAL, and no two proposers commit different bytes;
 *   - committed WAL is never truncated (once a restarted compute re-labelled
 *     its WAL under a new term: only while it stays on a node of every
 *     quorum), and stays durable on a node of every quorum of every
 *     configuration that can still form one -- generation 0's three
 *     addresses, or a majority of each set of a newer one, of nodes whose
 *     own generation is not past it; a lost node is in none -- which covers
 *     every commit a proposer reported, so every commit acknowledged to a
 *     client; the committed WAL is what any such quorum of running nodes
 *     would elect as donor; removed WAL was committed and the pageserver
 *     holds it; an acceptor can always restart;
 *   - an acceptor's flush_lsn never moves backwards within a term except by
 *     a truncation.
 *
 * Planted bugs of the edges modelled here (tests/sim/CMakeLists.txt builds
 * each and expects a violation; the cores have their own):
 *   STRATA_BUG_ACK_BEFORE_FSYNC     a vote's flush skips the bytes of the
 *                                   running group-commit round
 *   STRATA_BUG_SCAN_FIXED_BUFFER    the restart scan's record buffer is fixed
 *   STRATA_BUG_STALE_SCAN_START     lazy saves keep the old flush_lsn and
 *                                   removal ignores the scan start
 *   STRATA_BUG_NO_OWN_HISTORY_CHECK a restarted walproposer goes on whenever
 *                                   its local WAL reaches the term start
 *   STRATA_BUG_PERSIST_BEFORE_TRUNCATE  the edge runs a PERSIST_CONTROL
 *                                   before the TRUNCATE_WAL ahead of it
 * and of replace (sim_replace.c, cli/client/sk_change.c):
 *   STRATA_BUG_REPLACE_COPY_TO_COMMIT  the copy ends at the donor's commit
 *                                   and the sync position is a commit position
 *   STRATA_BUG_REPLACE_DONOR_STATE  the copy takes the donor's configuration
 *                                   and term (as cli/client/sk_client.c does), and
 *                                   generation 0 is not made explicit first
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

#include "pg/walformat.h"
#include "compute/walproposer/proposer.h"
#include "proto/walpush.h"
#include "safekeeper/acceptor.h"
#include "tests/sim/sim.h"
#include "tests/sim/simwal.h"

#define N_ACC SIM_N_ACC
#define N_PROP 3
/* Proposer slots: a joint configuration of three with one node replaced has
 * four nodes, two of them at the replaced one's address. */
#define N_SLOT 4
#define SEG (1u << 20)
#define SEGSTART(l) ((l) - (l) % SEG)
#define BOOT ((lsn_t)SEG)
#define WINDOW (6u << 20) /* LSN space [BOOT, BOOT + WINDOW) */
#define GEN_LIMIT (WINDOW - SIMWAL_MAX_PAYLOAD - (64u << 10))
#define SCAN_CHUNK (128u * 1024) /* the restart scan reads this much at a time */
#define NET_MAX 512              /* messages in flight */
#define MAX_TERMS 4096
#define MAX_CLIENTS 4096
#define MAX_CONFS 16 /* configurations taken in one seed */

/* ---- Run state (one seed at a time) ------------------------------------ */

typedef struct msg {
    bool to_acceptor;
    int p, slot; /* the proposer and its acceptor slot */
    int a;       /* the acceptor address the slot named when it was sent */
    uint64_t conn_id;
    size_t len;
    uint8_t *bytes;
} msg;

typedef struct conn {
    bool up;
    uint64_t id;
    uint64_t node_id; /* the node that ran at the slot's address when it connected */
} conn;

typedef struct acc_node {
    bool up;
    /* The disk is gone with the node: nothing restarts here until the replace
     * actor seeds a new node at this address (sim_acc_seed). */
    bool lost;
    acceptor core;
    acceptor_output out;
    acceptor_persistent_state durable_control;
    uint8_t *cache;   /* what reads see */
    uint8_t *durable; /* what survives a crash */
    lsn_t cache_end, durable_end;
    lsn_t dirty_from; /* lowest cache byte written since it was last made durable */
    lsn_t hw;         /* highest cache byte ever written this seed */
    /* WAL removal: segments below this LSN are gone (0: none removed).  The
     * bytes stay in cache/durable for the checkers (they were verified to be
     * committed WAL when removed); nothing may read, write or truncate
     * there. */
    lsn_t removed_below;
    bool fsync_running;
    lsn_t fsync_covers;
    int streamer_p, streamer_slot;
    uint64_t streamer_conn;
    /* checker state */
    lsn_t usable_checked; /* cache[BOOT, x) verified equal to R */
    lsn_t durable_match;  /* durable[BOOT, x) known equal to R */
    lsn_t cache_match;    /* cache[BOOT, x) known equal to R */
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
    /* The compute's local WAL outlives its walproposer: own_term is the last
     * term this compute's walproposer won (0: never), restarted says the
     * running walproposer is a restart that keeps wal[BOOT, wal_end). */
    uint64_t own_term;
    bool restarted;
    int n_clients;
    client *clients;
    /* The configuration the walproposer runs with: generation 0 (its own
     * list of the three addresses) for a new compute, a learned one after
     * PROP_RECONFIGURE, kept across walproposer restarts (as wp_sh->mconf
     * is).  Slot i of the core connects to the address slot_acc[i]. */
    membership mconf;
    int n_slots;
    int slot_acc[N_SLOT];
} prop_node;

static struct {
    uint64_t seed;
    uint64_t rng;
    int step;
    bool trace;
    uint64_t now_ms;
    acc_node acc[N_ACC];
    prop_node prop[N_PROP];
    conn conns[N_PROP][N_SLOT];
    bool blocked[N_PROP][N_ACC]; /* partitioned: messages are lost, connects fail */
    msg net[NET_MAX];
    int n_net;
    uint8_t *R; /* the committed WAL */
    lsn_t R_end;
    int next_uid;
    struct {
        uint64_t term;
        uint32_t generation;
        int uid;
    } terms[MAX_TERMS];
    int n_terms;
    const char *violation;
    char violation_buf[256];
    uint32_t partition_odds;        /* per mille, per proposer, at each re-partition */
    uint32_t drop_odds;             /* per mille, per delivered message */
    uint32_t mid_output_crash_odds; /* per mille, before each acceptor effect */
    bool calm;                      /* few crashes and restarts: long runs of progress */
    bool relabelled;                /* a restarted compute went on with its own WAL */
    /* Every configuration of generation 1 and up that an acceptor took
     * (generation 0 is the three addresses). */
    membership confs[MAX_CONFS];
    int n_confs;
    int new_commit_p; /* sim_take_new_commit */
    /* The simulated pageserver: it ingests committed WAL from one acceptor at
     * a time and reports back to it; its feedback drives WAL removal. */
    lsn_t ps_received, ps_disk, ps_remote;
    bool ps_uploads; /* remote_consistent_lsn is reported (0 otherwise) */
    /* stats */
    long old_term_commits, elections, commits_acked, crashes, restarts, syncs_done, protocol_errors;
    long mid_output_crashes, lazy_saves, segments_removed, wp_restarts, wp_continued, wp_stopped;
    long reconfigures;
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

/* The simulator's own trace is the one the replace actor writes to
 * (sim.h). */
#define trace(...) sim_trace(__VA_ARGS__)

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

/* Message buffers, all of the largest message's size, recycled: large
 * allocations are costly (under ASan each is an mmap). */
static uint8_t *free_bufs[NET_MAX + 8];
static int n_free_bufs;

static uint8_t *buf_get(void)
{
    if (n_free_bufs > 0)
        return free_bufs[--n_free_bufs];
    uint8_t *b = malloc(WALPUSH_MAX_MESSAGE);
    if (!b) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return b;
}

static void buf_put(uint8_t *b)
{
    if (n_free_bufs < (int)(sizeof(free_bufs) / sizeof(free_bufs[0])))
        free_bufs[n_free_bufs++] = b;
    else
        free(b);
}

/* A message on the connection of proposer p's slot s (to or from the
 * acceptor at address a). */
static void net_send(bool to_acceptor, int p, int s, int a, const uint8_t *bytes, size_t len)
{
    if (S.n_net == NET_MAX) {
        trace("net full: dropping message p%d<->a%d", p, a);
        return;
    }
    msg *m = &S.net[S.n_net++];
    m->to_acceptor = to_acceptor;
    m->p = p;
    m->slot = s;
    m->a = a;
    m->conn_id = S.conns[p][s].id;
    m->len = len;
    m->bytes = buf_get();
    memcpy(m->bytes, bytes, len);
}

/* Removes message k keeping the others in send order. */
static void net_take(int k)
{
    memmove(&S.net[k], &S.net[k + 1], (size_t)(S.n_net - k - 1) * sizeof(S.net[0]));
    S.n_net--;
}

static void prop_process(int pi, proposer_output *out);
static void prop_reconfigure(int pi);

static void conn_close(int p, int s, const char *why)
{
    if (!S.conns[p][s].up)
        return;
    S.conns[p][s].up = false;
    trace("conn p%d.%d-a%d closed: %s", p, s, S.prop[p].slot_acc[s], why);
    if (S.prop[p].alive) {
        proposer_disconnected(&S.prop[p].core, s, &S.prop[p].out);
        prop_process(p, &S.prop[p].out);
    }
}

/* Closes every connection of p to the acceptor at address a. */
static void conn_close_acc(int p, int a, const char *why)
{
    for (int s = 0; s < S.prop[p].n_slots; s++)
        if (S.prop[p].slot_acc[s] == a)
            conn_close(p, s, why);
}

/* ---- Acceptor edge ----------------------------------------------------- */

static void acc_send(int a, int p, int s, uint64_t conn_id, const acceptor_msg *m)
{
    if (!S.conns[p][s].up || S.conns[p][s].id != conn_id)
        return;
    size_t n = walpush_encode_acceptor_msg(m, msgbuf, sizeof(msgbuf));
    if (n == 0) {
        violate("acceptor %d produced an unencodable message", a);
        return;
    }
    net_send(false, p, s, a, msgbuf, n);
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

/* Makes cache[from, to) durable without touching the bytes below from: a
 * partial fdatasync (only the planted ack-before-fsync bug does this). */
static void __attribute__((unused)) durable_write_range(acc_node *n, lsn_t from, lsn_t to)
{
    if (from >= to)
        return;
    memcpy(n->durable + off(from), n->cache + off(from), to - from);
    if (n->durable_match > from)
        n->durable_match = from;
    if (to > n->durable_end)
        n->durable_end = to;
}

typedef enum crash_kind {
    CRASH_KILL,  /* the process dies (kill -9): the page cache stays */
    CRASH_POWER, /* the machine loses power: only what the disk holds stays */
    CRASH_CLEAN, /* the process stops after its shutdown save */
} crash_kind;

static void acc_crash(int a, crash_kind kind);
static void store_truncate(acc_node *n, lsn_t l);
static void extend_match(const uint8_t *buf, lsn_t *match, lsn_t lim);

/* Whether the committed WAL stays durable on some node of every quorum if
 * acceptor a loses it (see check_durable). */
static bool durable_without(int a);

/* Executes an acceptor output; reply_p/reply_s/reply_conn name the connection of the
 * message being handled (-1 for flush completions).  With the seed's odds
 * the acceptor dies before an effect (a WAL write may be torn): the rest of
 * the output never runs, which the effect order must make safe. */
static void acc_process(int a, int reply_p, int reply_s, uint64_t reply_conn)
{
    acc_node *n = &S.acc[a];
    acceptor_output *out = &n->out;
#ifdef STRATA_BUG_PERSIST_BEFORE_TRUNCATE
    /* Planted: the edge stores the new history before it truncates. */
    for (int i = 0; i + 1 < out->n; i++) {
        if (out->effects[i].kind == ACC_TRUNCATE_WAL &&
            out->effects[i + 1].kind == ACC_PERSIST_CONTROL) {
            acceptor_effect t = out->effects[i];
            out->effects[i] = out->effects[i + 1];
            out->effects[i + 1] = t;
            break;
        }
    }
#endif
    for (int i = 0; i < out->n; i++) {
        const acceptor_effect *e = &out->effects[i];
        /* Mostly between effects: before the first is much like a crash
         * before the message arrived. */
        uint32_t odds = i == 0 ? S.mid_output_crash_odds / 4 : S.mid_output_crash_odds * 8;
        if (odds > 0 && chance(odds)) {
            trace("a%d dies before effect %d of %d (kind %d, after kind %d)", a, i + 1, out->n,
                  (int)e->kind, i > 0 ? (int)out->effects[i - 1].kind : 0);
            if (e->kind == ACC_WRITE_WAL && e->len > 1 && e->lsn >= n->removed_below &&
                e->lsn >= BOOT && e->lsn + e->len <= BOOT + WINDOW) {
                /* A torn write: some prefix reached the page cache. */
                uint32_t part = rnd_below(e->len);
                memcpy(n->cache + off(e->lsn), e->data, part);
                if (e->lsn + part > n->cache_end)
                    n->cache_end = e->lsn + part;
                if (n->cache_end > n->hw)
                    n->hw = n->cache_end;
                if (e->lsn < n->dirty_from && part > 0)
                    n->dirty_from = e->lsn;
                if (e->lsn < n->cache_match)
                    n->cache_match = e->lsn;
            }
            S.mid_output_crashes++;
            acc_crash(a, chance(500) ? CRASH_POWER : CRASH_KILL);
            return;
        }
        switch (e->kind) {
        case ACC_WRITE_WAL:
            if (e->lsn < BOOT || e->lsn + e->len > BOOT + WINDOW) {
                violate("acceptor %d write outside the window", a);
                return;
            }
            if (e->lsn < n->removed_below) {
                violate("acceptor %d writes at %s, in a removed segment (removed below %s)", a,
                        fmt_lsn(e->lsn), fmt_lsn(n->removed_below));
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
             * committed records.  Once a restarted compute went on with its
             * own WAL, that is too strict: the same bytes then exist under
             * two terms (its earlier one on some acceptors, the new one on
             * others), and the histories make the older copy go, to be
             * streamed again.  Then the cut must leave the committed WAL
             * durable on a node of every quorum (a majority of the others
             * while no node is lost). */
            lsn_t held = n->last_flush < S.R_end ? n->last_flush : S.R_end;
            if (n->durable_match >= held && held > l && (!S.relabelled || !durable_without(a)))
                violate("acceptor %d truncated committed WAL at %s (committed %s, it held %s)", a,
                        fmt_lsn(l), fmt_lsn(S.R_end), fmt_lsn(held));
            /* The flush position may go back with a truncation (a crash
             * before the new history is stored leaves the old one). */
            if (n->last_flush > l)
                n->last_flush = l;
            trace("a%d truncate at %s", a, fmt_lsn(l));
            if (l < n->removed_below) {
                violate("acceptor %d truncates at %s, in a removed segment (removed below %s)", a,
                        fmt_lsn(l), fmt_lsn(n->removed_below));
                return;
            }
            store_truncate(n, l);
            break;
        }
        case ACC_FLUSH_WAL:
#ifdef STRATA_BUG_ACK_BEFORE_FSYNC
            /* Planted: the store's synchronous flush skips bytes that belong
             * to the running group-commit round (issue 11.3): they are synced
             * only when that round's fdatasync completes, yet the vote that
             * asked for the flush reports them flushed now. */
            if (n->fsync_running && n->dirty_from < n->fsync_covers) {
                durable_write_range(n, n->fsync_covers, n->cache_end);
                break;
            }
#endif
            durable_write(n, n->cache_end);
            break;
        case ACC_PERSIST_CONTROL:
            n->durable_control = out->control;
            break;
        case ACC_SEND:
            if (reply_p >= 0)
                acc_send(a, reply_p, reply_s, reply_conn, &out->msg);
            else if (n->streamer_p >= 0)
                acc_send(a, n->streamer_p, n->streamer_slot, n->streamer_conn, &out->msg);
            break;
        }
    }
    if (out->append_accepted && reply_p >= 0) {
        n->streamer_p = reply_p;
        n->streamer_slot = reply_s;
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
    trace("a%d fsync done to %s, flush %s", a, fmt_lsn(upto),
          fmt_lsn(acceptor_flush_lsn(&n->core)));
    acc_process(a, -1, -1, 0);
}

/*
 * The end of the last complete record in what reads see (the page cache)
 * from start on, found the way safekeeper/node.c's find_end_of_wal finds
 * it: the real reader over SCAN_CHUNK reads, its buffer growing to the
 * largest record (it starts small here so that growth is exercised).
 */
static lsn_t scan_end_of_wal(const acc_node *n, lsn_t start)
{
    static uint8_t *rec_buf;
    static size_t rec_cap;
    if (rec_buf == NULL) {
        rec_cap = 8192;
        rec_buf = malloc(rec_cap);
        if (rec_buf == NULL) {
            fprintf(stderr, "out of memory\n");
            exit(2);
        }
    }
    if (start == 0 || n->cache_end <= start)
        return start;
    wal_reader r;
#ifdef STRATA_BUG_SCAN_FIXED_BUFFER
    /* Planted: the fixed reassembly buffer of before (issue 11.2), scaled to
     * the simulated segment: records longer than it end the scan. */
    static uint8_t fixed[256u << 10];
    wal_reader_init(&r, start, SEG, fixed, sizeof(fixed));
#else
    wal_reader_init_growable(&r, start, SEG, &rec_buf, &rec_cap);
#endif
    lsn_t at = start;
    while (at < n->cache_end) {
        size_t left = n->cache_end - at > SCAN_CHUNK ? SCAN_CHUNK : n->cache_end - at;
        const uint8_t *p = n->cache + off(at);
        bool broken = false;
        while (left > 0) {
            size_t used = 0;
            const char *why = NULL;
            int rc = wal_reader_feed(&r, at, p, left, &used, &why);
            if (rc == WAL_READER_ERROR || (rc == WAL_READER_NEED_MORE && used == 0)) {
                broken = true;
                break;
            }
            at += used;
            p += used;
            left -= used;
        }
        if (broken)
            break;
    }
    return wal_reader_last_record_end(&r);
}

/*
 * The acceptor process dies.  Unless it stopped cleanly, its writes not yet
 * handed to the kernel are lost (a random tail of what is not durable); the
 * rest stays in the page cache.  CRASH_POWER: the machine goes down too (or
 * later, for a node already down), and of the page cache only what the disk
 * happened to write back survives: each non-durable page, independently,
 * with some odds.
 */
static void acc_crash(int a, crash_kind kind)
{
    acc_node *n = &S.acc[a];
    bool power_loss = kind == CRASH_POWER;
    if (n->up) {
        trace("a%d %s (durable WAL to %s, cache to %s)", a,
              kind == CRASH_CLEAN ? "STOP"
              : power_loss        ? "CRASH with power loss"
                                  : "CRASH",
              fmt_lsn(n->durable_end), fmt_lsn(n->cache_end));
        n->up = false;
        S.crashes++;
        for (int p = 0; p < N_PROP; p++)
            conn_close_acc(p, a, "acceptor crashed");
        n->fsync_running = false;
        n->usable_checked = BOOT;
        n->cache_match = BOOT;
        if (kind != CRASH_CLEAN && n->dirty_from < n->cache_end) {
            lsn_t keep = n->dirty_from + rnd_below((uint32_t)(n->cache_end - n->dirty_from + 1));
            memset(n->cache + off(keep), 0, n->cache_end - keep);
            n->cache_end = keep;
            if (keep == n->dirty_from)
                n->dirty_from = LSN_MAX;
        }
    } else if (power_loss) {
        trace("a%d power loss while down", a);
    }
    if (!power_loss)
        return;
    if (n->dirty_from < n->cache_end) {
        for (lsn_t pg = n->dirty_from - n->dirty_from % WAL_BLCKSZ; pg < n->cache_end;
             pg += WAL_BLCKSZ) {
            if (chance(250)) {
                lsn_t from = pg > n->dirty_from ? pg : n->dirty_from;
                lsn_t to = pg + WAL_BLCKSZ < n->cache_end ? pg + WAL_BLCKSZ : n->cache_end;
                memcpy(n->durable + off(from), n->cache + off(from), to - from);
                if (n->durable_match > from)
                    n->durable_match = from;
                if (to > n->durable_end)
                    n->durable_end = to;
            }
        }
    }
    /* Cache and disk differ only in [dirty_from, cache_end): every path that
     * changes one outside it changes the other too. */
    if (n->dirty_from < n->cache_end) {
        lsn_t hi = n->cache_end > n->durable_end ? n->cache_end : n->durable_end;
        memcpy(n->cache + off(n->dirty_from), n->durable + off(n->dirty_from), hi - n->dirty_from);
    }
#ifdef SIM_CHECK_CACHE_MODEL
    if (n->hw > BOOT && memcmp(n->cache, n->durable, off(n->hw)) != 0)
        violate("sim: cache and disk of a%d differ outside the dirty range", a);
#endif
    n->cache_end = n->durable_end;
    n->dirty_from = LSN_MAX;
}

/* safekeeper/wal_horizon.c wal_horizon_scan_start: a record boundary known durable. */
static lsn_t restart_scan_start(const acceptor_persistent_state *st)
{
    lsn_t start = st->commit_lsn < st->flush_lsn ? st->commit_lsn : st->flush_lsn;
    return start < st->timeline_start_lsn ? st->timeline_start_lsn : start;
}

/* The WAL is cut at l durably (wal_store_truncate). */
static void store_truncate(acc_node *n, lsn_t l)
{
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
}

/*
 * Restart as safekeeper/node.c tl_load does it: from the control file,
 * scan from its min(commit_lsn, flush_lsn) for the end of WAL (a scan start
 * whose segment was removed while later ones exist stops the daemon),
 * truncate there, fsync what was scanned, then acceptor_restore.
 */
static void acc_restart(int a)
{
    acc_node *n = &S.acc[a];
    const acceptor_persistent_state *st = &n->durable_control;
    lsn_t start = st->wal_seg_size != 0 ? restart_scan_start(st) : 0;
    lsn_t end = 0;
    if (start != 0) {
        if (start < n->removed_below) {
            lsn_t newest = n->cache_end > n->removed_below ? SEGSTART(n->cache_end - 1) : 0;
#ifdef STRATA_BUG_STALE_SCAN_START
            newest = 0; /* before the fix the scan found nothing and truncated there */
#endif
            if (newest > start) {
                violate("acceptor %d cannot restart: its scan start %s (stored commit %s, flush "
                        "%s) is in a removed segment (removed below %s) while later WAL exists",
                        a, fmt_lsn(start), fmt_lsn(st->commit_lsn), fmt_lsn(st->flush_lsn),
                        fmt_lsn(n->removed_below));
                return;
            }
            end = start;
        } else {
            end = scan_end_of_wal(n, start);
        }
        store_truncate(n, end);
        durable_write(n, end);
    }
    const char *why = NULL;
    if (acceptor_restore(&n->core, st, end, &why) != 0) {
        violate("acceptor %d cannot restart: %s", a, why);
        return;
    }
    n->up = true;
    n->streamer_p = -1;
    S.restarts++;
    trace("a%d RESTART term %llu scan from %s, end of WAL %s", a,
          (unsigned long long)acceptor_term(&n->core), fmt_lsn(start), fmt_lsn(end));
}

/* safekeeper/housekeeping.c lazy_fields_changed. */
static bool lazy_fields_changed(const acceptor_persistent_state *x,
                                const acceptor_persistent_state *y)
{
    return x->commit_lsn != y->commit_lsn || x->truncate_lsn != y->truncate_lsn ||
           x->flush_lsn != y->flush_lsn ||
           memcmp(&x->ps_feedback, &y->ps_feedback, sizeof x->ps_feedback) != 0;
}

/* The lazy save (housekeeping, or a clean shutdown): between outputs the
 * in-memory state differs from the control file only in lazy fields. */
static void acc_lazy_save(int a)
{
    acc_node *n = &S.acc[a];
    const acceptor_persistent_state *st = acceptor_state(&n->core);
    if (!lazy_fields_changed(st, &n->durable_control))
        return;
#ifdef STRATA_BUG_STALE_SCAN_START
    /* Planted: the save of before (issue 11.1) stored the new commit_lsn
     * beside the flush_lsn of the last non-lazy save. */
    lsn_t stale = n->durable_control.flush_lsn;
    n->durable_control = *st;
    n->durable_control.flush_lsn = stale;
#else
    n->durable_control = *st;
#endif
    S.lazy_saves++;
}

/*
 * safekeeper/housekeeping.c housekeep_timeline (wal_horizon_removal without the
 * WAL backup): the lazy save, then WAL removal below min(pageserver feedback,
 * commit_lsn, truncate_lsn, the restart scan start; nothing while the remote
 * position is 0) as the control file holds them, only while the store is idle, never
 * past the store's flush position (wal_store_remove_below).
 */
static void acc_housekeep(int a)
{
    acc_node *n = &S.acc[a];
    if (!n->up)
        return;
    acc_lazy_save(a);
    const acceptor_persistent_state *p = &n->durable_control;
    lsn_t horizon = p->ps_feedback.disk_consistent_lsn;
    bool idle = !n->fsync_running && n->dirty_from == LSN_MAX;
    if (horizon == 0 || !idle || p->wal_seg_size == 0 || p->ps_feedback.remote_consistent_lsn == 0)
        return;
    if (p->ps_feedback.remote_consistent_lsn < horizon)
        horizon = p->ps_feedback.remote_consistent_lsn;
    if (p->commit_lsn < horizon)
        horizon = p->commit_lsn;
    if (p->truncate_lsn < horizon)
        horizon = p->truncate_lsn;
#ifndef STRATA_BUG_STALE_SCAN_START
    lsn_t scan_start = restart_scan_start(p);
    if (scan_start < horizon)
        horizon = scan_start;
#endif
    if (horizon == 0)
        return;
    lsn_t below = SEGSTART(horizon);
    if (below > SEGSTART(n->durable_end))
        below = SEGSTART(n->durable_end);
    if (below <= n->removed_below || below <= BOOT)
        return;
    /* What goes must be committed WAL the pageserver holds durably. */
    extend_match(n->durable, &n->durable_match,
                 n->durable_end < S.R_end ? n->durable_end : S.R_end);
    if (below > S.ps_disk || n->durable_match < below) {
        violate("acceptor %d removes WAL below %s: the pageserver holds %s durably, the "
                "acceptor's WAL matches the committed WAL (to %s) only to %s",
                a, fmt_lsn(below), fmt_lsn(S.ps_disk), fmt_lsn(S.R_end), fmt_lsn(n->durable_match));
        return;
    }
    S.segments_removed +=
        (long)((below - (n->removed_below > BOOT ? n->removed_below : BOOT)) / SEG);
    trace("a%d removes WAL below %s (control: commit %s flush %s truncate %s ps %s)", a,
          fmt_lsn(below), fmt_lsn(p->commit_lsn), fmt_lsn(p->flush_lsn), fmt_lsn(p->truncate_lsn),
          fmt_lsn(p->ps_feedback.disk_consistent_lsn));
    n->removed_below = below;
}

/* The pageserver streams committed WAL from acceptor a (it serves up to
 * acceptor_commit_lsn), makes some of it durable (and uploads some), and
 * sends its feedback to a. */
static void ps_step(int a)
{
    acc_node *n = &S.acc[a];
    if (!n->up)
        return;
    lsn_t c = acceptor_commit_lsn(&n->core);
    if (c > S.ps_received)
        S.ps_received = c;
    if (chance(500))
        S.ps_disk = S.ps_received;
    if (S.ps_uploads && chance(300))
        S.ps_remote = S.ps_disk;
    /* As the real WAL receiver: without uploads the remote position is the
     * disk position (a 0 there keeps every safekeeper's WAL). */
    pageserver_feedback fb = {.last_received_lsn = S.ps_received,
                              .disk_consistent_lsn = S.ps_disk,
                              .remote_consistent_lsn = S.ps_uploads ? S.ps_remote : S.ps_disk};
    acceptor_set_pageserver_feedback(&n->core, &fb);
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
    /* The proposers are computes: a tenant's authority, as in production
     * with token authentication. */
    if (acceptor_handle_message(&n->core, &pm, ACCEPTOR_STREAM, &n->out) != 0) {
        S.protocol_errors++;
        trace("a%d protocol error from p%d.%d: %s", m->a, m->p, m->slot, n->out.error);
        conn_close(m->p, m->slot, n->out.error);
        return;
    }
    acc_process(m->a, m->p, m->slot, m->conn_id);
}

/* ---- Proposer edge ----------------------------------------------------- */

/*
 * Election safety: one proposer per term, across configurations too.  A
 * replaced node's promises go with its disk, so replace gives the new node
 * the highest term of a majority of the members (sim_replace.c): a quorum of
 * the new set never elects a term again that the old set elected.
 */
static void record_term(uint64_t term, uint32_t generation, int uid)
{
    for (int i = 0; i < S.n_terms; i++) {
        if (S.terms[i].term == term) {
            if (S.terms[i].uid != uid)
                violate("election safety: term %llu won by proposers %d (generation %u) and "
                        "%d (generation %u)",
                        (unsigned long long)term, S.terms[i].uid, S.terms[i].generation, uid,
                        generation);
            return;
        }
    }
    if (S.n_terms < MAX_TERMS) {
        S.terms[S.n_terms].term = term;
        S.terms[S.n_terms].generation = generation;
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
                    "below %s",
                    pn->uid, fmt_lsn(cmp_end));
            return;
        }
        pn->verified = cmp_end;
    }
    if (c > S.R_end) {
        memcpy(S.R + off(S.R_end), pn->wal + off(S.R_end), c - S.R_end);
        S.R_end = c;
        S.new_commit_p = (int)(pn - S.prop);
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
    for (int s = 0; s < N_SLOT; s++)
        S.conns[pi][s].up = false;
}

/* The last term of the donor's history as its vote reported it (up to its
 * flush_lsn), worked out from ours (the donor's plus our own entry), to
 * check the donor_last_term the core reports. */
static uint64_t donor_last_term(const prop_node *pn, const proposer_effect *e)
{
    term_history h = *proposer_history(&pn->core);
    if (h.n > 0)
        h.n--;
    return term_history_last_log_term(&h, e->u.elected.donor_flush_lsn);
}

/*
 * A restarted walproposer won: the compute keeps writing its own local WAL
 * (compute/extension/walproposer_pg.c on_elected).  It stops if the
 * safekeepers' WAL ends beyond its own, and (check_own_history) unless the
 * donor's last term is the last term this compute won: only then is the
 * safekeepers' WAL up to the term start a prefix of the compute's WAL.
 */
static void prop_restarted_elected(int pi, const proposer_effect *e)
{
    prop_node *pn = &S.prop[pi];
    lsn_t ts = e->u.elected.term_start_lsn;
    uint64_t dlt = e->u.elected.donor_last_term;
    if (dlt != donor_last_term(pn, e)) {
        violate("proposer %d reports donor_last_term %llu, its history says %llu", pn->uid,
                (unsigned long long)dlt, (unsigned long long)donor_last_term(pn, e));
        return;
    }
    if (ts > pn->wal_end) {
        S.wp_stopped++;
        prop_kill(pi, "the safekeepers' WAL ends beyond this compute's WAL");
        return;
    }
#ifndef STRATA_BUG_NO_OWN_HISTORY_CHECK
    if (dlt != pn->own_term) {
        S.wp_stopped++;
        trace("p%d: donor's last term %llu is not our last elected term %llu", pi,
              (unsigned long long)dlt, (unsigned long long)pn->own_term);
        prop_kill(pi, "check_own_history: the safekeepers' WAL is not this compute's");
        return;
    }
#endif
    (void)dlt;
    S.wp_continued++;
    S.relabelled = true;
    pn->own_term = e->u.elected.term;
    pn->restarted = false;
    pn->elected = true;
    /* The local WAL stays; the generator goes on at its end. */
}

static void prop_on_elected(int pi, const proposer_effect *e)
{
    prop_node *pn = &S.prop[pi];
    record_term(e->u.elected.term, pn->mconf.generation, pn->uid);
    S.elections++;
    trace("p%d (uid %d) ELECTED term %llu start %s donor a%d (lowest streaming %s)", pi, pn->uid,
          (unsigned long long)e->u.elected.term, fmt_lsn(e->u.elected.term_start_lsn),
          e->u.elected.donor, fmt_lsn(e->u.elected.start_streaming_at));
    lsn_t ts = e->u.elected.term_start_lsn;
    int ds = e->u.elected.donor;
    acc_node *donor = &S.acc[pn->slot_acc[ds]];
    if (pn->restarted) {
        prop_restarted_elected(pi, e);
        return;
    }
    pn->own_term = e->u.elected.term;
    /* The edge fetches the donor's WAL below the term start; that only
     * works while the donor is still in our term. */
    if (ts > BOOT) {
        if (!donor->up || acceptor_term(&donor->core) != e->u.elected.term ||
            acceptor_state(&donor->core)->node_id != S.conns[pi][ds].node_id) {
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
        net_send(true, pi, e->acceptor, pn->slot_acc[e->acceptor], msgbuf, n);
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
                net_send(true, pi, e->acceptor, pn->slot_acc[e->acceptor], msgbuf, n);
            break;
        }
        case PROP_APPEND:
            prop_send_append(pi, e);
            break;
        case PROP_DISCONNECT:
            S.conns[pi][e->acceptor].up = false;
            trace("p%d drops conn %d to a%d", pi, e->acceptor, pn->slot_acc[e->acceptor]);
            break;
        case PROP_ELECTED:
            prop_on_elected(pi, e);
            need_wal = true;
            break;
        case PROP_RECONFIGURE:
            /* The edge keeps the configuration for the walproposer that
             * starts next (wp_sh->mconf); the core is finished. */
            trace("p%d (uid %d) learns generation %u from a%d", pi, pn->uid, e->u.mconf->generation,
                  pn->slot_acc[e->acceptor]);
            pn->mconf = *e->u.mconf;
            prop_reconfigure(pi);
            return;
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

/* A new proposer core in slot pi with the configuration pn->mconf: its
 * acceptor slots are that configuration's nodes in membership_union order
 * (generation 0: the three addresses), each connecting to its address. */
static bool prop_init_core(int pi, bool sync_mode)
{
    prop_node *pn = &S.prop[pi];
    proposer_config cfg = {0};
    proposer_config_defaults(&cfg);
    cfg.mconf = pn->mconf;
    if (pn->mconf.generation == 0) {
        pn->n_slots = N_ACC;
        for (int a = 0; a < N_ACC; a++)
            pn->slot_acc[a] = a;
    } else {
        member slots[PROPOSER_MAX_ACCEPTORS];
        int n = membership_union(&pn->mconf, slots);
        if (n > N_SLOT) {
            violate("generation %u has %d nodes, more than the simulator's %d slots",
                    pn->mconf.generation, n, N_SLOT);
            return false;
        }
        pn->n_slots = n;
        for (int i = 0; i < n; i++) {
            pn->slot_acc[i] = sim_addr_index(slots[i].addr);
            if (pn->slot_acc[i] < 0) {
                violate("generation %u names an unknown address %s", pn->mconf.generation,
                        slots[i].addr);
                return false;
            }
        }
    }
    cfg.n_acceptors = pn->n_slots;
    cfg.tenant_id.b[0] = 0x11;
    cfg.timeline_id.b[0] = 0x22;
    cfg.pg_version = 150020;
    cfg.wal_seg_size = SEG;
    cfg.bootstrap_lsn = BOOT;
    cfg.sync_safekeepers = sync_mode;
    cfg.heartbeat_ms = 500;
    cfg.timeout_ms = 5000;
    cfg.max_inflight_bytes = 512u << 10;
    /* Odd seeds defer news to the next append or tick, as the compute's
     * walproposer does (by the seed, not a draw: other seeds keep their
     * runs). */
    cfg.defer_news = (S.seed & 1) != 0;
    const char *why = NULL;
    if (proposer_init(&pn->core, &cfg, S.now_ms, &why) != 0) {
        violate("proposer_init: %s", why);
        return false;
    }
    pn->alive = true;
    pn->uid = S.next_uid++;
    pn->sync_mode = sync_mode;
    for (int s = 0; s < N_SLOT; s++)
        S.conns[pi][s].up = false;
    return true;
}

/* The compute's local WAL is gone (a new compute, or a sync-safekeepers run
 * that starts over): it takes the donor's WAL when elected. */
static void prop_forget_wal(prop_node *pn)
{
    lsn_t used = pn->gen.pos > pn->wal_end ? pn->gen.pos : pn->wal_end;
    if (used > BOOT)
        memset(pn->wal, 0, off(used));
    memset(&pn->gen, 0, sizeof(pn->gen));
    pn->wal_end = 0;
    pn->elected = false;
    pn->verified = BOOT;
    pn->own_term = 0;
    pn->restarted = false;
    pn->n_clients = 0;
}

/* A new compute (or sync-safekeepers run) in slot pi: no WAL of its own; it
 * takes the donor's WAL when elected (a basebackup at the term start). */
static void prop_start(int pi)
{
    prop_node *pn = &S.prop[pi];
    /* Its strata.safekeepers lists the three addresses: generation 0 until
     * a safekeeper's greeting tells it a newer configuration. */
    memset(&pn->mconf, 0, sizeof(pn->mconf));
    if (!prop_init_core(pi, chance(150)))
        return;
    prop_forget_wal(pn);
    trace("p%d START uid %d%s", pi, pn->uid, pn->sync_mode ? " (sync-safekeepers)" : "");
}

/* The walproposer of the compute in slot pi restarts (the background worker
 * died and the postmaster starts it again): a new proposer, but the compute
 * keeps its local WAL, which may hold records no safekeeper got. */
static void prop_restart_wp(int pi)
{
    prop_node *pn = &S.prop[pi];
    if (!pn->alive || pn->sync_mode || pn->own_term == 0)
        return;
    trace("p%d walproposer RESTART (uid %d, local WAL to %s, last won term %llu)", pi, pn->uid,
          fmt_lsn(pn->wal_end), (unsigned long long)pn->own_term);
    prop_kill(pi, "walproposer restarts");
    if (!prop_init_core(pi, false))
        return;
    pn->elected = false;
    pn->restarted = true;
    S.wp_restarts++;
}

/*
 * PROP_RECONFIGURE: the walproposer exits and the postmaster starts one
 * with the learned configuration (pn->mconf); sync-safekeepers starts over
 * in process.  A compute that won a term keeps its local WAL, as after any
 * walproposer restart; one that never won holds none of its own.
 */
static void prop_reconfigure(int pi)
{
    prop_node *pn = &S.prop[pi];
    bool sync_mode = pn->sync_mode, keeps_wal = !sync_mode && pn->own_term != 0;
    prop_kill(pi, "a safekeeper holds a newer configuration");
    if (!prop_init_core(pi, sync_mode))
        return;
    if (keeps_wal) {
        pn->elected = false;
        pn->restarted = true;
    } else {
        prop_forget_wal(pn);
    }
    S.reconfigures++;
    trace("p%d walproposer RESTART with generation %u (uid %d, %d slots%s)", pi,
          pn->mconf.generation, pn->uid, pn->n_slots, keeps_wal ? ", keeps its WAL" : "");
}

/* Proposer pi's slot s connects to whatever node runs at its address. */
static void prop_connect(int pi, int s)
{
    conn *c = &S.conns[pi][s];
    int a = S.prop[pi].slot_acc[s];
    c->up = true;
    c->id++;
    c->node_id = acceptor_state(&S.acc[a].core)->node_id;
    trace("conn p%d.%d-a%d up (#%llu)", pi, s, a, (unsigned long long)c->id);
    proposer_connected(&S.prop[pi].core, s, &S.prop[pi].out);
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
        else if (r < 94)
            size = 1000 + rnd_below(9000);
        else if (r < 98 || (!S.calm && rnd_below(4) != 0))
            size = 20000 + rnd_below(40000);
        else if (!S.calm || rnd_below(4) != 0)
            size = 100000 + rnd_below(300000); /* a good part of a segment */
        else
            size = SEG / 2 + rnd_below(SIMWAL_MAX_PAYLOAD - SEG / 2); /* up to 1.5 segments */
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
    proposer_handle_message(&pn->core, m->slot, &am, &pn->out);
    prop_process(m->p, &pn->out);
}

/* ---- The cluster as the replace actor sees it (sim.h) ------------------ */

uint32_t sim_rnd_below(uint32_t n)
{
    return rnd_below(n);
}

bool sim_chance(uint32_t per_mille)
{
    return chance(per_mille);
}

void sim_trace(const char *fmt, ...)
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

int sim_step(void)
{
    return S.step;
}

static const char *const addrs[N_ACC] = {"sk1:5454", "sk2:5454", "sk3:5454"};

const char *sim_addr(int a)
{
    return addrs[a];
}

int sim_addr_index(const char *addr)
{
    for (int a = 0; a < N_ACC; a++)
        if (strcmp(addrs[a], addr) == 0)
            return a;
    return -1;
}

/* A configuration some acceptor took: the invariants hold for each one
 * that can still form a quorum. */
static void conf_record(const membership *m)
{
    for (int i = 0; i < S.n_confs; i++)
        if (S.confs[i].generation == m->generation)
            return;
    if (S.n_confs == MAX_CONFS) {
        violate("more than %d configurations in one seed", MAX_CONFS);
        return;
    }
    S.confs[S.n_confs++] = *m;
}

/* The control state of the node at a: the core's while it runs, the
 * control file's otherwise. */
static const acceptor_persistent_state *acc_control(int a)
{
    return S.acc[a].up ? acceptor_state(&S.acc[a].core) : &S.acc[a].durable_control;
}

bool sim_acc_status(int a, sim_status *st)
{
    acc_node *n = &S.acc[a];
    if (!n->up || chance(30))
        return false;
    const acceptor_persistent_state *c = acceptor_state(&n->core);
    st->node_id = c->node_id;
    st->term = c->term;
    st->flush_lsn = acceptor_flush_lsn(&n->core);
    st->commit_lsn = acceptor_commit_lsn(&n->core);
    st->last_log_term = term_history_last_log_term(&c->history, st->flush_lsn);
    st->mconf = c->mconf;
    return true;
}

/* safekeeper/node.c sk_timeline_switch_membership: the switch is
 * stored, and a new generation closes the streaming proposer connection so
 * that the proposer learns it at once. */
int sim_acc_switch(int a, const membership *m)
{
    acc_node *n = &S.acc[a];
    if (!n->up)
        return -1;
    if (acceptor_switch_membership(&n->core, m, ACCEPTOR_ADMIN, &n->out) != 0) {
        trace("a%d refuses generation %u: %s", a, m->generation, n->out.error);
        return -1;
    }
    if (n->out.n == 0)
        return 0;
    conf_record(m);
    trace("a%d switches to generation %u%s", a, m->generation,
          m->n_new_members > 0 ? " (joint)" : "");
    acc_process(a, -1, -1, 0);
    if (!n->up)
        return -1; /* it died before the control file was written */
    int p = n->streamer_p;
    if (p >= 0 && S.conns[p][n->streamer_slot].id == n->streamer_conn)
        conn_close(p, n->streamer_slot, "the safekeeper's configuration changed");
    return 0;
}

bool sim_acc_running(int a)
{
    return S.acc[a].up;
}

bool sim_acc_has_disk(int a)
{
    return !S.acc[a].lost;
}

uint64_t sim_acc_node_id(int a)
{
    return S.acc[a].lost ? 0 : acc_control(a)->node_id;
}

bool sim_acc_start(int a)
{
    if (S.acc[a].up || S.acc[a].lost)
        return false;
    acc_restart(a);
    return S.acc[a].up;
}

void sim_acc_stop(int a)
{
    if (S.acc[a].up)
        acc_crash(a, CRASH_KILL);
}

/* Forgets everything the disk at a held. */
static void acc_wipe(acc_node *n)
{
    if (n->hw > BOOT) {
        memset(n->cache, 0, off(n->hw));
        memset(n->durable, 0, off(n->hw));
    }
    n->cache_end = n->durable_end = BOOT;
    n->dirty_from = LSN_MAX;
    n->removed_below = 0;
    n->fsync_running = false;
    memset(&n->durable_control, 0, sizeof n->durable_control);
    n->durable_match = n->usable_checked = n->cache_match = BOOT;
    n->last_term = 0;
    n->last_flush = 0;
    n->streamer_p = -1;
}

void sim_acc_lose(int a)
{
    acc_node *n = &S.acc[a];
    trace("a%d (node %llu) LOST with its disk", a,
          (unsigned long long)acceptor_state(&n->core)->node_id);
    if (n->up)
        acc_crash(a, CRASH_KILL);
    acc_wipe(n);
    n->lost = true;
}

bool sim_acc_seed(int a, int donor, uint64_t new_id, lsn_t end, uint64_t term,
                  const membership *mconf)
{
    acc_node *n = &S.acc[a], *d = &S.acc[donor];
    if (!d->up || a == donor || n->up)
        return false;
    const acceptor_persistent_state *ds = acceptor_state(&d->core);
    lsn_t flush = acceptor_flush_lsn(&d->core);
    if (ds->wal_seg_size == 0 || flush == 0)
        return false;
    if (end > flush || end < BOOT) {
        violate("replace copies the donor's WAL up to %s, beyond its flush %s", fmt_lsn(end),
                fmt_lsn(flush));
        return false;
    }
    acc_wipe(n);
    /* The copy streams what the donor's reads see, below the copy's end;
     * the segments the donor removed are not there (their bytes stay for
     * the checkers, as on the donor). */
    memcpy(n->cache, d->cache, off(end));
    memcpy(n->durable, d->cache, off(end));
    n->cache_end = n->durable_end = end;
    if (end > n->hw)
        n->hw = end;
    n->removed_below = d->removed_below;
    acceptor_persistent_state *st = &n->durable_control;
    st->tenant_id = ds->tenant_id;
    st->timeline_id = ds->timeline_id;
    st->pg_version = ds->pg_version;
    st->system_id = ds->system_id;
    st->wal_seg_size = ds->wal_seg_size;
    st->node_id = new_id;
    st->term = term > ds->term ? term : ds->term;
    for (uint32_t i = 0; i < ds->history.n && ds->history.entries[i].lsn <= end; i++)
        st->history.entries[st->history.n++] = ds->history.entries[i];
    st->timeline_start_lsn = ds->timeline_start_lsn;
    st->flush_lsn = end;
    st->commit_lsn = acceptor_commit_lsn(&d->core);
    lsn_t trunc = acceptor_truncate_lsn(&d->core);
    st->truncate_lsn = trunc < end ? trunc : end;
    st->ps_feedback.disk_consistent_lsn = ds->ps_feedback.disk_consistent_lsn;
    st->mconf = mconf != NULL ? *mconf : ds->mconf;
    /* A new node: the core is made at its first start. */
    acceptor_init(&n->core, new_id, &ds->tenant_id, &ds->timeline_id);
    n->lost = false;
    trace("a%d seeded as node %llu from a%d: WAL to %s (donor flush %s, commit %s), term %llu", a,
          (unsigned long long)new_id, donor, fmt_lsn(end), fmt_lsn(flush), fmt_lsn(st->commit_lsn),
          (unsigned long long)st->term);
    return true;
}

bool sim_acc_holds_committed(int a)
{
    acc_node *n = &S.acc[a];
    if (n->lost)
        return false;
    extend_match(n->durable, &n->durable_match,
                 n->durable_end < S.R_end ? n->durable_end : S.R_end);
    return n->durable_match >= S.R_end;
}

int sim_take_new_commit(void)
{
    int p = S.new_commit_p;
    S.new_commit_p = -1;
    return p >= 0 && S.prop[p].alive ? p : -1;
}

void sim_prop_lose(int p)
{
    prop_kill(p, "the compute is lost");
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

static bool set_has(const member *set, uint32_t n, uint64_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (set[i].node_id == id)
            return true;
    return false;
}

/*
 * Whether the nodes at the addresses in mask are a quorum of configuration
 * c (generation 0: of the three addresses), now or after restarts: each is
 * a node of c whose generation is not past c's (one with an older
 * generation adopts c from a proposer's greeting), and together they are a
 * majority of each set of c.  A lost node is in no quorum.
 */
static bool is_quorum(const membership *c, uint32_t mask)
{
    uint32_t in_m = 0, in_n = 0;
    for (int a = 0; a < N_ACC; a++) {
        if (!(mask & (1u << a)))
            continue;
        const acceptor_persistent_state *st = acc_control(a);
        if (S.acc[a].lost || st->mconf.generation > c->generation)
            return false;
        if (c->generation == 0) {
            in_m++;
            continue;
        }
        bool m = set_has(c->members, c->n_members, st->node_id);
        bool n = set_has(c->new_members, c->n_new_members, st->node_id);
        if (!m && !n)
            return false;
        in_m += m;
        in_n += n;
    }
    if (c->generation == 0)
        return in_m >= N_ACC / 2 + 1;
    return in_m >= c->n_members / 2 + 1 &&
           (c->n_new_members == 0 || in_n >= c->n_new_members / 2 + 1);
}

/* "a0,a2": the acceptors in mask, for messages. */
static const char *mask_text(uint32_t mask)
{
    static char buf[4 * N_ACC];
    size_t n = 0;
    buf[0] = '\0';
    for (int a = 0; a < N_ACC; a++)
        if (mask & (1u << a))
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%sa%d", n > 0 ? "," : "", a);
    return buf;
}

/*
 * The committed WAL survives every quorum of every configuration that can
 * still form one: each such quorum holds a node with the committed WAL on
 * its disk.  With no node lost that is "durable on a majority"; a lost node
 * is in no quorum, so the survivors' quorums must make up for it.
 */
/* A quorum of some configuration (*gen its generation) with no node in
 * holders, as a mask; 0 if there is none. */
static uint32_t quorum_without(uint32_t holders, uint32_t *gen)
{
    for (int k = -1; k < S.n_confs; k++) {
        static const membership gen0;
        const membership *c = k < 0 ? &gen0 : &S.confs[k];
        for (uint32_t mask = 1; mask < (1u << N_ACC); mask++) {
            if ((mask & holders) == 0 && is_quorum(c, mask)) {
                *gen = c->generation;
                return mask;
            }
        }
    }
    return 0;
}

static uint32_t holders_mask(void)
{
    uint32_t holders = 0;
    for (int a = 0; a < N_ACC; a++)
        if (sim_acc_holds_committed(a))
            holders |= 1u << a;
    return holders;
}

static bool durable_without(int a)
{
    uint32_t gen;
    return quorum_without(holders_mask() & ~(1u << a), &gen) == 0;
}

static void check_durable(void)
{
    uint32_t gen = 0, mask = quorum_without(holders_mask(), &gen);
    if (mask != 0)
        violate("committed WAL up to %s is durable on no node of %s, a quorum of generation %u",
                fmt_lsn(S.R_end), mask_text(mask), gen);
}

/*
 * The committed WAL must be "chosen": whatever quorum of running acceptors
 * a new proposer were elected by right now, in any configuration that can
 * still form one, the donor it would pick -- highest (last_log_term,
 * flush_lsn), with flush_lsn as a vote would report it -- holds the
 * committed WAL.  This sees a committed prefix that a future election would
 * truncate before any such election happens.
 */
static void check_quorum_donors(void)
{
    if (S.R_end <= BOOT)
        return;
    uint32_t up = 0;
    for (int a = 0; a < N_ACC; a++)
        if (S.acc[a].up)
            up |= 1u << a;
    for (int k = -1; k < S.n_confs; k++) {
        static const membership gen0;
        const membership *c = k < 0 ? &gen0 : &S.confs[k];
        for (uint32_t mask = 1; mask < (1u << N_ACC); mask++) {
            if ((mask & up) != mask || !is_quorum(c, mask))
                continue;
            int donor = -1;
            uint64_t best_llt = 0;
            lsn_t best_flush = 0;
            for (int a = 0; a < N_ACC; a++) {
                if (!(mask & (1u << a)))
                    continue;
                lsn_t f = acceptor_written_record_end(&S.acc[a].core);
                uint64_t llt =
                    term_history_last_log_term(&acceptor_state(&S.acc[a].core)->history, f);
                if (donor < 0 || llt > best_llt || (llt == best_llt && f > best_flush)) {
                    donor = a;
                    best_llt = llt;
                    best_flush = f;
                }
            }
            acc_node *d = &S.acc[donor];
            extend_match(d->cache, &d->cache_match,
                         d->cache_end < S.R_end ? d->cache_end : S.R_end);
            if (best_flush < S.R_end || d->cache_match < S.R_end) {
                violate("committed WAL up to %s is not chosen: acceptors %s of generation %u "
                        "would elect donor a%d (last_log_term %llu, flush %s) holding it only "
                        "to %s",
                        fmt_lsn(S.R_end), mask_text(mask), c->generation, donor,
                        (unsigned long long)best_llt, fmt_lsn(best_flush), fmt_lsn(d->cache_match));
                return;
            }
        }
    }
}

static void check_invariants(void)
{
    for (int a = 0; a < N_ACC; a++) {
        acc_node *n = &S.acc[a];
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
                        "differs from the committed WAL",
                        a, fmt_lsn(usable));
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
    if (!S.violation && S.R_end > BOOT)
        check_durable();
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
    for (int p = 0; p < N_PROP; p++) {
        S.prop[p].alive = false;
        memset(&S.prop[p].mconf, 0, sizeof(S.prop[p].mconf));
        S.prop[p].n_slots = N_ACC;
        for (int a = 0; a < N_ACC; a++)
            S.prop[p].slot_acc[a] = a;
    }
    S.n_confs = 0;
    S.new_commit_p = -1;
    for (int k = 0; k < S.n_net; k++)
        buf_put(S.net[k].bytes);
    S.n_net = 0;
    memset(S.conns, 0, sizeof(S.conns));
    memset(S.blocked, 0, sizeof(S.blocked));
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
    S.mid_output_crash_odds = chance(500) ? 0 : 1 + rnd_below(8);
    S.ps_received = S.ps_disk = S.ps_remote = 0;
    S.ps_uploads = chance(500);
    S.calm = chance(300);
    S.relabelled = false;
    if (S.calm) {
        /* Lost messages cost a reconnect and a resend from the last record
         * end: with records of a segment's size, keep them rare. */
        S.drop_odds = rnd_below(10);
        S.partition_odds /= 4;
    }
    trace("seed %llu: partition odds %u, drop odds %u, mid-output crash odds %u, %s%s%s",
          (unsigned long long)seed, S.partition_odds, S.drop_odds, S.mid_output_crash_odds,
          S.calm ? "calm" : "stormy", S.ps_uploads ? ", pageserver uploads" : "",
          seed & 1 ? ", news deferred" : "");

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
    if (!S.calm && chance(700))
        prop_start(1);
    replace_setup();
}

static bool any_proposer_alive(void)
{
    for (int p = 0; p < N_PROP; p++)
        if (S.prop[p].alive)
            return true;
    return false;
}

static void step_once(void)
{
    uint32_t r = rnd_below(1056);
    /* Calm seeds skip most crashes and restarts, so that enough WAL gets
     * committed for WAL removal and the largest records to matter. */
    bool fault = (r >= 930 && r < 940) || (r >= 970 && r < 980) || (r >= 1035 && r < 1046);
    if (fault && S.calm && !chance(150))
        r = 700; /* time passes instead */
    if (r < 450 && S.n_net > 0) {
        /* Deliver: usually the oldest message of some connection, sometimes
         * any message (reordering); sometimes drop or duplicate. */
        int k = (int)rnd_below((uint32_t)S.n_net);
        if (!chance(60)) {
            for (int j = 0; j < S.n_net; j++) {
                if (S.net[j].p == S.net[k].p && S.net[j].slot == S.net[k].slot &&
                    S.net[j].to_acceptor == S.net[k].to_acceptor) {
                    k = j;
                    break;
                }
            }
        }
        msg m = S.net[k];
        bool dup = chance(15);
        if (dup) {
            S.net[k].bytes = buf_get();
            memcpy(S.net[k].bytes, m.bytes, m.len);
        } else {
            net_take(k);
        }
        conn *c = &S.conns[m.p][m.slot];
        bool live = c->up && c->id == m.conn_id && !S.blocked[m.p][m.a] &&
                    (m.to_acceptor ? S.acc[m.a].up : S.prop[m.p].alive);
        if (live && chance(S.drop_odds)) {
            trace("drop message p%d->a%d", m.p, m.a);
        } else if (live) {
            if (m.to_acceptor)
                acc_deliver(&m);
            else
                prop_deliver(&m);
        }
        buf_put(m.bytes);
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
        int p = (int)rnd_below(N_PROP);
        int s = (int)rnd_below(S.prop[p].n_slots > 0 ? (uint32_t)S.prop[p].n_slots : 1);
        int a = S.prop[p].slot_acc[s];
        if (S.prop[p].alive && s < S.prop[p].n_slots && !S.conns[p][s].up && !S.blocked[p][a] &&
            S.acc[a].up)
            prop_connect(p, s);
    } else if (r < 930) {
        /* Re-partition: each proposer-acceptor link is cut with some odds
         * (often leaving a proposer with a single acceptor). */
        if (chance(500)) {
            int p = (int)rnd_below(N_PROP);
            int s = (int)rnd_below(S.prop[p].n_slots > 0 ? (uint32_t)S.prop[p].n_slots : 1);
            if (s < S.prop[p].n_slots)
                conn_close(p, s, "connection reset");
        } else {
            /* Each proposer reaches all acceptors, two, or one: the splits
             * that strand WAL of some term on a single acceptor. */
            for (int p = 0; p < N_PROP; p++) {
                uint32_t k = rnd_below(1000) < S.partition_odds ? 1 + rnd_below(2) : N_ACC;
                int first = (int)rnd_below(N_ACC);
                for (int a = 0; a < N_ACC; a++) {
                    int rank = (a - first + N_ACC) % N_ACC;
                    S.blocked[p][a] = (uint32_t)rank >= k;
                    if (S.blocked[p][a])
                        conn_close_acc(p, a, "network partition");
                }
            }
            trace("partition: p0 [%d%d%d] p1 [%d%d%d]", !S.blocked[0][0], !S.blocked[0][1],
                  !S.blocked[0][2], !S.blocked[1][0], !S.blocked[1][1], !S.blocked[1][2]);
        }
    } else if (r < 940) {
        /* Two draws, in this order: as call arguments their order would be
         * the compiler's, and a seed would replay differently per build. */
        int a = (int)rnd_below(N_ACC);
        acc_crash(a, chance(500) ? CRASH_POWER : CRASH_KILL);
    } else if (r < 970) {
        int a = (int)rnd_below(N_ACC);
        if (!S.acc[a].up && !S.acc[a].lost)
            acc_restart(a);
    } else if (r < 980) {
        int p = (int)rnd_below(N_PROP);
        if (S.prop[p].alive) {
            trace("p%d CRASH", p);
            prop_kill(p, "crashed");
        }
    } else if (r < 1000) {
        /* A new compute; calm seeds mostly wait until none runs. */
        int p = (int)rnd_below(N_PROP);
        if (!S.prop[p].alive && (!S.calm || !any_proposer_alive() || chance(50)))
            prop_start(p);
    } else if (r < 1020) {
        acc_housekeep((int)rnd_below(N_ACC));
    } else if (r < 1035) {
        ps_step((int)rnd_below(N_ACC));
    } else if (r < 1041) {
        prop_restart_wp((int)rnd_below(N_PROP));
    } else if (r < 1046) {
        /* A clean stop: the shutdown save, then the process exits with
         * everything it wrote in the page cache. */
        int a = (int)rnd_below(N_ACC);
        if (S.acc[a].up) {
            acc_lazy_save(a);
            acc_crash(a, CRASH_CLEAN);
        }
    } else {
        /* Power loss on a node that is down: its page cache goes. */
        int a = (int)rnd_below(N_ACC);
        if (!S.acc[a].up)
            acc_crash(a, CRASH_POWER);
    }
    if (!S.violation)
        replace_step();
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

/* Totals since the start of the run: how much of the restart machinery ran. */
static void print_restart_stats(void)
{
    printf("acceptor crashes %ld (%ld inside an output), restarts %ld, lazy saves %ld, WAL "
           "segments removed %ld; walproposer restarts %ld (%ld won and went on with their "
           "WAL, %ld stopped)\n",
           S.crashes, S.mid_output_crashes, S.restarts, S.lazy_saves, S.segments_removed,
           S.wp_restarts, S.wp_continued, S.wp_stopped);
    printf("walproposer restarts with a learned configuration %ld\n", S.reconfigures);
    replace_print_stats();
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
        printf("seed %llu: %s%s\n", (unsigned long long)one,
               ok ? "ok" : "VIOLATION: ", ok ? "" : S.violation);
        printf("elections %ld, commits acked %ld, committed to %s, acceptor crashes %ld\n",
               S.elections, S.commits_acked, fmt_lsn(S.R_end), S.crashes);
        print_restart_stats();
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
    print_restart_stats();
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
