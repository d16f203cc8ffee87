# docker/scripts/common.sh: helpers sourced by the compose scripts of the compute image.
# Not a program.  Defines log/die, the defaults of the stack's environment variables and
# as_postgres (postgres refuses to run as root).
STRATA_TENANT_ID=${STRATA_TENANT_ID:-5ca1ab1e5ca1ab1e5ca1ab1e5ca1ab1e}
STRATA_TIMELINE_ID=${STRATA_TIMELINE_ID:-7e1e7e1e7e1e7e1e7e1e7e1e7e1e7e1e}
STRATA_SAFEKEEPERS=${STRATA_SAFEKEEPERS:-sk1:5454,sk2:5454,sk3:5454}
STRATA_PAGESERVER_HTTP=${STRATA_PAGESERVER_HTTP:-pageserver:9898}
PGDATA=${PGDATA:-/var/lib/strata/compute/pgdata}

log() { printf '%s %s: %s\n' "$(date -u +%H:%M:%S)" "${0##*/}" "$*"; }
die() { log "error: $*" >&2; exit 1; }

# Runs a command as the unprivileged postgres user (exec, no intermediate process).
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }

# Waits (at most $1 seconds) until the command in $2.. succeeds.
wait_for() {
  local limit=$1 what=$2; shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || die "$what not ready after ${limit}s"
    sleep 1
  done
}

check_id() {
  [[ "$2" =~ ^[0-9a-f]{32}$ ]] || die "$1 must be 32 lowercase hex digits, not '$2'"
}
