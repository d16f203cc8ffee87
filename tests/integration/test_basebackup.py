"""The pageserver's `basebackup` command (docs/design.md §3.5, §6.9) on a `strata up`
cluster: a basebackup of the running timeline at an LSN untars into a
directory the PATCHED postgres starts from (full mode: every table equal to
the original), a non-full one holds no file of a permanent relation but the
init and main forks of unlogged ones, the bootstrap checkpoint's xl_prev is
the real previous record (pg_waldump over the safekeepers' WAL reads across
a compute restart), bad requests get clear errors, and a timeline with no WAL
receiver (a branch created without safekeepers) still gives a basebackup a
postgres starts from (issue #28: basebackup asks the timeline for its store).
"""
import contextlib
import io
import json
import os
import re
import subprocess
import tarfile
import tempfile
import urllib.request

import psycopg
import pytest

from conftest import STOCK_PG_BINDIR, free_port, lsn_to_int, pageserver_built, pg_user, wait_until

pytestmark = pytest.mark.skipif(not pageserver_built(), reason="pageserver not built")


def patched_bindir():
    out = subprocess.run(["bash", os.path.join(os.path.dirname(__file__), "..", "..", "compute",
                                               "postgres", "build.sh"), "--prefix-only"],
                         capture_output=True, text=True, check=True)
    return os.path.join(out.stdout.strip(), "bin")


def pageserver_conn(cluster):
    port = cluster.status()["pageserver"]["pg_port"]
    # The admin token: it may name any tenant, so a malformed one reaches the
    # command's own checks (a tenant's token is refused before them).
    admin, _token = cluster.tokens()
    return psycopg.connect("host=127.0.0.1 port=%d user=%s dbname=postgres" % (port, pg_user()),
                           autocommit=True, connect_timeout=10, password=admin)


def basebackup(cluster, lsn, full=False, timeline=None):
    """The archive bytes, through the pageserver's pgwire CopyOut."""
    tenant, main = cluster.ids()
    timeline = timeline or main
    cmd = "basebackup %s %s %s%s" % (tenant, timeline, lsn, " full" if full else "")
    buf = io.BytesIO()
    with pageserver_conn(cluster) as conn:
        with conn.cursor().copy(cmd) as copy:
            for chunk in copy:
                buf.write(chunk)
    return buf.getvalue()


def current_lsn(cluster):
    return cluster.sql("select pg_current_wal_insert_lsn()::text")[0][0]


def wait_ingested(cluster, lsn):
    wait_until(lambda: lsn_to_int(cluster.status()["pageserver"]["last_record_lsn"])
               >= lsn_to_int(lsn), 60, "the pageserver to ingest %s" % lsn)


@contextlib.contextmanager
def patched_postgres(cluster, data):
    """Starts the patched postgres on the data directory the archive data
    untars into; yields a connection to it and its log's path."""
    with tempfile.TemporaryDirectory(prefix="bb-", dir=cluster.dir) as tmp:
        pgdata = os.path.join(tmp, "pgdata")
        os.mkdir(pgdata, 0o700)
        tarfile.open(fileobj=io.BytesIO(data)).extractall(pgdata)
        with open(os.path.join(pgdata, "postgresql.conf"), "w") as f:
            f.write("listen_addresses='127.0.0.1'\nunix_socket_directories=''\n")
        subprocess.run(["chown", "-R", pg_user(), tmp], check=True)
        port = free_port()
        bindir = patched_bindir()
        log = os.path.join(tmp, "pg.log")
        subprocess.run(["runuser", "-u", pg_user(), "--", os.path.join(bindir, "pg_ctl"), "-D",
                        pgdata, "-l", log, "-o", "-p %d" % port, "-w", "-t", "60", "start"],
                       check=True, capture_output=True)
        try:
            with psycopg.connect("host=127.0.0.1 port=%d user=%s dbname=postgres" % (port, pg_user()),
                                 autocommit=True) as conn:
                yield conn, log
        finally:
            subprocess.run(["runuser", "-u", pg_user(), "--", os.path.join(bindir, "pg_ctl"),
                            "-D", pgdata, "-m", "immediate", "stop"], capture_output=True)


def test_full_basebackup_starts_a_patched_postgres(cluster):
    cluster.sql("create table bb_t (id int primary key, v text)")
    cluster.sql("insert into bb_t select g, md5(g::text) from generate_series(1, 5000) g")
    cluster.sql("create index bb_t_v on bb_t (v)")
    expected = cluster.sql("select count(*), sum(hashtext(v)) from bb_t")
    # A stopped compute: its shutdown checkpoint ends the WAL at X.
    cluster.stop("compute")
    x = cluster.run("sync-safekeepers").stdout.strip()
    wait_ingested(cluster, x)
    data = basebackup(cluster, x, full=True)
    names = tarfile.open(fileobj=io.BytesIO(data)).getnames()
    assert names[-1] == "global/pg_control"

    with patched_postgres(cluster, data) as (conn, log):
        got = conn.execute("select count(*), sum(hashtext(v)) from bb_t").fetchall()
        assert got == expected
        # An index scan reads the index built before the basebackup.
        conn.execute("set enable_seqscan = off")
        assert conn.execute("select v from bb_t where v = md5('77')").fetchall() == \
            conn.execute("select md5('77')").fetchall()
        # It started at X: no redo, and WAL continues right after.
        redo = conn.execute("select redo_lsn::text from pg_control_checkpoint()").fetchone()[0]
        assert redo == x or redo.split("/")[0] == x.split("/")[0]
        with open(log) as f:
            assert "redo starts" not in f.read()


def test_stateless_basebackup_has_no_permanent_relation_files(cluster):
    cluster.sql("create table perm_t (a int); insert into perm_t values (1)")
    cluster.sql("create unlogged table unl_t (a int primary key); insert into unl_t values (1)")
    lsn = current_lsn(cluster)
    # Wait until the safekeepers' commit covers it and the pageserver has it.
    wait_ingested(cluster, lsn)
    status = cluster.status()
    x = status["pageserver"]["last_record_lsn"]
    data = basebackup(cluster, x)
    tar = tarfile.open(fileobj=io.BytesIO(data))
    members = {m.name: m for m in tar.getmembers()}
    unl = cluster.sql("select pg_relation_filenode('unl_t'), pg_relation_filenode('unl_t_pkey'), "
                      "pg_relation_filenode('perm_t'), (select oid from pg_database "
                      "where datname = 'postgres')")[0]
    unl_node, unl_idx, perm_node, db = unl
    base = "base/%d/" % db
    assert base + "%d_init" % unl_node in members
    assert base + "%d" % unl_node in members
    assert base + "%d_init" % unl_idx in members
    main = tar.extractfile(base + "%d" % unl_idx).read()
    init = tar.extractfile(base + "%d_init" % unl_idx).read()
    assert main == init and len(init) > 0
    assert base + "%d" % perm_node not in members
    allowed = re.compile(r"^(PG_VERSION|pg_filenode\.map|pg_control|\d+(_init)?)$")
    inits = {n[:-len("_init")] for n in members if n.endswith("_init")}
    for name, m in members.items():
        if not (name.startswith("base/") or name.startswith("global/")) or m.isdir():
            continue
        leaf = name.rsplit("/", 1)[1]
        assert allowed.match(leaf), name
        if re.match(r"^\d+$", leaf):
            assert name in inits, "%s is a permanent relation's file" % name


def test_bad_requests_get_clear_errors(cluster):
    tenant, timeline = cluster.ids()
    cases = [
        ("basebackup", "malformed basebackup command"),
        ("basebackup %s %s" % (tenant, timeline), "malformed basebackup command"),
        ("basebackup nothex %s 0/100" % timeline, "invalid tenant_id"),
        ("basebackup %s zz 0/100" % tenant, "invalid timeline_id"),
        ("basebackup %s %s 0/XYZ" % (tenant, timeline), "invalid LSN"),
        ("basebackup %s %s 0/1000001" % (tenant, timeline), "not a record boundary"),
        ("basebackup %s %s 0/100 fast" % (tenant, timeline), "malformed basebackup command"),
        ("basebackup %s %s 0/100" % (tenant, "0" * 32), "not found"),
        ("basebackup %s %s 0/100" % (tenant, timeline), "before the timeline's start"),
    ]
    with pageserver_conn(cluster) as conn:
        for cmd, message in cases:
            with pytest.raises(psycopg.Error) as info:
                with conn.cursor().copy(cmd) as copy:
                    for _ in copy:
                        pass
            assert message in str(info.value), (cmd, str(info.value))
        # The connection (and the pageserver) still serve a good request.
        with conn.cursor().copy("basebackup %s %s latest" % (tenant, timeline)) as copy:
            assert sum(len(c) for c in copy) > 0
    # The metrics count them: the two started (`before the start` and
    # `latest`), one of them failed; plus the computes' own basebackups.
    port = cluster.status()["pageserver"]["http_port"]
    body = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10).read().decode()
    values = dict(re.findall(r"^(pageserver_basebackup\w*(?:_total|_count)) (\d+)", body, re.M))
    assert int(values["pageserver_basebackups_total"]) >= 3, values
    assert int(values["pageserver_basebackup_failures_total"]) >= 1, values
    assert int(values["pageserver_basebackup_seconds_count"]) >= 2, values


def test_xl_prev_lets_pg_waldump_read_across_a_compute_restart(cluster):
    import glob
    import json
    import shutil
    import struct
    cluster.sql("create table w (a int); insert into w select generate_series(1, 2000)")
    cluster.stop("compute")
    cluster.start("compute")
    cluster.sql("insert into w select generate_series(1, 2000)")
    cluster.stop("compute")
    x = cluster.run("sync-safekeepers").stdout.strip()
    # Dump sk1's WAL from the first page boundary after the timeline's start
    # (the safekeepers hold nothing before the start) to X.  The second
    # compute's bootstrap checkpoint lies in between: a wrong xl_prev stops
    # pg_waldump with "incorrect prev-link".
    with open(os.path.join(cluster.dir, "cluster.json")) as f:
        start = lsn_to_int(json.load(f)["pageserver"]["import_lsn"])
    first_page = (start + 8191) // 8192 * 8192
    segs = glob.glob(os.path.join(cluster.safekeeper_datadir("sk1"), "**", "0000000*"),
                     recursive=True)
    assert segs
    with tempfile.TemporaryDirectory(dir=cluster.dir) as tmp:
        for p in segs:
            name = os.path.basename(p)
            if name.endswith(".partial"):
                name = name[:-len(".partial")]
            dst = os.path.join(tmp, name)
            shutil.copy(p, dst)
            # The timeline starts mid-segment: give the copy the long header
            # pg_waldump reads the segment size from.
            with open(dst, "r+b") as f:
                head = f.read(40)
                if head[:2] == b"\0\0":
                    segno = int(name[16:24], 16)
                    f.seek(0)
                    f.write(struct.pack("<HHIQI4xQII", 0xD110, 0x0002, 1, segno << 24, 0, 0,
                                        16 << 20, 8192))
        out = subprocess.run([os.path.join(STOCK_PG_BINDIR, "pg_waldump"), "-p", tmp, "-s",
                              "%X/%X" % (first_page >> 32, first_page & 0xFFFFFFFF), "-e", x],
                             capture_output=True, text=True)
        assert "prev-link" not in out.stderr, out.stderr
        # compute 1's shutdown, compute 2's bootstrap and its shutdown.
        # The second compute's bootstrap checkpoint is in the dump and its
        # xl_prev is the record just before it (compute 1's last).
        recs = re.findall(r"lsn: ([0-9A-F]+/[0-9A-F]+), prev ([0-9A-F]+/[0-9A-F]+), desc: (\S+)",
                          out.stdout)
        boots = [i for i, r in enumerate(recs) if r[2] == "CHECKPOINT_SHUTDOWN"]
        assert boots, (x, out.stdout[-2000:], out.stderr)
        for i in boots:
            assert i > 0 and recs[i][1] == recs[i - 1][0], recs[i - 1:i + 1]
        # And the dump reached X (no stop at a bad record on the way).
        assert lsn_to_int(recs[-1][0]) < lsn_to_int(x) <= lsn_to_int(recs[-1][0]) + 8192


def create_branch(cluster, ancestor, lsn):
    """A branch of ancestor at lsn with no safekeepers (so no WAL receiver),
    through the pageserver's HTTP API; its timeline id."""
    tenant, _main = cluster.ids()
    branch = os.urandom(16).hex()
    body = {"timeline_id": branch, "ancestor_timeline_id": ancestor, "ancestor_lsn": lsn,
            "safekeepers": []}
    port = cluster.status()["pageserver"]["http_port"]
    headers = dict(cluster.bearer())
    headers["Content-Type"] = "application/json"
    req = urllib.request.Request("http://127.0.0.1:%d/v1/tenant/%s/timeline" % (port, tenant),
                                 data=json.dumps(body).encode(), method="POST", headers=headers)
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 201
        out = json.loads(r.read())
    assert out["timeline_id"] == branch, out
    return branch, out["start_lsn"]


def test_basebackup_without_a_wal_receiver(cluster):
    """A timeline that names no safekeepers runs no WAL receiver; its
    basebackup still works (the old code found the store through the
    receivers and refused it)."""
    cluster.sql("create table nowr_t (id int primary key, v text)")
    cluster.sql("insert into nowr_t select g, md5(g::text) from generate_series(1, 2000) g")
    expected = cluster.sql("select count(*), sum(hashtext(v)) from nowr_t")
    cluster.stop("compute")
    x = cluster.run("sync-safekeepers").stdout.strip()
    wait_ingested(cluster, x)
    tenant, main = cluster.ids()
    branch, at = create_branch(cluster, main, x)
    status = cluster.http_get_json(cluster.status()["pageserver"]["http_port"],
                                   "/v1/tenant/%s/timeline/%s" % (tenant, branch))
    assert status["safekeepers"] == [] and status["walreceiver"]["state"] == "none", status
    data = basebackup(cluster, at, full=True, timeline=branch)
    assert tarfile.open(fileobj=io.BytesIO(data)).getnames()[-1] == "global/pg_control"
    with patched_postgres(cluster, data) as (conn, _log):
        assert conn.execute("select count(*), sum(hashtext(v)) from nowr_t").fetchall() == expected
