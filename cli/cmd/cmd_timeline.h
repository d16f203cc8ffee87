/*
 * cmd_timeline.h: named timelines (cmd_timeline.c): what `strata timeline`
 * (cmd_admin.c) hands the named subcommands to.
 *
 * Not for: anything below the commands; computes are compute/computes.h.
 */
#ifndef STRATA_CLI_CMD_TIMELINE_H
#define STRATA_CLI_CMD_TIMELINE_H

#include "cli/cli.h"

/* `strata timeline branch|list|delete` on the local cluster's names:
 * returns -2 when argv is not for them (cmd_admin.c handles it), else a
 * CLI exit code. */
int cmd_timeline_named(const cli_opts *o);

#endif
