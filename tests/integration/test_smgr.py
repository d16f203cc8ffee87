"""
The compute's smgr end to end (docs/design.md §7.2): a compute running the patched
PostgreSQL with strata.pageserver set and tiny shared_buffers, so pages
round-trip through the pageserver.

- a pgbench run gives consistent results, also after a compute restart
  (empty buffers), and its tables have no local file at all;
- temp and unlogged tables work and live in local files;
- a pageserver killed and restarted under a running query: the query waits
  and succeeds, and the reconnect is counted.
"""
import os
import subprocess
import threading
import time

import pytest

from conftest import as_pg_user_kwargs, daemon_build, pid_alive
import smgr_harness
from smgr_harness import create_evict_table, running_cluster

# The subject is the compute (the extension and PostgreSQL on it): the release
# daemons (conftest.py).
pytestmark = pytest.mark.release_daemons


@pytest.fixture
def smgr_cluster(request):
    build = smgr_harness.CLI_BUILD or daemon_build(request.node)
    with running_cluster(request, os.path.join(build, "bin", "strata-pageserver")) as c:
        yield c


def pgbench(c, *args, timeout=300):
    cmd = [c.pg_program("pgbench"), "-h", "127.0.0.1", "-p", str(c.status()["compute"]["port"]),
           "-U", "postgres", *args, "postgres"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          **as_pg_user_kwargs())
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout


def check_pgbench_consistent(c, scale):
    with c.connect() as conn:
        (n,), = conn.execute("select count(*) from pgbench_accounts").fetchall()
        assert n == scale * 100000
        (a, h), = conn.execute("select (select sum(abalance) from pgbench_accounts), "
                               "(select coalesce(sum(delta), 0) from pgbench_history)").fetchall()
        (b,), = conn.execute("select sum(bbalance) from pgbench_branches").fetchall()
        (t,), = conn.execute("select sum(tbalance) from pgbench_tellers").fetchall()
        assert a == h == b == t
        conn.execute("create extension if not exists amcheck")
        conn.execute("select bt_index_check('pgbench_accounts_pkey', true)")
        return h


# The GetPage wait histogram's counters (compute/extension/README.md).
WAIT_BUCKETS = (["getpage_wait_lt_16us"] + [f"getpage_wait_lt_{1 << k}us" for k in range(5, 21)]
                + ["getpage_wait_ge_1048576us"])


def check_getpage_wait_counters(stats):
    """Every page read that went to the pageserver was timed: the wait
    counters are there, the histogram counts each wait once, and the mean
    wait is a plausible loopback round trip."""
    for name in ["getpage_wait_count", "getpage_wait_us"] + WAIT_BUCKETS:
        assert name in stats, (name, sorted(stats))
    waits = stats["getpage_wait_count"]
    # Each timed read waited for a request of its own or a prefetch.
    assert 0 < waits <= stats["getpage"], stats
    assert sum(stats[b] for b in WAIT_BUCKETS) == waits, stats
    assert 0 < stats["getpage_wait_us"] / waits < 1e6, stats


def test_pgbench_tiny_shared_buffers(smgr_cluster):
    c = smgr_cluster
    c.make_stateless(shared_buffers="1MB")
    pgbench(c, "-i", "-s", "2", "-q")
    pgbench(c, "-c", "4", "-j", "2", "-T", "15")
    total = check_pgbench_consistent(c, 2)
    stats = c.stats()
    assert stats["getpage"] > 1000, stats
    check_getpage_wait_counters(stats)
    # Nothing of the permanent tables is on local disk: they were created
    # under the smgr, whose writes send nothing anywhere.
    for rel in ("pgbench_accounts", "pgbench_accounts_pkey", "pgbench_history"):
        path = c.local_file(rel)
        assert not os.path.exists(path) or os.path.getsize(path) == 0, path
    # A restarted compute (empty buffers) reads the same from the pageserver.
    c.stop("compute")
    c.start("compute")
    assert check_pgbench_consistent(c, 2) == total


def test_sequential_scan_reads_ahead(smgr_cluster):
    """A sequential scan asks for the pages ahead of it (strata.readahead,
    compute/extension/smgr.c read_ahead): its reads find their answers in
    the prefetch slots.  With strata.readahead = 0 the same scan asks for
    nothing ahead and every read waits for a round trip of its own."""
    c = smgr_cluster
    c.make_stateless(shared_buffers="1MB")
    with c.connect() as conn:
        create_evict_table(conn, rows=60000)
        (pages,), = conn.execute("select pg_relation_size('strata_evict_big') / 8192").fetchall()
    c.stop("compute")
    c.start("compute")  # empty buffers: every page comes from the pageserver
    query = "select count(*), sum(id::bigint * length(pad)) from strata_evict_big"
    results, deltas, seconds = {}, {}, {}
    for ra in (0, 16):
        before = c.stats()
        with c.connect() as conn:
            conn.execute("set strata.readahead = %d" % ra)
            conn.execute("set enable_indexscan = off")
            conn.execute("set enable_bitmapscan = off")
            t0 = time.monotonic()
            results[ra] = conn.execute(query).fetchall()
            seconds[ra] = time.monotonic() - t0
        after = c.stats()
        deltas[ra] = {k: after[k] - before.get(k, 0) for k in
                      ("getpage", "readahead", "prefetch_sent", "prefetch_hit",
                       "prefetch_discard", "logged_zero_lsn", "logged_relog", "wal_flush")}
    print("pages %d; readahead off: %.2f s %s; on: %.2f s %s" % (
        pages, seconds[0], deltas[0], seconds[16], deltas[16]))
    assert results[0] == results[16] and results[0][0][0] == 60000, results
    # The 1 MB of shared_buffers holds almost nothing of a 16 MB table: each
    # scan reads nearly every page from the pageserver.
    assert deltas[0]["getpage"] > pages * 0.9, deltas
    # The counters are the server's: the stats queries' own catalog reads may
    # read ahead a page or two.
    assert deltas[0]["readahead"] <= pages * 0.01, deltas
    assert deltas[0]["prefetch_hit"] <= pages * 0.01, deltas
    # Measured: 86% of the reads answered by a page asked for ahead; the
    # rest were asked again (prefetch_discard: the page's last-written LSN
    # had moved past the request's) or were read before their answer came.
    assert deltas[16]["readahead"] > pages * 0.8, deltas
    assert deltas[16]["prefetch_hit"] > pages * 0.6, deltas


def test_temp_and_unlogged_are_local(smgr_cluster):
    c = smgr_cluster
    c.make_stateless(shared_buffers="1MB")
    with c.connect() as conn:
        create_evict_table(conn)
        conn.execute("create unlogged table u (id int primary key, v text)")
        conn.execute("insert into u select g, md5(g::text) from generate_series(1, 20000) g")
        conn.execute("create temp table tt (id int primary key, v text)")
        conn.execute("insert into tt select g, md5(g::text) from generate_series(1, 20000) g")
        c.evict(conn)
        conn.execute("checkpoint")
        for rel in ("u", "u_pkey", "tt", "tt_pkey"):
            (n,), = conn.execute("select count(*) from %s" % rel.replace("_pkey", "")).fetchall()
            assert n == 20000
            path = c.local_file(rel, conn)
            # 20000 rows: ~170 heap pages, ~55 index pages, all in local files.
            assert os.path.getsize(path) > 40 * 8192, (rel, path)
        (s,), = conn.execute("select sum(id) from u where v = md5(id::text)").fetchall()
        assert s == 20000 * 20001 // 2
        (s,), = conn.execute("select sum(id) from tt where v = md5(id::text)").fetchall()
        assert s == 20000 * 20001 // 2
        conn.execute("create extension if not exists amcheck")
        conn.execute("select bt_index_check('u_pkey', true)")
    stats = c.stats()
    assert stats["getpage"] > 0


def test_pageserver_restart_under_query(smgr_cluster):
    c = smgr_cluster
    c.make_stateless(shared_buffers="1MB", extra={"strata.prefetch_depth": "0"})
    with c.connect() as conn:
        create_evict_table(conn, rows=120000)
        (expect,), = conn.execute("select sum(id::bigint * length(pad)) from strata_evict_big").fetchall()
    c.stop("compute")
    c.start("compute")  # empty buffers: everything comes from the pageserver
    result = {}

    def run():
        try:
            with c.connect() as conn:
                conn.execute("set enable_seqscan = off")
                conn.execute("set enable_bitmapscan = off")
                (v,), = conn.execute("select sum(id::bigint * length(pad)) from strata_evict_big "
                                     "where id > 0 and pg_sleep(0.00003) is not null").fetchall()
                result["value"] = v
        except Exception as e:  # reported below
            result["error"] = e

    th = threading.Thread(target=run)
    th.start()
    time.sleep(2.0)
    assert th.is_alive(), result
    pid = c.status()["pageserver"]["pid"]
    os.kill(pid, 9)
    time.sleep(1.5)
    c.start("pageserver")
    th.join(180)
    assert not th.is_alive()
    assert "error" not in result, result
    assert result["value"] == expect
    assert c.stats()["reconnect"] >= 1
