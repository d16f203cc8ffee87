"""Tests of bench/stateless_tpcb.py (python3 -m pytest -q bench/test_stateless_tpcb.py).

The verdicts and the docs section on hand-made results (a target that is
missed must say so; a setup that did not run must say NOT MEASURED), and one
real --quick run of a stock setup (a) and a Strata setup (c) that checks
the figures it wrote and that nothing it started is left running; --perf's
attribution on canned `perf script` lines and in one real run of (c).
"""

import json
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
import bench_perf  # noqa: E402
import stateless_tpcb as tpcb  # noqa: E402
from bench_proc import pids_mentioning  # noqa: E402
from bench_testlib import (check_probe, check_section_replaced_once,  # noqa: E402
                           need_strata_build, needs_stock_pg15, quick_run)


def _setup(key, tps, wal, starts=None, status="ok"):
    return {"key": key, "title": tpcb.SETUPS[key][0], "description": "", "status": status,
            "reason": "" if status == "ok" else "no build", "settings": {},
            "run": None if status != "ok" else {
                "tps": tps, "txns": 100, "failed": 0, "wal_bytes_per_txn": wal,
                "lat_ms": {"p50": 1.0, "p99": 2.0}, "tps_series": [(0, tps)],
                "latency_curve": [(0.301, 50, 1.0)]},
            "start_s": starts}


def _results(setups):
    return {"date": "today", "quick": False, "setups": setups,
            "params": {"argv": [], "scale": 50, "clients": 16, "duration_s": 300},
            "machine": {"nproc": 2, "cpu_model": "x", "mem_total": "1 GiB",
                        "filesystem": "ext4", "loadavg_start": "0", "loadavg_end": "0"}}


def test_targets_met_and_missed():
    res = _results([_setup("a", 100, 10000), _setup("b", 50, 12000),
                    _setup("c", 60, 900, [0.5, 0.7]), _setup("d", 40, 9000, [2.5])])
    t = {x["name"]: x for x in tpcb.targets(res)}
    assert t["WAL/txn (c) / (a)"]["met"] is True and t["WAL/txn (c) / (a)"]["value"] == "0.090"
    assert t["TPS (c) / (b)"]["met"] is True
    # The worst start of (c) and (d) counts: 2.5 s misses the 2 s target.
    start = t["strata start compute -> first query (worst)"]
    assert start["met"] is False and start["value"] == "2.50 s"
    res = _results([_setup("a", 100, 10000), _setup("b", 50, 12000),
                    _setup("c", 40, 1100, [0.5])])
    t = {x["name"]: x for x in tpcb.targets(res)}
    assert t["WAL/txn (c) / (a)"]["met"] is False
    assert t["TPS (c) / (b)"]["met"] is False
    assert "NOT met" in tpcb.console_table(res)
    # (e), the cache off, is reported beside (b) as information, not a target.
    res["setups"].append(_setup("e", 25, 1100, [0.4]))
    t = {x["name"]: x for x in tpcb.targets(res)}
    info = [x for x in t.values() if x["name"].startswith("TPS (e) / (b)")]
    assert len(info) == 1 and info[0]["value"] == "0.500" and info[0]["met"] is None
    assert "(info)" in tpcb.console_table(res)


def test_not_measured_is_said():
    res = _results([_setup("a", 100, 10000), _setup("c", 0, 0, status="skipped")])
    assert all(x["met"] is None for x in tpcb.targets(res))
    md = tpcb.markdown_section(res, None)
    assert md.count("NOT MEASURED") == 3
    assert "skipped: no build" in md


def test_docs_section_replaced_once():
    md = tpcb.markdown_section(_results([_setup("a", 100, 10000)]), None)
    newer = tpcb.markdown_section(_results([_setup("a", 120, 10000)]), None)
    check_section_replaced_once(md, newer, tpcb.SECTION_BEGIN, tpcb.SECTION_END)


@needs_stock_pg15("pgbench")
def test_quick_run_of_a_and_c(tmp_path):
    build = need_strata_build()
    out = tmp_path / "out"
    with quick_run("stateless_tpcb",
                   ["--setups", "a,c", "--duration", "3", "--strata-build", build], out,
                   timeout=600) as (cp, work, res):
        a, c = res["setups"]
        for s in (a, c):
            assert s["status"] == "ok", s
            r = s["run"]
            assert r["txns"] > 0 and r["failed"] == 0 and r["tps"] > 0
            assert 0 < r["lat_ms"]["p50"] <= r["lat_ms"]["p99"] <= r["lat_ms"]["max"]
            assert abs(r["tps"] - r["pgbench_tps"]) / r["pgbench_tps"] < 0.25
            # A TPC-B transaction writes WAL: update three rows, insert one.
            assert r["wal_bytes_per_txn"] > 100
        assert a["settings"]["full_page_writes"] == "on"
        assert c["settings"]["full_page_writes"] == "off"
        assert c["settings"]["strata.pageserver"]
        assert len(c["start_s"]) == 1 and 0 < c["start_s"][0] < 60
        assert a["start_s"] is None
        assert len(res["targets"]) == 3
        # Where the CPU went: the groups that must have worked did.  The
        # compute's buffers and file cache hold a scale-1 database, so the
        # window may well send no GetPage: only the counters' consistency.
        check_probe(a, strata=False)
        check_probe(c, strata=True, need_getpage=False)
        assert "CPU per transaction (µs), per process group" in cp.stdout
        assert "GetPage from the compute's side (per txn)" in cp.stdout
        md = (out / "results.md").read_text()
        assert "| safekeepers (all threads) |" in md and "own / (a)'s own" in md
        assert pids_mentioning(work) == []
        assert os.listdir(work) == []


def test_merge_replaces_setups_of_the_same_letter(tmp_path):
    old = _results([_setup("a", 100, 10000), _setup("c", 0, 0, status="failed")])
    old["date"] = "earlier"
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    new = _results([_setup("c", 60, 900, [0.5])])
    new["date"] = "now"
    merged = tpcb.merge_results(str(path), new)
    assert [s["key"] for s in merged["setups"]] == ["a", "c"]
    a, c = merged["setups"]
    assert a["date"] == "earlier" and a["run"]["tps"] == 100
    assert c["status"] == "ok" and c["run"]["tps"] == 60
    new["params"]["scale"] = 1
    with pytest.raises(SystemExit):
        tpcb.merge_results(str(path), new)


def test_perf_samples_go_to_the_groups_of_their_threads():
    text = ("  101/101  55d0c3a1b2c0 hash_search_with_hash_value (/usr/lib/pg/bin/postgres)\n"
            "  101/101  ffffffff815d3b1b tcp_sendmsg ([kernel.kallsyms])\n"
            "  202/202  7f00aa [unknown] (/memfd:sealed-1 (deleted))\n"
            "    0/0    ffffffff822613eb pv_native_safe_halt ([kernel.kallsyms])\n"
            "  303/303  7f00bb fsync_round (/build/bin/strata-safekeeper)\n"
            "  303/309  ffffffff81000000 iowrite16 ([kernel.kallsyms])\n"
            "not a sample line\n")
    samples = bench_perf.parse_script(text)
    assert samples[0] == (101, 101, "hash_search_with_hash_value", "postgres")
    assert samples[2] == (202, 202, "[unknown]", "memfd:sealed-1 (deleted)")
    got = bench_perf.attribute(samples, {101: "backends", 303: "safekeepers"}, 499)
    g = got["groups"]
    assert got["samples"] == 6 and sum(x["samples"] for x in g.values()) == 6
    assert g["backends"]["samples"] == 2 and g["backends"]["kernel_pct"] == 50.0
    # Thread 309, unknown, belongs to process 303: the safekeepers'.
    assert g["safekeepers"]["samples"] == 2 and g["safekeepers"]["kernel_pct"] == 50.0
    assert g["other"]["samples"] == 1 and g["idle"]["samples"] == 1
    header, rows = bench_perf.perf_table([("(c) Strata", got)])
    assert header[1] == "group" and rows[0][1] in ("backends", "safekeepers")
    assert rows[0][2] == "33.3"


@needs_stock_pg15("pgbench")
def test_quick_perf_profile_of_c(tmp_path):
    why = bench_perf.available()
    if why:
        pytest.skip(why)
    build = need_strata_build()
    out = tmp_path / "out"
    options = ["--setups", "c", "--duration", "3", "--perf", "--strata-build", build]
    with quick_run("stateless_tpcb", options, out, timeout=600) as (cp, work, res):
        (c,) = res["setups"]
        assert c["status"] == "ok", c
        perf = c["run"]["probe"]["perf"]
        groups = perf["groups"]
        assert perf["samples"] == sum(g["samples"] for g in groups.values()) > 0
        # The threads that carry every commit were sampled, each in its group.
        for group in ("backends", "safekeepers", "walproposer"):
            assert groups.get(group, {}).get("samples", 0) > 0, (group, sorted(groups))
        assert all(g["top"] and 0 <= g["kernel_pct"] <= 100 for g in groups.values())
        assert "Where the samples went (perf), measured window:" in cp.stdout
        assert (out / "perf-c.data").stat().st_size > 0
        assert pids_mentioning(work) == []
    assert pids_mentioning(str(out)) == [], "perf record still runs"
