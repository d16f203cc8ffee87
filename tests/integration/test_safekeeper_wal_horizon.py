"""
What may move a safekeeper's WAL removal horizon, and the bound on its
local WAL (issue 13, parts 3 and 5; docs/design.md, WAL removal).

One real strata-safekeeper driven by the scripted proposer and raw
replication client of test_safekeeper_badinput (synthetic, CRC-valid WAL in
1 MB segments):

  - pageserver feedback ('z') moves the horizon only when it comes from the
    pageserver's connection: the admin token with token auth, the
    pageserver's application_name without; anybody else's is ignored
    (logged, counted) while its streaming goes on;
  - feedback relayed by the proposer in AppendRequests is taken (that is
    how what one safekeeper heard reaches the others);
  - --max-wal-bytes: an append that would take a timeline's segment files
    past the limit is refused with a clear error, and taken again, without
    a restart, once WAL removal made room.
"""
import copy
import json
import os
import shutil
import struct
import tempfile
import time
import urllib.request

import pytest

from test_safekeeper_badinput import (SK_BIN, Conn, Proposer, Safekeeper, append, elected,
                                      greeting, lsn_str, new_ids, opts, parse_append_response,
                                      vote)

MB = 1 << 20
ADMIN = "admin-" + os.urandom(8).hex()


def start_sk(extra_args=()):
    if not os.path.exists(SK_BIN):
        pytest.skip(f"{SK_BIN} not built")
    tmp = tempfile.mkdtemp(prefix="strata-skh-")
    s = Safekeeper(os.path.join(tmp, "data"), extra_args=extra_args)
    s.tmp = tmp
    s.start()
    return s


def stop_sk(s):
    rc = s.stop()
    log = s.read_log()
    shutil.rmtree(s.tmp, ignore_errors=True)
    assert rc == 0, "safekeeper did not shut down cleanly:\n" + log
    assert "AddressSanitizer" not in log and "runtime error" not in log, log


def metric(sk, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{sk.http_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def timeline_status(sk, tenant, timeline, token=None):
    req = urllib.request.Request(f"http://127.0.0.1:{sk.http_port}"
                                 f"/v1/tenant/{tenant}/timeline/{timeline}")
    if token is not None:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def seg_path(sk, tenant, timeline, n):
    return os.path.join(sk.datadir, tenant, timeline, "0000000100000000%08X" % n)


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


def feedback_conn(sk, tenant, timeline, start, password=None, application_name=None):
    c = Conn(sk.pg_port, opts(tenant, timeline), replication="true", password=password,
             application_name=application_name)
    c.start_copy_both(f"START_REPLICATION PHYSICAL {lsn_str(start)}")
    return c


def send_feedback(c, lsn):
    c.copy_data(b"z" + struct.pack("!QQQ", lsn, lsn, lsn))


def first_xlogdata(c):
    while True:
        m = c.recv_copy()
        if m[0:1] == b"w":
            return m


@pytest.fixture
def auth_sk():
    tenant, timeline = new_ids()
    tmp = tempfile.mkdtemp(prefix="strata-skh-auth-")
    path = os.path.join(tmp, "auth.json")
    token = "tok-" + os.urandom(8).hex()
    with open(path, "w") as f:
        json.dump({"admin_token": ADMIN, "tenants": {tenant: token}}, f)
    os.chmod(path, 0o600)
    s = start_sk(["--auth-file", path])
    s.ids = (tenant, timeline)
    s.tenant_token = token
    yield s
    stop_sk(s)
    shutil.rmtree(tmp, ignore_errors=True)


def test_feedback_moves_horizon_only_from_the_pageserver_token(auth_sk):
    sk = auth_sk
    tenant, timeline = sk.ids
    p = Proposer(sk, tenant, timeline, start=MB, seg=MB, password=sk.tenant_token)
    end = p.push(110, 30000)  # a bit over 3 segments, committed
    assert end > 4 * MB

    # A tenant's token (a compute, a pg_receivewal) -- even one that names
    # itself as the pageserver -- streams, but its feedback is dropped.
    c = feedback_conn(sk, tenant, timeline, MB, password=sk.tenant_token,
                      application_name="strata_pageserver")
    send_feedback(c, 0xFFFFFFFF00000000)
    send_feedback(c, 0xFFFFFFFF00000000)
    assert first_xlogdata(c)[1:9] == struct.pack("!Q", MB), "streaming stopped"
    time.sleep(2.5)  # housekeeping runs every second
    assert os.path.exists(seg_path(sk, tenant, timeline, 1)), \
        "a tenant-token client made the safekeeper remove WAL"
    assert metric(sk, "safekeeper_ps_feedback_ignored_total") == 2
    st = timeline_status(sk, tenant, timeline, token=ADMIN)
    assert st["pageserver_feedback"]["disk_consistent_lsn"] == "0/0", st
    log = sk.read_log()
    assert log.count("ignoring pageserver feedback") == 1, log  # once per connection
    c.close()

    # The pageserver's token (the admin token) moves it.
    persisted = 3 * MB + 100
    c = feedback_conn(sk, tenant, timeline, 3 * MB, password=ADMIN)
    send_feedback(c, persisted)
    wait_for(lambda: not os.path.exists(seg_path(sk, tenant, timeline, 2)), 10,
             "WAL below the pageserver's position to be removed")
    assert not os.path.exists(seg_path(sk, tenant, timeline, 1))
    assert os.path.exists(seg_path(sk, tenant, timeline, 3))
    st = timeline_status(sk, tenant, timeline, token=ADMIN)
    assert st["pageserver_feedback"]["disk_consistent_lsn"] == lsn_str(persisted), st
    c.close()


def test_without_auth_feedback_needs_the_pageserver_name():
    sk = start_sk()
    try:
        tenant, timeline = new_ids()
        p = Proposer(sk, tenant, timeline, start=MB, seg=MB)
        end = p.push(110, 30000)
        assert end > 4 * MB
        c = feedback_conn(sk, tenant, timeline, MB)  # a pg_receivewal, say
        send_feedback(c, 0xFFFFFFFF00000000)
        assert first_xlogdata(c)[1:9] == struct.pack("!Q", MB)
        time.sleep(2.5)
        assert os.path.exists(seg_path(sk, tenant, timeline, 1)), \
            "an anonymous replication client made the safekeeper remove WAL"
        assert metric(sk, "safekeeper_ps_feedback_ignored_total") == 1
        c.close()
        c = feedback_conn(sk, tenant, timeline, 3 * MB, application_name="strata_pageserver")
        send_feedback(c, 3 * MB + 100)
        wait_for(lambda: not os.path.exists(seg_path(sk, tenant, timeline, 2)), 10,
                 "WAL below the pageserver's position to be removed")
        c.close()
    finally:
        stop_sk(sk)


def test_feedback_relayed_by_the_proposer_moves_the_horizon():
    sk = start_sk()
    try:
        tenant, timeline = new_ids()
        p = Proposer(sk, tenant, timeline, start=MB, seg=MB)
        end = p.push(110, 30000)
        persisted = 3 * MB + 100
        # A heartbeat carrying what another safekeeper heard.
        p.c.copy_data(append(p.term, end, b"", p.commit, p.commit, ps=(end, persisted, persisted)))
        r = parse_append_response(p.c.recv_copy())
        assert r["ps_feedback"] == (end, persisted, persisted), r
        wait_for(lambda: not os.path.exists(seg_path(sk, tenant, timeline, 2)), 10,
                 "WAL below the relayed position to be removed")
        assert os.path.exists(seg_path(sk, tenant, timeline, 3))
        st = timeline_status(sk, tenant, timeline)
        assert st["pageserver_feedback"]["remote_consistent_lsn"] == lsn_str(persisted), st
    finally:
        stop_sk(sk)


def take_over(sk, tenant, timeline, term, history):
    """A proposer reconnecting with a new term, elected at the safekeeper's
    flush position (the end of WAL it has).  Returns (conn, flush_lsn)."""
    c = Conn(sk.pg_port, opts(tenant, timeline))
    c.start_copy_both("START_WAL_PUSH (proto_version '3')")
    c.copy_data(greeting(tenant, timeline, seg=MB))
    assert c.recv_copy()[0:1] == b"g"
    c.copy_data(vote(term))
    v = c.recv_copy()
    assert v[9] == 1, "vote not given"
    flush = struct.unpack("!Q", v[10:18])[0]
    c.copy_data(elected(term, flush, history + [(term, flush)]))
    return c, flush


def send_batch(c, term, writer, commit, ps=(0, 0, 0)):
    """Four 30 kB records as one AppendRequest (under 128 kB).  Returns
    (end, None) once flushed, or (None, error fields) when refused."""
    for _ in range(4):
        end = writer.record(30000)
    begin, data = writer.take()
    assert len(data) <= 128 * 1024
    c.copy_data(append(term, begin, data, commit, commit, ps=ps))
    while True:
        typ, body = c.recv()
        if typ == b"E":
            return None, Conn.parse_error(body)
        if typ == b"d" and parse_append_response(body)["flush_lsn"] >= end:
            return end, None


def test_wal_limit_refuses_appends_then_takes_them_again():
    limit = 4 * MB
    sk = start_sk(["--max-wal-bytes", str(limit)])
    try:
        tenant, timeline = new_ids()
        p = Proposer(sk, tenant, timeline, start=MB, seg=MB)
        assert sk.http_json("/v1/status")["max_wal_bytes"] == limit
        commit = p.push(100, 30000)  # ~3 MB, committed
        # Segments 1..4 fill the limit: the first append that needs
        # segment 5 is refused, FATAL, with a message that says why.
        err = None
        for _ in range(40):
            before = copy.deepcopy(p.wal)
            end, err = send_batch(p.c, p.term, p.wal, commit)
            if err is not None:
                break
        assert err is not None, "never refused"
        assert err["C"] == "53100", err
        assert "WAL limit" in err["M"] and "--max-wal-bytes" in err["D"], err
        p.c.close()
        st = timeline_status(sk, tenant, timeline)
        assert st["wal_limited"] is True and not st["failed"], st
        assert metric(sk, "safekeeper_appends_refused_total") == 1
        assert not os.path.exists(seg_path(sk, tenant, timeline, 5))
        assert "refusing appends" in sk.read_log()

        # A reconnect is refused again while nothing can be removed, but
        # the feedback its append relays is taken: after a reconnect WAL,
        # not a heartbeat, comes first, and a safekeeper that never heard
        # the pageserver's position could never make room.
        c, flush = take_over(sk, tenant, timeline, 2, [(1, MB)])
        assert flush == before.pos
        retry = copy.deepcopy(before)
        end, err = send_batch(c, 2, retry, 0, ps=(MB + 8, MB + 8, MB + 8))
        assert err is not None and err["C"] == "53100", err
        c.close()
        st = timeline_status(sk, tenant, timeline)
        assert st["pageserver_feedback"]["disk_consistent_lsn"] == lsn_str(MB + 8), st
        assert metric(sk, "safekeeper_appends_refused_total") == 2

        # The pageserver catches up: WAL below its position goes, and the
        # same timeline takes the refused WAL -- no restart.
        fb = feedback_conn(sk, tenant, timeline, 3 * MB, application_name="strata_pageserver")
        send_feedback(fb, commit)
        wait_for(lambda: not os.path.exists(seg_path(sk, tenant, timeline, 2)), 10,
                 "WAL removal below the pageserver's position")
        fb.close()
        c, flush = take_over(sk, tenant, timeline, 3, [(1, MB), (2, flush)])
        assert flush == before.pos
        for _ in range(10):
            end, err = send_batch(c, 3, before, commit)
            assert err is None, err
        assert os.path.exists(seg_path(sk, tenant, timeline, 5))
        wait_for(lambda: timeline_status(sk, tenant, timeline)["wal_limited"] is False, 5,
                 "the status to say appends are taken")
        assert "taking appends" in sk.read_log()
        c.close()
    finally:
        stop_sk(sk)
