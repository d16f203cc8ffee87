/*
 * pgcontrol.h: the startup files of a basebackup (docs/design.md §6.9): a
 * global/pg_control and a bootstrap WAL segment holding one
 * XLOG_CHECKPOINT_SHUTDOWN record, so that a PostgreSQL 15 started on them
 * begins at a chosen LSN without replaying anything and with no core patch.
 *
 * For: pure byte generation from the stored KEY_CONTROL (pg_control as
 * imported or updated by ingest) and KEY_CHECKPOINT (the CheckPoint struct)
 * values.  No IO, no allocation, no global state.
 * Not for: the tar stream or reading the store (basebackup.h).
 *
 * Where things land, for a basebackup at LSN X (a record end, 8-aligned,
 * as common/pg/walformat.h defines record ends):
 *   - the checkpoint record starts at S = X, or just after the page header
 *     when X is a page boundary (X + 24, X + 40 at a segment start):
 *     Postgres never starts a record inside a page header;
 *   - pg_control: state DB_SHUTDOWNED, checkPoint = S, checkPointCopy.redo
 *     = S, minRecoveryPoint/backup points zero, CRC-32C;
 *   - WAL: segment(s) from the one holding S to the one holding the
 *     record's last byte; page 0 of the first has the long header, every
 *     page the record touches has its header (XLP_FIRST_IS_CONTRECORD and
 *     xlp_rem_len where the record continues), everything else zero.  The
 *     header of the page holding S also says XLP_FIRST_IS_CONTRECORD with
 *     xlp_rem_len = the zero bytes before S, so a reader that searches from
 *     the page start (pg_waldump -s) finds S.  Every page from the segment
 *     start to that one says the same (a fake continued record covering
 *     everything before S), so the segment is valid WAL from its first
 *     byte: on an empty timeline the walproposer streams it from the
 *     segment start, and a reader of the safekeepers' segment (pg_waldump)
 *     skips to S;
 *   - E = the record's end, MAXALIGNed: the compute's first new record
 *     starts there (after a page header if E is a page boundary).  The
 *     walproposer's term must start at X, so that this checkpoint record is
 *     streamed to the safekeepers like any other record (its xl_prev must
 *     then be the real previous record start for a reader that follows the
 *     WAL across it; Postgres itself, reading the checkpoint at startup,
 *     only requires xl_prev < S, so 0 is accepted when it is unknown).
 */
#ifndef STRATA_PAGESERVER_PGCONTROL_H
#define STRATA_PAGESERVER_PGCONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"
#include "pg/pgstructs.h"

/* XLOG_CHECKPOINT_SHUTDOWN record: header 24 + XLR_BLOCK_ID_DATA_SHORT 2 + CheckPoint 88. */
#define PGCONTROL_CHECKPOINT_RECORD_LEN (24 + 2 + PG_CHECKPOINT_SIZE)

/* ControlFileData fields beyond pgstructs.h (catalog/pg_control.h, PG 15). */
#define PG_CTL_TIME 24
#define PG_CTL_UNLOGGED_LSN 128
#define PG_CTL_MIN_RECOVERY_POINT 136
#define PG_CTL_MIN_RECOVERY_POINT_TLI 144
#define PG_CTL_BACKUP_START_POINT 152
#define PG_CTL_BACKUP_END_POINT 160
#define PG_CTL_BACKUP_END_REQUIRED 168
#define PG_CP_OLDEST_COMMIT_TS_XID 72
#define PG_CP_NEWEST_COMMIT_TS_XID 76

/* The layout of the bootstrap WAL for one basebackup. */
typedef struct pgcontrol_boot {
    lsn_t lsn;          /* X, as asked */
    lsn_t record_start; /* S */
    lsn_t record_end;   /* E (MAXALIGNed) */
    uint32_t seg_size;
    uint64_t first_segno; /* segment holding S */
    uint64_t last_segno;  /* segment holding the record's last byte */
    uint32_t tli;
    uint64_t system_id;
    uint8_t record[PGCONTROL_CHECKPOINT_RECORD_LEN]; /* the record, CRC set */
    uint8_t checkpoint[PG_CHECKPOINT_SIZE];          /* the CheckPoint written */
} pgcontrol_boot;

/*
 * Plans the bootstrap at lsn from the stored pg_control (8192 or at least
 * PG_CTL_CRC + 4 bytes; its CRC, version, block and segment sizes are
 * checked) and stored checkpoint (88 bytes).  prev is the xl_prev to write
 * (LSN_INVALID if unknown; must be < S otherwise); now is the time to stamp
 * (seconds since the epoch).  The checkpoint written is the stored one with
 * redo = S, PrevTimeLineID = ThisTimeLineID, oldestActiveXid = 0 (a shutdown
 * checkpoint has none) and time = now.  0, or -1 with err (bad lsn: zero or
 * not 8-aligned; bad control data).
 */
int pgcontrol_boot_plan(lsn_t lsn, const uint8_t *control, size_t control_len,
                        const uint8_t checkpoint[PG_CHECKPOINT_SIZE], lsn_t prev, int64_t now,
                        pgcontrol_boot *out, char *err, size_t errlen);

/* The pg_control file (PG_CONTROL_FILE_SIZE bytes) for b: the stored one
 * with state, time, checkPoint, checkPointCopy, minRecoveryPoint and the
 * backup fields set as above, zero after the CRC, CRC recomputed. */
void pgcontrol_make_control(const pgcontrol_boot *b, const uint8_t *control, size_t control_len,
                            uint8_t out[PG_CONTROL_FILE_SIZE]);

/*
 * A replica's pg_control (basebackup.h, replica mode): the stored one with
 * state DB_SHUTDOWNED_IN_RECOVERY, checkPoint = checkpoint_start (a real
 * checkpoint record of the timeline's WAL, which the standby reads back from
 * the safekeepers), checkPointCopy = that record's CheckPoint, and
 * minRecoveryPoint = min_recovery (where the basebackup's files were
 * taken): PostgreSQL then enters standby mode at once (a minRecoveryPoint is
 * set), replays from the checkpoint's redo and accepts connections only once
 * it has replayed up to min_recovery.  No WAL goes with it.  The control's
 * checks are pgcontrol_replica_seg_size's, which the caller runs first.
 */
int pgcontrol_replica_seg_size(const uint8_t *control, size_t control_len, uint32_t *seg_size,
                               char *err, size_t errlen);
void pgcontrol_make_replica_control(const uint8_t *control, size_t control_len,
                                    lsn_t checkpoint_start,
                                    const uint8_t checkpoint[PG_CHECKPOINT_SIZE],
                                    lsn_t min_recovery, uint8_t out[PG_CONTROL_FILE_SIZE]);

/* Fills seg (b->seg_size bytes) with segment segno of the bootstrap WAL
 * (first_segno <= segno <= last_segno, asserted). */
void pgcontrol_make_segment(const pgcontrol_boot *b, uint64_t segno, uint8_t *seg);

/* The file name of segment segno, e.g. "000000010000000000000001". */
void pgcontrol_segment_name(uint32_t tli, uint64_t segno, uint32_t seg_size, char out[25]);

#endif
