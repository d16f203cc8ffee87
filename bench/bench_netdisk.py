"""A simulated network disk for the benchmarks: strata-netdisk mounted and unmounted.

For: giving a benchmark a directory that behaves like a cloud block volume
(tests/tools/netdisk.c: a FUSE passthrough to a directory on the local disk
that charges every IO reaching the "device" a round-trip latency, a slot
under an IOPS limit and its transfer time under a bandwidth limit), and
reading the IOs it served.  Mounting needs root; the program then runs as
the postgres OS user so the files it creates are that user's.

Not for: anything but benchmarks, or a machine without /dev/fuse (the
context manager raises BenchError saying what is missing).
"""

import contextlib
import os
import subprocess
import time

from bench_proc import PG_OS_USER, BenchError, give_to_pg_user

STATS_KEYS = ("reads", "read_bytes", "writes", "write_bytes", "fsyncs", "wait_us", "failed")


def netdisk_program(build):
    """The strata-netdisk binary of the build; BenchError when it is not built."""
    exe = os.path.join(build, "bin", "strata-netdisk")
    if not os.access(exe, os.X_OK):
        raise BenchError(f"not built: {exe} (make build)")
    return exe


class NetDisk:
    """A mounted strata-netdisk: the mount point, its backing directory and
    the counters of the IOs the simulated volume served."""

    def __init__(self, mountpoint, backing, stats_path, latency_us, iops, mbps):
        self.mountpoint = mountpoint
        self.backing = backing
        self.stats_path = stats_path
        self.latency_us = latency_us
        self.iops = iops
        self.mbps = mbps
        self.proc = None

    def limits(self):
        return {"latency_us": self.latency_us, "iops": self.iops, "mbps": self.mbps}

    def stats(self):
        """The counters as a dict of STATS_KEYS (all zero before the first IO).
        The program rewrites its file at most every 100 ms, so this waits
        that long first to read what happened until now."""
        time.sleep(0.25)
        try:
            with open(self.stats_path, encoding="utf-8") as f:
                words = f.read().split()
        except FileNotFoundError:
            return dict.fromkeys(STATS_KEYS, 0)
        got = dict(zip(words[0::2], (int(w) for w in words[1::2])))
        if set(got) != set(STATS_KEYS):
            raise BenchError(f"{self.stats_path}: unexpected counters {sorted(got)}")
        return got


def _wait_mounted(nd, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.ismount(nd.mountpoint):
            return
        if nd.proc.poll() is not None:
            raise BenchError(f"strata-netdisk exited with {nd.proc.returncode} before mounting "
                             f"{nd.mountpoint}: {_stderr_tail(nd)}")
        time.sleep(0.05)
    raise BenchError(f"strata-netdisk did not mount {nd.mountpoint} in {timeout} s")


def _stderr_tail(nd):
    try:
        with open(nd.stats_path + ".log", encoding="utf-8", errors="replace") as f:
            return f.read()[-400:].strip()
    except OSError:
        return "(no log)"


def unmount(nd, timeout=60):
    """Unmounts (retrying while the mount is busy), waits for the program to
    exit; a mount still busy at the deadline is detached (umount -l) and the
    program killed."""
    deadline = time.monotonic() + timeout
    while os.path.ismount(nd.mountpoint):
        r = subprocess.run(["umount", nd.mountpoint], capture_output=True, text=True,
                           check=False)
        if r.returncode == 0:
            break
        if time.monotonic() > deadline:
            subprocess.run(["umount", "-l", nd.mountpoint], capture_output=True, check=False)
            break
        time.sleep(0.5)
    if nd.proc is not None:
        try:
            nd.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            nd.proc.kill()
            nd.proc.wait(timeout=30)


@contextlib.contextmanager
def netdisk(build, mountpoint, backing, latency_us, iops, mbps):
    """mountpoint (created if need be, owned by the postgres user) backed by
    backing (likewise) through strata-netdisk with these limits; yields the
    NetDisk; unmounts on leaving, on failure too.  Raises BenchError."""
    if not os.path.exists("/dev/fuse"):
        raise BenchError("no /dev/fuse on this machine: the simulated network disk needs FUSE")
    if os.geteuid() != 0:
        raise BenchError("mounting the simulated network disk (FUSE) needs root")
    exe = netdisk_program(build)
    for path in (mountpoint, backing):
        os.makedirs(path, mode=0o700, exist_ok=True)
        give_to_pg_user(path)
    stats_path = backing.rstrip("/") + ".stats"
    nd = NetDisk(mountpoint, backing, stats_path, latency_us, iops, mbps)
    with open(stats_path + ".log", "w", encoding="utf-8") as log:
        nd.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [exe, "--backing", backing, "--latency-us", str(latency_us), "--iops", str(iops),
             "--mbps", str(mbps), "--stats", stats_path, "--user", PG_OS_USER, mountpoint],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_mounted(nd)
        yield nd
    finally:
        unmount(nd)
