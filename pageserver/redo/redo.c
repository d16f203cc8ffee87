/*
 * redo.c: the redo pool (pageserver/redo/redo.h): redo helpers started lazily,
 * fed over pipes, killed on timeout, restarted when they die.
 *
 * For: running the plan of redo_plan.c: pageserver deltas are applied here
 * in C (redo_synthetic.c); each run of Postgres WAL records becomes one
 * request (begin, push page, apply x N, get page) to a helper, which is the
 * patched postgres in single-user mode running compute/walredo
 * (strata_walredo.so).
 *
 * Not for: finding versions (store.h) or caching pages.
 *
 * Helpers.  Each helper runs on a private copy of a template data
 * directory (work_dir/walredo/template-<hash of pg_bindir>, made once with
 * the patched initdb and holding the strata_walredo_main() SQL function;
 * single-user mode locks its data directory, so helpers cannot share one).
 * The library is found through dynamic_library_path: the directory of
 * options.walredo_lib (a path to a file named strata_walredo.so) if given,
 * else of $STRATA_WALREDO_LIB if set, else <directory of this
 * executable>/../lib, where the build puts it.  When we
 * run as root the helper drops to run_as_user (setgid, setgroups, setuid)
 * before exec; helpers are forked by one long-lived thread and so die with
 * us (redo_spawn.h); no core dumps,
 * and its stderr goes to work_dir/walredo/helper-<i>.log, whose tail names
 * the cause when a helper dies.
 *
 * Threads and pipelining.  Any thread may call redo_apply.  A request picks
 * the helper with the fewest requests in flight (at most
 * MAX_INFLIGHT_PER_HELPER each; beyond that callers wait, up to the timeout,
 * so the queue is bounded).  Per helper, wmu serialises whole requests on
 * the helper's stdin and hands out sequence numbers; each request registers
 * a waiter (on its caller's stack: the output buffer, a result, its own
 * condition variable) in the helper's slot for its number.  Responses come
 * back in that order.  One waiting thread at a time is the reader: it reads
 * whatever the pipe holds (the helper answers a batch with one write) and
 * delivers every complete response to its waiter, waking only that thread;
 * when its own response is in, it hands the reader role to the waiter of the
 * next outstanding response.  So a batch of N answers costs one read and N-1
 * targeted wakeups, not N reads and a broadcast to every waiter per answer.
 * Lock order: wmu, then mu.
 *
 * Failures.  A helper that dies (EOF), sends garbage, or does not answer
 * before the request's deadline is killed (SIGKILL) and reaped; its
 * generation number changes, so every request in flight on it fails over
 * and is retried once on a fresh helper.  An 'E' frame (the helper refused
 * a record or redo raised an ERROR) fails just that request, without retry:
 * the same record would fail the same way.  SIGPIPE is set to ignored when
 * the pool is created (a write to a dead helper must return EPIPE).
 */
#include "pageserver/redo/redo.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/byteorder.h"
#include "base/durable.h"
#include "base/log.h"
#include "base/strata_assert.h"
#include "pageserver/redo/redo_plan.h"
#include "pageserver/redo/redo_spawn.h"
#include "pageserver/redo/redo_synthetic.h"
#include "proto/walredo.h"

#define MAX_INFLIGHT_PER_HELPER 16
#define HELPER_START_TIMEOUT_MS 20000
#define MAX_HELPERS 64
#define READ_CHUNK (64 * 1024)
/* The banner and prompt single-user mode prints before our hello. */
#define MAX_PRELUDE (64 * 1024)
#define DEATH_LEN 512

/* A request waiting for its response (lives on the caller's stack). */
typedef enum { WS_PENDING = 0, WS_OK, WS_REFUSED, WS_LOST } waiter_state;
typedef struct waiter {
    pthread_cond_t cv; /* with the helper's mu */
    uint8_t *out;      /* the page goes here */
    waiter_state state;
    char msg[256]; /* the helper's refusal */
} waiter;

typedef struct helper {
    int idx;
    pthread_mutex_t wmu; /* whole requests on in_fd; seq numbers */
    pthread_mutex_t mu;  /* everything below */
    pthread_cond_t cv;
    pid_t pid; /* 0: not running */
    int in_fd, out_fd;
    uint64_t generation;
    uint64_t started_ms; /* when this incarnation finished starting */
    uint64_t next_write_seq, next_read_seq;
    bool reading; /* a waiter is reading out_fd (the reader role) */
    int inflight; /* guarded by the pool's mu */
    /* Waiters of the requests written and not yet answered, by seq %
     * MAX_INFLIGHT_PER_HELPER (at most that many are in flight). */
    waiter *slots[MAX_INFLIGHT_PER_HELPER];
    uint8_t *rbuf;
    size_t rlen;
    char death[DEATH_LEN]; /* why the last incarnation ended */
} helper;

struct redo_pool {
    char *pg_bindir;
    char *walredo_lib; /* options.walredo_lib, NULL: the default rule */
    char *dir;         /* work_dir/walredo */
    char *template_dir;
    char lib_dir[PATH_MAX + 64];
    bool lib_known;
    bool drop_privileges;
    uid_t uid;
    gid_t gid;
    uint32_t timeout_ms;
    int nhelpers;
    helper *helpers;

    pthread_mutex_t mu; /* inflight counts, template */
    pthread_cond_t cv;
    bool template_ready;
    bool warming; /* warm_thread was started and not yet joined */
    pthread_t warm_thread;
    redo_spawner *spawner; /* forks the helpers (redo_spawn.h) */

    redo_stats stats; /* updated with __atomic builtins */
};

/* ---- small utilities -------------------------------------------------- */

static void count(uint64_t *c, uint64_t n)
{
    __atomic_fetch_add(c, n, __ATOMIC_RELAXED);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int remaining_ms(uint64_t deadline)
{
    uint64_t now = now_ms();
    if (now >= deadline)
        return 0;
    uint64_t left = deadline - now;
    return left > INT_MAX ? INT_MAX : (int)left;
}

static void deadline_timespec(uint64_t deadline_ms, struct timespec *ts)
{
    /* Condition variables use CLOCK_MONOTONIC (set at init). */
    ts->tv_sec = (time_t)(deadline_ms / 1000);
    ts->tv_nsec = (long)(deadline_ms % 1000) * 1000000;
}

static void init_monotonic_cond(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) {
        h ^= (uint8_t)*s;
        h *= 1099511628211ULL;
    }
    return h;
}

/* Starts argv (a program path) through the spawner thread (redo_spawn.h),
 * as the pool's user when as_pool_user (else as we run).  The pid, or -1
 * with errno. */
static pid_t spawn_program(const redo_pool *p, char *const argv[], bool as_pool_user, int in,
                           int out, int errfd)
{
    redo_spawn_args sa = {.argv = argv,
                          .stdin_fd = in,
                          .stdout_fd = out,
                          .stderr_fd = errfd,
                          .drop_privileges = as_pool_user && p->drop_privileges,
                          .uid = p->uid,
                          .gid = p->gid};
    return redo_spawn(p->spawner, &sa);
}

/* Runs argv (a program path), as the pool's user when as_pool_user,
 * stdin_text on its stdin, output to log_path; waits.  0 if it exited 0,
 * else -1 with err. */
static int run_program(const redo_pool *p, char *const argv[], bool as_pool_user,
                       const char *stdin_text, const char *log_path, char *err, size_t errlen)
{
    redo_spawn_args sa = {.argv = argv,
                          .drop_privileges = as_pool_user && p->drop_privileges,
                          .uid = p->uid,
                          .gid = p->gid};
    return redo_spawn_run(p->spawner, &sa, stdin_text, log_path, err, errlen);
}

static int chown_if_root(const redo_pool *p, const char *path, char *err, size_t errlen)
{
    if (p->drop_privileges && chown(path, p->uid, p->gid) != 0) {
        set_err(err, errlen, "chown %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Copies the tree from to to (cp -a, as we run, so owners are kept);
 * cp's complaints go to log_path.  0, or -1 with err. */
static int copy_tree(const redo_pool *p, const char *from, const char *to, const char *log_path,
                     char *err, size_t errlen)
{
    char *argv[] = {"/bin/cp", "-a", (char *)from, (char *)to, NULL};
    return run_program(p, argv, false, NULL, log_path, err, errlen);
}

/* ---- the template data directory -------------------------------------- */

static int find_library(redo_pool *p, char *err, size_t errlen)
{
    if (p->lib_known)
        return 0;
    char so[PATH_MAX + 128];
    const char *env = p->walredo_lib;
    if (env == NULL)
        env = getenv("STRATA_WALREDO_LIB");
    if (env != NULL && env[0] != '\0') {
        snprintf(p->lib_dir, sizeof p->lib_dir, "%s", env);
        char *slash = strrchr(p->lib_dir, '/');
        if (slash == NULL)
            snprintf(p->lib_dir, sizeof p->lib_dir, ".");
        else
            *slash = '\0';
    } else {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) {
            set_err(err, errlen, "cannot find strata_walredo.so: readlink /proc/self/exe: %s",
                    strerror(errno));
            return -1;
        }
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash != NULL)
            *slash = '\0';
        snprintf(p->lib_dir, sizeof p->lib_dir, "%s/../lib", exe);
    }
    snprintf(so, sizeof so, "%s/strata_walredo.so", p->lib_dir);
    if (access(so, R_OK) != 0) {
        set_err(err, errlen,
                "cannot find the redo helper library %s (%s); give its path as walredo_lib "
                "(pageserver --walredo-lib) or set STRATA_WALREDO_LIB",
                so, strerror(errno));
        return -1;
    }
    p->lib_known = true;
    return 0;
}

/* Makes the template once: initdb, then the SQL function.  Under p->mu. */
static int ensure_template(redo_pool *p, char *err, size_t errlen)
{
    if (p->template_ready)
        return 0;
    if (find_library(p, err, errlen) != 0)
        return -1;
    struct stat st;
    char marker[PATH_MAX + 64];
    snprintf(marker, sizeof marker, "%s/strata-walredo-template", p->template_dir);
    if (stat(marker, &st) == 0) {
        p->template_ready = true;
        return 0;
    }
    char tmp[PATH_MAX + 8], log[PATH_MAX + 32], prog[PATH_MAX + 16], libpath[PATH_MAX + 128];
    snprintf(tmp, sizeof tmp, "%s.tmp", p->template_dir);
    snprintf(log, sizeof log, "%s/template.log", p->dir);
    int rc = durable_remove_tree(tmp);
    if (rc != 0) {
        set_err(err, errlen, "removing %s: %s", tmp, strerror(-rc));
        return -1;
    }
    if (mkdir(tmp, 0700) != 0) {
        set_err(err, errlen, "mkdir %s: %s", tmp, strerror(errno));
        return -1;
    }
    if (chown_if_root(p, tmp, err, errlen) != 0)
        return -1;
    snprintf(prog, sizeof prog, "%s/initdb", p->pg_bindir);
    char *initdb[] = {prog, "-D",       tmp,          "--no-sync", "-A",   "trust",
                      "-U", "postgres", "--locale=C", "-E",        "UTF8", NULL};
    if (run_program(p, initdb, true, NULL, log, err, errlen) != 0)
        return -1;
    snprintf(prog, sizeof prog, "%s/postgres", p->pg_bindir);
    snprintf(libpath, sizeof libpath, "dynamic_library_path=%s", p->lib_dir);
    char *single[] = {prog, "--single",         "-D",        tmp, "-c", "fsync=off", "-c", libpath,
                      "-c", "exit_on_error=on", "template1", NULL};
    if (run_program(p, single, true,
                    "CREATE FUNCTION strata_walredo_main() RETURNS void "
                    "AS 'strata_walredo' LANGUAGE C STRICT;\n",
                    log, err, errlen) != 0)
        return -1;
    snprintf(marker, sizeof marker, "%s/strata-walredo-template", tmp);
    int fd = open(marker, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || write(fd, p->pg_bindir, strlen(p->pg_bindir)) < 0) {
        set_err(err, errlen, "write %s: %s", marker, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    rc = durable_remove_tree(p->template_dir);
    if (rc != 0) {
        set_err(err, errlen, "removing %s: %s", p->template_dir, strerror(-rc));
        return -1;
    }
    if (rename(tmp, p->template_dir) != 0) {
        set_err(err, errlen, "rename %s: %s", tmp, strerror(errno));
        return -1;
    }
    p->template_ready = true;
    return 0;
}

/* ---- one helper's lifetime ------------------------------------------- */

static int write_all_fd(int fd, const void *buf, size_t len, uint64_t deadline);

/* The last line of the helper's log that says ERROR, FATAL or PANIC, else
 * the last line. */
static void log_tail(const redo_pool *p, int idx, char *out, size_t outlen)
{
    char path[PATH_MAX + 32], buf[4096];
    snprintf(path, sizeof path, "%s/helper-%d.log", p->dir, idx);
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    off_t size = lseek(fd, 0, SEEK_END);
    off_t from = size > (off_t)sizeof buf - 1 ? size - (off_t)sizeof buf + 1 : 0;
    ssize_t n = pread(fd, buf, sizeof buf - 1, from);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    const char *best = NULL, *last = NULL;
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (strstr(line, "PANIC:") || strstr(line, "FATAL:") || strstr(line, "ERROR:"))
            best = line;
        last = line;
    }
    snprintf(out, outlen, "%s", best ? best : last ? last : "");
}

/* Kills and reaps the helper if it is still generation gen; every request in
 * flight on it fails over.  Takes wmu then mu; the caller holds neither
 * unless holding_wmu. */
static void helper_reset(redo_pool *p, helper *h, uint64_t gen, bool holding_wmu, const char *why)
{
    pthread_mutex_lock(&h->mu);
    if (h->generation != gen || h->pid == 0) {
        pthread_mutex_unlock(&h->mu);
        return;
    }
    kill(h->pid, SIGKILL); /* wakes a blocked writer (EPIPE) and the reader (EOF) */
    pthread_mutex_unlock(&h->mu);

    if (!holding_wmu)
        pthread_mutex_lock(&h->wmu);
    pthread_mutex_lock(&h->mu);
    while (h->generation == gen && h->reading)
        pthread_cond_wait(&h->cv, &h->mu);
    if (h->generation == gen && h->pid != 0) {
        int status = 0;
        (void)redo_spawn_wait(h->pid, &status);
        char tail[300];
        log_tail(p, h->idx, tail, sizeof tail);
        char how[64];
        if (WIFSIGNALED(status))
            snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(status));
        else
            snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
        snprintf(h->death, sizeof h->death, "redo helper %d (pid %d) %s: %s%s%s", h->idx,
                 (int)h->pid, why, how, tail[0] ? "; its log: " : "", tail);
        close(h->in_fd);
        close(h->out_fd);
        h->pid = 0;
        h->in_fd = h->out_fd = -1;
        h->rlen = 0;
        h->generation++;
        h->next_read_seq = h->next_write_seq = 0;
        for (int i = 0; i < MAX_INFLIGHT_PER_HELPER; i++) {
            waiter *w = h->slots[i];
            if (w == NULL)
                continue;
            h->slots[i] = NULL;
            w->state = WS_LOST;
            pthread_cond_signal(&w->cv);
        }
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    if (!holding_wmu)
        pthread_mutex_unlock(&h->wmu);
}

/* Reads from out_fd into rbuf whatever is there, waiting until something
 * arrives or the deadline: 1 read something, 0 timeout, -1 EOF/error.
 * (No spinning before the poll: measured, it lost more than it won on a
 * loaded 2-core machine, where the spinner takes the core the helper needs.) */
static int read_some(helper *h, uint64_t deadline)
{
    STRATA_ASSERT(h->rlen < READ_CHUNK + MAX_PRELUDE);
    for (;;) {
        struct pollfd pfd = {.fd = h->out_fd, .events = POLLIN};
        int rc = poll(&pfd, 1, remaining_ms(deadline));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0)
            return -1;
        if (rc == 0)
            return 0;
        ssize_t n = read(h->out_fd, h->rbuf + h->rlen, READ_CHUNK + MAX_PRELUDE - h->rlen);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return -1;
        h->rlen += (size_t)n;
        return 1;
    }
}

/* Gives helper h a fresh copy of the template data directory, dir.  The
 * template is made first if needed.  0, or -1 with err. */
static int helper_prepare_dir(redo_pool *p, const char *dir, const char *logpath, char *err,
                              size_t errlen)
{
    pthread_mutex_lock(&p->mu);
    int rc = ensure_template(p, err, errlen);
    pthread_mutex_unlock(&p->mu);
    if (rc != 0)
        return -1;
    if (durable_remove_tree(dir) != 0 ||
        copy_tree(p, p->template_dir, dir, logpath, err, errlen) != 0) {
        set_err(err, errlen, "cannot copy %s to %s", p->template_dir, dir);
        return -1;
    }
    return 0;
}

/* Starts postgres --single on dir as the pool's user, its stdin and stdout
 * pipes in h (nonblocking), its stderr to logpath.  0, or -1 with err. */
static int helper_spawn(redo_pool *p, helper *h, const char *dir, const char *logpath, char *err,
                        size_t errlen)
{
    char prog[PATH_MAX + 16], libpath[PATH_MAX + 128];
    snprintf(prog, sizeof prog, "%s/postgres", p->pg_bindir);
    snprintf(libpath, sizeof libpath, "dynamic_library_path=%s", p->lib_dir);
    char *argv[] = {prog,        "--single",
                    "-D",        (char *)dir,
                    "-c",        "fsync=off",
                    "-c",        "shared_buffers=1MB",
                    "-c",        "max_connections=4",
                    "-c",        "wal_buffers=64kB",
                    "-c",        "max_wal_senders=0",
                    "-c",        "max_replication_slots=0",
                    "-c",        "huge_pages=off",
                    "-c",        "log_min_messages=warning",
                    "-c",        libpath,
                    "template1", NULL};
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0) {
        set_err(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    if (pipe2(out, O_CLOEXEC) != 0) {
        set_err(err, errlen, "pipe: %s", strerror(errno));
        close(in[0]);
        close(in[1]);
        return -1;
    }
    int logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_t pid = -1;
    if (logfd < 0)
        set_err(err, errlen, "open %s: %s", logpath, strerror(errno));
    else if ((pid = spawn_program(p, argv, true, in[0], out[1], logfd)) < 0)
        set_err(err, errlen, "fork: %s", strerror(errno));
    close(in[0]);
    close(out[1]);
    if (logfd >= 0)
        close(logfd);
    if (pid < 0) {
        close(in[1]);
        close(out[0]);
        return -1;
    }
    h->pid = pid;
    h->in_fd = in[1];
    h->out_fd = out[0];
    h->rlen = 0;
    fcntl(h->in_fd, F_SETFL, O_NONBLOCK);
    fcntl(h->out_fd, F_SETFL, O_NONBLOCK);
    return 0;
}

/* Calls the helper's main function and waits for its hello, skipping
 * single-user mode's banner, prompt and row description.  0 with what
 * followed the hello left in h->rbuf; -1 with err unset when the helper
 * broke or was silent, -2 with err when it speaks another protocol. */
static int helper_await_hello(redo_pool *p, helper *h, char *err, size_t errlen)
{
    uint64_t deadline =
        now_ms() +
        (p->timeout_ms > HELPER_START_TIMEOUT_MS ? p->timeout_ms : HELPER_START_TIMEOUT_MS);
    static const char line[] = "SELECT strata_walredo_main()\n";
    if (write_all_fd(h->in_fd, line, sizeof line - 1, deadline) != 0)
        return -1;
    const uint8_t hello_hdr[] = {WALREDO_HELLO, 0, 0, 0, WALREDO_MAGIC_LEN + 4};
    for (;;) {
        uint8_t *at = memmem(h->rbuf, h->rlen, hello_hdr, sizeof hello_hdr);
        if (at != NULL && h->rbuf + h->rlen - at >= WALREDO_FRAME_HEADER_LEN + 12) {
            walredo_msg m;
            size_t used;
            const char *why = NULL;
            if (walredo_decode(at, (size_t)(h->rbuf + h->rlen - at), &m, &used, &why) != 1)
                return -1;
            if (m.version != WALREDO_PROTO_VERSION) {
                set_err(err, errlen, "redo helper speaks protocol %u, we speak %u", m.version,
                        WALREDO_PROTO_VERSION);
                return -2;
            }
            size_t rest = (size_t)(h->rbuf + h->rlen - (at + used));
            memmove(h->rbuf, at + used, rest);
            h->rlen = rest;
            return 0;
        }
        if (h->rlen >= MAX_PRELUDE)
            return -1;
        if (read_some(h, deadline) <= 0)
            return -1;
    }
}

/* Kills and reaps a helper that did not start, appends its log's telling
 * line to err and makes h startable again. */
static void helper_abandon(redo_pool *p, helper *h, char *err, size_t errlen)
{
    kill(h->pid, SIGKILL);
    int status;
    (void)redo_spawn_wait(h->pid, &status);
    char tail[300];
    log_tail(p, h->idx, tail, sizeof tail);
    size_t used = strlen(err);
    if (tail[0] && used + 2 < errlen)
        snprintf(err + used, errlen - used, ": %s", tail);
    close(h->in_fd);
    close(h->out_fd);
    h->pid = 0;
    h->in_fd = h->out_fd = -1;
    h->rlen = 0;
    h->generation++;
}

/* Starts the helper.  Caller holds wmu and mu; pid == 0. */
static int helper_start(redo_pool *p, helper *h, char *err, size_t errlen)
{
    char dir[PATH_MAX + 32], logpath[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s/helper-%d", p->dir, h->idx);
    snprintf(logpath, sizeof logpath, "%s/helper-%d.log", p->dir, h->idx);
    if (helper_prepare_dir(p, dir, logpath, err, errlen) != 0 ||
        helper_spawn(p, h, dir, logpath, err, errlen) != 0)
        return -1;
    int rc = helper_await_hello(p, h, err, errlen);
    if (rc == 0)
        return 0;
    if (rc == -1)
        set_err(err, errlen, "redo helper did not start");
    helper_abandon(p, h, err, errlen);
    return -1;
}

/* ---- one request ------------------------------------------------------ */

static int write_all_fd(int fd, const void *buf, size_t len, uint64_t deadline)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            int rc = poll(&pfd, 1, remaining_ms(deadline));
            if (rc == 0)
                return -1;
            continue;
        }
        return -1;
    }
    return 0;
}

/* Writes iov[0..n) whole, in IOV_MAX batches, non-blocking with a deadline. */
static int writev_all(int fd, struct iovec *iov, int n, uint64_t deadline)
{
    int i = 0;
    while (i < n) {
        int batch = n - i > IOV_MAX ? IOV_MAX : n - i;
        ssize_t w = writev(fd, iov + i, batch);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            if (poll(&pfd, 1, remaining_ms(deadline)) == 0)
                return -1;
            continue;
        }
        if (w < 0)
            return -1;
        size_t left = (size_t)w;
        while (i < n && left >= iov[i].iov_len) {
            left -= iov[i].iov_len;
            i++;
        }
        if (left > 0) {
            iov[i].iov_base = (uint8_t *)iov[i].iov_base + left;
            iov[i].iov_len -= left;
        }
    }
    return 0;
}

typedef enum {
    REQ_OK = 0,
    REQ_REFUSED = 1, /* the helper answered 'E': do not retry */
    REQ_LOST = 2,    /* the helper died, timed out or broke protocol: retry */
    REQ_START = 3,   /* no helper could be started: retried once too */
} req_result;

typedef struct request {
    walredo_tag tag;
    const uint8_t *base; /* NULL: no push (the first record initialises) */
    const version_list *vl;
    int first, count; /* records vl->value[first], [first - 1], ... */
    uint8_t *out;
} request;

static helper *pick_helper(redo_pool *p, uint64_t deadline)
{
    pthread_mutex_lock(&p->mu);
    for (;;) {
        helper *best = NULL;
        for (int i = 0; i < p->nhelpers; i++) {
            helper *h = &p->helpers[i];
            if (best == NULL || h->inflight < best->inflight)
                best = h;
        }
        if (best->inflight < MAX_INFLIGHT_PER_HELPER) {
            best->inflight++;
            pthread_mutex_unlock(&p->mu);
            return best;
        }
        struct timespec ts;
        deadline_timespec(deadline, &ts);
        if (pthread_cond_timedwait(&p->cv, &p->mu, &ts) == ETIMEDOUT) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
    }
}

static void release_helper(redo_pool *p, helper *h)
{
    pthread_mutex_lock(&p->mu);
    h->inflight--;
    STRATA_ASSERT(h->inflight >= 0);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static req_result send_request(redo_pool *p, helper *h, const request *rq, waiter *w,
                               uint64_t *deadlinep, uint64_t *gen, char *err, size_t errlen)
{
    pthread_mutex_lock(&h->wmu);
    pthread_mutex_lock(&h->mu);
    if (h->pid == 0) {
        int rc = helper_start(p, h, err, errlen);
        if (rc != 0) {
            pthread_mutex_unlock(&h->mu);
            pthread_mutex_unlock(&h->wmu);
            return REQ_START;
        }
        if (h->generation > 0)
            count(&p->stats.helper_restarts, 1);
        h->started_ms = now_ms();
    }
    /* Starting (copying the template, booting postgres) is not the request's
     * time: neither for the request that started the helper nor for those
     * that waited for wmu meanwhile (on a loaded machine a start takes
     * seconds, and their stale deadlines killed the fresh helper). */
    if (*deadlinep < h->started_ms + p->timeout_ms)
        *deadlinep = h->started_ms + p->timeout_ms;
    uint64_t deadline = *deadlinep;
    *gen = h->generation;
    uint64_t seq = h->next_write_seq++;
    STRATA_ASSERT(seq - h->next_read_seq < MAX_INFLIGHT_PER_HELPER);
    STRATA_ASSERT(h->slots[seq % MAX_INFLIGHT_PER_HELPER] == NULL);
    w->out = rq->out;
    w->state = WS_PENDING;
    h->slots[seq % MAX_INFLIGHT_PER_HELPER] = w;
    int fd = h->in_fd;
    pthread_mutex_unlock(&h->mu);

    uint8_t begin[WALREDO_FRAME_HEADER_LEN + WALREDO_TAG_LEN];
    uint8_t get[WALREDO_FRAME_HEADER_LEN + WALREDO_TAG_LEN];
    uint8_t push_hdr[WALREDO_FRAME_HEADER_LEN + WALREDO_TAG_LEN];
    walredo_msg m = {.type = WALREDO_BEGIN, .tag = rq->tag};
    walredo_encode(&m, begin, sizeof begin);
    m.type = WALREDO_GET_PAGE;
    walredo_encode(&m, get, sizeof get);
    /* The push frame's header and tag, the page from the caller's buffer. */
    m.type = WALREDO_BEGIN;
    walredo_encode(&m, push_hdr, sizeof push_hdr);
    push_hdr[0] = WALREDO_PUSH_PAGE;
    uint32_t plen = WALREDO_TAG_LEN + WALREDO_PAGE_SIZE;
    put_be32(push_hdr + 1, plen);

    int niov = 2 * rq->count + 4;
    struct iovec small[2 * 8 + 4];
    struct iovec *iov =
        niov <= (int)(sizeof small / sizeof small[0]) ? small : malloc(sizeof *iov * (size_t)niov);
    uint8_t(*ahdr)[WALREDO_APPLY_HEADER_LEN] = malloc((size_t)rq->count * WALREDO_APPLY_HEADER_LEN);
    if (iov == NULL || ahdr == NULL) {
        if (iov != small)
            free(iov);
        free(ahdr);
        pthread_mutex_unlock(&h->wmu);
        set_err(err, errlen, "out of memory");
        return REQ_LOST;
    }
    int k = 0;
    iov[k++] = (struct iovec){begin, sizeof begin};
    if (rq->base != NULL) {
        iov[k++] = (struct iovec){push_hdr, sizeof push_hdr};
        iov[k++] = (struct iovec){(void *)rq->base, WALREDO_PAGE_SIZE};
    }
    for (int i = 0; i < rq->count; i++) {
        int idx = rq->first - i;
        const value_ref *v = &rq->vl->value[idx];
        walredo_encode_apply_header(rq->vl->lsn[idx], v->len, ahdr[i]);
        iov[k++] = (struct iovec){ahdr[i], WALREDO_APPLY_HEADER_LEN};
        iov[k++] = (struct iovec){(void *)v->payload, v->len};
    }
    iov[k++] = (struct iovec){get, sizeof get};
    int wrc = writev_all(fd, iov, k, deadline);
    if (iov != small)
        free(iov);
    free(ahdr);
    if (wrc != 0) {
        helper_reset(p, h, *gen, true,
                     remaining_ms(deadline) == 0 ? "timed out" : "stopped reading");
        pthread_mutex_unlock(&h->wmu);
        set_err(err, errlen, "%s", h->death);
        return REQ_LOST;
    }
    pthread_mutex_unlock(&h->wmu);
    return REQ_OK;
}

/*
 * Delivers every complete response in rbuf to its waiter (under mu).  NULL,
 * or why the helper is broken (a malformed or unexpected frame, a refusal:
 * the helper exits after an 'E').  Only the reader calls this.
 */
static const char *deliver(helper *h, char *err, size_t errlen)
{
    size_t off = 0;
    const char *broken = NULL;
    for (;;) {
        walredo_msg m;
        size_t used = 0;
        const char *why = NULL;
        int rc = walredo_decode(h->rbuf + off, h->rlen - off, &m, &used, &why);
        if (rc == 0)
            break;
        if (rc < 0) {
            set_err(err, errlen, "redo helper %d: %s", h->idx, why);
            broken = "sent a malformed frame";
            break;
        }
        off += used;
        waiter *w = h->next_read_seq < h->next_write_seq
                        ? h->slots[h->next_read_seq % MAX_INFLIGHT_PER_HELPER]
                        : NULL;
        if (w == NULL || (m.type != WALREDO_PAGE && m.type != WALREDO_ERROR)) {
            set_err(err, errlen, "redo helper %d: unexpected frame '%c'", h->idx, m.type);
            broken = "sent an unexpected frame";
            break;
        }
        h->slots[h->next_read_seq % MAX_INFLIGHT_PER_HELPER] = NULL;
        h->next_read_seq++;
        if (m.type == WALREDO_PAGE) {
            memcpy(w->out, m.page, WALREDO_PAGE_SIZE);
            w->state = WS_OK;
        } else {
            snprintf(w->msg, sizeof w->msg, "redo helper refused: %.*s", (int)m.data_len,
                     (const char *)m.data);
            w->state = WS_REFUSED;
            broken = "refused a record";
        }
        pthread_cond_signal(&w->cv);
        if (broken != NULL)
            break;
    }
    memmove(h->rbuf, h->rbuf + off, h->rlen - off);
    h->rlen -= off;
    return broken;
}

/* Waits for w's response; reads the pipe (for everyone) while no one else
 * does.  Takes and releases mu. */
static req_result read_response(redo_pool *p, helper *h, waiter *w, uint64_t gen, uint64_t deadline,
                                char *err, size_t errlen)
{
    pthread_mutex_lock(&h->mu);
    while (w->state == WS_PENDING && h->generation == gen) {
        if (!h->reading) {
            /* The reader role: only we touch out_fd and rbuf until it is
             * given up. */
            h->reading = true;
            const char *broken = NULL;
            char why[256] = "";
            for (;;) {
                broken = deliver(h, why, sizeof why);
                if (broken != NULL || w->state != WS_PENDING)
                    break;
                pthread_mutex_unlock(&h->mu);
                int r = read_some(h, deadline);
                pthread_mutex_lock(&h->mu);
                if (r == 0) {
                    count(&p->stats.timeouts, 1);
                    broken = "timed out";
                    break;
                }
                if (r < 0) {
                    broken = "died";
                    break;
                }
            }
            h->reading = false;
            pthread_cond_broadcast(&h->cv); /* helper_reset waits for this */
            if (broken == NULL) {
                /* Hand the role to the waiter of the next outstanding answer. */
                if (h->next_read_seq < h->next_write_seq) {
                    waiter *next = h->slots[h->next_read_seq % MAX_INFLIGHT_PER_HELPER];
                    if (next != NULL)
                        pthread_cond_signal(&next->cv);
                }
                continue;
            }
            pthread_mutex_unlock(&h->mu);
            if (why[0] != '\0')
                set_err(err, errlen, "%s", why);
            helper_reset(p, h, gen, false, broken);
            pthread_mutex_lock(&h->mu);
            continue;
        }
        struct timespec ts;
        deadline_timespec(deadline, &ts);
        if (pthread_cond_timedwait(&w->cv, &h->mu, &ts) == ETIMEDOUT && w->state == WS_PENDING &&
            h->generation == gen) {
            pthread_mutex_unlock(&h->mu);
            count(&p->stats.timeouts, 1);
            helper_reset(p, h, gen, false, "timed out");
            pthread_mutex_lock(&h->mu);
        }
    }
    req_result result;
    switch (w->state) {
    case WS_OK:
        result = REQ_OK;
        break;
    case WS_REFUSED:
        set_err(err, errlen, "%s", w->msg);
        result = REQ_REFUSED;
        break;
    default:
        /* Lost: the helper died, timed out or broke protocol (reset marked
         * us, or its generation moved on). */
        set_err(err, errlen, "%s", h->death);
        result = REQ_LOST;
        break;
    }
    pthread_mutex_unlock(&h->mu);
    return result;
}

/* One helper request with one retry on a fresh helper. */
static int helper_request(redo_pool *p, const request *rq, char *err, size_t errlen)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        uint64_t deadline = now_ms() + p->timeout_ms;
        helper *h = pick_helper(p, deadline);
        if (h == NULL) {
            set_err(err, errlen, "redo pool saturated for %u ms", p->timeout_ms);
            return -1;
        }
        waiter w;
        memset(&w, 0, sizeof w);
        init_monotonic_cond(&w.cv);
        uint64_t gen;
        req_result r = send_request(p, h, rq, &w, &deadline, &gen, err, errlen);
        if (r == REQ_OK)
            r = read_response(p, h, &w, gen, deadline, err, errlen);
        pthread_cond_destroy(&w.cv);
        release_helper(p, h);
        if (r == REQ_OK) {
            count(&p->stats.records_applied, (uint64_t)rq->count);
            return 0;
        }
        if (r == REQ_REFUSED)
            return -1;
    }
    return -1;
}

/* ---- the public interface --------------------------------------------- */

void redo_pool_options_default(redo_pool_options *o)
{
    memset(o, 0, sizeof *o);
    o->run_as_user = "postgres";
    o->helpers = 2;
    o->timeout_ms = 10000;
}

/* Checks o's required fields and ranges.  0, or -1 with err. */
static int pool_check_options(const redo_pool_options *o, char *err, size_t errlen)
{
    if (o->pg_bindir == NULL || o->work_dir == NULL) {
        set_err(err, errlen, "redo pool: pg_bindir and work_dir are required");
        return -1;
    }
    if (o->helpers < 1 || o->helpers > MAX_HELPERS) {
        set_err(err, errlen, "redo pool: helpers must be 1..%d", MAX_HELPERS);
        return -1;
    }
    if (o->timeout_ms == 0) {
        set_err(err, errlen, "redo pool: timeout_ms must be positive");
        return -1;
    }
    return 0;
}

/* When we run as root: the user helpers run as (o->run_as_user).  0, or -1
 * with err. */
static int pool_find_user(redo_pool *p, const redo_pool_options *o, char *err, size_t errlen)
{
    if (geteuid() != 0)
        return 0;
    const char *user = o->run_as_user ? o->run_as_user : "postgres";
    struct passwd pw, *res = NULL;
    char buf[4096];
    if (getpwnam_r(user, &pw, buf, sizeof buf, &res) != 0 || res == NULL) {
        set_err(err, errlen, "redo pool: no user %s to run helpers as (we are root)", user);
        return -1;
    }
    p->drop_privileges = true;
    p->uid = pw.pw_uid;
    p->gid = pw.pw_gid;
    return 0;
}

/* The pool's strings: bindir, library, <work_dir>/walredo (made here) and
 * the template's path in it.  0, or -1 with err (the caller frees). */
static int pool_set_paths(redo_pool *p, const redo_pool_options *o, char *err, size_t errlen)
{
    p->pg_bindir = strdup(o->pg_bindir);
    if (o->walredo_lib != NULL && o->walredo_lib[0] != '\0') {
        const char *base = strrchr(o->walredo_lib, '/');
        base = base == NULL ? o->walredo_lib : base + 1;
        if (strcmp(base, "strata_walredo.so") != 0 || strlen(o->walredo_lib) >= PATH_MAX) {
            set_err(err, errlen,
                    "redo pool: walredo_lib \"%s\" must be a path to a file named "
                    "strata_walredo.so",
                    o->walredo_lib);
            return -1;
        }
        p->walredo_lib = strdup(o->walredo_lib);
        if (p->walredo_lib == NULL) {
            set_err(err, errlen, "out of memory");
            return -1;
        }
    }
    size_t dlen = strlen(o->work_dir) + 16;
    p->dir = malloc(dlen);
    if (p->pg_bindir == NULL || p->dir == NULL) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    snprintf(p->dir, dlen, "%s/walredo", o->work_dir);
    if (mkdir(p->dir, 0755) != 0 && errno != EEXIST) {
        set_err(err, errlen, "redo pool: mkdir %s: %s", p->dir, strerror(errno));
        return -1;
    }
    size_t tlen = strlen(p->dir) + 40;
    p->template_dir = malloc(tlen);
    if (p->template_dir == NULL) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    snprintf(p->template_dir, tlen, "%s/template-%016" PRIx64, p->dir, fnv1a(p->pg_bindir));
    return 0;
}

/* Sets up the p->nhelpers helper slots (not started).  0, or -1 with err
 * and p->nhelpers cut to the slots to tear down. */
static int pool_init_helpers(redo_pool *p, char *err, size_t errlen)
{
    for (int i = 0; i < p->nhelpers; i++) {
        helper *h = &p->helpers[i];
        h->idx = i;
        h->in_fd = h->out_fd = -1;
        pthread_mutex_init(&h->wmu, NULL);
        pthread_mutex_init(&h->mu, NULL);
        init_monotonic_cond(&h->cv);
        h->rbuf = malloc(READ_CHUNK + MAX_PRELUDE);
        if (h->rbuf == NULL) {
            set_err(err, errlen, "out of memory");
            p->nhelpers = i + 1;
            return -1;
        }
    }
    return 0;
}

int redo_pool_create(const redo_pool_options *o, redo_pool **out, char *err, size_t errlen)
{
    *out = NULL;
    if (pool_check_options(o, err, errlen) != 0)
        return -1;
    redo_pool *p = calloc(1, sizeof *p);
    if (p == NULL) {
        set_err(err, errlen, "out of memory");
        return -1;
    }
    p->timeout_ms = o->timeout_ms;
    p->nhelpers = o->helpers;
    if (pool_find_user(p, o, err, errlen) != 0) {
        free(p);
        return -1;
    }
    if (pool_set_paths(p, o, err, errlen) != 0)
        goto fail;
    if (redo_spawner_start(&p->spawner, err, errlen) != 0)
        goto fail;
    pthread_mutex_init(&p->mu, NULL);
    init_monotonic_cond(&p->cv);
    p->helpers = calloc((size_t)p->nhelpers, sizeof *p->helpers);
    if (p->helpers == NULL) {
        set_err(err, errlen, "out of memory");
        goto fail;
    }
    if (pool_init_helpers(p, err, errlen) != 0) {
        redo_pool_destroy(p);
        return -1;
    }
    /* A write to a helper that just died must fail with EPIPE, not kill us. */
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
        signal(SIGPIPE, SIG_IGN);
    *out = p;
    return 0;
fail:
    redo_spawner_stop(p->spawner);
    free(p->pg_bindir);
    free(p->walredo_lib);
    free(p->dir);
    free(p->template_dir);
    free(p);
    return -1;
}

static void *warm_main(void *arg)
{
    pthread_setname_np(pthread_self(), "ps-redo-warm");
    redo_pool *p = arg;
    char err[512];
    pthread_mutex_lock(&p->mu);
    int rc = ensure_template(p, err, sizeof err);
    pthread_mutex_unlock(&p->mu);
    if (rc != 0)
        log_warn("redo pool: preparing the helper template: %s (tried again at the first "
                 "redo)",
                 err);
    return NULL;
}

void redo_pool_warm(redo_pool *p)
{
    if (p->warming || p->template_ready)
        return;
    p->warming = pthread_create(&p->warm_thread, NULL, warm_main, p) == 0;
}

void redo_pool_destroy(redo_pool *p)
{
    if (p == NULL)
        return;
    if (p->warming)
        pthread_join(p->warm_thread, NULL);
    for (int i = 0; i < p->nhelpers; i++) {
        helper *h = &p->helpers[i];
        if (h->pid > 0) {
            /* Closing stdin ends the helper's loop; kill if it lingers. */
            close(h->in_fd);
            int status;
            uint64_t deadline = now_ms() + 2000;
            while (waitpid(h->pid, &status, WNOHANG) == 0 && remaining_ms(deadline) > 0)
                usleep(2000);
            if (waitpid(h->pid, &status, WNOHANG) == 0) {
                kill(h->pid, SIGKILL);
                waitpid(h->pid, &status, 0);
            }
            close(h->out_fd);
        }
        free(h->rbuf);
        pthread_mutex_destroy(&h->wmu);
        pthread_mutex_destroy(&h->mu);
        pthread_cond_destroy(&h->cv);
    }
    redo_spawner_stop(p->spawner);
    free(p->helpers);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->pg_bindir);
    free(p->walredo_lib);
    free(p->dir);
    free(p->template_dir);
    free(p);
}

static int fail_key(redo_pool *p, const pg_key *k, lsn_t lsn, char *err, size_t errlen,
                    const char *cause)
{
    char kb[96], lb[LSN_FMT_LEN];
    pg_key_format(k, kb, sizeof kb);
    char c[512];
    snprintf(c, sizeof c, "%s", cause);
    set_err(err, errlen, "redo of %s at %s: %s", kb, lsn_format(lsn, lb), c);
    count(&p->stats.failures, 1);
    return -1;
}

int redo_apply(redo_pool *p, const pg_key *k, const version_list *vl, uint8_t out[PG_BLCKSZ],
               char *err, size_t errlen)
{
    count(&p->stats.requests, 1);
    lsn_t target_lsn = vl->n > 0 ? vl->lsn[0] : LSN_INVALID;
    redo_step small[16];
    redo_step *steps = vl->n <= 16 ? small : malloc(sizeof *steps * (size_t)vl->n);
    if (steps == NULL)
        return fail_key(p, k, target_lsn, err, errlen, "out of memory");
    redo_plan plan;
    const char *why = NULL;
    int rc = 0;
    if (redo_plan_make(vl, steps, vl->n > 16 ? vl->n : 16, &plan, &why) != 0) {
        rc = fail_key(p, k, target_lsn, err, errlen, why);
        goto done;
    }

    bool have_page = true;
    memset(out, 0, PG_BLCKSZ);
    if (plan.base == REDO_BASE_IMAGE) {
        const value_ref *img = &vl->value[plan.base_index];
        if (img->len != PG_BLCKSZ) {
            rc = fail_key(p, k, vl->lsn[plan.base_index], err, errlen,
                          "page image is not 8192 bytes");
            goto done;
        }
        memcpy(out, img->payload, PG_BLCKSZ);
    } else if (plan.base == REDO_BASE_WILL_INIT) {
        have_page = false;
    }

    for (int s = 0; s < plan.nsteps; s++) {
        const redo_step *st = &plan.steps[s];
        if (st->kind == REDO_STEP_SYNTHETIC) {
            for (int i = 0; i < st->count; i++) {
                int idx = st->first - i;
                if (redo_synthetic_apply(k, &vl->value[idx], out, &why) != 0) {
                    rc = fail_key(p, k, vl->lsn[idx], err, errlen, why);
                    goto done;
                }
            }
            count(&p->stats.synthetic_applied, (uint64_t)st->count);
            have_page = true;
            continue;
        }
        if (k->kind != KEY_REL_BLOCK) {
            rc = fail_key(p, k, vl->lsn[st->first], err, errlen,
                          "a Postgres WAL record on a page that is not a relation block");
            goto done;
        }
        for (int i = 0; i < st->count; i++) {
            const value_ref *v = &vl->value[st->first - i];
            if (v->len < WALREDO_MIN_RECORD || v->len > WALREDO_MAX_RECORD ||
                ((uint32_t)v->payload[0] | (uint32_t)v->payload[1] << 8 |
                 (uint32_t)v->payload[2] << 16 | (uint32_t)v->payload[3] << 24) != v->len) {
                rc = fail_key(p, k, vl->lsn[st->first - i], err, errlen,
                              "stored WAL record is not one whole XLogRecord");
                goto done;
            }
        }
        /* The base page goes to the helper from a copy: out is overwritten
         * by the answer. */
        uint8_t base[PG_BLCKSZ];
        if (have_page)
            memcpy(base, out, PG_BLCKSZ);
        request rq = {
            .tag = {.spc = k->spc, .db = k->db, .rel = k->rel, .fork = k->fork, .blk = k->blk},
            .base = have_page ? base : NULL,
            .vl = vl,
            .first = st->first,
            .count = st->count,
            .out = out,
        };
        char cause[768];
        cause[0] = '\0';
        if (helper_request(p, &rq, cause, sizeof cause) != 0) {
            rc = fail_key(p, k, vl->lsn[st->first - st->count + 1], err, errlen, cause);
            goto done;
        }
        have_page = true;
    }
done:
    if (steps != small)
        free(steps);
    return rc;
}

void redo_get_stats(const redo_pool *p, redo_stats *out)
{
    out->requests = __atomic_load_n(&p->stats.requests, __ATOMIC_RELAXED);
    out->records_applied = __atomic_load_n(&p->stats.records_applied, __ATOMIC_RELAXED);
    out->synthetic_applied = __atomic_load_n(&p->stats.synthetic_applied, __ATOMIC_RELAXED);
    out->helper_restarts = __atomic_load_n(&p->stats.helper_restarts, __ATOMIC_RELAXED);
    out->timeouts = __atomic_load_n(&p->stats.timeouts, __ATOMIC_RELAXED);
    out->failures = __atomic_load_n(&p->stats.failures, __ATOMIC_RELAXED);
}
