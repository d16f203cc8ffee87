/*
 * remote_local.c: the local-directory backend of remote_storage.h, the
 * embedded default.  Key "a/b/c" is the file ROOT/a/b/c.
 *
 * A put writes ROOT/a/b/.strata-tmp-<random> (created exclusively), fsyncs
 * it, renames it over ROOT/a/b/c and fsyncs ROOT/a/b (durable_rename), so a
 * reader that opens the key sees the old file or the new one, whole, and a
 * crash leaves at worst a temporary file that listing skips.  Directories
 * are made on demand (each fsynced into its parent) and removed again when
 * a delete empties them, so a put can race a delete that removes its
 * directory: the put then starts over (LOCAL_RACE_RETRIES times).
 *
 * Not for: sharing a root between machines (no locking beyond what rename
 * gives) or keys that are both an object and a prefix ("a" and "a/b").
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/durable.h"
#include "net/remote_backend.h"

#define LOCAL_RACE_RETRIES 20
#define LOCAL_CHUNK (1u << 20)
#define TMP_PREFIX ".strata-tmp"

static int local_path(const remote_storage *rs, const char *key, char *out, size_t cap)
{
    if ((size_t)snprintf(out, cap, "%s/%s", rs->cfg.root, key) >= cap)
        return -ENAMETOOLONG;
    return 0;
}

/* Makes every missing directory of path from byte offset start on (path[0
 * .. start) exists), fsyncing each new one into its parent. */
static int make_dirs(char *path, size_t start)
{
    if (start >= strlen(path))
        return 0;
    for (char *p = path + start;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        int rc = 0;
        if (p > path && mkdir(path, 0755) == 0) {
            rc = durable_fsync_parent(path);
        } else if (p > path && errno == EEXIST) {
            struct stat st;
            if (stat(path, &st) != 0)
                rc = -errno;
            else if (!S_ISDIR(st.st_mode))
                rc = -EEXIST;
        } else if (p > path) {
            rc = -errno;
        }
        *p = saved;
        if (rc != 0 || saved == '\0')
            return rc;
    }
}

static int local_init(remote_storage *rs, remote_err *err)
{
    char root[sizeof rs->cfg.root];
    snprintf(root, sizeof root, "%s", rs->cfg.root);
    int rc = make_dirs(root, 1);
    if (rc != 0)
        return remote_fail(err, rc, "local init %s: %s", root, strerror(-rc));
    return 0;
}

static int root_exists(const remote_storage *rs, const char *op, remote_err *err)
{
    struct stat st;
    if (stat(rs->cfg.root, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    return remote_fail(err, -ENOENT, "local %s: root %s is not a directory (strata remote init)",
                       op, rs->cfg.root);
}

/* Copies len bytes of body into fd (from offset 0). */
static int copy_body(int fd, const remote_body *body)
{
    if (body->fd < 0)
        return durable_pwrite_all(fd, body->buf, body->len, 0);
    char *chunk = malloc(LOCAL_CHUNK);
    if (chunk == NULL)
        return -ENOMEM;
    int rc = 0;
    for (uint64_t off = 0; rc == 0 && off < body->len;) {
        size_t want = body->len - off < LOCAL_CHUNK ? body->len - off : LOCAL_CHUNK;
        ssize_t n = durable_pread_all(body->fd, chunk, want, off);
        if (n < 0)
            rc = (int)n;
        else if ((size_t)n < want)
            rc = -ENODATA; /* the source file shrank while we copied it */
        else if ((rc = durable_pwrite_all(fd, chunk, want, off)) == 0)
            off += want;
    }
    free(chunk);
    return rc;
}

/* One attempt at a put; -ENOENT when a concurrent delete removed the
 * directory under us (the caller tries again). */
static int put_once(const char *path, size_t root_len, const remote_body *body, const char **step)
{
    char dir[PATH_MAX], tmp[PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    *step = "make directories";
    int rc = make_dirs(dir, root_len);
    if (rc != 0)
        return rc;
    uint64_t r;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
        r = (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)&r;
    snprintf(tmp, sizeof tmp, "%s/" TMP_PREFIX "-%016llx", dir, (unsigned long long)r);
    *step = "create temporary file";
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    *step = "write";
    rc = copy_body(fd, body);
    if (rc == 0) {
        *step = "fsync";
        rc = durable_fsync_fd(fd);
    }
    close(fd);
    if (rc == 0) {
        *step = "rename";
        rc = durable_rename(tmp, path);
        if (rc == -EISDIR || rc == -ENOTEMPTY)
            rc = -EEXIST;
    }
    if (rc != 0)
        unlink(tmp);
    return rc == -ENOENT && strcmp(*step, "rename") == 0 ? -EIO : rc;
}

static int local_put(remote_storage *rs, const char *key, const remote_body *body, remote_err *err)
{
    char path[PATH_MAX];
    if (local_path(rs, key, path, sizeof path) != 0)
        return remote_fail(err, -ENAMETOOLONG, "local PUT %s: path too long", key);
    if (root_exists(rs, "PUT", err) != 0)
        return -ENOENT;
    const char *step = "";
    int rc = -ENOENT;
    for (int i = 0; rc == -ENOENT && i < LOCAL_RACE_RETRIES; i++)
        rc = put_once(path, strlen(rs->cfg.root) + 1, body, &step);
    if (rc == -EEXIST)
        return remote_fail(err, rc,
                           "local PUT %s: %s: the key and another key's directory "
                           "collide (\"a\" and \"a/b\" cannot both exist here)",
                           key, step);
    if (rc == -ENODATA)
        return remote_fail(err, -EIO, "local PUT %s: the source file shrank during the copy", key);
    if (rc != 0)
        return remote_fail(err, rc, "local PUT %s: %s: %s", key, step, strerror(-rc));
    return 0;
}

/* Opens key's file for reading; -ENOENT for a missing key (a directory is
 * not an object). */
static int open_object(const remote_storage *rs, const char *key, int *fd, struct stat *st)
{
    char path[PATH_MAX];
    if (local_path(rs, key, path, sizeof path) != 0)
        return -ENAMETOOLONG;
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return errno == ENOTDIR ? -ENOENT : -errno;
    if (fstat(*fd, st) != 0 || !S_ISREG(st->st_mode)) {
        int rc = S_ISDIR(st->st_mode) ? -ENOENT : -EIO;
        close(*fd);
        return rc;
    }
    return 0;
}

static int local_get(remote_storage *rs, const char *key, uint64_t off, uint64_t len,
                     const remote_sink *sink, remote_err *err)
{
    int fd;
    struct stat st;
    int rc = open_object(rs, key, &fd, &st);
    if (rc == -ENOENT)
        return remote_fail(err, rc, "local GET %s: no such key under %s", key, rs->cfg.root);
    if (rc != 0)
        return remote_fail(err, rc, "local GET %s: open: %s", key, strerror(-rc));
    uint64_t size = (uint64_t)st.st_size;
    uint64_t end = off >= size ? off : (len > size - off ? size : off + len);
    char *chunk = end > off ? malloc(LOCAL_CHUNK) : NULL;
    if (end > off && chunk == NULL)
        rc = -ENOMEM;
    while (rc == 0 && off < end) {
        size_t want = end - off < LOCAL_CHUNK ? end - off : LOCAL_CHUNK;
        ssize_t n = durable_pread_all(fd, chunk, want, off);
        if (n < 0)
            rc = (int)n;
        else if ((size_t)n < want)
            rc = -EIO; /* objects never shrink: rename replaces, never truncates */
        else if ((rc = sink->write(sink->arg, chunk, want)) == 0)
            off += want;
    }
    free(chunk);
    close(fd);
    if (rc == -EFBIG)
        return remote_fail(err, rc, "local GET %s: object of %llu bytes is larger than asked", key,
                           (unsigned long long)size);
    if (rc != 0)
        return remote_fail(err, rc, "local GET %s: %s", key, strerror(-rc));
    return 0;
}

static int local_head(remote_storage *rs, const char *key, bool *exists, uint64_t *size,
                      remote_err *err)
{
    char path[PATH_MAX];
    struct stat st;
    if (local_path(rs, key, path, sizeof path) != 0)
        return remote_fail(err, -ENAMETOOLONG, "local HEAD %s: path too long", key);
    if (stat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        return remote_fail(err, -errno, "local HEAD %s: %s", key, strerror(errno));
    }
    *exists = S_ISREG(st.st_mode);
    *size = *exists ? (uint64_t)st.st_size : 0;
    return 0;
}

/* Removes the now empty directories of path's key, deepest first, stopping
 * at the root or at the first one that is not empty. */
static void remove_empty_dirs(char *path, size_t root_len)
{
    for (;;) {
        char *slash = strrchr(path, '/');
        if (slash == NULL || (size_t)(slash - path) <= root_len)
            return;
        *slash = '\0';
        if (rmdir(path) != 0)
            return;
        /* Only tidiness: a crash before this fsync leaves an empty directory. */
        if (durable_fsync_parent(path) != 0)
            return;
    }
}

static int local_del(remote_storage *rs, const char *key, remote_err *err)
{
    char path[PATH_MAX];
    if (local_path(rs, key, path, sizeof path) != 0)
        return remote_fail(err, -ENAMETOOLONG, "local DELETE %s: path too long", key);
    if (unlink(path) != 0) {
        if (errno == ENOENT || errno == ENOTDIR || errno == EISDIR)
            return 0;
        return remote_fail(err, -errno, "local DELETE %s: %s", key, strerror(errno));
    }
    /* -ENOENT: a concurrent delete emptied and removed the directory (and
     * fsynced its parent), which makes our unlink durable as well. */
    int rc = durable_fsync_parent(path);
    if (rc != 0 && rc != -ENOENT)
        return remote_fail(err, rc, "local DELETE %s: fsync directory: %s", key, strerror(-rc));
    remove_empty_dirs(path, strlen(rs->cfg.root));
    return 0;
}

static int local_del_many(remote_storage *rs, const char *const *keys, size_t n, remote_err *err)
{
    for (size_t i = 0; i < n; i++) {
        int rc = local_del(rs, keys[i], err);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Adds every file under dir (key so far: rel, of rel_len bytes) whose name
 * at this level starts with match (NULL: all). */
static int walk(const remote_storage *rs, char *rel, size_t rel_len, const char *match,
                remote_listing *out)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%.*s", rs->cfg.root, (int)rel_len, rel) >=
        sizeof path)
        return -ENAMETOOLONG;
    DIR *d = opendir(path);
    if (d == NULL)
        return errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (errno = 0, e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        size_t nlen = strlen(name);
        if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
            strncmp(name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0)
            continue;
        if (match != NULL && strncmp(name, match, strlen(match)) != 0)
            continue;
        if (rel_len + nlen + 1 >= REMOTE_MAX_KEY + 1)
            continue; /* no key that long was ever put */
        struct stat st;
        if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT) /* deleted since readdir: not listed */
                rc = -errno;
            continue;
        }
        memcpy(rel + rel_len, name, nlen);
        if (S_ISDIR(st.st_mode)) {
            rel[rel_len + nlen] = '/';
            rc = walk(rs, rel, rel_len + nlen + 1, NULL, out);
        } else if (S_ISREG(st.st_mode)) {
            rc = remote_listing_add(out, rel, rel_len + nlen, (uint64_t)st.st_size);
        }
    }
    if (rc == 0 && errno != 0)
        rc = -errno;
    closedir(d);
    return rc;
}

static int local_list(remote_storage *rs, const char *prefix, remote_listing *out, remote_err *err)
{
    if (root_exists(rs, "LIST", err) != 0)
        return -ENOENT;
    char rel[REMOTE_MAX_KEY + 2];
    const char *slash = strrchr(prefix, '/');
    size_t dir_len = slash ? (size_t)(slash - prefix) + 1 : 0;
    memcpy(rel, prefix, dir_len);
    int rc = walk(rs, rel, dir_len, prefix + dir_len, out);
    if (rc != 0)
        return remote_fail(err, rc, "local LIST %s under %s: %s", prefix, rs->cfg.root,
                           strerror(-rc));
    return 0;
}

static void local_close(remote_storage *rs)
{
    (void)rs;
}

int remote_local_open(remote_storage *rs, remote_err *err)
{
    (void)err;
    rs->backend = NULL;
    return 0;
}

const remote_ops remote_local_ops = {
    .name = "local",
    .init = local_init,
    .put = local_put,
    .get = local_get,
    .head = local_head,
    .del = local_del,
    .del_many = local_del_many,
    .list = local_list,
    .close = local_close,
};
