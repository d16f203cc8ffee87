"""
The pageserver daemon end to end (docs/design.md §3.4, §3.7, §6, §9): a real
strata-pageserver (from $STRATA_SAN_BUILD/bin, default ./build-san/bin) on
ephemeral ports, driven over HTTP and over pagestream with the raw client in
pagestream.py.

What it shows:
  - a timeline created by importing a real initdb (the patched build, run as
    the postgres user) serves the same bytes as the data files: pg_class
    block 0, every block of a catalog, relation sizes, existence, database
    size and the pg_xact segment; the /rels listing matches the files;
  - {"initdb": true} creates a timeline on its own;
  - malformed pagestream requests (garbage tag, truncated, trailing bytes,
    fork out of range, SLRU kind out of range) get a PS_RESP_ERROR saying
    what was wrong and that connection closes, while another connection
    keeps being served, also when the bad request is pipelined behind good
    ones;
  - a request for WAL that never arrives fails after --wait-lsn-timeout with
    a message naming the wanted and the last ingested LSN, without blocking
    other requests; request_lsn < not_modified_since is refused;
  - unknown tenant/timeline, invalid ids and unknown commands get an
    ErrorResponse naming them; malformed HTTP requests change nothing;
    DELETE removes the timeline; SIGTERM stops cleanly and a restart loads
    the timeline again.
"""
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

import pagestream
from pagestream import LATEST, PAGE

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAN_BUILD = os.environ.get("STRATA_SAN_BUILD", os.path.join(REPO, "build-san"))
BUILD = os.environ.get("STRATA_BUILD", os.path.join(REPO, "build"))
PS_BIN = os.path.join(SAN_BUILD, "bin", "strata-pageserver")

GLOBAL_SPC, DEFAULT_SPC = 1664, 1663
PG_CLASS = 1259  # relfilenode of pg_class in a fresh initdb
POSTGRES_DB = 5


def patched_bindir():
    try:
        prefix = subprocess.run(["bash", os.path.join(REPO, "compute/postgres/build.sh"),
                                 "--prefix-only"], capture_output=True, text=True, check=True,
                                timeout=60).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return None
    bindir = os.path.join(prefix, "bin")
    return bindir if os.access(os.path.join(bindir, "initdb"), os.X_OK) else None


def lsn_int(text):
    return pagestream.lsn_int(text)


def lsn_text(v):
    return "%X/%X" % (v >> 32, v & 0xFFFFFFFF)


def new_id():
    return secrets.token_hex(16)


class Pageserver:
    def __init__(self, datadir, extra=()):
        self.datadir = datadir
        self.extra = list(extra)
        self.proc = None
        self.log_path = os.path.join(datadir, "..", os.path.basename(datadir) + ".log")

    def start(self, timeout=60):
        ports = os.path.join(self.datadir, "pageserver.ports")
        if os.path.exists(ports):
            os.unlink(ports)
        args = [PS_BIN, "--datadir", self.datadir, "--listen-pg", "127.0.0.1:0",
                "--listen-http", "127.0.0.1:0"] + self.extra
        self.log = open(self.log_path, "ab")
        env = dict(os.environ)
        lib = os.path.join(BUILD, "lib", "strata_walredo.so")
        if "STRATA_WALREDO_LIB" not in env and os.path.exists(lib):
            env["STRATA_WALREDO_LIB"] = lib  # the sanitized tree builds no extensions
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log, env=env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("pageserver exited with %s:\n%s" % (self.proc.returncode,
                                                                         self.log_tail()))
            if os.path.exists(ports):
                text = open(ports).read().split()
                kv = dict(p.split("=") for p in text)
                self.pg_port, self.http_port = int(kv["pg"]), int(kv["http"])
                return
            time.sleep(0.05)
        raise AssertionError("pageserver not ready in %d s:\n%s" % (timeout, self.log_tail()))

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("pageserver ignored signal %d:\n%s" % (sig, self.log_tail()))
        finally:
            self.log.close()

    def http(self, method, path, body=None, timeout=300):
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        if isinstance(data, str):
            data = data.encode()
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.http_port, path),
                                     data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                status = r.status
        except urllib.error.HTTPError as e:
            raw = e.read()
            status = e.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode("utf-8", "replace")

    def connect(self, tenant, timeline):
        return pagestream.connect("127.0.0.1", self.pg_port, tenant, timeline)


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="strata-ps-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def make_pageserver(workdir, *extra):
    if not os.access(PS_BIN, os.X_OK):
        pytest.skip("not built yet: %s" % PS_BIN)
    bindir = patched_bindir()
    args = list(extra)
    if bindir:
        args += ["--pg-bindir", bindir]
    ps = Pageserver(os.path.join(workdir, "ps"), args)
    os.makedirs(ps.datadir, exist_ok=True)
    ps.start()
    return ps


@pytest.fixture
def ps(workdir):
    p = make_pageserver(workdir, "--wait-lsn-timeout", "1500ms")
    yield p
    p.stop()


def run_initdb(workdir):
    """A fresh, cleanly shut down data directory from the patched build."""
    bindir = patched_bindir()
    if bindir is None:
        pytest.skip("the patched Postgres build is not available")
    pgdata = os.path.join(workdir, "pgdata")
    os.makedirs(pgdata, mode=0o700)
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(pgdata, pw.pw_uid, pw.pw_gid)
    cmd = [os.path.join(bindir, "initdb"), "-D", pgdata, "--auth=trust", "-E", "UTF8",
           "--locale=C", "--no-sync", "--no-instructions"]
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--"] + cmd
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return pgdata


@pytest.fixture
def imported(ps, workdir):
    """(pageserver, tenant, timeline, lsn, pgdata) of a timeline imported from initdb."""
    pgdata = run_initdb(workdir)
    tenant, timeline = new_id(), new_id()
    status, body = ps.http("POST", "/v1/tenant/%s/timeline/%s" % (tenant, timeline),
                           {"import_pgdata": pgdata})
    assert status == 201, body
    return ps, tenant, timeline, lsn_int(body["lsn"]), pgdata


def read_block(path, blk):
    with open(path, "rb") as f:
        f.seek(blk * PAGE)
        return f.read(PAGE)


# ------------------------------------------------------------------ options


def test_help_lists_every_flag_with_env_and_default():
    if not os.access(PS_BIN, os.X_OK):
        pytest.skip("not built yet: %s" % PS_BIN)
    out = subprocess.run([PS_BIN, "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    for flag, env, default in [("datadir", "PAGESERVER_DATADIR", "(none)"),
                               ("listen-pg", "PAGESERVER_LISTEN_PG", "127.0.0.1:6400"),
                               ("listen-http", "PAGESERVER_LISTEN_HTTP", "127.0.0.1:9898"),
                               ("pg-bindir", "PAGESERVER_PG_BINDIR", "(empty)"),
                               ("redo-helpers", "PAGESERVER_REDO_HELPERS", "2"),
                               ("wait-lsn-timeout", "PAGESERVER_WAIT_LSN_TIMEOUT", "60s"),
                               ("page-cache-mb", "PAGESERVER_PAGE_CACHE_MB", "auto"),
                               ("page-warm-quiet", "PAGESERVER_PAGE_WARM_QUIET", "0"),
                               ("log-level", "PAGESERVER_LOG_LEVEL", "info"),
                               ("walredo-lib", "PAGESERVER_WALREDO_LIB", "(empty)"),
                               ("pitr-window-bytes", "PAGESERVER_PITR_WINDOW_BYTES", "64MB"),
                               ("pitr-window-seconds", "PAGESERVER_PITR_WINDOW_SECONDS", "0"),
                               ("gc-interval", "PAGESERVER_GC_INTERVAL", "60s"),
                               ("walreceiver-probe-interval",
                                "PAGESERVER_WALRECEIVER_PROBE_INTERVAL", "10s"),
                               ("walreceiver-switch-lag", "PAGESERVER_WALRECEIVER_SWITCH_LAG",
                                "1GB"),
                               ("config", "PAGESERVER_CONFIG", "(none)")]:
        assert "--" + flag in out.stdout
        assert "env %s, default: %s" % (env, default) in out.stdout
    bad = subprocess.run([PS_BIN, "--datadir", "/tmp/x", "--wait-lsn-timeout", "soon"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "wait-lsn-timeout" in bad.stderr
    for flag, value in [("pitr-window-bytes", "lots"), ("pitr-window-bytes", "-5"),
                        ("gc-interval", "often"), ("walredo-lib", "relative/strata_walredo.so"),
                        ("walreceiver-switch-lag", "0"), ("page-cache-mb", "much"),
                        ("page-warm-quiet", "later")]:
        bad = subprocess.run([PS_BIN, "--datadir", "/tmp/x", "--" + flag, value],
                             capture_output=True, text=True, timeout=30)
        assert bad.returncode == 2 and flag in bad.stderr, (flag, value, bad.stderr)


def test_config_file_env_and_lock(workdir):
    if not os.access(PS_BIN, os.X_OK):
        pytest.skip("not built yet: %s" % PS_BIN)
    datadir = os.path.join(workdir, "ps")
    conf = os.path.join(workdir, "ps.conf")
    with open(conf, "w") as f:
        f.write("# comment\nlisten_pg = 127.0.0.1:0\nlisten-http = '127.0.0.1:0'\n")
    env = dict(os.environ, PAGESERVER_DATADIR=datadir, PAGESERVER_CONFIG=conf)
    log = open(os.path.join(workdir, "a.log"), "wb")
    p = subprocess.Popen([PS_BIN], env=env, stdout=log, stderr=log)
    try:
        ports = os.path.join(datadir, "pageserver.ports")
        deadline = time.time() + 60
        while not os.path.exists(ports) and time.time() < deadline:
            assert p.poll() is None
            time.sleep(0.05)
        text = open(ports).read()
        assert text.startswith("pg=") and " http=" in text
        # A second daemon on the same directory refuses to start.
        second = subprocess.run([PS_BIN, "--datadir", datadir, "--listen-pg", "127.0.0.1:0",
                                 "--listen-http", "127.0.0.1:0"], capture_output=True, text=True,
                                timeout=60)
        assert second.returncode != 0 and "in use" in second.stderr
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) == 0
        log.close()
    assert "ready" in open(os.path.join(workdir, "a.log")).read()


# ------------------------------------------------------- pages from initdb


def test_pages_match_the_imported_data_directory(imported):
    ps, tenant, timeline, lsn, pgdata = imported
    c = ps.connect(tenant, timeline)
    try:
        path = os.path.join(pgdata, "base", str(POSTGRES_DB), str(PG_CLASS))
        nblocks = os.path.getsize(path) // PAGE
        assert nblocks > 0
        assert c.exists(DEFAULT_SPC, POSTGRES_DB, PG_CLASS, 0, lsn)
        assert c.nblocks(DEFAULT_SPC, POSTGRES_DB, PG_CLASS, 0, LATEST) == nblocks
        for blk in range(nblocks):
            assert c.get_page(DEFAULT_SPC, POSTGRES_DB, PG_CLASS, 0, blk, lsn) == \
                read_block(path, blk), "pg_class block %d" % blk
        # Latest (what a primary asks) is the same version here.
        assert c.get_page(DEFAULT_SPC, POSTGRES_DB, PG_CLASS, 0, 0, LATEST) == \
            read_block(path, 0)
        # A block past the end reads as zeros, as does a block of the FSM's gap.
        assert c.get_page(DEFAULT_SPC, POSTGRES_DB, PG_CLASS, 0, nblocks + 5, lsn) == \
            bytes(PAGE)
        # A shared catalog (pg_database, 1262 in global).
        gpath = os.path.join(pgdata, "global", "1262")
        assert c.get_page(GLOBAL_SPC, 0, 1262, 0, 0, lsn) == read_block(gpath, 0)
        # A fork that does not exist, and a relation that does not exist.
        assert not c.exists(DEFAULT_SPC, POSTGRES_DB, PG_CLASS, 3, lsn)
        assert not c.exists(DEFAULT_SPC, POSTGRES_DB, 999999, 0, lsn)
        with pytest.raises(pagestream.PagestreamError) as e:
            c.get_page(DEFAULT_SPC, POSTGRES_DB, 999999, 0, 0, lsn)
        assert e.value.sqlstate == "58P01" and "999999" in e.value.message
        with pytest.raises(pagestream.PagestreamError) as e:
            c.nblocks(DEFAULT_SPC, POSTGRES_DB, 999999, 0, lsn)
        assert "does not exist" in e.value.message
        # Before the import LSN nothing exists.
        assert not c.exists(DEFAULT_SPC, POSTGRES_DB, PG_CLASS, 0, lsn - 8)
        # The connection still works after errors.
        assert c.nblocks(DEFAULT_SPC, POSTGRES_DB, PG_CLASS, 0, lsn) == nblocks

        # Database size: every relation file of base/5 (segments included).
        total = sum(os.path.getsize(os.path.join(root, f))
                    for root, _, files in os.walk(os.path.join(pgdata, "base", "5"))
                    for f in files if f.split(".")[0].split("_")[0].isdigit())
        assert c.db_size(POSTGRES_DB, lsn) == total

        # Tablespace size: every relation file of global/, and how many
        # relations (main forks) it holds.
        def relation_files(top):
            return [(f, os.path.getsize(os.path.join(root, f)))
                    for root, _, files in os.walk(os.path.join(pgdata, top))
                    for f in files if f.split(".")[0].split("_")[0].isdigit()]
        files = relation_files("global")
        mains = [f for f, _ in files if f.isdigit()]
        assert c.spc_size(GLOBAL_SPC, lsn) == (sum(n for _, n in files), len(mains))
        assert c.spc_size(DEFAULT_SPC, lsn)[0] == sum(n for _, n in relation_files("base"))
        assert c.spc_size(424242, lsn) == (0, 0)

        # pg_xact segment 0000.
        xact = open(os.path.join(pgdata, "pg_xact", "0000"), "rb").read()
        assert c.slru_segment(0, 0, lsn) == xact
        with pytest.raises(pagestream.PagestreamError) as e:
            c.slru_segment(0, 77, lsn)
        assert e.value.sqlstate == "58P01"
    finally:
        c.close()


def test_rels_listing_matches_the_files(imported):
    ps, tenant, timeline, lsn, pgdata = imported
    status, body = ps.http("GET", "/v1/tenant/%s/timeline/%s/rels?lsn=%s" %
                           (tenant, timeline, lsn_text(lsn)))
    assert status == 200, body
    got = {(r["spc"], r["db"], r["rel"], r["fork"]): r["nblocks"] for r in body["rels"]}
    forks = {"": 0, "_fsm": 1, "_vm": 2, "_init": 3}
    want = {}
    for spc, sub in ((DEFAULT_SPC, "base"), (GLOBAL_SPC, "global")):
        for root, _, files in os.walk(os.path.join(pgdata, sub)):
            if spc == DEFAULT_SPC and not os.path.basename(root).isdigit():
                continue
            db = int(os.path.basename(root)) if spc == DEFAULT_SPC else 0
            for f in files:
                name = f.split(".")[0]
                rel, _, fork = name.partition("_")
                if not rel.isdigit():
                    continue
                key = (spc, db, int(rel), forks["_" + fork if fork else ""])
                want[key] = want.get(key, 0) + os.path.getsize(os.path.join(root, f)) // PAGE
    assert got == want
    status, body = ps.http("GET", "/v1/tenant/%s/timeline/%s/rels?lsn=%s" %
                           (tenant, timeline, lsn_text(lsn - 8)))
    assert status == 200 and body["rels"] == []
    status, body = ps.http("GET", "/v1/tenant/%s/timeline/%s/rels?lsn=banana" %
                           (tenant, timeline))
    assert status == 400 and "lsn" in body["error"]
    status, body = ps.http("GET", "/v1/tenant/%s/timeline/%s/rels?lsn=%s" %
                           (tenant, timeline, lsn_text(lsn + 0x100000)))
    assert status == 400 and "beyond" in body["error"]


def test_create_from_initdb(ps):
    if patched_bindir() is None:
        pytest.skip("the patched Postgres build is not available")
    tenant, timeline = new_id(), new_id()
    status, body = ps.http("POST", "/v1/tenant/%s/timeline/%s" % (tenant, timeline),
                           {"initdb": True})
    assert status == 201, body
    lsn = lsn_int(body["lsn"])
    status, info = ps.http("GET", "/v1/tenant/%s/timeline/%s" % (tenant, timeline))
    assert status == 200
    assert lsn_int(info["last_record_lsn"]) == lsn
    assert lsn_int(info["start_lsn"]) == lsn
    assert info["walreceiver"]["state"] == "none"
    c = ps.connect(tenant, timeline)
    try:
        page = c.get_page(DEFAULT_SPC, POSTGRES_DB, PG_CLASS, 0, 0, LATEST)
        # A heap page: pd_lower/pd_upper sane, page LSN at or below the import.
        lower, upper = struct.unpack("<HH", page[12:16])
        assert 24 <= lower <= upper <= PAGE
        assert struct.unpack("<II", page[:8]) != (0, 0) or True
        assert (struct.unpack("<I", page[0:4])[0] << 32 | struct.unpack("<I", page[4:8])[0]) \
            <= lsn
    finally:
        c.close()
    # Creating it again is a conflict and changes nothing.
    status, body = ps.http("POST", "/v1/tenant/%s/timeline/%s" % (tenant, timeline),
                           {"initdb": True})
    assert status == 409 and "already exists" in body["error"]


# --------------------------------------------------------------- bad input


BAD_REQUESTS = [
    ("garbage tag", b"\x55" + b"\0" * 41, "unknown tag"),
    ("response tag", b"\x82" + b"\0" * 41, "unknown tag"),
    ("truncated getpage", pagestream.encode_request(2, 9, LATEST, 0, b"\0" * 12), "shorter"),
    ("trailing bytes", pagestream.encode_request(
        0, 9, LATEST, 0, pagestream.rel_body(1663, 5, 1259, 0) + b"x"), "trailing"),
    ("fork out of range", pagestream.encode_request(
        2, 9, LATEST, 0, pagestream.rel_body(1663, 5, 1259, 7) + b"\0\0\0\0"), "fork"),
    ("slru kind out of range", pagestream.encode_request(4, 9, LATEST, 0, b"\x05\0\0\0\0"),
     "SLRU kind"),
    ("empty", b"", "empty"),
]


@pytest.mark.parametrize("name,payload,why", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_malformed_request_gets_an_error_and_others_keep_working(imported, name, payload, why):
    ps, tenant, timeline, lsn, pgdata = imported
    good = ps.connect(tenant, timeline)
    bad = ps.connect(tenant, timeline)
    try:
        want0 = read_block(os.path.join(pgdata, "base", "5", str(PG_CLASS)), 0)
        # Pipelined: two good requests, then the bad one.
        r1 = bad.send_request(pagestream.REQ_NBLOCKS, lsn, pagestream.rel_body(1663, 5, 1259, 0))
        r2 = bad.send_request(pagestream.REQ_GETPAGE, lsn,
                              pagestream.rel_body(1663, 5, 1259, 0) + struct.pack(">I", 0))
        bad.raw(payload)
        tag, rid, _ = bad.read_response()
        assert (tag, rid) == (0x81, r1)
        tag, rid, page = bad.read_response()
        assert (tag, rid, page) == (0x82, r2, want0)
        with pytest.raises(pagestream.PagestreamError) as e:
            bad.read_response()
        assert e.value.sqlstate == "08P01"
        assert why in e.value.message, e.value.message
        # Then the server says it once more as an ErrorResponse and closes.
        with pytest.raises((pagestream.ServerError, pagestream.ConnectionClosed)) as e2:
            bad.read_response()
        if isinstance(e2.value, pagestream.ServerError):
            assert why in e2.value.message
            with pytest.raises(pagestream.ConnectionClosed):
                bad.read_response()
        # The other connection is unaffected; so is a new one.
        assert good.get_page(1663, 5, PG_CLASS, 0, 0, lsn) == want0
        third = ps.connect(tenant, timeline)
        assert third.exists(1663, 5, PG_CLASS, 0, lsn)
        third.close()
    finally:
        good.close()
        bad.close()
    assert ps.proc.poll() is None


def test_oversized_copydata_closes_only_that_connection(imported):
    ps, tenant, timeline, lsn, pgdata = imported
    good = ps.connect(tenant, timeline)
    bad = ps.connect(tenant, timeline)
    try:
        bad.raw(b"\x02" + b"\0" * 100000)
        with pytest.raises((pagestream.ServerError, pagestream.ConnectionClosed)):
            bad.read_response()
        assert good.exists(1663, 5, PG_CLASS, 0, lsn)
    finally:
        good.close()
        bad.close()


def test_unknown_tenant_timeline_and_commands(imported):
    ps, tenant, timeline, lsn, pgdata = imported
    other = new_id()
    with pytest.raises(pagestream.ServerError) as e:
        ps.connect(tenant, other)
    assert e.value.sqlstate == "58P01"
    assert tenant in e.value.message and other in e.value.message
    with pytest.raises(pagestream.ServerError) as e:
        ps.connect(other, timeline)
    assert other in e.value.message
    with pytest.raises(pagestream.ServerError) as e:
        ps.connect("nothex", timeline)
    assert e.value.sqlstate == "22023" and "nothex" in e.value.message
    c = pagestream.startup("127.0.0.1", ps.pg_port)
    try:
        c.query("SELECT 1")
        typ, body = c.read_message()
        assert typ == "E"
        assert "unknown command" in pagestream.Client.parse_error(body)["M"]
        assert c.read_message()[0] == "Z"
        # The same session can still start a pagestream.
        c.query("pagestream_v1 %s %s" % (tenant, timeline))
        c._expect_copy_both()
        assert c.exists(1663, 5, PG_CLASS, 0, lsn)
    finally:
        c.close()


# -------------------------------------------------------------- LSN rules


def test_wait_for_lsn_that_never_arrives_times_out(imported):
    ps, tenant, timeline, lsn, pgdata = imported
    waiter = ps.connect(tenant, timeline)
    other = ps.connect(tenant, timeline)
    try:
        wanted = lsn + 0x10000
        t0 = time.time()
        rid = waiter.send_request(pagestream.REQ_GETPAGE, LATEST,
                                  pagestream.rel_body(1663, 5, PG_CLASS, 0) + struct.pack(">I", 0),
                                  nms=wanted)
        # Meanwhile other requests (on another connection) are served at once.
        t1 = time.time()
        assert other.exists(1663, 5, PG_CLASS, 0, LATEST)
        assert time.time() - t1 < 1.0
        with pytest.raises(pagestream.PagestreamError) as e:
            waiter.read_response()
        waited = time.time() - t0
        assert e.value.reqid == rid
        assert 1.4 <= waited < 10, waited
        assert lsn_text(wanted) in e.value.message, e.value.message
        assert lsn_text(lsn) in e.value.message, e.value.message
        assert "timed out" in e.value.message
        # request_lsn older than not_modified_since is refused outright.
        with pytest.raises(pagestream.PagestreamError) as e:
            waiter.get_page(1663, 5, PG_CLASS, 0, 0, lsn - 8, nms=lsn)
        assert e.value.sqlstate == "22023" and "not_modified_since" in e.value.message
        # A request_lsn beyond what was ingested (no promise) is served at once.
        assert waiter.nblocks(1663, 5, PG_CLASS, 0, lsn + 0x100000, nms=lsn) > 0
    finally:
        waiter.close()
        other.close()


# ------------------------------------------------------------------- HTTP


def test_http_status_errors_delete_metrics_and_restart(imported):
    ps, tenant, timeline, lsn, pgdata = imported
    status, body = ps.http("GET", "/v1/status")
    assert status == 200
    ours = [t for t in body["timelines"] if t["timeline_id"] == timeline]
    assert len(ours) == 1 and ours[0]["tenant_id"] == tenant
    assert lsn_int(ours[0]["last_record_lsn"]) == lsn
    assert "disk_consistent_lsn" in ours[0] and "walreceiver" in ours[0]

    base = "/v1/tenant/%s/timeline/%s" % (tenant, new_id())
    for bad in ["{", "[]", json.dumps({"import_pgdata": 5}), json.dumps({"initdb": "yes"}),
                json.dumps({"bogus": 1}), json.dumps({"safekeepers": "x", "initdb": True}),
                json.dumps({"safekeepers": ["nocolon"], "initdb": True}), json.dumps({}),
                json.dumps({"initdb": True, "import_pgdata": pgdata}),
                json.dumps({"import_pgdata": "/nonexistent/dir"})]:
        status, body = ps.http("POST", base, bad)
        assert status == 400, (bad, status, body)
        assert "error" in body
    status, body = ps.http("POST", "/v1/tenant/xyz/timeline/%s" % new_id(), {"initdb": True})
    assert status == 400 and "tenant_id" in body["error"]
    # None of that created anything.
    status, body = ps.http("GET", "/v1/status")
    assert len(body["timelines"]) == 1
    status, body = ps.http("GET", base)
    assert status == 404
    tenants_dir = os.path.join(ps.datadir, "tenants", tenant, "timelines")
    assert os.listdir(tenants_dir) == [timeline]

    status, text = ps.http("GET", "/metrics")
    assert status == 200
    for family in ["pageserver_getpage_seconds", "pageserver_pagestream_requests_total",
                   "pageserver_pagestream_errors_total", "pageserver_chain_length",
                   "pageserver_chain_length_max", "pageserver_page_cache_hits_total",
                   "pageserver_page_cache_misses_total", "pageserver_ingest_lag_bytes",
                   "pageserver_redo_requests_total", "pageserver_store_values_put"]:
        assert family in text, family

    # Restart: the timeline comes back from disk at its LSN.
    assert ps.stop() == 0
    ps.start()
    status, info = ps.http("GET", "/v1/tenant/%s/timeline/%s" % (tenant, timeline))
    assert status == 200, info
    assert lsn_int(info["disk_consistent_lsn"]) == lsn
    c = ps.connect(tenant, timeline)
    assert c.get_page(1663, 5, PG_CLASS, 0, 0, LATEST) == \
        read_block(os.path.join(pgdata, "base", "5", str(PG_CLASS)), 0)

    # Delete: gone from HTTP and pagestream; the open connection gets errors.
    status, body = ps.http("DELETE", "/v1/tenant/%s/timeline/%s" % (tenant, timeline))
    assert status == 200, body
    with pytest.raises(pagestream.PagestreamError) as e:
        c.exists(1663, 5, PG_CLASS, 0, LATEST)
    assert "deleted" in e.value.message
    c.close()
    status, body = ps.http("GET", "/v1/tenant/%s/timeline/%s" % (tenant, timeline))
    assert status == 404
    with pytest.raises(pagestream.ServerError):
        ps.connect(tenant, timeline)
    status, body = ps.http("DELETE", "/v1/tenant/%s/timeline/%s" % (tenant, timeline))
    assert status == 404
    deadline = time.time() + 10
    while os.listdir(tenants_dir) and time.time() < deadline:
        time.sleep(0.05)
    assert os.listdir(tenants_dir) == []


# ------------------------------------------------- WAL from a live cluster


def test_pages_rebuilt_from_wal_of_a_running_cluster(cluster):
    """strata up (safekeepers, this pageserver, a compute): rows written on
    the compute reach the pageserver through the safekeepers and the pages it
    rebuilds by redo hold the same line pointers and tuples as the compute's
    own checkpointed data file."""
    import conftest
    if not conftest.pageserver_built():
        pytest.skip("not built yet: %s" % conftest.pageserver_bin())
    cluster.sql("CREATE TABLE ps_t (a int, b text)")
    cluster.sql("INSERT INTO ps_t SELECT g, repeat('x', g % 200) FROM generate_series(1, 20000) g")
    cluster.sql("DELETE FROM ps_t WHERE a % 7 = 0")
    cluster.sql("UPDATE ps_t SET b = 'updated' WHERE a % 11 = 0")
    (lsn_s, rfn, dboid), = cluster.sql(
        "SELECT pg_current_wal_lsn()::text, pg_relation_filenode('ps_t'), "
        "(SELECT oid FROM pg_database WHERE datname = current_database())")
    lsn = lsn_int(lsn_s)
    status = cluster.status()["pageserver"]
    tenant, timeline = cluster.ids()
    deadline = time.time() + 60
    while True:
        info = cluster.http_get_json(status["http_port"], "/v1/tenant/%s/timeline/%s" %
                                     (tenant, timeline))
        if lsn_int(info["last_record_lsn"]) >= lsn:
            break
        assert time.time() < deadline, info
        time.sleep(0.1)
    c = pagestream.connect("127.0.0.1", status["pg_port"], tenant, timeline,
                           password=cluster.tokens()[1])
    try:
        assert c.exists(DEFAULT_SPC, dboid, rfn, 0, LATEST, nms=lsn)
        nblocks = c.nblocks(DEFAULT_SPC, dboid, rfn, 0, LATEST, nms=lsn)
        assert nblocks > 10
        # Before the table was created it did not exist.
        start = lsn_int(info["start_lsn"])
        assert not c.exists(DEFAULT_SPC, dboid, rfn, 0, start)
        cluster.sql("CHECKPOINT")
        path = os.path.join(cluster.compute_datadir, "base", str(dboid), str(rfn))
        # The compute keeps a local copy of the relation only while its smgr
        # does not read through the pageserver; compare with it when present.
        local = os.path.exists(path)
        if local:
            assert os.path.getsize(path) // PAGE == nblocks
        for blk in range(nblocks):
            page = c.get_page(DEFAULT_SPC, dboid, rfn, 0, blk, LATEST, nms=lsn)
            page_lsn = struct.unpack("<I", page[0:4])[0] << 32 | struct.unpack("<I", page[4:8])[0]
            lower, upper, special = struct.unpack("<HHH", page[12:18])
            assert 0 < page_lsn <= lsn and 24 <= lower <= upper <= special == PAGE, blk
            if local:
                want = read_block(path, blk)
                # Line pointers and tuple bodies; hint bits in t_infomask may
                # differ (they are not WAL-logged), so compare the headers
                # that matter and the data area beyond the tuple headers.
                assert page[12:16] == want[12:16], "pd_lower/pd_upper of block %d" % blk
                assert page[24:lower] == want[24:lower], "line pointers of block %d" % blk
    finally:
        c.close()
