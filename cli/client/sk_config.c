/*
 * sk_config.c: a safekeeper behind on the configuration is switched to the
 * newest one its peers hold.  See sk_config.h.
 */
#include "cli/client/sk_config.h"

#include <stdbool.h>
#include <stdio.h>

#include "cli/client/sk_client.h"
#include "cli/client/sk_fleet.h"
#include "base/strata_assert.h"

int sk_config_catch_up(const cluster *c, int only, cli_err *err)
{
    STRATA_ASSERT(only >= -1 && only < CLUSTER_SAFEKEEPERS);
    /* Configurations are the admin's: the fleet asks with the admin token. */
    sk_fleet f;
    sk_fleet_of_cluster(c, &f);
    f.quiet = true;
    sk_state st[CLUSTER_SAFEKEEPERS];
    bool up[CLUSTER_SAFEKEEPERS];
    sk_fleet_query(&f, -1, st, up);
    int newest = -1;
    for (int i = 0; i < CLUSTER_SAFEKEEPERS; i++)
        if (up[i] && (newest < 0 || st[i].mconf.generation > st[newest].mconf.generation))
            newest = i;
    int rc = 0;
    for (int i = 0; newest >= 0 && i < CLUSTER_SAFEKEEPERS; i++) {
        if (!up[i] || (only >= 0 && i != only) ||
            st[i].mconf.generation >= st[newest].mconf.generation)
            continue;
        const membership *m = &st[newest].mconf;
        sk_target t = sk_fleet_target(&f, i);
        cli_err e = {{0}};
        if (sk_client_switch(&t, m, &e) != 0) {
            if (rc == 0)
                cli_err_set(err,
                            "%s holds configuration generation %u, behind %s's %u, and did not "
                            "take it: %s",
                            c->sk[i].name, st[i].mconf.generation, c->sk[newest].name,
                            m->generation, e.msg);
            rc = -1;
            continue;
        }
        printf("%s: configuration generation %u -> %u (as %s holds it)\n", c->sk[i].name,
               st[i].mconf.generation, m->generation, c->sk[newest].name);
        fflush(stdout);
    }
    return rc;
}
