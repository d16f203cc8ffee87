"""PostgreSQL's own regression suite against a Strata compute (docs/design.md §10).

tests/regress/run_pg_regress.sh runs the patched build's pg_regress with the
installcheck schedule and passes only when the failing tests are exactly the
ones listed, with reasons, in tests/regress/expected_diffs.txt.

- test_runner_verdicts: the runner itself, against a plain patched
  PostgreSQL started here (no Strata): a test that fails and is listed
  passes the run; the same failure unlisted fails it; a listed test that
  passes fails it too.  Seconds, so a broken runner cannot hide behind a
  green compute run.
- test_installcheck_schedule_on_compute: `strata up` with a stateless
  compute (STRATA_COMPUTE_MODE=stateless), then the compute is
  restarted on its own data directory with a small shared_buffers (default
  2MB, STRATA_REGRESS_SHARED_BUFFERS) so that pages are evicted and read back
  all the time (synchronized scans off: at stock's default size no
  regression table is large enough for them), and a local file cache of 2MB (STRATA_REGRESS_FILE_CACHE)
  whose slots are reused all the time; the whole installcheck schedule runs
  against it.  The CLI
  has no flag for compute settings yet, so the restart is done here with the
  patched pg_ctl (-o "-c shared_buffers=..."), and this test stops that
  postmaster itself by pid.  The schedule's groups run in parallel
  (installcheck-parallel, STRATA_REGRESS_MAX_CONNECTIONS=0, the default):
  backends evict each other's pages, which is what found the smgr's
  concurrency bugs (test_smgr_concurrency.py).  Measured on 2 CPUs: 134 s
  for the 217 tests on a quiet machine, 227 s with other tests running;
  STRATA_REGRESS_MAX_CONNECTIONS=1 runs them one at a time (`make
  installcheck`; 1231 s on a machine with load average ~25).
"""

import os
import shutil
import signal
import subprocess
import time

import psycopg
import pytest

from conftest import (REPO, as_pg_user_kwargs, chown_to_pg_user, free_port, kill_hard,
                      make_shared_dir, pg_user, pid_alive)

RUNNER = os.path.join(REPO, "tests", "regress", "run_pg_regress.sh")
EXPECTED = os.path.join(REPO, "tests", "regress", "expected_diffs.txt")
BUILD_SH = os.path.join(REPO, "compute", "postgres", "build.sh")
SHARED_BUFFERS = os.environ.get("STRATA_REGRESS_SHARED_BUFFERS", "2MB")
# The local file cache in front of the pageserver, small enough that most
# misses still go to the pageserver and its slots are reused all the time.
FILE_CACHE = os.environ.get("STRATA_REGRESS_FILE_CACHE", "2MB")
# 0 = installcheck-parallel (the schedule's groups in parallel: faster, and
# backends evict each other's pages); 1 = `make installcheck` (one at a time).
MAX_CONNECTIONS = os.environ.get("STRATA_REGRESS_MAX_CONNECTIONS", "0")


def patched_prefix():
    if os.environ.get("STRATA_PG_PREFIX"):
        return os.environ["STRATA_PG_PREFIX"]
    res = subprocess.run(["bash", BUILD_SH, "--prefix-only"], capture_output=True, text=True,
                         timeout=60)
    lines = res.stdout.strip().splitlines()
    if res.returncode != 0 or not lines:
        return None
    return lines[-1]


PREFIX = patched_prefix()
# The subject is PostgreSQL on the compute: the release daemons (conftest.py).
pytestmark = [pytest.mark.release_daemons, pytest.mark.skipif(
    PREFIX is None or not os.path.exists(os.path.join(PREFIX or "/nonexistent", "bin", "postgres")),
    reason="patched PostgreSQL not built (compute/postgres/build.sh --prefix-only)")]


def run_regress(host, port, *extra, timeout=1500):
    cmd = ["bash", RUNNER, "--host", host, "--port", str(port), "--user", pg_user()] + list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return proc


def pg_ctl(bindir, *args, timeout=180):
    return subprocess.run([os.path.join(bindir, "pg_ctl")] + list(args), capture_output=True,
                          text=True, timeout=timeout, **as_pg_user_kwargs())


def postmaster_pid(datadir):
    try:
        with open(os.path.join(datadir, "postmaster.pid")) as f:
            return int(f.readline().strip())
    except (OSError, ValueError):
        return None


def stop_postmaster(bindir, datadir, pid):
    if pid is None or not pid_alive(pid):
        return
    pg_ctl(bindir, "-D", datadir, "-m", "fast", "-w", "-t", "60", "stop", timeout=90)
    if pid_alive(pid):
        os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    if pid_alive(pid):
        kill_hard([pid])


@pytest.fixture
def plain_patched_pg():
    """A plain patched PostgreSQL (no strata.so) on a free port: (port, datadir)."""
    work = make_shared_dir("strata-regress-plain-")
    datadir = os.path.join(work, "data")
    bindir = os.path.join(PREFIX, "bin")
    pid = None
    try:
        chown_to_pg_user(work)
        subprocess.run([os.path.join(bindir, "initdb"), "-D", datadir, "-U", pg_user(), "-A",
                        "trust", "-E", "UTF8", "--locale=C", "--no-sync"], check=True,
                       capture_output=True, timeout=180, **as_pg_user_kwargs())
        port = free_port()
        opts = ("-c port=%d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s "
                "-c fsync=off -c shared_buffers=1MB" % (port, work))
        res = pg_ctl(bindir, "-D", datadir, "-l", os.path.join(work, "log"), "-o", opts, "-w",
                     "-t", "120", "start")
        assert res.returncode == 0, res.stdout + res.stderr
        pid = postmaster_pid(datadir)
        yield port, work
    finally:
        stop_postmaster(bindir, datadir, pid)
        shutil.rmtree(work, ignore_errors=True)


def write_list(directory, names):
    path = os.path.join(directory, "expected.txt")
    with open(path, "w") as f:
        f.write("# test list\n")
        for name in names:
            f.write("%s  listed by the test\n" % name)
    return path


def test_runner_verdicts(plain_patched_pg):
    """`select` run without `test_setup` fails (its tables do not exist);
    `boolean` passes on its own."""
    port, work = plain_patched_pg
    out = make_shared_dir("strata-regress-out-")
    try:
        listed = write_list(work, ["select"])
        ok = run_regress("127.0.0.1", port, "--outputdir", os.path.join(out, "1"),
                         "--expected", listed, "boolean", "select")
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert "2 tests, 1 failed (1 expected)" in ok.stdout, ok.stdout

        unlisted = write_list(work, [])
        bad = run_regress("127.0.0.1", port, "--outputdir", os.path.join(out, "2"),
                          "--expected", unlisted, "boolean", "select")
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert "UNEXPECTED failures" in bad.stdout and "  select" in bad.stdout, bad.stdout

        stale = write_list(work, ["select", "boolean"])
        rot = run_regress("127.0.0.1", port, "--outputdir", os.path.join(out, "3"),
                          "--expected", stale, "boolean", "select")
        assert rot.returncode == 1, rot.stdout + rot.stderr
        assert "but passed" in rot.stdout and "  boolean" in rot.stdout, rot.stdout

        # A may-fail entry judges nothing: failing or passing, the run passes.
        flaky = os.path.join(work, "mayfail.txt")
        with open(flaky, "w") as f:
            f.write("select (may-fail) fails without test_setup\n"
                    "boolean (may-fail) passes\n")
        either = run_regress("127.0.0.1", port, "--outputdir", os.path.join(out, "4"),
                             "--expected", flaky, "boolean", "select")
        assert either.returncode == 0, either.stdout + either.stderr
        assert "select failed (listed as may-fail" in either.stdout, either.stdout
    finally:
        shutil.rmtree(out, ignore_errors=True)


def restart_compute_with(cluster, settings):
    """Fast-stops the CLI's compute and starts a postmaster on the same data
    directory with the same binary and extra -c settings.  Returns
    (bindir, datadir, pid); the caller stops it (stop_postmaster)."""
    datadir = cluster.status()["compute"]["datadir"]
    cluster.stop("compute")
    assert os.path.exists(os.path.join(datadir, "PG_VERSION")), (
        "`strata stop compute` removed the data directory %s" % datadir)
    with open(os.path.join(datadir, "postmaster.opts")) as f:
        postgres = f.read().split()[0].strip('"')
    bindir = os.path.dirname(postgres)
    assert os.path.exists(os.path.join(bindir, "pg_ctl")), bindir
    opts = " ".join("-c %s=%s" % kv for kv in settings.items())
    # D/compute belongs to the postgres user (D itself does not).
    log = os.path.join(os.path.dirname(datadir), "regress-postmaster.log")
    res = pg_ctl(bindir, "-D", datadir, "-l", log, "-o", opts, "-w", "-t", "120", "start")
    pid = postmaster_pid(datadir)
    assert res.returncode == 0, res.stdout + res.stderr + cluster.log_tails()
    return bindir, datadir, pid


def _lsn(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def wait_safekeepers_hold(cluster, lsn, timeout=60):
    """Waits until every safekeeper's flush LSN reaches lsn ("X/Y")."""
    deadline = time.monotonic() + timeout
    while True:
        sks = cluster.status()["safekeepers"]
        if all(sk.get("flush_lsn") and _lsn(sk["flush_lsn"]) >= _lsn(lsn) for sk in sks):
            return
        assert time.monotonic() < deadline, "safekeepers did not reach %s: %s" % (lsn, sks)
        time.sleep(0.1)


def test_installcheck_schedule_on_compute(cluster_dir):
    cluster = cluster_dir
    cluster.env["STRATA_COMPUTE_MODE"] = "stateless"
    cluster.up()
    assert cluster.sql("show strata.pageserver")[0][0], "the compute is not stateless"
    # The restart below reuses this data directory: the safekeepers must hold
    # its WAL first (the new compute's walproposer starts where they end, and
    # the pageserver waits for that WAL before answering).
    wait_safekeepers_hold(cluster, cluster.sql("select pg_current_wal_flush_lsn()")[0][0])
    # synchronize_seqscans off: with 2MB of shared_buffers every table over
    # 512kB qualifies for synchronized scans (stock's threshold is a quarter of
    # shared_buffers), so a scan without ORDER BY may start where another
    # backend's scan of the same table is (portals' FETCH FROM foo25ns saw
    # row 8050 first, not 8800).  At stock's 128MB tenk1 never qualifies.
    bindir, datadir, pid = restart_compute_with(cluster, {"shared_buffers": SHARED_BUFFERS,
                                                            "strata.file_cache_size": FILE_CACHE,
                                                            "synchronize_seqscans": "off"})
    out = make_shared_dir("strata-regress-")
    try:
        with cluster.connect() as conn:
            assert conn.execute("show shared_buffers").fetchone()[0] == SHARED_BUFFERS
            assert conn.execute("show synchronize_seqscans").fetchone()[0] == "off"
            libs = conn.execute("show shared_preload_libraries").fetchone()[0]
            assert "strata" in libs, libs
        started = time.monotonic()
        proc = run_regress("127.0.0.1", cluster.status()["compute"]["port"], "--outputdir", out,
                           "--expected", EXPECTED, "--timeout", "1400",
                           "--max-connections", MAX_CONNECTIONS)
        elapsed = time.monotonic() - started
        print(proc.stdout[-3000:])
        print("pg_regress installcheck against the compute (shared_buffers %s): %.0f s"
              % (SHARED_BUFFERS, elapsed))
        diffs = os.path.join(out, "regression.diffs")
        detail = ""
        if proc.returncode != 0 and os.path.exists(diffs):
            with open(diffs, errors="replace") as f:
                detail = f.read()[:8000]
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr + detail
        # The compute is still the one we restarted and still takes writes.
        assert pid_alive(pid)
        with psycopg.connect(cluster.connstr, autocommit=True) as conn:
            conn.execute("create table after_regress (x int)")
            conn.execute("insert into after_regress values (1)")
    finally:
        stop_postmaster(bindir, datadir, pid)
        if not os.environ.get("STRATA_KEEP_FAILED"):
            shutil.rmtree(out, ignore_errors=True)
