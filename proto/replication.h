/*
 * replication.h: the CopyData messages of Postgres physical streaming
 * replication (docs/design.md §3.3), one codec for every side that speaks them.
 *
 * Server to client: XLogData 'w' and keepalive 'k'.  Client to server:
 * standby status update 'r', hot-standby feedback 'h', and Strata's
 * pageserver feedback 'z' (tag + last_received, disk_consistent,
 * remote_consistent LSNs).  Big-endian, laid out as in the Postgres
 * protocol documentation ("Streaming Replication Protocol").
 *
 * Users: the safekeeper's walsender (encodes 'w'/'k', decodes 'r'/'h'/'z'),
 * the walproposer and sync-safekeepers (decode 'w'/'k', encode 'r'), the
 * pageserver's WAL receiver.
 *
 * For: one codec for every side of these messages (the users above).
 * Not for: the WAL-push messages (proto/walpush.h) or the replication
 * commands (IDENTIFY_SYSTEM, START_REPLICATION), which are simple queries.
 *
 * Pure, libc only, allocation-free: a decoded XLogData's WAL points into the
 * caller's input buffer, which must outlive the decoded struct.  The encoding
 * is canonical: every message that decodes re-encodes to the same bytes.
 */
#ifndef STRATA_PROTO_REPLICATION_H
#define STRATA_PROTO_REPLICATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "proto/walpush.h" /* pageserver_feedback */

#define REPLICATION_TAG_XLOGDATA 'w'
#define REPLICATION_TAG_KEEPALIVE 'k'
#define REPLICATION_TAG_STATUS_UPDATE 'r'
#define REPLICATION_TAG_HS_FEEDBACK 'h'
#define REPLICATION_TAG_PS_FEEDBACK 'z'

/* Encoded sizes; an XLogData is its header plus the WAL bytes. */
#define REPLICATION_XLOGDATA_HEADER_LEN 25
#define REPLICATION_KEEPALIVE_LEN 18
#define REPLICATION_STATUS_UPDATE_LEN 34
#define REPLICATION_HS_FEEDBACK_LEN 25
#define REPLICATION_PS_FEEDBACK_LEN 25

/* WAL bytes [wal_start, wal_start + data_len) of a sender at wal_end. */
typedef struct replication_xlogdata {
    lsn_t wal_start;
    lsn_t wal_end;
    int64_t send_time; /* microseconds since 2000-01-01 */
    const uint8_t *data;
    size_t data_len;
} replication_xlogdata;

typedef struct replication_keepalive {
    lsn_t wal_end;
    int64_t send_time;
    bool reply_requested;
} replication_keepalive;

typedef struct replication_status_update {
    lsn_t write_lsn;
    lsn_t flush_lsn;
    lsn_t apply_lsn;
    int64_t send_time;
    bool reply_requested;
} replication_status_update;

/* Transaction ids as a standby reports them; 0 means "none". */
typedef struct replication_hs_feedback {
    int64_t send_time;
    uint32_t xmin;
    uint32_t xmin_epoch;
    uint32_t catalog_xmin;
    uint32_t catalog_xmin_epoch;
} replication_hs_feedback;

typedef enum replication_msg_kind {
    REPLICATION_XLOGDATA = 1,
    REPLICATION_KEEPALIVE,
    REPLICATION_STATUS_UPDATE,
    REPLICATION_HS_FEEDBACK,
    REPLICATION_PS_FEEDBACK,
} replication_msg_kind;

typedef struct replication_msg {
    replication_msg_kind kind;
    union {
        replication_xlogdata xlogdata;
        replication_keepalive keepalive;
        replication_status_update status;
        replication_hs_feedback hs_feedback;
        pageserver_feedback ps_feedback;
    } u;
} replication_msg;

/*
 * Decoders return 0 on success, or -1 with a static human-readable reason in
 * *why (e.g. "standby status update: length is not 34 bytes").  The server
 * decoder accepts only 'w' and 'k', the client decoder only 'r', 'h', 'z'.
 * Boolean bytes must be 0 or 1; XLogData may not run past the LSN space.
 */
int replication_decode_server_msg(const uint8_t *buf, size_t len, replication_msg *out,
                                  const char **why);
int replication_decode_client_msg(const uint8_t *buf, size_t len, replication_msg *out,
                                  const char **why);

/*
 * Encodes msg into buf (cap bytes); returns the length, or 0 when cap is too
 * small or the message is invalid (unknown kind, XLogData past the LSN space).
 */
size_t replication_encode(const replication_msg *msg, uint8_t *buf, size_t cap);

/*
 * Encodes only the REPLICATION_XLOGDATA_HEADER_LEN-byte header of an XLogData
 * (m->data is not read), for senders that send the WAL bytes from their own
 * buffer; returns the length or 0 as replication_encode does.
 */
size_t replication_encode_xlogdata_header(const replication_xlogdata *m, uint8_t *buf, size_t cap);

/* The current time in microseconds since 2000-01-01 (the Postgres epoch). */
int64_t replication_now(void);

#endif
