/*
 * redo_spawn.h: starting redo helper processes that die with the pageserver
 * (docs/design.md §6.5).
 *
 * For: forking and executing one helper with its stdin, stdout and stderr
 * given, in its own session, without core dumps, as the unprivileged user
 * when we run as root, and with PR_SET_PDEATHSIG set to SIGKILL.  Linux
 * sends that signal when the *thread* that forked the child ends, not when
 * the process does, and clears it when the child changes its credentials.
 * So one thread that lives as long as the spawner does every fork, and the
 * child sets the signal after dropping privileges.  A helper that hangs or
 * is stopped then still dies when the pageserver is killed; one that is
 * merely idle would also exit at the end of its stdin.
 *
 * Also: running a one-shot program (initdb, cp) to its end and reaping
 * children.
 *
 * Not for: talking to the helper or deciding when it must die (redo.c).
 *
 * Threads: redo_spawn may be called from any thread; it waits for the
 * spawner thread to fork.
 */
#ifndef STRATA_PAGESERVER_REDO_SPAWN_H
#define STRATA_PAGESERVER_REDO_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct redo_spawner redo_spawner;

typedef struct redo_spawn_args {
    char *const *argv; /* argv[0] is the program's path */
    int stdin_fd, stdout_fd, stderr_fd;
    bool drop_privileges; /* setgid, setgroups, setuid to uid/gid first */
    uid_t uid;
    gid_t gid;
} redo_spawn_args;

/* Starts the spawner thread.  0, or -1 with err. */
int redo_spawner_start(redo_spawner **out, char *err, size_t errlen);

/* Forks and executes a->argv on the spawner thread.  The child's pid, or -1
 * with errno set (the fork failed, or the spawner is stopping). */
pid_t redo_spawn(redo_spawner *s, const redo_spawn_args *a);

/* Runs a->argv to its end through the spawner (a's fds are ignored):
 * stdin_text (NULL: nothing) on its stdin, its stdout and stderr to log_path
 * (truncated).  0 if it exited 0, else -1 with err. */
int redo_spawn_run(redo_spawner *s, const redo_spawn_args *a, const char *stdin_text,
                   const char *log_path, char *err, size_t errlen);

/* Reaps pid, retrying on EINTR.  0 with *status, or -1 with errno. */
int redo_spawn_wait(pid_t pid, int *status);

/* Ends the spawner thread.  Children it started get their parent-death
 * signal, so stop them first.  NULL is ignored. */
void redo_spawner_stop(redo_spawner *s);

#endif
