/*
 * log.c: see log.h.  Lines are formatted into one buffer and written with a
 * single write(2) so that threads (the HTTP thread, io threads) do not
 * interleave within a line.
 */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *log_component = "strata";
static log_level log_min_level = LOG_LEVEL_INFO;

static const char *const level_names[] = {"DEBUG", "INFO", "WARN", "ERROR", "FATAL"};

void log_init(const char *component, log_level min_level)
{
    log_component = component;
    log_min_level = min_level;
}

int log_level_parse(const char *name)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

void log_write(log_level level, const char *fmt, ...)
{
    if (level < log_min_level)
        return;
    char line[4096];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line,
                     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s[%d]: ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, level_names[level], log_component, (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t ignored = write(STDERR_FILENO, line, len);
    (void)ignored;
}

void log_exit_fatal(void)
{
    exit(1);
}
