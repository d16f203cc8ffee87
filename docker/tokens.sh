#!/usr/bin/env bash
# docker/tokens.sh: the stack's tokens, generated once.
#
# Writes docker/.env (mode 0600) with a random STRATA_ADMIN_TOKEN and
# STRATA_TENANT_TOKEN unless it exists; docker-compose reads that file from
# the compose file's directory, so `docker-compose -f docker/docker-compose.yml
# up -d` then runs with authentication on every daemon port and the admin API
# (docs/operations.md "Authentication").  Tokens already in the environment
# are written instead of new ones.  Prints the file's path.
set -euo pipefail
env_file=${1:-$(cd "$(dirname "$0")" && pwd)/.env}
if [ -e "$env_file" ] && grep -q '^STRATA_ADMIN_TOKEN=' "$env_file" &&
   grep -q '^STRATA_TENANT_TOKEN=' "$env_file"; then
  echo "$env_file (kept)"
  exit 0
fi
rand_hex() { od -An -N16 -tx1 /dev/urandom | tr -d ' \n'; }
admin=${STRATA_ADMIN_TOKEN:-$(rand_hex)}
tenant=${STRATA_TENANT_TOKEN:-$(rand_hex)}
umask 077
tmp=$(mktemp "$env_file.XXXXXX")
printf 'STRATA_ADMIN_TOKEN=%s\nSTRATA_TENANT_TOKEN=%s\n' "$admin" "$tenant" > "$tmp"
chmod 600 "$tmp"
mv "$tmp" "$env_file"
echo "$env_file (new tokens)"
