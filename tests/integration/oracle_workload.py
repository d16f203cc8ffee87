"""The page oracle's workload: phases of SQL on the primary, each ending at an
oracle point X_i (see oracle_harness.py for how points are taken).

For: exercising every kind of WAL the pageserver must turn back into pages:
heap insert/update/delete and HOT, TOAST, btree (splits, deletes, page
deletion by VACUUM), GIN (with its pending list), GiST, SP-GiST, hash (bucket
splits, overflow pages) and BRIN indexes, sequences, VACUUM (VM set and
cleared, heap truncation), VACUUM FREEZE, VACUUM FULL, TRUNCATE, CREATE and
DROP TABLE, CREATE DATABASE with both strategies (WAL_LOG and FILE_COPY),
DROP DATABASE, subtransactions, multixacts, and two-phase commit (one
transaction stays prepared across a point).  Not for: timing or load.

Sized to produce a few WAL segments in a few seconds per phase.
"""

import contextlib


def _toast_doc(expr):
    # ~3200 hex characters: past the TOAST threshold; storage external keeps
    # it uncompressed so it lands in the TOAST table.
    return "(select string_agg(md5((%s)::text || i::text), '') from generate_series(1, 100) i)" % expr


def phase_heap(p):
    p.sql("create table heap_t (id int primary key, k int, v text, pad text) "
          "with (fillfactor = 70)")
    p.sql("insert into heap_t select g, g % 100, md5(g::text), repeat('x', 50) "
          "from generate_series(1, 20000) g")
    p.sql("update heap_t set pad = repeat('y', 50) where id % 5 = 0")  # HOT
    p.sql("update heap_t set k = k + 1 where id % 7 = 0")  # HOT
    p.sql("update heap_t set id = id + 100000 where id % 13 = 0")  # not HOT
    p.sql("delete from heap_t where id % 11 = 0")
    p.sql("create table toast_t (id int, doc text)")
    p.sql("alter table toast_t alter column doc set storage external")
    p.sql("insert into toast_t select g, %s from generate_series(1, 300) g" % _toast_doc("g"))
    p.sql("update toast_t set doc = doc || 'z' where id % 3 = 0")
    p.sql("delete from toast_t where id % 4 = 0")
    # Subtransactions: committed, rolled back, and more than fit in the
    # proc array cache (64) so the commit record lists many subxids.
    with p.connect() as conn:
        conn.autocommit = False
        for i in range(80):
            conn.execute("savepoint s%d" % i)
            conn.execute("insert into heap_t values (%d, 0, 'sub', '')" % (200000 + i))
            if i % 3 == 0:
                conn.execute("rollback to savepoint s%d" % i)
            else:
                conn.execute("release savepoint s%d" % i)
        conn.commit()
    with p.connect() as conn:
        conn.autocommit = False
        conn.execute("insert into heap_t values (300000, 0, 'aborted', '')")
        conn.rollback()


def phase_indexes(p):
    p.sql("create table idx_t (id int, arr int[], pt point, bx box, t text, ts tsvector, h int)")
    fill = ("insert into idx_t select g, array[g %% 100, g %% 37, g %% 11], "
            "point(g %% 100, g / 100), box(point(g %% 50, g %% 70), point(g %% 50 + 1, g %% 70 + 1)), "
            "md5(g::text), to_tsvector('simple', 'w' || (g %% 200) || ' x' || (g %% 33)), "
            "g %% 1000 from generate_series(%d, %d) g")
    p.sql(fill % (1, 8000))
    p.sql("create index idx_t_gin_arr on idx_t using gin (arr)")
    p.sql("create index idx_t_gin_ts on idx_t using gin (ts)")
    p.sql("create index idx_t_gist on idx_t using gist (bx)")
    p.sql("create index idx_t_spgist_pt on idx_t using spgist (pt)")
    p.sql("create index idx_t_spgist_t on idx_t using spgist (t)")
    p.sql("create index idx_t_hash on idx_t using hash (h)")
    p.sql("create index idx_t_brin on idx_t using brin (id) with (pages_per_range = 4)")
    p.sql("create index idx_t_btree on idx_t (t)")
    # Incremental inserts: GIN pending list, GiST/SP-GiST/btree splits, hash
    # bucket splits and overflow pages, BRIN summarisation on vacuum.
    p.sql(fill % (8001, 14000))
    p.sql("delete from idx_t where id % 3 = 0")
    p.sql("vacuum idx_t")
    # btree: splits, then emptied pages deleted by VACUUM.
    p.sql("create table bt (id int primary key, v text)")
    p.sql("insert into bt select g, md5(g::text) from generate_series(1, 30000) g")
    p.sql("delete from bt where id between 1000 and 25000")
    p.sql("vacuum bt")
    p.sql("insert into bt select g, 'again' from generate_series(5000, 7000) g")


def phase_ddl(p):
    p.sql("create sequence seq_a")
    p.sql("select nextval('seq_a') from generate_series(1, 500)")
    p.sql("alter sequence seq_a restart with 1000")
    p.sql("select nextval('seq_a')")
    p.sql("create table serial_t (id serial primary key, v int)")
    p.sql("insert into serial_t (v) select g from generate_series(1, 2000) g")
    p.sql("create table vf (id int, v text)")
    p.sql("insert into vf select g, md5(g::text) from generate_series(1, 5000) g")
    p.sql("delete from vf where id % 2 = 0")
    p.sql("vacuum full vf")
    p.sql("create table tr (id int)")
    p.sql("insert into tr select generate_series(1, 3000)")
    p.sql("truncate tr")
    p.sql("insert into tr select generate_series(1, 100)")
    p.sql("create table dropme (id int primary key, v text)")
    p.sql("insert into dropme select g, 'x' from generate_series(1, 2000) g")
    p.sql("drop table dropme")
    p.sql("create database db_wal strategy wal_log")
    p.sql("create database db_copy strategy file_copy")
    p.sql("create database db_drop")
    p.sql("drop database db_drop")
    for db in ("db_wal", "db_copy"):
        p.sql("create table t (x int primary key, v text)", db)
        p.sql("insert into t select g, md5(g::text) from generate_series(1, 3000) g", db)
        p.sql("update t set v = 'u' where x % 4 = 0", db)
    p.sql("vacuum (freeze) heap_t")


def phase_twophase(p):
    with contextlib.ExitStack() as stack:
        c1 = stack.enter_context(p.connect())
        c2 = stack.enter_context(p.connect())
        c1.execute("begin")
        c1.execute("insert into heap_t values (400001, 1, 'p1', '')")
        c1.execute("prepare transaction 'p1'")
        c2.execute("begin")
        c2.execute("insert into heap_t values (400002, 2, 'p2', '')")
        c2.execute("update toast_t set doc = 'p2' where id = 1")
        c2.execute("prepare transaction 'p2'")
    p.sql("commit prepared 'p1'")
    p.sql("rollback prepared 'p2'")
    with p.connect() as c3:
        c3.execute("begin")
        c3.execute("create table tp_t (x int)")
        c3.execute("insert into tp_t select generate_series(1, 500)")
        c3.execute("update heap_t set v = 'p3' where id between 100 and 140")
        c3.execute("prepare transaction 'p3'")  # stays prepared across this point
    # Multixacts: two lockers of the same rows.
    with p.connect() as a, p.connect() as b:
        a.execute("begin")
        b.execute("begin")
        a.execute("select id from heap_t where id between 1 and 60 for share")
        b.execute("select id from heap_t where id between 1 and 60 for share")
        a.execute("commit")
        b.execute("update heap_t set k = -1 where id between 1 and 30")
        b.execute("commit")


def phase_vacuum_truncate(p):
    p.sql("commit prepared 'p3'")
    p.sql("vacuum heap_t")  # sets VM bits
    p.sql("update heap_t set k = k + 1 where id % 50 = 0")  # clears some
    p.sql("delete from heap_t where id % 97 = 0")
    p.sql("create table vmtrunc (id int, v text)")
    p.sql("insert into vmtrunc select g, md5(g::text) from generate_series(1, 8000) g")
    p.sql("vacuum vmtrunc")
    p.sql("delete from vmtrunc where id > 1000")
    p.sql("vacuum vmtrunc")  # truncates the heap and its VM
    p.sql("delete from bt")
    p.sql("vacuum bt")
    p.sql("drop database db_copy")
    p.sql("insert into toast_t select g, %s from generate_series(1000, 1100) g" % _toast_doc("g"))
    p.sql("drop table tp_t")


PHASES = [
    ("heap", phase_heap),
    ("indexes", phase_indexes),
    ("ddl", phase_ddl),
    ("twophase", phase_twophase),
    ("vacuum_truncate", phase_vacuum_truncate),
]


def run_phase(cluster, name, fn):
    """Runs one phase between a CHECKPOINT and its point; returns the point."""
    cluster.begin_phase()
    fn(cluster.primary)
    return cluster.end_phase(name)
