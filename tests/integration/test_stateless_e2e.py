"""The stateless compute end to end (issue #4; docs/design.md §6.6, §7 and §9).

Real processes through the `strata` CLI: three safekeepers, the pageserver
and a compute started from a basebackup with the strata smgr
(STRATA_COMPUTE_MODE=stateless), as `strata up` runs them.

- kill -9 of the compute in the middle of pgbench, with a ledger client
  recording every acknowledged commit; `strata start compute` makes a new
  compute on a new, empty data directory: every acknowledged commit is
  there, pgbench's balances add up, and amcheck (verify_heapam on every
  permanent heap relation, bt_index_parent_check with heapallindexed on every
  btree) finds nothing.
- kill -9 of the pageserver under load on a compute whose buffer cache is
  cold: reads wait for it; after `strata start pageserver` every query
  succeeds, pgbench reports no failed transaction, nothing acknowledged is
  lost.
- pgbench for STRATA_CHAIN_TEST_SECONDS (default 60) with image_threshold
  16, then a new compute reads every table: the pageserver's longest delta
  chain read (pageserver_read_chain_max) is <= threshold + slack, where
  slack = threshold (see CHAIN_SLACK).
- the compute's data directory holds no file of any permanent relation
  (base/, global/ and tablespaces walked, relation files matched against
  pg_relation_filenode of every relation of every database).
- the time from `strata start compute` to the first query answered is
  printed (not asserted: it is a benchmark figure, bench/stateless_tpcb.py).
"""

import os
import re
import subprocess
import threading
import time
import urllib.request

import psycopg
import pytest

from conftest import STOCK_PG_BINDIR, lsn_to_int, pid_alive, wait_until
from test_durability import Ledger, create_ledger

IMAGE_THRESHOLD = 16
# A page is queued for image generation when its deltas since its newest
# image reach the threshold; ingest waits (bounded) for the image of a page
# that reaches twice the threshold (the hard cap of pageserver/redo/imagegen.h), so
# no read replays more than 2 x threshold deltas: slack = threshold.  A missing
# or broken pushdown grows chains without bound (hundreds or thousands of
# deltas on the pgbench_branches pages after 60 s).
CHAIN_SLACK = IMAGE_THRESHOLD
CHAIN_TEST_SECONDS = int(os.environ.get("STRATA_CHAIN_TEST_SECONDS", "60"))

REL_FILE_RE = re.compile(r"^(t\d+_)?(\d+)(_(fsm|vm|init))?(\.\d+)?$")
# Files a compute's data directory may hold under base/, global/ and
# tablespaces besides relation files of unlogged and temporary relations.
ALLOWED_NON_RELATION = {"PG_VERSION", "pg_filenode.map", "pg_internal.init", "pg_control"}


@pytest.fixture
def stateless(cluster_dir):
    """`strata up` with a stateless compute and image_threshold 16."""
    cluster_dir.env["STRATA_COMPUTE_MODE"] = "stateless"
    cluster_dir.env["PAGESERVER_IMAGE_THRESHOLD"] = str(IMAGE_THRESHOLD)
    cluster_dir.up()
    assert_stateless(cluster_dir)
    yield cluster_dir


def assert_stateless(cluster):
    ps = cluster.sql("show strata.pageserver")[0][0]
    assert ps.endswith(":%d" % cluster.status()["pageserver"]["pg_port"]), ps
    assert cluster.sql("show full_page_writes") == [("off",)]


def pgbench(cluster, *args, timeout=600):
    cmd = [os.path.join(STOCK_PG_BINDIR, "pgbench")] + list(args) + [cluster.connstr]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, "pgbench %s failed:\n%s\n%s" % (args, proc.stdout, proc.stderr)
    return proc.stdout


def pgbench_start(cluster, seconds, clients=4, extra=()):
    cmd = [os.path.join(STOCK_PG_BINDIR, "pgbench"), "-c", str(clients), "-j", "2", "-T",
           str(seconds), "-P", "5"] + list(extra) + [cluster.connstr]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def pgbench_result(proc, timeout):
    out, err = proc.communicate(timeout=timeout)
    processed = re.search(r"number of transactions actually processed: (\d+)", out)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    return proc.returncode, int(processed.group(1)) if processed else 0, \
        int(failed.group(1)) if failed else 0, out + err


def restart_compute(cluster, kill=True):
    """kill -9 the compute (unless it is gone already) and start a new one;
    returns seconds from invoking `strata start compute` to the first query
    answered."""
    if kill:
        cluster.stop("compute", immediate=True)
    t0 = time.monotonic()
    cluster.start("compute")
    connstr = cluster.connstr
    while True:
        try:
            with psycopg.connect(connstr, autocommit=True, connect_timeout=5) as conn:
                if conn.execute("select 1").fetchone() == (1,):
                    return time.monotonic() - t0
        except psycopg.OperationalError:
            if time.monotonic() - t0 > 120:
                raise
            time.sleep(0.02)


def check_balances(cluster):
    """TPC-B invariant: every committed transaction adds the same delta to
    one account, teller, branch and history row."""
    rows = cluster.sql("select (select sum(abalance) from pgbench_accounts), "
                       "(select sum(tbalance) from pgbench_tellers), "
                       "(select sum(bbalance) from pgbench_branches), "
                       "(select coalesce(sum(delta), 0) from pgbench_history)")
    a, t, b, h = rows[0]
    assert a == t == b == h, "balances disagree: accounts %s tellers %s branches %s history %s" % (
        a, t, b, h)


def amcheck(cluster):
    """verify_heapam on every permanent table, matview and TOAST table;
    bt_index_parent_check(heapallindexed) on every permanent btree index.
    Returns the number of relations checked."""
    checked = 0
    with cluster.connect() as conn:
        conn.execute("create extension if not exists amcheck")
        heaps = conn.execute(
            "select c.oid::regclass::text, c.oid from pg_class c join pg_am a on a.oid = c.relam "
            "where c.relkind in ('r', 'm', 't') and c.relpersistence = 'p' "
            "and a.amname = 'heap'").fetchall()
        for name, oid in heaps:
            bad = conn.execute("select blkno, offnum, attnum, msg from verify_heapam(%s, "
                               "check_toast => true)", (oid,)).fetchall()
            assert not bad, "verify_heapam(%s): %s" % (name, bad[:5])
            checked += 1
        indexes = conn.execute(
            "select c.oid::regclass::text, c.oid from pg_class c join pg_am a on a.oid = c.relam "
            "join pg_index i on i.indexrelid = c.oid where c.relkind = 'i' "
            "and c.relpersistence = 'p' and a.amname = 'btree' and i.indisvalid").fetchall()
        for name, oid in indexes:
            try:
                conn.execute("select bt_index_parent_check(%s, true)", (oid,))
            except psycopg.Error as e:
                raise AssertionError("bt_index_parent_check(%s): %s" % (name, e)) from e
            checked += 1
    assert len(heaps) > 50 and len(indexes) > 100, (len(heaps), len(indexes))
    return checked


def test_kill9_compute_mid_pgbench_new_compute_has_every_commit(stateless):
    cluster = stateless
    create_ledger(cluster)
    pgbench(cluster, "-i", "-q", "-s", "2")
    old_datadir = cluster.status()["compute"]["datadir"]
    marker = os.path.join(old_datadir, "s7-old-compute-marker")
    with open(marker, "w") as f:
        f.write("the previous compute's directory\n")

    bench = pgbench_start(cluster, seconds=60)
    ledger = Ledger(cluster.connstr)
    ledger.start()
    try:
        wait_until(lambda: len(ledger.acked) > 200 or ledger.error, 90,
                   "the ledger to commit 200 rows")
        assert ledger.error is None, ledger.error
        wait_until(lambda: cluster.sql("select count(*) from pgbench_history")[0][0] > 200, 60,
                   "pgbench to commit 200 transactions")
        old_pid = cluster.status()["compute"]["pid"]
        cluster.stop("compute", immediate=True)  # SIGKILL, mid-transaction
        assert not pid_alive(old_pid)
    finally:
        ledger.finish()
        if bench.poll() is None:
            bench.kill()
        bench.communicate()
    acked = list(ledger.acked)
    assert len(acked) > 200

    elapsed = restart_compute(cluster, kill=False)
    print("strata start compute -> first query after kill -9: %.3f s" % elapsed)
    assert_stateless(cluster)
    assert not os.path.exists(marker), "the new compute reused the old data directory"

    present = {row[0] for row in cluster.sql("select id from ledger")}
    missing = [row for row, _xid in acked if row not in present]
    assert not missing, "%d of %d acknowledged commits lost, e.g. %s" % (
        len(missing), len(acked), missing[:5])
    check_balances(cluster)
    checked = amcheck(cluster)
    print("amcheck: %d relations clean" % checked)
    # The new compute takes writes, and pgbench runs on it.
    cluster.sql("insert into ledger (payload) values ('after restart')")
    pgbench(cluster, "-c", "2", "-t", "50", "-n")
    check_balances(cluster)


def end_wal_at_page_boundary(conn):
    """Emits non-transactional logical messages until the last record ends
    exactly at a WAL page boundary P (the insert position then reads P + 24,
    after the next page's header); returns P, or None when a background
    record got in the way."""
    def insert():
        return lsn_to_int(conn.execute("select pg_current_wal_insert_lsn()").fetchone()[0])

    def emit(n):
        conn.execute("select pg_logical_emit_message(false, 'strata-test', repeat('x', %s))",
                     (n,))

    before = insert()
    emit(600)  # a long data header (payload > 255): record size = overhead + payload, aligned
    after = insert()
    if after // 8192 != before // 8192:
        return None
    overhead = after - before - 600
    for _ in range(20):
        pos = insert()
        if pos % 8192 == 24:
            return pos - 24
        left = 8192 - pos % 8192
        emit(left - overhead if 300 <= left - overhead <= 4000 else 2000)
    return None


def test_compute_restarts_when_its_wal_ends_at_a_page_boundary(stateless):
    """A compute whose WAL ends exactly at a page boundary P starts at P;
    Postgres names its insert position P + 24, after the page header, and
    pages requested not modified since P + 24 must not wait for WAL that a
    quiet compute never writes (they waited out the 60 s timeout, and so did
    the walproposer's own walsender, until this was fixed)."""
    cluster = stateless
    for attempt in range(3):
        with psycopg.connect(cluster.connstr, autocommit=True) as conn:
            p = end_wal_at_page_boundary(conn)
            if p is None:
                continue
            wait_until(lambda: lsn_to_int(conn.execute(
                "select coalesce(max(flush_lsn), '0/0') from pg_stat_replication "
                "where application_name = 'walproposer'").fetchone()[0]) >= p, 30,
                "the safekeepers to commit the WAL up to the page boundary")
        cluster.stop("compute", immediate=True)
        t0 = time.monotonic()
        out = cluster.start("compute").stdout
        start = re.search(r"sync-safekeepers: start at (\S+)", out).group(1)
        assert cluster.sql("select 1") == [(1,)]
        elapsed = time.monotonic() - t0
        if lsn_to_int(start) != p:
            continue  # a background record came after P: try again
        assert elapsed < 55, "the compute at %s took %.1f s to answer" % (start, elapsed)
        cluster.sql("create table after_boundary as select generate_series(1, 100) x")
        assert cluster.sql("select count(*) from after_boundary") == [(100,)]
        return
    pytest.fail("the WAL did not end at a page boundary in 3 attempts")


def test_kill9_pageserver_under_load_reads_wait_and_succeed(stateless):
    cluster = stateless
    create_ledger(cluster)
    pgbench(cluster, "-i", "-q", "-s", "4")  # pgbench_accounts ~ 50 MB
    # A new compute: an empty buffer cache, so pgbench reads its pages from
    # the pageserver while it runs.
    restart_compute(cluster)
    sums_before = cluster.sql("select count(*) from pgbench_branches")[0][0]
    assert sums_before == 4

    bench = pgbench_start(cluster, seconds=45)
    ledger = Ledger(cluster.connstr)
    ledger.start()
    scan = {}

    def full_scan():
        try:
            with psycopg.connect(cluster.connstr, autocommit=True, connect_timeout=10) as conn:
                scan["count"] = conn.execute("select count(*) from pgbench_accounts").fetchone()[0]
        except Exception as e:  # reported below
            scan["error"] = e

    try:
        wait_until(lambda: len(ledger.acked) > 50 or ledger.error, 60, "the ledger to commit")
        ps_pid = cluster.status()["pageserver"]["pid"]
        cluster.stop("pageserver", immediate=True)
        assert not pid_alive(ps_pid)
        killed = time.monotonic()
        scanner = threading.Thread(target=full_scan, daemon=True)
        scanner.start()
        time.sleep(5)
        # Reads of uncached pages cannot be answered now: the scan waits.
        assert scanner.is_alive() or "error" in scan, "a full scan finished without the pageserver"
        assert "error" not in scan, scan
        cluster.start("pageserver")
        print("pageserver down for %.1f s" % (time.monotonic() - killed))
        scanner.join(180)
        assert not scanner.is_alive(), "the scan did not finish after the pageserver came back"
        assert scan.get("count") == 400000, scan
        acked_after = len(ledger.acked)
        wait_until(lambda: len(ledger.acked) > acked_after + 50 or ledger.error, 60,
                   "the ledger to go on committing after the restart")
    finally:
        ledger.finish(60)
        rc, processed, failed, out = pgbench_result(bench, timeout=240)
    assert ledger.error is None, ledger.error
    assert rc == 0 and failed == 0, out
    assert processed > 0
    present = {row[0] for row in cluster.sql("select id from ledger")}
    missing = [row for row, _xid in ledger.acked if row not in present]
    assert not missing, "%d acknowledged commits lost: %s" % (len(missing), missing[:5])
    check_balances(cluster)
    # The restarted pageserver follows the compute's WAL again.
    flush = lsn_to_int(cluster.sql("select pg_current_wal_flush_lsn()::text")[0][0])
    wait_until(lambda: lsn_to_int(cluster.status()["pageserver"]["last_record_lsn"] or "0/0")
               >= flush, 60, "the restarted pageserver to ingest up to the compute's flush LSN")


def metrics(cluster):
    port = cluster.status()["pageserver"]["http_port"]
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.read().decode()


def metric_values(text, name):
    """{labels: value} of every sample of metric name (exact name)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^%s(\{[^}]*\})?\s+(\S+)$" % re.escape(name), line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


def test_longest_chain_read_stays_within_threshold(stateless):
    cluster = stateless
    pgbench(cluster, "-i", "-q", "-s", "2")
    out = pgbench(cluster, "-c", "4", "-j", "2", "-T", str(CHAIN_TEST_SECONDS), "-n",
                  timeout=CHAIN_TEST_SECONDS + 300)
    processed = int(re.search(r"number of transactions actually processed: (\d+)",
                              out).group(1))
    # A new compute has nothing cached: every page below is read from the
    # pageserver at the latest LSN, the hot branch and teller pages included.
    restart_compute(cluster)
    check_balances(cluster)
    cluster.sql("select count(*) from pgbench_history")
    text = metrics(cluster)
    chain_max = metric_values(text, "pageserver_read_chain_max")
    assert chain_max, "pageserver_read_chain_max is not exported"
    longest = max(chain_max.values())
    reads = sum(metric_values(text, "pageserver_read_chain_length_count").values())
    images = sum(v for k, v in metric_values(text, "pageserver_image_written_total").items()) \
        if metric_values(text, "pageserver_image_written_total") else None
    print("pgbench %d s: %d transactions; %d reads, longest chain read %d (threshold %d + "
          "slack %d); images written %s" % (CHAIN_TEST_SECONDS, processed, reads, longest,
                                             IMAGE_THRESHOLD, CHAIN_SLACK, images))
    assert reads > 0, "no read recorded in pageserver_read_chain_length"
    # Each of the 2 branch rows was updated by about half the transactions:
    # without images their pages' chains would be that long.
    assert processed > 4 * (IMAGE_THRESHOLD + CHAIN_SLACK), processed
    assert longest <= IMAGE_THRESHOLD + CHAIN_SLACK, (
        "longest chain read %d > threshold %d + slack %d" % (longest, IMAGE_THRESHOLD,
                                                              CHAIN_SLACK))


def relation_files(root):
    """[(path relative to root, database directory, name)] of every file under
    base/, global/ and pg_tblspc/ (tablespace symlinks followed)."""
    found = []
    for top in ("base", "global", "pg_tblspc"):
        start = os.path.join(root, top)
        for dirpath, _dirs, files in os.walk(start, followlinks=True):
            for name in files:
                found.append((os.path.relpath(os.path.join(dirpath, name), root),
                              os.path.basename(dirpath), name))
    return found


def test_compute_datadir_holds_no_permanent_relation_file(stateless):
    cluster = stateless
    with cluster.connect() as conn:
        conn.execute("create table perm (id int primary key, t text)")
        conn.execute("insert into perm select g, repeat('x', 200) from generate_series(1, 20000) g")
        conn.execute("create index perm_t on perm (t)")
        conn.execute("create unlogged table unl (id int primary key, t text)")
        conn.execute("insert into unl select g, 'u' from generate_series(1, 5000) g")
        conn.execute("create materialized view mv as select id from perm where id < 100")
        conn.execute("set allow_in_place_tablespaces = on")
        conn.execute("create tablespace ts location ''")
        conn.execute("create table in_ts (x int) tablespace ts")
        conn.execute("insert into in_ts select generate_series(1, 1000)")
        conn.execute("create database second")
        conn.execute("vacuum analyze")
        conn.execute("checkpoint")
    with psycopg.connect(cluster.connstr.replace("dbname=postgres", "dbname=second"),
                         autocommit=True) as conn:
        conn.execute("create table other (x int)")
        conn.execute("insert into other select generate_series(1, 1000)")
        conn.execute("checkpoint")

    # Relation files a compute may hold: those of unlogged and temporary
    # relations, by database oid -> relfilenode -> relpersistence.
    persistence = {}
    dbs = cluster.sql("select oid, datname, datallowconn from pg_database")
    for db_oid, datname, allowconn in dbs:
        if not allowconn:
            continue
        with psycopg.connect(cluster.connstr.replace("dbname=postgres", "dbname=%s" % datname),
                             autocommit=True) as conn:
            for node, pers, shared in conn.execute(
                    "select pg_relation_filenode(c.oid), c.relpersistence, c.relisshared "
                    "from pg_class c where pg_relation_filenode(c.oid) is not null"):
                key = "global" if shared else str(db_oid)
                persistence.setdefault(key, {})[str(node)] = pers
    datadir = cluster.status()["compute"]["datadir"]
    files = relation_files(datadir)
    assert any(name == "PG_VERSION" for _p, _d, name in files), files
    bad, unlogged_seen = [], 0
    for path, dbdir, name in files:
        if name in ALLOWED_NON_RELATION or "pgsql_tmp" in path:
            continue
        m = REL_FILE_RE.match(name)
        if not m:
            bad.append((path, "not a relation file name"))
            continue
        if m.group(1):
            continue  # t<backend>_<node>: a temporary relation, local by design
        node = m.group(2)
        kind = persistence.get("global" if path.startswith("global/") else dbdir, {}).get(node)
        if kind == "u":
            unlogged_seen += 1
            continue
        bad.append((path, "relpersistence %r" % kind if kind else "no relation of ours"))
    assert not bad, "the compute's data directory holds relation files: %s" % bad[:20]
    assert unlogged_seen >= 2, "no file of the unlogged table (its init and main forks)"
    # The permanent data is there all the same, read through the pageserver.
    assert cluster.sql("select count(*), sum(id) from perm") == [(20000, 200010000)]
    assert cluster.sql("select count(*) from in_ts") == [(1000,)]
    assert cluster.sql("select count(*) from unl") == [(5000,)]


def test_start_compute_time_to_first_query(stateless):
    cluster = stateless
    cluster.sql("create table t (x int)")
    cluster.sql("insert into t select generate_series(1, 10000)")
    times = []
    for _ in range(3):
        times.append(restart_compute(cluster))
        assert cluster.sql("select count(*) from t") == [(10000,)]
    print("strata start compute -> first query answered: %s s" % ", ".join(
        "%.3f" % t for t in times))
