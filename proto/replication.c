/*
 * replication.c: physical replication CopyData messages.  See replication.h.
 *
 * For: encoding and decoding the messages of replication.h.
 * Not for: anything with IO beyond reading the clock; callers own sockets.
 */
#include "proto/replication.h"

#include <string.h>
#include <time.h>

#include "base/byteorder.h"

/* Seconds from 1970-01-01 to 2000-01-01. */
#define PG_EPOCH_UNIX_SECONDS 946684800LL

static int decode_xlogdata(const uint8_t *buf, size_t len, replication_msg *out, const char **why)
{
    replication_xlogdata *m = &out->u.xlogdata;

    if (len < REPLICATION_XLOGDATA_HEADER_LEN) {
        *why = "XLogData: shorter than its 25-byte header";
        return -1;
    }
    out->kind = REPLICATION_XLOGDATA;
    m->wal_start = get_be64(buf + 1);
    m->wal_end = get_be64(buf + 9);
    m->send_time = (int64_t)get_be64(buf + 17);
    m->data = buf + REPLICATION_XLOGDATA_HEADER_LEN;
    m->data_len = len - REPLICATION_XLOGDATA_HEADER_LEN;
    if (m->wal_start + m->data_len < m->wal_start) {
        *why = "XLogData: data runs past the end of the LSN space";
        return -1;
    }
    return 0;
}

static int decode_keepalive(const uint8_t *buf, size_t len, replication_msg *out, const char **why)
{
    if (len != REPLICATION_KEEPALIVE_LEN) {
        *why = "keepalive: length is not 18 bytes";
        return -1;
    }
    if (buf[17] > 1) {
        *why = "keepalive: reply_requested is neither 0 nor 1";
        return -1;
    }
    out->kind = REPLICATION_KEEPALIVE;
    out->u.keepalive.wal_end = get_be64(buf + 1);
    out->u.keepalive.send_time = (int64_t)get_be64(buf + 9);
    out->u.keepalive.reply_requested = buf[17] == 1;
    return 0;
}

int replication_decode_server_msg(const uint8_t *buf, size_t len, replication_msg *out,
                                  const char **why)
{
    memset(out, 0, sizeof(*out));
    if (len < 1) {
        *why = "replication message: empty";
        return -1;
    }
    switch (buf[0]) {
    case REPLICATION_TAG_XLOGDATA:
        return decode_xlogdata(buf, len, out, why);
    case REPLICATION_TAG_KEEPALIVE:
        return decode_keepalive(buf, len, out, why);
    default:
        *why = "replication message: unknown tag from the server";
        return -1;
    }
}

static int decode_status_update(const uint8_t *buf, size_t len, replication_msg *out,
                                const char **why)
{
    replication_status_update *m = &out->u.status;

    if (len != REPLICATION_STATUS_UPDATE_LEN) {
        *why = "standby status update: length is not 34 bytes";
        return -1;
    }
    if (buf[33] > 1) {
        *why = "standby status update: reply_requested is neither 0 nor 1";
        return -1;
    }
    out->kind = REPLICATION_STATUS_UPDATE;
    m->write_lsn = get_be64(buf + 1);
    m->flush_lsn = get_be64(buf + 9);
    m->apply_lsn = get_be64(buf + 17);
    m->send_time = (int64_t)get_be64(buf + 25);
    m->reply_requested = buf[33] == 1;
    return 0;
}

static int decode_hs_feedback(const uint8_t *buf, size_t len, replication_msg *out,
                              const char **why)
{
    replication_hs_feedback *m = &out->u.hs_feedback;

    if (len != REPLICATION_HS_FEEDBACK_LEN) {
        *why = "hot standby feedback: length is not 25 bytes";
        return -1;
    }
    out->kind = REPLICATION_HS_FEEDBACK;
    m->send_time = (int64_t)get_be64(buf + 1);
    m->xmin = get_be32(buf + 9);
    m->xmin_epoch = get_be32(buf + 13);
    m->catalog_xmin = get_be32(buf + 17);
    m->catalog_xmin_epoch = get_be32(buf + 21);
    return 0;
}

static int decode_ps_feedback(const uint8_t *buf, size_t len, replication_msg *out,
                              const char **why)
{
    pageserver_feedback *m = &out->u.ps_feedback;

    if (len != REPLICATION_PS_FEEDBACK_LEN) {
        *why = "pageserver feedback: length is not 25 bytes";
        return -1;
    }
    out->kind = REPLICATION_PS_FEEDBACK;
    m->last_received_lsn = get_be64(buf + 1);
    m->disk_consistent_lsn = get_be64(buf + 9);
    m->remote_consistent_lsn = get_be64(buf + 17);
    return 0;
}

int replication_decode_client_msg(const uint8_t *buf, size_t len, replication_msg *out,
                                  const char **why)
{
    memset(out, 0, sizeof(*out));
    if (len < 1) {
        *why = "replication message: empty";
        return -1;
    }
    switch (buf[0]) {
    case REPLICATION_TAG_STATUS_UPDATE:
        return decode_status_update(buf, len, out, why);
    case REPLICATION_TAG_HS_FEEDBACK:
        return decode_hs_feedback(buf, len, out, why);
    case REPLICATION_TAG_PS_FEEDBACK:
        return decode_ps_feedback(buf, len, out, why);
    default:
        *why = "replication message: unknown tag from the client";
        return -1;
    }
}

size_t replication_encode_xlogdata_header(const replication_xlogdata *m, uint8_t *buf, size_t cap)
{
    if (cap < REPLICATION_XLOGDATA_HEADER_LEN || m->wal_start + m->data_len < m->wal_start)
        return 0;
    buf[0] = REPLICATION_TAG_XLOGDATA;
    put_be64(buf + 1, m->wal_start);
    put_be64(buf + 9, m->wal_end);
    put_be64(buf + 17, (uint64_t)m->send_time);
    return REPLICATION_XLOGDATA_HEADER_LEN;
}

static size_t encode_xlogdata(const replication_xlogdata *m, uint8_t *buf, size_t cap)
{
    if (m->data_len > cap || cap - m->data_len < REPLICATION_XLOGDATA_HEADER_LEN)
        return 0;
    if (replication_encode_xlogdata_header(m, buf, cap) == 0)
        return 0;
    if (m->data_len > 0)
        memcpy(buf + REPLICATION_XLOGDATA_HEADER_LEN, m->data, m->data_len);
    return REPLICATION_XLOGDATA_HEADER_LEN + m->data_len;
}

size_t replication_encode(const replication_msg *msg, uint8_t *buf, size_t cap)
{
    switch (msg->kind) {
    case REPLICATION_XLOGDATA:
        return encode_xlogdata(&msg->u.xlogdata, buf, cap);
    case REPLICATION_KEEPALIVE: {
        const replication_keepalive *m = &msg->u.keepalive;
        if (cap < REPLICATION_KEEPALIVE_LEN)
            return 0;
        buf[0] = REPLICATION_TAG_KEEPALIVE;
        put_be64(buf + 1, m->wal_end);
        put_be64(buf + 9, (uint64_t)m->send_time);
        buf[17] = m->reply_requested ? 1 : 0;
        return REPLICATION_KEEPALIVE_LEN;
    }
    case REPLICATION_STATUS_UPDATE: {
        const replication_status_update *m = &msg->u.status;
        if (cap < REPLICATION_STATUS_UPDATE_LEN)
            return 0;
        buf[0] = REPLICATION_TAG_STATUS_UPDATE;
        put_be64(buf + 1, m->write_lsn);
        put_be64(buf + 9, m->flush_lsn);
        put_be64(buf + 17, m->apply_lsn);
        put_be64(buf + 25, (uint64_t)m->send_time);
        buf[33] = m->reply_requested ? 1 : 0;
        return REPLICATION_STATUS_UPDATE_LEN;
    }
    case REPLICATION_HS_FEEDBACK: {
        const replication_hs_feedback *m = &msg->u.hs_feedback;
        if (cap < REPLICATION_HS_FEEDBACK_LEN)
            return 0;
        buf[0] = REPLICATION_TAG_HS_FEEDBACK;
        put_be64(buf + 1, (uint64_t)m->send_time);
        put_be32(buf + 9, m->xmin);
        put_be32(buf + 13, m->xmin_epoch);
        put_be32(buf + 17, m->catalog_xmin);
        put_be32(buf + 21, m->catalog_xmin_epoch);
        return REPLICATION_HS_FEEDBACK_LEN;
    }
    case REPLICATION_PS_FEEDBACK: {
        const pageserver_feedback *m = &msg->u.ps_feedback;
        if (cap < REPLICATION_PS_FEEDBACK_LEN)
            return 0;
        buf[0] = REPLICATION_TAG_PS_FEEDBACK;
        put_be64(buf + 1, m->last_received_lsn);
        put_be64(buf + 9, m->disk_consistent_lsn);
        put_be64(buf + 17, m->remote_consistent_lsn);
        return REPLICATION_PS_FEEDBACK_LEN;
    }
    }
    return 0;
}

int64_t replication_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return ((int64_t)ts.tv_sec - PG_EPOCH_UNIX_SECONDS) * 1000000LL + ts.tv_nsec / 1000;
}
