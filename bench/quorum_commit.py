#!/usr/bin/env python3
"""quorum_commit: the commit-path benchmark of the "Quorum-durable WAL" issue.

For: measuring, in one run on one machine, side by side:
  (a) stock PG 15 alone, fsync on (full_page_writes on, synchronous_commit on);
  (b) stock PG 15 with two synchronous streaming standbys on this machine,
      synchronous_standby_names = 'ANY 2 (s1, s2)';
  (c) PG 15 + the strata extension's walproposer + three strata safekeepers,
      started with the `strata` CLI of the release build (STRATA_BUILD,
      default ./build);
each with pgbench simple-update (-N) at -c1 and -c16, TPS and commit latency
p50/p99 computed from pgbench's per-transaction log; plus, in the same run,
one 8 kB fdatasync (pg_test_fsync) and a loopback TCP round trip.  Prints a
table; writes JSON, markdown and gnuplot PNGs to --out; replaces its section
of docs/benchmarks.md (images under docs/img/) unless --quick or --no-docs.

Not for: a timed test (nothing here passes or fails on speed; the exit code
says only whether every requested setup ran), or tuning any setup beyond
what the comparison needs.  Every server runs on 127.0.0.1 on free ports as
the `postgres` OS user under a temporary directory, and is stopped (by pid if
need be) before the program exits, on failure or Ctrl-C too.

Run: python3 bench/quorum_commit.py [--quick] [--duration S] [--scale N] ...
(`strata bench quorum_commit ...` runs this with the same arguments).
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
from bench_cli import (add_common_options, interrupt_on_sigterm, log, new_results,
                       print_table, report_from_json, run_setups, run_timed)
from bench_pg import make_pg_dir, psql, read_settings, stock_servers
from bench_pgbench import pgbench_init, pgbench_run, prepare_run, threads_for
from bench_physical import measure_fdatasync, measure_fdatasync_cpu, measure_loopback_rtt
from bench_proc import BenchError, pg_workdir
from bench_report import (SECTION_BEGIN, SECTION_END, compute_ratios, console_table,
                          markdown_section, write_plots, write_reports_and_docs)
from bench_stats import latency_curve, summarize, tps_over_time
from bench_strata import strata_setup

SETUPS = {
    "a": ("(a) PG 15, local fsync",
          "stock PostgreSQL 15 alone; commit = local WAL fdatasync."),
    "b": ("(b) PG 15 + 2 sync standbys",
          "stock PostgreSQL 15 primary with two streaming standbys (pg_basebackup, "
          "application_name s1/s2, own data directory and port each, same settings), "
          "`synchronous_standby_names = 'ANY 2 (s1, s2)'`; commit = local fdatasync and "
          "both standbys' WAL flush. All three on this machine and disk."),
    "c": ("(c) Strata: walproposer + 3 safekeepers",
          "PostgreSQL 15 compute with the strata extension's walproposer and three strata "
          "safekeepers, started by `strata up` of the release build; commit = 2 of 3 "
          "safekeepers fsynced. The compute is configured by the CLI (see the settings "
          "table)."),
}


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="quorum_commit",
        description="Commit path: stock PG 15 vs two sync standbys vs Strata safekeepers.")
    ap.add_argument("--duration", type=int, default=None,
                    help="seconds per pgbench run (default 30; 5 with --quick)")
    ap.add_argument("--scale", type=int, default=None,
                    help="pgbench scale factor (default 10; 1 with --quick)")
    ap.add_argument("--clients", default="1,16",
                    help="comma-separated client counts (default 1,16)")
    ap.add_argument("--setups", default="a,b,c",
                    help="which setups to run, comma-separated from a,b,c (default all)")
    ap.add_argument("--quick", action="store_true",
                    help="5 s runs at scale 1, for testing this program; docs are not updated")
    ap.add_argument("--shared-buffers", default="128MB",
                    help="shared_buffers of the stock servers (default 128MB)")
    ap.add_argument("--fsync-seconds", type=int, default=2,
                    help="pg_test_fsync -s (default 2)")
    add_common_options(ap, "quorum_commit",
                       workdir_note=" (its filesystem is the one measured)")
    args = ap.parse_args(argv)
    if args.duration is None:
        args.duration = 5 if args.quick else 30
    if args.scale is None:
        args.scale = 1 if args.quick else 10
    try:
        args.clients = [int(c) for c in args.clients.split(",") if c.strip()]
    except ValueError:
        ap.error("--clients takes comma-separated integers")
    args.setups = [s.strip() for s in args.setups.split(",") if s.strip()]
    if not args.clients or any(c < 1 for c in args.clients):
        ap.error("--clients needs positive integers")
    if not args.setups or any(s not in SETUPS for s in args.setups):
        ap.error("--setups takes letters from a,b,c")
    if args.duration < 1 or args.scale < 1:
        ap.error("--duration and --scale must be positive")
    return args


def wal_sync_count(conninfo):
    """pg_stat_wal.wal_sync of the server: the WAL fsyncs it issued (0 with fsync=off)."""
    return {"server wal_sync": int(psql(conninfo, "SELECT wal_sync FROM pg_stat_wal").strip())}


def sync_counts(conninfo, extra_counters):
    counts = {}
    try:
        counts.update(wal_sync_count(conninfo))
    except (BenchError, ValueError) as e:
        log(f"pg_stat_wal not read: {e}")
    if extra_counters:
        counts.update(extra_counters())
    return counts


def measure_setup(args, key, conninfo, logdir, extra_counters=None):
    """pgbench -i, the server's settings, then one pgbench run per client count.

    Around each run it reads fsync counters (the server's pg_stat_wal.wal_sync,
    plus extra_counters(), e.g. the safekeepers' fdatasync totals) and records
    per-transaction rates: how many fsyncs each commit really cost.
    """
    log(f"({key}) pgbench -i -s {args.scale}")
    pgbench_init(conninfo, args.scale)
    settings = read_settings(conninfo)
    runs = []
    ncpu = os.cpu_count() or 1
    for clients in args.clients:
        threads = threads_for(clients, ncpu)
        entry = {"clients": clients, "threads": threads}
        try:
            prepare_run(conninfo)
            before = sync_counts(conninfo, extra_counters)
            log(f"({key}) pgbench -N -c{clients} -j{threads} -T{args.duration}")
            res = pgbench_run(conninfo, clients, threads, args.duration,
                              os.path.join(logdir, f"{key}_c{clients}"))
            time.sleep(1.0)  # backends report WAL statistics at most once a second
            after = sync_counts(conninfo, extra_counters)
            entry.update(summarize(res["txns"], res["failed"]))
            entry["fsyncs_per_txn"] = {
                name: round((after[name] - before[name]) / max(entry["txns"], 1), 3)
                for name in after if name in before}
            entry["pgbench_tps"] = res["pgbench_tps"]
            entry["tps_series"] = tps_over_time(res["txns"], args.duration)
            entry["latency_curve"] = latency_curve(res["txns"])
            lat = entry.get("lat_ms", {})
            log(f"({key}) -c{clients}: {entry['tps']} tps, p50 {lat.get('p50')} ms, "
                f"p99 {lat.get('p99')} ms ({entry['txns']} txns, pgbench says "
                f"{res['pgbench_tps']} tps)")
        except BenchError as e:
            log(f"({key}) -c{clients} failed: {e}")
            entry["error"] = str(e).splitlines()[0]
        runs.append(entry)
    return settings, runs


def run_stock_local(args, work, sock):
    with stock_servers(work, sock, "a", "a", args.shared_buffers) as (srv, _):
        log(f"(a) postgres pid {srv.pid} port {srv.port}")
        return measure_setup(args, "a", srv.conninfo(), work)


def run_stock_sync_standbys(args, work, sock):
    with stock_servers(work, sock, "b", "b-primary", args.shared_buffers,
                       ("s1", "s2")) as (primary, standbys):
        log(f"(b) primary pid {primary.pid} port {primary.port}; standbys "
            + ", ".join(f"{s.name} pid {s.pid} port {s.port}" for s in standbys))
        settings, runs = measure_setup(args, "b", primary.conninfo(), work)
        for sb in standbys:  # the standbys' own durability settings, for the record
            s = read_settings(sb.conninfo())
            settings[f"{sb.name}: fsync, wal_sync_method"] = f"{s['fsync']}, {s['wal_sync_method']}"
        return settings, runs


def run_strata(args, work):
    # (c) is compute + walproposer + three safekeepers: no pageserver ingesting beside it.
    with strata_setup(args.strata_build, os.path.join(work, "strata"), "c",
                      with_pageserver=False) as (cluster, status):
        conninfo = cluster.conninfo(status)
        log(f"(c) compute pid {status['compute']['pid']} port {conninfo['port']}; safekeepers "
            + ", ".join(f"{sk.get('name')} pid {sk.get('pid')}" for sk in status["safekeepers"]))
        settings, runs = measure_setup(args, "c", conninfo, work,
                                       extra_counters=lambda: cluster.fdatasync_counts(status))
        running = ["compute"] + [sk.get("name", "?") for sk in status["safekeepers"]
                                 if sk.get("pid") is not None]
        if (status.get("pageserver") or {}).get("pid") is not None:
            running.append("pageserver")
        settings["processes (strata status)"] = " ".join(running)
        return settings, runs


def run_all(args, work, results):
    sock = os.path.join(work, "sock")
    make_pg_dir(sock)
    phys = results["physical"]
    log(f"pg_test_fsync -s {args.fsync_seconds} in {work}")
    try:
        phys["fdatasync"] = measure_fdatasync(work, args.fsync_seconds)
        log(f"fdatasync 8 kB: {phys['fdatasync']['usec_per_op']} us/op")
    except BenchError as e:
        phys["fdatasync"] = {"error": str(e).splitlines()[0]}
        log(f"fdatasync not measured: {e}")
    try:
        phys["fdatasync_cpu"] = measure_fdatasync_cpu(work, 500 if args.quick else 3000)
        log(f"CPU of one 8 kB write + fdatasync: {phys['fdatasync_cpu']['cpu_us_per_op']} us")
    except OSError as e:
        phys["fdatasync_cpu"] = {"error": str(e).splitlines()[0]}
        log(f"fdatasync CPU not measured: {e}")
    try:
        phys["loopback_rtt"] = measure_loopback_rtt(5000 if args.quick else 20000)
        log(f"loopback RTT: p50 {phys['loopback_rtt']['p50_us']} us, "
            f"p99 {phys['loopback_rtt']['p99_us']} us")
    except (BenchError, OSError) as e:
        phys["loopback_rtt"] = {"error": str(e).splitlines()[0]}
        log(f"loopback RTT not measured: {e}")
    runners = {"a": lambda: run_stock_local(args, work, sock),
               "b": lambda: run_stock_sync_standbys(args, work, sock),
               "c": lambda: run_strata(args, work)}
    run_setups(args, results, SETUPS, runners, {"runs": []})


def write_reports(args, results):
    write_reports_and_docs(args, results, write_plots, markdown_section,
                           (SECTION_BEGIN, SECTION_END),
                           plot_errors=(RuntimeError, OSError, ValueError))


def main(argv):
    args = parse_args(argv)
    if args.from_json:
        return report_from_json(args, console_table, write_reports,
                                lambda res: res.update(ratios=compute_ratios(res)))
    interrupt_on_sigterm()
    work = pg_workdir(args.workdir, "strata-qc-")
    results = new_results("quorum_commit", args, argv, work, {
        "duration_s": args.duration, "scale": args.scale, "clients": args.clients,
        "setups": args.setups, "shared_buffers_stock": args.shared_buffers}, physical={})
    if results["machine"]["loadavg_start"] and \
            float(results["machine"]["loadavg_start"].split()[0]) > 0.5:
        log(f"warning: the machine is busy (load average {results['machine']['loadavg_start']}); "
            "numbers will be disturbed")
    interrupted = run_timed(lambda: run_all(args, work, results), args, work, results)
    results["ratios"] = compute_ratios(results)
    print_table(console_table(results))
    if interrupted:
        return 130
    write_reports(args, results)
    ok = all(s["status"] == "ok" and all("error" not in r for r in s["runs"])
             for s in results["setups"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
