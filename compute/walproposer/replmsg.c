/*
 * replmsg.c: physical replication CopyData messages.  See replmsg.h.
 */
#include "compute/walproposer/replmsg.h"

#include <string.h>
#include <time.h>

/* Seconds from 1970-01-01 to 2000-01-01. */
#define PG_EPOCH_UNIX_SECONDS 946684800LL

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

int replmsg_decode(const uint8_t *buf, size_t len, replmsg *out, const char **why)
{
    memset(out, 0, sizeof(*out));
    if (len < 1) {
        *why = "replication message: empty";
        return -1;
    }
    switch (buf[0]) {
    case 'w':
        if (len < 25) {
            *why = "XLogData: shorter than its 25-byte header";
            return -1;
        }
        out->kind = REPLMSG_XLOGDATA;
        out->wal_start = get_u64(buf + 1);
        out->wal_end = get_u64(buf + 9);
        out->send_time = (int64_t)get_u64(buf + 17);
        out->data = buf + 25;
        out->data_len = len - 25;
        if (out->wal_start + out->data_len < out->wal_start) {
            *why = "XLogData: data runs past the end of the LSN space";
            return -1;
        }
        return 0;
    case 'k':
        if (len != 18) {
            *why = "keepalive: length is not 18 bytes";
            return -1;
        }
        out->kind = REPLMSG_KEEPALIVE;
        out->wal_end = get_u64(buf + 1);
        out->send_time = (int64_t)get_u64(buf + 9);
        if (buf[17] > 1) {
            *why = "keepalive: reply_requested is neither 0 nor 1";
            return -1;
        }
        out->reply_requested = buf[17];
        return 0;
    default:
        *why = "replication message: unknown tag";
        return -1;
    }
}

size_t replmsg_encode_status(lsn_t write, lsn_t flush, lsn_t apply, int64_t now_pg,
                             int reply_requested, uint8_t *buf)
{
    buf[0] = 'r';
    put_u64(buf + 1, write);
    put_u64(buf + 9, flush);
    put_u64(buf + 17, apply);
    put_u64(buf + 25, (uint64_t)now_pg);
    buf[33] = reply_requested ? 1 : 0;
    return REPLMSG_STATUS_LEN;
}

int64_t replmsg_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ((int64_t)ts.tv_sec - PG_EPOCH_UNIX_SECONDS) * 1000000LL + ts.tv_nsec / 1000;
}
