#!/usr/bin/env bash
# compute/postgres/build.sh — build the patched PostgreSQL 15 that compute and the
# redo helper run, and cache it.
#
# For: fetching Debian's postgresql-15 source package (or an upstream tarball named by
# STRATA_PG_TARBALL), applying compute/postgres/smgr-hook.patch, configuring, building
# and installing postgres plus the contrib modules we use under
#   ~/.cache/strata/pg15-<version>-<patch sha256 prefix>/   (as root: /var/cache/strata/...)
# The last line on stdout is always that prefix, so Makefile/CMake can capture it.
# Not for: installing the stock Debian binaries (cli/install-deps.sh does that), or
# running postgres (the build runs as root; running needs the unprivileged user).
#
# Usage: build.sh [--prefix-only] [--force]
#   --prefix-only  print the prefix of a finished build for this patch and exit 0;
#                  exit 1 (printing nothing on stdout) if there is none. Never builds.
#   --force        rebuild even if a finished build for this key exists.
#   --check-make   run the make invocation the build uses on a one-rule Makefile that
#                  fails, as PostgreSQL's generated-header step does, unless it runs as
#                  a top-level make (MAKELEVEL 0). `make postgres` runs it first, so a
#                  build that works only with a warm cache fails on every machine.
# Environment:
#   STRATA_CACHE_DIR   cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/strata, or
#                      /var/cache/strata when run as root); must be readable by the
#                      user that runs postgres
#   STRATA_PG_TARBALL  build from this upstream postgresql-15.x.tar.{bz2,gz,xz} instead
#                      of Debian's source package
#   STRATA_PG_JOBS     make -j value (default: nproc)
#
# Progress goes to stderr; only the prefix goes to stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
patch_file="$here/smgr-hook.patch"
# Postgres runs as an unprivileged user, who must be able to reach the binaries. root's
# home is private (0700) on Debian, so root builds into /var/cache instead.
if [ -n "${STRATA_CACHE_DIR:-}" ]; then
  cache_root="$STRATA_CACHE_DIR"
elif [ "$(id -u)" = 0 ]; then
  cache_root="/var/cache/strata"
else
  cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/strata"
fi
src_package="postgresql-15"
sources_file="/etc/apt/sources.list.d/strata-src.sources"
# Written last into a finished prefix: a prefix without it is a broken build.
stamp_name="strata-build-info.txt"
contrib_modules=(amcheck pageinspect pg_stat_statements pg_buffercache pg_prewarm)
build_deps=(dpkg-dev bison flex libreadline-dev zlib1g-dev make gcc perl)

prefix_only=0
force=0
check_make=0
for arg in "$@"; do
  case "$arg" in
    --prefix-only) prefix_only=1 ;;
    --check-make) check_make=1 ;;
    --force) force=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "postgres: unknown option '$arg' (try --help)" >&2
      exit 2
      ;;
  esac
done

say() { echo "postgres: $*" >&2; }
die() {
  echo "postgres: error: $*" >&2
  exit 1
}

# PostgreSQL's make as a top-level make. Run from our Makefile, this script inherits
# MAKELEVEL (and MAKEFLAGS with the outer jobserver); PostgreSQL generates its headers
# (utils/errcodes.h, fmgroids.h, ...) only when MAKELEVEL is 0 (src/Makefile.global),
# so under an outer make the build stops in src/common. Only a bare machine ever ran
# this path: a warm cache skips the build.
pg_make() {
  env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS -u MAKEOVERRIDES -u MAKE_TERMOUT -u MAKE_TERMERR \
    nice -n 15 make "$@"
}

if [ "$check_make" = 1 ]; then
  t="$(mktemp -d)"
  trap 'rm -rf "$t"' EXIT
  printf 'all:\n\t%s\n' \
    '@test "$(MAKELEVEL)" = 0 || { echo "postgres: error: PostgreSQL make would run at MAKELEVEL $(MAKELEVEL) and skip its generated headers" >&2; exit 1; }' \
    >"$t/Makefile"
  pg_make -s -C "$t" all
  say "make check: PostgreSQL's make runs at MAKELEVEL 0 (outer MAKELEVEL ${MAKELEVEL:-unset})"
  exit 0
fi

[ -f "$patch_file" ] || die "patch $patch_file is missing"
# The cache key covers the patch and the recipe: bump recipe when a change to this
# script changes what gets installed (2: modules under the prefix, not Debian's
# /usr/lib/postgresql/15/lib).
recipe=2
patch_sha="$({ cat "$patch_file"; echo "strata build recipe $recipe"; } | sha256sum | cut -c1-12)"

# A version string safe for a directory name: 15.18-0+deb12u1 -> 15.18-0_deb12u1.
sanitize_version() { printf '%s' "$1" | tr -c 'A-Za-z0-9.\n-' '_'; }

prefix_for() { printf '%s/pg15-%s-%s' "$cache_root" "$(sanitize_version "$1")" "$patch_sha"; }

is_finished() { [ -f "$1/$stamp_name" ] && [ -x "$1/bin/postgres" ] && [ -x "$1/bin/pg_config" ]; }

# The newest finished build for this patch, any source version; empty if none.
newest_finished_prefix() {
  local d best
  # The glob expands in lexical order; pick the highest version explicitly.
  best="$(for d in "$cache_root"/pg15-*-"$patch_sha"; do is_finished "$d" && echo "$d"; done |
    sort -V | tail -n 1)"
  printf '%s' "$best"
}

tarball_version() {
  local base
  base="$(basename "$1")"
  base="${base#postgresql-}"
  base="${base%.tar.*}"
  case "$base" in
    15.*) printf '%s-upstream' "$base" ;;
    *) die "STRATA_PG_TARBALL '$1' is not named postgresql-15.<minor>.tar.*" ;;
  esac
}

# --- the cache: a finished build for this key means there is nothing to do --------------

# Prints the prefix of a finished build that satisfies this run, or nothing.
cached_prefix() {
  local p
  if [ -n "${STRATA_PG_TARBALL:-}" ]; then
    p="$(prefix_for "$(tarball_version "$STRATA_PG_TARBALL")")"
    if is_finished "$p"; then printf '%s' "$p"; fi
  else
    # Which Debian version is "newest that downloads" is only known by downloading, so
    # any finished build for this patch satisfies the cache; --force picks again.
    newest_finished_prefix
  fi
}

if [ -n "${STRATA_PG_TARBALL:-}" ] && [ ! -f "$STRATA_PG_TARBALL" ]; then
  die "STRATA_PG_TARBALL '$STRATA_PG_TARBALL' does not exist"
fi
wanted_prefix="$(cached_prefix)"

if [ "$prefix_only" = 1 ]; then
  [ -n "$wanted_prefix" ] || exit 1
  echo "$wanted_prefix"
  exit 0
fi

if [ -n "$wanted_prefix" ] && [ "$force" = 0 ]; then
  say "cached build found, nothing to do"
  echo "$wanted_prefix"
  exit 0
fi

# One build at a time per cache: several engineers (and CI) share a machine. The lock
# is released when this script exits, however it exits.
mkdir -p "$cache_root/src"
chmod 0755 "$cache_root"
exec 9>"$cache_root/.build.lock"
if ! flock -n 9; then
  say "another build.sh is building in $cache_root; waiting for it"
  flock 9
  wanted_prefix="$(cached_prefix)"
  if [ -n "$wanted_prefix" ] && [ "$force" = 0 ]; then
    say "the other build produced it, nothing to do"
    echo "$wanted_prefix"
    exit 0
  fi
fi

# --- build dependencies -----------------------------------------------------------------

SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"

missing=()
for p in "${build_deps[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  say "installing build dependencies: ${missing[*]}"
  # A fresh machine has no package lists yet; update once if the install cannot resolve.
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    "${missing[@]}" >&2; then
    $SUDO apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
      "${missing[@]}" >&2
  fi
fi

# --- deb-src lines mirroring the machine's deb lines --------------------------------------

# Prints deb822 stanzas with Types: deb-src for every enabled stanza/line of type deb in
# the machine's apt sources (our own file excluded), keeping URIs, suites, components and
# the signing key. Host names come from the machine, never from this repository.
derive_deb_src_stanzas() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    [ "$f" = "$sources_file" ] && continue
    awk '
      function flush(   t) {
        if (types ~ /(^|[ \t])deb([ \t]|$)/ && enabled != "no" && uris != "" && suites != "") {
          printf "Types: deb-src\nURIs: %s\nSuites: %s\n", uris, suites
          if (comps != "") printf "Components: %s\n", comps
          if (signed != "") printf "Signed-By: %s\n", signed
          printf "\n"
        }
        types = ""; uris = ""; suites = ""; comps = ""; signed = ""; enabled = ""; key = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^[ \t]/ {
        # A continuation line (e.g. an inline key block) belongs to the previous field.
        if (key == "signed-by") signed = signed "\n" $0
        next
      }
      {
        i = index($0, ":"); if (i == 0) next
        key = tolower(substr($0, 1, i - 1)); val = substr($0, i + 1)
        sub(/^[ \t]+/, "", val); sub(/[ \t]+$/, "", val)
        if (key == "types") types = val
        else if (key == "uris") uris = val
        else if (key == "suites") suites = val
        else if (key == "components") comps = val
        else if (key == "signed-by") signed = val
        else if (key == "enabled") enabled = tolower(val)
      }
      END { flush() }
    ' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '
      /^[ \t]*deb[ \t]/ {
        n = 2; signed = ""
        if ($2 ~ /^\[/) {
          opts = ""
          while (n <= NF) { opts = opts " " $n; if ($n ~ /\]$/) { n++; break } n++ }
          if (match(opts, /signed-by=[^] \t]+/))
            signed = substr(opts, RSTART + 10, RLENGTH - 10)
        }
        uri = $n; suite = $(n + 1); comps = ""
        for (i = n + 2; i <= NF; i++) comps = comps (comps == "" ? "" : " ") $i
        printf "Types: deb-src\nURIs: %s\nSuites: %s\n", uri, suite
        if (comps != "") printf "Components: %s\n", comps
        if (signed != "") printf "Signed-By: %s\n", signed
        printf "\n"
      }
    ' "$f"
  done
}

# True if some apt source other than ours already offers deb-src lines.
other_deb_src_exists() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && grep -Eq '^[[:space:]]*deb-src[[:space:]]' "$f" && return 0
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && [ "$f" != "$sources_file" ] &&
      grep -Eiq '^[[:space:]]*Types:.*deb-src' "$f" &&
      ! grep -Eiq '^[[:space:]]*Enabled:[[:space:]]*no' "$f" && return 0
  done
  return 1
}

ensure_deb_src() {
  local stanzas
  if other_deb_src_exists; then
    return 0
  fi
  stanzas="$(derive_deb_src_stanzas)"
  [ -n "$stanzas" ] || die "found no 'deb' lines in /etc/apt to mirror as deb-src"
  stanzas="# Written by strata compute/postgres/build.sh: source lines for the suites of the
# machine's deb lines, so apt-get source $src_package works.
$stanzas"
  if [ -f "$sources_file" ] && [ "$(cat "$sources_file")" = "$stanzas" ]; then
    return 0
  fi
  say "adding deb-src lines in $sources_file"
  printf '%s\n' "$stanzas" | $SUDO tee "$sources_file" >/dev/null
  say "apt-get update"
  $SUDO apt-get update -q >&2
}

# Debian versions of the source package, newest first.
source_versions() {
  apt-cache showsrc "$src_package" 2>/dev/null | awk '/^Version:/ { print $2 }' | sort -u -V -r
}

# --- fetch and extract --------------------------------------------------------------------

work="$(mktemp -d "$cache_root/src/work.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

if [ -n "${STRATA_PG_TARBALL:-}" ]; then
  version="$(tarball_version "$STRATA_PG_TARBALL")"
  say "unpacking upstream tarball $(basename "$STRATA_PG_TARBALL") ($version)..."
  tar -xf "$STRATA_PG_TARBALL" -C "$work"
  srcdir="$(find "$work" -mindepth 1 -maxdepth 1 -type d -name 'postgresql-15*' | head -n 1)"
  [ -n "$srcdir" ] || die "tarball did not contain a postgresql-15.* directory"
  source_desc="upstream tarball $(basename "$STRATA_PG_TARBALL")"
else
  ensure_deb_src
  mapfile -t versions < <(source_versions)
  if [ "${#versions[@]}" -eq 0 ]; then
    say "apt knows no source for $src_package yet; apt-get update"
    $SUDO apt-get update -q >&2
    mapfile -t versions < <(source_versions)
  fi
  [ "${#versions[@]}" -gt 0 ] || die "apt-cache showsrc $src_package lists no version"
  say "source versions offered: ${versions[*]}"
  version=""
  for v in "${versions[@]}"; do
    say "downloading $v..."
    dl="$work/dl-$(sanitize_version "$v")"
    mkdir -p "$dl"
    # apt's download sandbox user cannot write into root's cache; let it in.
    chmod 0777 "$dl"
    if (cd "$dl" && apt-get source -q --download-only "$src_package=$v" >"$dl.log" 2>&1); then
      version="$v"
      break
    fi
    say "could not download $v ($(grep -m 1 -E '404|Failed to fetch|Unable to find|^E:' "$dl.log" | cut -c1-200)); trying the next version"
    rm -rf "$dl"
  done
  [ -n "$version" ] || die "no version of $src_package could be downloaded"
  dsc="$(find "$dl" -maxdepth 1 -name '*.dsc' | head -n 1)"
  [ -n "$dsc" ] || die "downloaded $version but found no .dsc"
  say "extracting $version (dpkg-source -x applies Debian's patches)..."
  (cd "$dl" && dpkg-source -q -x "$(basename "$dsc")" "$work/postgresql-15" >&2)
  srcdir="$work/postgresql-15"
  source_desc="Debian source package $src_package $version"
fi

prefix="$(prefix_for "$version")"
# Build in place under the cache (not the repo): the configured tree stays usable for
# debugging, and its Makefiles keep the absolute paths configure wrote.
srcdir_final="$cache_root/src/pg15-$(sanitize_version "$version")-$patch_sha"
rm -rf "$srcdir_final"
mv "$srcdir" "$srcdir_final"
srcdir="$srcdir_final"
rm -rf "$work"
trap - EXIT
logs="$srcdir/strata-logs"
mkdir -p "$logs"
say "building $source_desc, patch sha256 $patch_sha"

say "applying $(basename "$patch_file")"
if ! patch -d "$srcdir" -p1 --forward --no-backup-if-mismatch <"$patch_file" >&2; then
  die "$(basename "$patch_file") does not apply to $version (see rejects above)"
fi
if find "$srcdir" -name '*.rej' | grep -q .; then
  die "$(basename "$patch_file") left rejects"
fi
# Debian's 50-per-version-dirs.patch installs modules (plpgsql, snowball, contrib) into
# /usr/lib/postgresql/15/lib whatever the prefix: `make install` would overwrite the
# stock 15.x package's modules there and our server would load theirs.  Keep ours under
# the prefix.
sed -i 's|^override pkglibdir := /usr/lib/postgresql/@PG_MAJORVERSION@/lib$|override pkglibdir := $(libdir)/postgresql|' \
  "$srcdir/src/Makefile.global.in"
grep -q '^override pkglibdir := $(libdir)/postgresql$' "$srcdir/src/Makefile.global.in" ||
  die "could not point pkglibdir under the prefix (src/Makefile.global.in changed?)"

# --- configure, build, install ------------------------------------------------------------

jobs="${STRATA_PG_JOBS:-$(nproc)}"
configure_args=(
  "--prefix=$prefix"
  --enable-debug
  --without-icu
  --with-readline
  --with-zlib
  --without-openssl
  --without-llvm
)
say "configuring"
# Debian's source tree is an upstream release: the parser and scanner C files are
# pregenerated, so bison and flex only matter if a Debian patch touched a grammar.
(cd "$srcdir" && env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS ./configure "${configure_args[@]}" \
  >"$logs/configure.log" 2>&1) ||
  {
    tail -n 30 "$logs/configure.log" >&2
    die "configure failed"
  }

# Measured: 910 s at -j2 on a shared 2-core machine (15.18).
minutes=$((30 / (jobs < 1 ? 1 : jobs) + 1))
say "building (this takes about $minutes minutes with -j$jobs)"
started=$(date +%s)
run_make() {
  local log="$logs/make.log"
  if ! pg_make -C "$srcdir" -j"$jobs" "$@" >>"$log" 2>&1; then
    tail -n 40 "$log" >&2
    die "make $* failed (log kept at $log)"
  fi
}
run_make
for m in "${contrib_modules[@]}"; do
  run_make -C "contrib/$m"
done
built=$(date +%s)

# The stamp is written only after every install step succeeded: a half-installed prefix
# never carries it, so neither the cache check nor --prefix-only ever reports one.
rm -rf "$prefix"
run_make install
for m in "${contrib_modules[@]}"; do
  run_make -C "contrib/$m" install
done

cat >"$prefix/$stamp_name" <<EOF
source: $source_desc
version: $version
patch: $(basename "$patch_file") sha256 $(sha256sum "$patch_file" | cut -d' ' -f1)
configure: ${configure_args[*]}
source_tree: $srcdir
contrib: ${contrib_modules[*]}
build_seconds: $((built - started))
built_at: $(date -u +%Y-%m-%dT%H:%M:%SZ)
EOF

size="$(du -sh "$prefix" | cut -f1)"
say "built in $((built - started)) s; install size $size"
say "installed at $prefix"
echo "$prefix"
