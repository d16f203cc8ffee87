/*
 * Unit tests for common/net/uring.c's linked and deferred operations
 * (URING_LINK, URING_DEFER, uring_submit): a write + fdatasync chain in one
 * submission calls back once per operation, in chain order, with the full
 * length; a chain whose write fails or is cut short never reports its
 * fdatasync as a success (the kernel posts nothing for the rest of a chain
 * whose skipped-on-success write fails: this must not hang either).
 * Real files, a real libuv loop and io_uring.  Every test runs twice: with
 * the kernel doing the I/O, and with URING_OPEN_BLOCKING (the submission
 * does it on the calling thread), whose contract is the same.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "net/uring.h"

static char tmpdir[256];
static unsigned open_flags; /* uring_open_ex flags of the running test */

static int setup(void **state)
{
    (void)state;
    open_flags = 0;
    strcpy(tmpdir, "/tmp/strata-uringlink-XXXXXX");
    return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int setup_blocking(void **state)
{
    int rc = setup(state);
    open_flags = URING_OPEN_BLOCKING;
    return rc;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd);
}

typedef struct done_log {
    int calls;
    int results[16];
    int order[16];
    int count[16];
} done_log;

typedef struct done_arg {
    done_log *log;
    int id;
} done_arg;

static void on_done(void *arg, int res)
{
    done_arg *a = arg;
    a->log->results[a->id] = res;
    a->log->count[a->id]++;
    a->log->order[a->log->calls++] = a->id;
}

typedef struct env {
    uv_loop_t loop;
    uring *u;
    int fd;
    done_log log;
    done_arg args[16];
} env;

static void env_open(env *e, const char *name, int flags)
{
    memset(e, 0, sizeof *e);
    assert_int_equal(uv_loop_init(&e->loop), 0);
    assert_int_equal(uring_open_ex(&e->loop, 8, open_flags, &e->u), 0);
    char path[300];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    e->fd = open(path, flags, 0600);
    assert_true(e->fd >= 0);
    for (int i = 0; i < 16; i++)
        e->args[i] = (done_arg){&e->log, i};
}

static void env_run_until(env *e, int calls)
{
    for (int i = 0; i < 10000 && e->log.calls < calls; i++)
        uv_run(&e->loop, UV_RUN_ONCE);
    assert_int_equal(e->log.calls, calls);
}

static void env_close(env *e)
{
    assert_int_equal(uring_in_flight(e->u), 0);
    uring_close(e->u);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    close(e->fd);
}

static void test_chain_in_order(void **state)
{
    (void)state;
    env e;
    env_open(&e, "chain", O_RDWR | O_CREAT | O_TRUNC);
    static uint8_t a[100000], b[3000];
    memset(a, 'a', sizeof a);
    memset(b, 'b', sizeof b);
    /* Deferred: nothing reaches the kernel (nor completes) before submit. */
    assert_int_equal(
        uring_write_ex(e.u, e.fd, a, sizeof a, 0, URING_LINK | URING_DEFER, on_done, &e.args[0]),
        0);
    assert_int_equal(uring_write_ex(e.u, e.fd, b, sizeof b, sizeof a, URING_LINK | URING_DEFER,
                                    on_done, &e.args[1]),
                     0);
    assert_int_equal(uring_fdatasync_ex(e.u, e.fd, URING_DEFER, on_done, &e.args[2]), 0);
    assert_int_equal(uring_in_flight(e.u), 3);
    assert_int_equal(uring_free_slots(e.u), 5);
    struct stat st;
    assert_int_equal(fstat(e.fd, &st), 0);
    assert_int_equal(st.st_size, 0);
    assert_int_equal(uring_submit(e.u), 0);
    assert_int_equal(uring_submit(e.u), 0); /* nothing left: a no-op */
    assert_int_equal(e.log.calls, 0);       /* never inside the call */
    env_run_until(&e, 3);
    /* Exactly once each, in chain order, full lengths. */
    assert_int_equal(e.log.order[0], 0);
    assert_int_equal(e.log.order[1], 1);
    assert_int_equal(e.log.order[2], 2);
    assert_int_equal(e.log.results[0], (int)sizeof a);
    assert_int_equal(e.log.results[1], (int)sizeof b);
    assert_int_equal(e.log.results[2], 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(e.log.count[i], 1);
    assert_int_equal(fstat(e.fd, &st), 0);
    assert_int_equal(st.st_size, (off_t)(sizeof a + sizeof b));

    /* A link with nothing after it before the submission is dropped: the
     * write still calls back (its completion is not skipped). */
    assert_int_equal(
        uring_write_ex(e.u, e.fd, "z", 1, 0, URING_LINK | URING_DEFER, on_done, &e.args[3]), 0);
    assert_int_equal(uring_submit(e.u), 0);
    env_run_until(&e, 4);
    assert_int_equal(e.log.results[3], 1);
    /* A plain operation after deferred ones submits them too. */
    assert_int_equal(
        uring_write_ex(e.u, e.fd, "y", 1, 1, URING_LINK | URING_DEFER, on_done, &e.args[4]), 0);
    assert_int_equal(uring_fdatasync(e.u, e.fd, on_done, &e.args[5]), 0);
    env_run_until(&e, 6);
    assert_int_equal(e.log.order[4], 4);
    assert_int_equal(e.log.order[5], 5);
    assert_int_equal(e.log.results[4], 1);
    assert_int_equal(e.log.results[5], 0);
    env_close(&e);
}

static void test_failed_write_cancels_sync(void **state)
{
    (void)state;
    env e;
    /* Read-only: every write fails with EBADF, fdatasync itself would work. */
    env_open(&e, "ro", O_RDWR | O_CREAT | O_TRUNC);
    close(e.fd);
    char path[300];
    snprintf(path, sizeof path, "%s/ro", tmpdir);
    e.fd = open(path, O_RDONLY);
    assert_true(e.fd >= 0);
    assert_int_equal(
        uring_write_ex(e.u, e.fd, "abc", 3, 0, URING_LINK | URING_DEFER, on_done, &e.args[0]), 0);
    assert_int_equal(
        uring_write_ex(e.u, e.fd, "def", 3, 3, URING_LINK | URING_DEFER, on_done, &e.args[1]), 0);
    assert_int_equal(uring_fdatasync_ex(e.u, e.fd, URING_DEFER, on_done, &e.args[2]), 0);
    assert_int_equal(uring_submit(e.u), 0);
    env_run_until(&e, 3);
    assert_int_equal(e.log.results[0], -EBADF);
    assert_int_equal(e.log.results[1], -ECANCELED);
    /* The point: the sync after a failed write never reports success. */
    assert_int_equal(e.log.results[2], -ECANCELED);
    for (int i = 0; i < 3; i++)
        assert_int_equal(e.log.count[i], 1);

    /* The ring is fine afterwards. */
    assert_int_equal(uring_fdatasync(e.u, e.fd, on_done, &e.args[3]), 0);
    env_run_until(&e, 4);
    assert_int_equal(e.log.results[3], 0);
    env_close(&e);
}

static void test_short_write_in_chain(void **state)
{
    (void)state;
    env e;
    env_open(&e, "short", O_RDWR | O_CREAT | O_TRUNC);
    /* A file size limit cuts the write short; the rest then fails (EFBIG). */
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 5000;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    static uint8_t buf[8192];
    memset(buf, 'q', sizeof buf);
    assert_int_equal(uring_write_ex(e.u, e.fd, buf, sizeof buf, 0, URING_LINK | URING_DEFER,
                                    on_done, &e.args[0]),
                     0);
    assert_int_equal(uring_fdatasync_ex(e.u, e.fd, URING_DEFER, on_done, &e.args[1]), 0);
    assert_int_equal(uring_submit(e.u), 0);
    env_run_until(&e, 2);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(e.log.order[0], 0);
    assert_int_equal(e.log.results[0], -EFBIG);
    assert_int_equal(e.log.results[1], -ECANCELED);
    env_close(&e);
}

static void test_close_with_deferred(void **state)
{
    (void)state;
    env e;
    env_open(&e, "close", O_RDWR | O_CREAT | O_TRUNC);
    assert_int_equal(
        uring_write_ex(e.u, e.fd, "abc", 3, 0, URING_LINK | URING_DEFER, on_done, &e.args[0]), 0);
    assert_int_equal(uring_fdatasync_ex(e.u, e.fd, URING_DEFER, on_done, &e.args[1]), 0);
    /* Close submits, waits without calling back, and frees everything. */
    uring_close(e.u);
    assert_int_equal(e.log.calls, 0);
    assert_int_equal(uv_run(&e.loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&e.loop), 0);
    char back[3];
    assert_int_equal(pread(e.fd, back, 3, 0), 3);
    assert_memory_equal(back, "abc", 3);
    close(e.fd);
}

static void test_blocking_open_rejects_unknown_flags(void **state)
{
    (void)state;
    uv_loop_t loop;
    uring *u = (uring *)&loop; /* must be reset to NULL */
    assert_int_equal(uv_loop_init(&loop), 0);
    assert_int_equal(uring_open_ex(&loop, 8, 2u, &u), -EINVAL);
    assert_null(u);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_chain_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_write_cancels_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_short_write_in_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_with_deferred, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chain_in_order, setup_blocking, teardown),
        cmocka_unit_test_setup_teardown(test_failed_write_cancels_sync, setup_blocking, teardown),
        cmocka_unit_test_setup_teardown(test_short_write_in_chain, setup_blocking, teardown),
        cmocka_unit_test_setup_teardown(test_close_with_deferred, setup_blocking, teardown),
        cmocka_unit_test_setup_teardown(test_blocking_open_rejects_unknown_flags, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
