/*
 * sk_config.h: keeping every safekeeper of the cluster on the timeline's
 * newest configuration.
 *
 * A safekeeper that was down (or unreachable) while the configuration
 * changed keeps the old generation, and no compute can bring it along:
 * only the admin installs a configuration (docs/design.md §4.10), and a
 * compute holds a tenant's token.  Until it is brought up to date it
 * refuses the compute's greeting and counts for nothing; the other members
 * commit without it.  `strata start skN` and `strata up` bring it up to
 * date with the admin token: the newest configuration any other running
 * safekeeper holds is switched on each one behind it (SWITCH_MEMBERSHIP).
 * That is the configuration a trusted proposer would have brought it, so
 * it is as safe as the greeting was before: configurations only go
 * forward, and a member left out of the new one stops voting.
 *
 * Not for: choosing a new configuration (cmd_safekeeper.c).
 */
#ifndef STRATA_CLI_SK_CONFIG_H
#define STRATA_CLI_SK_CONFIG_H

#include "cli/cli.h"
#include "cli/local/cluster.h"

/*
 * Brings the running safekeepers behind on the cluster's timeline (only the
 * one at index `only`, or all with -1) to the newest configuration the
 * running ones hold, printing each switch.  One that does not answer or
 * lacks the timeline is left alone.  0, or -1 with err naming the first
 * that refused (the others are still tried).
 */
int sk_config_catch_up(const cluster *c, int only, cli_err *err);

#endif
