/*
 * compute_settings.h: the compute spec, the PostgreSQL settings an operator
 * gives the compute (`strata start compute --set name=value`, `--reset
 * name`; the same on `strata up`), kept in D/compute.settings and applied at
 * every start until changed, plus the settings of the environment variable
 * STRATA_COMPUTE_SETTINGS (applied at every start, never stored: Compose
 * passes its settings this way).
 *
 * Format of both: one `name=value` a line; blank lines and lines starting
 * with # are ignored; the value is taken literally (no quotes needed, none
 * removed) and quoted for postgresql.conf when written.  Names are GUC names
 * (letters, digits, _, one optional dot), stored lower-cased.
 *
 * Precedence, lowest first: Strata's own settings, the spec, the
 * environment, then ALTER SYSTEM (postgresql.auto.conf, kept with the
 * timeline: compute/extension/alter_system.c).  Settings Strata owns
 * (common/base/compute_owned.h) are refused everywhere, ALTER SYSTEM included;
 * shared_preload_libraries is merged: strata is always loaded first, a
 * library given by name must exist in the patched PostgreSQL's library
 * directory.
 *
 * Not for: the settings Strata owns (cli/compute/compute.c writes them).
 */
#ifndef STRATA_CLI_COMPUTE_SETTINGS_H
#define STRATA_CLI_COMPUTE_SETTINGS_H

#include <stdbool.h>

#include "cli/cli.h"
#include "cli/local/cluster.h"

#define COMPUTE_SETTINGS_MAX 128
#define COMPUTE_SETTING_NAME_MAX 64    /* bytes, NUL included (NAMEDATALEN) */
#define COMPUTE_SETTING_VALUE_MAX 1024 /* bytes, NUL included */

typedef struct compute_setting {
    char name[COMPUTE_SETTING_NAME_MAX];
    char value[COMPUTE_SETTING_VALUE_MAX];
} compute_setting;

/* An ordered set of settings; a name appears at most once. */
typedef struct compute_settings {
    int n;
    compute_setting s[COMPUTE_SETTINGS_MAX];
} compute_settings;

/*
 * Parses "name=value" (what --set takes) into *out: checks the name's
 * characters and length, lower-cases it, refuses owned settings and values
 * with control characters or longer than the limit.  where names the source
 * in errors ("--set", "STRATA_COMPUTE_SETTINGS line 3").  0 or -1.
 */
int compute_setting_parse(const char *text, const char *where, compute_setting *out, cli_err *err);

/* Checks a --reset name (same rules as a setting's name); *out gets it
 * lower-cased (COMPUTE_SETTING_NAME_MAX bytes).  0 or -1. */
int compute_setting_name_parse(const char *text, char *out, cli_err *err);

/* Sets (adds or replaces) or removes one setting. */
int compute_settings_put(compute_settings *ss, const compute_setting *s, cli_err *err);
void compute_settings_remove(compute_settings *ss, const char *name);

/* Parses a whole text of name=value lines.  0 or -1. */
int compute_settings_parse_text(const char *text, const char *what, compute_settings *out,
                                cli_err *err);

/* D/compute.settings: loaded (empty when the file does not exist) and
 * saved durably (common/base/durable.h).  0 or -1. */
int compute_settings_load(const cluster *c, compute_settings *out, cli_err *err);
int compute_settings_save(const cluster *c, const compute_settings *ss, cli_err *err);

/* The settings of STRATA_COMPUTE_SETTINGS (empty when unset).  0 or -1. */
int compute_settings_from_env(compute_settings *out, cli_err *err);

/*
 * The compute's shared_preload_libraries: strata_so (absolute path) first,
 * then the libraries of value (a comma-separated list as postgresql.conf
 * takes it; "strata" and any strata.so dropped as duplicates), each
 * checked to exist: a bare name in pkglibdir (NAME.so), a path as given.
 * out gets the list, unquoted.  0 or -1.
 */
int compute_settings_preload(const char *value, const char *strata_so, const char *pkglibdir,
                             char *out, size_t len, cli_err *err);

/* Appends `name = 'value'` lines for ss (except shared_preload_libraries),
 * quoted for postgresql.conf, to buf (NUL-terminated, size len) at *used.
 * 0, or -1 when it does not fit. */
int compute_settings_render(const compute_settings *ss, char *buf, size_t len, size_t *used,
                            cli_err *err);

#endif
