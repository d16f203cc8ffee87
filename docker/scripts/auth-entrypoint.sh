#!/usr/bin/env bash
# docker/scripts/auth-entrypoint.sh: the entrypoint of the safekeeper and pageserver
# images.  Writes the daemon's auth file (docs/operations.md "Authentication") from the
# environment, then execs the daemon (the image's CMD, "$@").
#
#   STRATA_ADMIN_TOKEN   the admin token (every tenant, the admin API)
#   STRATA_TENANT_ID, STRATA_TENANT_TOKEN   one tenant and its token (optional)
#   STRATA_AUTH_FILE_VAR the daemon's variable that names its auth file
#                        (SAFEKEEPER_AUTH_FILE, PAGESERVER_AUTH_FILE; set by the image)
#
# Without STRATA_ADMIN_TOKEN nothing is written and the daemon trusts everybody.  An auth
# file the operator mounts (its variable already set) is left alone.  The file lives in
# /run/strata, mode 0600, rewritten at every start.
set -euo pipefail
. /opt/strata/scripts/common.sh

var=${STRATA_AUTH_FILE_VAR:-}
if [ -n "$var" ] && [ -z "${!var:-}" ] && [ -n "${STRATA_ADMIN_TOKEN:-}" ]; then
  check_token STRATA_ADMIN_TOKEN "$STRATA_ADMIN_TOKEN"
  tenants=""
  if [ -n "${STRATA_TENANT_TOKEN:-}" ]; then
    check_token STRATA_TENANT_TOKEN "$STRATA_TENANT_TOKEN"
    check_id STRATA_TENANT_ID "${STRATA_TENANT_ID:-}"
    tenants="\"$STRATA_TENANT_ID\": \"$STRATA_TENANT_TOKEN\""
  fi
  mkdir -p /run/strata
  chmod 0700 /run/strata
  file=/run/strata/auth.json
  (umask 077 && printf '{"admin_token": "%s", "tenants": {%s}}\n' "$STRATA_ADMIN_TOKEN" "$tenants" \
    >"$file.tmp")
  mv "$file.tmp" "$file"
  export "$var=$file"
  log "auth file $file: the admin token${tenants:+ and the token of tenant $STRATA_TENANT_ID}"
fi
exec "$@"
