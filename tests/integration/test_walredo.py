"""The redo helper and pool against real WAL (docs/design.md §6.5).

A real PostgreSQL (the patched build, as the unprivileged `postgres` user,
full_page_writes=on) runs a heap + btree workload after a checkpoint, so the
first change of every page carries a full-page image, and is stopped cleanly.
strata-redo-tool (tests/tools/redo_tool.c, release build) reads its WAL with
our decoder, keeps for each block the records from the last one that
initialises it, and rebuilds pages through the redo pool (pageserver/redo/redo.c)
and helpers running compute/walredo in the patched postgres.

- Rebuilt pages equal the pages in the stopped server's data files, heap and
  btree pages of the user tables and of the catalogs, after masking what
  wal_consistency_checking masks (hint bits, unused space, command ids,
  btree garbage/cycle-id flags, LP flags of btree leaves); page LSNs equal
  unmasked.
- A record that fails its CRC is refused with an error naming the key and
  the LSN, and the pool carries on.
- A helper killed with SIGKILL mid-run, or stopped with SIGSTOP, is replaced
  and the requests in flight are retried: no request fails.
- Helpers outlive the thread that started them, and die (even a stopped one)
  when the process that runs the pool is killed.
- Once sandboxed, a forbidden system call kills the helper (SIGSYS).

Skipped unless the patched build, strata_walredo.so and strata-redo-tool
exist.
"""
import os
import re
import shutil
import signal
import struct
import subprocess
import threading
import time

import pytest

from conftest import (BUILD, as_pg_user_kwargs, children_of, chown_to_pg_user, free_port, kill_hard,
                      make_shared_dir, pid_alive, sysv_segments_created_by, wait_until)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_SH = os.path.join(REPO, "compute", "postgres", "build.sh")
REDO_TOOL = os.path.join(BUILD, "bin", "strata-redo-tool")
WALREDO_SO = os.path.join(BUILD, "lib", "strata_walredo.so")
BLCKSZ = 8192


def patched_bindir():
    res = subprocess.run([BUILD_SH, "--prefix-only"], capture_output=True, text=True, timeout=60)
    if res.returncode != 0 or not res.stdout.strip():
        return None
    return os.path.join(res.stdout.strip().splitlines()[-1], "bin")


BINDIR = patched_bindir()
pytestmark = pytest.mark.skipif(
    BINDIR is None or not os.access(REDO_TOOL, os.X_OK) or not os.access(WALREDO_SO, os.R_OK),
    reason="needs the patched PostgreSQL build, %s and %s" % (WALREDO_SO, REDO_TOOL))


def run_pg(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=300,
                          **as_pg_user_kwargs(), **kw)


@pytest.fixture(scope="module")
def wal_db():
    """A stopped cluster whose pg_wal holds every record since its first checkpoint."""
    top = make_shared_dir("strata-walredo-")
    data = os.path.join(top, "db")
    sock = os.path.join(top, "sock")
    for d in (data, sock):
        os.mkdir(d, 0o700)
        chown_to_pg_user(d)
    port = free_port()
    res = run_pg([os.path.join(BINDIR, "initdb"), "-D", data, "--no-sync", "-A", "trust", "-U",
                  "postgres", "--locale=C"])
    assert res.returncode == 0, res.stderr
    opts = ("-c listen_addresses=127.0.0.1 -p %d -c unix_socket_directories=%s "
            "-c full_page_writes=on -c wal_keep_size=1GB -c max_wal_size=1GB "
            "-c checkpoint_timeout=1h -c autovacuum=off -c fsync=off" % (port, sock))
    res = run_pg([os.path.join(BINDIR, "pg_ctl"), "-D", data, "-o", opts, "-l",
                  os.path.join(sock, "server.log"), "-w", "start"])
    assert res.returncode == 0, res.stderr
    pid = int(open(os.path.join(data, "postmaster.pid")).readline())
    try:
        psql = [os.path.join(BINDIR, "psql"), "-h", "127.0.0.1", "-p", str(port), "-U",
                "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-qAt"]
        workload = """
            CREATE TABLE acct (id int PRIMARY KEY, owner text, balance int, note text);
            CREATE INDEX acct_owner ON acct (owner);
            INSERT INTO acct SELECT g, md5(g::text), g % 100, repeat('n', g % 50)
              FROM generate_series(1, 4000) g;
            CHECKPOINT;
            UPDATE acct SET balance = balance + 1 WHERE id % 5 = 0;
            UPDATE acct SET owner = md5(owner) WHERE id % 17 = 0;
            DELETE FROM acct WHERE id % 13 = 0;
            INSERT INTO acct SELECT g, md5(g::text), 0, 'late' FROM generate_series(4001, 6000) g;
            VACUUM acct;
            UPDATE acct SET note = note || 'x' WHERE id < 500;
            CREATE TABLE log (id bigserial PRIMARY KEY, at timestamptz DEFAULT now(), v int);
            INSERT INTO log (v) SELECT g FROM generate_series(1, 3000) g;
            DELETE FROM log WHERE v % 3 = 0;
            INSERT INTO log (v) SELECT g FROM generate_series(1, 1000) g;
        """
        # Fed on stdin: one statement at a time, so VACUUM and CHECKPOINT run
        # outside a transaction block.
        res = subprocess.run(psql, input=workload, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
    finally:
        res = run_pg([os.path.join(BINDIR, "pg_ctl"), "-D", data, "-m", "fast", "-w", "stop"])
        if res.returncode != 0 or pid_alive(pid):
            kill_hard([pid])
    segs = sorted(f for f in os.listdir(os.path.join(data, "pg_wal")) if len(f) == 24)
    yield {"top": top, "data": data,
           "first": os.path.join(data, "pg_wal", segs[0]),
           "last": os.path.join(data, "pg_wal", segs[-1])}
    shutil.rmtree(top, ignore_errors=True)


def tool(wal_db, mode, *args, timeout=300, popen=False):
    work = os.path.join(wal_db["top"], "work-%s-%d" % (mode, time.monotonic_ns()))
    os.mkdir(work)
    os.chmod(work, 0o755)
    cmd = [REDO_TOOL, mode, "--pg-bindir", BINDIR, "--work-dir", work] + list(args) + [
        wal_db["first"], wal_db["last"]]
    env = dict(os.environ, STRATA_WALREDO_LIB=WALREDO_SO)
    if popen:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env), work
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env), work


# ---- masking, as wal_consistency_checking does (bufmask.c, heap_mask, btree_mask) ----

def u16(page, off):
    return struct.unpack_from("<H", page, off)[0]


def put_u16(page, off, v):
    struct.pack_into("<H", page, off, v)


def mask_common(page):
    page[0:8] = b"\0" * 8          # pd_lsn
    page[8:10] = b"\0" * 2         # pd_checksum
    page[20:24] = b"\0" * 4        # pd_prune_xid
    put_u16(page, 10, u16(page, 10) & ~0x0003)  # PD_HAS_FREE_LINES, PD_PAGE_FULL
    lower, upper = u16(page, 12), u16(page, 14)
    if 24 <= lower <= upper <= BLCKSZ:
        page[lower:upper] = b"\0" * (upper - lower)


def line_pointers(page):
    n = (u16(page, 12) - 24) // 4
    for i in range(n):
        lp = struct.unpack_from("<I", page, 24 + 4 * i)[0]
        yield i, lp & 0x7FFF, (lp >> 15) & 3, lp >> 17


def mask_heap(page):
    mask_common(page)
    for i, off, flags, length in line_pointers(page):
        if flags == 1 and off + 24 <= BLCKSZ:  # LP_NORMAL
            infomask = u16(page, off + 20)
            if infomask & 0x0300 != 0x0300:
                infomask &= ~0xFFF0  # HEAP_XACT_MASK
            else:
                infomask &= ~(0x0800 | 0x0400)
            put_u16(page, off + 20, infomask)
            page[off + 8:off + 12] = b"\0" * 4  # t_cid
        if flags in (1, 2) and length:  # has storage: mask alignment padding
            pad = ((length + 7) & ~7) - length
            page[off + length:off + length + pad] = b"\0" * pad


def mask_btree(page):
    mask_common(page)
    special = u16(page, 16)
    flags = u16(page, special + 12)
    if flags & 0x0001:  # BTP_LEAF: mask LP flags
        for i, off, lpflags, length in line_pointers(page):
            if lpflags != 0:
                lp = off | (length << 17)
                struct.pack_into("<I", page, 24 + 4 * i, lp)
    put_u16(page, special + 12, flags & ~(0x0040 | 0x0020))  # HAS_GARBAGE, SPLIT_END
    put_u16(page, special + 14, 0)  # btpo_cycleid


def page_kind(page):
    special = u16(page, 16)
    if special == BLCKSZ:
        return "heap"
    if BLCKSZ - special == 16:
        return "btree"
    return "other"


def data_file_page(data, spc, db, rel, blk):
    base = os.path.join(data, "global") if spc == 1664 else os.path.join(data, "base", str(db))
    seg, within = divmod(blk, 131072)
    path = os.path.join(base, str(rel) + ("" if seg == 0 else ".%d" % seg))
    try:
        with open(path, "rb") as f:
            f.seek(within * BLCKSZ)
            page = f.read(BLCKSZ)
    except FileNotFoundError:
        return None
    return page if len(page) == BLCKSZ else None


def test_rebuilt_pages_match_the_data_files(wal_db):
    out = os.path.join(wal_db["top"], "pages")
    os.mkdir(out)
    res, _ = tool(wal_db, "replay", "--out", out, "--pick", "60", "--min-records", "2",
                  "--helpers", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    compared = {"heap": 0, "btree": 0}
    user_pages = 0
    records = 0
    for line in res.stdout.splitlines():
        if not line.startswith("page "):
            continue
        f = line.split()
        spc, db, rel, fork, blk = map(int, f[1:6])
        mine = bytearray(open(os.path.join(out, "%d_%d_%d_%d_%d" % (spc, db, rel, fork, blk)),
                              "rb").read())
        theirs = data_file_page(wal_db["data"], spc, db, rel, blk)
        if theirs is None:
            continue  # relation dropped or rewritten later (its file is gone)
        theirs = bytearray(theirs)
        kind = page_kind(theirs)
        if kind not in compared:
            continue
        where = "%d/%d/%d.%d blk %d (%s, %s records)" % (spc, db, rel, fork, blk, kind, f[7])
        assert mine[0:8] == theirs[0:8], "page LSN differs: " + where
        (mask_heap if kind == "heap" else mask_btree)(mine)
        (mask_heap if kind == "heap" else mask_btree)(theirs)
        if mine != theirs:
            diff = [i for i in range(BLCKSZ) if mine[i] != theirs[i]]
            raise AssertionError("%s differs at %d bytes, first at %d" % (where, len(diff),
                                                                         diff[0]))
        compared[kind] += 1
        records += int(f[7])
        user_pages += db == 5
    assert compared["heap"] >= 5 and compared["btree"] >= 5, (compared, res.stdout)
    assert user_pages >= 5, res.stdout
    assert records >= 200, records
    stats = re.search(r"stats requests (\d+) records (\d+) restarts (\d+) timeouts (\d+) "
                      r"failures (\d+)", res.stdout)
    assert stats and int(stats.group(5)) == 0 and int(stats.group(3)) == 0, res.stdout


def test_corrupt_record_is_refused_with_key_and_lsn(wal_db):
    out = os.path.join(wal_db["top"], "corrupt")
    os.mkdir(out)
    res, _ = tool(wal_db, "replay", "--out", out, "--pick", "3", "--corrupt")
    assert res.returncode == 1, res.stdout + res.stderr
    fails = [l for l in res.stdout.splitlines() if l.startswith("fail ")]
    assert len(fails) == 3, res.stdout
    for line in fails:
        assert re.search(r"redo of rel \d+/\d+/\d+\.0 blk \d+ at [0-9A-F]+/[0-9A-F]+: "
                         r"redo helper refused: walredo: record ending at [0-9A-F]+/[0-9A-F]+ "
                         r"fails its CRC", line), line
    assert os.listdir(out) == []


def helper_pids(tool_pid, min_age=0.0):
    """The tool's postgres children that have run for at least min_age seconds
    (so a fault hits a helper serving requests, not one still starting)."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    found = []
    for p in children_of(tool_pid):
        try:
            if os.path.basename(os.readlink("/proc/%d/exe" % p)) != "postgres":
                continue
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if fields[0] in ("T", "t", "Z"):
                continue  # an earlier victim
            started = int(fields[19]) / ticks
        except OSError:
            continue
        if uptime - started >= min_age:
            found.append(p)
    return found


def bench_with_fault(wal_db, fault, extra):
    # Three faults a second or more apart, each found only once its helper has
    # run 0.7 s, then a timeout and a restart: on a loaded machine ten
    # seconds were not always enough for the third restart.
    proc, work = tool(wal_db, "bench", "--helpers", "2", "--threads", "4", "--seconds", "16",
                      "--records", "2", *extra, popen=True)
    victims = []
    try:
        deadline = time.monotonic() + 60
        while len(helper_pids(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)
        for _ in range(3):
            pids = wait_until(lambda: helper_pids(proc.pid, min_age=0.7), 30,
                              "a helper that has finished starting", interval=0.05)
            os.kill(pids[0], fault)
            victims.append(pids[0])
            time.sleep(1.0)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            kill_hard([proc.pid] + children_of(proc.pid))
    return proc.returncode, stdout, stderr, victims


def parse_bench(stdout):
    b = re.search(r"requests (\d+) errors (\d+)", stdout)
    s = re.search(r"stats requests (\d+) records (\d+) restarts (\d+) timeouts (\d+) "
                  r"failures (\d+)", stdout)
    assert b and s, stdout
    return int(b.group(1)), int(b.group(2)), int(s.group(3)), int(s.group(4))


def test_killed_helpers_are_replaced_and_requests_retried(wal_db):
    rc, stdout, stderr, victims = bench_with_fault(wal_db, signal.SIGKILL, [])
    requests, errors, restarts, timeouts = parse_bench(stdout)
    assert rc == 0 and errors == 0, stdout + stderr
    assert restarts >= 3, stdout
    assert requests > 1000, stdout
    assert not any(pid_alive(v) for v in victims)
    # A killed helper runs no exit callbacks: its interlock segment must
    # still go (compute/walredo/README.md), or each kill leaks one.
    assert sysv_segments_created_by(victims) == []


def test_stopped_helpers_time_out_and_are_replaced(wal_db):
    rc, stdout, stderr, victims = bench_with_fault(wal_db, signal.SIGSTOP,
                                                   ["--timeout-ms", "1500"])
    requests, errors, restarts, timeouts = parse_bench(stdout)
    assert rc == 0 and errors == 0, stdout + stderr
    assert timeouts >= 3 and restarts >= 3, stdout
    # The stopped helpers were killed, not left behind.
    assert not any(pid_alive(v) for v in victims)
    assert sysv_segments_created_by(victims) == []


def test_helpers_outlive_the_thread_that_started_them(wal_db):
    # The tool starts its helpers from a warm-up thread that ends before the
    # timed run.  A parent-death signal tied to that thread would kill them
    # there, and each would be restarted.
    res, _ = tool(wal_db, "bench", "--helpers", "2", "--threads", "2", "--seconds", "3")
    requests, errors, restarts, timeouts = parse_bench(res.stdout)
    assert res.returncode == 0 and errors == 0, res.stdout + res.stderr
    assert requests > 100 and restarts == 0 and timeouts == 0, res.stdout


def test_helpers_die_with_the_process_that_runs_the_pool(wal_db):
    # A stopped helper cannot see its stdin end: only the parent-death signal
    # removes it when the pool's process is killed.
    proc, _ = tool(wal_db, "bench", "--helpers", "2", "--threads", "2", "--seconds", "60",
                   popen=True)
    helpers = []
    try:
        def both_started():
            found = helper_pids(proc.pid, min_age=0.5)
            return found if len(found) == 2 else None

        helpers = wait_until(both_started, 60, "two helpers that finished starting",
                             interval=0.1)
        os.kill(helpers[0], signal.SIGSTOP)
        proc.kill()
        proc.communicate(timeout=30)
        wait_until(lambda: not any(pid_alive(h) for h in helpers), 10,
                   "the helpers to die with the tool", interval=0.1)
        assert sysv_segments_created_by(helpers) == []
    finally:
        if proc.poll() is None:
            kill_hard([proc.pid])
        kill_hard([h for h in helpers if pid_alive(h)])


def test_forbidden_syscall_kills_the_sandboxed_helper(wal_db):
    # A template made by the pool: run the tool once so it exists.
    out = os.path.join(wal_db["top"], "sandbox-pages")
    os.mkdir(out)
    res, work = tool(wal_db, "replay", "--out", out, "--pick", "1")
    assert res.returncode == 0, res.stdout + res.stderr
    walredo = os.path.join(work, "walredo")
    template = [d for d in os.listdir(walredo) if d.startswith("template-")][0]
    results = {}
    pids = []
    for sandbox in ("on", "off"):
        d = os.path.join(walredo, "probe-" + sandbox)
        subprocess.run(["cp", "-a", os.path.join(walredo, template), d], check=True)
        p = subprocess.Popen(
            [os.path.join(BINDIR, "postgres"), "--single", "-D", d, "-c", "fsync=off",
             "-c", "dynamic_library_path=" + os.path.dirname(WALREDO_SO),
             "-c", "strata_walredo.test_forbidden_syscall=on",
             "-c", "strata_walredo.seccomp=" + sandbox, "template1"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            **as_pg_user_kwargs())
        try:
            stdout, stderr = p.communicate(b"SELECT strata_walredo_main()\n", timeout=60)
        finally:
            if p.poll() is None:
                kill_hard([p.pid])
        results[sandbox] = (p.returncode, stdout, stderr)
        pids.append(p.pid)
    rc, stdout, _ = results["on"]
    assert rc == -signal.SIGSYS, results["on"]
    assert sysv_segments_created_by(pids) == []
    assert b"STRATAWR" not in stdout  # killed before the hello
    rc, stdout, stderr = results["off"]
    # Without the sandbox the call succeeds; the helper says so, sends its
    # hello and exits cleanly at the end of its stdin.
    assert rc == 0 and b"STRATAWR" in stdout and b"socket() was allowed" in stderr, results["off"]
