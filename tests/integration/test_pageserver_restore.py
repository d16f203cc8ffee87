"""
A pageserver rebuilt from object storage (issue 13, part 4; docs/operations.md,
"Recovering a lost pageserver volume").  Its volume is lost outright: kill -9,
then its whole data directory deleted; it starts again, empty, with the same
--remote (the file:// backend, and radosgw in (a)), downloads the newest manifest's data
files, rebuilds its index from them and resumes WAL from the safekeepers at
the manifest's consistent LSN.

  (a) On a `strata up` cluster under a pgbench load with a ledger: every
      acknowledged commit is read back through a fresh stateless compute
      (new data directory, pages from the restored pageserver), amcheck is
      clean on the pgbench indexes, pgbench runs again, and while the
      restore ran the status said so.  Again against a real S3 server
      (radosgw, from STRATA_S3_SCRIPT; left out by make test without it).
  (b) The page oracle (test_page_oracle.py: every page the pageserver
      serves equals a stock standby's at the same LSN) holds at every
      point, those older than the deletion included (they come from the
      rebuilt store) and the one whose phase ran across it.
  (c) Deleting a timeline deletes its manifests and data objects from the
      store once its uploader has stopped, so a restart does not restore it.
"""
import os
import shutil
import threading
import time

import pytest

from conftest import int_to_lsn, lsn_to_int, make_shared_dir, wait_until
from test_durability import Ledger, check_pgbench_and_ledger, create_ledger, pgbench, pgbench_init, pgbench_start
from test_pageserver_upload import ps_metric, ps_timeline
from test_remote_storage import radosgw  # noqa: F401  (fixture)


@pytest.fixture
def remote_root():
    root = make_shared_dir("strata-remote-")
    yield root
    shutil.rmtree(root, ignore_errors=True)


def remote_lsn(c):
    return lsn_to_int(ps_timeline(c)["remote"]["remote_consistent_lsn"])


def sk_flush_lsn(c):
    """The highest commit LSN any safekeeper reports for the timeline."""
    tenant, timeline = c.ids()
    best = 0
    for sk in c.status()["safekeepers"]:
        if not sk.get("pid"):
            continue
        st = c.http_get_json(sk["http_port"], "/v1/tenant/%s/timeline/%s" % (tenant, timeline))
        best = max(best, lsn_to_int(st.get("commit_lsn") or "0/0"))
    return best


def restored(c):
    """The timeline status once the restore is done, else None (noting what
    the pageserver said meanwhile)."""
    import urllib.error
    try:
        return ps_timeline(c)
    except urllib.error.HTTPError as e:
        if e.code == 503:
            restored.saw_503 = True
        return None
    except (OSError, KeyError):
        return None


def test_lost_pageserver_volume_restored_from_remote(cluster_dir, remote_root):
    lost_volume_restored(cluster_dir, "file://" + remote_root)


def test_lost_pageserver_volume_restored_from_radosgw(cluster_dir, radosgw):  # noqa: F811
    """The same with a real S3 server (radosgw from STRATA_S3_SCRIPT; left out
    by make test without it, like test_remote_storage.py's S3 test)."""
    cluster_dir.env.update({k: v for k, v in radosgw.items() if k.startswith("STRATA_S3_")})
    lost_volume_restored(cluster_dir, "s3://strata-restore/it")


def lost_volume_restored(c, url):
    """Under pgbench and a ledger: kill -9 the pageserver, delete its data
    directory, start it: it comes back from the store at url, and a fresh
    compute reads every acknowledged row with clean indexes."""
    c.up("--remote", url)
    create_ledger(c)
    pgbench_init(c, scale=2)
    bench = pgbench_start(c, 40, clients=4)
    ledger = Ledger(c.connstr)
    ledger.start()
    start_lsn = remote_lsn(c)
    wait_until(lambda: len(ledger.acked) > 300, 120, "the ledger to commit 300 rows")
    # Something newer than the start is in the object store before the loss.
    wait_until(lambda: remote_lsn(c) > start_lsn, 90, "an upload under load", interval=0.5)
    wait_until(lambda: len(ledger.acked) > 400, 120, "the ledger to commit 400 rows")

    # The volume is lost: kill -9, then the whole data directory goes.
    c.stop("pageserver", immediate=True)
    psdir = os.path.join(c.dir, "pageserver")
    shutil.rmtree(psdir)
    assert not os.path.exists(psdir)
    ledger.finish()
    bench.kill()
    bench.communicate()
    acked = list(ledger.acked)
    target = sk_flush_lsn(c)
    assert target > 0

    t0 = time.monotonic()
    restored.saw_503 = False
    c.start("pageserver")
    st = wait_until(lambda: restored(c), 300, "the timeline to be restored", interval=0.2)
    t_restored = time.monotonic() - t0
    wait_until(lambda: lsn_to_int(ps_timeline(c)["last_record_lsn"]) >= target, 300,
               "the restored pageserver to ingest up to %s" % int_to_lsn(target))
    t_caught_up = time.monotonic() - t0
    with open(os.path.join(c.dir, "pageserver.log"), errors="replace") as f:
        log = f.read()
    assert "restore " in log and "files " in log and "MB/s" in log, log[-3000:]
    assert ps_metric(c, "pageserver_remote_restores_completed_total") == 1
    assert ps_metric(c, "pageserver_remote_restore_timelines_pending") == 0
    print("restore: timeline back after %.1f s (503 seen meanwhile: %s), ingested to %s after "
          "%.1f s; status %s" % (t_restored, restored.saw_503, int_to_lsn(target), t_caught_up,
                                 st["remote"]))

    # A fresh stateless compute reads everything from the restored pageserver.
    c.stop("compute", immediate=True)
    c.start("compute")
    present = {row[0] for row in c.sql("select id from ledger")}
    missing = [row for row, _xid in acked if row not in present]
    assert not missing, "%d of %d acknowledged rows lost, e.g. %s" % (len(missing), len(acked),
                                                                     missing[:5])
    check_pgbench_and_ledger(c)
    proc = pgbench(c, "-c", "2", "-T", "3", timeout=120)
    assert proc.returncode == 0, proc.stderr
    # The uploader goes on after the restore with a new manifest seq.
    seq0 = ps_timeline(c)["remote"]["manifest_seq"]
    c.sql("checkpoint")
    wait_until(lambda: ps_timeline(c)["remote"]["manifest_seq"] > seq0, 90,
               "a manifest newer than the restored one", interval=0.5)


# ---- (b) the page oracle ----

def test_page_oracle_holds_across_a_restore_from_remote(monkeypatch, remote_root):
    from oracle_harness import running_oracle
    from oracle_workload import PHASES, run_phase
    from test_page_oracle import assert_oracle_holds, check_points

    monkeypatch.setenv("PAGESERVER_REMOTE", "file://" + remote_root)
    with running_oracle(fpw=False) as cluster:
        for name, fn in PHASES[:2]:
            run_phase(cluster, name, fn)
        before = cluster.points[-1].lsn

        def uploaded():
            st = cluster.pageserver.timeline_status(cluster.timeline)
            return lsn_to_int(st["remote"]["remote_consistent_lsn"]) >= before
        wait_until(uploaded, 120, "the upload of everything up to %s" % int_to_lsn(before),
                   interval=0.5)

        errors = []

        def phase():
            try:
                run_phase(cluster, *PHASES[2])
            except BaseException as e:  # reported below
                errors.append(e)
        worker = threading.Thread(target=phase, daemon=True)
        worker.start()
        cluster.wait_ingested(before + 1, timeout=60)
        cluster.pageserver.kill()
        shutil.rmtree(cluster.pageserver.datadir)
        os.makedirs(cluster.pageserver.datadir)
        cluster.pageserver.start()

        def back():
            try:
                return cluster.pageserver.timeline_status(cluster.timeline)
            except Exception:
                return None
        status = wait_until(back, 300, "the timeline to be restored")
        restored_at = lsn_to_int(status["disk_consistent_lsn"])
        assert restored_at >= before, (int_to_lsn(restored_at), int_to_lsn(before))

        worker.join(300)
        assert not worker.is_alive() and not errors, errors
        for name, fn in PHASES[3:]:
            run_phase(cluster, name, fn)
        end = cluster.finish_workload()
        cluster.wait_ingested(end)
        older = [p for p in cluster.points if p.lsn <= restored_at]
        assert len(older) >= 2, "points older than the deletion: %s" % [p.name for p in older]
        print("deleted after %s; restored at %s; %d points, %d of them older" % (
            int_to_lsn(before), int_to_lsn(restored_at), len(cluster.points), len(older)))
        reader = cluster.page_reader()
        timings = []
        assert_oracle_holds(check_points(cluster, reader, timings), timings)


# ---- (c) a deleted timeline is not restored ----

def test_deleted_timeline_leaves_the_remote_and_is_not_restored(cluster_dir, remote_root):
    import urllib.error
    import urllib.request
    c = cluster_dir
    c.up("--remote", "file://" + remote_root)
    tenant, timeline = c.ids()
    tl_root = os.path.join(remote_root, "tenants", tenant, "timelines", timeline)
    mdir = os.path.join(tl_root, "manifest")
    wait_until(lambda: os.path.isdir(mdir) and os.listdir(mdir), 60, "a manifest")
    c.stop("compute", immediate=True)
    port = c.status()["pageserver"]["http_port"]
    path = "/v1/tenant/%s/timeline/%s" % (tenant, timeline)
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method="DELETE",
                                 headers=c.bearer())
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200
    def objects(sub):
        d = os.path.join(tl_root, sub)
        return os.listdir(d) if os.path.isdir(d) else []
    wait_until(lambda: not objects("manifest") and not objects("data"), 60,
               "the timeline's objects to leave the store")
    c.stop("pageserver")
    c.start("pageserver")
    port = c.status()["pageserver"]["http_port"]

    def gone():
        try:
            c.http_get_json(port, path)
            return False
        except urllib.error.HTTPError as e:
            return e.code == 404
    wait_until(gone, 30, "the deleted timeline to stay deleted")
    with open(os.path.join(c.dir, "pageserver.log"), errors="replace") as f:
        assert "restore %s/%s" % (tenant, timeline) not in f.read()
