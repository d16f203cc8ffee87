"""Tests of bench/branch_create.py (python3 -m pytest -q bench/test_branch_create.py).

The report on hand-made results, and one real --quick run (pgbench scale 1,
two branches): its table is well-formed, every figure is there, each
compute on a branch answered as main did, and nothing it started is left
running.  No timing is asserted.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
import branch_create as bc  # noqa: E402
from bench_proc import pids_mentioning  # noqa: E402
from bench_testlib import check_section_replaced_once, need_strata_build, quick_run  # noqa: E402


def _results():
    med = {"create_ms": 3.5, "branch_s": 0.2, "start_s": 1.5, "first_query_s": 2.0}
    return {"date": "today", "quick": False, "elapsed_s": 60,
            "params": {"argv": ["--scales", "10"], "scales": [10, 100], "repeat": 3, "note": ""},
            "machine": {"nproc": 2, "cpu_model": "x", "mem_total": "1 GiB",
                        "filesystem": "ext4", "loadavg_start": "0", "loadavg_end": "0"},
            "scales": [{"scale": 10, "db_mb": 160.0, "median": med, "runs": [],
                        "main_restart_first_query_s": 1.8},
                       {"scale": 100, "error": "strata up failed"}]}


def test_console_and_docs_section():
    res = _results()
    text = bc.console(res)
    assert "FAILED: scale 100: strata up failed" in text
    sec = bc.markdown_section(res, None)
    assert "## Branches: creation and first query" in sec
    assert "| 10 | 160 | 3.5 | 0.20 | 1.50 | 2.00 | 1.80 |" in sec
    assert "| 100 | - | - | - | - | - | - |" in sec
    newer = _results()
    newer["date"] = "later"
    check_section_replaced_once(sec, bc.markdown_section(newer, None), bc.BEGIN, bc.END)


def test_quick_run(tmp_path):
    build = need_strata_build()
    out = tmp_path / "out"
    with quick_run("branch_create", ["--strata-build", build], out, timeout=300) as \
            (cp, work, res):
        lines = cp.stdout.splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("Branches (median"))
        assert lines[start + 1].split()[0] == "scale"
        row = lines[start + 3].split()
        assert row[0] == "1" and len(row) == len(bc.HEADER), row
        assert "FAILED" not in cp.stdout
        (entry,) = res["scales"]
        assert len(entry["runs"]) == 2
        for run in entry["runs"]:
            assert run["create_ms"] > 0 and 0 < run["start_s"] <= run["first_query_s"]
        assert entry["main_restart_first_query_s"] > 0
        assert (out / "results.md").read_text().startswith(bc.BEGIN)
        assert pids_mentioning(work) == []
        assert os.listdir(work) == []
