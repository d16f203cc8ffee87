"""
Pageserver retention and GC (docs/design.md §6.7), and the WAL receiver against our
own safekeepers (docs/design.md §3.3, §6.8), on a `strata up` cluster: three
safekeepers, a stock compute with the walproposer, and the pageserver (the
CLI passes our PAGESERVER_* environment on to it).

What it shows:
  - GC: a table whose pages are updated many times (with checkpoints, so
    full-page images land in between) is read page by page at many LSNs
    while GC is off.  The pageserver is restarted with a small PITR byte
    window and a 1 s GC interval: the horizon becomes exactly
    last_record_lsn - window (the store is flushed, so disk_consistent_lsn
    does not hold it back), GC removes versions (the timeline's and the
    process' counters rise, the horizon gauge shows it), every read at or
    above the horizon returns the same bytes as before GC, and every read
    below it fails with "requested LSN X is below the GC horizon Y of this
    timeline"; the horizon survives another restart.
  - WAL receiver: the safekeeper it streams from reports the pageserver's
    'z' feedback (last_received / disk_consistent LSNs) advancing; when that
    safekeeper stops answering (SIGSTOP) and the others move ahead by more
    than --walreceiver-switch-lag, the receiver switches to one of them;
    when the safekeeper it streams from is killed, it goes on from another
    and ingests commits made afterwards; once streaming again its
    last_error is empty while the error count and time remain.
"""
import json
import os
import signal
import time
import urllib.error
import urllib.request

import pytest

import conftest
import pagestream
from conftest import lsn_to_int, int_to_lsn, wait_until

DEFAULT_SPC = 1663
WINDOW = 256 * 1024


def http_get(port, path, timeout=10, headers=None):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        body, status = e.read(), e.code
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode("utf-8", "replace")


class PS:
    """The cluster's pageserver, through its HTTP API and pagestream."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.tenant, self.timeline = cluster.ids()

    @property
    def ports(self):
        with open(os.path.join(self.cluster.dir, "cluster.json")) as f:
            ps = json.load(f)["pageserver"]
        return ps["pg_port"], ps["http_port"]

    def info(self):
        status, body = http_get(self.ports[1], "/v1/tenant/%s/timeline/%s" % (self.tenant,
                                                                              self.timeline),
                                headers=self.cluster.bearer())
        assert status == 200, body
        return body

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.ports[1],
                                    timeout=10) as r:
            return r.read().decode()

    def connect(self):
        return pagestream.connect("127.0.0.1", self.ports[0], self.tenant, self.timeline,
                                  password=self.cluster.tokens()[1])

    def wait_ingested(self, lsn, timeout=60):
        return wait_until(lambda: lsn_to_int(self.info()["last_record_lsn"]) >= lsn and
                          self.info(), timeout, "pageserver to ingest up to %s" % int_to_lsn(lsn))


def metric_value(text, name, labels=None):
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head == name or (labels is not None and head.startswith(name + "{") and
                            all('%s="%s"' % kv in head for kv in labels.items())):
            return float(value)
    return None


def require_pageserver():
    if not conftest.pageserver_built():
        pytest.skip("not built yet: %s" % conftest.pageserver_bin())


# --------------------------------------------------------------------- GC


def test_gc_keeps_reads_at_and_above_the_horizon_and_refuses_older(cluster_dir):
    require_pageserver()
    cluster = cluster_dir
    cluster.env["PAGESERVER_GC_INTERVAL"] = "0"  # off while we take the "before" picture
    cluster.up()
    ps = PS(cluster)

    cluster.sql("CREATE TABLE gc_t (id int PRIMARY KEY, v int, pad text) WITH (fillfactor = 50)")
    cluster.sql("INSERT INTO gc_t SELECT g, 0, repeat('p', 200) FROM generate_series(1, 300) g")
    (rfn, dboid), = cluster.sql("SELECT pg_relation_filenode('gc_t'), "
                                "(SELECT oid FROM pg_database WHERE datname = current_database())")
    lsns = []
    for rnd in range(40):
        cluster.sql("UPDATE gc_t SET v = v + 1")
        if rnd % 8 == 7:
            cluster.sql("CHECKPOINT")
        (lsn,), = cluster.sql("SELECT pg_current_wal_lsn()::text")
        lsns.append(lsn_to_int(lsn))
    # No more WAL from now on: the last record LSN stays put.
    cluster.stop("compute")
    status = cluster.status()
    sk_lsns = [lsn_to_int(http_get(sk["http_port"], "/v1/tenant/%s/timeline/%s" % (
        ps.tenant, ps.timeline), headers=cluster.bearer())[1]["commit_lsn"])
        for sk in status["safekeepers"]]
    end = max(sk_lsns)
    ps.wait_ingested(end)
    # Restarting flushes the store: disk_consistent_lsn == last_record_lsn.
    cluster.stop("pageserver")
    cluster.start("pageserver")
    # The receiver may still fetch a last record the commit LSN did not show.
    seen = []

    def settled():
        seen.append(ps.info()["last_record_lsn"])
        return len(seen) >= 10 and len(set(seen[-10:])) == 1
    wait_until(settled, 60, "last_record_lsn to settle", interval=0.3)
    cluster.stop("pageserver")
    cluster.start("pageserver")
    info = ps.info()
    last = lsn_to_int(info["last_record_lsn"])
    assert lsn_to_int(info["disk_consistent_lsn"]) == last
    assert info["gc"]["horizon"] == "0/0" and info["gc"]["runs"] == 0
    horizon = last - WINDOW
    assert lsns[0] < horizon < lsns[-1], "the workload must straddle the horizon"
    points = sorted(set(lsns + [horizon, last]))

    def read_all(c, lsn):
        n = c.nblocks(DEFAULT_SPC, dboid, rfn, 0, lsn)
        return [c.get_page(DEFAULT_SPC, dboid, rfn, 0, b, lsn) for b in range(n)]

    c = ps.connect()
    try:
        before = {lsn: read_all(c, lsn) for lsn in points}
    finally:
        c.close()
    # The reads are real: the pages changed across the workload.
    assert before[lsns[0]] != before[lsns[-1]]
    stats_before = info["store"]

    # GC on: a small byte window, every second.
    cluster.stop("pageserver")
    cluster.env["PAGESERVER_GC_INTERVAL"] = "1s"
    cluster.env["PAGESERVER_PITR_WINDOW_BYTES"] = str(WINDOW)
    cluster.start("pageserver")
    info = wait_until(lambda: (lambda i: i["gc"]["runs"] >= 1 and i)(ps.info()), 60,
                      "the first GC pass")
    assert info["gc"]["horizon"] == int_to_lsn(horizon), info["gc"]
    assert info["gc"]["last_error"] == ""
    removed = info["gc"]["removed"]
    assert removed > 0, info
    assert info["store"]["gc_removed"] >= removed
    # The horizon is exact and stays (no new WAL): no second pass moves it.
    time.sleep(2.5)
    info = ps.info()
    assert info["gc"]["horizon"] == int_to_lsn(horizon) and info["gc"]["runs"] == 1
    print("GC removed %d values; store before %s after %s" % (removed, stats_before,
                                                             info["store"]))
    # Fewer versions in the index (LMDB pages freed by the deletes).
    assert info["store"]["index_bytes"] < stats_before["index_bytes"], (stats_before,
                                                                         info["store"])
    m = wait_until(lambda: (lambda t: metric_value(t, "pageserver_gc_values_removed_total")
                            and t)(ps.metrics()), 10, "GC metrics")
    assert metric_value(m, "pageserver_gc_values_removed_total") == removed
    assert metric_value(m, "pageserver_gc_runs_total") == 1
    assert metric_value(m, "pageserver_store_gc_removed") >= removed
    assert metric_value(m, "pageserver_gc_horizon_lsn",
                        {"tenant_id": ps.tenant, "timeline_id": ps.timeline}) == horizon

    def check_reads():
        c = ps.connect()
        try:
            refused = kept = 0
            for lsn in points:
                if lsn >= horizon:
                    assert read_all(c, lsn) == before[lsn], "pages at %s changed" % int_to_lsn(lsn)
                    kept += 1
                    continue
                for call in (lambda: c.nblocks(DEFAULT_SPC, dboid, rfn, 0, lsn),
                             lambda: c.get_page(DEFAULT_SPC, dboid, rfn, 0, 0, lsn),
                             lambda: c.exists(DEFAULT_SPC, dboid, rfn, 0, lsn),
                             lambda: c.db_size(dboid, lsn)):
                    with pytest.raises(pagestream.PagestreamError) as e:
                        call()
                    want = "requested LSN %s is below the GC horizon %s of this timeline" % (
                        int_to_lsn(lsn), int_to_lsn(horizon))
                    assert want in str(e.value) or want in e.value.message, str(e.value)
                refused += 1
            assert kept >= 2 and refused >= 2, (kept, refused)
        finally:
            c.close()

    check_reads()
    status, body = http_get(ps.ports[1], "/v1/tenant/%s/timeline/%s/rels?lsn=%s" % (
        ps.tenant, ps.timeline, int_to_lsn(lsns[0])), headers=cluster.bearer())
    assert status == 400 and "below the GC horizon" in body["error"], body
    status, body = http_get(ps.ports[1], "/v1/tenant/%s/timeline/%s/rels?lsn=%s" % (
        ps.tenant, ps.timeline, int_to_lsn(horizon)), headers=cluster.bearer())
    assert status == 200 and any(r["rel"] == rfn for r in body["rels"]), body

    # The horizon is durable: after a restart with GC off, old reads stay refused.
    cluster.stop("pageserver")
    cluster.env["PAGESERVER_GC_INTERVAL"] = "0"
    cluster.start("pageserver")
    assert ps.info()["gc"]["horizon"] == int_to_lsn(horizon)
    check_reads()


# ------------------------------------------------------------ WAL receiver


def sk_timeline(sk, ps):
    status, body = http_get(sk["http_port"], "/v1/tenant/%s/timeline/%s" % (ps.tenant,
                                                                           ps.timeline),
                            headers=ps.cluster.bearer())
    assert status == 200, body
    return body


def safekeepers(cluster):
    """The safekeepers from cluster.json (`strata status` would wait for a
    stopped one)."""
    with open(os.path.join(cluster.dir, "cluster.json")) as f:
        return json.load(f)["safekeepers"]


def streaming_from(cluster, info):
    """Name of the safekeeper the walreceiver streams from, or None."""
    addr = info["walreceiver"]["safekeeper"]
    if not addr:
        return None
    port = int(addr.rsplit(":", 1)[1])
    for sk in safekeepers(cluster):
        if sk["pg_port"] == port:
            return sk["name"]
    raise AssertionError("walreceiver streams from unknown %s" % addr)


def sk_pid(cluster, name):
    with open(os.path.join(cluster.dir, name + ".pid")) as f:
        return int(f.read().strip())


def commit_lsn(conn, rows=200):
    """Commits rows rows (about 150 bytes of WAL each); the LSN after."""
    conn.execute("INSERT INTO wr_t SELECT g, repeat('w', 100) FROM generate_series(1, %d) g"
                 % rows)
    (lsn,), = conn.execute("SELECT pg_current_wal_lsn()::text").fetchall()
    return lsn_to_int(lsn)


def sk_by_name(cluster, name):
    return next(sk for sk in safekeepers(cluster) if sk["name"] == name)


def test_walreceiver_feedback_switch_and_failover(cluster_dir):
    require_pageserver()
    cluster = cluster_dir
    cluster.env["PAGESERVER_WALRECEIVER_PROBE_INTERVAL"] = "300ms"
    cluster.env["PAGESERVER_WALRECEIVER_SWITCH_LAG"] = "1MB"
    cluster.up()
    ps = PS(cluster)
    conn = cluster.connect()
    conn.execute("CREATE TABLE wr_t (a int, b text)")

    # 'z' feedback: the safekeeper streamed from hears how far we got. The
    # receiver may switch source meanwhile (a safekeeper outside the last
    # commit's majority looks stalled), so ask whichever one it streams from.
    def feedback_from_source(field, lsn):
        name = streaming_from(cluster, ps.info())
        if name is None:
            return None
        f = sk_timeline(sk_by_name(cluster, name), ps)["pageserver_feedback"]
        return lsn_to_int(f[field]) >= lsn and f

    lsn0 = commit_lsn(conn)
    ps.wait_ingested(lsn0)
    wait_until(lambda: streaming_from(cluster, ps.info()), 30, "a streaming receiver")
    lsn = commit_lsn(conn)
    assert lsn > lsn0
    ps.wait_ingested(lsn)
    fb = wait_until(lambda: feedback_from_source("last_received_lsn", lsn), 30,
                    "last_received feedback to advance")
    # disk_consistent follows once the open layer is flushed (age limit 10 s).
    fb = wait_until(lambda: feedback_from_source("disk_consistent_lsn", lsn), 60,
                    "disk_consistent feedback to advance")
    assert lsn_to_int(fb["disk_consistent_lsn"]) <= lsn_to_int(fb["last_received_lsn"])
    wr = ps.info()["walreceiver"]
    assert wr["state"] == "streaming" and wr["last_error"] == "", wr

    # A safekeeper that stops answering falls behind; the others are more
    # than the switch lag ahead: the receiver switches.
    def stop_source():
        """SIGSTOPs the safekeeper streamed from; retried if the receiver
        switched away between looking and stopping."""
        name = streaming_from(cluster, ps.info())
        if name is None:
            return None
        pid = sk_pid(cluster, name)
        os.kill(pid, signal.SIGSTOP)
        info = ps.info()
        if streaming_from(cluster, info) == name:
            return name, pid, info["walreceiver"]["switches"]
        os.kill(pid, signal.SIGCONT)
        return None

    name, pid, switches = wait_until(stop_source, 30, "stopping the streamed-from safekeeper")
    try:
        # About 3 MB of WAL: three times the switch lag.
        lsn = commit_lsn(conn, rows=20000)
        info = ps.wait_ingested(lsn, timeout=90)
        new = streaming_from(cluster, info)
        assert info["walreceiver"]["switches"] > switches, info["walreceiver"]
        assert new is not None and new != name, info["walreceiver"]
    finally:
        os.kill(pid, signal.SIGCONT)

    # Kill the one we stream from: the receiver goes on from another and
    # ingests what is committed afterwards.  After the SIGCONT the receiver
    # may still move to another source; killing one it just left counts no
    # error, so the victim is the source it kept for a second.
    def stable_source():
        first = streaming_from(cluster, ps.info())
        time.sleep(1.0)
        now = ps.info()
        return now if first is not None and streaming_from(cluster, now) == first else None

    info = wait_until(stable_source, 30, "a stream source kept for a second")
    victim = streaming_from(cluster, info)
    assert victim is not None
    errors = info["walreceiver"]["errors"]
    os.kill(sk_pid(cluster, victim), signal.SIGKILL)
    lsn = commit_lsn(conn)
    info = ps.wait_ingested(lsn, timeout=90)
    lsn = commit_lsn(conn)
    info = ps.wait_ingested(lsn, timeout=90)
    now_from = wait_until(lambda: streaming_from(cluster, ps.info()), 30, "streaming again")
    assert now_from != victim
    info = ps.info()
    wr = info["walreceiver"]
    assert wr["state"] == "streaming"
    assert wr["errors"] > errors and wr["last_error_time"] > 0, wr
    # Streaming again: the error is history, not the current state.
    assert wr["last_error"] == "", wr
    # The new safekeeper gets our feedback too.
    sk = sk_by_name(cluster, now_from)
    wait_until(lambda: lsn_to_int(sk_timeline(sk, ps)["pageserver_feedback"]
                                  ["last_received_lsn"]) >= lsn, 30,
               "feedback on the new safekeeper")
    conn.close()
