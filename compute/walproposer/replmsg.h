/*
 * replmsg.h: the CopyData messages of Postgres physical streaming
 * replication, as a walreceiver sees them (DESIGN 5.2).
 *
 * Server to client: XLogData 'w' and keepalive 'k'.  Client to server:
 * standby status update 'r'.  Big-endian, as in the Postgres protocol
 * documentation ("Streaming Replication Protocol").  The walproposer uses
 * these on its replication connection to its own postmaster and
 * sync-safekeepers on its connection to the donor safekeeper.
 *
 * Not for: the walpush messages (proto/walpush.h) or hot-standby feedback.
 * Pure, libc only, allocation-free: decoded WAL points into the input.
 */
#ifndef STRATA_WALPROPOSER_REPLMSG_H
#define STRATA_WALPROPOSER_REPLMSG_H

#include <stddef.h>
#include <stdint.h>

#include "common/lsn.h"

#define REPLMSG_STATUS_LEN 34

typedef enum replmsg_kind {
    REPLMSG_XLOGDATA = 1,
    REPLMSG_KEEPALIVE,
} replmsg_kind;

typedef struct replmsg {
    replmsg_kind kind;
    lsn_t wal_start;     /* XLogData: LSN of data[0] */
    lsn_t wal_end;       /* both: the sender's end of WAL */
    int64_t send_time;   /* both: microseconds since 2000-01-01 */
    int reply_requested; /* keepalive only */
    const uint8_t *data; /* XLogData only: points into the input */
    size_t data_len;
} replmsg;

/* Decodes one server message; 0 on success, -1 with a static reason in *why. */
int replmsg_decode(const uint8_t *buf, size_t len, replmsg *out, const char **why);

/*
 * Encodes a standby status update into buf (at least REPLMSG_STATUS_LEN
 * bytes); returns the length.  now_pg is microseconds since 2000-01-01.
 */
size_t replmsg_encode_status(lsn_t write, lsn_t flush, lsn_t apply, int64_t now_pg,
                             int reply_requested, uint8_t *buf);

/* The current time in microseconds since 2000-01-01 (the Postgres epoch). */
int64_t replmsg_now(void);

#endif
