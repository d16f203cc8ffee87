/*
 * compute_settings.c: the compute spec and STRATA_COMPUTE_SETTINGS.  See
 * compute_settings.h.
 */
#include "cli/compute/compute_settings.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/compute_owned.h"
#include "base/durable.h"

#define COMPUTE_SETTINGS_FILE "compute.settings"
#define COMPUTE_SETTINGS_FILE_MAX                                                                  \
    (COMPUTE_SETTINGS_MAX * (COMPUTE_SETTING_NAME_MAX + COMPUTE_SETTING_VALUE_MAX + 2) + 4096)

/* A GUC name: an identifier, optionally "prefix.identifier" (a custom
 * setting of an extension). */
static bool valid_name(const char *s, size_t len)
{
    bool start = true;
    int dots = 0;
    if (len == 0 || len >= COMPUTE_SETTING_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '.') {
            if (start || ++dots > 1)
                return false;
            start = true;
            continue;
        }
        if (!(isalpha(ch) || ch == '_' || (!start && isdigit(ch))))
            return false;
        start = false;
    }
    return !start;
}

static int name_parse(const char *s, size_t len, const char *where, char *out, cli_err *err)
{
    if (!valid_name(s, len))
        return cli_err_set(err,
                           "%s: \"%.*s\" is not a setting name (letters, digits and _, with "
                           "at most one dot, at most %d characters)",
                           where, (int)(len > 80 ? 80 : len), s, COMPUTE_SETTING_NAME_MAX - 1);
    for (size_t i = 0; i < len; i++)
        out[i] = (char)tolower((unsigned char)s[i]);
    out[len] = '\0';
    if (compute_setting_owned(out))
        return cli_err_set(err,
                           "%s: %s is set by Strata at every start and cannot be changed "
                           "(docs/cli.md, compute settings)",
                           where, out);
    return 0;
}

int compute_setting_name_parse(const char *text, char *out, cli_err *err)
{
    return name_parse(text, strlen(text), "--reset", out, err);
}

int compute_setting_parse(const char *text, const char *where, compute_setting *out, cli_err *err)
{
    const char *eq = strchr(text, '=');
    if (eq == NULL)
        return cli_err_set(err, "%s: \"%s\" is not name=value", where, text);
    if (name_parse(text, (size_t)(eq - text), where, out->name, err) != 0)
        return -1;
    const char *value = eq + 1;
    size_t vlen = strlen(value);
    if (vlen >= COMPUTE_SETTING_VALUE_MAX)
        return cli_err_set(err, "%s: the value of %s is %zu bytes (at most %d)", where, out->name,
                           vlen, COMPUTE_SETTING_VALUE_MAX - 1);
    for (size_t i = 0; i < vlen; i++)
        if ((unsigned char)value[i] < 0x20 || value[i] == 0x7f)
            return cli_err_set(err, "%s: the value of %s holds a control character", where,
                               out->name);
    memcpy(out->value, value, vlen + 1);
    return 0;
}

int compute_settings_put(compute_settings *ss, const compute_setting *s, cli_err *err)
{
    for (int i = 0; i < ss->n; i++)
        if (strcmp(ss->s[i].name, s->name) == 0) {
            ss->s[i] = *s;
            return 0;
        }
    if (ss->n >= COMPUTE_SETTINGS_MAX)
        return cli_err_set(err, "more than %d compute settings", COMPUTE_SETTINGS_MAX);
    ss->s[ss->n++] = *s;
    return 0;
}

void compute_settings_remove(compute_settings *ss, const char *name)
{
    for (int i = 0; i < ss->n; i++)
        if (strcmp(ss->s[i].name, name) == 0) {
            memmove(&ss->s[i], &ss->s[i + 1], (size_t)(ss->n - i - 1) * sizeof ss->s[0]);
            ss->n--;
            return;
        }
}

int compute_settings_parse_text(const char *text, const char *what, compute_settings *out,
                                cli_err *err)
{
    out->n = 0;
    int lineno = 0;
    const char *p = text;
    while (*p != '\0') {
        const char *end = strchr(p, '\n');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        lineno++;
        /* Trim a CR (a file edited elsewhere) and surrounding blanks. */
        while (len > 0 && (p[len - 1] == '\r' || p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        while (len > 0 && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        if (len > 0 && *p != '#') {
            char line[COMPUTE_SETTING_NAME_MAX + COMPUTE_SETTING_VALUE_MAX + 2], where[160];
            snprintf(where, sizeof where, "%s line %d", what, lineno);
            if (len >= sizeof line)
                return cli_err_set(err, "%s: the line is too long", where);
            memcpy(line, p, len);
            line[len] = '\0';
            compute_setting s;
            if (compute_setting_parse(line, where, &s, err) != 0 ||
                compute_settings_put(out, &s, err) != 0)
                return -1;
        }
        p = end != NULL ? end + 1 : p + len;
    }
    return 0;
}

int compute_settings_load(const cluster *c, compute_settings *out, cli_err *err)
{
    char path[PATH_MAX];
    out->n = 0;
    if (cluster_path(c, COMPUTE_SETTINGS_FILE, path, err) != 0)
        return -1;
    void *data;
    size_t len;
    int rc = durable_read_file(path, COMPUTE_SETTINGS_FILE_MAX, &data, &len);
    if (rc == -ENOENT)
        return 0;
    if (rc != 0)
        return cli_err_set(err, "read %s: %s", path, strerror(-rc));
    char *text = malloc(len + 1);
    if (text == NULL) {
        free(data);
        return cli_err_set(err, "out of memory reading %s", path);
    }
    memcpy(text, data, len);
    text[len] = '\0';
    free(data);
    rc = strlen(text) != len ? cli_err_set(err, "%s holds a NUL byte", path)
                             : compute_settings_parse_text(text, path, out, err);
    free(text);
    return rc;
}

int compute_settings_save(const cluster *c, const compute_settings *ss, cli_err *err)
{
    char path[PATH_MAX];
    if (cluster_path(c, COMPUTE_SETTINGS_FILE, path, err) != 0)
        return -1;
    size_t cap = COMPUTE_SETTINGS_FILE_MAX, used = 0;
    char *text = malloc(cap);
    if (text == NULL)
        return cli_err_set(err, "out of memory writing %s", path);
    used +=
        (size_t)snprintf(text, cap,
                         "# The compute spec: written by `strata start compute --set/--reset`,\n"
                         "# applied at every start of the compute (docs/cli.md).\n");
    for (int i = 0; i < ss->n; i++)
        used += (size_t)snprintf(text + used, cap - used, "%s=%s\n", ss->s[i].name, ss->s[i].value);
    int rc = durable_write_file(path, text, used, 0644);
    free(text);
    if (rc != 0)
        return cli_err_set(err, "write %s: %s", path, strerror(-rc));
    return 0;
}

int compute_settings_from_env(compute_settings *out, cli_err *err)
{
    out->n = 0;
    const char *env = getenv("STRATA_COMPUTE_SETTINGS");
    if (env == NULL || env[0] == '\0')
        return 0;
    return compute_settings_parse_text(env, "STRATA_COMPUTE_SETTINGS", out, err);
}

/* True when lib names strata.so itself (by name or by path). */
static bool is_strata(const char *lib, const char *strata_so)
{
    const char *base = strrchr(lib, '/');
    base = base != NULL ? base + 1 : lib;
    return strcmp(lib, strata_so) == 0 || strcmp(base, "strata") == 0 ||
           strcmp(base, "strata.so") == 0;
}

int compute_settings_preload(const char *value, const char *strata_so, const char *pkglibdir,
                             char *out, size_t len, cli_err *err)
{
    int n = snprintf(out, len, "%s", strata_so);
    if (n < 0 || (size_t)n >= len)
        return cli_err_set(err, "shared_preload_libraries is too long");
    size_t used = (size_t)n;
    const char *p = value != NULL ? value : "";
    while (*p != '\0') {
        const char *end = strchr(p, ',');
        size_t l = end != NULL ? (size_t)(end - p) : strlen(p);
        const char *next = end != NULL ? end + 1 : p + l;
        while (l > 0 && isspace((unsigned char)*p)) {
            p++;
            l--;
        }
        while (l > 0 && isspace((unsigned char)p[l - 1]))
            l--;
        /* postgresql.conf lists may quote an element: "name". */
        if (l >= 2 && p[0] == '"' && p[l - 1] == '"') {
            p++;
            l -= 2;
        }
        char lib[PATH_MAX];
        if (l == 0 || l >= sizeof lib || memchr(p, '\'', l) != NULL || memchr(p, '"', l) != NULL ||
            memchr(p, '\\', l) != NULL)
            return cli_err_set(err,
                               "shared_preload_libraries: \"%s\" is not a comma-separated list "
                               "of library names",
                               value);
        memcpy(lib, p, l);
        lib[l] = '\0';
        p = next;
        if (is_strata(lib, strata_so))
            continue;
        char path[PATH_MAX * 2];
        if (strchr(lib, '/') == NULL && strncmp(lib, "$libdir", 7) != 0) {
            const char *suffix =
                strlen(lib) > 3 && strcmp(lib + strlen(lib) - 3, ".so") == 0 ? "" : ".so";
            snprintf(path, sizeof path, "%s/%s%s", pkglibdir, lib, suffix);
            if (access(path, R_OK) != 0)
                return cli_err_set(err,
                                   "shared_preload_libraries: library %s not found (no %s; "
                                   "is it one of the contrib modules compute/postgres/build.sh "
                                   "builds?)",
                                   lib, path);
        } else if (lib[0] == '/' && access(lib, R_OK) != 0) {
            return cli_err_set(err, "shared_preload_libraries: library %s not found", lib);
        }
        n = snprintf(out + used, len - used, ",%s", lib);
        if (n < 0 || (size_t)n >= len - used)
            return cli_err_set(err, "shared_preload_libraries is too long");
        used += (size_t)n;
    }
    return 0;
}

int compute_settings_render(const compute_settings *ss, char *buf, size_t len, size_t *used,
                            cli_err *err)
{
    for (int i = 0; i < ss->n; i++) {
        if (strcmp(ss->s[i].name, "shared_preload_libraries") == 0)
            continue;
        /* A postgresql.conf string: a quote is doubled, and a backslash
         * too (the parser reads backslash escapes inside quotes). */
        char quoted[COMPUTE_SETTING_VALUE_MAX * 2 + 1];
        size_t q = 0;
        for (const char *v = ss->s[i].value; *v != '\0'; v++) {
            if (*v == '\'' || *v == '\\')
                quoted[q++] = *v;
            quoted[q++] = *v;
        }
        quoted[q] = '\0';
        int n = snprintf(buf + *used, len - *used, "%s = '%s'\n", ss->s[i].name, quoted);
        if (n < 0 || (size_t)n >= len - *used)
            return cli_err_set(err, "compute configuration too long");
        *used += (size_t)n;
    }
    return 0;
}
