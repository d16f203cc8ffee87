/*
 * sk_control.h: the safekeeper's per-timeline control file format,
 * <datadir>/<tenant>/<timeline>/safekeeper.control.
 *
 * Holds the acceptor's persistent state (sk_control_state: ids, server
 * info, term, term history, timeline start, flush/commit/truncate LSNs,
 * pageserver feedback, safekeeper configuration, WAL backup LSN) in an
 * explicit little-endian layout:
 *
 *     magic u32 | format version u32 | body length u32 | body | CRC-32C u32
 *
 * The CRC covers everything before it.  The file is replaced atomically
 * through common/base/durable.h (temp, fsync, rename, fsync dir), so a crash
 * leaves the old or the new content.  Loading is strict: bad magic, an
 * unknown version, a wrong length, a bad CRC or an impossible value is an
 * error that names the problem; nothing is guessed.
 *
 * For: everyone who reads or writes the file -- the safekeeper (node.c,
 * timeline.c, housekeeping.c) and the CLI, which writes one for the copy
 * of a timeline it makes (`strata safekeeper replace`, `recover`).
 * Not for: WAL (safekeeper/wal_store.h) or deciding what to persist when
 * (safekeeper/acceptor.h).
 * Pure encode/decode plus two file functions (common/base/durable.h); no
 * state.
 */
#ifndef STRATA_PROTO_SK_CONTROL_H
#define STRATA_PROTO_SK_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "proto/membership.h"
#include "proto/term_history.h"
#include "proto/walpush.h" /* pageserver_feedback */

/*
 * What the control file holds: the safekeeper acceptor's persistent state
 * for one timeline (safekeeper/acceptor.h names it acceptor_persistent_state
 * and says when it is written).  Zero-initialised fields mean "not yet
 * known".
 */
typedef struct sk_control_state {
    strata_id tenant_id;
    strata_id timeline_id;
    /* Server info, set by the first ProposerGreeting on an empty timeline. */
    uint32_t pg_version;   /* e.g. 150020; only the major (/10000) is compared */
    uint64_t system_id;    /* informational; 0 is never compared */
    uint32_t wal_seg_size; /* 0 until the first greeting */
    uint64_t node_id;
    /* Highest term voted for (or whose ProposerElected was accepted). */
    uint64_t term;
    /* History of the WAL this acceptor holds: the last accepted proposer's. */
    term_history history;
    /* First LSN this acceptor holds WAL for; 0 while it holds none. */
    lsn_t timeline_start_lsn;
    /* Informational: flush position when this snapshot was taken.  The real
     * end of WAL is found on restart by scanning (acceptor_restore). */
    lsn_t flush_lsn;
    /* Highest commit_lsn a proposer told us; stored lazily, may lag. */
    lsn_t commit_lsn;
    /* Peer horizon: lowest WAL any acceptor may still need (from proposer). */
    lsn_t truncate_lsn;
    pageserver_feedback ps_feedback;
    /* The timeline's safekeeper configuration (generation 0: none known).
     * Only grows, and only with ACCEPTOR_ADMIN authority: an admin's
     * greeting or acceptor_switch_membership. */
    membership mconf;
    /* WAL backup (safekeeper/wal_backup.h): every segment below it is in
     * the object store.  0 while nothing is known to be there.  The core
     * only keeps it; the edge moves it (acceptor_set_backup_lsn). */
    lsn_t backup_lsn;
} sk_control_state;

#define SK_CONTROL_FILE_NAME "safekeeper.control"
#define SK_CONTROL_MAGIC 0x53544B43u /* "STKC" */
/* Version 2 added the configuration (membership) after the term history;
 * a version 1 file reads as generation 0.  Version 3 added the WAL backup
 * LSN (u64) after the configuration; versions 1 and 2 read it as 0. */
#define SK_CONTROL_VERSION 3u
/* One member: u64 node id, a NUL-padded address field. */
#define SK_CONTROL_MEMBER_SIZE (8 + MEMBER_ADDR_MAX + 1)
/* Largest valid file: header, body with a full term history, CRC. */
#define SK_CONTROL_MAX_SIZE                                                                        \
    (12 + 124 + 16 * TERM_HISTORY_MAX + 12 + 2 * MEMBERSHIP_MAX * SK_CONTROL_MEMBER_SIZE + 8 + 4)

/* Encodes st into buf; returns the length, or 0 if cap is too small or st
 * is not encodable (history longer than TERM_HISTORY_MAX). */
size_t sk_control_encode(const sk_control_state *st, uint8_t *buf, size_t cap);

/* Decodes and validates; returns 0, or -1 with a message in err. */
int sk_control_decode(const uint8_t *buf, size_t len, sk_control_state *out, char *err,
                      size_t errlen);

/* Durably replaces <dir>/safekeeper.control.  0 or a negative errno. */
int sk_control_write(const char *dir, const sk_control_state *st);

/* Loads <dir>/safekeeper.control.  0; -ENOENT if there is none; -EINVAL
 * (corrupt, message in err) or another negative errno (message in err). */
int sk_control_read(const char *dir, sk_control_state *out, char *err, size_t errlen);

#endif
