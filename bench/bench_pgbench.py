"""Running pgbench against any server (stock or a Strata compute) and reading its logs.

For: `pgbench -i` at a scale, the same starting point before each run,
and one timed run of a builtin script (simple update -N by default) at a
client count with per-transaction logging, returning the parsed log and
pgbench's own summary lines (kept only to cross-check ours).

Not for: starting servers, or statistics beyond parsing (bench_stats.py).
"""

import glob
import os
import re

from bench_pg import pg_tool, psql
from bench_proc import BenchError, run
from bench_stats import parse_log_lines


def _conn_args(conninfo):
    return ["-h", conninfo["host"], "-p", conninfo["port"], "-U", conninfo["user"]]


def pgbench_init(conninfo, scale, timeout=900):
    """Creates and fills the pgbench tables at scale (drops existing ones)."""
    run([pg_tool("pgbench"), "-i", "-q", "-s", str(scale)] + _conn_args(conninfo)
        + [conninfo["dbname"]], timeout=timeout)


def threads_for(clients, ncpu):
    """pgbench -j: one thread per client up to the number of CPUs."""
    return max(1, min(clients, ncpu))


def prepare_run(conninfo, timeout=300):
    """Same starting point for every run: small tables vacuumed, history empty, checkpointed."""
    for sql in ("VACUUM pgbench_branches", "VACUUM pgbench_tellers",
                "TRUNCATE pgbench_history", "CHECKPOINT"):
        psql(conninfo, sql, timeout=timeout)


def pgbench_run(conninfo, clients, threads, duration, log_prefix, script=("-N",), slack=180):
    """One pgbench run of the builtin script (default `-N`, simple update) for
    duration seconds with -l; returns a result dict.  slack: seconds pgbench
    may take beyond duration (connecting, the end of the run).

    Keys: txns (list of bench_stats.Txn), failed, argv, pgbench_tps (pgbench's
    own "tps = ... (without initial connection time)" or None), stdout.
    Raises BenchError if pgbench fails or writes no log.
    """
    log_dir = os.path.dirname(log_prefix)
    for old in glob.glob(log_prefix + ".*"):
        os.unlink(old)
    argv = [pg_tool("pgbench")] + list(script) + [
        "-c", str(clients), "-j", str(threads), "-T", str(duration), "-l",
        f"--log-prefix={log_prefix}", "-n"] + _conn_args(conninfo) + [conninfo["dbname"]]
    cp = run(argv, timeout=duration + slack, cwd=log_dir)
    logs = sorted(glob.glob(log_prefix + ".*"))
    if not logs:
        raise BenchError(f"pgbench wrote no log files at {log_prefix}.*")
    txns = []
    failed = 0
    for path in logs:
        with open(path, encoding="utf-8") as f:
            t, nfail = parse_log_lines(f)
        txns.extend(t)
        failed += nfail
    m = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", cp.stdout)
    return {
        "txns": txns,
        "failed": failed,
        "argv": argv,
        "pgbench_tps": float(m.group(1)) if m else None,
        "stdout": cp.stdout,
    }
