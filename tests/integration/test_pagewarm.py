"""Warming cached pages (pageserver/cache/pagewarm.h) end to end.

A stock PostgreSQL 15 primary with full_page_writes = off streams WAL
through three safekeepers into the pageserver, and a stock standby replays
the same WAL (oracle_harness.OracleCluster).  Two tables get rows; every page
of one of them ("read") is read from the pageserver at the latest LSN, so
its page cache holds them; the other ("unread") is never read.  Then one row
on every page of both tables is updated.  The test checks that

  * the pageserver rebuilt the read table's pages in the background
    (pageserver_page_warm_rebuilds_total), once each page was quiet;
  * reading those pages again at the new LSN replays nothing: every read is
    a page-cache hit (pageserver_page_redo_reads_total does not move);
  * the unread table's pages were not warmed: reading them replays their
    deltas (redo reads grow by at least their count);
  * every page the pageserver returns at that point, the warmed ones and the
    replayed ones, equals the stock standby's page after masking (the page
    oracle's comparison).

With warming off, a read of a page that changed since its cached version
replays only the records newer than that version
(pageserver_redo_cached_base_total), and the pages still equal the
standby's.
"""

import contextlib
import re
import time
import urllib.request

from conftest import lsn_to_int, wait_until
from oracle_harness import compare_at, running_oracle

ROWS = 3000


def metrics(cluster):
    url = "http://127.0.0.1:%d/metrics" % cluster.pageserver.http_port
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def metric(cluster, name):
    m = re.search(r"^%s(?:\{\})? ([0-9.e+-]+)$" % re.escape(name), metrics(cluster), re.M)
    return float(m.group(1)) if m else 0.0


def table_pages(cluster, name):
    (rel, nblocks, db), = cluster.primary.sql(
        "select pg_relation_filenode('%s'), pg_relation_size('%s') / 8192, "
        "(select oid from pg_database where datname = current_database())" % (name, name))
    return [(1663, int(db), int(rel), 0, b) for b in range(int(nblocks))]


def read_all(reader, pages, lsn):
    got = reader.get_pages(pages, lsn)
    errors = [(p, g) for p, g in zip(pages, got) if not isinstance(g, bytes)]
    assert not errors, errors[:5]
    return got


def flush_lsn(cluster):
    return lsn_to_int(cluster.primary.sql("select pg_current_wal_flush_lsn()::text")[0][0])


def load(cluster):
    for t in ("warm_read", "warm_unread"):
        cluster.primary.sql("create table %s (a int, b text) with (fillfactor = 50)" % t)
        cluster.primary.sql("insert into %s select g, repeat('v', 40) from generate_series(1, %d) g"
                            % (t, ROWS))


def update_every_page(cluster):
    for t in ("warm_read", "warm_unread"):
        # The first tuple of every page.
        cluster.primary.sql("update %s set b = b || 'u' where ctid in (select ('(' || blk || ',1)')"
                            "::tid from generate_series(0, pg_relation_size('%s') / 8192 - 1) blk)"
                            % (t, t))


@contextlib.contextmanager
def loaded_cluster():
    """An oracle cluster with both tables loaded and every page of warm_read
    read once at the load's LSN, so the page cache holds them; yields
    (cluster, reader, read_pages, unread_pages) and stops everything after
    (printing the logs if the test failed)."""
    with running_oracle(fpw=False) as cluster:
        cluster.begin_phase()
        load(cluster)
        cluster.primary.sql("checkpoint")
        loaded = flush_lsn(cluster)
        cluster.wait_ingested(loaded)
        read_pages = table_pages(cluster, "warm_read")
        unread_pages = table_pages(cluster, "warm_unread")
        assert len(read_pages) > 20 and len(unread_pages) > 20
        reader = cluster.page_reader()
        read_all(reader, read_pages, loaded)
        yield cluster, reader, read_pages, unread_pages


def end_updates(cluster):
    """Ends the workload after the updates; the point, ingested."""
    point = cluster.end_phase("updates")
    cluster.finish_workload()
    cluster.wait_ingested(point.lsn)
    return point


def assert_standby_agrees(cluster, reader, point, min_blocks):
    cluster.standby.stop_at(point)
    cmp = compare_at(point, cluster.standby.datadir, cluster.pageserver, cluster.timeline, reader)
    print(cmp.summary())
    assert cmp.blocks >= min_blocks, cmp.summary()
    assert cmp.nmismatch == 0, cmp.summary()


def test_changed_cached_pages_are_rebuilt_before_they_are_read(monkeypatch):
    monkeypatch.setenv("PAGESERVER_PAGE_WARM_QUIET", "50ms")  # off by default
    with loaded_cluster() as (cluster, reader, read_pages, unread_pages):
        warmed_before = metric(cluster, "pageserver_page_warm_rebuilds_total")
        update_every_page(cluster)
        point = end_updates(cluster)
        # Every page of warm_read changed while cached: each is rebuilt once
        # it has been quiet for 50 ms.
        wait_until(lambda: metric(cluster, "pageserver_page_warm_rebuilds_total") - warmed_before
                   >= len(read_pages), 60, "the changed cached pages to be warmed")
        dropped = metric(cluster, "pageserver_page_warm_dropped_total")
        assert dropped == 0, dropped

        redo_before = metric(cluster, "pageserver_page_redo_reads_total")
        hits_before = metric(cluster, "pageserver_page_cache_hits_total")
        read_all(reader, read_pages, point.lsn)
        redo_warm = metric(cluster, "pageserver_page_redo_reads_total") - redo_before
        hits = metric(cluster, "pageserver_page_cache_hits_total") - hits_before
        print("warm_read: %d pages, %d cache hits, %d redo reads" % (len(read_pages), hits,
                                                                     redo_warm))
        assert redo_warm == 0, "reads of warmed pages replayed WAL"
        assert hits >= len(read_pages)

        redo_before = metric(cluster, "pageserver_page_redo_reads_total")
        read_all(reader, unread_pages, point.lsn)
        redo_cold = metric(cluster, "pageserver_page_redo_reads_total") - redo_before
        print("warm_unread: %d pages, %d redo reads" % (len(unread_pages), redo_cold))
        assert redo_cold >= len(unread_pages), "pages nobody read were warmed"
        assert_standby_agrees(cluster, reader, point, len(read_pages) + len(unread_pages) + 1)


def test_a_read_replays_only_what_is_newer_than_its_cached_version(monkeypatch):
    monkeypatch.setenv("PAGESERVER_PAGE_WARM_QUIET", "0")  # warming off (the default)
    # The first read replays each page's ~60 inserts; with images from reads
    # on, it would store an image at the read's LSN, which then is the
    # chain's base (newer than the cached version, so the better one).
    monkeypatch.setenv("PAGESERVER_IMAGE_READ_THRESHOLD", "0")
    with loaded_cluster() as (cluster, reader, read_pages, _):
        update_every_page(cluster)
        update_every_page(cluster)
        point = end_updates(cluster)
        time.sleep(0.3)
        assert metric(cluster, "pageserver_page_warm_rebuilds_total") == 0
        bases_before = metric(cluster, "pageserver_redo_cached_base_total")
        read_all(reader, read_pages, point.lsn)
        bases = metric(cluster, "pageserver_redo_cached_base_total") - bases_before
        print("warm_read: %d pages, %d replays from a cached version" % (len(read_pages), bases))
        assert bases >= len(read_pages)
        assert_standby_agrees(cluster, reader, point, len(read_pages))
