/*
 * seccomp.c: the redo helper's sandbox.
 *
 * For: shrinking what a compromised or confused helper can do.  Records come
 * from WAL that any database user can influence, and redo code was written
 * for trusted input, so the helper enters a seccomp filter before its first
 * request: from then on it can read its stdin, write its stdout and stderr,
 * manage memory, read clocks, return from signals and exit.  Any other system
 * call kills the whole process (SECCOMP_RET_KILL_PROCESS); the pool sees the
 * death, restarts a helper and reports the request's failure.
 *
 * Not for: the pageserver side, or anything before the request loop (start-up
 * opens files, maps shared memory and so on, and runs unfiltered).
 */
#include "postgres.h"

#include <seccomp.h>

#include "walredo_int.h"

/* What the request loop needs, and why. */
static const int allowed_syscalls[] = {
    SCMP_SYS(read),   /* frames on stdin */
    SCMP_SYS(write),  /* frames on stdout, log lines on stderr */
    SCMP_SYS(writev), /* stdio may gather */
    SCMP_SYS(brk),    /* malloc under palloc */
    SCMP_SYS(mmap),
    SCMP_SYS(munmap),
    SCMP_SYS(mremap),
    SCMP_SYS(madvise),       /* free() returning memory */
    SCMP_SYS(clock_gettime), /* timestamps in log lines (vDSO fallback) */
    SCMP_SYS(gettimeofday),
    SCMP_SYS(rt_sigreturn),   /* returning from a signal handler */
    SCMP_SYS(rt_sigprocmask), /* sigsetjmp/siglongjmp of PG_TRY */
    SCMP_SYS(select),         /* pg_usleep (spinlock back-off) */
    SCMP_SYS(pselect6),
    SCMP_SYS(futex), /* semaphores, should one ever block */
    SCMP_SYS(getpid),
    SCMP_SYS(exit),
    SCMP_SYS(exit_group),
};

void walredo_enter_seccomp(void)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
    int rc;

    if (ctx == NULL)
        ereport(ERROR,
                (errcode(ERRCODE_INTERNAL_ERROR), errmsg("could not create the seccomp filter")));
    for (size_t i = 0; i < lengthof(allowed_syscalls); i++) {
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, allowed_syscalls[i], 0);
        if (rc < 0) {
            seccomp_release(ctx);
            ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                            errmsg("could not add a seccomp rule: %s", strerror(-rc))));
        }
    }
    rc = seccomp_load(ctx);
    seccomp_release(ctx);
    if (rc < 0)
        ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR),
                        errmsg("could not load the seccomp filter: %s", strerror(-rc))));
}
