"""
Losing the pageserver's volume and two safekeepers' volumes at once (issue 13,
done-when 2; docs/operations.md, "Losing two safekeepers").  Of the timeline
there remain one safekeeper (sk1), and the object store that `strata up` gives
every cluster (file://D/remote): the pageserver's manifests and data files and
the safekeepers' WAL backup of closed segments.

On a `strata up` cluster under a pgbench load with a ledger: kill -9 the
pageserver, sk2 and sk3, delete their three data directories, run
`strata safekeeper recover --from sk1 --confirm` (sk2 and sk3 rebuilt from sk1
with new node ids, a new configuration generation forced on the three),
start the pageserver (it restores from the store), start a fresh stateless
compute: every ledger row acknowledged before the survivor had caught up is
there, amcheck is clean, pgbench balances agree, pgbench runs again and
commits.  Also: recover refuses while the others run, and without --confirm.

The test can fail (checked by hand when it was written): without the recovery
the compute's sync-safekeepers times out (1 of 3 safekeepers), also when sk2
and sk3 are merely started on empty directories; with the store deleted too
(an empty directory in its place) the pageserver never gets the timeline
back.
"""
import os
import re
import shutil
import time

from conftest import int_to_lsn, lsn_to_int, wait_until
from test_durability import Ledger, check_pgbench_and_ledger, create_ledger, pgbench, pgbench_init, pgbench_start
from test_pageserver_restore import restored
from test_pageserver_upload import ps_timeline


def sk_status(c, name):
    for sk in c.status()["safekeepers"]:
        if sk["name"] == name:
            return sk
    raise KeyError(name)


def sk_lsn(c, name, key):
    v = sk_status(c, name).get(key)
    return lsn_to_int(v) if v else 0


def test_lose_pageserver_and_two_safekeepers(cluster_dir):
    c = cluster_dir
    t_start = time.monotonic()
    c.up()
    remote = os.path.join(c.dir, "remote")
    assert os.path.isdir(remote), "strata up gives the cluster a file:// store at %s" % remote

    # While the others run, recover refuses (they are not lost).
    proc = c.run("safekeeper", "recover", "--from", "sk1", "--confirm", check=False)
    assert proc.returncode == 1 and "sk2 is running" in proc.stderr, proc.stderr

    create_ledger(c)
    pgbench_init(c, scale=2)
    bench = pgbench_start(c, 60, clients=4)
    ledger = Ledger(c.connstr)
    ledger.start()
    wait_until(lambda: len(ledger.acked) > 300, 120, "the ledger to commit 300 rows")
    # Some WAL is in the backup and some pages in a manifest before the loss.
    wait_until(lambda: sk_lsn(c, "sk1", "wal_backup_lsn") > 0, 90, "a WAL segment backed up",
               interval=0.5)
    wait_until(lambda: lsn_to_int(ps_timeline(c)["remote"]["remote_consistent_lsn"]) > 0, 90,
               "a manifest uploaded", interval=0.5)

    # The rows to check: those acknowledged now, all below the compute's
    # insert position.  With a 2-of-3 quorum a commit may be on sk2 and sk3
    # only; once sk1's flush reaches that position, sk1 holds every one of
    # them, so losing sk2 and sk3 cannot lose them.  Rows acknowledged after
    # this point may be only on the two that are lost.
    acked = list(ledger.acked)
    commit_lsn = lsn_to_int(c.sql("select pg_current_wal_insert_lsn()")[0][0])
    wait_until(lambda: sk_lsn(c, "sk1", "flush_lsn") >= commit_lsn, 60,
               "sk1 to flush up to %s" % int_to_lsn(commit_lsn), interval=0.1)

    # The three volumes are lost at once, under load.
    for name in ("pageserver", "sk2", "sk3"):
        c.stop(name, immediate=True)
    for name in ("pageserver", "sk2", "sk3"):
        shutil.rmtree(os.path.join(c.dir, name))
    c.stop("compute", immediate=True)
    ledger.finish()
    bench.kill()
    bench.communicate()
    assert len(ledger.acked) >= len(acked)

    # Without --confirm: the plan and the caveat, nothing done.
    proc = c.run("safekeeper", "recover", "--from", "sk1", check=False)
    assert proc.returncode == 1 and "not confirmed" in proc.stderr, proc.stderr
    assert "caveat:" in proc.stdout, proc.stdout
    assert not os.path.exists(os.path.join(c.dir, "sk2"))

    t_loss = time.monotonic()
    proc = c.run("safekeeper", "recover", "--from", "sk1", "--confirm", timeout=120)
    print(proc.stdout)
    assert "generation 1: members" in proc.stdout, proc.stdout
    # Each new node got all of sk1's WAL, so every checked commit.
    seeded = re.findall(r"sk[23] started as node \d+ with WAL up to (\S+)", proc.stdout)
    assert len(seeded) == 2 and all(lsn_to_int(x) >= commit_lsn for x in seeded), proc.stdout
    ids = {sk["name"]: sk for sk in c.status()["safekeepers"]}
    assert ids["sk2"]["pid"] and ids["sk3"]["pid"]
    assert {ids[n].get("node_id") for n in ("sk1", "sk2", "sk3")} == {1, 4, 5}, ids

    restored.saw_503 = False
    c.start("pageserver")
    wait_until(lambda: restored(c), 120, "the pageserver to be restored", interval=0.2)
    c.start("compute")
    t_back = time.monotonic() - t_loss

    present = {row[0] for row in c.sql("select id from ledger")}
    missing = [row for row, _xid in acked if row not in present]
    assert not missing, "%d of %d acknowledged rows lost, e.g. %s" % (len(missing), len(acked),
                                                                     missing[:5])
    later = sum(1 for row, _xid in ledger.acked[len(acked):] if row in present)
    check_pgbench_and_ledger(c)
    proc = pgbench(c, "-c", "2", "-T", "3", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "number of transactions actually processed: 0" not in proc.stdout, proc.stdout
    for sk in c.status()["safekeepers"]:
        assert sk.get("generation") == 1, sk
    print("recovered: %d rows checked, %d of %d later ones kept; back %.1f s after the loss; "
          "test %.1f s" % (len(acked), later, len(ledger.acked) - len(acked), t_back,
                           time.monotonic() - t_start))
