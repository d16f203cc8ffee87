# docker/scripts/common.sh: helpers sourced by the compose scripts of the images.
# Not a program.  Defines log/die, the defaults of the stack's environment variables,
# wait_for and the checks of ids and tokens.
STRATA_TENANT_ID=${STRATA_TENANT_ID:-5ca1ab1e5ca1ab1e5ca1ab1e5ca1ab1e}
STRATA_TIMELINE_ID=${STRATA_TIMELINE_ID:-7e1e7e1e7e1e7e1e7e1e7e1e7e1e7e1e}
STRATA_SAFEKEEPERS=${STRATA_SAFEKEEPERS:-sk1:5454,sk2:5454,sk3:5454}
STRATA_PAGESERVER_HTTP=${STRATA_PAGESERVER_HTTP:-pageserver:9898}
STRATA_PAGESERVER=${STRATA_PAGESERVER:-pageserver:6400}

log() { printf '%s %s: %s\n' "$(date -u +%H:%M:%S)" "${0##*/}" "$*"; }
die() { log "error: $*" >&2; exit 1; }

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

# A token (docs/operations.md): 1..255 printable ASCII characters, no spaces; here also
# no quotes or backslashes, since it goes into JSON and postgresql.conf as it is.
check_token() {
  local LC_ALL=C
  [ -n "$2" ] && [ "${#2}" -le 255 ] && [[ "$2" != *[![:graph:]]* ]] &&
    [[ "$2" != *[\"\'\\]* ]] ||
    die "$1 must be 1 to 255 printable ASCII characters without spaces, quotes or backslashes"
}
