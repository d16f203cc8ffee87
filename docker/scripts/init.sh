#!/usr/bin/env bash
# docker/scripts/init.sh: the one-shot init service of the Compose stack.
#
# Has the pageserver create the tenant's timeline on the storage side: `strata tenant
# create` unless it has the tenant, then `strata timeline create --initdb` (POST /v1/tenant/<t>/timeline/<tl> {"initdb": true, "safekeepers":
# [...]}, with the admin token), so the pageserver runs the patched initdb itself and
# imports it.  This container has no volume and leaves nothing behind.  Idempotent:
# exits 0 at once when the pageserver already has the timeline.
#
# Environment: STRATA_TENANT_ID, STRATA_TIMELINE_ID, STRATA_SAFEKEEPERS (host:port,...),
# STRATA_PAGESERVER_HTTP (host:port), STRATA_ADMIN_TOKEN, STRATA_INIT_TIMEOUT (s, 120).
set -euo pipefail
. /opt/strata/scripts/common.sh
check_id STRATA_TENANT_ID "$STRATA_TENANT_ID"
check_id STRATA_TIMELINE_ID "$STRATA_TIMELINE_ID"
export STRATA_ADMIN_TOKEN=${STRATA_ADMIN_TOKEN:-}
timeout=${STRATA_INIT_TIMEOUT:-120}
target=(--pageserver "$STRATA_PAGESERVER_HTTP" --tenant "$STRATA_TENANT_ID")

log "waiting for the pageserver at $STRATA_PAGESERVER_HTTP"
wait_for "$timeout" pageserver curl -fsS --max-time 5 "http://$STRATA_PAGESERVER_HTTP/v1/status"

if out=$(strata timeline show "$STRATA_TIMELINE_ID" "${target[@]}" 2>&1); then
  log "the pageserver has timeline $STRATA_TIMELINE_ID already: nothing to do"
  exit 0
fi
case "$out" in
  *"HTTP 404"*) ;;
  *) die "strata timeline show: $out" ;;
esac
if ! out=$(strata tenant create --id "$STRATA_TENANT_ID" --pageserver "$STRATA_PAGESERVER_HTTP" 2>&1); then
  case "$out" in
    *"HTTP 409"*) ;; # it exists (an earlier init that stopped before the timeline)
    *) die "strata tenant create: $out" ;;
  esac
fi
log "strata timeline create --initdb (tenant $STRATA_TENANT_ID timeline $STRATA_TIMELINE_ID)"
strata timeline create --id "$STRATA_TIMELINE_ID" --initdb --safekeepers "$STRATA_SAFEKEEPERS" \
  "${target[@]}"
log "the pageserver made the timeline with its own initdb"
