#!/usr/bin/env bash
# docker/tokens.sh: the stack's secrets, generated once.
#
# Writes docker/.env (mode 0600) with a random STRATA_ADMIN_TOKEN and
# STRATA_TENANT_TOKEN, and the object store's S3 keys STRATA_S3_ACCESS_KEY and
# STRATA_S3_SECRET_KEY; docker-compose reads that file from the compose file's
# directory, so `docker-compose -f docker/docker-compose.yml up -d` then runs with
# authentication on every daemon port and the admin API (docs/operations.md
# "Authentication") and on the object store.  Values already in the file are
# kept (a file from before the object store gets the S3 keys added); values in the
# environment are written instead of new ones.  Prints the file's path.
set -euo pipefail
env_file=${1:-$(cd "$(dirname "$0")" && pwd)/.env}
names=(STRATA_ADMIN_TOKEN STRATA_TENANT_TOKEN STRATA_S3_ACCESS_KEY STRATA_S3_SECRET_KEY)
rand_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }
# A value of the file, or "" when it has none.
from_file() { [ -e "$env_file" ] && sed -n "s/^$1=//p" "$env_file" | tail -n 1 || true; }
missing=0
for n in "${names[@]}"; do [ -n "$(from_file "$n")" ] || missing=1; done
if [ "$missing" = 0 ]; then
  echo "$env_file (kept)"
  exit 0
fi
declare -A val
for n in "${names[@]}"; do
  val[$n]=$(from_file "$n")
  [ -n "${val[$n]}" ] || val[$n]=${!n:-}
done
: "${val[STRATA_ADMIN_TOKEN]:=$(rand_hex 16)}"
: "${val[STRATA_TENANT_TOKEN]:=$(rand_hex 16)}"
# S3 keys in the usual shapes: a 20-character access key id, a 40-character secret.
: "${val[STRATA_S3_ACCESS_KEY]:=STRATA$(rand_hex 7 | tr a-f A-F)}"
: "${val[STRATA_S3_SECRET_KEY]:=$(rand_hex 20)}"
umask 077
tmp=$(mktemp "$env_file.XXXXXX")
# Lines of the old file that are not ours stay.
if [ -e "$env_file" ]; then
  grep -v -E "^($(IFS='|'; echo "${names[*]}"))=" "$env_file" >"$tmp" || true
fi
for n in "${names[@]}"; do printf '%s=%s\n' "$n" "${val[$n]}" >>"$tmp"; done
chmod 600 "$tmp"
mv "$tmp" "$env_file"
echo "$env_file (new secrets written)"
