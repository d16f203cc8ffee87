/*
 * pgstructs_check.c: compile-time proof that pageserver/pgstructs.h agrees
 * with the PostgreSQL headers this extension is built against.
 *
 * The pageserver decodes WAL and pg_control without any Postgres header, from
 * the constants and byte offsets written down in pgstructs.h.  This is the
 * one translation unit that sees both: every constant, size and offset that
 * pgstructs.h mirrors is compared here with Postgres's own definition (the
 * constant, sizeof, offsetof, or the SizeOf macro of the header), so a
 * Postgres whose layout differs fails the build of strata.so instead of
 * corrupting ingest at run time.  A pgstructs.h macro that has the same name
 * as Postgres's (PG_CONTROL_VERSION, PG_CONTROL_FILE_SIZE) is checked by the
 * preprocessor: a different redefinition is an error under -Werror.
 *
 * What is not checked, because Postgres defines it only inside a .c file:
 * TWOPHASE_MAGIC (twophase.c), the relmap file size (relmapper.c), and the
 * SLRU, visibility map and FSM geometry (clog.c, multixact.c,
 * visibilitymap.c, freespace.c); for those the inputs the .c files compute
 * them from (BLCKSZ, the page header, the element sizes in the headers) are
 * checked instead, with the same formulas.
 *
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
#include "catalog/pg_control.h"
#include "catalog/pg_tablespace_d.h"
#include "catalog/storage_xlog.h"
#include "commands/dbcommands_xlog.h"
#include "replication/message.h"
#include "storage/bufpage.h"
#include "storage/fsm_internals.h"
#include "storage/relfilenode.h"
#include "storage/sinval.h"
#include "utils/relmapper.h"

#include "pageserver/pgstructs.h"

/* Compared as plain integers: pgstructs.h's enums are not Postgres's. */
#define SAME(ours, theirs)                                                                         \
    StaticAssertDecl((long long)(ours) == (long long)(theirs), #ours " != " #theirs)

/* The byte order and alignment pgstructs.h is written for. */
#ifdef WORDS_BIGENDIAN
#error "pageserver/pgstructs.h describes a little-endian layout"
#endif
SAME(MAXIMUM_ALIGNOF, 8);
SAME(BLCKSZ, 8192);
SAME(XLOG_BLCKSZ, 8192);

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

/* Pages (storage/bufpage.h) */
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
