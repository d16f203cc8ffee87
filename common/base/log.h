/*
 * log.h: the daemons' structured log.
 *
 * One line per event on stderr: time, level, component, message, then
 * optional key=value fields the caller puts in the message.  Not for use
 * inside Postgres (the extension uses ereport).
 */
#ifndef STRATA_COMMON_LOG_H
#define STRATA_COMMON_LOG_H

typedef enum log_level {
    LOG_LEVEL_DEBUG = 0,
    LOG_LEVEL_INFO,
    LOG_LEVEL_WARN,
    LOG_LEVEL_ERROR,
    LOG_LEVEL_FATAL,
} log_level;

/* Sets the component name printed on every line (e.g. "safekeeper"). */
void log_init(const char *component, log_level min_level);

/* Parses "debug", "info", "warn", "error"; returns -1 for anything else. */
int log_level_parse(const char *name);

void log_write(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) log_write(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define log_info(...) log_write(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warn(...) log_write(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_error(...) log_write(LOG_LEVEL_ERROR, __VA_ARGS__)
/* Logs and exits the process with status 1. */
#define log_fatal(...) (log_write(LOG_LEVEL_FATAL, __VA_ARGS__), log_exit_fatal())

_Noreturn void log_exit_fatal(void);

#endif
