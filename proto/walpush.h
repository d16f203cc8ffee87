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
 *
 * For: the message structs and limits both sides share, and their codec.
 * Not for: the rules of term histories and configurations (term_history.h,
 * membership.h) or what a message means (the acceptor and the proposer).
 */
#ifndef STRATA_PROTO_WALPUSH_H
#define STRATA_PROTO_WALPUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "proto/membership.h"
#include "proto/term_history.h"

/* Sent in ProposerGreeting and in START_WAL_PUSH (proto_version '3').
 * 3: AppendRequest carries the pageserver feedback the proposer learned. */
#define WALPUSH_PROTO_VERSION 3

/* Most WAL bytes one AppendRequest may carry. */
#define WALPUSH_MAX_APPEND (128 * 1024)

/* Largest encoded message: an AppendRequest with a full payload. */
#define WALPUSH_MAX_MESSAGE (WALPUSH_MAX_APPEND + 128) /* header: 69 bytes */

#define WALPUSH_TAG_GREETING 'g'
#define WALPUSH_TAG_VOTE 'v'
#define WALPUSH_TAG_ELECTED 'e'
#define WALPUSH_TAG_APPEND 'a'

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

#endif
