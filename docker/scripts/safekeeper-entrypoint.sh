#!/usr/bin/env bash
# docker/scripts/safekeeper-entrypoint.sh: the entrypoint of the safekeeper image.
#
# A safekeeper whose volume was lost is replaced by starting it again with an empty
# volume and a node id never used before (STRATA_SK<N>_ID in docker-compose.yml;
# docs/operations.md "Replacing a safekeeper under Compose").  Before the daemon starts,
# `strata safekeeper seed` copies the timeline from the survivors into the empty volume
# (it refuses an empty volume under a node id that is still a member: that disk was lost
# under its old name).  Once the daemon runs, `strata safekeeper join`, in the
# background, switches the node in: joint configuration, the wait for the sync position,
# the new set alone.  Both do nothing on an ordinary start.  Then the auth entrypoint
# execs the daemon.
#
# Environment (besides the daemon's): STRATA_SK_ADDRESS (this node's host:port),
# STRATA_SAFEKEEPERS, STRATA_TENANT_ID, STRATA_TIMELINE_ID, STRATA_ADMIN_TOKEN.
set -euo pipefail
. /opt/strata/scripts/common.sh
export STRATA_TENANT_ID STRATA_TIMELINE_ID STRATA_SAFEKEEPERS

if [ -n "${STRATA_SK_ADDRESS:-}" ]; then
  strata safekeeper seed || die "strata safekeeper seed failed: the daemon does not start"
  # Detached (its parent exits at once), so that the init process reaps it.
  (strata safekeeper join 2>&1 | sed -u 's/^/join: /' &)
fi
exec /opt/strata/scripts/auth-entrypoint.sh "$@"
