"""
The safekeepers' WAL backup (issue 13, part 3; safekeeper/wal_backup.h,
docs/operations.md "WAL backup").

A real cluster (`strata up`, token auth on) whose three safekeepers back up
to one local-directory store (`strata up --remote file://...`, which the
pageserver uploads to as well):

  - under pgbench and then a WAL load with the pageserver stopped, closed
    segments appear in the store under tenants/<t>/timelines/<tl>/wal/,
    byte-identical to the safekeepers' segment files, and stock pg_waldump
    reads one record by record (the oracle); in the common case exactly one
    safekeeper PUTs each segment and the others find it there (metrics);
    every safekeeper's backup LSN advances;
  - with the store's root renamed away the backup fails, the status and
    `strata status` say so, and local WAL at and above the backup LSN is
    kept although the pageserver's consistent LSN is far past it (WAL
    below it is removed); with the root back, the backup catches up and
    removal follows.
"""
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest

from conftest import STOCK_PG_BINDIR, lsn_to_int, make_shared_dir, pageserver_built, wait_until

SEG = 16 << 20
NAMES = ("sk1", "sk2", "sk3")
EMIT = "SELECT pg_logical_emit_message(true, 'backup', repeat('x', 1000000))"
DELAY_MS = 4000


def seg_lsn(name):
    """Start LSN of a 16 MB segment from its 24-hex name."""
    return (int(name[8:16], 16) << 32) | (int(name[16:24], 16) * SEG)


def is_segment(name):
    return len(name) == 24 and all(c in "0123456789ABCDEF" for c in name)


def sk_tl(cluster, name):
    tenant, timeline = cluster.ids()
    port = cluster.safekeeper(name)["http_port"]
    return cluster.http_get_json(port, "/v1/tenant/%s/timeline/%s" % (tenant, timeline))


def sk_metric(cluster, name, metric):
    port = cluster.safekeeper(name)["http_port"]
    req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port, headers=cluster.bearer())
    with urllib.request.urlopen(req, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(metric + " "):
                return float(line.split()[1])
    return 0.0


def store_dir(root, cluster):
    tenant, timeline = cluster.ids()
    return os.path.join(root, "tenants", tenant, "timelines", timeline, "wal")


def store_segments(root, cluster):
    d = store_dir(root, cluster)
    return sorted(n for n in os.listdir(d) if is_segment(n)) if os.path.isdir(d) else []


def local_dir(cluster, name):
    tenant, timeline = cluster.ids()
    return os.path.join(cluster.safekeeper_datadir(name), tenant, timeline)


def local_segments(cluster, name):
    """Segment names on a safekeeper, the one being written (.partial) too."""
    names = (n[:-len(".partial")] if n.endswith(".partial") else n
             for n in os.listdir(local_dir(cluster, name)))
    return sorted(n for n in names if is_segment(n))


def backup_lsn(cluster, name):
    return lsn_to_int(sk_tl(cluster, name)["wal_backup"]["backup_lsn"])


def committed_floor(cluster):
    """Start of the segment holding the lowest committed end: every segment
    below it is closed and committed on every safekeeper."""
    return min(lsn_to_int(sk_tl(cluster, n)["commit_lsn"]) for n in NAMES) // SEG * SEG


def emit(cluster, count):
    with cluster.connect() as conn:
        conn.execute("SET statement_timeout = 0")
        for _ in range(count):
            conn.execute(EMIT)


def pgbench(cluster, *args):
    cmd = [os.path.join(STOCK_PG_BINDIR, "pgbench")] + list(args) + [cluster.connstr]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def waldump_segment(cluster, root, names, i):
    """Stock pg_waldump over store segment names[i] (with the next one for
    the record that crosses its end): every record decodes, CRC included."""
    with tempfile.TemporaryDirectory(dir=cluster.dir) as tmp:
        for n in names[i:i + 2]:
            shutil.copy(os.path.join(store_dir(root, cluster), n), tmp)
        start, end = seg_lsn(names[i]), seg_lsn(names[i + 1])
        out = subprocess.run([os.path.join(STOCK_PG_BINDIR, "pg_waldump"), "-p", tmp, "-s",
                              "%X/%X" % (start >> 32, start & 0xFFFFFFFF), "-e",
                              "%X/%X" % (end >> 32, end & 0xFFFFFFFF)],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        return len(re.findall(r"^rmgr: ", out.stdout, re.M))


@pytest.fixture
def backed_up(cluster_dir):
    if not pageserver_built():
        pytest.skip("the pageserver is not built")
    root = os.path.join(make_shared_dir("strata-walbackup-"), "store")
    os.mkdir(root)
    cluster_dir.env["SAFEKEEPER_WAL_BACKUP_DELAY_MS"] = str(DELAY_MS)
    cluster_dir.up("--remote", "file://" + root)
    try:
        yield cluster_dir, root
    finally:
        shutil.rmtree(os.path.dirname(root), ignore_errors=True)


def test_wal_backup_copies_closed_segments_once_and_holds_wal_while_the_store_is_away(backed_up):
    cluster, root = backed_up
    for n in NAMES:
        port = cluster.safekeeper(n)["http_port"]
        assert cluster.http_get_json(port, "/v1/status")["remote"] == "file://" + root

    # --- segments reach the store, once each, byte-identical ------------
    pgbench(cluster, "-i", "-q", "-s", "2")
    pgbench(cluster, "-c", "2", "-j", "2", "-T", "5")
    emit(cluster, 3)  # the pages the load needs are in the compute now
    cluster.stop("pageserver")  # its consistent LSN stops: no WAL removal from here
    emit(cluster, 60)
    target = committed_floor(cluster)
    wait_until(lambda: all(backup_lsn(cluster, n) >= target for n in NAMES), 120,
               "every safekeeper's backup LSN to reach %X" % target)
    stored = store_segments(root, cluster)
    assert len(stored) >= 4, stored
    # Only closed, committed segments: none at or past the committed end.
    assert all(seg_lsn(s) + SEG <= target for s in stored), (stored, hex(target))
    compared = 0
    for s in stored:
        with open(os.path.join(store_dir(root, cluster), s), "rb") as f:
            remote = f.read()
        assert len(remote) == SEG, s
        for n in NAMES:
            p = os.path.join(local_dir(cluster, n), s)
            if os.path.exists(p):
                with open(p, "rb") as f:
                    assert f.read() == remote, "%s differs from %s's copy" % (s, n)
                compared += 1
    # The 60 MB written with the pageserver stopped are still local everywhere.
    assert compared >= 3 * 3, compared
    assert waldump_segment(cluster, root, stored, len(stored) - 2) > 10
    # Each safekeeper backed up each segment once: it PUT it, or found it
    # there and skipped it.  The stagger (by node id) makes one PUT per
    # segment the usual case; two safekeepers that both pass HEAD before the
    # first PUT lands both PUT it (seen once under a loaded machine: 6 PUTs
    # for 5 segments), which costs a second identical copy, nothing more.
    uploaded = sum(sk_metric(cluster, n, "safekeeper_wal_backup_segments_uploaded_total")
                   for n in NAMES)
    skipped = sum(sk_metric(cluster, n, "safekeeper_wal_backup_segments_skipped_total")
                  for n in NAMES)
    assert uploaded + skipped == 3 * len(stored), (uploaded, skipped, stored)
    assert len(stored) <= uploaded < 2 * len(stored), (uploaded, stored)
    for n in NAMES:
        wb = sk_tl(cluster, n)["wal_backup"]
        assert wb["errors"] == 0 and not wb["failing"] and wb["last_error"] == "", wb

    # --- the store goes away: WAL at and above the backup LSN is kept ----
    # Only the WAL backup's part of the store fails: its wal/ directory becomes a
    # symlink to itself (HEADs and puts under it fail with ELOOP; a store that
    # answers "missing" would let segments no one needs count as backed up,
    # design.md §5.5), while the pageserver, which
    # shares the store, keeps uploading: its remote_consistent_lsn moves on, so
    # what holds the WAL back below is the backup LSN alone.
    wal_dir = store_dir(root, cluster)
    away = wal_dir + ".away"
    os.rename(wal_dir, away)
    os.symlink(os.path.basename(wal_dir), wal_dir)  # a loop: every HEAD and PUT fails (ELOOP)
    emit(cluster, 40)

    def all_failing():
        return all(sk_tl(cluster, n)["wal_backup"]["failing"] for n in NAMES)

    wait_until(all_failing, 60, "every safekeeper to report the backup failing")
    frozen = {n: backup_lsn(cluster, n) for n in NAMES}
    for n in NAMES:
        wb = sk_tl(cluster, n)["wal_backup"]
        assert "/wal/0000" in wb["last_error"] and wb["errors"] >= 1, wb
        assert sk_metric(cluster, n, "safekeeper_wal_backup_errors_total") >= 1
    st = {s["name"]: s for s in cluster.status()["safekeepers"]}
    for n in NAMES:
        assert st[n]["wal_backup_error"], st[n]
        assert lsn_to_int(st[n]["wal_backup_lsn"]) == frozen[n], st[n]
    human = cluster.run("status").stdout
    assert "BACKUP FAILING" in human, human

    cluster.start("pageserver")

    def ps_past_backup():
        return all(lsn_to_int(sk_tl(cluster, n)["pageserver_feedback"]["disk_consistent_lsn"])
                   > frozen[n] + 2 * SEG for n in NAMES)

    wait_until(ps_past_backup, 180, "the pageserver's consistent LSN to pass the backup LSN")
    time.sleep(3)  # a few housekeeping rounds
    for n in NAMES:
        assert backup_lsn(cluster, n) == frozen[n]
        segs = local_segments(cluster, n)
        # Removal went up to the backup LSN and not past it.
        assert segs[0] == "%08X%08X%08X" % (1, frozen[n] >> 32, (frozen[n] % (1 << 32)) // SEG), \
            (n, segs[:3], hex(frozen[n]))
        assert seg_lsn(segs[0]) == frozen[n]

    # --- the store is back: the backup catches up, removal follows -------
    os.unlink(wal_dir)
    os.rename(away, wal_dir)
    target = committed_floor(cluster)
    wait_until(lambda: all(backup_lsn(cluster, n) >= target for n in NAMES), 120,
               "the backup to catch up after the outage")
    for n in NAMES:
        assert not sk_tl(cluster, n)["wal_backup"]["failing"]
    wait_until(lambda: all(seg_lsn(local_segments(cluster, n)[0]) > frozen[n] for n in NAMES),
               60, "WAL removal to follow the backup")
    # What the backlog held that no one needs any more (the pageserver's
    # manifests cover it, every safekeeper has it) counts as backed up without
    # a PUT, and older objects go (design.md §5.5): every object left is whole.
    for s in store_segments(root, cluster):
        assert os.path.getsize(os.path.join(store_dir(root, cluster), s)) == SEG, s


def ps_timeline(cluster):
    tenant, timeline = cluster.ids()
    port = cluster.status()["pageserver"]["http_port"]
    return cluster.http_get_json(port, "/v1/tenant/%s/timeline/%s" % (tenant, timeline))


def test_walreceiver_reads_wal_the_safekeepers_removed_from_the_backup(cluster_dir):
    """A pageserver set back to an older state (a copy of its directory)
    needs WAL the safekeepers have removed: its WAL receiver reads those
    segments from the WAL backup (PAGESERVER_REMOTE, the same store),
    ingests them, and streams the rest from the safekeepers.  A fresh
    compute then reads every row.  The store deletes WAL below the
    pageserver's published positions unless a safekeeper has not flushed
    it (docs/design.md §5.5): sk3 is down from before the copy, so the
    store keeps the WAL the old state needs while sk1 and sk2 remove it."""
    if not pageserver_built():
        pytest.skip("the pageserver is not built")
    cluster = cluster_dir
    root = os.path.join(make_shared_dir("strata-walbackup-"), "store")
    os.mkdir(root)
    try:
        cluster.env["SAFEKEEPER_WAL_BACKUP_DELAY_MS"] = "500"
        cluster.up("--remote", "file://" + root)
        cluster.sql("CREATE TABLE t (id int, pad text)")
        cluster.sql("INSERT INTO t SELECT g, repeat('a', 100) FROM generate_series(1, 1000) g")
        commit = max(lsn_to_int(sk_tl(cluster, n)["commit_lsn"]) for n in NAMES)
        wait_until(lambda: lsn_to_int(cluster.status()["pageserver"]["last_record_lsn"] or "0/0")
                   >= commit, 60, "the pageserver to ingest the first rows")
        # Where the copy will start (within a segment: the wait below asks
        # for removal a segment past it).
        snap_lsn = lsn_to_int(cluster.status()["pageserver"]["last_record_lsn"])
        cluster.stop("sk3", immediate=True)
        cluster.stop("pageserver")
        psdir = os.path.join(cluster.dir, "pageserver")
        snap = psdir + ".snap"
        subprocess.run(["cp", "-a", psdir, snap], check=True)
        cluster.start("pageserver")
        # ~5 segments more, in rows a compute reads back.
        for i in range(6):
            cluster.sql("INSERT INTO t SELECT g, repeat('b', 1000) FROM generate_series(1, 10000) g")
        want = cluster.sql("SELECT count(*), sum(length(pad)) FROM t")[0]

        def removed_past_snapshot():
            return all(seg_lsn(local_segments(cluster, n)[0]) > snap_lsn + SEG
                       for n in ("sk1", "sk2"))

        wait_until(removed_past_snapshot, 180,
                   "sk1 and sk2 to remove the WAL the old pageserver state needs")
        cluster.stop("pageserver")
        shutil.rmtree(psdir)
        os.rename(snap, psdir)
        cluster.start("pageserver")
        commit = max(lsn_to_int(sk_tl(cluster, n)["commit_lsn"]) for n in ("sk1", "sk2"))
        wait_until(lambda: lsn_to_int(cluster.status()["pageserver"]["last_record_lsn"] or "0/0")
                   >= commit, 180, "the pageserver to catch up through the WAL backup")
        wr = ps_timeline(cluster)["walreceiver"]
        assert wr["backup_segments"] >= 1, wr
        with open(os.path.join(cluster.dir, "pageserver.log")) as f:
            assert "from the WAL backup" in f.read()
        # A fresh compute: its pages come from the pageserver.
        cluster.stop("compute")
        cluster.start("compute")
        assert cluster.sql("SELECT count(*), sum(length(pad)) FROM t")[0] == want
    finally:
        shutil.rmtree(os.path.dirname(root), ignore_errors=True)



def test_replaced_safekeeper_after_its_peers_removed_old_wal(cluster_dir):
    """`strata safekeeper replace` once the peers removed their old WAL (it
    is in the backup): the new member is seeded from a peer's oldest segment
    on, finds the segments it holds already backed up (no second copy),
    takes part in commits, and removes its WAL as the others do."""
    if not pageserver_built():
        pytest.skip("the pageserver is not built")
    cluster = cluster_dir
    root = os.path.join(make_shared_dir("strata-walbackup-"), "store")
    os.mkdir(root)
    try:
        cluster.env["SAFEKEEPER_WAL_BACKUP_DELAY_MS"] = str(DELAY_MS)
        cluster.up("--remote", "file://" + root)
        cluster.sql("CREATE TABLE t (id int, pad text)")
        # sk3 dies first: the store keeps the WAL from its flush on (it may
        # need it, design.md §5.5) while sk1 and sk2 remove theirs.
        os.kill(cluster.safekeeper("sk3")["pid"], 9)
        for _ in range(5):
            cluster.sql("INSERT INTO t SELECT g, repeat('c', 1000) FROM generate_series(1, 10000) g")

        def peers_removed():
            stored = store_segments(root, cluster)
            return stored and all(local_segments(cluster, n)[0] > stored[0]
                                  for n in ("sk1", "sk2"))

        wait_until(peers_removed, 180, "sk1 and sk2 to remove their oldest WAL")
        first = store_segments(root, cluster)[0]
        shutil.rmtree(cluster.safekeeper_datadir("sk3"))
        proc = cluster.run("safekeeper", "replace", "sk3", timeout=300)
        assert "caught up" in proc.stdout, proc.stdout
        assert cluster.safekeeper("sk3")["node_id"] == 4
        segs = local_segments(cluster, "sk3")
        in_store = set(store_segments(root, cluster))
        assert segs[0] > first, (segs[:3], first)  # seeded from a peer's oldest segment on
        for _ in range(3):
            cluster.sql("INSERT INTO t SELECT g, repeat('d', 1000) FROM generate_series(1, 10000) g")
        assert cluster.sql("SELECT count(*) FROM t")[0][0] == 80000
        target = committed_floor(cluster)
        wait_until(lambda: all(backup_lsn(cluster, n) >= target for n in NAMES), 120,
                   "every member, the new one too, to back up to %X" % target)
        wb = sk_tl(cluster, "sk3")["wal_backup"]
        assert wb["errors"] == 0, wb
        # In the replaced node's place it is third to look: the first member
        # puts each new segment, the replacement finds it there.  What the
        # first member deleted meanwhile (no one needed it once the new node
        # flushed past it: design.md §5.5) it does not put back, unless its
        # own view of that lagged; then the next pass deletes it again.
        deleted = sk_tl(cluster, "sk1")["wal_backup"]["segments_deleted"]
        assert wb["segments_uploaded"] <= deleted, (wb, deleted)
        # The segments it was seeded with that were in the store: not put again.
        seeded = [s for s in segs if s in in_store]
        assert wb["segments_skipped"] >= len(seeded) + 1, (wb, seeded)
        wait_until(lambda: local_segments(cluster, "sk3")[0] > segs[0], 120,
                   "the new member to remove WAL below its backup and the pageserver's position")
    finally:
        shutil.rmtree(os.path.dirname(root), ignore_errors=True)
