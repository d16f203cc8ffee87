#!/usr/bin/env bash
# tests/compose/run.sh: the Compose test (`make compose-test`).
#
# Builds the images of docker/docker-compose.yml and runs the stack for real, with podman
# standing in for a Docker engine (/work/shared/containers/podman-ci.sh, or
# $STRATA_PODMAN_CI), and checks:
#   1. `docker-compose config` accepts the file;
#   2. the stack comes up: three safekeepers, the pageserver, init (exits 0), the compute
#      (healthy), reachable from the host on its published port;
#   3. the bench service's pgbench (BENCH_SECONDS, default 20) commits transactions, and
#      pgbench_history holds exactly one row per transaction pgbench reports;
#   4. after `docker-compose kill sk3` (SIGKILL, the container stays down), single
#      commits still return within 10 s each and a second pgbench run commits more:
#      history grows by exactly its count; sk1 and sk2 hold WAL up to the compute's flush
#      LSN while sk3 is down;
#   5. sk3 started again catches up with the others;
# then tears everything down (down -v) whatever happened.  Every wait is bounded.
# Prints progress lines and the durations of the image build and of the test.
#
# Environment: CTR_WORK (podman storage, default /tmp/strata-podman: kept between runs
# so a second run reuses the image layers), STRATA_COMPOSE_SRC (head: committed tree +
# docker/ as on disk (default); worktree: tracked files as on disk),
# STRATA_COMPOSE_PROJECT (default stratatest), BENCH_SECONDS (20),
# STRATA_COMPOSE_BUILD_TIMEOUT (s, 5400), STRATA_COMPOSE_KEEP=1 (leave the stack up on
# failure, for debugging).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
podman_ci=${STRATA_PODMAN_CI:-/work/shared/containers/podman-ci.sh}
export CTR_WORK=${CTR_WORK:-/tmp/strata-podman}
project=${STRATA_COMPOSE_PROJECT:-stratatest}
bench_seconds=${BENCH_SECONDS:-20}
build_timeout=${STRATA_COMPOSE_BUILD_TIMEOUT:-5400}
ctx="$CTR_WORK/context"
t_start=$SECONDS

progress() { printf '[compose-test %4ds] %s\n' "$((SECONDS - t_start))" "$*"; }
fail() {
  printf '[compose-test %4ds] FAIL: %s\n' "$((SECONDS - t_start))" "$*" >&2
  exit 1
}

# --- podman as the Docker engine -------------------------------------------------------
[ -x "$podman_ci" ] || [ -f "$podman_ci" ] || fail "podman recipe $podman_ci not found"
if ! command -v podman >/dev/null || ! command -v docker-compose >/dev/null ||
  ! command -v runc >/dev/null; then
  progress "installing podman, runc and docker-compose (apt)"
  timeout 900 bash "$podman_ci" install >/dev/null
fi
progress "base image debian:bookworm (debootstrap once, then cached)"
timeout 900 bash "$podman_ci" base >/dev/null
started_service=0
if ! curl -fsS --max-time 2 --unix-socket "$CTR_WORK/podman.sock" http://d/_ping >/dev/null 2>&1; then
  timeout 60 bash "$podman_ci" start >/dev/null
  started_service=1
fi
# shellcheck disable=SC1091
. "$CTR_WORK/env.sh"
progress "podman API at $DOCKER_HOST"

# --- a clean build context -------------------------------------------------------------
bash "$here/stage-context.sh" "$ctx" "${STRATA_COMPOSE_SRC:-head}"
compose_file="$ctx/docker/docker-compose.yml"
DC=(docker-compose --ansi never -f "$compose_file" -p "$project")
dc() { "${DC[@]}" "$@"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export STRATA_COMPUTE_PORT=${STRATA_COMPUTE_PORT:-$(free_port)}
export STRATA_PAGESERVER_HTTP_PORT=${STRATA_PAGESERVER_HTTP_PORT:-$(free_port)}
export COMPOSE_HTTP_TIMEOUT=300

psql_host() {
  timeout "${PSQL_TIMEOUT:-30}" psql -X -h 127.0.0.1 -p "$STRATA_COMPUTE_PORT" -U postgres -d postgres \
    -v ON_ERROR_STOP=1 -Atc "$1"
}
container() { dc ps -q "$1" 2>/dev/null | head -n 1; }
state_of() {
  local id
  id=$(container "$1")
  [ -n "$id" ] || { echo absent; return; }
  podman inspect -f '{{.State.Status}}' "$id" 2>/dev/null || echo absent
}
# flush_lsn of our timeline on safekeeper $1, as a decimal byte position.
sk_flush() {
  local body
  body=$(timeout 20 "${DC[@]}" exec -T "$1" curl -fsS --max-time 5 http://127.0.0.1:7676/v1/status) || return 1
  printf '%s' "$body" | python3 -c '
import json, sys
tl = [t for t in json.load(sys.stdin)["timelines"] if t["timeline_id"] == sys.argv[1]]
hi, lo = tl[0]["flush_lsn"].split("/")
print((int(hi, 16) << 32) | int(lo, 16))' "${STRATA_TIMELINE_ID:-7e1e7e1e7e1e7e1e7e1e7e1e7e1e7e1e}"
}
lsn_dec() { python3 -c 'import sys; hi, lo = sys.argv[1].split("/"); print((int(hi, 16) << 32) | int(lo, 16))' "$1"; }

cleanup() {
  local rc=$?
  set +e
  if [ "$rc" != 0 ]; then
    progress "failed (exit $rc): container states and the last log lines"
    timeout 30 "${DC[@]}" ps -a
    timeout 60 "${DC[@]}" logs --no-color --tail 40
  fi
  if [ "$rc" != 0 ] && [ "${STRATA_COMPOSE_KEEP:-0}" = 1 ]; then
    progress "STRATA_COMPOSE_KEEP=1: leaving project $project up (tear down: dc down -v)"
    exit "$rc"
  fi
  progress "tearing down (down -v)"
  timeout 180 "${DC[@]}" --profile bench down -v -t 20 >/dev/null 2>&1
  if [ "$started_service" = 1 ]; then
    timeout 120 bash "$podman_ci" stop >/dev/null 2>&1
  fi
  progress "total $((SECONDS - t_start)) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. config ------------------------------------------------------------------------
dc config -q || fail "docker-compose config refused docker/docker-compose.yml"
progress "docker-compose config: ok"
# A stack of an earlier, interrupted run under the same project name goes first.
timeout 180 "${DC[@]}" --profile bench down -v -t 10 >/dev/null 2>&1 || true

# --- 2. build and up ------------------------------------------------------------------
progress "building images (the first build compiles the patched PostgreSQL: ~20 min at -j2)"
t0=$SECONDS
timeout "$build_timeout" "${DC[@]}" build >"$CTR_WORK/build.log" 2>&1 || {
  tail -n 40 "$CTR_WORK/build.log" >&2
  fail "image build failed or took over $build_timeout s (log $CTR_WORK/build.log)"
}
build_s=$((SECONDS - t0))
progress "images built in $build_s s (log $CTR_WORK/build.log)"

t0=$SECONDS
progress "up -d: safekeepers, pageserver, init, compute (compute on 127.0.0.1:$STRATA_COMPUTE_PORT)"
timeout 420 "${DC[@]}" up -d >"$CTR_WORK/up.log" 2>&1 || {
  cat "$CTR_WORK/up.log" >&2
  fail "docker-compose up did not finish"
}
init_id=$(dc ps -a -q init | head -n 1)
[ "$(podman inspect -f '{{.State.ExitCode}}' "$init_id")" = 0 ] || fail "init did not exit 0"
deadline=$((SECONDS + 120))
until [ "$(podman inspect -f '{{.State.Health.Status}}' "$(container compute)" 2>/dev/null)" = healthy ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "compute not healthy within 120 s"
  sleep 2
done
for s in sk1 sk2 sk3 pageserver compute; do
  [ "$(state_of $s)" = running ] || fail "$s is $(state_of $s), not running"
done
[ "$(psql_host 'select 1')" = 1 ] || fail "compute not reachable from the host"
up_s=$((SECONDS - t0))
progress "stack up in $up_s s: $(psql_host 'select version()' | cut -c1-40)"
progress "init: $(dc logs --no-color init | grep -E 'imported|nothing to do|already' | tail -n 1 | sed 's/^[^|]*| //')"

# --- 3. pgbench from the bench service ------------------------------------------------
progress "bench service: pgbench -i, then ${bench_seconds} s of TPC-B"
timeout $((bench_seconds + 300)) "${DC[@]}" run --rm --no-deps -e BENCH_SECONDS="$bench_seconds" bench \
  >"$CTR_WORK/bench1.log" 2>&1 || {
  cat "$CTR_WORK/bench1.log" >&2
  fail "the first pgbench run failed"
}
tx1=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$CTR_WORK/bench1.log")
tps1=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$CTR_WORK/bench1.log" | head -n 1)
[ -n "$tx1" ] && [ "$tx1" -gt 0 ] || fail "the first pgbench run committed nothing"
n1=$(psql_host 'select count(*) from pgbench_history')
[ "$n1" = "$tx1" ] || fail "pgbench reported $tx1 transactions but pgbench_history has $n1 rows"
progress "pgbench: $tx1 transactions ($tps1 tps); pgbench_history has $n1 rows"

# --- 4. kill one safekeeper: commits go on ---------------------------------------------
progress "docker-compose kill sk3 (SIGKILL)"
timeout 60 "${DC[@]}" kill sk3 >/dev/null 2>&1 || fail "docker-compose kill sk3 failed"
deadline=$((SECONDS + 30))
while [ "$(state_of sk3)" = running ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "sk3 still running 30 s after kill"
  sleep 1
done
progress "sk3 is $(state_of sk3)"
psql_host 'create table if not exists compose_ledger (id int primary key, at timestamptz default now())' >/dev/null
for i in $(seq 1 20); do
  PSQL_TIMEOUT=10 psql_host "insert into compose_ledger (id) values ($i)" >/dev/null ||
    fail "commit $i with sk3 down did not return within 10 s"
done
[ "$(psql_host 'select count(*) from compose_ledger')" = 20 ] || fail "ledger does not hold 20 rows"
progress "20 single-row commits returned with sk3 down"
timeout $((bench_seconds + 300)) "${DC[@]}" run --rm --no-deps -e BENCH_SECONDS=10 bench >"$CTR_WORK/bench2.log" 2>&1 || {
  cat "$CTR_WORK/bench2.log" >&2
  fail "pgbench with sk3 down failed"
}
tx2=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$CTR_WORK/bench2.log")
[ -n "$tx2" ] && [ "$tx2" -gt 0 ] || fail "pgbench with sk3 down committed nothing"
n2=$(psql_host 'select count(*) from pgbench_history')
[ "$n2" -eq $((n1 + tx2)) ] || fail "history grew from $n1 to $n2 rows, pgbench reported $tx2"
[ "$(state_of sk3)" != running ] || fail "sk3 came back during the run: the test did not run without it"
flush=$(lsn_dec "$(psql_host 'select pg_current_wal_flush_lsn()')")
deadline=$((SECONDS + 30))
while :; do
  f1=$(sk_flush sk1 || echo 0)
  f2=$(sk_flush sk2 || echo 0)
  [ "$f1" -ge "$flush" ] && [ "$f2" -ge "$flush" ] && break
  [ "$SECONDS" -lt "$deadline" ] || fail "sk1/sk2 flush_lsn $f1/$f2 below the compute's $flush"
  sleep 1
done
progress "with sk3 down: history $n1 -> $n2 rows (+$tx2 pgbench transactions); sk1, sk2 flushed to the compute's WAL end"

# --- 5. sk3 comes back and catches up ------------------------------------------------------
timeout 60 "${DC[@]}" start sk3 >/dev/null 2>&1 || fail "docker-compose start sk3 failed"
psql_host "insert into compose_ledger (id) values (21)" >/dev/null
target=$(lsn_dec "$(psql_host 'select pg_current_wal_flush_lsn()')")
deadline=$((SECONDS + 90))
until f3=$(sk_flush sk3 2>/dev/null) && [ "$f3" -ge "$target" ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "sk3 did not catch up to $target within 90 s (at ${f3:-?})"
  sleep 1
done
progress "sk3 restarted and caught up to the compute's WAL end"

test_s=$((SECONDS - t0))
progress "PASS: image build ${build_s} s; stack up ${up_s} s; test after the build ${test_s} s"
