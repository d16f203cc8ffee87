/*
 * proposer.h: the walproposer's Paxos proposer, as a pure state machine
 * (docs/design.md §4).
 *
 * For: everything the walproposer decides -- collecting greetings, picking a
 * term, counting votes, choosing the donor and the term start, computing
 * where each acceptor's streaming starts, what to append next to whom, the
 * commit LSN, heartbeats, timeouts, fencing, and sync-safekeepers
 * completion.  The same code runs in the Postgres background worker, in
 * `strata sync-safekeepers`, and in the simulator (tests/sim).
 *
 * Not for: IO.  No sockets, no clock (time comes in through
 * proposer_tick()), no allocation, no WAL reading.  libc only, so it
 * compiles into strata.so.  Every input returns an ordered list of effects in
 * a proposer_output that the edge executes in order:
 *
 *   PROP_SEND        encode and send *msg to acceptor i (greeting, vote
 *                    request, ProposerElected).
 *   PROP_APPEND      send an AppendRequest to acceptor i with the given
 *                    term/begin/end/commit/truncate; the edge fills in the
 *                    WAL bytes [begin, end) from its WAL source.  begin ==
 *                    end is a heartbeat.  The core only names ranges below
 *                    the last proposer_wal_available() end.
 *   PROP_DISCONNECT  close the connection to acceptor i (timeout or protocol
 *                    violation); the core already treats it as disconnected.
 *                    The edge reconnects later (its own backoff) and calls
 *                    proposer_connected().
 *   PROP_ELECTED     we won term `term`; the term starts at term_start_lsn;
 *                    the WAL source must be able to serve from
 *                    start_streaming_at (lowest start among voters) -- in
 *                    sync-safekeepers mode it is the donor's WAL, fetched
 *                    from acceptor `donor`, up to term_start_lsn.
 *   PROP_COMMIT_ADVANCED  commit_lsn moved forward (a majority has it
 *                    durably); the edge reports it as flush in its standby
 *                    status update.
 *   PROP_FENCED      another proposer has a higher term, or the election is
 *                    lost: stop (a compute must shut down).  reason says why.
 *   PROP_SYNC_DONE   sync-safekeepers mode: lsn is the synced end of WAL;
 *                    print it and exit.
 *   PROP_RECONFIGURE an acceptor holds a newer safekeeper configuration
 *                    (*mconf): the edge closes every connection and starts
 *                    a new proposer whose acceptors are that
 *                    configuration's (membership_union order), with
 *                    cfg.mconf set to it.  The new proposer runs a new
 *                    election; nothing committed is lost.
 *
 * Configurations (proto/walpush.h, membership): with cfg.mconf.generation 0
 * the n_acceptors given are the configuration and a majority of them is a
 * quorum.  From generation 1 on, acceptor slot i is node
 * membership_union(&cfg.mconf)[i]; a greeting from another node id is a
 * violation; a quorum (for the election and for commit) is a majority of
 * members and, in a joint configuration, also a majority of new_members.
 *
 * After FENCED, SYNC_DONE or RECONFIGURE the core ignores all further input.
 *
 * Threading: none; one thread at a time.
 */
#ifndef STRATA_WALPROPOSER_PROPOSER_H
#define STRATA_WALPROPOSER_PROPOSER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/lsn.h"
#include "proto/walpush.h"

/* Both sets of a joint configuration. */
#define PROPOSER_MAX_ACCEPTORS (2 * MEMBERSHIP_MAX)

typedef struct proposer_config {
    /* 1..MEMBERSHIP_MAX in generation 0 (majority = n/2 + 1); else the
     * size of membership_union(&mconf). */
    int n_acceptors;
    membership mconf; /* generation 0: the n_acceptors given */
    strata_id tenant_id;
    strata_id timeline_id;
    uint32_t pg_version;   /* e.g. 150020 */
    uint64_t system_id;    /* 0 in sync-safekeepers mode */
    uint32_t wal_seg_size; /* power of two, 1 MB .. 1 GB */
    /* Where WAL starts if every voter is empty (a new timeline): a WAL
     * segment start (or page boundary) where the WAL source begins. */
    lsn_t bootstrap_lsn;
    bool sync_safekeepers;
    /* An idle acceptor gets a heartbeat (empty append) this often. */
    uint32_t heartbeat_ms;
    /* An acceptor silent this long while connected is disconnected. */
    uint32_t timeout_ms;
    /* Per acceptor: most WAL bytes sent beyond the last acknowledged point
     * (flush_lsn, or what a later AppendResponse shows it processed). */
    uint32_t max_inflight_bytes;
    /* sync-safekeepers: once a majority holds and has committed the term
     * start, wait this long for the other streaming acceptors to report it
     * too before SYNC_DONE, so that a pageserver reading from any of them
     * finds the WAL committed there (it serves only committed WAL). */
    uint32_t sync_linger_ms;
    /* News-only appends (a new commit_lsn or pageserver feedback for an
     * acceptor with no WAL to send) wait for proposer_send_news() or the
     * next tick instead of going out at once, so that they can ride on the
     * next WAL append.  An edge that sets this calls proposer_send_news()
     * once news has waited as long as it allows. */
    bool defer_news;
} proposer_config;

/* Fills defaults: heartbeat 1 s, timeout 10 s, in-flight 2 MB, sync linger
 * 1 s, news at once. */
void proposer_config_defaults(proposer_config *cfg);

typedef enum proposer_effect_kind {
    PROP_SEND = 1,
    PROP_APPEND,
    PROP_DISCONNECT,
    PROP_ELECTED,
    PROP_COMMIT_ADVANCED,
    PROP_FENCED,
    PROP_SYNC_DONE,
    PROP_RECONFIGURE,
} proposer_effect_kind;

typedef struct proposer_effect {
    proposer_effect_kind kind;
    int acceptor; /* SEND, APPEND, DISCONNECT, RECONFIGURE: index 0..n-1 */
    union {
        /* SEND: valid until the next call into the proposer. */
        const proposer_msg *msg;
        /* APPEND: wal and wal_len are left for the edge to fill. */
        append_request append;
        struct {
            uint64_t term;
            lsn_t term_start_lsn;
            lsn_t start_streaming_at; /* lowest among voters */
            int donor;                /* acceptor index of the donor */
            lsn_t donor_flush_lsn;    /* == term_start_lsn */
            /* Term of the last entry of the donor's history (0 if empty):
             * the term that wrote the WAL this term continues. */
            uint64_t donor_last_term;
        } elected;
        lsn_t commit_lsn;   /* COMMIT_ADVANCED */
        lsn_t sync_lsn;     /* SYNC_DONE */
        const char *reason; /* FENCED: static string */
        /* RECONFIGURE: valid until the next call into the proposer. */
        const membership *mconf;
    } u;
} proposer_effect;

/* Most effects one call can produce; appends beyond that wait for the next
 * call (every call tops the pipelines up again). */
#define PROPOSER_MAX_EFFECTS 128

typedef struct proposer_output {
    int n;
    proposer_effect effects[PROPOSER_MAX_EFFECTS];
} proposer_output;

typedef enum proposer_phase {
    PROPOSER_COLLECTING_TERMS = 1, /* waiting for a majority of greetings */
    PROPOSER_VOTING,               /* vote requests out, waiting for a majority */
    PROPOSER_ELECTED,              /* streaming */
    PROPOSER_SYNC_DONE,
    PROPOSER_FENCED,
    PROPOSER_RECONFIGURE, /* an acceptor knows a newer configuration */
} proposer_phase;

typedef enum proposer_peer_state {
    PEER_DISCONNECTED = 0,
    PEER_GREETING,  /* greeting sent, waiting for the acceptor's */
    PEER_GREETED,   /* greeted, waiting for the term to be chosen */
    PEER_VOTING,    /* vote request sent */
    PEER_VOTED,     /* vote response received, not yet streaming */
    PEER_STREAMING, /* ProposerElected sent; appends flow */
} proposer_peer_state;

/* Per-acceptor state: private to proposer.c. */
typedef struct proposer_peer {
    proposer_peer_state state;
    uint64_t greeting_term;
    bool vote_given;
    vote_response vote; /* valid from PEER_VOTED on */
    lsn_t start_streaming_at;
    lsn_t sent_lsn;   /* end of WAL sent in appends */
    lsn_t flush_lsn;  /* last flush_lsn reported in our term; 0 if none */
    lsn_t commit_lsn; /* last commit_lsn reported in our term */
    lsn_t ack_base;   /* sending window base (see max_inflight_bytes) */
    lsn_t sent_at_last_response;
    lsn_t told_commit;           /* commit_lsn in our last append to it */
    pageserver_feedback told_ps; /* ps_feedback in our last append to it */
    uint64_t last_recv_ms;
    uint64_t last_send_ms;
    proposer_msg msg; /* storage for a PROP_SEND effect */
} proposer_peer;

/* The proposer.  Caller-allocated (large); fields are private. */
typedef struct proposer {
    proposer_config cfg;
    proposer_phase phase;
    uint64_t now_ms;
    uint64_t term;
    lsn_t term_start_lsn;
    term_history history; /* ours, once elected */
    int donor;
    lsn_t wal_end; /* WAL source has [.., wal_end) */
    lsn_t commit_lsn;
    lsn_t truncate_lsn;
    /* Field-wise maximum of the pageserver feedback the acceptors report;
     * relayed in every AppendRequest so that feedback one safekeeper heard
     * from the pageserver reaches the others (their WAL removal). */
    pageserver_feedback ps_feedback;
    uint64_t sync_quorum_ms; /* sync mode: when a majority was synced; 0 before */
    /* Per slot: the node id it must be (0 in generation 0), and whether it
     * counts in members / new_members. */
    uint64_t slot_node[PROPOSER_MAX_ACCEPTORS];
    bool in_members[PROPOSER_MAX_ACCEPTORS];
    bool in_new[PROPOSER_MAX_ACCEPTORS];
    membership learned; /* RECONFIGURE's payload */
    proposer_peer peers[PROPOSER_MAX_ACCEPTORS];
} proposer;

/*
 * Starts a proposer.  Returns 0, or -1 with *why for a bad configuration.
 * Nothing is sent until acceptors are connected.
 */
int proposer_init(proposer *p, const proposer_config *cfg, uint64_t now_ms, const char **why);

/* The connection to acceptor i is up (START_WAL_PUSH answered).  Produces
 * the ProposerGreeting. */
void proposer_connected(proposer *p, int i, proposer_output *out);

/* The connection to acceptor i is gone.  Idempotent. */
void proposer_disconnected(proposer *p, int i, proposer_output *out);

/*
 * A decoded message from acceptor i.  Returns 0, or -1 if the message makes
 * no sense in its connection's state (out then holds PROP_DISCONNECT for i);
 * a refusal with a higher term is not an error: it produces PROP_FENCED.
 */
int proposer_handle_message(proposer *p, int i, const acceptor_msg *msg, proposer_output *out);

/* Time passes: heartbeats and timeouts.  now_ms is monotonic. */
void proposer_tick(proposer *p, uint64_t now_ms, proposer_output *out);

/* The WAL source now holds WAL up to end_lsn (monotonic). */
void proposer_wal_available(proposer *p, lsn_t end_lsn, proposer_output *out);

/* cfg.defer_news: whether a streaming acceptor has news not yet sent. */
bool proposer_news_pending(const proposer *p);

/* cfg.defer_news: sends the news that waits (an empty append each). */
void proposer_send_news(proposer *p, proposer_output *out);

/* Read-only views. */
proposer_phase proposer_get_phase(const proposer *p);
uint64_t proposer_term(const proposer *p);
lsn_t proposer_term_start_lsn(const proposer *p);
lsn_t proposer_commit_lsn(const proposer *p);
/* Our term history; valid once elected. */
const term_history *proposer_history(const proposer *p);

#endif
