"""PostgreSQL's own regression suite against a Strata compute (DESIGN 11).

tests/regress/run_pg_regress.sh runs the patched build's pg_regress with the
installcheck schedule and passes only when the failing tests are exactly the
ones listed, with reasons, in tests/regress/expected_diffs.txt.

- test_runner_verdicts: the runner itself, against a plain patched
  PostgreSQL started here (no Strata): a test that fails and is listed
  passes the run; the same failure unlisted fails it; a listed test that
  passes fails it too.  Seconds, so a broken runner cannot hide behind a
  green compute run.
- NOT YET HERE (tests/regress/test_pg_regress_compute.py.wip, to be moved
  in once a full run's failures match expected_diffs.txt):
  test_installcheck_schedule_on_compute: `strata up` with a stateless
  compute (STRATA_COMPUTE_MODE=stateless), then the compute is
  restarted on its own data directory with a small shared_buffers (default
  2MB, STRATA_REGRESS_SHARED_BUFFERS) so that pages are evicted and read back
  all the time; the whole installcheck schedule runs against it.  The CLI
  has no flag for compute settings yet, so the restart is done here with the
  patched pg_ctl (-o "-c shared_buffers=..."), and this test stops that
  postmaster itself by pid.
"""

import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import (REPO, as_pg_user_kwargs, chown_to_pg_user, kill_hard, make_shared_dir,
                      pg_user, pid_alive)

RUNNER = os.path.join(REPO, "tests", "regress", "run_pg_regress.sh")
EXPECTED = os.path.join(REPO, "tests", "regress", "expected_diffs.txt")
BUILD_SH = os.path.join(REPO, "compute", "postgres", "build.sh")


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
pytestmark = pytest.mark.skipif(
    PREFIX is None or not os.path.exists(os.path.join(PREFIX or "/nonexistent", "bin", "postgres")),
    reason="patched PostgreSQL not built (compute/postgres/build.sh --prefix-only)")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    finally:
        shutil.rmtree(out, ignore_errors=True)
