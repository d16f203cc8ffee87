/*
 * proc.c: spawning, identifying and stopping processes.  See proc.h.
 *
 * Detached spawns fork twice: the middle process calls setsid() and exits at
 * once, so the daemon is reparented to init and never lingers as a zombie
 * of the `strata` command.  The daemon reports a failure before or in exec
 * through a close-on-exec pipe; end-of-file on that pipe means exec worked.
 */
#include "cli/local/proc.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/durable.h"

/* The step of child setup that failed, sent with errno over the pipe. */
enum child_step { STEP_LOG, STEP_CHDIR, STEP_GROUPS, STEP_SETGID, STEP_SETUID, STEP_EXEC };

static const char *const child_step_names[] = {"opening the log", "chdir",  "initgroups",
                                               "setgid",          "setuid", "exec"};

typedef struct child_failure {
    int step;
    int err;
} child_failure;

/* Highest fd a child closes before exec; ours never have more open. */
#define PROC_MAX_FD 1024

long long proc_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void proc_sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int proc_user_for_postgres(const char *name, proc_user *out, cli_err *err)
{
    memset(out, 0, sizeof *out);
    if (geteuid() != 0) {
        out->uid = geteuid();
        out->gid = getegid();
        return 0;
    }
    struct passwd *pw = getpwnam(name);
    if (pw == NULL)
        return cli_err_set(err,
                           "running as root, but user '%s' to run postgres as does not exist "
                           "(make deps creates it)",
                           name);
    if (pw->pw_uid == 0)
        return cli_err_set(err, "user '%s' is root; postgres refuses to run as root", name);
    out->drop = true;
    out->uid = pw->pw_uid;
    out->gid = pw->pw_gid;
    snprintf(out->name, sizeof out->name, "%s", name);
    return 0;
}

static ssize_t read_full(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

static _Noreturn void child_fail(int report_fd, int step)
{
    child_failure f = {.step = step, .err = errno};
    ssize_t ignored = write(report_fd, &f, sizeof f);
    (void)ignored;
    _exit(127);
}

/* In the child: wire up stdio, directory and identity, then exec. */
static _Noreturn void child_exec(char *const argv[], const char *logpath, const char *cwd,
                                 const proc_user *user, int report_fd)
{
    if (logpath != NULL) {
        int devnull = open("/dev/null", O_RDONLY);
        int log = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (devnull < 0 || log < 0)
            child_fail(report_fd, STEP_LOG);
        if (dup2(devnull, STDIN_FILENO) < 0 || dup2(log, STDOUT_FILENO) < 0 ||
            dup2(log, STDERR_FILENO) < 0)
            child_fail(report_fd, STEP_LOG);
        if (devnull > STDERR_FILENO)
            close(devnull);
        if (log > STDERR_FILENO)
            close(log);
    }
    for (int fd = STDERR_FILENO + 1; fd < PROC_MAX_FD; fd++)
        if (fd != report_fd)
            close(fd);
    if (cwd != NULL && chdir(cwd) != 0)
        child_fail(report_fd, STEP_CHDIR);
    if (user->drop) {
        if (initgroups(user->name, user->gid) != 0)
            child_fail(report_fd, STEP_GROUPS);
        if (setgid(user->gid) != 0)
            child_fail(report_fd, STEP_SETGID);
        if (setuid(user->uid) != 0)
            child_fail(report_fd, STEP_SETUID);
    }
    signal(SIGPIPE, SIG_DFL);
    execv(argv[0], argv);
    child_fail(report_fd, STEP_EXEC);
}

static int report_child_failure(const child_failure *f, const char *prog, cli_err *err)
{
    int step = f->step;
    if (step < 0 || step > STEP_EXEC)
        step = STEP_EXEC;
    return cli_err_set(err, "starting %s: %s failed: %s", prog, child_step_names[step],
                       strerror(f->err));
}

int proc_spawn_detached(char *const argv[], const char *logpath, const char *cwd,
                        const proc_user *user, pid_t *pid, cli_err *err)
{
    assert(argv[0] != NULL && argv[0][0] == '/');
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return cli_err_set(err, "pipe: %s", strerror(errno));
    pid_t middle = fork();
    if (middle < 0) {
        close(fds[0]);
        close(fds[1]);
        return cli_err_set(err, "fork: %s", strerror(errno));
    }
    if (middle == 0) {
        close(fds[0]);
        if (setsid() < 0)
            _exit(126);
        pid_t daemon_pid = fork();
        if (daemon_pid < 0)
            _exit(125);
        if (daemon_pid > 0) {
            ssize_t ignored = write(fds[1], &daemon_pid, sizeof daemon_pid);
            (void)ignored;
            _exit(0);
        }
        child_exec(argv, logpath, cwd, user, fds[1]);
    }
    close(fds[1]);
    pid_t daemon_pid = -1;
    ssize_t n = read_full(fds[0], &daemon_pid, sizeof daemon_pid);
    int status = 0;
    while (waitpid(middle, &status, 0) < 0 && errno == EINTR) {
    }
    if (n != (ssize_t)sizeof daemon_pid) {
        close(fds[0]);
        return cli_err_set(err, "starting %s: could not fork the daemon (status %d)", argv[0],
                           status);
    }
    child_failure f;
    n = read_full(fds[0], &f, sizeof f);
    close(fds[0]);
    if (n == (ssize_t)sizeof f)
        return report_child_failure(&f, argv[0], err);
    *pid = daemon_pid;
    return 0;
}

int proc_run(char *const argv[], const char *logpath, const proc_user *user, int timeout_s,
             cli_err *err)
{
    assert(argv[0] != NULL && argv[0][0] == '/');
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return cli_err_set(err, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return cli_err_set(err, "fork: %s", strerror(errno));
    }
    if (pid == 0) {
        close(fds[0]);
        child_exec(argv, logpath, NULL, user, fds[1]);
    }
    close(fds[1]);
    child_failure f;
    ssize_t n = read_full(fds[0], &f, sizeof f);
    close(fds[0]);
    long long deadline = proc_now_ms() + (long long)timeout_s * 1000;
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR)
            return cli_err_set(err, "waitpid: %s", strerror(errno));
        if (proc_now_ms() > deadline) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            return cli_err_set(err, "%s did not finish within %d s%s%s", argv[0], timeout_s,
                               logpath ? "; see " : "", logpath ? logpath : "");
        }
        proc_sleep_ms(50);
    }
    if (n == (ssize_t)sizeof f)
        return report_child_failure(&f, argv[0], err);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFEXITED(status))
        return cli_err_set(err, "%s exited with status %d%s%s", argv[0], WEXITSTATUS(status),
                           logpath ? "; see " : "", logpath ? logpath : "");
    return cli_err_set(err, "%s was killed by signal %d%s%s", argv[0],
                       WIFSIGNALED(status) ? WTERMSIG(status) : 0, logpath ? "; see " : "",
                       logpath ? logpath : "");
}

int proc_pidfile_write(const char *path, pid_t pid, cli_err *err)
{
    char text[32];
    int n = snprintf(text, sizeof text, "%d\n", (int)pid);
    assert(n > 0 && n < (int)sizeof text);
    int rc = durable_write_file(path, text, (size_t)n, 0644);
    if (rc != 0)
        return cli_err_set(err, "write %s: %s", path, strerror(-rc));
    return 0;
}

int proc_pidfile_read(const char *path, pid_t *pid, cli_err *err)
{
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        if (errno == ENOENT)
            return 1;
        return cli_err_set(err, "open %s: %s", path, strerror(errno));
    }
    long v = 0;
    int ok = fscanf(f, "%ld", &v);
    fclose(f);
    if (ok != 1 || v <= 1 || v > 4194304)
        return 1;
    *pid = (pid_t)v;
    return 0;
}

/* Reads /proc/<pid>/stat's state letter and parent pid; false if gone. */
static bool proc_stat(pid_t pid, char *state, pid_t *ppid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read_full(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    /* The command name is in parentheses and may itself contain ')'. */
    char *close_paren = strrchr(buf, ')');
    if (close_paren == NULL)
        return false;
    char st = 0;
    int pp = 0;
    if (sscanf(close_paren + 1, " %c %d", &st, &pp) != 2)
        return false;
    *state = st;
    *ppid = (pid_t)pp;
    return true;
}

bool proc_alive(pid_t pid)
{
    if (pid <= 0)
        return false;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    char state;
    pid_t ppid;
    if (!proc_stat(pid, &state, &ppid))
        return false;
    return state != 'Z' && state != 'X';
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

bool proc_matches(pid_t pid, const char *exe, const char *marker)
{
    if (!proc_alive(pid))
        return false;
    char path[64], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read_full(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    /* argv[1] too: a script's cmdline starts with its interpreter. */
    const char *argv0 = buf;
    const char *argv1 = argv0 + strlen(argv0) + 1;
    if (strcmp(base_name(argv0), base_name(exe)) != 0 &&
        (argv1 >= buf + n || strcmp(base_name(argv1), base_name(exe)) != 0))
        return false;
    if (marker == NULL)
        return true;
    for (const char *arg = buf; arg < buf + n; arg += strlen(arg) + 1)
        if (strcmp(arg, marker) == 0)
            return true;
    return false;
}

/* Adds to tree[*n] every process whose parent is in tree and that is not
 * yet in it; returns how many it added. */
static int add_descendants(pid_t *tree, int *n, int max)
{
    DIR *d = opendir("/proc");
    if (d == NULL)
        return 0;
    int added = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && *n < max) {
        char *end;
        long v = strtol(e->d_name, &end, 10);
        if (*end != '\0' || v <= 0)
            continue;
        char state;
        pid_t ppid;
        if (!proc_stat((pid_t)v, &state, &ppid))
            continue;
        bool parent_in = false, self_in = false;
        for (int i = 0; i < *n; i++) {
            parent_in |= tree[i] == ppid;
            self_in |= tree[i] == (pid_t)v;
        }
        if (parent_in && !self_in) {
            tree[(*n)++] = (pid_t)v;
            added++;
        }
    }
    closedir(d);
    return added;
}

/* Waits (bounded) until pid has stopped, or is gone or a zombie. */
static void wait_stopped(pid_t pid, long long deadline)
{
    char state;
    pid_t ppid;
    while (proc_stat(pid, &state, &ppid) && state != 'T' && state != 't' && state != 'Z' &&
           state != 'X' && proc_now_ms() < deadline)
        proc_sleep_ms(1);
}

bool proc_kill_tree(pid_t pid, int timeout_ms)
{
    long long deadline = proc_now_ms() + timeout_ms;
    pid_t tree[PROC_MAX_TREE];
    int n = 1, frozen = 0;
    tree[0] = pid;
    /* Freeze first, so that no one forks between the listing and the kill,
     * and list again until a listing finds no one new. */
    do {
        for (; frozen < n; frozen++)
            kill(tree[frozen], SIGSTOP);
        for (int i = 0; i < n; i++)
            wait_stopped(tree[i], deadline);
    } while (add_descendants(tree, &n, PROC_MAX_TREE) > 0 && proc_now_ms() < deadline);
    for (int i = 0; i < n; i++)
        kill(tree[i], SIGKILL);
    bool gone = true;
    for (int i = 0; i < n; i++) {
        long long left = deadline - proc_now_ms();
        gone &= proc_wait_gone(tree[i], left > 0 ? (int)left : 0);
    }
    return gone;
}

bool proc_wait_gone(pid_t pid, int timeout_ms)
{
    long long deadline = proc_now_ms() + timeout_ms;
    while (proc_alive(pid)) {
        if (proc_now_ms() >= deadline)
            return false;
        proc_sleep_ms(20);
    }
    return true;
}

bool proc_signal_and_wait(pid_t pid, int sig, int timeout_ms)
{
    if (kill(pid, sig) != 0 && errno == ESRCH)
        return true;
    return proc_wait_gone(pid, timeout_ms);
}

int proc_remove_tree(const char *path, cli_err *err)
{
    int rc = durable_remove_tree(path);
    if (rc != 0)
        return cli_err_set(err, "removing %s: %s", path, strerror(-rc));
    return 0;
}

/* nftw offers no user pointer: the owner to set is passed through here,
 * set and cleared within proc_chown_tree only. */
static uid_t chown_uid;
static gid_t chown_gid;
static int chown_errno;

static int chown_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)ftw;
    if (type == FTW_NS)
        return 0; /* gone between readdir and lstat: nothing to chown */
    if (sb->st_uid == chown_uid && sb->st_gid == chown_gid)
        return 0;
    if (lchown(path, chown_uid, chown_gid) != 0) {
        if (errno == ENOENT)
            return 0;
        chown_errno = errno;
        return 1;
    }
    return 0;
}

/* Part of the tree may be removed while we walk it: a compute's old data
 * directory, renamed aside, is removed in the background (compute.c
 * remove_aside).  What vanishes needs no new owner; a directory that
 * vanishes before nftw opens it makes nftw fail with ENOENT, and the walk
 * is done again (the next one no longer sees it). */
#define CHOWN_WALKS 5

int proc_chown_tree(const char *path, const proc_user *user, cli_err *err)
{
    if (!user->drop)
        return 0;
    chown_uid = user->uid;
    chown_gid = user->gid;
    int rc = 0, walk_errno = 0;
    for (int walk = 0; walk < CHOWN_WALKS; walk++) {
        chown_errno = 0;
        errno = 0;
        rc = nftw(path, chown_one, 32, FTW_PHYS);
        walk_errno = errno;
        if (rc == 0 || chown_errno != 0 || walk_errno != ENOENT || access(path, F_OK) != 0)
            break;
    }
    if (rc != 0)
        return cli_err_set(err, "chown -R %s to %s: %s", path, user->name,
                           strerror(chown_errno ? chown_errno : walk_errno));
    return 0;
}

int proc_check_access(const char *path, int mode, const proc_user *user, cli_err *err)
{
    if (!user->drop) {
        if (access(path, mode) != 0)
            return cli_err_set(err, "%s is not accessible: %s", path, strerror(errno));
        return 0;
    }
    pid_t pid = fork();
    if (pid < 0)
        return cli_err_set(err, "fork: %s", strerror(errno));
    if (pid == 0) {
        if (initgroups(user->name, user->gid) != 0 || setgid(user->gid) != 0 ||
            setuid(user->uid) != 0)
            _exit(2);
        _exit(access(path, mode) == 0 ? 0 : 1);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    return cli_err_set(err,
                       "user %s cannot reach %s: every parent directory must be traversable "
                       "(chmod o+x), e.g. use a --dir outside private temporary directories",
                       user->name, path);
}
