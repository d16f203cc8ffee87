/*
 * control_file.h: the safekeeper's per-timeline control file.
 *
 * Holds the acceptor's persistent state (acceptor_persistent_state: ids,
 * server info, term, term history, timeline start, flush/commit/truncate
 * LSNs, pageserver feedback, safekeeper configuration, WAL backup LSN) in
 * an explicit
 * little-endian layout:
 *
 *     magic u32 | format version u32 | body length u32 | body | CRC-32C u32
 *
 * The CRC covers everything before it.  The file is replaced atomically
 * through common/base/durable.h (temp, fsync, rename, fsync dir), so a crash
 * leaves the old or the new content.  Loading is strict: bad magic, an
 * unknown version, a wrong length, a bad CRC or an impossible value is an
 * error that names the problem; nothing is guessed.
 *
 * Not for: WAL (wal_store.h) or deciding what to persist when (acceptor.h).
 * Pure encode/decode plus two file functions; no state.
 */
#ifndef STRATA_SAFEKEEPER_CONTROL_FILE_H
#define STRATA_SAFEKEEPER_CONTROL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "safekeeper/acceptor.h"

#define CONTROL_FILE_NAME "safekeeper.control"
#define CONTROL_FILE_MAGIC 0x53544B43u /* "STKC" */
/* Version 2 added the configuration (membership) after the term history;
 * a version 1 file reads as generation 0.  Version 3 added the WAL backup
 * LSN (u64) after the configuration; versions 1 and 2 read it as 0. */
#define CONTROL_FILE_VERSION 3u
/* One member: u64 node id, a NUL-padded address field. */
#define CONTROL_FILE_MEMBER_SIZE (8 + MEMBER_ADDR_MAX + 1)
/* Largest valid file: header, body with a full term history, CRC. */
#define CONTROL_FILE_MAX_SIZE                                                                      \
    (12 + 124 + 16 * TERM_HISTORY_MAX + 12 + 2 * MEMBERSHIP_MAX * CONTROL_FILE_MEMBER_SIZE + 8 + 4)

/* Encodes st into buf; returns the length, or 0 if cap is too small or st
 * is not encodable (history longer than TERM_HISTORY_MAX). */
size_t control_file_encode(const acceptor_persistent_state *st, uint8_t *buf, size_t cap);

/* Decodes and validates; returns 0, or -1 with a message in err. */
int control_file_decode(const uint8_t *buf, size_t len, acceptor_persistent_state *out, char *err,
                        size_t errlen);

/* Durably replaces <dir>/safekeeper.control.  0 or a negative errno. */
int control_file_write(const char *dir, const acceptor_persistent_state *st);

/* Loads <dir>/safekeeper.control.  0; -ENOENT if there is none; -EINVAL
 * (corrupt, message in err) or another negative errno (message in err). */
int control_file_read(const char *dir, acceptor_persistent_state *out, char *err, size_t errlen);

#endif
