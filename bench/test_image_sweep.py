"""Tests of bench/image_sweep.py's pure parts: the chain figures taken from
/metrics, the rule that picks the default threshold, the console table and
the docs section (markers replaced, not duplicated).  The measurement itself
is a benchmark, not a test (run it with --quick to smoke-test it)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# pylint: disable=wrong-import-position
import image_sweep as sw  # noqa: E402
from bench_testlib import check_section_replaced_once  # noqa: E402

BEFORE = """# TYPE pageserver_read_chain_length histogram
pageserver_read_chain_length_bucket{le="+Inf"} 10
pageserver_read_chain_length_sum 30
pageserver_read_chain_length_count 10
pageserver_read_chain_max 7
"""
AFTER = """# TYPE pageserver_read_chain_length histogram
pageserver_read_chain_length_bucket{le="+Inf"} 30
pageserver_read_chain_length_sum 130
pageserver_read_chain_length_count 30
pageserver_read_chain_max 12
"""


def row(t, p99s, img=0.1):
    reads = {name: {"p50_us": p / 2, "p99_us": p, "chain_mean": 1.0, "chain_max": 3, "reads": 5}
             for (name, _), p in zip(sw.CASES, p99s)}
    return {"threshold": t, "ingest_mb_s": 5.0, "images": 10, "image_bytes_per_wal_byte": img,
            "data_bytes_per_wal_byte": 0.5, "reads": reads, "worst_p99_us": max(p99s)}


def test_chain_figures_are_deltas_of_the_histogram():
    assert sw.chain_figures(BEFORE, AFTER) == (20, 5.0)
    assert sw.chain_figures(AFTER, AFTER) == (0, None)
    assert sw.chain_figures("", AFTER) == (0, None)
    assert sw.metric_value(AFTER, "pageserver_read_chain_max") == 12


def test_choose_default_stops_at_the_knee_of_image_bytes():
    rows = [row(0, [100, 5000, 90000], img=0), row(4, [100, 150, 160], img=6.4),
            row(8, [100, 152, 158], img=1.5), row(16, [100, 150, 165], img=0.56),
            row(32, [100, 200, 400], img=0.40), row(64, [100, 300, 900], img=0.44)]
    assert sw.choose_default(rows) == 16
    # Every step still halves the bytes: the largest.
    assert sw.choose_default([row(8, [1, 1, 1], img=1.0), row(16, [1, 1, 1], img=0.5)]) == 16
    # Off is never chosen.
    assert sw.choose_default([row(0, [1, 1, 1], img=0)]) is None
    assert sw.choose_default([]) is None
    assert sw.choose_default(list(reversed(rows))) == 16


def test_table_and_section():
    rows = [row(0, [100, 5000, 90000]), row(16, [100, 150, 165])]
    text = sw.table(rows)
    assert "off (1000)" in text and "16" in text and "90000" in text
    results = {"quick": True, "machine": {"cpu_model": "x", "nproc": 2}, "build": "build",
               "date": "today", "minutes": 1.5, "wal": {"bytes": 5e6, "tps": 100.0},
               "args": {"scale": 1, "clients": 8, "seconds": 3, "requests": 200},
               "rows": rows, "chosen": 16, "errors": ["threshold 4: boom"]}
    section = sw.markdown_section(results, None)
    assert "Chosen: **16**" in section and "Quick run" in section and "boom" in section
    assert section.count("\n| ") == 3  # header and two rows
    check_section_replaced_once(section, section.replace("today", "tomorrow"), sw.SECTION_BEGIN,
                                sw.SECTION_END)


def test_parse_args_defaults():
    a = sw.parse_args([])
    assert a.thresholds == [0, 4, 8, 16, 32, 64, 128]
    q = sw.parse_args(["--quick"])
    assert q.thresholds == [0, 16] and q.seconds < a.seconds
    assert sw.parse_args(["--thresholds", "8,16"]).thresholds == [8, 16]
