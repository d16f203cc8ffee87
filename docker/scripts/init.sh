#!/usr/bin/env bash
# docker/scripts/init.sh: the one-shot init service of the Compose stack.
#
# Gives the pageserver the tenant's timeline, the way `strata up` does today: initdb of
# the compute's data directory (in the compute-data volume, as user postgres), then
# POST /v1/tenant/<t>/timeline/<tl> {"safekeepers": [...], "import_pgdata": PGDATA} to
# the pageserver, which mounts that volume read-only at the same path and imports the
# cleanly shut down directory at the LSN where its WAL ends.  Idempotent: exits 0 at
# once when the pageserver already has the timeline.
#
# When the stateless compute lands (the compute fetches a basebackup from the
# pageserver), this becomes a POST of {"safekeepers": [...], "initdb": true} and the
# compute-data mount of the pageserver goes away.
#
# Environment: STRATA_TENANT_ID, STRATA_TIMELINE_ID, STRATA_SAFEKEEPERS (host:port,...),
# STRATA_PAGESERVER_HTTP (host:port), PGDATA, STRATA_INIT_TIMEOUT (s, default 120).
set -euo pipefail
. /opt/strata/scripts/common.sh
check_id STRATA_TENANT_ID "$STRATA_TENANT_ID"
check_id STRATA_TIMELINE_ID "$STRATA_TIMELINE_ID"
timeout=${STRATA_INIT_TIMEOUT:-120}
url="http://$STRATA_PAGESERVER_HTTP/v1/tenant/$STRATA_TENANT_ID/timeline/$STRATA_TIMELINE_ID"

log "waiting for the pageserver at $STRATA_PAGESERVER_HTTP"
wait_for "$timeout" pageserver curl -fsS --max-time 5 "http://$STRATA_PAGESERVER_HTTP/v1/status"

code=$(curl -sS --max-time 10 -o /tmp/timeline.json -w '%{http_code}' "$url")
case "$code" in
  200) log "the pageserver has timeline $STRATA_TIMELINE_ID already: nothing to do"; exit 0 ;;
  404) ;;
  *) die "GET $url answered HTTP $code: $(cat /tmp/timeline.json)" ;;
esac

root=$(dirname "$PGDATA")
mkdir -p "$root"
chown postgres:postgres "$root"
chmod 0750 "$root"
if [ ! -f "$PGDATA/PG_VERSION" ]; then
  staging="$PGDATA.initdb"
  rm -rf "$staging"
  log "initdb $PGDATA"
  as_postgres initdb -D "$staging" --username=postgres --auth=trust -E UTF8 --locale=C \
    --no-sync --no-instructions >/tmp/initdb.log 2>&1 || { cat /tmp/initdb.log >&2; die "initdb failed"; }
  printf '\n# Settings owned by the compose stack (rewritten at every start).\ninclude '"'"'strata.conf'"'"'\n' \
    >>"$staging/postgresql.conf"
  : >"$staging/strata.conf"
  chown postgres:postgres "$staging/strata.conf"
  mv "$staging" "$PGDATA"
fi
state=$(as_postgres pg_controldata "$PGDATA" | sed -n 's/^Database cluster state: *//p')
[ "$state" = "shut down" ] ||
  die "$PGDATA is '$state', not cleanly shut down: the pageserver can only import a clean one"

sks=$(printf '%s' "$STRATA_SAFEKEEPERS" | awk -F, '{for (i = 1; i <= NF; i++) printf "%s\"%s\"", (i > 1 ? "," : ""), $i}')
body="{\"safekeepers\": [$sks], \"import_pgdata\": \"$PGDATA\"}"
log "POST $url $body"
code=$(curl -sS --max-time 300 -X POST -H 'Content-Type: application/json' -d "$body" \
  -o /tmp/create.json -w '%{http_code}' "$url")
case "$code" in
  200 | 201) log "the pageserver imported $PGDATA: $(cat /tmp/create.json)" ;;
  409) log "the pageserver has the timeline already (an earlier init): $(cat /tmp/create.json)" ;;
  *) die "POST $url answered HTTP $code: $(cat /tmp/create.json)" ;;
esac
