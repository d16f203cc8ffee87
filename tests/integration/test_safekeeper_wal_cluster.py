"""
Pageserver feedback heard by one safekeeper reaches the others (issue 13,
part 3; docs/design.md, WAL removal).

The pageserver streams from one safekeeper and tells only that one how far
it is consistent; the proposer relays the feedback it reads in
AppendResponses to every safekeeper in its AppendRequests.  A real cluster
(`strata up`, token auth on): after some WAL, every safekeeper reports the
pageserver's disk_consistent_lsn and removes its WAL below it, not only the
one the pageserver talks to.
"""
import os
import threading
import time

from conftest import lsn_to_int, pageserver_built, wait_until

import pytest


EMIT = "SELECT pg_logical_emit_message(true, 'limit', repeat('x', 1000000))"


def sk_timeline(cluster, name, tenant, timeline):
    sk = cluster.safekeeper(name)
    return cluster.http_get_json(sk["http_port"], "/v1/tenant/%s/timeline/%s" % (tenant, timeline))


def test_feedback_reaches_every_safekeeper(cluster):
    if not pageserver_built():
        pytest.skip("the pageserver is not built")
    tenant, timeline = cluster.ids()
    cluster.sql("CREATE TABLE relay (id int, pad text)")
    # ~3 segments of 16 MB.
    for _ in range(5):
        cluster.sql("INSERT INTO relay SELECT g, repeat('x', 1000) FROM generate_series(1, 10000) g")
    names = ("sk1", "sk2", "sk3")

    def pageserver_disk():
        v = cluster.status()["pageserver"]["disk_consistent_lsn"]
        return lsn_to_int(v) if v else 0

    wait_until(lambda: pageserver_disk() > 2 * (16 << 20), 120,
               "the pageserver to make WAL past the second segment consistent")
    target = pageserver_disk()

    def all_heard():
        got = [lsn_to_int(sk_timeline(cluster, n, tenant, timeline)["pageserver_feedback"]
                          ["disk_consistent_lsn"]) for n in names]
        return all(g >= target for g in got)

    # A heartbeat relays it at once; allow for a loaded machine.
    wait_until(all_heard, 30, "every safekeeper to report the pageserver's feedback")

    def seg1_gone(n):
        return not os.path.exists(os.path.join(cluster.safekeeper_datadir(n), tenant, timeline,
                                               "000000010000000000000001"))

    wait_until(lambda: all(seg1_gone(n) for n in names), 30,
               "every safekeeper to remove the WAL below the pageserver's position")


def test_wal_limit_stalls_commits_until_the_pageserver_catches_up(cluster_dir):
    """--max-wal-bytes with the pageserver away: the safekeepers refuse WAL
    past the bound, so commits wait (never acknowledged without a quorum);
    once the pageserver is back and WAL is removed, the same compute's
    commits go on, with no restart of anything but the pageserver."""
    if not pageserver_built():
        pytest.skip("the pageserver is not built")
    cluster = cluster_dir
    limit = 64 << 20  # four 16 MB segments
    cluster.env["SAFEKEEPER_MAX_WAL_BYTES"] = str(limit)
    cluster.up()
    tenant, timeline = cluster.ids()
    names = ("sk1", "sk2", "sk3")
    for n in names:
        port = cluster.safekeeper(n)["http_port"]
        assert cluster.http_get_json(port, "/v1/status")["max_wal_bytes"] == limit
    conn = cluster.connect()
    conn.execute("SET statement_timeout = 0")
    # The exact statement, with the pageserver up: every page it reads is
    # then in the compute's buffers, and the load needs no page reads.
    for _ in range(3):
        conn.execute(EMIT)
    cluster.stop("pageserver")
    done = []
    errors = []

    def load():
        # 1 MB transactional messages: WAL and commits, no data pages to read.
        try:
            for i in range(400):
                conn.execute(EMIT)
                done.append(time.monotonic())
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    t = threading.Thread(target=load, daemon=True)
    t.start()

    def stalled():
        return len(done) > 0 and time.monotonic() - done[-1] > 10 and t.is_alive()

    wait_until(stalled, 240, "commits to stall at the WAL bound")
    assert not errors, errors
    stalled_at = len(done)
    limited = [n for n in names
               if sk_timeline(cluster, n, tenant, timeline)["wal_limited"]]
    assert len(limited) >= 2, "a majority refuses appends: %s" % limited
    for n in names:
        st = sk_timeline(cluster, n, tenant, timeline)
        assert st["wal_bytes"] <= limit and not st["failed"], st
    time.sleep(3)
    assert len(done) == stalled_at, "a commit was acknowledged past the bound"

    cluster.start("pageserver")
    wait_until(lambda: len(done) > stalled_at + 5, 180,
               "commits to go on once the pageserver caught up and WAL was removed")
    assert not errors, errors
    conn.close()
