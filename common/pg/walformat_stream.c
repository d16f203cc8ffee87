/*
 * walformat_stream.c: following a stream of WAL bytes across page and
 * segment boundaries -- the record-boundary tracker (lengths only, for the
 * safekeeper's flush position).
 *
 * For: knowing where complete records end in bytes fed in order, in chunks
 * of any size.  Not for: decoding record contents (walformat.c).
 *
 * One step function walks the stream: each call consumes a maximal run of
 * bytes of one kind (page header, record bytes, padding) and reports when a
 * record became complete.  The tracker just loops over it.
 */
#include "pg/walformat.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

typedef enum step_kind {
    STEP_PAGE_HEADER,
    STEP_RECORD, /* bytes of a tracked record, at offset step.rec_off */
    STEP_SKIP,   /* padding, or a continuation we never saw the start of */
} step_kind;

typedef struct step {
    step_kind kind;
    size_t n;             /* bytes consumed */
    uint32_t rec_off;     /* STEP_RECORD: offset of the bytes in the record */
    bool record_complete; /* a record (not a skipped continuation) completed */
} step;

static int tracker_fail(wal_tracker *t, const char *why, const char **why_out)
{
    t->error = why;
    *why_out = why;
    return -1;
}

static size_t min_size(size_t a, uint64_t b)
{
    return b < a ? (size_t)b : a;
}

void wal_tracker_init(wal_tracker *t, lsn_t start, uint32_t wal_seg_size)
{
    memset(t, 0, sizeof *t);
    t->seg_size = wal_seg_size;
    t->start = start;
    t->pos = start;
    t->last_end = start;
    t->prev_start = LSN_INVALID;
    t->first_page = start % WAL_BLCKSZ == 0;

    uint32_t page_off = (uint32_t)(start % WAL_BLCKSZ);
    uint32_t min_off = start % wal_seg_size < WAL_BLCKSZ ? WAL_LONG_PHD_SIZE : WAL_SHORT_PHD_SIZE;
    if (!wal_seg_size_valid(wal_seg_size))
        t->error = "invalid WAL segment size";
    else if (start % WAL_ALIGN != 0)
        t->error = "WAL start position is not 8-byte aligned";
    else if (page_off != 0 && page_off < min_off)
        t->error = "WAL start position is inside a page header";
}

/* A page header is complete: validate it and settle the record in progress. */
static int finish_page_header(wal_tracker *t, const char **why)
{
    wal_page_header h;
    lsn_t page_lsn = t->pos - t->phdr_got;
    size_t size = wal_page_header_parse(t->phdr, t->phdr_got, &h);
    assert(size == t->phdr_got);
    (void)size;
    if (wal_page_header_check(&h, page_lsn, t->seg_size, why) != 0)
        return tracker_fail(t, *why, why);

    bool first = t->first_page;
    t->first_page = false;
    t->in_phdr = false;

    if (t->rec_active) {
        /* Padding never crosses a page boundary (pages are 8-aligned). */
        assert(t->pad_left == 0);
        assert(t->rec_skip || t->rec_len != 0);
        if (h.info & WAL_XLP_FIRST_IS_OVERWRITE_CONTRECORD) {
            /* Postgres abandoned the torn record and wrote new WAL here. */
            t->rec_active = false;
            return 0;
        }
        if (!(h.info & WAL_XLP_FIRST_IS_CONTRECORD))
            return tracker_fail(t, "WAL page continuing a record lacks the continuation flag", why);
        if (h.rem_len != t->rec_left)
            return tracker_fail(
                t, "WAL page xlp_rem_len does not match the bytes left of the record", why);
        return 0;
    }
    if ((h.info & WAL_XLP_FIRST_IS_CONTRECORD) &&
        !(h.info & WAL_XLP_FIRST_IS_OVERWRITE_CONTRECORD)) {
        if (!first)
            return tracker_fail(t, "WAL page has a continuation flag but no record is in progress",
                                why);
        if (h.rem_len == 0 || h.rem_len > WAL_MAX_RECORD_LEN)
            return tracker_fail(t, "WAL page xlp_rem_len is invalid", why);
        t->rec_active = true;
        t->rec_skip = true;
        t->rec_switch = false;
        t->rec_start = LSN_INVALID;
        t->rec_len = 0;
        t->rec_got = 0;
        t->rec_left = h.rem_len;
        t->pad_left = 0;
    }
    return 0;
}

/* The record's own bytes are all in: the padding after it is still owed. */
static void record_bytes_done(wal_tracker *t)
{
    if (t->rec_switch)
        t->pad_left = t->pos % t->seg_size == 0 ? 0 : t->seg_size - t->pos % t->seg_size;
    else
        t->pad_left = WAL_ALIGN_UP(t->pos) - t->pos;
}

static void record_complete(wal_tracker *t, step *s)
{
    assert(t->pos % WAL_ALIGN == 0);
    t->last_end = t->pos;
    t->prev_start = t->rec_skip ? LSN_INVALID : t->rec_start;
    s->record_complete = !t->rec_skip;
    t->rec_active = false;
}

/* Collects page header bytes; validates the header once it is whole. */
static int step_page_header(wal_tracker *t, const uint8_t *data, size_t len, step *s,
                            const char **why)
{
    s->kind = STEP_PAGE_HEADER;
    s->n = min_size(len, t->phdr_need - t->phdr_got);
    memcpy(t->phdr + t->phdr_got, data, s->n);
    t->phdr_got += (uint32_t)s->n;
    t->pos += s->n;
    if (t->phdr_got == WAL_SHORT_PHD_SIZE && t->phdr_need == WAL_SHORT_PHD_SIZE &&
        (t->phdr[WAL_XLP_INFO_OFF] & WAL_XLP_LONG_HEADER))
        t->phdr_need = WAL_LONG_PHD_SIZE;
    if (t->phdr_got == t->phdr_need)
        return finish_page_header(t, why);
    return 0;
}

/* Takes bytes of a tracked record (at most up to page_left): keeps its
 * header, checks xl_tot_len as soon as it is in and the whole header when
 * it is, and notes when the record's bytes (and padding) are all in. */
static int step_record(wal_tracker *t, const uint8_t *data, size_t len, uint32_t page_left, step *s,
                       const char **why)
{
    /* A tracked record: xl_tot_len is on the record's first page (records
     * are 8-aligned, so at least 8 bytes of it fit there). */
    assert(t->rec_len != 0 || t->rec_got < 4);
    uint64_t want = t->rec_len != 0 ? t->rec_left : 4 - t->rec_got;
    if (t->rec_got < WAL_RECORD_HEADER_SIZE && WAL_RECORD_HEADER_SIZE - t->rec_got < want)
        want = WAL_RECORD_HEADER_SIZE - t->rec_got;
    s->kind = STEP_RECORD;
    s->rec_off = t->rec_got;
    s->n = min_size(min_size(len, page_left), want);
    if (t->rec_got < WAL_RECORD_HEADER_SIZE)
        memcpy(t->rhdr + t->rec_got, data, s->n);
    t->rec_got += (uint32_t)s->n;
    t->pos += s->n;
    if (t->rec_len != 0)
        t->rec_left -= (uint32_t)s->n;

    if (t->rec_len == 0 && t->rec_got >= 4) {
        uint32_t tot_len = (uint32_t)t->rhdr[0] | (uint32_t)t->rhdr[1] << 8 |
                           (uint32_t)t->rhdr[2] << 16 | (uint32_t)t->rhdr[3] << 24;
        if (tot_len < WAL_RECORD_HEADER_SIZE)
            return tracker_fail(t,
                                tot_len == 0
                                    ? "no WAL record here (xl_tot_len is 0)"
                                    : "WAL record length (xl_tot_len) shorter than a record header",
                                why);
        if (tot_len > WAL_MAX_RECORD_LEN)
            return tracker_fail(t, "WAL record length (xl_tot_len) too large", why);
        t->rec_len = tot_len;
        t->rec_left = tot_len - t->rec_got;
    }
    if (t->rec_got == WAL_RECORD_HEADER_SIZE && s->rec_off < WAL_RECORD_HEADER_SIZE) {
        wal_record_header h;
        wal_record_header_parse(t->rhdr, &h);
        if (wal_record_header_check(&h, why) != 0)
            return tracker_fail(t, *why, why);
        if (t->prev_start != LSN_INVALID && h.prev != t->prev_start)
            return tracker_fail(t, "WAL record xl_prev does not point to the previous record", why);
        t->rec_switch = wal_record_header_is_switch(&h);
    }
    if (t->rec_len != 0 && t->rec_left == 0) {
        record_bytes_done(t);
        if (t->pad_left == 0)
            record_complete(t, s);
    }
    return 0;
}

/*
 * Consumes a maximal run of one kind from data (len > 0) into *s.  Returns 0,
 * or -1 with *why (tracker broken).
 */
static int tracker_step(wal_tracker *t, const uint8_t *data, size_t len, step *s, const char **why)
{
    assert(len > 0);
    assert(t->error == NULL);
    memset(s, 0, sizeof *s);
    uint32_t page_off = (uint32_t)(t->pos % WAL_BLCKSZ);

    /* Padding after a record: alignment, or the rest of the segment after
     * XLOG_SWITCH (page headers in it are not looked at, as in Postgres). */
    if (t->rec_active && t->pad_left > 0) {
        s->kind = STEP_SKIP;
        s->n = min_size(len, t->pad_left);
        t->pos += s->n;
        t->pad_left -= s->n;
        if (t->pad_left == 0)
            record_complete(t, s);
        return 0;
    }

    if (page_off == 0 && !t->in_phdr) {
        t->in_phdr = true;
        t->phdr_got = 0;
        t->phdr_need = WAL_SHORT_PHD_SIZE;
    }
    if (t->in_phdr)
        return step_page_header(t, data, len, s, why);

    uint32_t page_left = WAL_BLCKSZ - page_off;
    if (!t->rec_active) {
        /* Between records: the next one starts at the next 8-byte boundary. */
        if (t->pos % WAL_ALIGN != 0) {
            s->kind = STEP_SKIP;
            s->n = min_size(len, WAL_ALIGN - t->pos % WAL_ALIGN);
            t->pos += s->n;
            return 0;
        }
        t->rec_active = true;
        t->rec_skip = false;
        t->rec_switch = false;
        t->rec_start = t->pos;
        t->rec_len = 0;
        t->rec_got = 0;
        t->rec_left = 0;
        t->pad_left = 0;
    }

    if (t->rec_skip) {
        s->kind = STEP_SKIP;
        s->n = min_size(min_size(len, page_left), t->rec_left);
        t->pos += s->n;
        t->rec_left -= (uint32_t)s->n;
        if (t->rec_left == 0) {
            record_bytes_done(t);
            if (t->pad_left == 0)
                record_complete(t, s);
        }
        return 0;
    }

    return step_record(t, data, len, page_left, s, why);
}

int wal_tracker_feed(wal_tracker *t, lsn_t at, const uint8_t *data, size_t len, const char **why)
{
    if (t->error != NULL) {
        *why = t->error;
        return -1;
    }
    if (at != t->pos) {
        *why = "WAL fed at a position other than the tracker's next position";
        return -1;
    }
    if (len > UINT64_MAX - t->pos) {
        *why = "WAL position would pass the largest LSN";
        return -1;
    }
    while (len > 0) {
        step s;
        if (tracker_step(t, data, len, &s, why) != 0)
            return -1;
        assert(s.n > 0 && s.n <= len);
        data += s.n;
        len -= s.n;
    }
    return 0;
}

lsn_t wal_tracker_next(const wal_tracker *t)
{
    return t->pos;
}

lsn_t wal_tracker_last_record_end(const wal_tracker *t)
{
    return t->last_end;
}

/* ---- Reader ----------------------------------------------------------- */

void wal_reader_init(wal_reader *r, lsn_t start, uint32_t wal_seg_size, uint8_t *buf, size_t cap)
{
    assert(buf != NULL && cap >= WAL_RECORD_HEADER_SIZE);
    memset(r, 0, sizeof *r);
    wal_tracker_init(&r->tracker, start, wal_seg_size);
    r->buf = buf;
    r->cap = cap;
    r->rec_start = start;
    r->rec_end = start;
    r->valid_end = start;
    r->error = r->tracker.error;
}

void wal_reader_init_growable(wal_reader *r, lsn_t start, uint32_t wal_seg_size, uint8_t **buf,
                              size_t *cap)
{
    wal_reader_init(r, start, wal_seg_size, *buf, *cap);
    r->grow_buf = buf;
    r->grow_cap = cap;
}

/* Makes room for a record of need bytes; false if not allowed or no memory. */
static bool reader_grow(wal_reader *r, size_t need)
{
    if (r->grow_buf == NULL || need > WAL_MAX_RECORD_LEN)
        return false;
    size_t cap = r->cap;
    while (cap < need)
        cap = cap > WAL_MAX_RECORD_LEN / 2 ? WAL_MAX_RECORD_LEN : cap * 2;
    uint8_t *nb = realloc(r->buf, cap);
    if (nb == NULL)
        return false;
    r->buf = *r->grow_buf = nb;
    r->cap = *r->grow_cap = cap;
    return true;
}

static int reader_fail(wal_reader *r, const char *why, const char **why_out)
{
    r->error = why;
    if (r->tracker.error == NULL)
        r->tracker.error = why;
    *why_out = why;
    return WAL_READER_ERROR;
}

int wal_reader_feed(wal_reader *r, lsn_t at, const uint8_t *data, size_t len, size_t *consumed,
                    const char **why)
{
    *consumed = 0;
    r->have_record = false;
    if (r->error != NULL) {
        *why = r->error;
        return WAL_READER_ERROR;
    }
    if (at != r->tracker.pos) {
        *why = "WAL fed at a position other than the reader's next position";
        return WAL_READER_ERROR;
    }
    if (len > UINT64_MAX - r->tracker.pos) {
        *why = "WAL position would pass the largest LSN";
        return WAL_READER_ERROR;
    }
    wal_tracker *t = &r->tracker;
    while (*consumed < len) {
        step s;
        lsn_t end_before = t->last_end;
        if (tracker_step(t, data + *consumed, len - *consumed, &s, why) != 0)
            return reader_fail(r, *why, why);
        assert(s.n > 0 && s.n <= len - *consumed);
        if (s.kind == STEP_RECORD) {
            if ((t->rec_len > r->cap || (size_t)s.rec_off + s.n > r->cap) &&
                !reader_grow(r, t->rec_len > s.rec_off + s.n ? t->rec_len : s.rec_off + s.n))
                return reader_fail(r,
                                   r->grow_buf != NULL
                                       ? "out of memory for a WAL record's reassembly buffer"
                                       : "WAL record larger than the reassembly buffer",
                                   why);
            memcpy(r->buf + s.rec_off, data + *consumed, s.n);
        }
        *consumed += s.n;
        if (!s.record_complete && t->last_end != end_before)
            r->valid_end = t->last_end; /* a skipped continuation ended */
        if (s.record_complete) {
            const char *reason;
            if (wal_record_decode(r->buf, t->rec_len, &r->rec, &reason) != 0)
                return reader_fail(r, reason, why);
            r->have_record = true;
            r->rec_start = t->rec_start;
            r->rec_end = t->last_end;
            r->valid_end = t->last_end;
            return WAL_READER_RECORD;
        }
    }
    return WAL_READER_NEED_MORE;
}

const wal_record *wal_reader_record(const wal_reader *r, lsn_t *start, lsn_t *end)
{
    if (!r->have_record)
        return NULL;
    *start = r->rec_start;
    *end = r->rec_end;
    return &r->rec;
}

lsn_t wal_reader_next(const wal_reader *r)
{
    return r->tracker.pos;
}

lsn_t wal_reader_last_record_end(const wal_reader *r)
{
    return r->valid_end;
}
