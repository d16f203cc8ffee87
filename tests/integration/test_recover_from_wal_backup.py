"""
`strata safekeeper recover` when the WAL backup and the pageserver saw more
of the lost history than the survivor (issue 27, item 2; docs/design.md
§4.10; review reliability-4470d5a finding 2).

Both tests: a `strata up` cluster (file:// store at D/remote) under pgbench,
a ledger of acknowledged rows and a stream of WAL messages.  sk1 is
SIGSTOPped; sk2 and sk3 commit on and back up closed segments until the
backup is at least two segments past sk1's flush.  Then sk2 and sk3 are
killed (-9) and their directories deleted, the compute is killed, sk1 is
SIGCONTed and `strata safekeeper recover --from sk1 --confirm` runs.

  - pageserver behind: it is SIGSTOPped too, some segments after sk1, and
    the backup runs on two segments past it.  recover seeds sk1 and the new
    nodes with sk1's WAL plus the backed-up segments, and quarantines the
    wal/ objects past the seed end.  A fresh compute then holds every
    ledger row acknowledged within the backed-up segments, amcheck is clean,
    the pgbench balances agree, and once the new history has closed more
    segments every wal/ object past the seed end is the new history's, byte
    for byte (the lost ones are under wal-lost-history/).
  - pageserver ahead: it streams on to the newest commit, past anything
    the backup holds (the partial segment is never in it; the load stops a
    moment before the loss, with the commit well inside a segment, so that
    no segment closes in between).  recover refuses,
    naming the pageserver's position and the seed end, and changes nothing.
  - pageserver lost: it uploads a manifest past every closed segment and is
    killed with its directory deleted; recover refuses, naming the manifest.

On the code before (4470d5a) the first test failed on the rows: recover
copied sk1's WAL to its flush only, the new history started there, and
2548 of 2661 rows acknowledged in the backed-up segments were gone; the other
two failed because recover went ahead.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time

import psycopg

from conftest import STOCK_PG_BINDIR, int_to_lsn, lsn_to_int, wait_until
from test_durability import check_pgbench_and_ledger, create_ledger, pgbench_init

SEG = 16 << 20
# Small enough that a record crossing the backup's end costs little.
EMIT = "SELECT pg_logical_emit_message(true, 'recover', repeat('x', 200000))"
# Bytes below the backup's end that any record crossing it may take.
CROSSING = 1 << 20


class LsnLedger(threading.Thread):
    """One row per transaction; `acked` holds (id, lsn) of each whose COMMIT
    returned, lsn read right after the commit (at or past its record's end)."""

    def __init__(self, connstr):
        super().__init__(daemon=True)
        self.connstr = connstr
        self.stop_event = threading.Event()
        self.acked = []

    def run(self):
        try:
            with psycopg.connect(self.connstr, autocommit=True, connect_timeout=10,
                                 options="-c statement_timeout=0") as conn:
                n = 0
                while not self.stop_event.is_set():
                    n += 1
                    row = conn.execute("insert into ledger (payload) values (%s) returning id",
                                       ("row %d" % n,)).fetchone()[0]
                    lsn = conn.execute("select pg_current_wal_insert_lsn()").fetchone()[0]
                    self.acked.append((row, lsn_to_int(str(lsn))))
        except Exception:  # the cluster is killed under us
            pass


class Emitter(threading.Thread):
    """WAL messages while `active` is set, so that segments close quickly."""

    def __init__(self, connstr):
        super().__init__(daemon=True)
        self.connstr = connstr
        self.stop_event = threading.Event()
        self.active = threading.Event()

    def run(self):
        try:
            with psycopg.connect(self.connstr, autocommit=True, connect_timeout=10,
                                 options="-c statement_timeout=0") as conn:
                while not self.stop_event.is_set():
                    if self.active.wait(0.2):
                        conn.execute(EMIT)
        except Exception:
            pass


def status_of(c, name):
    st = c.status()
    if name == "pageserver":
        return st["pageserver"]
    return next(sk for sk in st["safekeepers"] if sk["name"] == name)


def lsn_of(c, name, key):
    v = status_of(c, name).get(key)
    return lsn_to_int(v) if v else 0


def wal_dir(c, sub="wal"):
    tenant, timeline = c.ids()
    return os.path.join(c.dir, "remote", "tenants", tenant, "timelines", timeline, sub)


def objects(c, sub="wal"):
    d = wal_dir(c, sub)
    return sorted(n for n in os.listdir(d) if len(n) == 24) if os.path.isdir(d) else []


def seg_end(name):
    return ((int(name[8:16], 16) << 32) | (int(name[16:24], 16) * SEG)) + SEG


class Loss:
    """The load, the stopped processes, and what was seen before the loss."""

    def __init__(self, c):
        self.c = c
        self.stopped = []
        self.threads = []
        self.bench = None

    def sigstop(self, name):
        pid = status_of(self.c, name)["pid"]
        os.kill(pid, signal.SIGSTOP)
        self.stopped.append(pid)

    def resume_all(self):
        for pid in self.stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.stopped = []

    def start_load(self):
        c = self.c
        create_ledger(c)
        pgbench_init(c, scale=1)
        # Output discarded: a full pipe would stall it.
        self.bench = subprocess.Popen(
            [os.path.join(STOCK_PG_BINDIR, "pgbench"), "-c", "2", "-T", "600", c.connstr],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.ledger = LsnLedger(c.connstr)
        self.emitter = Emitter(c.connstr)
        self.threads = [self.ledger, self.emitter]
        for t in self.threads:
            t.start()
        wait_until(lambda: len(self.ledger.acked) > 50, 120, "the ledger to commit 50 rows")

    def backup_past(self, lsn, what):
        want = (lsn // SEG + 3) * SEG
        self.emitter.active.set()
        wait_until(lambda: lsn_of(self.c, "sk2", "wal_backup_lsn") >= want, 300,
                   "the WAL backup to reach %s (%s)" % (int_to_lsn(want), what), interval=0.5)
        self.emitter.active.clear()

    def quiesce(self):
        """Stops the load once the commit lies well inside a segment, so
        that no segment closes before the loss."""
        def inside():
            commit = lsn_of(self.c, "sk2", "commit_lsn")
            return CROSSING < commit % SEG < SEG - 8 * CROSSING
        wait_until(inside, 300, "the commit to lie well inside a segment", interval=0.1)
        self.stop_load()

    def pageserver_caught_up(self):
        """The pageserver has ingested what sk2 committed, inside a segment:
        it is past every closed segment."""
        commit = lsn_of(self.c, "sk2", "commit_lsn")
        return lsn_of(self.c, "pageserver", "last_record_lsn") >= commit

    def manifest_past_closed_segments(self):
        commit = lsn_of(self.c, "sk2", "commit_lsn")
        ps = status_of(self.c, "pageserver")
        return lsn_to_int(ps.get("remote_consistent_lsn") or "0/0") > commit // SEG * SEG

    def stop_load(self):
        for t in self.threads:
            t.stop_event.set()
        self.bench.kill()
        self.bench.wait()
        for t in self.threads:
            t.join(30)

    def lose_two(self):
        """kill -9 sk2, sk3 and the compute, delete the two directories;
        returns sk2's backup LSN as last seen."""
        c = self.c
        backup = lsn_of(c, "sk2", "wal_backup_lsn")
        for name in ("sk2", "sk3", "compute"):
            c.stop(name, immediate=True)
        for name in ("sk2", "sk3"):
            shutil.rmtree(os.path.join(c.dir, name))
        self.stop_load()
        return backup


def run_loss(c, pageserver):
    """Up to the moment after the loss, with every process running again.
    pageserver: "behind" (stopped past sk1's flush, the backup runs on),
    "ahead" (caught up with the commits), "lost" (ahead, with a manifest past
    every closed segment, then killed and its directory deleted).
    Returns (loss, sk1's flush before its stop, backup LSN at the loss)."""
    c.env["SAFEKEEPER_WAL_BACKUP_DELAY_MS"] = "300"
    c.up()
    loss = Loss(c)
    try:
        loss.start_load()
        flush = lsn_of(c, "sk1", "flush_lsn")
        loss.sigstop("sk1")
        if pageserver == "behind":
            loss.emitter.active.set()
            wait_until(lambda: lsn_of(c, "pageserver", "last_record_lsn") > flush + SEG, 300,
                       "the pageserver to ingest past sk1's flush")
            ingested = lsn_of(c, "pageserver", "last_record_lsn")
            loss.sigstop("pageserver")
            # Past what the pageserver ingested, and what a socket may still
            # hold for it, by two segments.
            loss.backup_past(ingested + SEG // 2, "two segments past the pageserver")
        else:
            loss.backup_past(flush, "two segments past sk1's flush")
            loss.quiesce()
            wait_until(loss.pageserver_caught_up, 300, "the pageserver to catch up")
        if pageserver == "lost":
            wait_until(loss.manifest_past_closed_segments, 300,
                       "a manifest past every closed segment")
            c.stop("pageserver", immediate=True)
            shutil.rmtree(os.path.join(c.dir, "pageserver"))
        backup = loss.lose_two()
    finally:
        loss.resume_all()
    # sk1, running again, first reads what its socket still held from the
    # dead compute; the tests compare its state before and after recover.
    settled = []

    def sk1_settled():
        settled.append(lsn_of(c, "sk1", "flush_lsn"))
        return len(settled) >= 3 and settled[-1] == settled[-3]

    wait_until(sk1_settled, 60, "sk1's flush to settle", interval=0.5)
    return loss, flush, backup


def test_recover_seeds_from_the_wal_backup_and_quarantines_the_rest(cluster_dir):
    c = cluster_dir
    loss, flush, backup = run_loss(c, "behind")
    ps_lsn = lsn_of(c, "pageserver", "last_record_lsn")
    assert ps_lsn > flush and backup >= flush + 2 * SEG, (int_to_lsn(ps_lsn), int_to_lsn(backup))

    proc = c.run("safekeeper", "recover", "--from", "sk1", "--confirm", timeout=300, check=False)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"the timeline's WAL is sk1's, up to (\S+);", proc.stdout)
    seed_end = lsn_to_int(m.group(1))
    lost, kept = objects(c, "wal-lost-history"), objects(c)

    # Every row acknowledged within the backed-up segments is there, whatever
    # recover says about itself (a record may cross the backup's end).
    c.start("compute")
    present = {row[0] for row in c.sql("select id from ledger")}
    bound = backup - CROSSING
    checked = [(row, lsn) for row, lsn in loss.ledger.acked if lsn <= bound]
    beyond = [(row, lsn) for row, lsn in loss.ledger.acked if lsn > bound]
    assert any(lsn > flush + SEG for _row, lsn in checked), "rows in the backed-up segments"
    missing = [row for row, _lsn in checked if row not in present]
    assert not missing, "%d of %d acknowledged rows below %s lost, e.g. %s (recover seeded to %s)" % (
        len(missing), len(checked), int_to_lsn(bound), missing[:5], int_to_lsn(seed_end))
    assert bound <= seed_end and ps_lsn <= seed_end, (int_to_lsn(seed_end), int_to_lsn(backup))
    for name in ("sk1", "sk2", "sk3"):
        assert lsn_of(c, name, "commit_lsn") >= seed_end, name

    # Every wal/ object past the seed end was moved aside; none was left.
    assert lost and all(seg_end(n) > seed_end for n in lost), lost
    assert all(seg_end(n) <= seed_end for n in kept), kept

    check_pgbench_and_ledger(c)

    # The new history closes the seed end's segment and more: what the
    # backup then holds past the seed end is the new history, byte for byte.
    with c.connect() as conn:
        for _ in range(int(2.5 * SEG / 200000)):
            conn.execute(EMIT)
    want = (seed_end // SEG + 2) * SEG
    wait_until(lambda: lsn_of(c, "sk1", "wal_backup_lsn") >= want, 180,
               "the new history to be backed up to %s" % int_to_lsn(want), interval=0.5)
    tenant, timeline = c.ids()
    local = os.path.join(c.dir, "sk1", tenant, timeline)
    newer = [n for n in objects(c) if seg_end(n) > seed_end]
    assert newer, objects(c)
    for n in newer:
        with open(os.path.join(wal_dir(c), n), "rb") as a, open(os.path.join(local, n), "rb") as b:
            assert a.read() == b.read(), "wal/%s is not the new history's" % n
    print("seeded to %s (sk1 flushed %s, backup %s, pageserver %s); %d rows checked, %d of %d "
          "later ones kept; %d objects quarantined" % (
              int_to_lsn(seed_end), int_to_lsn(flush), int_to_lsn(backup), int_to_lsn(ps_lsn),
              len(checked), sum(1 for r, _l in beyond if r in present), len(beyond), len(lost)))


def assert_backup_untouched(c, before, flush):
    """Recover moved nothing: every object of before past the survivor's
    flush is still in wal/, and none was quarantined.  (The survivor, the
    first member, may meanwhile delete objects below its own WAL that no
    one needs: design §5.5.)"""
    now = set(objects(c))
    kept = [n for n in before if seg_end(n) > flush]
    assert kept and set(kept) <= now, (kept, sorted(now))
    assert not objects(c, "wal-lost-history")


def test_recover_refuses_while_the_pageserver_is_past_the_seed(cluster_dir):
    c = cluster_dir
    _loss, flush, backup = run_loss(c, "ahead")
    ps_lsn = lsn_of(c, "pageserver", "last_record_lsn")
    sk1_before = status_of(c, "sk1")
    before = objects(c)
    assert ps_lsn > backup, "the pageserver is past every closed segment"

    proc = c.run("safekeeper", "recover", "--from", "sk1", "--confirm", timeout=300, check=False)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 1, proc.stdout
    assert "the pageserver has ingested the timeline to" in proc.stderr, proc.stderr
    assert "past the end of the WAL recover can seed" in proc.stderr, proc.stderr
    assert "restore the pageserver to a state at or below" in proc.stderr, proc.stderr
    # Nothing changed: no new node, sk1 as it was, the backup untouched.
    assert not os.path.exists(os.path.join(c.dir, "sk2"))
    after = status_of(c, "sk1")
    assert after["flush_lsn"] == sk1_before["flush_lsn"] and after["pid"] == sk1_before["pid"]
    assert_backup_untouched(c, before, flush)
    assert lsn_to_int(after["flush_lsn"]) < flush + SEG


def newest_manifest_lsn(c):
    tenant, timeline = c.ids()
    d = os.path.join(c.dir, "remote", "tenants", tenant, "timelines", timeline, "manifest")
    with open(os.path.join(d, max(n for n in os.listdir(d) if n.endswith(".json")))) as f:
        return lsn_to_int(json.load(f)["consistent_lsn"])


def test_recover_refuses_while_the_newest_manifest_is_past_the_seed(cluster_dir):
    """The pageserver is lost too, after it uploaded a manifest past every
    closed segment: a pageserver restored from it would be ahead."""
    c = cluster_dir
    _loss, flush, backup = run_loss(c, "lost")
    closed = max(seg_end(n) for n in objects(c))
    manifest = newest_manifest_lsn(c)
    assert manifest > closed, (int_to_lsn(manifest), int_to_lsn(closed))
    before = objects(c)

    proc = c.run("safekeeper", "recover", "--from", "sk1", "--confirm", timeout=300, check=False)
    print(proc.stdout, proc.stderr)
    assert proc.returncode == 1, proc.stdout
    assert "the newest manifest in the object store" in proc.stderr, proc.stderr
    assert "past the end of the WAL recover can seed" in proc.stderr, proc.stderr
    assert not os.path.exists(os.path.join(c.dir, "sk2"))
    assert_backup_untouched(c, before, flush)
    assert lsn_of(c, "sk1", "flush_lsn") < flush + SEG
