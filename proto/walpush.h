/*
 * walpush.h: the WAL-push protocol between the walproposer (Paxos proposer)
 * and the safekeepers (acceptors), docs/design.md §3.2.
 *
 * Each message is one CopyData payload: a one-byte tag, then big-endian
 * fields.  Decoders validate lengths and ranges before trusting a byte and
 * allocate nothing: variable parts (the WAL bytes of an AppendRequest) point
 * into the caller's input buffer, which must outlive the decoded struct.
 * Encoders write into a caller-provided buffer and return the length, or 0
 * when the buffer is too small or the message is invalid.
 *
 * The direction matters for decoding: tag 'g' is a ProposerGreeting from the
 * proposer and an AcceptorGreeting from an acceptor, so there is one decode
 * function per direction.
 */
#ifndef STRATA_PROTO_WALPUSH_H
#define STRATA_PROTO_WALPUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"

/* Sent in ProposerGreeting and in START_WAL_PUSH (proto_version '3').
 * 3: AppendRequest carries the pageserver feedback the proposer learned. */
#define WALPUSH_PROTO_VERSION 3

/* Most WAL bytes one AppendRequest may carry. */
#define WALPUSH_MAX_APPEND (128 * 1024)

/* Most entries a term history may hold; a longer one is a protocol error. */
#define TERM_HISTORY_MAX 256

/* Largest encoded message: an AppendRequest with a full payload. */
#define WALPUSH_MAX_MESSAGE (WALPUSH_MAX_APPEND + 128) /* header: 69 bytes */

/* Membership: most members in one set of a configuration, and the longest
 * member address ("host:port" of its WAL-push port, without the NUL). */
#define MEMBERSHIP_MAX 7
#define MEMBER_ADDR_MAX 63

#define WALPUSH_TAG_GREETING 'g'
#define WALPUSH_TAG_VOTE 'v'
#define WALPUSH_TAG_ELECTED 'e'
#define WALPUSH_TAG_APPEND 'a'

/* The term that wrote WAL from lsn on (until the next entry's lsn). */
typedef struct term_switch {
    uint64_t term;
    lsn_t lsn;
} term_switch;

/* Entries in strictly increasing term order, lsn non-decreasing. */
typedef struct term_history {
    uint32_t n;
    term_switch entries[TERM_HISTORY_MAX];
} term_history;

/* One safekeeper of a configuration. */
typedef struct member {
    uint64_t node_id; /* > 0, unique within a set */
    char addr[MEMBER_ADDR_MAX + 1];
} member;

/*
 * A timeline's safekeeper configuration.  Generation 0 means "none known":
 * the proposer's own list of safekeepers is the configuration and every node
 * counts (how a cluster starts).  From generation 1 on, only members count:
 * an election or a commit needs a majority of members and, while new_members
 * is not empty (a joint configuration, during a membership change), also a
 * majority of new_members.  A safekeeper that is in neither set neither votes
 * nor accepts WAL.  Generations only grow.
 */
typedef struct membership {
    uint32_t generation;
    uint32_t n_members; /* 0 only in generation 0 */
    member members[MEMBERSHIP_MAX];
    uint32_t n_new_members; /* > 0: joint configuration */
    member new_members[MEMBERSHIP_MAX];
} membership;

/* True if node_id is in members or new_members. */
bool membership_contains(const membership *m, uint64_t node_id);

/* NULL if m is well-formed (see above; addresses are printable, non-empty
 * and NUL-terminated, node ids unique within a set), else what is wrong. */
const char *membership_check(const membership *m);

/* True if a and b are the same configuration. */
bool membership_equal(const membership *a, const membership *b);

/*
 * Text form of one set, as operators and the CLI write it:
 * "id@host:port,id@host:port" (empty string: no members).  Parse returns 0,
 * or -1 with *why; format returns the length written (cap > 0; the text is
 * cut at cap - 1 bytes, which MEMBERSHIP_TEXT_MAX always fits).
 */
#define MEMBERSHIP_TEXT_MAX (MEMBERSHIP_MAX * (20 + 1 + MEMBER_ADDR_MAX + 1) + 1)
int membership_parse_set(const char *text, member *set, uint32_t *n, const char **why);
size_t membership_format_set(const member *set, uint32_t n, char *buf, size_t cap);

/* The union of both sets, members first, each node once: the proposer's
 * acceptor slots.  Returns the count (at most 2 * MEMBERSHIP_MAX). */
int membership_union(const membership *m, member *out);

typedef struct proposer_greeting {
    uint32_t proto_version;
    strata_id tenant_id;
    strata_id timeline_id;
    uint32_t pg_version;   /* e.g. 150020 */
    uint64_t system_id;    /* 0 from sync-safekeepers: not checked */
    uint32_t wal_seg_size; /* a power of two, 1 MB .. 1 GB */
    membership mconf;      /* the proposer's; an acceptor adopts a newer one */
} proposer_greeting;

typedef struct acceptor_greeting {
    uint64_t node_id;
    uint64_t term;    /* highest term this acceptor has voted for */
    membership mconf; /* the acceptor's (after adopting the proposer's) */
} acceptor_greeting;

/* VoteRequest, ProposerElected and AppendRequest carry the generation of
 * the proposer's configuration; an acceptor whose generation differs
 * refuses them (the proposer reconnects and learns the newer one). */
typedef struct vote_request {
    uint64_t term;
    uint32_t generation;
} vote_request;

typedef struct vote_response {
    uint64_t term; /* the acceptor's term after handling the request */
    bool vote_given;
    lsn_t flush_lsn;
    lsn_t truncate_lsn;
    term_history history;
} vote_response;

typedef struct proposer_elected {
    uint64_t term;
    uint32_t generation;
    lsn_t start_streaming_at;
    term_history history; /* the proposer's */
} proposer_elected;

/* What the pageserver last told a safekeeper (0 while none has). */
typedef struct pageserver_feedback {
    lsn_t last_received_lsn;
    lsn_t disk_consistent_lsn;
    lsn_t remote_consistent_lsn;
} pageserver_feedback;

typedef struct append_request {
    uint64_t term;
    uint32_t generation;
    lsn_t begin_lsn;
    lsn_t end_lsn; /* end_lsn - begin_lsn == wal_len; equal for a heartbeat */
    lsn_t commit_lsn;
    lsn_t truncate_lsn;
    /* The highest feedback any acceptor reported to this proposer: how the
     * pageserver's position, heard by one safekeeper, reaches the others. */
    pageserver_feedback ps_feedback;
    const uint8_t *wal; /* points into the decoded buffer */
    uint32_t wal_len;
} append_request;

typedef struct append_response {
    uint64_t term;
    lsn_t flush_lsn;
    lsn_t commit_lsn;
    pageserver_feedback ps_feedback;
} append_response;

/* Messages from the proposer, tagged by kind. */
typedef enum proposer_msg_kind {
    PMSG_GREETING = 1,
    PMSG_VOTE_REQUEST,
    PMSG_ELECTED,
    PMSG_APPEND,
} proposer_msg_kind;

typedef struct proposer_msg {
    proposer_msg_kind kind;
    union {
        proposer_greeting greeting;
        vote_request vote;
        proposer_elected elected;
        append_request append;
    } u;
} proposer_msg;

/* Messages from an acceptor, tagged by kind. */
typedef enum acceptor_msg_kind {
    AMSG_GREETING = 1,
    AMSG_VOTE_RESPONSE,
    AMSG_APPEND_RESPONSE,
} acceptor_msg_kind;

typedef struct acceptor_msg {
    acceptor_msg_kind kind;
    union {
        acceptor_greeting greeting;
        vote_response vote;
        append_response append;
    } u;
} acceptor_msg;

/*
 * Decoders return 0 on success, or -1 with a human-readable reason (a static
 * string naming what was wrong, e.g. "AppendRequest: wal length 9 does not
 * match end_lsn - begin_lsn 8") stored in *why.
 */
int walpush_decode_proposer_msg(const uint8_t *buf, size_t len, proposer_msg *out,
                                const char **why);
int walpush_decode_acceptor_msg(const uint8_t *buf, size_t len, acceptor_msg *out,
                                const char **why);

/* Encoders return the number of bytes written, or 0 if cap is too small or
 * the message is invalid (e.g. wal_len over WALPUSH_MAX_APPEND). */
size_t walpush_encode_proposer_msg(const proposer_msg *msg, uint8_t *buf, size_t cap);
size_t walpush_encode_acceptor_msg(const acceptor_msg *msg, uint8_t *buf, size_t cap);

/* Term history helpers (pure). */

/* The term of the last entry whose lsn <= flush_lsn, or 0 if none. */
uint64_t term_history_last_log_term(const term_history *h, lsn_t flush_lsn);

/* True if entries are strictly increasing in term, non-decreasing in lsn. */
bool term_history_valid(const term_history *h);

#endif
