/*
 * compute_owned.h: the compute settings Strata writes at every start and no
 * operator may override, by `strata start compute --set` (cli/) or by
 * ALTER SYSTEM (compute/extension/alter_system.c): where the launcher finds
 * the compute, the synchronous replication through the walproposer that
 * holds every commit until the safekeepers have it, the crash behaviour a
 * stateless compute relies on, and the timeline's identity and credentials.
 * libc only: compiled into the daemons' library and into strata.so.
 */
#ifndef STRATA_COMMON_COMPUTE_OWNED_H
#define STRATA_COMMON_COMPUTE_OWNED_H

#include <stdbool.h>

/* True if name (case-insensitive, as GUC names are) is one of them. */
bool compute_setting_owned(const char *name);

#endif
