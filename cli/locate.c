/*
 * locate.c: see locate.h.  Not for: running what it finds.
 */
#include "cli/locate.h"

#include <errno.h>
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
