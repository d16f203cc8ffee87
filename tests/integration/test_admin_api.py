"""
The admin API of the pageserver and the safekeeper, and `strata tenant` /
`strata timeline` over it (issue #5, docs/design.md §3.7), against real daemons from
$STRATA_SAN_BUILD/bin, without an auth file (trust).

What it shows:
  - tenants round-trip: create (a new random id, or a given one), list,
    show, delete; a created tenant survives a restart (its directory is
    durable) and a deleted one does not come back;
  - timelines round-trip under a tenant: create (initdb, given or new id),
    list, show with LSNs (start, last_record, disk_consistent, GC horizon)
    and sizes (data files, index, open layer), delete;
  - malformed and refused requests get JSON errors with the fitting status
    and change nothing (the listings before and after are equal): bad JSON,
    unknown fields, bad ids, unknown tenants and timelines (404), duplicate
    tenant (409), deleting a tenant that still has a timeline (409),
    wrong methods (405), unknown paths (404);
  - the CLI does the same round-trip and prints the server's message and
    exits 1 on an error, 2 on a usage error;
  - the safekeeper lists tenants and timelines (empty, malformed ids,
    unknown tenants) and refuses DELETE with 405.

Helpers here (Daemon, http, new_id) are also used by test_auth.py.
"""
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAN_BUILD = os.environ.get("STRATA_SAN_BUILD", os.path.join(REPO, "build-san"))
BUILD = os.environ.get("STRATA_BUILD", os.path.join(REPO, "build"))
PS_BIN = os.path.join(SAN_BUILD, "bin", "strata-pageserver")
SK_BIN = os.path.join(SAN_BUILD, "bin", "strata-safekeeper")
STRATA_BIN = os.path.join(SAN_BUILD, "bin", "strata")


def new_id():
    return secrets.token_hex(16)


def patched_bindir():
    try:
        prefix = subprocess.run(["bash", os.path.join(REPO, "compute/postgres/build.sh"),
                                 "--prefix-only"], capture_output=True, text=True, check=True,
                                timeout=60).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return None
    bindir = os.path.join(prefix, "bin")
    return bindir if os.access(os.path.join(bindir, "initdb"), os.X_OK) else None


def http(port, method, path, body=None, token=None, timeout=300):
    """(status, parsed JSON or text) of one request to 127.0.0.1:port."""
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    if isinstance(data, str):
        data = data.encode()
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 method=method)
    if token is not None:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status = r.read(), r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode("utf-8", "replace")


class Daemon:
    """A pageserver or safekeeper on ephemeral ports, stopped by pid."""

    def __init__(self, kind, workdir, name, extra=()):
        self.kind = kind
        self.datadir = os.path.join(workdir, name)
        os.makedirs(self.datadir, exist_ok=True)
        self.log_path = os.path.join(workdir, name + ".log")
        self.extra = list(extra)
        self.proc = None

    def argv(self):
        if self.kind == "pageserver":
            return [PS_BIN, "--datadir", self.datadir, "--listen-pg", "127.0.0.1:0",
                    "--listen-http", "127.0.0.1:0"] + self.extra
        return [SK_BIN, "--id", "1", "--datadir", self.datadir, "--listen-pg", "127.0.0.1:0",
                "--listen-http", "127.0.0.1:0"] + self.extra

    def start(self, env_extra=None, expect_exit=False, timeout=60):
        ports = os.path.join(self.datadir, self.kind + ".ports")
        if os.path.exists(ports):
            os.unlink(ports)
        env = dict(os.environ)
        lib = os.path.join(BUILD, "lib", "strata_walredo.so")
        if "STRATA_WALREDO_LIB" not in env and os.path.exists(lib):
            env["STRATA_WALREDO_LIB"] = lib
        env.update(env_extra or {})
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv(), stdout=self.log, stderr=self.log, env=env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.close()
                if expect_exit:
                    return self.proc.returncode
                raise AssertionError("%s exited with %s:\n%s" % (self.kind, self.proc.returncode,
                                                                 self.log_tail()))
            if os.path.exists(ports) and not expect_exit:
                kv = dict(p.split("=") for p in open(ports).read().split())
                self.pg_port, self.http_port = int(kv["pg"]), int(kv["http"])
                return 0
            time.sleep(0.05)
        raise AssertionError("%s not ready in %d s:\n%s" % (self.kind, timeout, self.log_tail()))

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, timeout=60):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("%s ignored SIGTERM:\n%s" % (self.kind, self.log_tail()))
        finally:
            self.log.close()

    def http(self, method, path, body=None, token=None, timeout=300):
        return http(self.http_port, method, path, body, token, timeout)


def require_built():
    for b in (PS_BIN, SK_BIN, STRATA_BIN):
        if not os.access(b, os.X_OK):
            pytest.skip("not built yet: %s" % b)


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="strata-admin-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def ps(workdir):
    require_built()
    bindir = patched_bindir()
    p = Daemon("pageserver", workdir, "ps", ["--pg-bindir", bindir] if bindir else [])
    p.start()
    yield p
    p.stop()


def tenants_of(d, token=None):
    status, body = d.http("GET", "/v1/tenant", token=token)
    assert status == 200, body
    return sorted((t["tenant_id"], t["timelines"]) for t in body["tenants"])


def test_tenant_round_trip_and_refusals(ps):
    assert tenants_of(ps) == []
    status, body = ps.http("POST", "/v1/tenant")
    assert status == 201, body
    t1 = body["tenant_id"]
    assert len(t1) == 32 and int(t1, 16) >= 0
    t2 = new_id()
    status, body = ps.http("POST", "/v1/tenant", {"tenant_id": t2.upper()})
    assert (status, body) == (201, {"tenant_id": t2})
    assert tenants_of(ps) == sorted([(t1, 0), (t2, 0)])
    assert ps.http("GET", "/v1/tenant/" + t2) == (200, {"tenant_id": t2, "timelines": 0})
    assert os.path.isdir(os.path.join(ps.datadir, "tenants", t2))

    before = tenants_of(ps)
    refused = [
        (("POST", "/v1/tenant", {"tenant_id": t2}), 409, "tenant %s already exists" % t2),
        (("POST", "/v1/tenant", "{not json"), 400, "invalid JSON"),
        (("POST", "/v1/tenant", "[1]"), 400, "the body must be a JSON object"),
        (("POST", "/v1/tenant", {"tenant": t2}), 400, "unknown field \"tenant\""),
        (("POST", "/v1/tenant", {"tenant_id": "xyz"}), 400, "\"tenant_id\" must be 32 hex"),
        (("POST", "/v1/tenant", {"tenant_id": 7}), 400, "\"tenant_id\" must be 32 hex"),
        (("GET", "/v1/tenant/" + new_id(), None), 404, "not found"),
        (("GET", "/v1/tenant/nothex", None), 400, "invalid tenant_id \"nothex\""),
        (("DELETE", "/v1/tenant/" + new_id(), None), 404, "not found"),
        (("DELETE", "/v1/tenant/12", None), 400, "invalid tenant_id \"12\""),
        (("DELETE", "/v1/tenant", None), 405, "not allowed"),
        (("POST", "/v1/tenant/" + t2, {}), 405, "create a tenant with POST /v1/tenant"),
        (("GET", "/v1/tenant/%s/nope" % t2, None), 404, "no such endpoint"),
        (("GET", "/v1/tenant/%s/timeline/%s/x/y" % (t2, new_id()), None), 404,
         "no such endpoint"),
    ]
    for (method, path, body), want_status, want_msg in refused:
        status, answer = ps.http(method, path, body)
        assert status == want_status, (method, path, status, answer)
        assert want_msg in answer["error"], (method, path, answer)
    assert tenants_of(ps) == before

    # Durable: a restart loads both tenants back.
    ps.stop()
    ps.start()
    assert tenants_of(ps) == before
    assert ps.http("DELETE", "/v1/tenant/" + t1) == (200, {})
    assert tenants_of(ps) == [(t2, 0)]
    assert not os.path.exists(os.path.join(ps.datadir, "tenants", t1))
    ps.stop()
    ps.start()
    assert tenants_of(ps) == [(t2, 0)]


def test_timeline_round_trip(ps):
    if patched_bindir() is None:
        pytest.skip("the patched PostgreSQL build is needed for initdb")
    tenant = new_id()
    # A timeline under an unknown tenant (new endpoint): 404, nothing made.
    status, body = ps.http("POST", "/v1/tenant/%s/timeline" % tenant, {"initdb": True})
    assert status == 404 and "create it with POST /v1/tenant" in body["error"], body
    assert tenants_of(ps) == []
    assert ps.http("POST", "/v1/tenant", {"tenant_id": tenant})[0] == 201
    path = "/v1/tenant/%s/timeline" % tenant
    for body, msg in [({"initdb": True, "timeline_id": "zz"}, "\"timeline_id\" must be 32 hex"),
                      ({"initdb": True, "color": 1}, "unknown field \"color\""),
                      ({}, "give exactly one of"),
                      ({"initdb": True, "safekeepers": ["nocolon"]}, "is not HOST:PORT"),
                      ("{", "invalid JSON")]:
        status, answer = ps.http("POST", path, body)
        assert status == 400 and msg in answer["error"], (body, answer)
    assert ps.http("GET", path) == (200, {"tenant_id": tenant, "timelines": []})

    tl = new_id()
    status, body = ps.http("POST", path, {"initdb": True, "timeline_id": tl})
    assert status == 201, body
    assert body["tenant_id"] == tenant and body["timeline_id"] == tl
    start = body["lsn"]
    status, body = ps.http("GET", path)
    assert status == 200 and [t["timeline_id"] for t in body["timelines"]] == [tl]
    status, show = ps.http("GET", "%s/%s" % (path, tl))
    assert status == 200, show
    assert show["start_lsn"] == start
    assert show["last_record_lsn"] == start and show["disk_consistent_lsn"] == start
    assert "horizon" in show["gc"]
    assert show["store"]["data_file_bytes"] + show["store"]["open_layer_bytes"] > 8192
    assert show["gc_horizon_lsn"] == show["gc"]["horizon"]
    sizes = show["sizes"]
    assert sizes["total_bytes"] == (sizes["data_file_bytes"] + sizes["index_bytes"] +
                                    sizes["open_layer_bytes"]) > 8192
    # The same figure per timeline in /metrics (refreshed every 500 ms).
    want = 'pageserver_timeline_store_bytes{tenant_id="%s",timeline_id="%s"}' % (tenant, tl)
    deadline = time.time() + 10
    while time.time() < deadline:
        metrics = ps.http("GET", "/metrics")[1]
        line = [l for l in metrics.splitlines() if l.startswith(want)]
        if line and float(line[0].split()[-1]) > 8192:
            break
        time.sleep(0.2)
    assert line and float(line[0].split()[-1]) > 8192, line
    assert tenants_of(ps) == [(tenant, 1)]

    # Refusals that change nothing.
    assert ps.http("POST", path, {"initdb": True, "timeline_id": tl})[0] == 409
    status, body = ps.http("DELETE", "/v1/tenant/" + tenant)
    assert status == 409 and "still has 1 timeline" in body["error"], body
    assert ps.http("GET", "%s/%s" % (path, new_id()))[0] == 404
    assert ps.http("DELETE", "%s/%s" % (path, new_id()))[0] == 404
    assert ps.http("PUT", path)[0] == 405
    assert tenants_of(ps) == [(tenant, 1)]
    assert ps.http("GET", "%s/%s" % (path, tl))[1]["start_lsn"] == start

    # A new id when none is given; then delete both and the tenant.
    status, body = ps.http("POST", path, {"initdb": True})
    assert status == 201, body
    tl2 = body["timeline_id"]
    assert tl2 != tl and len(tl2) == 32
    assert tenants_of(ps) == [(tenant, 2)]
    for t in (tl, tl2):
        assert ps.http("DELETE", "%s/%s" % (path, t)) == (200, {})
    assert ps.http("GET", path) == (200, {"tenant_id": tenant, "timelines": []})
    assert ps.http("DELETE", "/v1/tenant/" + tenant) == (200, {})
    assert tenants_of(ps) == []


def run_cli(*args, env_extra=None):
    env = dict(os.environ)
    env.pop("STRATA_ADMIN_TOKEN", None)
    env.update(env_extra or {})
    return subprocess.run([STRATA_BIN] + list(args), capture_output=True, text=True,
                          timeout=300, env=env)


def test_cli_round_trip(ps):
    target = ["--pageserver", "127.0.0.1:%d" % ps.http_port]
    r = run_cli("tenant", "create", *target)
    assert r.returncode == 0, r.stderr
    t1 = r.stdout.strip()
    assert len(t1) == 32
    t2 = new_id()
    r = run_cli("tenant", "create", "--id", t2, *target)
    assert (r.returncode, r.stdout.strip()) == (0, t2), r.stderr
    r = run_cli("tenant", "list", *target)
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["TENANT", "TIMELINES"]
    assert sorted(lines[1:]) == sorted(["%s  0" % t1, "%s  0" % t2])
    r = run_cli("tenant", "list", "--json", *target)
    assert sorted(t["tenant_id"] for t in json.loads(r.stdout)["tenants"]) == sorted([t1, t2])
    r = run_cli("tenant", "show", t2, *target)
    assert r.returncode == 0 and "timelines  0" in r.stdout

    # Errors: the server's message and exit 1; usage errors exit 2.
    r = run_cli("tenant", "create", "--id", t2, *target)
    assert r.returncode == 1
    assert "HTTP 409: tenant %s already exists" % t2 in r.stderr
    r = run_cli("tenant", "delete", new_id(), *target)
    assert r.returncode == 1 and "HTTP 404" in r.stderr
    r = run_cli("timeline", "list", "--tenant", new_id(), *target)
    assert r.returncode == 1 and "HTTP 404" in r.stderr and "not found" in r.stderr
    r = run_cli("tenant", "delete", "xyz", *target)
    assert r.returncode == 2 and "invalid id 'xyz'" in r.stderr
    r = run_cli("tenant", "frobnicate", *target)
    assert r.returncode == 2 and "unknown subcommand" in r.stderr
    r = run_cli("timeline", "create", "--initdb", "--import", "/x", *target)
    assert r.returncode == 2
    r = run_cli("tenant", "list", "--pageserver", "127.0.0.1:1")
    assert r.returncode == 1 and "cannot connect" in r.stderr

    if patched_bindir() is not None:
        tl = new_id()
        r = run_cli("timeline", "create", "--tenant", t2, "--id", tl, "--safekeepers", "",
                    *target)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("created timeline %s of tenant %s at " % (tl, t2))
        r = run_cli("timeline", "list", "--tenant", t2, *target)
        assert r.returncode == 0 and tl in r.stdout
        r = run_cli("timeline", "show", tl, "--tenant", t2, *target)
        assert r.returncode == 0
        fields = dict(line.split(None, 1) for line in r.stdout.splitlines())
        assert fields["timeline_id"] == tl and "/" in fields["last_record_lsn"]
        assert int(fields["data_file_bytes"]) + int(fields["open_layer_bytes"]) > 0
        r = run_cli("tenant", "delete", t2, *target)
        assert r.returncode == 1 and "still has 1 timeline" in r.stderr
        r = run_cli("timeline", "delete", tl, "--tenant", t2, *target)
        assert r.returncode == 0, r.stderr
    for t in (t1, t2):
        r = run_cli("tenant", "delete", t, *target)
        assert r.returncode == 0, r.stderr
    assert tenants_of(ps) == []


def test_safekeeper_listing(workdir):
    require_built()
    sk = Daemon("safekeeper", workdir, "sk")
    sk.start()
    try:
        assert sk.http("GET", "/v1/tenant") == (200, {"tenants": []})
        t = new_id()
        status, body = sk.http("GET", "/v1/tenant/%s/timeline" % t)
        assert status == 404 and "has no timeline on this safekeeper" in body["error"]
        status, body = sk.http("GET", "/v1/tenant/%s/timeline/%s" % (t, new_id()))
        assert status == 404 and "not found on this safekeeper" in body["error"]
        status, body = sk.http("GET", "/v1/tenant/bad/timeline")
        assert status == 400 and "invalid tenant_id \"bad\"" in body["error"]
        status, body = sk.http("GET", "/v1/tenant/%s/timeline/bad" % t)
        assert status == 400 and "invalid timeline_id \"bad\"" in body["error"]
        status, body = sk.http("GET", "/v1/tenant/%s/other" % t)
        assert status == 404 and "no such endpoint" in body["error"]
        status, body = sk.http("DELETE", "/v1/tenant/%s/timeline/%s" % (t, new_id()))
        assert status == 405
    finally:
        sk.stop()
