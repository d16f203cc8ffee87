"""Read-only computes through the CLI (docs/operations.md, "Read-only
computes"): `strata start compute NAME --read-only [--lsn X/Y]`.

  * A static compute pinned at an old LSN L answers a set of queries exactly
    as a stock standby (Debian's PostgreSQL) stopped at L does: the oracle
    starts from a full basebackup at the timeline's start (whose synthetic
    checkpoint is the timeline's first real record), streams from a
    safekeeper and pauses at recovery_target_lsn = L.
  * A replica following the primary under pgbench answers queries, reports
    its lag (strata status --json, the safekeepers' /metrics), and never
    shows a row newer than its replay LSN: a ledger whose rows carry the
    primary's insert LSN from before their transaction is read with
    index-only scans (the visibility map: a page newer than the replay LSN
    would make rows not yet replayed visible) while the primary vacuums it,
    and a table updated in place (HOT pruning: a newer page would lose the
    row versions the replica's snapshot needs) keeps its row count.  Then,
    with its replay paused, the replica reads a table the primary meanwhile
    deleted from, inserted into and vacuumed exactly as of its replay LSN
    (this part fails when a standby reads the pageserver's latest pages).
"""
import io
import os
import re
import shutil
import signal
import subprocess
import tarfile
import threading
import time
import urllib.request

import psycopg
import pytest

from conftest import (STOCK_PG_BINDIR, as_pg_user_kwargs, chown_to_pg_user, free_port,
                      int_to_lsn, kill_hard, lsn_to_int, make_shared_dir, pageserver_built,
                      pid_alive, pg_user, wait_until)
from readonly_harness import basebackup
from test_durability import pgbench_init, pgbench_start, pgbench_finish

pytestmark = [pytest.mark.release_daemons,
              pytest.mark.skipif(not pageserver_built(), reason="pageserver not built")]


def wait_ingested(cluster, lsn):
    wait_until(lambda: lsn_to_int(cluster.status()["pageserver"]["last_record_lsn"])
               >= lsn_to_int(lsn), 60, "the pageserver to ingest %s" % lsn)


def quiesce(cluster):
    """A record end every component has: the pageserver's last record LSN
    once it ingested the primary's flushed WAL."""
    wait_ingested(cluster, cluster.sql("select pg_current_wal_flush_lsn()::text")[0][0])
    return cluster.status()["pageserver"]["last_record_lsn"]


def compute_entry(cluster, name):
    for c in cluster.status()["computes"]:
        if c["name"] == name:
            return c
    raise KeyError(name)


def query(connstr, sql, params=None, settings=()):
    with psycopg.connect(connstr, autocommit=True, connect_timeout=10) as conn:
        for s in settings:
            conn.execute(s)
        return conn.execute(sql, params).fetchall()


class StockStandby:
    """Debian's PostgreSQL on a full basebackup at the timeline's start,
    streaming from a safekeeper, paused at recovery_target_lsn."""

    def __init__(self, cluster, start_lsn, target_lsn):
        self.root = make_shared_dir("strata-stock-")
        self.datadir = os.path.join(self.root, "pgdata")
        self.log = os.path.join(self.root, "standby.log")
        self.port = free_port()
        self.proc = None
        os.mkdir(self.datadir, 0o700)
        tarfile.open(fileobj=io.BytesIO(basebackup(cluster, start_lsn, "full"))).extractall(
            self.datadir)
        conninfo = cluster.safekeeper_connstr("sk2").replace("'", "''")
        with open(os.path.join(self.datadir, "postgresql.conf"), "w") as f:
            f.write("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = ''\n"
                    "hot_standby = on\nfsync = off\nmax_wal_senders = 10\n"
                    "primary_conninfo = '%s'\nrecovery_target_lsn = '%s'\n"
                    "recovery_target_action = 'pause'\n" % (self.port, conninfo, target_lsn))
        with open(os.path.join(self.datadir, "pg_hba.conf"), "w") as f:
            f.write("host all all 127.0.0.1/32 trust\n")
        open(os.path.join(self.datadir, "standby.signal"), "w").close()
        chown_to_pg_user(self.root)

    @property
    def connstr(self):
        return "host=127.0.0.1 port=%d user=%s dbname=postgres" % (self.port, pg_user())

    def start(self, target):
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen([os.path.join(STOCK_PG_BINDIR, "postgres"), "-D",
                                      self.datadir], stdout=logf, stderr=subprocess.STDOUT,
                                     start_new_session=True, **as_pg_user_kwargs())
        logf.close()

        def paused():
            assert self.proc.poll() is None, "the stock standby exited:\n" + self.log_text()
            try:
                (state, lsn), = query(self.connstr, "select pg_get_wal_replay_pause_state(), "
                                      "pg_last_wal_replay_lsn()::text")
            except psycopg.OperationalError:
                return False
            return state == "paused" and lsn_to_int(lsn) >= lsn_to_int(target)
        wait_until(paused, 60, "the stock standby to pause at %s" % target)

    def log_text(self):
        with open(self.log, errors="replace") as f:
            return f.read()[-4000:]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None:
            kill_hard([p for p in (self.proc.pid,) if pid_alive(p)])
            self.proc.wait(10)
        shutil.rmtree(self.root, ignore_errors=True)


ORACLE_QUERIES = [
    "select count(*), sum(hashtext(v)), min(id), max(id) from ora_t",
    "select md5(string_agg(id::text || ':' || v, ',' order by id)) from ora_t",
    "select count(*) from ora_t where v like 'upd%'",
    "select relname, relkind from pg_class where relnamespace = 'public'::regnamespace "
    "order by relname",
    "select count(*), sum(b) from ora_u",
    "select last_value from ora_seq",
    "select id, v from ora_t where id between 1000 and 1010 order by id",
]


def test_static_compute_matches_a_stock_standby_paused_at_its_lsn(cluster):
    start = cluster.http_get_json(cluster.status()["pageserver"]["http_port"],
                                  "/v1/tenant/%s/timeline/%s" % cluster.ids())["start_lsn"]
    cluster.sql("create table ora_t (id int primary key, v text)")
    cluster.sql("insert into ora_t select g, md5(g::text) from generate_series(1, 5000) g")
    cluster.sql("create index ora_t_v on ora_t (v)")
    cluster.sql("create sequence ora_seq; select nextval('ora_seq') from generate_series(1, 7)")
    cluster.sql("update ora_t set v = 'upd' || id where id % 5 = 0")
    cluster.sql("create table ora_u as select g as a, g * 2 as b from generate_series(1, 300) g")
    lsn = quiesce(cluster)
    # After L: every kind of change the pinned compute must not see.
    cluster.sql("update ora_t set v = 'late' where id % 3 = 0")
    cluster.sql("delete from ora_t where id > 4500")
    cluster.sql("insert into ora_t select g, 'new' from generate_series(6000, 6500) g")
    cluster.sql("drop table ora_u")
    cluster.sql("create table ora_late (x int)")
    cluster.sql("select nextval('ora_seq') from generate_series(1, 100)")
    cluster.sql("vacuum ora_t")
    quiesce(cluster)

    cluster.run("start", "compute", "snap", "--read-only", "--lsn", lsn)
    snap = compute_entry(cluster, "snap")
    assert snap["read_only"] and snap["lsn"] == lsn and snap["lag_bytes"] is None, snap
    oracle = StockStandby(cluster, start, lsn)
    try:
        oracle.start(lsn)
        for q in ORACLE_QUERIES:
            for settings in ((), ("set enable_seqscan = off",)):
                got = query(snap["connstr"], q, settings=settings)
                want = query(oracle.connstr, q, settings=settings)
                assert got == want, (q, settings, got, want)
        # The primary moved on; the pinned compute did not.
        assert query(snap["connstr"], "select pg_is_in_recovery()") == [(True,)]
        assert cluster.sql("select count(*) from ora_t where v = 'late'")[0][0] > 0
    finally:
        oracle.stop()
        cluster.run("stop", "compute", "snap")


def test_read_only_start_errors(cluster):
    bad = cluster.run("start", "compute", "snapx", "--read-only", "--lsn", "0/10", check=False)
    assert bad.returncode != 0 and "is before the timeline's start" in bad.stderr + bad.stdout, \
        bad.stderr
    bad = cluster.run("start", "compute", "snapy", "--read-only", "--lsn", "0/1000001",
                      check=False)
    assert bad.returncode != 0 and "not a record boundary" in bad.stderr + bad.stdout, bad.stderr


def metric(cluster, sk, name, app):
    port = cluster.safekeeper(sk)["http_port"]
    req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port, headers=cluster.bearer())
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode()
    m = re.search(r'^%s\{[^}]*application_name="%s"[^}]*\} (\S+)$' % (name, app), text, re.M)
    return None if m is None else float(m.group(1))


class Ledger:
    """Inserts ledger rows on the primary, each carrying the primary's WAL
    insert LSN read inside its own transaction before the insert: its commit
    ends after that LSN.  Vacuums now and then (the visibility map)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.before = {}  # id -> LSN before its transaction (int)
        self.stop = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        try:
            with self.cluster.connect() as conn:
                k = 0
                while not self.stop.is_set():
                    k += 1
                    with conn.transaction():
                        (lsn,), = conn.execute("select pg_current_wal_insert_lsn()::text")
                        self.before[k] = lsn_to_int(lsn)
                        conn.execute("insert into ledger values (%s, %s::pg_lsn)", (k, lsn))
                    conn.execute("update counters set v = v + 1 where id = %s", (k % 50,))
                    if k % 200 == 0:
                        conn.execute("vacuum ledger")
        except Exception as e:  # reported by the test
            self.error = e


def test_replica_under_pgbench_never_sees_past_its_replay_lsn(cluster):
    pgbench_init(cluster, scale=1)
    cluster.sql("create table ledger (id int primary key, before pg_lsn not null)")
    cluster.sql("create table counters (id int primary key, v bigint) with (fillfactor = 50)")
    cluster.sql("insert into counters select g, 0 from generate_series(0, 49) g")
    cluster.sql("vacuum ledger")
    quiesce(cluster)
    # Small buffers: the pages the replica replayed leave them (below), so
    # that its later reads go to the pageserver.
    cluster.env["STRATA_COMPUTE_SETTINGS"] = "shared_buffers=4MB"
    cluster.run("start", "compute", "rep", "--read-only")
    assert query(compute_entry(cluster, "rep")["connstr"], "show shared_buffers") == [("4MB",)]
    rep = compute_entry(cluster, "rep")
    assert rep["read_only"] and rep["lsn"] is not None, rep

    ledger = Ledger(cluster)
    ledger.thread.start()
    bench = pgbench_start(cluster, 25, clients=2)
    checks = lags = 0
    seen_max = 0
    deadline = time.monotonic() + 25
    try:
        with psycopg.connect(rep["connstr"], autocommit=True, connect_timeout=10) as conn:
            conn.execute("set enable_seqscan = off")
            conn.execute("set enable_bitmapscan = off")
            while time.monotonic() < deadline:
                try:
                    (top,), = conn.execute("select max(id) from ledger").fetchall()
                    (n,), = conn.execute("select count(*) from counters").fetchall()
                    (n_io,), = conn.execute("select count(id) from ledger").fetchall()
                    (replay,), = conn.execute("select pg_last_wal_replay_lsn()::text").fetchall()
                except psycopg.errors.SerializationFailure:
                    continue  # a query cancelled by a recovery conflict: allowed
                replay = lsn_to_int(replay)
                assert n == 50, "the replica lost rows of counters: %d" % n
                if top is not None:
                    seen_max = max(seen_max, top)
                    # Row `top` is visible: its transaction began before its
                    # `before` LSN and committed by the replay LSN.
                    assert ledger.before[top] < replay, (
                        "row %d is visible but its transaction began at %s, not before the "
                        "replay LSN %s" % (top, int_to_lsn(ledger.before[top]), int_to_lsn(replay)))
                    assert n_io >= top, (n_io, top)  # ids 1..top all committed in order
                checks += 1
                entry = compute_entry(cluster, "rep") if checks % 20 == 0 else None
                if entry is not None and entry["lag_bytes"] is not None:
                    lags += 1
        processed = pgbench_finish(bench, 60)
    finally:
        ledger.stop.set()
        ledger.thread.join(30)
        if bench.poll() is None:
            bench.kill()
    assert ledger.error is None, ledger.error
    assert processed > 0 and checks > 20 and seen_max > 100, (processed, checks, seen_max)
    assert lags > 0, "strata status never reported the replica's lag"
    # Once the load stops the replica catches up: lag 0 in status and in
    # the safekeepers' series, and every ledger row is there.
    end = quiesce(cluster)
    wait_until(lambda: compute_entry(cluster, "rep")["lag_bytes"] == 0 and
               lsn_to_int(compute_entry(cluster, "rep")["lsn"]) >= lsn_to_int(end), 60,
               "the replica to catch up")
    assert query(rep["connstr"], "select count(*) from ledger") == \
        cluster.sql("select count(*) from ledger")
    wait_until(lambda: any(metric(cluster, sk, "safekeeper_standby_replay_lag_bytes", "rep") == 0
                           for sk in ("sk1", "sk2", "sk3")), 30,
               "a safekeeper to export the replica's lag as 0")
    paused_replica_reads_at_its_replay_lsn(cluster, rep["connstr"])
    cluster.run("stop", "compute", "rep")


def replica_replayed(connstr, lsn):
    return lsn_to_int(query(connstr, "select pg_last_wal_replay_lsn()::text")[0][0]) >= \
        lsn_to_int(lsn)


FROZEN_COUNTS = ("select count(*) from frozen_t",  # a sequential scan
                 "select count(id), max(id) from frozen_t where id > 0")  # index-only


def paused_replica_reads_at_its_replay_lsn(cluster, connstr):
    """With its replay paused, the replica's reads stay at its replay LSN
    while the primary deletes, inserts and vacuums (the pages it reads for
    the first time then exist at the pageserver only in newer versions:
    tuples removed, visibility-map bits set for rows it has not replayed)."""
    cluster.sql("create table frozen_t (id int primary key, pad text)")
    cluster.sql("insert into frozen_t select g, repeat('f', 100) from generate_series(1, 20000) g")
    end = quiesce(cluster)
    wait_until(lambda: replica_replayed(connstr, end), 60, "the replica to replay frozen_t")
    query(connstr, "select pg_wal_replay_pause()")
    wait_until(lambda: query(connstr, "select pg_get_wal_replay_pause_state()") == [("paused",)],
               30, "the replica's replay to pause")
    cluster.sql("delete from frozen_t where id % 2 = 0")
    cluster.sql("insert into frozen_t select g, 'new' from generate_series(20001, 40000) g")
    cluster.sql("vacuum frozen_t")
    quiesce(cluster)
    # Replay filled the replica's buffers with frozen_t: push it out (an
    # index scan over pgbench_accounts, 13 MB, uses no ring buffer).
    query(connstr, "select sum(abalance) from pgbench_accounts where aid > 0",
          settings=("set enable_seqscan = off", "set enable_bitmapscan = off"))
    seq = ("set enable_indexscan = off", "set enable_indexonlyscan = off",
           "set enable_bitmapscan = off")
    idx = ("set enable_seqscan = off", "set enable_bitmapscan = off")
    assert query(connstr, FROZEN_COUNTS[0], settings=seq) == [(20000,)]
    assert query(connstr, FROZEN_COUNTS[1], settings=idx) == [(20000, 20000)]
    query(connstr, "select pg_wal_replay_resume()")
    end = quiesce(cluster)
    wait_until(lambda: replica_replayed(connstr, end), 60, "the replica to replay the changes")
    assert query(connstr, FROZEN_COUNTS[0], settings=seq) == [(30000,)]
    assert query(connstr, FROZEN_COUNTS[1], settings=idx) == [(30000, 40000)]
