"""WAL ingest against a real PostgreSQL 15 (stock, as user postgres).

For full_page_writes off and on: initdb, keep a copy of the shut-down data
directory, start the server, run a workload (heap, btree, TOAST, updates and
deletes, VACUUM with truncation, TRUNCATE, sequences, CREATE DATABASE with both
strategies, DROP DATABASE, two-phase commit and rollback and one left
prepared, aborted transactions, subtransactions, multixacts, a CHECKPOINT),
note what the server says (every permanent relation's fork sizes, databases,
txid_status of every transaction), stop it cleanly, then run
strata-ingest-tool: import the copy and ingest every WAL record after it.

Checked: every relation fork ingest knows equals the server's (main and VM
exactly, and the set of relations per database both ways), the databases, the
CLOG status of every xid equals txid_status(), the pending prepared
transaction is known, and ingest reached the server's shutdown checkpoint.
The FSM is not compared: Postgres extends it without WAL (see
pageserver/ingest/ingest_misc.c and the report).
"""

import os
import re
import shutil
import subprocess
import tempfile

import psycopg
import pytest
from conftest import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PGBIN = "/usr/lib/postgresql/15/bin"


def tool_binary():
    cands = [os.environ.get("STRATA_INGEST_TOOL", "")]
    for var, default in (("STRATA_SAN_BUILD", "build-san"), ("STRATA_BUILD", "build")):
        cands.append(os.path.join(os.environ.get(var) or os.path.join(REPO, default), "bin",
                                  "strata-ingest-tool"))
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    pytest.skip("strata-ingest-tool not built")


def as_postgres(*args, **kw):
    return subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True,
                          capture_output=True, text=True, **kw)


def lsn_int(text):
    hi, lo = text.split("/")
    return int(hi, 16) << 32 | int(lo, 16)


def workload(port):
    """Runs the workload; returns {xid: expected final state or None}."""
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    xids = []
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("create table t (id int primary key, v text, pad text)")
        c.execute("insert into t select g, md5(g::text), repeat('p', 200) from generate_series(1, 5000) g")
        c.execute("create index t_v on t (v)")
        # TOAST: incompressible values well past 2 KB.
        c.execute("create table big (id int, doc text)")
        c.execute("insert into big select g, (select string_agg(md5(g::text || i::text), '') "
                  "from generate_series(1, 300) i) from generate_series(1, 20) g")
        c.execute("checkpoint")
        c.execute("update t set v = v || 'u' where id % 7 = 0")
        c.execute("delete from t where id > 3000")  # the tail: VACUUM truncates
        c.execute("vacuum t")
        c.execute("vacuum big")
        # VACUUM truncation (XLOG_SMGR_TRUNCATE of main, FSM and VM).
        c.execute("create table shrink (id int, pad text)")
        c.execute("insert into shrink select g, repeat('s', 100) from generate_series(1, 20000) g")
        c.execute("vacuum shrink")
        c.execute("delete from shrink where id > 500")
        c.execute("vacuum shrink")
        c.execute("create sequence s")
        c.execute("select nextval('s') from generate_series(1, 100)")
        c.execute("create table tt (x int)")
        c.execute("insert into tt select generate_series(1, 2000)")
        c.execute("truncate tt")
        c.execute("insert into tt values (1)")
        c.execute("create table gone (x int)")
        c.execute("insert into gone values (1)")
        c.execute("drop table gone")
        # Transactions whose outcome we check.
        for outcome in ("commit", "rollback", "commit", "rollback"):
            c.execute("begin")
            xid = c.execute("select txid_current()").fetchone()[0]
            c.execute("insert into t values (%s, 'x', 'y')", (100000 + xid,))
            c.execute(outcome)
            xids.append(xid)
        c.execute("begin")
        xid = c.execute("select txid_current()").fetchone()[0]
        c.execute("insert into tt values (2)")
        c.execute("savepoint a")
        c.execute("insert into tt values (3)")
        c.execute("rollback to a")
        c.execute("savepoint b")
        c.execute("insert into tt values (4)")
        c.execute("commit")
        xids.append(xid)
        # An aborted CREATE TABLE: its relation is dropped by the abort record.
        c.execute("begin")
        xids.append(c.execute("select txid_current()").fetchone()[0])
        c.execute("create table aborted_t (x int)")
        c.execute("insert into aborted_t values (1)")
        c.execute("rollback")
        # Two-phase: commit, rollback, and one left prepared.
        prepared = None
        for gid, finish in (("p1", "commit prepared 'p1'"), ("p2", "rollback prepared 'p2'"),
                            ("p3", None)):
            c.execute("begin")
            xid = c.execute("select txid_current()").fetchone()[0]
            c.execute("insert into tt values (%s)", (xid,))
            c.execute(f"prepare transaction '{gid}'")
            if finish:
                c.execute(finish)
                xids.append(xid)
            else:
                prepared = xid
        # Multixact: two sharers of one row.
        with psycopg.connect(dsn) as c2:
            c.execute("begin")
            xids.append(c.execute("select txid_current()").fetchone()[0])
            c.execute("select * from t where id = 1 for share")
            x2 = c2.execute("select txid_current()").fetchone()[0]
            c2.execute("select * from t where id = 1 for share")
            c2.commit()
            xids.append(x2)
            c.execute("commit")
        # Databases: WAL_LOG (default) and FILE_COPY, one dropped.
        c.execute("create database d_wal")
        c.execute("create database d_copy strategy file_copy")
        c.execute("create database d_drop")
        c.execute("drop database d_drop")
    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=d_wal",
                         autocommit=True) as c:
        c.execute("create table w (x int primary key)")
        c.execute("insert into w select generate_series(1, 1000)")
    return xids, prepared


def server_facts(port):
    dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as c:
        dbs = c.execute("select oid, datname, datallowconn from pg_database").fetchall()
    rels = {}
    for oid, name, allowconn in dbs:
        if not allowconn:
            continue
        with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname={name}",
                             autocommit=True) as c:
            rows = c.execute(
                "select c.reltablespace, pg_relation_filenode(c.oid), "
                "pg_relation_size(c.oid, 'main'), pg_relation_size(c.oid, 'vm') "
                "from pg_class c where c.relpersistence = 'p' and c.relkind in "
                "('r', 'i', 't', 'S', 'm') and pg_relation_filenode(c.oid) is not null").fetchall()
        for spc, filenode, main, vm in rows:
            key = (1664, 0, filenode) if spc == 1664 else (1663, oid, filenode)
            rels[key] = (main // 8192, vm // 8192)
    return {oid for oid, _, _ in dbs}, {oid for oid, _, a in dbs if not a}, rels


def txid_statuses(port, xids):
    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres dbname=postgres") as c:
        return {x: c.execute("select txid_status(%s)", (x,)).fetchone()[0] for x in xids}


@pytest.fixture(params=["off", "on"], ids=["fpw_off", "fpw_on"])
def run(request):
    fpw = request.param
    tool = tool_binary()
    tmp = tempfile.mkdtemp(prefix="strata-ingest-pg-", dir="/tmp")
    shutil.chown(tmp, "postgres")
    data = os.path.join(tmp, "data")
    snap = os.path.join(tmp, "snapshot")
    port = free_port()
    as_postgres(f"{PGBIN}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
    shutil.copytree(data, snap, symlinks=True)
    started = False
    try:
        as_postgres(f"{PGBIN}/pg_ctl", "-D", data, "-w", "-l", os.path.join(tmp, "log"), "-o",
                    f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={tmp} "
                    f"-c wal_keep_size=1GB -c fsync=off -c full_page_writes={fpw} "
                    f"-c autovacuum=off -c max_prepared_transactions=5", "start")
        started = True
        xids, prepared = workload(port)
        dbs, noconn, rels = server_facts(port)
        statuses = txid_statuses(port, xids + [prepared])
        as_postgres(f"{PGBIN}/pg_ctl", "-D", data, "-w", "-m", "fast", "stop")
        started = False
        ctl = as_postgres(f"{PGBIN}/pg_controldata", data).stdout
        shutdown_cp = lsn_int(re.search(r"Latest checkpoint location:\s+(\S+)", ctl).group(1))
        proc = subprocess.run([tool, "--import", snap, "--wal", os.path.join(data, "pg_wal")],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out = proc.stdout
        yield {"out": out, "xids": xids, "prepared": prepared, "statuses": statuses,
               "dbs": dbs, "noconn": noconn, "rels": rels, "shutdown_cp": shutdown_cp}
    finally:
        if started:
            subprocess.run(["runuser", "-u", "postgres", "--", f"{PGBIN}/pg_ctl", "-D", data,
                            "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def parse(out):
    got = {"rel": {}, "db": set(), "xid": {}, "twophase": set()}
    for line in out.splitlines():
        f = line.split()
        if f[0] == "rel":
            spc, db, rel, fork, n = map(int, f[1:])
            got["rel"][(spc, db, rel, fork)] = n
        elif f[0] == "db":
            got["db"].add((int(f[1]), int(f[2])))
        elif f[0] == "xid":
            got["xid"][int(f[1])] = f[2]
        elif f[0] == "twophase":
            got["twophase"].add(int(f[1]))
        elif f[0] in ("import", "end"):
            got[f[0]] = f[1:]
    return got


def test_ingest_matches_server(run):
    got = parse(run["out"])
    # Ingest read the WAL through the server's shutdown checkpoint.
    assert lsn_int(got["end"][0]) > run["shutdown_cp"], got["end"]
    assert int(got["end"][1]) > 1000

    # Databases: every one the server has (and global), not the dropped one.
    assert got["db"] == {(1663, oid) for oid in run["dbs"]} | {(1664, 0)}

    # Relation forks: main and VM sizes equal the server's.
    rels = run["rels"]
    mismatches = []
    for (spc, db, rel), (main, vm) in rels.items():
        if got["rel"].get((spc, db, rel, 0)) != main:
            mismatches.append(("main", spc, db, rel, main, got["rel"].get((spc, db, rel, 0))))
        if got["rel"].get((spc, db, rel, 2), 0) != vm:
            mismatches.append(("vm", spc, db, rel, vm, got["rel"].get((spc, db, rel, 2))))
    assert not mismatches, mismatches[:20]
    # ... and no relation exists in ingest that the server does not have
    # (dropped tables, aborted CREATE TABLE, the dropped database's), except
    # in databases we could not list (template0).
    extra = [k for k in got["rel"] if k[3] == 0 and k[1] not in run["noconn"]
             and (k[0], k[1], k[2]) not in rels]
    assert not extra, extra[:20]
    assert len(rels) > 800  # four databases' catalogs plus the workload
    # The workload reached the VM (VACUUM) and ingest saw it.
    assert any(vm > 0 for _, vm in rels.values())
    assert any(k[3] == 2 for k in got["rel"])
    assert len(run["xids"]) == 10

    # CLOG: what ingest set is what the server says, for every transaction.
    for xid in run["xids"]:
        want = run["statuses"][xid]
        assert want in ("committed", "aborted"), (xid, want)
        assert got["xid"].get(xid & 0xFFFFFFFF) == want, (xid, want, got["xid"].get(xid))
    assert run["statuses"][run["prepared"]] == "in progress"
    assert (run["prepared"] & 0xFFFFFFFF) not in got["xid"]
    assert got["twophase"] == {run["prepared"] & 0xFFFFFFFF}
