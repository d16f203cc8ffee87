"""
A stateless compute behaves like stock PostgreSQL where stock Postgres looks
at relation files the compute does not have (issue 10, part 5):

- sizes: pg_relation_size, pg_table_size, pg_total_relation_size come from
  the smgr (blocks x 8192) and equal stock PostgreSQL's for the same
  `pgbench -i`; pg_database_size and pg_tablespace_size add what the
  pageserver holds (DBSIZE / SPCSIZE requests) to the local files;
- DROP TABLESPACE refuses a tablespace that still holds a relation, in this
  database or another, as stock does;
- GetNewRelFileNode checks a new relfilenode through the smgr: with the OID
  counter set back onto a relfilenode in use (what OID wraparound does; set
  here by a test function compiled with PGXS, the running equivalent of
  `pg_resetwal -o`), a new table must not get that relation's storage;
- a clean stop streams the shutdown checkpoint to the safekeepers, and the
  next compute starts at its end without replaying anything.

Every postgres program runs as the unprivileged postgres user when we are
root; everything listens on 127.0.0.1 (stock server: a unix socket too).
"""
import os
import re
import shutil
import subprocess

import psycopg
import pytest

from conftest import (STOCK_PG_BINDIR, as_pg_user_kwargs, chown_to_pg_user, free_port, lsn_to_int,
                      make_shared_dir, wait_until)
from smgr_harness import running_cluster
from test_durability import pgbench

# The subject is the compute (the extension and PostgreSQL on it): the release
# daemons (conftest.py).
pytestmark = pytest.mark.release_daemons

SCALE = 4
PGBENCH_RELATIONS = ["pgbench_accounts", "pgbench_branches", "pgbench_tellers",
                     "pgbench_history", "pgbench_accounts_pkey", "pgbench_branches_pkey",
                     "pgbench_tellers_pkey"]


@pytest.fixture
def stateless(request):
    with running_cluster(request) as c:
        yield c


def run_as_pg(cmd, timeout=120, check=True):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          **as_pg_user_kwargs())
    if check and proc.returncode != 0:
        raise AssertionError("%s exited %d\n%s\n%s" % (" ".join(cmd), proc.returncode,
                                                      proc.stdout, proc.stderr))
    return proc


class StockServer:
    """Stock PostgreSQL 15 (Debian's binaries) on a fresh initdb: the oracle."""

    def __init__(self):
        self.dir = make_shared_dir("strata-stock-")
        chown_to_pg_user(self.dir)
        self.pgdata = os.path.join(self.dir, "pgdata")
        self.port = free_port()
        run_as_pg([os.path.join(STOCK_PG_BINDIR, "initdb"), "-D", self.pgdata, "-A", "trust",
                   "-U", "postgres", "--no-sync"], timeout=300)
        self.proc = subprocess.Popen(
            [os.path.join(STOCK_PG_BINDIR, "postgres"), "-D", self.pgdata, "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + self.dir,
             "-c", "fsync=off", "-c", "autovacuum=off"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "log"), "w"),
            **as_pg_user_kwargs())
        wait_until(self._ready, 60, "the stock server to accept connections")

    @property
    def connstr(self):
        return "host=127.0.0.1 port=%d user=postgres dbname=postgres" % self.port

    def _ready(self):
        try:
            psycopg.connect(self.connstr, connect_timeout=2).close()
            return True
        except psycopg.OperationalError:
            return False

    def connect(self):
        return psycopg.connect(self.connstr, autocommit=True)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(2)  # fast shutdown
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def relation_sizes(conn):
    """{relation: (main, fsm, vm, table, total)} for the pgbench relations."""
    out = {}
    for rel in PGBENCH_RELATIONS:
        (row,) = conn.execute(
            "select pg_relation_size(%s, 'main'), pg_relation_size(%s, 'fsm'), "
            "pg_relation_size(%s, 'vm'), pg_table_size(%s), pg_total_relation_size(%s)",
            (rel,) * 5).fetchall()
        out[rel] = tuple(row)
    return out


class PgbenchTarget:
    def __init__(self, connstr):
        self.connstr = connstr


def test_sizes_equal_stock(stateless):
    c = stateless
    stock = StockServer()
    try:
        for target in (stock, c):
            proc = pgbench(PgbenchTarget(target.connstr), "-i", "-q", "-s", str(SCALE),
                           timeout=600)
            assert proc.returncode == 0, proc.stderr
        with stock.connect() as conn:
            want = relation_sizes(conn)
            (stock_db,), = conn.execute("select pg_database_size(current_database())").fetchall()
        with c.connect() as conn:
            got = relation_sizes(conn)
            (db_size, ts_size, rels_total), = conn.execute(
                "select pg_database_size(current_database()), "
                "pg_tablespace_size('pg_default'), "
                "sum(pg_total_relation_size(oid)) from pg_class "
                "where relkind in ('r', 'm') and not relisshared").fetchall()
    finally:
        stock.stop()
    accounts_blocks = want["pgbench_accounts"][0] // 8192
    assert accounts_blocks > 1000, want  # 100000 rows per scale unit, ~61 per page
    assert got == want, "sizes differ from stock's:\n%s\n%s" % (got, want)
    # The database holds at least its relations (the pageserver's part).
    tables_total = sum(v[4] for r, v in got.items() if not r.endswith("_pkey"))
    assert db_size >= rels_total >= tables_total, (db_size, rels_total, tables_total)
    assert abs(db_size - stock_db) < 0.1 * stock_db, (db_size, stock_db)
    assert ts_size >= db_size, (ts_size, db_size)

    # A new compute knows nothing locally: the sizes come from the pageserver.
    c.stop("compute")
    c.start("compute")
    with c.connect() as conn:
        again = relation_sizes(conn)
    assert {r: v[0] for r, v in again.items()} == {r: v[0] for r, v in want.items()}


NEXTOID_C = r"""
#include "postgres.h"

#include "access/transam.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lwlock.h"

PG_MODULE_MAGIC;

/* set_next_oid(oid): the next OID handed out (as pg_resetwal -o does to a
 * stopped server); oidCount 0 makes the next one log XLOG_NEXTOID. */
PG_FUNCTION_INFO_V1(set_next_oid);
Datum
set_next_oid(PG_FUNCTION_ARGS)
{
    Oid next = PG_GETARG_OID(0);

    if (!superuser())
        ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE), errmsg("superuser only")));
    LWLockAcquire(OidGenLock, LW_EXCLUSIVE);
    ShmemVariableCache->nextOid = next;
    ShmemVariableCache->oidCount = 0;
    LWLockRelease(OidGenLock);
    PG_RETURN_VOID();
}
"""

NEXTOID_MAKEFILE = """MODULES = nextoid
PG_CONFIG = {pg_config}
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
"""


def build_nextoid(prefix):
    src = make_shared_dir("strata-nextoid-")
    with open(os.path.join(src, "nextoid.c"), "w") as f:
        f.write(NEXTOID_C)
    with open(os.path.join(src, "Makefile"), "w") as f:
        f.write(NEXTOID_MAKEFILE.format(pg_config=os.path.join(prefix, "bin", "pg_config")))
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    res = subprocess.run(["make", "-C", src], capture_output=True, text=True, timeout=300,
                         env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    lib = os.path.join(src, "nextoid.so")
    chown_to_pg_user(src)
    os.chmod(lib, 0o755)
    return src, lib


def test_new_relfilenode_skips_one_in_use(stateless):
    c = stateless
    src, lib = build_nextoid(c.prefix)
    try:
        with c.connect() as conn:
            conn.execute("create function set_next_oid(oid) returns void language c "
                         "as '%s', 'set_next_oid'" % lib)
            conn.execute("create table victim (id int, v text)")
            conn.execute("insert into victim select g, 'first' from generate_series(1, 100) g")
            # TRUNCATE gives the table a new relfilenode, a fresh OID that no
            # pg_class row has: pg_class's own OID check cannot see it.
            conn.execute("truncate victim")
            conn.execute("insert into victim select g, 'victim' from generate_series(1, 500) g")
            (oid, filenode), = conn.execute(
                "select 'victim'::regclass::oid, pg_relation_filenode('victim')").fetchall()
            assert oid != filenode
            # The OID counter wraps onto the relfilenode in use.
            conn.execute("select set_next_oid(%s)", (filenode,))
            conn.execute("create table newcomer (id int, v text)")
            (new_oid, new_filenode), = conn.execute(
                "select 'newcomer'::regclass::oid, pg_relation_filenode('newcomer')").fetchall()
            conn.execute("insert into newcomer values (1, 'newcomer')")
            victim = conn.execute("select count(*), min(v), max(v) from victim").fetchall()
            newcomer = conn.execute("select count(*), min(v) from newcomer").fetchall()
            shared = conn.execute("select relfilenode, array_agg(relname) from pg_class "
                                  "where relfilenode <> 0 group by 1 having count(*) > 1"
                                  ).fetchall()
        # The counter did reach it (else the test proves nothing): the new
        # table's number is the first one past victim's three (table, TOAST
        # table, TOAST index: TRUNCATE renumbered all of them).
        assert filenode <= new_oid <= filenode + 3, (new_oid, filenode)
        assert new_filenode != filenode, "the new table got the relfilenode of 'victim'"
        assert shared == [], shared
        assert victim == [(500, "victim", "victim")], victim
        assert newcomer == [(1, "newcomer")], newcomer
        # And so it stays for a compute that reads everything from the pageserver.
        c.stop("compute")
        c.start("compute")
        with c.connect() as conn:
            assert conn.execute("select count(*), min(v) from victim").fetchall() == \
                [(500, "victim")]
            assert conn.execute("select count(*) from newcomer").fetchall() == [(1,)]
    finally:
        shutil.rmtree(src, ignore_errors=True)


def tablespace_dir():
    d = make_shared_dir("strata-tblspc-")
    chown_to_pg_user(d)
    return d


def test_drop_tablespace_refuses_when_not_empty(stateless):
    c = stateless
    loc = tablespace_dir()
    try:
        with c.connect() as conn:
            conn.execute("create tablespace ts_semantics location '%s'" % loc)
            conn.execute("create table in_ts (id int, v text) tablespace ts_semantics")
            conn.execute("insert into in_ts select g, 'x' from generate_series(1, 5000) g")
            conn.execute("create table empty_in_ts (id int) tablespace ts_semantics")
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState,
                               match='tablespace "ts_semantics" is not empty'):
                conn.execute("drop tablespace ts_semantics")
            (ts_size, rel_size), = conn.execute(
                "select pg_tablespace_size('ts_semantics'), pg_relation_size('in_ts')").fetchall()
            assert ts_size >= rel_size > 0, (ts_size, rel_size)
            conn.execute("drop table in_ts")
            # An empty relation keeps it in use too.
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
                conn.execute("drop tablespace ts_semantics")
            conn.execute("drop table empty_in_ts")
            # So does a relation of another database.
            conn.execute("create database other_db")
        other = c.connstr.replace("dbname=postgres", "dbname=other_db")
        assert other != c.connstr, c.connstr
        with psycopg.connect(other, autocommit=True) as conn:
            conn.execute("create table elsewhere (id int) tablespace ts_semantics")
            conn.execute("insert into elsewhere values (1)")
        with c.connect() as conn:
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState,
                               match="is not empty"):
                conn.execute("drop tablespace ts_semantics")
        with psycopg.connect(other, autocommit=True) as conn:
            conn.execute("drop table elsewhere")
        with c.connect() as conn:
            conn.execute("drop tablespace ts_semantics")
            assert conn.execute("select count(*) from pg_tablespace where spcname = "
                                "'ts_semantics'").fetchall() == [(0,)]
    finally:
        shutil.rmtree(loc, ignore_errors=True)


def checkpoint_end(c, pgdata):
    """(location, end) of the latest checkpoint record of a stopped data
    directory: pg_controldata for the location, pg_waldump for the end (the
    next record's position, where it finds no record)."""
    out = run_as_pg([c.pg_program("pg_controldata"), "-D", pgdata]).stdout
    state = re.search(r"Database cluster state:\s+(.*)", out).group(1).strip()
    assert state == "shut down", out
    loc = re.search(r"Latest checkpoint location:\s+(\S+)", out).group(1)
    dump = run_as_pg([c.pg_program("pg_waldump"), "-p", os.path.join(pgdata, "pg_wal"),
                      "-s", loc], check=False)
    records = [l for l in dump.stdout.splitlines() if l.startswith("rmgr:")]
    assert len(records) == 1 and "CHECKPOINT_SHUTDOWN" in records[0], dump.stdout + dump.stderr
    m = re.search(r"invalid record length at ([0-9A-F]+/[0-9A-F]+)", dump.stderr)
    assert m, dump.stderr
    return lsn_to_int(loc), lsn_to_int(m.group(1))


def test_clean_stop_streams_shutdown_checkpoint(stateless):
    c = stateless
    with c.connect() as conn:
        conn.execute("create table before_stop (id int)")
        conn.execute("insert into before_stop select generate_series(1, 1000)")
    # Read before the next start sets the stopped directory aside.
    pgdata = c.compute_datadir
    c.stop("compute")
    loc, end = checkpoint_end(c, pgdata)
    sks = c.status()["safekeepers"]
    flushed = sorted(lsn_to_int(sk["flush_lsn"]) for sk in sks if sk["flush_lsn"])
    majority = len(sks) // 2 + 1
    assert len(flushed) >= majority, sks
    # A majority holds the WAL up to the end of the shutdown checkpoint (and
    # no safekeeper holds more: nothing is written after it).
    assert flushed[-majority] == end, ("safekeepers flushed %s; checkpoint %x ends at %x"
                                       % ([hex(f) for f in flushed], loc, end))
    assert flushed[-1] == end
    proc = c.start("compute")
    m = re.search(r"start at ([0-9A-F]+/[0-9A-F]+)", proc.stdout)
    assert m, proc.stdout
    assert lsn_to_int(m.group(1)) == end, (proc.stdout, hex(end))
    with c.connect() as conn:
        assert conn.execute("select count(*) from before_stop").fetchall() == [(1000,)]
    # The compute's log (appended by every start): the last start replayed nothing.
    with open(os.path.join(c.dir, "compute.log"), errors="replace") as f:
        last_start = f.read().rsplit("starting PostgreSQL", 1)[-1]
    assert "redo starts at" not in last_start, last_start[-2000:]
