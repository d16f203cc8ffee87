/*
 * proposer.c: the walproposer's Paxos proposer (see proposer.h for the
 * contract with the edge).
 *
 * For: docs/design.md §4.1-§4.4 and §4.7 on the proposer's side.  Terms: greetings from
 * a majority, term = max + 1.  Votes: a majority, refusals fence.  Donor: the
 * voter with the highest (last_log_term, flush_lsn); the term starts at its
 * flush_lsn and our history is its history plus (term, term_start_lsn).
 * Streaming: per acceptor from the highest common point of the histories,
 * bounded appends, a bounded window, heartbeats.  Commit: the highest LSN a
 * quorum of the configuration flushed (a majority of each of its sets),
 * counting only flushes at or past term_start_lsn.  Configuration: a
 * greeting with a newer generation ends this proposer (RECONFIGURE).
 *
 * Not for: IO, clocks, WAL bytes.  libc only (compiled into strata.so).
 *
 * Planted bug for the simulator (tests/sim builds an extra copy with it;
 * production never defines it):
 *   STRATA_BUG_COMMIT_OLD_TERM  count flushes below term_start_lsn
 */
#include "compute/walproposer/proposer.h"

#include <string.h>

#include "base/strata_assert.h"
#include "proto/membership.h"
#include "proto/term_history.h"

/* Effects kept free for control messages when topping up pipelines. */
#define RESERVED_EFFECTS (3 * PROPOSER_MAX_ACCEPTORS + 4)

static void out_reset(proposer_output *out)
{
    out->n = 0;
}

static proposer_effect *out_push(proposer_output *out, proposer_effect_kind kind)
{
    STRATA_ASSERT(out->n < PROPOSER_MAX_EFFECTS);
    proposer_effect *e = &out->effects[out->n++];
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    return e;
}

/*
 * Whether the slots marked in `has` form a quorum: a majority of every set
 * of the configuration (generation 0: of all slots).
 */
static bool is_quorum(const proposer *p, const bool *has)
{
    int n_m = 0, got_m = 0, n_n = 0, got_n = 0;
    for (int i = 0; i < p->cfg.n_acceptors; i++) {
        if (p->in_members[i]) {
            n_m++;
            got_m += has[i];
        }
        if (p->in_new[i]) {
            n_n++;
            got_n += has[i];
        }
    }
    STRATA_ASSERT(n_m > 0);
    return got_m >= n_m / 2 + 1 && (n_n == 0 || got_n >= n_n / 2 + 1);
}

/*
 * The highest LSN a quorum holds, given each slot's value (0: none): per
 * set, the majority-th highest value; the lowest over the sets.  0 when some
 * set has no majority with a value.
 */
static lsn_t quorum_lsn(const proposer *p, const lsn_t *v)
{
    lsn_t result = LSN_MAX;
    for (int set = 0; set < 2; set++) {
        const bool *in = set == 0 ? p->in_members : p->in_new;
        lsn_t vals[PROPOSER_MAX_ACCEPTORS];
        int n = 0, size = 0;
        for (int i = 0; i < p->cfg.n_acceptors; i++) {
            if (!in[i])
                continue;
            size++;
            if (v[i] > 0)
                vals[n++] = v[i];
        }
        if (size == 0)
            continue;
        int need = size / 2 + 1;
        if (n < need)
            return 0;
        /* Sort descending; the need-th highest is held by a majority. */
        for (int a = 1; a < n; a++) {
            lsn_t x = vals[a];
            int b = a - 1;
            while (b >= 0 && vals[b] < x) {
                vals[b + 1] = vals[b];
                b--;
            }
            vals[b + 1] = x;
        }
        if (vals[need - 1] < result)
            result = vals[need - 1];
    }
    STRATA_ASSERT(result != LSN_MAX);
    return result;
}

static bool finished(const proposer *p)
{
    return p->phase == PROPOSER_FENCED || p->phase == PROPOSER_SYNC_DONE ||
           p->phase == PROPOSER_RECONFIGURE;
}

static void fence(proposer *p, const char *reason, proposer_output *out)
{
    if (finished(p))
        return;
    p->phase = PROPOSER_FENCED;
    proposer_effect *e = out_push(out, PROP_FENCED);
    e->u.reason = reason;
}

static void send_msg(proposer *p, int i, proposer_output *out)
{
    proposer_effect *e = out_push(out, PROP_SEND);
    e->acceptor = i;
    e->u.msg = &p->peers[i].msg;
    p->peers[i].last_send_ms = p->now_ms;
}

static void disconnect(proposer *p, int i, proposer_output *out)
{
    proposer_effect *e = out_push(out, PROP_DISCONNECT);
    e->acceptor = i;
    p->peers[i].state = PEER_DISCONNECTED;
}

static int violation(proposer *p, int i, proposer_output *out)
{
    disconnect(p, i, out);
    return -1;
}

/* ---- Configuration ----------------------------------------------------- */

void proposer_config_defaults(proposer_config *cfg)
{
    cfg->heartbeat_ms = 1000;
    cfg->timeout_ms = 10000;
    cfg->max_inflight_bytes = 2u << 20;
    cfg->sync_linger_ms = 1000;
    cfg->defer_news = false;
}

int proposer_init(proposer *p, const proposer_config *cfg, uint64_t now_ms, const char **why)
{
    const char *bad = membership_check(&cfg->mconf);
    if (bad) {
        *why = bad;
        return -1;
    }
    member slots[PROPOSER_MAX_ACCEPTORS];
    int n_slots = membership_union(&cfg->mconf, slots);
    if (cfg->mconf.generation == 0 && (cfg->n_acceptors < 1 || cfg->n_acceptors > MEMBERSHIP_MAX)) {
        *why = "number of acceptors must be 1..7";
        return -1;
    }
    if (cfg->mconf.generation > 0 && cfg->n_acceptors != n_slots) {
        *why = "number of acceptors must be the configuration's member count";
        return -1;
    }
    uint32_t s = cfg->wal_seg_size;
    if (s < (1u << 20) || s > (1u << 30) || (s & (s - 1)) != 0) {
        *why = "wal_seg_size must be a power of two in 1 MB .. 1 GB";
        return -1;
    }
    if (cfg->heartbeat_ms == 0 || cfg->timeout_ms <= cfg->heartbeat_ms) {
        *why = "timeout must be longer than the heartbeat interval, which must be > 0";
        return -1;
    }
    if (cfg->max_inflight_bytes < WALPUSH_MAX_APPEND) {
        *why = "max_inflight_bytes must be at least one append (128 KB)";
        return -1;
    }
    memset(p, 0, sizeof(*p));
    p->cfg = *cfg;
    p->phase = PROPOSER_COLLECTING_TERMS;
    p->now_ms = now_ms;
    p->donor = -1;
    for (int i = 0; i < cfg->n_acceptors; i++) {
        if (cfg->mconf.generation == 0) {
            p->in_members[i] = true;
            continue;
        }
        p->slot_node[i] = slots[i].node_id;
        for (uint32_t k = 0; k < cfg->mconf.n_members; k++)
            if (cfg->mconf.members[k].node_id == slots[i].node_id)
                p->in_members[i] = true;
        for (uint32_t k = 0; k < cfg->mconf.n_new_members; k++)
            if (cfg->mconf.new_members[k].node_id == slots[i].node_id)
                p->in_new[i] = true;
    }
    return 0;
}

/* ---- Streaming --------------------------------------------------------- */

/*
 * Where acceptor i's streaming starts: the end of the last term its history
 * (as of its vote response, i.e. up to its flush_lsn) shares with ours; our
 * first entry if it shares none.
 */
static lsn_t streaming_start(const proposer *p, const vote_response *v)
{
    const term_history *mine = &p->history, *theirs = &v->history;
    uint32_t i = 0;
    while (i < mine->n && i < theirs->n && mine->entries[i].term == theirs->entries[i].term)
        i++;
    if (i == 0)
        return mine->entries[0].lsn;
    uint32_t k = i - 1;
    if (mine->entries[k].term == p->term)
        return v->flush_lsn;
    STRATA_ASSERT(k + 1 < mine->n);
    lsn_t end_p = mine->entries[k + 1].lsn;
    lsn_t end_a = k + 1 < theirs->n ? theirs->entries[k + 1].lsn : v->flush_lsn;
    return end_p < end_a ? end_p : end_a;
}

static void emit_append(proposer *p, int i, lsn_t begin, lsn_t end, proposer_output *out)
{
    proposer_peer *peer = &p->peers[i];
    proposer_effect *e = out_push(out, PROP_APPEND);
    e->acceptor = i;
    append_request *a = &e->u.append;
    a->term = p->term;
    a->generation = p->cfg.mconf.generation;
    a->begin_lsn = begin;
    a->end_lsn = end;
    a->commit_lsn = p->commit_lsn;
    a->truncate_lsn = p->truncate_lsn;
    a->ps_feedback = p->ps_feedback;
    a->wal = NULL;
    a->wal_len = (uint32_t)(end - begin);
    peer->sent_lsn = end;
    peer->told_commit = p->commit_lsn;
    peer->told_ps = p->ps_feedback;
    peer->last_send_ms = p->now_ms;
}

/* Whether peer has not yet been told a horizon-moving feedback change. */
static bool ps_feedback_news(const proposer *p, const proposer_peer *peer)
{
    return peer->told_ps.disk_consistent_lsn < p->ps_feedback.disk_consistent_lsn ||
           peer->told_ps.remote_consistent_lsn < p->ps_feedback.remote_consistent_lsn;
}

static bool peer_has_news(const proposer *p, const proposer_peer *peer)
{
    return peer->told_commit < p->commit_lsn || ps_feedback_news(p, peer);
}

/* Tops up acceptor i's pipeline; a heartbeat if there is nothing to send
 * and it is due (or streaming just started, or there is news and `news`
 * lets it go alone). */
static void pump(proposer *p, int i, bool force_heartbeat, bool news, proposer_output *out)
{
    proposer_peer *peer = &p->peers[i];
    if (p->phase != PROPOSER_ELECTED || peer->state != PEER_STREAMING)
        return;
    bool sent_any = false;
    for (;;) {
        if (out->n >= PROPOSER_MAX_EFFECTS - RESERVED_EFFECTS)
            return;
        lsn_t base = peer->ack_base > peer->flush_lsn ? peer->ack_base : peer->flush_lsn;
        lsn_t limit = base + p->cfg.max_inflight_bytes;
        if (limit > p->wal_end)
            limit = p->wal_end;
        /* sync-safekeepers only brings acceptors to the donor's end. */
        if (p->cfg.sync_safekeepers && limit > p->term_start_lsn)
            limit = p->term_start_lsn;
        if (peer->sent_lsn >= limit)
            break;
        lsn_t end = peer->sent_lsn + WALPUSH_MAX_APPEND;
        if (end > limit)
            end = limit;
        emit_append(p, i, peer->sent_lsn, end, out);
        sent_any = true;
    }
    if (!sent_any && (force_heartbeat || (news && peer_has_news(p, peer)) ||
                      p->now_ms - peer->last_send_ms >= p->cfg.heartbeat_ms))
        emit_append(p, i, peer->sent_lsn, peer->sent_lsn, out);
}

static void pump_all(proposer *p, bool news, proposer_output *out)
{
    for (int i = 0; i < p->cfg.n_acceptors; i++)
        pump(p, i, false, news, out);
}

/* Whether news may go alone from where input arrives (not a tick or
 * proposer_send_news, which always let it). */
static bool news_at_once(const proposer *p)
{
    return !p->cfg.defer_news;
}

static void start_streaming(proposer *p, int i, proposer_output *out)
{
    proposer_peer *peer = &p->peers[i];
    lsn_t start = streaming_start(p, &peer->vote);
    peer->start_streaming_at = start;
    peer->sent_lsn = start;
    peer->ack_base = start;
    peer->sent_at_last_response = start;
    peer->state = PEER_STREAMING;

    memset(&peer->msg, 0, sizeof(peer->msg));
    peer->msg.kind = PMSG_ELECTED;
    peer->msg.u.elected.term = p->term;
    peer->msg.u.elected.generation = p->cfg.mconf.generation;
    peer->msg.u.elected.start_streaming_at = start;
    peer->msg.u.elected.history = p->history;
    send_msg(p, i, out);
    pump(p, i, true, news_at_once(p), out);
}

/* ---- Commit ------------------------------------------------------------ */

static void check_sync_done(proposer *p, proposer_output *out)
{
    if (!p->cfg.sync_safekeepers || p->phase != PROPOSER_ELECTED)
        return;
    bool synced[PROPOSER_MAX_ACCEPTORS] = {false};
    int behind = 0; /* streaming, not yet synced */
    for (int i = 0; i < p->cfg.n_acceptors; i++) {
        const proposer_peer *peer = &p->peers[i];
        if (peer->flush_lsn >= p->term_start_lsn && peer->commit_lsn >= p->term_start_lsn)
            synced[i] = true;
        else if (peer->state == PEER_STREAMING)
            behind++;
    }
    if (!is_quorum(p, synced))
        return;
    if (p->sync_quorum_ms == 0)
        p->sync_quorum_ms = p->now_ms > 0 ? p->now_ms : 1;
    /* A majority is enough for safety; the linger only spares a reader of
     * the remaining acceptors a wait for the next compute to tell them. */
    if (behind > 0 && p->now_ms - p->sync_quorum_ms < p->cfg.sync_linger_ms)
        return;
    p->phase = PROPOSER_SYNC_DONE;
    proposer_effect *e = out_push(out, PROP_SYNC_DONE);
    e->u.sync_lsn = p->term_start_lsn;
}

static void recompute_commit(proposer *p, proposer_output *out)
{
    lsn_t flushes[PROPOSER_MAX_ACCEPTORS];
    lsn_t min_flush = LSN_MAX;
    for (int i = 0; i < p->cfg.n_acceptors; i++) {
        lsn_t f = p->peers[i].flush_lsn;
        if (f < min_flush)
            min_flush = f;
#ifdef STRATA_BUG_COMMIT_OLD_TERM
        flushes[i] = f;
#else
        /* Never commit an older term's WAL by counting (Raft figure 8):
         * only acceptors that hold our term's start count. */
        flushes[i] = f >= p->term_start_lsn ? f : 0;
#endif
    }
    bool advanced = false;
    lsn_t c = quorum_lsn(p, flushes);
    if (c > p->commit_lsn) {
        p->commit_lsn = c;
        advanced = true;
        proposer_effect *e = out_push(out, PROP_COMMIT_ADVANCED);
        e->u.commit_lsn = c;
    }
    lsn_t horizon = min_flush < p->commit_lsn ? min_flush : p->commit_lsn;
    if (horizon > p->truncate_lsn)
        p->truncate_lsn = horizon;
    check_sync_done(p, out);
    if (advanced)
        pump_all(p, news_at_once(p), out);
}

/* ---- Election ---------------------------------------------------------- */

static void elect(proposer *p, proposer_output *out)
{
    int donor = -1;
    uint64_t best_term = 0;
    lsn_t best_flush = 0;
    lsn_t max_truncate = 0;
    for (int i = 0; i < p->cfg.n_acceptors; i++) {
        const proposer_peer *peer = &p->peers[i];
        if (peer->state != PEER_VOTED || !peer->vote_given)
            continue;
        uint64_t llt = term_history_last_log_term(&peer->vote.history, peer->vote.flush_lsn);
        if (donor < 0 || llt > best_term ||
            (llt == best_term && peer->vote.flush_lsn > best_flush)) {
            donor = i;
            best_term = llt;
            best_flush = peer->vote.flush_lsn;
        }
        if (peer->vote.truncate_lsn > max_truncate)
            max_truncate = peer->vote.truncate_lsn;
    }
    STRATA_ASSERT(donor >= 0);
    const vote_response *dv = &p->peers[donor].vote;

    if (dv->flush_lsn == 0 && dv->history.n == 0) {
        /* Every voter is empty: a new timeline starts at the bootstrap LSN. */
        if (p->cfg.bootstrap_lsn == 0) {
            fence(p, "no acceptor has WAL and no bootstrap LSN is configured", out);
            return;
        }
        p->term_start_lsn = p->cfg.bootstrap_lsn;
        p->history.n = 0;
    } else {
        if (dv->history.n >= TERM_HISTORY_MAX) {
            fence(p, "term history is full", out);
            return;
        }
        p->term_start_lsn = dv->flush_lsn;
        p->history = dv->history;
    }
    p->history.entries[p->history.n].term = p->term;
    p->history.entries[p->history.n].lsn = p->term_start_lsn;
    p->history.n++;
    STRATA_ASSERT(term_history_valid(&p->history));
    p->donor = donor;
    p->truncate_lsn = max_truncate;
    /* Truncate horizons only ever trail a commit, so this is committed. */
    p->commit_lsn = max_truncate;
    p->phase = PROPOSER_ELECTED;

    lsn_t lowest = LSN_MAX;
    for (int i = 0; i < p->cfg.n_acceptors; i++) {
        if (p->peers[i].state == PEER_VOTED) {
            lsn_t s = streaming_start(p, &p->peers[i].vote);
            if (s < lowest)
                lowest = s;
        }
    }
    proposer_effect *e = out_push(out, PROP_ELECTED);
    e->u.elected.term = p->term;
    e->u.elected.term_start_lsn = p->term_start_lsn;
    e->u.elected.start_streaming_at = lowest;
    e->u.elected.donor = donor;
    e->u.elected.donor_flush_lsn = dv->flush_lsn;
    e->u.elected.donor_last_term =
        dv->history.n > 0 ? dv->history.entries[dv->history.n - 1].term : 0;

    for (int i = 0; i < p->cfg.n_acceptors; i++)
        if (p->peers[i].state == PEER_VOTED)
            start_streaming(p, i, out);
}

static void send_vote_request(proposer *p, int i, proposer_output *out)
{
    proposer_peer *peer = &p->peers[i];
    memset(&peer->msg, 0, sizeof(peer->msg));
    peer->msg.kind = PMSG_VOTE_REQUEST;
    peer->msg.u.vote.term = p->term;
    peer->msg.u.vote.generation = p->cfg.mconf.generation;
    peer->state = PEER_VOTING;
    send_msg(p, i, out);
}

static int handle_greeting(proposer *p, int i, const acceptor_greeting *g, proposer_output *out)
{
    proposer_peer *peer = &p->peers[i];
    if (peer->state != PEER_GREETING)
        return violation(p, i, out);
    /* Slots are nodes: another node at that address is not this member. */
    if (p->slot_node[i] != 0 && g->node_id != p->slot_node[i])
        return violation(p, i, out);
    if (g->mconf.generation > p->cfg.mconf.generation) {
        p->learned = g->mconf;
        p->phase = PROPOSER_RECONFIGURE;
        proposer_effect *e = out_push(out, PROP_RECONFIGURE);
        e->acceptor = i;
        e->u.mconf = &p->learned;
        return 0;
    }
    /* Our greeting carried our configuration: an acceptor holds ours or a
     * newer one, never an older one. */
    if (g->mconf.generation < p->cfg.mconf.generation)
        return violation(p, i, out);
    peer->greeting_term = g->term;
    peer->state = PEER_GREETED;

    if (p->phase == PROPOSER_COLLECTING_TERMS) {
        bool greeted[PROPOSER_MAX_ACCEPTORS] = {false};
        uint64_t max_term = 0;
        for (int k = 0; k < p->cfg.n_acceptors; k++) {
            if (p->peers[k].state == PEER_GREETED) {
                greeted[k] = true;
                if (p->peers[k].greeting_term > max_term)
                    max_term = p->peers[k].greeting_term;
            }
        }
        if (!is_quorum(p, greeted))
            return 0;
        p->term = max_term + 1;
        p->phase = PROPOSER_VOTING;
        for (int k = 0; k < p->cfg.n_acceptors; k++)
            if (p->peers[k].state == PEER_GREETED)
                send_vote_request(p, k, out);
        return 0;
    }
    if (p->phase == PROPOSER_ELECTED && g->term > p->term) {
        fence(p, "an acceptor has a higher term: another proposer exists", out);
        return 0;
    }
    send_vote_request(p, i, out);
    return 0;
}

static int handle_vote(proposer *p, int i, const vote_response *v, proposer_output *out)
{
    proposer_peer *peer = &p->peers[i];
    if (peer->state != PEER_VOTING)
        return violation(p, i, out);
    if (!v->vote_given) {
        if (v->term > p->term || p->phase != PROPOSER_ELECTED) {
            fence(p, "vote refused: another proposer has an equal or higher term", out);
            return 0;
        }
        if (v->term < p->term)
            return violation(p, i, out);
        /* Equal term after we won: it already voted for us (reconnect). */
    } else if (v->term != p->term) {
        return violation(p, i, out);
    }
    peer->vote = *v;
    peer->vote_given = v->vote_given;
    peer->state = PEER_VOTED;

    if (p->phase == PROPOSER_VOTING) {
        bool votes[PROPOSER_MAX_ACCEPTORS] = {false};
        for (int k = 0; k < p->cfg.n_acceptors; k++)
            votes[k] = p->peers[k].state == PEER_VOTED && p->peers[k].vote_given;
        if (is_quorum(p, votes))
            elect(p, out);
        return 0;
    }
    if (p->phase == PROPOSER_ELECTED)
        start_streaming(p, i, out);
    return 0;
}

static void merge_ps_feedback(pageserver_feedback *into, const pageserver_feedback *fb)
{
    if (fb->last_received_lsn > into->last_received_lsn)
        into->last_received_lsn = fb->last_received_lsn;
    if (fb->disk_consistent_lsn > into->disk_consistent_lsn)
        into->disk_consistent_lsn = fb->disk_consistent_lsn;
    if (fb->remote_consistent_lsn > into->remote_consistent_lsn)
        into->remote_consistent_lsn = fb->remote_consistent_lsn;
}

static int handle_append_response(proposer *p, int i, const append_response *r,
                                  proposer_output *out)
{
    proposer_peer *peer = &p->peers[i];
    if (r->term > p->term) {
        fence(p, "an acceptor refused us with a higher term: another proposer exists", out);
        return 0;
    }
    if (peer->state != PEER_STREAMING || r->term < p->term)
        return violation(p, i, out);
    if (r->flush_lsn > peer->sent_lsn)
        return violation(p, i, out);
    if (r->flush_lsn > peer->flush_lsn)
        peer->flush_lsn = r->flush_lsn;
    if (r->commit_lsn > peer->commit_lsn)
        peer->commit_lsn = r->commit_lsn;
    pageserver_feedback before = p->ps_feedback;
    merge_ps_feedback(&p->ps_feedback, &r->ps_feedback);
    bool ps_news = p->ps_feedback.disk_consistent_lsn != before.disk_consistent_lsn ||
                   p->ps_feedback.remote_consistent_lsn != before.remote_consistent_lsn;
    /*
     * Window: a response means the acceptor processed at least what we had
     * sent when the previous response arrived, so that point may serve as
     * the base even while a long record keeps flush_lsn behind.
     */
    lsn_t base = peer->sent_at_last_response > peer->flush_lsn ? peer->sent_at_last_response
                                                               : peer->flush_lsn;
    if (base > peer->ack_base)
        peer->ack_base = base;
    peer->sent_at_last_response = peer->sent_lsn;
    recompute_commit(p, out);
    /* Feedback news: the others hear it now (with cfg.defer_news, soon), not
     * at their next heartbeat. */
    if (ps_news)
        pump_all(p, news_at_once(p), out);
    else
        pump(p, i, false, news_at_once(p), out);
    return 0;
}

/* ---- Inputs ------------------------------------------------------------ */

void proposer_connected(proposer *p, int i, proposer_output *out)
{
    out_reset(out);
    STRATA_ASSERT(i >= 0 && i < p->cfg.n_acceptors);
    if (finished(p))
        return;
    proposer_peer *peer = &p->peers[i];
    peer->state = PEER_GREETING;
    peer->vote_given = false;
    peer->last_recv_ms = p->now_ms;
    memset(&peer->msg, 0, sizeof(peer->msg));
    peer->msg.kind = PMSG_GREETING;
    proposer_greeting *g = &peer->msg.u.greeting;
    g->proto_version = WALPUSH_PROTO_VERSION;
    g->tenant_id = p->cfg.tenant_id;
    g->timeline_id = p->cfg.timeline_id;
    g->pg_version = p->cfg.pg_version;
    g->system_id = p->cfg.system_id;
    g->wal_seg_size = p->cfg.wal_seg_size;
    g->mconf = p->cfg.mconf;
    send_msg(p, i, out);
}

void proposer_disconnected(proposer *p, int i, proposer_output *out)
{
    out_reset(out);
    STRATA_ASSERT(i >= 0 && i < p->cfg.n_acceptors);
    /* Its flush_lsn stays: what it acknowledged in our term is durable. */
    p->peers[i].state = PEER_DISCONNECTED;
}

int proposer_handle_message(proposer *p, int i, const acceptor_msg *msg, proposer_output *out)
{
    out_reset(out);
    STRATA_ASSERT(i >= 0 && i < p->cfg.n_acceptors);
    if (finished(p))
        return 0;
    proposer_peer *peer = &p->peers[i];
    if (peer->state == PEER_DISCONNECTED)
        return 0; /* a late message from a closed connection */
    peer->last_recv_ms = p->now_ms;
    switch (msg->kind) {
    case AMSG_GREETING:
        return handle_greeting(p, i, &msg->u.greeting, out);
    case AMSG_VOTE_RESPONSE:
        return handle_vote(p, i, &msg->u.vote, out);
    case AMSG_APPEND_RESPONSE:
        return handle_append_response(p, i, &msg->u.append, out);
    }
    return violation(p, i, out);
}

void proposer_tick(proposer *p, uint64_t now_ms, proposer_output *out)
{
    out_reset(out);
    if (now_ms > p->now_ms)
        p->now_ms = now_ms;
    if (finished(p))
        return;
    for (int i = 0; i < p->cfg.n_acceptors; i++) {
        proposer_peer *peer = &p->peers[i];
        bool waiting_on_it = peer->state == PEER_GREETING || peer->state == PEER_VOTING ||
                             peer->state == PEER_STREAMING;
        if (waiting_on_it && p->now_ms - peer->last_recv_ms > p->cfg.timeout_ms)
            disconnect(p, i, out);
    }
    pump_all(p, true, out);
    check_sync_done(p, out);
}

void proposer_wal_available(proposer *p, lsn_t end_lsn, proposer_output *out)
{
    out_reset(out);
    if (end_lsn > p->wal_end)
        p->wal_end = end_lsn;
    if (finished(p))
        return;
    pump_all(p, news_at_once(p), out);
}

bool proposer_news_pending(const proposer *p)
{
    if (finished(p) || p->phase != PROPOSER_ELECTED)
        return false;
    for (int i = 0; i < p->cfg.n_acceptors; i++) {
        const proposer_peer *peer = &p->peers[i];
        if (peer->state == PEER_STREAMING && peer_has_news(p, peer))
            return true;
    }
    return false;
}

void proposer_send_news(proposer *p, proposer_output *out)
{
    out_reset(out);
    if (finished(p))
        return;
    pump_all(p, true, out);
}

proposer_phase proposer_get_phase(const proposer *p)
{
    return p->phase;
}

uint64_t proposer_term(const proposer *p)
{
    return p->term;
}

lsn_t proposer_term_start_lsn(const proposer *p)
{
    return p->term_start_lsn;
}

lsn_t proposer_commit_lsn(const proposer *p)
{
    return p->commit_lsn;
}

const term_history *proposer_history(const proposer *p)
{
    return &p->history;
}
