"""proc_groups: the CPU each process group of a benchmark setup spent in a window.

For: sampling utime + stime of every thread (/proc/PID/task/TID/stat) of the
processes one setup runs, before and after the measured window (and, if a
process is replaced inside it, in between), and attributing each thread to a
group: a stock postmaster's tree by process title (client backends,
walwriter+checkpointer+bgwriter, walsenders, the rest), a standby's whole
tree, a Strata compute's tree the same way plus its walproposer, the
safekeepers (every thread: io-wq workers are threads), the pageserver by
thread name, its child processes (redo helpers), and the benchmark client
(this Python process, its live children -- pgbench, HammerDB's tclsh -- and
the children it reaped inside the window, through cutime + cstime).  The
machine's busy CPU from /proc/stat over the same window is kept beside, so
what no group explains shows (other work on a shared machine), with the
machine's interrupt time beside it (loopback networking receives in
softirq; a kernel without IRQ_TIME_ACCOUNTING, like this project's
machines, charges that to the thread it interrupted, so it is inside the
groups' figures too).  Time the hypervisor stole from this machine's CPUs
is reported on its own and left out of busy: nobody here used it.

A thread counts from its value at the window's start, or from zero when it
was born inside the window; a thread that exits inside the window counts up
to the last sample that saw it (samples are taken every second in between;
CPU spent after the last is lost, and then shows only as unattributed
machine CPU).

Not for: starting or stopping anything, or the compute's own counters
(bench_strata.smgr_stats).  The report's arithmetic is cpu_table here.
"""

import os
import threading
import time

from bench_proc import CLK_TCK, read_stat, thread_cpu_ticks

# (key, label) in report order.
GROUPS = (
    ("backends", "backends (client backends)"),
    ("aux", "walwriter+checkpointer+bgwriter"),
    ("walproposer", "walproposer"),
    ("walsender", "walsender"),
    ("pg_other", "postmaster, autovacuum, other postgres"),
    ("standbys", "standbys (whole trees)"),
    ("safekeepers", "safekeepers (all threads)"),
    ("ps_ingest", "pageserver: ingest (ps-ingest)"),
    ("ps_imagegen", "pageserver: image generation (ps-imagegen-*)"),
    ("ps_getpage", "pageserver: GetPage service (loop thread + ps-worker-*)"),
    ("ps_flush", "pageserver: store flush (ps-flush)"),
    ("ps_other", "pageserver: other threads"),
    ("redo_helpers", "pageserver: redo helper processes"),
    ("client", "client (benchmark driver)"),
)
GROUP_KEYS = tuple(k for k, _label in GROUPS)
# The server's own work on the commit path: stock's backends + aux, the
# compute's backends + aux + walproposer + walsender (the target
# compares them).
OWN_GROUPS = ("backends", "aux", "walproposer", "walsender")
AUX_TITLES = ("checkpointer", "background writer", "walwriter")
# Roles a root process plays (roots()).
ROOT_KINDS = ("postgres", "standby", "safekeeper", "pageserver", "client")


def postgres_group(title):
    """The group of a postgres process by its title (/proc/PID/cmdline as
    the process set it: `postgres: USER DB HOST(PORT) ACTIVITY` for a
    client backend, `postgres: checkpointer`, ...); the postmaster itself
    (no `postgres: ` title) is pg_other."""
    if not title.startswith("postgres: "):
        return "pg_other"
    rest = title[len("postgres: "):].strip()
    if rest.startswith(AUX_TITLES):
        return "aux"
    if rest.startswith("walsender"):
        return "walsender"
    if rest.startswith("strata walproposer"):
        return "walproposer"
    if rest.startswith(("autovacuum", "logical replication", "archiver", "startup",
                        "walreceiver", "stats", "strata ")):
        return "pg_other"
    if rest.startswith("parallel worker"):
        return "backends"
    # USER DB HOST ACTIVITY: a client backend.
    return "backends" if len(rest.split()) >= 3 else "pg_other"


def pageserver_thread_group(pid, tid, comm):
    """The group of one pageserver thread by its name (pthread_setname_np in
    pageserver/: ps-ingest, ps-imagegen-N, ps-worker-N, ps-flush, ...).  The
    main thread runs the libuv loop, which is the page service's loop (it
    decodes requests and answers the cheap reads itself; the HTTP API and
    basebackup listeners share it)."""
    if comm == "ps-ingest":
        return "ps_ingest"
    if comm.startswith("ps-imagegen"):
        return "ps_imagegen"
    if comm.startswith("ps-worker") or tid == pid:
        return "ps_getpage"
    if comm == "ps-flush":
        return "ps_flush"
    return "ps_other"


def process_title(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def children_map():
    """{parent pid: [child pids]} of every process now."""
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        got = read_stat(f"/proc/{name}/stat")
        if got is not None:
            kids.setdefault(int(got[1][1]), []).append(int(name))
    return kids


def _tree(pid, kids):
    """pid and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, ()))
    return out


def _process_groups(roots, kids):
    """{pid: group or a function (pid, tid, comm) -> group} of every process
    under the roots, [(pid, kind)]; a process under two roots goes to the
    first.  The client root's tree gets what no other root claimed."""
    assign = {}
    for pid, kind in sorted(roots, key=lambda r: r[1] == "client"):
        assert kind in ROOT_KINDS, kind
        for p in _tree(pid, kids):
            if p in assign:
                continue
            if kind == "postgres":
                assign[p] = postgres_group(process_title(p))
            elif kind == "standby":
                assign[p] = "standbys"
            elif kind == "safekeeper":
                assign[p] = "safekeepers"
            elif kind == "pageserver":
                assign[p] = pageserver_thread_group if p == pid else "redo_helpers"
            else:
                assign[p] = "client"
    return assign


def machine_busy_ticks():
    """(busy, total, steal, irq) clock ticks of all CPUs since boot
    (/proc/stat): busy leaves out idle, iowait and steal (time the
    hypervisor gave this virtual machine's CPUs to someone else: nobody
    here used it); irq is hard + soft interrupt time (the loopback
    network's receive path and block IO completions run there), part of
    busy."""
    with open("/proc/stat", encoding="utf-8") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    total = sum(fields[:8])  # guest time is inside user already
    steal = fields[7]
    return total - fields[3] - fields[4] - steal, total, steal, fields[5] + fields[6]


def sample(roots):
    """{(pid, tid, start time): (group, ticks)} of every thread under the
    roots now, plus the client's reaped children (key ("reaped",))."""
    out = {}
    assign = _process_groups(roots, children_map())
    for pid, group in assign.items():
        for tid, comm, ticks, started in thread_cpu_ticks(pid):
            g = group(pid, tid, comm) if callable(group) else group
            out[(pid, tid, started)] = (g, ticks)
    for pid, kind in roots:
        if kind == "client":
            got = read_stat(f"/proc/{pid}/stat")
            if got is not None:
                out[("reaped", pid)] = ("client", int(got[1][13]) + int(got[1][14]))
    return out


class CpuWindow:
    """The CPU per group over one window: begin(), then any number of
    sample() (take one before a process of the setup is replaced), then
    end() -> result dict.  roots() -> [(pid, kind)] is called at begin(),
    every sample() and end(), so a replaced process is found again.  In
    between, a thread samples the processes found last every interval
    seconds: a process that exits inside the window (a virtual user's
    backend that ends with the run) then loses at most that much CPU, not
    all it spent since begin()."""

    def __init__(self, roots, interval=1.0):
        self.roots = roots
        self.interval = interval
        self.first = None
        self.last = {}
        self.t0 = None
        self.machine0 = None
        self._roots = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def begin(self):
        self.t0 = time.monotonic()
        self.machine0 = machine_busy_ticks()
        self._roots = self.roots()
        self.first = sample(self._roots)
        self.last = dict(self.first)
        if self.interval:
            self._stop.clear()
            self._thread = threading.Thread(target=self._every_interval, name="cpu-window",
                                            daemon=True)
            self._thread.start()

    def _every_interval(self):
        while not self._stop.wait(self.interval):
            self._merge(sample(self._roots))

    def _merge(self, got):
        # A periodic sample may land after a newer explicit one: keep the
        # larger count (a thread's CPU only grows).
        with self._lock:
            for key, (group, ticks) in got.items():
                old = self.last.get(key)
                if old is None or ticks >= old[1]:
                    self.last[key] = (group, ticks)

    def sample(self):
        assert self.first is not None, "sample() before begin()"
        self._roots = self.roots()
        self._merge(sample(self._roots))

    def thread_groups(self):
        """{tid: group} of every thread sampled in the window."""
        return {key[1]: group for key, (group, _ticks) in self.last.items()
                if key[0] != "reaped"}

    def end(self):
        """{"window_s", "groups_s": {group: CPU seconds}, "machine_busy_s",
        "machine_s" (CPUs x window), "threads": seen, "threads_gone": exited
        inside the window}."""
        assert self.first is not None, "end() before begin()"
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        now = sample(self.roots())
        self._merge(now)
        busy1, total1, steal1, irq1 = machine_busy_ticks()
        groups = {}
        for key, (group, ticks) in self.last.items():
            base = self.first[key][1] if key in self.first else 0
            groups[group] = groups.get(group, 0) + max(0, ticks - base)
        return {"window_s": round(time.monotonic() - self.t0, 3),
                "groups_s": {g: round(t / CLK_TCK, 3) for g, t in groups.items()},
                "machine_busy_s": round((busy1 - self.machine0[0]) / CLK_TCK, 3),
                "machine_s": round((total1 - self.machine0[1]) / CLK_TCK, 3),
                "machine_steal_s": round((steal1 - self.machine0[2]) / CLK_TCK, 3),
                "machine_irq_s": round((irq1 - self.machine0[3]) / CLK_TCK, 3),
                "threads": len(self.last),
                "threads_gone": sum(1 for k in self.last if k not in now)}


def stock_roots(primary_pid, standby_pids=()):
    """roots() of a stock setup: the primary's postmaster, each standby's, the client."""
    return lambda: ([(primary_pid, "postgres")] + [(p, "standby") for p in standby_pids]
                    + [(os.getpid(), "client")])


def strata_roots(status_fn):
    """roots() of a Strata setup from `strata status --json` (status_fn()
    returns it): the compute's postmaster, the pageserver, every
    safekeeper, the client."""
    def roots():
        status = status_fn()
        out = []
        compute = (status.get("compute") or {}).get("pid")
        if compute:
            out.append((compute, "postgres"))
        ps = (status.get("pageserver") or {}).get("pid")
        if ps:
            out.append((ps, "pageserver"))
        out += [(sk["pid"], "safekeeper") for sk in status.get("safekeepers") or []
                if sk.get("pid")]
        return out + [(os.getpid(), "client")]
    return roots


# -- the report's arithmetic ----------------------------------------------------

def per_unit(cpu, units):
    """{group: CPU microseconds per unit} (us per transaction; equally ms
    per 1,000 new orders) plus the derived rows: "own" (OWN_GROUPS),
    "all groups", "machine busy", "unattributed" (machine minus all
    groups).  None when nothing was counted."""
    if not cpu or not units:
        return None
    scale = 1e6 / units
    out = {g: s * scale for g, s in cpu["groups_s"].items()}
    out["own"] = sum(out.get(g, 0.0) for g in OWN_GROUPS)
    out["all groups"] = sum(s for g, s in out.items() if g in GROUP_KEYS)
    out["machine busy"] = cpu["machine_busy_s"] * scale
    out["unattributed"] = out["machine busy"] - out["all groups"]
    # Results written before these were kept have neither.
    if "machine_irq_s" in cpu:
        out["irq"] = cpu["machine_irq_s"] * scale
    if "machine_steal_s" in cpu:
        out["steal"] = cpu["machine_steal_s"] * scale
    return out


DERIVED_ROWS = (
    ("own", "own: backends+aux (+walproposer+walsender)"),
    ("own / (a)", "own / (a)'s own (issue 14: compute <= 0.80)"),
    ("all groups", "all groups above"),
    ("machine busy", "machine busy (/proc/stat, steal left out)"),
    ("unattributed", "machine busy - all groups"),
    ("irq", "interrupt time (irq + softirq), part of busy"),
    ("steal", "stolen by the hypervisor (steal, not in busy)"),
)


def cpu_table(setups, base_key="a"):
    """(header, rows) of the per-group CPU table: one column per setup
    [(key, title, cpu, units)], one row per group that any setup used, then
    DERIVED_ROWS; "-" where a setup has no such group.  base_key names the
    setup whose own CPU the ratio row divides by."""
    norm = [(key, title, per_unit(cpu, units)) for key, title, cpu, units in setups]
    base = next((n for k, _t, n in norm if k == base_key and n), None)
    header = ["group"] + [title for _k, title, _n in norm]
    rows = []
    for g, label in GROUPS:
        if any(n and g in n for _k, _t, n in norm):
            rows.append([label] + [_num(n.get(g)) if n else "-" for _k, _t, n in norm])
    for key, label in DERIVED_ROWS:
        if key == "own / (a)":
            if not base or not base["own"]:
                continue
            rows.append([label] + [f"{n['own'] / base['own']:.2f}" if n else "-"
                                   for _k, _t, n in norm])
            continue
        if key in ("irq", "steal") and not any(n and key in n for _k, _t, n in norm):
            continue  # results kept before these were measured
        rows.append([label] + [_num(n.get(key)) if n else "-" for _k, _t, n in norm])
    return header, rows


def _num(v):
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}"
