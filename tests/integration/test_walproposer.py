"""Quorum-durable WAL: the walproposer in a stock PostgreSQL 15 against three
real strata-safekeeper processes (docs/design.md §4 and §9).

What these tests show:
  * a commit returns once a majority of safekeepers has it;
  * with two of three safekeepers stopped (SIGSTOP) a commit does not return
    within 5 s, and returns once one of them comes back;
  * strata-sync-safekeepers prints an LSN at or past the end of the last
    acknowledged commit record (found independently with pg_waldump);
  * a second proposer (sync-safekeepers) fences the running compute: its
    commits stop returning, its server stops, and its log says why.

Binaries: safekeepers and sync-safekeepers from STRATA_SAN_BUILD/bin
(default ./build-san/bin), strata.so from STRATA_BUILD/lib (default
./build/lib), PostgreSQL from /usr/lib/postgresql/15/bin, every postgres
program run as the unprivileged user `postgres`.  Everything listens on
127.0.0.1 on free ports; every process started here is stopped by pid.
"""

import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import json
import urllib.request

import psycopg
import pytest
from conftest import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAN_BUILD = os.environ.get("STRATA_SAN_BUILD", os.path.join(REPO, "build-san"))
BUILD = os.environ.get("STRATA_BUILD", os.path.join(REPO, "build"))
PG_BIN = "/usr/lib/postgresql/15/bin"

SAFEKEEPER = os.path.join(SAN_BUILD, "bin", "strata-safekeeper")
SYNC_SAFEKEEPERS = os.path.join(SAN_BUILD, "bin", "strata-sync-safekeepers")
EXTENSION = os.path.join(BUILD, "lib", "strata.so")

TENANT = "0123456789abcdef0123456789abcdef"
LSN_RE = re.compile(r"^([0-9A-F]{1,8})/([0-9A-F]{1,8})$")


def lsn_to_int(text):
    m = LSN_RE.match(text.strip())
    assert m, "not an LSN: %r" % text
    return (int(m.group(1), 16) << 32) | int(m.group(2), 16)


def require(*paths):
    for path in paths:
        if not os.path.exists(path):
            pytest.skip("not built yet: %s" % path)


def pg_ids():
    pw = pwd.getpwnam("postgres")
    return pw.pw_uid, pw.pw_gid


def run_as_postgres(args, **kwargs):
    """Runs a postgres program as the unprivileged user (we may be root)."""
    if os.geteuid() == 0:
        uid, gid = pg_ids()
        kwargs.update(user=uid, group=gid, extra_groups=[])
    return subprocess.run(args, capture_output=True, text=True, **kwargs)


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(0.1)


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


class Safekeeper:
    def __init__(self, node_id, root):
        self.id = node_id
        self.datadir = os.path.join(root, "sk%d" % node_id)
        os.makedirs(self.datadir)
        self.log_path = os.path.join(root, "sk%d.log" % node_id)
        self.proc = None
        self.pg_port = None
        self.http_port = None

    def start(self):
        ports_file = os.path.join(self.datadir, "safekeeper.ports")
        if os.path.exists(ports_file):
            os.unlink(ports_file)
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [SAFEKEEPER, "--id", str(self.id), "--datadir", self.datadir,
                 "--listen-pg", "127.0.0.1:0", "--listen-http", "127.0.0.1:0"],
                stdout=log, stderr=log, env=env)

        def ports():
            if self.proc.poll() is not None:
                raise AssertionError("safekeeper %d exited with %d:\n%s" % (
                    self.id, self.proc.returncode, self.log_tail()))
            try:
                with open(ports_file) as f:
                    text = f.read()
            except FileNotFoundError:
                return None
            m = re.search(r"pg=(\d+) http=(\d+)", text)
            return (int(m.group(1)), int(m.group(2))) if m else None

        self.pg_port, self.http_port = wait_until(ports, 30, "safekeeper %d to listen" % self.id)

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.pg_port

    def timeline_status(self, timeline):
        url = "http://127.0.0.1:%d/v1/tenant/%s/timeline/%s" % (self.http_port, TENANT, timeline)
        with urllib.request.urlopen(url, timeout=10) as resp:
            return json.load(resp)

    def pause(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=30)

    def log_tail(self, lines=30):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


class Compute:
    """A stock PostgreSQL 15 with strata.so preloaded."""

    def __init__(self, root, safekeepers, timeline, extra_conf=()):
        self.extra_conf = list(extra_conf)
        self.root = root
        self.datadir = os.path.join(root, "pgdata")
        self.log_path = os.path.join(root, "postgres.log")
        self.port = free_port()
        self.safekeepers = safekeepers
        self.timeline = timeline
        self.pid = None

    def init(self):
        proc = run_as_postgres([os.path.join(PG_BIN, "initdb"), "-D", self.datadir, "-A", "trust",
                                "-U", "postgres", "--no-sync"])
        assert proc.returncode == 0, proc.stderr
        with open(os.path.join(self.datadir, "postgresql.conf"), "a") as f:
            f.write("\n".join([
                "listen_addresses = '127.0.0.1'",
                "port = %d" % self.port,
                "unix_socket_directories = '%s'" % self.root,
                "shared_preload_libraries = '%s'" % EXTENSION,
                "synchronous_standby_names = 'walproposer'",
                "synchronous_commit = on",
                "wal_level = replica",
                "max_wal_senders = 10",
                "wal_keep_size = '256MB'",
                "fsync = off",
                "restart_after_crash = off",
                "strata.safekeepers = '%s'" % ",".join(sk.addr for sk in self.safekeepers),
                "strata.tenant_id = '%s'" % TENANT,
                "strata.timeline_id = '%s'" % self.timeline,
                # These tests start the timeline on empty safekeepers.
                "strata.allow_timeline_creation = on",
                "log_min_messages = info"] + self.extra_conf + [""]))
        with open(os.path.join(self.datadir, "pg_hba.conf"), "w") as f:
            f.write("local all all trust\nlocal replication all trust\n"
                    "host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n")

    def start(self):
        proc = run_as_postgres([os.path.join(PG_BIN, "pg_ctl"), "-D", self.datadir, "-l",
                                self.log_path, "-w", "-t", "60", "start"])
        assert proc.returncode == 0, proc.stderr + self.log_tail()
        with open(os.path.join(self.datadir, "postmaster.pid")) as f:
            self.pid = int(f.readline())

    def stop(self):
        if self.pid is not None and pid_alive(self.pid):
            os.kill(self.pid, signal.SIGQUIT)
            wait_until(lambda: not pid_alive(self.pid), 30, "postgres to stop")

    def stop_fast(self):
        proc = run_as_postgres([os.path.join(PG_BIN, "pg_ctl"), "-D", self.datadir, "-m", "fast",
                                "-w", "-t", "60", "stop"])
        assert proc.returncode == 0, proc.stderr + self.log_tail()

    def connect(self, **kwargs):
        kwargs.setdefault("autocommit", True)
        return psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                               dbname="postgres", connect_timeout=10, **kwargs)

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log_tail(self, lines=40):
        return "".join(self.log().splitlines(True)[-lines:])


class Cluster:
    def __init__(self, extra_conf=()):
        self.root = tempfile.mkdtemp(prefix="strata-wp-", dir="/tmp")
        os.chmod(self.root, 0o777)
        self.timeline = os.urandom(16).hex()
        self.safekeepers = [Safekeeper(i, self.root) for i in (1, 2, 3)]
        for sk in self.safekeepers:
            sk.start()
        os.makedirs(os.path.join(self.root, "compute"))
        os.chmod(os.path.join(self.root, "compute"), 0o777)
        self.compute = Compute(os.path.join(self.root, "compute"), self.safekeepers, self.timeline,
                               extra_conf)
        if os.geteuid() == 0:
            uid, gid = pg_ids()
            os.chown(self.compute.root, uid, gid)
        self.compute.init()
        self.compute.start()

    def sync_safekeepers(self, timeout=60, verbose=False):
        return subprocess.run(
            [SYNC_SAFEKEEPERS, "--safekeepers", ",".join(sk.addr for sk in self.safekeepers),
             "--tenant", TENANT, "--timeline", self.timeline, "--timeout", str(timeout)]
            + (["--verbose"] if verbose else []),
            capture_output=True, text=True, timeout=timeout + 30)

    def diagnostics(self):
        out = ["---- postgres ----", self.compute.log_tail()]
        for sk in self.safekeepers:
            out += ["---- sk%d ----" % sk.id, sk.log_tail()]
        return "\n".join(out)

    def stop(self):
        self.compute.stop()
        for sk in self.safekeepers:
            sk.stop()


@pytest.fixture
def make_cluster():
    """Factory: make_cluster(extra_conf=[...]) starts three safekeepers and a
    compute; everything is stopped by pid at the end."""
    require(SAFEKEEPER, SYNC_SAFEKEEPERS, EXTENSION)
    made = []

    def make(extra_conf=()):
        c = Cluster(extra_conf)
        made.append(c)
        return c

    try:
        yield make
    finally:
        for c in made:
            # pytest shows captured output only for failing tests.
            print(c.diagnostics())
            c.stop()
            shutil.rmtree(c.root, ignore_errors=True)


@pytest.fixture
def cluster(make_cluster):
    return make_cluster()


def commit_in_thread(compute, sql):
    """Starts sql on its own connection in a thread; returns (thread, result)."""
    result = {}
    conn = compute.connect()

    def run():
        try:
            conn.execute(sql)
            result["ok"] = True
        except Exception as e:  # reported to the test through result
            result["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, result, conn


def wait_committing(compute, timeout=60):
    """Waits until the walproposer is elected and a commit returns."""
    def commits():
        t, result, conn = commit_in_thread(compute, "INSERT INTO probe VALUES (1)")
        t.join(5)
        if t.is_alive():
            conn.cancel()
            t.join(5)
            conn.close()
            return False
        conn.close()
        return result.get("ok", False)

    with compute.connect() as conn:
        conn.execute("SET synchronous_commit = local")
        conn.execute("CREATE TABLE IF NOT EXISTS probe (v int)")
    wait_until(commits, timeout, "the first quorum commit")


def commit_end_lsn(compute, xid):
    """End of the COMMIT record of xid, read from pg_wal with pg_waldump."""
    waldir = os.path.join(compute.datadir, "pg_wal")
    segments = sorted(n for n in os.listdir(waldir) if re.fullmatch(r"[0-9A-F]{24}", n))
    proc = subprocess.run([os.path.join(PG_BIN, "pg_waldump"), "-p", waldir, "-r", "Transaction",
                           segments[0], segments[-1]], capture_output=True, text=True)
    pat = re.compile(r"len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*%d, lsn: ([0-9A-F]+/[0-9A-F]+).*COMMIT"
                     % xid)
    for line in proc.stdout.splitlines():
        m = pat.search(line)
        if m:
            return lsn_to_int(m.group(2)) + int(m.group(1))
    raise AssertionError("no COMMIT of xid %d in pg_waldump output:\n%s" % (xid, proc.stdout[-3000:]))


def test_commit_returns_with_quorum(cluster):
    compute = cluster.compute
    wait_committing(compute)
    with compute.connect() as conn:
        start = time.monotonic()
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        for i in range(50):
            conn.execute("INSERT INTO t VALUES (%s, %s)", (i, "row %d" % i))
        assert time.monotonic() - start < 30
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 50
        # The walproposer is the synchronous standby and reports a flush
        # position at least as far as the last commit.
        row = conn.execute("SELECT sync_state, flush_lsn, pg_current_wal_flush_lsn() "
                           "FROM pg_stat_replication WHERE application_name = 'walproposer'"
                           ).fetchone()
        assert row is not None and row[0] == "sync", row
    assert "elected in term" in compute.log()


def test_commit_waits_for_majority(cluster):
    compute = cluster.compute
    wait_committing(compute)
    sk1, sk2, sk3 = cluster.safekeepers
    sk2.pause()
    sk3.pause()
    try:
        t, result, conn = commit_in_thread(compute, "INSERT INTO probe VALUES (2)")
        t.join(5)
        assert t.is_alive(), "a commit returned with two of three safekeepers stopped: %r" % result
        sk2.resume()
        t.join(60)
        assert not t.is_alive(), "the commit did not return after a safekeeper came back"
        assert result.get("ok"), result
        conn.close()
    finally:
        sk2.resume()
        sk3.resume()
    with compute.connect() as conn:
        assert conn.execute("SELECT count(*) FROM probe WHERE v = 2").fetchone()[0] == 1


def test_sync_safekeepers_covers_last_commit(cluster):
    compute = cluster.compute
    wait_committing(compute)
    with compute.connect(autocommit=False) as conn:
        conn.execute("INSERT INTO probe VALUES (3)")
        xid = int(conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0])
        conn.commit()
    end = commit_end_lsn(compute, xid)
    # Stop the compute first: sync-safekeepers must find that commit on the
    # safekeepers alone.
    compute.stop()
    proc = cluster.sync_safekeepers()
    assert proc.returncode == 0, proc.stderr + cluster.diagnostics()
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and LSN_RE.match(lines[0]), proc.stdout
    assert lsn_to_int(lines[0]) >= end, "synced to %s, commit ends at %X/%X" % (
        lines[0], end >> 32, end & 0xFFFFFFFF)
    # A second run finds the same end of WAL (nothing new was written).
    again = cluster.sync_safekeepers()
    assert again.returncode == 0, again.stderr
    assert lsn_to_int(again.stdout.strip()) == lsn_to_int(lines[0])


def test_second_proposer_fences_first(cluster):
    compute = cluster.compute
    wait_committing(compute)
    proc = cluster.sync_safekeepers()
    assert proc.returncode == 0, proc.stderr + cluster.diagnostics()
    # The old proposer learns of the higher term at its next heartbeat at
    # the latest; no commit may return after that.
    committed = False
    try:
        t, result, conn = commit_in_thread(compute, "INSERT INTO probe VALUES (4)")
        t.join(20)
        committed = result.get("ok", False)
    except psycopg.OperationalError:
        pass  # the server is already gone
    assert not committed, "the fenced compute acknowledged a commit"
    wait_until(lambda: "another walproposer took over" in compute.log(), 30,
               "the fencing message in the compute's log")
    log = compute.log()
    m = re.search(r"terminating: safekeeper (\S+) is at term (\d+), higher than ours (\d+)", log)
    assert m, log[-3000:]
    assert int(m.group(2)) > int(m.group(3))
    wait_until(lambda: not pid_alive(compute.pid), 30, "the fenced server to stop")


def test_sync_safekeepers_brings_lagging_safekeeper_up(cluster):
    """sk3 misses WAL while paused; with sk1 gone, sync-safekeepers can only
    finish by copying the donor's WAL (from sk2) to sk3."""
    compute = cluster.compute
    wait_committing(compute)
    sk1, sk2, sk3 = cluster.safekeepers
    sk3.pause()
    try:
        with compute.connect(autocommit=False) as conn:
            conn.execute("CREATE TABLE big AS SELECT g, repeat('x', 200) AS pad "
                         "FROM generate_series(1, 50000) g")
            xid = int(conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0])
            conn.commit()
        end = commit_end_lsn(compute, xid)
        compute.stop()
    finally:
        sk3.resume()
    sk1.stop()
    proc = cluster.sync_safekeepers(verbose=True)
    assert proc.returncode == 0, proc.stderr + cluster.diagnostics()
    assert lsn_to_int(proc.stdout.strip().splitlines()[-1]) >= end
    # sk3 missed more WAL than the proposer keeps in flight (2 MB), so it
    # can only have caught up from the donor.
    assert "reading WAL from donor" in proc.stderr, proc.stderr


def test_lagging_safekeeper_catches_up_from_pg_wal(make_cluster):
    """With a 256 kB WAL ring, a safekeeper that missed megabytes of WAL can
    only be brought up to date from the compute's pg_wal segment files."""
    cluster = make_cluster(["strata.wal_buffer_size = '256kB'"])
    compute = cluster.compute
    wait_committing(compute)
    sk1, sk2, sk3 = cluster.safekeepers
    before = lsn_to_int(sk3.timeline_status(cluster.timeline)["flush_lsn"])
    sk3.pause()
    try:
        with compute.connect(autocommit=False) as conn:
            conn.execute("CREATE TABLE big AS SELECT g, repeat('y', 200) AS pad "
                         "FROM generate_series(1, 50000) g")
            xid = int(conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0])
            conn.commit()
        end = commit_end_lsn(compute, xid)
        # sk3 can have received at most the proposer's in-flight window
        # (2 MB) of this; the rest is far older than the 256 kB ring.
        assert end - before > (8 << 20), (before, end)
    finally:
        sk3.resume()
    wait_until(lambda: lsn_to_int(sk3.timeline_status(cluster.timeline)["flush_lsn"]) >= end, 60,
               "sk3 to catch up to the commit")
    assert "cannot send WAL" not in compute.log()
    # And it keeps up afterwards: a commit still returns with sk1 and sk2
    # both paused, because sk3 now has everything.
    sk1.pause()
    sk2.pause()
    try:
        t, result, conn = commit_in_thread(compute, "INSERT INTO probe VALUES (5)")
        t.join(5)
        assert t.is_alive(), "a commit returned with only sk3 running"
        sk2.resume()
        t.join(60)
        assert result.get("ok"), result
        conn.close()
    finally:
        sk1.resume()
        sk2.resume()


def test_compute_restart_continues_the_timeline(cluster):
    """A compute restarted on its own data directory is elected in a new term
    that starts where the safekeepers' WAL ends, and commits again."""
    compute = cluster.compute
    wait_committing(compute)
    with compute.connect() as conn:
        conn.execute("INSERT INTO probe VALUES (6)")
    compute.stop_fast()
    status = [sk.timeline_status(cluster.timeline) for sk in cluster.safekeepers]
    flushed = max(lsn_to_int(st["flush_lsn"]) for st in status)
    compute.start()
    wait_committing(compute)
    m = re.findall(r"elected in term (\d+), donor safekeeper \S+, term starts at (\S+),", compute.log())
    assert len(m) == 2, m
    assert int(m[1][0]) > int(m[0][0])
    assert lsn_to_int(m[1][1]) == flushed
    with compute.connect() as conn:
        assert conn.execute("SELECT count(*) FROM probe WHERE v = 6").fetchone()[0] == 1


def test_sync_safekeepers_fails_without_majority(cluster):
    """With two of three safekeepers gone, sync-safekeepers cannot be elected:
    it exits 1 with a one-line reason within its timeout."""
    cluster.compute.stop()
    cluster.safekeepers[1].stop()
    cluster.safekeepers[2].stop()
    start = time.monotonic()
    proc = cluster.sync_safekeepers(timeout=3)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert time.monotonic() - start < 20
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "timed out" in lines[0], proc.stderr


def test_refuses_to_start_without_synchronous_standby(make_cluster):
    """Without synchronous_standby_names naming the walproposer, commits would
    return before the safekeepers have them: the server must not start."""
    cluster = make_cluster()
    compute = cluster.compute
    compute.stop()
    with open(os.path.join(compute.datadir, "postgresql.conf"), "a") as f:
        f.write("synchronous_standby_names = ''\n")
    proc = run_as_postgres([os.path.join(PG_BIN, "pg_ctl"), "-D", compute.datadir, "-l",
                            compute.log_path, "-w", "-t", "30", "start"])
    assert proc.returncode != 0
    assert "strata.safekeepers requires synchronous_standby_names = 'walproposer'" in compute.log()


def walproposer_pid(compute):
    """The walproposer background worker among the postmaster's children (a
    worker without a database connection is not in pg_stat_activity)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == compute.pid and "strata walproposer" in cmdline:
            return int(entry)
    return None


def test_restarted_walproposer_with_divergent_wal_stops(cluster):
    """Issue 11.5.  Compute A's walproposer is frozen; compute B (a
    pg_basebackup of A, on its own port) is elected and commits rows; A
    meanwhile writes more local WAL than B (synchronous_commit = local), so
    its WAL is longer than the safekeepers' but different.  A's walproposer
    then restarts (SIGTERM: the background worker comes back a second later)
    and wins a new election.  The old check (term start <= our flush) let it
    stream its own bytes after B's acknowledged WAL; it must stop instead,
    because the safekeepers' WAL was last written by a term that is not
    A's last one, and B's commits must stay on the safekeepers."""
    a = cluster.compute
    wait_committing(a)
    with a.connect() as conn:
        conn.execute("CREATE TABLE ledger (id int, who text)")
        conn.execute("INSERT INTO ledger SELECT g, 'a' FROM generate_series(1, 100) g")
    wp_a = walproposer_pid(a)
    assert wp_a, a.log_tail()

    # B: a physical copy of A, then its own server on its own port.
    b_root = os.path.join(cluster.root, "compute_b")
    os.makedirs(b_root)
    os.chmod(b_root, 0o777)
    b = Compute(b_root, cluster.safekeepers, cluster.timeline)
    if os.geteuid() == 0:
        uid, gid = pg_ids()
        os.chown(b_root, uid, gid)
    os.kill(wp_a, signal.SIGSTOP)
    try:
        proc = run_as_postgres([os.path.join(PG_BIN, "pg_basebackup"), "-h", "127.0.0.1", "-p",
                                str(a.port), "-U", "postgres", "-D", b.datadir, "-X", "stream",
                                "-c", "fast"], timeout=120)
        assert proc.returncode == 0, proc.stderr
        # The backup starts after a segment switch; B's walproposer streams
        # from the safekeepers' end, before it: give B A's complete older
        # segments (WAL both servers share; A writes no more to them).
        a_wal, b_wal = os.path.join(a.datadir, "pg_wal"), os.path.join(b.datadir, "pg_wal")
        seg_re = re.compile(r"^[0-9A-F]{24}$")
        first_b = min(n for n in os.listdir(b_wal) if seg_re.match(n))
        for name in sorted(os.listdir(a_wal)):
            if seg_re.match(name) and name < first_b:
                shutil.copy2(os.path.join(a_wal, name), os.path.join(b_wal, name))
                if os.geteuid() == 0:
                    os.chown(os.path.join(b_wal, name), *pg_ids())
        with open(os.path.join(b.datadir, "postgresql.conf"), "a") as f:
            f.write("\nport = %d\nunix_socket_directories = '%s'\n" % (b.port, b_root))
        # A: much more local WAL than B will write, never acknowledged.
        with a.connect() as conn:
            conn.execute("SET synchronous_commit = local")
            conn.execute("INSERT INTO ledger SELECT g, 'a-local' FROM generate_series(1, 200000) g")
        b.start()
        try:
            wait_committing(b)
        except AssertionError as e:
            raise AssertionError("%s\n---- compute B ----\n%s" % (e, b.log_tail(60)))
        with b.connect() as conn:
            conn.execute("INSERT INTO ledger SELECT g, 'b' FROM generate_series(1, 10) g")
            b_end = lsn_to_int(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])
        a_end = None
        with a.connect() as conn:
            a_end = lsn_to_int(conn.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0])
        assert a_end > b_end, "A's local WAL must be the longer one for this test"
        b.stop()  # SIGQUIT: B is gone, its acknowledged commits are on the safekeepers
    finally:
        os.kill(wp_a, signal.SIGTERM)
        os.kill(wp_a, signal.SIGCONT)
    # A's walproposer comes back, is elected (term above B's), and must stop
    # the server rather than stream its divergent WAL.
    wait_until(lambda: not pid_alive(a.pid), 60, "compute A to stop")
    log = a.log()
    assert re.search(r"terminating: this server's walproposer was last elected in term \d+ but "
                     r"the safekeepers' WAL was last written in term \d+", log), log[-4000:]
    # B's acknowledged WAL is still what the safekeepers end with.
    ends = [lsn_to_int(sk.timeline_status(cluster.timeline)["flush_lsn"])
            for sk in cluster.safekeepers]
    assert sorted(ends)[1] >= b_end, (ends, b_end)
    assert max(ends) < a_end, "A's divergent WAL reached the safekeepers: %s vs %x" % (ends, a_end)
