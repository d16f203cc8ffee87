"""Tests of bench/constrained.py (python3 -m pytest -q bench/test_constrained.py).

The verdicts and the docs section on hand-made results (a missed target says
so, a setup that did not run says NOT MEASURED), and one real --quick run of
all five setups at tiny sizes that checks every setup ran, the (n) and (c)
groups' IO went through the blkio throttle, the memory groups' peak stayed
under their limit, the tables were printed, and nothing it started is left
running nor any cgroup it created left behind.
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
import constrained  # noqa: E402
from bench_cgroup import CGROUP_ROOT  # noqa: E402
from bench_proc import pids_mentioning  # noqa: E402
from bench_testlib import (check_section_replaced_once, need_strata_build,  # noqa: E402
                           needs_stock_pg15, quick_run)


def _setup(key, tps, nopm=None, status="ok"):
    return {"key": key, "title": constrained.SETUPS[key][0], "description": "",
            "status": status, "reason": "" if status == "ok" else "no build", "settings": {},
            "pgbench": None if status != "ok" else {
                "tps": tps, "txns": 100, "failed": 0, "lat_ms": {"p50": 1.0, "p99": 2.0},
                "tps_series": [(0, tps)]},
            "tprocc": None if nopm is None else {"nopm": nopm, "tpm": 2 * nopm, "per_type": {},
                                                 "checks": []},
            "cgroup": None, "smgr": None}


def _results(setups):
    return {"date": "today", "quick": False, "setups": setups,
            "params": {"argv": [], "scale": 50, "clients": 16, "duration_s": 60, "iops": 3000,
                       "mbps": 125, "warehouses": 4, "scale_down": 10, "vus": 8, "rampup_s": 15,
                       "memory_limit_mb": 512, "file_cache_mb": 128, "mem_scale": 100,
                       "shared_buffers": "128MB"},
            "machine": {"nproc": 2, "cpu_model": "x", "mem_total": "1 GiB",
                        "filesystem": "ext4", "loadavg_start": "0", "loadavg_end": "0"}}


def test_targets_met_and_missed():
    res = _results([_setup("net-a", 100, 1000), _setup("net-n", 20, 300),
                    _setup("net-c", 70, 600), _setup("mem-a", 50), _setup("mem-c", 40)])
    t = {x["name"]: x for x in constrained.targets(res)}
    assert t["network: TPC-B TPS (c) / (n)"]["met"] is True
    assert t["network: TPC-B TPS (c) / (n)"]["value"] == "3.500"
    assert t["network: TPROC-C NOPM (c) / (n)"]["met"] is False
    assert t["network: TPC-B TPS (c) / (a)"]["info"] is True
    assert t["memory: TPC-B TPS (c) / (a)"]["met"] is False
    text = constrained.console_table(res)
    assert "NOT met" in text and "network disk:" in text and "larger than memory:" in text
    # A throttle the workload never reached is called out; one it hit is not.
    io = {"read_ios": 0, "write_ios": 100, "read_bytes": 0, "write_bytes": 10 ** 6,
          "iops": 1200.0, "mb_per_s": 14.0, "limits": {}, "seconds": 60.0, "device": "1:0"}
    res["setups"][1]["pgbench"]["io"] = io
    res["setups"][2]["pgbench"]["io"] = dict(io, iops=2990.0)
    notes = constrained.throttle_notes(res)
    assert len(notes) == 1 and notes[0].startswith("(n) stock PG 15, throttled disk, TPC-B")
    assert "did not bind" in constrained.markdown_section(res, None)


def test_not_measured_is_said():
    res = _results([_setup("net-a", 100, 1000), _setup("net-c", 0, status="skipped"),
                    _setup("mem-a", 50)])
    assert all(x["met"] is None for x in constrained.targets(res))
    md = constrained.markdown_section(res, None)
    assert md.count("NOT MEASURED") == 3
    assert "skipped: no build" in md


def test_docs_section_replaced_once():
    md = constrained.markdown_section(_results([_setup("net-a", 100, 1000)]), None)
    newer = constrained.markdown_section(_results([_setup("net-a", 120, 1000)]), None)
    check_section_replaced_once(md, newer, constrained.SECTION_BEGIN, constrained.SECTION_END)


def test_bad_options_are_refused():
    with pytest.raises(SystemExit):
        constrained.parse_args(["--modes", "disk"])
    with pytest.raises(SystemExit):
        constrained.parse_args(["--setups", "net-x"])
    args = constrained.parse_args(["--quick", "--setups", "mem-c"])
    assert args.modes == ["memory"] and args.setups == ["mem-c"]


@pytest.mark.skipif(not os.path.exists(os.path.join(CGROUP_ROOT, "blkio", "cgroup.procs"))
                    or not os.path.exists(os.path.join(CGROUP_ROOT, "memory", "cgroup.procs"))
                    or os.geteuid() != 0, reason="needs root and cgroup v1 blkio and memory")
@needs_stock_pg15("pgbench")
def test_quick_run_of_every_setup(tmp_path):
    build = need_strata_build()
    out = tmp_path / "out"
    # 150 IOPS: low enough that (n)'s commits reach it, so the run shows the
    # throttle holding the group to its limit, not only counting its IO.
    with quick_run("constrained", ["--iops", "150", "--strata-build", build], out,
                   timeout=600) as (cp, work, res):
        assert [s["key"] for s in res["setups"]] == list(constrained.SETUPS)
        for s in res["setups"]:
            assert s["status"] == "ok", s
            r = s["pgbench"]
            assert r["txns"] > 0 and r["failed"] == 0 and r["tps"] > 0
        by_key = {s["key"]: s for s in res["setups"]}
        # The stock server on the throttled disk: its WAL flushes went through
        # the throttle layer of its group, with the limits asked for.
        for phase in ("pgbench", "tprocc"):
            io = by_key["net-n"][phase]["io"]
            assert io["read_ios"] + io["write_ios"] > 0, io
            assert io["limits"] == {"read_iops_device": 150, "write_iops_device": 150,
                                    "read_bps_device": 125000000,
                                    "write_bps_device": 125000000}, io
            # Held to the limit (blk-throttle allows a slice's burst: 20% slack).
            for d in ("read", "write"):
                assert io[f"{d}_ios"] / io["seconds"] <= 1.2 * 150, io
        assert by_key["net-c"]["pgbench"]["io"]["limits"]["write_iops_device"] == 150
        assert "io" not in by_key["net-a"]["pgbench"]
        for key in ("net-a", "net-n", "net-c"):
            t = by_key[key]["tprocc"]
            assert t["new_orders"] > 0, (key, t["new_orders"], t["error_messages"])
            assert [c for c in t["checks"] if not c["ok"]] == [], key
        for key in ("mem-a", "mem-c"):
            m = by_key[key]["cgroup"]["memory"]
            assert m["limit_bytes"] == 256 * constrained.MB
            # cgroup v1 charges first and reclaims after: the peak may pass the
            # limit by a few pages (a full run saw 4 and 8 KiB), never by more.
            assert 0 < m["max_usage_bytes"] <= m["limit_bytes"] + 64 * 1024, m
        sm = by_key["mem-c"]["smgr"]
        assert sm["getpage_per_txn"] >= 0 and sm["delta"]["getpage"] >= 0
        assert "network disk:" in cp.stdout and "larger than memory:" in cp.stdout
        assert "target memory: TPC-B TPS (c) / (a)" in cp.stdout
        assert (out / "results.md").exists()
        assert pids_mentioning(work) == []
        assert os.listdir(work) == []
        groups = [p for s in res["setups"] for p in (s["cgroup"] or {}).get("paths", [])]
        assert len(groups) == 4 and all(p.startswith(CGROUP_ROOT) for p in groups)
        assert [p for p in groups if os.path.exists(p)] == []
