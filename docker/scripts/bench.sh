#!/usr/bin/env bash
# docker/scripts/bench.sh: the bench service of the Compose stack: pgbench (TPC-B like)
# against the compute.  Initialises the pgbench tables when they are missing, then runs
# for BENCH_SECONDS and prints pgbench's summary; exits with pgbench's status.
#
# Environment: PGHOST (default compute), PGPORT (5432), PGUSER (postgres), BENCH_SCALE
# (10), BENCH_CLIENTS (4), BENCH_THREADS (2), BENCH_SECONDS (20), BENCH_PROGRESS (5),
# BENCH_WAIT (s to wait for the compute, 120), BENCH_ARGS (extra pgbench arguments).
set -euo pipefail
. /opt/strata/scripts/common.sh
export PGHOST=${PGHOST:-compute} PGPORT=${PGPORT:-5432} PGUSER=${PGUSER:-postgres}
export PGDATABASE=${PGDATABASE:-postgres}
log "waiting for the compute at $PGHOST:$PGPORT"
wait_for "${BENCH_WAIT:-120}" compute psql -Atc 'select 1'
if [ "$(psql -Atc "select to_regclass('pgbench_branches') is not null")" != t ]; then
  log "pgbench -i -s ${BENCH_SCALE:-10}"
  pgbench -i -s "${BENCH_SCALE:-10}" -q
fi
log "pgbench -T ${BENCH_SECONDS:-20} -c ${BENCH_CLIENTS:-4}"
# shellcheck disable=SC2086
exec pgbench -n -T "${BENCH_SECONDS:-20}" -c "${BENCH_CLIENTS:-4}" -j "${BENCH_THREADS:-2}" \
  -P "${BENCH_PROGRESS:-5}" ${BENCH_ARGS:-}
