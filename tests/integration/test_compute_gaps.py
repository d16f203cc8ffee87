"""
The three gaps of docs/design.md §7.4: state a page carries that the WAL does not.
Each test runs with strata.log_evicted_pages on (must behave like stock
PostgreSQL) and off (must show the state lost -- proving the test can fail).

- cmin/cmax: a transaction updates its own rows while a cursor declared
  before the update is open; the pages are evicted; the cursor must still see
  the old versions (redo would set every command id to FirstCommandId).
- FSM: VACUUM fills the free space map (never WAL-logged); after eviction, a
  checkpoint and a new compute the map must still show the free space.
- btree cycle id: a page split while a VACUUM of the index is in progress
  (the vacuum held on a pinned leaf page) sets btpo_cycleid; after eviction
  the page must still carry it.
"""
import threading
import time

import psycopg
import pytest

import smgr_harness
from smgr_harness import create_evict_table, running_cluster

# The subject is the compute (the extension and PostgreSQL on it): the release
# daemons (conftest.py).
pytestmark = pytest.mark.release_daemons


@pytest.fixture
def gap_cluster(request):
    with running_cluster(request) as c:
        yield c


@pytest.mark.parametrize("log_evicted", [True, False], ids=["on", "off"])
def test_gap_command_ids(gap_cluster, log_evicted):
    c = gap_cluster
    c.make_stateless(shared_buffers="1MB", log_evicted=log_evicted)
    with c.connect() as setup:
        create_evict_table(setup)
        setup.execute("create table t (id int, v int)")
    with c.connect(autocommit=False) as conn:
        conn.execute("insert into t select g, 0 from generate_series(1, 5000) g")
        conn.execute("declare cur cursor for select sum(v), count(*) from t")
        conn.execute("update t set v = 1")
        c.evict(conn)
        (s, n), = conn.execute("fetch all from cur").fetchall()
        conn.rollback()
    stats = c.stats()
    if log_evicted:
        assert (s, n) == (0, 5000)  # what stock PostgreSQL answers
        assert stats["logged_inprogress"] > 0, stats
    else:
        assert (s, n) != (0, 5000), "cmin/cmax survived without eviction logging?"


@pytest.mark.parametrize("log_evicted", [True, False], ids=["on", "off"])
def test_gap_fsm(gap_cluster, log_evicted):
    c = gap_cluster
    c.make_stateless(shared_buffers="1MB", log_evicted=log_evicted)
    with c.connect() as conn:
        create_evict_table(conn)
        conn.execute("create extension pageinspect")
        conn.execute(NBLOCKS_FN)
        conn.execute("create table f (id int, pad text)")
        conn.execute("insert into f select g, repeat('y', 500) from generate_series(1, 20000) g")
        conn.execute("delete from f where id % 2 = 0")
        conn.execute("vacuum f")
        (before,), = conn.execute(FSM_SUM).fetchall()
        assert before > 1000
        c.evict(conn)
        conn.execute("checkpoint")
    logged = c.stats()["logged_fsm_vm"]  # counters live in the compute's shared memory
    c.stop("compute")
    c.start("compute")  # a new compute on an empty data directory
    with c.connect() as conn:
        (after,), = conn.execute(FSM_SUM).fetchall()
    if log_evicted:
        assert after == before
        assert logged > 0
    else:
        assert after < before, "FSM survived without eviction logging?"


# A fork's size in blocks, counted by reading its pages (independent of the
# size the smgr reports, which pg_relation_size returns).
NBLOCKS_FN = ("create function strata_nblocks(r regclass, f text) returns int language plpgsql "
              "as $$ declare n int := 0; begin loop begin perform get_raw_page(r::text, f, n); "
              "exception when others then return n; end; n := n + 1; end loop; end $$")

# btpo_cycleid is the last two bytes of a btree page (BTPageOpaqueData's
# last field); bt_page_stats does not show it.
CYCLEID_PAGES = ("select count(*) from generate_series(1, strata_nblocks('k_idx', 'main') - 1) b "
                 "where substr(get_raw_page('k_idx', b::int), 8191, 2) <> '\\x0000'::bytea")

# The free space the FSM records for relation f: the sum of every slot of every
# FSM page (pageinspect; the patched build has no pg_freespacemap).
FSM_SUM = ("select coalesce(sum(split_part(line, ': ', 2)::bigint), 0) "
           "from generate_series(0, strata_nblocks('f', 'fsm') - 1) b, "
           "regexp_split_to_table(fsm_page_contents(get_raw_page('f', 'fsm', b::int)), "
           "E'\\n') line where line ~ '^[0-9]+: [0-9]+$'")


@pytest.mark.parametrize("log_evicted", [True, False], ids=["on", "off"])
def test_gap_btree_cycleid(gap_cluster, log_evicted):
    c = gap_cluster
    c.make_stateless(shared_buffers="1MB", log_evicted=log_evicted)
    with c.connect() as conn:
        create_evict_table(conn)
        conn.execute("create extension pageinspect")
        conn.execute(NBLOCKS_FN)
        conn.execute("create table k (id int)")
        conn.execute("insert into k select generate_series(1, 20000)")
        conn.execute("create index k_idx on k (id)")
        conn.execute("vacuum k")  # all-visible: the cursor below is index-only
        conn.execute("delete from k where id % 10 = 0")  # gives VACUUM index work
    holder = c.connect(autocommit=False)
    vac_error = {}
    try:
        # An index-only scan keeps its leaf page pinned: VACUUM's cleanup lock
        # on that first leaf waits, with the index's vacuum cycle id active.
        holder.execute("set enable_seqscan = off")
        holder.execute("set enable_bitmapscan = off")
        holder.execute("declare hold cursor for select id from k where id > 0 order by id")
        holder.execute("fetch 1 from hold")

        def vacuum():
            try:
                with c.connect() as v:
                    v.execute("vacuum k")
            except Exception as e:
                vac_error["e"] = e

        th = threading.Thread(target=vacuum)
        th.start()
        with c.connect() as conn:
            # Wait until the vacuum reached the index and waits on the pin.
            deadline = time.time() + 60
            while time.time() < deadline:
                (waiting,), = conn.execute(
                    "select count(*) from pg_stat_activity where query = 'vacuum k' "
                    "and wait_event = 'BufferPin'").fetchall()
                if waiting:
                    break
                time.sleep(0.2)
            assert waiting, "VACUUM never waited on the pinned index page"
            conn.execute("insert into k select generate_series(20001, 40000)")  # splits
            (during,), = conn.execute(CYCLEID_PAGES).fetchall()
            assert during > 0  # stock behaviour, pages still in buffers
            c.evict(conn)
            (after,), = conn.execute(CYCLEID_PAGES).fetchall()
    finally:
        holder.rollback()
        holder.close()
    th.join(120)
    assert "e" not in vac_error, vac_error
    if log_evicted:
        assert after == during
        assert c.stats()["logged_cycleid"] > 0
    else:
        assert after < during, "cycle ids survived without eviction logging?"
