/*
 * proc.h: starting, finding and stopping the cluster's processes.
 *
 * Daemons are spawned detached (own session, stdin /dev/null, stdout and
 * stderr appended to a log file) so they outlive the `strata` command; their
 * pid goes to D/<name>.pid.  A process counts as running only while its pid
 * is alive, not a zombie, and its /proc/<pid>/cmdline still names the
 * expected program and carries the expected marker argument (so a recycled
 * pid is never mistaken for ours).  When strata runs as root, postgres
 * processes run as an unprivileged user (initgroups, setgid, setuid before
 * exec).
 *
 * Not for: what each component needs (compute.c, safekeepers.c).
 */
#ifndef STRATA_CLI_PROC_H
#define STRATA_CLI_PROC_H

#include <stdbool.h>
#include <sys/types.h>

#include "cli/cli.h"

/* Who a child runs as.  drop=false: as the caller. */
typedef struct proc_user {
    bool drop;
    uid_t uid;
    gid_t gid;
    char name[64];
} proc_user;

/* Most processes proc_kill_tree finds under one. */
#define PROC_MAX_TREE 256

/*
 * The identity postgres processes run as: `name` when we are root (which
 * must exist), otherwise ourselves.  Returns 0 or -1 with a reason.
 */
int proc_user_for_postgres(const char *name, proc_user *out, cli_err *err);

/*
 * Starts argv[0] (an absolute path) detached, with stdout/stderr appended to
 * logpath, in directory cwd, as user.  On success *pid is the daemon's pid
 * (exec has succeeded).  Returns 0, or -1 with a reason (exec failures
 * included).
 */
int proc_spawn_detached(char *const argv[], const char *logpath, const char *cwd,
                        const proc_user *user, pid_t *pid, cli_err *err);

/*
 * Runs argv[0] to completion as user, output appended to logpath (or
 * inherited when NULL), killing it after timeout_s seconds.  Returns 0 when it
 * exited with status 0, else -1 with a reason naming the log.
 */
int proc_run(char *const argv[], const char *logpath, const proc_user *user, int timeout_s,
             cli_err *err);

/* Replaces path with pid atomically and durably (durable_write_file: the old
 * or the new pid after a crash, never a torn file).  Returns 0 or -1. */
int proc_pidfile_write(const char *path, pid_t pid, cli_err *err);

/* Reads a pid file.  Returns 0, 1 when absent or unparsable, -1 on IO error. */
int proc_pidfile_read(const char *path, pid_t *pid, cli_err *err);

/* True when pid is alive (not a zombie), its cmdline's argv[0] (or, for a
 * script, argv[1]) has exe's base name, and some argument equals marker. */
bool proc_matches(pid_t pid, const char *exe, const char *marker);

/* True when pid exists and is not a zombie. */
bool proc_alive(pid_t pid);

/*
 * SIGKILLs pid and every process descended from it (a pageserver's redo
 * helpers and an initdb's postgres among them: they may have left pid's
 * process group), and waits up to timeout_ms for all of them to be gone.
 * True when they are.
 */
bool proc_kill_tree(pid_t pid, int timeout_ms);

/*
 * Sends sig to pid and waits up to timeout_ms for it to be gone.
 * Returns true when it is gone.
 */
bool proc_signal_and_wait(pid_t pid, int sig, int timeout_ms);

/* Waits up to timeout_ms for pid to be gone; true when it is. */
bool proc_wait_gone(pid_t pid, int timeout_ms);

/* chown -R path to user (no-op when user->drop is false).  0 or -1. */
int proc_chown_tree(const char *path, const proc_user *user, cli_err *err);

/* Removes path and everything under it, if it exists (symlinks are removed,
 * never followed).  0, or -1 with a reason naming path. */
int proc_remove_tree(const char *path, cli_err *err);

/* Checks, as user, access(path, mode) (R_OK, W_OK, X_OK).  0 or -1. */
int proc_check_access(const char *path, int mode, const proc_user *user, cli_err *err);

/* Milliseconds on a monotonic clock. */
long long proc_now_ms(void);

/* Sleeps ms milliseconds (restarting on EINTR). */
void proc_sleep_ms(int ms);

#endif
