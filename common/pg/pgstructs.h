/*
 * pgstructs.h: the PostgreSQL 15 on-disk and WAL payload layouts Strata reads
 * and writes without Postgres's headers, written down as constants and byte
 * offsets (x86-64 / aarch64 layout: little-endian, 8-byte MAXALIGN).  Part of
 * common/pg/, the one home of PostgreSQL's formats (walformat.h holds the WAL
 * page and record framing).
 *
 * For: the relation page size and header, decoding rmgr main data (xact,
 * smgr, dbase, relmap, clog, multixact, heap flags, XLOG checkpoint records)
 * and pg_control in the pageserver's ingest, import and basebackup.  Each
 * block names the Postgres header the values come from;
 * compute/extension/pgstructs_check.c, compiled into strata.so against those
 * headers, static-asserts every constant, size and offset here against
 * Postgres's own, so a mismatch fails the build.
 *
 * Not for: the WAL record framing (common/pg/walformat.h) or key/value
 * encoding (pageserver/store/key.h).  Constants and pure inline readers only;
 * no state.
 */
#ifndef STRATA_PG_PGSTRUCTS_H
#define STRATA_PG_PGSTRUCTS_H

#include <stdint.h>
#include <string.h>

/* WAL and data files are in host order, little-endian on every platform we
 * build for: read and write them with get_le* and put_le*. */
#include "base/byteorder.h"

/* ---- ids (access/rmgrlist.h) ---- */
enum {
    PG_RM_XLOG = 0,
    PG_RM_XACT = 1,
    PG_RM_SMGR = 2,
    PG_RM_CLOG = 3,
    PG_RM_DBASE = 4,
    PG_RM_TBLSPC = 5,
    PG_RM_MULTIXACT = 6,
    PG_RM_RELMAP = 7,
    PG_RM_STANDBY = 8,
    PG_RM_HEAP2 = 9,
    PG_RM_HEAP = 10,
    PG_RM_LOGICALMSG = 21,
};

/* Special relations (catalog/pg_tablespace_d.h) */
#define PG_DEFAULTTABLESPACE_OID 1663
#define PG_GLOBALTABLESPACE_OID 1664

/* Transaction ids (access/transam.h) */
#define PG_FIRST_NORMAL_XID 3u
#define PG_XID_CHECKPOINT_INTERVAL 1024u /* how far ingest moves nextXid ahead at once */

/* Pages (pg_config.h, storage/bufpage.h): pd_lsn at 0 (xlogid u32, xrecoff u32),
 * pd_upper at 14. */
#define PG_BLCKSZ 8192 /* BLCKSZ: a relation page */
#define PG_PAGE_LSN_OFF 0
#define PG_PAGE_UPPER_OFF 14
#define PG_PAGE_HEADER_SIZE 24

/* ---- XLOG rmgr (catalog/pg_control.h, access/xlog_internal.h) ---- */
#define PG_XLOG_CHECKPOINT_SHUTDOWN 0x00
#define PG_XLOG_CHECKPOINT_ONLINE 0x10
#define PG_XLOG_NEXTOID 0x30
#define PG_XLOG_PARAMETER_CHANGE 0x60
#define PG_XLOG_END_OF_RECOVERY 0x90
#define PG_XLOG_FPI_FOR_HINT 0xA0
#define PG_XLOG_FPI 0xB0

/* struct CheckPoint: 88 bytes */
#define PG_CHECKPOINT_SIZE 88
#define PG_CP_REDO 0
#define PG_CP_THIS_TLI 8
#define PG_CP_PREV_TLI 12
#define PG_CP_FULL_PAGE_WRITES 16
#define PG_CP_NEXT_XID 24 /* FullTransactionId u64 */
#define PG_CP_NEXT_OID 32
#define PG_CP_NEXT_MULTI 36
#define PG_CP_NEXT_MULTI_OFFSET 40
#define PG_CP_OLDEST_XID 44
#define PG_CP_OLDEST_XID_DB 48
#define PG_CP_OLDEST_MULTI 52
#define PG_CP_OLDEST_MULTI_DB 56
#define PG_CP_TIME 64
#define PG_CP_OLDEST_ACTIVE_XID 80

/* xl_parameter_change: 28 bytes; xl_end_of_recovery: 16 bytes */
#define PG_PARAM_CHANGE_SIZE 28
#define PG_END_OF_RECOVERY_SIZE 16
#define PG_EOR_THIS_TLI 8
#define PG_EOR_PREV_TLI 12

/* ControlFileData (catalog/pg_control.h) */
#define PG_CONTROL_VERSION 1300
#define PG_CONTROL_FILE_SIZE 8192
#define PG_CTL_SYSTEM_ID 0
#define PG_CTL_VERSION 8
#define PG_CTL_STATE 16
#define PG_CTL_CHECKPOINT 32
#define PG_CTL_CHECKPOINT_COPY 40
#define PG_CTL_WAL_LEVEL 172
#define PG_CTL_WAL_LOG_HINTS 176
#define PG_CTL_MAX_CONNECTIONS 180
#define PG_CTL_MAX_WORKER_PROCESSES 184
#define PG_CTL_MAX_WAL_SENDERS 188
#define PG_CTL_MAX_PREPARED_XACTS 192
#define PG_CTL_MAX_LOCKS_PER_XACT 196
#define PG_CTL_TRACK_COMMIT_TS 200
#define PG_CTL_BLCKSZ 216
#define PG_CTL_XLOG_BLCKSZ 224
#define PG_CTL_XLOG_SEG_SIZE 228
#define PG_CTL_CRC 288 /* crc32c of bytes [0, 288) */
#define PG_DB_SHUTDOWNED 1
#define PG_DB_SHUTDOWNED_IN_RECOVERY 2

/* ---- XACT rmgr (access/xact.h) ---- */
#define PG_XLOG_XACT_COMMIT 0x00
#define PG_XLOG_XACT_PREPARE 0x10
#define PG_XLOG_XACT_ABORT 0x20
#define PG_XLOG_XACT_COMMIT_PREPARED 0x30
#define PG_XLOG_XACT_ABORT_PREPARED 0x40
#define PG_XLOG_XACT_OPMASK 0x70
#define PG_XLOG_XACT_HAS_INFO 0x80

#define PG_XINFO_HAS_DBINFO (1u << 0)
#define PG_XINFO_HAS_SUBXACTS (1u << 1)
#define PG_XINFO_HAS_RELFILENODES (1u << 2)
#define PG_XINFO_HAS_INVALS (1u << 3)
#define PG_XINFO_HAS_TWOPHASE (1u << 4)
#define PG_XINFO_HAS_ORIGIN (1u << 5)
#define PG_XINFO_HAS_AE_LOCKS (1u << 6)
#define PG_XINFO_HAS_GID (1u << 7)
#define PG_XINFO_HAS_DROPPED_STATS (1u << 8)

#define PG_XACT_TIME_SIZE 8        /* xl_xact_commit / xl_xact_abort */
#define PG_XACT_DBINFO_SIZE 8      /* dbId, tsId */
#define PG_RELFILENODE_SIZE 12     /* spcNode, dbNode, relNode */
#define PG_XACT_STATS_ITEM_SIZE 12 /* kind, dboid, objoid */
#define PG_INVAL_MSG_SIZE 16       /* SharedInvalidationMessage */
#define PG_XACT_ORIGIN_SIZE 16
#define PG_GIDSIZE 200

/* xl_xact_prepare header (twophase state file header): xid at 8. */
#define PG_XACT_PREPARE_HDR_SIZE 72
#define PG_XACT_PREPARE_XID 8
#define PG_TWOPHASE_MAGIC 0x57F94534u

/* CLOG (access/clog.h, clog.c) */
#define PG_CLOG_ZEROPAGE 0x00
#define PG_CLOG_TRUNCATE 0x10
#define PG_CLOG_XACTS_PER_PAGE (8192u * 4u)
#define PG_XACT_STATUS_COMMITTED 1
#define PG_XACT_STATUS_ABORTED 2
#define PG_XACT_STATUS_SUB_COMMITTED 3
#define PG_SLRU_PAGES_PER_SEGMENT 32u

/* MULTIXACT (access/multixact.h, multixact.c) */
#define PG_XLOG_MULTIXACT_ZERO_OFF_PAGE 0x00
#define PG_XLOG_MULTIXACT_ZERO_MEM_PAGE 0x10
#define PG_XLOG_MULTIXACT_CREATE_ID 0x20
#define PG_XLOG_MULTIXACT_TRUNCATE_ID 0x30
#define PG_MXACT_CREATE_HDR_SIZE 12 /* mid, moff, nmembers; then {xid u32, status u32} */
#define PG_MXACT_MEMBER_SIZE 8
#define PG_MXACT_TRUNCATE_SIZE 20 /* oldestMultiDB, startOff, endOff, startMemb, endMemb */
#define PG_MULTIXACT_OFFSETS_PER_PAGE (8192u / 4u)
#define PG_MULTIXACT_MEMBERS_PER_GROUP 4u
#define PG_MULTIXACT_MEMBERGROUP_SIZE 20u /* 4 flag bytes + 4 xids */
#define PG_MULTIXACT_MEMBERS_PER_PAGE                                                              \
    ((8192u / PG_MULTIXACT_MEMBERGROUP_SIZE) * PG_MULTIXACT_MEMBERS_PER_GROUP)
#define PG_MULTIXACT_FIRST_MULTI 1u

/* SMGR (catalog/storage_xlog.h) */
#define PG_XLOG_SMGR_CREATE 0x10
#define PG_XLOG_SMGR_TRUNCATE 0x20
#define PG_SMGR_CREATE_SIZE 16   /* rnode(12), forkNum int */
#define PG_SMGR_TRUNCATE_SIZE 20 /* blkno, rnode(12), flags int */
#define PG_SMGR_TRUNCATE_HEAP 0x1
#define PG_SMGR_TRUNCATE_VM 0x2
#define PG_SMGR_TRUNCATE_FSM 0x4

/* DBASE (commands/dbcommands_xlog.h) */
#define PG_XLOG_DBASE_CREATE_FILE_COPY 0x00
#define PG_XLOG_DBASE_CREATE_WAL_LOG 0x10
#define PG_XLOG_DBASE_DROP 0x20
#define PG_DBASE_CREATE_FILE_COPY_SIZE 16 /* db, spc, src_db, src_spc */
#define PG_DBASE_CREATE_WAL_LOG_SIZE 8    /* db, spc */
#define PG_DBASE_DROP_HDR_SIZE 8          /* db, ntablespaces; then spc oids */

/* RELMAP (utils/relmapper.h) */
#define PG_XLOG_RELMAP_UPDATE 0x00
#define PG_RELMAP_UPDATE_HDR_SIZE 12 /* dbid, tsid, nbytes */
#define PG_RELMAP_FILE_SIZE 512

/* Logical messages (replication/message.h): xl_logical_message is dbId u32,
 * transactional bool (then padding), prefix_size u64, message_size u64, then
 * the prefix (prefix_size bytes, NUL included) and the message. */
#define PG_XLOG_LOGICAL_MESSAGE 0x00
#define PG_LOGICAL_MESSAGE_PREFIX_SIZE_OFF 8
#define PG_LOGICAL_MESSAGE_SIZE_OFF 16
#define PG_LOGICAL_MESSAGE_HDR_SIZE 24

/* HEAP / HEAP2 (access/heapam_xlog.h) */
#define PG_XLOG_HEAP_OPMASK 0x70
#define PG_XLOG_HEAP_INSERT 0x00
#define PG_XLOG_HEAP_DELETE 0x10
#define PG_XLOG_HEAP_UPDATE 0x20
#define PG_XLOG_HEAP_HOT_UPDATE 0x40
#define PG_XLOG_HEAP_LOCK 0x60
#define PG_XLOG_HEAP2_MULTI_INSERT 0x50
#define PG_XLOG_HEAP2_LOCK_UPDATED 0x60
#define PG_XLH_INSERT_ALL_VISIBLE_CLEARED 0x01 /* xl_heap_insert.flags at 2; multi_insert at 0 */
#define PG_XLH_DELETE_ALL_VISIBLE_CLEARED 0x01 /* xl_heap_delete.flags at 7 */
#define PG_XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED 0x01 /* xl_heap_update.flags at 7 */
#define PG_XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED 0x02
#define PG_XLH_LOCK_ALL_FROZEN_CLEARED 0x01 /* xl_heap_lock(_updated).flags at 7 */
#define PG_HEAP_INSERT_SIZE 3
#define PG_HEAP_DELETE_SIZE 8
#define PG_HEAP_UPDATE_SIZE 14
#define PG_HEAP_LOCK_SIZE 8
#define PG_HEAP_MULTI_INSERT_HDR_SIZE 4

/* Visibility map (access/visibilitymap.h, visibilitymap.c) */
#define PG_VM_ALL_VISIBLE 0x01
#define PG_VM_ALL_FROZEN 0x02
#define PG_VM_VALID_BITS 0x03
#define PG_VM_MAPSIZE (8192u - PG_PAGE_HEADER_SIZE)
#define PG_VM_HEAPBLOCKS_PER_PAGE (PG_VM_MAPSIZE * 4u)

/* Free space map (storage/fsm_internals.h, freespace.c): leaf slots per page
 * and levels of the tree, as fsm_logical_to_physical computes them. */
#define PG_FSM_NODES_PER_PAGE (8192u - PG_PAGE_HEADER_SIZE - 4u)
#define PG_FSM_NONLEAF_NODES_PER_PAGE (8192u / 2u - 1u)
#define PG_FSM_LEAF_NODES_PER_PAGE (PG_FSM_NODES_PER_PAGE - PG_FSM_NONLEAF_NODES_PER_PAGE)
#define PG_FSM_SLOTS_PER_PAGE PG_FSM_LEAF_NODES_PER_PAGE
#define PG_FSM_TREE_DEPTH 3

/* The physical FSM block holding logical leaf page `logical`
 * (freespace.c: fsm_logical_to_physical with FSM_BOTTOM_LEVEL). */
static inline uint32_t pg_fsm_logical_to_physical(uint32_t logical)
{
    uint64_t pages = 0, leafno = logical;
    for (int l = 0; l < PG_FSM_TREE_DEPTH; l++) {
        pages += leafno + 1;
        leafno /= PG_FSM_SLOTS_PER_PAGE;
    }
    /* Level 0 (the leaf) itself counted; Postgres subtracts 1 for a 0-based block. */
    return (uint32_t)(pages - 1);
}

#endif
