"""Image generation pushdown (docs/design.md §6.6) end to end.

A stock PostgreSQL 15 primary with full_page_writes = off (no record ever
resets a page's delta chain) runs pgbench through three safekeepers into a
pageserver with --image-threshold 16 (oracle_harness.OracleCluster, which
also keeps a stock standby replaying the same WAL).  Afterwards:
  * images were written (pageserver_image_written_total) and none failed;
  * every page of the pgbench tables and indexes read at the latest LSN
    replayed at most threshold + slack records (pageserver_read_chain_max,
    and the pageserver_read_chain_length histogram) -- without image
    generation the branches and tellers pages alone carry one delta per
    transaction;
  * at the point where pgbench ended, every page the pageserver returns
    equals the stock standby's page at that LSN after masking (the page
    oracle's comparison), so the images are exact materialisations.

Images finished after the last WAL record wait for the next record to be
stored (the writer thread stores them while ingesting), so the test commits
small transactions until the image queue is empty.
"""

import re
import subprocess
import time
import urllib.request

from conftest import int_to_lsn, lsn_to_int
from oracle_harness import compare_at, running_oracle, stock

THRESHOLD = 16
SLACK = 16  # the hard cap is 2 x threshold (pageserver/redo/imagegen.h): ingest waits there


def metrics(cluster):
    url = "http://127.0.0.1:%d/metrics" % cluster.pageserver.http_port
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def metric(text, name):
    m = re.search(r"^%s(?:\{\})? ([0-9.e+-]+)$" % re.escape(name), text, re.M)
    return float(m.group(1)) if m else None


def pgbench(cluster, *args, timeout=300):
    p = cluster.primary
    cmd = [stock("pgbench"), "-h", "127.0.0.1", "-p", str(p.port), "-U", "postgres"] + list(args)
    cp = subprocess.run(cmd + ["postgres"], capture_output=True, text=True, timeout=timeout)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return cp.stdout


def drain_image_queue(cluster, timeout=60):
    """Commits small transactions until the pageserver's image queue is
    empty: a finished image is stored when the next record is ingested."""
    cluster.primary.sql("create table if not exists imagegen_tick (x int)")
    deadline = time.monotonic() + timeout
    while True:
        cluster.primary.sql("insert into imagegen_tick values (1)")
        lsn = lsn_to_int(cluster.primary.sql("select pg_current_wal_flush_lsn()::text")[0][0])
        cluster.wait_ingested(lsn)
        time.sleep(0.3)
        depth = metric(metrics(cluster), "pageserver_image_queue_depth")
        if depth == 0:
            return
        assert time.monotonic() < deadline, "image queue still holds %s pages" % depth


def pgbench_pages(cluster):
    """[(spc, db, rel, fork, blk)] of every block of the pgbench relations'
    main forks, as the primary sees them now."""
    rows = cluster.primary.sql(
        "select pg_relation_filenode(c.oid), pg_relation_size(c.oid) / 8192, "
        "(select oid from pg_database where datname = current_database()) "
        "from pg_class c where c.relname like 'pgbench%' and c.relkind in ('r', 'i')")
    pages = []
    for rel, nblocks, db in rows:
        pages += [(1663, int(db), int(rel), 0, b) for b in range(int(nblocks))]
    return pages


def test_image_generation_bounds_chains_and_matches_a_standby(monkeypatch):
    monkeypatch.setenv("PAGESERVER_IMAGE_THRESHOLD", str(THRESHOLD))
    with running_oracle(fpw=False) as cluster:
        cluster.begin_phase()
        pgbench(cluster, "-i", "-s", "1", "-q")
        cluster.primary.sql("checkpoint")
        out = pgbench(cluster, "-c", "4", "-j", "2", "-T", "12", "-n")
        tps = re.search(r"tps = ([0-9.]+)", out)
        point = cluster.end_phase("pgbench")
        end = cluster.finish_workload()
        cluster.wait_ingested(end)
        drain_image_queue(cluster)

        text = metrics(cluster)
        written = metric(text, "pageserver_image_written_total")
        failures = metric(text, "pageserver_image_failures_total")
        requests = metric(text, "pageserver_image_requests_total")
        drops = metric(text, "pageserver_image_queue_drops_total")
        print("pgbench %s tps; images requested %s written %s drops %s failures %s" % (
            tps.group(1) if tps else "?", requests, written, drops, failures))
        assert written is not None and written > 0, "no image was written"
        assert failures == 0, "image generation failed:\n" + text

        # Nothing read pages before this: the read-chain figures are ours.
        assert metric(text, "pageserver_read_chain_length_count") in (None, 0)
        latest = lsn_to_int(cluster.pageserver.timeline_status(cluster.timeline)[
            "last_record_lsn"])
        pages = pgbench_pages(cluster)
        assert len(pages) > 20, pages
        reader = cluster.page_reader()
        got = reader.get_pages(pages, latest)
        errors = [(p, g) for p, g in zip(pages, got) if not isinstance(g, bytes)]
        assert not errors, errors[:5]
        time.sleep(0.6)  # /metrics copies some figures every 500 ms
        text = metrics(cluster)
        longest = metric(text, "pageserver_read_chain_max")
        count = metric(text, "pageserver_read_chain_length_count")
        print("read %d pages at %s: longest chain %s (threshold %d), chain-length sum %s" % (
            len(pages), int_to_lsn(latest), longest, THRESHOLD,
            metric(text, "pageserver_read_chain_length_sum")))
        assert count is not None and count >= len(pages), text
        # Every read that replayed WAL was timed.
        redone = metric(text, "pageserver_page_redo_reads_total") or 0
        timed = metric(text, "pageserver_read_redo_seconds_count") or 0
        print("reads that replayed WAL: %d, timed: %d, seconds in redo: %s" % (
            redone, timed, metric(text, "pageserver_read_redo_seconds_sum")))
        assert redone > 0 and timed >= redone, text
        assert metric(text, "pageserver_read_redo_seconds_sum") > 0, text
        # The four stages of each GetPage add up to its latency.  (The redo
        # seconds above include image generation's reads: no bound here.)
        stage = {}
        for name in ("park", "queue", "read", "reply"):
            sc = [re.search(r'^pageserver_getpage_stage_seconds_%s\{stage="%s"\} (\S+)$' % (
                part, name), text, re.M) for part in ("sum", "count")]
            assert all(sc), name + "\n" + text
            stage[name] = (float(sc[0].group(1)), float(sc[1].group(1)))
        total = metric(text, "pageserver_getpage_seconds_sum")
        count = metric(text, "pageserver_getpage_seconds_count")
        print("GetPage %d in %.4f s: %s" % (count, total, stage))
        assert all(c == count for _s, c in stage.values()), (count, stage)
        assert abs(sum(s for s, _c in stage.values()) - total) <= 1e-9 * count, (total, stage)
        assert stage["read"][0] > 0, stage
        assert longest is not None and longest <= THRESHOLD + SLACK, (
            "a read replayed %s records, more than threshold %d + slack %d" % (
                longest, THRESHOLD, SLACK))

        # The oracle: at the end of pgbench, pages equal the stock standby's.
        cluster.standby.stop_at(point)
        cmp = compare_at(point, cluster.standby.datadir, cluster.pageserver, cluster.timeline,
                         reader)
        print(cmp.summary())
        assert cmp.blocks > 100, cmp.summary()
        assert cmp.nmismatch == 0, cmp.summary()


READ_THRESHOLD = 13  # reads replaying 13 or more: the histogram's bucket le="12" splits them


def reads_at_least(text, n):
    """Reads (pageserver_read_chain_length) that replayed more than the
    bucket below n: n must follow a bucket bound."""
    count = metric(text, "pageserver_read_chain_length_count") or 0
    m = re.search(r'^pageserver_read_chain_length_bucket\{le="%d"\} ([0-9.e+]+)$' % (n - 1),
                  text, re.M)
    assert m, "no bucket le=%d in:\n%s" % (n - 1, text)
    return count - float(m.group(1))


def test_reads_that_replay_a_long_chain_store_images(monkeypatch):
    """A page nobody reads gets an image only at the background threshold; a
    read that replays READ_THRESHOLD deltas or more hands the page it built
    to the writer, which stores it as an image, so the next read of that
    page replays nothing -- and returns the same bytes."""
    monkeypatch.setenv("PAGESERVER_IMAGE_THRESHOLD", "500")
    monkeypatch.setenv("PAGESERVER_IMAGE_READ_THRESHOLD", str(READ_THRESHOLD))
    monkeypatch.setenv("PAGESERVER_PAGE_CACHE_MB", "0")  # every read replays its chain
    with running_oracle(fpw=False) as cluster:
        pgbench(cluster, "-i", "-s", "1", "-q")
        for t in ("accounts", "branches", "tellers", "history"):
            cluster.primary.sql("alter table pgbench_%s set (autovacuum_enabled = off)" % t)
        pgbench(cluster, "-c", "4", "-j", "2", "-T", "8", "-n")
        cluster.wait_ingested(lsn_to_int(
            cluster.primary.sql("select pg_current_wal_flush_lsn()::text")[0][0]))
        drain_image_queue(cluster)
        text = metrics(cluster)
        assert (metric(text, "pageserver_image_from_reads_total") or 0) == 0, text

        reads_leave_images(cluster, cluster.page_reader(), pgbench_pages(cluster))


def reads_leave_images(cluster, reader, pages):
    """Reads pages at the latest LSN twice, with small commits between so
    the writer stores what the first reads offered."""
    latest = lsn_to_int(cluster.pageserver.timeline_status(cluster.timeline)[
        "last_record_lsn"])
    first = reader.get_pages(pages, latest)
    assert all(isinstance(g, bytes) for g in first), [g for g in first
                                                     if not isinstance(g, bytes)][:3]
    time.sleep(0.6)  # /metrics copies some figures every 500 ms
    long_first = reads_at_least(metrics(cluster), READ_THRESHOLD)
    assert long_first > 0, "no read replayed %d deltas: nothing to test" % READ_THRESHOLD

    # Offers are stored by the writer between records: commit until all
    # are stored or dropped.
    deadline = time.monotonic() + 60
    while True:
        cluster.primary.sql("insert into imagegen_tick values (1)")
        time.sleep(0.3)
        text = metrics(cluster)
        stored = metric(text, "pageserver_image_from_reads_total") or 0
        dropped = metric(text, "pageserver_image_from_reads_dropped_total") or 0
        if stored + dropped >= long_first:
            break
        assert time.monotonic() < deadline, (stored, dropped, long_first)
    print("pgbench pages %d; first pass: %d reads replayed >= %d deltas; images from reads "
          "%d, dropped %d" % (len(pages), long_first, READ_THRESHOLD, stored, dropped))
    assert stored > 0 and metric(text, "pageserver_image_failures_total") == 0, text

    latest2 = lsn_to_int(cluster.pageserver.timeline_status(cluster.timeline)[
        "last_record_lsn"])
    assert latest2 > latest
    second = reader.get_pages(pages, latest2)
    time.sleep(0.6)
    long_second = reads_at_least(metrics(cluster), READ_THRESHOLD) - long_first
    print("second pass: %d reads replayed >= %d deltas" % (long_second, READ_THRESHOLD))
    assert long_second <= dropped, (long_second, dropped)
    # Nothing wrote the pgbench pages between the passes: the images are
    # the very pages the first reads rebuilt.
    changed = [p for p, a, b in zip(pages, first, second) if a != b]
    assert not changed, changed[:5]
