/*
 * err.c: the one-line failure reasons of the strata commands (cli.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "cli/cli.h"

int cli_err_set(cli_err *err, const char *fmt, ...)
{
    if (err->msg[0] != '\0')
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int cli_fail(const cli_err *err)
{
    fflush(stdout);
    fprintf(stderr, "strata: %s\n", err->msg[0] ? err->msg : "failed (no reason recorded)");
    return CLI_FAIL;
}
