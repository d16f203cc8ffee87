/*
 * main.c: the `strata` command line.  Parses arguments and dispatches to
 * the cmd_* functions; nothing else happens here.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "base/log.h"

/* Options a command accepts. */
enum {
    OPT_DIR = 1 << 0,
    OPT_PORT_BASE = 1 << 1,
    OPT_JSON = 1 << 2,
    OPT_IMMEDIATE = 1 << 3,
    OPT_NAME = 1 << 4,           /* one positional NAME */
    OPT_PASS = 1 << 5,           /* arguments after -- are passed on */
    OPT_PASS_ALL = 1 << 6,       /* every argument after NAME is passed on */
    OPT_PAGE = 1 << 7,           /* "get" and --rel, --fork, --blk, --lsn */
    OPT_RAW = 1 << 8,            /* the command parses every argument itself */
    OPT_SETTINGS = 1 << 9,       /* --set name=value, --reset name (compute settings) */
    OPT_REMOTE = 1 << 10,        /* --remote (start compute against remote daemons) */
    OPT_AUTH = 1 << 11,          /* --auth / --no-auth (up) */
    OPT_REMOTE_URL = 1 << 12,    /* --remote URL (up: the cluster's remote store) */
    OPT_COMPUTE = 1 << 13,       /* compute NAME (a named compute, after "compute") */
    OPT_COMPUTE_START = 1 << 14, /* --timeline T, --port P, --read-only, --lsn X/Y */
};

typedef struct command {
    const char *name;
    int (*run)(const cli_opts *);
    int opts;
    const char *usage;
} command;

static const command commands[] = {
    {"up", cmd_up, OPT_DIR | OPT_PORT_BASE | OPT_SETTINGS | OPT_AUTH | OPT_REMOTE_URL,
     "up [--dir D] [--port-base N] [--no-auth | --auth] [--remote s3://BUCKET/PREFIX | "
     "file:///PATH] [--set NAME=VALUE]... [--reset NAME]..."},
    {"down", cmd_down, OPT_DIR, "down [--dir D]"},
    {"status", cmd_status, OPT_DIR | OPT_JSON, "status [--dir D] [--json]"},
    {"stop", cmd_stop, OPT_DIR | OPT_IMMEDIATE | OPT_NAME | OPT_COMPUTE,
     "stop NAME [--immediate] [--dir D] | stop compute CNAME [--immediate] [--dir D]"},
    {"start", cmd_start,
     OPT_DIR | OPT_NAME | OPT_SETTINGS | OPT_REMOTE | OPT_PASS | OPT_COMPUTE | OPT_COMPUTE_START,
     "start NAME [--dir D] [--set NAME=VALUE]... [--reset NAME]... (settings: compute only) | "
     "start compute CNAME [--timeline T] [--port P] [--read-only [--lsn X/Y]] [--dir D] | "
     "start compute --remote [--dir D] [-- POSTGRES ARGS]"},
    {"restore", cmd_restore, OPT_RAW,
     "restore --time 'TIMESTAMP' | --lsn X/Y [--from TIMELINE] [--name NAME] [--port P] "
     "[--dir D]"},
    {"psql", cmd_psql, OPT_DIR | OPT_PASS, "psql [--dir D] [-- ARGS]"},
    {"sync-safekeepers", cmd_sync_safekeepers, OPT_DIR | OPT_PASS,
     "sync-safekeepers [--dir D] [-- ARGS]"},
    {"bench", cmd_bench, OPT_DIR | OPT_NAME | OPT_PASS_ALL, "bench NAME [--dir D] [ARGS...]"},
    {"demo", cmd_demo, OPT_DIR | OPT_PORT_BASE | OPT_AUTH,
     "demo [--dir D] [--port-base N] [--no-auth | --auth]"},
    {"page", cmd_page, OPT_DIR | OPT_PAGE,
     "page get [--dir D] --rel SPC/DB/REL [--fork main|fsm|vm|init] --blk N [--lsn X/Y]"},
    {"safekeeper", cmd_safekeeper, OPT_RAW,
     "safekeeper replace NAME | recover --from NAME [--confirm] [--dir D]"},
    {"tenant", cmd_tenant, OPT_RAW,
     "tenant create [--id T] | list | show T | delete T  [--dir D] [--pageserver H:P] "
     "[--auth-file F] [--json]"},
    {"timeline", cmd_timeline, OPT_RAW,
     "timeline branch NAME [--from PARENT] [--lsn X/Y | --time 'TIMESTAMP'] | list [--json] | "
     "delete NAME [--dir D] | create [--id TL] [--initdb|--import PGDATA] "
     "[--safekeepers H:P,..] | list | show TL | delete TL  [--tenant T] [--dir D] "
     "[--pageserver H:P] [--auth-file F] [--json]"},
    {"remote", cmd_remote, OPT_RAW,
     "remote init|ls|put|get|head|rm URL [KEY] [FILE] [--endpoint URL] [--region R] ... "
     "(strata remote --help)"},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static const char *const component_names[] = {"sk1", "sk2", "sk3", "pageserver", "compute"};

static void usage(FILE *out)
{
    fprintf(out, "usage: strata COMMAND [OPTIONS]\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  strata %s\n", commands[i].usage);
    fprintf(out, "\nNAME of start/stop: sk1 sk2 sk3 pageserver compute\n"
                 "CNAME: a further compute, on a timeline of its own (strata timeline branch)\n"
                 "D defaults to ./.strata\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "strata: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(strata --help lists the commands)\n");
    return CLI_USAGE;
}

static bool valid_component(const char *name)
{
    for (size_t i = 0; i < sizeof component_names / sizeof component_names[0]; i++)
        if (strcmp(name, component_names[i]) == 0)
            return true;
    return false;
}

static bool parse_port_base(const char *s, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 1024 || v > 65535 - 16)
        return false;
    *out = (int)v;
    return true;
}

static bool parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

/* "SPC/DB/REL", three decimal OIDs. */
static bool parse_rel(const char *s, cli_page_args *p)
{
    char buf[64];
    if (strlen(s) >= sizeof buf)
        return false;
    strcpy(buf, s);
    char *db = strchr(buf, '/');
    char *rel = db ? strchr(db + 1, '/') : NULL;
    if (rel == NULL)
        return false;
    *db++ = '\0';
    *rel++ = '\0';
    return parse_u32(buf, &p->spc) && parse_u32(db, &p->db) && parse_u32(rel, &p->rel);
}

static bool parse_fork(const char *s, uint8_t *out)
{
    static const char *const forks[] = {"main", "fsm", "vm", "init"};
    for (uint8_t i = 0; i < 4; i++)
        if (strcmp(s, forks[i]) == 0) {
            *out = i;
            return true;
        }
    return false;
}

/* Returns the value of "--opt V" or "--opt=V" at argv[*i], advancing *i. */
static const char *option_value(int argc, char **argv, int *i, const char *opt)
{
    size_t len = strlen(opt);
    if (strncmp(argv[*i], opt, len) == 0 && argv[*i][len] == '=')
        return argv[*i] + len + 1;
    if (strcmp(argv[*i], opt) == 0 && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

static bool is_option(const char *arg, const char *opt)
{
    size_t len = strlen(opt);
    return strncmp(arg, opt, len) == 0 && (arg[len] == '\0' || arg[len] == '=');
}

/* What an option parser below did with argv[*i]: not one of its options,
 * or taken; any other value is the exit code of a usage error. */
enum { ARG_NOT_OURS = -1, ARG_TAKEN = -2 };

/* The options of the cluster commands: --dir, --port-base, --set, --reset,
 * --auth/--no-auth, --remote, --json, --immediate. */
static int parse_common_option(const command *cmd, int argc, char **argv, int *i, cli_opts *o)
{
    const char *arg = argv[*i];
    const char *value;
    if ((cmd->opts & OPT_DIR) && is_option(arg, "--dir")) {
        if ((value = option_value(argc, argv, i, "--dir")) == NULL || value[0] == '\0')
            return usage_error("%s needs a directory", "--dir");
        o->dir = value;
    } else if ((cmd->opts & OPT_PORT_BASE) && is_option(arg, "--port-base")) {
        value = option_value(argc, argv, i, "--port-base");
        if (value == NULL || !parse_port_base(value, &o->port_base))
            return usage_error("--port-base needs a port number in 1024..65519, got '%s'",
                               value ? value : "");
    } else if ((cmd->opts & OPT_SETTINGS) && is_option(arg, "--set")) {
        if ((value = option_value(argc, argv, i, "--set")) == NULL || strchr(value, '=') == NULL)
            return usage_error("--set needs NAME=VALUE, got '%s'", value ? value : "");
        if (o->nset >= CLI_MAX_SETTINGS)
            return usage_error("more than %s --set options", "64");
        o->set[o->nset++] = value;
    } else if ((cmd->opts & OPT_SETTINGS) && is_option(arg, "--reset")) {
        if ((value = option_value(argc, argv, i, "--reset")) == NULL || value[0] == '\0')
            return usage_error("--reset needs a setting NAME%s", "");
        if (o->nreset >= CLI_MAX_SETTINGS)
            return usage_error("more than %s --reset options", "64");
        o->reset[o->nreset++] = value;
    } else if ((cmd->opts & OPT_AUTH) &&
               (strcmp(arg, "--no-auth") == 0 || strcmp(arg, "--auth") == 0)) {
        int want = strcmp(arg, "--auth") == 0 ? 1 : -1;
        if (o->auth != 0 && o->auth != want)
            return usage_error("%s", "--auth and --no-auth contradict each other");
        o->auth = want;
    } else if ((cmd->opts & OPT_REMOTE_URL) && is_option(arg, "--remote")) {
        value = option_value(argc, argv, i, "--remote");
        if (value == NULL ||
            (strncmp(value, "s3://", 5) != 0 && strncmp(value, "file:///", 8) != 0))
            return usage_error("--remote needs s3://BUCKET/PREFIX or file:///PATH, got '%s'",
                               value ? value : "");
        o->remote_url = value;
    } else if ((cmd->opts & OPT_REMOTE) && strcmp(arg, "--remote") == 0) {
        o->remote = true;
    } else if ((cmd->opts & OPT_JSON) && strcmp(arg, "--json") == 0) {
        o->json = true;
    } else if ((cmd->opts & OPT_IMMEDIATE) && strcmp(arg, "--immediate") == 0) {
        o->immediate = true;
    } else {
        return ARG_NOT_OURS;
    }
    return ARG_TAKEN;
}

/* `page get --rel SPC/DB/REL [--fork F] --blk N [--lsn X/Y]`; *have_rel and
 * *have_blk record the two it needs. */
static int parse_page_option(const command *cmd, int argc, char **argv, int *i, cli_opts *o,
                             bool *have_rel, bool *have_blk)
{
    const char *arg = argv[*i];
    const char *value;
    if ((cmd->opts & OPT_PAGE) && o->name == NULL && strcmp(arg, "get") == 0) {
        o->name = arg;
    } else if ((cmd->opts & OPT_PAGE) && is_option(arg, "--rel")) {
        value = option_value(argc, argv, i, "--rel");
        if (value == NULL || !parse_rel(value, &o->page))
            return usage_error("--rel needs SPC/DB/REL (three decimal OIDs), got '%s'",
                               value ? value : "");
        *have_rel = true;
    } else if ((cmd->opts & OPT_PAGE) && is_option(arg, "--fork")) {
        value = option_value(argc, argv, i, "--fork");
        if (value == NULL || !parse_fork(value, &o->page.fork))
            return usage_error("--fork needs main, fsm, vm or init, got '%s'", value ? value : "");
    } else if ((cmd->opts & OPT_PAGE) && is_option(arg, "--blk")) {
        value = option_value(argc, argv, i, "--blk");
        /* 0xFFFFFFFF is InvalidBlockNumber. */
        if (value == NULL || !parse_u32(value, &o->page.blkno) || o->page.blkno == UINT32_MAX)
            return usage_error("--blk needs a block number, got '%s'", value ? value : "");
        *have_blk = true;
    } else if ((cmd->opts & OPT_PAGE) && is_option(arg, "--lsn")) {
        value = option_value(argc, argv, i, "--lsn");
        if (value == NULL || !lsn_parse(value, &o->page.lsn) || o->page.lsn == 0 ||
            o->page.lsn == LSN_MAX)
            return usage_error("--lsn needs an LSN X/Y, got '%s'", value ? value : "");
        o->page.has_lsn = true;
    } else {
        return ARG_NOT_OURS;
    }
    return ARG_TAKEN;
}

/* `start|stop compute NAME` and a named compute's --timeline, --port,
 * --read-only and --lsn. */
static int parse_compute_option(const command *cmd, int argc, char **argv, int *i, cli_opts *o)
{
    const char *arg = argv[*i];
    const char *value;
    if ((cmd->opts & OPT_COMPUTE) && o->name != NULL && strcmp(o->name, "compute") == 0 &&
        o->compute_name == NULL && arg[0] != '-') {
        o->compute_name = arg;
    } else if ((cmd->opts & OPT_COMPUTE_START) && is_option(arg, "--timeline")) {
        if ((value = option_value(argc, argv, i, "--timeline")) == NULL || value[0] == '\0')
            return usage_error("%s needs a timeline name", "--timeline");
        o->timeline = value;
    } else if ((cmd->opts & OPT_COMPUTE_START) && is_option(arg, "--port")) {
        uint32_t port = 0;
        value = option_value(argc, argv, i, "--port");
        if (value == NULL || !parse_u32(value, &port) || port < 1 || port > 65535)
            return usage_error("--port needs a port number, got '%s'", value ? value : "");
        o->compute_port = (int)port;
    } else if ((cmd->opts & OPT_COMPUTE_START) && strcmp(arg, "--read-only") == 0) {
        o->read_only = true;
    } else if ((cmd->opts & OPT_COMPUTE_START) && is_option(arg, "--lsn")) {
        value = option_value(argc, argv, i, "--lsn");
        if (value == NULL || !lsn_parse(value, &o->lsn) || o->lsn == 0 || o->lsn == LSN_MAX)
            return usage_error("--lsn needs an LSN X/Y, got '%s'", value ? value : "");
        o->has_lsn = true;
    } else {
        return ARG_NOT_OURS;
    }
    return ARG_TAKEN;
}

/* What no single option says: what a command needs and which options go
 * together.  CLI_OK, or the exit code of a usage error. */
static int check_options(const command *cmd, cli_opts *o, bool have_rel, bool have_blk)
{
    if (cmd->opts & OPT_PAGE) {
        if (o->name == NULL)
            return usage_error("%s", "page needs a subcommand: page get");
        if (!have_rel || !have_blk)
            return usage_error("%s", "page get needs --rel SPC/DB/REL and --blk N");
    }
    if ((cmd->opts & OPT_NAME) && o->name == NULL)
        return usage_error("%s needs a NAME", cmd->name);
    if ((cmd->opts & OPT_REMOTE) && !o->remote && o->argv != NULL)
        return usage_error("%s", "arguments after -- go to postgres only with --remote");
    if ((cmd->opts & OPT_NAME) && !(cmd->opts & OPT_PASS_ALL) && !valid_component(o->name))
        return usage_error("unknown component '%s' (sk1 sk2 sk3 pageserver compute)", o->name);
    bool compute_opts = o->timeline != NULL || o->compute_port != 0 || o->read_only || o->has_lsn;
    if (o->compute_name != NULL && strcmp(o->compute_name, "compute") == 0 && !compute_opts)
        o->compute_name = NULL; /* "compute compute": the default compute */
    if (compute_opts && o->compute_name == NULL)
        return usage_error("%s", "--timeline, --port, --read-only and --lsn are for a named "
                                 "compute: start compute NAME --timeline T ...");
    if (o->has_lsn && !o->read_only)
        return usage_error("%s", "--lsn is for a read-only compute (--read-only); to start a "
                                 "writable compute at an LSN, branch there (strata timeline "
                                 "branch NAME --lsn X/Y)");
    if (o->compute_name != NULL && (o->remote || o->nset > 0 || o->nreset > 0))
        return usage_error("%s", "--remote, --set and --reset are for the default compute only");
    if ((o->nset > 0 || o->nreset > 0) && o->name != NULL && strcmp(o->name, "compute") != 0)
        return usage_error("--set and --reset are settings of the compute, not of %s", o->name);
    return CLI_OK;
}

int main(int argc, char **argv)
{
    log_init("strata", LOG_LEVEL_INFO);
    if (argc < 2)
        return usage(stderr), CLI_USAGE;
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0)
        return usage(stdout), CLI_OK;
    const command *cmd = NULL;
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            cmd = &commands[i];
    if (cmd == NULL)
        return usage_error("unknown command '%s'", argv[1]);

    cli_opts o = {.dir = ".strata"};
    if (cmd->opts & OPT_RAW) {
        o.argc = argc - 2;
        o.argv = argv + 2;
        return cmd->run(&o);
    }
    bool have_rel = false, have_blk = false;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            printf("usage: strata %s\n", cmd->usage);
            return CLI_OK;
        }
        if ((cmd->opts & OPT_PASS) && strcmp(arg, "--") == 0) {
            o.argc = argc - i - 1;
            o.argv = argv + i + 1;
            break;
        }
        int rc = parse_common_option(cmd, argc, argv, &i, &o);
        if (rc == ARG_NOT_OURS)
            rc = parse_page_option(cmd, argc, argv, &i, &o, &have_rel, &have_blk);
        if (rc == ARG_NOT_OURS)
            rc = parse_compute_option(cmd, argc, argv, &i, &o);
        if (rc == ARG_TAKEN)
            continue;
        if (rc != ARG_NOT_OURS)
            return rc;
        if (!(cmd->opts & OPT_NAME) || o.name != NULL || arg[0] == '-')
            return usage_error("unexpected argument '%s'", arg);
        o.name = arg;
        if (cmd->opts & OPT_PASS_ALL) {
            /* bench NAME [--dir D] ARGS...: --dir right after NAME is ours. */
            if (i + 1 < argc && is_option(argv[i + 1], "--dir")) {
                i++;
                const char *value = option_value(argc, argv, &i, "--dir");
                if (value == NULL)
                    return usage_error("%s needs a directory", "--dir");
                o.dir = value;
            }
            o.argc = argc - i - 1;
            o.argv = argv + i + 1;
            break;
        }
    }
    int rc = check_options(cmd, &o, have_rel, have_blk);
    return rc != CLI_OK ? rc : cmd->run(&o);
}
