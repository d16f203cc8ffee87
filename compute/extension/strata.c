/*
 * strata.c: entry point of strata.so, the extension every Strata compute
 * loads through shared_preload_libraries.
 *
 * Defines the extension's GUCs and, when strata.safekeepers is set,
 * registers the walproposer background worker (walproposer_pg.c), after
 * checking that this Postgres is configured so that no commit can be
 * acknowledged before a majority of safekeepers holds it.
 *
 * When strata.pageserver is set it also installs the smgr (smgr.c).  It
 * always installs the ALTER SYSTEM hook (alter_system.c).
 *
 * Not for: the worker itself, or anything that runs in backends per query.
 */
#include "postgres.h"

#include "access/xlog.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "replication/syncrep.h"
#include "replication/walsender.h"
#include "utils/guc.h"

#include "base/lsn.h"
#include "compute/extension/smgr_int.h"
#include "compute/extension/strata.h"

PG_MODULE_MAGIC;

char *strata_safekeepers = NULL;
char *strata_tenant_id = NULL;
char *strata_timeline_id = NULL;
char *strata_safekeeper_password = NULL;
bool strata_allow_timeline_creation = false;
char *strata_pageserver_password = NULL;
int strata_safekeeper_connect_timeout = 10000;
int strata_safekeeper_reconnect_delay = 100;
int strata_safekeeper_reconnect_max_delay = 5000;
int strata_safekeeper_heartbeat_interval = 1000;
int strata_safekeeper_timeout = 10000;
int strata_commit_notice_delay = 1;
int strata_wal_buffer_size = 16 * 1024;
char *strata_local_user = NULL;
char *strata_pageserver = NULL;
bool strata_log_evicted_pages = true;
int strata_relsize_cache_size = 65536;
int strata_lwlsn_cache_size = 131072;
int strata_prefetch_depth = 32;
int strata_readahead = 16;
int strata_pageserver_timeout = 120000;
int strata_file_cache_size = 0;
char *strata_file_cache_path = NULL;
char *strata_read_lsn = NULL;
XLogRecPtr strata_read_lsn_value = InvalidXLogRecPtr;

extern PGDLLEXPORT void _PG_init(void);

static bool check_id(char **newval, void **extra, GucSource source)
{
    strata_id id;

    if (*newval == NULL || (*newval)[0] == '\0')
        return true;
    if (!strata_id_parse(*newval, &id)) {
        GUC_check_errdetail("An id is exactly 32 hexadecimal digits.");
        return false;
    }
    return true;
}

/* Accepts "" or an LSN "X/Y" other than 0/0. */
static bool check_read_lsn(char **newval, void **extra, GucSource source)
{
    lsn_t lsn;

    if (*newval == NULL || (*newval)[0] == '\0')
        return true;
    if (!lsn_parse(*newval, &lsn) || lsn == 0) {
        GUC_check_errdetail(
            "An LSN is written X/Y in hexadecimal, e.g. 0/16B3748, and is not 0/0.");
        return false;
    }
    return true;
}

static void assign_read_lsn(const char *newval, void *extra)
{
    lsn_t lsn = 0;

    if (newval != NULL && newval[0] != '\0' && !lsn_parse(newval, &lsn))
        lsn = 0;
    strata_read_lsn_value = (XLogRecPtr)lsn;
}

/* Accepts "" or a comma-separated list of host:port with a numeric port. */
static bool check_safekeepers(char **newval, void **extra, GucSource source)
{
    const char *p = *newval;

    if (p == NULL || p[0] == '\0')
        return true;
    while (*p) {
        const char *end = strchr(p, ',');
        const char *colon;
        size_t len = end ? (size_t)(end - p) : strlen(p);
        size_t i;

        colon = memrchr(p, ':', len);
        if (colon == NULL || colon == p || colon == p + len - 1) {
            GUC_check_errdetail("Each safekeeper is written host:port, separated by commas.");
            return false;
        }
        for (i = (size_t)(colon - p) + 1; i < len; i++) {
            if (p[i] < '0' || p[i] > '9') {
                GUC_check_errdetail("The port of \"%.*s\" is not a number.", (int)len, p);
                return false;
            }
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return true;
}

/* The walproposer's settings: which safekeepers, as whom, how it
 * connects and batches. */
static void define_walproposer_gucs(void)
{
    DefineCustomStringVariable(
        "strata.safekeepers", "Safekeepers the walproposer streams WAL to.",
        "host:port pairs separated by commas; empty disables the walproposer.", &strata_safekeepers,
        "", PGC_POSTMASTER, 0, check_safekeepers, NULL, NULL);
    DefineCustomStringVariable("strata.tenant_id", "Tenant of this compute's timeline.",
                               "32 hexadecimal digits.", &strata_tenant_id, "", PGC_POSTMASTER, 0,
                               check_id, NULL, NULL);
    DefineCustomStringVariable("strata.timeline_id", "Timeline this compute writes.",
                               "32 hexadecimal digits.", &strata_timeline_id, "", PGC_POSTMASTER, 0,
                               check_id, NULL, NULL);
    DefineCustomStringVariable(
        "strata.safekeeper_password", "Password for connections to safekeepers.", "Empty: none.",
        &strata_safekeeper_password, "", PGC_POSTMASTER, GUC_SUPERUSER_ONLY, NULL, NULL, NULL);
    DefineCustomBoolVariable(
        "strata.allow_timeline_creation",
        "Lets the walproposer create its timeline on a safekeeper that lacks it.",
        "Only for the compute that bootstraps a new timeline (strata sets it then); each "
        "safekeeper is offered the creation until it first answers a greeting.",
        &strata_allow_timeline_creation, false, PGC_POSTMASTER, 0, NULL, NULL, NULL);
    DefineCustomIntVariable("strata.safekeeper_connect_timeout",
                            "Abandon a safekeeper connection attempt after this long.", NULL,
                            &strata_safekeeper_connect_timeout, 10000, 100, 3600 * 1000, PGC_SIGHUP,
                            GUC_UNIT_MS, NULL, NULL, NULL);
    DefineCustomIntVariable("strata.safekeeper_reconnect_delay",
                            "First delay before reconnecting to a failed safekeeper.",
                            "Doubles per consecutive failure.", &strata_safekeeper_reconnect_delay,
                            100, 1, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
    DefineCustomIntVariable("strata.safekeeper_reconnect_max_delay",
                            "Longest delay between reconnection attempts.", NULL,
                            &strata_safekeeper_reconnect_max_delay, 5000, 1, 3600 * 1000,
                            PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
    DefineCustomIntVariable("strata.safekeeper_heartbeat_interval",
                            "Send an empty append to an idle safekeeper this often.", NULL,
                            &strata_safekeeper_heartbeat_interval, 1000, 10, 60 * 1000,
                            PGC_POSTMASTER, GUC_UNIT_MS, NULL, NULL, NULL);
    DefineCustomIntVariable(
        "strata.safekeeper_timeout", "Drop and reconnect a safekeeper that stays silent this long.",
        "Must exceed strata.safekeeper_heartbeat_interval.", &strata_safekeeper_timeout, 10000, 100,
        3600 * 1000, PGC_POSTMASTER, GUC_UNIT_MS, NULL, NULL, NULL);
    DefineCustomIntVariable(
        "strata.commit_notice_delay",
        "How long a new commit LSN waits to ride on the next WAL append to a safekeeper.",
        "After that it goes alone, in an empty append.  0: at once.  Safekeepers serve WAL to "
        "the pageserver only up to the commit LSN they know.",
        &strata_commit_notice_delay, 1, 0, 1000, PGC_POSTMASTER, GUC_UNIT_MS, NULL, NULL, NULL);
    DefineCustomIntVariable(
        "strata.wal_buffer_size", "WAL the walproposer keeps in memory for lagging safekeepers.",
        "Older WAL is read back from pg_wal.", &strata_wal_buffer_size, 16 * 1024, 256, 1024 * 1024,
        PGC_POSTMASTER, GUC_UNIT_KB, NULL, NULL, NULL);
    DefineCustomStringVariable(
        "strata.local_user", "Role of the walproposer's replication connection to its own server.",
        "Empty: the operating-system user running the server.", &strata_local_user, "",
        PGC_POSTMASTER, 0, NULL, NULL, NULL);
}

/* The smgr client's settings: which pageserver, caches, prefetch, the
 * file cache and a read-only compute's LSN. */
static void define_smgr_gucs(void)
{
    DefineCustomStringVariable("strata.pageserver",
                               "Pagestream address (host:port) of the pageserver holding this "
                               "compute's permanent relations.",
                               "Empty: no Strata smgr, every relation stays on local disk.",
                               &strata_pageserver, "", PGC_POSTMASTER, 0, NULL, NULL, NULL);
    DefineCustomStringVariable("strata.pageserver_password",
                               "Token sent as the password on connections to the pageserver.",
                               "Needed when the pageserver runs with an --auth-file; empty: none.",
                               &strata_pageserver_password, "", PGC_POSTMASTER, GUC_SUPERUSER_ONLY,
                               NULL, NULL, NULL);
    DefineCustomBoolVariable(
        "strata.log_evicted_pages", "WAL-log evicted pages whose state the WAL does not carry.",
        "FSM/VM pages, heap pages of running transactions, btree pages with a cycle id, pages "
        "with LSN 0.  Turn off only to test what it protects against.",
        &strata_log_evicted_pages, true, PGC_SIGHUP, 0, NULL, NULL, NULL);
    DefineCustomIntVariable("strata.relsize_cache_size",
                            "Entries of the shared relation size cache.", NULL,
                            &strata_relsize_cache_size, 65536, 64, 16 * 1024 * 1024, PGC_POSTMASTER,
                            0, NULL, NULL, NULL);
    DefineCustomIntVariable("strata.lwlsn_cache_size",
                            "Entries of the shared last-written-LSN cache.", NULL,
                            &strata_lwlsn_cache_size, 131072, 64, 64 * 1024 * 1024, PGC_POSTMASTER,
                            0, NULL, NULL, NULL);
    DefineCustomIntVariable("strata.prefetch_depth",
                            "GetPage requests a backend keeps in flight ahead of its reads.",
                            "0 disables prefetch.", &strata_prefetch_depth, 32, 0,
                            STRATA_PREFETCH_MAX, PGC_USERSET, 0, NULL, NULL, NULL);
    DefineCustomIntVariable(
        "strata.readahead", "Pages a sequential read asks the pageserver for ahead of it.",
        "A backend that reads block N after block N-1 of a relation fork prefetches the "
        "following pages that are neither in shared_buffers nor in the file cache; 0 disables "
        "it.  Bounded by strata.prefetch_depth.",
        &strata_readahead, 16, 0, STRATA_PREFETCH_MAX, PGC_USERSET, 0, NULL, NULL, NULL);
    DefineCustomIntVariable(
        "strata.pageserver_timeout",
        "Fail a query after the pageserver was unreachable or silent this long.", NULL,
        &strata_pageserver_timeout, 120000, 100, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL,
        NULL);
    DefineCustomIntVariable(
        "strata.file_cache_size",
        "Size of the local file cache of pages evicted from shared_buffers.",
        "A cache on the compute's own disk in front of the pageserver, emptied at every start; "
        "0 disables it.",
        &strata_file_cache_size, 0, 0, 1024 * 1024, PGC_POSTMASTER, GUC_UNIT_MB, NULL, NULL, NULL);
    DefineCustomStringVariable(
        "strata.file_cache_path", "File of the local file cache.",
        "Relative to the data directory unless absolute; emptied at every start.",
        &strata_file_cache_path, "strata_file_cache", PGC_POSTMASTER, 0, NULL, NULL, NULL);
    DefineCustomStringVariable(
        "strata.read_lsn", "Pins a read-only compute's reads at this LSN.",
        "Every page, relation size and existence is read from the pageserver as of this LSN "
        "(a static read-only compute: a hot standby that replays nothing).  Empty: a primary "
        "reads the latest version, a standby the version at its replay LSN.",
        &strata_read_lsn, "", PGC_POSTMASTER, 0, check_read_lsn, assign_read_lsn, NULL);
}

static void define_gucs(void)
{
    define_walproposer_gucs();
    define_smgr_gucs();
    MarkGUCPrefixReserved("strata");
}

/*
 * Refuses to start a server whose settings would let a commit return before
 * the safekeepers have it: the walproposer's acknowledgements only hold
 * commits back if it is a synchronous standby.
 */
static void check_server_settings(void)
{
    if (wal_level < WAL_LEVEL_REPLICA)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("strata.safekeepers requires wal_level = replica or higher")));
    if (max_wal_senders < 1)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("strata.safekeepers requires max_wal_senders > 0"),
                        errdetail("The walproposer reads WAL through a walsender.")));
    if (SyncRepStandbyNames == NULL || strcasestr(SyncRepStandbyNames, "walproposer") == NULL)
        ereport(
            ERROR,
            (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
             errmsg("strata.safekeepers requires synchronous_standby_names = 'walproposer'"),
             errdetail(
                 "Without it commits would return before a majority of safekeepers has them.")));
    if (strata_tenant_id[0] == '\0' || strata_timeline_id[0] == '\0')
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("strata.safekeepers requires strata.tenant_id and strata.timeline_id")));
}

void _PG_init(void)
{
    if (!process_shared_preload_libraries_in_progress)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("strata must be loaded via shared_preload_libraries")));
    define_gucs();
    if (strata_safekeepers[0] != '\0') {
        check_server_settings();
        strata_walproposer_register();
    }
    strata_smgr_setup();
    strata_alter_system_setup();
}
