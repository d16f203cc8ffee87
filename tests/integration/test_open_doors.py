"""
Secure by default (issue 11, item 7 "Open doors"), against real processes.

What it shows:
  - a default `strata up` cluster refuses a missing and a wrong token on
    every port: each safekeeper's pg and HTTP port, the pageserver's pg and
    HTTP (admin) port; the right token gets through; a refused admin
    DELETE changes nothing; the CLI, the compute and the pageserver's WAL
    receiver use the cluster's tokens without being told;
  - `strata up --no-auth` runs open and `strata status` (text and JSON)
    says so;
  - a ProposerGreeting with a segment size PostgreSQL cannot have is
    refused with a clear error, creates nothing, and the safekeeper keeps
    serving another proposer;
  - a 1 GB segment is zero-filled off the event loop: another timeline's
    proposer keeps getting its appends acknowledged meanwhile;
  - allow_timeline_creation: a WAL-push connection that does not ask for it
    cannot create a timeline; a safekeeper emptied under a running cluster
    is refused by the compute's walproposer (a clear error in its log) and
    stays empty instead of coming back as an empty voting member.
"""
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request

import pytest

from conftest import wait_until
from test_safekeeper_badinput import (Conn, PgError, Proposer, greeting, new_ids,  # noqa: F401
                                      opts, sk)

WRONG = "not-the-token"


# ------------------------------------------------------------- a raw client


def pg_try(port, password=None, options=None, replication=False, query=None, timeout=10):
    """Connects to 127.0.0.1:port, answering a cleartext password request
    with password (or with an empty one: the server then refuses it).
    Returns ("refused", sqlstate, message) or, past authentication, ("ok",
    the first message type the query got) or ("error", sqlstate, message)."""
    try:
        c = Conn(port, options=options, timeout=timeout, password=password or "",
                 replication="true" if replication else None)
    except PgError as e:
        return ("refused", e.fields.get("C"), e.fields.get("M", ""))
    try:
        c.send(b"Q", query.encode() + b"\0")
        typ, payload = c.recv()
        if typ == b"E":
            f = Conn.parse_error(payload)
            return ("error", f.get("C"), f.get("M", ""))
        return ("ok", typ.decode())
    finally:
        c.close()


def http_status(port, method, path, token=None, body=None):
    headers = {"Authorization": "Bearer " + token} if token is not None else {}
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


# ------------------------------------------------------------ the cluster


def test_every_port_of_a_default_cluster_refuses_missing_and_wrong_tokens(cluster):
    st = cluster.status()
    assert st["auth"] is True and st["auth_file"] == os.path.join(cluster.dir, "auth.json")
    assert os.stat(st["auth_file"]).st_mode & 0o777 == 0o600
    text = cluster.run("status").stdout
    assert "auth      on" in text, text
    admin, token = cluster.tokens()
    assert admin and token and admin != token
    tenant, timeline = cluster.ids()
    # The compute, sync-safekeepers and the pageserver's WAL receiver got
    # their tokens from strata: the cluster works.
    cluster.sql("create table doors (id int primary key)")
    cluster.sql("insert into doors select generate_series(1, 100)")
    assert cluster.sql("select count(*) from doors") == [(100,)]

    sk_opts = "-c tenant_id=%s -c timeline_id=%s" % (tenant, timeline)
    for node in st["safekeepers"]:
        port = node["pg_port"]
        for pw in (None, WRONG):
            r = pg_try(port, pw, sk_opts, replication=True, query="IDENTIFY_SYSTEM")
            assert r[0] == "refused" and r[1] == "28P01", (node["name"], pw, r)
            assert "password authentication failed" in r[2], r
        for pw in (token, admin):
            assert pg_try(port, pw, sk_opts, replication=True,
                          query="IDENTIFY_SYSTEM") == ("ok", "T"), (node["name"], pw)
        http = node["http_port"]
        assert http_status(http, "GET", "/v1/tenant")[0] == 401, node["name"]
        assert http_status(http, "GET", "/v1/tenant", WRONG)[0] == 403, node["name"]
        assert http_status(http, "GET", "/v1/tenant", token)[0] == 403, node["name"]
        code, body = http_status(http, "GET", "/v1/tenant", admin)
        assert code == 200 and tenant in body, (node["name"], body)

    ps = st["pageserver"]
    stream = "pagestream_v1 %s %s" % (tenant, timeline)
    for pw in (None, WRONG):
        r = pg_try(ps["pg_port"], pw, query=stream)
        assert r[0] == "refused" and r[1] == "28P01", (pw, r)
    for pw in (token, admin):
        assert pg_try(ps["pg_port"], pw, query=stream) == ("ok", "W"), pw
    http = ps["http_port"]
    tl_path = "/v1/tenant/%s/timeline/%s" % (tenant, timeline)
    for pw, want in ((None, 401), (WRONG, 403), (token, 403)):
        assert http_status(http, "GET", "/v1/tenant", pw)[0] == want, pw
        # The doors of the issue: DELETE and an import of any path.
        assert http_status(http, "DELETE", tl_path, pw)[0] == want, pw
        assert http_status(http, "POST", "/v1/tenant/%s/timeline" % tenant, pw,
                           {"import_pgdata": "/etc", "safekeepers": []})[0] == want, pw
    code, body = http_status(http, "GET", "/v1/tenant/%s/timeline" % tenant, admin)
    assert code == 200 and json.loads(body)["timelines"][0]["timeline_id"] == timeline, body
    # The CLI's admin commands use the cluster's admin token by themselves.
    out = cluster.run("timeline", "list", "--dir", cluster.dir).stdout
    assert timeline in out, out
    assert cluster.sql("select count(*) from doors") == [(100,)]


def test_no_auth_cluster_is_open_and_says_so(cluster_dir):
    cluster = cluster_dir
    out = cluster.up("--no-auth").stdout
    assert "auth: OFF (--no-auth)" in out, out
    st = cluster.status()
    assert st["auth"] is False and st["auth_file"] is None
    assert "auth      OFF (--no-auth)" in cluster.run("status").stdout
    assert not os.path.exists(os.path.join(cluster.dir, "auth.json"))
    tenant, timeline = cluster.ids()
    assert pg_try(st["pageserver"]["pg_port"],
                  query="pagestream_v1 %s %s" % (tenant, timeline)) == ("ok", "W")
    assert http_status(st["safekeepers"][0]["http_port"], "GET", "/v1/tenant")[0] == 200
    # Turning auth on needs the cluster down; then every port wants a token.
    r = cluster.run("up", "--auth", check=False)
    assert r.returncode != 0 and "run `strata down`" in r.stderr, r.stderr
    cluster.down()
    cluster.up("--auth")
    st = cluster.status()
    assert st["auth"] is True
    assert http_status(st["safekeepers"][0]["http_port"], "GET", "/v1/tenant")[0] == 401
    assert cluster.sql("select 1") == [(1,)]


def test_emptied_safekeeper_is_not_recreated_by_the_compute(cluster):
    cluster.sql("create table e (id int)")
    cluster.sql("insert into e select generate_series(1, 10)")
    cluster.stop("compute")
    cluster.stop("sk3")
    shutil.rmtree(cluster.safekeeper_datadir("sk3"))
    os.mkdir(cluster.safekeeper_datadir("sk3"), 0o750)
    cluster.start("sk3")
    cluster.start("compute")
    # Two of three still commit.
    cluster.sql("insert into e values (11)")
    assert cluster.sql("select count(*) from e") == [(11,)]
    log = os.path.join(cluster.dir, "compute.log")
    wait_until(lambda: "does not exist on this safekeeper" in open(log).read(), 30,
               "the walproposer to be refused by the emptied sk3")
    sk3 = cluster.safekeeper("sk3")
    status = json.loads(http_status(sk3["http_port"], "GET", "/v1/status")[1])
    assert status["timelines"] == [], status
    with open(os.path.join(cluster.compute_datadir, "strata.conf")) as f:
        assert "allow_timeline_creation" not in f.read()


# ------------------------------------------------------ one safekeeper


def test_push_without_allow_timeline_creation_cannot_create(sk):
    tenant, timeline = new_ids()
    for query in ("START_WAL_PUSH", "START_WAL_PUSH (proto_version '3')",
                  "START_WAL_PUSH (proto_version '3', allow_timeline_creation 'false')"):
        c = Conn(sk.pg_port, opts(tenant, timeline))
        c.start_copy_both(query)
        c.copy_data(greeting(tenant, timeline))
        err = c.expect_error()
        assert err["C"] == "42704", err
        assert "does not exist on this safekeeper" in err["M"], err
        c.close()
    c = Conn(sk.pg_port, opts(tenant, timeline))
    with pytest.raises(PgError) as e:
        c.query("START_WAL_PUSH (proto_version '3', allow_timeline_creation 'maybe')")
    assert "allow_timeline_creation takes 'true' or 'false'" in e.value.text
    c.close()
    assert sk.http_json("/v1/status")["timelines"] == []
    # Asked for, it is created; afterwards a plain connection finds it.
    p = Proposer(sk, tenant, timeline, create=True)
    end = p.push(3, 100)
    p.c.close()
    c = Conn(sk.pg_port, opts(tenant, timeline))
    c.start_copy_both("START_WAL_PUSH (proto_version '3')")
    c.copy_data(greeting(tenant, timeline))
    assert c.recv_copy()[0:1] == b"g"
    c.close()
    st = sk.http_json("/v1/tenant/%s/timeline/%s" % (tenant, timeline))
    assert st["flush_lsn"] == "%X/%X" % (end >> 32, end & 0xFFFFFFFF)


@pytest.mark.parametrize("seg", [0, 12345, 1 << 19, 3 << 20, 1 << 31, 0xFFFFFFFF])
def test_greeting_with_an_invalid_segment_size_is_refused(sk, seg):
    tenant, timeline = new_ids()
    good = Proposer(sk, tenant, timeline)
    good.push(2, 100)
    bad_tenant, bad_timeline = new_ids()
    c = Conn(sk.pg_port, opts(bad_tenant, bad_timeline))
    c.start_copy_both("START_WAL_PUSH (proto_version '3', allow_timeline_creation 'true')")
    c.copy_data(greeting(bad_tenant, bad_timeline, seg=seg))
    err = c.expect_error()
    assert "wal_seg_size is not a power of two in 1 MB .. 1 GB" in err.get("D", ""), err
    c.close()
    assert sk.alive()
    good.push(2, 100)
    ids = [t["timeline_id"] for t in sk.http_json("/v1/status")["timelines"]]
    assert bad_timeline not in ids and timeline in ids


def test_a_1gb_segment_is_zero_filled_off_the_event_loop(sk):
    """Proposer B's first append needs a new 1 GB segment.  Meanwhile the
    event loop must keep answering: IDENTIFY_SYSTEM on another timeline (a
    query the loop answers from memory, no disk) keeps coming back fast."""
    tenant, timeline = new_ids()
    a = Proposer(sk, tenant, timeline)
    a.push(1, 100)
    q = Conn(sk.pg_port, opts(tenant, timeline), replication="true")
    b = Proposer(sk, *new_ids(), seg=1 << 30)
    done = {}

    def push_b():
        t0 = time.monotonic()
        b.push(1, 100)
        done["b"] = time.monotonic() - t0

    t = threading.Thread(target=push_b)
    t0 = time.monotonic()
    t.start()
    answered = 0
    slowest = 0.0
    while t.is_alive():
        s = time.monotonic()
        assert q.query("IDENTIFY_SYSTEM")[0][1] == "1"
        slowest = max(slowest, time.monotonic() - s)
        answered += 1
    t.join(120)
    q.close()
    b_time = done["b"]
    print("1 GB segment: B's first append took %.2f s; %d queries answered meanwhile, "
          "slowest %.3f s" % (b_time, answered, slowest))
    if b_time < 0.3:
        pytest.skip("this disk zero-fills 1 GB in %.2f s: too fast to see a stall" % b_time)
    # On the loop thread the query waited for the whole fill.
    assert slowest < b_time / 2, (slowest, b_time, answered)
    a.push(1, 100)
    sizes = [os.path.getsize(os.path.join(root, f)) for root, _dirs, files in os.walk(sk.datadir)
             for f in files if f.endswith(".partial")]
    assert 1 << 30 in sizes, sizes
    assert time.monotonic() - t0 < 120
