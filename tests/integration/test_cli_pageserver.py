"""The strata CLI and the pageserver: up imports the compute's fresh data
directory into the pageserver, status reports its LSNs, `strata page get`
fetches page versions over the pagestream protocol, and stop/start/down
manage it like the other components.

Pages the pageserver returns are checked against the compute's own buffers
(pageinspect's get_raw_page on the running compute): the page LSN, pd_lower,
pd_upper and the line pointer array must be equal (hint bits in the tuples
may differ, so the tuple bytes are not compared).
"""

import json
import os
import shutil
import struct
import threading

import pytest

from conftest import (LSN_RE, SAN_BUILD, int_to_lsn, lsn_to_int, make_shared_dir,
                      pageserver_bin, pageserver_built, pid_alive, processes_using, strata_bin,
                      wait_until, walredo_lib_path)

pytestmark = [
    pytest.mark.skipif(not pageserver_built(),
                       reason="strata-pageserver is not built yet (no %s)" % pageserver_bin()),
    pytest.mark.skipif(not os.access(walredo_lib_path(), os.R_OK),
                       reason="the redo helper is not built yet (no %s)" % walredo_lib_path()),
]

BLCKSZ = 8192
PAGE_SIZE_VERSION = BLCKSZ | 4  # PG_PAGE_LAYOUT_VERSION 4
INGEST_TIMEOUT = 90


def page_header(page):
    hi, lo, _checksum, _flags, lower, upper, special, size_version, _prune = struct.unpack_from(
        "<IIHHHHHHI", page)
    return {"lsn": (hi << 32) | lo, "lower": lower, "upper": upper, "special": special,
            "size_version": size_version}


def cluster_state(cluster):
    with open(os.path.join(cluster.dir, "cluster.json")) as f:
        return json.load(f)


def import_lsn(cluster):
    return cluster_state(cluster)["pageserver"].get("import_lsn")


def pageserver_lsn(cluster, key="last_record_lsn"):
    value = cluster.status()["pageserver"][key]
    return lsn_to_int(value) if value else None


def wait_ingested(cluster, lsn):
    """Waits until the pageserver reports having ingested WAL up to lsn."""
    def caught_up():
        got = pageserver_lsn(cluster)
        return got is not None and got >= lsn
    wait_until(caught_up, INGEST_TIMEOUT,
               "the pageserver's last_record_lsn to reach %s" % int_to_lsn(lsn))


def flush_lsn(cluster):
    return lsn_to_int(cluster.sql("select pg_current_wal_flush_lsn()::text")[0][0])


def committed_past(cluster, lsn):
    """Commits one more transaction so that WAL up to and past lsn is flushed
    and acknowledged by the safekeepers; returns the new flush LSN."""
    cluster.sql("create table if not exists strata_test_tick (x int)")
    cluster.sql("insert into strata_test_tick values (1)")
    end = flush_lsn(cluster)
    assert end >= lsn
    return end


def rel_path(cluster, relname):
    """SPC/DB/REL of a relation in the postgres database."""
    (spc, db, rel), = cluster.sql(
        "select case when c.reltablespace = 0 then d.dattablespace else c.reltablespace end, "
        "d.oid, pg_relation_filenode(c.oid) "
        "from pg_class c, pg_database d "
        "where c.oid = %s::regclass and d.datname = current_database()", (relname,))
    return "%d/%d/%d" % (spc, db, rel)


def compute_page(cluster, relname, blk):
    """The compute's current version of a page, from its buffers."""
    cluster.sql("create extension if not exists pageinspect")
    (raw,), = cluster.sql("select get_raw_page(%s, %s)", (relname, blk))
    return bytes(raw)


def line_pointers(page):
    return page[24:page_header(page)["lower"]]


def assert_same_page(ours, theirs):
    """Equal in everything WAL determines but hint bits."""
    assert len(ours) == BLCKSZ
    h_ours, h_theirs = page_header(ours), page_header(theirs)
    assert h_ours["size_version"] == PAGE_SIZE_VERSION
    for key in ("lsn", "lower", "upper", "special"):
        assert h_ours[key] == h_theirs[key], (key, h_ours, h_theirs)
    assert line_pointers(ours) == line_pointers(theirs)


def stable_compute_page(cluster, relname, blk):
    """(page, lsn): the compute's page and an LSN at or after which nothing
    changed it, read twice around the LSN so that a concurrent change
    (autovacuum's in-place pg_class updates) is never mistaken for ours."""
    for _ in range(10):
        before = compute_page(cluster, relname, blk)
        (insert,), = cluster.sql("select pg_current_wal_insert_lsn()::text")
        after = compute_page(cluster, relname, blk)
        if page_header(before)["lsn"] == page_header(after)["lsn"]:
            return before, lsn_to_int(insert)
    raise AssertionError("%s block %d kept changing" % (relname, blk))


def test_up_imports_and_status_follows_the_workload(cluster):
    st = cluster.status()
    ps = st["pageserver"]
    assert pid_alive(ps["pid"])
    state = cluster_state(cluster)
    assert ps["pg_port"] == state["pageserver"]["pg_port"]
    assert ps["http_port"] == state["pageserver"]["http_port"]
    with open(os.path.join(cluster.dir, "pageserver", "pageserver.ports")) as f:
        assert f.read().split() == ["pg=%d" % ps["pg_port"], "http=%d" % ps["http_port"]]
    # The ports `strata up` picked are distinct and below the kernel's
    # ephemeral range: no outgoing connection can take one before its daemon
    # binds it (cli/local/cluster.c).
    ports = [st["compute"]["port"], ps["pg_port"], ps["http_port"]] + [
        sk[k] for sk in st["safekeepers"] for k in ("pg_port", "http_port")]
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    assert len(set(ports)) == len(ports) == 9, ports
    if ephemeral_low > 10000 + 16 * 9:
        assert all(10000 <= p < ephemeral_low for p in ports), (ports, ephemeral_low)

    # Imported at the end of initdb's WAL, before the compute wrote any.
    imported = import_lsn(cluster)
    assert imported and LSN_RE.match(imported), imported
    assert lsn_to_int(imported) <= flush_lsn(cluster)

    wait_until(lambda: pageserver_lsn(cluster) is not None, INGEST_TIMEOUT,
               "the pageserver to report the timeline")
    first = pageserver_lsn(cluster)
    assert first >= lsn_to_int(imported)

    cluster.sql("create table work (id int primary key, v text)")
    cluster.sql("insert into work select g, repeat('x', 100) from generate_series(1, 20000) g")
    end = flush_lsn(cluster)
    assert end > first
    wait_ingested(cluster, end)

    st = cluster.status()["pageserver"]
    last, disk = lsn_to_int(st["last_record_lsn"]), lsn_to_int(st["disk_consistent_lsn"])
    assert last >= end > first
    assert lsn_to_int(imported) <= disk <= last
    # What it ingested becomes durable on its disk too (the open layer is
    # flushed at a size or age limit), never ahead of what it ingested.
    def durable():
        ps_now = cluster.status()["pageserver"]
        d, l = lsn_to_int(ps_now["disk_consistent_lsn"]), lsn_to_int(ps_now["last_record_lsn"])
        assert d <= l
        return d >= end
    wait_until(durable, INGEST_TIMEOUT, "disk_consistent_lsn to reach %s" % int_to_lsn(end))

    human = cluster.run("status").stdout
    line = [l for l in human.splitlines() if l.startswith("pageserver")][0]
    assert "running" in line and str(st["pid"]) in line and "last_record" in line

    # A second up changes nothing and does not import again.
    before = open(os.path.join(cluster.dir, "cluster.json")).read()
    out = cluster.up().stdout
    assert "pageserver: already running" in out and "importing" not in out
    assert cluster.status()["pageserver"]["pid"] == st["pid"]
    assert open(os.path.join(cluster.dir, "cluster.json")).read() == before


def test_page_get_pg_class_block_0(cluster):
    rel = rel_path(cluster, "pg_class")
    spc, db, _ = rel.split("/")
    assert spc == "1663" and int(db) > 1
    theirs, at = stable_compute_page(cluster, "pg_class", 0)
    wait_ingested(cluster, committed_past(cluster, at))

    latest = cluster.page_get(rel, 0).stdout
    assert len(latest) == BLCKSZ
    header = page_header(latest)
    assert header["size_version"] == PAGE_SIZE_VERSION
    assert 0 < header["lsn"] <= pageserver_lsn(cluster)

    # The version at the LSN we read the compute's page at is that page.
    at_lsn = cluster.page_get(rel, 0, fork="main", lsn=int_to_lsn(at)).stdout
    assert_same_page(at_lsn, theirs)
    assert page_header(latest)["lsn"] >= page_header(at_lsn)["lsn"]


def test_page_get_returns_each_version(cluster):
    cluster.sql("create table versions (id int, v text)")
    cluster.sql("insert into versions values (1, 'one')")
    first_page = compute_page(cluster, "versions", 0)
    first_lsn = flush_lsn(cluster)
    cluster.sql("insert into versions select g, 'more' from generate_series(2, 50) g")
    second_page = compute_page(cluster, "versions", 0)
    second_lsn = flush_lsn(cluster)
    assert page_header(second_page)["lsn"] > page_header(first_page)["lsn"]
    wait_ingested(cluster, second_lsn)

    rel = rel_path(cluster, "versions")
    assert_same_page(cluster.page_get(rel, 0, lsn=int_to_lsn(first_lsn)).stdout, first_page)
    assert_same_page(cluster.page_get(rel, 0, lsn=int_to_lsn(second_lsn)).stdout, second_page)
    assert_same_page(cluster.page_get(rel, 0).stdout, second_page)

    # A relation that does not exist is a failure with one line, no page.
    missing = cluster.page_get("1663/%s/4000000000" % rel.split("/")[1], 0, check=False)
    assert missing.returncode == 1
    assert missing.stdout == b""
    assert missing.stderr.decode().count("\n") == 1
    assert missing.stderr.decode().startswith("strata: page 1663/")


def test_stop_start_pageserver(cluster):
    cluster.sql("create table during (x int)")
    cluster.sql("insert into during values (1)")
    wait_ingested(cluster, flush_lsn(cluster))
    imported = import_lsn(cluster)
    old = cluster.status()["pageserver"]["pid"]
    # Asked now: a new session of a stateless compute reads catalog pages.
    during = rel_path(cluster, "during")

    cluster.stop("pageserver")
    st = cluster.status()["pageserver"]
    assert st["pid"] is None and not pid_alive(old)
    assert st["last_record_lsn"] is None and st["disk_consistent_lsn"] is None
    refused = cluster.page_get(during, 0, check=False)
    assert refused.returncode == 1 and refused.stdout == b""
    assert "not running" in refused.stderr.decode()

    # The compute is stateless: a statement that needs a page it does not
    # hold waits for the pageserver (docs/design.md §9) instead of failing.  Run it
    # while the pageserver is down, then bring the pageserver back: the
    # statement completes, and the pageserver catches up from its own data.
    outcome = {}

    def insert():
        try:
            cluster.sql("insert into during select generate_series(2, 5000)")
            outcome["done"] = True
        except Exception as e:  # reported below
            outcome["error"] = e

    writer = threading.Thread(target=insert, daemon=True)
    writer.start()
    writer.join(2.0)
    cluster.start("pageserver")
    writer.join(120.0)
    assert not writer.is_alive(), "the insert did not complete after the pageserver returned"
    assert outcome.get("done"), "the insert failed: %r" % outcome.get("error")
    assert cluster.sql("select count(*) from during")[0][0] == 5000
    end = flush_lsn(cluster)
    new = cluster.status()["pageserver"]["pid"]
    assert new is not None and new != old and pid_alive(new)
    wait_ingested(cluster, end)
    assert import_lsn(cluster) == imported, "a restart must not import again"
    theirs, at = stable_compute_page(cluster, "during", 0)
    wait_ingested(cluster, committed_past(cluster, at))
    assert_same_page(cluster.page_get(rel_path(cluster, "during"), 0).stdout, theirs)

    # A crash (SIGKILL) loses nothing it had made durable; it resumes.  The
    # stop returns once its redo helpers are gone too: whoever stopped it
    # may remove its directory next.
    cluster.stop("pageserver", immediate=True)
    assert not pid_alive(new)
    assert processes_using(os.path.join(cluster.dir, "pageserver")) == []
    cluster.sql("insert into during select generate_series(5001, 6000)")
    end = flush_lsn(cluster)
    cluster.start("pageserver")
    wait_ingested(cluster, end)
    theirs, at = stable_compute_page(cluster, "during", 0)
    wait_ingested(cluster, committed_past(cluster, at))
    assert_same_page(cluster.page_get(rel_path(cluster, "during"), 0).stdout, theirs)


def test_down_stops_the_pageserver_and_up_brings_it_back(cluster):
    cluster.sql("create table kept (x int)")
    cluster.sql("insert into kept select generate_series(1, 100)")
    wait_ingested(cluster, flush_lsn(cluster))
    pid = cluster.status()["pageserver"]["pid"]
    before = open(os.path.join(cluster.dir, "cluster.json")).read()
    cluster.down()
    assert not pid_alive(pid)
    assert cluster.status()["pageserver"]["pid"] is None

    # Its timeline names the safekeepers' ports: moving them is refused.
    moved = cluster.run("up", "--port-base", "30000", check=False)
    assert moved.returncode == 1 and moved.stderr.count("\n") == 1
    assert "not supported" in moved.stderr
    assert open(os.path.join(cluster.dir, "cluster.json")).read() == before

    out = cluster.up().stdout
    assert "importing" not in out
    assert open(os.path.join(cluster.dir, "cluster.json")).read() == before
    assert pid_alive(cluster.status()["pageserver"]["pid"])
    theirs, at = stable_compute_page(cluster, "kept", 0)
    wait_ingested(cluster, committed_past(cluster, at))
    assert_same_page(cluster.page_get(rel_path(cluster, "kept"), 0).stdout, theirs)


def test_a_cluster_made_without_a_pageserver_gets_one_later(cluster_dir):
    """Up without the pageserver binary, then up with it: the compute's data
    directory, cleanly shut down by `down`, is imported at its last LSN and
    the pageserver follows the safekeepers from there."""
    bindir = make_shared_dir("strata-it-bin-")
    try:
        for name in ("strata", "strata-safekeeper", "strata-sync-safekeepers"):
            shutil.copy2(os.path.join(SAN_BUILD, "bin", name), bindir)
        cluster_dir.strata = os.path.join(bindir, "strata")
        cluster_dir.up()
        cluster_dir.sql("create table early (x int)")
        cluster_dir.sql("insert into early select generate_series(1, 1000)")
        cluster_dir.down()
    finally:
        cluster_dir.strata = strata_bin()
        shutil.rmtree(bindir, ignore_errors=True)
    assert import_lsn(cluster_dir) is None

    out = cluster_dir.up().stdout
    assert "importing" in out
    imported = import_lsn(cluster_dir)
    assert imported and LSN_RE.match(imported)
    cluster_dir.sql("insert into early values (1001)")
    theirs, at = stable_compute_page(cluster_dir, "early", 0)
    wait_ingested(cluster_dir, committed_past(cluster_dir, at))
    assert_same_page(cluster_dir.page_get(rel_path(cluster_dir, "early"), 0).stdout, theirs)
