"""Tests of bench/pageserver_bench.py: its parsers and statistics on captured output, the
docs-section replacement, the load generator's argument checks, and one real --quick run
(GetPage and ingest steps) that checks what it measured and that nothing it started is
left running.

Run: python3 -m pytest -q bench/test_pageserver_bench.py
(the smoke run needs a release build: STRATA_BUILD, default ./build).
"""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
import pageserver_bench as pb  # noqa: E402
from bench_proc import pids_mentioning  # noqa: E402
from bench_testlib import check_section_replaced_once, quick_run, strata_build  # noqa: E402

LOAD_LINE = ("requests 2000 errors 0 zero_pages 0 seconds 0.166484 pages_per_s 12013.2 "
             "mean_us 83.1 p50_us 74.0 p90_us 101.2 p99_us 170.3 p999_us 225.0 max_us 930.1")

REDO_TEXT = """machine: x86_64, 2 cores, Linux-6.1
helpers threads records   requests/s    records/s    p50_us    p99_us  errors
      1       1       1        16898        16898      28.5     748.7       0
      1       4       1         9511         9511     168.4    5274.5       0
helpers 2 threads 1 records 8: failed: strata-redo-tool: cannot start helper
      2       4       8         1200         9600      45.4    6048.5       3
"""

METRICS = """# HELP pageserver_chain_length Versions replayed
# TYPE pageserver_chain_length histogram
pageserver_chain_length_bucket{le="1"} 10
pageserver_chain_length_bucket{le="+Inf"} 12
pageserver_chain_length_sum 1544
pageserver_chain_length_count 12
pageserver_chain_length_max 128
pageserver_page_cache_hits_total 7
"""


def test_parse_load_output():
    got = pb.parse_load_output("noise\n" + LOAD_LINE + "\n")
    assert got["requests"] == 2000 and isinstance(got["requests"], int)
    assert got["p99_us"] == pytest.approx(170.3)
    assert got["pages_per_s"] == pytest.approx(12013.2)
    with pytest.raises(ValueError):
        pb.parse_load_output("pageserver_getpage_load: connect: refused\n")
    with pytest.raises(ValueError):  # a field renamed
        pb.parse_load_output(LOAD_LINE.replace("p99_us", "p98_us"))


def test_parse_redo_bench():
    rows, failures = pb.parse_redo_bench(REDO_TEXT)
    assert [(r["helpers"], r["threads"], r["records"]) for r in rows] == \
        [(1, 1, 1), (1, 4, 1), (2, 4, 8)]
    assert rows[2]["records_per_s"] == 9600 and rows[2]["errors"] == 3
    assert len(failures) == 1 and "records 8" in failures[0]


def test_histogram_and_counters():
    assert pb.parse_histogram(METRICS, "pageserver_chain_length") == (12, 1544)
    assert pb.parse_histogram(METRICS, "pageserver_nothing") == (None, None)


def test_lsn_round_trip():
    for v in (0, 0x16B3F28, 0x1_0000_00FF):
        assert pb.lsn_int(pb.lsn_text(v)) == v
    assert pb.lsn_int("1/A") == (1 << 32) | 10


def test_latency_curve_percentiles():
    curve = pb.latency_curve_us([i * 1000 for i in range(1, 1001)])  # 1..1000 us
    by_pct = {pct: us for _x, pct, us in curve}
    assert by_pct[50] == 500 and by_pct[99] == 990 and by_pct[99.9] == 999
    xs = [x for x, _p, _u in curve]
    assert xs == sorted(xs)
    assert pb.latency_curve_us([]) == []


def test_targets_verdicts():
    results = {"getpage": [{"case": "image", "depth": 1, "p99_us": 620.0},
                           {"case": "image", "depth": 32, "p99_us": 100.0}],
               "redo": {"rows": [{"helpers": 1, "records": 1, "records_per_s": 25000.0,
                                  "errors": 0},
                                 {"helpers": 1, "records": 1, "records_per_s": 90000.0,
                                  "errors": 5},
                                 {"helpers": 2, "records": 1, "records_per_s": 40000.0,
                                  "errors": 0}]},
               "ingest": {}}
    rows = {r["name"].split(",")[0]: r for r in pb.compute_targets(results)}
    assert rows["GetPage image"]["value"] == 0.62 and rows["GetPage image"]["met"] is False
    assert rows["redo"]["value"] == 25000.0 and rows["redo"]["met"] is True  # errors excluded
    ingest = [r for r in rows.values() if r["name"].startswith("ingest")][0]
    assert ingest["value"] is None and ingest["met"] is None


def test_replace_section_keeps_other_sections():
    check_section_replaced_once(pb.SECTION_BEGIN + "\none\n" + pb.SECTION_END + "\n",
                                pb.SECTION_BEGIN + "\ntwo\n" + pb.SECTION_END + "\n",
                                pb.SECTION_BEGIN, pb.SECTION_END)


def test_load_generator_rejects_bad_arguments(tmp_path):
    exe = pb.compile_load_generator(str(tmp_path))
    for argv in ([], ["--port", "1", "--tenant", "a", "--timeline", "b", "--rel", "1",
                      "--blk-from", "5", "--blk-to", "5", "--lsn", "0/10"],
                 ["--port", "1", "--tenant", "a", "--timeline", "b", "--rel", "1",
                  "--blk-to", "5", "--lsn", "bogus"]):
        cp = subprocess.run([exe] + argv, capture_output=True, text=True, timeout=10)
        assert cp.returncode == 2, argv
    cp = subprocess.run([exe, "--port", "1", "--tenant", "a", "--timeline", "b", "--rel", "1",
                         "--blk-to", "5", "--lsn", "latest"], capture_output=True, text=True,
                        timeout=30)
    assert cp.returncode == 1 and "connect" in cp.stderr  # nothing listens on port 1


BUILD = strata_build()


@pytest.mark.skipif(not os.path.exists(os.path.join(BUILD, "bin", "strata-pageserver")),
                    reason="no release build with strata-pageserver")
def test_quick_run(tmp_path):
    out = str(tmp_path / "out")
    with quick_run("pageserver_bench",
                   ["--steps", "getpage,ingest", "--pages", "10", "--requests", "300",
                    "--pgbench-seconds", "3", "--strata-build", BUILD], out,
                   timeout=300) as (_cp, work, res):
        cases = {(c["case"], c["depth"]): c for c in res["getpage"]}
        assert len(cases) == 10
        for n, case in ((0, "image"), (1, "chain 1"), (16, "chain 16"), (128, "chain 128")):
            for depth in (1, pb.PIPELINE_DEPTH):
                c = cases[(case, depth)]
                assert c["requests"] == 300 and c["errors"] == 0 and c["zero_pages"] == 0
                assert c["chain_mean"] == n  # the pageserver replayed exactly the chain made
                assert 0 < c["p50_us"] <= c["p99_us"] <= c["max_us"]
        hit = cases[("cache hit (chain 128)", 1)]
        assert hit["cache_hits"] == 300 and hit["chain_mean"] == 0
        ing = res["ingest"]
        assert ing["backlog_bytes"] > 0 and ing["ingest_mb_s"] > 0 and ing["ratio"] > 0
        assert ing["store_after"]["data_bytes"] >= ing["store_before"]["data_bytes"]
        with open(os.path.join(out, "results.md"), encoding="utf-8") as f:
            md = f.read()
        assert md.startswith(pb.SECTION_BEGIN) and md.rstrip().endswith(pb.SECTION_END)
        assert "chain 128" in md
        left = pids_mentioning(work)
        assert not left, f"processes still running under {work}: {left}"
