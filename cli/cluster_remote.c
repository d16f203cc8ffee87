/*
 * cluster_remote.c: the cluster's remote store and the daemons' --remote.
 * See cluster_remote.h.
 */
#include "cli/cluster_remote.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/proc.h"
#include "net/remote_storage.h"

/* The store's first answer must come quickly: `up` waits for it. */
#define REMOTE_PREPARE_ATTEMPTS 2
#define REMOTE_PREPARE_CONNECT_MS 3000
#define REMOTE_PREPARE_REQUEST_MS 5000
/* A daemon prints its usage at once. */
#define DAEMON_HELP_TIMEOUT_S 10
#define DAEMON_HELP_MAX 65536

int cluster_remote_default(const cluster *c, char *url, size_t len, cli_err *err)
{
    int n = snprintf(url, len, "file://%s/remote", c->dir);
    if (n < 0 || (size_t)n >= len)
        return cli_err_set(err, "remote URL too long for %s", c->dir);
    return 0;
}

int cluster_remote_prepare(const char *url, cli_err *err)
{
    remote_config cfg;
    remote_err rerr = {{0}};
    bool s3 = strncmp(url, "s3://", 5) == 0;
    const char *env_hint = s3 ? " (an s3:// remote takes its endpoint and keys from "
                                "STRATA_S3_ENDPOINT, STRATA_S3_ACCESS_KEY, STRATA_S3_SECRET_KEY "
                                "and STRATA_S3_REGION)"
                              : "";
    if (remote_config_from_url(url, &cfg, &rerr) != 0)
        return cli_err_set(err, "remote %s: %s%s", url, rerr.msg, env_hint);
    cfg.max_attempts = REMOTE_PREPARE_ATTEMPTS;
    cfg.connect_timeout_ms = REMOTE_PREPARE_CONNECT_MS;
    cfg.request_timeout_ms = REMOTE_PREPARE_REQUEST_MS;
    remote_storage *rs = NULL;
    if (remote_open(&cfg, &rs, &rerr) != 0)
        return cli_err_set(err, "remote %s: %s%s", url, rerr.msg, env_hint);
    int rc = remote_init(rs, &rerr);
    remote_close(rs);
    if (rc != 0)
        return cli_err_set(err, "remote %s cannot be used: %s%s", url, rerr.msg, env_hint);
    return 0;
}

/* Whether program's --help lists flag; -1 when it could not be run. */
static int daemon_takes_flag(const cluster *c, const char *program, const char *flag, cli_err *err)
{
    char out[PATH_MAX];
    if (cluster_path(c, ".daemon-help.tmp", out, err) != 0)
        return -1;
    (void)unlink(out);
    char *argv[] = {(char *)program, "--help", NULL};
    cli_err run_err = {{0}};
    proc_user self = {.drop = false};
    /* Its exit status does not matter, only what it printed. */
    (void)proc_run(argv, out, &self, DAEMON_HELP_TIMEOUT_S, &run_err);
    int fd = open(out, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cli_err_set(err, "running %s --help: %s", program,
                           run_err.msg[0] ? run_err.msg : strerror(errno));
    char *text = malloc(DAEMON_HELP_MAX + 1);
    ssize_t n = text ? read(fd, text, DAEMON_HELP_MAX) : -1;
    close(fd);
    (void)unlink(out);
    if (n < 0) {
        free(text);
        return cli_err_set(err, "reading the output of %s --help", program);
    }
    text[n] = '\0';
    /* An option line: the flag followed by a blank (not --remote-foo). */
    size_t flen = strlen(flag);
    bool found = false;
    for (const char *p = strstr(text, flag); p != NULL && !found; p = strstr(p + 1, flag))
        found = (p[flen] == ' ' || p[flen] == '\t' || p[flen] == '=' || p[flen] == '\n') &&
                (p == text || p[-1] == ' ' || p[-1] == '\n' || p[-1] == '[');
    free(text);
    return found ? 1 : 0;
}

/* Programs asked already in this process (the three safekeepers share one). */
#define ASKED_MAX 4
static struct {
    char program[PATH_MAX];
    bool takes;
} asked[ASKED_MAX];
static int n_asked;

int cluster_remote_daemon_args(const cluster *c, const char *program, const char *what, char **argv,
                               int *argc, bool *used, cli_err *err)
{
    *used = false;
    if (c->remote[0] == '\0')
        return 0;
    int i = 0;
    while (i < n_asked && strcmp(asked[i].program, program) != 0)
        i++;
    if (i == n_asked) {
        int takes = daemon_takes_flag(c, program, "--remote", err);
        if (takes < 0)
            return -1;
        if (n_asked < ASKED_MAX) {
            snprintf(asked[n_asked].program, sizeof asked[n_asked].program, "%s", program);
            asked[n_asked].takes = takes == 1;
            n_asked++;
        }
        if (takes == 0)
            printf("%s: %s has no --remote option: it runs without the remote store %s\n", what,
                   program, c->remote);
        if (takes != 1)
            return 0;
    } else if (!asked[i].takes) {
        return 0;
    }
    argv[(*argc)++] = "--remote";
    argv[(*argc)++] = (char *)c->remote;
    argv[*argc] = NULL;
    *used = true;
    return 0;
}
