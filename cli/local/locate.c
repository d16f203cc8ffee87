/*
 * locate.c: see locate.h.  Not for: running what it finds.
 */
#include "cli/local/locate.h"

#include <errno.h>
#include <stdbool.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int locate_bindir(char *out, cli_err *err)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        return cli_err_set(err, "readlink /proc/self/exe: %s", strerror(errno));
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash == NULL)
        return cli_err_set(err, "cannot tell the directory of %s", self);
    *slash = '\0';
    snprintf(out, PATH_MAX, "%s", self[0] ? self : "/");
    return 0;
}

int locate_sibling(const char *name, char *out, cli_err *err)
{
    char bindir[PATH_MAX];
    if (locate_bindir(bindir, err) != 0)
        return -1;
    int n = snprintf(out, PATH_MAX, "%s/%s", bindir, name);
    if (n < 0 || n >= PATH_MAX)
        return cli_err_set(err, "path too long: %s/%s", bindir, name);
    if (access(out, X_OK) != 0)
        return cli_err_set(err, "%s not found: no executable %s (build it next to strata)", name,
                           out);
    return 0;
}

int locate_extension(char *out, cli_err *err)
{
    const char *env = getenv("STRATA_EXTENSION");
    if (env != NULL && env[0] != '\0') {
        if (env[0] != '/')
            return cli_err_set(err, "STRATA_EXTENSION must be an absolute path: %s", env);
        if (strlen(env) >= PATH_MAX)
            return cli_err_set(err, "STRATA_EXTENSION is too long");
        snprintf(out, PATH_MAX, "%s", env);
        if (access(out, R_OK) != 0)
            return cli_err_set(err, "strata.so not found: STRATA_EXTENSION=%s: %s", out,
                               strerror(errno));
        return 0;
    }
    char bindir[PATH_MAX], guess[PATH_MAX + 32];
    if (locate_bindir(bindir, err) != 0)
        return -1;
    snprintf(guess, sizeof guess, "%s/../lib/strata.so", bindir);
    if (realpath(guess, out) == NULL || access(out, R_OK) != 0)
        return cli_err_set(err,
                           "strata.so not found: no %s (build the extension, or set "
                           "STRATA_EXTENSION)",
                           guess);
    return 0;
}

int locate_pg_program(const char *name, char *out, cli_err *err)
{
    const char *bindir = getenv("STRATA_PG_BINDIR");
    if (bindir == NULL || bindir[0] == '\0')
        bindir = LOCATE_DEFAULT_PG_BINDIR;
    int n = snprintf(out, PATH_MAX, "%s/%s", bindir, name);
    if (n < 0 || n >= PATH_MAX)
        return cli_err_set(err, "path too long: %s/%s", bindir, name);
    if (out[0] != '/')
        return cli_err_set(err, "STRATA_PG_BINDIR must be an absolute path: %s", bindir);
    if (access(out, X_OK) != 0)
        return cli_err_set(err, "PostgreSQL program %s not found in %s (set STRATA_PG_BINDIR)",
                           name, bindir);
    return 0;
}

#ifndef STRATA_PG_PREFIX_DEFAULT
#define STRATA_PG_PREFIX_DEFAULT ""
#endif
#ifndef STRATA_SOURCE_DIR_DEFAULT
#define STRATA_SOURCE_DIR_DEFAULT ""
#endif

/* Runs `bash <src>/compute/postgres/build.sh --prefix-only` and reads the
 * one line it prints.  0, or -1 with a reason. */
static int locate_prefix_from_script(char *out, cli_err *err)
{
    char script[PATH_MAX];
    int n =
        snprintf(script, sizeof script, "%s/compute/postgres/build.sh", STRATA_SOURCE_DIR_DEFAULT);
    if (STRATA_SOURCE_DIR_DEFAULT[0] == '\0' || n < 0 || n >= (int)sizeof script ||
        access(script, R_OK) != 0)
        return cli_err_set(err, "patched PostgreSQL not found: STRATA_PG_PREFIX is not set and "
                                "no build script to ask (set STRATA_PG_PREFIX)");
    /* The script never builds with --prefix-only; it only looks in its cache. */
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "bash '%s' --prefix-only 2>/dev/null", script);
    FILE *p = popen(cmd, "re");
    if (p == NULL)
        return cli_err_set(err, "running %s: %s", script, strerror(errno));
    char line[PATH_MAX];
    bool got = fgets(line, sizeof line, p) != NULL;
    int status = pclose(p);
    if (!got || status != 0)
        return cli_err_set(err,
                           "patched PostgreSQL not built (`bash %s --prefix-only` found none; "
                           "run `make postgres` or set STRATA_PG_PREFIX)",
                           script);
    line[strcspn(line, "\r\n")] = '\0';
    snprintf(out, PATH_MAX, "%s", line);
    return 0;
}

int locate_patched_pg_bindir(char *out, cli_err *err)
{
    char prefix[PATH_MAX];
    const char *env = getenv("STRATA_PG_PREFIX");
    const char *source = "STRATA_PG_PREFIX";
    if (env != NULL && env[0] != '\0') {
        if (strlen(env) >= sizeof prefix)
            return cli_err_set(err, "STRATA_PG_PREFIX is too long");
        snprintf(prefix, sizeof prefix, "%s", env);
    } else if (STRATA_PG_PREFIX_DEFAULT[0] != '\0' &&
               access(STRATA_PG_PREFIX_DEFAULT "/bin/postgres", X_OK) == 0) {
        snprintf(prefix, sizeof prefix, "%s", STRATA_PG_PREFIX_DEFAULT);
        source = "the build's STRATA_PG_PREFIX";
    } else {
        if (locate_prefix_from_script(prefix, err) != 0)
            return -1;
        source = "compute/postgres/build.sh --prefix-only";
    }
    if (prefix[0] != '/')
        return cli_err_set(err, "the patched PostgreSQL prefix must be absolute: %s (from %s)",
                           prefix, source);
    int n = snprintf(out, PATH_MAX, "%s/bin", prefix);
    if (n < 0 || n >= PATH_MAX)
        return cli_err_set(err, "path too long: %s/bin", prefix);
    char postgres[PATH_MAX + 16];
    snprintf(postgres, sizeof postgres, "%s/postgres", out);
    if (access(postgres, X_OK) != 0)
        return cli_err_set(err, "patched PostgreSQL not found: no executable %s (from %s)",
                           postgres, source);
    return 0;
}
