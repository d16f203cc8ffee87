#!/usr/bin/env bash
# docker/objectstore/objectstore.sh: the Compose stack's object store, an S3 endpoint that
# keeps its objects across restarts.  Ceph Pacific's radosgw (Debian 12's packages) on a
# private one-node RADOS cluster: one ceph-mon, one ceph-osd with BlueStore on a file
# (DIR/osd.0.block, so the objects live in the volume and survive a stop, a kill or a
# new container), no ceph-mgr, no cephx inside the cluster (its daemons listen on
# 127.0.0.1 only; S3 clients still sign every request with SigV4).
#
#   objectstore.sh run           the service: first start makes the cluster under DIR,
#                                later starts reuse it; creates BUCKET; stays in the
#                                foreground until SIGTERM/SIGINT, then stops radosgw,
#                                the OSD and the monitor in that order
#   objectstore.sh health        exit 0 when a signed HEAD of BUCKET answers 200
#
# Environment (defaults after "="):
#   OBJECTSTORE_DIR=/data        cluster state: mon.a/, osd.0/ (block file), keyring
#   OBJECTSTORE_LISTEN=0.0.0.0:7480   radosgw's S3 address
#   OBJECTSTORE_MON_PORT=6789    the monitor, on 127.0.0.1 (the OSD takes the next 30)
#   OBJECTSTORE_BLOCK_SIZE=4G    BlueStore's block file (sparse: disk use follows data)
#   OBJECTSTORE_BUCKET=strata    created at every start (an existing one is kept)
#   STRATA_S3_ACCESS_KEY, STRATA_S3_SECRET_KEY   the S3 user's keys (required;
#                                set at the first start, changed at later ones)
#   STRATA_S3_REGION=us-east-1   signing region of the health check and CreateBucket
# Logs: DIR/log/*.log (radosgw logs every request); progress lines on stdout.
# Not for: production Ceph (one replica, no auth inside the cluster).
set -euo pipefail

dir=${OBJECTSTORE_DIR:-/data}
listen=${OBJECTSTORE_LISTEN:-0.0.0.0:7480}
mon_port=${OBJECTSTORE_MON_PORT:-6789}
block_size=${OBJECTSTORE_BLOCK_SIZE:-4G}
bucket=${OBJECTSTORE_BUCKET:-strata}
region=${STRATA_S3_REGION:-us-east-1}
port=${listen##*:}

log() { printf '%s objectstore: %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "error: $*" >&2; exit 1; }

access=${STRATA_S3_ACCESS_KEY:-}
secret=${STRATA_S3_SECRET_KEY:-}

# curl with SigV4; radosgw needs x-amz-content-sha256 (curl 7.88 does not send it).
s3() {
  curl -sS --max-time 10 --aws-sigv4 "aws:amz:$region:s3" --user "$access:$secret" \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -o /dev/null -w '%{http_code}' "$@"
}

if [ "${1:-}" = health ]; then
  code=$(s3 -I "http://127.0.0.1:$port/$bucket" 2>/dev/null || true)
  [ "$code" = 200 ] || { echo "HEAD /$bucket: $code"; exit 1; }
  exit 0
fi
[ "${1:-}" = run ] || die "usage: objectstore.sh run|health"
[ -n "$access" ] && [ -n "$secret" ] || die "set STRATA_S3_ACCESS_KEY and STRATA_S3_SECRET_KEY"
[[ "$bucket" =~ ^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$ ]] || die "OBJECTSTORE_BUCKET '$bucket': 3-63 of a-z 0-9 . -"
for b in ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph-authtool ceph uuidgen curl; do
  command -v "$b" >/dev/null || die "$b missing"
done

conf=$dir/ceph.conf
# A container restarts its daemons with the same pids, so a messenger address
# (ip:port/nonce, the nonce being the pid) could repeat the killed OSD's and the
# monitor would ignore the new OSD's boot as a duplicate: random nonces.
export CEPH_USE_RANDOM_NONCE=1
mkdir -p "$dir/log" "$dir/run" "$dir/crash" "$dir/rgw"

write_conf() { # FSID
  cat >"$conf.tmp" <<EOF
# Written by objectstore.sh at the first start; the fsid names this cluster.
[global]
fsid = $1
mon_host = [v2:127.0.0.1:$mon_port]
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
ms_bind_msgr1 = false
ms_bind_port_min = $((mon_port + 1))
ms_bind_port_max = $((mon_port + 30))
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
keyring = $dir/keyring
run_dir = $dir/run
admin_socket = $dir/run/\$name.asok
log_file = $dir/log/\$name.log
crash_dir = $dir/crash
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_max_pg_per_osd = 1000
mon_warn_on_pool_no_redundancy = false
mon_warn_on_insecure_global_id_reclaim_allowed = false
paxos_propose_interval = 0.2
[mon]
mon_data = $dir/mon.\$id
mon_cluster_log_file = $dir/log/cluster.log
# a small volume must not stop the monitor (its default is 5% free)
mon_data_avail_crit = 1
[osd]
osd_data = $dir/osd.\$id
osd_objectstore = bluestore
bluestore_block_path = $dir/osd.\$id.block
bluestore_block_create = true
bluestore_block_size = $(numfmt --from=iec "$block_size")
bluestore_cache_autotune = false
bluestore_cache_size = 67108864
osd_memory_target = 939524096
osd_op_num_shards = 1
osd_op_num_threads_per_shard = 2
[client.rgw.a]
rgw_frontends = beast endpoint=$listen
rgw_thread_pool_size = 16
rgw_data = $dir/rgw
# radosgw defaults this to "secure", which auth none cannot provide (-13 EACCES)
ms_mon_client_mode = crc
EOF
  mv "$conf.tmp" "$conf"
}

pids=()
stop_all() {
  local p i
  # radosgw, then the OSD (it tells the monitor it goes down), then the monitor.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    p=${pids[$i]}
    kill -TERM "$p" 2>/dev/null || continue
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  pids=()
}
trap 'log "stopping"; stop_all; log "stopped"; exit 0' TERM INT
trap 'stop_all' EXIT

start_mon() {
  ceph-mon -c "$conf" -i a -f >>"$dir/log/mon.out" 2>&1 </dev/null &
  pids+=("$!")
}
start_osd() {
  ceph-osd -c "$conf" -i 0 -f >>"$dir/log/osd.out" 2>&1 </dev/null &
  pids+=("$!")
}

t0=$(date +%s)
if [ ! -f "$dir/ready" ]; then
  # First start (or one that did not finish): a new cluster.
  log "new cluster under $dir (BlueStore block file of $block_size)"
  rm -rf "$dir/mon.a" "$dir/osd.0" "$dir/osd.0.block" "$dir/monmap" "$dir/keyring" "$conf"
  mkdir -p "$dir/mon.a" "$dir/osd.0"
  fsid=$(uuidgen)
  write_conf "$fsid"
  monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" >/dev/null
  ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/keyring"
  start_mon
  osd_uuid=$(uuidgen)
  id=$(timeout 60 ceph -c "$conf" --connect-timeout 50 osd new "$osd_uuid") || die "ceph-mon did not answer"
  [ "$id" = 0 ] || die "unexpected osd id $id"
  ceph-osd -c "$conf" -i 0 --mkfs --osd-uuid "$osd_uuid" >"$dir/log/osd-mkfs.out" 2>&1 ||
    die "ceph-osd --mkfs failed: $(tail -n 5 "$dir/log/osd-mkfs.out")"
  start_osd
else
  [ -f "$conf" ] || die "$dir/ready exists but $conf does not"
  log "existing cluster under $dir ($(du -sh --apparent-size "$dir/osd.0.block" | cut -f1) block file, $(du -sh "$dir/osd.0.block" | cut -f1) used)"
  start_mon
  # After a kill the monitor still thinks the old OSD is up: mark it down so the
  # new one's boot is taken at once (not after heartbeat grace periods).
  timeout 60 ceph -c "$conf" --connect-timeout 50 osd down 0 >/dev/null 2>&1 ||
    die "ceph-mon did not answer (see $dir/log)"
  start_osd
fi
radosgw -c "$conf" -n client.rgw.a -f >>"$dir/log/rgw.out" 2>&1 </dev/null &
pids+=("$!")

# Up when radosgw answers; bounded.
for i in $(seq 1 600); do
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || die "a daemon exited: see $dir/log ($(tail -n 3 "$dir/log/"*.out | tr '\n' ' '))"; done
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/" || true)" = 200 ] && break
  [ "$i" -lt 600 ] || die "radosgw not answering on $port after 120 s"
  sleep 0.2
done
# The S3 user: made at the first start; its keys set to the environment's at each.
if ! radosgw-admin -c "$conf" user info --uid=strata >/dev/null 2>&1; then
  radosgw-admin -c "$conf" user create --uid=strata --display-name=strata \
    --access-key="$access" --secret-key="$secret" >"$dir/log/user.json" 2>&1 ||
    die "radosgw-admin user create failed: $(tail -n 3 "$dir/log/user.json")"
else
  radosgw-admin -c "$conf" key create --uid=strata --key-type=s3 \
    --access-key="$access" --secret-key="$secret" >"$dir/log/user.json" 2>&1 ||
    die "radosgw-admin key create failed: $(tail -n 3 "$dir/log/user.json")"
fi
# The bucket (the first CreateBucket also makes radosgw's index and data pools).
code=000
for i in $(seq 1 50); do
  code=$(s3 -X PUT "http://127.0.0.1:$port/$bucket" || true)
  [ "$code" = 200 ] || [ "$code" = 409 ] && break
  sleep 0.2
done
[ "$code" = 200 ] || [ "$code" = 409 ] || die "CreateBucket $bucket got HTTP $code"
code=$(s3 -I "http://127.0.0.1:$port/$bucket" || true)
[ "$code" = 200 ] || die "bucket $bucket: HEAD got HTTP $code (is it another user's?)"
touch "$dir/ready"
log "ready in $(($(date +%s) - t0)) s: S3 on $listen, bucket $bucket"

# Foreground until a signal, or until a daemon exits (then the container stops and
# its restart policy decides).
while :; do
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || die "a daemon (pid $p) exited: see $dir/log"
  done
  sleep 2 &
  wait $! || true
done
