"""Fixtures for the cluster-level integration tests.

`cluster` runs `strata up --dir <fresh dir>` with the CLI and daemons of the
sanitized build (STRATA_SAN_BUILD) and the extension of the release build
(STRATA_BUILD/lib/strata.so), yields a StrataCluster handle, and afterwards
always runs `strata down` and SIGKILLs by pid whatever is left of it.

A test marked `release_daemons` runs the CLI and daemons of the release
build instead (daemon_build()).  That is for tests whose subject is the
compute -- the extension (always the release build's) and PostgreSQL's own
behaviour on it -- or the CLI that starts the processes (test_cluster,
test_cli_remote_up, test_branches, the compute launchers): the sanitized
daemons added no coverage of their subject there but made them slower (an
SP-GiST build: 30 s against 290-420 s; test_cluster and test_walproposer
together: 111 s against 73 s).  The tests whose subject is a daemon (the
pageserver's, the safekeepers', durability, auth, bad input) keep the
sanitized build.

Tests skip only when a binary they need has not been built; the reason names
the missing file.
"""

import ctypes
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import psycopg
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Ports for test servers: one picker for tests and benchmarks (bench_proc).
sys.path.insert(0, os.path.join(REPO, "bench"))
from bench_proc import free_port, free_port_block  # noqa: E402,F401
SAN_BUILD = os.environ.get("STRATA_SAN_BUILD", os.path.join(REPO, "build-san"))
BUILD = os.environ.get("STRATA_BUILD", os.path.join(REPO, "build"))
PG_BINDIR = os.environ.get("STRATA_PG_BINDIR", "/usr/lib/postgresql/15/bin")
# Stock oracles always come from Debian's PostgreSQL (docs/design.md §1.5).
STOCK_PG_BINDIR = "/usr/lib/postgresql/15/bin"

LSN_RE = re.compile(r"^[0-9A-F]{1,8}/[0-9A-F]{1,8}$")
COMPONENTS = ("sk1", "sk2", "sk3", "pageserver", "compute")


def lsn_to_int(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def int_to_lsn(value):
    return "%X/%X" % (value >> 32, value & 0xFFFFFFFF)


def strata_bin():
    return os.path.join(SAN_BUILD, "bin", "strata")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "release_daemons: run the CLI and daemons of the release build "
        "(STRATA_BUILD), for a long test whose subject is the compute (conftest.py)")


def daemon_build(node=None):
    """The build directory whose CLI and daemons the test of pytest node
    runs: STRATA_BUILD when it is marked release_daemons, else
    STRATA_SAN_BUILD."""
    if node is not None and node.get_closest_marker("release_daemons") is not None:
        return BUILD
    return SAN_BUILD


def pageserver_bin():
    return os.path.join(SAN_BUILD, "bin", "strata-pageserver")


def pageserver_built():
    return os.access(pageserver_bin(), os.X_OK)


def extension_path():
    return os.path.join(BUILD, "lib", "strata.so")


def walredo_lib_path():
    """The redo helper library of the release build (the sanitized build does
    not build Postgres extensions); the pageserver finds it through
    STRATA_WALREDO_LIB."""
    return os.path.join(BUILD, "lib", "strata_walredo.so")


def require_binaries(*paths):
    """Skips the test when one of paths has not been built."""
    for path in paths:
        if not os.access(path, os.X_OK if not path.endswith(".so") else os.R_OK):
            pytest.skip("not built yet: %s" % path)


def pg_user():
    return "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name


def as_pg_user_kwargs():
    """subprocess keyword arguments that run a postgres program unprivileged."""
    if os.geteuid() != 0:
        return {}
    pw = pwd.getpwnam("postgres")
    return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}


def make_shared_dir(prefix):
    """A fresh directory the unprivileged postgres user can traverse and use."""
    path = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    os.chmod(path, 0o755)
    return path


def chown_to_pg_user(path):
    if os.geteuid() != 0:
        return
    pw = pwd.getpwnam("postgres")
    for root, dirs, files in os.walk(path):
        os.chown(root, pw.pw_uid, pw.pw_gid)
        for name in files:
            os.chown(os.path.join(root, name), pw.pw_uid, pw.pw_gid)


def pid_alive(pid):
    """True when pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def sysv_segments_created_by(pids):
    """The System V shared memory segments still present whose creator is in pids."""
    pids = set(pids)
    found = []
    with open("/proc/sysvipc/shm") as f:
        header = f.readline().split()
        for line in f:
            row = dict(zip(header, line.split()))
            if int(row["cpid"]) in pids:
                found.append(row)
    return found


def processes_using(path):
    """pids whose command line mentions path (daemons get their dirs as args)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmdline = f.read().decode(errors="replace")
        except OSError:
            continue
        if path in cmdline and int(entry) != os.getpid():
            found.append(int(entry))
    return found


def children_of(pid):
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            kids.append(int(entry))
    return kids


def kill_hard(pids):
    """SIGKILLs pids and waits for them.  A postmaster among them runs no
    exit callbacks, so its System V interlock segment outlives it; postgres
    would remove it on a restart in the same directory, but a test's
    directory is usually deleted instead.  Remove it here once nothing is
    attached, so that test runs do not fill the machine's SHMMNI."""
    segments = sysv_segments_created_by(pids)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    for seg in segments:
        remove_unattached_segment(int(seg["shmid"]))


def remove_unattached_segment(shmid):
    """IPC_RMID on shmid when it still exists with no process attached."""
    with open("/proc/sysvipc/shm") as f:
        header = f.readline().split()
        rows = [dict(zip(header, line.split())) for line in f]
    if any(int(r["shmid"]) == shmid and int(r["nattch"]) == 0 for r in rows):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmctl(ctypes.c_int(shmid), ctypes.c_int(0), None)  # IPC_RMID


def wait_until(predicate, timeout, what, interval=0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)


class StrataCluster:
    """A local cluster under one directory, driven through the strata CLI."""

    def __init__(self, directory, build=None):
        self.dir = directory
        self.strata = os.path.join(build or SAN_BUILD, "bin", "strata")
        self.env = dict(os.environ)
        self.env["STRATA_EXTENSION"] = extension_path()
        self.env.setdefault("STRATA_WALREDO_LIB", walredo_lib_path())
        self.env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")

    # -- the CLI ---------------------------------------------------------
    def run(self, *args, check=True, timeout=180):
        args = list(args)
        if "--dir" not in args and args and args[0] != "demo":
            args[1:1] = ["--dir", self.dir]
        cmd = [self.strata] + args
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError("%s exited %d\nstdout:\n%s\nstderr:\n%s\n%s" % (
                " ".join(cmd), proc.returncode, proc.stdout, proc.stderr, self.log_tails()))
        return proc

    def page_get(self, rel, blk, fork=None, lsn=None, check=True, timeout=120):
        """`strata page get`; stdout stays bytes (the raw page)."""
        cmd = [self.strata, "page", "get", "--dir", self.dir, "--rel", rel, "--blk", str(blk)]
        if fork is not None:
            cmd += ["--fork", fork]
        if lsn is not None:
            cmd += ["--lsn", lsn]
        proc = subprocess.run(cmd, env=self.env, capture_output=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError("%s exited %d\nstderr:\n%s\n%s" % (
                " ".join(cmd), proc.returncode, proc.stderr.decode(errors="replace"),
                self.log_tails()))
        return proc

    def up(self, *extra):
        return self.run("up", *extra)

    def down(self):
        return self.run("down")

    def status(self):
        proc = self.run("status", "--json")
        return json.loads(proc.stdout)

    def stop(self, name, immediate=False):
        args = ["stop", name] + (["--immediate"] if immediate else [])
        return self.run(*args)

    def start(self, name):
        return self.run("start", name)

    # -- handles ---------------------------------------------------------
    @property
    def connstr(self):
        return self.status()["compute"]["connstr"]

    def connect(self, **kwargs):
        kwargs.setdefault("autocommit", True)
        kwargs.setdefault("connect_timeout", 10)
        return psycopg.connect(self.connstr, **kwargs)

    def sql(self, query, params=None):
        with self.connect() as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else None

    def safekeeper(self, name):
        for sk in self.status()["safekeepers"]:
            if sk["name"] == name:
                return sk
        raise KeyError(name)

    def ids(self):
        """(tenant_id, timeline_id) of the cluster, from D/cluster.json."""
        with open(os.path.join(self.dir, "cluster.json")) as f:
            state = json.load(f)
        return state["tenant_id"], state["timeline_id"]

    def tokens(self):
        """(admin token, tenant token) of a cluster with auth (D/auth.json,
        docs/operations.md), or (None, None) for one made with --no-auth."""
        with open(os.path.join(self.dir, "cluster.json")) as f:
            state = json.load(f)
        if not state.get("auth"):
            return None, None
        with open(os.path.join(self.dir, "auth.json")) as f:
            auth = json.load(f)
        return auth["admin_token"], auth["tenants"][state["tenant_id"]]

    def bearer(self):
        """HTTP headers that carry the admin token (none without auth)."""
        admin, _tenant = self.tokens()
        return {"Authorization": "Bearer " + admin} if admin else {}

    def http_get_json(self, port, path, timeout=10):
        """GET a daemon's HTTP path with the admin token; the parsed body."""
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                     headers=self.bearer())
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.load(resp)

    def safekeeper_connstr(self, name):
        """libpq connection string of a safekeeper's pg port for this timeline
        (what pg_receivewal or a standby's primary_conninfo uses), with the
        tenant's token as the password when the cluster has auth."""
        tenant, timeline = self.ids()
        _admin, token = self.tokens()
        return ("host=127.0.0.1 port=%d user=%s options='-c tenant_id=%s -c timeline_id=%s'%s"
                % (self.safekeeper(name)["pg_port"], pg_user(), tenant, timeline,
                   " password=%s" % token if token else ""))

    def safekeeper_datadir(self, name):
        return os.path.join(self.dir, name)

    @property
    def compute_datadir(self):
        return os.path.join(self.dir, "compute", "pgdata")

    def pg_program(self, name):
        return os.path.join(PG_BINDIR, name)

    def all_pids(self):
        """Every process of this cluster: daemons by pid file and cmdline, plus
        the postmaster's children."""
        pids = set(processes_using(self.dir))
        for name in ("sk1", "sk2", "sk3", "compute", "pageserver"):
            try:
                with open(os.path.join(self.dir, name + ".pid")) as f:
                    pid = int(f.read().strip())
            except (OSError, ValueError):
                continue
            if pid_alive(pid) and pid in pids:
                pids.update(children_of(pid))
        return sorted(p for p in pids if pid_alive(p))

    def kill_everything(self):
        """kill -9 every process of the cluster (the compute's children too)."""
        kill_hard(self.all_pids())

    def log_tails(self, lines=25):
        out = []
        for name in ("sk1", "sk2", "sk3", "pageserver", "compute", "initdb"):
            path = os.path.join(self.dir, name + ".log")
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    tail = f.readlines()[-lines:]
                out.append("---- %s ----\n%s" % (path, "".join(tail)))
        return "\n".join(out)


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)


def _new_cluster_dir():
    require_binaries(strata_bin(), os.path.join(SAN_BUILD, "bin", "strata-safekeeper"),
                     extension_path())
    return make_shared_dir("strata-it-")


@pytest.fixture
def cluster_dir(request):
    """A fresh cluster directory, torn down (strata down, then SIGKILL) at the end."""
    directory = _new_cluster_dir()
    handle = StrataCluster(directory, daemon_build(request.node))
    try:
        yield handle
    finally:
        failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
        if failed:
            print(handle.log_tails(60))
        try:
            handle.run("down", check=False, timeout=120)
        except subprocess.TimeoutExpired:
            pass
        handle.kill_everything()
        if failed and os.environ.get("STRATA_KEEP_FAILED"):
            print("kept %s" % directory)
        else:
            shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def cluster(cluster_dir):
    """A running cluster (strata up done)."""
    cluster_dir.up()
    yield cluster_dir
