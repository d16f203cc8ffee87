/*
 * Unit tests for common/base/durable.c (atomic replace, directory fsync, the
 * data-directory lock, mkdir -p and rm -rf) and common/net/uring.c (io_uring writes and fdatasync
 * on a libuv loop).  Real files in a fresh temporary directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "base/durable.h"
#include "net/uring.h"

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/strata-durable-XXXXXX");
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    return durable_remove_tree(tmpdir);
}

static void path_in(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", tmpdir, name);
}

static void test_write_file_creates_and_replaces(void **state)
{
    (void)state;
    char path[300], tmp[310];
    path_in(path, sizeof path, "f");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);

    assert_int_equal(durable_write_file(path, "first", 5, 0600), 0);
    void *data;
    size_t len;
    assert_int_equal(durable_read_file(path, 100, &data, &len), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(data, "first", 5);
    free(data);

    assert_int_equal(durable_write_file(path, "second!", 7, 0600), 0);
    assert_int_equal(durable_read_file(path, 100, &data, &len), 0);
    assert_int_equal(len, 7);
    assert_memory_equal(data, "second!", 7);
    free(data);

    /* No temporary file is left behind, and the mode is what was asked. */
    assert_int_equal(access(tmp, F_OK), -1);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);

    /* An empty file is a valid content. */
    assert_int_equal(durable_write_file(path, "", 0, 0600), 0);
    assert_int_equal(durable_read_file(path, 100, &data, &len), 0);
    assert_int_equal(len, 0);
    free(data);
}

static void test_write_file_failure_keeps_old(void **state)
{
    (void)state;
    char path[300];
    path_in(path, sizeof path, "nodir/f");
    assert_int_equal(durable_write_file(path, "x", 1, 0600), -ENOENT);

    /* Target is a directory: rename fails, the temporary file is removed. */
    char dir[300], tmp[310];
    path_in(dir, sizeof dir, "adir");
    assert_int_equal(mkdir(dir, 0700), 0);
    char inner[320];
    snprintf(inner, sizeof inner, "%s/x", dir);
    assert_int_equal(durable_write_file(inner, "keep", 4, 0600), 0);
    assert_true(durable_write_file(dir, "new", 3, 0600) < 0);
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    assert_int_equal(access(tmp, F_OK), -1);
    void *data;
    size_t len;
    assert_int_equal(durable_read_file(inner, 100, &data, &len), 0);
    assert_memory_equal(data, "keep", 4);
    free(data);
}

/* Finding 11: a "<path>.tmp" left behind (a crash, or planted) is replaced,
 * never written through: a symlink there must not be followed (the file it
 * names stays as it was), and a leftover regular file must not lend the new
 * file its mode. */
static void test_write_file_replaces_leftover_temp(void **state)
{
    (void)state;
    char path[300], tmp[310], victim[300];
    path_in(path, sizeof path, "conf");
    path_in(victim, sizeof victim, "victim");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(durable_write_file(victim, "untouched", 9, 0644), 0);
    assert_int_equal(symlink(victim, tmp), 0);

    assert_int_equal(durable_write_file(path, "secret", 6, 0600), 0);
    void *data;
    size_t len;
    assert_int_equal(durable_read_file(victim, 100, &data, &len), 0);
    assert_int_equal(len, 9);
    assert_memory_equal(data, "untouched", 9);
    free(data);
    struct stat st;
    assert_int_equal(lstat(path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(durable_read_file(path, 100, &data, &len), 0);
    assert_memory_equal(data, "secret", 6);
    free(data);
    assert_int_equal(lstat(tmp, &st), -1);

    /* A readable leftover: the result still has the mode asked for. */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    assert_int_equal(fchmod(fd, 0644), 0);
    assert_int_equal(write(fd, "old old old", 11), 11);
    close(fd);
    assert_int_equal(durable_write_file(path, "again", 5, 0600), 0);
    assert_int_equal(lstat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(durable_read_file(path, 100, &data, &len), 0);
    assert_int_equal(len, 5);
    free(data);
}

static void test_read_file_limits(void **state)
{
    (void)state;
    char path[300];
    path_in(path, sizeof path, "big");
    char buf[100];
    memset(buf, 'a', sizeof buf);
    assert_int_equal(durable_write_file(path, buf, sizeof buf, 0600), 0);
    void *data = (void *)1;
    size_t len = 1;
    assert_int_equal(durable_read_file(path, 99, &data, &len), -EFBIG);
    assert_null(data);
    assert_int_equal(len, 0);
    path_in(path, sizeof path, "missing");
    assert_int_equal(durable_read_file(path, 99, &data, &len), -ENOENT);
}

static void test_rename_unlink_fsync_dir(void **state)
{
    (void)state;
    char a[300], b[300];
    path_in(a, sizeof a, "a");
    path_in(b, sizeof b, "b");
    assert_int_equal(durable_write_file(a, "A", 1, 0600), 0);
    assert_int_equal(durable_rename(a, b), 0);
    assert_int_equal(access(a, F_OK), -1);
    assert_int_equal(access(b, F_OK), 0);
    assert_int_equal(durable_rename(a, b), -ENOENT);
    assert_int_equal(durable_unlink(b), 0);
    assert_int_equal(access(b, F_OK), -1);
    assert_int_equal(durable_unlink(b), 0); /* missing is fine */
    assert_int_equal(durable_fsync_dir(tmpdir), 0);
    assert_int_equal(durable_fsync_parent(a), 0);
    path_in(a, sizeof a, "no/such/dir");
    assert_int_equal(durable_fsync_dir(a), -ENOENT);
}

static void test_lock_dir_excludes(void **state)
{
    (void)state;
    int fd = durable_lock_dir(tmpdir, "test.lock");
    assert_true(fd >= 0);

    /* Same process, second descriptor: refused. */
    assert_int_equal(durable_lock_dir(tmpdir, "test.lock"), -EWOULDBLOCK);

    /* Another process: refused too. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(durable_lock_dir(tmpdir, "test.lock") == -EWOULDBLOCK ? 0 : 1);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    /* The file names the holder. */
    char path[300];
    path_in(path, sizeof path, "test.lock");
    void *data;
    size_t len;
    assert_int_equal(durable_read_file(path, 100, &data, &len), 0);
    char expect[32];
    snprintf(expect, sizeof expect, "%ld\n", (long)getpid());
    assert_int_equal(len, strlen(expect));
    assert_memory_equal(data, expect, len);
    free(data);

    durable_unlock_dir(fd);
    fd = durable_lock_dir(tmpdir, "test.lock");
    assert_true(fd >= 0);
    durable_unlock_dir(fd);
    path_in(path, sizeof path, "missing-dir");
    assert_int_equal(durable_lock_dir(path, "x.lock"), -ENOENT);
}

/* A child forked while the lock was held keeps the lock's open file
 * description until it execs or exits; the owner that released it and locks
 * again at that moment must wait for the child, not be told "in use". */
static void test_lock_dir_outlasts_forked_child(void **state)
{
    (void)state;
    int fd = durable_lock_dir(tmpdir, "test.lock");
    assert_true(fd >= 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        usleep(300 * 1000); /* between fork and exec, a little long */
        _exit(0);
    }
    durable_unlock_dir(fd);
    fd = durable_lock_dir(tmpdir, "test.lock");
    assert_true(fd >= 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    durable_unlock_dir(fd);
}

/* --- uring --- */

typedef struct done_log {
    int calls;
    int results[16];
    int order[16];
} done_log;

typedef struct done_arg {
    done_log *log;
    int id;
} done_arg;

static void on_done(void *arg, int res)
{
    done_arg *a = arg;
    a->log->results[a->id] = res;
    a->log->order[a->log->calls++] = a->id;
}

static void test_uring_write_and_sync(void **state)
{
    (void)state;
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    uring *u;
    assert_int_equal(uring_open(&loop, 4, &u), 0);

    char path[300];
    path_in(path, sizeof path, "uring");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);

    static uint8_t big[1 << 20];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 7 + 3);
    done_log log = {0};
    done_arg args[6];
    for (int i = 0; i < 6; i++)
        args[i] = (done_arg){&log, i};

    assert_int_equal(uring_write(u, fd, big, sizeof big, 0, on_done, &args[0]), 0);
    assert_int_equal(uring_write(u, fd, "tail", 4, sizeof big, on_done, &args[1]), 0);
    assert_int_equal(uring_fdatasync(u, fd, on_done, &args[2]), 0);
    assert_int_equal(uring_write(u, fd, "x", 1, sizeof big + 4, on_done, &args[3]), 0);
    /* Depth 4 reached: the pool refuses instead of growing. */
    assert_int_equal(uring_write(u, fd, "y", 1, 0, on_done, &args[4]), -EBUSY);
    assert_int_equal(uring_in_flight(u), 4);
    /* Nothing completes inside the submitting call. */
    assert_int_equal(log.calls, 0);
    assert_int_equal(uring_write(u, fd, "y", 0, 0, on_done, &args[4]), -EINVAL);

    while (log.calls < 4)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(uring_in_flight(u), 0);
    assert_int_equal(log.results[0], (int)sizeof big);
    assert_int_equal(log.results[1], 4);
    assert_int_equal(log.results[2], 0);
    assert_int_equal(log.results[3], 1);

    uint8_t back[(1 << 20) + 5];
    assert_int_equal(pread(fd, back, sizeof back, 0), (ssize_t)sizeof back);
    assert_memory_equal(back, big, sizeof big);
    assert_memory_equal(back + sizeof big, "tailx", 5);

    /* Errors come back as negative errno through the callback. */
    assert_int_equal(uring_write(u, -1, "z", 1, 0, on_done, &args[5]), 0);
    while (log.calls < 5)
        uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(log.results[5], -EBADF);

    /* Close waits for in-flight work without calling back. */
    assert_int_equal(uring_fdatasync(u, fd, on_done, &args[4]), 0);
    uring_close(u);
    assert_int_equal(log.calls, 5);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
    close(fd);
}

static void test_mkdir_p_and_remove_tree(void **state)
{
    (void)state;
    char deep[512], file[600], link[512], outside[512];
    path_in(deep, sizeof deep, "a/b/c//");
    assert_int_equal(durable_mkdir_p(deep, 0750), 0);
    assert_int_equal(durable_mkdir_p(deep, 0750), 0); /* exists: success */
    struct stat st;
    path_in(deep, sizeof deep, "a/b/c");
    assert_int_equal(stat(deep, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    mode_t mask = umask(0);
    umask(mask);
    assert_int_equal(st.st_mode & 0777, 0750 & ~mask);
    snprintf(file, sizeof file, "%s/f", deep);
    assert_int_equal(durable_write_file(file, "x", 1, 0600), 0);
    assert_int_equal(durable_mkdir_p(file, 0750), -ENOTDIR);
    snprintf(file, sizeof file, "%s/f/g", deep);
    assert_int_equal(durable_mkdir_p(file, 0750), -ENOTDIR);

    /* A symlink inside the tree is removed, not followed. */
    path_in(outside, sizeof outside, "outside");
    assert_int_equal(durable_mkdir_p(outside, 0700), 0);
    snprintf(file, sizeof file, "%s/keep", outside);
    assert_int_equal(durable_write_file(file, "k", 1, 0600), 0);
    path_in(link, sizeof link, "a/b/link");
    assert_int_equal(symlink(outside, link), 0);

    path_in(deep, sizeof deep, "a");
    assert_int_equal(durable_remove_tree(deep), 0);
    assert_int_equal(lstat(deep, &st), -1);
    assert_int_equal(errno, ENOENT);
    assert_int_equal(stat(file, &st), 0);
    assert_int_equal(durable_remove_tree(deep), 0); /* missing: success */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_write_file_creates_and_replaces, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_file_failure_keeps_old, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_file_replaces_leftover_temp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_file_limits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rename_unlink_fsync_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_dir_excludes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock_dir_outlasts_forked_child, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uring_write_and_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mkdir_p_and_remove_tree, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
