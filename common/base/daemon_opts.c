/*
 * daemon_opts.c: flags, environment, config file and defaults of a daemon,
 * from its option table.  See daemon_opts.h for the precedence and the file
 * format.  The argv scanner is our own (not getopt_long) so that it keeps no
 * global state and can be called again by the unit tests.
 */
#include "base/daemon_opts.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/strata_assert.h"

#define CONFIG_LINE_MAX 1024

static bool fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static bool fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return false;
}

/* The option called key (len bytes); in a config-file key (file_key) '_'
 * also matches '-' in the name.  -1 if none. */
static int find_option(const daemon_opts *o, const char *key, size_t len, bool file_key)
{
    for (int i = 0; i < o->count; i++) {
        const char *n = o->table[i].name;
        if (strlen(n) != len)
            continue;
        bool same = true;
        for (size_t k = 0; k < len && same; k++)
            same = key[k] == n[k] || (file_key && n[k] == '-' && key[k] == '_');
        if (same)
            return i;
    }
    return -1;
}

static bool set_value(char **slot, const char *value, char *err, size_t errlen)
{
    char *copy = strdup(value);
    if (copy == NULL)
        return fail(err, errlen, "out of memory");
    free(*slot);
    *slot = copy;
    return true;
}

/* Flags: "--name value", "--name=value", "--help", "-h".  The last of a
 * repeated flag wins. */
static daemon_opts_result parse_argv(daemon_opts *o, int argc, char **argv, char *err,
                                     size_t errlen)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return DAEMON_OPTS_HELP;
        if (arg[0] != '-') {
            fail(err, errlen, "unexpected argument \"%s\"", arg);
            return DAEMON_OPTS_ERROR;
        }
        const char *name = arg[1] == '-' ? arg + 2 : arg + 1;
        const char *eq = strchr(name, '=');
        size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
        int idx = arg[1] == '-' ? find_option(o, name, len, false) : -1;
        if (idx < 0) {
            fail(err, errlen, "unknown option \"%.*s\"", (int)(name + len - arg), arg);
            return DAEMON_OPTS_ERROR;
        }
        const char *value = eq != NULL ? eq + 1 : NULL;
        if (value == NULL) {
            if (i + 1 >= argc) {
                fail(err, errlen, "option --%s needs a value", o->table[idx].name);
                return DAEMON_OPTS_ERROR;
            }
            value = argv[++i];
        }
        if (!set_value(&o->values[idx], value, err, errlen))
            return DAEMON_OPTS_ERROR;
    }
    return DAEMON_OPTS_OK;
}

static bool parse_env(daemon_opts *o, char *err, size_t errlen)
{
    for (int i = 0; i < o->count; i++) {
        const char *env = getenv(o->table[i].env);
        if (o->values[i] == NULL && env != NULL && *env != '\0' &&
            !set_value(&o->values[i], env, err, errlen))
            return false;
    }
    return true;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* One non-empty, non-comment config line (trimmed, modified in place). */
static bool config_line(daemon_opts *o, char *s, const char *path, int lineno, char *err,
                        size_t errlen)
{
    char *eq = strchr(s, '=');
    if (eq == NULL)
        return fail(err, errlen, "%s:%d: expected key = value", path, lineno);
    *eq = '\0';
    char *key = trim(s), *value = trim(eq + 1);
    size_t vlen = strlen(value);
    if (vlen >= 2 && (value[0] == '"' || value[0] == '\'') && value[vlen - 1] == value[0]) {
        value[vlen - 1] = '\0';
        value++;
    }
    int idx = find_option(o, key, strlen(key), true);
    if (idx < 0 || idx == o->config)
        return fail(err, errlen, "%s:%d: unknown key \"%s\"", path, lineno, key);
    if (o->values[idx] != NULL)
        return true; /* a flag, the environment or an earlier line gave it */
    return set_value(&o->values[idx], value, err, errlen);
}

static bool parse_config_file(daemon_opts *o, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return fail(err, errlen, "cannot read config file %s: %s", path, strerror(errno));
    char line[CONFIG_LINE_MAX];
    int lineno = 0;
    bool ok = true;
    while (ok && fgets(line, sizeof line, f) != NULL) {
        lineno++;
        size_t n = strlen(line);
        if (n == sizeof line - 1 && line[n - 1] != '\n' && !feof(f)) {
            ok = fail(err, errlen, "%s:%d: line longer than %d bytes", path, lineno,
                      CONFIG_LINE_MAX - 2);
            break;
        }
        char *s = trim(line);
        if (*s != '\0' && *s != '#')
            ok = config_line(o, s, path, lineno, err, errlen);
    }
    if (ok && ferror(f))
        ok = fail(err, errlen, "cannot read config file %s: %s", path, strerror(errno));
    fclose(f);
    return ok;
}

daemon_opts_result daemon_opts_parse(daemon_opts *o, int argc, char **argv, char *err,
                                     size_t errlen)
{
    STRATA_ASSERT(o->values == NULL && o->count > 0);
    STRATA_ASSERT(o->config < o->count);
    o->values = calloc((size_t)o->count, sizeof *o->values);
    if (o->values == NULL) {
        fail(err, errlen, "out of memory");
        return DAEMON_OPTS_ERROR;
    }
    daemon_opts_result r = parse_argv(o, argc, argv, err, errlen);
    if (r != DAEMON_OPTS_OK)
        return r;
    if (!parse_env(o, err, errlen))
        return DAEMON_OPTS_ERROR;
    if (o->config >= 0 && o->values[o->config] != NULL &&
        !parse_config_file(o, o->values[o->config], err, errlen))
        return DAEMON_OPTS_ERROR;
    for (int i = 0; i < o->count; i++) {
        if (o->values[i] == NULL && o->table[i].def != NULL &&
            !set_value(&o->values[i], o->table[i].def, err, errlen))
            return DAEMON_OPTS_ERROR;
    }
    return DAEMON_OPTS_OK;
}

void daemon_opts_usage(const daemon_opts *o, FILE *f)
{
    int width = (int)strlen("help");
    for (int i = 0; i < o->count; i++) {
        int len = (int)strlen(o->table[i].name);
        width = len > width ? len : width;
    }
    fprintf(f, "Usage: %s %s\n\nOptions:\n", o->program, o->synopsis);
    for (int i = 0; i < o->count; i++) {
        const daemon_opt *d = &o->table[i];
        fprintf(f, "  --%-*s %s\n  %*s env %s, default: %s\n", width, d->name, d->help, width + 2,
                "", d->env,
                d->def == NULL      ? "(none)"
                : d->def[0] == '\0' ? "(empty)"
                                    : d->def);
    }
    fprintf(f, "  --%-*s this text\n", width, "help");
}

void daemon_opts_free(daemon_opts *o)
{
    if (o->values == NULL)
        return;
    for (int i = 0; i < o->count; i++)
        free(o->values[i]);
    free(o->values);
    o->values = NULL;
}

_Noreturn void daemon_opts_exit(const daemon_opts *o, const char *err, bool with_usage)
{
    fprintf(stderr, "%s: %s\n", o->program, err);
    if (with_usage)
        daemon_opts_usage(o, stderr);
    exit(2);
}

bool daemon_opts_require(const daemon_opts *o, int idx, char *err, size_t errlen)
{
    STRATA_ASSERT(idx >= 0 && idx < o->count);
    if (o->values[idx] == NULL || o->values[idx][0] == '\0')
        return fail(err, errlen, "--%s is required", o->table[idx].name);
    return true;
}

bool daemon_opt_uint(const char *name, const char *s, uint64_t min, uint64_t max, uint64_t *out,
                     char *err, size_t errlen)
{
    char *end;
    errno = 0;
    unsigned long long v = s[0] >= '0' && s[0] <= '9' ? strtoull(s, &end, 10) : 0;
    if (s[0] < '0' || s[0] > '9' || errno != 0 || *end != '\0' || v < min || v > max)
        return fail(err, errlen, "invalid --%s \"%s\" (want an integer %llu..%llu)", name, s,
                    (unsigned long long)min, (unsigned long long)max);
    *out = v;
    return true;
}

bool daemon_opt_bytes(const char *name, const char *s, uint64_t *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    unsigned long long v = s[0] >= '0' && s[0] <= '9' ? strtoull(s, &end, 10) : 0;
    unsigned shift = 0;
    if (s[0] < '0' || s[0] > '9' || errno != 0)
        goto bad;
    if (strcmp(end, "kB") == 0 || strcmp(end, "KB") == 0)
        shift = 10;
    else if (strcmp(end, "MB") == 0)
        shift = 20;
    else if (strcmp(end, "GB") == 0)
        shift = 30;
    else if (*end != '\0')
        goto bad;
    if (v > (1ULL << 50) >> shift)
        goto bad;
    *out = (uint64_t)v << shift;
    return true;
bad:
    return fail(err, errlen, "invalid --%s \"%s\" (want bytes, e.g. 4096, 64kB, 64MB, 1GB)", name,
                s);
}

bool daemon_opt_duration_ms(const char *name, const char *s, bool zero_ok, uint32_t *out, char *err,
                            size_t errlen)
{
    if (zero_ok && strcmp(s, "0") == 0) {
        *out = 0;
        return true;
    }
    char *end;
    errno = 0;
    unsigned long long v = s[0] >= '0' && s[0] <= '9' ? strtoull(s, &end, 10) : 0;
    unsigned long long ms;
    if (s[0] < '0' || s[0] > '9' || errno != 0)
        goto bad;
    if (strcmp(end, "ms") == 0)
        ms = v;
    else if (*end == '\0' || strcmp(end, "s") == 0)
        ms = v > 24ULL * 3600 ? 0 : v * 1000; /* 0: out of range, no overflow */
    else
        goto bad;
    if (ms == 0 || ms > 24ULL * 3600 * 1000)
        goto bad;
    *out = (uint32_t)ms;
    return true;
bad:
    return fail(err, errlen, "invalid --%s \"%s\" (want e.g. 60s or 500ms, at most 24 h%s)", name,
                s, zero_ok ? "; 0: never" : "");
}

bool daemon_opt_hostport(const char *name, const char *s, char *host, size_t hostcap, int *port,
                         char *err, size_t errlen)
{
    const char *colon = strrchr(s, ':');
    uint64_t p;
    char ignored[8];
    if (colon == NULL || colon == s || (size_t)(colon - s) >= hostcap ||
        !daemon_opt_uint(name, colon + 1, 0, 65535, &p, ignored, sizeof ignored))
        return fail(err, errlen, "invalid --%s \"%s\" (want HOST:PORT)", name, s);
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    *port = (int)p;
    return true;
}
