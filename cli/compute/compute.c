/*
 * compute.c: running the stock-Postgres compute.  See compute.h.
 *
 * Why these settings (strata.conf):
 *   synchronous_standby_names = 'walproposer', synchronous_commit = on:
 *     a commit returns only once the walproposer reports it flushed, which it
 *     does when a majority of safekeepers has fsynced it (docs/design.md §4).
 *   fsync = off: durability is the safekeepers' job; the compute's pg_wal is
 *     a staging area.  A crash of the machine may corrupt pgdata; a crash of
 *     postgres alone (kill -9) loses nothing because the OS still has it.
 *   full_page_writes = off for a compute made from a pageserver basebackup:
 *     it never writes a page back, so a torn page cannot happen (the
 *     pageserver writes images itself); on only for a compute made by initdb
 *     without a pageserver, which owns its relation files.
 *   restart_after_crash = off: a crashed backend stops the compute instead
 *     of silently restarting it, so failures are visible.
 */
#include "cli/compute/compute.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/sysmem.h"
#include "cli/client/basebackup_fetch.h"
#include "cli/compute/compute_settings.h"
#include "cli/local/locate.h"
#include "cli/local/probe.h"
#include "cli/local/proc.h"
#include "cli/local/safekeepers.h"
#include "base/log.h"
#include "base/strata_assert.h"

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
    char sync_log[PATH_MAX]; /* D/sync-safekeepers.log */
} compute_paths;

static int compute_paths_get(const cluster *c, compute_paths *p, cli_err *err)
{
    if (c->compute_name[0] == '\0') {
        if (cluster_path(c, "compute", p->root, err) != 0 ||
            cluster_path(c, "compute/pgdata", p->pgdata, err) != 0 ||
            cluster_path(c, "compute/pgdata.initdb", p->staging, err) != 0 ||
            cluster_path(c, "compute/run", p->sockdir, err) != 0 ||
            cluster_path(c, "compute.pid", p->pidfile, err) != 0 ||
            cluster_path(c, "compute.log", p->logfile, err) != 0 ||
            cluster_path(c, "initdb.log", p->initdb_log, err) != 0 ||
            cluster_path(c, "sync-safekeepers.log", p->sync_log, err) != 0)
            return -1;
    } else {
        /* A named compute (computes.h): D/computes/NAME and beside it
         * NAME.pid, NAME.log, NAME.sync.log. */
        const char *n = c->compute_name;
        char rel[6][CLUSTER_COMPUTE_NAME_LEN + 64];
        char *out[6] = {p->root, p->pgdata, p->staging, p->sockdir, p->pidfile, p->logfile};
        snprintf(rel[0], sizeof rel[0], "computes/%s", n);
        snprintf(rel[1], sizeof rel[1], "computes/%s/pgdata", n);
        snprintf(rel[2], sizeof rel[2], "computes/%s/pgdata.initdb", n);
        snprintf(rel[3], sizeof rel[3], "computes/%s/run", n);
        snprintf(rel[4], sizeof rel[4], "computes/%s.pid", n);
        snprintf(rel[5], sizeof rel[5], "computes/%s.log", n);
        for (int i = 0; i < 6; i++)
            if (cluster_path(c, rel[i], out[i], err) != 0)
                return -1;
        char sync[CLUSTER_COMPUTE_NAME_LEN + 64];
        snprintf(sync, sizeof sync, "computes/%s.sync.log", n);
        if (cluster_path(c, sync, p->sync_log, err) != 0 ||
            cluster_path(c, "computes/initdb.log", p->initdb_log, err) != 0)
            return -1;
    }
    /* Postgres puts ".s.PGSQL.<port>" in the socket directory; sun_path is short. */
    struct sockaddr_un un;
    if (strlen(p->sockdir) + sizeof "/.s.PGSQL.65535.lock" > sizeof un.sun_path)
        return cli_err_set(err,
                           "cluster directory %s is too long for a unix socket path "
                           "(use a shorter --dir)",
                           c->dir);
    return 0;
}

const char *compute_label(const cluster *c)
{
    return c->compute_name[0] != '\0' ? c->compute_name : "compute";
}

int compute_datadir(const cluster *c, char *buf, cli_err *err)
{
    compute_paths p;
    if (compute_paths_get(c, &p, err) != 0)
        return -1;
    snprintf(buf, PATH_MAX, "%s", p.pgdata);
    return 0;
}

int compute_log_path(const cluster *c, char *buf, cli_err *err)
{
    compute_paths p;
    if (compute_paths_get(c, &p, err) != 0)
        return -1;
    snprintf(buf, PATH_MAX, "%s", p.logfile);
    return 0;
}

static void release_interlock_segment(const char *pgdata);

int compute_remove_files(const cluster *c, cli_err *err)
{
    STRATA_ASSERT(c->compute_name[0] != '\0');
    compute_paths p;
    if (compute_paths_get(c, &p, err) != 0)
        return -1;
    if (compute_pid(c) != 0)
        return cli_err_set(err, "compute %s is running", c->compute_name);
    release_interlock_segment(p.pgdata);
    if (proc_remove_tree(p.root, err) != 0)
        return -1;
    const char *files[] = {p.pidfile, p.logfile, p.sync_log};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (unlink(files[i]) != 0 && errno != ENOENT)
            return cli_err_set(err, "remove %s: %s", files[i], strerror(errno));
    return 0;
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
/* A program of the PATCHED PostgreSQL build, which every compute runs
 * (the stock binaries are test oracles only). */
static int compute_program(const char *name, char *out, cli_err *err)
{
    char bindir[PATH_MAX];
    if (locate_patched_pg_bindir(bindir, err) != 0)
        return -1;
    int n = snprintf(out, PATH_MAX, "%s/%s", bindir, name);
    if (n < 0 || n >= PATH_MAX)
        return cli_err_set(err, "path too long: %s/%s", bindir, name);
    if (access(out, X_OK) != 0)
        return cli_err_set(err, "PostgreSQL program %s not found in %s", name, bindir);
    return 0;
}

static int compute_initdb(const cluster *c, const compute_paths *p, const proc_user *user,
                          cli_err *err)
{
    char initdb[PATH_MAX];
    if (compute_program("initdb", initdb, err) != 0)
        return -1;
    if (proc_remove_tree(p->staging, err) != 0)
        return -1;
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

/* How the compute's data directory was made: by initdb (the cluster runs
 * without a pageserver) or from a pageserver basebackup, full (a complete
 * copy, smgr off) or stateless (no relation files, pages from the
 * pageserver through the strata smgr). */
typedef enum compute_kind {
    COMPUTE_INITDB,
    COMPUTE_BB_FULL,
    COMPUTE_BB_STATELESS,
    COMPUTE_BB_READONLY /* stateless, a hot standby, no walproposer (compute_start_standby) */
} compute_kind;

/*
 * Size of the compute's local file cache (strata.file_cache_size): the
 * pages shared_buffers evicted, kept on the compute's own disk so that a
 * re-read is a local pread instead of a GetPage round trip.  It plays the
 * part the kernel's page cache plays for stock Postgres.  Default: 1/8 of
 * the memory it may use (the RAM, or its memory cgroup's limit when smaller:
 * sysmem.h), between 64 MB and 16 GB; STRATA_COMPUTE_FILE_CACHE_MB
 * overrides (0 turns the cache off, so every miss goes to the pageserver).
 */
static int compute_file_cache_mb(long *out, cli_err *err)
{
    const char *env = getenv("STRATA_COMPUTE_FILE_CACHE_MB");
    if (env != NULL && env[0] != '\0') {
        char *end;
        errno = 0;
        long v = strtol(env, &end, 10);
        if (errno != 0 || *end != '\0' || v < 0 || v > 1024L * 1024)
            return cli_err_set(err,
                               "STRATA_COMPUTE_FILE_CACHE_MB must be a number of megabytes "
                               "from 0 to 1048576, not \"%s\"",
                               env);
        *out = v;
        return 0;
    }
    uint64_t usable = sysmem_usable_bytes();
    long mb = usable > 0 ? (long)(usable / 8 / (1 << 20)) : 64;
    *out = mb < 64 ? 64 : mb > 16384 ? 16384 : mb;
    return 0;
}

/* The patched PostgreSQL's package library directory (where contrib
 * modules such as pg_stat_statements are): lib/postgresql or lib under its
 * prefix, whichever holds plpgsql.so. */
static int compute_pkglibdir(char *out, cli_err *err)
{
    char bindir[PATH_MAX];
    if (locate_patched_pg_bindir(bindir, err) != 0)
        return -1;
    static const char *const subdirs[] = {"lib/postgresql", "lib"};
    for (size_t i = 0; i < sizeof subdirs / sizeof subdirs[0]; i++) {
        char probe[PATH_MAX * 2];
        int n = snprintf(out, PATH_MAX, "%s/../%s", bindir, subdirs[i]);
        if (n < 0 || n >= PATH_MAX)
            return cli_err_set(err, "path too long: %s/../%s", bindir, subdirs[i]);
        snprintf(probe, sizeof probe, "%s/plpgsql.so", out);
        if (access(probe, R_OK) == 0)
            return 0;
    }
    return cli_err_set(err, "no library directory with plpgsql.so under %s/..", bindir);
}

/*
 * The operator's settings for this start: the compute spec
 * (D/compute.settings) overridden by STRATA_COMPUTE_SETTINGS; *preload gets
 * the merged shared_preload_libraries (strata.so first).
 */
static int compute_user_settings(const cluster *c, compute_settings *ss, char *preload,
                                 size_t preload_len, cli_err *err)
{
    compute_settings env;
    if (compute_settings_load(c, ss, err) != 0 || compute_settings_from_env(&env, err) != 0)
        return -1;
    for (int i = 0; i < env.n; i++)
        if (compute_settings_put(ss, &env.s[i], err) != 0)
            return -1;
    return compute_settings_check(ss, preload, preload_len, err);
}

int compute_settings_check(const compute_settings *ss, char *preload, size_t preload_len,
                           cli_err *err)
{
    char extension[PATH_MAX], pkglibdir[PATH_MAX];
    if (locate_extension(extension, err) != 0 || compute_pkglibdir(pkglibdir, err) != 0)
        return -1;
    const char *libs = "";
    for (int i = 0; i < ss->n; i++)
        if (strcmp(ss->s[i].name, "shared_preload_libraries") == 0)
            libs = ss->s[i].value;
    return compute_settings_preload(libs, extension, pkglibdir, preload, preload_len, err);
}

#define COMPUTE_CONF_MAX (COMPUTE_SETTINGS_MAX * 2 * (COMPUTE_SETTING_VALUE_MAX + 80) + 16384)

/*
 * The token for the safekeepers (started with --auth-file), from
 * STRATA_SAFEKEEPER_PASSWORD: the walproposer's strata.safekeeper_password
 * line into out ("" without one) and, for sync-safekeepers, *value.
 */
static int compute_safekeeper_password(const char **value, cli_err *err)
{
    const char *password = getenv("STRATA_SAFEKEEPER_PASSWORD");
    *value = password != NULL && password[0] != '\0' ? password : NULL;
    if (*value != NULL && (strpbrk(password, "'\\\n") != NULL || strlen(password) > 256))
        return cli_err_set(err, "STRATA_SAFEKEEPER_PASSWORD must be at most 256 characters "
                                "without quotes, backslashes or newlines");
    return 0;
}

static int compute_safekeeper_password_conf(char *out, size_t len, cli_err *err)
{
    const char *password;
    if (compute_safekeeper_password(&password, err) != 0)
        return -1;
    out[0] = '\0';
    if (password != NULL)
        snprintf(out, len, "strata.safekeeper_password = '%s'\n", password);
    return 0;
}

/*
 * allow_create: this start bootstraps the timeline on the safekeepers
 * (none has it yet), so the walproposer may create it there
 * (strata.allow_timeline_creation; it stops offering that to a safekeeper
 * once it answered).  Every later start is written without it: a
 * safekeeper that lost the timeline is then refused, not recreated empty.
 */
static int compute_write_config(const cluster *c, const compute_paths *p, compute_kind kind,
                                bool allow_create, cli_err *err)
{
    char sks[256], tenant[STRATA_ID_HEX_LEN], timeline[STRATA_ID_HEX_LEN], preload[4096];
    compute_settings *user = malloc(sizeof *user);
    char *conf = malloc(COMPUTE_CONF_MAX);
    int rc = -1;
    if (user == NULL || conf == NULL) {
        cli_err_set(err, "out of memory writing the compute configuration");
        goto out;
    }
    if (compute_user_settings(c, user, preload, sizeof preload, err) != 0)
        goto out;
    safekeepers_list(c, sks, sizeof sks);
    if (kind == COMPUTE_BB_READONLY)
        sks[0] = '\0'; /* no walproposer: a standby writes no WAL */
    /* Stateless: every permanent relation through the strata smgr. */
    char smgr[512] = "";
    if (kind == COMPUTE_BB_STATELESS || kind == COMPUTE_BB_READONLY) {
        int used = snprintf(smgr, sizeof smgr, "strata.pageserver = '%s:%d'\n", c->pageserver_host,
                            c->pageserver_pg_port);
        /* A pageserver with an --auth-file wants a token (docs/operations.md). */
        const char *password = getenv("STRATA_PAGESERVER_PASSWORD");
        if (password != NULL && password[0] != '\0') {
            if (strpbrk(password, "'\\\n") != NULL || strlen(password) > 256) {
                cli_err_set(err, "STRATA_PAGESERVER_PASSWORD must be at most 256 "
                                 "characters without quotes, backslashes or newlines");
                goto out;
            }
            used += snprintf(smgr + used, sizeof smgr - (size_t)used,
                             "strata.pageserver_password = '%s'\n", password);
        }
        long cache_mb = 0;
        if (compute_file_cache_mb(&cache_mb, err) != 0)
            goto out;
        snprintf(smgr + used, sizeof smgr - (size_t)used, "strata.file_cache_size = '%ldMB'\n",
                 cache_mb);
    }
    char sk_password[300] = "";
    if (compute_safekeeper_password_conf(sk_password, sizeof sk_password, err) != 0)
        goto out;
    int n =
        snprintf(conf, COMPUTE_CONF_MAX,
                 "# Written by `strata` at every start (from %s) and the compute spec\n"
                 "# (compute.settings, STRATA_COMPUTE_SETTINGS); edits are lost.\n"
                 "listen_addresses = '%s'\n"
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
                 "full_page_writes = %s\n"
                 "fsync = off\n"
                 "restart_after_crash = off\n"
                 "log_line_prefix = '%%m [%%p] '\n"
                 "%s%s%s",
                 c->compute_exec ? "the environment (--remote)" : "cluster.json", c->compute_listen,
                 c->compute_port, p->sockdir, preload, sks, strata_id_format(&c->tenant_id, tenant),
                 strata_id_format(&c->timeline_id, timeline), kind == COMPUTE_INITDB ? "on" : "off",
                 sk_password, smgr, allow_create ? "strata.allow_timeline_creation = on\n" : "");
    if (n < 0 || n >= COMPUTE_CONF_MAX) {
        cli_err_set(err, "compute configuration too long");
        goto out;
    }
    size_t used = (size_t)n;
    if (user->n > 0) {
        n = snprintf(conf + used, COMPUTE_CONF_MAX - used,
                     "# The operator's settings (later lines win; ALTER SYSTEM wins over all).\n");
        used += (size_t)n;
        if (compute_settings_render(user, conf, COMPUTE_CONF_MAX, &used, err) != 0)
            goto out;
    }
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/strata.conf", p->pgdata);
    rc = write_file(path, conf, err);
out:
    free(user);
    free(conf);
    return rc;
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

/* Starts postgres -D pgdata detached, as user, and records its pid. */
static int compute_spawn(char *postgres, const compute_paths *p, const proc_user *user,
                         cli_err *err)
{
    char *argv[] = {postgres, "-D", (char *)p->pgdata, NULL};
    pid_t pid;
    if (proc_spawn_detached(argv, p->logfile, p->pgdata, user, &pid, err) != 0)
        return -1;
    if (proc_pidfile_write(p->pidfile, pid, err) != 0) {
        /* Untracked it could never be stopped by strata: do not leave it. */
        compute_kill(pid, err);
        return -1;
    }
    return 0;
}

int compute_preflight(const cluster *c, cli_err *err)
{
    compute_paths p;
    char program[PATH_MAX];
    proc_user user;
    if (compute_paths_get(c, &p, err) != 0 || compute_program("postgres", program, err) != 0 ||
        compute_program("initdb", program, err) != 0 || locate_extension(program, err) != 0 ||
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
    if (compute_program("postgres", postgres, err) != 0 || locate_extension(extension, err) != 0)
        return -1;
    proc_user user;
    bool created;
    if (proc_user_for_postgres(c->pg_user, &user, err) != 0 ||
        compute_init_datadir(c, &created, err) != 0)
        return -1;
    /* A cluster without a pageserver: its first compute bootstraps the
     * timeline on the safekeepers, when all of them run and none has it. */
    bool allow_create = true;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        safekeeper_timeline tl;
        safekeepers_query(c, &c->sk[i], &tl);
        if (tl.known || safekeepers_pid(c, &c->sk[i]) == 0)
            allow_create = false;
    }
    if (compute_write_config(c, &p, COMPUTE_INITDB, allow_create, err) != 0 ||
        proc_chown_tree(p.root, &user, err) != 0)
        return -1;

    if (compute_remove_stale_locks(c, &p, err) != 0)
        return -1;
    return compute_spawn(postgres, &p, &user, err);
}

PGconn *compute_connect(const cluster *c, int timeout_s)
{
    char base[512], connstr[600];
    cluster_compute_connstr(c, base, sizeof base);
    int n = snprintf(connstr, sizeof connstr, "%s connect_timeout=%d", base, timeout_s);
    STRATA_ASSERT(n > 0 && (size_t)n < sizeof connstr);
    return PQconnectdb(connstr);
}

int compute_wait_ready(const cluster *c, int timeout_ms, cli_err *err)
{
    compute_paths p;
    if (compute_paths_get(c, &p, err) != 0)
        return -1;
    char connstr[512];
    cluster_compute_connstr(c, connstr, sizeof connstr);
    long long deadline = proc_now_ms() + timeout_ms;
    pid_t spawned;
    int rc = proc_pidfile_read(p.pidfile, &spawned, err);
    if (rc != 0)
        return rc < 0 ? -1 : cli_err_set(err, "no compute pid file %s", p.pidfile);
    for (;;) {
        /* Until the child has exec'd postgres its command line is still
         * ours (a loaded machine can take a while): only a process that is
         * gone has exited. */
        if (compute_pid(c) == 0 && !proc_alive(spawned))
            return cli_err_set(err, "compute exited during startup; see %s", p.logfile);
        if (probe_pg_ready(connstr))
            return 0;
        if (proc_now_ms() >= deadline)
            return cli_err_set(err,
                               "compute did not accept connections on port %d within %d s; "
                               "see %s",
                               c->compute_port, timeout_ms / 1000, p.logfile);
        proc_sleep_ms(20);
    }
}

/* SIGKILLs the postmaster and everything it started, then waits for all. */
static int compute_kill(pid_t pid, cli_err *err)
{
    if (!proc_kill_tree(pid, COMPUTE_KILL_TIMEOUT_MS))
        return cli_err_set(err, "compute (pid %d) or one of its processes survived SIGKILL",
                           (int)pid);
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

/* ---- computes started from a pageserver basebackup (docs/design.md §7.7) ---- */

#define COMPUTE_SYNC_TIMEOUT_S 60
#define COMPUTE_BASEBACKUP_TIMEOUT_MS 120000

int compute_make_template(const cluster *c, char *out, cli_err *err)
{
    compute_paths p;
    if (compute_paths_get(c, &p, err) != 0)
        return -1;
    proc_user user;
    if (proc_user_for_postgres(c->pg_user, &user, err) != 0)
        return -1;
    if ((mkdir(p.root, 0750) != 0 && errno != EEXIST) ||
        (mkdir(p.sockdir, 0750) != 0 && errno != EEXIST))
        return cli_err_set(err, "mkdir under %s: %s", p.root, strerror(errno));
    if (proc_chown_tree(p.root, &user, err) != 0)
        return -1;
    if (cluster_path(c, "compute/template", p.pgdata, err) != 0 ||
        cluster_path(c, "compute/template.initdb", p.staging, err) != 0)
        return -1;
    snprintf(out, PATH_MAX, "%s", p.pgdata);
    char version[PATH_MAX + 16];
    snprintf(version, sizeof version, "%s/PG_VERSION", p.pgdata);
    if (access(version, F_OK) == 0)
        return 0;
    return compute_initdb(c, &p, &user, err);
}

int compute_remove_template(const cluster *c, cli_err *err)
{
    char path[PATH_MAX];
    if (cluster_path(c, "compute/template", path, err) != 0)
        return -1;
    return proc_remove_tree(path, err);
}

/*
 * Removes every old data directory renamed aside (D/compute/pgdata.old.*)
 * in a detached process, so that a new compute does not wait for it.  A
 * compute killed a moment ago leaves hundreds of MB of dirty page cache in
 * its file cache (strata_file_cache); unlinking that file waits for the
 * pages under writeback: 5.8 s after a 60 s pgbench at scale 50, all of it
 * in the way of the first query.  The remover has no stdio (a caller
 * reading our output to EOF must not wait for it); a leftover of a remover
 * that died is removed by the next start.
 */
static void remove_aside(const compute_paths *p)
{
    DIR *d = opendir(p->root);
    if (d == NULL)
        return;
    pid_t child = fork();
    if (child < 0) {
        closedir(d);
        return; /* left for the next start */
    }
    if (child > 0) {
        closedir(d);
        waitpid(child, NULL, 0);
        return;
    }
    /* Child: detach, and let a grandchild (reaped by init) do the work. */
    if (setsid() < 0 || fork() != 0)
        _exit(0);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
        dup2(devnull, 2);
        if (devnull > 2)
            close(devnull);
    }
    const char *base = strrchr(p->pgdata, '/');
    base = base != NULL ? base + 1 : p->pgdata;
    char prefix[PATH_MAX + 8];
    snprintf(prefix, sizeof prefix, "%s.old", base);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        char path[PATH_MAX * 2 + 8];
        snprintf(path, sizeof path, "%s/%s", p->root, e->d_name);
        cli_err ignored = {{0}};
        (void)proc_remove_tree(path, &ignored);
    }
    _exit(0);
}

/*
 * A postmaster killed with SIGKILL leaves behind the System V segment it
 * uses as a data directory interlock (key and id on line 7 of
 * postmaster.pid).  postgres removes such a segment when it starts again in
 * the same directory; a directory that is set aside and removed never gets
 * that chance, and each one would hold a segment until the machine's limit
 * (SHMMNI) stops every postgres on it from starting.  Removes it when the
 * key still matches and no process is attached.
 */
static void release_interlock_segment(const char *pgdata)
{
    char path[PATH_MAX + 32], line[128];
    snprintf(path, sizeof path, "%s/postmaster.pid", pgdata);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return; /* stopped cleanly, or never started */
    unsigned long key = 0, id = 0;
    bool found = false;
    for (int n = 1; fgets(line, sizeof line, f) != NULL; n++) {
        if (n == 7) {
            found = sscanf(line, "%lu %lu", &key, &id) == 2;
            break;
        }
    }
    fclose(f);
    struct shmid_ds ds;
    if (!found || id > INT32_MAX || shmctl((int)id, IPC_STAT, &ds) != 0 ||
        (unsigned long)ds.shm_perm.__key != key || ds.shm_nattch != 0)
        return;
    if (shmctl((int)id, IPC_RMID, NULL) != 0)
        log_warn("could not remove the shared memory segment %lu of %s: %s", id, pgdata,
                 strerror(errno));
}

/* Renames the data directory aside (a new one replaces it) and removes it
 * in the background. */
static int set_pgdata_aside(const compute_paths *p, cli_err *err)
{
    char old[PATH_MAX + 64];
    snprintf(old, sizeof old, "%s.old.%lld", p->pgdata, proc_now_ms());
    if (access(p->pgdata, F_OK) == 0) {
        release_interlock_segment(p->pgdata);
        if (rename(p->pgdata, old) != 0)
            return cli_err_set(err, "rename %s: %s", p->pgdata, strerror(errno));
    }
    remove_aside(p);
    return 0;
}

/*
 * Step 1: the LSN to start at.  strata-sync-safekeepers elects a term (which
 * fences any compute still running), brings a majority to the end of
 * committed WAL and prints it.  On a timeline no safekeeper has WAL for yet
 * it refuses ("no acceptor has WAL"): the compute then starts at the
 * pageserver timeline's start LSN.  Returns 1 when no safekeeper has the
 * timeline at all (a new one: run again with allow_create to bootstrap it),
 * 0, or -1 with a reason.
 */
static int compute_sync(const cluster *c, bool allow_create, lsn_t *x, bool *empty, cli_err *err)
{
    char program[PATH_MAX], sks[256], tenant[STRATA_ID_HEX_LEN], timeline[STRATA_ID_HEX_LEN],
        log[PATH_MAX], timeout[16];
    compute_paths p;
    if (locate_sibling("strata-sync-safekeepers", program, err) != 0 ||
        compute_paths_get(c, &p, err) != 0)
        return -1;
    snprintf(log, sizeof log, "%s", p.sync_log);
    safekeepers_list(c, sks, sizeof sks);
    snprintf(timeout, sizeof timeout, "%d", COMPUTE_SYNC_TIMEOUT_S);
    char *argv[] = {program,
                    "--safekeepers",
                    sks,
                    "--tenant",
                    strata_id_format(&c->tenant_id, tenant),
                    "--timeline",
                    strata_id_format(&c->timeline_id, timeline),
                    "--timeout",
                    timeout,
                    NULL,
                    NULL};
    if (allow_create)
        argv[9] = "--allow-timeline-creation";
    if (unlink(log) != 0 && errno != ENOENT)
        return cli_err_set(err, "removing %s: %s", log, strerror(errno));
    cli_err run_err = {{0}};
    proc_user self = {.drop = false}; /* it touches no files: run it as we are */
    /* A safekeeper token goes to it as libpq's PGPASSWORD (flags show in ps). */
    const char *password;
    if (compute_safekeeper_password(&password, err) != 0)
        return -1;
    const char *saved = getenv("PGPASSWORD");
    char saved_copy[512];
    snprintf(saved_copy, sizeof saved_copy, "%s", saved != NULL ? saved : "");
    if (password != NULL)
        setenv("PGPASSWORD", password, 1);
    int rc = proc_run(argv, log, &self, COMPUTE_SYNC_TIMEOUT_S + 10, &run_err);
    if (password != NULL && saved != NULL)
        setenv("PGPASSWORD", saved_copy, 1);
    else if (password != NULL)
        unsetenv("PGPASSWORD");
    FILE *f = fopen(log, "re");
    char line[512], last[512] = "";
    bool no_wal = false, no_timeline = false;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        if (strstr(line, "no acceptor has WAL") != NULL)
            no_wal = true;
        if (strstr(line, "no safekeeper has the timeline") != NULL)
            no_timeline = true;
        if (line[0] != '\0')
            snprintf(last, sizeof last, "%s", line);
    }
    if (f != NULL)
        fclose(f);
    *empty = false;
    if (rc != 0 && no_timeline)
        return 1;
    if (rc != 0 && no_wal) {
        *empty = true;
        *x = c->pageserver_import_lsn;
        return 0;
    }
    if (rc != 0)
        return cli_err_set(err, "sync-safekeepers failed: %s (log %s)",
                           last[0] ? last : run_err.msg, log);
    if (!lsn_parse(last, x) || *x == LSN_INVALID)
        return cli_err_set(err, "sync-safekeepers printed \"%s\", not an LSN (log %s)", last, log);
    return 0;
}

/* Step 3: the files a basebackup leaves to the launcher. */
static int compute_configure(const cluster *c, const compute_paths *p, compute_kind kind, lsn_t x,
                             bool allow_create, cli_err *err)
{
    char path[PATH_MAX + 32], lb[LSN_FMT_LEN], text[LSN_FMT_LEN + 2];
    snprintf(path, sizeof path, "%s/pg_hba.conf", p->pgdata);
    if (write_file(path, compute_hba, err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/postgresql.conf", p->pgdata);
    if (write_file(path,
                   "# Written by strata for a compute started from a basebackup.\n"
                   "include 'strata.conf'\n",
                   err) != 0)
        return -1;
    /* The walproposer begins an empty timeline here and checks that its
     * term starts here (compute/extension/walproposer_pg.c). */
    snprintf(path, sizeof path, "%s/strata.signal", p->pgdata);
    snprintf(text, sizeof text, "%s\n", lsn_format(x, lb));
    if (write_file(path, text, err) != 0)
        return -1;
    return compute_write_config(c, p, kind, allow_create, err);
}

/* Stateless unless STRATA_COMPUTE_MODE=full asks for a complete copy
 * (a compute that reads its own files; for debugging and comparisons). */
static bool compute_stateless_default(void)
{
    const char *mode = getenv("STRATA_COMPUTE_MODE");
    return mode == NULL || strcmp(mode, "full") != 0;
}

/* The compute's directory and its socket directory, and for a named
 * compute D/computes, their parent.  0 or -1 with a reason. */
static int compute_make_dirs(const cluster *c, const compute_paths *p, cli_err *err)
{
    if (c->compute_name[0] != '\0') {
        /* D/computes, the named computes' parent directory. */
        char parent[PATH_MAX];
        if (cluster_path(c, "computes", parent, err) != 0)
            return -1;
        if (mkdir(parent, 0755) != 0 && errno != EEXIST)
            return cli_err_set(err, "mkdir %s: %s", parent, strerror(errno));
    }
    if ((mkdir(p->root, 0750) != 0 && errno != EEXIST) ||
        (mkdir(p->sockdir, 0750) != 0 && errno != EEXIST))
        return cli_err_set(err, "mkdir under %s: %s", p->root, strerror(errno));
    return 0;
}

/* sync-safekeepers to the timeline's end into rep->lsn; when no safekeeper
 * has the timeline, again with --allow-timeline-creation (rep->bootstrap).
 * 0 or -1 with a reason. */
static int compute_sync_or_bootstrap(const cluster *c, compute_start_report *rep, cli_err *err)
{
    int synced = compute_sync(c, false, &rep->lsn, &rep->empty_timeline, err);
    if (synced == 1) {
        /* No safekeeper has the timeline: a new one, bootstrapped now. */
        rep->bootstrap = true;
        synced = compute_sync(c, true, &rep->lsn, &rep->empty_timeline, err);
        if (synced == 1)
            return cli_err_set(err, "sync-safekeepers --allow-timeline-creation still found no "
                                    "safekeeper with the timeline");
    }
    return synced != 0 ? -1 : 0;
}

int compute_start_from_pageserver(const cluster *c, compute_start_report *rep, cli_err *err)
{
    memset(rep, 0, sizeof *rep);
    compute_paths p;
    if (compute_paths_get(c, &p, err) != 0)
        return -1;
    if (compute_pid(c) != 0)
        return cli_err_set(err, "the compute is running (strata stop compute first)");
    char postgres[PATH_MAX];
    proc_user user;
    if (compute_program("postgres", postgres, err) != 0 ||
        proc_user_for_postgres(c->pg_user, &user, err) != 0)
        return -1;
    if (compute_make_dirs(c, &p, err) != 0)
        return -1;
    compute_kind kind = compute_stateless_default() ? COMPUTE_BB_STATELESS : COMPUTE_BB_FULL;
    rep->stateless = kind == COMPUTE_BB_STATELESS;
    long long t0 = proc_now_ms();

    if (compute_sync_or_bootstrap(c, rep, err) != 0)
        return -1;
    long long t1 = proc_now_ms();
    rep->sync_ms = t1 - t0;
    /* A data directory made by initdb before the pageserver existed (it has
     * no strata.signal) was imported at its shutdown checkpoint, which its
     * walproposer never streamed: that compute must run once more on it to
     * bring the safekeepers there. */
    char signal[PATH_MAX + 16], signal_done[PATH_MAX + 32];
    snprintf(signal, sizeof signal, "%s/strata.signal", p.pgdata);
    snprintf(signal_done, sizeof signal_done, "%s/strata.signal.done", p.pgdata);
    /* strata.signal.done: that compute was elected, then stopped before its
     * walproposer streamed the basebackup's checkpoint (a stop right after
     * `strata up`).  Still a basebackup's directory: its md files are none. */
    if (rep->lsn < c->pageserver_import_lsn &&
        (access(signal, F_OK) == 0 || access(signal_done, F_OK) == 0)) {
        /* A compute made from a basebackup that stopped before its WAL
         * reached the timeline's start: nothing was committed, start again
         * from the pageserver's start (never on that directory with md). */
        rep->lsn = c->pageserver_import_lsn;
    }
    if (rep->lsn < c->pageserver_import_lsn) {
        char version[PATH_MAX + 16];
        snprintf(version, sizeof version, "%s/PG_VERSION", p.pgdata);
        if (access(version, F_OK) != 0) {
            char a[LSN_FMT_LEN], b[LSN_FMT_LEN];
            return cli_err_set(err,
                               "the safekeepers end at %s, before the pageserver's timeline "
                               "start %s, and there is no data directory holding that WAL",
                               lsn_format(rep->lsn, a), lsn_format(c->pageserver_import_lsn, b));
        }
        if (c->compute_exec)
            return cli_err_set(err, "the safekeepers end at the timeline's start, before the "
                                    "pageserver's: this compute only starts from a basebackup");
        rep->legacy = true;
        return compute_start(c, err);
    }

    /* Step 2: a new, empty data directory.  The old one is renamed aside and
     * removed in the background (removed_aside). */
    char fresh[PATH_MAX + 16];
    snprintf(fresh, sizeof fresh, "%s.new", p.pgdata);
    if (proc_remove_tree(fresh, err) != 0 || set_pgdata_aside(&p, err) != 0)
        return -1;
    long long t2 = proc_now_ms();
    rep->cleanup_ms = t2 - t1;
    bbfetch_result bres;
    if (bbfetch_run(c, rep->lsn, kind == COMPUTE_BB_FULL, fresh, COMPUTE_BASEBACKUP_TIMEOUT_MS,
                    &bres, err) != 0)
        return -1;
    if (rename(fresh, p.pgdata) != 0)
        return cli_err_set(err, "rename %s: %s", fresh, strerror(errno));
    long long t3 = proc_now_ms();
    rep->basebackup_ms = t3 - t2;
    rep->basebackup_bytes = bres.bytes;
    rep->basebackup_files = bres.files;

    if (compute_configure(c, &p, kind, rep->lsn, rep->bootstrap, err) != 0 ||
        proc_chown_tree(p.root, &user, err) != 0 || compute_remove_stale_locks(c, &p, err) != 0)
        return -1;
    if (c->compute_exec) {
        /* The caller execs postgres in its own process (compute_remote.h). */
        rep->configure_ms = proc_now_ms() - t3;
        return 0;
    }
    if (compute_spawn(postgres, &p, &user, err) != 0)
        return -1;
    rep->configure_ms = proc_now_ms() - t3;
    return 0;
}

/*
 * Read-only computes (compute_readonly.c): a new data directory from the
 * basebackup `basebackup T TL <lsn>|latest [mode]`, the configuration of a
 * stateless compute without the walproposer plus what conf_fn writes
 * (appended to strata.conf, after the operator's settings: it wins), standby.signal
 * instead of strata.signal, and the patched postgres started, not waited
 * for.
 */
int compute_start_standby(const cluster *c, lsn_t lsn, const char *mode,
                          compute_standby_conf_fn conf_fn, void *conf_arg,
                          compute_start_report *rep, cli_err *err)
{
    memset(rep, 0, sizeof *rep);
    compute_paths p;
    char postgres[PATH_MAX], parent[PATH_MAX];
    proc_user user;
    if (compute_paths_get(c, &p, err) != 0 || compute_program("postgres", postgres, err) != 0 ||
        proc_user_for_postgres(c->pg_user, &user, err) != 0 ||
        cluster_path(c, "computes", parent, err) != 0)
        return -1;
    if (compute_pid(c) != 0)
        return cli_err_set(err, "compute %s is running (strata stop compute %s first)",
                           compute_label(c), compute_label(c));
    if ((c->compute_name[0] != '\0' && mkdir(parent, 0755) != 0 && errno != EEXIST) ||
        (mkdir(p.root, 0750) != 0 && errno != EEXIST) ||
        (mkdir(p.sockdir, 0750) != 0 && errno != EEXIST))
        return cli_err_set(err, "mkdir under %s: %s", p.root, strerror(errno));
    rep->stateless = true;
    rep->lsn = lsn;
    long long t0 = proc_now_ms();
    char fresh[PATH_MAX + 16], path[PATH_MAX + 32];
    snprintf(fresh, sizeof fresh, "%s.new", p.pgdata);
    if (proc_remove_tree(fresh, err) != 0 || set_pgdata_aside(&p, err) != 0)
        return -1;
    bbfetch_result bres;
    if (bbfetch_run_mode(c, lsn, mode, fresh, COMPUTE_BASEBACKUP_TIMEOUT_MS, &bres, err) != 0)
        return -1;
    if (rename(fresh, p.pgdata) != 0)
        return cli_err_set(err, "rename %s: %s", fresh, strerror(errno));
    long long t1 = proc_now_ms();
    rep->basebackup_ms = t1 - t0;
    rep->basebackup_bytes = bres.bytes;
    rep->basebackup_files = bres.files;
    snprintf(path, sizeof path, "%s/pg_hba.conf", p.pgdata);
    if (write_file(path, compute_hba, err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/postgresql.conf", p.pgdata);
    if (write_file(path,
                   "# Written by strata for a read-only compute started from a basebackup.\n"
                   "include 'strata.conf'\n",
                   err) != 0 ||
        compute_write_config(c, &p, COMPUTE_BB_READONLY, false, err) != 0)
        return -1;
    char standby_conf[COMPUTE_STANDBY_CONF_MAX];
    if (conf_fn(c, p.pgdata, standby_conf, sizeof standby_conf, conf_arg, err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/strata.conf", p.pgdata);
    if (append_file(path, standby_conf, err) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/standby.signal", p.pgdata);
    if (write_file(path, "", err) != 0 || proc_chown_tree(p.root, &user, err) != 0 ||
        compute_remove_stale_locks(c, &p, err) != 0)
        return -1;
    if (compute_spawn(postgres, &p, &user, err) != 0)
        return -1;
    rep->configure_ms = proc_now_ms() - t1;
    return 0;
}
