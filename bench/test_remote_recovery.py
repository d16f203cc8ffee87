"""Tests of bench/remote_recovery.py (python3 -m pytest -q bench/test_remote_recovery.py).

The upload figures and the docs section on hand-made samples, and one real
--quick run (pgbench scale 1, 5 s load; file:// store) of both setups: its
tables are well-formed, every figure is there, the recovered database
answered (scale x 100000 accounts, balances equal to the history), and
nothing it started is left running.  No timing is asserted.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
import remote_recovery as rr  # noqa: E402
from bench_proc import pids_mentioning  # noqa: E402
from bench_testlib import (check_section_replaced_once, need_strata_build,  # noqa: E402
                           needs_stock_pg15, quick_run)  # noqa: E402


def test_upload_figures_from_samples():
    mb = rr.MB
    samples = [{"t": t, "uploaded": t * 2 * mb, "disk": int(t * 3 * mb),
                "remote": int(max(0, t - 1) * 3 * mb), "last": 0} for t in range(0, 21)]
    f = rr.upload_figures(samples, 0, 18, 20)
    assert f["uploaded_mb"] == 40 and f["load_s"] == 18 and f["upload_s"] == 20
    assert abs(f["upload_mbps"] - 2) < 1e-9 and abs(f["upload_best5_mbps"] - 2) < 1e-9
    assert f["lag_max_mb"] == 3 and 2.8 < f["lag_mean_mb"] <= 3
    assert f["drain_s"] == 2
    assert rr.lsn_int("1/10") == (1 << 32) + 16


def _results():
    b = {"db_mb": 160.0, "load_s": 50.0, "uploaded_mb": 150.0, "upload_s": 52.0, "replay_mb": 30.0, "upload_mbps": 3.0,
         "upload_best5_mbps": 9.5, "lag_mean_mb": 4.0, "lag_max_mb": 20.0, "drain_s": 2.0,
         "remote_data_mb": 170.0, "remote_wal_mb": 64.0, "remote_manifest_mb": 0.01, "restored_s": 3.0, "first_query_s": 4.0, "caught_up_s": 3.5,
         "scan_s": 2.0, "answers_ok": True, "samples": []}
    return {"date": "today", "quick": False, "elapsed_s": 60,
            "params": {"argv": [], "backend": "file", "clients": 4, "duration": 30,
                       "sample_interval": 0.5, "scales": [10]},
            "machine": {"nproc": 2, "cpu_model": "x", "mem_total": "1 GiB",
                        "filesystem": "ext4", "loadavg_start": "0", "loadavg_end": "0"},
            "scales": [{"scale": 10, "a": {"db_mb": 160.0, "basebackup_s": 1.5,
                                           "basebackup_mb": 180.0}, "b": b},
                       {"scale": 50, "b_error": "strata up failed"}]}


def test_console_and_docs_section():
    res = _results()
    text = rr.console(res)
    assert "FAILED: scale 50 (b): strata up failed" in text
    sec = rr.markdown_section(res, None)
    assert "## Object storage: upload and recovery" in sec
    assert "| 10 | 160.0 | 50.0 | 150.0 | 52.0 | 3.00 | 9.50 | 4.0 | 20.0 | 2.0 |" in sec
    assert "| 10 | 170.0 | 64.0 | 30.00 | 3.0 | 4.0 | 3.5 | 2.0 | yes | 160.0 | 1.5 |" in sec
    assert "| 50 | - | - | - | - | - | - | - | - | - | - |" in sec
    assert rr.command_line(["--scales", "10", "--note", "a b", "--docs", "yes", "--x=a b"]) == \
        "python3 bench/remote_recovery.py --scales 10 '--x=a b'"
    newer = _results()
    newer["date"] = "later"
    check_section_replaced_once(sec, rr.markdown_section(newer, None), rr.BEGIN, rr.END)


def _table(stdout, title):
    """The rows of the console table after the line starting with title."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    header, dashes = lines[start + 1], lines[start + 2]
    assert set(dashes.replace(" ", "")) == {"-"}, dashes
    rows = []
    for line in lines[start + 3:]:
        if not line.strip():
            break
        rows.append(line.split())
    return header, rows


@needs_stock_pg15("pg_basebackup")
def test_quick_run(tmp_path):
    build = need_strata_build()
    out = tmp_path / "out"
    with quick_run("remote_recovery", ["--strata-build", build, "--duration", "3"], out,
                   timeout=240) as (cp, work, res):
        header, rows = _table(cp.stdout, "Upload (file backend)")
        assert header.split()[0] == "scale" and len(rows) == 1 and rows[0][0] == "1"
        header, rows = _table(cp.stdout, "Recovery from object storage")
        assert len(rows) == 1 and rows[0][0] == "1"
        assert len(rows[0]) == len(rr.REC_HEADER), rows
        assert "FAILED" not in cp.stdout
        (entry,) = res["scales"]
        a, b = entry["a"], entry["b"]
        assert a["basebackup_s"] > 0 and a["basebackup_mb"] > 10
        # Scale 1 stays below the 64 MB open layer: the import's upload at
        # `strata up` is in the store, the load's values may all be in WAL --
        # or none: on a slow machine the uploader may have caught up with the
        # last commit before the kill (seen with three pytest workers), and
        # then there is nothing to replay.
        assert b["uploaded_mb"] >= 0 and b["remote_data_mb"] > 1 and b["replay_mb"] >= 0
        assert b["lag_max_mb"] >= b["lag_mean_mb"] >= 0
        assert 0 < b["restored_s"] <= b["first_query_s"]
        assert 0 < b["caught_up_s"]
        # The recovered database answered, through a fresh compute.
        assert b["answers_ok"] and b["accounts"] == 100000 and b["balance_diff"] == 0
        assert b["samples"]
        assert (out / "results.md").read_text().startswith(rr.BEGIN)
        assert pids_mentioning(work) == []
        assert os.listdir(work) == []
