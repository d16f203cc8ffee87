/*
 * acceptor.h: the safekeeper's Paxos acceptor for one timeline, as a pure
 * state machine (docs/design.md §4 and §5).
 *
 * For: deciding what a safekeeper does with each WAL-push message from a
 * proposer and with each completed disk flush -- votes, truncation of
 * divergent WAL, appends, group commit, the flush position it reports.  The
 * same code runs in the daemon (safekeeper/ edge with libuv and io_uring) and
 * in the deterministic simulator (tests/sim).
 *
 * Not for: IO of any kind.  The core never touches a file, socket or clock
 * and never allocates.  Every call returns an ordered list of effects in an
 * acceptor_output; the edge executes them IN ORDER, each one completing
 * (durably, where the effect says so) before the next starts, and only then
 * feeds the core its next input.  If the process dies in the middle of an
 * output, restart goes through acceptor_restore(): the effect order was
 * chosen so that any prefix of an output leaves durable state safe.
 *
 * Connections: the core is per timeline, not per connection.  SEND effects
 * produced by acceptor_handle_message() go to the connection that sent the
 * message.  SEND effects produced by acceptor_flush_done() are
 * AppendResponses for earlier appends and go to the "streaming" connection:
 * the one whose most recent acceptor_handle_message() returned with
 * out->append_accepted set.  If that connection is gone, drop them.
 *
 * Group commit (the edge's side): at most one fdatasync of the WAL in flight
 * at a time.  Whenever none is running and acceptor_flush_wanted() is true,
 * call acceptor_flush_begin(), start one fdatasync covering everything
 * written so far, and when it completes call acceptor_flush_done() and
 * execute its output.  Never wait on a timer to start one.
 *
 * Threading: none.  One acceptor is used by one thread at a time.
 */
#ifndef STRATA_SAFEKEEPER_ACCEPTOR_H
#define STRATA_SAFEKEEPER_ACCEPTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "base/lsn.h"
#include "pg/walformat.h"
#include "proto/sk_control.h"
#include "proto/walpush.h"

/*
 * What the control file holds (proto/sk_control.h has the fields and the
 * layout).  Written whole by PERSIST_CONTROL (the edge replaces the file
 * atomically: temp file, fsync, rename, fsync dir) and read back for
 * acceptor_restore().  Zero-initialised fields mean "not yet known".
 */
typedef sk_control_state acceptor_persistent_state;

typedef enum acceptor_effect_kind {
    /* Write len bytes at lsn into the WAL files.  Not durable yet (the data
     * becomes durable through FLUSH_WAL or a completed group-commit flush).
     * data points into the message buffer passed to
     * acceptor_handle_message(); keep that buffer alive until the output has
     * been executed. */
    ACC_WRITE_WAL = 1,
    /* Remove all WAL at and after lsn, durably: when the effect completes, no
     * byte at or after lsn may survive a crash.  The new write position is
     * lsn.  Data below lsn keeps whatever durability it had. */
    ACC_TRUNCATE_WAL,
    /* fdatasync every WAL byte written so far, synchronously (needed before a
     * VoteResponse).  An asynchronous group-commit flush may still be in
     * flight; it can simply complete later. */
    ACC_FLUSH_WAL,
    /* Durably replace the control file with out->control. */
    ACC_PERSIST_CONTROL,
    /* Send out->msg (see "Connections" above for where). */
    ACC_SEND,
} acceptor_effect_kind;

typedef struct acceptor_effect {
    acceptor_effect_kind kind;
    lsn_t lsn;           /* WRITE_WAL: where; TRUNCATE_WAL: new end of WAL */
    const uint8_t *data; /* WRITE_WAL only */
    uint32_t len;        /* WRITE_WAL only */
} acceptor_effect;

/*
 * What the connection a message came on may do; the edge knows it from the
 * connection's authentication (docs/design.md §3.8) and passes it in.
 * Changing who counts is the operator's: only ACCEPTOR_ADMIN installs a
 * configuration, whether through a greeting that brings a newer one or
 * through acceptor_switch_membership.  ACCEPTOR_STREAM (a tenant's token:
 * a compute, sync-safekeepers) pushes WAL and learns the configuration from
 * the reply, and may never change it.  Without token authentication the
 * edge passes ACCEPTOR_ADMIN: there the network is trusted, as it is for
 * the WAL removal horizon (§5.5).
 */
typedef enum acceptor_authority {
    ACCEPTOR_STREAM = 1,
    ACCEPTOR_ADMIN,
} acceptor_authority;

/* Most effects one call can produce. */
#define ACCEPTOR_MAX_EFFECTS 8

/*
 * One call's effects.  Owned by the caller (it is large: put it in the
 * connection or the timeline, not on a small stack); every call resets it.
 * At most one PERSIST_CONTROL and one SEND per output, whose payloads live
 * here.
 */
typedef struct acceptor_output {
    int n;
    acceptor_effect effects[ACCEPTOR_MAX_EFFECTS];
    acceptor_persistent_state control; /* payload of ACC_PERSIST_CONTROL */
    acceptor_msg msg;                  /* payload of ACC_SEND */
    /* handle_message only: the message was an append (or heartbeat) of the
     * current term that was accepted; its connection is now the streaming
     * connection. */
    bool append_accepted;
    /* Set when the call returned -1: a static string saying what was wrong,
     * for the ErrorResponse.  The edge then closes that connection. */
    const char *error;
} acceptor_output;

/* Bounded queue of appends written but not yet covered by a completed flush. */
#define ACCEPTOR_PENDING_MAX 64

/*
 * The acceptor.  Caller-allocated; fields are private to acceptor.c (read
 * them through the functions below).
 */
typedef struct acceptor {
    acceptor_persistent_state st; /* in-memory truth; durable copy may lag */
    lsn_t persisted_commit_lsn;   /* commit_lsn in the last PERSIST_CONTROL */
    lsn_t write_lsn;              /* end of WAL written (0: none) */
    lsn_t durable_lsn;            /* end of WAL known fsynced */
    lsn_t flush_lsn;              /* end of last complete record <= durable_lsn */
    wal_tracker tracker;          /* record boundaries of what was written */
    bool tracker_valid;
    bool flush_in_flight;
    lsn_t flush_covers; /* what the in-flight flush covers (clamped by truncation) */
    bool reply_pending; /* appends await an AppendResponse after the next flush */
    /* (write end, last record end at that point) per pending append. */
    int n_pending;
    struct {
        lsn_t write_end;
        lsn_t record_end;
    } pending[ACCEPTOR_PENDING_MAX];
} acceptor;

/*
 * Starts a brand-new, empty timeline (nothing durable yet).  Server info is
 * taken from the first ProposerGreeting.  The edge should persist
 * acceptor_state() once so the timeline exists on disk.
 */
void acceptor_init(acceptor *acc, uint64_t node_id, const strata_id *tenant_id,
                   const strata_id *timeline_id);

/*
 * Restarts from durable state: st is the control file's content and
 * true_end_of_wal the end of the last complete record found by scanning the
 * durable WAL (with a wal_tracker) from a known-good point at or below
 * st->commit_lsn (or from st->timeline_start_lsn).  Bytes after
 * true_end_of_wal are treated as not written: the next append overwrites
 * them.  Returns 0, or -1 with *why if the state is inconsistent (invalid
 * history, end below timeline start, ...).
 */
int acceptor_restore(acceptor *acc, const acceptor_persistent_state *st, lsn_t true_end_of_wal,
                     const char **why);

/*
 * Handles one decoded message from a proposer, sent with authority `auth`.
 * msg (and the buffer its append WAL points into) must stay valid until out
 * has been executed.  Returns 0 with effects in out (possibly none), or -1
 * for a protocol error with out->error set and NO effects: the edge sends an
 * ErrorResponse and closes that connection; the acceptor's state is
 * unchanged.
 *
 * A request of a lower term than ours is not an error: it is refused with a
 * reply carrying our term (the proposer then stops).  A greeting bringing a
 * newer configuration is adopted with ACCEPTOR_ADMIN and refused (-1)
 * otherwise: this acceptor stays where it was until an operator switches it.
 */
int acceptor_handle_message(acceptor *acc, const proposer_msg *msg, acceptor_authority auth,
                            acceptor_output *out);

/*
 * Committed WAL the edge fetched for this acceptor from another source (the
 * WAL backup, docs/design.md §5.7) to close the gap after the current
 * term's ProposerElected: len bytes at begin, which must be the end of WAL
 * written.  Checked like an append (contiguous, valid WAL page headers and
 * records), written with a WRITE_WAL, made durable by the next group-commit
 * flush, for which nobody is answered.  commit_lsn does not move: the
 * proposer tells it, and a newer proposer must stay free to truncate bytes
 * an older one's history labels.  Returns 0 with the effects, or -1 with
 * out->error and no effects.
 */
int acceptor_append_recovered(acceptor *acc, lsn_t begin, const uint8_t *wal, uint32_t len,
                              acceptor_output *out);

/*
 * An AppendRequest the edge refused without handing it to the core (the
 * timeline is at --max-wal-bytes).  If it is of the current term, after its
 * ProposerElected, its commit_lsn and relayed pageserver feedback are taken
 * as an accepted one's would be (stored lazily): they are what lets WAL
 * removal make room.  No effects.
 */
void acceptor_note_refused_append(acceptor *acc, const append_request *a);

/*
 * Switches the timeline to configuration m (the membership-change command).
 * Needs ACCEPTOR_ADMIN.  m must be valid and have a higher generation than
 * ours, or be equal to ours (then nothing happens).  Returns 0 with a
 * PERSIST_CONTROL in out when it switched, or -1 with out->error.  Proposers
 * of an older generation are refused from then on; they reconnect and learn
 * m from the greeting.
 */
int acceptor_switch_membership(acceptor *acc, const membership *m, acceptor_authority auth,
                               acceptor_output *out);

/* True if WAL was written that no completed or in-flight flush covers. */
bool acceptor_flush_wanted(const acceptor *acc);

/*
 * The edge is about to start one fdatasync covering all WAL written so far.
 * Returns the end of WAL it covers.  Only one may be in flight.
 */
lsn_t acceptor_flush_begin(acceptor *acc);

/*
 * The fdatasync started by acceptor_flush_begin() completed.  Advances the
 * flush position to the last complete record it covers and produces the
 * AppendResponse for the appends it covered (and possibly a PERSIST_CONTROL).
 * Always returns 0.
 */
int acceptor_flush_done(acceptor *acc, acceptor_output *out);

/*
 * Records what the pageserver reported (monotonic per field; stored lazily
 * and echoed to the proposer in AppendResponses).  An accepted
 * AppendRequest merges the feedback its proposer relays the same way.
 */
void acceptor_set_pageserver_feedback(acceptor *acc, const pageserver_feedback *fb);

/* Records that the WAL below lsn is in the object store (monotonic;
 * stored lazily like the pageserver feedback). */
void acceptor_set_backup_lsn(acceptor *acc, lsn_t lsn);

/* Read-only views. */
const acceptor_persistent_state *acceptor_state(const acceptor *acc);
uint64_t acceptor_term(const acceptor *acc);
/* End of WAL written (durable or not); 0 while the timeline holds no WAL. */
lsn_t acceptor_write_lsn(const acceptor *acc);
/* End of the last complete WAL record known durable (the reported flush). */
lsn_t acceptor_flush_lsn(const acceptor *acc);
/* End of the last complete WAL record written, durable or not: the flush_lsn
 * a VoteResponse would carry if a vote were asked now (it flushes first). */
lsn_t acceptor_written_record_end(const acceptor *acc);
/* What readers (WAL senders) may serve up to: min(commit_lsn, flush_lsn). */
lsn_t acceptor_commit_lsn(const acceptor *acc);
/* The lowest WAL still needed by peers (proposer's truncate_lsn). */
lsn_t acceptor_truncate_lsn(const acceptor *acc);

#endif
