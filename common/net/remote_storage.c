/*
 * remote_storage.c: the backend-neutral half of remote_storage.h: the
 * configuration from a URL and the environment, key checks, and the sinks
 * that turn a backend's byte stream into a durable file, a buffer or a
 * range.  The backends (remote_local.c, remote_s3.c) only move bytes.
 */
#include "net/remote_storage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/durable.h"
#include "net/remote_backend.h"
#include "base/strata_assert.h"

#define MIB (1024ull * 1024)

int remote_fail(remote_err *err, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    STRATA_ASSERT(rc < 0);
    return rc;
}

void remote_config_defaults(remote_config *cfg)
{
    *cfg = (remote_config){
        .multipart_threshold = 64 * MIB,
        .part_size = 16 * MIB,
        .max_attempts = 5,
        .backoff_base_ms = 200,
        .backoff_max_ms = 10000,
        .connect_timeout_ms = 5000,
        .request_timeout_ms = 300000,
        .list_page_keys = 1000,
    };
}

/* Copies src into dst[cap]; false if it does not fit. */
static bool copy_str(char *dst, size_t cap, const char *src, size_t len)
{
    if (len >= cap)
        return false;
    memcpy(dst, src, len);
    dst[len] = '\0';
    return true;
}

/* The first set variable of names (NULL-terminated) into dst, else dflt. */
static bool from_env(char *dst, size_t cap, const char *const *names, const char *dflt)
{
    for (; *names != NULL; names++) {
        const char *v = getenv(*names);
        if (v != NULL && *v != '\0')
            return copy_str(dst, cap, v, strlen(v));
    }
    return copy_str(dst, cap, dflt, strlen(dflt));
}

static int s3_config_from_env(remote_config *cfg, remote_err *err)
{
    static const char *const endpoint[] = {"STRATA_S3_ENDPOINT", NULL};
    static const char *const region[] = {"STRATA_S3_REGION", "AWS_REGION", NULL};
    static const char *const access[] = {"STRATA_S3_ACCESS_KEY", "AWS_ACCESS_KEY_ID", NULL};
    static const char *const secret[] = {"STRATA_S3_SECRET_KEY", "AWS_SECRET_ACCESS_KEY", NULL};
    if (!from_env(cfg->endpoint, sizeof cfg->endpoint, endpoint, "") ||
        !from_env(cfg->region, sizeof cfg->region, region, "us-east-1") ||
        !from_env(cfg->access_key, sizeof cfg->access_key, access, "") ||
        !from_env(cfg->secret_key, sizeof cfg->secret_key, secret, ""))
        return remote_fail(err, -EINVAL, "s3: an S3 setting from the environment is too long");
    return 0;
}

static bool bucket_name_ok(const char *b, size_t len)
{
    if (len < 3 || len > 63)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-' ||
              b[i] == '.'))
            return false;
    return b[0] != '.' && b[0] != '-' && b[len - 1] != '.' && b[len - 1] != '-';
}

static int s3_config_from_url(const char *rest, remote_config *cfg, remote_err *err)
{
    const char *slash = strchr(rest, '/');
    size_t blen = slash ? (size_t)(slash - rest) : strlen(rest);
    if (!bucket_name_ok(rest, blen))
        return remote_fail(
            err, -EINVAL, "s3: bad bucket name in s3://%s (3-63 of a-z 0-9 . -, path-style)", rest);
    copy_str(cfg->bucket, sizeof cfg->bucket, rest, blen);
    const char *prefix = slash ? slash + 1 : "";
    size_t plen = strlen(prefix);
    while (plen > 0 && prefix[plen - 1] == '/')
        plen--;
    if (plen > 0) {
        char tmp[sizeof cfg->prefix];
        if (!copy_str(tmp, sizeof tmp - 1, prefix, plen))
            return remote_fail(err, -EINVAL, "s3: prefix of s3://%s is too long", rest);
        remote_err why;
        if (remote_key_check(tmp, &why) != 0)
            return remote_fail(err, -EINVAL, "s3: bad prefix in s3://%s: %s", rest, why.msg);
        memcpy(cfg->prefix, tmp, plen);
        cfg->prefix[plen] = '/';
        cfg->prefix[plen + 1] = '\0';
    }
    return s3_config_from_env(cfg, err);
}

int remote_config_from_url(const char *url, remote_config *cfg, remote_err *err)
{
    remote_config_defaults(cfg);
    if (strncmp(url, "s3://", 5) == 0) {
        cfg->kind = REMOTE_S3;
        return s3_config_from_url(url + 5, cfg, err);
    }
    if (strncmp(url, "file://", 7) == 0) {
        const char *path = url + 7;
        size_t len = strlen(path);
        while (len > 1 && path[len - 1] == '/')
            len--;
        if (path[0] != '/')
            return remote_fail(err, -EINVAL, "local: %s: want file:///ABSOLUTE/PATH", url);
        if (!copy_str(cfg->root, sizeof cfg->root, path, len))
            return remote_fail(err, -EINVAL, "local: %s: path too long", url);
        cfg->kind = REMOTE_LOCAL;
        return 0;
    }
    return remote_fail(err, -EINVAL,
                       "remote storage URL %s: want s3://BUCKET/PREFIX or "
                       "file:///PATH",
                       url);
}

static int check_s3_config(remote_config *c, remote_err *err)
{
    size_t elen = strlen(c->endpoint);
    while (elen > 0 && c->endpoint[elen - 1] == '/')
        c->endpoint[--elen] = '\0';
    if (elen == 0)
        return remote_fail(err, -EINVAL, "s3: no endpoint (STRATA_S3_ENDPOINT or --endpoint)");
    if (strncmp(c->endpoint, "http://", 7) != 0 && strncmp(c->endpoint, "https://", 8) != 0)
        return remote_fail(err, -EINVAL, "s3: endpoint %s is not an http:// or https:// URL",
                           c->endpoint);
    if (strchr(strchr(c->endpoint, ':') + 3, '/') != NULL)
        return remote_fail(err, -EINVAL, "s3: endpoint %s has a path (want http://HOST:PORT)",
                           c->endpoint);
    if (c->access_key[0] == '\0' || c->secret_key[0] == '\0')
        return remote_fail(err, -EINVAL,
                           "s3: no credentials (STRATA_S3_ACCESS_KEY and "
                           "STRATA_S3_SECRET_KEY, or AWS_ACCESS_KEY_ID and "
                           "AWS_SECRET_ACCESS_KEY)");
    for (const char *p = c->region; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
            return remote_fail(err, -EINVAL, "s3: bad region %s", c->region);
    if (c->region[0] == '\0')
        return remote_fail(err, -EINVAL, "s3: empty region");
    if (c->part_size < 5 * MIB || c->part_size > 5 * 1024 * MIB)
        return remote_fail(err, -EINVAL, "s3: part size %llu outside 5 MiB..5 GiB",
                           (unsigned long long)c->part_size);
    if (c->multipart_threshold == 0)
        return remote_fail(err, -EINVAL, "s3: multipart threshold must be positive");
    if (c->max_attempts < 1 || c->max_attempts > 100)
        return remote_fail(err, -EINVAL, "s3: attempts %d outside 1..100", c->max_attempts);
    if (c->list_page_keys < 1 || c->list_page_keys > 1000)
        return remote_fail(err, -EINVAL, "s3: %u keys a listing page, outside 1..1000",
                           c->list_page_keys);
    if (c->backoff_base_ms > c->backoff_max_ms)
        return remote_fail(err, -EINVAL, "s3: backoff base above its maximum");
    return 0;
}

int remote_open(const remote_config *cfg, remote_storage **out, remote_err *err)
{
    *out = NULL;
    remote_storage *rs = calloc(1, sizeof *rs);
    if (rs == NULL)
        return remote_fail(err, -ENOMEM, "remote storage: out of memory");
    rs->cfg = *cfg;
    int rc;
    if (cfg->kind == REMOTE_LOCAL) {
        rs->ops = &remote_local_ops;
        snprintf(rs->describe, sizeof rs->describe, "file://%s", cfg->root);
        rc = cfg->root[0] == '/' ? remote_local_open(rs, err)
                                 : remote_fail(err, -EINVAL, "local: root is not absolute");
    } else if (cfg->kind == REMOTE_S3) {
        rs->ops = &remote_s3_ops;
        snprintf(rs->describe, sizeof rs->describe, "s3://%s/%s", cfg->bucket, cfg->prefix);
        rc = check_s3_config(&rs->cfg, err);
        if (rc == 0)
            rc = remote_s3_open(rs, err);
    } else {
        rc = remote_fail(err, -EINVAL, "remote storage: no backend configured");
    }
    if (rc != 0) {
        free(rs);
        return rc;
    }
    *out = rs;
    return 0;
}

void remote_close(remote_storage *rs)
{
    if (rs == NULL)
        return;
    rs->ops->close(rs);
    free(rs);
}

const char *remote_describe(const remote_storage *rs)
{
    return rs->describe;
}

int remote_init(remote_storage *rs, remote_err *err)
{
    return rs->ops->init(rs, err);
}

/* Length of the UTF-8 sequence at s (valid, shortest form, no surrogates),
 * 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t avail)
{
    unsigned char b = s[0];
    size_t n = b < 0x80             ? 1
               : (b & 0xE0) == 0xC0 ? 2
               : (b & 0xF0) == 0xE0 ? 3
               : (b & 0xF8) == 0xF0 ? 4
                                    : 0;
    if (n == 0 || n > avail)
        return 0;
    unsigned long cp = n == 1 ? b : b & (0x3F >> (n - 1));
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    static const unsigned long min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

/* UTF-8 without control characters. */
static int check_text(const char *s, size_t len, const char **why)
{
    for (size_t i = 0; i < len;) {
        unsigned char b = (unsigned char)s[i];
        if (b < 0x20 || b == 0x7F) {
            *why = "a control character";
            return -EINVAL;
        }
        size_t n = utf8_len((const unsigned char *)s + i, len - i);
        if (n == 0) {
            *why = "bytes that are not UTF-8";
            return -EINVAL;
        }
        i += n;
    }
    return 0;
}

/* One path component of a key or of a listing prefix's directory part. */
static int check_component(const char *c, size_t len, const char **why)
{
    if (len == 0)
        *why = "an empty component (leading, trailing or double '/')";
    else if ((len == 1 && c[0] == '.') || (len == 2 && c[0] == '.' && c[1] == '.'))
        *why = "a '.' or '..' component";
    else if (len >= 11 && memcmp(c, ".strata-tmp", 11) == 0)
        *why = "a component starting with .strata-tmp (reserved)";
    else
        return 0;
    return -EINVAL;
}

int remote_key_check(const char *key, remote_err *err)
{
    size_t len = strlen(key);
    const char *why = NULL;
    if (len == 0 || len > REMOTE_MAX_KEY)
        return remote_fail(err, -EINVAL, "key of %zu bytes (want 1..%d)", len, REMOTE_MAX_KEY);
    int rc = check_text(key, len, &why);
    for (const char *c = key; rc == 0;) {
        const char *slash = strchr(c, '/');
        size_t clen = slash ? (size_t)(slash - c) : strlen(c);
        rc = check_component(c, clen, &why);
        if (slash == NULL)
            break;
        c = slash + 1;
    }
    if (rc != 0)
        return remote_fail(err, rc, "key \"%.*s\" has %s", 200, key, why);
    return 0;
}

/* A listing prefix: "" or text whose directory part (up to the last '/')
 * is made of valid components. */
static int prefix_check(const char *prefix, remote_err *err)
{
    size_t len = strlen(prefix);
    const char *why = NULL;
    if (len > REMOTE_MAX_KEY)
        return remote_fail(err, -EINVAL, "prefix of %zu bytes (most %d)", len, REMOTE_MAX_KEY);
    int rc = check_text(prefix, len, &why);
    for (const char *c = prefix; rc == 0;) {
        const char *slash = strchr(c, '/');
        if (slash == NULL)
            break;
        rc = check_component(c, (size_t)(slash - c), &why);
        c = slash + 1;
    }
    if (rc != 0)
        return remote_fail(err, rc, "prefix \"%.*s\" has %s", 200, prefix, why);
    return 0;
}

/* The front end's own failures name the backend, the operation and key. */
static int key_ok(remote_storage *rs, const char *op, const char *key, remote_err *err)
{
    remote_err why;
    if (remote_key_check(key, &why) == 0)
        return 0;
    return remote_fail(err, -EINVAL, "%s %s %s: %s", rs->ops->name, op, rs->describe, why.msg);
}

int remote_put_file(remote_storage *rs, const char *key, const char *path, remote_err *err)
{
    if (key_ok(rs, "PUT", key, err) != 0)
        return -EINVAL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return remote_fail(err, -errno, "%s PUT %s: open %s: %s", rs->ops->name, key, path,
                           strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = remote_fail(err, -errno, "%s PUT %s: stat %s: %s", rs->ops->name, key, path,
                         strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = remote_fail(err, -EINVAL, "%s PUT %s: %s is not a regular file", rs->ops->name, key,
                         path);
    if (rc == 0) {
        remote_body body = {.fd = fd, .len = (uint64_t)st.st_size};
        rc = rs->ops->put(rs, key, &body, err);
    }
    close(fd);
    return rc;
}

int remote_put_buf(remote_storage *rs, const char *key, const void *data, size_t len,
                   remote_err *err)
{
    if (key_ok(rs, "PUT", key, err) != 0)
        return -EINVAL;
    STRATA_ASSERT(data != NULL || len == 0);
    remote_body body = {.fd = -1, .buf = data, .len = len};
    return rs->ops->put(rs, key, &body, err);
}

/* A sink that writes a file from offset 0. */
typedef struct fd_sink {
    int fd;
    uint64_t off;
} fd_sink;

static int fd_sink_write(void *arg, const void *data, size_t len)
{
    fd_sink *s = arg;
    int rc = durable_pwrite_all(s->fd, data, len, s->off);
    if (rc == 0)
        s->off += len;
    return rc;
}

static int fd_sink_reset(void *arg)
{
    fd_sink *s = arg;
    s->off = 0;
    return ftruncate(s->fd, 0) == 0 ? 0 : -errno;
}

int remote_get_file(remote_storage *rs, const char *key, const char *path, remote_err *err)
{
    if (key_ok(rs, "GET", key, err) != 0)
        return -EINVAL;
    char tmp[4096 + 8];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return remote_fail(err, -ENAMETOOLONG, "%s GET %s: path too long", rs->ops->name, key);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return remote_fail(err, -errno, "%s GET %s: create %s: %s", rs->ops->name, key, tmp,
                           strerror(errno));
    fd_sink s = {.fd = fd};
    remote_sink sink = {fd_sink_write, fd_sink_reset, &s};
    int rc = rs->ops->get(rs, key, 0, REMOTE_TO_END, &sink, err);
    if (rc == 0 && (rc = durable_fsync_fd(fd)) != 0)
        remote_fail(err, rc, "%s GET %s: fsync %s: %s", rs->ops->name, key, tmp, strerror(-rc));
    close(fd);
    if (rc == 0 && (rc = durable_rename(tmp, path)) != 0)
        remote_fail(err, rc, "%s GET %s: rename to %s: %s", rs->ops->name, key, path,
                    strerror(-rc));
    if (rc != 0)
        unlink(tmp);
    return rc;
}

/* A sink into a growing malloc'd buffer of at most max bytes. */
typedef struct buf_sink {
    char *buf;
    size_t len, cap, max;
} buf_sink;

static int buf_sink_write(void *arg, const void *data, size_t len)
{
    buf_sink *s = arg;
    if (len > s->max - s->len)
        return -EFBIG;
    if (s->len + len > s->cap) {
        size_t cap = s->cap ? s->cap : 64 * 1024;
        while (cap < s->len + len)
            cap = cap > s->max / 2 ? s->max : cap * 2;
        char *buf = realloc(s->buf, cap);
        if (buf == NULL)
            return -ENOMEM;
        s->buf = buf;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, data, len);
    s->len += len;
    return 0;
}

static int buf_sink_reset(void *arg)
{
    ((buf_sink *)arg)->len = 0;
    return 0;
}

int remote_get_buf(remote_storage *rs, const char *key, size_t max_len, void **out, size_t *out_len,
                   remote_err *err)
{
    *out = NULL;
    *out_len = 0;
    if (key_ok(rs, "GET", key, err) != 0)
        return -EINVAL;
    buf_sink s = {.max = max_len};
    remote_sink sink = {buf_sink_write, buf_sink_reset, &s};
    int rc = rs->ops->get(rs, key, 0, REMOTE_TO_END, &sink, err);
    if (rc == 0 && s.buf == NULL && (s.buf = malloc(1)) == NULL)
        rc = remote_fail(err, -ENOMEM, "%s GET %s: out of memory", rs->ops->name, key);
    if (rc != 0) {
        free(s.buf);
        return rc;
    }
    *out = s.buf;
    *out_len = s.len;
    return 0;
}

/* A sink into the caller's fixed buffer; more than asked is a bad answer. */
typedef struct range_sink {
    char *buf;
    size_t len, cap;
} range_sink;

static int range_sink_write(void *arg, const void *data, size_t len)
{
    range_sink *s = arg;
    if (len > s->cap - s->len)
        return -EPROTO;
    memcpy(s->buf + s->len, data, len);
    s->len += len;
    return 0;
}

static int range_sink_reset(void *arg)
{
    ((range_sink *)arg)->len = 0;
    return 0;
}

int remote_get_range(remote_storage *rs, const char *key, uint64_t off, size_t len, void *buf,
                     size_t *got, remote_err *err)
{
    *got = 0;
    if (key_ok(rs, "GET", key, err) != 0)
        return -EINVAL;
    if (len == 0)
        return 0;
    if (off > UINT64_MAX - len)
        return remote_fail(err, -EINVAL, "%s GET %s: range past 2^64", rs->ops->name, key);
    range_sink s = {.buf = buf, .cap = len};
    remote_sink sink = {range_sink_write, range_sink_reset, &s};
    int rc = rs->ops->get(rs, key, off, len, &sink, err);
    if (rc == 0)
        *got = s.len;
    return rc;
}

int remote_head(remote_storage *rs, const char *key, bool *exists, uint64_t *size, remote_err *err)
{
    *exists = false;
    *size = 0;
    if (key_ok(rs, "HEAD", key, err) != 0)
        return -EINVAL;
    return rs->ops->head(rs, key, exists, size, err);
}

int remote_delete(remote_storage *rs, const char *key, remote_err *err)
{
    if (key_ok(rs, "DELETE", key, err) != 0)
        return -EINVAL;
    return rs->ops->del(rs, key, err);
}

int remote_delete_many(remote_storage *rs, const char *const *keys, size_t n, remote_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (key_ok(rs, "DELETE", keys[i], err) != 0)
            return -EINVAL;
    return n == 0 ? 0 : rs->ops->del_many(rs, keys, n, err);
}

int remote_listing_add(remote_listing *l, const char *key, size_t key_len, uint64_t size)
{
    /* Capacity is 16, then the next power of two: n alone records it. */
    if (l->n == 0 || (l->n >= 16 && (l->n & (l->n - 1)) == 0)) {
        size_t cap = l->n == 0 ? 16 : l->n * 2;
        remote_listing_entry *e = realloc(l->entries, cap * sizeof *e);
        if (e == NULL)
            return -ENOMEM;
        l->entries = e;
    }
    char *copy = malloc(key_len + 1);
    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, key, key_len);
    copy[key_len] = '\0';
    l->entries[l->n++] = (remote_listing_entry){copy, size};
    return 0;
}

static int entry_cmp(const void *a, const void *b)
{
    return strcmp(((const remote_listing_entry *)a)->key, ((const remote_listing_entry *)b)->key);
}

int remote_list(remote_storage *rs, const char *prefix, remote_listing *out, remote_err *err)
{
    *out = (remote_listing){0};
    remote_err why;
    if (prefix_check(prefix, &why) != 0)
        return remote_fail(err, -EINVAL, "%s LIST %s: %s", rs->ops->name, rs->describe, why.msg);
    int rc = rs->ops->list(rs, prefix, out, err);
    if (rc != 0) {
        remote_listing_free(out);
        return rc;
    }
    if (out->n > 1)
        qsort(out->entries, out->n, sizeof out->entries[0], entry_cmp);
    return 0;
}

void remote_listing_free(remote_listing *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->entries[i].key);
    free(l->entries);
    *l = (remote_listing){0};
}
