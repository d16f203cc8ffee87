/*
 * clock.h: the monotonic clock, for durations and deadlines inside one
 * process (CLOCK_MONOTONIC: never set back, not comparable across machines).
 * Not for: timestamps a person or another process reads (log.c stamps its
 * lines from the wall clock).
 */
#ifndef STRATA_BASE_CLOCK_H
#define STRATA_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds since an arbitrary fixed point. */
static inline uint64_t clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
