"""`strata remote` against both backends of common/net/remote_storage.h.

The same operations run against a local directory (file://) and against a
real S3 server: Ceph's radosgw, started for the test by the script that
STRATA_S3_SCRIPT names (a tool outside the project, see docs/operations.md)
in a temporary directory on a free block of ports, and stopped afterwards.
Without STRATA_S3_SCRIPT the S3 test fails and says so; `make test` leaves
it out unless the variable is set.

Covered: create the store, put and get (single and multipart: 40 MiB in
5 MiB parts, from a file and from memory), byte ranges (inside, across and
past the end), keys with space, '+' and UTF-8, head, list with a prefix,
delete one and many, a missing key, a bad key, and for S3 a listing of
several pages, a wrong secret
(403 SignatureDoesNotMatch) and an unreachable endpoint (retried, then a
clear error).  Against a local endpoint that always fails, the retry policy:
5xx and 429 and timeouts retried, other 4xx not.
"""

import hashlib
import http.server
import os
import random
import subprocess
import threading
import time

import pytest

from conftest import free_port_block, require_binaries, strata_bin

ODD_KEY = "sp ace/p+lus/\u00e9t\u00e9 \u20ac.bin"
BIG = 40 * 1024 * 1024
MULTIPART = ["--part-size", "5M", "--multipart-threshold", "8M"]


def remote(args, env=None, check=True, timeout=120, input_bytes=None):
    """Runs `strata remote ARGS`; stdout and stderr as text unless input_bytes
    is given (then bytes in, bytes out)."""
    binary = input_bytes is not None
    cp = subprocess.run([strata_bin(), "remote"] + args, capture_output=True, text=not binary,
                        input=input_bytes, env=env, timeout=timeout, check=False)
    if check and cp.returncode != 0:
        raise AssertionError("strata remote %s: exit %d: %s" % (args, cp.returncode, cp.stderr))
    return cp


def cat(url, env, key, *range_args):
    return remote(["cat", url, key] + list(range_args), env, input_bytes=b"").stdout


def listing(url, env, prefix=None):
    out = remote(["ls", url] + ([prefix] if prefix is not None else []), env).stdout
    return [(int(size), key) for size, key in
            (line.split("\t", 1) for line in out.splitlines())]


def write_random(path, size, seed):
    rng = random.Random(seed)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 1 << 20)
            f.write(rng.randbytes(n))
            left -= n


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def exercise(url, env, tmp_path):
    """The operations every backend must pass, through the CLI."""
    remote(["init", url], env)
    remote(["init", url], env)  # again: an existing store is fine
    small = tmp_path / "small"
    small.write_bytes(b"strata remote\n" * 1000)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    remote(["put", url, "plain/one", str(small)], env)
    remote(["put", url, ODD_KEY, str(small)], env)
    remote(["put", url, "plain/empty", str(empty)], env)
    assert listing(url, env) == sorted([(14000, "plain/one"), (14000, ODD_KEY),
                                        (0, "plain/empty")], key=lambda e: e[1].encode())
    assert listing(url, env, "plain/o") == [(14000, "plain/one")]
    assert listing(url, env, "sp ace/p+") == [(14000, ODD_KEY)]
    assert remote(["head", url, ODD_KEY], env).stdout == "14000\n"

    back = tmp_path / "back"
    remote(["get", url, ODD_KEY, str(back)], env)
    assert back.read_bytes() == small.read_bytes()
    remote(["get", url, "plain/empty", str(back)], env)
    assert back.read_bytes() == b""
    assert not (tmp_path / "back.tmp").exists()

    # Byte ranges (get_range) and whole objects into memory (get_buf).
    data = small.read_bytes()
    assert cat(url, env, ODD_KEY) == data
    assert cat(url, env, ODD_KEY, "100", "50") == data[100:150]
    assert cat(url, env, ODD_KEY, "13990") == data[13990:]
    assert cat(url, env, ODD_KEY, "13990", "100") == data[13990:]
    assert cat(url, env, ODD_KEY, "14000", "10") == b""
    assert cat(url, env, ODD_KEY, "99999", "10") == b""
    assert cat(url, env, "plain/empty", "0", "10") == b""
    assert cat(url, env, "plain/empty") == b""
    # From memory (put_buf): standard input, large enough for multipart.
    mem = random.Random(7).randbytes(12 * 1024 * 1024 + 3)
    remote(["put", url, "mem/obj", "-"] + MULTIPART, env, input_bytes=mem)
    assert cat(url, env, "mem/obj") == mem
    assert cat(url, env, "mem/obj", "5242870", "20") == mem[5242870:5242890]
    remote(["rm", url, "mem/obj"], env)

    # A missing key: exit 1, a message naming the key; the target untouched.
    back.write_bytes(b"keep")
    cp = remote(["get", url, "plain/none", str(back)], env, check=False)
    assert cp.returncode == 1 and "plain/none" in cp.stderr, cp.stderr
    assert back.read_bytes() == b"keep"
    cp = remote(["head", url, "plain/none"], env, check=False)
    assert cp.returncode == 1 and "no such key" in cp.stderr, cp.stderr

    # A key the interface refuses, before any request.
    cp = remote(["put", url, "a/../b", str(small)], env, check=False)
    assert cp.returncode == 1 and "'..'" in cp.stderr, cp.stderr

    # A large object (multipart on S3), read back whole.
    big = tmp_path / "big"
    write_random(big, BIG, 13)
    remote(["put", url, "layers/big", str(big)] + MULTIPART, env, timeout=600)
    assert remote(["head", url, "layers/big"], env).stdout == "%d\n" % BIG
    big_back = tmp_path / "big.back"
    remote(["get", url, "layers/big", str(big_back)], env, timeout=600)
    assert sha256(big_back) == sha256(big)

    # Delete one, then many (one of them missing).
    remote(["rm", url, "plain/one"], env)
    remote(["rm", url, "plain/one"], env)  # missing: no error
    remote(["rm", url, ODD_KEY, "layers/big", "never/was"], env)
    assert listing(url, env) == [(0, "plain/empty")]
    remote(["rm", url, "plain/empty"], env)
    assert listing(url, env) == []


def test_remote_local(tmp_path):
    require_binaries(strata_bin())
    url = "file://%s/remote" % tmp_path
    # Before init: the store does not exist, and the message says what to do.
    cp = remote(["ls", url], check=False)
    assert cp.returncode == 1 and "strata remote init" in cp.stderr, cp.stderr
    work = tmp_path / "work"
    work.mkdir()
    exercise(url, os.environ.copy(), work)
    # Deletes leave no empty directories and no temporary files behind.
    assert os.listdir(tmp_path / "remote") == []


def test_remote_usage_errors():
    require_binaries(strata_bin())
    cp = remote(["put", "file:///tmp/x", "k"], check=False)
    assert cp.returncode == 2 and "wrong number of operands" in cp.stderr
    cp = remote(["ls", "ftp://x"], check=False)
    assert cp.returncode == 1 and "s3://BUCKET/PREFIX" in cp.stderr
    cp = remote(["ls", "s3://bucket", "--part-size", "lots"], check=False)
    assert cp.returncode == 2 and "--part-size" in cp.stderr
    env = {k: v for k, v in os.environ.items() if "S3" not in k and not k.startswith("AWS_")}
    cp = remote(["ls", "s3://bucket"], env, check=False)
    assert cp.returncode == 1 and "STRATA_S3_ENDPOINT" in cp.stderr, cp.stderr


class FaultyS3(http.server.ThreadingHTTPServer):
    """An endpoint that answers every request with one fixed failure and
    counts the requests: it checks the client's retry policy, not S3."""

    def __init__(self, status, code, hang=False):
        self.status, self.code, self.hang, self.requests = status, code, hang, 0
        super().__init__(("127.0.0.1", 0), FaultyHandler)


class FaultyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # answers curl's Expect: 100-continue

    def do_any(self):
        self.server.requests += 1
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.server.hang:
            time.sleep(3)
            return
        body = ("<?xml version=\"1.0\"?><Error><Code>%s</Code><Message>injected</Message>"
                "</Error>" % self.server.code).encode()
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up first

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_any

    def log_message(self, *args):
        pass


def test_remote_s3_retry_policy(tmp_path):
    """5xx, 429 and timeouts are retried up to --attempts; other 4xx are not."""
    require_binaries(strata_bin())
    src = tmp_path / "src"
    src.write_bytes(b"x" * 1000)
    cases = [(503, "SlowDown", False, 3), (500, "InternalError", False, 3),
             (429, "TooManyRequests", False, 3), (400, "InvalidArgument", False, 1),
             (404, "NoSuchBucket", False, 1), (200, "", True, 2)]
    for status, code, hang, want in cases:
        server = FaultyS3(status, code, hang)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            env = dict(os.environ, STRATA_S3_ENDPOINT="http://127.0.0.1:%d" % server.server_port,
                       STRATA_S3_ACCESS_KEY="k", STRATA_S3_SECRET_KEY="s")
            cp = remote(["put", "s3://bucket/p", "key", str(src), "--attempts", str(want if
                         want > 1 else 3), "--timeout-ms", "500"], env, check=False)
        finally:
            server.shutdown()
            server.server_close()
        assert cp.returncode == 1, cp.stderr
        assert server.requests == want, (status, server.requests, cp.stderr)
        assert "s3 PUT s3://bucket/p/key" in cp.stderr, cp.stderr
        if hang:
            assert "Timeout" in cp.stderr, cp.stderr
        else:
            assert "HTTP %d %s: injected" % (status, code) in cp.stderr, cp.stderr
        assert ("after %d attempts" % want in cp.stderr) == (want > 1), cp.stderr


@pytest.fixture
def radosgw(tmp_path):
    """A running radosgw: yields the environment of its endpoint and keys."""
    script = os.environ.get("STRATA_S3_SCRIPT")
    if not script:
        pytest.fail("STRATA_S3_SCRIPT is not set: this test runs a real S3 server; set it to "
                    "the radosgw start script (start-s3.sh: `start DIR PORT`, `stop DIR`; "
                    "see docs/operations.md)")
    if not os.path.isfile(script):
        pytest.fail("STRATA_S3_SCRIPT=%s is not a file" % script)
    state = tmp_path / "s3"
    started = None
    for _ in range(3):  # a port taken between the check and the start
        port = free_port_block(21)
        cp = subprocess.run(["bash", script, "start", str(state), str(port)],
                            capture_output=True, text=True, timeout=180, check=False)
        if cp.returncode == 0:
            started = port
            break
    assert started is not None, "radosgw did not start: %s %s" % (cp.stdout, cp.stderr)
    try:
        values = {}
        for line in (state / "env").read_text().splitlines():
            name, _, value = line.partition("=")
            values[name] = value
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("STRATA_S3_") and not k.startswith("AWS_")}
        env.update(STRATA_S3_ENDPOINT=values["S3_ENDPOINT"],
                   STRATA_S3_ACCESS_KEY=values["S3_ACCESS_KEY"],
                   STRATA_S3_SECRET_KEY=values["S3_SECRET_KEY"],
                   STRATA_S3_REGION=values.get("S3_REGION", "us-east-1"))
        yield env
    finally:
        subprocess.run(["bash", script, "stop", str(state)], capture_output=True,
                       timeout=60, check=False)


def test_remote_s3_radosgw(tmp_path, radosgw):
    require_binaries(strata_bin())
    env = radosgw
    url = "s3://strata-test/tenant one/\u00e9"
    work = tmp_path / "work"
    work.mkdir()
    exercise(url, env, work)

    # Two prefixes of one bucket do not see each other's keys.
    small = work / "small"
    remote(["put", url, "mine", str(small)], env)
    remote(["put", "s3://strata-test/other", "theirs", str(small)], env)
    assert [k for _, k in listing(url, env)] == ["mine"]
    assert [k for _, k in listing("s3://strata-test", env)] == [
        "other/theirs", "tenant one/\u00e9/mine"]

    # A listing of many pages (7 keys a page), then one DeleteObjects.
    keys = ["many/%03d" % i for i in range(30)]
    tiny = work / "tiny"
    tiny.write_bytes(b"x")
    for key in keys:
        remote(["put", url, key, str(tiny)], env)
    out = remote(["ls", url, "many/", "--list-page", "7"], env).stdout
    assert [line.split("\t")[1] for line in out.splitlines()] == keys
    remote(["rm", url] + keys, env)
    assert listing(url, env, "many/") == []

    # A wrong secret: 403 with the S3 error code, no retries.
    bad = dict(env, STRATA_S3_SECRET_KEY="wrong" * 8)
    cp = remote(["get", url, "mine", str(work / "x")], bad, check=False)
    assert cp.returncode == 1, cp.stderr
    assert "HTTP 403 SignatureDoesNotMatch" in cp.stderr and "mine" in cp.stderr, cp.stderr
    assert "attempts" not in cp.stderr

    # Nothing listening: retried, then a clear error naming the attempts.
    closed = dict(env, STRATA_S3_ENDPOINT="http://127.0.0.1:%d" % free_port_block(1))
    cp = remote(["head", url, "mine", "--attempts", "3"], closed, check=False)
    assert cp.returncode == 1 and "after 3 attempts" in cp.stderr, cp.stderr
    assert "onnect" in cp.stderr, cp.stderr
