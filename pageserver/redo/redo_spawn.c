/*
 * redo_spawn.c: one long-lived thread that forks every redo helper, so the
 * helpers' parent-death signal fires when the pageserver ends and not when
 * the request thread that needed a helper does (redo_spawn.h); and running
 * the one-shot programs the redo pool needs (initdb, postgres --single, cp)
 * to their end through it.
 *
 * For: fork, exec and reaping.  Not for: talking to a helper (redo.c).
 */
#include "pageserver/redo/redo_spawn.h"

#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

struct redo_spawner {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool stopping;
    const redo_spawn_args *job; /* the fork asked for; NULL: none */
    bool done;                  /* the job's result is in pid/error */
    pid_t pid;
    int error;
};

/* In the child: async-signal-safe calls only, since the parent has threads. */
static void child_exec(const redo_spawn_args *a, pid_t parent) __attribute__((noreturn));
static void child_exec(const redo_spawn_args *a, pid_t parent)
{
    dup2(a->stdin_fd, 0);
    dup2(a->stdout_fd, 1);
    dup2(a->stderr_fd, 2);
    struct rlimit nocore = {0, 0};
    setrlimit(RLIMIT_CORE, &nocore);
    setsid();
    if (a->drop_privileges &&
        (setgid(a->gid) != 0 || setgroups(1, &a->gid) != 0 || setuid(a->uid) != 0))
        _exit(126);
    /* After the credentials change, which would clear it; the check covers
     * a parent that was gone before the signal was armed. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1);
    execv(a->argv[0], a->argv);
    _exit(127);
}

static void *spawner_main(void *arg)
{
    pthread_setname_np(pthread_self(), "ps-redo-spawn");
    redo_spawner *s = arg;
    pid_t parent = getpid();
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->job == NULL && !s->stopping)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->job == NULL)
            break;
        pid_t pid = fork();
        if (pid == 0)
            child_exec(s->job, parent);
        s->pid = pid;
        s->error = pid < 0 ? errno : 0;
        s->job = NULL;
        s->done = true;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int redo_spawner_start(redo_spawner **out, char *err, size_t errlen)
{
    redo_spawner *s = calloc(1, sizeof *s);
    if (s == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int rc = pthread_create(&s->thread, NULL, spawner_main, s);
    if (rc != 0) {
        snprintf(err, errlen, "redo pool: cannot start the spawner thread: %s", strerror(rc));
        pthread_cond_destroy(&s->cv);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

pid_t redo_spawn(redo_spawner *s, const redo_spawn_args *a)
{
    pthread_mutex_lock(&s->mu);
    /* One job at a time: wait for the slot, post, wait for the result. */
    while ((s->job != NULL || s->done) && !s->stopping)
        pthread_cond_wait(&s->cv, &s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        errno = ESHUTDOWN;
        return -1;
    }
    s->job = a;
    pthread_cond_broadcast(&s->cv);
    while (!s->done)
        pthread_cond_wait(&s->cv, &s->mu);
    pid_t pid = s->pid;
    int error = s->error;
    s->done = false;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (pid < 0)
        errno = error;
    return pid;
}

void redo_spawner_stop(redo_spawner *s)
{
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int redo_spawn_wait(pid_t pid, int *status)
{
    while (waitpid(pid, status, 0) < 0) {
        if (errno != EINTR)
            return -1;
    }
    return 0;
}

int redo_spawn_run(redo_spawner *s, const redo_spawn_args *a, const char *stdin_text,
                   const char *log_path, char *err, size_t errlen)
{
    int in[2];
    if (pipe2(in, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        return -1;
    }
    int logfd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (logfd < 0) {
        snprintf(err, errlen, "open %s: %s", log_path, strerror(errno));
        close(in[0]);
        close(in[1]);
        return -1;
    }
    redo_spawn_args job = *a;
    job.stdin_fd = in[0];
    job.stdout_fd = job.stderr_fd = logfd;
    pid_t pid = redo_spawn(s, &job);
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        close(in[0]);
        close(in[1]);
        close(logfd);
        return -1;
    }
    close(in[0]);
    close(logfd);
    if (stdin_text != NULL) {
        size_t len = strlen(stdin_text);
        const char *p = stdin_text;
        while (len > 0) {
            ssize_t n = write(in[1], p, len);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            p += n;
            len -= (size_t)n;
        }
    }
    close(in[1]);
    int status;
    if (redo_spawn_wait(pid, &status) != 0) {
        snprintf(err, errlen, "waitpid: %s", strerror(errno));
        return -1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(err, errlen, "%s failed (status 0x%x); see %s", a->argv[0], status, log_path);
        return -1;
    }
    return 0;
}
