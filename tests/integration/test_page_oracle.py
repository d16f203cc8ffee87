"""The page oracle: the pageserver, verified page for page against a stock
standby (the pageserver issue's main "done when").

A stock PostgreSQL 15 primary streams WAL through three safekeepers (the
walproposer in the stock compute); the pageserver imports the primary's
cleanly stopped data directory and ingests the WAL from the safekeepers; a
stock standby replays the same WAL from a safekeeper.  The workload
(oracle_workload.py) covers heap, HOT, TOAST, every index AM, sequences,
VACUUM / FREEZE / FULL, TRUNCATE, CREATE/DROP TABLE and DATABASE (both
strategies), subtransactions, multixacts and two-phase commit.  At the import
point and at the end of every phase the standby is stopped exactly there
(oracle_harness.Standby.stop_at checks its log and pg_controldata), and at
that same LSN:
  * the set of relation forks and their sizes equals the pageserver's rels
    listing (FSM forks excepted: never WAL-logged);
  * every block of every other fork equals GetPage@LSN after the masking
    wal_consistency_checking uses (pagemask.py);
  * every pg_xact page equals GetSlruSegment@LSN.
Run with full_page_writes off (the compute's setting, every page rebuilt by
redo) and on (FPIs after each checkpoint).  A failure prints, per point, the
counts and each mismatch: relation, fork, block, access method, first
differing byte and what lies there.
"""

import time

import pytest

from conftest import int_to_lsn
from oracle_harness import compare_at, running_oracle
from oracle_workload import PHASES, run_phase

ALL_AMS = ("heap", "btree", "hash", "gist", "spgist", "gin", "brin", "sequence", "vm")


def check_points(cluster, reader, timings):
    """Stops the standby at every point in turn and compares; returns the
    comparisons."""
    results, seen = [], set()
    for point in cluster.points:
        try:
            cluster.wait_ingested(point.lsn)
        except AssertionError as e:
            raise AssertionError("%s; the points before it:\n%s" % (
                e, "\n".join(r.summary() for r in results) or "(none)"))
        t0 = time.monotonic()
        cluster.standby.stop_at(point)
        t1 = time.monotonic()
        results.append(compare_at(point, cluster.standby.datadir, cluster.pageserver,
                                  cluster.timeline, reader, seen))
        timings.append((point.name, t1 - t0, time.monotonic() - t1))
    return results


def assert_oracle_holds(results, timings):
    report = "\n".join(r.summary() for r in results)
    report += "\n" + "\n".join("%s: standby stop %.1f s, compare %.1f s" % t for t in timings)
    print(report)
    assert sum(r.nmismatch for r in results) == 0, "the pageserver differs from the standby:\n" + (
        report)
    ams = {}
    for r in results:
        for am, n in r.by_am.items():
            ams[am] = ams.get(am, 0) + n
    missing = [am for am in ALL_AMS if not ams.get(am)]
    assert not missing, "no page of %s was compared: %s" % (missing, ams)
    assert all(r.clog_pages > 0 for r in results), report
    assert len(results) >= 6, report


@pytest.mark.parametrize("fpw", [False, True], ids=["fpw_off", "fpw_on"])
def test_pageserver_pages_equal_a_stock_standby_at_every_point(fpw):
    started = time.monotonic()
    with running_oracle(fpw=fpw) as cluster:
        for name, fn in PHASES:
            run_phase(cluster, name, fn)
        end = cluster.finish_workload()
        workload_done = time.monotonic()
        reader = cluster.page_reader()
        timings = []
        results = check_points(cluster, reader, timings)
        print("workload up to %s: %.1f s; ingest waits and checks %.1f s" % (
            int_to_lsn(end), workload_done - started, time.monotonic() - workload_done))
        assert_oracle_holds(results, timings)
