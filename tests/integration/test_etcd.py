"""The etcd client (common/net/etcd.h) against a real etcd 3.4.

Each test starts its own one-member etcd (/usr/bin/etcd, from Debian's
etcd-server, which `make deps` installs) on free 127.0.0.1 ports with its
data in a temporary directory, drives the client through
strata-etcd-tool (tests/tools/etcd_tool.c, one call per run) and kills
etcd by pid at the end.  Without /usr/bin/etcd the tests fail and say so.

Covered: put, get, prefix listings (with a limit), delete; compare-and-swap
succeeding and failing in both forms (the key's mod_revision; the key does
not exist); a lease granted, kept alive past its TTL, then left to expire
(its key disappears), and revoked; the next endpoint tried when the first
refuses connections, and a clear error naming every endpoint when none
answers, and a timeout (etcd stopped by SIGSTOP) reported without trying
another endpoint, since the request may have been applied.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import SAN_BUILD, free_port_block, pid_alive, require_binaries, wait_until

ETCD = "/usr/bin/etcd"
TOOL = os.path.join(SAN_BUILD, "bin", "strata-etcd-tool")
TIMEOUT_MS = "3000"


@pytest.fixture
def etcd():
    """A running one-member etcd: yields its client URL."""
    if not os.access(ETCD, os.X_OK):
        pytest.fail("%s not found: install Debian's etcd-server (make deps)" % ETCD)
    require_binaries(TOOL)
    base = free_port_block(2)
    client, peer = "http://127.0.0.1:%d" % base, "http://127.0.0.1:%d" % (base + 1)
    workdir = tempfile.mkdtemp(prefix="strata-etcd-")
    log = open(os.path.join(workdir, "etcd.log"), "wb")
    proc = subprocess.Popen(
        [ETCD, "--name", "n1", "--data-dir", os.path.join(workdir, "data"),
         "--listen-client-urls", client, "--advertise-client-urls", client,
         "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
         "--initial-cluster", "n1=" + peer],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: proc.poll() is not None or
                   tool(client, "get", "ready", check=False).returncode == 0,
                   20, "etcd to answer on %s" % client)
        if proc.poll() is not None:
            with open(os.path.join(workdir, "etcd.log"), errors="replace") as f:
                pytest.fail("etcd exited with %s: %s" % (proc.returncode, f.read()[-2000:]))
        _PIDS[client] = proc.pid
        yield client
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert not pid_alive(proc.pid)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)


_PIDS = {}


def etcd_pid(client):
    return _PIDS[client]


def tool(endpoints, *args, check=True):
    cp = subprocess.run([TOOL, endpoints, TIMEOUT_MS] + [str(a) for a in args],
                        capture_output=True, text=True, timeout=30, check=False)
    if check and cp.returncode != 0:
        raise AssertionError("strata-etcd-tool %s: exit %d: %s" % (args, cp.returncode, cp.stderr))
    return cp


def call(endpoints, *args):
    return json.loads(tool(endpoints, *args).stdout)


def test_put_get_prefix_delete(etcd):
    rev = call(etcd, "put", "t/a", "one")["revision"]
    call(etcd, "put", "t/b", "")
    call(etcd, "put", "t/c", "three")
    call(etcd, "put", "u/a", "other prefix")
    got = call(etcd, "get", "t/a")
    assert got["found"] and got["kv"]["value"] == "one"
    assert got["kv"]["mod_revision"] == got["kv"]["create_revision"] == rev
    assert got["kv"]["version"] == 1
    assert call(etcd, "get", "t/b")["kv"]["value"] == ""
    assert call(etcd, "get", "t/nothing") == {"found": False}

    listing = call(etcd, "prefix", "t/", 10)
    assert [kv["key"] for kv in listing["kvs"]] == ["t/a", "t/b", "t/c"]
    assert listing["count"] == 3 and not listing["more"]
    limited = call(etcd, "prefix", "t/", 2)
    assert [kv["key"] for kv in limited["kvs"]] == ["t/a", "t/b"]
    assert limited["more"] and limited["count"] == 3

    rev2 = call(etcd, "put", "t/a", "uno")["revision"]
    again = call(etcd, "get", "t/a")["kv"]
    assert again["value"] == "uno" and again["mod_revision"] == rev2 > rev
    assert again["version"] == 2 and again["create_revision"] == rev

    assert call(etcd, "del", "t/a") == {"deleted": 1}
    assert call(etcd, "del", "t/a") == {"deleted": 0}
    assert call(etcd, "get", "t/a") == {"found": False}
    assert [kv["key"] for kv in call(etcd, "prefix", "t/", 10)["kvs"]] == ["t/b", "t/c"]


def test_compare_and_swap(etcd):
    # Does not exist: the first create wins, the second sees it.
    created = call(etcd, "put-if", "att/t1", "ps1 g1", 0)
    assert created["succeeded"] and created["current"] is None
    rev1 = created["revision"]
    lost = call(etcd, "put-if", "att/t1", "ps2 g1", 0)
    assert not lost["succeeded"]
    assert lost["current"]["value"] == "ps1 g1" and lost["current"]["mod_revision"] == rev1

    # mod_revision: the holder of the current revision wins once.
    moved = call(etcd, "put-if", "att/t1", "ps2 g2", rev1)
    assert moved["succeeded"] and moved["revision"] > rev1
    stale = call(etcd, "put-if", "att/t1", "ps1 g2", rev1)
    assert not stale["succeeded"]
    assert stale["current"]["value"] == "ps2 g2"
    assert stale["current"]["mod_revision"] == moved["revision"]
    assert call(etcd, "get", "att/t1")["kv"]["value"] == "ps2 g2"

    # A revision compared on a key that does not exist fails, showing none.
    absent = call(etcd, "put-if", "att/none", "x", rev1)
    assert not absent["succeeded"] and absent["current"] is None
    assert call(etcd, "get", "att/none") == {"found": False}


def test_lease_keepalive_and_expiry(etcd):
    lease = call(etcd, "grant", 2)
    lid, ttl = lease["id"], lease["ttl"]
    assert lid > 0 and ttl == 2
    call(etcd, "put", "reg/ps1", "alive", lid)
    assert call(etcd, "get", "reg/ps1")["kv"]["lease"] == lid

    # Renewed at about a third of the TTL, the key outlives the TTL twice over.
    deadline = time.monotonic() + 2 * ttl
    while time.monotonic() < deadline:
        renewed = call(etcd, "keepalive", lid)
        assert renewed == {"alive": True, "ttl": ttl}
        time.sleep(0.6)
    assert call(etcd, "get", "reg/ps1")["found"]

    # Left alone, the lease expires and takes its key along.
    stopped = time.monotonic()
    wait_until(lambda: not call(etcd, "get", "reg/ps1")["found"], ttl + 5,
               "the leased key to disappear")
    assert time.monotonic() - stopped >= ttl - 1
    assert call(etcd, "keepalive", lid) == {"alive": False, "ttl": 0}
    assert call(etcd, "revoke", lid) == {"revoked": False}
    # A put on the expired lease is refused with etcd's reason.
    cp = tool(etcd, "put", "reg/ps1", "again", lid, check=False)
    assert cp.returncode == 1
    assert "kv/put: HTTP 404: etcdserver: requested lease not found (code 5)" in cp.stderr
    assert etcd in cp.stderr

    # Revoking a live lease deletes its keys at once.
    lid2 = call(etcd, "grant", 30)["id"]
    call(etcd, "put", "reg/ps2", "alive", lid2)
    assert call(etcd, "revoke", lid2) == {"revoked": True}
    assert call(etcd, "get", "reg/ps2") == {"found": False}


def test_endpoints_failover_and_none_answering(etcd):
    dead = free_port_block(2)
    dead1, dead2 = "http://127.0.0.1:%d" % dead, "http://127.0.0.1:%d" % (dead + 1)
    call(etcd, "put", "f/k", "v")
    # The first endpoint refuses connections: the second answers.
    got = call(dead1 + "," + etcd, "get", "f/k")
    assert got["kv"]["value"] == "v"

    started = time.monotonic()
    cp = tool(dead1 + "," + dead2, "get", "f/k", check=False)
    assert cp.returncode == 1
    assert "no endpoint answered" in cp.stderr
    assert dead1 in cp.stderr and dead2 in cp.stderr
    assert "Couldn't connect to server" in cp.stderr
    assert time.monotonic() - started < 10

    # A request sent to a server that does not answer times out and is not
    # sent again elsewhere (it may have been applied): the error says so.
    os.kill(etcd_pid(etcd), signal.SIGSTOP)
    try:
        started = time.monotonic()
        cp = tool(etcd + "," + dead1, "put", "f/k", "w", check=False)
        elapsed = time.monotonic() - started
    finally:
        os.kill(etcd_pid(etcd), signal.SIGCONT)
    assert cp.returncode == 1
    assert etcd + " kv/put: Timeout was reached" in cp.stderr and dead1 not in cp.stderr
    assert 2.5 < elapsed < 10

    bad = tool("127.0.0.1:2379", "get", "f/k", check=False)
    assert bad.returncode == 1 and "bad endpoint list" in bad.stderr
