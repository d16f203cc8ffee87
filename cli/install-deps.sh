#!/usr/bin/env bash
# Installs every Debian package Strata needs that this machine lacks.
# Idempotent: with everything present it changes nothing and says so.
set -euo pipefail

PACKAGES=(
  build-essential cmake ccache pkg-config clang clang-format libfuzzer-14-dev libclang-rt-14-dev
  libpq-dev libuv1-dev liburing-dev liblmdb-dev libzstd-dev libmicrohttpd-dev
  libcjson-dev libarchive-dev libseccomp-dev libfuse3-dev libcmocka-dev libcurl4-openssl-dev libssl-dev
  python3 python3-pytest python3-pytest-xdist python3-psycopg
  postgresql-15 postgresql-server-dev-15 postgresql-client-15
  gnuplot-nox procps iproute2 util-linux binutils strace
  # perf for the benchmarks' --perf profiles (bench/bench_perf.py).
  linux-perf
  dpkg-dev bison flex libreadline-dev zlib1g-dev
  # HammerDB's CLI on Debian's Tcl 8.6 (bench/tprocc.py --driver hammerdb; the
  # HammerDB kit itself is a tool the user names with HAMMERDB_KIT).
  tcl8.6 tcl-thread libpgtcl libsqlite3-tcl tcllib
  # etcd 3.4 (/usr/bin/etcd): the coordination service of several pageservers
  # (common/net/etcd.h); etcdctl to look at it by hand.  The package starts no
  # daemon here: tests and `strata up` run their own members.
  etcd-server etcd-client
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all ${#PACKAGES[@]} packages present"
else
  echo "deps: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  # postgresql-15 and its server-dev package are installed together so the
  # extension is built against the headers of the server that loads it.
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" postgresql-15
fi

# Postgres refuses to run as root: every postgres process runs as this user.
if ! id postgres >/dev/null 2>&1; then
  echo "deps: creating the unprivileged user 'postgres'"
  useradd --system --home-dir /var/lib/postgresql --create-home --shell /bin/bash postgres
fi
