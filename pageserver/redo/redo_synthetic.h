/*
 * redo_synthetic.h: applying the pageserver's own deltas to a page, in C
 * (docs/design.md §6.2 and §6.5).
 *
 * For: the delta kinds ingest synthesises (key.h): VAL_CLOG_SET on a CLOG
 * SLRU page, VAL_VM_CLEAR on a visibility-map page, VAL_MXACT_OFFSET and
 * VAL_MXACT_MEMBERS on multixact SLRU pages; and one Postgres record, the
 * smgr truncate that ingest stores on the visibility-map page keeping the
 * last heap blocks (smgr_redo clears that page's bits past the new size
 * without referencing the page, so a redo helper cannot apply it).  The page layouts are
 * PostgreSQL 15's (clog.c, visibilitymap.c, multixact.c); payload integers
 * are big-endian, as ingest writes them.
 *
 * Not for: Postgres WAL records (a redo helper applies those) or choosing
 * what to apply (redo_plan).
 *
 * Threads: any; no state.  Allocates nothing.
 */
#ifndef STRATA_PAGESERVER_REDO_SYNTHETIC_H
#define STRATA_PAGESERVER_REDO_SYNTHETIC_H

#include <stdbool.h>
#include <stdint.h>

#include "pageserver/store/key.h"

/* PostgreSQL 15 layouts (BLCKSZ 8192). */
#define REDO_SLRU_PAGES_PER_SEGMENT 32
#define REDO_CLOG_XACTS_PER_PAGE (PG_BLCKSZ * 4)          /* 2 bits per xid */
#define REDO_VM_MAPSIZE (PG_BLCKSZ - 24)                  /* after the page header */
#define REDO_VM_HEAPBLOCKS_PER_PAGE (REDO_VM_MAPSIZE * 4) /* 2 bits per heap block */
#define REDO_MXACT_OFFSETS_PER_PAGE (PG_BLCKSZ / 4)
#define REDO_MXACT_MEMBERGROUP_SIZE 20 /* 4 flag bytes + 4 xids */
#define REDO_MXACT_MEMBERGROUPS_PER_PAGE (PG_BLCKSZ / REDO_MXACT_MEMBERGROUP_SIZE)
#define REDO_MXACT_MEMBERS_PER_PAGE (REDO_MXACT_MEMBERGROUPS_PER_PAGE * 4)

/*
 * Applies delta v (one of the four kinds above) to page, the current
 * contents of key k.  Checks that k is the right kind of page for the delta
 * (a CLOG SLRU block for VAL_CLOG_SET, a VM-fork block for VAL_VM_CLEAR, ...)
 * and that what the delta names lives on that page (every xid of a CLOG set,
 * the multi of an offset); members and heap blocks of other pages are
 * skipped, as long as one lands here.  A VM page that is still all zeros is
 * first initialised as Postgres would (PageInit).  Returns 0, or -1 with
 * *why (static string); on error the page may be partly changed.
 */
int redo_synthetic_apply(const pg_key *k, const value_ref *v, uint8_t page[PG_BLCKSZ],
                         const char **why);

/* True if v is a VAL_WAL_RECORD holding an smgr truncate record (applied
 * here by redo_synthetic_apply, never by a helper).  Looks only at the
 * record header; redo_synthetic_apply validates the rest. */
bool redo_synthetic_is_vm_truncate(const value_ref *v);

#endif
