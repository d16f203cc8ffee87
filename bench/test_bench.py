"""Tests of the benchmark programs' own logic, and one real quick run of quorum_commit.

For: the parsers (pgbench logs, pg_test_fsync output, connection strings),
the statistics, the target verdicts and the docs-section replacement, on
real captured output (bench/testdata/, captured on the dev machine); and an
end-to-end quick run of setup (a) that checks the JSON it writes and that no
server it started is left running.

Not for: judging performance.  Run: python3 -m pytest -q bench/
"""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
from bench_physical import measure_fdatasync_cpu, measure_loopback_rtt, parse_pg_test_fsync
from bench_proc import BenchError, pids_mentioning
from bench_report import (SECTION_BEGIN, SECTION_END, busy_load, compute_ratios, markdown_section,
                          replace_doc_section)
from bench_stats import Txn, parse_log_lines, percentile, summarize, tps_over_time
from bench_strata import parse_connstr
from bench_testlib import check_section_replaced_once, needs_stock_pg15, quick_run


def read_testdata(name):
    with open(os.path.join(HERE, "testdata", name), encoding="utf-8") as f:
        return f.read()


def test_pgbench_log_real_capture():
    txns, failed = parse_log_lines(read_testdata("pgbench_log_c16_thread1.txt").splitlines())
    assert failed == 0
    assert len(txns) == 200
    s = summarize(txns)
    # Nearest-rank values computed independently with sort(1) on the file.
    assert s["lat_ms"]["p50"] == pytest.approx(4.299)
    assert s["lat_ms"]["p99"] == pytest.approx(13.706)
    assert s["lat_ms"]["mean"] == pytest.approx(978691 / 200 / 1000, abs=1e-3)


def test_pgbench_log_failed_and_garbage():
    txns, failed = parse_log_lines(["0 1 1500 0 100 0", "0 2 failed 0 100 500000", ""])
    assert failed == 1 and len(txns) == 1 and txns[0].latency_us == 1500
    with pytest.raises(ValueError):
        parse_log_lines(["0 1 1500 0"])
    with pytest.raises(ValueError):
        parse_log_lines(["0 1 abc 0 100 0"])


def test_percentile_nearest_rank():
    vals = list(range(1, 101))
    assert percentile(vals, 50) == 50
    assert percentile(vals, 99) == 99
    assert percentile(vals, 100) == 100
    assert percentile([7], 99.9) == 7


def test_summarize_tps_uses_logged_span():
    # 10 transactions of 100 ms back to back from t=1000.0: span 1.0 s.
    txns = [Txn(1000.0 + 0.1 * (i + 1), 100000) for i in range(10)]
    s = summarize(txns)
    assert s["span_s"] == pytest.approx(1.0)
    assert s["tps"] == pytest.approx(10.0)
    assert summarize([])["tps"] == 0.0


def test_tps_over_time_drops_partial_last_second():
    # Starts at t=0 (first txn 0.01 s long), 5 per second for 2.5 s.
    txns = [Txn(0.01 + 0.2 * i, 10000) for i in range(13)]
    series = tps_over_time(txns)
    assert [s for s, _ in series] == [0, 1]
    assert [c for _, c in series] == [5, 5]


def test_pg_test_fsync_real_capture():
    r = parse_pg_test_fsync(read_testdata("pg_test_fsync.txt"))
    assert r["usec_per_op"] == 190
    assert r["ops_per_sec"] == pytest.approx(5251.197)
    assert r["line"].startswith("fdatasync")
    with pytest.raises(ValueError):
        parse_pg_test_fsync("1 second per test\n")


def test_parse_connstr():
    assert parse_connstr("host=127.0.0.1 port=55432 user=postgres dbname=postgres") == \
        {"host": "127.0.0.1", "port": "55432", "user": "postgres", "dbname": "postgres"}
    assert parse_connstr("port=1 user=u")["dbname"] == "postgres"
    with pytest.raises(BenchError):
        parse_connstr("host=127.0.0.1 dbname=x")


def _results(b_p50, c_p50, b_tps, c_tps):
    def setup(key, p50, tps):
        return {"key": key, "title": key, "description": key, "status": "ok", "reason": "",
                "settings": {"fsync": "on"},
                "runs": [{"clients": 1, "threads": 1, "txns": 10, "failed": 0, "tps": 1.0,
                          "lat_ms": {"p50": p50, "p90": p50, "p99": p50, "p99.9": p50,
                                     "max": p50, "mean": p50}},
                         {"clients": 16, "threads": 2, "txns": 10, "failed": 0, "tps": tps,
                          "lat_ms": {"p50": 1, "p90": 1, "p99": 1, "p99.9": 1, "max": 1,
                                     "mean": 1}}]}
    setups = [setup("b", b_p50, b_tps)]
    if c_p50 is not None:
        setups.append(setup("c", c_p50, c_tps))
    return {"setups": setups}


def test_busy_banner_reads_the_load_before_the_run_only():
    # The load at the end is the benchmark's own: it must not call the
    # machine busy.
    m = {"nproc": 2, "loadavg_start": "0.09 3.01 4.87", "loadavg_end": "9.54 7.51 6.23"}
    assert busy_load(m) is None
    assert busy_load(dict(m, loadavg_start="5.20 4.00 3.00")) == 5.2
    assert busy_load(dict(m, loadavg_start=None)) is None


def test_ratios_verdicts():
    met = {r["name"]: r for r in compute_ratios(_results(2.0, 2.5, 1000, 1000))}
    assert met["(c) p50 at -c1 / (b) p50 at -c1"]["value"] == pytest.approx(1.25)
    assert met["(c) p50 at -c1 / (b) p50 at -c1"]["met"] is True
    assert met["(c) TPS at -c16 / (b) TPS at -c16"]["met"] is True
    unmet = {r["name"]: r for r in compute_ratios(_results(2.0, 2.7, 1000, 999))}
    assert unmet["(c) p50 at -c1 / (b) p50 at -c1"]["met"] is False
    assert unmet["(c) TPS at -c16 / (b) TPS at -c16"]["met"] is False
    missing = {r["name"]: r for r in compute_ratios(_results(2.0, None, 1000, None))}
    assert missing["(c) p50 at -c1 / (b) p50 at -c1"]["value"] is None
    assert missing["(c) p50 at -c1 / (b) p50 at -c1"]["met"] is None


def test_markdown_says_not_met():
    res = _results(2.0, 2.7, 1000, 999)
    res.update({"quick": False, "date": "d", "params": {"argv": [], "duration_s": 30,
                                                         "scale": 10, "clients": [1, 16]},
                "machine": {"nproc": 2, "cpu_model": "x", "mem_total": "1 GiB",
                            "filesystem": "ext4", "kernel": "k", "loadavg_start": "0.0 0 0"},
                "physical": {"fdatasync": {"error": "e"}, "loopback_rtt": {"error": "e"}}})
    res["ratios"] = compute_ratios(res)
    md = markdown_section(res, None)
    assert "NOT MET" in md and "not measured: e" in md
    assert md.startswith(SECTION_BEGIN) and md.rstrip().endswith(SECTION_END)


def test_replace_doc_section():
    check_section_replaced_once(f"{SECTION_BEGIN}\none\n{SECTION_END}\n",
                                f"{SECTION_BEGIN}\ntwo\n{SECTION_END}\n", SECTION_BEGIN,
                                SECTION_END, replace=replace_doc_section)


def test_loopback_rtt_is_measured():
    r = measure_loopback_rtt(round_trips=300, warmup=20)
    assert 0 < r["p50_us"] <= r["p99_us"]
    assert r["round_trips"] == 300
    assert r["cpu_us"] > 0


def test_fdatasync_cpu_is_measured_and_leaves_nothing(tmp_path):
    r = measure_fdatasync_cpu(str(tmp_path), ops=50)
    assert r["ops"] == 50 and r["block_bytes"] == 8192
    # A system call is never free, and a thread cannot spend more CPU than
    # the time that passed.
    assert 0 < r["cpu_us_per_op"] <= r["wall_us_per_op"]
    assert os.listdir(tmp_path) == []


@needs_stock_pg15("pgbench")
def test_quick_run_of_setup_a(tmp_path):
    out = tmp_path / "out"
    with quick_run("quorum_commit", ["--setups", "a", "--duration", "2", "--fsync-seconds", "1"],
                   out, timeout=300) as (_cp, work, res):
        _check_quick_run_of_setup_a(work, out, res)


def _check_quick_run_of_setup_a(work, out, res):
    (setup,) = res["setups"]
    assert setup["status"] == "ok"
    assert [r["clients"] for r in setup["runs"]] == [1, 16]
    for r in setup["runs"]:
        assert r["txns"] > 0 and r["tps"] > 0
        assert 0 < r["lat_ms"]["p50"] <= r["lat_ms"]["p99"] <= r["lat_ms"]["max"]
        # Our TPS (from the log) and pgbench's own agree within 20%.
        assert abs(r["tps"] - r["pgbench_tps"]) / r["pgbench_tps"] < 0.2
    assert setup["settings"]["fsync"] == "on"
    assert setup["settings"]["full_page_writes"] == "on"
    assert res["physical"]["fdatasync"]["usec_per_op"] > 0
    assert res["physical"]["fdatasync_cpu"]["cpu_us_per_op"] > 0
    assert "CPU of one 8 kB write + fdatasync" in (out / "results.md").read_text()
    assert pids_mentioning(work) == []
    assert os.listdir(work) == []  # the temporary data directory was removed


def test_unfair_settings_flags_only_differences_that_matter():
    from bench_report import unfair_settings
    res = {"setups": [
        {"key": "a", "settings": {"fsync": "on", "shared_buffers": "128MB",
                                  "max_wal_size": "1GB"}},
        {"key": "c", "settings": {"fsync": "off", "shared_buffers": "128MB",
                                  "max_wal_size": "4GB"}},
        {"key": "b", "settings": {}},  # did not run
    ]}
    assert unfair_settings(res) == ["max_wal_size: (a) 1GB, (c) 4GB"]


def test_sanity_warning_when_commit_beats_fdatasync():
    from bench_report import sanity_warnings
    res = _results(b_p50=0.5, c_p50=3.0, b_tps=1, c_tps=1)  # (b) 500 us, (c) 3000 us
    res["params"] = {"clients": [1, 16]}
    res["physical"] = {"fdatasync": {"usec_per_op": 2000}}
    (w,) = sanity_warnings(res)
    assert w.startswith("b: p50 at -c1 (500 us)")
    res["physical"] = {"fdatasync": {"error": "not measured"}}
    assert sanity_warnings(res) == []


def test_prometheus_counter():
    from bench_strata import prometheus_counter
    text = ("# HELP safekeeper_fdatasync_total WAL fdatasync calls\n"
            "# TYPE safekeeper_fdatasync_total counter\n"
            "safekeeper_fdatasync_total 42\n"
            "safekeeper_fdatasync_total_extra 7\n"
            "safekeeper_fdatasync_seconds_sum 0.5\n"
            'other{tl="x"} 3\n')
    assert prometheus_counter(text, "safekeeper_fdatasync_total") == 42
    assert prometheus_counter('x{a="1"} 2\nx{a="2"} 3\n', "x") == 5
    assert prometheus_counter(text, "missing_total") is None
    staged = 's_sum{stage="park",x="1"} 1.5\ns_sum{stage="read"} 2\ns_sum{stage="reader"} 7\n'
    assert prometheus_counter(staged, "s_sum", {"stage": "read"}) == 2
    assert prometheus_counter(staged, "s_sum", {"stage": "park", "x": "1"}) == 1.5
    assert prometheus_counter(staged, "s_sum", {"stage": "none"}) is None


def test_strata_down_kills_what_status_reported_when_up_failed(tmp_path):
    """A `strata` whose up fails and whose down leaves a process behind: the
    benchmark must still stop that process, found through status --json."""
    from bench_strata import StrataCluster
    victim = subprocess.Popen(["sleep", "120"])
    try:
        (tmp_path / "bin").mkdir()
        (tmp_path / "lib").mkdir()
        (tmp_path / "lib" / "strata.so").write_text("")
        cli = tmp_path / "bin" / "strata"
        cli.write_text("#!/bin/sh\n"
                       "case \"$1\" in\n"
                       "  up) echo 'strata: safekeeper sk2 did not start' >&2; exit 1;;\n"
                       "  status) echo '{\"compute\": {\"pid\": %d, \"port\": 1}, "
                       "\"pageserver\": {\"pid\": null}, \"safekeepers\": []}';;\n"
                       "  down) exit 0;;\n"
                       "esac\n" % victim.pid)
        cli.chmod(0o755)
        cluster = StrataCluster(str(tmp_path), str(tmp_path / "cluster"))
        assert cluster.missing() is None
        with pytest.raises(BenchError, match="did not start"):
            cluster.up()
        cluster.down()
        assert victim.wait(timeout=15) != 0  # killed by a signal, not finished
    finally:
        victim.kill()
        victim.wait()


def test_strata_missing_build_is_reported(tmp_path):
    from bench_strata import StrataCluster
    reason = StrataCluster(str(tmp_path), str(tmp_path / "c")).missing()
    assert reason is not None and "bin/strata" in reason
