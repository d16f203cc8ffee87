/*
 * alter_system.c: ALTER SYSTEM survives the compute.
 *
 * A Strata compute's data directory is thrown away at every start (it is
 * rebuilt from a pageserver basebackup), so the postgresql.auto.conf that
 * ALTER SYSTEM writes would be lost.  After each successful ALTER SYSTEM
 * this hook WAL-logs the whole new file as a non-transactional logical
 * message with the prefix WAL_AUTO_CONF_PREFIX, flushes it and waits, as a
 * commit does, until the walproposer reports that a majority of safekeepers
 * holds it.  The pageserver keeps the file with the timeline, versioned by
 * LSN, and the basebackup at LSN X ships the newest version at or below X
 * (pageserver/ingest/ingest_misc.c, basebackup.c): a compute started anywhere on
 * the timeline, at any later LSN, comes up with the settings, and a branch
 * or point-in-time start gets the settings as they were at its LSN.
 *
 * It also refuses ALTER SYSTEM on the settings the Strata launcher owns
 * (strata_owned_setting): postgresql.auto.conf is read after the launcher's
 * strata.conf, so such a setting would override the port, the safekeepers
 * or the synchronous replication every commit relies on.
 *
 * Not for: settings passed by the launcher (cli/compute/compute.c writes them into
 * strata.conf from its compute spec) or anything per query.
 */
#include "postgres.h"

#include <stdio.h>
#include <string.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "replication/message.h"
#include "replication/syncrep.h"
#include "storage/fd.h"
#include "storage/lwlock.h"
#include "tcop/utility.h"
#include "utils/guc.h"

#include "base/compute_owned.h"
#include "pg/walformat.h"
#include "compute/extension/strata.h"

static ProcessUtility_hook_type prev_process_utility = NULL;

/*
 * What no ALTER SYSTEM may override: the settings the launcher owns
 * (common/base/compute_owned.c, the list `strata start compute --set` refuses
 * too) and shared_preload_libraries, which the launcher merges with strata's
 * from --set.
 */
static bool strata_owned_setting(const char *name)
{
    return compute_setting_owned(name) || pg_strcasecmp(name, "shared_preload_libraries") == 0;
}

/*
 * Reads postgresql.auto.conf and inserts it as one logical message.  The
 * caller holds AutoFileLock so that the file cannot change between our read
 * and our insert: of two concurrent ALTER SYSTEMs, the message inserted
 * later always carries the file both left behind.  Returns the message's
 * end LSN.
 */
static XLogRecPtr log_auto_conf_locked(void)
{
    FILE *f = AllocateFile(PG_AUTOCONF_FILENAME, "r");
    StringInfoData buf;
    char chunk[8192];
    size_t n;

    if (f == NULL)
        ereport(ERROR, (errcode_for_file_access(),
                        errmsg("could not open \"%s\": %m", PG_AUTOCONF_FILENAME)));
    initStringInfo(&buf);
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if ((size_t)buf.len + n > WAL_AUTO_CONF_MAX)
            ereport(ERROR,
                    (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                     errmsg("\"%s\" is larger than %u bytes, so Strata cannot keep it with the "
                            "timeline",
                            PG_AUTOCONF_FILENAME, WAL_AUTO_CONF_MAX),
                     errdetail("The change applies to this compute only and is lost at its "
                               "next start."),
                     errhint("Use ALTER SYSTEM RESET for settings you no longer need.")));
        appendBinaryStringInfo(&buf, chunk, (int)n);
    }
    if (ferror(f))
        ereport(ERROR, (errcode_for_file_access(),
                        errmsg("could not read \"%s\": %m", PG_AUTOCONF_FILENAME)));
    FreeFile(f);
    if (memchr(buf.data, '\0', buf.len) != NULL)
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("\"%s\" contains a NUL byte", PG_AUTOCONF_FILENAME)));
    return LogLogicalMessage(WAL_AUTO_CONF_PREFIX, buf.data, buf.len, false);
}

/*
 * Flushes WAL up to lsn and waits until the walproposer confirms a majority
 * of safekeepers has it, whatever this session's synchronous_commit says:
 * ALTER SYSTEM has returned to no client until its file is as durable as a
 * commit.  A cancel or termination while waiting ends the wait with the
 * warning Postgres gives for commits (the file may or may not be kept).
 */
static void wait_durable(XLogRecPtr lsn)
{
    int saved = synchronous_commit;

    XLogFlush(lsn);
    /* The GUC's assign hook sets syncrep.c's wait mode from it. */
    synchronous_commit = SYNCHRONOUS_COMMIT_REMOTE_FLUSH;
    assign_synchronous_commit(SYNCHRONOUS_COMMIT_REMOTE_FLUSH, NULL);
    HOLD_INTERRUPTS();
    SyncRepWaitForLSN(lsn, false);
    RESUME_INTERRUPTS();
    synchronous_commit = saved;
    assign_synchronous_commit(saved, NULL);
}

static void strata_process_utility(PlannedStmt *pstmt, const char *query_string,
                                   bool read_only_tree, ProcessUtilityContext context,
                                   ParamListInfo params, QueryEnvironment *query_env,
                                   DestReceiver *dest, QueryCompletion *qc)
{
    Node *stmt = pstmt->utilityStmt;
    bool alter_system = IsA(stmt, AlterSystemStmt);

    if (alter_system) {
        const char *name = ((AlterSystemStmt *)stmt)->setstmt->name;

        /* name is NULL for ALTER SYSTEM RESET ALL. */
        if (name != NULL && strata_owned_setting(name))
            ereport(ERROR, (errcode(ERRCODE_CANT_CHANGE_RUNTIME_PARAM),
                            errmsg("parameter \"%s\" is set by Strata and cannot be changed with "
                                   "ALTER SYSTEM",
                                   name),
                            pg_strcasecmp(name, "shared_preload_libraries") == 0
                                ? errhint("Pass it to the launcher: strata start compute --set "
                                          "shared_preload_libraries=... (strata is always added).")
                                : errhint("The launcher writes it at every start (docs/cli.md).")));
    }
    if (prev_process_utility != NULL)
        prev_process_utility(pstmt, query_string, read_only_tree, context, params, query_env, dest,
                             qc);
    else
        standard_ProcessUtility(pstmt, query_string, read_only_tree, context, params, query_env,
                                dest, qc);
    /* A standby cannot write WAL; its file stays local as in stock Postgres. */
    if (!alter_system || RecoveryInProgress())
        return;
    LWLockAcquire(AutoFileLock, LW_EXCLUSIVE);
    XLogRecPtr lsn = log_auto_conf_locked();
    LWLockRelease(AutoFileLock);
    wait_durable(lsn);
}

void strata_alter_system_setup(void)
{
    prev_process_utility = ProcessUtility_hook;
    ProcessUtility_hook = strata_process_utility;
}
