/*
 * compute.c: running the stock-Postgres compute.  See compute.h.
 *
 * Why these settings (strata.conf):
 *   synchronous_standby_names = 'walproposer', synchronous_commit = on:
 *     a commit returns only once the walproposer reports it flushed, which it
 *     does when a majority of safekeepers has fsynced it (DESIGN section 6).
 *   fsync = off: durability is the safekeepers' job; the compute's pg_wal is
 *     a staging area.  A crash of the machine may corrupt pgdata; a crash of
 *     postgres alone (kill -9) loses nothing because the OS still has it.
 *   full_page_writes = on: in this stage the compute still owns its pages,
 *     so torn pages are possible (off comes with the pageserver).
 *   restart_after_crash = off: a crashed backend stops the compute instead
 *     of silently restarting it, so failures are visible.
 */
#include "cli/compute.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli/locate.h"
#include "cli/probe.h"
#include "cli/proc.h"
#include "cli/safekeepers.h"
#include "common/log.h"

#define COMPUTE_INITDB_TIMEOUT_S 300
#define COMPUTE_FAST_STOP_TIMEOUT_MS 30000
#define COMPUTE_IMMEDIATE_STOP_TIMEOUT_MS 5000
#define COMPUTE_KILL_TIMEOUT_MS 10000

typedef struct compute_paths {
    char root[PATH_MAX];    /* D/compute */
    char pgdata[PATH_MAX];  /* D/compute/pgdata */
    char staging[PATH_MAX]; /* D/compute/pgdata.initdb: initdb target, renamed when done */
    char sockdir[PATH_MAX]; /* D/compute/run */
    char pidfile[PATH_MAX]; /* D/compute.pid */
    char logfile[PATH_MAX]; /* D/compute.log */
    char initdb_log[PATH_MAX];
} compute_paths;

static int compute_paths_get(const cluster *c, compute_paths *p, cli_err *err)
{
    if (cluster_path(c, "compute", p->root, err) != 0 ||
        cluster_path(c, "compute/pgdata", p->pgdata, err) != 0 ||
        cluster_path(c, "compute/pgdata.initdb", p->staging, err) != 0 ||
        cluster_path(c, "compute/run", p->sockdir, err) != 0 ||
        cluster_path(c, "compute.pid", p->pidfile, err) != 0 ||
        cluster_path(c, "compute.log", p->logfile, err) != 0 ||
        cluster_path(c, "initdb.log", p->initdb_log, err) != 0)
        return -1;
    /* Postgres puts ".s.PGSQL.<port>" in the socket directory; sun_path is short. */
    struct sockaddr_un un;
    if (strlen(p->sockdir) + sizeof "/.s.PGSQL.65535.lock" > sizeof un.sun_path)
        return cli_err_set(err,
                           "cluster directory %s is too long for a unix socket path "
                           "(use a shorter --dir)",
                           c->dir);
    return 0;
}

int compute_datadir(const cluster *c, char *buf, cli_err *err)
{
    return cluster_path(c, "compute/pgdata", buf, err);
}

pid_t compute_pid(const cluster *c)
{
    compute_paths p;
    cli_err err = {{0}};
    pid_t pid;
    if (compute_paths_get(c, &p, &err) != 0 || proc_pidfile_read(p.pidfile, &pid, &err) != 0)
        return 0;
    return proc_matches(pid, "postgres", p.pgdata) ? pid : 0;
}

static int remove_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    return remove(path) == 0 ? 0 : -1;
}

static int write_file(const char *path, const char *text, cli_err *err)
{
    FILE *f = fopen(path, "we");
    if (f == NULL)
        return cli_err_set(err, "create %s: %s", path, strerror(errno));
    fputs(text, f);
    if (fflush(f) != 0 || ferror(f)) {
        int e = errno;
        fclose(f);
        return cli_err_set(err, "write %s: %s", path, strerror(e));
    }
    if (fclose(f) != 0)
        return cli_err_set(err, "close %s: %s", path, strerror(errno));
    return 0;
}

static int append_file(const char *path, const char *text, cli_err *err)
{
    FILE *f = fopen(path, "ae");
    if (f == NULL)
        return cli_err_set(err, "open %s: %s", path, strerror(errno));
    fputs(text, f);
    if (fclose(f) != 0)
        return cli_err_set(err, "write %s: %s", path, strerror(errno));
    return 0;
}

/* Trust local and loopback connections, replication included: the cluster
 * listens on 127.0.0.1 only and is for development and tests. */
static const char compute_hba[] =
    "# Written by strata: trust local and loopback connections, replication included.\n"
    "local   all          all                 trust\n"
    "local   replication  all                 trust\n"
    "host    all          all   127.0.0.1/32  trust\n"
    "host    replication  all   127.0.0.1/32  trust\n";

/* Runs initdb into a staging directory and renames it into place, so a
 * failed or interrupted initdb never leaves a half-made pgdata behind. */
static int compute_initdb(const cluster *c, const compute_paths *p, const proc_user *user,
                          cli_err *err)
{
    char initdb[PATH_MAX];
    if (locate_pg_program("initdb", initdb, err) != 0)
        return -1;
    if (access(p->staging, F_OK) == 0 &&
        nftw(p->staging, remove_one, 32, FTW_DEPTH | FTW_PHYS) != 0)
        return cli_err_set(err, "removing the leftover %s: %s", p->staging, strerror(errno));
    if (proc_chown_tree(p->root, user, err) != 0)
        return -1;
    printf("compute: initdb %s (log %s)\n", p->pgdata, p->initdb_log);
    fflush(stdout);
    char username[80];
    snprintf(username, sizeof username, "--username=%s", c->pg_user);
    char *argv[] = {initdb, "-D",   (char *)p->staging, username,    "--auth=trust",
                    "-E",   "UTF8", "--locale=C",       "--no-sync", "--no-instructions",
                    NULL};
    if (proc_run(argv, p->initdb_log, user, COMPUTE_INITDB_TIMEOUT_S, err) != 0)
        return -1;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/pg_hba.conf", p->staging);
    if (write_file(path, compute_hba, err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/postgresql.conf", p->staging);
    if (append_file(path,
                    "\n# Settings owned by strata (rewritten at every start).\n"
                    "include 'strata.conf'\n",
                    err) != 0)
        return -1;
    if (rename(p->staging, p->pgdata) != 0)
        return cli_err_set(err, "rename %s: %s", p->staging, strerror(errno));
    return 0;
}

static int compute_write_config(const cluster *c, const compute_paths *p, cli_err *err)
{
    char extension[PATH_MAX], sks[256], tenant[STRATA_ID_HEX_LEN], timeline[STRATA_ID_HEX_LEN];
    if (locate_extension(extension, err) != 0)
        return -1;
    safekeepers_list(c, sks, sizeof sks);
    char conf[8192];
    int n = snprintf(conf, sizeof conf,
                     "# Written by `strata` at every start from %s/cluster.json; edits are lost.\n"
                     "listen_addresses = '127.0.0.1'\n"
                     "port = %d\n"
                     "unix_socket_directories = '%s'\n"
                     "shared_preload_libraries = '%s'\n"
                     "strata.safekeepers = '%s'\n"
                     "strata.tenant_id = '%s'\n"
                     "strata.timeline_id = '%s'\n"
                     "synchronous_standby_names = 'walproposer'\n"
                     "synchronous_commit = on\n"
                     "wal_level = replica\n"
                     "max_wal_senders = 10\n"
                     "wal_keep_size = '1GB'\n"
                     "full_page_writes = on\n"
                     "fsync = off\n"
                     "restart_after_crash = off\n"
                     "log_line_prefix = '%%m [%%p] '\n",
                     c->dir, c->compute_port, p->sockdir, extension, sks,
                     strata_id_format(&c->tenant_id, tenant),
                     strata_id_format(&c->timeline_id, timeline));
    if (n < 0 || n >= (int)sizeof conf)
        return cli_err_set(err, "compute configuration too long");
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/strata.conf", p->pgdata);
    return write_file(path, conf, err);
}

/* Removes lock file path when the pid on its first line is gone or a zombie. */
static int remove_if_stale(const char *path, cli_err *err)
{
    pid_t pid;
    int rc = proc_pidfile_read(path, &pid, err);
    if (rc < 0)
        return -1;
    if (rc == 1 || proc_alive(pid))
        return 0;
    if (unlink(path) != 0 && errno != ENOENT)
        return cli_err_set(err, "removing the stale %s: %s", path, strerror(errno));
    return 0;
}

/*
 * A postmaster killed with SIGKILL stays a zombie until init reaps it, and
 * postgres takes a zombie's pid in its lock files (postmaster.pid and the
 * socket's lock) for a live postmaster.  Remove such stale locks.
 */
static int compute_remove_stale_locks(const cluster *c, const compute_paths *p, cli_err *err)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/postmaster.pid", p->pgdata);
    if (remove_if_stale(path, err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/.s.PGSQL.%d.lock", p->sockdir, c->compute_port);
    return remove_if_stale(path, err);
}

static int compute_kill(pid_t pid, cli_err *err);

int compute_preflight(const cluster *c, cli_err *err)
{
    compute_paths p;
    char program[PATH_MAX];
    proc_user user;
    if (compute_paths_get(c, &p, err) != 0 || locate_pg_program("postgres", program, err) != 0 ||
        locate_pg_program("initdb", program, err) != 0 || locate_extension(program, err) != 0 ||
        proc_user_for_postgres(c->pg_user, &user, err) != 0)
        return -1;
    if (proc_check_access(c->dir, X_OK, &user, err) != 0 ||
        proc_check_access(program, R_OK, &user, err) != 0)
        return -1;
    return 0;
}

int compute_init_datadir(const cluster *c, bool *created, cli_err *err)
{
    compute_paths p;
    *created = false;
    if (compute_paths_get(c, &p, err) != 0)
        return -1;
    proc_user user;
    if (proc_user_for_postgres(c->pg_user, &user, err) != 0)
        return -1;
    if ((mkdir(p.root, 0750) != 0 && errno != EEXIST) ||
        (mkdir(p.sockdir, 0750) != 0 && errno != EEXIST))
        return cli_err_set(err, "mkdir under %s: %s", p.root, strerror(errno));
    if (proc_chown_tree(p.root, &user, err) != 0 ||
        proc_check_access(p.root, R_OK | W_OK | X_OK, &user, err) != 0)
        return -1;
    char version[PATH_MAX + 16];
    snprintf(version, sizeof version, "%s/PG_VERSION", p.pgdata);
    if (access(version, F_OK) == 0)
        return 0;
    if (compute_initdb(c, &p, &user, err) != 0)
        return -1;
    *created = true;
    return 0;
}

/* pg_control of PostgreSQL 15: system_identifier (8 bytes),
 * pg_control_version (4), catalog_version_no (4), state (4), ... */
#define PG_CONTROL_VERSION_15 1300
#define PG_CONTROL_STATE_OFFSET 16
#define PG_DB_SHUTDOWNED 1

int compute_cleanly_shut_down(const cluster *c, bool *clean, cli_err *err)
{
    compute_paths p;
    *clean = false;
    if (compute_paths_get(c, &p, err) != 0)
        return -1;
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/global/pg_control", p.pgdata);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return cli_err_set(err, "open %s: %s", path, strerror(errno));
    unsigned char head[PG_CONTROL_STATE_OFFSET + 4];
    size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    if (n != sizeof head)
        return cli_err_set(err, "%s is too short", path);
    uint32_t version, state;
    /* pg_control is in the machine's byte order. */
    memcpy(&version, head + 8, sizeof version);
    memcpy(&state, head + PG_CONTROL_STATE_OFFSET, sizeof state);
    if (version != PG_CONTROL_VERSION_15)
        return cli_err_set(err, "%s: pg_control version %u, expected %u (PostgreSQL 15)", path,
                           version, PG_CONTROL_VERSION_15);
    *clean = state == PG_DB_SHUTDOWNED;
    return 0;
}

int compute_start(const cluster *c, cli_err *err)
{
    compute_paths p;
    if (compute_paths_get(c, &p, err) != 0)
        return -1;
    if (compute_pid(c) != 0)
        return 0;
    char postgres[PATH_MAX], extension[PATH_MAX];
    if (locate_pg_program("postgres", postgres, err) != 0 || locate_extension(extension, err) != 0)
        return -1;
    proc_user user;
    bool created;
    if (proc_user_for_postgres(c->pg_user, &user, err) != 0 ||
        compute_init_datadir(c, &created, err) != 0)
        return -1;
    if (compute_write_config(c, &p, err) != 0 || proc_chown_tree(p.root, &user, err) != 0)
        return -1;

    if (compute_remove_stale_locks(c, &p, err) != 0)
        return -1;
    char *argv[] = {postgres, "-D", p.pgdata, NULL};
    pid_t pid;
    if (proc_spawn_detached(argv, p.logfile, p.pgdata, &user, &pid, err) != 0)
        return -1;
    if (proc_pidfile_write(p.pidfile, pid, err) != 0) {
        /* Untracked it could never be stopped by strata: do not leave it. */
        compute_kill(pid, err);
        return -1;
    }
    return 0;
}

int compute_wait_ready(const cluster *c, int timeout_ms, cli_err *err)
{
    compute_paths p;
    if (compute_paths_get(c, &p, err) != 0)
        return -1;
    char connstr[512];
    cluster_compute_connstr(c, connstr, sizeof connstr);
    long long deadline = proc_now_ms() + timeout_ms;
    for (;;) {
        if (compute_pid(c) == 0)
            return cli_err_set(err, "compute exited during startup; see %s", p.logfile);
        if (probe_pg_ready(connstr))
            return 0;
        if (proc_now_ms() >= deadline)
            return cli_err_set(err,
                               "compute did not accept connections on port %d within %d s; "
                               "see %s",
                               c->compute_port, timeout_ms / 1000, p.logfile);
        proc_sleep_ms(100);
    }
}

/* SIGKILLs the postmaster and every child it had, then waits for all. */
static int compute_kill(pid_t pid, cli_err *err)
{
    pid_t children[PROC_MAX_CHILDREN];
    int n = proc_children(pid, children, PROC_MAX_CHILDREN);
    kill(pid, SIGKILL);
    for (int i = 0; i < n; i++)
        kill(children[i], SIGKILL);
    /* Children forked between the listing and the kill see the postmaster
     * die and exit on their own; list again to be sure. */
    n = proc_children(pid, children, PROC_MAX_CHILDREN);
    for (int i = 0; i < n; i++)
        kill(children[i], SIGKILL);
    if (!proc_wait_gone(pid, COMPUTE_KILL_TIMEOUT_MS))
        return cli_err_set(err, "compute (pid %d) survived SIGKILL", (int)pid);
    for (int i = 0; i < n; i++)
        proc_wait_gone(children[i], COMPUTE_KILL_TIMEOUT_MS);
    return 0;
}

int compute_stop(const cluster *c, bool immediate, cli_err *err)
{
    pid_t pid = compute_pid(c);
    if (pid == 0)
        return 0;
    if (immediate)
        return compute_kill(pid, err);
    /* A fast shutdown waits until the safekeepers confirm all WAL, which
     * needs a majority of them: without one, go straight to immediate. */
    int running = 0;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        running += safekeepers_pid(c, &c->sk[i]) != 0;
    if (running < CLUSTER_SAFEKEEPERS / 2 + 1)
        log_warn("only %d of %d safekeepers run, so a fast shutdown cannot finish: "
                 "shutting the compute down immediately (it recovers from its pg_wal)",
                 running, CLUSTER_SAFEKEEPERS);
    else if (proc_signal_and_wait(pid, SIGINT, COMPUTE_FAST_STOP_TIMEOUT_MS))
        return 0;
    else
        log_warn("compute (pid %d) did not finish a fast shutdown within %d s; "
                 "trying an immediate shutdown (is a majority of safekeepers down?)",
                 (int)pid, COMPUTE_FAST_STOP_TIMEOUT_MS / 1000);
    if (proc_signal_and_wait(pid, SIGQUIT, COMPUTE_IMMEDIATE_STOP_TIMEOUT_MS))
        return 0;
    log_warn("compute (pid %d) ignored an immediate shutdown; sending SIGKILL", (int)pid);
    return compute_kill(pid, err);
}
