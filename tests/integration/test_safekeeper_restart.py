"""
The safekeeper's restart path against its WAL removal (issue 11.1, 11.4).

A restart scans WAL from a stored record boundary, min(commit_lsn,
flush_lsn) of the control file.  If WAL removal (which follows the
pageserver's feedback) ever takes the segment holding that point, the scan
finds nothing there and the old code truncated everything after it:
acknowledged WAL gone.  These tests drive one real strata-safekeeper with a
scripted proposer (synthetic, CRC-valid WAL, the client of
test_safekeeper_badinput) into exactly that layout, deterministically:

  1. commit reaches the term start: the control file is written with
     flush_lsn F0 (segment 1);
  2. commit moves into segment 2 by less than a segment: the core keeps the
     control file lazy, so only the once-a-second save writes commit_lsn;
  3. the pageserver reports everything below the new commit as consistent:
     segment 1 is removable;
  4. the safekeeper is restarted (cleanly, and with SIGKILL).

Every acknowledged record must still be there: flush_lsn after the restart
equals the acknowledged end, and the WAL streams back byte for byte.
"""
import os
import re
import shutil
import signal
import struct
import subprocess
import time

import pytest

from test_safekeeper_badinput import (SK_BIN, Conn, Proposer, Safekeeper, lsn_str,  # noqa: F401
                                      new_ids, opts, sk)

SEG1 = 1 << 20  # 1 MB segments (a valid PostgreSQL size) keep the WAL small


def lsn_int(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def segment_files(sk, tenant, timeline):
    d = os.path.join(sk.datadir, tenant, timeline)
    return sorted(f for f in os.listdir(d) if len(f.split(".")[0]) == 24)


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def send_ps_feedback(sk, tenant, timeline, start, lsn):
    """Pageserver feedback on a replication connection: everything below lsn
    is ingested and consistent on the pageserver's disk.  Without token auth
    the safekeeper takes it only from a connection named as the pageserver's."""
    c = Conn(sk.pg_port, opts(tenant, timeline), replication="true",
             application_name="strata_pageserver")
    c.start_copy_both(f"START_REPLICATION PHYSICAL {lsn_str(start)}")
    c.copy_data(b"z" + struct.pack("!QQQ", lsn, lsn, lsn))
    return c


def read_back(sk, tenant, timeline, start, end):
    c = Conn(sk.pg_port, opts(tenant, timeline), replication="true")
    c.start_copy_both(f"START_REPLICATION PHYSICAL {lsn_str(start)}")
    got = bytearray()
    while len(got) < end - start:
        m = c.recv_copy()
        if m[0:1] == b"w":
            got += m[25:]
    c.close()
    return bytes(got[:end - start])


def commit_just_past_segment(p):
    """Pushes WAL so that the acknowledged end lies in the next segment but
    less than a segment after the commit the control file last stored."""
    first = p.push(5, 100)  # commit reaches the term start: persisted
    boundary = (first // SEG1 + 1) * SEG1
    while p.wal.pos < boundary - 12000:
        p.push(20, 4000, commit=False) if boundary - p.wal.pos > 100000 else p.push(1, 4000,
                                                                                   commit=False)
    while p.wal.pos <= boundary:
        p.push(1, 60, commit=False)
    end = p.push(1, 60)
    assert boundary < end < first + SEG1, (first, boundary, end)
    return first, end


@pytest.mark.parametrize("how", ["clean", "kill9"])
def test_restart_after_wal_removal_keeps_acknowledged_wal(sk, how):
    tenant, timeline = new_ids()
    p = Proposer(sk, tenant, timeline, start=SEG1, seg=SEG1)
    first, end = commit_just_past_segment(p)
    # The lazy save stores the new commit_lsn; then the pageserver's feedback
    # moves the removal horizon to it and segment 1 goes.
    fb = send_ps_feedback(sk, tenant, timeline, first, end)
    seg1 = "%08X%08X%08X" % (1, 0, 1)
    wait_for(lambda: not any(f.startswith(seg1) for f in segment_files(sk, tenant, timeline)),
             20, "segment 1 to be removed below the horizon " + lsn_str(end))
    time.sleep(1.5)  # a further housekeeping round: the lazy save is on disk
    fb.close()
    p.c.close()
    if how == "clean":
        assert sk.stop() == 0
    else:
        sk.proc.send_signal(signal.SIGKILL)
        sk.proc.wait()
        sk.proc = None
        sk.log.close()
    sk.start()
    st = sk.http_json(f"/v1/tenant/{tenant}/timeline/{timeline}")
    assert st["flush_lsn"] == lsn_str(end), (st, sk.read_log()[-3000:])
    assert st["commit_lsn"] == lsn_str(end), st
    seg2_start = 2 * SEG1
    assert read_back(sk, tenant, timeline, seg2_start, end) == \
        bytes(p.pushed[seg2_start - SEG1:end - SEG1])


def test_restart_after_kill_syncs_what_it_scanned(tmp_path):
    """After kill -9, WAL the dead process wrote may sit in the page cache
    only.  The restart reports everything it scans as flushed, so it must
    fsync every segment from its scan start to the end it found first
    (issue 11.4).  The housekeeping period is an hour, so the control file
    keeps the flush_lsn of the term start and the scan covers 4 segments;
    strace shows which files were synced before the daemon said ready."""
    if shutil.which("strace") is None:
        pytest.fail("strace is not installed (make deps installs it)")
    if not os.path.exists(SK_BIN):
        pytest.fail(f"{SK_BIN} not built")
    s = Safekeeper(str(tmp_path / "data"), extra_args=["--housekeeping-ms", "3600000"])
    traced = None
    s.start()
    try:
        tenant, timeline = new_ids()
        p = Proposer(s, tenant, timeline, start=SEG1, seg=SEG1)
        p.push(5, 100)  # commit reaches the term start: the control file is written
        while p.wal.pos < 4 * SEG1 + 100000:
            p.push(40, 4000, commit=False)
        end = p.wal.pos - (p.wal.pos % 8)
        p.c.close()
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait()
        s.proc = None
        s.log.close()
        trace = tmp_path / "strace.txt"
        s.wrapper = ["strace", "-f", "-y", "-qq", "-e", "trace=fsync,fdatasync", "-o",
                     str(trace)]
        s.start()
        # strace's child is the safekeeper: stop() must end it, not strace.
        with open(f"/proc/{s.proc.pid}/task/{s.proc.pid}/children") as f:
            traced = int(f.read().split()[0])
        st = s.http_json(f"/v1/tenant/{tenant}/timeline/{timeline}")
        assert lsn_int(st["flush_lsn"]) >= 4 * SEG1, st
        synced = set()
        for line in trace.read_text().splitlines():
            for name in re.findall(r"/([0-9A-F]{24})(?:\.partial)?>", line):
                synced.add(int(name[16:], 16))
        wanted = set(range(1, lsn_int(st["flush_lsn"]) // SEG1 + 1))
        assert wanted <= synced, f"segments {sorted(wanted - synced)} reported flushed unsynced"
    finally:
        if traced:
            os.kill(traced, signal.SIGTERM)
            wait_for(lambda: not os.path.exists(f"/proc/{traced}"), 30, "the safekeeper to exit")
        s.stop()


@pytest.mark.parametrize("mode", ["sync", "uring"])
def test_wal_io_modes_write_and_sync_where_they_say(tmp_path, mode):
    """--wal-io sync runs every WAL fdatasync as a system call of the loop
    thread; --wal-io uring leaves the group-commit rounds' fdatasyncs to
    io_uring (the kernel's workers, which strace does not see).  Either way
    every acknowledged byte reads back, across a segment boundary, and the
    status endpoint names the mode."""
    if shutil.which("strace") is None:
        pytest.fail("strace is not installed (make deps installs it)")
    if not os.path.exists(SK_BIN):
        pytest.fail(f"{SK_BIN} not built")
    trace = tmp_path / "strace.txt"
    s = Safekeeper(str(tmp_path / "data"), extra_args=["--wal-io", mode],
                   wrapper=["strace", "-f", "-y", "-qq", "-e", "trace=fdatasync", "-o",
                            str(trace)])
    s.start()
    traced = None
    try:
        with open(f"/proc/{s.proc.pid}/task/{s.proc.pid}/children") as f:
            traced = int(f.read().split()[0])
        assert s.http_json("/v1/status")["wal_io"] == mode
        tenant, timeline = new_ids()
        p = Proposer(s, tenant, timeline, start=SEG1, seg=SEG1)
        pushes = 0
        while p.wal.pos < 2 * SEG1 + 100000:
            p.push(20, 4000)
            pushes += 1
        end = p.wal.pos - (p.wal.pos % 8)
        st = s.http_json(f"/v1/tenant/{tenant}/timeline/{timeline}")
        assert lsn_int(st["flush_lsn"]) >= end - 8, st
        assert read_back(s, tenant, timeline, SEG1, end) == bytes(p.pushed[:end - SEG1])
        p.c.close()
    finally:
        if traced:
            os.kill(traced, signal.SIGTERM)
            wait_for(lambda: not os.path.exists(f"/proc/{traced}"), 30, "the safekeeper to exit")
        s.stop()
    by_thread = {}
    for line in trace.read_text().splitlines():
        m = re.match(r"(\d+) +fdatasync\(\d+</[^>]*/([0-9A-F]{24})(?:\.partial)?>", line)
        if m:
            by_thread[int(m.group(1))] = by_thread.get(int(m.group(1)), 0) + 1
    if mode == "sync":
        # One round per push at least, all on the main (loop) thread.
        assert set(by_thread) == {traced}, by_thread
        assert by_thread[traced] >= pushes, (by_thread, pushes)
    else:
        assert sum(by_thread.values()) < pushes, (by_thread, pushes)


def test_wal_io_rejects_an_unknown_mode(tmp_path):
    if not os.path.exists(SK_BIN):
        pytest.fail(f"{SK_BIN} not built")
    cp = subprocess.run([SK_BIN, "--id", "1", "--datadir", str(tmp_path / "d"), "--wal-io",
                         "aio", "--listen-pg", "127.0.0.1:0", "--listen-http", "127.0.0.1:0"],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode != 0
    assert '--wal-io: "aio" is neither sync nor uring' in cp.stderr, cp.stderr
