/*
 * daemon_opts.h: a daemon's options, declared once in a table.
 *
 * Every option is a long flag (--name VALUE or --name=VALUE), an environment
 * variable and a config-file key, with one precedence:
 *
 *     flag > environment > config file > default
 *
 * An empty environment variable counts as unset.  The config file (named by
 * the option the caller marks as the config option, itself a flag or an
 * environment variable only) holds 'key = value' lines; '#' starts a comment
 * line, a key may spell '-' as '_', a value may be quoted with ' or ".  If a
 * flag is given twice the last one wins; if a key is in the file twice the
 * first one wins.  --help (or -h) prints a text generated from the table.
 *
 * Not for: the meaning of a value.  Values stay strings; the typed parsers
 * below turn one into a number, a size, a duration or an address, and the
 * daemon checks what only it knows (ranges, required options).
 *
 * libc only.  Only daemon_opts_exit exits: every other function that can
 * fail returns false or DAEMON_OPTS_ERROR with a message in err (without the
 * program name, which daemon_opts_exit puts in front), so the parser can be
 * unit tested with bad input.
 */
#ifndef STRATA_COMMON_DAEMON_OPTS_H
#define STRATA_COMMON_DAEMON_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct daemon_opt {
    const char *name; /* flag without "--", and config-file key */
    const char *env;  /* environment variable */
    const char *def;  /* default; NULL: unset unless given */
    const char *help; /* one line for --help */
} daemon_opt;

typedef struct daemon_opts {
    const char *program;  /* "strata-pageserver": the prefix of messages */
    const char *synopsis; /* after the program name on the usage line */
    const daemon_opt *table;
    int count;     /* entries in table and values */
    int config;    /* index of the config-file option, or -1 */
    char **values; /* count entries, owned; NULL: unset */
} daemon_opts;

typedef enum daemon_opts_result {
    DAEMON_OPTS_OK = 0,
    DAEMON_OPTS_HELP,  /* --help was given: print the usage, exit 0 */
    DAEMON_OPTS_ERROR, /* message in err: print it and the usage, exit 2 */
} daemon_opts_result;

/* Fills o->values (count entries, calloc'd; the caller sets the other fields)
 * from argv, the environment, the config file and the defaults, in that
 * precedence.  On DAEMON_OPTS_ERROR err says which option, key or line is
 * wrong; values may then be partly filled (daemon_opts_free frees them). */
daemon_opts_result daemon_opts_parse(daemon_opts *o, int argc, char **argv, char *err,
                                     size_t errlen);

/* The --help text: the usage line, then for every option its flag, help,
 * environment variable and default. */
void daemon_opts_usage(const daemon_opts *o, FILE *f);

/* Frees values; o may be parsed again afterwards. */
void daemon_opts_free(daemon_opts *o);

/* Prints "<program>: <err>" (and the usage if with_usage) on stderr and
 * exits with status 2, the daemons' status for bad options. */
_Noreturn void daemon_opts_exit(const daemon_opts *o, const char *err, bool with_usage);

/* false with "--<name> is required" unless option idx is set and non-empty. */
bool daemon_opts_require(const daemon_opts *o, int idx, char *err, size_t errlen);

/* The typed parsers.  name is the option (for the message); each returns
 * false with "invalid --<name> "<s>" (want ...)" in err on bad input. */

/* A decimal integer in [min, max]; no sign, no spaces, no suffix. */
bool daemon_opt_uint(const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out,
                     char *err, size_t errlen);

/* "4096", "64kB" (or "64KB"), "64MB", "1GB" (powers of 1024) -> bytes,
 * at most 2^50. */
bool daemon_opt_bytes(const char *name, const char *s, uint64_t *out, char *err, size_t errlen);

/* "60", "60s", "500ms" -> milliseconds in [1, 24 h]; with zero_ok, "0" is
 * also accepted and gives 0 (meaning "never" to the caller). */
bool daemon_opt_duration_ms(const char *name, const char *s, bool zero_ok, uint32_t *out, char *err,
                            size_t errlen);

/* "HOST:PORT" (the last ':' splits; port 0..65535, 0: ephemeral) -> host
 * (NUL-terminated, fewer than hostcap bytes) and port. */
bool daemon_opt_hostport(const char *name, const char *s, char *host, size_t hostcap, int *port,
                         char *err, size_t errlen);

#endif
