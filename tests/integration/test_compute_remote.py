"""
`strata start compute --remote` (cli/compute/compute_remote.h): the stateless compute
started against daemons named by the environment, the way the Compose stack's
compute container starts (docs/cli.md "Starting a compute against remote
daemons").

What it shows, against a real local cluster whose own compute is stopped:
  - the command becomes postgres (exec: the pid we started is the
    postmaster), in a directory of its own with no cluster.json, reaching the
    safekeepers and the pageserver by host name ("localhost");
  - that compute is stateless: full_page_writes = off, strata.pageserver
    names the host from the environment, no relation file in its data
    directory, and it serves every row the local compute committed;
  - arguments after `--` reach postgres (-c work_mem=7MB);
  - a commit made there is served by the local compute started afterwards;
  - with auth files on every daemon: the compute needs the tenant's token
    for both (STRATA_PAGESERVER_PASSWORD, STRATA_SAFEKEEPER_PASSWORD); a
    wrong safekeeper token stops sync-safekeepers at once with the
    safekeepers' reason (not after its 60 s timeout), a wrong pageserver
    token stops the start at the pageserver's HTTP answer; the tenant's
    token may read its own timeline over HTTP but not another's;
  - a missing or malformed variable is a one-line error naming it.
"""
import json
import os
import signal
import subprocess
import time

import psycopg
import pytest

from conftest import free_port, make_shared_dir, pg_user, wait_until
from test_auth import ADMIN, TENANT_B, TOKEN_A, TOKEN_B, write_auth

# The subject is the compute: the release build's daemons (conftest.py,
# release_daemons).
pytestmark = pytest.mark.release_daemons


def remote_env(cluster, port, **extra):
    st = cluster.status()
    tenant, timeline = cluster.ids()
    env = dict(cluster.env)
    env.update({
        "STRATA_TENANT_ID": tenant,
        "STRATA_TIMELINE_ID": timeline,
        "STRATA_SAFEKEEPERS": ",".join("localhost:%d" % sk["pg_port"] for sk in st["safekeepers"]),
        "STRATA_PAGESERVER": "localhost:%d" % st["pageserver"]["pg_port"],
        "STRATA_PAGESERVER_HTTP": "localhost:%d" % st["pageserver"]["http_port"],
        "STRATA_COMPUTE_LISTEN": "127.0.0.1",
        "STRATA_COMPUTE_PORT": str(port),
        "STRATA_PG_USER": pg_user(),
        "STRATA_COMPUTE_FILE_CACHE_MB": "16",
    })
    # A cluster with auth (the default): the compute holds the tenant's token.
    _admin, token = cluster.tokens()
    if token:
        env["STRATA_PAGESERVER_PASSWORD"] = token
        env["STRATA_SAFEKEEPER_PASSWORD"] = token
    env.update(extra)
    return env


class RemoteCompute:
    def __init__(self, cluster, env, args=()):
        self.dir = make_shared_dir("strata-remote-")
        self.log_path = os.path.join(self.dir, "out.log")
        self.port = int(env["STRATA_COMPUTE_PORT"])
        self.cmd = [cluster.strata, "start", "compute", "--remote", "--dir", self.dir]
        if args:
            self.cmd += ["--"] + list(args)
        self.env = env
        self.proc = None

    def run_to_exit(self, timeout=90):
        """For a start that must fail: (exit status, output).  The directory
        goes with it."""
        try:
            p = subprocess.run(self.cmd, env=self.env, capture_output=True, text=True,
                               timeout=timeout)
        finally:
            subprocess.run(["rm", "-rf", self.dir])
        return p.returncode, p.stdout + p.stderr

    def start(self):
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=self.log,
                                     stderr=subprocess.STDOUT)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("the remote compute exited %d:\n%s"
                                     % (self.proc.returncode, self.output()))
            try:
                with self.connect():
                    return True
            except psycopg.OperationalError:
                return False
        wait_until(ready, 120, "the remote compute to accept connections", interval=0.1)

    def output(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def connect(self):
        return psycopg.connect(host="127.0.0.1", port=self.port, user=pg_user(),
                               dbname="postgres", autocommit=True, connect_timeout=5)

    def sql(self, query):
        with self.connect() as c:
            cur = c.execute(query)
            return cur.fetchall() if cur.description else None

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # a fast shutdown
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc is not None:
            self.log.close()
        subprocess.run(["rm", "-rf", self.dir])


def relation_files(pgdata):
    found = []
    for sub in ("base", "global"):
        for root, _dirs, files in os.walk(os.path.join(pgdata, sub)):
            found += [os.path.join(root, f) for f in files if f.split("_")[0].split(".")[0].isdigit()]
    return found


def test_remote_compute_is_the_stateless_start(cluster_dir):
    cluster = cluster_dir
    cluster.env["STRATA_COMPUTE_MODE"] = "stateless"
    cluster.up()
    cluster.sql("create table r (id int primary key, v text)")
    cluster.sql("insert into r select g, md5(g::text) from generate_series(1, 3000) g")
    cluster.stop("compute")

    rc = RemoteCompute(cluster, remote_env(cluster, free_port()), ["-c", "work_mem=7MB"])
    try:
        rc.start()
        # exec: the process we started is the postmaster itself.
        with open("/proc/%d/comm" % rc.proc.pid) as f:
            assert f.read().strip() == "postgres"
        assert rc.sql("show full_page_writes") == [("off",)]
        assert rc.sql("show work_mem") == [("7MB",)]
        assert rc.sql("show strata.pageserver")[0][0].startswith("localhost:")
        assert rc.sql("select count(*), sum(length(v)) from r") == [(3000, 3000 * 32)]
        rc.sql("insert into r values (3001, 'remote')")
        pgdata = os.path.join(rc.dir, "compute", "pgdata")
        assert os.path.exists(os.path.join(pgdata, "PG_VERSION"))
        assert not os.path.exists(os.path.join(rc.dir, "cluster.json"))
        assert relation_files(pgdata) == []
        path = rc.sql("select pg_relation_filepath('r')")[0][0]
        assert not os.path.exists(os.path.join(pgdata, path))
        out = rc.output()
        assert "stateless basebackup" in out and "postgres starts now" in out, out
    finally:
        rc.stop()
    cluster.start("compute")
    assert cluster.sql("select v from r where id = 3001") == [("remote",)]


def test_remote_compute_with_tokens(cluster_dir, tmp_path):
    cluster = cluster_dir
    cluster.env["STRATA_COMPUTE_MODE"] = "stateless"
    # The daemons get this test's own auth file below, through their
    # environment: the cluster's generated one stays out of the way.
    cluster.up("--no-auth")
    cluster.sql("create table s (id int primary key)")
    cluster.sql("insert into s select generate_series(1, 100)")
    tenant, timeline = cluster.ids()
    path = os.path.join(str(tmp_path), "auth.json")
    write_auth(path, {"admin_token": ADMIN, "tenants": {tenant: TOKEN_A, TENANT_B: TOKEN_B}})
    cluster.stop("compute")
    for name in ("pageserver", "sk1", "sk2", "sk3"):
        cluster.stop(name)
    cluster.env["PAGESERVER_AUTH_FILE"] = path
    cluster.env["SAFEKEEPER_AUTH_FILE"] = path
    cluster.env["PAGESERVER_SAFEKEEPER_PASSWORD"] = ADMIN
    for name in ("sk1", "sk2", "sk3", "pageserver"):
        cluster.start(name)

    # The tenant's token reads its own timeline, not another tenant's, and
    # nothing else of the admin API.
    http = cluster.status()["pageserver"]["http_port"]

    def get(path, token):
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H",
                            "Authorization: Bearer " + token,
                            "http://127.0.0.1:%d%s" % (http, path)],
                           capture_output=True, text=True, timeout=30)
        return int(r.stdout)
    assert get("/v1/tenant/%s/timeline/%s" % (tenant, timeline), TOKEN_A) == 200
    assert get("/v1/tenant/%s/timeline/%s" % (tenant, timeline), TOKEN_B) == 403
    assert get("/v1/tenant/%s/timeline" % tenant, TOKEN_A) == 403
    assert get("/v1/tenant", TOKEN_A) == 403

    port = free_port()
    t0 = time.monotonic()
    code, out = RemoteCompute(cluster, remote_env(
        cluster, port, STRATA_PAGESERVER_PASSWORD=TOKEN_A,
        STRATA_SAFEKEEPER_PASSWORD="wrong-token")).run_to_exit()
    assert code == 1 and "password authentication failed" in out, out
    assert time.monotonic() - t0 < 30, "sync-safekeepers waited for its timeout: %s" % out
    code, out = RemoteCompute(cluster, remote_env(
        cluster, port, STRATA_PAGESERVER_PASSWORD="wrong-token",
        STRATA_SAFEKEEPER_PASSWORD=TOKEN_A)).run_to_exit()
    assert code == 1 and "HTTP 403" in out and "not valid" in out, out

    rc = RemoteCompute(cluster, remote_env(cluster, port, STRATA_PAGESERVER_PASSWORD=TOKEN_A,
                                           STRATA_SAFEKEEPER_PASSWORD=TOKEN_A))
    try:
        rc.start()
        assert rc.sql("show strata.safekeeper_password") == [(TOKEN_A,)]
        assert rc.sql("select count(*) from s") == [(100,)]
        rc.sql("insert into s values (101)")
        assert rc.sql("select count(*) from s") == [(101,)]
    finally:
        rc.stop()


def test_remote_compute_bad_environment(cluster_dir):
    cluster = cluster_dir
    env = dict(cluster.env)
    for k in list(env):
        if k.startswith("STRATA_") and k not in ("STRATA_EXTENSION", "STRATA_WALREDO_LIB"):
            del env[k]
    base = {"STRATA_TENANT_ID": "ab" * 16, "STRATA_TIMELINE_ID": "cd" * 16,
            "STRATA_SAFEKEEPERS": "a:1,b:2,c:3", "STRATA_PAGESERVER": "p:6400",
            "STRATA_PAGESERVER_HTTP": "p:9898"}
    cases = [({"STRATA_TENANT_ID": ""}, "STRATA_TENANT_ID is not set"),
             ({"STRATA_TIMELINE_ID": "xyz"}, "STRATA_TIMELINE_ID must be 32 hex digits"),
             ({"STRATA_SAFEKEEPERS": "a:1,b:2"}, "must name 3 safekeepers"),
             ({"STRATA_PAGESERVER": "nohost"}, "is not HOST:PORT"),
             ({"STRATA_PAGESERVER_HTTP": "p:99999"}, "has no valid port"),
             ({"STRATA_COMPUTE_PORT": "x"}, "STRATA_COMPUTE_PORT must be a port number")]
    d = make_shared_dir("strata-remote-bad-")
    try:
        for change, msg in cases:
            e = dict(env, **base)
            e.update(change)
            p = subprocess.run([cluster.strata, "start", "compute", "--remote", "--dir", d],
                               env=e, capture_output=True, text=True, timeout=30)
            assert p.returncode == 1 and msg in p.stderr, (change, p.stderr)
            assert len(p.stderr.strip().splitlines()) == 1, p.stderr
        p = subprocess.run([cluster.strata, "start", "sk1", "--remote", "--dir", d],
                           env=dict(env, **base), capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and "--remote starts a compute only" in p.stderr
        p = subprocess.run([cluster.strata, "start", "compute", "--dir", d, "--", "-c", "a=b"],
                           env=env, capture_output=True, text=True, timeout=30)
        assert p.returncode == 2 and "only with --remote" in p.stderr
    finally:
        subprocess.run(["rm", "-rf", d])
