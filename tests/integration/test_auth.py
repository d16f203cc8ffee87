"""
Authentication of compute and admin connections (issue #5 item 3,
docs/operations.md "Authentication"), against real daemons started with
--auth-file.

What it shows:
  - an auth file readable by group/others, or malformed, stops the daemon
    at start with a message saying why;
  - HTTP: the admin endpoints answer 401 without a bearer token and 403
    with a wrong one or a tenant's token, and the refused request changed
    nothing (listings before and after, read with the admin token);
    /v1/status and /metrics stay open; the admin token works, and the CLI
    passes it from --auth-file (and fails with the server's message
    without it);
  - pgwire on the pageserver: no password, a wrong token -> 28P01
    "password authentication failed"; a tenant's token on a command naming
    another tenant (pagestream_v1, basebackup) -> 42501 "may not use
    tenant"; its own tenant and the admin token get past authentication
    (to the command's own answer);
  - pgwire on the safekeeper: a tenant token whose connection names another
    tenant in its options is refused with 42501 at connect, a wrong token
    with 28P01, the right one gets to the command;
  - tokens are reloaded on SIGHUP and on a change of the file: the new
    token works and the removed one is refused; a broken edit keeps the
    previous tokens;
  - the pageserver's WAL receiver authenticates to a safekeeper with
    --safekeeper-password (wrong: "password authentication failed" in its
    status; right: it gets past authentication).
"""
import json
import os
import signal
import time

import psycopg
import pytest

from test_admin_api import Daemon, new_id, patched_bindir, require_built, run_cli

ADMIN = "admin-" + new_id()
TENANT_A = new_id()
TENANT_B = new_id()
TOKEN_A = "tokA-" + new_id()
TOKEN_B = "tokB-" + new_id()


def write_auth(path, content, mode=0o600):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(content if isinstance(content, str) else json.dumps(content))
    os.chmod(tmp, mode)
    os.rename(tmp, path)


def auth_doc(admin=ADMIN, tenants=None):
    return {"admin_token": admin,
            "tenants": tenants if tenants is not None else {TENANT_A: TOKEN_A,
                                                            TENANT_B: TOKEN_B}}


@pytest.fixture
def workdir(tmp_path):
    os.chmod(tmp_path, 0o755)
    return str(tmp_path)


@pytest.fixture
def auth_file(workdir):
    path = os.path.join(workdir, "auth.json")
    write_auth(path, auth_doc())
    return path


def pg_connect(port, password=None, options=None):
    kw = dict(host="127.0.0.1", port=port, user="strata", dbname="postgres",
              connect_timeout=10, autocommit=True)
    if password is not None:
        kw["password"] = password
    if options is not None:
        kw["options"] = options
    return psycopg.connect(**kw)


def pg_error(port, password=None, options=None):
    """The message of a refused connection."""
    with pytest.raises(psycopg.OperationalError) as e:
        pg_connect(port, password, options).close()
    return str(e.value)


def simple_query(conn, sql):
    """Runs sql with the simple query protocol; (status, error message)."""
    res = conn.pgconn.exec_(sql.encode())
    msg = res.error_message.decode() if res.error_message else ""
    sqlstate = res.error_field(psycopg.pq.DiagnosticField.SQLSTATE)
    return res.status, (sqlstate.decode() if sqlstate else None), msg


def metric(d, name):
    text = d.http("GET", "/metrics")[1]
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def test_auth_file_refused_at_start(workdir):
    require_built()
    path = os.path.join(workdir, "auth.json")
    write_auth(path, auth_doc(), mode=0o644)
    for kind in ("pageserver", "safekeeper"):
        d = Daemon(kind, workdir, kind + "-mode", ["--auth-file", path])
        assert d.start(expect_exit=True) != 0
        assert "has mode 0644" in d.log_tail() and "chmod 600" in d.log_tail()
    write_auth(path, '{"admin_token": "x", "tenants": {"nothex": "y"}}')
    d = Daemon("pageserver", workdir, "ps-bad", ["--auth-file", path])
    assert d.start(expect_exit=True) != 0
    assert "tenant \"nothex\" is not a tenant id" in d.log_tail()


def test_pageserver_http_auth(workdir, auth_file):
    require_built()
    ps = Daemon("pageserver", workdir, "ps", ["--auth-file", auth_file])
    ps.start()
    try:
        assert ps.http("POST", "/v1/tenant", {"tenant_id": TENANT_A}, token=ADMIN)[0] == 201
        listing = ps.http("GET", "/v1/tenant", token=ADMIN)
        assert listing[0] == 200
        cases = [(None, 401, "authentication required"),
                 ("wrong-" + new_id(), 403, "the bearer token is not valid"),
                 (TOKEN_A, 403, "a tenant token may not use the admin API")]
        for token, status, msg in cases:
            for method, path, body in [("GET", "/v1/tenant", None),
                                       ("POST", "/v1/tenant", {"tenant_id": TENANT_B}),
                                       ("DELETE", "/v1/tenant/" + TENANT_A, None),
                                       ("GET", "/v1/tenant/%s/timeline" % TENANT_A, None)]:
                got = ps.http(method, path, body, token=token)
                assert got[0] == status and msg in got[1]["error"], (token, method, path, got)
        # Nothing changed.
        assert ps.http("GET", "/v1/tenant", token=ADMIN) == listing
        assert metric(ps, 'strata_auth_refusals_total{reason="http_no_token"}') == 4
        assert metric(ps, 'strata_auth_refusals_total{reason="http_not_admin"}') == 8
        # Open endpoints.
        assert ps.http("GET", "/v1/status")[0] == 200
        assert ps.http("GET", "/metrics")[0] == 200
        # Unknown paths are still 404 (routing happens first).
        assert ps.http("GET", "/v2/nothing")[0] == 404

        # The CLI: the admin token from the auth file; without it, a clear error.
        target = ["--pageserver", "127.0.0.1:%d" % ps.http_port]
        r = run_cli("tenant", "list", *target)
        assert r.returncode == 1 and "HTTP 401" in r.stderr and "--auth-file" in r.stderr
        r = run_cli("tenant", "create", "--id", TENANT_B, *target,
                    env_extra={"STRATA_ADMIN_TOKEN": TOKEN_A})
        assert r.returncode == 1 and "HTTP 403" in r.stderr
        assert ps.http("GET", "/v1/tenant", token=ADMIN) == listing
        r = run_cli("tenant", "create", "--id", TENANT_B, "--auth-file", auth_file, *target)
        assert r.returncode == 0, r.stderr
        r = run_cli("tenant", "list", *target, env_extra={"STRATA_ADMIN_TOKEN": ADMIN})
        assert r.returncode == 0 and TENANT_A in r.stdout and TENANT_B in r.stdout
    finally:
        ps.stop()


def test_pageserver_pgwire_auth(workdir, auth_file):
    require_built()
    ps = Daemon("pageserver", workdir, "ps", ["--auth-file", auth_file])
    ps.start()
    try:
        msg = pg_error(ps.pg_port, password="")
        assert "password" in msg  # libpq: no password supplied
        msg = pg_error(ps.pg_port, password="nope")
        assert "password authentication failed for user \"strata\"" in msg
        assert "not a token this server accepts" in msg

        tl = new_id()
        with pg_connect(ps.pg_port, password=TOKEN_A) as c:
            for sql in ("pagestream_v1 %s %s" % (TENANT_B, tl),
                        "basebackup %s %s 0/1000000" % (TENANT_B, tl)):
                status, code, msg = simple_query(c, sql)
                assert code == "42501", (sql, status, msg)
                assert "the token of tenant %s may not use tenant %s" % (TENANT_A, TENANT_B) \
                    in msg
            # Its own tenant gets past authentication, to the command's answer.
            status, code, msg = simple_query(c, "pagestream_v1 %s %s" % (TENANT_A, tl))
            assert code != "42501" and "not found" in msg, (code, msg)
        with pg_connect(ps.pg_port, password=ADMIN) as c:
            status, code, msg = simple_query(c, "pagestream_v1 %s %s" % (TENANT_B, tl))
            assert code != "42501" and "not found" in msg, (code, msg)
        assert metric(ps, 'strata_auth_refusals_total{reason="bad_password"}') == 1
        assert metric(ps, 'strata_auth_refusals_total{reason="other_tenant"}') == 2
    finally:
        ps.stop()


def test_safekeeper_pgwire_auth_and_reload(workdir, auth_file):
    require_built()
    sk = Daemon("safekeeper", workdir, "sk", ["--auth-file", auth_file])
    sk.start()
    try:
        tl = new_id()
        opts = lambda t: "-c tenant_id=%s -c timeline_id=%s" % (t, tl)
        msg = pg_error(sk.pg_port, password=TOKEN_A, options=opts(TENANT_B))
        assert "the token of tenant %s may not use tenant %s" % (TENANT_A, TENANT_B) in msg
        msg = pg_error(sk.pg_port, password="nope", options=opts(TENANT_A))
        assert "password authentication failed" in msg
        with pg_connect(sk.pg_port, password=TOKEN_A, options=opts(TENANT_A)) as c:
            status, code, msg = simple_query(c, "IDENTIFY_SYSTEM")
            assert "not found on this safekeeper" in msg, msg
        with pg_connect(sk.pg_port, password=ADMIN, options=opts(TENANT_B)):
            pass

        # SIGHUP: tenant A's token replaced, B removed.
        new_a = "tokA2-" + new_id()
        write_auth(auth_file, auth_doc(tenants={TENANT_A: new_a}))
        sk.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while "reloaded" not in sk.log_tail() and time.time() < deadline:
            time.sleep(0.1)
        assert "reloaded" in sk.log_tail()
        assert "password authentication failed" in pg_error(sk.pg_port, password=TOKEN_A,
                                                            options=opts(TENANT_A))
        assert "password authentication failed" in pg_error(sk.pg_port, password=TOKEN_B,
                                                            options=opts(TENANT_B))
        pg_connect(sk.pg_port, password=new_a, options=opts(TENANT_A)).close()

        # A broken edit keeps the tokens; a change on disk is picked up alone.
        write_auth(auth_file, "{broken")
        time.sleep(1.2)
        pg_connect(sk.pg_port, password=new_a, options=opts(TENANT_A)).close()
        assert "keeping the previous tokens" in sk.log_tail()
        write_auth(auth_file, auth_doc())
        time.sleep(1.2)
        pg_connect(sk.pg_port, password=TOKEN_B, options=opts(TENANT_B)).close()
        assert "password authentication failed" in pg_error(sk.pg_port, password=new_a,
                                                            options=opts(TENANT_A))

        # HTTP on the safekeeper.
        assert sk.http("GET", "/v1/tenant")[0] == 401
        assert sk.http("GET", "/v1/tenant", token=TOKEN_A)[0] == 403
        assert sk.http("GET", "/v1/tenant", token=ADMIN) == (200, {"tenants": []})
        assert sk.http("GET", "/v1/status")[0] == 200
    finally:
        sk.stop()


def test_walreceiver_authenticates(workdir, auth_file):
    require_built()
    if patched_bindir() is None:
        pytest.skip("the patched PostgreSQL build is needed for initdb")
    sk = Daemon("safekeeper", workdir, "sk", ["--auth-file", auth_file])
    sk.start()
    ps = Daemon("pageserver", workdir, "ps", ["--pg-bindir", patched_bindir(),
                                              "--walreceiver-probe-interval", "1s"])
    try:
        # The pageserver itself trusts; it gives the safekeeper a wrong token.
        ps.start(env_extra={"PAGESERVER_SAFEKEEPER_PASSWORD": "wrong"})
        tl = new_id()
        status, body = ps.http("POST", "/v1/tenant/%s/timeline/%s" % (TENANT_A, tl),
                               {"initdb": True, "safekeepers": ["127.0.0.1:%d" % sk.pg_port]})
        assert status == 201, body
        path = "/v1/tenant/%s/timeline/%s" % (TENANT_A, tl)

        def last_error():
            return ps.http("GET", path)[1]["walreceiver"]["last_error"]

        deadline = time.time() + 30
        while "password authentication failed" not in last_error() and time.time() < deadline:
            time.sleep(0.2)
        assert "password authentication failed" in last_error()
        ps.stop()
        # Right token: authentication passes; the safekeeper has no WAL of
        # this timeline yet, so the error (if any) is about that, not auth.
        ps.start(env_extra={"PAGESERVER_SAFEKEEPER_PASSWORD": TOKEN_A})
        deadline = time.time() + 30
        seen = ""
        while time.time() < deadline:
            seen = last_error()
            st = ps.http("GET", path)[1]["walreceiver"]
            if seen and "password" not in seen:
                break
            if st["connects"] > 0 and not seen:
                break
            time.sleep(0.2)
        st = ps.http("GET", path)[1]["walreceiver"]
        # Something happened: a connection or an error that is not about auth.
        assert seen or st["connects"] > 0, st
        assert "password authentication failed" not in seen, seen
        assert "may not use tenant" not in seen, seen
        print("walreceiver with the right token:", st)
    finally:
        ps.stop()
        sk.stop()


def test_stateless_compute_authenticates_to_the_pageserver(cluster_dir, tmp_path):
    """A pageserver restarted with an auth file serves a compute only with its
    tenant's token: `strata start compute` fetches the basebackup with
    STRATA_PAGESERVER_PASSWORD and writes strata.pageserver_password, through
    which the new compute's smgr reads every page; a wrong token and another
    tenant's token stop the start with the pageserver's reason."""
    cluster = cluster_dir
    cluster.env["STRATA_COMPUTE_MODE"] = "stateless"
    # This test gives the pageserver its own auth file through the
    # environment: the cluster's generated one stays out of the way.
    cluster.up("--no-auth")
    cluster.sql("create table secret (id int primary key, v text)")
    cluster.sql("insert into secret select g, md5(g::text) from generate_series(1, 5000) g")
    tenant, _timeline = cluster.ids()
    path = os.path.join(str(tmp_path), "ps-auth.json")
    write_auth(path, auth_doc(tenants={tenant: TOKEN_A, TENANT_B: TOKEN_B}))
    cluster.stop("compute")
    cluster.stop("pageserver")
    cluster.env["PAGESERVER_AUTH_FILE"] = path
    cluster.start("pageserver")

    def start_with(token):
        cluster.env["STRATA_PAGESERVER_PASSWORD"] = token
        return cluster.run("start", "compute", check=False)

    for token, reason in (("wrong-" + new_id(), "password authentication failed"),
                          (TOKEN_B, "may not use tenant")):
        proc = start_with(token)
        assert proc.returncode != 0, proc.stdout
        assert reason in proc.stderr, proc.stderr
    proc = start_with(TOKEN_A)
    assert proc.returncode == 0, proc.stderr
    # A new compute has nothing cached: these pages come through the smgr's
    # authenticated pagestream connection.
    assert cluster.sql("show strata.pageserver_password") == [(TOKEN_A,)]
    assert cluster.sql("select count(*), sum(length(v)) from secret") == [(5000, 5000 * 32)]
    cluster.sql("insert into secret values (5001, 'after')")
    assert cluster.sql("select v from secret where id = 5001") == [("after",)]
