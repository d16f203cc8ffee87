"""
The compute's local file cache (compute/extension/file_cache.c): pages that
leave shared_buffers are kept on the compute's own disk and read back from
there; what the cache does not hold comes from the pageserver.

- Concurrent read-modify-write traffic through a cache much smaller than the
  table (so slots are reused all the time) and much larger than
  shared_buffers: every transaction moves an amount from one account to a
  ledger row, so the accounts must add up to the ledger, per account.  Then
  the same checks and the same content on a NEW compute with the cache off:
  every page the first compute read from its cache was the page the WAL
  built.
- Truncation, DROP TABLE and DROP DATABASE drop the cached pages of what
  they remove (file_cache_invalidated), and reads after them are right.
- The cache file lives in the compute's data directory (a new compute starts
  without it) and stays within strata.file_cache_size.
"""
import os
import random
import threading
import time

import pytest

from smgr_harness import create_evict_table, running_cluster

# The subject is the compute (the extension and PostgreSQL on it): the release
# daemons (conftest.py).
pytestmark = pytest.mark.release_daemons


@pytest.fixture
def fc_cluster(request):
    with running_cluster(request) as c:
        yield c


ACCOUNTS = 40000  # ~10 MB with the filler: 5x the 2 MB cache, 10x shared_buffers


def content(conn):
    (acct,), = conn.execute(
        "select md5(string_agg(id || ':' || bal, ',' order by id)) from acct").fetchall()
    (ledger,), = conn.execute(
        "select md5(string_agg(id || ':' || delta, ',' order by seq)) from ledger").fetchall()
    return acct, ledger


def check_ledger(conn):
    (n_ledger,), = conn.execute("select count(*) from ledger").fetchall()
    (bad,), = conn.execute(
        "select count(*) from acct a left join (select id, sum(delta) s from ledger group by id) l "
        "using (id) where a.bal <> coalesce(l.s, 0)").fetchall()
    assert bad == 0, "%d accounts disagree with the ledger" % bad
    (total,), = conn.execute("select coalesce(sum(bal), 0) - "
                             "(select coalesce(sum(delta), 0) from ledger) from acct").fetchall()
    assert total == 0
    return n_ledger


def test_cache_under_concurrent_updates_matches_the_wal(fc_cluster):
    c = fc_cluster
    c.make_stateless(shared_buffers="1MB", extra={"strata.file_cache_size": "2MB"})
    with c.connect(connect_timeout=120) as conn:
        conn.execute("create table acct (id int primary key, bal bigint not null, "
                     "filler char(200) not null default '')")
        conn.execute("insert into acct (id, bal) select g, 0 from generate_series(1, %d) g"
                     % ACCOUNTS)
        conn.execute("create table ledger (seq bigserial primary key, id int not null, "
                     "delta int not null)")
    before = c.stats()

    # At least 20 s and 400 transactions (a loaded machine is slow), at most
    # 120 s.
    start = time.monotonic()
    errors, done, count = [], [], [0]

    def more():
        elapsed = time.monotonic() - start
        return elapsed < 120 and (elapsed < 20 or count[0] < 400)

    def worker(seed):
        rnd = random.Random(seed)
        n = 0
        try:
            with c.connect(connect_timeout=120) as w:
                while more():
                    aid, delta = rnd.randint(1, ACCOUNTS), rnd.randint(-500, 500)
                    with w.transaction():
                        w.execute("update acct set bal = bal + %s where id = %s", (delta, aid))
                        w.execute("insert into ledger (id, delta) values (%s, %s)", (aid, delta))
                    n += 1
                    count[0] += 1
                    if n % 50 == 0:  # a scan: many pages in and out of both caches
                        w.execute("select count(*), sum(bal) from acct where id %% 97 = %s",
                                  (rnd.randint(0, 96),))
        except Exception as e:  # reported by the main thread
            errors.append(e)
        done.append(n)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    committed = sum(done)
    assert committed >= 400, "only %d transactions in %.0f s" % (committed,
                                                                time.monotonic() - start)

    after = c.stats()
    delta = {k: after[k] - before.get(k, 0) for k in after}
    print("file cache over the run:", {k: v for k, v in delta.items() if v})
    # The cache was used, overflowed, and the pageserver served what it lacked.
    assert delta["file_cache_hit"] > 0
    assert delta["file_cache_evict"] > 0
    assert delta["getpage"] > 0

    with c.connect() as conn:
        assert check_ledger(conn) == committed
        cached_view = content(conn)

    # A new compute on an empty data directory, every page from the pageserver.
    c.configure(**{"strata.file_cache_size": "0"})
    with c.connect(connect_timeout=120) as conn:
        (size,), = conn.execute("show strata.file_cache_size").fetchall()
        assert size == "0"
        assert check_ledger(conn) == committed
        assert content(conn) == cached_view
    assert c.stats()["file_cache_hit"] == 0


def test_truncate_and_drops_forget_cached_pages(fc_cluster):
    c = fc_cluster
    c.make_stateless(shared_buffers="1MB", extra={"strata.file_cache_size": "16MB"})
    with c.connect(connect_timeout=120) as conn:
        conn.autocommit = True
        create_evict_table(conn, rows=20000)
        conn.execute("create table t (id int, v text)")
        conn.execute("insert into t select g, repeat('a', 300) from generate_series(1, 6000) g")
        c.evict(conn)
        (n,), = conn.execute("select count(*) from t").fetchall()
        assert n == 6000
        assert c.stats()["file_cache_hit"] > 0

        # VACUUM truncates t to its first pages; regrowing it must read the
        # new contents, not the cached old ones.
        inval0 = c.stats()["file_cache_invalidated"]
        conn.execute("delete from t where id > 100")
        conn.execute("vacuum t")
        inval1 = c.stats()["file_cache_invalidated"]
        assert inval1 > inval0, "the truncation dropped no cached page"
        conn.execute("insert into t select g, repeat('b', 300) from generate_series(101, 3000) g")
        c.evict(conn)
        assert conn.execute("select count(*), count(*) filter (where v like 'b%%') from t"
                            ).fetchone() == (3000, 2900)

        conn.execute("drop table t")
        inval2 = c.stats()["file_cache_invalidated"]
        assert inval2 > inval1, "DROP TABLE dropped no cached page"

        conn.execute("create database fcdb")
    with c.connect(dbname="fcdb", connect_timeout=120) as d:
        d.autocommit = True
        d.execute("create table u (id int, v text)")
        d.execute("insert into u select g, repeat('c', 300) from generate_series(1, 3000) g")
        d.execute("checkpoint")
        create_evict_table(d, rows=20000)
        c.evict(d)
    with c.connect() as conn:
        conn.autocommit = True
        conn.execute("drop database fcdb")
        inval3 = c.stats()["file_cache_invalidated"]
        assert inval3 > inval2, "DROP DATABASE dropped no cached page"
        conn.execute("create database fcdb")
    with c.connect(dbname="fcdb") as d:
        (n,), = d.execute("select count(*) from pg_class where relname = 'u'").fetchall()
        assert n == 0
    path = os.path.join(c.compute_datadir, "strata_file_cache")
    assert 0 < os.path.getsize(path) <= 16 * 1024 * 1024

