"""Stock PostgreSQL tools as oracles for what the safekeepers serve
(docs/design.md §3.3): they speak the standard physical replication protocol,
so

  * pg_receivewal pointed at a safekeeper writes segments byte-identical to
    the primary's own pg_wal over the committed range;
  * a stock streaming standby (pg_basebackup from the primary, then
    primary_conninfo pointing at a safekeeper) replays to the same data:
    pg_dump of both is equal once the workload stops and the standby caught
    up.

Every postgres program runs as the unprivileged postgres user when we are
root; everything listens on 127.0.0.1.
"""

import difflib
import os
import shutil
import signal
import subprocess

import psycopg
import pytest

from conftest import (STOCK_PG_BINDIR, as_pg_user_kwargs, chown_to_pg_user, free_port, int_to_lsn,
                      kill_hard, lsn_to_int, make_shared_dir, pid_alive, wait_until)
from test_durability import pgbench, pgbench_init

SEG_SIZE = 16 * 1024 * 1024


def stock(name):
    return os.path.join(STOCK_PG_BINDIR, name)


def committed_everywhere(cluster, lsn):
    """True when every safekeeper's commit_lsn has reached lsn."""
    sks = cluster.status()["safekeepers"]
    return all(sk["commit_lsn"] and lsn_to_int(sk["commit_lsn"]) >= lsn for sk in sks)


def quiesce(cluster):
    """Returns an LSN every safekeeper has committed, after the last write."""
    cluster.sql("create table if not exists quiesce_marker (x int)")
    cluster.sql("insert into quiesce_marker values (1)")
    flush = lsn_to_int(cluster.sql("select pg_current_wal_flush_lsn()::text")[0][0])
    wait_until(lambda: committed_everywhere(cluster, flush), 60,
               "every safekeeper to commit up to %s" % int_to_lsn(flush))
    return min(lsn_to_int(sk["commit_lsn"]) for sk in cluster.status()["safekeepers"])


def run_receivewal(cluster, target, *extra, timeout=120):
    cmd = [stock("pg_receivewal"), "-D", target, "-d", cluster.safekeeper_connstr("sk2"),
           "--no-loop", "-v", "-s", "1"] + list(extra)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            **as_pg_user_kwargs())


def test_pg_receivewal_matches_primary_pg_wal(cluster):
    target = make_shared_dir("strata-receivewal-")
    chown_to_pg_user(target)
    first = None
    try:
        # Start following before the workload so the capture spans segments.
        follower = run_receivewal(cluster, target)
        pgbench_init(cluster, scale=2)
        proc = pgbench(cluster, "-c", "4", "-j", "2", "-T", "3", timeout=120)
        assert proc.returncode == 0, proc.stderr
        committed = quiesce(cluster)

        # The first run may not have caught up yet: stop it and resume from
        # its files with an end position, so the capture ends exactly there.
        follower.send_signal(signal.SIGINT)
        out = follower.communicate(timeout=30)[0]
        resumed = run_receivewal(cluster, target, "-E", int_to_lsn(committed))
        out += resumed.communicate(timeout=120)[0]
        assert resumed.returncode == 0, out

        names = sorted(os.listdir(target))
        assert names, "pg_receivewal wrote nothing:\n" + out
        compared = 0
        pg_wal = os.path.join(cluster.compute_datadir, "pg_wal")
        for name in names:
            segment = name[:24]
            assert len(segment) == 24 and name[24:] in ("", ".partial"), name
            start = int(segment[8:16], 16) * 0x100000000 + int(segment[16:24], 16) * SEG_SIZE
            if first is None:
                first = start
            length = min(SEG_SIZE, committed - start)
            if length <= 0:
                continue
            with open(os.path.join(target, name), "rb") as f:
                received = f.read(length)
            with open(os.path.join(pg_wal, segment), "rb") as f:
                primary = f.read(length)
            assert len(received) == length, name
            if received != primary:
                at = next(i for i in range(length) if received[i] != primary[i])
                raise AssertionError("%s differs from the primary's at offset %d (LSN %s)" % (
                    name, at, int_to_lsn(start + at)))
            compared += length
        assert committed - first == compared, "a gap in the received segments: %s" % names
        assert compared > SEG_SIZE, "compared only %d bytes" % compared
    finally:
        shutil.rmtree(target, ignore_errors=True)


class Standby:
    """A stock PostgreSQL standby whose primary_conninfo names a safekeeper."""

    def __init__(self, cluster):
        self.root = make_shared_dir("strata-standby-")
        self.datadir = os.path.join(self.root, "pgdata")
        self.sockdir = os.path.join(self.root, "run")
        os.mkdir(self.sockdir)
        chown_to_pg_user(self.root)
        self.port = free_port()
        self.proc = None
        self.log = os.path.join(self.root, "standby.log")
        compute_port = cluster.status()["compute"]["port"]
        base = subprocess.run([stock("pg_basebackup"), "-h", "127.0.0.1", "-p",
                               str(compute_port), "-U", "postgres" if os.geteuid() == 0 else
                               os.environ.get("USER", "postgres"), "-D", self.datadir,
                               "-X", "stream", "-c", "fast", "--no-sync"],
                              capture_output=True, text=True, timeout=300, **as_pg_user_kwargs())
        assert base.returncode == 0, base.stderr
        # The primary's strata.conf (included by postgresql.conf) carries the
        # walproposer settings: replace it with the standby's own.
        conninfo = cluster.safekeeper_connstr("sk3").replace("'", "''")
        with open(os.path.join(self.datadir, "strata.conf"), "w") as f:
            f.write("listen_addresses = '127.0.0.1'\n"
                    "port = %d\n"
                    "unix_socket_directories = '%s'\n"
                    "hot_standby = on\n"
                    "fsync = off\n"
                    "primary_conninfo = '%s'\n" % (self.port, self.sockdir, conninfo))
        open(os.path.join(self.datadir, "standby.signal"), "w").close()
        chown_to_pg_user(self.root)

    def start(self):
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen([stock("postgres"), "-D", self.datadir], stdout=logf,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     **as_pg_user_kwargs())
        logf.close()
        wait_until(self.ready, 60, "the standby to accept connections")

    @property
    def connstr(self):
        user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
        return "host=127.0.0.1 port=%d user=%s dbname=postgres" % (self.port, user)

    def ready(self):
        assert self.proc.poll() is None, "the standby exited:\n" + self.log_text()
        try:
            with psycopg.connect(self.connstr, connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def sql(self, query):
        with psycopg.connect(self.connstr, autocommit=True, connect_timeout=10) as conn:
            return conn.execute(query).fetchall()

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


def pg_dump(connstr):
    proc = subprocess.run([stock("pg_dump"), "-d", connstr], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    # pg_dump >= 15.14 brackets its output with a random \restrict key; the
    # server version line differs by design (patched 15.18 primary, stock
    # 15.20 standby).
    return "\n".join(line for line in proc.stdout.splitlines()
                     if not line.startswith(("\\restrict ", "\\unrestrict ",
                                             "-- Dumped from database version ")))


@pytest.fixture
def full_cluster(cluster_dir):
    """A running cluster whose compute holds a full copy of its data (smgr
    off): pg_basebackup of a stateless compute would copy no relation files,
    and this test is about the safekeeper as a stock standby's upstream."""
    cluster_dir.env["STRATA_COMPUTE_MODE"] = "full"
    cluster_dir.up()
    yield cluster_dir


def test_stock_standby_following_a_safekeeper_replays_to_the_same_data(full_cluster):
    cluster = full_cluster
    pgbench_init(cluster, scale=1)
    standby = Standby(cluster)
    try:
        standby.start()
        # The standby streams from the safekeeper, not from the primary.
        sk_port = cluster.safekeeper("sk3")["pg_port"]
        wait_until(lambda: standby.sql("select sender_port from pg_stat_wal_receiver") ==
                   [(sk_port,)], 60, "the standby's walreceiver to stream from sk3")

        proc = pgbench(cluster, "-c", "4", "-j", "2", "-T", "5", timeout=120)
        assert proc.returncode == 0, proc.stderr
        cluster.sql("create table oracle (id int primary key, v text)")
        cluster.sql("insert into oracle select g, md5(g::text) from generate_series(1, 5000) g")
        cluster.sql("update oracle set v = 'x' where id % 7 = 0")
        cluster.sql("delete from oracle where id % 11 = 0")
        cluster.sql("create index on oracle (v)")
        cluster.sql("vacuum pgbench_accounts")
        target = quiesce(cluster)

        def replayed():
            lsn = standby.sql("select pg_last_wal_replay_lsn()::text")[0][0]
            return lsn is not None and lsn_to_int(lsn) >= target

        wait_until(replayed, 60, "the standby to replay up to %s" % int_to_lsn(target))
        primary_dump = pg_dump(cluster.connstr)
        standby_dump = pg_dump(standby.connstr)
        assert "oracle" in primary_dump and "pgbench_accounts" in primary_dump
        if primary_dump != standby_dump:
            diff = difflib.unified_diff(primary_dump.splitlines(), standby_dump.splitlines(),
                                        "primary", "standby", lineterm="", n=1)
            raise AssertionError("pg_dump of the standby differs from the primary's:\n" +
                                 "\n".join(list(diff)[:40]))
    finally:
        standby.stop()
