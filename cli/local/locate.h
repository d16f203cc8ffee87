/*
 * locate.h: finding the programs a cluster runs.
 *
 *   strata-safekeeper, strata-sync-safekeepers: next to the running strata
 *                     (readlink /proc/self/exe).
 *   strata.so:        $STRATA_EXTENSION, else <bindir>/../lib/strata.so.
 *   postgres tools:   $STRATA_PG_BINDIR, else /usr/lib/postgresql/15/bin.
 *   patched Postgres: $STRATA_PG_PREFIX, else the prefix CMake recorded at
 *                     build time (its STRATA_PG_PREFIX cache variable), else
 *                     what `compute/postgres/build.sh --prefix-only` prints
 *                     (the source tree CMake built from).  The pageserver's
 *                     redo helpers run its bin/postgres.
 *
 * Every function writes an absolute path into out (PATH_MAX bytes) and
 * returns 0, or -1 with a reason naming what is missing and where it looked.
 */
#ifndef STRATA_CLI_LOCATE_H
#define STRATA_CLI_LOCATE_H

#include "cli/cli.h"

#define LOCATE_DEFAULT_PG_BINDIR "/usr/lib/postgresql/15/bin"

/* The directory holding the running strata executable. */
int locate_bindir(char *out, cli_err *err);

/* An executable named name beside strata. */
int locate_sibling(const char *name, char *out, cli_err *err);

/* The extension library (must exist and be readable). */
int locate_extension(char *out, cli_err *err);

/* A Postgres program (postgres, initdb, psql, pgbench, ...). */
int locate_pg_program(const char *name, char *out, cli_err *err);

/* The bin/ directory of the patched PostgreSQL build (holding an executable
 * postgres). */
int locate_patched_pg_bindir(char *out, cli_err *err);

#endif
