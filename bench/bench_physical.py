"""The physical limits a commit cannot beat, measured in the same run.

For: one 8 kB fdatasync on the data directories' filesystem (pg_test_fsync's
"one 8kB write" fdatasync line), the CPU one 8 kB write + fdatasync costs
the thread that makes it, and a loopback TCP round trip (a ping-pong between
two processes over 127.0.0.1 with TCP_NODELAY, p50/p99 in us, and the CPU
both processes spent per round trip).  The fdatasync's CPU is a floor under a
commit path's CPU: every copy of a commit on disk costs at least one.

Not for: anything about Postgres servers.  The round trip is measured from
Python, so it includes a few microseconds of interpreter overhead per side;
it is an upper bound on the kernel's loopback RTT, which is what a report
should compare commit latency with anyway (a commit pays at least one).
Its CPU per round trip is likewise an upper bound on the kernel's per hop.
"""

import os
import re
import socket
import subprocess
import sys
import time

from bench_pg import pg_tool
from bench_proc import BenchError, proc_cpu_seconds, run
from bench_stats import percentile

_FDATASYNC_RE = re.compile(r"^\s*fdatasync\s+([0-9.]+|n/a\S*)\s+ops/sec\s+([0-9]+)\s+usecs/op",
                           re.MULTILINE)


def parse_pg_test_fsync(text):
    """{'ops_per_sec', 'usec_per_op', 'line'} of the fdatasync line of the one-8kB-write
    section of pg_test_fsync output.  Raises ValueError if it is missing."""
    start = text.find("using one 8kB write")
    if start < 0:
        raise ValueError("pg_test_fsync output has no 'one 8kB write' section")
    end = text.find("\nCompare", start + 1)
    section = text[start:end if end > 0 else len(text)]
    m = _FDATASYNC_RE.search(section)
    if not m:
        raise ValueError("pg_test_fsync output has no fdatasync line in the 8kB section")
    return {"ops_per_sec": float(m.group(1)), "usec_per_op": int(m.group(2)),
            "line": m.group(0).strip()}


def measure_fdatasync(directory, seconds=2):
    """Runs pg_test_fsync on a file in directory (as the postgres user)."""
    path = os.path.join(directory, "pg_test_fsync.out")
    cp = run([pg_tool("pg_test_fsync"), "-f", path, "-s", str(seconds)],
             timeout=40 * seconds + 60, pg_user=True)
    try:
        result = parse_pg_test_fsync(cp.stdout)
    except ValueError as e:
        raise BenchError(f"pg_test_fsync: {e}") from e
    finally:
        if os.path.exists(path):
            os.unlink(path)
    result["seconds_per_test"] = seconds
    return result


def measure_fdatasync_cpu(directory, ops=2000, block=8192):
    """CPU (user + system, of this thread) and wall time per pwrite of block
    bytes + fdatasync, ops times, over a file in directory written with
    zeros and synced first (as a WAL segment is before its first append:
    the loop rewrites allocated blocks).  The kernel's work for the IO that
    runs outside this thread (interrupts, block layer workers) is not in it,
    so this is a lower bound."""
    path = os.path.join(directory, "strata-fdatasync-cpu.tmp")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.pwrite(fd, bytes(ops * block), 0)
        os.fsync(fd)
        data = b"x" * block
        cpu0, t0 = time.thread_time(), time.perf_counter()
        for i in range(ops):
            os.pwrite(fd, data, i * block)
            os.fdatasync(fd)
        cpu, wall = time.thread_time() - cpu0, time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return {"ops": ops, "block_bytes": block, "cpu_us_per_op": round(cpu * 1e6 / ops, 1),
            "wall_us_per_op": round(wall * 1e6 / ops, 1)}


_ECHO_SERVER = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
s.settimeout(30)
c, _ = s.accept()
c.settimeout(30)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
n = int(sys.argv[1])
while True:
    buf = b""
    while len(buf) < n:
        chunk = c.recv(n - len(buf))
        if not chunk:
            sys.exit(0)
        buf += chunk
    c.sendall(buf)
"""


def _recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise BenchError("loopback echo server closed the connection")
        buf += chunk
    return buf


def measure_loopback_rtt(round_trips=20000, warmup=1000, message_bytes=64):
    """p50/p99/mean of a message_bytes ping-pong over 127.0.0.1, and the CPU
    of both processes per round trip (two messages), in microseconds."""
    server = subprocess.Popen([sys.executable, "-c", _ECHO_SERVER, str(message_bytes)],
                              stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        if not line.strip().isdigit():
            raise BenchError("loopback echo server did not report its port")
        port = int(line)
        rtts = []
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            msg = b"x" * message_bytes
            for i in range(warmup + round_trips):
                if i == warmup:
                    server_cpu0, client_cpu0 = proc_cpu_seconds(server.pid), time.thread_time()
                t0 = time.perf_counter_ns()
                sock.sendall(msg)
                _recv_exact(sock, message_bytes)
                dt = time.perf_counter_ns() - t0
                if i >= warmup:
                    rtts.append(dt / 1000.0)
            client_cpu = time.thread_time() - client_cpu0
            server_cpu = proc_cpu_seconds(server.pid) - server_cpu0
    finally:
        server.kill()
        server.wait(timeout=10)
    rtts.sort()
    return {"round_trips": round_trips, "message_bytes": message_bytes,
            "p50_us": round(percentile(rtts, 50), 1), "p99_us": round(percentile(rtts, 99), 1),
            "mean_us": round(sum(rtts) / len(rtts), 1),
            # Both ends' CPU (the server's in clock ticks: enough over thousands
            # of round trips, not over a few).
            "cpu_us": round((client_cpu + server_cpu) * 1e6 / round_trips, 1)}
