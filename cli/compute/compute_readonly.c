/*
 * compute_readonly.c: read-only computes.  See compute_readonly.h.
 *
 * Static (an LSN given): `basebackup T TL L` (the files at L and the
 * synthetic shutdown checkpoint at L), a hot standby with no
 * primary_conninfo that replays nothing, strata.read_lsn = L: the smgr reads
 * every page, size and existence at exactly L.  Why it opens at once and
 * stays at L (PostgreSQL 15, verified in xlogrecovery.c and xlog.c): with
 * standby.signal and pg_control in state DB_SHUTDOWNED, InitWalRecovery
 * enters archive recovery and standby mode directly; StartupXLOG raises
 * minRecoveryPoint to the checkpoint's redo (= the record itself) and,
 * the checkpoint being a shutdown one, builds the standby snapshot itself;
 * PerformWalRecovery sets lastReplayedEndRecPtr to the record's end and
 * calls CheckRecoveryConsistency before reading the next record, so the
 * postmaster is told to allow connections before any wait.  The next record
 * never comes (nothing after the checkpoint in pg_wal, no primary_conninfo,
 * no restore_command): the startup process retries pg_wal every
 * wal_retrieve_retry_interval and replays nothing.  Were it ever to replay,
 * the smgr refuses (strata_read_at: a pinned compute cannot replay WAL).
 *
 * Replica: `basebackup T TL latest replica` (the files at the pageserver's
 * last ingested LSN, pg_control at the newest real checkpoint record a
 * standby can start from, no WAL), a hot standby whose primary_conninfo
 * names the safekeepers that still hold that checkpoint's WAL segment, and
 * whose smgr reads at its replay LSN.  When there is no such checkpoint
 * (the pageserver has none it can serve, or the safekeepers removed its
 * WAL), the timeline's running writable compute is asked for a CHECKPOINT
 * and the start is tried again; without one the error says what to do.
 */
#include "cli/compute/compute_readonly.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "base/byteorder.h"
#include "cli/local/proc.h"
#include "cli/client/sk_client.h"
#include "cli/local/timelines.h"

/* ControlFileData (catalog/pg_control.h, PG 15): state and checkPoint. */
#define PG_CONTROL_STATE_OFF 16
#define PG_CONTROL_CHECKPOINT_OFF 32
#define PG_DB_SHUTDOWNED_IN_RECOVERY 2

/* Tries of a replica start after asking the primary for a CHECKPOINT (the
 * pageserver must ingest the new record first), one second apart. */
#define REPLICA_TRIES 15
/* How long a starting replica's log is watched for a removed segment. */
#define REPLICA_WATCH_MS 20000

/* ---- static ------------------------------------------------------------- */

static int static_conf(const cluster *c, const char *pgdata, char *conf, size_t len, void *arg,
                       cli_err *err)
{
    (void)c;
    (void)pgdata;
    (void)err;
    char lb[LSN_FMT_LEN];
    snprintf(conf, len,
             "# A static read-only compute (strata start compute NAME --read-only --lsn):\n"
             "# a hot standby pinned at %s; it replays nothing.\n"
             "hot_standby = on\n"
             "strata.read_lsn = '%s'\n",
             lsn_format(*(const lsn_t *)arg, lb), lb);
    return 0;
}

/* ---- replica -------------------------------------------------------------- */

typedef struct replica_ctx {
    bool needs_checkpoint; /* the failure goes away with a newer checkpoint record */
} replica_ctx;

/* The checkpoint record the fetched pg_control starts the standby at. */
static int read_checkpoint(const char *pgdata, lsn_t *out, cli_err *err)
{
    char path[PATH_MAX + 32];
    uint8_t buf[PG_CONTROL_CHECKPOINT_OFF + 8];
    snprintf(path, sizeof path, "%s/global/pg_control", pgdata);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cli_err_set(err, "open %s: %s", path, strerror(errno));
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n != (ssize_t)sizeof buf)
        return cli_err_set(err, "%s is too short", path);
    if (get_le32(buf + PG_CONTROL_STATE_OFF) != PG_DB_SHUTDOWNED_IN_RECOVERY)
        return cli_err_set(err, "%s is not a replica basebackup's (state %u)", path,
                           get_le32(buf + PG_CONTROL_STATE_OFF));
    *out = get_le64(buf + PG_CONTROL_CHECKPOINT_OFF);
    return 0;
}

/*
 * primary_conninfo: every safekeeper that holds the timeline's WAL from the
 * checkpoint's segment on (libpq tries the hosts in order, and the
 * walreceiver reconnects through the list).  None: needs_checkpoint.
 */
static int replica_conf(const cluster *c, const char *pgdata, char *conf, size_t len, void *arg,
                        cli_err *err)
{
    replica_ctx *ctx = arg;
    lsn_t checkpoint = LSN_INVALID;
    if (read_checkpoint(pgdata, &checkpoint, err) != 0)
        return -1;
    const char *password = getenv("STRATA_SAFEKEEPER_PASSWORD");
    if (password != NULL && password[0] == '\0')
        password = NULL;
    char hosts[CLUSTER_SAFEKEEPERS * (CLUSTER_HOST_LEN + 1)] = "", ports[64] = "";
    char why[sizeof(cli_err) + 16] = "no safekeeper answered";
    int usable = 0;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        sk_target t = {.host = c->sk[i].host,
                       .port = c->sk[i].pg_port,
                       .tenant = c->tenant_id,
                       .timeline = c->timeline_id,
                       .password = password};
        sk_state st;
        cli_err e = {{0}};
        if (sk_client_status(&t, &st, &e) != 0) {
            snprintf(why, sizeof why, "%s: %s", c->sk[i].name, e.msg);
            continue;
        }
        char a[LSN_FMT_LEN];
        if (st.wal_start == LSN_INVALID || st.wal_start > checkpoint) {
            snprintf(why, sizeof why, "%s holds WAL from %s only", c->sk[i].name,
                     lsn_format(st.wal_start, a));
            continue;
        }
        size_t h = strlen(hosts), p = strlen(ports);
        snprintf(hosts + h, sizeof hosts - h, "%s%s", usable ? "," : "", c->sk[i].host);
        snprintf(ports + p, sizeof ports - p, "%s%d", usable ? "," : "", c->sk[i].pg_port);
        usable++;
    }
    char lb[LSN_FMT_LEN], tenant[STRATA_ID_HEX_LEN], timeline[STRATA_ID_HEX_LEN];
    if (usable == 0) {
        ctx->needs_checkpoint = true;
        return cli_err_set(err,
                           "no safekeeper holds the WAL from the checkpoint record at %s a "
                           "replica starts from (%s)",
                           lsn_format(checkpoint, lb), why);
    }
    /* In the file, the conninfo is a quoted string: its own quotes double. */
    int n = snprintf(conf, len,
                     "# A replica (strata start compute NAME --read-only): a hot standby\n"
                     "# streaming the timeline's committed WAL from the safekeepers.\n"
                     "hot_standby = on\n"
                     "wal_receiver_status_interval = '1s'\n"
                     "primary_conninfo = 'host=%s port=%s user=%s dbname=postgres "
                     "application_name=%s options=''-c tenant_id=%s -c timeline_id=%s''%s%s'\n",
                     hosts, ports, c->pg_user, compute_label(c),
                     strata_id_format(&c->tenant_id, tenant),
                     strata_id_format(&c->timeline_id, timeline), password ? " password=" : "",
                     password ? password : "");
    if (n < 0 || (size_t)n >= len)
        return cli_err_set(err, "replica configuration too long");
    return 0;
}

/* The running writable compute on view's timeline, as a view; 1 if none. */
static int find_primary(const cluster *view, cluster *out, cli_err *err)
{
    /* Views are made from the cluster itself (the default compute's is the
     * cluster), not from another compute's view. */
    cluster *base = malloc(sizeof *base);
    timeline_registry *r = malloc(sizeof *r);
    if (r == NULL || base == NULL) {
        free(base);
        free(r);
        return cli_err_set(err, "out of memory");
    }
    int rc = cluster_load(view->dir, base, err) != 0 || timelines_load(base, r, err) != 0 ? -1 : 1;
    for (int i = 0; rc == 1 && i < r->ncomputes; i++) {
        const compute_entry *e = &r->computes[i];
        if (e->read_only)
            continue;
        if (timelines_compute_view(base, r, e, out, err) != 0) {
            rc = -1;
            break;
        }
        if (strata_id_equal(&out->timeline_id, &view->timeline_id) && compute_pid(out) != 0)
            rc = 0;
    }
    free(r);
    free(base);
    return rc;
}

/* CHECKPOINT on the timeline's running writable compute: a new checkpoint
 * record that a replica can start from. */
static int primary_checkpoint(const cluster *view, cli_err *err)
{
    cluster primary;
    int found = find_primary(view, &primary, err);
    if (found < 0)
        return -1;
    if (found == 1)
        return cli_err_set(err, "no writable compute runs on this timeline to write a newer "
                                "checkpoint record: start one (its startup writes one) and "
                                "retry");
    PGconn *conn = compute_connect(&primary, 10);
    int rc = 0;
    if (PQstatus(conn) != CONNECTION_OK) {
        rc = cli_err_set(err, "connecting to compute %s for a CHECKPOINT: %s",
                         compute_label(&primary), PQerrorMessage(conn));
    } else {
        PGresult *res = PQexec(conn, "CHECKPOINT");
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
            rc = cli_err_set(err, "CHECKPOINT on compute %s: %s", compute_label(&primary),
                             PQresultErrorMessage(res));
        PQclear(res);
    }
    PQfinish(conn);
    if (rc == 0)
        printf("%s: asked compute %s for a CHECKPOINT (no checkpoint record a replica can start "
               "from)\n",
               compute_label(view), compute_label(&primary));
    return rc;
}

/* A pageserver refusal that a newer checkpoint record cures. */
static bool pageserver_wants_checkpoint(const char *msg)
{
    return strstr(msg, "no checkpoint record at or below") != NULL ||
           strstr(msg, "is below the GC horizon") != NULL;
}

/* The size of the compute's log (it is appended to), 0 when absent. */
static off_t log_size(const cluster *view)
{
    char path[PATH_MAX];
    cli_err ignored = {{0}};
    struct stat st;
    if (compute_log_path(view, path, &ignored) != 0 || stat(path, &st) != 0)
        return 0;
    return st.st_size;
}

/* Whether the compute's log, from offset from on, holds needle. */
static bool log_mentions(const cluster *view, off_t from, const char *needle)
{
    char path[PATH_MAX];
    cli_err ignored = {{0}};
    if (compute_log_path(view, path, &ignored) != 0)
        return false;
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return false;
    bool found = false;
    char line[1024];
    if (fseeko(f, from, SEEK_SET) == 0)
        while (!found && fgets(line, sizeof line, f) != NULL)
            found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/*
 * Waits (bounded) for a replica that just started to accept connections,
 * watching its log: the safekeepers may remove the checkpoint's segment
 * between the check in replica_conf and the standby's first read of it
 * (they keep WAL for the pageserver, not for standbys).  1 when that
 * happened (the replica was stopped), 0 when it is ready or still starting
 * (the caller waits on), -1 when it exited.
 */
static int watch_replica_start(const cluster *view, off_t log_from, cli_err *err)
{
    long long deadline = proc_now_ms() + REPLICA_WATCH_MS;
    while (proc_now_ms() < deadline) {
        cli_err e = {{0}};
        if (compute_wait_ready(view, 500, &e) == 0)
            return 0;
        if (compute_pid(view) == 0)
            return cli_err_set(err, "%s", e.msg);
        if (log_mentions(view, log_from, "has already been removed")) {
            if (compute_stop(view, true, err) != 0)
                return -1;
            return 1;
        }
    }
    return 0;
}

static int start_replica(const cluster *view, compute_start_report *rep, cli_err *err)
{
    bool asked = false;
    for (int attempt = 0;; attempt++) {
        replica_ctx ctx = {.needs_checkpoint = false};
        cli_err e = {{0}};
        off_t log_from = log_size(view);
        int rc = compute_start_standby(view, LSN_INVALID, "replica", replica_conf, &ctx, rep, &e);
        bool removed = false;
        if (rc == 0) {
            rc = watch_replica_start(view, log_from, &e);
            if (rc <= 0) {
                if (rc < 0)
                    *err = e;
                return rc;
            }
            ctx.needs_checkpoint = removed = true;
            snprintf(e.msg, sizeof e.msg,
                     "the safekeepers removed the WAL segment of the checkpoint record the "
                     "replica started from");
        }
        bool cure = ctx.needs_checkpoint || pageserver_wants_checkpoint(e.msg);
        if (!cure || attempt + 1 >= REPLICA_TRIES) {
            *err = e;
            return -1;
        }
        if (!asked || removed) {
            cli_err ce = {{0}};
            if (primary_checkpoint(view, &ce) != 0)
                return cli_err_set(err, "%s; %s", e.msg, ce.msg);
            asked = true;
        }
        proc_sleep_ms(1000);
    }
}

int compute_start_read_only(const cluster *view, bool has_lsn, lsn_t lsn, compute_start_report *rep,
                            cli_err *err)
{
    memset(rep, 0, sizeof *rep);
    if (!has_lsn)
        return start_replica(view, rep, err);
    char lb[LSN_FMT_LEN];
    if (lsn == LSN_INVALID || lsn % 8 != 0)
        return cli_err_set(err,
                           "--lsn %s is not a record boundary (record ends are 8-byte "
                           "aligned and not 0/0)",
                           lsn_format(lsn, lb));
    return compute_start_standby(view, lsn, "", static_conf, &lsn, rep, err);
}

bool compute_read_only_progress(const cluster *view, lsn_t *replay, int64_t *lag)
{
    PGconn *conn = compute_connect(view, 2);
    bool ok = false;
    *lag = -1;
    if (PQstatus(conn) == CONNECTION_OK) {
        /* A static compute reads at strata.read_lsn, not at the end of
         * the checkpoint record it "replayed". */
        PGresult *res = PQexec(conn, "SELECT coalesce(nullif(current_setting('strata.read_lsn', "
                                     "true), '')::pg_lsn, pg_last_wal_replay_lsn()), "
                                     "(SELECT latest_end_lsn FROM pg_stat_wal_receiver)");
        lsn_t end;
        ok = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
             !PQgetisnull(res, 0, 0) && lsn_parse(PQgetvalue(res, 0, 0), replay);
        if (ok && !PQgetisnull(res, 0, 1) && lsn_parse(PQgetvalue(res, 0, 1), &end))
            *lag = end > *replay ? (int64_t)(end - *replay) : 0;
        PQclear(res);
    }
    PQfinish(conn);
    return ok;
}
