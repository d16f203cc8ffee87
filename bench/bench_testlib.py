"""What the benchmark programs' tests (bench/test_*.py) share.

For: finding the release build a test runs against (STRATA_BUILD, else
./build) and skipping the test when a file it needs (or stock PG 15) is not
there; the check that a program's docs section replaces itself once;
running a program's --quick mode without touching the docs; a scratch
directory for that run that the postgres user can enter, and that is left
with nothing running in it and removed afterwards.

Not for: the programs themselves (they never import pytest) or asserting
anything: a test still checks, inside the with block, that the program
stopped what it started (pids_mentioning(work) == []) before the clean-up
here kills what was left.
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from bench_proc import pids_mentioning
from bench_report import replace_marked_section

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
STOCK_PG15_BINDIR = "/usr/lib/postgresql/15/bin"
STRATA_NEEDS = ("bin/strata", "bin/strata-pageserver", "lib/strata.so")


def needs_stock_pg15(tool):
    """A pytest mark: skip the test unless the stock PG 15 tool is installed."""
    return pytest.mark.skipif(not os.path.exists(os.path.join(STOCK_PG15_BINDIR, tool)),
                              reason="PostgreSQL 15 binaries not installed")


def strata_build():
    """The release build the tests use: STRATA_BUILD, else <repo>/build."""
    return os.environ.get("STRATA_BUILD", os.path.join(REPO, "build"))


def need_strata_build(needs=STRATA_NEEDS):
    """strata_build(); skips the calling test when any of needs (paths
    relative to it) does not exist."""
    build = strata_build()
    for need in needs:
        if not os.path.exists(os.path.join(build, need)):
            pytest.skip(f"not built: {os.path.join(build, need)}")
    return build


def check_section_replaced_once(section, newer, begin, end, replace=None):
    """Asserts that section and newer (a later version of it) are one docs
    section each, between the markers begin and end, and that replace(doc,
    section) (default: replace_marked_section with those markers) puts it into
    docs/benchmarks.md once: after what was there (another benchmark's section
    too), and the second time in place of the first, before what came after."""
    if replace is None:
        def replace(doc, sec):
            return replace_marked_section(doc, sec, begin, end)
    for sec in (section, newer):
        assert sec.startswith(begin) and sec.rstrip().endswith(end), sec[:200]
    doc = "# Benchmarks\n\nintro\n\n<!-- BEGIN other: x -->\nq\n<!-- END other -->\n"
    once = replace(doc, section)
    assert once.startswith(doc) and once.endswith(section)
    twice = replace(once + "\nafter\n", newer)
    assert twice.count(begin) == 1 and twice.count(end) == 1
    assert twice.startswith(doc) and twice.endswith("\nafter\n") and newer in twice
    assert newer == section or section not in twice


def kill_pids_mentioning(text):
    """SIGKILLs every process whose command line contains text; returns their pids."""
    pids = pids_mentioning(text)
    for pid in pids:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    return pids


def run_quick(program, options, work, out, timeout):
    """Runs bench/<program>.py --quick with options, its temporary directories
    under work, its reports in out and docs/benchmarks.md untouched; returns
    the CompletedProcess (text output) whatever its exit code."""
    argv = [sys.executable, os.path.join(HERE, program + ".py"), "--quick"] + list(options) + \
        ["--workdir", work, "--out", str(out), "--docs", "no"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


@contextlib.contextmanager
def quick_run(program, options, out, timeout):
    """run_quick(program, options) in a new scratch_workdir; asserts that it
    exited with 0 (its output's tail says why not) and yields (its
    CompletedProcess, the work directory, the results.json it wrote to out).
    The test checks, inside the block, that nothing it started runs on."""
    with scratch_workdir(program + "-test-") as work:
        cp = run_quick(program, options, work, out, timeout)
        assert cp.returncode == 0, cp.stdout[-4000:] + cp.stderr[-4000:]
        with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
            results = json.load(f)
        yield cp, work, results


@contextlib.contextmanager
def scratch_workdir(prefix):
    """A new directory under /tmp, mode 755 (pytest's tmp_path sits under a
    0700 directory the postgres user cannot enter), for a run's servers.  On
    leaving the block, whatever still mentions it is killed and it is removed."""
    work = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(work, 0o755)
    try:
        yield work
    finally:
        kill_pids_mentioning(work)
        shutil.rmtree(work, ignore_errors=True)


def check_probe(setup, strata, need_getpage=True):
    """A setup's CPU figures (run.probe, bench_probe) show the groups that
    must have burned CPU in its window: the backends always; for Strata the
    safekeepers and the pageserver too (its ingest thread seen by name),
    and (need_getpage) GetPage requests with p50 <= p99 of their wait, the
    histogram summing to the waits.  Returns the GetPage summary (None for stock)."""
    from bench_strata import getpage_summary  # pylint: disable=import-outside-toplevel
    run = setup["run"]
    probe, units = run.get("probe"), run.get("probe_units")
    assert probe and units and units > 0, (setup["key"], probe, units)
    groups = probe["cpu"]["groups_s"]
    assert groups.get("backends", 0) > 0, groups
    assert probe["cpu"]["machine_busy_s"] > 0, probe["cpu"]
    if not strata:
        assert probe["smgr"] is None
        return None
    # Every commit is fsynced by the safekeepers: they always burn CPU.  The
    # pageserver's ingest thread must have been found and named, but CPU
    # comes in 10 ms clock ticks and a few seconds of a scale-1 run may
    # ingest in less than one; the pageserver as a whole (ingest, image
    # generation, its redo helpers) must have worked.
    assert groups.get("safekeepers", 0) > 0, groups
    assert "ps_ingest" in groups, groups
    assert sum(s for g, s in groups.items() if g.startswith("ps_") or g == "redo_helpers") > 0, \
        groups
    summary = getpage_summary(probe["smgr"], units)
    assert summary is not None, probe["smgr"]
    assert summary["hist_sum"] == summary["waits"], summary
    if need_getpage:
        assert summary["getpage"] > 0 and summary["waits"] > 0, summary
        assert summary["wait_p50_us"] <= summary["wait_p99_us"], summary
    return summary
