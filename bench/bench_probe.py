"""What a benchmark measures around its window besides its own counts.

For: one object per setup that, at the start and the end of the measured
window, samples the CPU of every process group (proc_groups.CpuWindow) and,
for a Strata compute, reads strata_smgr_stats() (bench_strata); a window in
which the compute is replaced pauses before the kill and resumes on the new
compute (whose counters start at zero).  And the report tables made of
those: CPU per unit of work per group, one column per setup, and the
compute's GetPage figures.

With --perf (perf_if_asked), each probe also records a perf profile of
its window (bench_perf.py) into perf-<setup key>.data there, attributed to
the same process groups.

Not for: the benchmark's own figures (TPS, NOPM, latency) or its windows.
"""

import os
import sys

import bench_perf
from bench_proc import BenchError
from bench_strata import (create_smgr_stats_function, getpage_rows, getpage_summary,
                          smgr_stats, stats_delta)
from proc_groups import cpu_table, stock_roots, strata_roots, CpuWindow


class WindowProbe:
    """begin(), [pause() before replacing the compute, resume() after], end()
    -> {"cpu": CpuWindow.end(), "smgr": counter deltas or None}.
    query(sql) -> rows runs SQL on the compute (None for stock servers)."""

    def __init__(self, roots, query=None, key=None):
        self.cpu = CpuWindow(roots)
        self.query = query
        self.smgr = None
        self.base = None
        self.perf = (bench_perf.PerfWindow(os.path.join(PERF_DIR, f"perf-{key or 'x'}.data"))
                     if PERF_DIR else None)
        if query is not None:
            create_smgr_stats_function(query)

    def begin(self):
        if self.query is not None:
            self.smgr = {}
            self.base = smgr_stats(self.query)
        self.cpu.begin()
        if self.perf is not None:
            self.perf.begin()

    def pause(self):
        self.cpu.sample()
        if self.query is not None:
            self._add(smgr_stats(self.query))

    def resume(self):
        if self.query is not None:
            self.base = smgr_stats(self.query)

    def _add(self, now):
        for k, v in stats_delta(self.base, now).items():
            self.smgr[k] = self.smgr.get(k, 0) + v
        self.base = None

    def end(self):
        if self.perf is not None:
            self.perf.stop()
        cpu = self.cpu.end()
        if self.query is not None:
            if self.base is None:
                raise BenchError("window ended while paused (no resume())")
            self._add(smgr_stats(self.query))
        out = {"cpu": cpu, "smgr": self.smgr}
        if self.perf is not None:
            out["perf"] = self.perf.end(self.cpu.thread_groups())
        return out


def add_perf_option(ap):
    """--perf for the programs whose windows a probe measures."""
    ap.add_argument("--perf", action="store_true",
                    help="also profile each measured window with `perf record -a` (needs "
                         "root): samples per process group and function in the report, the "
                         "recordings in --out as perf-<setup>.data")


# Where --perf puts its recordings (perf_if_asked); None: no profiles.
PERF_DIR = None


def perf_if_asked(args, prog):
    """When --perf was given, makes every probe created from now on record a
    perf profile into args.out.  Returns 2 (the exit code) after saying why
    perf cannot record here, else None."""
    global PERF_DIR  # pylint: disable=global-statement
    if not args.perf:
        return None
    why = bench_perf.available()
    if why:
        print(f"{prog}: --perf: {why}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    PERF_DIR = args.out
    return None


def stock_probe(primary, standbys=(), key=None):
    return WindowProbe(stock_roots(primary.pid, [s.pid for s in standbys]), key=key)


def strata_probe(cluster, query, key=None):
    return WindowProbe(strata_roots(cluster.status), query, key=key)


def psql_query(conninfo):
    """query(sql) -> rows through psql (bench_pg.psql), for programs that
    have no driver connection."""
    from bench_pg import psql  # pylint: disable=import-outside-toplevel

    def query(sql):
        return [line.split("|") for line in psql(conninfo, sql).splitlines() if line]
    return query


def psycopg_query(conninfo_str):
    """query(sql) -> rows on a new autocommit psycopg connection each time."""
    import psycopg  # pylint: disable=import-outside-toplevel

    def query(sql):
        with psycopg.connect(conninfo_str, autocommit=True) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []
    return query


def probe_tables(setups, unit):
    """Two tables from [(key, title, probe result or None, units)]: (cpu
    (header, rows) or None, getpage (header, rows) or None).  unit names
    what the GetPage figures are per."""
    cpu_cols = [(k, t, (p or {}).get("cpu"), u) for k, t, p, u in setups if p]
    cpu = cpu_table(cpu_cols) if cpu_cols else None
    gp = getpage_rows([(t, getpage_summary(p["smgr"], u) if p and p.get("smgr") else None)
                       for _k, t, p, u in setups], unit)
    return cpu, gp


HOW = ("How the CPU table is measured (bench/proc_groups.py): utime + stime of every thread "
       "(/proc/PID/task/TID/stat) of each setup's processes, sampled at the start and the end "
       "of the measured window, divided by the work done inside that same window. Groups: a "
       "postgres process by its title (client backends; walwriter + checkpointer + background "
       "writer; walsenders; the strata walproposer; the postmaster, autovacuum and the rest); "
       "a standby's whole process tree; the three safekeepers with all their threads; the "
       "pageserver by thread name (ps-ingest; ps-imagegen-N; the libuv loop thread, which is "
       "the page service's loop and answers the cheap reads itself, with the ps-worker-N "
       "threads; ps-flush; the rest) and its child processes (redo helpers); the client is "
       "this Python program with its children (pgbench, HammerDB's tclsh). \"own\" is the "
       "server's own work: backends + aux, plus walproposer and walsender where they run "
       "(the issue's target compares Strata's compute with stock (a)). Machine busy = "
       "all CPUs' non-idle time from /proc/stat over the window, steal left out: on a shared "
       "machine it includes other work, so \"machine busy - all groups\" shows what none of "
       "the groups explains. The interrupt row is the machine's irq + softirq time (loopback "
       "networking receives in softirq, so the more messages a setup passes the more it has); "
       "a kernel without IRQ_TIME_ACCOUNTING, like this machine's, charges it to the thread it "
       "interrupted, so it is inside the groups' figures as well. Steal is time the "
       "hypervisor gave this machine's CPUs to others: shown, not counted as busy. The "
       "threads are also sampled every second in between, and one that exits inside the "
       "window counts up to the last sample that saw it. The kernel counts CPU in clock "
       "ticks (10 ms): in a short window a small group's figure is a few ticks, so only the "
       "large groups mean much there. "
       "GetPage figures come from the compute's strata_smgr_stats() read before and after the "
       "window: requests sent (prefetches included), page reads that waited for an answer, "
       "the share of those a prefetch answered, and the wait of each read (from the request, "
       "or for a prefetched page from when the read asks for it, until the answer is there) "
       "as a log2 histogram whose p50/p99 are interpolated linearly inside their bucket.")


def probe_report(setups, unit, cpu_title, markdown):
    """Lines (console, or markdown when markdown) of the CPU table and the
    GetPage table of [(key, title, probe result or None, units)]."""
    from bench_report import md_table, text_table  # pylint: disable=import-outside-toplevel
    table = md_table if markdown else text_table
    cpu, gp = probe_tables(setups, unit)
    lines = []
    if cpu:
        lines += ([f"{cpu_title}, per process group, measured window:", ""] if markdown
                  else [f"{cpu_title}, per process group, measured window:"])
        lines += table(*cpu) + [""]
    if gp:
        lines += ([f"GetPage from the compute's side (per {unit}):", ""] if markdown
                  else [f"GetPage from the compute's side (per {unit}):"])
        lines += table(*gp) + [""]
    pt = bench_perf.perf_table([(t, (p or {}).get("perf")) for _k, t, p, _u in setups])
    if pt:
        lines += (["Where the samples went (perf), measured window:", ""] if markdown
                  else ["Where the samples went (perf), measured window:"])
        lines += table(*pt) + [""]
    if markdown and (cpu or gp):
        lines += [HOW, ""]
    if markdown and pt:
        lines += [bench_perf.HOW, ""]
    return lines
