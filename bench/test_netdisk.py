"""Tests of the simulated network disk (tests/tools/netdisk.c through bench/bench_netdisk.py).

Real FUSE mounts of a scratch directory: what is written through the mount
lands in the backing directory with the postgres user's ownership; the
write an fsync pushes out and a read that misses the page cache each wait at
least the volume's latency, a read the page cache holds does not reach the
volume at all; a file unlinked while open still works and closes; the
IOPS limit spaces IOs out; the counters say what the volume served; bad
options get a clear usage error.  The time checks are lower bounds the
program guarantees by sleeping (never upper bounds: the machine is shared).
An fsync costs nothing beyond the writes it pushes out (a cloud volume
acknowledges a write once it is durable).
"""

import os
import pwd
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# pylint: disable=wrong-import-position
from bench_netdisk import netdisk, netdisk_program  # noqa: E402
from bench_proc import PG_OS_USER, BenchError, pg_workdir  # noqa: E402
from bench_testlib import need_strata_build  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="FUSE mounts need root and /dev/fuse")


@pytest.fixture(name="work")
def work_fixture():
    work = pg_workdir("/tmp", "strata-netdisk-test-")
    yield work
    subprocess.run(["umount", "-l", os.path.join(work, "mnt")], capture_output=True,
                   check=False)
    subprocess.run(["rm", "-rf", work], check=False)


def _mount(work, latency_us=20000, iops=10000, mbps=1000):
    build = need_strata_build(("bin/strata-netdisk",))
    return netdisk(build, os.path.join(work, "mnt"), os.path.join(work, "backing"), latency_us,
                   iops, mbps)


def test_writes_land_in_the_backing_directory_and_fsync_waits_the_latency(work):
    with _mount(work, latency_us=20000) as nd:
        path = os.path.join(nd.mountpoint, "f")
        before = nd.stats()
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            os.write(fd, b"x" * 65536)
            t0 = time.monotonic()
            os.fdatasync(fd)
            took = time.monotonic() - t0
        finally:
            os.close(fd)
        after = nd.stats()
        # The dirty pages went out as at least one write IO, at least the
        # 20 ms round trip, before the fsync returned.
        assert took >= 0.020, took
        assert after["writes"] - before["writes"] >= 1
        assert after["write_bytes"] - before["write_bytes"] >= 65536
        assert after["fsyncs"] - before["fsyncs"] == 1
        assert after["wait_us"] - before["wait_us"] >= 20000
        st = os.stat(os.path.join(nd.backing, "f"))
        assert st.st_size == 65536
        assert st.st_uid == pwd.getpwnam(PG_OS_USER).pw_uid
        os.mkdir(os.path.join(nd.mountpoint, "d"))
        os.rename(path, os.path.join(nd.mountpoint, "d", "g"))
        assert os.listdir(os.path.join(nd.backing, "d")) == ["g"]
        # A file unlinked while open (a relation another backend dropped)
        # stays readable through its descriptor, and closing it succeeds:
        # PostgreSQL PANICs on a failed close of a data file.
        fd = os.open(os.path.join(nd.mountpoint, "d", "g"), os.O_RDWR)
        try:
            os.unlink(os.path.join(nd.mountpoint, "d", "g"))
            assert not os.path.exists(os.path.join(nd.mountpoint, "d", "g"))
            assert os.pread(fd, 65536, 0) == b"x" * 65536
            os.pwrite(fd, b"z", 0)
            os.fsync(fd)
        finally:
            os.close(fd)
    assert not os.path.ismount(os.path.join(work, "mnt"))
    assert nd.proc.returncode == 0


def test_a_read_reaches_the_volume_only_when_the_page_cache_misses(work):
    backing = os.path.join(work, "backing")
    os.makedirs(backing)
    with open(os.path.join(backing, "cold"), "wb") as f:
        f.write(os.urandom(8192))
    with _mount(work, latency_us=30000) as nd:
        path = os.path.join(nd.mountpoint, "cold")
        before = nd.stats()
        with open(path, "rb") as f:
            t0 = time.monotonic()
            first = f.read(8192)
            took = time.monotonic() - t0
        middle = nd.stats()
        with open(path, "rb") as f:
            again = f.read(8192)
        after = nd.stats()
        assert first == again and len(first) == 8192
        assert took >= 0.030, took
        assert middle["reads"] - before["reads"] >= 1
        assert middle["read_bytes"] - before["read_bytes"] >= 8192
        # The second open kept the page cache: nothing reached the volume.
        assert after["reads"] == middle["reads"]


def test_the_iops_limit_spaces_ios_out(work):
    with _mount(work, latency_us=0, iops=50) as nd:
        fd = os.open(os.path.join(nd.mountpoint, "f"), os.O_CREAT | os.O_WRONLY, 0o600)
        try:
            t0 = time.monotonic()
            for i in range(11):
                os.pwrite(fd, b"y" * 4096, i * 4096)
                os.fdatasync(fd)
            took = time.monotonic() - t0
        finally:
            os.close(fd)
        # 11 write IOs at 50 per second: the last starts 10 x 20 ms after the
        # first.
        assert took >= 0.200, took
        st = nd.stats()
        assert st["fsyncs"] == 11 and st["writes"] >= 11


def test_bad_options_are_refused_with_a_usage_error(work):
    exe = netdisk_program(need_strata_build(("bin/strata-netdisk",)))
    r = subprocess.run([exe, "--backing", work, "--iops", "0", os.path.join(work, "m")],
                       capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 2
    assert "--iops must be an integer >= 1" in r.stderr
    r = subprocess.run([exe, os.path.join(work, "m")], capture_output=True, text=True,
                       timeout=30, check=False)
    assert r.returncode == 2 and "usage: strata-netdisk --backing DIR" in r.stderr
    r = subprocess.run([exe, "--backing", os.path.join(work, "absent"), os.path.join(work, "m")],
                       capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 1 and "absent: No such file or directory" in r.stderr


def test_a_missing_program_is_a_clear_error(work):
    with pytest.raises(BenchError, match="not built: .*strata-netdisk"):
        netdisk_program(work)
