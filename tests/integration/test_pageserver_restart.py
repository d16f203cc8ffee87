"""kill -9 of the pageserver while it ingests, then a restart on the same data
directory (docs/design.md §5.5, §6.3 and §9).

What this shows:
  * the pageserver never reports as persisted (disk_consistent_lsn in its
    feedback, which the safekeepers record and obey when removing WAL) an
    LSN it has not persisted: after the restart its disk_consistent_lsn is at
    or past every value any safekeeper recorded before the kill;
  * no safekeeper removed WAL the pageserver had not persisted: the oldest
    segment each safekeeper still holds starts at or below the restarted
    pageserver's disk_consistent_lsn (checked right after the restart and at
    the end);
  * it resumes ingest from there, and the page oracle (test_page_oracle.py)
    still holds at every point, including the points before the kill and the
    one whose phase ran across it.
"""

import threading
import time

from conftest import int_to_lsn, lsn_to_int, wait_until
from oracle_harness import running_oracle
from oracle_workload import PHASES, run_phase
from test_page_oracle import assert_oracle_holds, check_points

SEG_SIZE = 16 * 1024 * 1024


def segment_start(name):
    return (int(name[8:16], 16) << 32) + int(name[16:24], 16) * SEG_SIZE


def recorded_feedback(cluster):
    """The newest disk_consistent_lsn each safekeeper recorded, as of now."""
    out = {}
    for sk in cluster.safekeepers:
        fb = sk.status(cluster.timeline).get("pageserver_feedback", {})
        out[sk.id] = lsn_to_int(fb.get("disk_consistent_lsn") or "0/0")
    return out


def check_no_wal_removed_beyond(cluster, persisted, when):
    for sk in cluster.safekeepers:
        segs = sk.segments(cluster.timeline)
        assert segs, "sk%d holds no segment %s" % (sk.id, when)
        oldest = segment_start(segs[0])
        assert oldest <= persisted, (
            "%s: sk%d's oldest segment %s starts at %s, past the pageserver's persisted %s: "
            "it removed WAL the pageserver still needs" % (when, sk.id, segs[0],
                                                          int_to_lsn(oldest),
                                                          int_to_lsn(persisted)))


def test_pageserver_killed_during_ingest_restarts_and_the_oracle_holds():
    with running_oracle(fpw=False) as cluster:
        for name, fn in PHASES[:2]:
            run_phase(cluster, name, fn)

        # Run the next phase and kill -9 the pageserver while it ingests it.
        errors = []

        def phase():
            try:
                run_phase(cluster, *PHASES[2])
            except BaseException as e:  # reported below
                errors.append(e)
        worker = threading.Thread(target=phase, daemon=True)
        worker.start()
        before = cluster.points[-1].lsn
        cluster.wait_ingested(before + 1, timeout=60)
        cluster.pageserver.kill()
        reported = recorded_feedback(cluster)
        history = max([lsn for _, _, lsn in cluster.feedback_history] + [0])
        promised = max(list(reported.values()) + [history])
        time.sleep(1.0)  # WAL keeps arriving at the safekeepers meanwhile

        cluster.pageserver.start()
        status = wait_until(lambda: cluster.pageserver.timeline_status(cluster.timeline), 60,
                            "the restarted pageserver to load the timeline")
        persisted = lsn_to_int(status["disk_consistent_lsn"])
        assert persisted >= promised, (
            "after the restart the pageserver has persisted only %s, but before the kill a "
            "safekeeper recorded %s as persisted" % (int_to_lsn(persisted), int_to_lsn(promised)))
        check_no_wal_removed_beyond(cluster, persisted, "right after the restart")

        worker.join(300)
        assert not worker.is_alive() and not errors, errors
        for name, fn in PHASES[3:]:
            run_phase(cluster, name, fn)
        end = cluster.finish_workload()
        cluster.wait_ingested(end)
        final = lsn_to_int(cluster.pageserver.timeline_status(cluster.timeline)[
            "disk_consistent_lsn"])
        check_no_wal_removed_beyond(cluster, final, "at the end")
        removed = {sk.id: sk.segments(cluster.timeline)[0] for sk in cluster.safekeepers}
        print("kill at ingest past %s; promised %s, persisted after restart %s; "
              "oldest segments at the end %s" % (int_to_lsn(before), int_to_lsn(promised),
                                                  int_to_lsn(persisted), removed))

        reader = cluster.page_reader()
        timings = []
        assert_oracle_holds(check_points(cluster, reader, timings), timings)
