"""HammerDB's own TPROC-C for bench/tprocc.py --driver hammerdb.

For: finding the HammerDB kit the user names (HAMMERDB_KIT, optionally
HAMMERDB_HOME), unpacking its tarball once into the cache, writing the two
HammerDB CLI scripts of one setup (buildschema; then loadscript, vucreate,
vurun of the timed driver with ramp-up and duration), running HammerDB's CLI
on Debian's tclsh8.6 with progress lines while it runs, and reading
HammerDB's result line `TEST RESULT : System achieved N NOPM from M
PostgreSQL TPM` back into numbers.  Measuring one setup (measure) = schema
build, CHECKPOINT, timed run, the TPC-C consistency checks of tprocc.py.

The kit (a test-only tool, never part of the project):
  HAMMERDB_KIT   directory holding hammerdbcli86.tcl (starts HammerDB's CLI on
                 tclsh8.6), tcl/pgtclcompat-1.0.tm (the thread-safe Pgtcl
                 wrapper the launcher loads) and hammerdb-*.tar.gz (HammerDB
                 v6.0: CLI, source, modules, config).
  HAMMERDB_HOME  optional: an unpacked HammerDB tree to use instead of the
                 kit's tarball (which is otherwise unpacked once under
                 $STRATA_CACHE_DIR/hammerdb, default /var/cache/strata as root,
                 else ~/.cache/strata).
Debian packages: tcl8.6 tcl-thread libpgtcl libsqlite3-tcl tcllib (make deps).

Not for: HammerDB's GUI or web service, TPROC-H, or HammerDB's own
configuration beyond what a run sets (every run gets a new TMP directory, so
HammerDB's SQLite settings store starts from the tree's defaults).
"""

import contextlib
import fcntl
import glob
import os
import re
import shutil
import signal
import subprocess
import tarfile
import threading
import time

from bench_cli import load_average, log
from bench_proc import BenchError

# HammerDB prints either form, depending on its configuration (tpcccommon).
RESULT_RES = (
    re.compile(r"TEST RESULT : System achieved (\d+) NOPM from (\d+) (\S+) TPM"),
    re.compile(r"TEST RESULT : System achieved (\d+) (\S+) TPM at (\d+) NOPM"),
)
LAUNCHER = "hammerdbcli86.tcl"
PGTCL_SHIM = os.path.join("tcl", "pgtclcompat-1.0.tm")
TCLSH = "tclsh8.6"
# A virtual user's failed transaction (pg_raiseerror false): "New Order
# Procedure Error set RAISEERROR for Details" and its four siblings.
VU_ERROR_RE = re.compile(r"^Vuser (\d+):.*\bError\b")
# What HammerDB's CLI prints when a command itself is refused.
CLI_ERROR_RE = re.compile(r"^Error\b")

KIT_HELP = ("set HAMMERDB_KIT to the directory holding hammerdbcli86.tcl, "
            "tcl/pgtclcompat-1.0.tm and hammerdb-*.tar.gz (HAMMERDB_HOME may name an "
            "unpacked HammerDB tree instead of the tarball); see bench/README.md")


class Kit:
    """Where HammerDB is: the launcher, the Tcl module directory and the tree."""

    def __init__(self, launcher, tm_dir, home):
        self.launcher = launcher
        self.tm_dir = tm_dir
        self.home = home

    def describe(self):
        return f"HammerDB tree {self.home}, launcher {self.launcher}"


def cache_root():
    """The cache root compute/postgres/build.sh uses (STRATA_CACHE_DIR, else
    /var/cache/strata as root, else ~/.cache/strata)."""
    if os.environ.get("STRATA_CACHE_DIR"):
        return os.environ["STRATA_CACHE_DIR"]
    if os.geteuid() == 0:
        return "/var/cache/strata"
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or
                        os.path.expanduser("~/.cache"), "strata")


def unpack_once(tarball, dest_parent):
    """The HammerDB tree of tarball, unpacked under dest_parent/<tarball name>
    the first time (under a lock, into a temporary directory renamed when
    complete, so a half-unpacked tree is never used); returns its path."""
    name = os.path.basename(tarball)
    for suffix in (".tar.gz", ".tgz"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    dest = os.path.join(dest_parent, name)
    home = os.path.join(dest, "hammerdb")
    os.makedirs(dest_parent, exist_ok=True)
    with open(os.path.join(dest_parent, ".unpack.lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isfile(os.path.join(home, "hammerdbcli")):
            tmp = dest + ".partial"
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            log(f"unpacking {tarball} into {dest}")
            with tarfile.open(tarball) as tf:
                for member in tf.getmembers():
                    path = os.path.normpath(member.name)
                    if path.startswith(("/", "..")) or member.issym() and \
                            os.path.isabs(member.linkname) or member.isdev():
                        raise BenchError(f"{tarball}: refusing to unpack {member.name!r}")
                tf.extractall(tmp)  # every member checked above
            if not os.path.isfile(os.path.join(tmp, "hammerdb", "hammerdbcli")):
                shutil.rmtree(tmp, ignore_errors=True)
                raise BenchError(f"{tarball}: no hammerdb/hammerdbcli inside")
            shutil.rmtree(dest, ignore_errors=True)
            os.rename(tmp, dest)
    return home


def find_kit(env=None):
    """The Kit the environment names; raises BenchError naming the variable
    when it is missing or incomplete."""
    env = os.environ if env is None else env
    kit_dir = env.get("HAMMERDB_KIT", "")
    if not kit_dir:
        raise BenchError(f"--driver hammerdb: HAMMERDB_KIT is not set: {KIT_HELP}")
    launcher = os.path.join(kit_dir, LAUNCHER)
    for need in (launcher, os.path.join(kit_dir, PGTCL_SHIM)):
        if not os.path.isfile(need):
            raise BenchError(f"--driver hammerdb: HAMMERDB_KIT={kit_dir}: no {need}: {KIT_HELP}")
    home = env.get("HAMMERDB_HOME", "")
    if home:
        if not os.path.isfile(os.path.join(home, "hammerdbcli")):
            raise BenchError(f"--driver hammerdb: HAMMERDB_HOME={home} holds no hammerdbcli "
                             "(it names an unpacked HammerDB tree)")
    else:
        tarballs = sorted(glob.glob(os.path.join(kit_dir, "hammerdb-*.tar.gz")))
        if len(tarballs) != 1:
            raise BenchError(f"--driver hammerdb: HAMMERDB_KIT={kit_dir} holds "
                             f"{len(tarballs)} hammerdb-*.tar.gz (need exactly one, or set "
                             "HAMMERDB_HOME to an unpacked tree)")
        home = unpack_once(tarballs[0], os.path.join(cache_root(), "hammerdb"))
    if shutil.which(TCLSH) is None:
        raise BenchError(f"--driver hammerdb: {TCLSH} not found: install tcl8.6 tcl-thread "
                         "libpgtcl libsqlite3-tcl tcllib (make deps)")
    return Kit(os.path.abspath(launcher), os.path.abspath(os.path.join(kit_dir, "tcl")),
               os.path.abspath(home))


# -- the scripts ---------------------------------------------------------------------

def _tcl_word(value):
    """value as one Tcl word: braces, which are safe for what we pass."""
    text = str(value)
    if not text or any(c in text for c in "{}\\\n"):
        raise BenchError(f"cannot pass {text!r} to HammerDB's CLI")
    return "{" + text + "}"


def _connection(info):
    lines = ["dbset db pg", "dbset bm TPC-C"]
    for key, value in (("pg_host", info["host"]), ("pg_port", info["port"]),
                       ("pg_sslmode", "disable")):
        lines.append(f"diset connection {key} {_tcl_word(value)}")
    # The superuser creates the tpcc role and database; our servers trust
    # loopback connections, so the passwords are not checked.
    for key, value in (("pg_superuser", info["user"]), ("pg_superuserpass", "postgres"),
                       ("pg_defaultdbase", info.get("dbname") or "postgres"),
                       ("pg_user", "tpcc"), ("pg_pass", "tpcc"), ("pg_dbase", "tpcc")):
        lines.append(f"diset tpcc {key} {_tcl_word(value)}")
    return lines


def build_script(info, warehouses, build_vus):
    """HammerDB CLI script: build the TPROC-C schema for warehouses with
    build_vus loader virtual users, then destroy them."""
    assert 1 <= build_vus <= warehouses
    return "\n".join(_connection(info) + [
        f"diset tpcc pg_count_ware {int(warehouses)}",
        f"diset tpcc pg_num_vu {int(build_vus)}",
        "buildschema",
        "vudestroy",
    ]) + "\n"


def run_script(info, vus, rampup_min, duration_min):
    """HammerDB CLI script: the timed driver (no keying or thinking time,
    errors counted and skipped) with vus virtual users for rampup_min then
    duration_min whole minutes."""
    assert vus >= 1 and rampup_min >= 0 and duration_min >= 1
    return "\n".join(_connection(info) + [
        "diset tpcc pg_driver timed",
        f"diset tpcc pg_rampup {int(rampup_min)}",
        f"diset tpcc pg_duration {int(duration_min)}",
        "diset tpcc pg_raiseerror false",
        "diset tpcc pg_keyandthink false",
        "diset tpcc pg_allwarehouse false",
        "diset tpcc pg_timeprofile false",
        "diset tpcc pg_vacuum false",
        "loadscript",
        f"vuset vu {int(vus)}",
        "vuset logtotemp 0",
        "vucreate",
        "vurun",
        "vudestroy",
    ]) + "\n"


def parse_result(text):
    """(NOPM, TPM, the whole line) of HammerDB's TEST RESULT line in text;
    raises BenchError if there is none or more than one."""
    found = []
    for line in text.splitlines():
        m = RESULT_RES[0].search(line)
        if m:
            found.append((int(m.group(1)), int(m.group(2)), line.strip()))
            continue
        m = RESULT_RES[1].search(line)
        if m:
            found.append((int(m.group(3)), int(m.group(1)), line.strip()))
    if len(found) != 1:
        raise BenchError(f"HammerDB printed {len(found)} TEST RESULT lines (expected one)")
    return found[0]


def count_vu_errors(text):
    """{virtual user number: failed transactions} from HammerDB's output."""
    errors = {}
    for line in text.splitlines():
        m = VU_ERROR_RE.match(line)
        if m:
            errors[int(m.group(1))] = errors.get(int(m.group(1)), 0) + 1
    return errors


def cli_errors(text):
    """Lines where HammerDB's CLI refused a command of our script."""
    return [line for line in text.splitlines() if CLI_ERROR_RE.match(line)]


# -- running the CLI -----------------------------------------------------------------

def _interesting(line):
    """Whether a HammerDB output line is worth a progress line of ours (not
    the per-10,000-rows loader chatter)."""
    if not line.strip():
        return False
    if re.search(r"Loading (Items|Stock) - |:\.\.\.\d+$|Customer Done|Orders Done|"
                 r"Loading (Customer|Orders) for ", line):
        return False
    return not line.startswith(("Value ", "Changed ", "Copyright", "Type \"help\""))


def run_cli(kit, script_text, scratch, name, timeout, key, on_line=None):
    """Writes script_text to scratch/<name>.tcl and runs HammerDB's CLI on it
    (cwd and TMP in scratch); relays its interesting lines as progress and
    keeps everything in scratch/<name>.log; on_line(line), if given, sees
    every line as it comes.  Returns the output text.  Raises
    BenchError when it fails or runs longer than timeout seconds (then it is
    killed, by its pid)."""
    os.makedirs(scratch, exist_ok=True)
    tmp = os.path.join(scratch, name + "-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    script = os.path.join(scratch, name + ".tcl")
    with open(script, "w", encoding="utf-8") as f:
        f.write(script_text)
    env = dict(os.environ, TMP=tmp, TMPDIR=tmp, HAMMERDB_HOME=kit.home,
               TCL8_6_TM_PATH=kit.tm_dir)
    argv = [TCLSH, kit.launcher, "auto", os.path.abspath(script)]
    out_lines = []
    logpath = os.path.join(scratch, name + ".log")
    # pylint: disable=consider-using-with
    proc = subprocess.Popen(argv, cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    timed_out = []

    def on_timeout():
        timed_out.append(True)
        _kill_group(proc)

    timer = threading.Timer(timeout, on_timeout)
    timer.start()
    try:
        with open(logpath, "w", encoding="utf-8") as logf:
            for line in proc.stdout:
                line = line.rstrip("\n")
                out_lines.append(line)
                logf.write(line + "\n")
                if on_line is not None:
                    on_line(line)
                if _interesting(line):
                    log(f"  ({key}) hammerdb: {line}")
        rc = proc.wait()
    except BaseException:
        _kill_group(proc)
        raise
    finally:
        timer.cancel()
    text = "\n".join(out_lines) + "\n"
    if timed_out:
        raise BenchError(f"({key}) HammerDB {name} killed after {timeout} s (log {logpath})")
    if rc != 0:
        raise BenchError(f"({key}) HammerDB {name} exited with {rc} (log {logpath}): "
                         + " | ".join(out_lines[-3:]))
    bad = cli_errors(text)
    if bad:
        raise BenchError(f"({key}) HammerDB {name}: {bad[0]} (log {logpath})")
    return text


def _kill_group(proc):
    """Ends the CLI we started (its own process group: tclsh and nothing else)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


# -- one setup -----------------------------------------------------------------------

class ServerSampler:
    """Progress during HammerDB's timed run, counted the way HammerDB counts:
    new orders = growth of sum(d_next_o_id), TPM = growth of the sum of
    xact_commit + xact_rollback over pg_stat_database; a line every
    every_s seconds, a (monotonic seconds, NOPM) series for the plot and the
    machine's 1-minute load average at each sample (the machine may be shared)."""

    SQL = ("SELECT (SELECT sum(d_next_o_id) FROM district), "
           "(SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database)")

    def __init__(self, connect, every_s, key):
        self.connect = connect
        self.every_s = every_s
        self.key = key
        self.stop_event = threading.Event()
        self.series = []
        self.loads = []  # (monotonic seconds, 1-minute load average)
        self.thread = threading.Thread(target=self._loop, name=f"sampler-{key}", daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(30)

    def _loop(self):
        conn = None
        t_start = time.monotonic()
        last = None
        while not self.stop_event.wait(0 if last is None else self.every_s):
            try:
                if conn is None:
                    conn = self.connect()
                orders, xacts = conn.execute(self.SQL).fetchone()
            except Exception:  # pylint: disable=broad-except
                # The sampler only reports; a failed sample is skipped.
                conn = None
                continue
            now = time.monotonic()
            load = load_average()
            if load:
                self.loads.append((now, float(load.split()[0])))
            if last is not None and orders is not None and last[1] is not None:
                minutes = max(now - last[0], 1e-3) / 60.0
                nopm = (int(orders) - int(last[1])) / minutes
                tpm = (int(xacts) - int(last[2])) / minutes
                self.series.append((now, round(nopm)))
                log(f"  ({self.key}) [{now - t_start:5.0f} s] {nopm:8.0f} NOPM {tpm:8.0f} TPM "
                    f"(server, last {now - last[0]:.0f} s)")
            last = (now, orders, xacts)
        if conn is not None:
            conn.close()


def measure(args, key, info, connect, checkpoint, run_checks, make_probe=None):
    """HammerDB's schema build and timed run against the server info names
    (host, port, superuser), then the consistency checks.  connect(dbname)
    opens an autocommit connection, checkpoint() takes a CHECKPOINT,
    run_checks(conn) is tprocc.run_checks, make_probe() -> a
    bench_probe.WindowProbe sampled over HammerDB's timed window (its result
    in "probe", the new orders of that window in "probe_units").  Returns
    the run dict."""
    kit = args.hammerdb_kit
    scratch = os.path.join(args.hammerdb_scratch, key)
    build_vus = max(1, min(args.warehouses, args.build_vus))
    log(f"({key}) HammerDB buildschema: {args.warehouses} warehouse(s), {build_vus} loader "
        f"virtual user(s)")
    t0 = time.monotonic()
    build_out = run_cli(kit, build_script(info, args.warehouses, build_vus), scratch,
                        "buildschema", timeout=600 + 300 * args.warehouses, key=key)
    if "TPCC SCHEMA COMPLETE" not in build_out or "FINISHED FAILED" in build_out:
        raise BenchError(f"({key}) HammerDB's schema build did not complete "
                         f"(log {os.path.join(scratch, 'buildschema.log')})")
    build_s = time.monotonic() - t0
    log(f"({key}) schema built in {build_s:.1f} s; CHECKPOINT")
    checkpoint()
    probe = make_probe() if make_probe else None
    probed = {}
    rampup_min, duration_min = args.rampup // 60, args.duration // 60
    log(f"({key}) HammerDB vurun: {args.vus} virtual user(s), ramp-up {rampup_min} min, "
        f"timed {duration_min} min, keying and thinking time 0")
    t1 = time.monotonic()
    window = {}

    def mark(line):
        # HammerDB's monitor virtual user opens and closes its timed window.
        for what, text in (("start", "Taking start Transaction Count"),
                           ("end", "Taking end Transaction Count")):
            if text in line and what not in window:
                window[what] = time.monotonic()
                if probe is not None and what == "start":
                    probe.begin()
                elif probe is not None and "start" in window:
                    probed["result"] = probe.end()

    with ServerSampler(lambda: connect("tpcc"), args.report_every, key) as sampler:
        run_out = run_cli(kit, run_script(info, args.vus, rampup_min, duration_min), scratch,
                          "vurun", timeout=args.rampup + args.duration + 600, key=key,
                          on_line=mark)
    run_s = time.monotonic() - t1
    nopm, tpm, line = parse_result(run_out)
    errors = count_vu_errors(run_out)
    with connect("tpcc") as conn:
        checks = run_checks(conn)
    # The plot's series: samples taken inside HammerDB's timed window.
    start, end = window.get("start", t1), window.get("end", time.monotonic())
    series = [(round(t - start, 1), v) for t, v in sampler.series if start < t <= end + 1]
    loads = [v for t, v in sampler.loads if start < t <= end + 1]
    if probe is not None and "result" not in probed:
        raise BenchError(f"({key}) HammerDB printed no timed window (no 'Taking start/end "
                         "Transaction Count' lines): no CPU figures")
    return {"driver": "hammerdb", "nopm": nopm, "tpm": tpm, "hammerdb_result": line,
            "probe": probed.get("result"),
            # HammerDB's NOPM is the growth of sum(d_next_o_id) over its timed window.
            "probe_units": nopm * duration_min,
            "errors": sum(errors.values()), "errors_by_vu": {str(k): v for k, v in
                                                              sorted(errors.items())},
            "vus": args.vus, "build_vus": build_vus, "load_s": round(build_s, 1),
            "run_s": round(run_s, 1), "rampup_min": rampup_min, "duration_min": duration_min,
            "checks": checks, "nopm_series": series, "hammerdb": kit.describe(),
            "loadavg_window": round(sum(loads) / len(loads), 1) if loads else None}
