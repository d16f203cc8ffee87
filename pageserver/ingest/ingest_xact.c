/*
 * ingest_xact.c: ingest of transaction status -- xact commit/abort/prepare
 * records (CLOG deltas, dropped relations, two-phase state), CLOG zero-page
 * and truncate records, and multixact records (offsets and members deltas,
 * zero pages, truncation).  Layouts: access/xact.h, xactdesc.c, clog.c,
 * multixact.c of PostgreSQL 15 (pgstructs.h).
 *
 * Not for: block references or sizes in general (ingest.c).
 *
 * Every main-data length is checked before a byte of it is used; a record
 * whose counts do not fit its length is rejected as malformed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/strata_assert.h"
#include "pageserver/ingest/ingest_internal.h"

/* ---- SLRU helpers ------------------------------------------------------ */

static int slru_zero_page(ingest_state *ing, slru_kind kind, uint32_t pageno, lsn_t end, char *err,
                          size_t errlen)
{
    uint32_t segno = pageno / PG_SLRU_PAGES_PER_SEGMENT;
    uint32_t blk = pageno % PG_SLRU_PAGES_PER_SEGMENT;
    pg_key sk = {.kind = KEY_SLRU_SIZE, .fork = (uint8_t)kind, .rel = segno};
    if (ingest_extend(ing, &sk, blk, end, err, errlen) != 0)
        return -1;
    pg_key k = pg_key_slru_block(kind, segno, blk);
    return ingest_put(ing, &k, end, VAL_ZERO_PAGE, 0, NULL, 0, err, errlen);
}

typedef struct seg_list {
    uint32_t *segs;
    size_t n, cap;
    bool oom;
} seg_list;

static int collect_segment(const pg_key *k, lsn_t lsn, const value_ref *v, void *arg)
{
    (void)lsn;
    seg_list *l = arg;
    if (k->kind != KEY_SLRU_SIZE || v->kind != VAL_SIZE)
        return 0;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        uint32_t *ns = realloc(l->segs, nc * sizeof *ns);
        if (ns == NULL) {
            l->oom = true;
            return 1;
        }
        l->segs = ns;
        l->cap = nc;
    }
    l->segs[l->n++] = k->rel;
    return 0;
}

/* The existing segments of an SLRU (store scan).  0 or -1. */
static int slru_segments(ingest_state *ing, slru_kind kind, seg_list *l, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    pg_key from = {.kind = KEY_SLRU_SIZE, .fork = (uint8_t)kind};
    pg_key to = {.kind = KEY_SLRU_SIZE, .fork = (uint8_t)(kind + 1)};
    if (ing->b.scan(ing->b.arg, &from, &to, LSN_MAX, collect_segment, l, err, errlen) != 0) {
        free(l->segs);
        return -1;
    }
    if (l->oom) {
        free(l->segs);
        snprintf(err, errlen, "out of memory listing SLRU segments");
        return -1;
    }
    return 0;
}

static int slru_drop_segment(ingest_state *ing, slru_kind kind, uint32_t segno, lsn_t end,
                             char *err, size_t errlen)
{
    pg_key sk = {.kind = KEY_SLRU_SIZE, .fork = (uint8_t)kind, .rel = segno};
    bool ex;
    uint32_t n;
    if (ingest_size_get(ing, &sk, &ex, &n, err, errlen) != 0)
        return -1;
    if (!ex)
        return 0;
    return ingest_size_drop(ing, &sk, end, err, errlen);
}

/* transam.h TransactionIdPrecedes: special xids compare plainly. */
static bool xid_precedes(uint32_t a, uint32_t b)
{
    if (a < PG_FIRST_NORMAL_XID || b < PG_FIRST_NORMAL_XID)
        return a < b;
    return (int32_t)(a - b) < 0;
}

static bool clog_page_precedes(uint32_t p1, uint32_t p2)
{
    uint32_t x1 = p1 * PG_CLOG_XACTS_PER_PAGE + PG_FIRST_NORMAL_XID + 1;
    uint32_t x2 = p2 * PG_CLOG_XACTS_PER_PAGE + PG_FIRST_NORMAL_XID + 1;
    return xid_precedes(x1, x2) && xid_precedes(x1, x2 + PG_CLOG_XACTS_PER_PAGE - 1);
}

static bool mxoff_page_precedes(uint32_t p1, uint32_t p2)
{
    uint32_t m1 = p1 * PG_MULTIXACT_OFFSETS_PER_PAGE + PG_MULTIXACT_FIRST_MULTI;
    uint32_t m2 = p2 * PG_MULTIXACT_OFFSETS_PER_PAGE + PG_MULTIXACT_FIRST_MULTI;
    return (int32_t)(m1 - m2) < 0 && (int32_t)(m1 - (m2 + PG_MULTIXACT_OFFSETS_PER_PAGE - 1)) < 0;
}

/* slru.c SimpleLruTruncate: drop every segment wholly before cutoff_page. */
static int slru_truncate(ingest_state *ing, slru_kind kind, uint32_t cutoff_page,
                         bool (*precedes)(uint32_t, uint32_t), lsn_t end, char *err, size_t errlen)
{
    cutoff_page -= cutoff_page % PG_SLRU_PAGES_PER_SEGMENT;
    seg_list l;
    if (slru_segments(ing, kind, &l, err, errlen) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < l.n && rc == 0; i++) {
        uint32_t segpage = l.segs[i] * PG_SLRU_PAGES_PER_SEGMENT;
        if (precedes(segpage, cutoff_page) &&
            precedes(segpage + PG_SLRU_PAGES_PER_SEGMENT - 1, cutoff_page))
            rc = slru_drop_segment(ing, kind, l.segs[i], end, err, errlen);
    }
    free(l.segs);
    return rc;
}

/* ---- CLOG ---------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sets the status of xids (sorted here) with one VAL_CLOG_SET per page. */
static int clog_set(ingest_state *ing, uint32_t *xids, size_t n, uint8_t status, lsn_t end,
                    char *err, size_t errlen)
{
    qsort(xids, n, sizeof *xids, cmp_u32);
    size_t i = 0;
    while (i < n) {
        uint32_t page = xids[i] / PG_CLOG_XACTS_PER_PAGE;
        size_t j = i;
        while (j < n && xids[j] / PG_CLOG_XACTS_PER_PAGE == page)
            j++;
        size_t cnt = j - i;
        size_t plen = 5 + 4 * cnt;
        uint8_t *p = malloc(plen);
        if (p == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        p[0] = status;
        put_be32(p + 1, (uint32_t)cnt);
        for (size_t x = 0; x < cnt; x++)
            put_be32(p + 5 + 4 * x, xids[i + x]);
        pg_key k = pg_key_slru_block(SLRU_CLOG, page / PG_SLRU_PAGES_PER_SEGMENT,
                                     page % PG_SLRU_PAGES_PER_SEGMENT);
        int rc = ingest_put(ing, &k, end, VAL_CLOG_SET, 0, p, (uint32_t)plen, err, errlen);
        free(p);
        if (rc != 0)
            return -1;
        ing->stats.clog_deltas++;
        i = j;
    }
    return 0;
}

int ingest_clog(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen)
{
    uint8_t info = rec->hdr.info & WAL_XLR_RMGR_INFO_MASK;
    const uint8_t *d = rec->main_data;
    uint32_t len = rec->main_data_len;
    if (info == PG_CLOG_ZEROPAGE) {
        if (len != 4) {
            snprintf(err, errlen, "CLOG zero-page record main data is %u bytes, not 4", len);
            return -1;
        }
        return slru_zero_page(ing, SLRU_CLOG, get_le32(d), end, err, errlen);
    }
    if (info == PG_CLOG_TRUNCATE) {
        if (len != 12) {
            snprintf(err, errlen, "CLOG truncate record main data is %u bytes, not 12", len);
            return -1;
        }
        if (ing->cp_valid) {
            memcpy(ing->cp + PG_CP_OLDEST_XID, d + 4, 4);
            memcpy(ing->cp + PG_CP_OLDEST_XID_DB, d + 8, 4);
            ing->cp_dirty = true;
        }
        return slru_truncate(ing, SLRU_CLOG, get_le32(d), clog_page_precedes, end, err, errlen);
    }
    return 0;
}

/* ---- xact ---------------------------------------------------------- */

typedef struct xact_parsed {
    uint32_t xinfo;
    uint32_t nsubxacts;
    const uint8_t *subxacts;
    uint32_t nrels;
    const uint8_t *xnodes;
    uint32_t twophase_xid;
} xact_parsed;

/* Takes n items of size sz after a 4-byte count at d[*off]. */
static int take_array(const uint8_t *d, uint32_t len, uint32_t *off, uint32_t sz, uint32_t *n,
                      const uint8_t **items, const char *what, char *err, size_t errlen)
{
    if (len - *off < 4) {
        snprintf(err, errlen, "xact record: %s count runs past the main data", what);
        return -1;
    }
    int32_t cnt = (int32_t)get_le32(d + *off);
    *off += 4;
    if (cnt < 0 || (uint64_t)(uint32_t)cnt * sz > len - *off) {
        snprintf(err, errlen, "xact record: %d %s do not fit the main data", cnt, what);
        return -1;
    }
    *n = (uint32_t)cnt;
    *items = d + *off;
    *off += (uint32_t)cnt * sz;
    return 0;
}

/* ParseCommitRecord / ParseAbortRecord (xactdesc.c), bounds-checked. */
static int xact_parse(const wal_record *rec, bool is_abort, xact_parsed *p, char *err,
                      size_t errlen)
{
    const uint8_t *d = rec->main_data;
    uint32_t len = rec->main_data_len;
    memset(p, 0, sizeof *p);
    if (len < PG_XACT_TIME_SIZE) {
        snprintf(err, errlen, "xact record main data is %u bytes, shorter than its header", len);
        return -1;
    }
    uint32_t off = PG_XACT_TIME_SIZE;
    if (rec->hdr.info & PG_XLOG_XACT_HAS_INFO) {
        if (len - off < 4) {
            snprintf(err, errlen, "xact record: xinfo runs past the main data");
            return -1;
        }
        p->xinfo = get_le32(d + off);
        off += 4;
    }
    if (p->xinfo & PG_XINFO_HAS_DBINFO) {
        if (len - off < PG_XACT_DBINFO_SIZE) {
            snprintf(err, errlen, "xact record: dbinfo runs past the main data");
            return -1;
        }
        off += PG_XACT_DBINFO_SIZE;
    }
    if ((p->xinfo & PG_XINFO_HAS_SUBXACTS) &&
        take_array(d, len, &off, 4, &p->nsubxacts, &p->subxacts, "subtransactions", err, errlen))
        return -1;
    if ((p->xinfo & PG_XINFO_HAS_RELFILENODES) &&
        take_array(d, len, &off, PG_RELFILENODE_SIZE, &p->nrels, &p->xnodes, "relations", err,
                   errlen))
        return -1;
    uint32_t n;
    const uint8_t *ignored;
    if ((p->xinfo & PG_XINFO_HAS_DROPPED_STATS) &&
        take_array(d, len, &off, PG_XACT_STATS_ITEM_SIZE, &n, &ignored, "stats items", err, errlen))
        return -1;
    if (!is_abort && (p->xinfo & PG_XINFO_HAS_INVALS) &&
        take_array(d, len, &off, PG_INVAL_MSG_SIZE, &n, &ignored, "invalidations", err, errlen))
        return -1;
    if (p->xinfo & PG_XINFO_HAS_TWOPHASE) {
        if (len - off < 4) {
            snprintf(err, errlen, "xact record: two-phase xid runs past the main data");
            return -1;
        }
        p->twophase_xid = get_le32(d + off);
        off += 4;
        if (p->xinfo & PG_XINFO_HAS_GID) {
            const uint8_t *nul = memchr(d + off, 0, len - off);
            if (nul == NULL || nul - (d + off) >= PG_GIDSIZE) {
                snprintf(err, errlen, "xact record: GID is not terminated within 200 bytes");
                return -1;
            }
            off += (uint32_t)(nul - (d + off)) + 1;
        }
    }
    if ((p->xinfo & PG_XINFO_HAS_ORIGIN) && len - off < PG_XACT_ORIGIN_SIZE) {
        snprintf(err, errlen, "xact record: origin runs past the main data");
        return -1;
    }
    return 0;
}

int ingest_drop_relation(ingest_state *ing, uint32_t spc, uint32_t db, uint32_t rel, lsn_t lsn,
                         char *err, size_t errlen)
{
    bool dropped = false;
    for (uint8_t f = 0; f <= FORK_MAX; f++) {
        pg_key sk = pg_key_rel_size(spc, db, rel, f);
        bool ex;
        uint32_t n;
        if (ingest_size_get(ing, &sk, &ex, &n, err, errlen) != 0)
            return -1;
        if (!ex)
            continue;
        if (ingest_size_drop(ing, &sk, lsn, err, errlen) != 0)
            return -1;
        dropped = true;
    }
    if (dropped)
        ing->stats.rels_dropped++;
    return 0;
}

static int twophase_key_put(ingest_state *ing, uint32_t xid, lsn_t end, const uint8_t *data,
                            uint32_t len, bool tombstone, char *err, size_t errlen)
{
    pg_key k = {.kind = KEY_TWOPHASE, .rel = xid};
    if (tombstone)
        return ingest_put(ing, &k, end, VAL_TOMBSTONE, 0, NULL, 0, err, errlen);
    return ingest_put(ing, &k, end, VAL_BLOB, 0, data, len, err, errlen);
}

/* The commit-time index (KEY_CHECKPOINT_REL_COMMIT_TIME, key.h): the
 * record's xact_time (the first field of its main data, checked by
 * xact_parse) at its end LSN. */
static int put_commit_time(ingest_state *ing, lsn_t end, const wal_record *rec, char *err,
                           size_t errlen)
{
    STRATA_ASSERT(rec->main_data_len >= PG_XACT_TIME_SIZE);
    pg_key k = {.kind = KEY_CHECKPOINT, .rel = KEY_CHECKPOINT_REL_COMMIT_TIME};
    return ingest_put(ing, &k, end, VAL_BLOB, 0, rec->main_data, PG_XACT_TIME_SIZE, err, errlen);
}

int ingest_xact(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen)
{
    uint8_t op = rec->hdr.info & PG_XLOG_XACT_OPMASK;
    if (op == PG_XLOG_XACT_PREPARE) {
        const uint8_t *d = rec->main_data;
        uint32_t len = rec->main_data_len;
        if (len < PG_XACT_PREPARE_HDR_SIZE) {
            snprintf(err, errlen, "prepare record main data is %u bytes, shorter than its header",
                     len);
            return -1;
        }
        if (get_le32(d) != PG_TWOPHASE_MAGIC || get_le32(d + 4) != len + 4) {
            snprintf(err, errlen, "prepare record: bad magic or total length");
            return -1;
        }
        uint32_t xid = get_le32(d + PG_XACT_PREPARE_XID);
        ingest_note_xid(ing, xid);
        /* The two-phase state file without its trailing CRC-32C. */
        return twophase_key_put(ing, xid, end, d, len, false, err, errlen);
    }
    bool commit = op == PG_XLOG_XACT_COMMIT || op == PG_XLOG_XACT_COMMIT_PREPARED;
    bool abort = op == PG_XLOG_XACT_ABORT || op == PG_XLOG_XACT_ABORT_PREPARED;
    if (!commit && !abort)
        return 0; /* assignment, invalidations: nothing stored */
    bool prepared = op == PG_XLOG_XACT_COMMIT_PREPARED || op == PG_XLOG_XACT_ABORT_PREPARED;
    xact_parsed p;
    if (xact_parse(rec, abort, &p, err, errlen) != 0)
        return -1;
    uint32_t xid = prepared ? p.twophase_xid : rec->hdr.xid;
    if (prepared && !(p.xinfo & PG_XINFO_HAS_TWOPHASE)) {
        snprintf(err, errlen, "%s-prepared record without a two-phase xid",
                 commit ? "commit" : "abort");
        return -1;
    }
    if (xid < PG_FIRST_NORMAL_XID) {
        snprintf(err, errlen, "%s record for xid %u", commit ? "commit" : "abort", xid);
        return -1;
    }
    uint32_t *xids = malloc(((size_t)p.nsubxacts + 1) * sizeof *xids);
    if (xids == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    xids[0] = xid;
    for (uint32_t i = 0; i < p.nsubxacts; i++)
        xids[1 + i] = get_le32(p.subxacts + 4 * i);
    for (uint32_t i = 0; i <= p.nsubxacts; i++)
        ingest_note_xid(ing, xids[i]);
    int rc = clog_set(ing, xids, (size_t)p.nsubxacts + 1,
                      commit ? PG_XACT_STATUS_COMMITTED : PG_XACT_STATUS_ABORTED, end, err, errlen);
    free(xids);
    if (rc != 0)
        return -1;
    for (uint32_t i = 0; i < p.nrels; i++) {
        const uint8_t *n = p.xnodes + PG_RELFILENODE_SIZE * i;
        if (ingest_drop_relation(ing, get_le32(n), get_le32(n + 4), get_le32(n + 8), end, err,
                                 errlen) != 0)
            return -1;
    }
    if (prepared && twophase_key_put(ing, xid, end, NULL, 0, true, err, errlen) != 0)
        return -1;
    if (commit && put_commit_time(ing, end, rec, err, errlen) != 0)
        return -1;
    return 0;
}

/* ---- multixact ------------------------------------------------------ */

static bool mx_follows(uint32_t a, uint32_t b)
{
    return (int32_t)(a - b) > 0;
}

static int mxact_create(ingest_state *ing, lsn_t end, const uint8_t *d, uint32_t len, char *err,
                        size_t errlen)
{
    if (len < PG_MXACT_CREATE_HDR_SIZE) {
        snprintf(err, errlen, "multixact create record main data is %u bytes, too short", len);
        return -1;
    }
    uint32_t mid = get_le32(d), moff = get_le32(d + 4);
    int32_t n = (int32_t)get_le32(d + 8);
    if (n <= 0 || (uint64_t)n * PG_MXACT_MEMBER_SIZE != len - PG_MXACT_CREATE_HDR_SIZE) {
        snprintf(err, errlen, "multixact create record: %d members do not match %u bytes", n, len);
        return -1;
    }
    if (mid < PG_MULTIXACT_FIRST_MULTI) {
        snprintf(err, errlen, "multixact create record for invalid multi %u", mid);
        return -1;
    }
    const uint8_t *mem = d + PG_MXACT_CREATE_HDR_SIZE;
    /* The offset of multi mid. */
    uint32_t opage = mid / PG_MULTIXACT_OFFSETS_PER_PAGE;
    uint8_t op[8];
    put_be32(op, mid);
    put_be32(op + 4, moff);
    pg_key ok = pg_key_slru_block(SLRU_MULTIXACT_OFFSETS, opage / PG_SLRU_PAGES_PER_SEGMENT,
                                  opage % PG_SLRU_PAGES_PER_SEGMENT);
    if (ingest_put(ing, &ok, end, VAL_MXACT_OFFSET, 0, op, 8, err, errlen) != 0)
        return -1;
    ing->stats.mxact_deltas++;
    /* The members, one delta per members page they land on. */
    uint8_t *buf = malloc(8 + 5 * (size_t)n);
    if (buf == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int32_t i = 0;
    while (i < n) {
        uint32_t first = moff + (uint32_t)i;
        uint32_t page = first / PG_MULTIXACT_MEMBERS_PER_PAGE;
        int32_t j = i;
        size_t cnt = 0;
        while (j < n && (moff + (uint32_t)j) / PG_MULTIXACT_MEMBERS_PER_PAGE == page) {
            const uint8_t *m = mem + PG_MXACT_MEMBER_SIZE * (size_t)j;
            uint32_t status = get_le32(m + 4);
            if (status > 5) {
                free(buf);
                snprintf(err, errlen, "multixact member status %u out of range", status);
                return -1;
            }
            put_be32(buf + 8 + 5 * cnt, get_le32(m));
            buf[8 + 5 * cnt + 4] = (uint8_t)status;
            ingest_note_xid(ing, get_le32(m));
            cnt++;
            j++;
        }
        put_be32(buf, first);
        put_be32(buf + 4, (uint32_t)cnt);
        pg_key mk = pg_key_slru_block(SLRU_MULTIXACT_MEMBERS, page / PG_SLRU_PAGES_PER_SEGMENT,
                                      page % PG_SLRU_PAGES_PER_SEGMENT);
        if (ingest_put(ing, &mk, end, VAL_MXACT_MEMBERS, 0, buf, (uint32_t)(8 + 5 * cnt), err,
                       errlen) != 0) {
            free(buf);
            return -1;
        }
        ing->stats.mxact_deltas++;
        i = j;
    }
    free(buf);
    if (ing->cp_valid) {
        uint32_t next = mid + 1 < PG_MULTIXACT_FIRST_MULTI ? PG_MULTIXACT_FIRST_MULTI : mid + 1;
        if (mx_follows(next, get_le32(ing->cp + PG_CP_NEXT_MULTI))) {
            put_le32(ing->cp + PG_CP_NEXT_MULTI, next);
            ing->cp_dirty = true;
        }
        uint32_t noff = moff + (uint32_t)n;
        if (mx_follows(noff, get_le32(ing->cp + PG_CP_NEXT_MULTI_OFFSET))) {
            put_le32(ing->cp + PG_CP_NEXT_MULTI_OFFSET, noff);
            ing->cp_dirty = true;
        }
    }
    return 0;
}

/* multixact.c PerformMembersTruncation: segments [start, end) circularly. */
static int mxact_truncate_members(ingest_state *ing, uint32_t start_off, uint32_t end_off,
                                  lsn_t end, char *err, size_t errlen)
{
    const uint64_t nseg =
        (uint64_t)(UINT32_MAX / PG_MULTIXACT_MEMBERS_PER_PAGE / PG_SLRU_PAGES_PER_SEGMENT) + 1;
    uint64_t s = start_off / PG_MULTIXACT_MEMBERS_PER_PAGE / PG_SLRU_PAGES_PER_SEGMENT;
    uint64_t e = end_off / PG_MULTIXACT_MEMBERS_PER_PAGE / PG_SLRU_PAGES_PER_SEGMENT;
    uint64_t span = (e + nseg - s) % nseg;
    seg_list l;
    if (slru_segments(ing, SLRU_MULTIXACT_MEMBERS, &l, err, errlen) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < l.n && rc == 0; i++)
        if ((l.segs[i] + nseg - s) % nseg < span)
            rc = slru_drop_segment(ing, SLRU_MULTIXACT_MEMBERS, l.segs[i], end, err, errlen);
    free(l.segs);
    return rc;
}

int ingest_multixact(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen)
{
    uint8_t info = rec->hdr.info & WAL_XLR_RMGR_INFO_MASK;
    const uint8_t *d = rec->main_data;
    uint32_t len = rec->main_data_len;
    switch (info) {
    case PG_XLOG_MULTIXACT_ZERO_OFF_PAGE:
    case PG_XLOG_MULTIXACT_ZERO_MEM_PAGE:
        if (len != 4) {
            snprintf(err, errlen, "multixact zero-page record main data is %u bytes, not 4", len);
            return -1;
        }
        return slru_zero_page(ing,
                              info == PG_XLOG_MULTIXACT_ZERO_OFF_PAGE ? SLRU_MULTIXACT_OFFSETS
                                                                      : SLRU_MULTIXACT_MEMBERS,
                              get_le32(d), end, err, errlen);
    case PG_XLOG_MULTIXACT_CREATE_ID:
        return mxact_create(ing, end, d, len, err, errlen);
    case PG_XLOG_MULTIXACT_TRUNCATE_ID: {
        if (len != PG_MXACT_TRUNCATE_SIZE) {
            snprintf(err, errlen, "multixact truncate record main data is %u bytes, not %d", len,
                     PG_MXACT_TRUNCATE_SIZE);
            return -1;
        }
        uint32_t end_multi = get_le32(d + 8);
        if (ing->cp_valid) {
            memcpy(ing->cp + PG_CP_OLDEST_MULTI, d + 8, 4);
            memcpy(ing->cp + PG_CP_OLDEST_MULTI_DB, d, 4);
            ing->cp_dirty = true;
        }
        if (mxact_truncate_members(ing, get_le32(d + 12), get_le32(d + 16), end, err, errlen) != 0)
            return -1;
        /* PerformOffsetsTruncation: cut at the page of the multi before end. */
        uint32_t prev = end_multi - 1;
        if (prev < PG_MULTIXACT_FIRST_MULTI)
            prev = UINT32_MAX;
        return slru_truncate(ing, SLRU_MULTIXACT_OFFSETS, prev / PG_MULTIXACT_OFFSETS_PER_PAGE,
                             mxoff_page_precedes, end, err, errlen);
    }
    default:
        return 0;
    }
}
