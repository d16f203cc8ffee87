/*
 * strata_assert.h: assertions that stay on in every build.
 *
 * For: invariants whose violation means the program's own state is wrong
 * (an effect list overflowing, a flush that skips a layer, a sync round
 * finishing twice).  Release builds are RelWithDebInfo, whose NDEBUG turns
 * plain assert() into nothing; STRATA_ASSERT evaluates its condition in
 * every build and, when it is false, writes one line to stderr -- file:line,
 * function, the condition's text, and for STRATA_ASSERT_MSG a formatted
 * detail -- and calls abort().  Stopping there leaves a core and a log line
 * that name the broken rule, instead of corrupt WAL or pages found later.
 *
 * Not for: bad input (that gets an error and the connection closes,
 * docs/design.md §1.4), nor for conditions too costly to evaluate per
 * record or per page: those stay plain assert(), checked in the sanitized
 * Debug build only.  The condition must be cheap and free of side effects
 * the program relies on only when checks are on (it is always evaluated,
 * exactly once).
 *
 * libc only and header only: the pure cores include it, and proposer.c is
 * compiled into strata.so, which must not depend on our static libraries.
 * Inside a Postgres backend the line goes to the server log and the abort
 * makes the postmaster restart, as PostgreSQL's own Assert does.
 */
#ifndef STRATA_COMMON_STRATA_ASSERT_H
#define STRATA_COMMON_STRATA_ASSERT_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STRATA_ASSERT(cond)                                                                        \
    (__builtin_expect(!(cond), 0) ? strata_assert_fail(__FILE__, __LINE__, __func__, #cond, NULL)  \
                                  : (void)0)

/* As STRATA_ASSERT, with a printf-style detail (the values that broke it). */
#define STRATA_ASSERT_MSG(cond, ...)                                                               \
    (__builtin_expect(!(cond), 0)                                                                  \
         ? strata_assert_fail(__FILE__, __LINE__, __func__, #cond, __VA_ARGS__)                    \
         : (void)0)

/* Writes the failure line and aborts.  Called only through the macros.  The
 * line is built in one buffer and written with one write(2), so lines from
 * several threads or processes sharing stderr do not interleave. */
__attribute__((noreturn, cold, format(printf, 5, 6))) static inline void
strata_assert_fail(const char *file, int line, const char *func, const char *cond, const char *fmt,
                   ...)
{
    char buf[1024];
    size_t cap = sizeof buf - 1; /* room for the newline */
    int n =
        snprintf(buf, cap, "strata: assertion failed at %s:%d in %s(): %s", file, line, func, cond);
    size_t len = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    if (fmt != NULL && len + 2 < cap) {
        memcpy(buf + len, ": ", 2);
        len += 2;
        va_list ap;
        va_start(ap, fmt);
        n = vsnprintf(buf + len, cap - len, fmt, ap);
        va_end(ap);
        len += n < 0 ? 0 : (size_t)n < cap - len ? (size_t)n : cap - len - 1;
    }
    buf[len++] = '\n';
    for (size_t off = 0; off < len;) {
        ssize_t w = write(STDERR_FILENO, buf + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    abort();
}

#endif
