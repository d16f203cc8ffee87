/*
 * pgstructs_check.c: compile-time proof that common/pg/ (pgstructs.h and
 * walformat.h) agrees with the PostgreSQL headers this extension is built
 * against.
 *
 * The daemons decode WAL, pages and pg_control without any Postgres header,
 * from the constants and byte offsets written down in common/pg/.  This is
 * the one translation unit that sees both: every constant, size and offset
 * that pgstructs.h or walformat.h mirrors is compared here with Postgres's
 * own definition (the constant, sizeof, offsetof, or the SizeOf macro of the
 * header), so a Postgres whose layout differs fails the build of strata.so
 * instead of corrupting ingest at run time.  A pgstructs.h macro that has the
 * same name as Postgres's (PG_CONTROL_VERSION, PG_CONTROL_FILE_SIZE) is
 * checked by the preprocessor: a different redefinition is an error under
 * -Werror.
 *
 * What is not checked, because Postgres defines it only inside a .c file:
 * TWOPHASE_MAGIC (twophase.c), the relmap file size (relmapper.c), and the
 * SLRU, visibility map and FSM geometry (clog.c, multixact.c,
 * visibilitymap.c, freespace.c); for those the inputs the .c files compute
 * them from (BLCKSZ, the page header, the element sizes in the headers) are
 * checked instead, with the same formulas.  Strata's own values
 * (PG_XID_CHECKPOINT_INTERVAL, WAL_AUTO_CONF_*, WAL_READER_DEFAULT_BUF) have
 * nothing to be checked against.
 *
 * For: failing the build when common/pg/ and PostgreSQL disagree.
 * Not for: code.  Nothing here runs; the object adds nothing to strata.so.
 */
#include "postgres.h"

#include "access/clog.h"
#include "access/heapam_xlog.h"
#include "access/multixact.h"
#include "access/rmgr.h"
#include "access/slru.h"
#include "access/transam.h"
#include "access/visibilitymapdefs.h"
#include "access/xact.h"
#include "access/xlog_internal.h"
#include "access/xlogrecord.h"
#include "catalog/pg_control.h"
#include "catalog/pg_tablespace_d.h"
#include "catalog/storage_xlog.h"
#include "commands/dbcommands_xlog.h"
#include "replication/message.h"
#include "storage/bufpage.h"
#include "storage/fsm_internals.h"
#include "storage/relfilenode.h"
#include "common/relpath.h"
#include "storage/sinval.h"
#include "utils/memutils.h"
#include "utils/relmapper.h"

#include "pg/pgstructs.h"
#include "pg/walformat.h"

/* Compared as plain integers: common/pg's enums are not Postgres's. */
#define SAME(ours, theirs)                                                                         \
    StaticAssertDecl((long long)(ours) == (long long)(theirs), #ours " != " #theirs)

/* The byte order and alignment common/pg is written for. */
#ifdef WORDS_BIGENDIAN
#error "common/pg/ describes a little-endian layout"
#endif
SAME(MAXIMUM_ALIGNOF, 8);
SAME(BLCKSZ, 8192);
SAME(XLOG_BLCKSZ, 8192);

/* ---- walformat.h ---- */

/* Sizes and alignment (pg_config.h, access/xlog_internal.h, utils/memutils.h) */
SAME(WAL_PAGE_MAGIC, XLOG_PAGE_MAGIC);
SAME(WAL_BLCKSZ, XLOG_BLCKSZ);
SAME(WAL_PAGE_BLCKSZ, BLCKSZ);
SAME(WAL_ALIGN, MAXIMUM_ALIGNOF);
SAME(WAL_ALIGN_UP(1), MAXALIGN(1));
SAME(WAL_MAX_RECORD_LEN, MaxAllocSize);
SAME(WAL_MIN_SEG_SIZE, WalSegMinSize);
SAME(WAL_MAX_SEG_SIZE, WalSegMaxSize);
SAME(WAL_SEG_SIZE_DEFAULT, DEFAULT_XLOG_SEG_SIZE);

/* Page headers (access/xlog_internal.h) */
SAME(WAL_XLP_FIRST_IS_CONTRECORD, XLP_FIRST_IS_CONTRECORD);
SAME(WAL_XLP_LONG_HEADER, XLP_LONG_HEADER);
SAME(WAL_XLP_BKP_REMOVABLE, XLP_BKP_REMOVABLE);
SAME(WAL_XLP_FIRST_IS_OVERWRITE_CONTRECORD, XLP_FIRST_IS_OVERWRITE_CONTRECORD);
SAME(WAL_XLP_ALL_FLAGS, XLP_ALL_FLAGS);
SAME(WAL_SHORT_PHD_SIZE, SizeOfXLogShortPHD);
SAME(WAL_LONG_PHD_SIZE, SizeOfXLogLongPHD);
SAME(WAL_XLP_MAGIC_OFF, offsetof(XLogPageHeaderData, xlp_magic));
SAME(WAL_XLP_INFO_OFF, offsetof(XLogPageHeaderData, xlp_info));
SAME(WAL_XLP_TLI_OFF, offsetof(XLogPageHeaderData, xlp_tli));
SAME(WAL_XLP_PAGEADDR_OFF, offsetof(XLogPageHeaderData, xlp_pageaddr));
SAME(WAL_XLP_REM_LEN_OFF, offsetof(XLogPageHeaderData, xlp_rem_len));
SAME(WAL_XLP_SYSID_OFF, offsetof(XLogLongPageHeaderData, xlp_sysid));
SAME(WAL_XLP_SEG_SIZE_OFF, offsetof(XLogLongPageHeaderData, xlp_seg_size));
SAME(WAL_XLP_XLOG_BLCKSZ_OFF, offsetof(XLogLongPageHeaderData, xlp_xlog_blcksz));

/* Record headers (access/xlogrecord.h) */
SAME(WAL_RECORD_HEADER_SIZE, SizeOfXLogRecord);
SAME(WAL_RECORD_CRC_OFFSET, offsetof(XLogRecord, xl_crc));
SAME(WAL_XL_TOT_LEN_OFF, offsetof(XLogRecord, xl_tot_len));
SAME(WAL_XL_XID_OFF, offsetof(XLogRecord, xl_xid));
SAME(WAL_XL_PREV_OFF, offsetof(XLogRecord, xl_prev));
SAME(WAL_XL_INFO_OFF, offsetof(XLogRecord, xl_info));
SAME(WAL_XL_RMID_OFF, offsetof(XLogRecord, xl_rmid));
SAME(WAL_XLR_INFO_MASK, XLR_INFO_MASK);
SAME(WAL_XLR_RMGR_INFO_MASK, XLR_RMGR_INFO_MASK);
SAME(WAL_XLR_SPECIAL_REL_UPDATE, XLR_SPECIAL_REL_UPDATE);
SAME(WAL_XLR_CHECK_CONSISTENCY, XLR_CHECK_CONSISTENCY);

/* Resource managers (access/rmgr.h, catalog/pg_control.h) */
SAME(WAL_RM_XLOG_ID, RM_XLOG_ID);
SAME(WAL_RM_MAX_BUILTIN_ID, RM_MAX_BUILTIN_ID);
SAME(WAL_RM_MAX_BUILTIN_ID, RM_LOGICALMSG_ID);
SAME(WAL_RM_MIN_CUSTOM_ID, RM_MIN_CUSTOM_ID);
SAME(WAL_XLOG_SWITCH, XLOG_SWITCH);

/* Block references and the headers inside a record (access/xlogrecord.h) */
SAME(WAL_XLR_MAX_BLOCK_ID, XLR_MAX_BLOCK_ID);
SAME(WAL_XLR_BLOCK_ID_DATA_SHORT, XLR_BLOCK_ID_DATA_SHORT);
SAME(WAL_XLR_BLOCK_ID_DATA_LONG, XLR_BLOCK_ID_DATA_LONG);
SAME(WAL_XLR_BLOCK_ID_ORIGIN, XLR_BLOCK_ID_ORIGIN);
SAME(WAL_XLR_BLOCK_ID_TOPLEVEL_XID, XLR_BLOCK_ID_TOPLEVEL_XID);
SAME(WAL_BKPBLOCK_FORK_MASK, BKPBLOCK_FORK_MASK);
SAME(WAL_BKPBLOCK_FLAG_MASK, BKPBLOCK_FLAG_MASK);
SAME(WAL_BKPBLOCK_HAS_IMAGE, BKPBLOCK_HAS_IMAGE);
SAME(WAL_BKPBLOCK_HAS_DATA, BKPBLOCK_HAS_DATA);
SAME(WAL_BKPBLOCK_WILL_INIT, BKPBLOCK_WILL_INIT);
SAME(WAL_BKPBLOCK_SAME_REL, BKPBLOCK_SAME_REL);
SAME(WAL_BKPIMAGE_HAS_HOLE, BKPIMAGE_HAS_HOLE);
SAME(WAL_BKPIMAGE_APPLY, BKPIMAGE_APPLY);
SAME(WAL_BKPIMAGE_COMPRESS_PGLZ, BKPIMAGE_COMPRESS_PGLZ);
SAME(WAL_BKPIMAGE_COMPRESS_LZ4, BKPIMAGE_COMPRESS_LZ4);
SAME(WAL_BKPIMAGE_COMPRESS_ZSTD, BKPIMAGE_COMPRESS_ZSTD);
SAME(WAL_BLOCK_HEADER_SIZE, SizeOfXLogRecordBlockHeader);
SAME(WAL_BLOCK_IMAGE_HEADER_SIZE, SizeOfXLogRecordBlockImageHeader);
SAME(WAL_BIMG_HOLE_OFFSET_OFF, offsetof(XLogRecordBlockImageHeader, hole_offset));
SAME(WAL_BIMG_INFO_OFF, offsetof(XLogRecordBlockImageHeader, bimg_info));
SAME(WAL_BLOCK_COMPRESS_HEADER_SIZE, SizeOfXLogRecordBlockCompressHeader);
SAME(WAL_RELFILENODE_SIZE, sizeof(RelFileNode));
SAME(WAL_DATA_HEADER_SHORT_SIZE, SizeOfXLogRecordDataHeaderShort);
SAME(WAL_DATA_HEADER_LONG_SIZE, SizeOfXLogRecordDataHeaderLong);
SAME(2, sizeof(RepOriginId));
SAME(4, sizeof(BlockNumber));

/* Forks (common/relpath.h) */
SAME(WAL_FORK_MAIN, MAIN_FORKNUM);
SAME(WAL_FORK_FSM, FSM_FORKNUM);
SAME(WAL_FORK_VM, VISIBILITYMAP_FORKNUM);
SAME(WAL_FORK_INIT, INIT_FORKNUM);
SAME(WAL_MAX_FORK, MAX_FORKNUM);

/* ---- pgstructs.h ---- */

/* Resource managers (access/rmgrlist.h) */
SAME(PG_RM_XLOG, RM_XLOG_ID);
SAME(PG_RM_XACT, RM_XACT_ID);
SAME(PG_RM_SMGR, RM_SMGR_ID);
SAME(PG_RM_CLOG, RM_CLOG_ID);
SAME(PG_RM_DBASE, RM_DBASE_ID);
SAME(PG_RM_TBLSPC, RM_TBLSPC_ID);
SAME(PG_RM_MULTIXACT, RM_MULTIXACT_ID);
SAME(PG_RM_RELMAP, RM_RELMAP_ID);
SAME(PG_RM_STANDBY, RM_STANDBY_ID);
SAME(PG_RM_HEAP2, RM_HEAP2_ID);
SAME(PG_RM_HEAP, RM_HEAP_ID);
SAME(PG_RM_LOGICALMSG, RM_LOGICALMSG_ID);

SAME(PG_DEFAULTTABLESPACE_OID, DEFAULTTABLESPACE_OID);
SAME(PG_GLOBALTABLESPACE_OID, GLOBALTABLESPACE_OID);
SAME(PG_FIRST_NORMAL_XID, FirstNormalTransactionId);

/* Pages (pg_config.h, storage/bufpage.h) */
SAME(PG_BLCKSZ, BLCKSZ);
SAME(PG_PAGE_LSN_OFF, offsetof(PageHeaderData, pd_lsn));
SAME(PG_PAGE_UPPER_OFF, offsetof(PageHeaderData, pd_upper));
SAME(PG_PAGE_HEADER_SIZE, SizeOfPageHeaderData);
SAME(PG_PAGE_HEADER_SIZE, MAXALIGN(SizeOfPageHeaderData));

/* XLOG rmgr: CheckPoint (catalog/pg_control.h), xl_parameter_change and
 * xl_end_of_recovery (access/xlog_internal.h) */
SAME(PG_XLOG_CHECKPOINT_SHUTDOWN, XLOG_CHECKPOINT_SHUTDOWN);
SAME(PG_XLOG_CHECKPOINT_ONLINE, XLOG_CHECKPOINT_ONLINE);
SAME(PG_XLOG_NEXTOID, XLOG_NEXTOID);
SAME(PG_XLOG_PARAMETER_CHANGE, XLOG_PARAMETER_CHANGE);
SAME(PG_XLOG_END_OF_RECOVERY, XLOG_END_OF_RECOVERY);
SAME(PG_XLOG_FPI_FOR_HINT, XLOG_FPI_FOR_HINT);
SAME(PG_XLOG_FPI, XLOG_FPI);

SAME(PG_CHECKPOINT_SIZE, sizeof(CheckPoint));
SAME(PG_CP_REDO, offsetof(CheckPoint, redo));
SAME(PG_CP_THIS_TLI, offsetof(CheckPoint, ThisTimeLineID));
SAME(PG_CP_PREV_TLI, offsetof(CheckPoint, PrevTimeLineID));
SAME(PG_CP_FULL_PAGE_WRITES, offsetof(CheckPoint, fullPageWrites));
SAME(PG_CP_NEXT_XID, offsetof(CheckPoint, nextXid));
SAME(8, sizeof(FullTransactionId));
SAME(PG_CP_NEXT_OID, offsetof(CheckPoint, nextOid));
SAME(PG_CP_NEXT_MULTI, offsetof(CheckPoint, nextMulti));
SAME(PG_CP_NEXT_MULTI_OFFSET, offsetof(CheckPoint, nextMultiOffset));
SAME(PG_CP_OLDEST_XID, offsetof(CheckPoint, oldestXid));
SAME(PG_CP_OLDEST_XID_DB, offsetof(CheckPoint, oldestXidDB));
SAME(PG_CP_OLDEST_MULTI, offsetof(CheckPoint, oldestMulti));
SAME(PG_CP_OLDEST_MULTI_DB, offsetof(CheckPoint, oldestMultiDB));
SAME(PG_CP_TIME, offsetof(CheckPoint, time));
SAME(PG_CP_OLDEST_ACTIVE_XID, offsetof(CheckPoint, oldestActiveXid));

SAME(PG_PARAM_CHANGE_SIZE, sizeof(xl_parameter_change));
SAME(PG_END_OF_RECOVERY_SIZE, sizeof(xl_end_of_recovery));
SAME(PG_EOR_THIS_TLI, offsetof(xl_end_of_recovery, ThisTimeLineID));
SAME(PG_EOR_PREV_TLI, offsetof(xl_end_of_recovery, PrevTimeLineID));

/* ControlFileData (catalog/pg_control.h) */
SAME(PG_CTL_SYSTEM_ID, offsetof(ControlFileData, system_identifier));
SAME(PG_CTL_VERSION, offsetof(ControlFileData, pg_control_version));
SAME(PG_CTL_STATE, offsetof(ControlFileData, state));
SAME(PG_CTL_CHECKPOINT, offsetof(ControlFileData, checkPoint));
SAME(PG_CTL_CHECKPOINT_COPY, offsetof(ControlFileData, checkPointCopy));
SAME(PG_CTL_WAL_LEVEL, offsetof(ControlFileData, wal_level));
SAME(PG_CTL_WAL_LOG_HINTS, offsetof(ControlFileData, wal_log_hints));
SAME(PG_CTL_MAX_CONNECTIONS, offsetof(ControlFileData, MaxConnections));
SAME(PG_CTL_MAX_WORKER_PROCESSES, offsetof(ControlFileData, max_worker_processes));
SAME(PG_CTL_MAX_WAL_SENDERS, offsetof(ControlFileData, max_wal_senders));
SAME(PG_CTL_MAX_PREPARED_XACTS, offsetof(ControlFileData, max_prepared_xacts));
SAME(PG_CTL_MAX_LOCKS_PER_XACT, offsetof(ControlFileData, max_locks_per_xact));
SAME(PG_CTL_TRACK_COMMIT_TS, offsetof(ControlFileData, track_commit_timestamp));
SAME(PG_CTL_BLCKSZ, offsetof(ControlFileData, blcksz));
SAME(PG_CTL_XLOG_BLCKSZ, offsetof(ControlFileData, xlog_blcksz));
SAME(PG_CTL_XLOG_SEG_SIZE, offsetof(ControlFileData, xlog_seg_size));
SAME(PG_CTL_CRC, offsetof(ControlFileData, crc));
SAME(PG_DB_SHUTDOWNED, DB_SHUTDOWNED);
SAME(PG_DB_SHUTDOWNED_IN_RECOVERY, DB_SHUTDOWNED_IN_RECOVERY);

/* XACT rmgr (access/xact.h) */
SAME(PG_XLOG_XACT_COMMIT, XLOG_XACT_COMMIT);
SAME(PG_XLOG_XACT_PREPARE, XLOG_XACT_PREPARE);
SAME(PG_XLOG_XACT_ABORT, XLOG_XACT_ABORT);
SAME(PG_XLOG_XACT_COMMIT_PREPARED, XLOG_XACT_COMMIT_PREPARED);
SAME(PG_XLOG_XACT_ABORT_PREPARED, XLOG_XACT_ABORT_PREPARED);
SAME(PG_XLOG_XACT_OPMASK, XLOG_XACT_OPMASK);
SAME(PG_XLOG_XACT_HAS_INFO, XLOG_XACT_HAS_INFO);
SAME(PG_XINFO_HAS_DBINFO, XACT_XINFO_HAS_DBINFO);
SAME(PG_XINFO_HAS_SUBXACTS, XACT_XINFO_HAS_SUBXACTS);
SAME(PG_XINFO_HAS_RELFILENODES, XACT_XINFO_HAS_RELFILENODES);
SAME(PG_XINFO_HAS_INVALS, XACT_XINFO_HAS_INVALS);
SAME(PG_XINFO_HAS_TWOPHASE, XACT_XINFO_HAS_TWOPHASE);
SAME(PG_XINFO_HAS_ORIGIN, XACT_XINFO_HAS_ORIGIN);
SAME(PG_XINFO_HAS_AE_LOCKS, XACT_XINFO_HAS_AE_LOCKS);
SAME(PG_XINFO_HAS_GID, XACT_XINFO_HAS_GID);
SAME(PG_XINFO_HAS_DROPPED_STATS, XACT_XINFO_HAS_DROPPED_STATS);
SAME(PG_XACT_TIME_SIZE, MinSizeOfXactCommit);
SAME(PG_XACT_TIME_SIZE, sizeof(xl_xact_abort));
SAME(PG_XACT_DBINFO_SIZE, sizeof(xl_xact_dbinfo));
SAME(PG_RELFILENODE_SIZE, sizeof(RelFileNode));
SAME(PG_XACT_STATS_ITEM_SIZE, sizeof(xl_xact_stats_item));
SAME(PG_INVAL_MSG_SIZE, sizeof(SharedInvalidationMessage));
SAME(PG_XACT_ORIGIN_SIZE, sizeof(xl_xact_origin));
SAME(PG_GIDSIZE, GIDSIZE);
SAME(PG_XACT_PREPARE_HDR_SIZE, sizeof(xl_xact_prepare));
SAME(PG_XACT_PREPARE_XID, offsetof(xl_xact_prepare, xid));

/* CLOG (access/clog.h; clog.c packs 4 two-bit statuses per byte) */
SAME(PG_CLOG_ZEROPAGE, CLOG_ZEROPAGE);
SAME(PG_CLOG_TRUNCATE, CLOG_TRUNCATE);
SAME(PG_CLOG_XACTS_PER_PAGE, BLCKSZ * 4);
SAME(PG_XACT_STATUS_COMMITTED, TRANSACTION_STATUS_COMMITTED);
SAME(PG_XACT_STATUS_ABORTED, TRANSACTION_STATUS_ABORTED);
SAME(PG_XACT_STATUS_SUB_COMMITTED, TRANSACTION_STATUS_SUB_COMMITTED);
SAME(PG_SLRU_PAGES_PER_SEGMENT, SLRU_PAGES_PER_SEGMENT);

/* MULTIXACT (access/multixact.h; multixact.c's page geometry from these) */
SAME(PG_XLOG_MULTIXACT_ZERO_OFF_PAGE, XLOG_MULTIXACT_ZERO_OFF_PAGE);
SAME(PG_XLOG_MULTIXACT_ZERO_MEM_PAGE, XLOG_MULTIXACT_ZERO_MEM_PAGE);
SAME(PG_XLOG_MULTIXACT_CREATE_ID, XLOG_MULTIXACT_CREATE_ID);
SAME(PG_XLOG_MULTIXACT_TRUNCATE_ID, XLOG_MULTIXACT_TRUNCATE_ID);
SAME(PG_MXACT_CREATE_HDR_SIZE, SizeOfMultiXactCreate);
SAME(PG_MXACT_MEMBER_SIZE, sizeof(MultiXactMember));
SAME(PG_MXACT_TRUNCATE_SIZE, SizeOfMultiXactTruncate);
SAME(PG_MULTIXACT_OFFSETS_PER_PAGE, BLCKSZ / sizeof(MultiXactOffset));
SAME(PG_MULTIXACT_MEMBERGROUP_SIZE,
     PG_MULTIXACT_MEMBERS_PER_GROUP + PG_MULTIXACT_MEMBERS_PER_GROUP * sizeof(TransactionId));
SAME(PG_MULTIXACT_FIRST_MULTI, FirstMultiXactId);

/* SMGR (catalog/storage_xlog.h) */
SAME(PG_XLOG_SMGR_CREATE, XLOG_SMGR_CREATE);
SAME(PG_XLOG_SMGR_TRUNCATE, XLOG_SMGR_TRUNCATE);
SAME(PG_SMGR_CREATE_SIZE, sizeof(xl_smgr_create));
SAME(PG_SMGR_TRUNCATE_SIZE, sizeof(xl_smgr_truncate));
SAME(PG_SMGR_TRUNCATE_HEAP, SMGR_TRUNCATE_HEAP);
SAME(PG_SMGR_TRUNCATE_VM, SMGR_TRUNCATE_VM);
SAME(PG_SMGR_TRUNCATE_FSM, SMGR_TRUNCATE_FSM);

/* DBASE (commands/dbcommands_xlog.h) */
SAME(PG_XLOG_DBASE_CREATE_FILE_COPY, XLOG_DBASE_CREATE_FILE_COPY);
SAME(PG_XLOG_DBASE_CREATE_WAL_LOG, XLOG_DBASE_CREATE_WAL_LOG);
SAME(PG_XLOG_DBASE_DROP, XLOG_DBASE_DROP);
SAME(PG_DBASE_CREATE_FILE_COPY_SIZE, sizeof(xl_dbase_create_file_copy_rec));
SAME(PG_DBASE_CREATE_WAL_LOG_SIZE, sizeof(xl_dbase_create_wal_log_rec));
SAME(PG_DBASE_DROP_HDR_SIZE, MinSizeOfDbaseDropRec);

/* RELMAP (utils/relmapper.h) */
SAME(PG_XLOG_RELMAP_UPDATE, XLOG_RELMAP_UPDATE);
SAME(PG_RELMAP_UPDATE_HDR_SIZE, MinSizeOfRelmapUpdate);

/* Logical messages (replication/message.h) */
SAME(PG_XLOG_LOGICAL_MESSAGE, XLOG_LOGICAL_MESSAGE);
SAME(PG_LOGICAL_MESSAGE_PREFIX_SIZE_OFF, offsetof(xl_logical_message, prefix_size));
SAME(PG_LOGICAL_MESSAGE_SIZE_OFF, offsetof(xl_logical_message, message_size));
SAME(PG_LOGICAL_MESSAGE_HDR_SIZE, SizeOfLogicalMessage);

/* HEAP / HEAP2 (access/heapam_xlog.h) */
SAME(PG_XLOG_HEAP_OPMASK, XLOG_HEAP_OPMASK);
SAME(PG_XLOG_HEAP_INSERT, XLOG_HEAP_INSERT);
SAME(PG_XLOG_HEAP_DELETE, XLOG_HEAP_DELETE);
SAME(PG_XLOG_HEAP_UPDATE, XLOG_HEAP_UPDATE);
SAME(PG_XLOG_HEAP_HOT_UPDATE, XLOG_HEAP_HOT_UPDATE);
SAME(PG_XLOG_HEAP_LOCK, XLOG_HEAP_LOCK);
SAME(PG_XLOG_HEAP2_MULTI_INSERT, XLOG_HEAP2_MULTI_INSERT);
SAME(PG_XLOG_HEAP2_LOCK_UPDATED, XLOG_HEAP2_LOCK_UPDATED);
SAME(PG_XLH_INSERT_ALL_VISIBLE_CLEARED, XLH_INSERT_ALL_VISIBLE_CLEARED);
SAME(PG_XLH_DELETE_ALL_VISIBLE_CLEARED, XLH_DELETE_ALL_VISIBLE_CLEARED);
SAME(PG_XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED, XLH_UPDATE_OLD_ALL_VISIBLE_CLEARED);
SAME(PG_XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED, XLH_UPDATE_NEW_ALL_VISIBLE_CLEARED);
SAME(PG_XLH_LOCK_ALL_FROZEN_CLEARED, XLH_LOCK_ALL_FROZEN_CLEARED);
/* Where the flags byte sits, as pgstructs.h's comments say. */
SAME(2, offsetof(xl_heap_insert, flags));
SAME(0, offsetof(xl_heap_multi_insert, flags));
SAME(7, offsetof(xl_heap_delete, flags));
SAME(7, offsetof(xl_heap_update, flags));
SAME(7, offsetof(xl_heap_lock, flags));
SAME(7, offsetof(xl_heap_lock_updated, flags));
SAME(PG_HEAP_INSERT_SIZE, SizeOfHeapInsert);
SAME(PG_HEAP_DELETE_SIZE, SizeOfHeapDelete);
SAME(PG_HEAP_UPDATE_SIZE, SizeOfHeapUpdate);
SAME(PG_HEAP_LOCK_SIZE, SizeOfHeapLock);
SAME(PG_HEAP_LOCK_SIZE, SizeOfHeapLockUpdated);
SAME(PG_HEAP_MULTI_INSERT_HDR_SIZE, SizeOfHeapMultiInsert);

/* Visibility map (access/visibilitymapdefs.h; visibilitymap.c's MAPSIZE) */
SAME(PG_VM_ALL_VISIBLE, VISIBILITYMAP_ALL_VISIBLE);
SAME(PG_VM_ALL_FROZEN, VISIBILITYMAP_ALL_FROZEN);
SAME(PG_VM_VALID_BITS, VISIBILITYMAP_VALID_BITS);
SAME(PG_VM_MAPSIZE, BLCKSZ - MAXALIGN(SizeOfPageHeaderData));

/* Free space map (storage/fsm_internals.h; freespace.c's tree depth) */
SAME(PG_FSM_NODES_PER_PAGE, NodesPerPage);
SAME(PG_FSM_NONLEAF_NODES_PER_PAGE, NonLeafNodesPerPage);
SAME(PG_FSM_LEAF_NODES_PER_PAGE, LeafNodesPerPage);
SAME(PG_FSM_SLOTS_PER_PAGE, SlotsPerFSMPage);
SAME(PG_FSM_TREE_DEPTH, (SlotsPerFSMPage >= 1626 ? 3 : 4));
