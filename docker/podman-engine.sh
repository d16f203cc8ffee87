#!/usr/bin/env bash
# docker/podman-engine.sh: podman standing in for a Docker engine, so that
# docker-compose builds and runs docker/docker-compose.yml on a Debian 12 machine that
# has no Docker daemon and reaches no container registry (only Debian's archive).
#
#   podman-engine.sh install  apt: podman, runc, docker-compose (v1), debootstrap
#   podman-engine.sh base     image debian:bookworm made by debootstrap (once; cached)
#   podman-engine.sh start    podman's Docker API socket + the health-check driver
#   podman-engine.sh stop     stops both; removes this storage's containers, pods,
#                             networks and volumes (images stay)
#   podman-engine.sh reset    stop, then delete all of $CTR_WORK (images included)
#
# After `start`, `. "$CTR_WORK/env.sh"` sets DOCKER_HOST, CONTAINERS_CONF and
# CONTAINERS_STORAGE_CONF; docker-compose and podman then use this engine.
# Everything (storage, configuration, socket, logs) lives under CTR_WORK (default
# /tmp/strata-podman), so stacks with different CTR_WORK do not see each other.
#
# Why each setting (without any one of them no container of the stack runs here):
#   - OCI runtime runc: crun refuses a host whose cgroups are in hybrid v1/v2 mode;
#   - default ulimits at most the host's hard limits: without CAP_SYS_RESOURCE the
#     runtime cannot raise them, and podman's defaults exceed them;
#   - a loop that runs `podman healthcheck run`: podman schedules health checks with
#     systemd timers, there is no systemd, and `depends_on: service_healthy` would
#     wait forever;
#   - docker-compose with --no-install-recommends: its recommends pull a Docker
#     engine that never starts here.
# Not for: a machine with a Docker engine (use it: the compose file is the same).
set -euo pipefail

work=${CTR_WORK:-/tmp/strata-podman}
base_image=docker.io/library/debian:bookworm

die() { echo "podman-engine: error: $*" >&2; exit 1; }
say() { echo "podman-engine: $*" >&2; }

# The host's hard limit of `ulimit -H$1`, capped at $2 ("unlimited" counts as above).
capped_hard_limit() {
  local v
  v=$(ulimit "-H$1")
  if [ "$v" = unlimited ] || [ "$v" -gt "$2" ]; then v=$2; fi
  printf '%s' "$v"
}

write_config() {
  mkdir -p "$work/networks" "$work/image-tmp" "$work/libpod-tmp"
  # podman lowers its own RLIMIT_NPROC to 32768: a container cannot get more.
  local nofile nproc
  nofile=$(capped_hard_limit n 1048576)
  nproc=$(capped_hard_limit u 32768)
  cat >"$work/storage.conf" <<EOF
# Written by docker/podman-engine.sh.
[storage]
driver = "overlay"
graphroot = "$work/storage"
runroot = "$work/run"
EOF
  cat >"$work/containers.conf" <<EOF
# Written by docker/podman-engine.sh.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[network]
network_config_dir = "$work/networks"

[engine]
runtime = "runc"
tmp_dir = "$work/libpod-tmp"
image_copy_tmp_dir = "$work/image-tmp"
EOF
  cat >"$work/env.sh" <<EOF
# Written by docker/podman-engine.sh: source it to use this engine.
export CONTAINERS_STORAGE_CONF=$work/storage.conf
export CONTAINERS_CONF=$work/containers.conf
export DOCKER_HOST=unix://$work/podman.sock
EOF
}

use_config() {
  write_config
  # shellcheck disable=SC1091
  . "$work/env.sh"
}

# The first Debian archive URL of this host's apt configuration (deb822 or one-line).
host_archive() {
  local url=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    url=$(awk '$1 == "URIs:" { print $2; exit }' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$url" ] && [ -f /etc/apt/sources.list ]; then
    url=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' \
      /etc/apt/sources.list)
  fi
  [ -n "$url" ] || die "no Debian archive found in this host's apt sources"
  printf '%s' "$url"
}

cmd_install() {
  local need=()
  for p in podman runc conmon netavark aardvark-dns catatonit iptables debootstrap \
    ca-certificates docker-compose; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  if [ "${#need[@]}" = 0 ]; then
    say "podman, runc and docker-compose are installed"
    return
  fi
  say "apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

cmd_base() {
  use_config
  if podman image exists "$base_image"; then
    say "image $base_image present"
    return
  fi
  local root="$work/bookworm-rootfs" archive
  archive=$(host_archive)
  say "debootstrap bookworm (minbase) into $root"
  rm -rf "$root"
  debootstrap --variant=minbase bookworm "$root" "$archive" >"$work/debootstrap.log" 2>&1 ||
    die "debootstrap failed (log $work/debootstrap.log)"
  # Inside the image apt uses the same archive as this host.
  rm -f "$root/etc/apt/sources.list"
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/"
  else
    cp /etc/apt/sources.list "$root/etc/apt/sources.list"
  fi
  # Like Debian's own container images: no package cache kept in layers.
  cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/log/*
  : >"$root/etc/resolv.conf"
  echo localhost >"$root/etc/hostname"
  tar -C "$root" -c . | podman import -q --change 'CMD ["bash"]' - "$base_image" >/dev/null
  podman tag "$base_image" localhost/debian:bookworm
  rm -rf "$root"
  say "image $base_image imported"
}

api_up() { curl -fsS --max-time 2 --unix-socket "$work/podman.sock" http://d/_ping >/dev/null 2>&1; }

cmd_start() {
  use_config
  if api_up; then
    say "API already up: DOCKER_HOST=$DOCKER_HOST"
    return
  fi
  rm -f "$work/podman.sock"
  setsid nohup podman system service --time=0 "unix://$work/podman.sock" \
    >"$work/service.log" 2>&1 </dev/null &
  echo $! >"$work/service.pid"
  # The health-check driver (see the header): every 2 s, one check of each
  # container whose health is not yet known or is failing.
  setsid nohup bash -c '
    while :; do
      for id in $(podman ps -q --filter health=starting --filter health=unhealthy 2>/dev/null); do
        podman healthcheck run "$id" >/dev/null 2>&1 || true
      done
      sleep 2
    done' >/dev/null 2>&1 </dev/null &
  echo $! >"$work/healthloop.pid"
  local i
  for i in $(seq 1 100); do
    api_up && break
    sleep 0.2
  done
  api_up || die "podman API did not come up (log $work/service.log)"
  say "API up: DOCKER_HOST=$DOCKER_HOST"
}

# Stops the process whose pid is in $work/$1.pid (and its process group).
stop_pidfile() {
  local f="$work/$1.pid" pid i
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -- "-$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
  fi
  rm -f "$f"
}

cmd_stop() {
  [ -f "$work/env.sh" ] || return 0
  # shellcheck disable=SC1091
  . "$work/env.sh"
  stop_pidfile healthloop
  stop_pidfile service
  if command -v podman >/dev/null; then
    podman pod rm -af -t 0 >/dev/null 2>&1 || true
    podman rm -af -t 0 >/dev/null 2>&1 || true
    podman network prune -f >/dev/null 2>&1 || true
    podman volume prune -f >/dev/null 2>&1 || true
  fi
  # A conmon of an exec or health-check session may outlive its container for
  # minutes (exit delay): end the ones of this storage, by pid.
  local d
  for d in /proc/[0-9]*; do
    [ "$(cat "$d/comm" 2>/dev/null)" = conmon ] || continue
    if tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -qF -- "$work/storage/"; then
      kill "${d#/proc/}" 2>/dev/null || true
    fi
  done
}

cmd_reset() {
  cmd_stop
  if command -v podman >/dev/null && [ -f "$work/containers.conf" ]; then
    podman system reset -f >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
}

mkdir -p "$work"
case "${1:-}" in
  install) cmd_install ;;
  base) cmd_base ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  reset) cmd_reset ;;
  *)
    echo "usage: $0 install|base|start|stop|reset   (CTR_WORK=$work)" >&2
    exit 2
    ;;
esac
