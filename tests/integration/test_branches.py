"""
Branches and named computes (issue #15, docs/cli.md "Branches and computes"),
on a `strata up` cluster, through the CLI only.

- test_ledger_branches: a ledger table gets one row per transaction and
  the compute's WAL insert position is recorded after each commit.  The
  pageserver runs GC every second with a small PITR window (as
  test_pageserver_gc.py does), so its horizon moves up behind the writes.
  A branch at the LSN after commit K (`strata timeline branch b1 --lsn`)
  gets its own compute (`strata start compute c1 --timeline b1`), which
  sees exactly rows 1..K; rows written on b1 are invisible on main and
  rows written on main after the branch point invisible on b1; a branch
  of b1 (b2, with its own compute) sees b1's rows and not main's.  Then
  main writes several PITR windows' worth of WAL and GC passes the branch
  point: main's horizon stays at or below b1's branch LSN, the computes on
  b1 and b2 are restarted (new data directories: every page from the
  pageserver) and still see exactly what they saw; a new branch below the
  horizon is refused with the window in the message.  `strata status
  --json` lists the computes; `strata timeline list` draws the tree;
  `strata down` stops them all.
- test_branch_cli_errors: unknown parent, an LSN outside the window, a
  second writable compute on a timeline, delete refused (branches, a
  running compute), then delete allowed, and `strata restore` at an LSN and
  at a time (the last commit at or before it).
- test_pg_regress_on_branch: a few representative pg_regress tests
  (REGRESS_TESTS) against a compute on a branch.
"""
import json
import os
import re
import shutil
import subprocess
import time

import psycopg
import pytest

from conftest import REPO, lsn_to_int, int_to_lsn, make_shared_dir, pg_user, wait_until

# The subject is the CLI and the compute: the release build's daemons
# (conftest.py, release_daemons).
pytestmark = pytest.mark.release_daemons

WINDOW = 512 * 1024


def named_compute(cluster, name):
    for c in cluster.status()["computes"]:
        if c["name"] == name:
            return c
    raise KeyError(name)


def sql(connstr, query, params=None):
    with psycopg.connect(connstr, autocommit=True, connect_timeout=10) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else None


def ledger_ids(connstr):
    return [r[0] for r in sql(connstr, "select id from ledger order by id")]


def timeline_info(cluster, name):
    listing = json.loads(cluster.run("timeline", "list", "--json").stdout)
    for t in listing["timelines"]:
        if t["name"] == name:
            tenant, _ = cluster.ids()
            return cluster.http_get_json(cluster.status()["pageserver"]["http_port"],
                                         "/v1/tenant/%s/timeline/%s" % (tenant, t["timeline_id"]))
    raise KeyError(name)


def test_ledger_branches(cluster_dir):
    cluster = cluster_dir
    cluster.env["PAGESERVER_GC_INTERVAL"] = "1s"
    cluster.env["PAGESERVER_PITR_WINDOW_BYTES"] = str(WINDOW)
    cluster.up()
    main = cluster.connstr
    sql(main, "create table ledger (id int primary key, note text)")
    lsns = []
    for i in range(1, 41):
        sql(main, "insert into ledger values (%s, 'main')", (i,))
        lsns.append(sql(main, "select pg_current_wal_insert_lsn()")[0][0])
    k = 25
    out = cluster.run("timeline", "branch", "b1", "--lsn", str(lsns[k - 1])).stdout
    assert re.search(r"timeline b1 \(\w{32}\): branched from main at %s in [0-9.]+ s"
                     % re.escape(str(lsns[k - 1])), out), out
    cluster.run("start", "compute", "c1", "--timeline", "b1")
    c1 = named_compute(cluster, "c1")
    assert c1["timeline"] == "b1" and c1["running"] and not c1["read_only"], c1
    assert ledger_ids(c1["connstr"]) == list(range(1, k + 1))

    # Writes on each side stay on that side.
    sql(c1["connstr"], "insert into ledger values (1000, 'b1')")
    sql(main, "insert into ledger values (2000, 'main after the branch')")
    assert ledger_ids(c1["connstr"]) == list(range(1, k + 1)) + [1000]
    assert ledger_ids(main) == list(range(1, 41)) + [2000]

    # A branch of the branch, at b1's latest state.
    b1_lsn = sql(c1["connstr"], "select pg_current_wal_insert_lsn()")[0][0]
    cluster.run("timeline", "branch", "b2", "--from", "b1", "--lsn", str(b1_lsn))
    cluster.run("start", "compute", "c2", "--timeline", "b2")
    c2 = named_compute(cluster, "c2")
    assert ledger_ids(c2["connstr"]) == list(range(1, k + 1)) + [1000]
    sql(c2["connstr"], "insert into ledger values (3000, 'b2')")
    assert 3000 not in ledger_ids(c1["connstr"]) and 3000 not in ledger_ids(main)

    tree = cluster.run("timeline", "list").stdout
    assert re.search(r"^main \w{32}  start .*computes: compute \(running\)", tree, re.M), tree
    assert re.search(r"^└─ b1 .*branched at %s.*c1 \(running\)" % re.escape(str(lsns[k - 1])),
                     tree, re.M), tree
    assert re.search(r"^   └─ b2 .*c2 \(running\)", tree, re.M), tree

    # GC on main passes the branch point: several windows of WAL.
    sql(main, "create table filler (x int, pad text)")
    for _ in range(4):
        sql(main, "insert into filler select g, repeat('x', 200) from generate_series(1, 2000) g")
    end = lsn_to_int(sql(main, "select pg_current_wal_insert_lsn()")[0][0])

    def gc_passed():
        info = timeline_info(cluster, "main")
        horizon = info["gc"]["horizon"]
        return (lsn_to_int(info["last_record_lsn"]) >= end and horizon is not None
                and lsn_to_int(horizon) > lsn_to_int(str(lsns[5])))
    wait_until(gc_passed, 60, "GC on main to move past the start of the ledger")
    horizon = lsn_to_int(timeline_info(cluster, "main")["gc"]["horizon"])
    assert horizon <= lsn_to_int(str(lsns[k - 1])), "main's GC passed b1's branch point"

    # Every page again from the pageserver: restart c1 and c2.
    for name in ("c1", "c2"):
        cluster.run("stop", "compute", name)
        assert not named_compute(cluster, name)["running"]
        cluster.run("start", "compute", name)
    assert ledger_ids(named_compute(cluster, "c1")["connstr"]) == list(range(1, k + 1)) + [1000]
    assert ledger_ids(named_compute(cluster, "c2")["connstr"]) == \
        list(range(1, k + 1)) + [1000, 3000]
    assert ledger_ids(main) == list(range(1, 41)) + [2000]

    # Below main's horizon now: refused, naming the window.
    r = cluster.run("timeline", "branch", "old", "--lsn", str(lsns[0]), check=False)
    assert r.returncode == 1 and "outside the readable window" in r.stderr, r.stderr

    st = cluster.status()
    assert [c["name"] for c in st["computes"]] == ["compute", "c1", "c2"], st["computes"]
    assert st["compute"]["pid"] == st["computes"][0]["pid"]
    for c in st["computes"]:
        assert c["running"] and c["pid"] and c["lsn"], c
    cluster.down()
    st = cluster.status()
    assert not any(c["running"] for c in st["computes"]), st["computes"]


def test_branch_cli_errors(cluster):
    main = cluster.connstr
    sql(main, "create table t (x int)")
    sql(main, "insert into t values (1)")
    lsn = sql(main, "select pg_current_wal_insert_lsn()")[0][0]

    r = cluster.run("timeline", "branch", "x", "--from", "nosuch", check=False)
    assert r.returncode == 1 and "unknown timeline nosuch" in r.stderr, r.stderr
    r = cluster.run("timeline", "branch", "x", "--lsn", "FF/0", check=False)
    assert r.returncode == 1 and "outside the readable window" in r.stderr, r.stderr
    r = cluster.run("timeline", "branch", "bad/name", check=False)
    assert r.returncode == 1 and "only letters, digits" in r.stderr, r.stderr

    cluster.run("timeline", "branch", "b1", "--lsn", str(lsn))
    r = cluster.run("timeline", "branch", "b1", check=False)
    assert r.returncode == 1 and "exists already" in r.stderr, r.stderr
    cluster.run("timeline", "branch", "b2", "--from", "b1")

    # One writable compute per timeline: main has the default compute.
    r = cluster.run("start", "compute", "w2", "--timeline", "main", check=False)
    assert r.returncode == 1 and "runs writable on timeline main already" in r.stderr, r.stderr
    r = cluster.run("start", "compute", "c1", "--timeline", "nosuch", check=False)
    assert r.returncode == 1 and "unknown timeline nosuch" in r.stderr, r.stderr

    cluster.run("start", "compute", "c1", "--timeline", "b1")
    r = cluster.run("start", "compute", "c1b", "--timeline", "b1", check=False)
    assert r.returncode == 1 and "compute c1 (pid" in r.stderr, r.stderr

    r = cluster.run("timeline", "delete", "b1", check=False)
    assert r.returncode == 1 and "timeline b1 has branches: b2" in r.stderr, r.stderr
    cluster.run("timeline", "delete", "b2")
    r = cluster.run("timeline", "delete", "b1", check=False)
    assert r.returncode == 1 and "compute c1 runs on timeline b1" in r.stderr, r.stderr
    r = cluster.run("timeline", "delete", "main", check=False)
    assert r.returncode == 1 and "cannot be deleted" in r.stderr, r.stderr
    cluster.run("stop", "compute", "c1")
    cluster.run("timeline", "delete", "b1")
    names = [t["name"] for t in json.loads(cluster.run("timeline", "list", "--json").stdout)
             ["timelines"]]
    assert names == ["main"], names
    assert [c["name"] for c in cluster.status()["computes"]] == ["compute"]
    r = cluster.run("stop", "compute", "c1", check=False)
    assert r.returncode == 1 and "no compute named c1" in r.stderr, r.stderr

    # restore = branch + compute, and says what it did.
    sql(main, "insert into t values (2)")
    out = cluster.run("restore", "--lsn", str(lsn), "--name", "r1").stdout
    assert "restored: timeline r1 branched from main at %s" % lsn in out, out
    connstr = re.search(r"compute r1: (host=.*)$", out, re.M).group(1)
    assert sql(connstr, "select x from t order by x") == [(1,)]

    # restore --time: the last commit at or before that time.
    when = sql(main, "select to_char(clock_timestamp() at time zone 'UTC', "
                     "'YYYY-MM-DD HH24:MI:SS.US') || '+00'")[0][0]
    time.sleep(0.2)
    sql(main, "insert into t values (3)")
    out = cluster.run("restore", "--time", when, "--name", "r2").stdout
    assert re.search(r"restore: %s resolved to LSN \S+: 20\d\d-" % re.escape(when), out), out
    connstr = re.search(r"compute r2: (host=.*)$", out, re.M).group(1)
    assert sql(connstr, "select x from t order by x") == [(1,), (2,)]


# A small schedule for a compute on a branch, in the order of the full
# schedule (later tests need earlier ones' tables and indexes): the tables
# the rest use (test_setup, create_misc), data types, DML, indexes built and
# used, user-defined aggregates, joins, transactions and VACUUM.  The full schedule runs
# in test_pg_regress.py on main's compute; STRATA_BRANCH_REGRESS=full runs it here, on
# the branch, with the same list of accepted differences (by hand: several minutes).
REGRESS_TESTS = ["test_setup", "boolean", "int4", "text", "insert", "create_misc",
                 "create_index", "create_aggregate", "select", "vacuum", "join", "aggregates", "transactions",
                 "btree_index", "update", "delete"]


# Its subject is PostgreSQL on a compute (as test_pg_regress.py): the release
# build's daemons, which the sanitized ones would slow several times over.
def test_pg_regress_on_branch(cluster):
    import test_pg_regress as regress
    if regress.PREFIX is None:
        pytest.skip("patched PostgreSQL not built")
    cluster.run("timeline", "branch", "rb")
    cluster.run("start", "compute", "rc", "--timeline", "rb")
    port = named_compute(cluster, "rc")["port"]
    out = make_shared_dir("strata-regress-branch-")
    try:
        started = time.monotonic()
        full = os.environ.get("STRATA_BRANCH_REGRESS") == "full"
        tests = ["--max-connections", "0"] if full else REGRESS_TESTS
        proc = regress.run_regress("127.0.0.1", port, "--outputdir", out, "--expected",
                                   regress.EXPECTED, "--timeout", "300" if not full else "1500",
                                   *tests, timeout=360 if not full else 1600)
        print(proc.stdout[-2000:])
        print("pg_regress (%s) on a branch: %.0f s" % (
            "the installcheck schedule" if full else "%d tests" % len(REGRESS_TESTS),
            time.monotonic() - started))
        detail = ""
        diffs = os.path.join(out, "regression.diffs")
        if proc.returncode != 0 and os.path.exists(diffs):
            with open(diffs, errors="replace") as f:
                detail = f.read()[:6000]
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr + detail
        if not full:
            assert "%d tests, 0 failed" % len(REGRESS_TESTS) in proc.stdout, proc.stdout[-1000:]
    finally:
        shutil.rmtree(out, ignore_errors=True)
