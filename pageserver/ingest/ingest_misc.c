/*
 * ingest_misc.c: ingest of storage-level records -- smgr create/truncate,
 * database create/drop, relmap updates, the visibility-map bits that heap
 * records clear without referencing the VM page, parameter changes
 * (applied to the stored pg_control) and the compute's postgresql.auto.conf
 * carried by Strata's logical messages.  Layouts: catalog/storage_xlog.h,
 * commands/dbcommands_xlog.h, utils/relmapper.h, access/heapam_xlog.h,
 * replication/message.h, storage.c (smgr_redo), freespace.c, visibilitymap.c
 * (pgstructs.h).
 *
 * Truncation of the FSM and VM follows smgr_redo: the new sizes are what
 * FreeSpaceMapPrepareTruncateRel / visibilitymap_prepare_truncate compute.
 * The partially kept last page: for the VM the truncate record itself is
 * stored on that page as a VAL_WAL_RECORD (redo clears exactly the bits of
 * the removed heap blocks, as Postgres does); for the FSM the page becomes a
 * zero page (the FSM is a hint; a zero page says "no free space known",
 * which VACUUM rebuilds -- the same choice Neon makes).
 *
 * Not for: block references (ingest.c) or transaction status
 * (ingest_xact.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32c.h"
#include "base/strata_assert.h"
#include "pageserver/ingest/ingest_internal.h"

/* ---- smgr ---------------------------------------------------------- */

static int ensure_fork(ingest_state *ing, uint32_t spc, uint32_t db, uint32_t rel, uint8_t fork,
                       lsn_t end, char *err, size_t errlen)
{
    pg_key sk = pg_key_rel_size(spc, db, rel, fork);
    bool ex;
    uint32_t n;
    if (ingest_size_get(ing, &sk, &ex, &n, err, errlen) != 0)
        return -1;
    if (ex)
        return 0;
    ing->stats.rels_created++;
    return ingest_size_set(ing, &sk, 0, end, err, errlen);
}

static int truncate_to(ingest_state *ing, const pg_key *sk, uint32_t cur, uint32_t n, lsn_t end,
                       char *err, size_t errlen)
{
    if (n >= cur)
        return 0; /* mdtruncate in recovery ignores growing "truncations" */
    return ingest_size_set(ing, sk, n, end, err, errlen);
}

static int smgr_truncate(ingest_state *ing, lsn_t end, const wal_record *rec, char *err,
                         size_t errlen)
{
    const uint8_t *d = rec->main_data;
    uint32_t blkno = get_le32(d);
    uint32_t spc = get_le32(d + 4), db = get_le32(d + 8), rel = get_le32(d + 12);
    uint32_t flags = get_le32(d + 16);
    /* smgr_redo creates the main fork first if it is missing. */
    if (ensure_fork(ing, spc, db, rel, FORK_MAIN, end, err, errlen) != 0)
        return -1;
    bool ex;
    uint32_t n;
    if (flags & PG_SMGR_TRUNCATE_HEAP) {
        pg_key sk = pg_key_rel_size(spc, db, rel, FORK_MAIN);
        if (ingest_size_get(ing, &sk, &ex, &n, err, errlen) != 0 ||
            truncate_to(ing, &sk, n, blkno, end, err, errlen) != 0)
            return -1;
    }
    if (flags & PG_SMGR_TRUNCATE_FSM) {
        pg_key sk = pg_key_rel_size(spc, db, rel, FORK_FSM);
        if (ingest_size_get(ing, &sk, &ex, &n, err, errlen) != 0)
            return -1;
        if (ex) {
            uint32_t addr = blkno / PG_FSM_SLOTS_PER_PAGE;
            uint32_t slot = blkno % PG_FSM_SLOTS_PER_PAGE;
            uint32_t phys = pg_fsm_logical_to_physical(addr);
            bool go = true;
            uint32_t newn = phys;
            if (slot > 0) {
                if (phys >= n) {
                    go = false; /* fsm_readbuf(extend=false) finds no page */
                } else {
                    pg_key bk = pg_key_rel_block(spc, db, rel, FORK_FSM, phys);
                    if (ingest_put(ing, &bk, end, VAL_ZERO_PAGE, 0, NULL, 0, err, errlen) != 0)
                        return -1;
                    newn = phys + 1;
                }
            }
            if (go && truncate_to(ing, &sk, n, newn, end, err, errlen) != 0)
                return -1;
        }
    }
    if (flags & PG_SMGR_TRUNCATE_VM) {
        pg_key sk = pg_key_rel_size(spc, db, rel, FORK_VM);
        if (ingest_size_get(ing, &sk, &ex, &n, err, errlen) != 0)
            return -1;
        if (ex) {
            uint32_t vblk = blkno / PG_VM_HEAPBLOCKS_PER_PAGE;
            bool partial = blkno % PG_VM_HEAPBLOCKS_PER_PAGE != 0;
            bool go = true;
            uint32_t newn = vblk;
            if (partial) {
                if (vblk >= n) {
                    go = false;
                } else {
                    pg_key bk = pg_key_rel_block(spc, db, rel, FORK_VM, vblk);
                    if (ingest_put(ing, &bk, end, VAL_WAL_RECORD, 0, rec->raw, rec->hdr.tot_len,
                                   err, errlen) != 0)
                        return -1;
                    ing->stats.wal_records++;
                    newn = vblk + 1;
                }
            }
            if (go && truncate_to(ing, &sk, n, newn, end, err, errlen) != 0)
                return -1;
        }
    }
    return 0;
}

int ingest_smgr(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen)
{
    uint8_t info = rec->hdr.info & WAL_XLR_RMGR_INFO_MASK;
    const uint8_t *d = rec->main_data;
    uint32_t len = rec->main_data_len;
    if (info == PG_XLOG_SMGR_CREATE) {
        if (len != PG_SMGR_CREATE_SIZE) {
            snprintf(err, errlen, "smgr create record main data is %u bytes, not %d", len,
                     PG_SMGR_CREATE_SIZE);
            return -1;
        }
        uint32_t fork = get_le32(d + 12);
        if (fork > FORK_MAX) {
            snprintf(err, errlen, "smgr create record for fork %u", fork);
            return -1;
        }
        return ensure_fork(ing, get_le32(d), get_le32(d + 4), get_le32(d + 8), (uint8_t)fork, end,
                           err, errlen);
    }
    if (info == PG_XLOG_SMGR_TRUNCATE) {
        if (len != PG_SMGR_TRUNCATE_SIZE) {
            snprintf(err, errlen, "smgr truncate record main data is %u bytes, not %d", len,
                     PG_SMGR_TRUNCATE_SIZE);
            return -1;
        }
        return smgr_truncate(ing, end, rec, err, errlen);
    }
    return 0;
}

/* ---- databases ------------------------------------------------------ */

typedef struct rel_fork {
    uint32_t rel;
    uint8_t fork;
    uint32_t nblocks;
} rel_fork;

typedef struct rel_list {
    rel_fork *v;
    size_t n, cap;
    bool oom;
} rel_list;

static int collect_rel(const pg_key *k, lsn_t lsn, const value_ref *v, void *arg)
{
    (void)lsn;
    rel_list *l = arg;
    if (k->kind != KEY_REL_SIZE || v->kind != VAL_SIZE || v->len != 4)
        return 0;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 256;
        rel_fork *nv = realloc(l->v, nc * sizeof *nv);
        if (nv == NULL) {
            l->oom = true;
            return 1;
        }
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = (rel_fork){k->rel, k->fork, get_be32(v->payload)};
    return 0;
}

/* Every existing relation fork of database (spc, db). */
static int db_relations(ingest_state *ing, uint32_t spc, uint32_t db, rel_list *l, char *err,
                        size_t errlen)
{
    memset(l, 0, sizeof *l);
    pg_key from = {.kind = KEY_REL_SIZE, .spc = spc, .db = db};
    pg_key to = {.kind = KEY_REL_SIZE, .spc = spc, .db = db + 1};
    if (db == UINT32_MAX) {
        to.spc = spc + 1;
        to.db = 0;
    }
    if (ing->b.scan(ing->b.arg, &from, &to, LSN_MAX, collect_rel, l, err, errlen) != 0) {
        free(l->v);
        return -1;
    }
    if (l->oom) {
        free(l->v);
        snprintf(err, errlen, "out of memory listing relations");
        return -1;
    }
    return 0;
}

static int put_db_marker(ingest_state *ing, uint32_t spc, uint32_t db, lsn_t end, bool tombstone,
                         char *err, size_t errlen)
{
    pg_key k = {.kind = KEY_DB, .spc = spc, .db = db};
    return ingest_put(ing, &k, end, tombstone ? VAL_TOMBSTONE : VAL_BLOB, 0, NULL, 0, err, errlen);
}

static int db_copy(ingest_state *ing, lsn_t end, uint32_t db, uint32_t spc, uint32_t src_db,
                   uint32_t src_spc, char *err, size_t errlen)
{
    rel_list l;
    if (db_relations(ing, src_spc, src_db, &l, err, errlen) != 0)
        return -1;
    int rc = 0;
    uint8_t *page = malloc(PG_BLCKSZ);
    if (page == NULL) {
        free(l.v);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < l.n && rc == 0; i++) {
        const rel_fork *r = &l.v[i];
        pg_key sk = pg_key_rel_size(spc, db, r->rel, r->fork);
        rc = ingest_size_set(ing, &sk, r->nblocks, end, err, errlen);
        if (rc == 0)
            ing->stats.rels_created++;
        for (uint32_t b = 0; b < r->nblocks && rc == 0; b++) {
            pg_key src = pg_key_rel_block(src_spc, src_db, r->rel, r->fork, b);
            pg_key dst = pg_key_rel_block(spc, db, r->rel, r->fork, b);
            rc = ing->b.get_page(ing->b.arg, &src, LSN_MAX, page, err, errlen);
            if (rc != 0)
                break;
            bool zero = true;
            for (size_t x = 0; x < PG_BLCKSZ && zero; x++)
                zero = page[x] == 0;
            rc = zero ? ingest_put(ing, &dst, end, VAL_ZERO_PAGE, 0, NULL, 0, err, errlen)
                      : ingest_put(ing, &dst, end, VAL_IMAGE, 0, page, PG_BLCKSZ, err, errlen);
        }
    }
    free(page);
    free(l.v);
    if (rc != 0)
        return -1;
    /* The relmap comes with the copy (RelationMapCopy is not WAL-logged
     * under FILE_COPY: the files are copied). */
    pg_key mk = {.kind = KEY_RELMAP, .spc = src_spc, .db = src_db};
    value_ref v;
    lsn_t found;
    int got = ing->b.get_latest(ing->b.arg, &mk, LSN_MAX, &v, &found, err, errlen);
    if (got < 0)
        return -1;
    if (got == 1) {
        int prc = 0;
        if (v.kind == VAL_BLOB) {
            pg_key dk = {.kind = KEY_RELMAP, .spc = spc, .db = db};
            prc = ingest_put(ing, &dk, end, VAL_BLOB, 0, v.payload, v.len, err, errlen);
        }
        free((void *)v.payload);
        if (prc != 0)
            return -1;
    }
    return put_db_marker(ing, spc, db, end, false, err, errlen);
}

static int db_drop(ingest_state *ing, lsn_t end, uint32_t spc, uint32_t db, char *err,
                   size_t errlen)
{
    rel_list l;
    if (db_relations(ing, spc, db, &l, err, errlen) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < l.n && rc == 0; i++) {
        pg_key sk = pg_key_rel_size(spc, db, l.v[i].rel, l.v[i].fork);
        rc = ingest_size_drop(ing, &sk, end, err, errlen);
        if (rc == 0 && l.v[i].fork == FORK_MAIN)
            ing->stats.rels_dropped++;
    }
    free(l.v);
    if (rc != 0)
        return -1;
    pg_key mk = {.kind = KEY_RELMAP, .spc = spc, .db = db};
    if (ingest_put(ing, &mk, end, VAL_TOMBSTONE, 0, NULL, 0, err, errlen) != 0)
        return -1;
    return put_db_marker(ing, spc, db, end, true, err, errlen);
}

int ingest_dbase(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen)
{
    uint8_t info = rec->hdr.info & WAL_XLR_RMGR_INFO_MASK;
    const uint8_t *d = rec->main_data;
    uint32_t len = rec->main_data_len;
    switch (info) {
    case PG_XLOG_DBASE_CREATE_FILE_COPY:
        if (len != PG_DBASE_CREATE_FILE_COPY_SIZE) {
            snprintf(err, errlen, "create-database record main data is %u bytes, not %d", len,
                     PG_DBASE_CREATE_FILE_COPY_SIZE);
            return -1;
        }
        return db_copy(ing, end, get_le32(d), get_le32(d + 4), get_le32(d + 8), get_le32(d + 12),
                       err, errlen);
    case PG_XLOG_DBASE_CREATE_WAL_LOG:
        if (len != PG_DBASE_CREATE_WAL_LOG_SIZE) {
            snprintf(err, errlen, "create-database record main data is %u bytes, not %d", len,
                     PG_DBASE_CREATE_WAL_LOG_SIZE);
            return -1;
        }
        return put_db_marker(ing, get_le32(d + 4), get_le32(d), end, false, err, errlen);
    case PG_XLOG_DBASE_DROP: {
        if (len < PG_DBASE_DROP_HDR_SIZE) {
            snprintf(err, errlen, "drop-database record main data is %u bytes, too short", len);
            return -1;
        }
        int32_t n = (int32_t)get_le32(d + 4);
        if (n < 0 || (uint64_t)n * 4 != len - PG_DBASE_DROP_HDR_SIZE) {
            snprintf(err, errlen, "drop-database record: %d tablespaces do not match %u bytes", n,
                     len);
            return -1;
        }
        for (int32_t i = 0; i < n; i++)
            if (db_drop(ing, end, get_le32(d + 8 + 4 * (size_t)i), get_le32(d), err, errlen) != 0)
                return -1;
        return 0;
    }
    default:
        return 0;
    }
}

/* ---- relmap -------------------------------------------------------- */

int ingest_relmap(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen)
{
    if ((rec->hdr.info & WAL_XLR_RMGR_INFO_MASK) != PG_XLOG_RELMAP_UPDATE)
        return 0;
    const uint8_t *d = rec->main_data;
    uint32_t len = rec->main_data_len;
    if (len < PG_RELMAP_UPDATE_HDR_SIZE) {
        snprintf(err, errlen, "relmap record main data is %u bytes, too short", len);
        return -1;
    }
    int32_t nbytes = (int32_t)get_le32(d + 8);
    if (nbytes != PG_RELMAP_FILE_SIZE || (uint32_t)nbytes != len - PG_RELMAP_UPDATE_HDR_SIZE) {
        snprintf(err, errlen, "relmap record: %d map bytes in %u bytes of main data", nbytes, len);
        return -1;
    }
    pg_key k = {.kind = KEY_RELMAP, .spc = get_le32(d + 4), .db = get_le32(d)};
    return ingest_put(ing, &k, end, VAL_BLOB, 0, d + PG_RELMAP_UPDATE_HDR_SIZE, (uint32_t)nbytes,
                      err, errlen);
}

/* ---- logical messages: the compute's postgresql.auto.conf ---------- */

int ingest_logical_message(ingest_state *ing, lsn_t end, const wal_record *rec, char *err,
                           size_t errlen)
{
    if ((rec->hdr.info & WAL_XLR_RMGR_INFO_MASK) != PG_XLOG_LOGICAL_MESSAGE)
        return 0;
    const uint8_t *d = rec->main_data;
    uint32_t len = rec->main_data_len;
    if (len < PG_LOGICAL_MESSAGE_HDR_SIZE) {
        snprintf(err, errlen, "logical message main data is %u bytes, too short", len);
        return -1;
    }
    uint64_t prefix_size = get_le64(d + PG_LOGICAL_MESSAGE_PREFIX_SIZE_OFF);
    uint64_t message_size = get_le64(d + PG_LOGICAL_MESSAGE_SIZE_OFF);
    uint64_t room = len - PG_LOGICAL_MESSAGE_HDR_SIZE;
    if (prefix_size == 0 || prefix_size > room || message_size != room - prefix_size) {
        snprintf(err, errlen,
                 "logical message: prefix of %" PRIu64 " and message of %" PRIu64
                 " bytes in %" PRIu64 " bytes of payload",
                 prefix_size, message_size, room);
        return -1;
    }
    const uint8_t *prefix = d + PG_LOGICAL_MESSAGE_HDR_SIZE;
    if (prefix[prefix_size - 1] != '\0') {
        snprintf(err, errlen, "logical message: prefix is not NUL-terminated");
        return -1;
    }
    /* Other prefixes belong to other users of pg_logical_emit_message. */
    if (strcmp((const char *)prefix, WAL_AUTO_CONF_PREFIX) != 0)
        return 0;
    if (message_size > WAL_AUTO_CONF_MAX) {
        snprintf(err, errlen, "%s message of %" PRIu64 " bytes (at most %u)", WAL_AUTO_CONF_PREFIX,
                 message_size, WAL_AUTO_CONF_MAX);
        return -1;
    }
    const uint8_t *conf = prefix + prefix_size;
    if (memchr(conf, '\0', (size_t)message_size) != NULL) {
        snprintf(err, errlen, "%s message holds a NUL byte", WAL_AUTO_CONF_PREFIX);
        return -1;
    }
    pg_key k = {.kind = KEY_CHECKPOINT, .rel = KEY_CHECKPOINT_REL_AUTO_CONF};
    if (ingest_put(ing, &k, end, VAL_BLOB, 0, conf, (uint32_t)message_size, err, errlen) != 0)
        return -1;
    ing->stats.auto_confs++;
    return 0;
}

/* ---- checkpoint records (for replicas) ------------------------------ */

int ingest_checkpoint_record(ingest_state *ing, lsn_t start, lsn_t end, uint8_t info,
                             const uint8_t *cp, char *err, size_t errlen)
{
    STRATA_ASSERT(start < end);
    STRATA_ASSERT(info == PG_XLOG_CHECKPOINT_SHUTDOWN || info == PG_XLOG_CHECKPOINT_ONLINE);
    uint8_t v[KEY_CHECKPOINT_RECORD_LEN];
    put_le64(v + KEY_CHECKPOINT_RECORD_START_OFF, start);
    v[KEY_CHECKPOINT_RECORD_INFO_OFF] = info;
    memcpy(v + KEY_CHECKPOINT_RECORD_CP_OFF, cp, PG_CHECKPOINT_SIZE);
    pg_key k = {.kind = KEY_CHECKPOINT, .rel = KEY_CHECKPOINT_REL_RECORD};
    return ingest_put(ing, &k, end, VAL_BLOB, 0, v, sizeof v, err, errlen);
}

/* ---- heap: visibility map bits cleared ------------------------------ */

static int vm_clear_page(ingest_state *ing, lsn_t end, const wal_block_ref *b, uint32_t vblk,
                         uint32_t nvm, uint32_t heap_a, uint32_t heap_b, uint8_t flags, char *err,
                         size_t errlen)
{
    /* A page past the VM's end holds no bits (visibilitymap_clear on the
     * primary found none to clear). */
    if (vblk >= nvm)
        return 0;
    uint8_t p[9];
    p[0] = flags;
    put_be32(p + 1, heap_a);
    put_be32(p + 5, heap_b);
    pg_key k = pg_key_rel_block(b->spc, b->db, b->rel, FORK_VM, vblk);
    if (ingest_put(ing, &k, end, VAL_VM_CLEAR, 0, p, 9, err, errlen) != 0)
        return -1;
    ing->stats.vm_clears++;
    return 0;
}

/* Clears flags for heap blocks heap_a and heap_b (UINT32_MAX: none) of the
 * relation of block reference b: one delta per VM page touched. */
static int vm_clear(ingest_state *ing, lsn_t end, const wal_block_ref *b, uint32_t heap_a,
                    uint32_t heap_b, uint8_t flags, char *err, size_t errlen)
{
    pg_key sk = pg_key_rel_size(b->spc, b->db, b->rel, FORK_VM);
    bool ex;
    uint32_t n;
    if (ingest_size_get(ing, &sk, &ex, &n, err, errlen) != 0)
        return -1;
    if (!ex)
        return 0; /* no VM, no bits to clear */
    uint32_t va = heap_a / PG_VM_HEAPBLOCKS_PER_PAGE;
    if (heap_b == UINT32_MAX)
        return vm_clear_page(ing, end, b, va, n, heap_a, UINT32_MAX, flags, err, errlen);
    uint32_t vb = heap_b / PG_VM_HEAPBLOCKS_PER_PAGE;
    if (va == vb)
        return vm_clear_page(ing, end, b, va, n, heap_a, heap_b, flags, err, errlen);
    if (vm_clear_page(ing, end, b, va, n, heap_a, UINT32_MAX, flags, err, errlen) != 0)
        return -1;
    return vm_clear_page(ing, end, b, vb, n, heap_b, UINT32_MAX, flags, err, errlen);
}

static int need_len(uint32_t len, uint32_t want, const char *what, char *err, size_t errlen)
{
    if (len >= want)
        return 0;
    snprintf(err, errlen, "%s record main data is %u bytes, shorter than %u", what, len, want);
    return -1;
}

int ingest_heap_vm(ingest_state *ing, lsn_t end, const wal_record *rec, char *err, size_t errlen)
{
    uint8_t op = rec->hdr.info & PG_XLOG_HEAP_OPMASK;
    const uint8_t *d = rec->main_data;
    uint32_t len = rec->main_data_len;
    uint32_t heap_a = UINT32_MAX, heap_b = UINT32_MAX;
    uint8_t bits = PG_VM_VALID_BITS;
    const wal_block_ref *b0 = rec->max_block_id >= 0 ? &rec->blocks[0] : NULL;
    if (b0 != NULL && !b0->in_use)
        b0 = NULL;
    if (rec->hdr.rmid == PG_RM_HEAP) {
        switch (op) {
        case PG_XLOG_HEAP_INSERT:
            if (need_len(len, PG_HEAP_INSERT_SIZE, "heap insert", err, errlen))
                return -1;
            if (d[2] & PG_XLH_INSERT_ALL_VISIBLE_CLEARED)
                heap_a = 0;
            break;
        case PG_XLOG_HEAP_DELETE:
            if (need_len(len, PG_HEAP_DELETE_SIZE, "heap delete", err, errlen))
                return -1;
            if (d[7] & PG_XLH_DELETE_ALL_VISIBLE_CLEARED)
                heap_a = 0;
            break;
        case PG_XLOG_HEAP_UPDATE:
        case PG_XLOG_HEAP_HOT_UPDATE: {
            if (need_len(len, PG_HEAP_UPDATE_SIZE, "heap update", err, errlen))
                return -1;
            uint8_t f = d[7];
            if (f &
                (PG_XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED | PG_XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED)) {
                if (b0 == NULL) {
                    snprintf(err, errlen, "heap update record without block 0");
                    return -1;
                }
                uint32_t newblk = b0->blkno;
                uint32_t oldblk = newblk;
                if (rec->max_block_id >= 1 && rec->blocks[1].in_use)
                    oldblk = rec->blocks[1].blkno;
                if (f & PG_XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED)
                    heap_a = newblk;
                if (f & PG_XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED) {
                    if (heap_a == UINT32_MAX)
                        heap_a = oldblk;
                    else if (oldblk != newblk)
                        heap_b = oldblk;
                }
            }
            if (heap_a == UINT32_MAX)
                return 0;
            return vm_clear(ing, end, b0, heap_a, heap_b, bits, err, errlen);
        }
        case PG_XLOG_HEAP_LOCK:
            if (need_len(len, PG_HEAP_LOCK_SIZE, "heap lock", err, errlen))
                return -1;
            if (d[7] & PG_XLH_LOCK_ALL_FROZEN_CLEARED) {
                heap_a = 0;
                bits = PG_VM_ALL_FROZEN;
            }
            break;
        default:
            return 0;
        }
    } else {
        switch (op) {
        case PG_XLOG_HEAP2_MULTI_INSERT:
            if (need_len(len, PG_HEAP_MULTI_INSERT_HDR_SIZE, "heap multi-insert", err, errlen))
                return -1;
            if (d[0] & PG_XLH_INSERT_ALL_VISIBLE_CLEARED)
                heap_a = 0;
            break;
        case PG_XLOG_HEAP2_LOCK_UPDATED:
            if (need_len(len, PG_HEAP_LOCK_SIZE, "heap lock-updated", err, errlen))
                return -1;
            if (d[7] & PG_XLH_LOCK_ALL_FROZEN_CLEARED) {
                heap_a = 0;
                bits = PG_VM_ALL_FROZEN;
            }
            break;
        default:
            return 0;
        }
    }
    if (heap_a == UINT32_MAX)
        return 0;
    /* heap_a == 0 above means "the block of reference 0". */
    if (b0 == NULL) {
        snprintf(err, errlen, "heap record clears VM bits but has no block 0");
        return -1;
    }
    return vm_clear(ing, end, b0, b0->blkno, UINT32_MAX, bits, err, errlen);
}

/* ---- parameter change: the stored pg_control ------------------------ */

int ingest_parameter_change(ingest_state *ing, lsn_t end, const uint8_t *d, char *err,
                            size_t errlen)
{
    pg_key k = {.kind = KEY_CONTROL};
    value_ref v;
    lsn_t found;
    int rc = ing->b.get_latest(ing->b.arg, &k, LSN_MAX, &v, &found, err, errlen);
    if (rc <= 0)
        return rc; /* nothing imported: nothing to update */
    if (v.kind != VAL_BLOB || v.len != PG_CONTROL_FILE_SIZE) {
        free((void *)v.payload);
        return 0;
    }
    uint8_t *c = malloc(PG_CONTROL_FILE_SIZE);
    if (c == NULL) {
        free((void *)v.payload);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(c, v.payload, PG_CONTROL_FILE_SIZE);
    free((void *)v.payload);
    memcpy(c + PG_CTL_MAX_CONNECTIONS, d + 0, 4);
    memcpy(c + PG_CTL_MAX_WORKER_PROCESSES, d + 4, 4);
    memcpy(c + PG_CTL_MAX_WAL_SENDERS, d + 8, 4);
    memcpy(c + PG_CTL_MAX_PREPARED_XACTS, d + 12, 4);
    memcpy(c + PG_CTL_MAX_LOCKS_PER_XACT, d + 16, 4);
    memcpy(c + PG_CTL_WAL_LEVEL, d + 20, 4);
    c[PG_CTL_WAL_LOG_HINTS] = d[24];
    c[PG_CTL_TRACK_COMMIT_TS] = d[25];
    put_le32(c + PG_CTL_CRC, crc32c(c, PG_CTL_CRC));
    rc = ingest_put(ing, &k, end, VAL_BLOB, 0, c, PG_CONTROL_FILE_SIZE, err, errlen);
    free(c);
    return rc;
}
