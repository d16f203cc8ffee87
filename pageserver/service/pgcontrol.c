/*
 * pgcontrol.c: pg_control and the bootstrap WAL segment of a basebackup.
 * See pgcontrol.h for what is written where and why.
 *
 * Not for: deciding the LSN (the caller checks it against the timeline) or
 * writing files (basebackup.c streams these bytes into the tar).
 */
#include "pageserver/service/pgcontrol.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "base/byteorder.h"
#include "base/crc32c.h"
#include "base/strata_assert.h"
#include "pg/walformat.h"
#include "pageserver/store/key.h"

#define XLR_BLOCK_ID_DATA_SHORT 255

static bool at_page_start(lsn_t pos)
{
    return pos % WAL_BLCKSZ == 0;
}

static uint32_t page_header_size(lsn_t page, uint32_t seg_size)
{
    return page % seg_size == 0 ? WAL_LONG_PHD_SIZE : WAL_SHORT_PHD_SIZE;
}

/* Writes the header of the page starting at page into buf (the page's first bytes). */
static void put_page_header(const pgcontrol_boot *b, lsn_t page, uint32_t rem_len, uint8_t *buf)
{
    bool is_long = page % b->seg_size == 0;
    uint16_t info = WAL_XLP_BKP_REMOVABLE;
    if (is_long)
        info |= WAL_XLP_LONG_HEADER;
    if (rem_len > 0)
        info |= WAL_XLP_FIRST_IS_CONTRECORD;
    memset(buf, 0, is_long ? WAL_LONG_PHD_SIZE : WAL_SHORT_PHD_SIZE);
    put_le16(buf + 0, WAL_PAGE_MAGIC);
    put_le16(buf + 2, info);
    put_le32(buf + 4, b->tli);
    put_le64(buf + 8, page);
    put_le32(buf + 16, rem_len);
    if (is_long) {
        put_le64(buf + 24, b->system_id);
        put_le32(buf + 32, b->seg_size);
        put_le32(buf + 36, WAL_BLCKSZ);
    }
}

/*
 * Walks the record's bytes through the WAL address space as Postgres lays
 * them out (a page header at every page start; continuation pages flagged).
 * For every piece calls place(piece_lsn, bytes, n) and for every
 * continuation page header hdr(page, rem_len); returns the position after
 * the last byte.  Either callback may be NULL.
 */
typedef struct placer {
    const pgcontrol_boot *b;
    uint64_t segno; /* the segment being filled, or UINT64_MAX for planning */
    uint8_t *seg;
} placer;

static void place_bytes(placer *p, lsn_t at, const uint8_t *src, size_t n)
{
    if (p->seg == NULL)
        return;
    uint64_t seg_start = p->segno * p->b->seg_size;
    assert(at / p->b->seg_size == p->segno);
    memcpy(p->seg + (at - seg_start), src, n);
}

static void place_header(placer *p, lsn_t page, uint32_t rem_len)
{
    if (p->seg == NULL || page / p->b->seg_size != p->segno)
        return;
    put_page_header(p->b, page, rem_len, p->seg + (page - p->segno * p->b->seg_size));
}

static lsn_t lay_out(placer *p, lsn_t start, uint64_t *last_segno)
{
    const pgcontrol_boot *b = p->b;
    lsn_t pos = start;
    size_t done = 0;
    while (done < PGCONTROL_CHECKPOINT_RECORD_LEN) {
        if (at_page_start(pos)) {
            uint32_t rem = (uint32_t)(PGCONTROL_CHECKPOINT_RECORD_LEN - done);
            place_header(p, pos, done > 0 ? rem : 0);
            pos += page_header_size(pos, b->seg_size);
        }
        size_t room = WAL_BLCKSZ - pos % WAL_BLCKSZ;
        size_t n = PGCONTROL_CHECKPOINT_RECORD_LEN - done;
        if (n > room)
            n = room;
        if (p->seg != NULL && pos / b->seg_size == p->segno)
            place_bytes(p, pos, b->record + done, n);
        if (last_segno != NULL)
            *last_segno = pos / b->seg_size;
        done += n;
        pos += n;
    }
    return pos;
}

static int fail(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
    return -1;
}

/* Checks the stored pg_control; its WAL segment size into *seg_size. */
static int check_control(const uint8_t *control, size_t control_len, uint32_t *seg_size, char *err,
                         size_t errlen)
{
    if (control == NULL || control_len < PG_CTL_CRC + 4)
        return fail(err, errlen, "stored pg_control is too short");
    if (get_le32(control + PG_CTL_CRC) != crc32c(control, PG_CTL_CRC))
        return fail(err, errlen, "stored pg_control has a bad CRC");
    if (get_le32(control + PG_CTL_VERSION) != PG_CONTROL_VERSION)
        return fail(err, errlen, "stored pg_control is not PostgreSQL 15's (pg_control_version)");
    if (get_le32(control + PG_CTL_BLCKSZ) != PG_BLCKSZ ||
        get_le32(control + PG_CTL_XLOG_BLCKSZ) != WAL_BLCKSZ)
        return fail(err, errlen, "stored pg_control has a block size other than 8192");
    *seg_size = get_le32(control + PG_CTL_XLOG_SEG_SIZE);
    if (!wal_seg_size_valid(*seg_size))
        return fail(err, errlen, "stored pg_control has an invalid WAL segment size");
    return 0;
}

int pgcontrol_boot_plan(lsn_t lsn, const uint8_t *control, size_t control_len,
                        const uint8_t checkpoint[PG_CHECKPOINT_SIZE], lsn_t prev, int64_t now,
                        pgcontrol_boot *out, char *err, size_t errlen)
{
    char lb[LSN_FMT_LEN];
    uint32_t seg_size;
    memset(out, 0, sizeof *out);
    if (lsn == LSN_INVALID || lsn % WAL_ALIGN != 0) {
        snprintf(err, errlen,
                 "LSN %s is not a record boundary (record ends are 8-byte aligned and not 0/0)",
                 lsn_format(lsn, lb));
        return -1;
    }
    if (check_control(control, control_len, &seg_size, err, errlen) != 0)
        return -1;
    uint32_t tli = get_le32(checkpoint + PG_CP_THIS_TLI);
    if (tli == 0)
        return fail(err, errlen, "stored checkpoint has timeline 0");

    out->lsn = lsn;
    out->seg_size = seg_size;
    out->tli = tli;
    out->system_id = get_le64(control + PG_CTL_SYSTEM_ID);
    out->record_start = at_page_start(lsn) ? lsn + page_header_size(lsn, seg_size) : lsn;
    if (prev != LSN_INVALID && prev >= out->record_start) {
        snprintf(err, errlen, "previous record start %s is not before the checkpoint record",
                 lsn_format(prev, lb));
        return -1;
    }

    uint8_t *cp = out->checkpoint;
    memcpy(cp, checkpoint, PG_CHECKPOINT_SIZE);
    put_le64(cp + PG_CP_REDO, out->record_start);
    put_le32(cp + PG_CP_PREV_TLI, tli);
    put_le64(cp + PG_CP_TIME, (uint64_t)now);
    put_le32(cp + PG_CP_OLDEST_ACTIVE_XID, 0);

    uint8_t *r = out->record;
    memset(r, 0, sizeof out->record);
    put_le32(r + 0, PGCONTROL_CHECKPOINT_RECORD_LEN); /* xl_tot_len */
    put_le32(r + 4, 0);                               /* xl_xid */
    put_le64(r + 8, prev);                            /* xl_prev */
    r[16] = PG_XLOG_CHECKPOINT_SHUTDOWN;              /* xl_info */
    r[17] = PG_RM_XLOG;                               /* xl_rmid */
    r[WAL_RECORD_HEADER_SIZE] = XLR_BLOCK_ID_DATA_SHORT;
    r[WAL_RECORD_HEADER_SIZE + 1] = PG_CHECKPOINT_SIZE;
    memcpy(r + WAL_RECORD_HEADER_SIZE + 2, cp, PG_CHECKPOINT_SIZE);
    put_le32(r + WAL_RECORD_CRC_OFFSET, wal_record_compute_crc(r, PGCONTROL_CHECKPOINT_RECORD_LEN));

    out->first_segno = out->record_start / seg_size;
    placer p = {.b = out, .segno = UINT64_MAX, .seg = NULL};
    lsn_t after = lay_out(&p, out->record_start, &out->last_segno);
    out->record_end = WAL_ALIGN_UP(after);
    return 0;
}

void pgcontrol_make_control(const pgcontrol_boot *b, const uint8_t *control, size_t control_len,
                            uint8_t out[PG_CONTROL_FILE_SIZE])
{
    assert(control_len >= PG_CTL_CRC + 4);
    (void)control_len;
    memset(out, 0, PG_CONTROL_FILE_SIZE);
    memcpy(out, control, PG_CTL_CRC);
    put_le32(out + PG_CTL_STATE, PG_DB_SHUTDOWNED);
    put_le64(out + PG_CTL_TIME, get_le64(b->checkpoint + PG_CP_TIME));
    put_le64(out + PG_CTL_CHECKPOINT, b->record_start);
    memcpy(out + PG_CTL_CHECKPOINT_COPY, b->checkpoint, PG_CHECKPOINT_SIZE);
    put_le64(out + PG_CTL_MIN_RECOVERY_POINT, 0);
    put_le32(out + PG_CTL_MIN_RECOVERY_POINT_TLI, 0);
    put_le64(out + PG_CTL_BACKUP_START_POINT, 0);
    put_le64(out + PG_CTL_BACKUP_END_POINT, 0);
    out[PG_CTL_BACKUP_END_REQUIRED] = 0;
    put_le32(out + PG_CTL_CRC, crc32c(out, PG_CTL_CRC));
}

int pgcontrol_replica_seg_size(const uint8_t *control, size_t control_len, uint32_t *seg_size,
                               char *err, size_t errlen)
{
    return check_control(control, control_len, seg_size, err, errlen);
}

void pgcontrol_make_replica_control(const uint8_t *control, size_t control_len,
                                    lsn_t checkpoint_start,
                                    const uint8_t checkpoint[PG_CHECKPOINT_SIZE],
                                    lsn_t min_recovery, uint8_t out[PG_CONTROL_FILE_SIZE])
{
    STRATA_ASSERT(control_len >= PG_CTL_CRC + 4);
    STRATA_ASSERT(checkpoint_start != LSN_INVALID && checkpoint_start < min_recovery);
    STRATA_ASSERT(get_le64(checkpoint + PG_CP_REDO) <= checkpoint_start);
    (void)control_len;
    memset(out, 0, PG_CONTROL_FILE_SIZE);
    memcpy(out, control, PG_CTL_CRC);
    put_le32(out + PG_CTL_STATE, PG_DB_SHUTDOWNED_IN_RECOVERY);
    put_le64(out + PG_CTL_TIME, get_le64(checkpoint + PG_CP_TIME));
    put_le64(out + PG_CTL_CHECKPOINT, checkpoint_start);
    memcpy(out + PG_CTL_CHECKPOINT_COPY, checkpoint, PG_CHECKPOINT_SIZE);
    put_le64(out + PG_CTL_MIN_RECOVERY_POINT, min_recovery);
    put_le32(out + PG_CTL_MIN_RECOVERY_POINT_TLI, get_le32(checkpoint + PG_CP_THIS_TLI));
    put_le64(out + PG_CTL_BACKUP_START_POINT, 0);
    put_le64(out + PG_CTL_BACKUP_END_POINT, 0);
    out[PG_CTL_BACKUP_END_REQUIRED] = 0;
    put_le32(out + PG_CTL_CRC, crc32c(out, PG_CTL_CRC));
}

void pgcontrol_make_segment(const pgcontrol_boot *b, uint64_t segno, uint8_t *seg)
{
    assert(segno >= b->first_segno && segno <= b->last_segno);
    memset(seg, 0, b->seg_size);
    lsn_t seg_start = segno * b->seg_size;
    /* Page 0's long header: xlogreader validates it before any other page. */
    put_page_header(b, seg_start, 0, seg);
    /* The page holding the record start claims that the bytes before the
     * record are the tail of a continued record (XLP_FIRST_IS_CONTRECORD,
     * xlp_rem_len up to the record), so that a reader searching from the
     * page start (pg_waldump -s, XLogFindNextRecord) lands on our record;
     * a reader starting at the record itself ignores it. */
    lsn_t first_page = b->record_start - b->record_start % WAL_BLCKSZ;
    uint32_t gap =
        (uint32_t)(b->record_start - first_page - page_header_size(first_page, b->seg_size));
    if (segno == b->first_segno) {
        put_page_header(b, first_page, gap, seg + (first_page - seg_start));
        /* Every page before it, back to the segment start, continues that
         * fake record too (xlp_rem_len = its bytes left, headers excluded),
         * so that the whole segment reads as valid WAL from its first byte:
         * the walproposer streams an empty timeline from the segment start
         * and stock readers of the safekeepers' segment (pg_waldump) skip
         * to our record. */
        uint32_t rem = gap;
        for (lsn_t page = first_page; page > seg_start;) {
            page -= WAL_BLCKSZ;
            rem += WAL_BLCKSZ - page_header_size(page, b->seg_size);
            put_page_header(b, page, rem, seg + (page - seg_start));
        }
    }
    /* In a later segment, page 0 continues the record: lay_out rewrites it. */
    placer p = {.b = b, .segno = segno, .seg = seg};
    (void)lay_out(&p, b->record_start, NULL);
}

void pgcontrol_segment_name(uint32_t tli, uint64_t segno, uint32_t seg_size, char out[25])
{
    uint64_t per_id = 0x100000000ull / seg_size;
    snprintf(out, 25, "%08X%08X%08X", tli, (uint32_t)(segno / per_id), (uint32_t)(segno % per_id));
}
