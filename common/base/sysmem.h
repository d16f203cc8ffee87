/*
 * sysmem.h: how much memory this process may use -- the machine's RAM, or
 * its memory cgroup's limit when that is smaller -- for sizing caches by
 * default (the pageserver's page cache, the compute's file cache).
 * Not for: enforcing anything; a figure to size a default from.
 */
#ifndef STRATA_BASE_SYSMEM_H
#define STRATA_BASE_SYSMEM_H

#include <stdint.h>

/* The limit of this process's memory cgroup in bytes (v1
 * memory.limit_in_bytes or v2 memory.max, found through /proc/self/cgroup;
 * the smallest when several apply), or 0 when it has none or it cannot be
 * read. */
uint64_t sysmem_cgroup_limit_bytes(void);

/* min(physical RAM, sysmem_cgroup_limit_bytes()), or 0 when neither is
 * known. */
uint64_t sysmem_usable_bytes(void);

#endif
