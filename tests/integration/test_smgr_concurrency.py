"""
The stateless compute's smgr when several backends share its pages
(docs/design.md §7.2-§7.4): what the parallel pg_regress schedule found.

- sequence: nextval changes a sequence's page without WAL for 31 of every 32
  values (the WAL pre-logs 32 ahead).  A page evicted by ANOTHER backend and
  read back from the pageserver jumped to the pre-logged value (3 -> 34:
  pg_regress sequence, identity, copy2, truncate, cluster).  The evicted
  page is now WAL-logged as it is, with log_cnt 0 so that the next nextval
  WAL-logs again; the test also kills the compute and checks that no value
  is handed out twice.
- unlogged index: an index's pages are written before its INIT fork exists,
  so a process that evicts one of them during the build (another backend, the
  checkpointer) saw the relation as permanent and kept that answer: after
  the build it kept writing the index's pages to the pageserver instead of
  the local file, and the building backend read stale or zero pages back
  (pg_regress gist: "index contains unexpected zero page").  A persistence
  generation in shared memory now makes every process re-check.
- GIN build: no WAL until its end; a page evicted twice during the build lost
  the changes made after it was read back from its first eviction image
  (its LSN is that image's, so no reason to log it was seen).  Such a page is
  now logged again (logged_relog).
- SP-GiST build: the same, and also pages the checkpointer wrote out during
  the build (it logs a copy and leaves the buffer's older LSN): a dirty page
  whose LSN is not newer than its last image here is logged again.
"""
import threading
import time

import pytest

from smgr_harness import create_evict_table, running_cluster

# The subject is the compute (the extension and PostgreSQL on it): the release
# daemons (conftest.py).
pytestmark = pytest.mark.release_daemons


@pytest.fixture
def conc_cluster(request):
    with running_cluster(request) as c:
        yield c


def test_sequence_evicted_by_other_backend(conc_cluster):
    c = conc_cluster
    c.make_stateless(shared_buffers="1MB")
    with c.connect(connect_timeout=120) as a, c.connect(connect_timeout=120) as b:
        create_evict_table(b)
        a.execute("create sequence s")
        a.execute("create table ids (v bigint)")
        got = [a.execute("select nextval('s')").fetchone()[0] for _ in range(3)]
        assert got == [1, 2, 3]
        c.evict(b)  # another backend pushes the sequence's page out
        # What stock PostgreSQL answers; the WAL alone says 34.
        (v,), = a.execute("select nextval('s')").fetchall()
        assert v == 4
        assert c.stats()["logged_sequence"] > 0
        # Values handed out after the logged image, then evicted again and
        # handed out more: all must stay unique across a crash.
        for _ in range(2):
            a.execute("insert into ids select nextval('s') from generate_series(1, 5)")
            c.evict(b)
        a.execute("insert into ids select nextval('s') from generate_series(1, 5)")
        (last,), = a.execute("select max(v) from ids").fetchall()
        assert last == 19
    c.stop("compute", immediate=True)
    c.start("compute")  # a new compute on an empty data directory
    with c.connect(connect_timeout=120) as a:
        (v,), = a.execute("select nextval('s')").fetchall()
        assert v > last, "nextval handed out %d again after a crash (last was %d)" % (v, last)
        (dups,), = a.execute("select count(*) - count(distinct v) from ids").fetchall()
        assert dups == 0


def churn(c, stop, errors):
    """Another backend that keeps evicting pages (and so decides, for each
    page it writes out, where the page's relation lives)."""
    try:
        with c.connect(connect_timeout=120) as conn:
            while not stop.is_set():
                c.evict(conn)
                conn.execute("checkpoint")
    except Exception as e:  # reported by the test
        errors.append(e)


INDEX_COUNT = ("select count(*) from u where p <@ box(point(0, 0), point(%d, %d))")


def counts(conn, n):
    conn.execute("set enable_seqscan = off")
    conn.execute("set enable_bitmapscan = off")
    plan = "\n".join(r[0] for r in conn.execute("explain " + INDEX_COUNT % (n, n)).fetchall())
    assert "u_gist" in plan, plan
    (by_index,), = conn.execute(INDEX_COUNT % (n, n)).fetchall()
    conn.execute("reset enable_seqscan")
    conn.execute("reset enable_bitmapscan")
    conn.execute("set enable_indexscan = off")
    conn.execute("set enable_bitmapscan = off")
    (by_heap,), = conn.execute(INDEX_COUNT % (n, n)).fetchall()
    conn.execute("reset enable_indexscan")
    conn.execute("reset enable_bitmapscan")
    return by_index, by_heap


def test_unlogged_index_built_while_others_evict(conc_cluster):
    c = conc_cluster
    c.make_stateless(shared_buffers="1MB")
    with c.connect(connect_timeout=120) as setup:
        create_evict_table(setup)
    stop = threading.Event()
    errors = []
    with c.connect(connect_timeout=120) as a:
        a.execute("create unlogged table u (id int, p point)")
        a.execute("insert into u select g, point(g % 300, g / 300) "
                  "from generate_series(1, 60000) g")
        th = threading.Thread(target=churn, args=(c, stop, errors))
        th.start()
        try:
            time.sleep(1)  # the churn is running
            # buffering = on: the build goes through shared buffers, where
            # the other backend and the checkpointer write its pages out.
            a.execute("create index u_gist on u using gist (p) with (buffering = on)")
            # Pages the others saw during the build change now ...
            a.execute("insert into u select g, point(g % 300, g / 300) "
                      "from generate_series(60001, 90000) g")
            a.execute("delete from u where id % 7 = 0")
            time.sleep(1)
        finally:
            stop.set()
            th.join(300)
        assert not errors, errors
        # ... are written out by them, and read back here.
        with c.connect(connect_timeout=120) as b:
            c.evict(b)
            b.execute("checkpoint")
        c.evict(a)
        by_index, by_heap = counts(a, 400)
        assert by_heap == 90000 - 90000 // 7
        assert by_index == by_heap
    with c.connect(connect_timeout=120) as b:
        # Another backend agrees, and the index is still local.
        by_index, by_heap = counts(b, 400)
        assert by_index == by_heap == 90000 - 90000 // 7


GIN_COUNT = "select count(*) from gt where v @> array[5] or v @> array[%d]"


def test_gin_build_pages_evicted_twice(conc_cluster):
    """A GIN build writes no WAL until log_newpage_range at its end.  A page
    it evicted (logged as an image: LSN 0) and read back carries the image's
    LSN; changed again and evicted again it must be logged again, or the
    changes are lost (the index misses two thirds of its entries)."""
    c = conc_cluster
    c.make_stateless(shared_buffers="1MB")
    with c.connect(connect_timeout=120) as a:
        a.execute("create table gt (id int, v int[])")
        a.execute("insert into gt select g, array[g % 977, g % 13, g / 50] "
                  "from generate_series(1, 300000) g")
        a.execute("set maintenance_work_mem = '1MB'")  # many flushes into the index
        a.execute("create index gt_idx on gt using gin (v)")
        for k in (7, 100, 980, 3000):
            a.execute("set enable_seqscan = off")
            (by_index,), = a.execute(GIN_COUNT % k).fetchall()
            a.execute("reset enable_seqscan")
            a.execute("set enable_bitmapscan = off")
            (by_heap,), = a.execute(GIN_COUNT % k).fetchall()
            a.execute("reset enable_bitmapscan")
            assert by_index == by_heap, (k, by_index, by_heap)
    assert c.stats()["logged_relog"] > 0


SPG_COUNT = "select count(*) from sp where p <@ box(point(100, 10), point(600, 200))"


def test_spgist_build_pages_written_by_checkpoint(conc_cluster):
    """An SP-GiST build (no WAL until its end) much larger than shared
    buffers: pages are evicted, read back and evicted again, and the
    checkpointer writes pages out (it logs a copy; the buffer keeps its
    older LSN) while the build goes on changing them.  Every such later change
    must reach the WAL ("unexpected SPGiST tuple state: 3", wrong counts:
    pg_regress box in parallel mode)."""
    c = conc_cluster
    c.make_stateless(shared_buffers="1MB")
    with c.connect(connect_timeout=120) as a:
        a.execute("create table sp (id int, p point)")
        a.execute("insert into sp select g, point(g % 1000, g / 1000) "
                  "from generate_series(1, 200000) g")
        a.execute("create index sp_idx on sp using spgist (p)")
        a.execute("set enable_seqscan = off")
        (by_index,), = a.execute(SPG_COUNT).fetchall()
        a.execute("reset enable_seqscan")
        a.execute("set enable_bitmapscan = off")
        a.execute("set enable_indexscan = off")
        (by_heap,), = a.execute(SPG_COUNT).fetchall()
        assert by_heap == 501 * 190  # x 100..600, y 10..199
        assert by_index == by_heap
