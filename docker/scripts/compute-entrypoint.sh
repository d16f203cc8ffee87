#!/usr/bin/env bash
# docker/scripts/compute-entrypoint.sh: the compute service of the Compose stack.
#
# Writes strata.conf and pg_hba.conf into the data directory the init service made
# (volume compute-data), then execs the patched postgres as user postgres with strata.so
# preloaded; its walproposer streams WAL to the three safekeepers and a commit returns
# once two of them have fsynced it.  The settings are those `strata start compute` writes
# (docs/cli.md), except that it listens on every interface of the container.
#
# The start itself is the single line in start_compute below.  When the strata CLI can
# start a compute against remote daemons, that line becomes the CLI call (the stateless
# compute: sync-safekeepers, basebackup from the pageserver, config, postgres).
#
# Environment: STRATA_TENANT_ID, STRATA_TIMELINE_ID, STRATA_SAFEKEEPERS, PGDATA,
# STRATA_SHARED_BUFFERS (default 128MB), STRATA_COMPUTE_HBA_ADDRESS (clients trusted
# without a password, default all: a development stack), STRATA_COMPUTE_EXTRA_CONF
# (lines appended to strata.conf).
set -euo pipefail
. /opt/strata/scripts/common.sh
check_id STRATA_TENANT_ID "$STRATA_TENANT_ID"
check_id STRATA_TIMELINE_ID "$STRATA_TIMELINE_ID"

[ -f "$PGDATA/PG_VERSION" ] ||
  die "no data directory at $PGDATA: the init service creates it (docker-compose up runs it first)"

cat >"$PGDATA/strata.conf" <<CONF
# Written by compute-entrypoint.sh at every start; edits are lost.
listen_addresses = '*'
port = 5432
unix_socket_directories = '/tmp'
shared_preload_libraries = '${STRATA_EXTENSION:-/opt/strata/lib/strata.so}'
strata.safekeepers = '$STRATA_SAFEKEEPERS'
strata.tenant_id = '$STRATA_TENANT_ID'
strata.timeline_id = '$STRATA_TIMELINE_ID'
synchronous_standby_names = 'walproposer'
synchronous_commit = on
wal_level = replica
max_wal_senders = 10
wal_keep_size = '1GB'
full_page_writes = on
fsync = off
restart_after_crash = off
shared_buffers = '${STRATA_SHARED_BUFFERS:-128MB}'
log_line_prefix = '%m [%p] '
${STRATA_COMPUTE_EXTRA_CONF:-}
CONF
hba=${STRATA_COMPUTE_HBA_ADDRESS:-all}
cat >"$PGDATA/pg_hba.conf" <<HBA
# Written by compute-entrypoint.sh: trust local connections and $hba (development stack).
local   all          all                 trust
local   replication  all                 trust
host    all          all   127.0.0.1/32  trust
host    replication  all   127.0.0.1/32  trust
host    all          all   $hba          trust
HBA
chown -R postgres:postgres "$(dirname "$PGDATA")"
# This container owns the volume: a postmaster.pid left by a killed container is stale.
rm -f "$PGDATA/postmaster.pid"

start_compute() {
  exec setpriv --reuid=postgres --regid=postgres --init-groups -- postgres -D "$PGDATA"
}
log "starting postgres on :5432 (safekeepers $STRATA_SAFEKEEPERS)"
start_compute
