/*
 * cmd_cluster.c: the lifecycle commands, `strata up|down|start|stop`.
 *
 * Commands that change what runs take an exclusive lock on D/.lock so two of
 * them never interleave on one cluster.  Safekeepers start first (the
 * compute's walproposer and the pageserver's WAL receiver need them), then
 * the pageserver, then the compute; they stop in the reverse order (the
 * compute's fast shutdown waits until the safekeepers hold all of its WAL).
 *
 * The pageserver gets the timeline once, from the compute's data directory
 * while it is cleanly shut down and before the compute ever runs with the
 * walproposer (normally right after initdb at the first `up`): it imports
 * the pages at the LSN where that directory's WAL ends and streams the rest
 * from the safekeepers.  The LSN goes into cluster.json; afterwards the
 * pageserver reloads its timelines itself.  Without a built pageserver the
 * cluster runs without one.
 *
 * Not for: how a component is started (safekeepers.c, pageserver.c,
 * compute.c).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/durable.h"
#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "cli/local/cluster_remote.h"
#include "cli/compute/compute.h"
#include "cli/compute/compute_remote.h"
#include "cli/compute/computes.h"
#include "cli/compute/compute_settings.h"
#include "cli/local/pageserver.h"
#include "cli/local/proc.h"
#include "cli/local/safekeepers.h"
#include "cli/client/sk_config.h"
#include "base/log.h"

#define SAFEKEEPER_READY_TIMEOUT_MS 30000
#define PAGESERVER_READY_TIMEOUT_MS 60000

/* mkdir -p dir, mode 0755 so an unprivileged postgres can traverse it. */
static int make_dirs(const char *dir, cli_err *err)
{
    int rc = durable_mkdir_p(dir, 0755);
    if (rc != 0)
        return cli_err_set(err, "creating %s: %s", dir, strerror(-rc));
    return 0;
}

static bool anything_running(const cluster *c)
{
    if (compute_pid(c) != 0 || pageserver_pid(c) != 0)
        return true;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if (safekeepers_pid(c, &c->sk[i]) != 0)
            return true;
    return false;
}

/*
 * Applies --reset then --set to the compute spec (D/compute.settings),
 * checks the result as a start would use it and saves it durably, before
 * anything starts.  The compute must not run: its settings change only at
 * a start.  Nothing to do without --set/--reset.
 */
static int update_compute_settings(const cluster *c, const cli_opts *o, cli_err *err)
{
    if (o->nset == 0 && o->nreset == 0)
        return 0;
    if (compute_pid(c) != 0)
        return cli_err_set(err, "the compute runs; its settings change only when it starts "
                                "(strata stop compute, then start it with --set/--reset)");
    compute_settings *ss = malloc(sizeof *ss);
    if (ss == NULL)
        return cli_err_set(err, "out of memory");
    int rc = compute_settings_load(c, ss, err);
    for (int i = 0; rc == 0 && i < o->nreset; i++) {
        char name[COMPUTE_SETTING_NAME_MAX];
        rc = compute_setting_name_parse(o->reset[i], name, err);
        if (rc == 0)
            compute_settings_remove(ss, name);
    }
    for (int i = 0; rc == 0 && i < o->nset; i++) {
        compute_setting s;
        rc = compute_setting_parse(o->set[i], "--set", &s, err);
        if (rc == 0)
            rc = compute_settings_put(ss, &s, err);
    }
    char preload[4096];
    if (rc == 0)
        rc = compute_settings_check(ss, preload, sizeof preload, err);
    if (rc == 0)
        rc = compute_settings_save(c, ss, err);
    if (rc == 0) {
        printf("compute: %d setting%s in the compute spec%s\n", ss->n, ss->n == 1 ? "" : "s",
               ss->n > 0 ? ":" : "");
        for (int i = 0; i < ss->n; i++)
            printf("  %s=%s\n", ss->s[i].name, ss->s[i].value);
    }
    free(ss);
    return rc;
}

/* `start skN`: running, it is brought to the newest configuration its
 * peers hold (sk_config.h), which also mends one that missed a switch. */
static int start_safekeeper(const cluster *c, const cluster_safekeeper *sk, cli_err *err)
{
    pid_t pid = safekeepers_pid(c, sk);
    if (pid != 0) {
        printf("%s: already running (pid %d)\n", sk->name, (int)pid);
        return sk_config_catch_up(c, (int)(sk - c->sk), err);
    }
    printf("%s: starting on 127.0.0.1:%d (http %d)\n", sk->name, sk->pg_port, sk->http_port);
    fflush(stdout);
    long long t0 = proc_now_ms();
    if (safekeepers_start(c, sk, err) != 0 ||
        safekeepers_wait_ready(c, sk, SAFEKEEPER_READY_TIMEOUT_MS, err) != 0)
        return -1;
    printf("%s: ready in %.1f s (pid %d)\n", sk->name, (double)(proc_now_ms() - t0) / 1000.0,
           (int)safekeepers_pid(c, sk));
    return sk_config_catch_up(c, (int)(sk - c->sk), err);
}

static int start_pageserver(const cluster *c, cli_err *err)
{
    pid_t pid = pageserver_pid(c);
    if (pid != 0) {
        printf("pageserver: already running (pid %d)\n", (int)pid);
        return 0;
    }
    printf("pageserver: starting on 127.0.0.1:%d (http %d)\n", c->pageserver_pg_port,
           c->pageserver_http_port);
    fflush(stdout);
    long long t0 = proc_now_ms();
    if (pageserver_start(c, err) != 0 ||
        pageserver_wait_ready(c, PAGESERVER_READY_TIMEOUT_MS, err) != 0)
        return -1;
    printf("pageserver: ready in %.1f s (pid %d)\n", (double)(proc_now_ms() - t0) / 1000.0,
           (int)pageserver_pid(c));
    return 0;
}

/*
 * Gives the running pageserver the timeline unless it has it: creates the
 * compute's data directory if needed (initdb), then, while the compute is
 * stopped and its data directory cleanly shut down, has the pageserver
 * import it and records the LSN.  When that cannot be done now (the compute
 * runs, or it crashed), says so and goes on: the cluster works without the
 * pageserver in this stage.  -1 only on a real failure.
 */
static int attach_pageserver(cluster *c, cli_err *err)
{
    if (c->pageserver_imported || pageserver_pid(c) == 0)
        return 0;
    if (compute_pid(c) != 0) {
        printf("pageserver: does not hold the timeline yet and the compute runs; stop the "
               "compute (strata stop compute) and run `strata up` to import it\n");
        return 0;
    }
    char pgdata[PATH_MAX];
    if (compute_datadir(c, pgdata, err) != 0)
        return -1;
    char version[PATH_MAX + 16];
    snprintf(version, sizeof version, "%s/PG_VERSION", pgdata);
    if (access(version, F_OK) != 0) {
        /* A new cluster: the timeline comes from a template made by the
         * patched initdb; every compute then starts from a basebackup. */
        char template[PATH_MAX];
        printf("pageserver: creating the timeline from a new initdb\n");
        fflush(stdout);
        long long t0 = proc_now_ms();
        lsn_t lsn;
        if (compute_make_template(c, template, err) != 0 ||
            pageserver_create_timeline(c, template, &lsn, err) != 0)
            return -1;
        c->pageserver_imported = true;
        c->pageserver_import_lsn = lsn;
        if (cluster_save(c, err) != 0 || compute_remove_template(c, err) != 0)
            return -1;
        char buf[LSN_FMT_LEN];
        printf("pageserver: imported at %s in %.1f s; streaming WAL from the safekeepers\n",
               lsn_format(lsn, buf), (double)(proc_now_ms() - t0) / 1000.0);
        return 0;
    }
    /* A cluster whose compute ran before the pageserver existed: import its
     * own data directory (it must be cleanly shut down). */
    bool created, clean;
    if (compute_init_datadir(c, &created, err) != 0 ||
        compute_cleanly_shut_down(c, &clean, err) != 0)
        return -1;
    if (!clean) {
        printf("pageserver: does not hold the timeline yet and the compute's data directory "
               "was not shut down cleanly; start and stop the compute, then run `strata up`\n");
        return 0;
    }
    printf("pageserver: importing %s\n", pgdata);
    fflush(stdout);
    long long t0 = proc_now_ms();
    lsn_t lsn;
    if (pageserver_create_timeline(c, pgdata, &lsn, err) != 0)
        return -1;
    c->pageserver_imported = true;
    c->pageserver_import_lsn = lsn;
    if (cluster_save(c, err) != 0)
        return -1;
    char buf[LSN_FMT_LEN];
    printf("pageserver: imported at %s in %.1f s; streaming WAL from the safekeepers\n",
           lsn_format(lsn, buf), (double)(proc_now_ms() - t0) / 1000.0);
    return 0;
}

static void print_auth(const cluster *c)
{
    if (c->auth)
        printf("auth: on for every daemon port and the admin API (tokens in %s/%s, mode 0600)\n",
               c->dir, CLUSTER_AUTH_FILE);
    else
        printf("auth: OFF (--no-auth): every daemon port and the admin API trust everyone; "
               "for benchmarks on a trusted machine only\n");
}

/*
 * The remote store of `up` (cluster_remote.h): a new cluster, or one from
 * before remote storage, takes --remote or the default D/remote; an existing
 * one keeps its own, and a different --remote is refused (its objects are in
 * the old store).  Then the store is checked and created (bucket or
 * directory) before anything starts.
 */
static int up_remote(const cli_opts *o, cluster *c, cli_err *err)
{
    bool choosing = c->remote[0] == '\0';
    if (choosing) {
        if (o->remote_url != NULL) {
            if (strlen(o->remote_url) >= sizeof c->remote)
                return cli_err_set(err, "--remote URL too long");
            snprintf(c->remote, sizeof c->remote, "%s", o->remote_url);
        } else if (cluster_remote_default(c, c->remote, sizeof c->remote, err) != 0) {
            return -1;
        }
        if (cluster_save(c, err) != 0)
            return -1;
    } else if (o->remote_url != NULL && strcmp(o->remote_url, c->remote) != 0) {
        return cli_err_set(err,
                           "the cluster under %s keeps its data in the remote store %s; "
                           "--remote %s would leave it behind (a cluster's remote is chosen "
                           "when it is made: use a new --dir)",
                           c->dir, c->remote, o->remote_url);
    }
    if (cluster_remote_prepare(c->remote, choosing, err) != 0)
        return -1;
    printf("remote: %s\n", c->remote);
    return 0;
}

/* Creates or loads the cluster of `up`, applying --port-base and
 * --auth/--no-auth. */
static int up_prepare(const cli_opts *o, const char *dir, cluster *c, cli_err *err)
{
    int rc = cluster_load(dir, c, err);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        if (cluster_init(dir, o->port_base, c, err) != 0 ||
            (o->auth >= 0 && cluster_auth_enable(c, err) != 0) || cluster_save(c, err) != 0)
            return -1;
        char tl[STRATA_ID_HEX_LEN];
        printf("created cluster under %s (timeline %s)\n", dir,
               strata_id_format(&c->timeline_id, tl));
        print_auth(c);
        return 0;
    }
    if (o->auth != 0 && (o->auth > 0) != c->auth) {
        if (anything_running(c))
            return cli_err_set(err,
                               "the cluster under %s runs with auth %s; run `strata down` "
                               "before turning it %s",
                               dir, c->auth ? "on" : "off", c->auth ? "off" : "on");
        if (o->auth > 0 && cluster_auth_enable(c, err) != 0)
            return -1;
        c->auth = o->auth > 0;
        if (cluster_save(c, err) != 0)
            return -1;
        print_auth(c);
    }
    if (o->port_base > 0 && o->port_base != c->compute_port) {
        if (anything_running(c))
            return cli_err_set(err,
                               "the cluster under %s runs with port base %d; "
                               "run `strata down` before changing it",
                               dir, c->compute_port);
        /* The pageserver stored the safekeepers' addresses with the timeline
         * and has no way yet to change them: it would stream from nowhere. */
        if (c->pageserver_imported)
            return cli_err_set(err,
                               "the pageserver's timeline names the safekeepers at port base "
                               "%d; moving a cluster whose pageserver holds it is not supported",
                               c->compute_port);
        cluster_assign_ports(c, o->port_base);
        if (cluster_save(c, err) != 0)
            return -1;
    }
    return 0;
}

/* `up`: launches every safekeeper (and the pageserver) that is not running,
 * then waits for each to be ready, so their start-ups overlap. */
static int start_daemons(const cluster *c, bool with_pageserver, cli_err *err)
{
    bool started[CLUSTER_SAFEKEEPERS + 1] = {false}; /* the last one: the pageserver */
    long long t0 = proc_now_ms();
    for (int i = 0; i <= CLUSTER_SAFEKEEPERS; i++) {
        bool ps = i == CLUSTER_SAFEKEEPERS;
        if (ps && !with_pageserver)
            break;
        const char *name = ps ? "pageserver" : c->sk[i].name;
        pid_t pid = ps ? pageserver_pid(c) : safekeepers_pid(c, &c->sk[i]);
        if (pid != 0) {
            printf("%s: already running (pid %d)\n", name, (int)pid);
            continue;
        }
        printf("%s: starting on 127.0.0.1:%d (http %d)\n", name,
               ps ? c->pageserver_pg_port : c->sk[i].pg_port,
               ps ? c->pageserver_http_port : c->sk[i].http_port);
        fflush(stdout);
        if ((ps ? pageserver_start(c, err) : safekeepers_start(c, &c->sk[i], err)) != 0)
            return -1;
        started[i] = true;
    }
    for (int i = 0; i <= CLUSTER_SAFEKEEPERS; i++) {
        if (!started[i])
            continue;
        bool ps = i == CLUSTER_SAFEKEEPERS;
        if ((ps ? pageserver_wait_ready(c, PAGESERVER_READY_TIMEOUT_MS, err)
                : safekeepers_wait_ready(c, &c->sk[i], SAFEKEEPER_READY_TIMEOUT_MS, err)) != 0)
            return -1;
        printf("%s: ready in %.1f s (pid %d)\n", ps ? "pageserver" : c->sk[i].name,
               (double)(proc_now_ms() - t0) / 1000.0,
               (int)(ps ? pageserver_pid(c) : safekeepers_pid(c, &c->sk[i])));
    }
    return 0;
}

int cmd_up(const cli_opts *o)
{
    cli_err err = {{0}};
    char dir[PATH_MAX];
    cluster c;
    if (cluster_resolve_dir(o->dir, dir, &err) != 0 || make_dirs(dir, &err) != 0)
        return cli_fail(&err);
    int lock = cluster_lock(dir, &err);
    if (lock < 0)
        return cli_fail(&err);
    int rc = CLI_OK;
    if (up_prepare(o, dir, &c, &err) != 0 || cluster_auth_export(&c, &err) != 0 ||
        update_compute_settings(&c, o, &err) != 0 || up_remote(o, &c, &err) != 0)
        goto fail;
    /* Find what is missing before starting anything. */
    bool with_pageserver = pageserver_built();
    if (safekeepers_preflight(&err) != 0 || compute_preflight(&c, &err) != 0 ||
        (with_pageserver && pageserver_preflight(&err) != 0))
        goto fail;
    if (start_daemons(&c, with_pageserver, &err) != 0)
        goto fail;
    /* One that missed a switch while the cluster was down: a warning, the
     * others are a majority and the compute starts anyway. */
    {
        cli_err behind = {{0}};
        if (sk_config_catch_up(&c, -1, &behind) != 0)
            log_warn("%s", behind.msg);
    }
    if (!with_pageserver)
        printf("pageserver: not built (no %s beside strata); the cluster runs without it\n",
               PAGESERVER_PROGRAM);
    else if (attach_pageserver(&c, &err) != 0)
        goto fail;
    if (computes_start(&c, &err) != 0)
        goto fail;
    char connstr[512];
    cluster_compute_connstr(&c, connstr, sizeof connstr);
    printf("cluster up under %s\ncompute: %s\n", dir, connstr);
    goto out;
fail:
    rc = cli_fail(&err);
out:
    close(lock);
    return rc;
}

int cmd_down(const cli_opts *o)
{
    cli_err err = {{0}};
    cluster c;
    int rc = cluster_load_dir(o->dir, &c, &err);
    if (rc < 0)
        return cli_fail(&err);
    if (rc == 1) {
        printf("no cluster under %s: nothing to stop\n", c.dir);
        return CLI_OK;
    }
    int lock = cluster_lock(c.dir, &err);
    if (lock < 0)
        return cli_fail(&err);
    /* Keep going after a failure: stop as much as possible, report the first. */
    bool failed = false;
    failed |= computes_stop_all_named(&c, &err) != 0;
    pid_t pid = compute_pid(&c);
    if (pid != 0) {
        printf("compute: stopping (pid %d)\n", (int)pid);
        fflush(stdout);
        failed |= compute_stop(&c, false, &err) != 0;
    }
    pid = pageserver_pid(&c);
    if (pid != 0) {
        printf("pageserver: stopping (pid %d)\n", (int)pid);
        fflush(stdout);
        failed |= pageserver_stop(&c, false, &err) != 0;
    }
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++) {
        pid = safekeepers_pid(&c, &c.sk[i]);
        if (pid == 0)
            continue;
        printf("%s: stopping (pid %d)\n", c.sk[i].name, (int)pid);
        fflush(stdout);
        failed |= safekeepers_stop(&c, &c.sk[i], false, &err) != 0;
    }
    close(lock);
    if (failed)
        return cli_fail(&err);
    printf("cluster under %s is down\n", c.dir);
    return CLI_OK;
}

int cmd_stop(const cli_opts *o)
{
    cli_err err = {{0}};
    cluster c;
    if (cluster_load_existing(o->dir, &c, &err) != 0)
        return cli_fail(&err);
    int lock = cluster_lock(c.dir, &err);
    if (lock < 0)
        return cli_fail(&err);
    int rc = 0;
    if (strcmp(o->name, "compute") == 0 && o->compute_name != NULL) {
        rc = computes_stop_named(o, &c, &err);
        close(lock);
        return rc != 0 ? cli_fail(&err) : CLI_OK;
    } else if (strcmp(o->name, "compute") == 0) {
        rc = compute_stop(&c, o->immediate, &err);
    } else if (strcmp(o->name, "pageserver") == 0) {
        rc = pageserver_stop(&c, o->immediate, &err);
    } else {
        const cluster_safekeeper *sk = cluster_find_safekeeper(&c, o->name);
        rc = sk ? safekeepers_stop(&c, sk, o->immediate, &err)
                : cli_err_set(&err, "unknown component %s", o->name);
    }
    close(lock);
    if (rc != 0)
        return cli_fail(&err);
    printf("%s: stopped%s\n", o->name, o->immediate ? " (SIGKILL)" : "");
    return CLI_OK;
}

/* A daemon started alone must reach the cluster's remote store too (an s3://
 * one needs its settings in this environment). */
static int start_remote_check(const cluster *c, cli_err *err)
{
    return c->remote[0] == '\0' ? 0 : cluster_remote_prepare(c->remote, false, err);
}

int cmd_start(const cli_opts *o)
{
    if (o->remote)
        return cmd_start_compute_remote(o);
    cli_err err = {{0}};
    cluster c;
    if (cluster_load_existing(o->dir, &c, &err) != 0)
        return cli_fail(&err);
    int lock = cluster_lock(c.dir, &err);
    if (lock < 0)
        return cli_fail(&err);
    int rc;
    if (strcmp(o->name, "compute") == 0 && o->compute_name != NULL) {
        rc = attach_pageserver(&c, &err) != 0 ? -1 : computes_start_named(o, &c, &err);
    } else if (strcmp(o->name, "compute") == 0) {
        rc = update_compute_settings(&c, o, &err) != 0 || attach_pageserver(&c, &err) != 0
                 ? -1
                 : computes_start(&c, &err);
    } else if (strcmp(o->name, "pageserver") == 0) {
        rc = pageserver_preflight(&err) != 0 || start_remote_check(&c, &err) != 0
                 ? -1
                 : start_pageserver(&c, &err);
    } else {
        const cluster_safekeeper *sk = cluster_find_safekeeper(&c, o->name);
        rc = sk == NULL ? cli_err_set(&err, "unknown component %s", o->name)
             : start_remote_check(&c, &err) != 0 ? -1
                                                 : start_safekeeper(&c, sk, &err);
    }
    close(lock);
    return rc != 0 ? cli_fail(&err) : CLI_OK;
}
