"""
How long safekeepers and their WAL backup keep WAL (issue 27; review
findings 5, 7 and 10; docs/design.md §5.5).  Real clusters (`strata up
--remote file://...`, token auth on):

  - one dead safekeeper does not stop commits at --max-wal-bytes: with the
    WAL backup on, the peer horizon (the proposer's truncate_lsn, frozen by
    the dead one) no longer holds the live safekeepers' WAL.  sk3 is killed,
    a ledger of 1 MB transactions (and pgbench beside it) writes four times
    the bound (issue 27's floor), every commit is acknowledged with no long stall, and sk3,
    started again, catches up; the closed segments it holds equal the
    others' and the store's byte for byte;
  - a safekeeper seeded by `strata safekeeper replace` keeps the WAL above
    the pageserver's remote_consistent_lsn while the pageserver's uploads
    are blocked (its disk_consistent_lsn moves on) and the safekeepers run
    without a backup of their own: the seed copies the remote position
    (TIMELINE_STATUS) instead of leaving 0;
  - the WAL backup's wal/ objects stay bounded as remote_consistent_lsn
    advances: the first member deletes what no one needs any more.
"""
import json
import os
import shutil
import subprocess
import threading
import time

import pytest

from conftest import STOCK_PG_BINDIR, lsn_to_int, make_shared_dir, pageserver_built, wait_until
from test_safekeeper_wal_backup import (SEG, is_segment, local_dir, local_segments,
                                        seg_lsn, sk_tl, store_dir, store_segments)

NAMES = ("sk1", "sk2", "sk3")
LIMIT = 6 * SEG  # --max-wal-bytes: six 16 MB segments
PAD = 1000000    # bytes of WAL each ledger transaction adds (a logical message)
STALL_S = 60     # the longest wait for one acknowledgement the first test allows


@pytest.fixture
def store(cluster_dir):
    if not pageserver_built():
        pytest.skip("the pageserver is not built")
    root = os.path.join(make_shared_dir("strata-walret-"), "store")
    os.mkdir(root)
    try:
        yield cluster_dir, root
    finally:
        shutil.rmtree(os.path.dirname(root), ignore_errors=True)


def flush_lsn(cluster, name):
    return lsn_to_int(sk_tl(cluster, name)["flush_lsn"])


def closed_segments(cluster, name):
    """Names of the closed segment files of a safekeeper (no .partial)."""
    return sorted(n for n in os.listdir(local_dir(cluster, name)) if is_segment(n))


def read(path):
    with open(path, "rb") as f:
        return f.read()


class Ledger:
    """Transactions of ~1 MB of WAL each, every one inserting its number:
    the numbers acknowledged, and when each was."""

    def __init__(self, cluster, count, first=0):
        self.cluster = cluster
        self.count = count
        self.first = first
        self.acked = []
        self.times = []
        self.errors = []
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        try:
            with self.cluster.connect(autocommit=False) as conn:
                conn.execute("SET statement_timeout = 0")
                conn.commit()
                for i in range(self.first, self.first + self.count):
                    conn.execute("INSERT INTO ledger VALUES (%s)", (i,))
                    conn.execute("SELECT pg_logical_emit_message(true, 'ledger', repeat('x', %s))",
                                 (PAD,))
                    conn.commit()
                    self.acked.append(i)
                    self.times.append(time.monotonic())
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.errors.append(e)

    def last_ack(self):
        return self.times[-1] if self.times else self.started

    def start(self):
        self.started = time.monotonic()
        self.thread.start()

    def wait(self, stall_s, total_s):
        """Until every transaction is acknowledged; fails on a wait of more
        than stall_s for one acknowledgement.  Returns the longest wait."""
        deadline = time.monotonic() + total_s
        while self.thread.is_alive():
            now = time.monotonic()
            assert not self.errors, self.errors
            assert now - self.last_ack() < stall_s, (
                "commits stalled: no acknowledgement for %.0f s after %d of %d transactions "
                "(%d MB written)" % (now - self.last_ack(), len(self.acked), self.count,
                                     len(self.acked) * PAD >> 20))
            assert now < deadline, "the ledger did not finish in %d s" % total_s
            time.sleep(0.5)
        assert not self.errors, self.errors
        gaps = [b - a for a, b in zip([self.started] + self.times, self.times)]
        worst = sorted(range(len(gaps)), key=lambda i: -gaps[i])[:3]
        print("longest waits: %s" % ", ".join("%.1f s at transaction %d (%d MB)"
                                               % (gaps[i], i, i * PAD >> 20) for i in worst))
        return max(gaps)


def test_dead_safekeeper_does_not_stop_commits_at_the_wal_bound(store):
    cluster, root = store
    cluster.env["SAFEKEEPER_MAX_WAL_BYTES"] = str(LIMIT)
    cluster.env["SAFEKEEPER_WAL_BACKUP_DELAY_MS"] = "500"
    cluster.up("--remote", "file://" + root)
    cluster.sql("CREATE TABLE ledger (id int PRIMARY KEY)")
    bench = [os.path.join(STOCK_PG_BINDIR, "pgbench")]
    subprocess.run(bench + ["-i", "-q", "-s", "1", cluster.connstr], check=True,
                   capture_output=True, timeout=300)
    # The statements once with everyone up: their pages are in the compute.
    cluster.sql("SELECT pg_logical_emit_message(true, 'warm', repeat('x', %d))" % PAD)
    cluster.stop("sk3", immediate=True)
    sk3_flush = lsn_to_int(sk_tl(cluster, "sk1")["commit_lsn"])

    ledger = Ledger(cluster, 4 * LIMIT // PAD)
    load = subprocess.Popen(bench + ["-c", "2", "-j", "2", "-T", "600", cluster.connstr],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ledger.start()
        longest = ledger.wait(STALL_S, 900)
    finally:
        load.terminate()
        load.communicate(timeout=60)
    print("ledger: %d transactions, %d MB, longest wait for one commit %.1f s"
          % (len(ledger.acked), len(ledger.acked) * PAD >> 20, longest))
    got = {r[0] for r in cluster.sql("SELECT id FROM ledger")}
    assert set(ledger.acked) <= got
    for n in ("sk1", "sk2"):
        st = sk_tl(cluster, n)
        assert st["wal_bytes"] <= LIMIT and not st["failed"], st

    # Three more segments with the pageserver stopped: nobody removes them,
    # so the closed segments sk3 gets are on sk1 and sk2 too.  First the
    # live ones make room (the pageserver catches up, uploads, they remove)
    # down to two segments: three segments of ledger WAL (a little more than
    # 3 * SEG with the records' headers) then need at most six, the bound,
    # wherever in its segment the WAL stood; from three they could need a
    # seventh and stall.
    wait_until(lambda: all(sk_tl(cluster, n)["wal_bytes"] <= 2 * SEG for n in ("sk1", "sk2")),
               180, "sk1 and sk2 to remove WAL down to two segments")
    cluster.stop("pageserver")
    more = Ledger(cluster, 3 * SEG // PAD, first=ledger.count)
    more.start()
    more.wait(STALL_S, 300)
    # sk3 comes back and catches up (from the compute's pg_wal here: it
    # keeps 1 GB); what it holds equals the others' byte for byte.
    cluster.start("sk3")
    target = max(lsn_to_int(sk_tl(cluster, n)["commit_lsn"]) for n in ("sk1", "sk2"))
    wait_until(lambda: flush_lsn(cluster, "sk3") >= target, 300, "sk3 to catch up")
    assert target > sk3_flush + 4 * LIMIT - 2 * SEG
    common = set(closed_segments(cluster, "sk3"))
    for n in ("sk1", "sk2"):
        common &= set(closed_segments(cluster, n))
    common = sorted(s for s in common if seg_lsn(s) + SEG <= target)
    assert len(common) >= 3, (closed_segments(cluster, "sk3"), closed_segments(cluster, "sk1"))
    for s in common:
        mine = read(os.path.join(local_dir(cluster, "sk3"), s))
        for n in ("sk1", "sk2"):
            assert read(os.path.join(local_dir(cluster, n), s)) == mine, (s, n)
    stored = set(store_segments(root, cluster))
    in_store = [s for s in common if s in stored]
    for s in in_store:
        assert read(os.path.join(store_dir(root, cluster), s)) == \
            read(os.path.join(local_dir(cluster, "sk3"), s)), s
    print("sk3: %d closed segments equal to sk1's and sk2's (%d also to the store's)"
          % (len(common), len(in_store)))
    cluster.start("pageserver")
    got = {r[0] for r in cluster.sql("SELECT id FROM ledger")}
    assert set(ledger.acked) | set(more.acked) <= got


def block_pageserver_uploads(root, cluster):
    """The pageserver's data/ in the store becomes a plain file: its PUTs
    fail (ENOTDIR) and remote_consistent_lsn stops, while the safekeepers'
    wal/ beside it works.  Returns a function that undoes it."""
    tenant, timeline = cluster.ids()
    data = os.path.join(root, "tenants", tenant, "timelines", timeline, "data")
    os.rename(data, data + ".away")
    with open(data, "w") as f:
        f.write("not a directory\n")

    def unblock():
        os.unlink(data)
        os.rename(data + ".away", data)
    return unblock


def ps_positions(cluster):
    st = cluster.status()["pageserver"]
    return (lsn_to_int(st["disk_consistent_lsn"] or "0/0"),
            lsn_to_int(st["remote_consistent_lsn"] or "0/0"))


def safekeepers_without_backup(cluster):
    """Restarts the safekeepers without --remote (the pageserver keeps its
    own): each daemon's --remote is separate, and without the backup only
    the pageserver's positions hold their WAL."""
    path = os.path.join(cluster.dir, "cluster.json")
    with open(path) as f:
        state = json.load(f)
    state.pop("remote", None)
    with open(path, "w") as f:
        json.dump(state, f)
    for n in NAMES:
        cluster.stop(n)
        cluster.start(n)
        assert sk_tl(cluster, n)["wal_backup"] is None


def test_replaced_safekeeper_keeps_wal_above_the_remote_consistent_lsn(store):
    cluster, root = store
    cluster.up("--remote", "file://" + root)
    safekeepers_without_backup(cluster)
    cluster.sql("CREATE TABLE t (id int, pad text)")
    cluster.sql("INSERT INTO t SELECT g, repeat('a', 1000) FROM generate_series(1, 10000) g")
    wait_until(lambda: ps_positions(cluster)[1] > 0, 120, "a first upload")
    unblock = block_pageserver_uploads(root, cluster)
    try:
        for _ in range(6):
            cluster.sql("INSERT INTO t SELECT g, repeat('b', 1000) FROM generate_series(1, 10000) g")
        remote = ps_positions(cluster)[1]
        wait_until(lambda: ps_positions(cluster)[0] > remote + 3 * SEG, 180,
                   "the pageserver's disk_consistent_lsn to pass its frozen remote one")
        assert ps_positions(cluster)[1] == remote, "uploads were not blocked"
        # The survivors keep the WAL above the remote position.
        for n in ("sk1", "sk3"):
            assert seg_lsn(local_segments(cluster, n)[0]) <= remote, (n, local_segments(cluster, n)[:2])

        # No compute: nobody relays the pageserver's positions to the new
        # node, which then has only what the seed gave it.
        cluster.stop("compute")
        os.kill(cluster.safekeeper("sk2")["pid"], 9)
        shutil.rmtree(cluster.safekeeper_datadir("sk2"))
        proc = cluster.run("safekeeper", "replace", "sk2", timeout=300)
        assert "caught up" in proc.stdout, proc.stdout
        time.sleep(5)  # several housekeeping rounds
        assert ps_positions(cluster)[1] == remote
        first = local_segments(cluster, "sk2")[0]
        assert seg_lsn(first) <= remote, (
            "the new safekeeper removed WAL above the pageserver's remote_consistent_lsn %X: its "
            "oldest segment is %s" % (remote, first))
        st = sk_tl(cluster, "sk2")
        assert lsn_to_int(st["pageserver_feedback"]["remote_consistent_lsn"]) >= remote, st
    finally:
        unblock()
    # Uploads again: the new node removes its WAL as the others do.
    cluster.start("compute")
    cluster.sql("INSERT INTO t SELECT g, repeat('d', 1000) FROM generate_series(1, 10000) g")
    wait_until(lambda: ps_positions(cluster)[1] > remote + 2 * SEG, 180, "uploads to resume")
    wait_until(lambda: seg_lsn(local_segments(cluster, "sk2")[0]) > remote, 120,
               "the new safekeeper to remove WAL below the new remote position")


def test_wal_backup_objects_stay_bounded(store):
    cluster, root = store
    cluster.env["SAFEKEEPER_WAL_BACKUP_DELAY_MS"] = "500"
    cluster.up("--remote", "file://" + root)
    cluster.sql("CREATE TABLE t (id int, pad text)")
    counts = []
    start_remote = ps_positions(cluster)[1]
    for _ in range(8):
        for _ in range(2):
            cluster.sql("INSERT INTO t SELECT g, repeat('e', 1000) FROM generate_series(1, 10000) g")
        counts.append(len(store_segments(root, cluster)))
    commit = lsn_to_int(sk_tl(cluster, "sk1")["commit_lsn"])
    wait_until(lambda: ps_positions(cluster)[1] >= commit - SEG, 180,
               "the pageserver to upload what was written")
    written = (commit - start_remote) // SEG

    def bounded():
        counts.append(len(store_segments(root, cluster)))
        return counts[-1] <= 4

    try:
        wait_until(bounded, 60, "the WAL backup to delete what no one needs")
    except AssertionError as e:
        raise AssertionError("%s: %d segments written, wal/ objects seen: %s"
                             % (e, written, counts[:8] + counts[-1:]))
    remote = ps_positions(cluster)[1]
    stored = store_segments(root, cluster)
    print("%d segments written, wal/ objects seen: %s" % (written, counts))
    assert written >= 8, written
    # Nothing a pageserver restored from its newest manifest needs is gone.
    assert stored and seg_lsn(stored[0]) <= remote, (stored, hex(remote))
    deleted = sum(sk_tl(cluster, n)["wal_backup"]["segments_deleted"] for n in NAMES)
    assert deleted >= written - 4, deleted
    # The first member deletes; the others do not.
    assert sk_tl(cluster, "sk2")["wal_backup"]["segments_deleted"] == 0
    assert sk_tl(cluster, "sk3")["wal_backup"]["segments_deleted"] == 0


def test_returning_safekeeper_catches_up_from_the_backup(store):
    """sk3 is down while its peers remove the WAL it lacks (it is in the
    backup) and the compute is replaced (the new one holds WAL from its
    basebackup on only): started again, sk3 reads the gap from the store
    after the walproposer elects it, then takes the stream, with no
    `replace`.  Its segments equal the others' and the store's."""
    cluster, root = store
    cluster.env["SAFEKEEPER_WAL_BACKUP_DELAY_MS"] = "500"
    cluster.up("--remote", "file://" + root)
    cluster.sql("CREATE TABLE ledger (id int PRIMARY KEY, pad text)")
    ledger = []

    def write(n):
        for _ in range(n):
            base = len(ledger)
            cluster.sql("INSERT INTO ledger SELECT g, repeat('x', 1000) "
                        "FROM generate_series(%d, %d) g" % (base, base + 9999))
            ledger.extend(range(base, base + 10000))

    write(1)
    cluster.stop("sk3", immediate=True)
    sk3_end = lsn_to_int(sk_tl(cluster, "sk1")["commit_lsn"])
    write(6)

    def peers_removed():
        return all(seg_lsn(local_segments(cluster, n)[0]) > sk3_end + SEG for n in ("sk1", "sk2"))

    wait_until(peers_removed, 180, "sk1 and sk2 to remove WAL sk3 never had")
    cluster.stop("compute")
    cluster.start("compute")
    write(3)  # the new compute's own WAL passes the store's end
    # What the store holds past sk3's end now (sk3's return lets the first
    # member delete it soon after).
    stored = {}
    for name in store_segments(root, cluster):
        if seg_lsn(name) > sk3_end:
            stored[name] = read(os.path.join(store_dir(root, cluster), name))
    # The pageserver stops: nobody removes WAL (or deletes it from the
    # store) while sk3 catches up, so what sk3 gets is on a peer too.
    cluster.stop("pageserver")
    cluster.start("sk3")
    target = max(lsn_to_int(sk_tl(cluster, n)["commit_lsn"]) for n in ("sk1", "sk2"))
    wait_until(lambda: flush_lsn(cluster, "sk3") >= target, 180,
               "sk3 to catch up (from %X to %X)" % (sk3_end, target))
    # Its closed segments now (it removes old ones as the others do).
    mine = {}
    for name in closed_segments(cluster, "sk3"):
        try:
            mine[name] = read(os.path.join(local_dir(cluster, "sk3"), name))
        except FileNotFoundError:
            pass
    with open(os.path.join(cluster.dir, "sk3.log"), errors="replace") as f:
        assert "caught up from the WAL backup" in f.read()
    from_store = sorted(s for s in mine if s in stored)
    assert len(from_store) >= 3, (sorted(mine), sorted(stored))
    for s in from_store:
        assert stored[s] == mine[s], s
    compared = 0
    for s in sorted(mine):
        for n in ("sk1", "sk2"):
            try:
                theirs = read(os.path.join(local_dir(cluster, n), s))
            except FileNotFoundError:
                continue
            assert theirs == mine[s], (s, n)
            compared += 1
    assert compared >= 2, (sorted(mine), closed_segments(cluster, "sk1"))
    print("sk3: %d segments equal to the store's, %d comparisons with a peer"
          % (len(from_store), compared))
    cluster.start("pageserver")
    write(1)  # and it takes part in commits
    target = max(lsn_to_int(sk_tl(cluster, n)["commit_lsn"]) for n in ("sk1", "sk2"))
    wait_until(lambda: flush_lsn(cluster, "sk3") >= target, 60, "sk3 to follow the stream")
    assert cluster.sql("SELECT count(*) FROM ledger")[0][0] == len(ledger)
