/*
 * basebackup_fetch.h: fetching a basebackup from the pageserver into a new
 * data directory (docs/design.md §7.7 step 2).
 *
 * For: `basebackup <tenant> <timeline> <lsn>|latest [full|replica]` over libpq (CopyOut),
 * the archive checked and extracted by basebackup_tar.h into a directory
 * that must not exist yet (created 0700); files are created with O_EXCL and
 * O_NOFOLLOW, so nothing is written outside it.
 * Not for: choosing the LSN (sync-safekeepers), configuration, starting
 * postgres (compute.c).
 * Errors: -1 with a reason that includes the pageserver's own message; the
 * partly written directory is left for the caller to remove.
 */
#ifndef STRATA_CLI_BASEBACKUP_FETCH_H
#define STRATA_CLI_BASEBACKUP_FETCH_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "base/lsn.h"

typedef struct bbfetch_result {
    uint64_t bytes; /* archive bytes received */
    uint32_t files; /* regular files written */
    uint32_t dirs;
} bbfetch_result;

/* Fetches the basebackup of c's timeline at lsn (full: every relation
 * file) into dir, within timeout_ms.  0 or -1. */
int bbfetch_run(const cluster *c, lsn_t lsn, bool full, const char *dir, int timeout_ms,
                bbfetch_result *res, cli_err *err);
/* The same with the command's mode word: "" (stateless), "full" or
 * "replica" (pageserver/service/basebackup.h); lsn LSN_INVALID asks for
 * "latest" (what the pageserver has ingested). */
int bbfetch_run_mode(const cluster *c, lsn_t lsn, const char *mode, const char *dir, int timeout_ms,
                     bbfetch_result *res, cli_err *err);

#endif
