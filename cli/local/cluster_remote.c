/*
 * cluster_remote.c: the cluster's remote store and the daemons' --remote.
 * See cluster_remote.h.
 */
#include "cli/local/cluster_remote.h"

#include <stdio.h>
#include <sys/stat.h>
#include <string.h>

#include "net/remote_storage.h"

/* The store's first answer must come quickly: `up` waits for it. */
#define REMOTE_PREPARE_ATTEMPTS 2
#define REMOTE_PREPARE_CONNECT_MS 3000
#define REMOTE_PREPARE_REQUEST_MS 5000

int cluster_remote_default(const cluster *c, char *url, size_t len, cli_err *err)
{
    int n = snprintf(url, len, "file://%s/remote", c->dir);
    if (n < 0 || (size_t)n >= len)
        return cli_err_set(err, "remote URL too long for %s", c->dir);
    return 0;
}

int cluster_remote_prepare(const char *url, bool create, cli_err *err)
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
    struct stat st;
    if (!create && cfg.kind == REMOTE_LOCAL && (stat(cfg.root, &st) != 0 || !S_ISDIR(st.st_mode)))
        return cli_err_set(err,
                           "the cluster's remote store %s is missing (%s is not a directory): "
                           "put it back if it was moved or unmounted; `strata remote init %s` "
                           "makes a new, empty one, without what the old one held",
                           url, cfg.root, url);
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

void cluster_remote_daemon_args(const cluster *c, char **argv, int *argc)
{
    if (c->remote[0] == '\0')
        return;
    argv[(*argc)++] = "--remote";
    argv[(*argc)++] = (char *)c->remote;
    argv[*argc] = NULL;
}
