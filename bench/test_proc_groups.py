"""Tests of bench/proc_groups.py and the GetPage arithmetic of bench_strata.py
(python3 -m pytest -q bench/test_proc_groups.py).

- process titles and pageserver thread names go to the right group;
- a real window over a child process that burns CPU attributes that CPU to
  the client, and a thread born inside the window counts from zero;
- the per-unit table: derived rows, the ratio to (a), "-" where a setup has
  no such group;
- percentiles from the GetPage wait histogram, interpolated in a bucket.
"""

import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
import proc_groups as pg  # noqa: E402
from bench_strata import (WAIT_BUCKET_NAMES, getpage_rows, getpage_summary,  # noqa: E402
                          wait_percentile)


def test_postgres_titles():
    cases = {
        "postgres: postgres tpcc 127.0.0.1(43210) SELECT": "backends",
        "postgres: tpcc tpcc 127.0.0.1(5) idle in transaction": "backends",
        "postgres: checkpointer": "aux",
        "postgres: background writer": "aux",
        "postgres: walwriter": "aux",
        "postgres: walsender postgres 127.0.0.1(1) streaming 0/3000000": "walsender",
        "postgres: strata walproposer": "walproposer",
        "postgres: autovacuum launcher": "pg_other",
        "postgres: autovacuum worker tpcc": "pg_other",
        "postgres: logical replication launcher": "pg_other",
        "postgres: parallel worker for PID 77": "backends",
        "/usr/lib/postgresql/15/bin/postgres -D /tmp/x": "pg_other",
    }
    for title, group in cases.items():
        assert pg.postgres_group(title) == group, title


def test_pageserver_threads():
    assert pg.pageserver_thread_group(10, 10, "strata-pageserv") == "ps_getpage"
    assert pg.pageserver_thread_group(10, 11, "ps-worker-3") == "ps_getpage"
    assert pg.pageserver_thread_group(10, 12, "ps-ingest") == "ps_ingest"
    assert pg.pageserver_thread_group(10, 13, "ps-imagegen-0") == "ps_imagegen"
    assert pg.pageserver_thread_group(10, 14, "ps-flush") == "ps_flush"
    assert pg.pageserver_thread_group(10, 15, "ps-upload") == "ps_other"


def test_window_counts_a_child_born_inside_it():
    # A child that spins for about 0.4 s of CPU, started after begin():
    # its CPU is the client's (a live child counts by its threads, a reaped
    # one through cutime).
    win = pg.CpuWindow(lambda: [(os.getpid(), "client")])
    win.begin()
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"
    subprocess.run([sys.executable, "-c", spin], check=True, timeout=60)
    res = win.end()
    assert res["groups_s"]["client"] >= 0.3, res
    assert res["machine_busy_s"] >= res["groups_s"]["client"] - 0.05, res
    assert res["machine_s"] > 0 and res["window_s"] > 0


def test_window_counts_a_live_child_and_its_threads():
    spin = ("import threading, time\n"
            "def burn():\n    t = time.process_time()\n"
            "    while time.process_time() - t < 5: pass\n"
            "threading.Thread(target=burn, daemon=True).start()\n"
            "time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", spin])  # pylint: disable=consider-using-with
    try:
        win = pg.CpuWindow(lambda: [(child.pid, "safekeeper"), (os.getpid(), "client")])
        win.begin()
        time.sleep(0.6)
        res = win.end()
    finally:
        child.kill()
        child.wait(10)
    # The spinning thread of the "safekeeper" counts there, not as client.
    assert res["groups_s"].get("safekeepers", 0) > 0.1, res
    assert res["groups_s"].get("client", 0) < res["groups_s"]["safekeepers"], res


def test_window_keeps_the_cpu_of_a_process_that_exits_inside_it():
    # A "safekeeper" that spins for about 1.2 s of CPU and exits before the
    # window ends: the samples taken in between keep most of it (with only
    # begin() and end() it would count nothing).
    spin = ("import time\ntime.sleep(0.2)\nt = time.process_time()\n"
            "while time.process_time() - t < 1.2: pass\n")
    child = subprocess.Popen([sys.executable, "-c", spin])  # pylint: disable=consider-using-with
    try:
        win = pg.CpuWindow(lambda: [(child.pid, "safekeeper")], interval=0.2)
        win.begin()
        child.wait(60)
        time.sleep(0.3)
        res = win.end()
    finally:
        child.kill()
        child.wait(10)
    assert res["threads_gone"] >= 1, res
    assert res["groups_s"].get("safekeepers", 0) >= 0.7, res


def _cpu(groups, busy, irq=None, steal=None):
    out = {"window_s": 10, "groups_s": groups, "machine_busy_s": busy, "machine_s": 20}
    if irq is not None:
        out.update(machine_irq_s=irq, machine_steal_s=steal)
    return out


def test_cpu_table_per_unit_and_ratio():
    a = _cpu({"backends": 0.5, "aux": 0.1, "client": 0.2}, 1.0)
    c = _cpu({"backends": 0.3, "aux": 0.0, "walproposer": 0.1, "safekeepers": 0.4,
              "ps_ingest": 0.05}, 1.2)
    header, rows = pg.cpu_table([("a", "(a)", a, 1000), ("c", "(c)", c, 1000)])
    assert header == ["group", "(a)", "(c)"]
    by = {r[0]: r[1:] for r in rows}
    # 0.5 s over 1000 units = 500 us per unit (= ms per 1,000).
    assert by["backends (client backends)"] == ["500", "300"]
    assert by["walproposer"] == ["-", "100"]
    assert by["safekeepers (all threads)"] == ["-", "400"]
    own = by["own: backends+aux (+walproposer+walsender)"]
    assert own == ["600", "400"]
    assert by["own / (a)'s own (issue 14: compute <= 0.80)"] == ["1.00", "0.67"]
    assert by["machine busy - all groups"] == ["200", "350"]
    assert "standbys (whole trees)" not in by  # no setup had one
    assert not any(k.startswith("stolen") for k in by)  # results from before steal was kept
    assert pg.per_unit(a, 0) is None
    # Steal and interrupt time, where the window measured them.
    c2 = _cpu({"backends": 0.3}, 1.2, irq=0.25, steal=0.5)
    _header, rows = pg.cpu_table([("a", "(a)", a, 1000), ("c", "(c)", c2, 1000)])
    by = {r[0]: r[1:] for r in rows}
    assert by["interrupt time (irq + softirq), part of busy"] == ["-", "250"]
    assert by["stolen by the hypervisor (steal, not in busy)"] == ["-", "500"]


def test_machine_ticks_leave_steal_out_of_busy():
    busy, total, steal, irq = pg.machine_busy_ticks()
    with open("/proc/stat", encoding="utf-8") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    # Read a moment apart: equal within what the CPUs did in between.
    assert abs(total - sum(fields)) < 1000
    assert abs(steal - fields[7]) < 1000 and abs(irq - fields[5] - fields[6]) < 1000
    assert abs(busy - (sum(fields) - fields[3] - fields[4] - fields[7])) < 1000
    assert busy <= total - steal


def test_wait_percentiles_interpolate_in_the_bucket():
    hist = [0] * len(WAIT_BUCKET_NAMES)
    assert wait_percentile(hist, 50) is None
    hist[0] = 50   # under 16 us
    hist[3] = 50   # [64, 128) us
    assert wait_percentile(hist, 50) == pytest.approx(16.0)
    assert wait_percentile(hist, 75) == pytest.approx(96.0)
    hist[-1] = 100  # a second and more: its lower bound
    assert wait_percentile(hist, 99) == float(1 << 20)
    delta = {"getpage": 300, "getpage_wait_count": 200, "getpage_wait_us": 20000,
             "prefetch_hit": 50, "prefetch_sent": 60, "file_cache_hit": 10}
    delta.update(dict(zip(WAIT_BUCKET_NAMES, hist)))
    s = getpage_summary(delta, 100)
    assert s["getpage_per_unit"] == 3.0 and s["waits_per_unit"] == 2.0
    assert s["prefetch_hit_rate"] == 0.25 and s["wait_mean_us"] == 100.0
    assert s["hist_sum"] == 200 and s["wait_p50_us"] <= s["wait_p99_us"]
    header, rows = getpage_rows([("(c)", s), ("(a)", None)], "txn")
    assert header == ["compute side", "(c)"] and rows[2][1] == "25.0%"
    assert getpage_summary({}, 100) is None
