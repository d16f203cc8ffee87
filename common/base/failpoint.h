/*
 * failpoint.h: named crash and delay points, so a test can stop a daemon at
 * an exact step of a multi-step protocol (an upload, a remote GC) the way a
 * kill -9 or a slow disk would.
 *
 * A test sets STRATA_FAILPOINTS in the daemon's environment to a
 * comma-separated list of NAME=ACTION:
 *   NAME=exit        the process ends at once with _exit(137), as if killed
 *                    (no atexit handlers, no flushing of stdio buffers)
 *   NAME=sleep:MS    the calling thread sleeps MS milliseconds, then goes on
 * Unknown actions and malformed entries are reported once on stderr and
 * ignored.  With the variable unset a failpoint costs one load and a branch.
 *
 * The list is read once, at the first failpoint_hit of the process;
 * failpoint_reload re-reads it (for unit tests).
 * Threads: any thread may call failpoint_hit.
 */
#ifndef STRATA_COMMON_FAILPOINT_H
#define STRATA_COMMON_FAILPOINT_H

#define FAILPOINT_ENV "STRATA_FAILPOINTS"

/* Acts on the point called name if the environment names it. */
void failpoint_hit(const char *name);

/* Re-reads FAILPOINT_ENV (not thread-safe with concurrent failpoint_hit). */
void failpoint_reload(void);

#endif
