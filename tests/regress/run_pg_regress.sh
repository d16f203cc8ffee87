#!/usr/bin/env bash
# run_pg_regress.sh: PostgreSQL's own regression suite (the installcheck
# schedule of the PATCHED build) against a running server -- normally a
# Strata compute -- and a verdict against tests/regress/expected_diffs.txt.
#
# For: proving the compute behaves like PostgreSQL (docs/design.md §10).  The
# suite runs with pg_regress from the patched build's source tree (the one
# compute/postgres/build.sh made; it has regress.so and the expected files
# of exactly that minor version) and the patched build's psql.  Failing
# tests are compared with the expected-differences list: the run passes when
# the failures are exactly the listed ones (a listed test that passes is
# reported as well and fails the run, so the list cannot rot).
#
# Not for: starting or configuring the server (the caller does: small
# shared_buffers etc.), or running against the stock 15.20 binaries (their
# expected files differ in minor ways; they are oracles only).
#
# Usage: run_pg_regress.sh --host H --port P [--user U] [--outputdir DIR]
#            [--expected FILE] [--schedule FILE] [--max-connections N]
#            [--timeout SECONDS] [TEST ...]
#   TEST ...          run these tests (installcheck-tests) instead of the schedule
#   --schedule        default: the source tree's parallel_schedule (installcheck)
#   --max-connections default 1, as `make installcheck` (0 = no limit, as
#                     installcheck-parallel)
#   --expected        default: expected_diffs.txt beside this script
#   --outputdir       default: a new directory under /tmp; kept (results/,
#                     regression.diffs, regression.out)
#   --timeout         whole-run limit, default 1200 s
# Exit: 0 failures == expected list; 1 otherwise (the differences printed);
#       2 usage or setup error.
# Last lines printed: "pg_regress: N tests, F failed (E expected), T s".
set -u -o pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

host="" port="" user="postgres" outputdir="" expected="$here/expected_diffs.txt"
schedule="" maxconn=1 timeout_s=1200
tests=()
usage() { sed -n '18,33p' "${BASH_SOURCE[0]}" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --host) host="$2"; shift 2 ;;
        --port) port="$2"; shift 2 ;;
        --user) user="$2"; shift 2 ;;
        --outputdir) outputdir="$2"; shift 2 ;;
        --expected) expected="$2"; shift 2 ;;
        --schedule) schedule="$2"; shift 2 ;;
        --max-connections) maxconn="$2"; shift 2 ;;
        --timeout) timeout_s="$2"; shift 2 ;;
        -h|--help) usage ;;
        --*) echo "run_pg_regress.sh: unknown option $1" >&2; usage ;;
        *) tests+=("$1"); shift ;;
    esac
done
[ -n "$host" ] && [ -n "$port" ] || { echo "run_pg_regress.sh: --host and --port are required" >&2; usage; }
[ -r "$expected" ] || { echo "run_pg_regress.sh: expected list $expected not readable" >&2; exit 2; }

prefix="${STRATA_PG_PREFIX:-$(bash "$repo/compute/postgres/build.sh" --prefix-only)}"
info="$prefix/strata-build-info.txt"
[ -r "$info" ] || { echo "run_pg_regress.sh: $info missing: build the patched PostgreSQL (make postgres)" >&2; exit 2; }
src="$(sed -n 's/^source_tree: //p' "$info")"
regress="$src/src/test/regress"
[ -x "$regress/pg_regress" ] && [ -r "$regress/regress.so" ] || {
    echo "run_pg_regress.sh: $regress has no built pg_regress/regress.so" >&2; exit 2; }
[ -n "$schedule" ] || schedule="$regress/parallel_schedule"

if [ -z "$outputdir" ]; then
    outputdir="$(mktemp -d /tmp/strata-regress-XXXXXX)"
fi
mkdir -p "$outputdir"
# The server reads regress.so and writes nothing here, but pg_regress runs
# as the postgres OS user when we are root (psql and the results are its),
# so outputdir must belong to that user.
runas=()
if [ "$(id -u)" = 0 ]; then
    chown -R postgres:postgres "$outputdir"
    chmod 755 "$outputdir"
    runas=(runuser -u postgres --)
    runuser -u postgres -- test -w "$outputdir" || {
        echo "run_pg_regress.sh: the postgres user cannot write $outputdir (a parent directory is not traversable?)" >&2
        exit 2; }
fi

args=(--inputdir="$regress" --bindir="$prefix/bin" --dlpath="$regress"
      --outputdir="$outputdir" --max-concurrent-tests=20
      --host="$host" --port="$port" --user="$user")
[ "$maxconn" != 0 ] && args+=(--max-connections="$maxconn")
if [ ${#tests[@]} -gt 0 ]; then
    args+=("${tests[@]}")
else
    args+=(--schedule="$schedule")
fi

echo "pg_regress: $regress/pg_regress against $host:$port, output in $outputdir"
start=$(date +%s)
# pg_regress exits 1 when any test fails; the verdict below is ours.
(cd "$outputdir" && timeout --kill-after=30 "$timeout_s" "${runas[@]}" \
    "$regress/pg_regress" "${args[@]}") 2>&1 | tee "$outputdir/run.log"
rc=${PIPESTATUS[0]}
elapsed=$(( $(date +%s) - start ))
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "pg_regress: timed out after $timeout_s s" >&2
    exit 1
fi

# PostgreSQL 15 prints "test NAME ... ok|FAILED|failed (ignored)" for serial
# tests and "     NAME ... " inside parallel groups.
results="$outputdir/verdicts.txt"
sed -nE 's/^(test +|     +)([A-Za-z0-9_.]+) +\.\.\. +(ok|FAILED|failed \(ignored\)).*/\2 \3/p' \
    "$outputdir/run.log" | sed 's/failed (ignored)/ignored/' >"$results"
ntests=$(wc -l <"$results")
if [ "$ntests" = 0 ]; then
    echo "pg_regress: no test results parsed (exit $rc); see $outputdir/run.log" >&2
    exit 1
fi
failed="$(awk '$2 != "ok" {print $1}' "$results" | sort -u)"
# Expected list: "name  reason...", '#' comments and blank lines ignored.
# "name  (may-fail)  reason...": a test whose result depends on timing here;
# it may fail or pass and judges nothing either way.
listed="$(sed -E 's/#.*//' "$expected" | awk 'NF && $2 != "(may-fail)" {print $1}' | sort -u)"
mayfail="$(sed -E 's/#.*//' "$expected" | awk 'NF && $2 == "(may-fail)" {print $1}' | sort -u)"
if [ ${#tests[@]} -gt 0 ]; then
    # Only the tests that ran are judged.
    listed="$(comm -12 <(echo "$listed") <(awk '{print $1}' "$results" | sort -u))"
fi
unexpected="$(comm -23 <(echo "$failed") <(echo "$listed") | sed '/^$/d')"
unexpected="$(comm -23 <(echo "$unexpected") <(echo "$mayfail") | sed '/^$/d')"
for t in $mayfail; do
    if echo "$failed" | grep -qx "$t"; then
        echo "pg_regress: $t failed (listed as may-fail in $(basename "$expected"))"
    fi
done
nowpass="$(comm -13 <(echo "$failed") <(echo "$listed") | sed '/^$/d')"
nfailed=$(echo "$failed" | sed '/^$/d' | wc -l)
nlisted=$(echo "$listed" | sed '/^$/d' | wc -l)

verdict=0
if [ -n "$unexpected" ]; then
    echo "pg_regress: UNEXPECTED failures (not in $(basename "$expected")):"
    echo "$unexpected" | sed 's/^/  /'
    echo "  diffs: $outputdir/regression.diffs"
    verdict=1
fi
if [ -n "$nowpass" ]; then
    echo "pg_regress: listed in $(basename "$expected") but passed (remove them from the list):"
    echo "$nowpass" | sed 's/^/  /'
    verdict=1
fi
echo "pg_regress: $ntests tests, $nfailed failed ($nlisted expected), $elapsed s"
exit $verdict
