"""
The pageserver's WAL receiver leaves a safekeeper that stops offering WAL
while another has committed more (docs/design.md §6.8: switch on failure or lag).

The safekeeper it streams from is frozen with SIGSTOP: its socket stays
open and silent, so nothing fails, and the lag is far below the byte
threshold.  The compute keeps committing through the other two; the
pageserver must notice the stall at its next probe, switch, and ingest the
new WAL.
"""
import os
import signal
import time

from conftest import lsn_to_int, wait_until


def timeline_status(cluster):
    tenant, timeline = cluster.ids()
    port = cluster.status()["pageserver"]["http_port"]
    return cluster.http_get_json(port, "/v1/tenant/%s/timeline/%s" % (tenant, timeline))


def test_frozen_safekeeper_is_left_for_one_that_has_more(cluster_dir):
    cluster = cluster_dir
    cluster.env["PAGESERVER_WALRECEIVER_PROBE_INTERVAL"] = "1s"
    cluster.up()
    cluster.sql("create table t (id int primary key, v text)")
    wait_until(lambda: timeline_status(cluster)["walreceiver"]["state"] == "streaming", 30,
               "the walreceiver to stream")
    before = timeline_status(cluster)["walreceiver"]
    addr = before["safekeeper"]
    port = int(addr.rsplit(":", 1)[1])
    frozen = next(sk for sk in cluster.status()["safekeepers"] if sk["pg_port"] == port)
    os.kill(frozen["pid"], signal.SIGSTOP)
    try:
        cluster.sql("insert into t select g, repeat('x', 100) from generate_series(1, 20000) g")
        target = lsn_to_int(cluster.sql("select pg_current_wal_flush_lsn()::text")[0][0])
        started = time.monotonic()
        wait_until(lambda: lsn_to_int(timeline_status(cluster)["last_record_lsn"]) >= target, 60,
                   "the pageserver to ingest past the frozen safekeeper")
        after = timeline_status(cluster)["walreceiver"]
        print("switched from %s to %s in %.1f s" % (addr, after["safekeeper"],
                                                     time.monotonic() - started))
        assert after["safekeeper"] != addr
        assert after["switches"] > before["switches"]
    finally:
        os.kill(frozen["pid"], signal.SIGCONT)
    # The pageserver serves the new rows.
    assert cluster.sql("select count(*) from t")[0][0] == 20000
