/*
 * acceptor.c: the Paxos acceptor of one timeline (see acceptor.h for the
 * contract with the edge).
 *
 * For: the consensus rules of docs/design.md §4 on the acceptor's side --
 * vote once per term and only after the WAL is flushed and the term is
 * durable; truncate divergent WAL at the highest common point of the term
 * histories before adopting the proposer's history; accept only contiguous
 * appends of the current term; report as flushed only the end of the last
 * complete record that is durable; group commit driven by flush completions.
 *
 * Not for: IO, timers, connections.  Everything here is a function of the
 * inputs; effects are returned for the edge to execute in order.
 *
 * Planted bugs for the simulator (tests/sim builds extra copies of this file
 * with these defined; production builds never define them):
 *   STRATA_BUG_VOTE_NO_PERSIST  grant a vote without persisting the term
 *   STRATA_BUG_SKIP_TRUNCATE    keep divergent WAL instead of truncating it
 */
#include "safekeeper/acceptor.h"

#include <string.h>

#include "base/strata_assert.h"
#include "proto/membership.h"
#include "proto/term_history.h"

/* ---- Output helpers ---------------------------------------------------- */

static void out_reset(acceptor_output *out)
{
    out->n = 0;
    out->append_accepted = false;
    out->error = NULL;
}

static acceptor_effect *out_push(acceptor_output *out, acceptor_effect_kind kind)
{
    STRATA_ASSERT(out->n < ACCEPTOR_MAX_EFFECTS);
    acceptor_effect *e = &out->effects[out->n++];
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    return e;
}

static int fail(acceptor_output *out, const char *why)
{
    out->n = 0;
    out->append_accepted = false;
    out->error = why;
    return -1;
}

static void emit_persist(acceptor *acc, acceptor_output *out)
{
    for (int i = 0; i < out->n; i++)
        STRATA_ASSERT(out->effects[i].kind != ACC_PERSIST_CONTROL);
    acc->st.flush_lsn = acc->flush_lsn;
    out->control = acc->st;
    acc->persisted_commit_lsn = acc->st.commit_lsn;
    out_push(out, ACC_PERSIST_CONTROL);
}

static void emit_send(acceptor_output *out)
{
    for (int i = 0; i < out->n; i++)
        STRATA_ASSERT(out->effects[i].kind != ACC_SEND);
    out_push(out, ACC_SEND);
}

static void emit_append_response(acceptor *acc, acceptor_output *out)
{
    memset(&out->msg, 0, sizeof(out->msg));
    out->msg.kind = AMSG_APPEND_RESPONSE;
    append_response *r = &out->msg.u.append;
    r->term = acc->st.term;
    r->flush_lsn = acc->flush_lsn;
    r->commit_lsn = acc->st.commit_lsn;
    r->ps_feedback = acc->st.ps_feedback;
    emit_send(out);
}

/* ---- State helpers ----------------------------------------------------- */

static bool initialised(const acceptor *acc)
{
    return acc->st.wal_seg_size != 0;
}

/* True once this acceptor adopted the history of its current term's
 * proposer, i.e. appends of that term may flow. */
static bool streaming_current_term(const acceptor *acc)
{
    const term_history *h = &acc->st.history;
    return h->n > 0 && h->entries[h->n - 1].term == acc->st.term;
}

/* Our history up to flush_lsn: what the WAL we hold actually covers. */
static void history_up_to_flush(const acceptor *acc, term_history *out)
{
    const term_history *h = &acc->st.history;
    out->n = 0;
    for (uint32_t i = 0; i < h->n; i++) {
        if (h->entries[i].lsn > acc->flush_lsn)
            break;
        out->entries[out->n++] = h->entries[i];
    }
}

/* Stores commit_lsn durably when it first reaches the current term's start
 * (sync-safekeepers relies on it) or moved a segment past the stored one;
 * otherwise it stays lazy. */
static bool commit_worth_persisting(const acceptor *acc)
{
    lsn_t c = acc->st.commit_lsn;
    if (c <= acc->persisted_commit_lsn)
        return false;
    const term_history *h = &acc->st.history;
    if (h->n > 0) {
        lsn_t term_start = h->entries[h->n - 1].lsn;
        if (c >= term_start && acc->persisted_commit_lsn < term_start)
            return true;
    }
    return c - acc->persisted_commit_lsn >= acc->st.wal_seg_size;
}

static void tracker_restart(acceptor *acc, lsn_t at)
{
    wal_tracker_init(&acc->tracker, at, acc->st.wal_seg_size);
    acc->tracker_valid = true;
}

/* All WAL written is durable now (after FLUSH_WAL). */
static void mark_all_durable(acceptor *acc)
{
    acc->durable_lsn = acc->write_lsn;
    if (acc->tracker_valid) {
        lsn_t end = wal_tracker_last_record_end(&acc->tracker);
        if (end > acc->flush_lsn)
            acc->flush_lsn = end;
    }
    acc->n_pending = 0;
    acc->reply_pending = false;
    acc->st.flush_lsn = acc->flush_lsn;
}

/* Queues a written range for the next flush.  When the queue is full it
 * coalesces into the newest entry: its response may come one flush later,
 * never earlier than it should. */
static void push_pending(acceptor *acc, lsn_t write_end, lsn_t record_end)
{
    int i = acc->n_pending == ACCEPTOR_PENDING_MAX ? acc->n_pending - 1 : acc->n_pending++;
    acc->pending[i].write_end = write_end;
    acc->pending[i].record_end = record_end;
}

/* ---- Construction ------------------------------------------------------ */

void acceptor_init(acceptor *acc, uint64_t node_id, const strata_id *tenant_id,
                   const strata_id *timeline_id)
{
    memset(acc, 0, sizeof(*acc));
    acc->st.node_id = node_id;
    acc->st.tenant_id = *tenant_id;
    acc->st.timeline_id = *timeline_id;
}

int acceptor_restore(acceptor *acc, const acceptor_persistent_state *st, lsn_t true_end_of_wal,
                     const char **why)
{
    if (!term_history_valid(&st->history)) {
        *why = "control file: invalid term history";
        return -1;
    }
    if (st->timeline_start_lsn == 0 && true_end_of_wal != 0) {
        *why = "control file: WAL present but no timeline start";
        return -1;
    }
    if (true_end_of_wal < st->timeline_start_lsn) {
        *why = "end of WAL below the timeline start";
        return -1;
    }
    if (st->wal_seg_size == 0 && st->history.n > 0) {
        *why = "control file: term history without server info";
        return -1;
    }
    memset(acc, 0, sizeof(*acc));
    acc->st = *st;
    acc->persisted_commit_lsn = st->commit_lsn;
    acc->write_lsn = true_end_of_wal;
    acc->durable_lsn = true_end_of_wal;
    acc->flush_lsn = true_end_of_wal;
    acc->st.flush_lsn = true_end_of_wal;
    if (true_end_of_wal != 0)
        tracker_restart(acc, true_end_of_wal);
    return 0;
}

/* ---- Messages ---------------------------------------------------------- */

/*
 * Messages after the greeting name the proposer's configuration generation;
 * only the current one is served, and only to a member: an excluded
 * safekeeper neither votes nor accepts WAL, and a proposer that missed a
 * switch must reconnect (its greeting then tells it the new configuration).
 */
static int check_generation(const acceptor *acc, uint32_t generation, acceptor_output *out)
{
    if (generation != acc->st.mconf.generation)
        return fail(out, "configuration generation does not match this safekeeper's: reconnect "
                         "to learn the current configuration");
    if (acc->st.mconf.generation > 0 && !membership_contains(&acc->st.mconf, acc->st.node_id))
        return fail(out, "this safekeeper is not a member of the timeline's configuration");
    return 0;
}

/* Only the operator changes who counts (acceptor.h, acceptor_authority). */
static bool may_change_membership(acceptor_authority auth)
{
    STRATA_ASSERT(auth == ACCEPTOR_STREAM || auth == ACCEPTOR_ADMIN);
    return auth == ACCEPTOR_ADMIN;
}

static int handle_greeting(acceptor *acc, const proposer_greeting *g, acceptor_authority auth,
                           acceptor_output *out)
{
    if (!strata_id_equal(&g->tenant_id, &acc->st.tenant_id) ||
        !strata_id_equal(&g->timeline_id, &acc->st.timeline_id))
        return fail(out, "ProposerGreeting: tenant or timeline does not match");
    /* Refused before anything changes: a forged configuration (say
     * generation 0xFFFFFFFF naming none of the safekeepers) would otherwise
     * be stored and make the timeline unwritable for good, since no newer
     * generation could ever follow it. */
    bool newer = g->mconf.generation > acc->st.mconf.generation;
    if (newer && !may_change_membership(auth))
        return fail(out, "ProposerGreeting: the proposer's configuration generation is newer "
                         "than this safekeeper's, and only the admin may install one; an "
                         "operator brings this safekeeper up to date (strata start NAME, or "
                         "SWITCH_MEMBERSHIP with the admin token)");
    bool persist = false;
    if (!initialised(acc)) {
        acc->st.pg_version = g->pg_version;
        acc->st.system_id = g->system_id;
        acc->st.wal_seg_size = g->wal_seg_size;
        persist = true;
    } else {
        if (g->wal_seg_size != acc->st.wal_seg_size)
            return fail(out, "ProposerGreeting: wal_seg_size does not match the timeline's");
        if (g->pg_version / 10000 != acc->st.pg_version / 10000)
            return fail(out, "ProposerGreeting: PostgreSQL major version does not match");
        if (g->system_id != 0 && acc->st.system_id != 0 && g->system_id != acc->st.system_id)
            return fail(out, "ProposerGreeting: system_id does not match the timeline's");
        /* sync-safekeepers greets with system_id 0 (it has no Postgres behind
         * it); the first compute's greeting supplies it, so that
         * IDENTIFY_SYSTEM gives a stock standby the right identifier. */
        if (acc->st.system_id == 0 && g->system_id != 0) {
            acc->st.system_id = g->system_id;
            persist = true;
        }
    }
    /* A trusted proposer that knows a newer configuration brings it (this
     * acceptor missed the switch); the reply tells an older proposer ours. */
    if (newer) {
        acc->st.mconf = g->mconf;
        persist = true;
    }
    if (persist)
        emit_persist(acc, out);
    memset(&out->msg, 0, sizeof(out->msg));
    out->msg.kind = AMSG_GREETING;
    out->msg.u.greeting.node_id = acc->st.node_id;
    out->msg.u.greeting.term = acc->st.term;
    out->msg.u.greeting.mconf = acc->st.mconf;
    emit_send(out);
    return 0;
}

int acceptor_switch_membership(acceptor *acc, const membership *m, acceptor_authority auth,
                               acceptor_output *out)
{
    out_reset(out);
    if (!may_change_membership(auth))
        return fail(out, "changing the configuration needs the admin token");
    const char *bad = membership_check(m);
    if (bad)
        return fail(out, bad);
    if (m->generation == 0)
        return fail(out, "a configuration switch needs a generation above 0");
    if (m->generation == acc->st.mconf.generation) {
        if (membership_equal(m, &acc->st.mconf))
            return 0;
        return fail(out, "a different configuration already has this generation");
    }
    if (m->generation < acc->st.mconf.generation)
        return fail(out, "the timeline already has a newer configuration generation");
    acc->st.mconf = *m;
    emit_persist(acc, out);
    return 0;
}

static int handle_vote(acceptor *acc, const vote_request *v, acceptor_output *out)
{
    if (!initialised(acc))
        return fail(out, "VoteRequest before ProposerGreeting");
    if (check_generation(acc, v->generation, out) != 0)
        return -1;
    /*
     * Flush everything received, voted or not: the proposer computes where
     * our streaming starts from the flush_lsn we report, and once we answer
     * no older proposer's data may become durable behind its back.  Without
     * this a later truncation could cut WAL that another acceptor's ack
     * already made committed.
     */
    if (acc->write_lsn > acc->durable_lsn || acc->reply_pending)
        out_push(out, ACC_FLUSH_WAL);
    mark_all_durable(acc);

    bool given = false;
    if (v->term > acc->st.term) {
        acc->st.term = v->term;
        given = true;
#ifndef STRATA_BUG_VOTE_NO_PERSIST
        /* The promise must survive a crash before it is made. */
        emit_persist(acc, out);
#endif
    }
    memset(&out->msg, 0, sizeof(out->msg));
    out->msg.kind = AMSG_VOTE_RESPONSE;
    vote_response *r = &out->msg.u.vote;
    r->term = acc->st.term;
    r->vote_given = given;
    r->flush_lsn = acc->flush_lsn;
    r->truncate_lsn = acc->st.truncate_lsn;
    history_up_to_flush(acc, &r->history);
    emit_send(out);
    return 0;
}

/*
 * Where streaming from a proposer with history ph must start: the end of the
 * last term both histories share, capped by what we hold; the proposer's
 * first entry when nothing is shared.  Returns -1 if the histories disagree
 * on where a shared term starts.
 */
static int highest_common_point(const acceptor *acc, const term_history *ph, lsn_t *point)
{
    term_history mine;
    history_up_to_flush(acc, &mine);
    uint32_t i = 0;
    while (i < mine.n && i < ph->n && mine.entries[i].term == ph->entries[i].term) {
        if (mine.entries[i].lsn != ph->entries[i].lsn)
            return -1;
        i++;
    }
    if (i == 0) {
        *point = ph->entries[0].lsn;
        return 0;
    }
    uint32_t k = i - 1;
    lsn_t end_p = k + 1 < ph->n ? ph->entries[k + 1].lsn : LSN_MAX;
    lsn_t end_a = k + 1 < mine.n ? mine.entries[k + 1].lsn : acc->flush_lsn;
    *point = end_p < end_a ? end_p : end_a;
    return 0;
}

static int handle_elected(acceptor *acc, const proposer_elected *e, acceptor_output *out)
{
    if (!initialised(acc))
        return fail(out, "ProposerElected before ProposerGreeting");
    if (check_generation(acc, e->generation, out) != 0)
        return -1;
    if (e->term < acc->st.term) {
        /* A newer proposer got our vote: tell this one so it stops. */
        emit_append_response(acc, out);
        return 0;
    }
    const term_history *ph = &e->history;
    if (ph->n == 0 || ph->entries[ph->n - 1].term != e->term || !term_history_valid(ph))
        return fail(out, "ProposerElected: history does not end with the proposer's term");

    lsn_t point;
    if (highest_common_point(acc, ph, &point) != 0)
        return fail(out, "ProposerElected: a shared term starts at different LSNs");
    if (e->start_streaming_at != point)
        return fail(out, "ProposerElected: start_streaming_at is not the highest common point");
    lsn_t usable_commit = acc->st.commit_lsn < acc->flush_lsn ? acc->st.commit_lsn : acc->flush_lsn;
    if (point < usable_commit)
        return fail(out, "ProposerElected: would truncate committed WAL");

    if (acc->write_lsn == 0) {
        /* First WAL on this acceptor. */
        acc->st.timeline_start_lsn = point;
        acc->write_lsn = acc->durable_lsn = acc->flush_lsn = point;
        tracker_restart(acc, point);
    } else {
        if (point < acc->st.timeline_start_lsn)
            return fail(out, "ProposerElected: streaming would start before this acceptor's WAL");
        if (point > acc->write_lsn)
            return fail(out, "ProposerElected: streaming would leave a gap in WAL");
        if (point < acc->write_lsn) {
            /*
             * Crash safety: truncate (durably) BEFORE persisting the new
             * history.  If we persisted first and crashed before the
             * truncation, the control file would claim the proposer's terms
             * for WAL that another term wrote; we could then win as donor
             * with divergent bytes.  Truncating first leaves, at worst, the
             * old history describing a prefix of what it described before.
             */
#ifndef STRATA_BUG_SKIP_TRUNCATE
            acceptor_effect *t = out_push(out, ACC_TRUNCATE_WAL);
            t->lsn = point;
#endif
            acc->write_lsn = point;
            if (acc->durable_lsn > point)
                acc->durable_lsn = point;
            if (acc->flush_lsn > point)
                acc->flush_lsn = point;
            if (acc->flush_in_flight && acc->flush_covers > point)
                acc->flush_covers = point;
            acc->n_pending = 0;
            acc->reply_pending = false;
            tracker_restart(acc, point);
        } else if (!acc->tracker_valid) {
            tracker_restart(acc, point);
        }
    }
    if (e->term > acc->st.term)
        acc->st.term = e->term;
    acc->st.history = *ph;
    emit_persist(acc, out);
    return 0;
}

static int handle_append(acceptor *acc, const append_request *a, acceptor_output *out)
{
    if (!initialised(acc))
        return fail(out, "AppendRequest before ProposerGreeting");
    if (check_generation(acc, a->generation, out) != 0)
        return -1;
    if (a->term < acc->st.term) {
        emit_append_response(acc, out);
        return 0;
    }
    if (a->term > acc->st.term || !streaming_current_term(acc))
        return fail(out, "AppendRequest before ProposerElected for its term");
    if (a->begin_lsn != acc->write_lsn)
        return fail(out, "AppendRequest: begin_lsn is not the end of WAL (not contiguous)");
    if (a->end_lsn - a->begin_lsn != a->wal_len)
        return fail(out, "AppendRequest: wal length does not match end_lsn - begin_lsn");

    if (a->wal_len > 0) {
        STRATA_ASSERT(acc->tracker_valid);
        wal_tracker copy = acc->tracker;
        const char *why = NULL;
        if (wal_tracker_feed(&copy, a->begin_lsn, a->wal, a->wal_len, &why) != 0)
            return fail(out, why ? why : "AppendRequest: bytes are not valid WAL");
        acc->tracker = copy;
        acceptor_effect *w = out_push(out, ACC_WRITE_WAL);
        w->lsn = a->begin_lsn;
        w->data = a->wal;
        w->len = a->wal_len;
        acc->write_lsn = a->end_lsn;
        push_pending(acc, a->end_lsn, wal_tracker_last_record_end(&acc->tracker));
        acc->reply_pending = true;
    }
    if (a->commit_lsn > acc->st.commit_lsn)
        acc->st.commit_lsn = a->commit_lsn;
    if (a->truncate_lsn > acc->st.truncate_lsn)
        acc->st.truncate_lsn = a->truncate_lsn;
    /* Feedback another acceptor heard from the pageserver, relayed by the
     * elected proposer (trusted like commit_lsn and truncate_lsn, which
     * bound the WAL removal horizon too). */
    acceptor_set_pageserver_feedback(acc, &a->ps_feedback);
    out->append_accepted = true;

    if (!acc->reply_pending) {
        /* Heartbeat with everything already durable: answer now. */
        if (commit_worth_persisting(acc))
            emit_persist(acc, out);
        emit_append_response(acc, out);
    }
    return 0;
}

int acceptor_handle_message(acceptor *acc, const proposer_msg *msg, acceptor_authority auth,
                            acceptor_output *out)
{
    out_reset(out);
    STRATA_ASSERT(auth == ACCEPTOR_STREAM || auth == ACCEPTOR_ADMIN);
    switch (msg->kind) {
    case PMSG_GREETING:
        return handle_greeting(acc, &msg->u.greeting, auth, out);
    case PMSG_VOTE_REQUEST:
        return handle_vote(acc, &msg->u.vote, out);
    case PMSG_ELECTED:
        return handle_elected(acc, &msg->u.elected, out);
    case PMSG_APPEND:
        return handle_append(acc, &msg->u.append, out);
    }
    return fail(out, "unknown message kind");
}

int acceptor_append_recovered(acceptor *acc, lsn_t begin, const uint8_t *wal, uint32_t len,
                              acceptor_output *out)
{
    out_reset(out);
    if (!initialised(acc) || !streaming_current_term(acc) || acc->write_lsn == 0)
        return fail(out, "recovered WAL before the current term's ProposerElected");
    if (begin != acc->write_lsn)
        return fail(out, "recovered WAL is not contiguous with the WAL written");
    if (len == 0)
        return 0;
    STRATA_ASSERT(acc->tracker_valid);
    wal_tracker copy = acc->tracker;
    const char *why = NULL;
    if (wal_tracker_feed(&copy, begin, wal, len, &why) != 0)
        return fail(out, why ? why : "recovered WAL is not valid WAL");
    acc->tracker = copy;
    acceptor_effect *w = out_push(out, ACC_WRITE_WAL);
    w->lsn = begin;
    w->data = wal;
    w->len = len;
    acc->write_lsn = begin + len;
    push_pending(acc, acc->write_lsn, wal_tracker_last_record_end(&acc->tracker));
    return 0;
}

void acceptor_note_refused_append(acceptor *acc, const append_request *a)
{
    if (a->term != acc->st.term || !streaming_current_term(acc))
        return;
    if (a->commit_lsn > acc->st.commit_lsn)
        acc->st.commit_lsn = a->commit_lsn;
    acceptor_set_pageserver_feedback(acc, &a->ps_feedback);
}

/* ---- Group commit ------------------------------------------------------ */

bool acceptor_flush_wanted(const acceptor *acc)
{
    if (acc->flush_in_flight)
        return acc->write_lsn > acc->flush_covers && acc->write_lsn > acc->durable_lsn;
    return acc->write_lsn > acc->durable_lsn;
}

lsn_t acceptor_flush_begin(acceptor *acc)
{
    STRATA_ASSERT(!acc->flush_in_flight);
    acc->flush_in_flight = true;
    acc->flush_covers = acc->write_lsn;
    return acc->flush_covers;
}

int acceptor_flush_done(acceptor *acc, acceptor_output *out)
{
    out_reset(out);
    STRATA_ASSERT(acc->flush_in_flight);
    acc->flush_in_flight = false;
    lsn_t covers = acc->flush_covers;
    if (covers > acc->write_lsn)
        covers = acc->write_lsn;
    if (covers <= acc->durable_lsn)
        return 0;
    acc->durable_lsn = covers;

    int popped = 0;
    while (popped < acc->n_pending && acc->pending[popped].write_end <= covers) {
        if (acc->pending[popped].record_end > acc->flush_lsn)
            acc->flush_lsn = acc->pending[popped].record_end;
        popped++;
    }
    memmove(&acc->pending[0], &acc->pending[popped],
            (size_t)(acc->n_pending - popped) * sizeof(acc->pending[0]));
    acc->n_pending -= popped;
    STRATA_ASSERT(acc->flush_lsn <= acc->durable_lsn);
    /* Durable now: the next control-file save, lazy or not, may store it.
     * A restart scans from the stored flush_lsn, so it must not lag behind
     * the WAL that removal (which follows commit_lsn) lets go. */
    acc->st.flush_lsn = acc->flush_lsn;

    if (popped > 0 && acc->reply_pending) {
        if (acc->n_pending == 0)
            acc->reply_pending = false;
        if (commit_worth_persisting(acc))
            emit_persist(acc, out);
        if (streaming_current_term(acc))
            emit_append_response(acc, out);
    }
    return 0;
}

/* ---- Misc -------------------------------------------------------------- */

void acceptor_set_pageserver_feedback(acceptor *acc, const pageserver_feedback *fb)
{
    pageserver_feedback *mine = &acc->st.ps_feedback;
    if (fb->last_received_lsn > mine->last_received_lsn)
        mine->last_received_lsn = fb->last_received_lsn;
    if (fb->disk_consistent_lsn > mine->disk_consistent_lsn)
        mine->disk_consistent_lsn = fb->disk_consistent_lsn;
    if (fb->remote_consistent_lsn > mine->remote_consistent_lsn)
        mine->remote_consistent_lsn = fb->remote_consistent_lsn;
}

void acceptor_set_backup_lsn(acceptor *acc, lsn_t lsn)
{
    if (lsn > acc->st.backup_lsn)
        acc->st.backup_lsn = lsn;
}

const acceptor_persistent_state *acceptor_state(const acceptor *acc)
{
    return &acc->st;
}

uint64_t acceptor_term(const acceptor *acc)
{
    return acc->st.term;
}

lsn_t acceptor_write_lsn(const acceptor *acc)
{
    return acc->write_lsn;
}

lsn_t acceptor_flush_lsn(const acceptor *acc)
{
    return acc->flush_lsn;
}

lsn_t acceptor_written_record_end(const acceptor *acc)
{
    lsn_t end = acc->tracker_valid ? wal_tracker_last_record_end(&acc->tracker) : 0;
    return end > acc->flush_lsn ? end : acc->flush_lsn;
}

lsn_t acceptor_commit_lsn(const acceptor *acc)
{
    return acc->st.commit_lsn < acc->flush_lsn ? acc->st.commit_lsn : acc->flush_lsn;
}

lsn_t acceptor_truncate_lsn(const acceptor *acc)
{
    return acc->st.truncate_lsn;
}
