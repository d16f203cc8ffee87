"""Quorum durability of the cluster (docs/design.md §4 and §9), end to end.

A ledger client commits rows one transaction at a time and records each
transaction it saw acknowledged (COMMIT returned).  Then:

  * every acknowledged commit record is in the WAL of at least two of the
    three safekeepers, decoded with stock pg_waldump after freezing
    everything with kill -9;
  * with one safekeeper killed pgbench goes on; with two killed a commit
    waits (at least 5 s) and returns once one of them is back;
  * after kill -9 of every process, `strata up` brings back every
    acknowledged row.
"""

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

import psycopg

from conftest import STOCK_PG_BINDIR, lsn_to_int, pid_alive, wait_until

SEGMENT_RE = re.compile(r"^([0-9A-F]{24})(\.partial)?$")
COMMIT_RE = re.compile(r"rmgr: Transaction\s+len \(rec/tot\):\s+\d+/\s*(\d+), tx:\s+(\d+), "
                       r"lsn: ([0-9A-F]+/[0-9A-F]+), .*desc: COMMIT\b")


class Ledger(threading.Thread):
    """Inserts one row per transaction until stopped; `acked` holds (id, xid)
    of every transaction whose COMMIT returned without error."""

    def __init__(self, connstr):
        super().__init__(daemon=True)
        self.connstr = connstr
        self.stop_event = threading.Event()
        self.acked = []
        self.error = None

    def run(self):
        try:
            # No statement_timeout: a cancelled wait for the safekeepers would
            # report success for a commit they may not have.
            with psycopg.connect(self.connstr, autocommit=False, connect_timeout=10,
                                 options="-c statement_timeout=0") as conn:
                n = 0
                while not self.stop_event.is_set():
                    n += 1
                    cur = conn.execute("insert into ledger (payload) values (%s) returning id",
                                       ("row %d" % n,))
                    row_id = cur.fetchone()[0]
                    xid = conn.execute("select txid_current()").fetchone()[0]
                    conn.commit()
                    self.acked.append((row_id, xid))
        except Exception as e:  # the cluster may be killed under us
            self.error = e

    def finish(self, timeout=30):
        self.stop_event.set()
        self.join(timeout)


def create_ledger(cluster):
    cluster.sql("create table ledger (id bigserial primary key, payload text not null)")


def pgbench(cluster, *args, **kwargs):
    cmd = [os.path.join(STOCK_PG_BINDIR, "pgbench")] + list(args) + [cluster.connstr]
    return subprocess.run(cmd, capture_output=True, text=True, **kwargs)


def pgbench_init(cluster, scale=2):
    proc = pgbench(cluster, "-i", "-q", "-s", str(scale), timeout=300)
    assert proc.returncode == 0, proc.stderr


def pgbench_start(cluster, seconds, clients=4):
    cmd = [os.path.join(STOCK_PG_BINDIR, "pgbench"), "-c", str(clients), "-j", "2", "-T",
           str(seconds), "-P", "1", cluster.connstr]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def pgbench_finish(proc, timeout):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, "pgbench failed (%d):\n%s\n%s" % (proc.returncode, out, err)
    processed = re.search(r"number of transactions actually processed: (\d+)", out)
    assert processed, out
    failed = re.search(r"number of failed transactions: (\d+)", out)
    assert failed is None or int(failed.group(1)) == 0, out
    return int(processed.group(1))


def check_pgbench_and_ledger(cluster):
    """amcheck over the pgbench and ledger indexes, and pgbench's balances
    equal to its history: the oracles after a loss and a rebuild."""
    with cluster.connect() as conn:
        conn.execute("create extension if not exists amcheck")
        for index in ("pgbench_accounts_pkey", "pgbench_branches_pkey", "pgbench_tellers_pkey",
                      "ledger_pkey"):
            conn.execute("select bt_index_check(%s, true)", (index,))
        total = conn.execute("select sum(abalance) - (select sum(delta) from pgbench_history) "
                             "from pgbench_accounts").fetchone()[0]
        assert total == 0, "pgbench balances and history disagree by %s" % total


def history_count(cluster):
    return cluster.sql("select count(*) from pgbench_history")[0][0]


def safekeeper_segments(cluster, name):
    """Paths of the WAL segment files a safekeeper holds (any timeline dir)."""
    found = []
    for root, _dirs, files in os.walk(cluster.safekeeper_datadir(name)):
        for f in files:
            if SEGMENT_RE.match(f):
                found.append(os.path.join(root, f))
    return sorted(found, key=os.path.basename)


def committed_xids_in_wal(cluster, name, flush_lsn):
    """xids of the COMMIT records in a safekeeper's WAL that end at or before
    flush_lsn (what it reports as durable), decoded by pg_waldump."""
    segments = safekeeper_segments(cluster, name)
    assert segments, "%s holds no WAL segment" % name
    scratch = tempfile.mkdtemp(prefix="strata-waldump-")
    try:
        for path in segments:
            # pg_waldump reads segments by their pg_wal names; drop ".partial".
            shutil.copyfile(path, os.path.join(scratch, SEGMENT_RE.match(
                os.path.basename(path)).group(1)))
        first = SEGMENT_RE.match(os.path.basename(segments[0])).group(1)
        last = SEGMENT_RE.match(os.path.basename(segments[-1])).group(1)
        proc = subprocess.run([os.path.join(STOCK_PG_BINDIR, "pg_waldump"), "-p", scratch,
                               "--rmgr=Transaction", first, last],
                              capture_output=True, text=True, timeout=120)
        # pg_waldump exits 1 at the end of valid WAL (zeros); that is expected.
        # flush_lsn is a record boundary, so start + total length <= flush_lsn
        # exactly when the whole record is below it.
        xids = {int(m.group(2)) for m in COMMIT_RE.finditer(proc.stdout)
                if lsn_to_int(m.group(3)) + int(m.group(1)) <= flush_lsn}
        assert xids, "no commit record decoded from %s: %s" % (name, proc.stderr)
        return xids
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_every_acknowledged_commit_is_on_a_majority(cluster):
    create_ledger(cluster)
    pgbench_init(cluster)
    bench = pgbench_start(cluster, seconds=15)
    ledger = Ledger(cluster.connstr)
    ledger.start()
    processed = pgbench_finish(bench, timeout=90)
    ledger.finish()
    assert ledger.error is None, ledger.error
    assert processed > 0
    assert len(ledger.acked) > 20, "the ledger barely committed: %d" % len(ledger.acked)

    # Freeze: nothing may write after this point.
    cluster.kill_everything()
    assert cluster.status()["compute"]["pid"] is None

    # Restarted alone (no proposer), each safekeeper reports what it finds
    # durable on disk; only WAL below that counts.
    for name in ("sk1", "sk2", "sk3"):
        cluster.start(name)
    flush = {sk["name"]: lsn_to_int(sk["flush_lsn"]) for sk in cluster.status()["safekeepers"]}
    per_sk = {name: committed_xids_in_wal(cluster, name, flush[name])
              for name in ("sk1", "sk2", "sk3")}
    not_on_majority = [(row, xid) for row, xid in ledger.acked
                       if sum(xid in xids for xids in per_sk.values()) < 2]
    assert not not_on_majority, (
        "%d of %d acknowledged commits are on fewer than two safekeepers, e.g. %s" % (
            len(not_on_majority), len(ledger.acked), not_on_majority[:5]))


def commit_in_thread(connstr, sql):
    """Runs sql in autocommit on a new connection in a thread; returns
    (thread, result dict with 'done' time or 'error')."""
    result = {}

    def run():
        try:
            with psycopg.connect(connstr, autocommit=True, connect_timeout=10,
                                 options="-c statement_timeout=0") as conn:
                conn.execute(sql)
            result["done"] = time.monotonic()
        except Exception as e:
            result["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result


def test_one_safekeeper_down_commits_go_on_two_down_they_wait(cluster):
    pgbench_init(cluster)
    cluster.sql("create table probe (x int)")
    bench = pgbench_start(cluster, seconds=40)
    try:
        wait_until(lambda: history_count(cluster) > 100, 30, "pgbench to get going")

        cluster.stop("sk1", immediate=True)
        before = history_count(cluster)
        wait_until(lambda: history_count(cluster) > before + 200, 20,
                   "pgbench to keep committing with sk1 down")
        assert bench.poll() is None, "pgbench stopped after losing one safekeeper"

        cluster.stop("sk2", immediate=True)
        thread, result = commit_in_thread(cluster.connstr, "insert into probe values (1)")
        thread.join(5)
        assert thread.is_alive() and not result, (
            "a commit returned with only one of three safekeepers up: %r" % result)
        stalled = history_count(cluster)

        restarted = time.monotonic()
        cluster.start("sk2")
        thread.join(60)
        assert "done" in result, "the commit did not return after sk2 came back: %r" % result
        assert result["done"] >= restarted
        wait_until(lambda: history_count(cluster) > stalled + 200, 30,
                   "pgbench to go on after sk2 came back")
        assert cluster.sql("select count(*) from probe") == [(1,)]
    finally:
        if bench.poll() is None:
            processed = pgbench_finish(bench, timeout=90)
        else:
            processed = pgbench_finish(bench, timeout=5)
    assert processed > 0


def test_kill_everything_then_up_keeps_every_acknowledged_row(cluster):
    create_ledger(cluster)
    pgbench_init(cluster, scale=1)
    bench = pgbench_start(cluster, seconds=30)
    ledger = Ledger(cluster.connstr)
    ledger.start()
    wait_until(lambda: len(ledger.acked) > 200, 60, "the ledger to commit 200 rows")

    # kill -9 every process while commits are in flight.
    status = cluster.status()
    pids = [status["compute"]["pid"]] + [sk["pid"] for sk in status["safekeepers"]]
    cluster.stop("compute", immediate=True)
    for name in ("sk1", "sk2", "sk3"):
        cluster.stop(name, immediate=True)
    cluster.kill_everything()
    assert not any(pid_alive(p) for p in pids)
    ledger.finish()
    bench.kill()
    bench.communicate()
    acked = list(ledger.acked)
    assert acked

    cluster.up()
    present = {row[0] for row in cluster.sql("select id from ledger")}
    missing = [row for row, _xid in acked if row not in present]
    assert not missing, "%d of %d acknowledged rows lost after restart, e.g. %s" % (
        len(missing), len(acked), missing[:5])
    # The cluster takes writes again.
    cluster.sql("insert into ledger (payload) values ('after restart')")
    assert cluster.sql("select count(*) from ledger where payload = 'after restart'") == [(1,)]
