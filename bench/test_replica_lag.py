"""Tests of bench/replica_lag.py (python3 -m pytest -q bench/test_replica_lag.py).

The docs section on hand-made results (a failed run says so), and one real
--quick run that checks the figures it wrote and that nothing it started is
left running.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
import replica_lag  # noqa: E402
from bench_proc import pids_mentioning  # noqa: E402
from bench_testlib import (check_section_replaced_once, need_strata_build,  # noqa: E402
                           needs_stock_pg15, quick_run)  # noqa: E402


def _results(run, status="ok"):
    return {"date": "today", "quick": False, "status": status,
            "reason": "" if status == "ok" else "strata up failed", "run": run,
            "params": {"scale": 10, "duration_s": 120, "clients": 8, "interval_s": 0.5},
            "machine": {"nproc": 2, "cpu_model": "x", "mem_total": "1 GiB",
                        "filesystem": "ext4", "loadavg_start": "0", "loadavg_end": "0"}}


def _run(tps):
    s = {"p50": 1024, "p95": 4096, "max": 8192, "n": 10}
    return {"tps": tps, "txns": 100, "start_s": 1.5, "catch_up_s": 0.2, "samples": 10,
            "sk_lag_bytes": s, "distance_bytes": s,
            "age_s": {"p50": 0.1, "p95": 0.5, "max": 1.0, "n": 10}}


def test_section_and_failure():
    md = replica_lag.section(_results(_run(100)), None)
    assert "| committed WAL not replayed (safekeepers' series) | 1 kB | 4 kB | 8 kB |" in md
    assert "0.50 s" in md
    failed = replica_lag.section(_results(None, "failed"), None)
    assert "*failed: strata up failed*" in failed
    newer = replica_lag.section(_results(_run(200)), None)
    check_section_replaced_once(md, newer, replica_lag.SECTION_BEGIN, replica_lag.SECTION_END)


@needs_stock_pg15("pgbench")
def test_quick_run(tmp_path):
    build = need_strata_build()
    out = tmp_path / "out"
    with quick_run("replica_lag", ["--duration", "4", "--strata-build", build], out,
                   timeout=600) as (_cp, work, res):
        r = res["run"]
        assert res["status"] == "ok" and r["txns"] > 0, res
        assert 0 < r["start_s"] < 60 and r["catch_up_s"] >= 0
        assert r["samples"] > 0 and r["sk_lag_bytes"]["n"] > 0, r
        assert r["sk_lag_bytes"]["max"] >= r["sk_lag_bytes"]["p50"] >= 0
        assert (out / "results.md").exists()
        assert pids_mentioning(work) == []
