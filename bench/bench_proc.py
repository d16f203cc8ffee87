"""Running commands for the benchmarks: as the postgres user, bounded in time.

For: starting a child process with a timeout and turning a failure into a
BenchError that says which command failed and why (the tail of its stderr);
dropping to the unprivileged `postgres` user when we are root (Postgres refuses
to run as root); picking free loopback ports; creating files that user owns.

Not for: knowing anything about Postgres or Strata (bench_pg.py,
bench_strata.py) or about measurements.
"""

import os
import pwd
import random
import shutil
import socket
import subprocess
import tempfile

PG_OS_USER = "postgres"


class BenchError(Exception):
    """A step of the benchmark failed; the message says which and why."""


CLK_TCK = os.sysconf("SC_CLK_TCK")

def as_pg_user(argv):
    """argv prefixed so that it runs as the postgres OS user when we are root."""
    if os.geteuid() == 0:
        return ["runuser", "-u", PG_OS_USER, "--"] + list(argv)
    return list(argv)


def pg_user_ids():
    """(uid, gid) of the user postgres processes run as."""
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    try:
        pw = pwd.getpwnam(PG_OS_USER)
    except KeyError as e:
        raise BenchError(f"running as root but there is no OS user {PG_OS_USER!r}") from e
    return pw.pw_uid, pw.pw_gid


def give_to_pg_user(path):
    """Makes path owned by the postgres OS user (a no-op unless we are root)."""
    if os.geteuid() == 0:
        uid, gid = pg_user_ids()
        os.chown(path, uid, gid)


def write_pg_file(path, text, append=False):
    """Writes (or appends) text to path, leaving it owned by the postgres user."""
    with open(path, "a" if append else "w", encoding="utf-8") as f:
        f.write(text)
    give_to_pg_user(path)


def run(argv, timeout, pg_user=False, cwd=None, env=None, check=True):
    """Runs argv to completion within timeout seconds; returns CompletedProcess.

    pg_user runs it as the postgres OS user.  With check, a non-zero exit or a
    timeout raises BenchError naming the command and quoting its stderr tail.
    """
    full = as_pg_user(argv) if pg_user else list(argv)
    try:
        cp = subprocess.run(full, cwd=cwd, env=env, timeout=timeout,
                            stdin=subprocess.DEVNULL, capture_output=True, text=True)
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"{os.path.basename(argv[0])} timed out after {timeout:.0f}s: "
                         f"{' '.join(argv)}") from e
    except OSError as e:
        raise BenchError(f"cannot run {argv[0]}: {e}") from e
    if check and cp.returncode != 0:
        tail = (cp.stderr or cp.stdout or "").strip().splitlines()[-5:]
        raise BenchError(f"{os.path.basename(argv[0])} exited with {cp.returncode}: "
                         f"{' '.join(argv)}\n    " + "\n    ".join(tail))
    return cp


_handed_out = set()


def _ephemeral_low():
    """The start of the kernel's ephemeral port range (32768 if unknown)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_block(count=1):
    """The first of count consecutive TCP ports on 127.0.0.1, free a moment
    ago and not handed out before by this process.  They come from below the
    kernel's ephemeral range, as `strata up` picks its ports: a server that
    binds its port seconds later (after an initdb) cannot lose it to the
    source port of some outgoing connection meanwhile."""
    low, high = 10000, _ephemeral_low() - count
    if high - low < 1000:
        low, high = 20000, 60000 - count
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(low, high)
        block = range(base, base + count)
        if not _handed_out.intersection(block) and all(_bindable(p) for p in block):
            _handed_out.update(block)
            return base
    raise BenchError("no free block of %d ports between %d and %d" % (count, low, high + count))


def free_port():
    """One port, as free_port_block picks them."""
    return free_port_block(1)


def pid_alive(pid):
    """True if a process with this pid exists (zombies included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_stat(path):
    """(comm, fields) of a /proc stat file (/proc/PID/stat or
    /proc/PID/task/TID/stat), or None if it is gone.  fields are those after
    the command name: fields[0] is the state, [1] the parent pid, [11] and
    [12] utime and stime in clock ticks (the whole thread group for
    /proc/PID/stat, one thread for a task), [13] and [14] cutime and cstime
    (children waited for), [19] the start time."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    close = stat.rfind(")")
    return stat[stat.find("(") + 1:close], stat[close + 2:].split()


def proc_stat(pid):
    """The fields of /proc/PID/stat after the command name (see read_stat),
    or None if the process is gone."""
    got = read_stat(f"/proc/{pid}/stat")
    return None if got is None else got[1]


def proc_cpu_seconds(pid):
    """utime + stime of pid's thread group in seconds, or None if it is gone."""
    fields = proc_stat(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu_ticks(pid):
    """[(tid, comm, utime + stime in clock ticks, start time)] of every thread
    of pid (io_uring io-wq workers are threads too); [] if it is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out = []
    for tid in tids:
        got = read_stat(f"/proc/{pid}/task/{tid}/stat")
        if got is not None:
            comm, fields = got
            out.append((int(tid), comm, int(fields[11]) + int(fields[12]), int(fields[19])))
    return out


def pids_mentioning(text):
    """Pids of the processes whose command line contains text (a directory a
    test or benchmark made, say): what is left running there."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            pids.append(int(pid))
    return pids


def pg_workdir(parent, prefix):
    """A new temporary directory under parent (created if need be), mode 755,
    owned by the postgres OS user: where a benchmark puts its servers."""
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=prefix, dir=parent)
    os.chmod(work, 0o755)
    give_to_pg_user(work)
    return work


def run_then_clean(step, work, keep, log):
    """Runs step(); then removes work unless keep (log says which).  Returns
    True when step was interrupted (KeyboardInterrupt: Ctrl-C, or SIGTERM
    turned into one), after step's own clean-up has run, else False."""
    interrupted = False
    try:
        step()
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted; everything started has been stopped")
    finally:
        if keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return interrupted
