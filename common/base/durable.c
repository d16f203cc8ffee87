/*
 * durable.c: atomic file replacement, directory fsync, data-directory lock,
 * mkdir -p and rm -rf.
 *
 * See durable.h for the contract.  Everything is synchronous; this file
 * never touches the event loop and keeps no state between calls.
 */
#include "base/durable.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int durable_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            return -EIO;
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

ssize_t durable_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, p + got, len - got, (off_t)(off + got));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break; /* end of file */
        got += (size_t)n;
    }
    return (ssize_t)got;
}

int durable_fsync_fd(int fd)
{
    while (fsync(fd) != 0) {
        if (errno != EINTR)
            return -errno;
    }
    return 0;
}

int durable_fdatasync_fd(int fd)
{
    while (fdatasync(fd) != 0) {
        if (errno != EINTR)
            return -errno;
    }
    return 0;
}

int durable_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = durable_fsync_fd(fd);
    close(fd);
    return rc;
}

/* Copies path's directory part into buf ("." when there is none). */
static int parent_of(const char *path, char *buf, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL) {
        if (cap < 2)
            return -ENAMETOOLONG;
        strcpy(buf, ".");
        return 0;
    }
    size_t n = (size_t)(slash - path);
    if (n == 0)
        n = 1; /* "/file" lives in "/" */
    if (n >= cap)
        return -ENAMETOOLONG;
    memcpy(buf, path, n);
    buf[n] = '\0';
    return 0;
}

int durable_fsync_parent(const char *path)
{
    char dir[PATH_MAX];
    int rc = parent_of(path, dir, sizeof dir);
    if (rc != 0)
        return rc;
    return durable_fsync_dir(dir);
}

int durable_write_file(const char *path, const void *data, size_t len, mode_t mode)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return -ENAMETOOLONG;
    /* A temporary file left by a crash is removed, not reused: opened with
     * O_TRUNC it would keep its mode (an auth file written 0600 could stay
     * readable), and a symlink planted there would be followed and the file
     * it names overwritten.  unlink() removes a link itself; O_EXCL and
     * O_NOFOLLOW refuse whatever appears in between. */
    if (unlink(tmp) != 0 && errno != ENOENT)
        return -errno;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0)
        return -errno;
    int rc = durable_pwrite_all(fd, data, len, 0);
    if (rc == 0)
        rc = durable_fsync_fd(fd);
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc != 0) {
        unlink(tmp);
        return rc;
    }
    return durable_fsync_parent(path);
}

int durable_read_file(const char *path, size_t max_len, void **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    if (st.st_size < 0 || (size_t)st.st_size > max_len) {
        close(fd);
        return -EFBIG;
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size > 0 ? size : 1);
    if (buf == NULL) {
        close(fd);
        return -ENOMEM;
    }
    ssize_t got = durable_pread_all(fd, buf, size, 0); /* short if it shrank under us */
    close(fd);
    if (got < 0) {
        free(buf);
        return (int)got;
    }
    *out = buf;
    *out_len = (size_t)got;
    return 0;
}

int durable_rename(const char *from, const char *to)
{
    int fd = open(from, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = durable_fsync_fd(fd);
    close(fd);
    if (rc != 0)
        return rc;
    if (rename(from, to) != 0)
        return -errno;
    return durable_fsync_parent(to);
}

int durable_unlink(const char *path)
{
    if (unlink(path) != 0) {
        if (errno == ENOENT)
            return 0;
        return -errno;
    }
    return durable_fsync_parent(path);
}

enum { LOCK_RETRIES = 100, LOCK_RETRY_US = 10000 };

int durable_lock_dir(const char *dir, const char *name)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return -ENAMETOOLONG;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    /* flock locks belong to the open file description, so a second
     * durable_lock_dir in the same process is refused too.  A child that
     * another thread forked holds the description until its exec closes it
     * (O_CLOEXEC): a lock just released by its owner can look taken for that
     * moment, so EWOULDBLOCK is believed only after a second of retries. */
    int tries = 0;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EINTR)
            continue;
        if (errno == EWOULDBLOCK && ++tries < LOCK_RETRIES) {
            usleep(LOCK_RETRY_US);
            continue;
        }
        int rc = errno == EWOULDBLOCK ? -EWOULDBLOCK : -errno;
        close(fd);
        return rc;
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    assert(n > 0 && (size_t)n < sizeof pid);
    int rc = 0;
    if (ftruncate(fd, 0) != 0)
        rc = -errno;
    if (rc == 0 && pwrite(fd, pid, (size_t)n, 0) != n)
        rc = -EIO;
    if (rc != 0) {
        close(fd);
        return rc;
    }
    return fd;
}

void durable_unlock_dir(int fd)
{
    if (fd >= 0)
        close(fd);
}

int durable_mkdir_p(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf)
        return -ENAMETOOLONG;
    memcpy(buf, path, len + 1);
    while (len > 1 && buf[len - 1] == '/')
        buf[--len] = '\0';
    /* Each prefix ending before a '/', then the whole path. */
    for (char *p = buf + 1;; p++) {
        bool last = *p == '\0';
        if (!last && *p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) == 0) {
            int rc = durable_fsync_parent(buf);
            if (rc != 0)
                return rc;
        } else if (errno != EEXIST) {
            return -errno;
        }
        if (last) {
            struct stat st;
            if (stat(buf, &st) != 0)
                return -errno;
            return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
        }
        *p = '/';
    }
}

/* nftw passes no user pointer: the first error of the walk in this thread. */
static __thread int remove_tree_errno;

static int remove_tree_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)type;
    (void)ftw;
    if (remove(path) != 0 && errno != ENOENT && remove_tree_errno == 0)
        remove_tree_errno = errno;
    return 0;
}

int durable_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -errno;
    remove_tree_errno = 0;
    if (nftw(path, remove_tree_entry, 16, FTW_DEPTH | FTW_PHYS) != 0 && remove_tree_errno == 0)
        remove_tree_errno = errno;
    if (remove_tree_errno != 0)
        return -remove_tree_errno;
    return durable_fsync_parent(path);
}
