/*
 * durable.h: the one way Strata makes a file change survive a crash.
 *
 * For small files that must change atomically (control files, port files):
 * write a temporary file next to the target, fsync it, rename it over the
 * target and fsync the directory, so a crash at any instruction leaves either
 * the old content or the new one, never a mix.  Also: fsync of a directory,
 * a durable rename, the data-directory lock that keeps two daemons from
 * sharing one directory, and the write-all / read-all / fsync loops every
 * synchronous file write in Strata goes through (WAL segment creation and
 * truncation included), and mkdir -p / rm -rf of Strata's own directories.
 *
 * Not for streaming data (WAL segments go through common/net/uring.h) and not a
 * cache: every call does its syscalls synchronously and blocks the caller.
 *
 * Every function returns 0 on success or a negative errno value; nothing
 * here logs, callers decide how to report.  The result may not be dropped
 * (STRATA_MUST_CHECK, common/base/must_check.h).  EINTR and short writes are
 * retried internally.
 */
#ifndef STRATA_COMMON_DURABLE_H
#define STRATA_COMMON_DURABLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/must_check.h"

/*
 * Replaces path with exactly len bytes of data: writes "<path>.tmp", fsyncs
 * it, renames it to path and fsyncs path's directory.  On failure path still
 * holds its previous content (or does not exist) and the temporary file is
 * removed.  A leftover "<path>.tmp" (a crash) is unlinked first, never
 * written through: the new file is created with O_EXCL|O_NOFOLLOW, so it
 * gets mode (less the umask) and a symlink there is not followed.
 */
STRATA_MUST_CHECK int durable_write_file(const char *path, const void *data, size_t len,
                                         mode_t mode);

/* Reads the whole file into a malloc'd buffer (caller frees *out); fails with
 * -EFBIG if it is larger than max_len. */
STRATA_MUST_CHECK int durable_read_file(const char *path, size_t max_len, void **out,
                                        size_t *out_len);

/*
 * Writes all len bytes of buf at offset off of fd (pwrite until done): a
 * short write is continued, EINTR retried, a write of 0 bytes is -EIO.  Does
 * not sync: follow with durable_fsync_fd or durable_fdatasync_fd.
 */
STRATA_MUST_CHECK int durable_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);

/*
 * Reads up to len bytes at offset off of fd into buf, continuing short reads
 * and retrying EINTR; returns the bytes read (fewer than len only at end of
 * file) or a negative errno.
 */
STRATA_MUST_CHECK ssize_t durable_pread_all(int fd, void *buf, size_t len, uint64_t off);

/* fsync(2) / fdatasync(2) of fd, retried on EINTR. */
STRATA_MUST_CHECK int durable_fsync_fd(int fd);
STRATA_MUST_CHECK int durable_fdatasync_fd(int fd);

/* fsyncs the directory dir itself (its entries: creations, renames, unlinks). */
STRATA_MUST_CHECK int durable_fsync_dir(const char *dir);

/* fsyncs the directory that contains path. */
STRATA_MUST_CHECK int durable_fsync_parent(const char *path);

/* fsyncs the file from, renames it to to, fsyncs the directory of to. */
STRATA_MUST_CHECK int durable_rename(const char *from, const char *to);

/* Unlinks path and fsyncs its directory; a missing file is success. */
STRATA_MUST_CHECK int durable_unlink(const char *path);

/*
 * Takes an exclusive lock on "<dir>/<name>" (created if missing) and writes
 * our pid into it.  Returns the open descriptor (>= 0) that holds the lock
 * until durable_unlock_dir closes it, -EWOULDBLOCK when another process (or
 * another descriptor in this one) still holds it after about a second, or
 * another negative errno.
 */
STRATA_MUST_CHECK int durable_lock_dir(const char *dir, const char *name);

/* Releases a lock taken by durable_lock_dir (closes fd; the file stays). */
void durable_unlock_dir(int fd);

/*
 * mkdir -p: creates path and every missing directory above it with mode, and
 * fsyncs the parent of each directory it created, so the new entries survive
 * a crash.  Directories that exist already are success; a path that exists
 * as something else is -ENOTDIR.
 */
STRATA_MUST_CHECK int durable_mkdir_p(const char *path, mode_t mode);

/*
 * rm -rf path: removes the tree depth first without following symlinks,
 * then fsyncs path's parent.  A missing path is success; a failure to remove
 * an entry is reported (the first errno) after the walk has removed what it
 * could.  Only for Strata's own directories.
 */
STRATA_MUST_CHECK int durable_remove_tree(const char *path);

#endif
