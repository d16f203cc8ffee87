/*
 * cli.h: what the `strata` command's modules share: the error buffer every
 * fallible function fills with a one-line reason, and the command entry
 * points that cli/cmd/main.c dispatches to.
 *
 * Not for: option parsing (main.c) or any one concern's details (cluster.h,
 * proc.h, locate.h, probe.h, compute.h, safekeepers.h).
 *
 * Exit codes of every command: CLI_OK, CLI_FAIL (a one-line reason on
 * stderr), CLI_USAGE (bad command line).
 */
#ifndef STRATA_CLI_CLI_H
#define STRATA_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/lsn.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* The one-line reason of a failure; the first error set wins. */
typedef struct cli_err {
    char msg[1024];
} cli_err;

/* Records a reason unless one is already set; always returns -1 so callers
 * can write `return cli_err_set(err, ...)`. */
int cli_err_set(cli_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What `strata page get` asks for; main.c parses and range-checks it. */
typedef struct cli_page_args {
    uint32_t spc, db, rel; /* --rel SPC/DB/REL */
    uint8_t fork;          /* --fork: 0 main, 1 fsm, 2 vm, 3 init */
    uint32_t blkno;        /* --blk */
    bool has_lsn;          /* --lsn given; else the latest version */
    lsn_t lsn;
} cli_page_args;

/* --set / --reset arguments one command line may carry. */
#define CLI_MAX_SETTINGS 64

/* Options common to the commands; main.c fills them. */
typedef struct cli_opts {
    const char *dir;        /* cluster directory; default ./.strata */
    int port_base;          /* 0: pick free ports at first `up` */
    bool json;              /* status --json */
    bool immediate;         /* stop --immediate */
    bool remote;            /* start compute --remote (compute_remote.h) */
    const char *remote_url; /* up --remote URL: the cluster's remote store */
    int auth;               /* up: 1 --auth, -1 --no-auth, 0 as the cluster was made */
    const char *name;       /* stop/start/bench NAME */
    int argc;               /* extra arguments (psql after --, bench args) */
    char **argv;
    cli_page_args page; /* page get */
    /* start/stop compute NAME (a named compute, compute/computes.c): NULL for
     * the default compute.  start: --timeline T (default main), --port P (0:
     * as before, else a free one), --read-only and --lsn X/Y. */
    const char *compute_name;
    const char *timeline;
    int compute_port;
    bool read_only;
    bool has_lsn;
    lsn_t lsn;
    const char *set[CLI_MAX_SETTINGS]; /* start compute / up: --set name=value */
    int nset;
    const char *reset[CLI_MAX_SETTINGS]; /* start compute / up: --reset name */
    int nreset;
} cli_opts;

/* Each returns CLI_OK or CLI_FAIL, printing the reason of a failure. */
int cmd_up(const cli_opts *o);
int cmd_down(const cli_opts *o);
int cmd_start(const cli_opts *o);
int cmd_stop(const cli_opts *o);
int cmd_status(const cli_opts *o);
int cmd_psql(const cli_opts *o);
int cmd_sync_safekeepers(const cli_opts *o);
int cmd_bench(const cli_opts *o);
int cmd_demo(const cli_opts *o);
int cmd_safekeeper(const cli_opts *o);
/* `strata safekeeper seed` and `join` (sub), for stacks without
 * cluster.json: cmd_sk_join.c. */
int cmd_safekeeper_stack(const char *sub);
/* `strata safekeeper recover --from NAME [--confirm]` on the cluster under
 * dir (cmd_sk_recover.c). */
int cmd_safekeeper_recover(const char *dir, const char *from, bool confirm);
int cmd_page(const cli_opts *o);
int cmd_remote(const cli_opts *o);  /* cmd_remote.c: the object store */
int cmd_restore(const cli_opts *o); /* cmd_timeline.c: branch + compute */
/* `strata tenant|timeline` (cmd_admin.c): main.c passes every argument after
 * the command word in o->argc/o->argv; they parse their own options.  CLI_OK,
 * CLI_FAIL with the server's error message, or CLI_USAGE. */
int cmd_tenant(const cli_opts *o);
int cmd_timeline(const cli_opts *o);

/* Prints "strata: <reason>" on stderr and returns CLI_FAIL. */
int cli_fail(const cli_err *err);

#endif
