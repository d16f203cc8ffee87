#!/usr/bin/env python3
"""sk_cpu: CPU that each strata-safekeeper spends per transaction and per append.

For: comparing safekeeper builds on the commit path.  For each build given
(--builds DIR[,DIR...], release trees with bin/strata and lib/strata.so),
`strata up` in a temporary directory, `pgbench -i -s SCALE`, then pgbench
TPC-B (-c CLIENTS -j 2 -T DURATION); around the timed run it samples
utime+stime of every strata-safekeeper pid (/proc/PID/stat fields 14+15:
the whole thread group, io-wq workers included) and the safekeepers'
safekeeper_appends_total / safekeeper_fdatasync_total (/metrics).  Prints one
table row per build and repeat: TPS, CPU us per transaction (sum of the
three) and per append (each safekeeper), appends and fdatasyncs per txn,
and the CPU per transaction of the compute's walproposer and walsenders
(its child processes by title, bench/proc_groups.py), the other end of
the commit path.
With --wal-io sync,uring each build also runs once per safekeeper WAL I/O
mode (SAFEKEEPER_WAL_IO; the safekeepers' /v1/status must confirm it).
Builds run back to back, repeated --repeat times (interleaved), because the
machine is shared and noisy: compare ratios, not absolute numbers.

Not for: a timed test (no pass/fail beyond "every run ran"), or a report in
docs/ (stateless_tpcb.py and quorum_commit.py own those).

Run: python3 bench/sk_cpu.py --builds /work/main/build-sk [--duration 30]
     [--scale 10] [--clients 16] [--repeat 1] [--no-pageserver] [--keep]
     [--wal-io sync,uring]
"""

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
from bench_pg import pg_tool
from bench_proc import BenchError, proc_cpu_seconds, run
from bench_strata import prometheus_counter, strata_setup
from proc_groups import children_map, postgres_group, process_title


def sk_counters(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode("utf-8", errors="replace")
    return {
        "appends": prometheus_counter(text, "safekeeper_appends_total") or 0.0,
        "fsyncs": prometheus_counter(text, "safekeeper_fdatasync_total") or 0.0,
    }


def sk_wal_io(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/status", timeout=5) as r:
        return json.loads(r.read().decode("utf-8")).get("wal_io")


def compute_cpu(postmaster):
    """{pid: (group, CPU seconds)} of the compute's walproposer and
    walsenders."""
    out = {}
    for pid in children_map().get(postmaster, []):
        group = postgres_group(process_title(pid))
        cpu = proc_cpu_seconds(pid) if group in ("walproposer", "walsender") else None
        if cpu is not None:
            out[pid] = (group, cpu)
    return out


def compute_delta(before, after, group):
    """CPU seconds group's processes spent between two compute_cpu samples
    (a process alive at both)."""
    return sum(a[1] - before[pid][1] for pid, a in after.items()
               if a[0] == group and pid in before)


def sample(sks):
    out = {}
    for sk in sks:
        out[sk["name"]] = {"cpu": proc_cpu_seconds(sk["pid"]), **sk_counters(sk["http_port"])}
    return out


def one_run(build, scale, clients, duration, with_pageserver, workdir, keep, wal_io=None):
    cluster_dir = tempfile.mkdtemp(prefix="skcpu-", dir=workdir)
    os.chmod(cluster_dir, 0o755)
    saved = os.environ.get("SAFEKEEPER_WAL_IO")
    if wal_io:
        os.environ["SAFEKEEPER_WAL_IO"] = wal_io
    try:
        return measure(build, scale, clients, duration, with_pageserver, cluster_dir, wal_io)
    finally:
        if saved is None:
            os.environ.pop("SAFEKEEPER_WAL_IO", None)
        else:
            os.environ["SAFEKEEPER_WAL_IO"] = saved
        if not keep:
            shutil.rmtree(cluster_dir, ignore_errors=True)


def measure(build, scale, clients, duration, with_pageserver, cluster_dir, wal_io=None):
    with strata_setup(build, os.path.join(cluster_dir, "c"), "sk_cpu",
                      with_pageserver=with_pageserver) as (cluster, status):
        status = cluster.status()
        conn = cluster.conninfo(status)
        sks = [sk for sk in status["safekeepers"] if sk.get("pid")]
        modes = {sk_wal_io(sk["http_port"]) for sk in sks}
        if wal_io and modes != {wal_io}:
            raise BenchError(f"asked for --wal-io {wal_io}, the safekeepers report {modes}")
        args = ["-h", conn["host"], "-p", conn["port"], "-U", conn["user"], conn["dbname"]]
        run([pg_tool("pgbench"), "-i", "-q", "-s", str(scale)] + args, timeout=900)
        postmaster = status["compute"]["pid"]
        before, cbefore = sample(sks), compute_cpu(postmaster)
        t0 = time.monotonic()
        cp = run([pg_tool("pgbench"), "-c", str(clients), "-j", "2", "-T", str(duration), "-n"]
                 + args, timeout=duration + 180)
        elapsed = time.monotonic() - t0
        after, cafter = sample(sks), compute_cpu(postmaster)
    if not any(g == "walproposer" for g, _ in cafter.values()):
        raise BenchError("no walproposer among the compute's processes")
    m = re.search(r"number of transactions actually processed: (\d+)", cp.stdout)
    t = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", cp.stdout)
    if not m or not t:
        raise BenchError("could not parse pgbench output:\n" + cp.stdout)
    txns = int(m.group(1))
    per_sk = {}
    for name, b in before.items():
        a = after[name]
        if a["cpu"] is None or b["cpu"] is None:
            raise BenchError(f"safekeeper {name} exited during the run")
        cpu = a["cpu"] - b["cpu"]
        appends = a["appends"] - b["appends"]
        per_sk[name] = {
            "cpu_s": cpu,
            "us_per_txn": cpu * 1e6 / txns,
            "us_per_append": cpu * 1e6 / appends if appends else None,
            "appends_per_txn": appends / txns,
            "fsyncs_per_txn": (a["fsyncs"] - b["fsyncs"]) / txns,
        }
    return {"build": build, "wal_io": "/".join(sorted(str(m) for m in modes)),
            "tps": float(t.group(1)), "txns": txns, "elapsed": elapsed,
            "safekeepers": per_sk,
            "sk_us_per_txn": sum(s["us_per_txn"] for s in per_sk.values()),
            "wp_us_per_txn": compute_delta(cbefore, cafter, "walproposer") * 1e6 / txns,
            "ws_us_per_txn": compute_delta(cbefore, cafter, "walsender") * 1e6 / txns}


def fmt_row(r):
    sks = r["safekeepers"]
    per_append = " ".join(f"{s['us_per_append']:.1f}" if s["us_per_append"] else "-"
                          for s in sks.values())
    per_txn = " ".join(f"{s['us_per_txn']:.1f}" for s in sks.values())
    app = sum(s["appends_per_txn"] for s in sks.values()) / len(sks)
    fs = sum(s["fsyncs_per_txn"] for s in sks.values()) / len(sks)
    name = f"{os.path.basename(r['build'].rstrip('/'))} {r.get('wal_io', '')}"
    return (f"{name:<16} {r['tps']:>8.1f} "
            f"{r['sk_us_per_txn']:>9.1f}  {per_txn:<20} {per_append:<20} {app:>6.2f} {fs:>6.2f} "
            f"{r['wp_us_per_txn']:>9.1f} {r['ws_us_per_txn']:>9.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--builds", required=True, help="comma-separated release build dirs")
    ap.add_argument("--duration", type=int, default=30)
    ap.add_argument("--scale", type=int, default=10)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-pageserver", action="store_true")
    ap.add_argument("--workdir", default="/tmp")
    ap.add_argument("--keep", action="store_true", help="keep the cluster directories")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--wal-io", default="",
                    help="comma-separated safekeeper --wal-io modes to run each build with "
                         "(default: the safekeeper's own default)")
    opts = ap.parse_args()
    builds = [os.path.abspath(b) for b in opts.builds.split(",") if b]
    results = []
    header = (f"{'build':<16} {'tps':>8} {'sk us/txn':>9}  {'us/txn each':<20} "
              f"{'us/append each':<20} {'app/tx':>6} {'fs/tx':>6} {'wp us/txn':>9} "
              f"{'ws us/txn':>9}")
    modes = [m for m in opts.wal_io.split(",") if m] or [None]
    for rep in range(opts.repeat):
        for build, mode in [(b, m) for b in builds for m in modes]:
            print(f"run {rep + 1}/{opts.repeat}: {build} {mode or ''}", flush=True)
            r = one_run(build, opts.scale, opts.clients, opts.duration,
                        not opts.no_pageserver, opts.workdir, opts.keep, mode)
            results.append(r)
            print(header + "\n" + fmt_row(r), flush=True)
    print("\n" + header)
    for r in results:
        print(fmt_row(r))
    if opts.json:
        with open(opts.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
