/*
 * cmd_tools.c: commands that run another program against the cluster:
 * `strata psql`, `strata sync-safekeepers`, `strata bench` (`strata demo` is
 * demo.c).
 *
 * psql, sync-safekeepers and bench replace the strata process (exec), so
 * their exit status and terminal handling are the program's own.
 *
 * Not for: starting or stopping components (cmd_cluster.c).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"
#include "cli/compute/compute.h"
#include "cli/local/locate.h"
#include "cli/local/pageserver.h"
#include "cli/local/proc.h"
#include "cli/local/safekeepers.h"

/* Most arguments passed through to a program. */
#define TOOLS_MAX_ARGS 256

static int load_cluster(const cli_opts *o, cluster *c, cli_err *err)
{
    char dir[PATH_MAX];
    if (cluster_resolve_dir(o->dir, dir, err) != 0)
        return -1;
    int rc = cluster_load(dir, c, err);
    if (rc == 1)
        return cli_err_set(err, "no cluster under %s (run `strata up` first)", dir);
    return rc;
}

/* libpq's PGPASSWORD for a program talking to the cluster's daemons (a
 * flag would show in ps); nothing when auth is off. */
static int export_pgpassword(const cluster *c, cli_err *err)
{
    if (c->auth && setenv("PGPASSWORD", c->tenant_token, 1) != 0)
        return cli_err_set(err, "setenv: %s", strerror(errno));
    return 0;
}

/* Execs program with fixed arguments then o's extra ones; returns only on
 * failure. */
static int exec_with(char *program, char *const fixed[], int nfixed, const cli_opts *o,
                     cli_err *err)
{
    char *argv[TOOLS_MAX_ARGS + 2];
    int n = 0;
    if (nfixed + o->argc + 1 > TOOLS_MAX_ARGS)
        return cli_err_set(err, "too many arguments");
    argv[n++] = program;
    for (int i = 0; i < nfixed; i++)
        argv[n++] = fixed[i];
    for (int i = 0; i < o->argc; i++)
        argv[n++] = o->argv[i];
    argv[n] = NULL;
    fflush(stdout);
    execv(program, argv);
    return cli_err_set(err, "exec %s: %s", program, strerror(errno));
}

int cmd_psql(const cli_opts *o)
{
    cli_err err = {{0}};
    cluster c;
    char psql[PATH_MAX], connstr[512];
    if (load_cluster(o, &c, &err) != 0 || locate_pg_program("psql", psql, &err) != 0)
        return cli_fail(&err);
    if (compute_pid(&c) == 0) {
        cli_err_set(&err, "the compute under %s is not running (strata start compute)", c.dir);
        return cli_fail(&err);
    }
    cluster_compute_connstr(&c, connstr, sizeof connstr);
    char *fixed[] = {connstr};
    exec_with(psql, fixed, 1, o, &err);
    return cli_fail(&err);
}

int cmd_sync_safekeepers(const cli_opts *o)
{
    cli_err err = {{0}};
    cluster c;
    char program[PATH_MAX], sks[256], tenant[STRATA_ID_HEX_LEN], timeline[STRATA_ID_HEX_LEN];
    if (load_cluster(o, &c, &err) != 0 ||
        locate_sibling("strata-sync-safekeepers", program, &err) != 0)
        return cli_fail(&err);
    /* It is a second proposer: its election fences a running compute. */
    if (compute_pid(&c) != 0) {
        cli_err_set(&err, "the compute is running and sync-safekeepers would fence it "
                          "(strata stop compute first)");
        return cli_fail(&err);
    }
    if (export_pgpassword(&c, &err) != 0)
        return cli_fail(&err);
    safekeepers_list(&c, sks, sizeof sks);
    char *fixed[] = {"--safekeepers", sks,
                     "--tenant",      strata_id_format(&c.tenant_id, tenant),
                     "--timeline",    strata_id_format(&c.timeline_id, timeline)};
    exec_with(program, fixed, 6, o, &err);
    return cli_fail(&err);
}

int cmd_bench(const cli_opts *o)
{
    cli_err err = {{0}};
    char bindir[PATH_MAX], program[PATH_MAX * 2], resolved[PATH_MAX], dir[PATH_MAX];
    if (strchr(o->name, '/') != NULL || o->name[0] == '.') {
        cli_err_set(&err, "bad benchmark name %s", o->name);
        return cli_fail(&err);
    }
    if (locate_bindir(bindir, &err) != 0 || cluster_resolve_dir(o->dir, dir, &err) != 0)
        return cli_fail(&err);
    const char *bench_dir = getenv("STRATA_BENCH_DIR");
    if (bench_dir != NULL && bench_dir[0] != '\0')
        snprintf(program, sizeof program, "%s/%s", bench_dir, o->name);
    else
        snprintf(program, sizeof program, "%s/../../bench/%s", bindir, o->name);
    if (realpath(program, resolved) == NULL || access(resolved, X_OK) != 0) {
        cli_err_set(&err, "no benchmark %s (looked for the executable %s; set STRATA_BENCH_DIR)",
                    o->name, program);
        return cli_fail(&err);
    }
    if (setenv("STRATA_BINDIR", bindir, 1) != 0) {
        cli_err_set(&err, "setenv: %s", strerror(errno));
        return cli_fail(&err);
    }
    /* Benchmarks build their own clusters; an existing one is offered too. */
    cluster c;
    int rc = cluster_load(dir, &c, &err);
    if (rc < 0)
        return cli_fail(&err);
    if (rc == 0) {
        char connstr[512];
        cluster_compute_connstr(&c, connstr, sizeof connstr);
        if (setenv("STRATA_DIR", c.dir, 1) != 0 || setenv("STRATA_CONNSTR", connstr, 1) != 0) {
            cli_err_set(&err, "setenv: %s", strerror(errno));
            return cli_fail(&err);
        }
    }
    exec_with(resolved, NULL, 0, o, &err);
    return cli_fail(&err);
}
