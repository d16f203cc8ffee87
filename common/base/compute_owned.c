/*
 * compute_owned.c: the one list of settings Strata owns on a compute (see
 * compute_owned.h).
 */
#include "base/compute_owned.h"

#include <stddef.h>
#include <strings.h>

static const char *const owned[] = {
    "port",
    "unix_socket_directories",
    "synchronous_standby_names",
    "synchronous_commit",
    "restart_after_crash",
    "strata.safekeepers",
    "strata.tenant_id",
    "strata.timeline_id",
    "strata.pageserver",
    "strata.pageserver_password",
    "strata.safekeeper_password",
    "strata.allow_timeline_creation",
    /* A read-only compute's (cli/compute/compute_readonly.c): from postgresql.auto.conf,
     * which a replica's basebackup carries from its primary, they would
     * override the replica's own. */
    "strata.read_lsn",
    "primary_conninfo",
    "hot_standby",
};

bool compute_setting_owned(const char *name)
{
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
        if (strcasecmp(name, owned[i]) == 0)
            return true;
    return false;
}
