#!/usr/bin/env bash
# docker/scripts/compute-entrypoint.sh: the compute service of the Compose stack.
#
# The stateless compute, started the one way every compute starts: `strata start compute
# --remote` (cli/compute/compute_remote.h, docs/cli.md) runs sync-safekeepers against sk1-3,
# fetches a stateless basebackup from the pageserver into a new data directory in the
# container's own writable layer (no volume: nothing survives the container, nothing
# needs to), writes strata.conf (full_page_writes = off, every page through the strata
# smgr from the pageserver, the tokens) and becomes postgres, as user postgres.
#
# Environment (the compose file sets it): STRATA_TENANT_ID, STRATA_TIMELINE_ID,
# STRATA_SAFEKEEPERS, STRATA_PAGESERVER, STRATA_PAGESERVER_HTTP,
# STRATA_PAGESERVER_PASSWORD and STRATA_SAFEKEEPER_PASSWORD (the tenant's token),
# STRATA_COMPUTE_TRUST (clients trusted without a password; the stack: all),
# STRATA_SHARED_BUFFERS (default 128MB), STRATA_COMPUTE_FILE_CACHE_MB.
# Arguments (the service's `command:`) go to postgres, for example -c work_mem=8MB.
set -euo pipefail
. /opt/strata/scripts/common.sh
check_id STRATA_TENANT_ID "$STRATA_TENANT_ID"
check_id STRATA_TIMELINE_ID "$STRATA_TIMELINE_ID"
export STRATA_TENANT_ID STRATA_TIMELINE_ID STRATA_SAFEKEEPERS STRATA_PAGESERVER STRATA_PAGESERVER_HTTP
exec strata start compute --remote --dir /var/lib/strata -- \
  -c "shared_buffers=${STRATA_SHARED_BUFFERS:-128MB}" "$@"
