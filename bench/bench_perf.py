"""bench_perf: where a measured window's CPU went, by process group and function.

For: the --perf option of bench/tprocc.py and bench/stateless_tpcb.py.
`perf record -a` samples every CPU at a fixed rate over the window (no call
graphs, so the cost stays small and equal for every setup); afterwards each
sample is given to the process group of its thread -- the groups of
proc_groups.py, taken from the very thread samples the CPU table is made
of, or of its process for a thread born and gone inside the window -- and
each group's functions are counted.  A sample of a process no group holds
goes to "other" (kernel workers, other work on the machine); the idle
task's to "idle".  A sample taken in an interrupt counts for the thread it
interrupted.  The report shows, per group, its share of all samples,
how much of it ran in the kernel, and its busiest functions.

Not for: call graphs or a flame graph (run `perf report -i` on the kept
perf-<key>.data for those), or deciding anything: like the CPU table it
describes one run on one machine.
"""

import atexit
import collections
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile

from bench_proc import BenchError

FREQ_HZ = 499  # not a divisor of the 100 Hz tick, so samples do not align with it
TOP = 6
# "symbol (dso)"; a C symbol has no " (", a dso may ("/memfd:x (deleted)").
SAMPLE_RE = re.compile(r"^(.*?) \((.*)\)$")


def available():
    """None when perf can record here, else why not."""
    if shutil.which("perf") is None:
        return "perf is not installed (Debian package linux-perf; make deps installs it)"
    try:
        with open("/proc/sys/kernel/perf_event_paranoid", encoding="utf-8") as f:
            paranoid = int(f.read().strip())
    except (OSError, ValueError):
        paranoid = 2
    if paranoid > 0 and os.geteuid() != 0:
        return f"perf -a needs root or kernel.perf_event_paranoid <= 0 (it is {paranoid})"
    return None


class PerfWindow:
    """begin() starts `perf record -a` into path and returns once it samples;
    end(thread_groups) stops it and returns attribute()'s dict for {tid:
    group}."""

    def __init__(self, path, freq=FREQ_HZ):
        self.path = path
        self.freq = freq
        self.proc = None
        self.log = path + ".log"
        self.fifos = None

    def begin(self, timeout=120):
        """perf starts disabled (-D -1) and is enabled through its control
        fifo; the answer on the ack fifo comes once it has finished starting
        (listing every process of the machine can take seconds under load),
        so the window's samples start here, not somewhere inside it (a CI
        run of a 3-second window once got 4 samples)."""
        self.fifos = tempfile.mkdtemp(prefix="strata-perf-")
        ctl, ack = os.path.join(self.fifos, "ctl"), os.path.join(self.fifos, "ack")
        os.mkfifo(ctl)
        os.mkfifo(ack)
        with open(self.log, "w", encoding="utf-8") as log:
            self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
                ["perf", "record", "-a", "-F", str(self.freq), "-D", "-1", "--control",
                 f"fifo:{ctl},{ack}", "-o", self.path],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        # A run that fails inside its window never calls end(): perf must not
        # go on recording the machine after the program is gone.
        atexit.register(self._stop_quietly)
        # O_RDWR: opening a fifo so does not wait for the other side.
        cfd, afd = os.open(ctl, os.O_RDWR), os.open(ack, os.O_RDWR)
        try:
            os.write(cfd, b"enable\n")
            ready, _, _ = select.select([afd], [], [], timeout)
            if not ready or not os.read(afd, 64).startswith(b"ack"):
                self.stop()
                raise BenchError(f"perf record did not start sampling within {timeout} s "
                                 f"(log {self.log})")
        finally:
            os.close(cfd)
            os.close(afd)

    def _stop_quietly(self):
        try:
            self.stop()
        except BenchError:
            pass

    def stop(self):
        """Stops the recording (perf writes its file on SIGINT); idempotent."""
        if self.fifos is not None:
            shutil.rmtree(self.fifos, ignore_errors=True)
            self.fifos = None
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise BenchError(f"perf record did not stop within 120 s (log {self.log})")
        if proc.returncode not in (0, -signal.SIGINT, 130) or not os.path.exists(self.path):
            with open(self.log, encoding="utf-8", errors="replace") as f:
                tail = f.read()[-800:]
            raise BenchError(f"perf record failed (exit {proc.returncode}): {tail}")

    def end(self, thread_groups):
        self.stop()
        cp = subprocess.run(["perf", "script", "-i", self.path, "-F", "pid,tid,ip,sym,dso"],
                            capture_output=True, text=True, timeout=600, check=False)
        if cp.returncode != 0:
            raise BenchError(f"perf script failed: {cp.stderr.strip()[-800:]}")
        return attribute(parse_script(cp.stdout), thread_groups, self.freq)


def parse_script(text):
    """[(pid, tid, symbol, dso)] of `perf script -F pid,tid,ip,sym,dso` lines
    such as `  1234/1240  55d0c3a1b2c0 hash_search_with_hash_value
    (/usr/lib/.../postgres)` (perf prints the symbol only with the address)."""
    out = []
    for line in text.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 3:
            continue
        pid, _slash, tid = parts[0].partition("/")
        if not (pid.isdigit() and tid.isdigit()):
            continue
        m = SAMPLE_RE.match(parts[2].strip())
        sym, dso = (m.group(1), m.group(2)) if m else (parts[2].strip(), "?")
        out.append((int(pid), int(tid), sym or "[unknown]", os.path.basename(dso) or "?"))
    return out


def attribute(samples, thread_groups, freq):
    """{"freq", "samples", "groups": {group: {"samples", "kernel_pct",
    "top": [[function, dso, samples], ...]}}} of samples [(pid, tid, sym,
    dso)] given {tid: group}.  A thread the map lacks (an io_uring worker
    that came and went inside the window) counts in its process's group,
    the group of the thread whose tid is the pid; pid 0 is "idle"; a process
    no group holds is "other"."""
    count = collections.Counter()
    kernel = collections.Counter()
    funcs = collections.defaultdict(collections.Counter)
    for pid, tid, sym, dso in samples:
        if pid == 0:
            group = "idle"
        else:
            group = thread_groups.get(tid) or thread_groups.get(pid) or "other"
        count[group] += 1
        if dso.startswith("[kernel"):
            kernel[group] += 1
        funcs[group][(sym, dso)] += 1
    groups = {}
    for group, n in count.items():
        groups[group] = {"samples": n, "kernel_pct": round(100.0 * kernel[group] / n, 1),
                         "top": [[s, d, c] for (s, d), c in funcs[group].most_common(TOP)]}
    return {"freq": freq, "samples": sum(count.values()), "groups": groups}


def perf_table(setups):
    """(header, rows) of [(title, perf dict)]: one row per (setup, group)
    with samples, busiest first; None when no setup has perf results."""
    rows = []
    for title, perf in setups:
        if not perf or not perf.get("samples"):
            continue
        total = perf["samples"]
        for group, g in sorted(perf["groups"].items(), key=lambda kv: -kv[1]["samples"]):
            share = 100.0 * g["samples"] / total
            if share < 0.5 and group != "idle":
                continue
            top = ", ".join(f"{s} {100.0 * c / g['samples']:.0f}%" for s, _d, c in g["top"][:4])
            rows.append([title, group, f"{share:.1f}", f"{g['kernel_pct']:.0f}", top])
    if not rows:
        return None
    return ["setup", "group", "% of samples", "% in kernel", "busiest functions (% of group)"], rows


HOW = ("How the profile is taken (--perf, bench/bench_perf.py): `perf record -a -F "
       f"{FREQ_HZ}` over the measured window, no call graphs; each sample goes to the process "
       "group of its thread (the CPU table's groups; a thread born and gone inside the window, "
       "such as an io_uring worker, that of its process), \"other\" when no group holds the "
       "process (kernel workers, other work on the machine), \"idle\" for the idle task; a "
       "sample taken in an interrupt counts for the thread it interrupted. "
       "Groups under 0.5% of the samples are left out. The raw data stays in the output "
       "directory as perf-<setup>.data for `perf report -i`.")
