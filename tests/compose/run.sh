#!/usr/bin/env bash
# tests/compose/run.sh: the Compose test (`make compose-test`).
#
# Builds the images of docker/docker-compose.yml (reusing the patched PostgreSQL `make`
# built: stage-context.sh stages it) and runs the stack for real, with podman standing
# in for a Docker engine (docker/podman-engine.sh: installed with apt, base image made
# by debootstrap, API socket), and checks:
#   1. `docker-compose config` accepts the file;
#   2. the stack comes up: the object store (healthy), three safekeepers, the
#      pageserver, init (exits 0: the
#      pageserver made the timeline with its own initdb), the compute (healthy),
#      reachable from the host on its published port;
#   2b. the object store: a put/list/get/delete of a probe object with `strata remote`
#      from inside the stack (the compute image, the daemons' endpoint and keys), a
#      signed HEAD of the bucket from the host on the published port, a wrong secret
#      refused (403); `docker-compose restart objectstore`: healthy again and the
#      probe object put before the restart is still there, byte for byte;
#   3. the compute is the stateless product: its container has no mount at all (no
#      volume), full_page_writes is off, strata.pageserver names the pageserver, and no
#      relation file exists in its data directory (only what a stateless basebackup
#      ships);
#   4. tokens: every daemon runs with an auth file made from STRATA_ADMIN_TOKEN /
#      STRATA_TENANT_TOKEN; a wrong token is refused by the pageserver's pg port
#      (basebackup/pagestream), its HTTP API, each safekeeper, and a compute started
#      with a wrong token does not start;
#   5. the bench service's pgbench (BENCH_SECONDS, default 20) commits transactions, and
#      pgbench_history holds exactly one row per transaction pgbench reports;
#   6. after `docker-compose kill sk3` (SIGKILL, the container stays down), single
#      commits still return within 10 s each and a second pgbench run commits more:
#      history grows by exactly its count; sk1 and sk2 hold WAL up to the compute's flush
#      LSN while sk3 is down; the compute's WAL bytes per transaction of that run
#      (pg_current_wal_lsn delta / transactions) is printed and must stay below 2000
#      (full_page_writes = on writes several times more);
#   7. sk3 started again catches up with the others;
#   7b. under pgbench, sk2's container and volume are deleted and it is started again as
#      node 4 (STRATA_SK2_ID): its entrypoint seeds and switches it in, sk1 and sk3 hold
#      generation 3 {1,4,3} (1 writes the first configuration down, 2 is joint), and every transaction pgbench acknowledged is in the history;
#   8. `docker-compose rm -sf compute && docker-compose up -d compute`: the new container
#      answers its first query (every acknowledged row counted) within 2 s of being
#      started (printed, with the time `up -d` itself took), and is stateless again;
#   9. the pageserver wrote page images (pageserver_image_written_total rose);
#  10. REMOTE-UPLOADS: after the pgbench runs the object store holds the timeline's
#      pageserver manifests and data files (tenants/T/timelines/TL/manifest/, data/), and
#      the safekeepers uploaded WAL segments (.../wal/; the first member deletes those no
#      one needs, so their counters say it, not the listing);
# then tears everything down (down -v) whatever happened.  Every wait is bounded.
# Prints progress lines and the durations of the image build and of the test.
#
# Environment: CTR_WORK (podman storage, default /tmp/strata-podman: kept between runs
# so a second run reuses the image layers), STRATA_COMPOSE_SRC (head: committed tree +
# docker/ as on disk (default); worktree: tracked files as on disk),
# STRATA_COMPOSE_PG_PREFIX (stage-context.sh), STRATA_COMPOSE_PROJECT (default
# stratatest), BENCH_SECONDS (20), STRATA_COMPOSE_BUILD_TIMEOUT (s, 5400),
# STRATA_COMPOSE_KEEP=1 (leave the stack up on failure, for debugging),
# STRATA_S3_PORT (the object store's published port; default: a free one).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
engine="$repo/docker/podman-engine.sh"
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
if ! command -v podman >/dev/null || ! command -v docker-compose >/dev/null ||
  ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
  progress "installing podman, runc and docker-compose (apt, docker/podman-engine.sh)"
fi
timeout 900 bash "$engine" install >/dev/null 2>&1 || fail "docker/podman-engine.sh install failed"
progress "base image debian:bookworm (debootstrap once, then cached)"
timeout 900 bash "$engine" base >/dev/null || fail "docker/podman-engine.sh base failed"
started_service=0
if ! curl -fsS --max-time 2 --unix-socket "$CTR_WORK/podman.sock" http://d/_ping >/dev/null 2>&1; then
  timeout 60 bash "$engine" start >/dev/null || fail "docker/podman-engine.sh start failed"
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
export STRATA_S3_PORT=${STRATA_S3_PORT:-$(free_port)}
export COMPOSE_HTTP_TIMEOUT=300
# Tokens of this run (docs/operations.md "Authentication"): generated by the stack's own
# docker/tokens.sh into docker/.env, which docker-compose reads; the stack refuses to
# start without them.
rand_hex() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
progress "tokens: $(bash "$ctx/docker/tokens.sh")"
set -a
# shellcheck disable=SC1091
. "$ctx/docker/.env"
set +a
[ -n "$STRATA_ADMIN_TOKEN" ] && [ -n "$STRATA_TENANT_TOKEN" ] || fail "docker/tokens.sh wrote no tokens"
[ -n "$STRATA_S3_ACCESS_KEY" ] && [ -n "$STRATA_S3_SECRET_KEY" ] || fail "docker/tokens.sh wrote no S3 keys"
s3_bucket=${STRATA_S3_BUCKET:-strata}
s3_url="s3://$s3_bucket/${STRATA_S3_PREFIX:-stack}"
tenant_id=${STRATA_TENANT_ID:-5ca1ab1e5ca1ab1e5ca1ab1e5ca1ab1e}
timeline_id=${STRATA_TIMELINE_ID:-7e1e7e1e7e1e7e1e7e1e7e1e7e1e7e1e}

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
# A metric's value (summed over its label sets) from the pageserver's /metrics.
ps_metric() {
  curl -fsS --max-time 5 "http://127.0.0.1:$STRATA_PAGESERVER_HTTP_PORT/metrics" |
    awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $2 } END { printf "%d\n", s }'
}
# Checks that the compute container ($1: a label for messages) is the stateless
# product: no mounts, full_page_writes off, the smgr on, no relation file.
check_stateless() {
  local id mounts fpw ps files
  id=$(container compute)
  mounts=$(podman inspect -f '{{len .Mounts}}' "$id")
  [ "$mounts" = 0 ] || fail "$1: the compute container has $mounts mounts: $(podman inspect -f '{{json .Mounts}}' "$id")"
  fpw=$(psql_host 'show full_page_writes')
  [ "$fpw" = off ] || fail "$1: full_page_writes is $fpw"
  ps=$(psql_host 'show strata.pageserver')
  [ "$ps" = pageserver:6400 ] || fail "$1: strata.pageserver is '$ps'"
  # Relation files are named <relfilenode>[_fork][.segment]; a stateless basebackup
  # ships none (only unlogged relations', and the stack has none).
  files=$(timeout 30 "${DC[@]}" exec -T compute sh -c \
    'find "$PGDATA/base" "$PGDATA/global" -type f | grep -E "/[0-9]+(_[a-z]+)?(\.[0-9]+)?$" || true')
  [ -z "$files" ] || fail "$1: relation files in the compute's data directory: $(echo "$files" | head -n 5)"
}
lsn_dec() { python3 -c 'import sys; hi, lo = sys.argv[1].split("/"); print((int(hi, 16) << 32) | int(lo, 16))' "$1"; }
# `strata remote ARGS` inside the stack: the compute image's CLI with the daemons'
# endpoint and keys (docker-compose.yml, x-strata-s3).
in_stack_remote() {
  timeout 120 "${DC[@]}" exec -T -e STRATA_S3_ENDPOINT=http://objectstore:7480 \
    -e STRATA_S3_ACCESS_KEY="$STRATA_S3_ACCESS_KEY" -e STRATA_S3_SECRET_KEY="$1" \
    compute strata remote "${@:2}"
}
# HTTP status of a signed request from the host to the published object store.
host_s3() {
  curl -sS --max-time 10 --aws-sigv4 "aws:amz:${STRATA_S3_REGION:-us-east-1}:s3" \
    --user "$STRATA_S3_ACCESS_KEY:$1" -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
    -o /dev/null -w '%{http_code}' "${@:2}" || true
}
wait_healthy() { # service seconds
  local deadline=$((SECONDS + $2))
  until [ "$(podman inspect -f '{{.State.Health.Status}}' "$(container "$1")" 2>/dev/null)" = healthy ]; do
    [ "$SECONDS" -lt "$deadline" ] || fail "$1 not healthy within $2 s"
    sleep 2
  done
}

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
    timeout 120 bash "$engine" stop >/dev/null 2>&1
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
if [ -x "$ctx/docker/pg-prefix/bin/postgres" ]; then
  progress "building images (with the patched PostgreSQL make built, staged in the context)"
else
  progress "building images (no staged PostgreSQL: the builder compiles it, ~20 min at -j2)"
fi
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
for s in objectstore sk1 sk2 sk3 pageserver compute; do
  [ "$(state_of $s)" = running ] || fail "$s is $(state_of $s), not running"
done
[ "$(psql_host 'select 1')" = 1 ] || fail "compute not reachable from the host"
up_s=$((SECONDS - t0))
progress "stack up in $up_s s: $(psql_host 'select version()' | cut -c1-40)"
progress "init: $(dc logs --no-color init | grep -E 'made the timeline|nothing to do' | tail -n 1 | sed 's/^[^|]*| //')"
images0=$(ps_metric pageserver_image_written_total)

# --- 2b. the object store ---------------------------------------------------------------
wait_healthy objectstore 60
progress "objectstore: $(dc logs --no-color objectstore | grep -E 'ready in' | tail -n 1 | sed 's/^[^|]*| //')"
probe_key="compose-test/probe-$(rand_hex)"
probe_sha=$(timeout 60 "${DC[@]}" exec -T compute sh -c \
  'head -c 3000000 /dev/urandom > /tmp/probe && sha256sum /tmp/probe' | awk '{print $1}')
[ -n "$probe_sha" ] || fail "could not make a probe file in the compute container"
in_stack_remote "$STRATA_S3_SECRET_KEY" put "$s3_url" "$probe_key" /tmp/probe >/dev/null ||
  fail "strata remote put to $s3_url from inside the stack failed"
listed=$(in_stack_remote "$STRATA_S3_SECRET_KEY" ls "$s3_url" compose-test/) ||
  fail "strata remote ls $s3_url from inside the stack failed"
[[ "$listed" == *"3000000	$probe_key"* ]] || fail "the probe object is not listed: $listed"
out=$(in_stack_remote "wrong-$(rand_hex)" ls "$s3_url" 2>&1) && fail "a wrong S3 secret was accepted"
[[ "$out" == *403* ]] || fail "a wrong S3 secret failed for another reason: $out"
code=$(host_s3 "$STRATA_S3_SECRET_KEY" -I "http://127.0.0.1:$STRATA_S3_PORT/$s3_bucket")
[ "$code" = 200 ] || fail "HEAD of bucket $s3_bucket from the host on port $STRATA_S3_PORT: $code"
code=$(host_s3 "wrong-$(rand_hex)" -I "http://127.0.0.1:$STRATA_S3_PORT/$s3_bucket")
[ "$code" = 403 ] || fail "the host's HEAD with a wrong secret got $code, not 403"
progress "objectstore: strata remote put/ls in the stack, signed HEAD from the host; a wrong secret gets 403"
t_restart=$SECONDS
timeout 120 "${DC[@]}" restart objectstore >/dev/null 2>&1 || fail "docker-compose restart objectstore failed"
wait_healthy objectstore 180
in_stack_remote "$STRATA_S3_SECRET_KEY" get "$s3_url" "$probe_key" /tmp/probe.back >/dev/null ||
  fail "the probe object is gone after restarting the object store"
got_sha=$(timeout 30 "${DC[@]}" exec -T compute sha256sum /tmp/probe.back | awk '{print $1}')
[ "$got_sha" = "$probe_sha" ] || fail "the probe object changed across the restart ($probe_sha -> $got_sha)"
in_stack_remote "$STRATA_S3_SECRET_KEY" rm "$s3_url" "$probe_key" >/dev/null || fail "strata remote rm failed"
progress "objectstore: restarted, healthy again in $((SECONDS - t_restart)) s, the probe object read back identical (persistent)"

# --- 3. the stateless compute ------------------------------------------------------------
check_stateless "first compute"
progress "compute: no mounts, full_page_writes off, pages from pageserver:6400, no relation file"
progress "compute start: $(dc logs --no-color compute | grep -E 'basebackup at|postgres starts now' | sed 's/^[^|]*| //' | tr '\n' ';')"

# --- 4. tokens --------------------------------------------------------------------------
# Connections from inside the stack's network (the compute image has psql).
in_stack_psql() { timeout 30 "${DC[@]}" exec -T compute psql -X -Atc "$2" "$1" 2>&1 || true; }
wrong="wrong-$(rand_hex)"
out=$(in_stack_psql "host=pageserver port=6400 user=postgres dbname=postgres password=$wrong" \
  "pagestream_v1 $tenant_id $timeline_id")
[[ "$out" == *"password authentication failed"* ]] || fail "pageserver pg port took a wrong token: $out"
out=$(in_stack_psql "host=pageserver port=6400 user=postgres dbname=postgres password=$STRATA_TENANT_TOKEN" \
  "basebackup 00000000000000000000000000000001 $timeline_id 0/0")
[[ "$out" == *"may not use tenant"* ]] || fail "pageserver let the tenant's token name another tenant: $out"
for sk in sk1 sk2 sk3; do
  out=$(in_stack_psql "host=$sk port=5454 user=postgres dbname=postgres password=$wrong" "select 1")
  [[ "$out" == *"password authentication failed"* ]] || fail "$sk took a wrong token: $out"
done
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $wrong" \
  "http://127.0.0.1:$STRATA_PAGESERVER_HTTP_PORT/v1/tenant")
[ "$code" = 403 ] || fail "pageserver HTTP API answered $code to a wrong token"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$STRATA_PAGESERVER_HTTP_PORT/v1/tenant")
[ "$code" = 401 ] || fail "pageserver HTTP API answered $code without a token"
# A compute given a wrong token does not start (neither step fences the running one:
# the pageserver's refusal comes first, the safekeepers' before any election).
# (podman run on the stack's network: docker-compose 1.29's `run` of a service with
# dependencies asks podman for links, which it refuses.)
net=$(podman inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "$(container compute)" | awk '{print $1}')
compute_image="${STRATA_IMAGE_PREFIX:-strata}-compute:${STRATA_IMAGE_TAG:-dev}"
for var in STRATA_PAGESERVER_PASSWORD STRATA_SAFEKEEPER_PASSWORD; do
  if out=$(timeout 120 podman run --rm --network "$net" -e STRATA_TENANT_ID="$tenant_id" \
    -e STRATA_TIMELINE_ID="$timeline_id" -e STRATA_SAFEKEEPERS=sk1:5454,sk2:5454,sk3:5454 \
    -e STRATA_PAGESERVER=pageserver:6400 -e STRATA_PAGESERVER_HTTP=pageserver:9898 \
    -e STRATA_PAGESERVER_PASSWORD="$STRATA_TENANT_TOKEN" \
    -e STRATA_SAFEKEEPER_PASSWORD="$STRATA_TENANT_TOKEN" -e "$var=$wrong" \
    "$compute_image" 2>&1 </dev/null); then
    fail "a compute with a wrong $var started: $out"
  fi
  [[ "$out" == *"not valid"* || "$out" == *"password authentication failed"* ]] ||
    fail "a compute with a wrong $var failed for another reason: $(echo "$out" | tail -n 3)"
done
[ "$(psql_host 'select 1')" = 1 ] || fail "the compute stopped answering after the token checks"
progress "tokens: a wrong one is refused by the pageserver (pg and HTTP), sk1-3 and a new compute"

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
wal0=$(lsn_dec "$(psql_host 'select pg_current_wal_lsn()')")
timeout $((bench_seconds + 300)) "${DC[@]}" run --rm --no-deps -e BENCH_SECONDS=10 bench >"$CTR_WORK/bench2.log" 2>&1 || {
  cat "$CTR_WORK/bench2.log" >&2
  fail "pgbench with sk3 down failed"
}
tx2=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$CTR_WORK/bench2.log")
[ -n "$tx2" ] && [ "$tx2" -gt 0 ] || fail "pgbench with sk3 down committed nothing"
wal1=$(lsn_dec "$(psql_host 'select pg_current_wal_lsn()')")
wal_per_tx=$(((wal1 - wal0) / tx2))
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
progress "WAL: $wal_per_tx bytes per TPC-B transaction (compute-side, $tx2 transactions, full_page_writes off)"
[ "$wal_per_tx" -lt 2000 ] || fail "$wal_per_tx WAL bytes per transaction: full_page_writes is not off in effect"

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

# --- 7b. sk2's volume lost under load, replaced by a new node ----------------------------
# docs/operations.md "Replacing a safekeeper under Compose": the container goes, its volume
# is deleted, and it starts again under a node id never used before; its entrypoint seeds
# the empty volume from the survivors and switches the new node in while pgbench commits.
sk_conf() { # generation and member ids of sk $1's configuration: "2 1,3,4"
  timeout 20 "${DC[@]}" exec -T "$1" curl -fsS --max-time 5 http://127.0.0.1:7676/v1/status |
    python3 -c '
import json, sys
tl = [t for t in json.load(sys.stdin)["timelines"] if t["timeline_id"] == sys.argv[1]][0]["configuration"]
print(tl["generation"], ",".join(str(m["node_id"]) for m in tl["members"]) + ("+joint" if tl["new_members"] else ""))' \
    "$timeline_id"
}
h0=$(psql_host 'select count(*) from pgbench_history')
timeout $((bench_seconds + 400)) "${DC[@]}" run --rm --no-deps -e BENCH_SECONDS=40 bench \
  >"$CTR_WORK/bench3.log" 2>&1 &
bench3=$!
sleep 8
t_replace=$SECONDS
timeout 60 "${DC[@]}" rm -sf sk2 >/dev/null 2>&1 || fail "docker-compose rm -sf sk2 failed"
vol=$(podman volume ls -q | grep -E "^${project}_sk2-data$" || true)
[ -n "$vol" ] || fail "no volume ${project}_sk2-data to delete"
podman volume rm "$vol" >/dev/null || fail "podman volume rm $vol failed"
progress "sk2's container and volume $vol deleted under load; starting it as node 4"
export STRATA_SK2_ID=4
timeout 120 "${DC[@]}" up -d --no-deps sk2 >"$CTR_WORK/up-sk2.log" 2>&1 || {
  cat "$CTR_WORK/up-sk2.log" >&2
  fail "docker-compose up -d sk2 (node 4) failed"
}
deadline=$((SECONDS + 240))
until [ "$(sk_conf sk1 2>/dev/null)" = "3 1,4,3" ]; do
  [ "$SECONDS" -lt "$deadline" ] || {
    dc logs --no-color --tail 30 sk2 >&2
    fail "sk2 (node 4) not switched in within 240 s (sk1 has: $(sk_conf sk1 2>&1))"
  }
  sleep 2
done
progress "sk2 replaced by node 4 in $((SECONDS - t_replace)) s: $(dc logs --no-color sk2 | grep -E 'seeded|caught up|generation 3' | sed 's/^[^|]*| //' | tr '\n' ';')"
wait "$bench3" || { cat "$CTR_WORK/bench3.log" >&2; fail "pgbench during the replacement failed"; }
# What the walproposer and the safekeepers said meanwhile, for a reader of a slow run.
for s in compute sk1 sk2 sk3; do dc logs --no-color --tail 200 "$s"; done >"$CTR_WORK/replace.log" 2>&1 || true
tx3=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$CTR_WORK/bench3.log")
[ -n "$tx3" ] && [ "$tx3" -gt 0 ] || fail "pgbench during the replacement committed nothing"
h1=$(psql_host 'select count(*) from pgbench_history')
[ "$h1" -eq $((h0 + tx3)) ] || fail "history grew from $h0 to $h1 rows, pgbench acknowledged $tx3"
[ "$(sk_conf sk3)" = "3 1,4,3" ] || fail "sk3 holds configuration $(sk_conf sk3)"
progress "pgbench during the replacement: $tx3 transactions acknowledged, every one in pgbench_history ($h0 -> $h1)"

# --- 8. a new compute container: every acknowledged commit, at once -------------------
psql_host "insert into compose_ledger (id) values (22)" >/dev/null
acked="$(psql_host 'select count(*) from pgbench_history'),$(psql_host "select count(*) || ',' || max(id) from compose_ledger")"
relpath=$(psql_host "select pg_relation_filepath('pgbench_accounts')")
progress "acknowledged before recreating the compute: history,ledger rows,max id = $acked"
timeout 120 "${DC[@]}" rm -sf compute >/dev/null 2>&1 || fail "docker-compose rm -sf compute failed"
[ -z "$(container compute)" ] || fail "the compute container is still there after rm -sf"
t_up=$(date +%s.%N)
timeout 120 "${DC[@]}" up -d compute >"$CTR_WORK/up2.log" 2>&1 || {
  cat "$CTR_WORK/up2.log" >&2
  fail "docker-compose up -d compute failed"
}
t_started=$(date +%s.%N)
deadline=$((SECONDS + 60))
until got=$(PSQL_TIMEOUT=5 psql_host "select (select count(*) from pgbench_history) || ',' || (select count(*) || ',' || max(id) from compose_ledger)" 2>/dev/null); do
  [ "$SECONDS" -lt "$deadline" ] || fail "the new compute did not answer within 60 s"
  sleep 0.05
done
t_first=$(date +%s.%N)
[ "$got" = "$acked" ] || fail "the new compute has $got, acknowledged were $acked"
first_ms=$(python3 -c "import sys; print(int((float(sys.argv[2]) - float(sys.argv[1])) * 1000))" "$t_started" "$t_first")
up_ms=$(python3 -c "import sys; print(int((float(sys.argv[2]) - float(sys.argv[1])) * 1000))" "$t_up" "$t_started")
progress "recreated compute: first query ${first_ms} ms after 'up -d compute' returned (up -d itself ${up_ms} ms); every acknowledged row there ($got)"
progress "new compute start: $(dc logs --no-color compute | grep -E 'basebackup at|postgres starts now' | sed 's/^[^|]*| //' | tr '\n' ';')"
[ "$first_ms" -lt 2000 ] || fail "first query ${first_ms} ms after the container started (limit 2000 ms)"
check_stateless "recreated compute"
timeout 30 "${DC[@]}" exec -T compute sh -c "test ! -e \"\$PGDATA/$relpath\"" ||
  fail "pgbench_accounts' file $relpath exists in the new compute"
progress "recreated compute: stateless (no mounts, fpw off, no $relpath or any relation file)"

# --- 9. image generation ----------------------------------------------------------------
images1=$(ps_metric pageserver_image_written_total)
[ "$images1" -gt "$images0" ] || fail "pageserver_image_written_total did not rise ($images0 -> $images1)"
progress "pageserver wrote $((images1 - images0)) page images during the test"

# --- 10. REMOTE-UPLOADS: the daemons' copies in the object store ------------------------
tl_prefix="tenants/$tenant_id/timelines/$timeline_id/"
count_under() { printf '%s\n' "$listing" | awk -F'\t' -v p="$tl_prefix$1/" 'index($2, p) == 1' | wc -l; }
# Segments each safekeeper put into the store, and deleted once no one needed them
# (design §5.5: the first member deletes what lies below every reader): the store may
# hold none at a given moment, so the counters say whether the backup ran.
sk_backup() {
  timeout 20 "${DC[@]}" exec -T "$1" curl -fsS --max-time 5 http://127.0.0.1:7676/v1/status |
    python3 -c '
import json, sys
tl = [t for t in json.load(sys.stdin)["timelines"] if t["timeline_id"] == sys.argv[1]][0]
b = tl.get("wal_backup") or {}
print(b.get("segments_uploaded", 0), b.get("segments_deleted", 0))' "$timeline_id"
}
deadline=$((SECONDS + 180))
listing="" ls_err=""
while :; do
  # A listing the object store fails (it is busy) is tried again until the deadline.
  if listing=$(in_stack_remote "$STRATA_S3_SECRET_KEY" ls "$s3_url" "$tl_prefix" 2>&1); then
    ls_err=""
    n_manifest=$(count_under manifest) n_data=$(count_under data) n_wal=$(count_under wal)
    [ "$n_manifest" -gt 0 ] && [ "$n_data" -gt 0 ] && break
  else
    ls_err=$listing listing=""
  fi
  [ "$SECONDS" -lt "$deadline" ] || break
  sleep 3
done
[ -z "$ls_err" ] || fail "REMOTE-UPLOADS: strata remote ls $s3_url $tl_prefix failed until the deadline: $ls_err"
uploaded=0 deleted=0
for sk in sk1 sk2 sk3; do
  read -r u d < <(sk_backup "$sk" || echo "0 0")
  uploaded=$((uploaded + u)) deleted=$((deleted + d))
done
remote_bytes=$(printf '%s\n' "$listing" | awk -F'\t' '{ s += $1 } END { printf "%d", s }')
progress "REMOTE-UPLOADS: $s3_url/$tl_prefix holds $n_manifest manifests, $n_data data files, $n_wal WAL segments ($remote_bytes bytes); the safekeepers uploaded $uploaded segments and deleted $deleted no one needed"
[ "$n_manifest" -gt 0 ] && [ "$n_data" -gt 0 ] ||
  fail "REMOTE-UPLOADS-PAGESERVER: no manifest or data file of the timeline in $s3_url after 180 s"
[ "$uploaded" -gt 0 ] || fail "REMOTE-UPLOADS-SAFEKEEPER: the safekeepers uploaded no WAL segment to $s3_url"
[ "$n_wal" -gt 0 ] || [ "$deleted" -gt 0 ] ||
  fail "REMOTE-UPLOADS-SAFEKEEPER: $uploaded segments uploaded, none deleted, yet none in the store"
progress "REMOTE-UPLOADS: ok"

test_s=$((SECONDS - t0))
progress "PASS: image build ${build_s} s; stack up ${up_s} s; test after the build ${test_s} s; WAL ${wal_per_tx} B/tx; first query after recreate ${first_ms} ms"
