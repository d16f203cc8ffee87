"""cgroup v1 groups for the benchmarks: a memory limit.

For: creating one cgroup under each cgroup v1 controller a benchmark names
(memory), as a child of the cgroup this program runs in (so the limits of a
surrounding container still hold); setting its limit; an argv prefix that
moves the command into the group before exec'ing it, so a server and every
process it forks later are inside; reading its counters (the peak memory
charged); and removing it once its tasks have gone.  A controller that is
not mounted is a BenchError that names it.

Not for: cgroup v2, disk limits (blkio throttling caps rates but adds no
per-IO latency, so it does not model a network disk: bench_netdisk.py
does), or knowing what the processes inside are.
"""

import contextlib
import os
import shlex
import time

from bench_cli import log
from bench_proc import BenchError

CGROUP_ROOT = "/sys/fs/cgroup"


def _own_cgroup(controller):
    """The path of the cgroup this process is in under controller ("/" if unknown)."""
    with open("/proc/self/cgroup", encoding="utf-8") as f:
        for line in f:
            _hid, ctrls, path = line.rstrip("\n").split(":", 2)
            if controller in ctrls.split(","):
                return path
    return "/"


def check_controllers(controllers):
    """Raises BenchError naming each cgroup v1 controller of controllers that
    is not mounted under CGROUP_ROOT (or when we are not root)."""
    missing = [c for c in controllers
               if not os.path.exists(os.path.join(CGROUP_ROOT, c, "cgroup.procs"))]
    if missing:
        raise BenchError("cgroup v1 controller(s) not mounted: " + ", ".join(
            f"{c} (no {os.path.join(CGROUP_ROOT, c, 'cgroup.procs')})" for c in missing)
            + "; mount them (mount -t cgroup -o <controller> cgroup /sys/fs/cgroup/<controller>)"
            " or run on a host with cgroup v1")
    if controllers and os.geteuid() != 0:
        raise BenchError("creating cgroups needs root")


class Cgroup:
    """One cgroup named name under each of controllers (created at once)."""

    def __init__(self, name, controllers):
        assert name and "/" not in name and controllers
        check_controllers(controllers)
        self.name = name
        self.dirs = {}
        try:
            for c in controllers:
                d = os.path.join(CGROUP_ROOT, c, _own_cgroup(c).lstrip("/"), name)
                os.mkdir(d)
                self.dirs[c] = d
        except OSError as e:
            self.remove()
            raise BenchError(f"cannot create cgroup {name} ({e})") from e

    def path(self, controller, name):
        return os.path.join(self.dirs[controller], name)

    def write(self, controller, name, value):
        try:
            with open(self.path(controller, name), "w", encoding="utf-8") as f:
                f.write(str(value))
        except OSError as e:
            raise BenchError(f"cannot write {value!r} to {self.path(controller, name)}: {e}") \
                from e

    def read(self, controller, name):
        with open(self.path(controller, name), encoding="utf-8") as f:
            return f.read()

    def launch_prefix(self):
        """argv to put before a command (run as root) so that it runs inside
        this group: a shell that moves itself into every controller's group,
        then execs the command; whatever it forks stays inside."""
        moves = " && ".join(f"echo $$ > {shlex.quote(os.path.join(d, 'cgroup.procs'))}"
                            for d in self.dirs.values())
        return ["sh", "-c", moves + ' && exec "$@"', "sh"]

    def pids(self):
        """The pids in the group (under any of its controllers)."""
        pids = set()
        for d in self.dirs.values():
            try:
                with open(os.path.join(d, "cgroup.procs"), encoding="utf-8") as f:
                    pids.update(int(x) for x in f.read().split())
            except OSError:
                pass
        return sorted(pids)

    # -- memory --------------------------------------------------------------------

    def memory_counters(self):
        """limit, peak, current usage and failcnt of the memory controller, and
        the page cache and anonymous memory charged now (memory.stat)."""
        def num(name):
            return int(self.read("memory", name).strip())
        stat = {}
        for line in self.read("memory", "memory.stat").splitlines():
            key, value = line.split()
            stat[key] = int(value)
        return {"limit_bytes": num("memory.limit_in_bytes"),
                "max_usage_bytes": num("memory.max_usage_in_bytes"),
                "usage_bytes": num("memory.usage_in_bytes"),
                "failcnt": num("memory.failcnt"),
                "cache_bytes": stat.get("cache"), "rss_bytes": stat.get("rss")}

    def remove(self, timeout=30):
        """Waits up to timeout seconds for the tasks to leave, then removes the
        group's directories.  A group that keeps tasks is left, with a warning
        naming them (it never kills what it did not start)."""
        deadline = time.monotonic() + timeout
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = self.pids()
        if left:
            log(f"warning: cgroup {self.name} still has tasks {left}; not removed")
            return
        for d in self.dirs.values():
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError as e:
                log(f"warning: cannot remove {d}: {e}")
        self.dirs = {}


@contextlib.contextmanager
def cgroup(name, controllers, memory_limit_bytes=None):
    """A Cgroup(name, controllers), with memory.limit_in_bytes set when
    given; removed on leaving (after the caller stopped its processes), on
    failure too.  controllers empty: yields None."""
    if not controllers:
        yield None
        return
    cg = Cgroup(name, controllers)
    try:
        if memory_limit_bytes is not None:
            cg.write("memory", "memory.limit_in_bytes", memory_limit_bytes)
        yield cg
    finally:
        cg.remove()
