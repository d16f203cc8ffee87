"""A local Strata cluster for the benchmarks, driven only through the `strata` CLI.

For: `strata up --dir D`, `strata status --dir D --json` (the compute's
connection string and every component's pid), `strata down --dir D`; and,
if down fails, stopping by pid exactly the processes that status reported
for D (nothing else); a benchmark setup's cluster (strata_setup: up, a
skip when not built, down whatever happens).  Uses the release build (STRATA_BUILD, default ./build)
because a sanitized build measures the sanitizers.

Not for: configuring the compute (the CLI owns that; we only read back its
settings) or running pgbench.
"""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

from bench_cli import SkipSetup, log
from bench_proc import BenchError, proc_stat, run


def _start_time(pid):
    """The start time of process pid (clock ticks since boot), or None if it is gone."""
    fields = proc_stat(pid)
    if fields is None:
        return None
    if fields and fields[0] == "Z":
        return None  # a zombie has exited already
    return int(fields[19]) if len(fields) > 19 else None


def parse_connstr(connstr):
    """A libpq key=value connection string (values without spaces or quotes) as a dict."""
    info = {}
    for part in connstr.split():
        if "=" not in part:
            raise BenchError(f"cannot parse connection string {connstr!r}")
        key, value = part.split("=", 1)
        info[key] = value.strip("'")
    for key, default in (("host", "127.0.0.1"), ("dbname", "postgres")):
        info.setdefault(key, default)
    if "port" not in info or "user" not in info:
        raise BenchError(f"connection string lacks port or user: {connstr!r}")
    return {k: info[k] for k in ("host", "port", "user", "dbname")}


def prometheus_counter(text, name, labels=None):
    """The sum over all label sets of metric name in Prometheus text (only
    those holding every label="value" of the dict labels, when given), or
    None if absent."""
    want = ['%s="%s"' % kv for kv in (labels or {}).items()]
    total = None
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        rest = line[len(name):]
        if rest[:1] not in ("{", " "):
            continue  # a longer metric name sharing the prefix
        if want and not all(w in rest.split("}", 1)[0] for w in want):
            continue
        try:
            value = float(rest.rsplit(None, 1)[-1] if "}" not in rest
                          else rest.rsplit("}", 1)[1].split()[0])
        except (ValueError, IndexError):
            continue
        total = (total or 0) + value
    return total


class StrataCluster:
    def __init__(self, build_dir, cluster_dir, with_pageserver=True, up_args=()):
        """with_pageserver=False runs exactly what the quorum-commit setup is
        about (compute + walproposer + three safekeepers): `strata up` starts
        the pageserver only when strata-pageserver sits beside the strata
        binary, so the CLI, the safekeeper and sync-safekeepers binaries and
        strata.so are copied into a directory of their own first."""
        self.build_dir = os.path.abspath(build_dir)
        self.cluster_dir = cluster_dir
        self.cli = os.path.join(self.build_dir, "bin", "strata")
        self.extension = os.path.join(self.build_dir, "lib", "strata.so")
        self.with_pageserver = with_pageserver
        self.up_args = list(up_args)  # more `strata up` options (--remote URL)
        self.pids = {}  # pid -> start time (/proc/PID/stat), so a reused pid is left alone

    def _private_binaries(self):
        """Copies what a cluster without a pageserver needs; returns the CLI path."""
        root = os.path.abspath(self.cluster_dir) + "-bin"
        for sub in ("bin", "lib"):
            os.makedirs(os.path.join(root, sub), exist_ok=True)
            os.chmod(os.path.join(root, sub), 0o755)
        os.chmod(root, 0o755)
        for name in ("strata", "strata-safekeeper", "strata-sync-safekeepers"):
            src = os.path.join(self.build_dir, "bin", name)
            if os.path.exists(src):
                shutil.copy2(src, os.path.join(root, "bin", name))
        shutil.copy2(self.extension, os.path.join(root, "lib", "strata.so"))
        os.chmod(os.path.join(root, "lib", "strata.so"), 0o755)
        return os.path.join(root, "bin", "strata")

    def missing(self):
        """None when the build has what (c) needs, else a reason it cannot run."""
        for path in (self.cli, self.extension):
            if not os.path.exists(path):
                return f"{path} does not exist (build with `make build BUILD={self.build_dir}`)"
        return None

    def _cli(self, *args, timeout=300):
        return run([self.cli] + list(args), timeout=timeout)

    def _no_auth(self):
        """["--no-auth"] when this build's CLI has it (auth is on by default
        since issue 11.7), else [] (an older build runs open anyway)."""
        cp = subprocess.run([self.cli, "up", "--help"], capture_output=True, text=True,
                            timeout=60)
        return ["--no-auth"] if "--no-auth" in cp.stdout else []

    def up(self):
        if not self.with_pageserver:
            self.cli = self._private_binaries()
        # Benchmarks run with auth off: the daemons trust every connection,
        # as before auth existed, so numbers compare across builds (and the
        # bench programs talk to the daemons without tokens).
        no_auth = self._no_auth()
        log("strata up%s: auth off, every daemon port trusts everyone (benchmark only)"
            % (" --no-auth" if no_auth else ""))
        self._cli("up", "--dir", self.cluster_dir, *no_auth, *self.up_args, timeout=600)
        status = self.status()
        if status.get("compute", {}).get("pid") is None:
            raise BenchError("strata up returned but the compute is not running")
        running = [sk for sk in status.get("safekeepers", []) if sk.get("pid") is not None]
        if len(running) < 3:
            raise BenchError(f"strata up returned but only {len(running)} of 3 safekeepers run")
        return status

    def status(self):
        cp = self._cli("status", "--dir", self.cluster_dir, "--json", timeout=60)
        try:
            status = json.loads(cp.stdout)
        except json.JSONDecodeError as e:
            raise BenchError(f"strata status --json printed invalid JSON: {e}") from e
        self._remember_pids(status)
        return status

    def _remember_pids(self, status):
        comps = [status.get("compute") or {}, status.get("pageserver") or {}]
        comps += status.get("safekeepers") or []
        for comp in comps:
            pid = comp.get("pid")
            if isinstance(pid, int) and pid > 0 and pid not in self.pids:
                started = _start_time(pid)
                if started is not None:
                    self.pids[pid] = started

    def fdatasync_counts(self, status):
        """{"sk1 fdatasync": n, ...}: each running safekeeper's safekeeper_fdatasync_total
        from its /metrics.  A safekeeper that does not answer is left out."""
        counts = {}
        for sk in status.get("safekeepers") or []:
            port = sk.get("http_port")
            if sk.get("pid") is None or not port:
                continue
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode("utf-8", errors="replace")
            except (OSError, ValueError):
                continue
            total = prometheus_counter(text, "safekeeper_fdatasync_total")
            if total is not None:
                counts[f"{sk.get('name', port)} fdatasync"] = total
        return counts

    def conninfo(self, status):
        connstr = (status.get("compute") or {}).get("connstr")
        if not connstr:
            raise BenchError("strata status --json has no compute.connstr")
        return parse_connstr(connstr)

    def down(self):
        """Stops the cluster; falls back to signalling the pids status reported."""
        try:
            self.status()  # learn every pid first, in case `up` failed half way
        except BenchError:
            pass
        try:
            self._cli("down", "--dir", self.cluster_dir, timeout=120)
        except BenchError as e:
            print(f"warning: strata down: {e}")
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [p for p, t in self.pids.items() if _start_time(p) == t]
            if not alive:
                break
            print(f"warning: strata processes still running after down: {alive}; sending "
                  f"{signal.Signals(sig).name}")
            for pid in alive:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while (any(_start_time(p) == self.pids[p] for p in alive)
                   and time.monotonic() < deadline):
                time.sleep(0.1)


@contextlib.contextmanager
def strata_setup(build, cluster_dir, key, compute_mode=None, with_pageserver=True, up_args=()):
    """`strata up` of build in cluster_dir for the benchmark setup key (its
    progress lines say "(key)"), compute_mode (STRATA_COMPUTE_MODE of the
    CLI, if given), with_pageserver and up_args (more `strata up` options).  Yields (cluster, status of `strata
    up`); `strata down` on leaving, on failure too.  Raises SkipSetup when
    the build lacks a file it needs; BenchError when up fails or, with
    with_pageserver, started no pageserver."""
    cluster = StrataCluster(build, cluster_dir, with_pageserver=with_pageserver,
                            up_args=up_args)
    missing = cluster.missing()
    if missing:
        raise SkipSetup(missing)
    if compute_mode:
        os.environ["STRATA_COMPUTE_MODE"] = compute_mode
    try:
        log(f"({key}) strata up")
        status = cluster.up()
        if with_pageserver and (status.get("pageserver") or {}).get("pid") is None:
            raise BenchError("strata up started no pageserver (is strata-pageserver built?)")
        yield cluster, status
    finally:
        log(f"({key}) strata down")
        cluster.down()


def check_stateless(settings):
    """Raises BenchError unless the compute's settings say it reads its pages
    from a pageserver (strata.pageserver set)."""
    if not settings.get("strata.pageserver"):
        raise BenchError("the compute is not stateless (strata.pageserver is empty)")


# -- the compute's own counters (strata_smgr_stats) ------------------------------

SMGR_STATS_FN = ("CREATE OR REPLACE FUNCTION strata_smgr_stats(OUT name text, OUT value bigint) "
                 "RETURNS SETOF record LANGUAGE c AS '{lib}'")
# The GetPage wait histogram's buckets (compute/extension/README.md): under
# 16 us, then [2^k, 2^(k+1)) us for k = 4..19, then 2^20 us and more.
WAIT_BUCKET_NAMES = (["getpage_wait_lt_16us"]
                     + [f"getpage_wait_lt_{1 << k}us" for k in range(5, 21)]
                     + ["getpage_wait_ge_1048576us"])
WAIT_BUCKET_BOUNDS = [(0, 16)] + [(1 << k, 1 << (k + 1)) for k in range(4, 20)] \
    + [(1 << 20, None)]


def create_smgr_stats_function(query):
    """Creates strata_smgr_stats() in the database query(sql) -> rows runs
    in (the compute's strata.so, named by shared_preload_libraries); do it
    before a window, it is DDL."""
    libs = query("SELECT setting FROM pg_settings WHERE name = 'shared_preload_libraries'")
    lib = next((x.strip() for x in libs[0][0].split(",") if "strata" in x), None)
    if not lib:
        raise BenchError("the compute does not preload strata.so: no strata_smgr_stats()")
    query(SMGR_STATS_FN.format(lib=lib))


def smgr_stats(query):
    """{name: value} of strata_smgr_stats() now (create_smgr_stats_function first)."""
    return {name: int(value) for name, value in
            query("SELECT name, value FROM strata_smgr_stats()")}


def stats_delta(before, after):
    """after - before of every counter in both (a compute's counters start
    at zero: never compare two computes' readings)."""
    return {k: after[k] - before[k] for k in after if k in before}


def wait_percentile(hist, pct):
    """The pct-th percentile (0 < pct < 100) of the GetPage waits in hist
    ([count per WAIT_BUCKET_NAMES bucket]), in microseconds, interpolated
    linearly inside its bucket; the open last bucket gives its lower bound.
    None when hist is empty."""
    assert 0 < pct < 100 and len(hist) == len(WAIT_BUCKET_BOUNDS)
    total = sum(hist)
    if total == 0:
        return None
    rank = pct / 100.0 * total
    seen = 0
    for count, (lo, hi) in zip(hist, WAIT_BUCKET_BOUNDS):
        if count and seen + count >= rank:
            if hi is None:
                return float(lo)
            return lo + (hi - lo) * (rank - seen) / count
        seen += count
    return float(WAIT_BUCKET_BOUNDS[-1][0])


def getpage_summary(delta, units):
    """The GetPage figures of a window from the counters' delta and the
    units (transactions, new orders) done in it: requests sent (prefetches
    included) and page reads that waited, per unit; prefetch hit rate (reads
    answered by a prefetched response / reads that waited); file cache hits
    per unit; mean, p50 and p99 of the wait (us, from the histogram,
    interpolated inside a bucket).  None without units or counters."""
    if not units or "getpage_wait_count" not in delta:
        return None
    hist = [delta.get(name, 0) for name in WAIT_BUCKET_NAMES]
    waits = delta["getpage_wait_count"]
    return {"units": units, "getpage": delta.get("getpage", 0), "waits": waits,
            "hist_sum": sum(hist),
            "getpage_per_unit": delta.get("getpage", 0) / units,
            "waits_per_unit": waits / units,
            "prefetch_sent": delta.get("prefetch_sent", 0),
            "prefetch_hit": delta.get("prefetch_hit", 0),
            "prefetch_hit_rate": delta.get("prefetch_hit", 0) / waits if waits else None,
            "file_cache_hit_per_unit": delta.get("file_cache_hit", 0) / units,
            "wait_mean_us": delta.get("getpage_wait_us", 0) / waits if waits else None,
            "wait_p50_us": wait_percentile(hist, 50),
            "wait_p99_us": wait_percentile(hist, 99)}


def getpage_rows(setups, unit):
    """(header, rows) of the GetPage table: one column per setup [(title,
    summary)] that has a summary."""
    cols = [(t, g) for t, g in setups if g]
    if not cols:
        return None

    def fmt(v, digits=1):
        return "-" if v is None else f"{v:,.{digits}f}"
    rows = [[f"GetPage requests sent / {unit}"] + [fmt(g["getpage_per_unit"], 2) for _t, g in cols],
            [f"page reads that waited / {unit}"] + [fmt(g["waits_per_unit"], 2) for _t, g in cols],
            ["prefetch hit rate (of those reads)"] + [
                "-" if g["prefetch_hit_rate"] is None else f"{100 * g['prefetch_hit_rate']:.1f}%"
                for _t, g in cols],
            [f"file cache hits / {unit}"] + [fmt(g["file_cache_hit_per_unit"], 2)
                                             for _t, g in cols],
            ["GetPage wait mean us"] + [fmt(g["wait_mean_us"]) for _t, g in cols],
            ["GetPage wait p50 us (interpolated)"] + [fmt(g["wait_p50_us"]) for _t, g in cols],
            ["GetPage wait p99 us (interpolated)"] + [fmt(g["wait_p99_us"]) for _t, g in cols]]
    return ["compute side"] + [t for t, _g in cols], rows
