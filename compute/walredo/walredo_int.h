/*
 * walredo_int.h: the pieces of the redo helper (strata_walredo.so) that
 * walredo.c wires together: the in-memory storage manager and the seccomp
 * sandbox.  Internal to compute/walredo; Postgres conventions (ereport on
 * failure).  Single-threaded: the helper is one Postgres backend.
 */
#ifndef STRATA_WALREDO_INT_H
#define STRATA_WALREDO_INT_H

#include "postgres.h"

#include "storage/relfilenode.h"
#include "common/relpath.h"
#include "storage/block.h"

/*
 * The in-memory smgr (inmem_smgr.c).  It holds exactly one page, the target
 * block of the current request.  Every other block of every relation and
 * fork reads as a valid empty page whose pd_lsn is the largest LSN, so redo
 * finds it already newer than any record and leaves it alone; writes to
 * other blocks are discarded.  Every fork "exists" and is MaxBlockNumber
 * blocks long, so the target block is always inside it and redo never takes
 * the extend or invalid-page paths for a block it should skip.
 */

/* Installs smgr_hook so every SMgrRelation opened from now on is in-memory;
 * closes the ones already open.  Call once, outside any redo. */
extern void inmem_smgr_install(void);

/* Sets the target block and resets its page to zeros (no base yet). */
extern void inmem_smgr_set_target(RelFileNode rnode, ForkNumber fork, BlockNumber blk);

/* Replaces the target page's contents (a pushed base page, or the buffer's
 * contents after a record was applied). */
extern void inmem_smgr_set_page(const char *page);

/* The target page (BLCKSZ bytes, owned by the smgr). */
extern const char *inmem_smgr_page(void);

/* True once a base page was pushed or a record produced the page. */
extern bool inmem_smgr_has_page(void);

/*
 * The seccomp sandbox (seccomp.c).  Allows only what the request loop needs
 * (read/write on the pipes and stderr, memory management, clocks, signal
 * return, exit); anything else kills the process.  ereport(ERROR) if the
 * filter cannot be loaded.
 */
extern void walredo_enter_seccomp(void);

#endif
