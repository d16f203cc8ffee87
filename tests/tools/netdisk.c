/*
 * strata-netdisk: a FUSE passthrough filesystem that behaves like a cloud
 * block volume (a network disk), for bench/constrained.py's (n) and (c)
 * setups, and a disk that fails on demand for the tests.  A test and
 * benchmark tool, not for operators.
 *
 *   strata-netdisk --backing DIR [--latency-us L] [--iops N] [--mbps M]
 *                  [--stats FILE] [--user NAME] [--fail-when FILE] MOUNTPOINT
 *
 * Every file operation is passed to the same path under DIR.  The kernel's
 * page cache sits above the mount as it sits above a block device (the
 * mount is kernel_cache + writeback_cache), so only what a block device
 * would see reaches this program: reads that miss the page cache, dirty
 * pages written back (by the kernel's flusher, or pushed out by an fsync).
 * Each of those is one IO of the simulated volume and costs what a volume
 * charges:
 *
 *   - a round trip of --latency-us microseconds (default 1000);
 *   - a slot under the --iops limit (default 3000 per second, reads and
 *     writes together) and --mbps MB/s of transfer (default 125), both as
 *     a device clock with no credit for idle time (no bursts).
 *
 * An fsync waits for the writes it pushed out and for the backing file's
 * own fsync, and costs nothing more: a cloud volume acknowledges a write
 * once it is durable, so its cache flush is free.  (A commit of PostgreSQL
 * on the volume therefore costs one write IO of its WAL pages.)
 *
 * Operations run on a pool of threads, so IOs overlap like a volume's
 * queue.  Metadata operations (lookup, create, rename, ...) cost nothing,
 * as a filesystem's journal batches them until the next fsync.
 *
 * --stats FILE: counters rewritten (write to FILE.tmp, rename) whenever
 * they changed, at most every 100 ms, and at exit:
 *   reads R read_bytes B writes W write_bytes B fsyncs F wait_us U failed X
 * (wait_us: the simulated time the reads and writes spent, latency and
 * queueing; failed: IOs failed on purpose, --fail-when.)
 *
 * --fail-when FILE: while FILE exists, every write that reaches the volume
 * and every fsync fails with EIO, as a dying disk's do (reads still work).
 * The program under test sees it where it would see a real one: a write
 * into the page cache succeeds, and the writeback the next fsync pushes
 * out fails, so the fsync reports EIO.  Removing FILE heals the disk; what
 * the kernel dropped meanwhile stays lost, so remount before trusting the
 * page cache again (tests/integration/test_safekeeper_disk_failure.py).
 *
 * Mounting needs root; with --user the program then runs as that user, so
 * files are created with its ownership (PostgreSQL checks that its data
 * directory belongs to it).  The mount has allow_other and
 * default_permissions.  It stays in the foreground and exits when the
 * mount is unmounted (umount MOUNTPOINT) or on SIGINT/SIGTERM.
 */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 12)

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef struct netdisk_opts {
    const char *backing;
    const char *mountpoint;
    const char *stats_path;
    const char *user;
    long latency_us;
    long iops;
    long mbps;
    const char *fail_when;
} netdisk_opts;

static netdisk_opts opts = {.latency_us = 1000, .iops = 3000, .mbps = 125};
static int backing_fd = -1; /* every path is resolved relative to this */

/* -- the simulated volume ------------------------------------------------ */

static pthread_mutex_t device_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t iops_free_ns;  /* the IOPS clock: when the next IO may start */
static int64_t bytes_free_ns; /* the bandwidth clock */

static _Atomic uint64_t n_reads, n_read_bytes, n_writes, n_write_bytes, n_fsyncs, n_wait_us;
static _Atomic uint64_t n_changes;
static _Atomic uint64_t n_failed; /* IOs failed on purpose (--fail-when) */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_until_ns(int64_t t)
{
    struct timespec ts = {.tv_sec = t / 1000000000, .tv_nsec = t % 1000000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* One IO of `bytes` bytes, begun at t0: waits until the volume would have
 * completed it: its start under the IOPS and bandwidth clocks, the round
 * trip and its transfer time. */
static void volume_io(int64_t t0, size_t bytes)
{
    int64_t per_io = 1000000000 / opts.iops;
    int64_t transfer = (int64_t)((double)bytes * 1e9 / ((double)opts.mbps * 1e6));
    pthread_mutex_lock(&device_lock);
    int64_t start = t0;
    if (iops_free_ns > start)
        start = iops_free_ns;
    if (bytes_free_ns > start)
        start = bytes_free_ns;
    iops_free_ns = start + per_io;
    bytes_free_ns = start + transfer;
    pthread_mutex_unlock(&device_lock);
    int64_t done = start + opts.latency_us * 1000 + transfer;
    sleep_until_ns(done);
    atomic_fetch_add(&n_wait_us, (uint64_t)((done - t0) / 1000));
    atomic_fetch_add(&n_changes, 1);
}

static void write_stats(void)
{
    if (opts.stats_path == NULL)
        return;
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s.tmp", opts.stats_path);
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return;
    fprintf(f,
            "reads %" PRIu64 " read_bytes %" PRIu64 " writes %" PRIu64 " write_bytes %" PRIu64
            " fsyncs %" PRIu64 " wait_us %" PRIu64 " failed %" PRIu64 "\n",
            atomic_load(&n_reads), atomic_load(&n_read_bytes), atomic_load(&n_writes),
            atomic_load(&n_write_bytes), atomic_load(&n_fsyncs), atomic_load(&n_wait_us),
            atomic_load(&n_failed));
    if (fclose(f) == 0)
        rename(tmp, opts.stats_path);
}

static void *stats_thread(void *arg)
{
    (void)arg;
    uint64_t seen = UINT64_MAX;
    for (;;) {
        uint64_t c = atomic_load(&n_changes);
        if (c != seen) {
            write_stats();
            seen = c;
        }
        usleep(100000);
    }
    return NULL;
}

/* Whether the disk is failing now (--fail-when): then the IO fails with
 * EIO, counted, and the first failure is logged. */
static bool failing(void)
{
    if (opts.fail_when == NULL || access(opts.fail_when, F_OK) != 0)
        return false;
    if (atomic_fetch_add(&n_failed, 1) == 0)
        fprintf(stderr, "strata-netdisk: %s exists: failing writes and fsyncs with EIO\n",
                opts.fail_when);
    atomic_fetch_add(&n_changes, 1);
    return true;
}

/* -- paths --------------------------------------------------------------- */

/* FUSE paths start with '/'; under the backing directory they are relative
 * ("." for the root).  Operations on an open handle may get no path (NULL,
 * nullpath_ok) and use the handle; were one to reach here, "" fails with
 * ENOENT in every *at call. */
static const char *rel(const char *path)
{
    if (path == NULL)
        return "";
    while (*path == '/')
        path++;
    return *path ? path : ".";
}

/* What fi->fh points to: the backing descriptor of an open file or
 * directory (and the directory's stream). */
typedef struct nd_handle {
    int fd;
    DIR *dir;
} nd_handle;

static nd_handle *handle_of(struct fuse_file_info *fi)
{
    return (nd_handle *)(uintptr_t)fi->fh;
}

static int fd_of(struct fuse_file_info *fi)
{
    return handle_of(fi)->fd;
}

/* Takes fd (and dir, whose descriptor it is) into a new handle in fi. */
static int set_handle(struct fuse_file_info *fi, int fd, DIR *dir)
{
    nd_handle *h = malloc(sizeof *h);
    if (h == NULL) {
        if (dir != NULL)
            closedir(dir);
        else
            close(fd);
        return -ENOMEM;
    }
    h->fd = fd;
    h->dir = dir;
    fi->fh = (uint64_t)(uintptr_t)h;
    return 0;
}

/* -- operations ---------------------------------------------------------- */

static void *nd_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    /* Every change goes through this mount, so the kernel may keep pages
     * and attributes as a block device's filesystem would. */
    cfg->use_ino = 1;
    cfg->kernel_cache = 1;
    /* libfuse's default for a file unlinked while open: it is renamed to
     * .fuse_hidden* until closed (so a directory holding one cannot be
     * removed meanwhile).  hard_remove would drop it at once, but then the
     * kernel's time update at its close has no path and close fails with
     * EIO, which PostgreSQL turns into a PANIC.  Handles need no path. */
    cfg->nullpath_ok = 1;
    cfg->entry_timeout = 60;
    cfg->attr_timeout = 60;
    cfg->negative_timeout = 0;
    if (conn->capable & FUSE_CAP_WRITEBACK_CACHE)
        conn->want |= FUSE_CAP_WRITEBACK_CACHE;
    return NULL;
}

static int nd_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
    int rc =
        fi != NULL ? fstat(fd_of(fi), st) : fstatat(backing_fd, rel(path), st, AT_SYMLINK_NOFOLLOW);
    return rc == 0 ? 0 : -errno;
}

static int nd_access(const char *path, int mask)
{
    return faccessat(backing_fd, rel(path), mask, AT_EACCESS) == 0 ? 0 : -errno;
}

static int nd_readlink(const char *path, char *buf, size_t size)
{
    ssize_t n = readlinkat(backing_fd, rel(path), buf, size - 1);
    if (n < 0)
        return -errno;
    buf[n] = '\0';
    return 0;
}

static int nd_opendir(const char *path, struct fuse_file_info *fi)
{
    int fd = openat(backing_fd, rel(path), O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        int e = errno;
        close(fd);
        return -e;
    }
    return set_handle(fi, fd, d);
}

static int nd_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
    (void)path;
    (void)flags;
    DIR *d = handle_of(fi)->dir;
    if (off == 0)
        rewinddir(d);
    else
        seekdir(d, off);
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d)) != NULL) {
        struct stat st = {.st_ino = e->d_ino, .st_mode = (mode_t)(DTTOIF(e->d_type))};
        if (fill(buf, e->d_name, &st, telldir(d), 0) != 0)
            return 0;
    }
    return errno != 0 ? -errno : 0;
}

static int nd_releasedir(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    closedir(handle_of(fi)->dir);
    free(handle_of(fi));
    return 0;
}

static int nd_mknod(const char *path, mode_t mode, dev_t rdev)
{
    return mknodat(backing_fd, rel(path), mode, rdev) == 0 ? 0 : -errno;
}

static int nd_mkdir(const char *path, mode_t mode)
{
    return mkdirat(backing_fd, rel(path), mode) == 0 ? 0 : -errno;
}

static int nd_unlink(const char *path)
{
    return unlinkat(backing_fd, rel(path), 0) == 0 ? 0 : -errno;
}

static int nd_rmdir(const char *path)
{
    return unlinkat(backing_fd, rel(path), AT_REMOVEDIR) == 0 ? 0 : -errno;
}

static int nd_symlink(const char *target, const char *path)
{
    return symlinkat(target, backing_fd, rel(path)) == 0 ? 0 : -errno;
}

static int nd_rename(const char *from, const char *to, unsigned int flags)
{
    return renameat2(backing_fd, rel(from), backing_fd, rel(to), flags) == 0 ? 0 : -errno;
}

static int nd_link(const char *from, const char *to)
{
    return linkat(backing_fd, rel(from), backing_fd, rel(to), 0) == 0 ? 0 : -errno;
}

static int nd_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    int rc = fi != NULL ? fchmod(fd_of(fi), mode) : fchmodat(backing_fd, rel(path), mode, 0);
    return rc == 0 ? 0 : -errno;
}

static int nd_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
    int rc = fi != NULL ? fchown(fd_of(fi), uid, gid)
                        : fchownat(backing_fd, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW);
    return rc == 0 ? 0 : -errno;
}

static int nd_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
    if (fi != NULL)
        return ftruncate(fd_of(fi), size) == 0 ? 0 : -errno;
    int fd = openat(backing_fd, rel(path), O_WRONLY);
    if (fd < 0)
        return -errno;
    int rc = ftruncate(fd, size) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

static int nd_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
    int rc = fi != NULL ? futimens(fd_of(fi), tv)
                        : utimensat(backing_fd, rel(path), tv, AT_SYMLINK_NOFOLLOW);
    return rc == 0 ? 0 : -errno;
}

/* With the writeback cache the kernel reads pages of files opened
 * write-only and keeps the file size itself, so write-only opens become
 * read-write and O_APPEND is the kernel's business. */
static int open_flags(int flags)
{
    if ((flags & O_ACCMODE) == O_WRONLY)
        flags = (flags & ~O_ACCMODE) | O_RDWR;
    return flags & ~O_APPEND;
}

static int nd_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    int fd = openat(backing_fd, rel(path), open_flags(fi->flags) | O_CREAT, mode);
    if (fd < 0)
        return -errno;
    return set_handle(fi, fd, NULL);
}

static int nd_open(const char *path, struct fuse_file_info *fi)
{
    int fd = openat(backing_fd, rel(path), open_flags(fi->flags));
    if (fd < 0)
        return -errno;
    fi->keep_cache = 1;
    return set_handle(fi, fd, NULL);
}

static int nd_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)path;
    int64_t t0 = now_ns();
    ssize_t n = pread(fd_of(fi), buf, size, off);
    if (n < 0)
        return -errno;
    volume_io(t0, (size_t)n);
    atomic_fetch_add(&n_reads, 1);
    atomic_fetch_add(&n_read_bytes, (uint64_t)n);
    return (int)n;
}

static int nd_write(const char *path, const char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    (void)path;
    if (failing())
        return -EIO;
    int64_t t0 = now_ns();
    ssize_t n = pwrite(fd_of(fi), buf, size, off);
    if (n < 0)
        return -errno;
    volume_io(t0, (size_t)n);
    atomic_fetch_add(&n_writes, 1);
    atomic_fetch_add(&n_write_bytes, (uint64_t)n);
    return (int)n;
}

static int nd_statfs(const char *path, struct statvfs *st)
{
    (void)path;
    return fstatvfs(backing_fd, st) == 0 ? 0 : -errno;
}

static int nd_flush(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    (void)fi;
    return 0;
}

static int nd_release(const char *path, struct fuse_file_info *fi)
{
    (void)path;
    close(fd_of(fi));
    free(handle_of(fi));
    return 0;
}

/* The kernel sent the dirty pages (each a volume IO) before this. */
static int sync_one(int fd, int datasync)
{
    if (failing())
        return -EIO;
    int rc = datasync ? fdatasync(fd) : fsync(fd);
    if (rc != 0)
        return -errno;
    atomic_fetch_add(&n_fsyncs, 1);
    atomic_fetch_add(&n_changes, 1);
    return 0;
}

static int nd_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
    (void)path;
    return sync_one(fd_of(fi), datasync);
}

static int nd_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
    (void)path;
    return sync_one(fd_of(fi), datasync);
}

static int nd_fallocate(const char *path, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
    (void)path;
    return fallocate(fd_of(fi), mode, off, len) == 0 ? 0 : -errno;
}

static const struct fuse_operations netdisk_ops = {
    .init = nd_init,
    .getattr = nd_getattr,
    .access = nd_access,
    .readlink = nd_readlink,
    .opendir = nd_opendir,
    .readdir = nd_readdir,
    .releasedir = nd_releasedir,
    .mknod = nd_mknod,
    .mkdir = nd_mkdir,
    .unlink = nd_unlink,
    .rmdir = nd_rmdir,
    .symlink = nd_symlink,
    .rename = nd_rename,
    .link = nd_link,
    .chmod = nd_chmod,
    .chown = nd_chown,
    .truncate = nd_truncate,
    .utimens = nd_utimens,
    .create = nd_create,
    .open = nd_open,
    .read = nd_read,
    .write = nd_write,
    .statfs = nd_statfs,
    .flush = nd_flush,
    .release = nd_release,
    .fsync = nd_fsync,
    .fsyncdir = nd_fsyncdir,
    .fallocate = nd_fallocate,
};

/* -- main ---------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr, "usage: strata-netdisk --backing DIR [--latency-us L] [--iops N] "
                    "[--mbps M] [--stats FILE] [--user NAME] [--fail-when FILE] MOUNTPOINT\n");
    exit(2);
}

static long positive(const char *name, const char *s, long min)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min) {
        fprintf(stderr, "strata-netdisk: %s must be an integer >= %ld, not \"%s\"\n", name, min, s);
        exit(2);
    }
    return v;
}

static void parse_args(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"backing", required_argument, NULL, 'b'},   {"latency-us", required_argument, NULL, 'l'},
        {"iops", required_argument, NULL, 'i'},      {"mbps", required_argument, NULL, 'm'},
        {"stats", required_argument, NULL, 's'},     {"user", required_argument, NULL, 'u'},
        {"fail-when", required_argument, NULL, 'f'}, {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            opts.backing = optarg;
            break;
        case 'l':
            opts.latency_us = positive("--latency-us", optarg, 0);
            break;
        case 'i':
            opts.iops = positive("--iops", optarg, 1);
            break;
        case 'm':
            opts.mbps = positive("--mbps", optarg, 1);
            break;
        case 's':
            opts.stats_path = optarg;
            break;
        case 'u':
            opts.user = optarg;
            break;
        case 'f':
            opts.fail_when = optarg;
            break;
        default:
            usage();
        }
    }
    if (opts.backing == NULL || optind != argc - 1)
        usage();
    opts.mountpoint = argv[optind];
}

/* After the mount: the rest runs as --user, so files get its ownership. */
static int drop_privileges(void)
{
    if (opts.user == NULL)
        return 0;
    struct passwd *pw = getpwnam(opts.user);
    if (pw == NULL) {
        fprintf(stderr, "strata-netdisk: no user %s\n", opts.user);
        return -1;
    }
    if (setgroups(0, NULL) != 0 || setgid(pw->pw_gid) != 0 || setuid(pw->pw_uid) != 0) {
        fprintf(stderr, "strata-netdisk: becoming %s: %s\n", opts.user, strerror(errno));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    backing_fd = open(opts.backing, O_RDONLY | O_DIRECTORY);
    if (backing_fd < 0) {
        fprintf(stderr, "strata-netdisk: %s: %s\n", opts.backing, strerror(errno));
        return 1;
    }
    char *fargv[] = {argv[0], "-o", "allow_other,default_permissions,fsname=strata-netdisk", NULL};
    struct fuse_args fargs = FUSE_ARGS_INIT(3, fargv);
    struct fuse *fuse = fuse_new(&fargs, &netdisk_ops, sizeof netdisk_ops, NULL);
    if (fuse == NULL)
        return 1;
    if (fuse_mount(fuse, opts.mountpoint) != 0) {
        fuse_destroy(fuse);
        return 1;
    }
    int rc = 1;
    if (fuse_set_signal_handlers(fuse_get_session(fuse)) == 0 && drop_privileges() == 0) {
        pthread_t th;
        if (opts.stats_path != NULL)
            pthread_create(&th, NULL, stats_thread, NULL);
        fprintf(stderr, "strata-netdisk: %s on %s: latency %ld us, %ld IOPS, %ld MB/s\n",
                opts.backing, opts.mountpoint, opts.latency_us, opts.iops, opts.mbps);
        /* Up to 64 IOs in flight, like a volume's queue depth. */
        struct fuse_loop_config *cfg = fuse_loop_cfg_create();
        fuse_loop_cfg_set_max_threads(cfg, 64);
        fuse_loop_cfg_set_idle_threads(cfg, 16);
        rc = fuse_loop_mt(fuse, cfg) == 0 ? 0 : 1;
        fuse_loop_cfg_destroy(cfg);
        fuse_remove_signal_handlers(fuse_get_session(fuse));
        write_stats();
    }
    fuse_unmount(fuse);
    fuse_destroy(fuse);
    fuse_opt_free_args(&fargs);
    return rc;
}
