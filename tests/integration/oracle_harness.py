"""Orchestration for the page oracle: a stock primary streaming through three
safekeepers, the pageserver ingesting from them, and a stock standby replaying
the same WAL, stopped at chosen LSNs and compared page for page.

For: test_page_oracle.py and test_pageserver_restart.py.  Not for: the masking
rules (pagemask.py) or the workload (oracle_workload.py).

The plan, and why each step is the way it is:

1. initdb the primary with Debian's stock 15 binaries (as user postgres) and
   give it its settings (full_page_writes on or off, wal_level replica,
   max_prepared_transactions 10, autovacuum off and checkpoint_timeout 1h so
   the only checkpoints are ours).  The walproposer settings go into
   strata.conf, included by postgresql.conf, and are written only after the
   copies below, so the first start runs without the extension: start, stop
   cleanly.
2. From the cleanly stopped directory make two copies (cp -a): the standby's
   (its strata.conf names a safekeeper as primary_conninfo; standby.signal)
   and the import copy, which the pageserver imports over HTTP (POST
   /v1/tenant/T/timeline/L {"safekeepers", "import_pgdata"} -> {"lsn"}).  The
   import LSN is the end of the shutdown checkpoint record, where the
   standby starts too.  Importing a copy means no later start of the primary
   can race the import.
3. Start the primary with the walproposer.  The safekeepers bootstrap the
   timeline at the start of the segment holding the insert position (at or
   before the import LSN).  A pg_receivewal from sk1 archives every complete
   segment from then on: the safekeepers remove WAL below the pageserver's
   disk_consistent_lsn, and the standby, which is stopped most of the time,
   restarts from its last restartpoint, so it reads old segments back through
   restore_command; streaming (primary_conninfo = a safekeeper) serves the
   rest.
4. The workload runs in phases.  Each phase begins with CHECKPOINT (we note
   the checkpoint record's LSN) and ends by taking X_i =
   pg_current_wal_insert_lsn(): the insert position is always a record
   boundary, the start of the next record, so "everything before X_i" is a
   whole number of records.  We also snapshot every database's catalog
   (relfilenode -> access method) at X_i, used to mask pages.
5. For each X_i the standby starts with recovery_target_lsn = X_i,
   recovery_target_inclusive = off and recovery_target_action = 'shutdown':
   it stops *before* the first record starting at or after X_i, i.e. after
   exactly the records ending at or before X_i, logs "recovery stopping
   before WAL location (LSN) X_i" and shuts down.  That shutdown runs a
   restartpoint that writes every dirty buffer and the SLRUs -- but only if
   it replayed a checkpoint record since its last restartpoint, which is why
   each phase begins with CHECKPOINT.  We verify from pg_controldata that the
   state is "shut down in recovery", the latest checkpoint is the phase's
   checkpoint (so the restartpoint ran) and minRecoveryPoint <= X_i; then its
   files are the database at exactly X_i.  ('pause' would also stop at X_i,
   but needs hot_standby, whose reads can set hint bits and prune pages, and
   a clean stop from pause flushes through the same restartpoint anyway.)
6. Compare at X_i: every relation fork the standby has on disk (base/*/,
   global/) with the pageserver's rels listing at X_i (existence and size),
   every block of every fork with GetPage@X_i after pagemask's masking, and
   every pg_xact page with GetSlruSegment@X_i.  FSM forks are left out of
   all three: the FSM is never WAL-logged (the standby even creates and
   updates FSM forks during its own redo), so no replica can match it.

Every postgres program runs as the unprivileged user postgres; everything
listens on 127.0.0.1 on free ports; every process started here is stopped by
pid (SIGKILL after a bounded wait) in OracleCluster.stop().
"""

import contextlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request

import psycopg
import pytest

import pagemask
from conftest import (BUILD, SAN_BUILD, as_pg_user_kwargs, chown_to_pg_user, free_port, int_to_lsn,
                      kill_hard, lsn_to_int, make_shared_dir, pid_alive, wait_until)

BLCKSZ = 8192
RELSEG_BLOCKS = (1024 * 1024 * 1024) // BLCKSZ
SLRU_PAGES_PER_SEGMENT = 32
DEFAULTTABLESPACE_OID = 1663
GLOBALTABLESPACE_OID = 1664
SLRU_CLOG = 0
TENANT = "5e1f0c1e5e1f0c1e5e1f0c1e5e1f0c1e"

REL_FILE_RE = re.compile(r"^(\d+)(?:_(fsm|vm|init))?(?:\.(\d+))?$")
FORK_BY_SUFFIX = {None: 0, "fsm": 1, "vm": 2, "init": 3}


def daemon(name):
    """A daemon binary: the sanitized build's if built, else the release build's."""
    for build in (SAN_BUILD, BUILD):
        path = os.path.join(build, "bin", name)
        if os.access(path, os.X_OK):
            return path
    return os.path.join(SAN_BUILD, "bin", name)


def extension_path():
    return os.path.join(BUILD, "lib", "strata.so")


def patched_pg_bindir():
    prefix = os.environ.get("STRATA_PG_PREFIX")
    if not prefix:
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        proc = subprocess.run(["bash", os.path.join(repo, "compute", "postgres", "build.sh"),
                               "--prefix-only"], capture_output=True, text=True, timeout=60)
        prefix = proc.stdout.strip()
    return os.path.join(prefix, "bin")


def stock(name):
    """The primary's and the standby's programs: the patched build, run with no
    hook set, i.e. a stock PostgreSQL of the same minor version as the redo
    helpers.  Debian's binaries are a newer minor (15.20) whose GiST VACUUM
    and its redo no longer set F_TUPLES_DELETED, while 15.18's do: the oracle
    would then compare two minor versions' redo, not the pageserver.  Set
    STRATA_ORACLE_PG_BINDIR to run them from another build."""
    bindir = os.environ.get("STRATA_ORACLE_PG_BINDIR") or patched_pg_bindir()
    return os.path.join(bindir, name)


def require(*paths):
    for path in paths:
        if not os.path.exists(path):
            pytest.skip("not built yet: %s" % path)


def run_pg(args, timeout=120, check=True):
    """Runs a postgres program as the unprivileged user; returns the process."""
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                          **as_pg_user_kwargs())
    if check and proc.returncode != 0:
        raise AssertionError("%s exited %d:\n%s%s" % (" ".join(args), proc.returncode,
                                                      proc.stdout, proc.stderr))
    return proc


def http_json(method, url, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        raise AssertionError("%s %s -> HTTP %d: %s" % (method, url, e.code,
                                                       e.read().decode(errors="replace")))


def read_ports(path, proc, what, log):
    """Waits for a daemon's `pg=P http=Q` ports file; (pg, http)."""
    def ports():
        if proc.poll() is not None:
            raise AssertionError("%s exited with %d:\n%s" % (what, proc.returncode, tail(log)))
        try:
            with open(path) as f:
                m = re.search(r"pg=(\d+) http=(\d+)", f.read())
        except FileNotFoundError:
            return None
        return (int(m.group(1)), int(m.group(2))) if m else None
    return wait_until(ports, 60, "%s to listen" % what)


def tail(path, lines=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def stop_process(proc, sig=signal.SIGTERM, timeout=30):
    """Stops a Popen we started: sig, a bounded wait, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(sig)
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_hard([proc.pid])
        proc.wait(10)


# -- the daemons ----------------------------------------------------------------

class Safekeeper:
    def __init__(self, node_id, root):
        self.id = node_id
        self.datadir = os.path.join(root, "sk%d" % node_id)
        os.makedirs(self.datadir)
        self.log = os.path.join(root, "sk%d.log" % node_id)
        self.proc = None
        self.pg_port = self.http_port = None

    def start(self):
        ports_file = os.path.join(self.datadir, "safekeeper.ports")
        if os.path.exists(ports_file):
            os.unlink(ports_file)
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [daemon("strata-safekeeper"), "--id", str(self.id), "--datadir", self.datadir,
                 "--listen-pg", "127.0.0.1:0", "--listen-http", "127.0.0.1:0"],
                stdout=log, stderr=log, env=env)
        self.pg_port, self.http_port = read_ports(ports_file, self.proc, "sk%d" % self.id,
                                                  self.log)

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.pg_port

    def status(self, timeline):
        return http_json("GET", "http://127.0.0.1:%d/v1/tenant/%s/timeline/%s" % (
            self.http_port, TENANT, timeline), timeout=10)

    def segments(self, timeline):
        """Names of the WAL segment files this safekeeper holds for timeline."""
        tdir = os.path.join(self.datadir, TENANT, timeline)
        try:
            names = os.listdir(tdir)
        except FileNotFoundError:
            return []
        return sorted(n[:24] for n in names
                      if re.match(r"^[0-9A-F]{24}(\.partial)?$", n))

    def stop(self):
        stop_process(self.proc, signal.SIGKILL)


class Pageserver:
    def __init__(self, root):
        self.datadir = os.path.join(root, "pageserver")
        os.makedirs(self.datadir)
        self.log = os.path.join(root, "pageserver.log")
        self.proc = None
        self.pg_port = self.http_port = None

    def start(self):
        ports_file = os.path.join(self.datadir, "pageserver.ports")
        if os.path.exists(ports_file):
            os.unlink(ports_file)
        env = dict(os.environ)
        env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
        # The redo helper library comes from the release build (the sanitized
        # build does not build Postgres extensions).
        env.setdefault("STRATA_WALREDO_LIB", os.path.join(BUILD, "lib", "strata_walredo.so"))
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [daemon("strata-pageserver"), "--datadir", self.datadir,
                 "--listen-pg", "127.0.0.1:0", "--listen-http", "127.0.0.1:0",
                 "--pg-bindir", patched_pg_bindir()],
                stdout=log, stderr=log, env=env)
        self.pg_port, self.http_port = read_ports(ports_file, self.proc, "the pageserver",
                                                  self.log)

    def url(self, timeline, suffix=""):
        return "http://127.0.0.1:%d/v1/tenant/%s/timeline/%s%s" % (self.http_port, TENANT,
                                                                  timeline, suffix)

    def create_timeline(self, timeline, safekeepers, pgdata):
        out = http_json("POST", self.url(timeline),
                        {"safekeepers": [sk.addr for sk in safekeepers], "import_pgdata": pgdata},
                        timeout=300)
        return lsn_to_int(out["lsn"])

    def timeline_status(self, timeline):
        return http_json("GET", self.url(timeline), timeout=10)

    def rels(self, timeline, lsn):
        """{(spc, db, rel, fork): nblocks} of every relation fork existing at lsn."""
        out = http_json("GET", self.url(timeline, "/rels?lsn=%s" % int_to_lsn(lsn)), timeout=60)
        items = out["rels"] if isinstance(out, dict) else out
        found = {}
        for r in items:
            def pick(*names):
                for n in names:
                    if n in r:
                        return r[n]
                raise AssertionError("rels entry without %s: %r" % ("/".join(names), r))
            key = (int(pick("spc", "spcnode", "spc_oid")), int(pick("db", "dbnode", "db_oid")),
                   int(pick("rel", "relnode", "relfilenode")), int(pick("fork", "forknum")))
            found[key] = int(pick("nblocks", "size", "blocks"))
        return found

    def kill(self):
        stop_process(self.proc, signal.SIGKILL)

    def stop(self):
        stop_process(self.proc, signal.SIGTERM)


class PageReader:
    """GetPage@LSN and GetSlruSegment@LSN through tests/integration/pagestream.py
    (the page service's Python client), pipelined in batches."""

    BATCH = 64

    def __init__(self, pageserver, timeline):
        try:
            import pagestream
        except ImportError:
            pytest.skip("not written yet: tests/integration/pagestream.py")
        self.ps = pagestream
        self.client = pagestream.connect("127.0.0.1", pageserver.pg_port, TENANT, timeline)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def get_pages(self, requests, lsn):
        """[(spc, db, rel, fork, blk)] -> [8 KB bytes, or the PagestreamError
        the server answered for that block], in order."""
        out = []
        for i in range(0, len(requests), self.BATCH):
            ids = []
            for spc, db, rel, fork, blk in requests[i:i + self.BATCH]:
                body = self.ps.rel_body(spc, db, rel, fork) + struct.pack(">I", blk)
                ids.append(self.client.send_request(self.ps.REQ_GETPAGE, lsn, body, lsn))
            for reqid in ids:
                try:
                    tag, rid, payload = self.client.read_response()
                except self.ps.PagestreamError as e:
                    assert e.reqid == reqid, (e.reqid, reqid)
                    out.append(e)
                    continue
                assert rid == reqid and tag == 0x80 | self.ps.REQ_GETPAGE, (tag, rid, reqid)
                assert len(payload) == BLCKSZ, len(payload)
                out.append(payload)
        return out

    def rel_sizes(self, forks, lsn):
        """[(spc, db, rel, fork)] -> [(exists, nblocks or None)], pipelined:
        what a compute's smgr asks (Exists, Nblocks).  Errors come back as
        the PagestreamError in place of nblocks."""
        out = []
        for i in range(0, len(forks), self.BATCH):
            batch = forks[i:i + self.BATCH]
            sent = []
            for key in batch:
                body = self.ps.rel_body(*key)
                sent.append(self.client.send_request(self.ps.REQ_EXISTS, lsn, body, lsn))
                sent.append(self.client.send_request(self.ps.REQ_NBLOCKS, lsn, body, lsn))
            answers = []
            for reqid in sent:
                try:
                    tag, rid, payload = self.client.read_response()
                except self.ps.PagestreamError as e:
                    assert e.reqid == reqid, (e.reqid, reqid)
                    answers.append(e)
                    continue
                assert rid == reqid, (rid, reqid)
                if tag == 0x80 | self.ps.REQ_EXISTS:
                    answers.append(payload == b"\x01")
                else:
                    answers.append(struct.unpack(">I", payload)[0])
            out.extend(zip(answers[0::2], answers[1::2]))
        return out

    def slru_segment(self, kind, segno, lsn):
        """The segment's pages (bytes), or the PagestreamError answered."""
        try:
            return self.client.slru_segment(kind, segno, lsn, lsn)
        except self.ps.PagestreamError as e:
            return e

    def close(self):
        self.client.close()


# -- the primary and the standby ----------------------------------------------

class Primary:
    def __init__(self, root, fpw):
        self.root = os.path.join(root, "primary")
        os.makedirs(self.root)
        self.datadir = os.path.join(self.root, "pgdata")
        self.log = os.path.join(self.root, "postgres.log")
        self.port = free_port()
        self.fpw = fpw
        self.pid = None

    def init(self):
        chown_to_pg_user(self.root)
        run_pg([stock("initdb"), "-D", self.datadir, "-A", "trust", "-U", "postgres",
                "--no-sync"], timeout=180)
        with open(os.path.join(self.datadir, "postgresql.conf"), "a") as f:
            f.write("\n".join([
                "",
                "listen_addresses = '127.0.0.1'",
                "port = %d" % self.port,
                "unix_socket_directories = '%s'" % self.root,
                "full_page_writes = %s" % ("on" if self.fpw else "off"),
                "wal_level = replica",
                "max_prepared_transactions = 10",
                "max_wal_senders = 10",
                "wal_keep_size = '2GB'",
                "fsync = off",
                "autovacuum = off",
                "checkpoint_timeout = '1h'",
                "max_wal_size = '4GB'",
                "restart_after_crash = off",
                "include_if_exists = 'strata.conf'",
                ""]))
        with open(os.path.join(self.datadir, "pg_hba.conf"), "w") as f:
            f.write("local all all trust\nlocal replication all trust\n"
                    "host all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n")

    def enable_walproposer(self, safekeepers, timeline):
        path = os.path.join(self.datadir, "strata.conf")
        with open(path, "w") as f:
            f.write("\n".join([
                "shared_preload_libraries = '%s'" % extension_path(),
                "synchronous_standby_names = 'walproposer'",
                "synchronous_commit = on",
                "strata.safekeepers = '%s'" % ",".join(sk.addr for sk in safekeepers),
                "strata.tenant_id = '%s'" % TENANT,
                "strata.timeline_id = '%s'" % timeline,
                "strata.allow_timeline_creation = on",  # a new timeline on new safekeepers
                ""]))
        chown_to_pg_user(path)

    def start(self):
        run_pg([stock("pg_ctl"), "-D", self.datadir, "-l", self.log, "-w", "-t", "60", "start"])
        with open(os.path.join(self.datadir, "postmaster.pid")) as f:
            self.pid = int(f.readline())

    def stop_clean(self):
        run_pg([stock("pg_ctl"), "-D", self.datadir, "-m", "fast", "-w", "-t", "60", "stop"])
        self.pid = None

    def kill(self):
        if self.pid is not None and pid_alive(self.pid):
            os.kill(self.pid, signal.SIGQUIT)
            try:
                wait_until(lambda: not pid_alive(self.pid), 30, "the primary to stop")
            except AssertionError:
                kill_hard([self.pid])

    def connstr(self, dbname="postgres"):
        return "host=127.0.0.1 port=%d user=postgres dbname=%s" % (self.port, dbname)

    def connect(self, dbname="postgres", **kwargs):
        kwargs.setdefault("autocommit", True)
        return psycopg.connect(self.connstr(dbname), connect_timeout=10, **kwargs)

    def sql(self, query, dbname="postgres"):
        with self.connect(dbname) as conn:
            cur = conn.execute(query)
            return cur.fetchall() if cur.description else None


def controldata(datadir):
    """pg_controldata of datadir as a dict (stock binary)."""
    proc = run_pg([stock("pg_controldata"), "-D", datadir], timeout=30)
    out = {}
    for line in proc.stdout.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


class Standby:
    """A stock standby replaying from a safekeeper, stopped at chosen LSNs."""

    def __init__(self, root, source_datadir, safekeeper, timeline, archive):
        self.root = os.path.join(root, "standby")
        os.makedirs(self.root)
        self.datadir = os.path.join(self.root, "pgdata")
        self.log = os.path.join(self.root, "standby.log")
        self.port = free_port()
        self.safekeeper = safekeeper
        self.timeline = timeline
        self.archive = archive
        subprocess.run(["cp", "-a", source_datadir, self.datadir], check=True)
        open(os.path.join(self.datadir, "standby.signal"), "w").close()
        chown_to_pg_user(self.root)
        self.proc = None
        self.stops = []  # (target, stopped_at) of every stop

    def configure(self, target_lsn):
        conninfo = ("host=127.0.0.1 port=%d user=postgres application_name=oracle_standby "
                    "options='-c tenant_id=%s -c timeline_id=%s'" % (
                        self.safekeeper.pg_port, TENANT, self.timeline))
        path = os.path.join(self.datadir, "strata.conf")
        with open(path, "w") as f:
            f.write("\n".join([
                "port = %d" % self.port,
                "unix_socket_directories = '%s'" % self.root,
                "hot_standby = off",
                "primary_conninfo = '%s'" % conninfo.replace("'", "''"),
                "restore_command = 'cp %s/%%f %%p'" % self.archive,
                "recovery_target_lsn = '%s'" % int_to_lsn(target_lsn),
                "recovery_target_inclusive = off",
                "recovery_target_action = 'shutdown'",
                ""]))
        chown_to_pg_user(path)

    def stop_at(self, point, timeout=180):
        """Starts the standby with point.lsn as recovery target, waits until it
        has stopped there and shut down, verifies where (log, pg_controldata),
        and returns the control data."""
        self.configure(point.lsn)
        log_start = os.path.getsize(self.log) if os.path.exists(self.log) else 0
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen([stock("postgres"), "-D", self.datadir], stdout=logf,
                                         stderr=subprocess.STDOUT, start_new_session=True,
                                         **as_pg_user_kwargs())
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            stop_process(self.proc, signal.SIGQUIT)
            raise AssertionError("the standby did not stop at %s within %d s:\n%s" % (
                int_to_lsn(point.lsn), timeout, tail(self.log)))
        with open(self.log, errors="replace") as f:
            f.seek(log_start)
            text = f.read()
        m = re.search(r'recovery stopping before WAL location \(LSN\) "([0-9A-F]+/[0-9A-F]+)"',
                      text)
        assert m and "shutdown at recovery target" in text, (
            "the standby did not stop at its recovery target %s (exit %s):\n%s" % (
                int_to_lsn(point.lsn), self.proc.returncode, text[-4000:]))
        stopped = lsn_to_int(m.group(1))
        # A record end (the import LSN) may lie before the next record's
        # start by alignment or a page header: then no record lies between.
        assert stopped == point.lsn or (not point.exact and point.lsn <= stopped < point.lsn + 64), (
            "the standby stopped before %s, not at the target %s" % (m.group(1),
                                                                   int_to_lsn(point.lsn)))
        ctl = controldata(self.datadir)
        assert ctl["Database cluster state"] == "shut down in recovery", ctl
        latest = lsn_to_int(ctl["Latest checkpoint location"])
        assert latest == point.checkpoint_lsn, (
            "the standby's shutdown restartpoint is at %s, not at the phase's checkpoint %s: "
            "its buffers may not all be on disk" % (int_to_lsn(latest),
                                                   int_to_lsn(point.checkpoint_lsn)))
        min_recovery = lsn_to_int(ctl["Minimum recovery ending location"])
        assert min_recovery <= point.lsn, ctl
        self.stops.append((point.lsn, stopped))
        return ctl

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            stop_process(self.proc, signal.SIGQUIT)


# -- reading the standby's files ------------------------------------------------

def standby_relation_forks(datadir):
    """{(spc, db, rel, fork): (nblocks, [(segno, path)])} of every relation file
    under base/ and global/."""
    found = {}
    dirs = [(GLOBALTABLESPACE_OID, 0, os.path.join(datadir, "global"))]
    base = os.path.join(datadir, "base")
    for name in os.listdir(base):
        if name.isdigit():
            dirs.append((DEFAULTTABLESPACE_OID, int(name), os.path.join(base, name)))
    segs = {}
    for spc, db, path in dirs:
        for name in os.listdir(path):
            m = REL_FILE_RE.match(name)
            if not m:
                continue
            key = (spc, db, int(m.group(1)), FORK_BY_SUFFIX[m.group(2)])
            segs.setdefault(key, []).append((int(m.group(3) or 0), os.path.join(path, name)))
    for key, files in segs.items():
        files.sort()
        last_seg, last_path = files[-1]
        size = os.path.getsize(last_path)
        assert size % BLCKSZ == 0, "%s: size %d is not a multiple of 8192" % (last_path, size)
        found[key] = (last_seg * RELSEG_BLOCKS + size // BLCKSZ, files)
    return found


def read_block(files, blk):
    segno, off = divmod(blk, RELSEG_BLOCKS)
    path = dict(files)[segno]
    with open(path, "rb") as f:
        f.seek(off * BLCKSZ)
        data = f.read(BLCKSZ)
    assert len(data) == BLCKSZ, "%s: short read of block %d" % (path, blk)
    return data


def standby_clog_segments(datadir):
    """{segno: bytes} of every pg_xact segment."""
    out = {}
    d = os.path.join(datadir, "pg_xact")
    for name in sorted(os.listdir(d)):
        if re.match(r"^[0-9A-F]{4,}$", name):
            with open(os.path.join(d, name), "rb") as f:
                out[int(name, 16)] = f.read()
    return out


# -- phases and points ---------------------------------------------------------

class OraclePoint:
    """One X_i: the LSN, the checkpoint that began its phase, and the catalog
    (db, relfilenode) -> access method name at that LSN."""

    def __init__(self, name, lsn, checkpoint_lsn, catalog, exact=True):
        self.exact = exact  # lsn is a record start: the standby stops exactly there
        self.name = name
        self.lsn = lsn
        self.checkpoint_lsn = checkpoint_lsn
        self.catalog = catalog

    def __repr__(self):
        return "<%s at %s>" % (self.name, int_to_lsn(self.lsn))


def catalog_snapshot(primary):
    """(db_oid or 0 for shared, relfilenode) -> access method, for every
    database that accepts connections."""
    out = {}
    dbs = primary.sql("select oid, datname from pg_database where datallowconn")
    for db_oid, datname in dbs:
        rows = primary.sql(
            "select pg_relation_filenode(c.oid), c.relkind, coalesce(a.amname, ''), "
            "c.reltablespace = %d from pg_class c left join pg_am a on a.oid = c.relam "
            "where pg_relation_filenode(c.oid) is not null" % GLOBALTABLESPACE_OID, datname)
        for filenode, relkind, amname, shared in rows:
            if relkind == "S":
                am = "sequence"
            elif relkind in ("r", "t", "m"):
                am = "heap"
            else:
                am = amname or "unknown"
            out[(0 if shared else db_oid, filenode)] = am
    return out


# -- the cluster ----------------------------------------------------------------

class OracleCluster:
    """Three safekeepers, a stock primary with the walproposer, the pageserver,
    a WAL archive (pg_receivewal from sk1) and a stock standby."""

    def __init__(self, fpw, with_pageserver=True):
        require(daemon("strata-safekeeper"), extension_path(), stock("postgres"))
        if with_pageserver:
            require(daemon("strata-pageserver"), os.path.join(patched_pg_bindir(), "postgres"))
        self.with_pageserver = with_pageserver
        self.root = make_shared_dir("strata-oracle-")
        self.timeline = os.urandom(16).hex()
        self.fpw = fpw
        self.safekeepers = []
        self.pageserver = None
        self.primary = None
        self.standby = None
        self.receivewal = None
        self.points = []
        self.import_lsn = None
        self.failed = False  # set by a test that fails: keeps the directory if asked
        self.feedback_history = []  # (time, disk_consistent_lsn) seen by the watcher
        self._readers = []  # page_reader()'s, closed by stop()
        self._watch_stop = threading.Event()
        self._watcher = None

    # -- setup ----------------------------------------------------------------
    def start(self):
        self.safekeepers = [Safekeeper(i, self.root) for i in (1, 2, 3)]
        for sk in self.safekeepers:
            sk.start()
        if self.with_pageserver:
            self.pageserver = Pageserver(self.root)
            self.pageserver.start()

        self.primary = Primary(self.root, self.fpw)
        self.primary.init()
        self.primary.start()  # without the extension
        self.primary.stop_clean()

        self.archive = os.path.join(self.root, "archive")
        os.makedirs(self.archive)
        chown_to_pg_user(self.archive)
        self.standby = Standby(self.root, self.primary.datadir, self.safekeepers[2],
                               self.timeline, self.archive)
        if self.with_pageserver:
            import_copy = os.path.join(self.root, "import")
            subprocess.run(["cp", "-a", self.primary.datadir, import_copy], check=True)
            self.import_lsn = self.pageserver.create_timeline(self.timeline, self.safekeepers,
                                                              import_copy)
            ctl = controldata(import_copy)
            checkpoint = lsn_to_int(ctl["Latest checkpoint location"])
            assert self.import_lsn > checkpoint, (int_to_lsn(self.import_lsn), ctl)
            # The first point: the imported state itself (catalog from pages).
            self.points.append(OraclePoint("import", self.import_lsn, checkpoint, {},
                                           exact=False))

        self.primary.enable_walproposer(self.safekeepers, self.timeline)
        self.primary.start()
        self.wait_committing()
        self.start_receivewal()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def wait_committing(self):
        def commits():
            try:
                self.primary.sql("select txid_current()")
                return True
            except psycopg.Error:
                return False
        wait_until(commits, 60, "the primary to commit through the safekeepers")

    def start_receivewal(self):
        # pg_receivewal starts at the segment of the position IDENTIFY_SYSTEM
        # reports: wait until sk1 holds WAL, or it would start at 0/0, fail,
        # and retry from a later segment, leaving a hole in the archive.
        # The commits went through on two safekeepers: sk1 may not even have
        # the timeline yet (HTTP 404) while the walproposer connects to it.
        flush = lsn_to_int(self.primary.sql("select pg_current_wal_flush_lsn()::text")[0][0])

        def sk1_holds_it():
            try:
                return lsn_to_int(self.safekeepers[0].status(self.timeline)["flush_lsn"]) >= flush
            except AssertionError as e:
                if "HTTP 404" not in str(e):
                    raise
                return False
        wait_until(sk1_holds_it, 60, "sk1 to hold WAL up to %s" % int_to_lsn(flush))
        log = os.path.join(self.root, "receivewal.log")
        conninfo = ("host=127.0.0.1 port=%d user=postgres options='-c tenant_id=%s "
                    "-c timeline_id=%s'" % (self.safekeepers[0].pg_port, TENANT, self.timeline))
        with open(log, "ab") as logf:
            self.receivewal = subprocess.Popen(
                [stock("pg_receivewal"), "-D", self.archive, "-d", conninfo, "-s", "1",
                 "--no-sync", "-v"], stdout=logf, stderr=subprocess.STDOUT,
                **as_pg_user_kwargs())

    def _watch(self):
        """Samples the pageserver's disk_consistent_lsn as the safekeepers
        recorded it from feedback (what their WAL removal obeys)."""
        while not self._watch_stop.wait(0.2):
            for sk in self.safekeepers:
                try:
                    fb = sk.status(self.timeline).get("pageserver_feedback", {})
                except Exception:  # a safekeeper not yet serving the timeline
                    continue
                dcl = fb.get("disk_consistent_lsn")
                if dcl and dcl != "0/0":
                    self.feedback_history.append((time.monotonic(), sk.id, lsn_to_int(dcl)))

    # -- phases ---------------------------------------------------------------
    def begin_phase(self):
        """CHECKPOINT on the primary, so the standby's shutdown at this phase's
        point finds a checkpoint record to make its restartpoint from."""
        self.primary.sql("checkpoint")

    def end_phase(self, name):
        """Takes the phase's point: the catalog first (its reads may prune
        pages, which writes WAL), then X_i = the insert position, and the
        newest checkpoint before it (the standby's restartpoint will be there;
        CREATE and DROP DATABASE make checkpoints of their own)."""
        catalog = catalog_snapshot(self.primary)
        lsn = lsn_to_int(self.primary.sql("select pg_current_wal_insert_lsn()::text")[0][0])
        checkpoint_lsn = lsn_to_int(self.primary.sql(
            "select checkpoint_lsn::text from pg_control_checkpoint()")[0][0])
        assert checkpoint_lsn < lsn
        point = OraclePoint(name, lsn, checkpoint_lsn, catalog)
        self.points.append(point)
        return point

    def committed_lsn(self):
        return min(lsn_to_int(sk.status(self.timeline)["commit_lsn"]) for sk in self.safekeepers)

    def finish_workload(self):
        """One more commit after the last point (the standby stops *before*
        the record at a point, so that record must exist), then waits until
        the safekeepers committed it and the pageserver ingested it."""
        self.primary.sql("create table if not exists oracle_end (x int)")
        self.primary.sql("insert into oracle_end values (1)")
        end = lsn_to_int(self.primary.sql("select pg_current_wal_flush_lsn()::text")[0][0])
        wait_until(lambda: self.committed_lsn() >= end, 60,
                   "the safekeepers to commit %s" % int_to_lsn(end))
        return end

    def wait_ingested(self, lsn, timeout=120):
        def ingested():
            st = self.pageserver.timeline_status(self.timeline)
            wr = st.get("walreceiver") or {}
            # A WAL receiver that stopped on an error will not catch up.
            assert wr.get("state") != "failed", (
                "the pageserver's WAL receiver failed at %s: %s" % (
                    st["last_record_lsn"], wr.get("last_error")))
            return lsn_to_int(st["last_record_lsn"]) >= lsn
        wait_until(ingested, timeout, "the pageserver to ingest up to %s" % int_to_lsn(lsn))

    # -- teardown -------------------------------------------------------------
    def diagnostics(self):
        self.failed = True
        out = []
        for name, path in [("primary", getattr(self.primary, "log", "")),
                           ("standby", getattr(self.standby, "log", "")),
                           ("pageserver", getattr(self.pageserver, "log", ""))] + [
                               ("sk%d" % sk.id, sk.log) for sk in self.safekeepers]:
            if path:
                out.append("---- %s ----\n%s" % (name, tail(path)))
        return "\n".join(out)

    def page_reader(self):
        """A PageReader of this cluster's timeline, closed by stop()."""
        reader = PageReader(self.pageserver, self.timeline)
        self._readers.append(reader)
        return reader

    def stop(self):
        for reader in self._readers:
            reader.close()
        self._readers = []
        self._watch_stop.set()
        if self._watcher is not None:
            self._watcher.join(5)
        if self.standby is not None:
            self.standby.kill()
        if self.primary is not None:
            self.primary.kill()
        stop_process(self.receivewal, signal.SIGINT)
        if self.pageserver is not None:
            self.pageserver.stop()
        for sk in self.safekeepers:
            sk.stop()
        if self.failed and os.environ.get("STRATA_KEEP_FAILED"):
            print("kept %s" % self.root)
        else:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def running_oracle(fpw, with_pageserver=True):
    """An OracleCluster, started; when the block raises, the daemons' logs
    are printed first; on leaving, everything it started is stopped."""
    cluster = OracleCluster(fpw, with_pageserver)
    try:
        cluster.start()
        yield cluster
    except BaseException:
        print(cluster.diagnostics())
        raise
    finally:
        cluster.stop()


# -- the comparison -------------------------------------------------------------

class Comparison:
    """The outcome of comparing the pageserver with the stopped standby at one
    point: counts and every mismatch (bounded list kept for the report)."""

    MAX_KEPT = 40

    def __init__(self, point):
        self.point = point
        self.forks = 0
        self.blocks = 0
        self.clog_pages = 0
        self.fsm_forks_skipped = 0
        self.gone_checked = 0
        self.by_am = {}
        self.mismatches = []
        self.nmismatch = 0

    def add(self, text):
        self.nmismatch += 1
        if len(self.mismatches) < self.MAX_KEPT:
            self.mismatches.append(text)

    def summary(self):
        head = ("%s at %s: %d forks (+%d dropped ones absent), %d blocks (%s), %d CLOG pages, "
                "%d FSM forks skipped, %d mismatches" % (
                    self.point.name, int_to_lsn(self.point.lsn), self.forks, self.gone_checked,
                                   self.blocks, ", ".join("%s %d" % kv for kv in
                                                          sorted(self.by_am.items())),
                                   self.clog_pages, self.fsm_forks_skipped, self.nmismatch))
        return "\n".join([head] + ["  " + m for m in self.mismatches])


def relname(key):
    spc, db, rel, fork = key
    return "%d/%d/%d.%s" % (spc, db, rel, pagemask.FORK_NAMES[fork])


def compare_at(point, standby_datadir, pageserver, timeline, reader, seen_before=None):
    """Compares the stopped standby's files with the pageserver at point.lsn.
    seen_before (a set, updated here) holds the forks of earlier points: those
    gone from the standby must not exist at the pageserver either."""
    cmp = Comparison(point)
    standby_forks = standby_relation_forks(standby_datadir)
    ps_forks = pageserver.rels(timeline, point.lsn)
    for forks in (standby_forks, ps_forks):
        for key in [k for k in forks if k[3] == pagemask.FORK_FSM]:
            del forks[key]
            if forks is standby_forks:
                cmp.fsm_forks_skipped += 1
    for key in sorted(set(standby_forks) - set(ps_forks)):
        cmp.add("%s: exists on the standby (%d blocks), not in the pageserver's rels" % (
            relname(key), standby_forks[key][0]))
    for key in sorted(set(ps_forks) - set(standby_forks)):
        cmp.add("%s: in the pageserver's rels (%d blocks), not on the standby" % (
            relname(key), ps_forks[key]))

    # What a compute asks: Exists and Nblocks, for every fork the standby has
    # and for every fork of an earlier point it no longer has (dropped).
    gone = sorted(set(seen_before or ()) - set(standby_forks))
    asked = sorted(standby_forks) + gone
    for key, (exists, nblocks) in zip(asked, reader.rel_sizes(asked, point.lsn)):
        want = standby_forks[key][0] if key in standby_forks else None
        if want is None and exists is not False:
            cmp.add("%s: dropped before this point, but Exists says %s" % (relname(key), exists))
        elif want is not None and (exists is not True or nblocks != want):
            cmp.add("%s: %d blocks on the standby, Exists %s Nblocks %s at the pageserver" % (
                relname(key), want, exists, nblocks))
    cmp.gone_checked = len(gone)
    if seen_before is not None:
        seen_before.update(standby_forks)

    requests, expected = [], []
    for key in sorted(standby_forks):
        nblocks, files = standby_forks[key]
        cmp.forks += 1
        if key in ps_forks and ps_forks[key] != nblocks:
            cmp.add("%s: %d blocks on the standby, %d at the pageserver" % (
                relname(key), nblocks, ps_forks[key]))
        for blk in range(nblocks):
            requests.append(key + (blk,))
            expected.append(files)
    pages = reader.get_pages(requests, point.lsn)
    assert len(pages) == len(requests)
    for req, files, actual in zip(requests, expected, pages):
        spc, db, rel, fork, blk = req
        want = read_block(files, blk)
        if isinstance(actual, Exception):
            cmp.add("%s blk %d: GetPage@%s failed: %s" % (relname(req[:4]), blk,
                                                          int_to_lsn(point.lsn), actual))
            continue
        am = pagemask.identify_am(want, fork)
        if fork == pagemask.FORK_MAIN and am not in ("zero", "unknown"):
            am = point.catalog.get((db, rel), am)
        cmp.blocks += 1
        cmp.by_am[am] = cmp.by_am.get(am, 0) + 1
        diff = pagemask.compare_pages(want, actual, am, blk)
        if diff is not None:
            cmp.add("%s blk %d (%s): first difference at byte %d (%s), %d bytes differ; "
                    "standby %s pageserver %s; standby lsn %s, pageserver lsn %s%s" % (
                        relname(req[:4]), blk, am, diff["offset"], diff["where"], diff["ndiff"],
                        diff["expected_bytes"], diff["actual_bytes"],
                        int_to_lsn(diff["expected_header"]["lsn"]),
                        int_to_lsn(diff["actual_header"]["lsn"]),
                        "; " + diff["note"] if diff["note"] else ""))

    for segno, data in sorted(standby_clog_segments(standby_datadir).items()):
        got = reader.slru_segment(SLRU_CLOG, segno, point.lsn)
        if isinstance(got, Exception):
            cmp.add("pg_xact/%04X: GetSlruSegment failed: %s" % (segno, got))
            continue
        if len(got) != len(data):
            cmp.add("pg_xact/%04X: %d pages on the standby, %d at the pageserver" % (
                segno, len(data) // BLCKSZ, len(got) // BLCKSZ))
        for page in range(min(len(data), len(got)) // BLCKSZ):
            a, b = data[page * BLCKSZ:(page + 1) * BLCKSZ], got[page * BLCKSZ:(page + 1) * BLCKSZ]
            cmp.clog_pages += 1
            at = pagemask.first_difference(a, b)
            if at is not None:
                cmp.add("pg_xact/%04X page %d: first difference at byte %d (xid %d): "
                        "standby %s pageserver %s" % (
                            segno, page, at,
                            (segno * SLRU_PAGES_PER_SEGMENT + page) * BLCKSZ * 4 + at * 4,
                            a[at:at + 8].hex(), b[at:at + 8].hex()))
    return cmp
