/*
 * cmd_remote.c: `strata remote`, the operator's view of a remote store
 * (common/net/remote_storage.h): create it, list, put, get, delete and inspect
 * objects, with the same URL, environment and settings the daemons use.
 *
 *   strata remote init URL
 *   strata remote ls   URL [PREFIX]
 *   strata remote put  URL KEY FILE
 *   strata remote get  URL KEY FILE
 *   strata remote cat  URL KEY [OFFSET [LENGTH]]
 *   strata remote head URL KEY
 *   strata remote rm   URL KEY...
 *
 * Not for: anything that knows what the objects mean (the pageserver's
 * manifests, the WAL backup); this moves bytes only.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "net/remote_storage.h"

static const char remote_usage[] =
    "strata remote init|ls|put|get|cat|head|rm URL ... [--endpoint URL] [--region R]\n"
    "         [--access-key K] [--secret-key S] [--part-size BYTES]\n"
    "         [--multipart-threshold BYTES] [--attempts N] [--timeout-ms MS]\n"
    "         [--connect-timeout-ms MS] [--list-page N]\n"
    "  init URL                create the bucket (s3) or the root directory (file)\n"
    "  ls URL [PREFIX]         list keys (SIZE<tab>KEY) starting with PREFIX\n"
    "  put URL KEY FILE        store FILE (- : standard input) under KEY\n"
    "  get URL KEY FILE        fetch KEY into FILE (written durably)\n"
    "  cat URL KEY [OFF [LEN]] write KEY (from byte OFF, LEN bytes) to standard output\n"
    "  head URL KEY            print KEY's size; exit 1 if it does not exist\n"
    "  rm URL KEY...           delete the keys (missing keys are no error)\n"
    "URL: s3://BUCKET[/PREFIX] or file:///PATH.  S3 settings also come from\n"
    "STRATA_S3_ENDPOINT, STRATA_S3_REGION, STRATA_S3_ACCESS_KEY, STRATA_S3_SECRET_KEY\n"
    "(or AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); flags win.";

#define REMOTE_MAX_ARGS 4096

typedef struct remote_args {
    const char *sub;
    const char *pos[REMOTE_MAX_ARGS]; /* URL, then the subcommand's operands */
    int npos;
} remote_args;

static int usage_fail(const char *fmt, const char *arg)
{
    fprintf(stderr, "strata remote: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nusage: %s\n", remote_usage);
    return CLI_USAGE;
}

/* "--opt V" or "--opt=V" at argv[*i]; *missing when the value is absent. */
static const char *opt_value(int argc, char **argv, int *i, const char *opt, bool *missing)
{
    size_t len = strlen(opt);
    *missing = false;
    if (strncmp(argv[*i], opt, len) == 0 && argv[*i][len] == '=')
        return argv[*i] + len + 1;
    if (strcmp(argv[*i], opt) != 0)
        return NULL;
    if (*i + 1 >= argc) {
        *missing = true;
        return NULL;
    }
    return argv[++*i];
}

/* A decimal number with an optional K, M or G (binary) suffix. */
static bool parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    unsigned shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    if (shift != 0)
        end++;
    if (errno != 0 || *end != '\0' || v > (UINT64_MAX >> shift))
        return false;
    *out = (uint64_t)v << shift;
    return true;
}

static bool parse_u32_max(const char *s, uint32_t max, uint32_t *out)
{
    uint64_t v;
    if (!parse_bytes(s, &v) || v > max)
        return false;
    *out = (uint32_t)v;
    return true;
}

static bool set_str(char *dst, size_t cap, const char *v)
{
    if (strlen(v) >= cap)
        return false;
    strcpy(dst, v);
    return true;
}

/* Options that override the URL's and the environment's settings. */
typedef struct remote_flags {
    const char *endpoint, *region, *access_key, *secret_key;
    const char *part_size, *threshold, *attempts, *timeout_ms, *connect_timeout_ms, *list_page;
} remote_flags;

static int apply_flags(const remote_flags *f, remote_config *cfg)
{
    uint32_t u;
    if ((f->endpoint && !set_str(cfg->endpoint, sizeof cfg->endpoint, f->endpoint)) ||
        (f->region && !set_str(cfg->region, sizeof cfg->region, f->region)) ||
        (f->access_key && !set_str(cfg->access_key, sizeof cfg->access_key, f->access_key)) ||
        (f->secret_key && !set_str(cfg->secret_key, sizeof cfg->secret_key, f->secret_key)))
        return usage_fail("%s", "an S3 setting is too long");
    if (f->part_size && !parse_bytes(f->part_size, &cfg->part_size))
        return usage_fail("bad --part-size %s (bytes, K/M/G suffix allowed)", f->part_size);
    if (f->threshold && !parse_bytes(f->threshold, &cfg->multipart_threshold))
        return usage_fail("bad --multipart-threshold %s", f->threshold);
    if (f->attempts) {
        if (!parse_u32_max(f->attempts, 100, &u) || u == 0)
            return usage_fail("bad --attempts %s (1..100)", f->attempts);
        cfg->max_attempts = (int)u;
    }
    if (f->timeout_ms && !parse_u32_max(f->timeout_ms, 86400000, &cfg->request_timeout_ms))
        return usage_fail("bad --timeout-ms %s", f->timeout_ms);
    if (f->connect_timeout_ms &&
        !parse_u32_max(f->connect_timeout_ms, 600000, &cfg->connect_timeout_ms))
        return usage_fail("bad --connect-timeout-ms %s", f->connect_timeout_ms);
    if (f->list_page && !parse_u32_max(f->list_page, 1000, &cfg->list_page_keys))
        return usage_fail("bad --list-page %s (1..1000 keys)", f->list_page);
    return 0;
}

static int parse(const cli_opts *o, remote_args *a, remote_flags *f)
{
    memset(a, 0, sizeof *a);
    memset(f, 0, sizeof *f);
    if (o->argc < 1)
        return usage_fail("%s", "a subcommand is needed: init, ls, put, get, cat, head or rm");
    a->sub = o->argv[0];
    if (strcmp(a->sub, "-h") == 0 || strcmp(a->sub, "--help") == 0) {
        printf("usage: %s\n", remote_usage);
        return -2;
    }
    struct {
        const char *name;
        const char **dst;
    } opts[] = {{"--endpoint", &f->endpoint},
                {"--region", &f->region},
                {"--access-key", &f->access_key},
                {"--secret-key", &f->secret_key},
                {"--part-size", &f->part_size},
                {"--multipart-threshold", &f->threshold},
                {"--attempts", &f->attempts},
                {"--timeout-ms", &f->timeout_ms},
                {"--connect-timeout-ms", &f->connect_timeout_ms},
                {"--list-page", &f->list_page}};
    bool only_operands = false;
    for (int i = 1; i < o->argc; i++) {
        const char *arg = o->argv[i];
        bool matched = false, missing = false;
        if (!only_operands && strcmp(arg, "--") == 0) {
            only_operands = true;
            continue;
        }
        for (size_t k = 0; !only_operands && !matched && k < sizeof opts / sizeof opts[0]; k++) {
            const char *v = opt_value(o->argc, o->argv, &i, opts[k].name, &missing);
            if (missing)
                return usage_fail("%s needs a value", opts[k].name);
            if (v != NULL) {
                *opts[k].dst = v;
                matched = true;
            }
        }
        if (matched)
            continue;
        if (!only_operands && arg[0] == '-' && arg[1] == '-')
            return usage_fail("unknown option %s", arg);
        if (a->npos == REMOTE_MAX_ARGS)
            return usage_fail("%s", "too many operands");
        a->pos[a->npos++] = arg;
    }
    static const struct {
        const char *sub;
        int min, max;
    } arity[] = {{"init", 1, 1},
                 {"ls", 1, 2},
                 {"put", 3, 3},
                 {"get", 3, 3},
                 {"cat", 2, 4},
                 {"head", 2, 2},
                 {"rm", 2, REMOTE_MAX_ARGS}};
    for (size_t k = 0; k < sizeof arity / sizeof arity[0]; k++)
        if (strcmp(a->sub, arity[k].sub) == 0) {
            if (a->npos < arity[k].min || a->npos > arity[k].max)
                return usage_fail("wrong number of operands for '%s'", a->sub);
            return 0;
        }
    return usage_fail("unknown subcommand '%s' (init, ls, put, get, cat, head, rm)", a->sub);
}

/* Most bytes `put - ` and `cat` hold in memory. */
#define REMOTE_CLI_MAX_BUF (1ull << 30)

static int write_stdout(const void *buf, size_t len, remote_err *err)
{
    if (fwrite(buf, 1, len, stdout) != len || fflush(stdout) != 0) {
        snprintf(err->msg, sizeof err->msg, "writing standard output: %s", strerror(errno));
        return -EIO;
    }
    return 0;
}

/* put URL KEY -: the whole of standard input, as one buffer. */
static int put_stdin(remote_storage *rs, const char *key, remote_err *err)
{
    size_t len = 0, cap = 1 << 20;
    char *buf = malloc(cap);
    int rc = buf ? 0 : -ENOMEM;
    while (rc == 0) {
        if (len == cap) {
            char *bigger = cap < REMOTE_CLI_MAX_BUF ? realloc(buf, cap * 2) : NULL;
            if (bigger == NULL) {
                rc = cap < REMOTE_CLI_MAX_BUF ? -ENOMEM : -EFBIG;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len, stdin);
        len += n;
        if (n == 0)
            rc = ferror(stdin) ? -EIO : 1;
    }
    if (rc < 0)
        snprintf(err->msg, sizeof err->msg, "reading standard input: %s", strerror(-rc));
    else
        rc = remote_put_buf(rs, key, buf, len, err);
    free(buf);
    return rc;
}

static int cat(remote_storage *rs, const remote_args *a, remote_err *err)
{
    if (a->npos == 2) {
        void *buf;
        size_t len;
        int rc = remote_get_buf(rs, a->pos[1], REMOTE_CLI_MAX_BUF, &buf, &len, err);
        if (rc == 0)
            rc = write_stdout(buf, len, err);
        free(buf);
        return rc;
    }
    uint64_t off, len = 0;
    if (!parse_bytes(a->pos[2], &off) || (a->npos == 4 && !parse_bytes(a->pos[3], &len))) {
        snprintf(err->msg, sizeof err->msg, "bad OFFSET or LENGTH (bytes, K/M/G allowed)");
        return -EINVAL;
    }
    if (a->npos == 3) { /* from OFFSET to the end */
        bool exists;
        uint64_t size;
        int rc = remote_head(rs, a->pos[1], &exists, &size, err);
        if (rc == 0 && !exists) {
            snprintf(err->msg, sizeof err->msg, "%s: no such key in %s", a->pos[1],
                     remote_describe(rs));
            rc = -ENOENT;
        }
        if (rc != 0)
            return rc;
        len = size > off ? size - off : 0;
    }
    if (len == 0)
        return 0;
    if (len > REMOTE_CLI_MAX_BUF) {
        snprintf(err->msg, sizeof err->msg, "more than 1G to write: give a LENGTH");
        return -EFBIG;
    }
    void *buf = malloc(len);
    size_t got;
    int rc = buf ? remote_get_range(rs, a->pos[1], off, len, buf, &got, err) : -ENOMEM;
    if (rc == 0)
        rc = write_stdout(buf, got, err);
    free(buf);
    return rc;
}

static int run(remote_storage *rs, const remote_args *a, remote_err *err)
{
    const char *sub = a->sub;
    if (strcmp(sub, "init") == 0)
        return remote_init(rs, err);
    if (strcmp(sub, "put") == 0)
        return strcmp(a->pos[2], "-") == 0 ? put_stdin(rs, a->pos[1], err)
                                           : remote_put_file(rs, a->pos[1], a->pos[2], err);
    if (strcmp(sub, "cat") == 0)
        return cat(rs, a, err);
    if (strcmp(sub, "get") == 0)
        return remote_get_file(rs, a->pos[1], a->pos[2], err);
    if (strcmp(sub, "rm") == 0)
        return a->npos == 2 ? remote_delete(rs, a->pos[1], err)
                            : remote_delete_many(rs, a->pos + 1, (size_t)(a->npos - 1), err);
    if (strcmp(sub, "head") == 0) {
        bool exists;
        uint64_t size;
        int rc = remote_head(rs, a->pos[1], &exists, &size, err);
        if (rc == 0 && !exists) {
            snprintf(err->msg, sizeof err->msg, "%s: no such key in %s", a->pos[1],
                     remote_describe(rs));
            return -ENOENT;
        }
        if (rc == 0)
            printf("%llu\n", (unsigned long long)size);
        return rc;
    }
    remote_listing l;
    int rc = remote_list(rs, a->npos == 2 ? a->pos[1] : "", &l, err);
    for (size_t i = 0; rc == 0 && i < l.n; i++)
        printf("%llu\t%s\n", (unsigned long long)l.entries[i].size, l.entries[i].key);
    if (rc == 0)
        remote_listing_free(&l);
    return rc;
}

int cmd_remote(const cli_opts *o)
{
    remote_args a;
    remote_flags f;
    int rc = parse(o, &a, &f);
    if (rc != 0)
        return rc == -2 ? CLI_OK : rc;
    remote_config cfg;
    remote_err err = {{0}};
    remote_storage *rs = NULL;
    if (remote_config_from_url(a.pos[0], &cfg, &err) != 0) {
        fprintf(stderr, "strata: %s\n", err.msg);
        return CLI_FAIL;
    }
    if ((rc = apply_flags(&f, &cfg)) != 0)
        return rc;
    if (remote_open(&cfg, &rs, &err) != 0) {
        fprintf(stderr, "strata: %s\n", err.msg);
        return CLI_FAIL;
    }
    rc = run(rs, &a, &err);
    remote_close(rs);
    fflush(stdout);
    if (rc != 0) {
        fprintf(stderr, "strata: %s\n", err.msg);
        return CLI_FAIL;
    }
    return CLI_OK;
}
