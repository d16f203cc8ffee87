/*
 * walpush.c: encode and decode the WAL-push messages of proto/walpush.h.
 *
 * For: turning the structs of walpush.h into CopyData payloads and back,
 * checking every length and range on the way in.  Not for: deciding what a
 * message means (that is the acceptor's and proposer's job), the rules of
 * term histories and configurations (term_history.c, membership.c) or
 * framing (CopyData is the wire-protocol layer's).
 *
 * Layout, all integers big-endian, after the one-byte tag:
 *   ProposerGreeting 'g'  u32 proto_version, 16B tenant, 16B timeline,
 *                         u32 pg_version, u64 system_id, u32 wal_seg_size,
 *                         membership
 *   AcceptorGreeting 'g'  u64 node_id, u64 term, membership
 *   VoteRequest      'v'  u64 term, u32 generation
 *   VoteResponse     'v'  u64 term, u8 vote_given, u64 flush_lsn,
 *                         u64 truncate_lsn, history
 *   ProposerElected  'e'  u64 term, u32 generation, u64 start_streaming_at,
 *                         history
 *   AppendRequest    'a'  u64 term, u32 generation, u64 begin, u64 end,
 *                         u64 commit, u64 truncate, u64 ps last_received,
 *                         u64 ps disk_consistent, u64 ps remote_consistent,
 *                         then end - begin WAL bytes
 *   AppendResponse   'a'  u64 term, u64 flush_lsn, u64 commit_lsn,
 *                         u64 ps last_received, u64 ps disk_consistent,
 *                         u64 ps remote_consistent
 *   history               u32 n, then n x (u64 term, u64 lsn)
 *   membership            u32 generation, u8 n, n x member, u8 n_new,
 *                         n_new x member
 *   member                u64 node_id, u8 len, len address bytes
 */
#include "proto/walpush.h"

#include <string.h>

#include "base/byteorder.h"

/* ---- Byte cursors ------------------------------------------------------ */

typedef struct wcur {
    uint8_t *buf;
    size_t cap;
    size_t len;
    bool overflow;
} wcur;

static void put_bytes(wcur *w, const void *p, size_t n)
{
    if (w->overflow || w->cap - w->len < n) {
        w->overflow = true;
        return;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

static void put_u8(wcur *w, uint8_t v)
{
    put_bytes(w, &v, 1);
}

static void put_u32(wcur *w, uint32_t v)
{
    uint8_t b[4];
    put_be32(b, v);
    put_bytes(w, b, 4);
}

static void put_u64(wcur *w, uint64_t v)
{
    uint8_t b[8];
    put_be64(b, v);
    put_bytes(w, b, 8);
}

typedef struct rcur {
    const uint8_t *buf;
    size_t len;
    size_t pos;
    bool short_read;
} rcur;

static const uint8_t *get_bytes(rcur *r, size_t n)
{
    if (r->short_read || r->len - r->pos < n) {
        r->short_read = true;
        return NULL;
    }
    const uint8_t *p = r->buf + r->pos;
    r->pos += n;
    return p;
}

static uint8_t get_u8(rcur *r)
{
    const uint8_t *p = get_bytes(r, 1);
    return p ? p[0] : 0;
}

static uint32_t get_u32(rcur *r)
{
    const uint8_t *p = get_bytes(r, 4);
    return p ? get_be32(p) : 0;
}

static uint64_t get_u64(rcur *r)
{
    const uint8_t *p = get_bytes(r, 8);
    return p ? get_be64(p) : 0;
}

/* True, with *why = msg, if the fields just read ran past the input. */
static bool cut_short(const rcur *r, const char *msg, const char **why)
{
    if (!r->short_read)
        return false;
    *why = msg;
    return true;
}

/* The prologue of both decoders: the tag, or -1 for an empty message. */
static int decode_begin(rcur *r, uint8_t *tag, const char **why)
{
    if (r->len < 1) {
        *why = "empty message";
        return -1;
    }
    *tag = get_u8(r);
    return 0;
}

/* The epilogue of both decoders: the message must end where its fields do. */
static int decode_end(const rcur *r, const char **why)
{
    if (r->pos != r->len) {
        *why = "trailing bytes after message";
        return -1;
    }
    return 0;
}

/* ---- Term histories on the wire (proto/term_history.h) --------------- */

static void put_history(wcur *w, const term_history *h)
{
    put_u32(w, h->n);
    for (uint32_t i = 0; i < h->n; i++) {
        put_u64(w, h->entries[i].term);
        put_u64(w, h->entries[i].lsn);
    }
}

static int get_history(rcur *r, term_history *h, const char **why)
{
    uint32_t n = get_u32(r);
    if (cut_short(r, "term history: message too short", why))
        return -1;
    if (n > TERM_HISTORY_MAX) {
        *why = "term history: more entries than TERM_HISTORY_MAX";
        return -1;
    }
    h->n = n;
    for (uint32_t i = 0; i < n; i++) {
        h->entries[i].term = get_u64(r);
        h->entries[i].lsn = get_u64(r);
    }
    if (cut_short(r, "term history: message too short", why))
        return -1;
    if (!term_history_valid(h)) {
        *why = "term history: terms not strictly increasing or lsns decreasing";
        return -1;
    }
    return 0;
}

/* ---- Configurations on the wire (proto/membership.h) ----------------- */

static void put_set(wcur *w, const member *set, uint32_t n)
{
    put_u8(w, (uint8_t)n);
    for (uint32_t i = 0; i < n; i++) {
        size_t len = strnlen(set[i].addr, sizeof set[i].addr);
        put_u64(w, set[i].node_id);
        put_u8(w, (uint8_t)len);
        put_bytes(w, set[i].addr, len);
    }
}

static void put_membership(wcur *w, const membership *m)
{
    put_u32(w, m->generation);
    put_set(w, m->members, m->n_members);
    put_set(w, m->new_members, m->n_new_members);
}

static int get_set(rcur *r, member *set, uint32_t *n_out, const char **why)
{
    uint32_t n = get_u8(r);
    if (n > MEMBERSHIP_MAX) {
        *why = "membership: more than MEMBERSHIP_MAX members in a set";
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        set[i].node_id = get_u64(r);
        uint32_t len = get_u8(r);
        if (len > MEMBER_ADDR_MAX) {
            *why = "membership: member address longer than MEMBER_ADDR_MAX";
            return -1;
        }
        const uint8_t *a = get_bytes(r, len);
        if (a == NULL)
            break;
        if (memchr(a, '\0', len) != NULL) {
            *why = "membership: member address has a NUL byte";
            return -1;
        }
        memcpy(set[i].addr, a, len);
        set[i].addr[len] = '\0';
    }
    if (cut_short(r, "membership: message too short", why))
        return -1;
    *n_out = n;
    return 0;
}

static int get_membership(rcur *r, membership *m, const char **why)
{
    memset(m, 0, sizeof *m);
    m->generation = get_u32(r);
    if (get_set(r, m->members, &m->n_members, why) != 0 ||
        get_set(r, m->new_members, &m->n_new_members, why) != 0)
        return -1;
    const char *bad = membership_check(m);
    if (bad) {
        *why = bad;
        return -1;
    }
    return 0;
}

/* ---- Validation shared by encoders and decoders ------------------------ */

static bool seg_size_ok(uint32_t s)
{
    return s >= (1u << 20) && s <= (1u << 30) && (s & (s - 1)) == 0;
}

static const char *check_greeting(const proposer_greeting *g)
{
    if (g->proto_version != WALPUSH_PROTO_VERSION)
        return "ProposerGreeting: unsupported protocol version";
    if (!seg_size_ok(g->wal_seg_size))
        return "ProposerGreeting: wal_seg_size is not a power of two in 1 MB .. 1 GB";
    return membership_check(&g->mconf);
}

static const char *check_append(const append_request *a)
{
    if (a->end_lsn < a->begin_lsn)
        return "AppendRequest: end_lsn below begin_lsn";
    if (a->end_lsn - a->begin_lsn > WALPUSH_MAX_APPEND)
        return "AppendRequest: more than WALPUSH_MAX_APPEND bytes of WAL";
    if (a->end_lsn - a->begin_lsn != a->wal_len)
        return "AppendRequest: wal length does not match end_lsn - begin_lsn";
    return NULL;
}

/* ---- Proposer -> acceptor ---------------------------------------------- */

size_t walpush_encode_proposer_msg(const proposer_msg *msg, uint8_t *buf, size_t cap)
{
    wcur w = {.buf = buf, .cap = cap};

    switch (msg->kind) {
    case PMSG_GREETING: {
        const proposer_greeting *g = &msg->u.greeting;
        if (check_greeting(g))
            return 0;
        put_u8(&w, WALPUSH_TAG_GREETING);
        put_u32(&w, g->proto_version);
        put_bytes(&w, g->tenant_id.b, STRATA_ID_LEN);
        put_bytes(&w, g->timeline_id.b, STRATA_ID_LEN);
        put_u32(&w, g->pg_version);
        put_u64(&w, g->system_id);
        put_u32(&w, g->wal_seg_size);
        put_membership(&w, &g->mconf);
        break;
    }
    case PMSG_VOTE_REQUEST:
        put_u8(&w, WALPUSH_TAG_VOTE);
        put_u64(&w, msg->u.vote.term);
        put_u32(&w, msg->u.vote.generation);
        break;
    case PMSG_ELECTED: {
        const proposer_elected *e = &msg->u.elected;
        if (!term_history_valid(&e->history))
            return 0;
        put_u8(&w, WALPUSH_TAG_ELECTED);
        put_u64(&w, e->term);
        put_u32(&w, e->generation);
        put_u64(&w, e->start_streaming_at);
        put_history(&w, &e->history);
        break;
    }
    case PMSG_APPEND: {
        const append_request *a = &msg->u.append;
        if (check_append(a) || (a->wal_len > 0 && a->wal == NULL))
            return 0;
        put_u8(&w, WALPUSH_TAG_APPEND);
        put_u64(&w, a->term);
        put_u32(&w, a->generation);
        put_u64(&w, a->begin_lsn);
        put_u64(&w, a->end_lsn);
        put_u64(&w, a->commit_lsn);
        put_u64(&w, a->truncate_lsn);
        put_u64(&w, a->ps_feedback.last_received_lsn);
        put_u64(&w, a->ps_feedback.disk_consistent_lsn);
        put_u64(&w, a->ps_feedback.remote_consistent_lsn);
        if (a->wal_len > 0)
            put_bytes(&w, a->wal, a->wal_len);
        break;
    }
    default:
        return 0;
    }
    return w.overflow ? 0 : w.len;
}

int walpush_decode_proposer_msg(const uint8_t *buf, size_t len, proposer_msg *out, const char **why)
{
    rcur r = {.buf = buf, .len = len};
    uint8_t tag;
    if (decode_begin(&r, &tag, why) != 0)
        return -1;
    memset(out, 0, sizeof(*out));

    switch (tag) {
    case WALPUSH_TAG_GREETING: {
        proposer_greeting *g = &out->u.greeting;
        out->kind = PMSG_GREETING;
        g->proto_version = get_u32(&r);
        const uint8_t *t = get_bytes(&r, STRATA_ID_LEN);
        const uint8_t *tl = get_bytes(&r, STRATA_ID_LEN);
        g->pg_version = get_u32(&r);
        g->system_id = get_u64(&r);
        g->wal_seg_size = get_u32(&r);
        if (cut_short(&r, "ProposerGreeting: message too short", why))
            return -1;
        if (get_membership(&r, &g->mconf, why) != 0)
            return -1;
        memcpy(g->tenant_id.b, t, STRATA_ID_LEN);
        memcpy(g->timeline_id.b, tl, STRATA_ID_LEN);
        const char *bad = check_greeting(g);
        if (bad) {
            *why = bad;
            return -1;
        }
        break;
    }
    case WALPUSH_TAG_VOTE:
        out->kind = PMSG_VOTE_REQUEST;
        out->u.vote.term = get_u64(&r);
        out->u.vote.generation = get_u32(&r);
        if (cut_short(&r, "VoteRequest: message too short", why))
            return -1;
        break;
    case WALPUSH_TAG_ELECTED: {
        proposer_elected *e = &out->u.elected;
        out->kind = PMSG_ELECTED;
        e->term = get_u64(&r);
        e->generation = get_u32(&r);
        e->start_streaming_at = get_u64(&r);
        if (cut_short(&r, "ProposerElected: message too short", why))
            return -1;
        if (get_history(&r, &e->history, why) != 0)
            return -1;
        break;
    }
    case WALPUSH_TAG_APPEND: {
        append_request *a = &out->u.append;
        out->kind = PMSG_APPEND;
        a->term = get_u64(&r);
        a->generation = get_u32(&r);
        a->begin_lsn = get_u64(&r);
        a->end_lsn = get_u64(&r);
        a->commit_lsn = get_u64(&r);
        a->truncate_lsn = get_u64(&r);
        a->ps_feedback.last_received_lsn = get_u64(&r);
        a->ps_feedback.disk_consistent_lsn = get_u64(&r);
        a->ps_feedback.remote_consistent_lsn = get_u64(&r);
        if (cut_short(&r, "AppendRequest: message too short", why))
            return -1;
        size_t rest = r.len - r.pos;
        if (rest > WALPUSH_MAX_APPEND) {
            *why = "AppendRequest: more than WALPUSH_MAX_APPEND bytes of WAL";
            return -1;
        }
        a->wal_len = (uint32_t)rest;
        a->wal = rest > 0 ? get_bytes(&r, rest) : NULL;
        const char *bad = check_append(a);
        if (bad) {
            *why = bad;
            return -1;
        }
        break;
    }
    default:
        *why = "unknown message tag from proposer";
        return -1;
    }
    return decode_end(&r, why);
}

/* ---- Acceptor -> proposer ---------------------------------------------- */

size_t walpush_encode_acceptor_msg(const acceptor_msg *msg, uint8_t *buf, size_t cap)
{
    wcur w = {.buf = buf, .cap = cap};

    switch (msg->kind) {
    case AMSG_GREETING:
        put_u8(&w, WALPUSH_TAG_GREETING);
        put_u64(&w, msg->u.greeting.node_id);
        put_u64(&w, msg->u.greeting.term);
        if (membership_check(&msg->u.greeting.mconf))
            return 0;
        put_membership(&w, &msg->u.greeting.mconf);
        break;
    case AMSG_VOTE_RESPONSE: {
        const vote_response *v = &msg->u.vote;
        if (!term_history_valid(&v->history))
            return 0;
        put_u8(&w, WALPUSH_TAG_VOTE);
        put_u64(&w, v->term);
        put_u8(&w, v->vote_given ? 1 : 0);
        put_u64(&w, v->flush_lsn);
        put_u64(&w, v->truncate_lsn);
        put_history(&w, &v->history);
        break;
    }
    case AMSG_APPEND_RESPONSE: {
        const append_response *a = &msg->u.append;
        put_u8(&w, WALPUSH_TAG_APPEND);
        put_u64(&w, a->term);
        put_u64(&w, a->flush_lsn);
        put_u64(&w, a->commit_lsn);
        put_u64(&w, a->ps_feedback.last_received_lsn);
        put_u64(&w, a->ps_feedback.disk_consistent_lsn);
        put_u64(&w, a->ps_feedback.remote_consistent_lsn);
        break;
    }
    default:
        return 0;
    }
    return w.overflow ? 0 : w.len;
}

int walpush_decode_acceptor_msg(const uint8_t *buf, size_t len, acceptor_msg *out, const char **why)
{
    rcur r = {.buf = buf, .len = len};
    uint8_t tag;
    if (decode_begin(&r, &tag, why) != 0)
        return -1;
    memset(out, 0, sizeof(*out));

    switch (tag) {
    case WALPUSH_TAG_GREETING:
        out->kind = AMSG_GREETING;
        out->u.greeting.node_id = get_u64(&r);
        out->u.greeting.term = get_u64(&r);
        if (cut_short(&r, "AcceptorGreeting: message too short", why))
            return -1;
        if (get_membership(&r, &out->u.greeting.mconf, why) != 0)
            return -1;
        break;
    case WALPUSH_TAG_VOTE: {
        vote_response *v = &out->u.vote;
        out->kind = AMSG_VOTE_RESPONSE;
        v->term = get_u64(&r);
        uint8_t given = get_u8(&r);
        v->flush_lsn = get_u64(&r);
        v->truncate_lsn = get_u64(&r);
        if (cut_short(&r, "VoteResponse: message too short", why))
            return -1;
        if (given > 1) {
            *why = "VoteResponse: vote_given is neither 0 nor 1";
            return -1;
        }
        v->vote_given = given == 1;
        if (get_history(&r, &v->history, why) != 0)
            return -1;
        break;
    }
    case WALPUSH_TAG_APPEND: {
        append_response *a = &out->u.append;
        out->kind = AMSG_APPEND_RESPONSE;
        a->term = get_u64(&r);
        a->flush_lsn = get_u64(&r);
        a->commit_lsn = get_u64(&r);
        a->ps_feedback.last_received_lsn = get_u64(&r);
        a->ps_feedback.disk_consistent_lsn = get_u64(&r);
        a->ps_feedback.remote_consistent_lsn = get_u64(&r);
        if (cut_short(&r, "AppendResponse: message too short", why))
            return -1;
        break;
    }
    default:
        *why = "unknown message tag from acceptor";
        return -1;
    }
    return decode_end(&r, why);
}
