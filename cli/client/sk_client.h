/*
 * sk_client.h: what the CLI asks of a safekeeper over its WAL-push port
 * (libpq, blocking): a timeline's state (TIMELINE_STATUS), a configuration
 * switch (SWITCH_MEMBERSHIP), and a copy of a timeline's WAL into the data
 * directory of a safekeeper that is not running yet (the replication
 * protocol a pageserver uses).  Used by `strata safekeeper replace`
 * and `recover`.
 */
#ifndef STRATA_CLI_SK_CLIENT_H
#define STRATA_CLI_SK_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "cli/cli.h"
#include "base/lsn.h"
#include "proto/membership.h"
#include "proto/term_history.h"

/* Where a safekeeper listens and which timeline to talk about. */
typedef struct sk_target {
    const char *host;
    int port;
    strata_id tenant;
    strata_id timeline;
    const char *password; /* NULL: none */
} sk_target;

/* One safekeeper's view of the timeline (TIMELINE_STATUS). */
typedef struct sk_state {
    uint64_t term;
    lsn_t flush_lsn;
    lsn_t commit_lsn; /* min(commit, flush): what it may serve */
    lsn_t timeline_start_lsn;
    lsn_t truncate_lsn;
    membership mconf;
    term_history history;
    uint32_t pg_version;
    uint64_t system_id;
    uint32_t wal_seg_size;
    lsn_t wal_start; /* first LSN of the oldest segment it holds; 0: none */
    lsn_t ps_disk_consistent_lsn;
    lsn_t ps_remote_consistent_lsn; /* the pageserver's newest manifest */
} sk_state;

/* 0, or -1 with err (unreachable, no such timeline, malformed reply). */
int sk_client_status(const sk_target *t, sk_state *out, cli_err *err);

/* Switches the safekeeper's configuration to m (retried while the timeline
 * is busy, up to 10 s).  0, or -1 with err. */
int sk_client_switch(const sk_target *t, const membership *m, cli_err *err);

/* What a copy promises beyond the donor's state (sk_change.h): the
 * configuration the change works from (NULL: the donor's), and a term at
 * least this high (sk_change_copy_term; 0: the donor's). */
typedef struct sk_copy_state {
    const membership *mconf;
    uint64_t term;
} sk_copy_state;

/*
 * Copies the timeline from donor into <datadir>/<tenant>/<timeline>/ for a
 * safekeeper with node id node_id that is not running: every WAL segment
 * the donor holds up to its flush position (sk_change_copy_end), read under
 * its current term (a term change ends the copy with an error), and a
 * control file that says what that WAL is (the donor's history up to it,
 * the higher of the donor's term and cs's, server info, cs's configuration
 * or the donor's; flush at its end, commit where the donor had it).  cs may
 * be NULL.  Nothing is left behind on failure.  *copied_to is the end of
 * the copied WAL.  0, or -1 with err.
 */
int sk_client_copy_timeline(const sk_target *donor, const char *datadir, uint64_t node_id,
                            const sk_copy_state *cs, lsn_t *copied_to, cli_err *err);

#endif
