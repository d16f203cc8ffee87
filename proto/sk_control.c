/*
 * sk_control.c: encode, decode and durably store a safekeeper timeline's
 * control file.  See sk_control.h for the layout and the contract.
 *
 * For: the byte layout of every format version, its validation, and the
 * file's atomic replacement and strict load.  Not for: what the fields
 * mean to the acceptor (safekeeper/acceptor.h).
 */
#include "proto/sk_control.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/byteorder.h"
#include "base/crc32c.h"
#include "base/durable.h"

#define HEADER_SIZE 12
#define FIXED_BODY_SIZE 124 /* body without history entries */

typedef struct writer {
    uint8_t *p;
} writer;

static void put_u32(writer *w, uint32_t v)
{
    put_le32(w->p, v);
    w->p += 4;
}

static void put_u64(writer *w, uint64_t v)
{
    put_le64(w->p, v);
    w->p += 8;
}

static void put_members(writer *w, const member *set, uint32_t n)
{
    put_u32(w, n);
    for (uint32_t i = 0; i < n; i++) {
        put_u64(w, set[i].node_id);
        memset(w->p, 0, MEMBER_ADDR_MAX + 1);
        memcpy(w->p, set[i].addr, strnlen(set[i].addr, MEMBER_ADDR_MAX));
        w->p += MEMBER_ADDR_MAX + 1;
    }
}

static void put_id(writer *w, const strata_id *id)
{
    memcpy(w->p, id->b, STRATA_ID_LEN);
    w->p += STRATA_ID_LEN;
}

typedef struct reader {
    const uint8_t *p;
} reader;

static uint32_t get_u32(reader *r)
{
    uint32_t v = get_le32(r->p);
    r->p += 4;
    return v;
}

static uint64_t get_u64(reader *r)
{
    uint64_t v = get_le64(r->p);
    r->p += 8;
    return v;
}

static void get_id(reader *r, strata_id *id)
{
    memcpy(id->b, r->p, STRATA_ID_LEN);
    r->p += STRATA_ID_LEN;
}

static size_t mconf_size(uint32_t n_members, uint32_t n_new)
{
    return 12 + SK_CONTROL_MEMBER_SIZE * (size_t)(n_members + n_new);
}

/* What follows the configuration in a version 3 body: the backup LSN. */
#define TAIL_V3_SIZE 8

size_t sk_control_encode(const sk_control_state *st, uint8_t *buf, size_t cap)
{
    if (st->history.n > TERM_HISTORY_MAX || membership_check(&st->mconf) != NULL)
        return 0;
    size_t body = FIXED_BODY_SIZE + 16 * (size_t)st->history.n +
                  mconf_size(st->mconf.n_members, st->mconf.n_new_members) + TAIL_V3_SIZE;
    size_t total = HEADER_SIZE + body + 4;
    if (cap < total)
        return 0;
    writer w = {buf};
    put_u32(&w, SK_CONTROL_MAGIC);
    put_u32(&w, SK_CONTROL_VERSION);
    put_u32(&w, (uint32_t)body);
    put_id(&w, &st->tenant_id);
    put_id(&w, &st->timeline_id);
    put_u32(&w, st->pg_version);
    put_u64(&w, st->system_id);
    put_u32(&w, st->wal_seg_size);
    put_u64(&w, st->node_id);
    put_u64(&w, st->term);
    put_u64(&w, st->timeline_start_lsn);
    put_u64(&w, st->flush_lsn);
    put_u64(&w, st->commit_lsn);
    put_u64(&w, st->truncate_lsn);
    put_u64(&w, st->ps_feedback.last_received_lsn);
    put_u64(&w, st->ps_feedback.disk_consistent_lsn);
    put_u64(&w, st->ps_feedback.remote_consistent_lsn);
    put_u32(&w, st->history.n);
    for (uint32_t i = 0; i < st->history.n; i++) {
        put_u64(&w, st->history.entries[i].term);
        put_u64(&w, st->history.entries[i].lsn);
    }
    put_u32(&w, st->mconf.generation);
    put_members(&w, st->mconf.members, st->mconf.n_members);
    put_members(&w, st->mconf.new_members, st->mconf.n_new_members);
    put_u64(&w, st->backup_lsn);
    assert((size_t)(w.p - buf) == total - 4);
    put_u32(&w, crc32c(buf, total - 4));
    return total;
}

static int bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bad(char *err, size_t errlen, const char *fmt, ...)
{
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* The configuration after the history of a version 2 or 3 body (which
 * starts at offset hist_end of body bytes and ends at body). */
static int get_mconf(reader *r, membership *m, size_t hist_end, uint32_t body, char *err,
                     size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->generation = get_u32(r);
    uint32_t *counts[2] = {&m->n_members, &m->n_new_members};
    member *sets[2] = {m->members, m->new_members};
    size_t at = hist_end + 4;
    for (int k = 0; k < 2; k++) {
        if (at + 4 > body)
            return bad(err, errlen, "control file configuration is cut short");
        uint32_t n = get_u32(r);
        at += 4;
        if (n > MEMBERSHIP_MAX)
            return bad(err, errlen, "control file configuration has %u members in a set (max %d)",
                       n, MEMBERSHIP_MAX);
        if (at + (size_t)n * SK_CONTROL_MEMBER_SIZE > body)
            return bad(err, errlen, "control file configuration is cut short");
        for (uint32_t i = 0; i < n; i++) {
            sets[k][i].node_id = get_u64(r);
            memcpy(sets[k][i].addr, r->p, MEMBER_ADDR_MAX + 1);
            r->p += MEMBER_ADDR_MAX + 1;
            size_t alen = strnlen(sets[k][i].addr, MEMBER_ADDR_MAX + 1);
            if (alen > MEMBER_ADDR_MAX)
                return bad(err, errlen, "control file member address is not terminated");
            /* One encoding per state: the field is padded with zeros. */
            for (size_t z = alen; z <= MEMBER_ADDR_MAX; z++)
                if (sets[k][i].addr[z] != '\0')
                    return bad(err, errlen, "control file member address has bytes after its end");
        }
        *counts[k] = n;
        at += (size_t)n * SK_CONTROL_MEMBER_SIZE;
    }
    if (at != body)
        return bad(err, errlen, "control file body length %u does not match its configuration",
                   body);
    const char *why = membership_check(m);
    if (why != NULL)
        return bad(err, errlen, "control file configuration: %s", why);
    return 0;
}

int sk_control_decode(const uint8_t *buf, size_t len, sk_control_state *out, char *err,
                      size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (len < HEADER_SIZE + FIXED_BODY_SIZE + 4)
        return bad(err, errlen, "control file too short: %zu bytes, need at least %d", len,
                   HEADER_SIZE + FIXED_BODY_SIZE + 4);
    reader r = {buf};
    uint32_t magic = get_u32(&r);
    if (magic != SK_CONTROL_MAGIC)
        return bad(err, errlen, "control file has bad magic 0x%08X (expected 0x%08X)", magic,
                   SK_CONTROL_MAGIC);
    uint32_t version = get_u32(&r);
    if (version < 1 || version > SK_CONTROL_VERSION)
        return bad(err, errlen, "control file has unsupported format version %u (expected %u)",
                   version, SK_CONTROL_VERSION);
    uint32_t body = get_u32(&r);
    if ((size_t)body != len - HEADER_SIZE - 4)
        return bad(err, errlen, "control file body length %u does not match file size %zu", body,
                   len);
    uint32_t stored_crc = (uint32_t)buf[len - 4] | (uint32_t)buf[len - 3] << 8 |
                          (uint32_t)buf[len - 2] << 16 | (uint32_t)buf[len - 1] << 24;
    uint32_t crc = crc32c(buf, len - 4);
    if (crc != stored_crc)
        return bad(err, errlen, "control file CRC mismatch: stored 0x%08X, computed 0x%08X",
                   stored_crc, crc);

    sk_control_state st;
    memset(&st, 0, sizeof st);
    get_id(&r, &st.tenant_id);
    get_id(&r, &st.timeline_id);
    st.pg_version = get_u32(&r);
    st.system_id = get_u64(&r);
    st.wal_seg_size = get_u32(&r);
    st.node_id = get_u64(&r);
    st.term = get_u64(&r);
    st.timeline_start_lsn = get_u64(&r);
    st.flush_lsn = get_u64(&r);
    st.commit_lsn = get_u64(&r);
    st.truncate_lsn = get_u64(&r);
    st.ps_feedback.last_received_lsn = get_u64(&r);
    st.ps_feedback.disk_consistent_lsn = get_u64(&r);
    st.ps_feedback.remote_consistent_lsn = get_u64(&r);
    uint32_t n = get_u32(&r);
    if (n > TERM_HISTORY_MAX)
        return bad(err, errlen, "control file term history has %u entries (max %d)", n,
                   TERM_HISTORY_MAX);
    size_t hist_end = FIXED_BODY_SIZE + 16 * (size_t)n;
    size_t tail = version >= 3 ? TAIL_V3_SIZE : 0;
    if (version == 1 ? (size_t)body != hist_end : (size_t)body < hist_end + mconf_size(0, 0) + tail)
        return bad(err, errlen, "control file body length %u does not fit %u history entries", body,
                   n);
    st.history.n = n;
    for (uint32_t i = 0; i < n; i++) {
        st.history.entries[i].term = get_u64(&r);
        st.history.entries[i].lsn = get_u64(&r);
        if (i > 0 && (st.history.entries[i].term <= st.history.entries[i - 1].term ||
                      st.history.entries[i].lsn < st.history.entries[i - 1].lsn))
            return bad(err, errlen, "control file term history entry %u is out of order", i);
    }
    if (version >= 2 && get_mconf(&r, &st.mconf, hist_end, body - (uint32_t)tail, err, errlen) != 0)
        return -1;
    if (version >= 3)
        st.backup_lsn = get_u64(&r);
    assert((size_t)(r.p - buf) == len - 4);

    if (strata_id_is_zero(&st.tenant_id) || strata_id_is_zero(&st.timeline_id))
        return bad(err, errlen, "control file has a zero tenant or timeline id");
    if (st.wal_seg_size != 0 && (st.wal_seg_size < (1u << 16) || st.wal_seg_size > (1u << 30) ||
                                 (st.wal_seg_size & (st.wal_seg_size - 1)) != 0))
        return bad(err, errlen, "control file has invalid wal_seg_size %u", st.wal_seg_size);
    /* The end of a whole segment (0: nothing backed up yet). */
    if (st.backup_lsn != 0 && (st.wal_seg_size == 0 || st.backup_lsn % st.wal_seg_size != 0))
        return bad(err, errlen, "control file backup LSN %llX is not a segment boundary",
                   (unsigned long long)st.backup_lsn);
    if (n > 0 && st.history.entries[n - 1].term > st.term)
        return bad(err, errlen, "control file term %llu is below its history's last term %llu",
                   (unsigned long long)st.term, (unsigned long long)st.history.entries[n - 1].term);
    *out = st;
    return 0;
}

int sk_control_write(const char *dir, const sk_control_state *st)
{
    uint8_t buf[SK_CONTROL_MAX_SIZE];
    size_t len = sk_control_encode(st, buf, sizeof buf);
    if (len == 0)
        return -EINVAL;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, SK_CONTROL_FILE_NAME) >= (int)sizeof path)
        return -ENAMETOOLONG;
    return durable_write_file(path, buf, len, 0600);
}

int sk_control_read(const char *dir, sk_control_state *out, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, SK_CONTROL_FILE_NAME) >= (int)sizeof path) {
        bad(err, errlen, "control file path too long");
        return -ENAMETOOLONG;
    }
    void *data;
    size_t len;
    int rc = durable_read_file(path, SK_CONTROL_MAX_SIZE, &data, &len);
    if (rc == -EFBIG) {
        bad(err, errlen, "%s: larger than %d bytes", path, SK_CONTROL_MAX_SIZE);
        return -EINVAL;
    }
    if (rc != 0) {
        bad(err, errlen, "%s: %s", path, strerror(-rc));
        return rc;
    }
    char why[200];
    rc = sk_control_decode(data, len, out, why, sizeof why);
    free(data);
    if (rc != 0) {
        bad(err, errlen, "%s: %s", path, why);
        return -EINVAL;
    }
    return 0;
}
