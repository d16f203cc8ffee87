#!/usr/bin/env bash
# tests/compose/stage-context.sh: write a clean build context for docker/Dockerfile.
#
#   stage-context.sh DEST [head|worktree]
#
# head (default): the committed tree (git archive HEAD), with docker/ taken from the
# working tree so the stack being tested is the one on disk.  worktree: every tracked
# file as it is on disk.  Untracked files, build trees and caches never go in.  Every
# mtime is set to 0, so podman's layer cache sees only content changes and a second run
# reuses the slow layers (the patched PostgreSQL build).  docker/pg-prefix/ gets the
# patched PostgreSQL that `make` built for this tree's smgr-hook.patch
# (compute/postgres/build.sh --prefix-only), so the images do not compile it again;
# without one the Dockerfile builds it.
# Environment: STRATA_COMPOSE_PG_PREFIX (a prefix to stage, or none; default: the cache's).
# Not for: building (run.sh does that).
set -euo pipefail
dest=${1:?usage: stage-context.sh DEST [head|worktree]}
mode=${2:-head}
repo=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
case "$dest" in /*) ;; *) echo "stage-context: DEST must be absolute" >&2; exit 2 ;; esac
rm -rf "$dest"
mkdir -p "$dest"
case "$mode" in
  head)
    git -C "$repo" archive --format=tar HEAD | tar -x -C "$dest"
    rm -rf "$dest/docker"
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard docker |
      tar --null -T - -c) | tar -x -C "$dest"
    ;;
  worktree)
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard docker |
      cat - <(git ls-files -z --cached) | sort -zu |
      while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
      tar --null -T - -c) | tar -x -C "$dest"
    ;;
  *) echo "stage-context: mode must be head or worktree" >&2; exit 2 ;;
esac
# The same filter BuildKit applies from docker/Dockerfile.dockerignore.
rm -rf "$dest/tests/compose" "$dest/tests/integration" "$dest/docs" "$dest/bench"
# The patched PostgreSQL `make` built for this tree's patch, when there is one: the
# Dockerfile uses it instead of compiling PostgreSQL again (STRATA_COMPOSE_PG_PREFIX=none
# leaves it out, so the image build compiles it as a user with only Docker would).
pg_prefix=${STRATA_COMPOSE_PG_PREFIX:-}
if [ -z "$pg_prefix" ]; then
  pg_prefix=$(bash "$dest/compute/postgres/build.sh" --prefix-only 2>/dev/null | tail -n 1) || pg_prefix=""
fi
rm -rf "$dest/docker/pg-prefix"
mkdir -p "$dest/docker/pg-prefix"
if [ "$pg_prefix" != none ] && [ -n "$pg_prefix" ]; then
  [ -x "$pg_prefix/bin/postgres" ] || { echo "stage-context: $pg_prefix has no bin/postgres" >&2; exit 1; }
  cp -a "$pg_prefix/." "$dest/docker/pg-prefix/"
  echo "stage-context: patched PostgreSQL from $pg_prefix" >&2
else
  echo "stage-context: no patched PostgreSQL staged: the image build compiles it" >&2
fi
find "$dest" -exec touch -h -d @0 {} +
