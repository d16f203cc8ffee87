/*
 * cmd_timeline.h: named timelines (cmd_timeline.c): what `strata timeline`
 * (cmd_admin.c) hands the named subcommands to.
 */
#ifndef STRATA_CLI_CMD_TIMELINE_H
#define STRATA_CLI_CMD_TIMELINE_H

#include <stdbool.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "cli/local/timelines.h"

/* What to branch: NAME from `from` (NULL: main) at lsn, at time, or (neither)
 * at the parent's last record. */
typedef struct branch_args {
    const char *name;
    const char *from;
    bool has_lsn;
    lsn_t lsn;
    const char *time;
} branch_args;

/* What the pageserver resolved a time to (GET .../lsn_by_time). */
typedef struct time_point {
    lsn_t lsn;
    char commit_time[64]; /* "" when it had none ("latest") */
    char kind[16];        /* "commit" or "latest" */
} time_point;

typedef struct branch_result {
    timeline_entry entry;
    long long create_ms; /* the pageserver's create call */
    bool has_tp;         /* with a time: the commit it resolved to */
    time_point tp;
} branch_result;

/* Makes the branch on the pageserver and records it (saved).  The cluster
 * lock is held.  0, or -1 with the reason (the pageserver's words). */
int timeline_branch(const cluster *c, timeline_registry *r, const branch_args *a,
                    branch_result *res, cli_err *err);

/* `strata timeline branch|list|delete` on the local cluster's names:
 * returns -2 when argv is not for them (cmd_admin.c handles it), else a
 * CLI exit code. */
int cmd_timeline_named(const cli_opts *o);

#endif
