"""A safekeeper whose WAL disk fails under load (issue 27; docs/design.md
§5.5 "a write or fsync error ... fails the timeline until a restart";
docs/operations.md "A safekeeper's disk fails").

sk2's data directory is moved onto strata-netdisk (tests/tools/netdisk.c), a
FUSE passthrough to a directory of the local disk, which fails every write
that reaches it and every fsync with EIO while a trigger file exists: a real
disk error as the kernel reports it, not a mock inside the safekeeper.
Under pgbench and a ledger client:

  * the disk fails: sk2's timeline reports failed (its HTTP status, the
    safekeeper_timeline_failed metric, `strata status`), and commits go on
    with sk1 and sk3;
  * the disk is healed (trigger removed, remounted so that no page the
    kernel kept in its cache is trusted) and sk2 is restarted: it loads
    what is durable, truncates what is not, and catches up;
  * it counts again: with sk1 stopped, commits go on with sk2 and sk3;
  * every acknowledged ledger row is present.
"""
import os
import subprocess
import time
import urllib.request

import pytest

from conftest import SAN_BUILD, lsn_to_int, wait_until
from test_durability import Ledger, create_ledger, pgbench_finish, pgbench_init, pgbench_start

NETDISK = os.path.join(SAN_BUILD, "bin", "strata-netdisk")


class FailingDisk:
    """strata-netdisk over `backing` at `mountpoint`, failing while
    `trigger` exists.  Fast: no simulated latency or limits."""

    def __init__(self, backing, mountpoint, trigger):
        self.backing, self.mountpoint, self.trigger = backing, mountpoint, trigger
        self.proc = None

    def mount(self):
        log = open(self.backing + ".log", "ab")
        self.proc = subprocess.Popen(
            [NETDISK, "--backing", self.backing, "--latency-us", "0", "--iops", "1000000",
             "--mbps", "100000", "--fail-when", self.trigger, self.mountpoint],
            stdout=log, stderr=log)
        log.close()
        wait_until(lambda: os.path.ismount(self.mountpoint) or self.proc.poll() is not None,
                   20, "strata-netdisk to mount")
        assert self.proc.poll() is None, self.log()

    def fail(self):
        open(self.trigger, "w").close()

    def heal(self):
        if os.path.exists(self.trigger):
            os.unlink(self.trigger)

    def unmount(self):
        if self.proc is None:
            return
        subprocess.run(["umount", self.mountpoint], check=False, capture_output=True)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            subprocess.run(["umount", "-l", self.mountpoint], check=False, capture_output=True)
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def log(self):
        with open(self.backing + ".log", errors="replace") as f:
            return f.read()


def sk_timeline(cluster, name):
    """The cluster's timeline in a safekeeper's HTTP status (None if absent)."""
    tenant, timeline = cluster.ids()
    st = cluster.http_get_json(cluster.safekeeper(name)["http_port"], "/v1/status")
    for tl in st["timelines"]:
        if tl["tenant_id"] == tenant and tl["timeline_id"] == timeline:
            return tl
    return None


def metrics(cluster, name):
    port = cluster.safekeeper(name)["http_port"]
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        return r.read().decode()


def grows(ledger, n, timeout, what):
    before = len(ledger.acked)
    wait_until(lambda: len(ledger.acked) >= before + n or ledger.error is not None, timeout,
               what)
    assert ledger.error is None, ledger.error


def test_wal_disk_failure_under_load(cluster):
    if not os.path.exists(NETDISK):
        pytest.skip("%s not built (needs libfuse3)" % NETDISK)
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("mounting strata-netdisk needs root and /dev/fuse")
    sk2dir = cluster.safekeeper_datadir("sk2")
    disk = FailingDisk(sk2dir + ".disk", sk2dir, os.path.join(cluster.dir, "sk2-disk-fails"))
    cluster.stop("sk2")
    os.rename(sk2dir, disk.backing)
    os.mkdir(sk2dir)
    disk.mount()
    try:
        cluster.start("sk2")
        create_ledger(cluster)
        pgbench_init(cluster)
        ledger = Ledger(cluster.connstr)
        ledger.start()
        bench = pgbench_start(cluster, seconds=45, clients=2)
        try:
            grows(ledger, 50, 60, "ledger commits before the failure")
            assert sk_timeline(cluster, "sk2")["failed"] is False

            # The disk fails: the next group-commit fdatasync gets EIO.
            disk.fail()
            wait_until(lambda: sk_timeline(cluster, "sk2")["failed"], 30,
                       "sk2's timeline to report the failure")
            grows(ledger, 100, 60, "commits with sk1 and sk3 while sk2's disk fails")
            assert "strata-netdisk: " in disk.log() and "failing writes" in disk.log()
            assert any(line.startswith("safekeeper_timeline_failed{") and line.endswith(" 1")
                       for line in metrics(cluster, "sk2").splitlines()), metrics(cluster, "sk2")
            sk2 = cluster.safekeeper("sk2")
            assert sk2["failed"] is True and sk2["pid"] is not None, sk2
            assert "FAILED" in cluster.run("status").stdout
            assert "failed: WAL write or fdatasync failed" in \
                open(os.path.join(cluster.dir, "sk2.log"), errors="replace").read()

            # Healed: a working disk, mounted afresh (the kernel's cache of
            # the failed mount may hold pages that never reached it), and a
            # restarted sk2.
            disk.heal()
            cluster.stop("sk2")
            disk.unmount()
            disk.mount()
            cluster.start("sk2")
            assert sk_timeline(cluster, "sk2")["failed"] is False

            def sk2_caught_up():
                sks = {s["name"]: s for s in cluster.status()["safekeepers"]}
                return sks["sk2"]["flush_lsn"] is not None and \
                    lsn_to_int(sks["sk2"]["flush_lsn"]) >= lsn_to_int(sks["sk1"]["commit_lsn"])
            wait_until(sk2_caught_up, 90, "sk2 to catch up after the restart")

            # It counts again: sk2 and sk3 commit without sk1.
            cluster.stop("sk1", immediate=True)
            grows(ledger, 50, 60, "commits with sk2 and sk3")
            cluster.start("sk1")
        finally:
            ledger.finish()
        assert ledger.error is None, ledger.error
        pgbench_finish(bench, timeout=120)
        rows = {r for (r,) in cluster.sql("select id from ledger")}
        missing = [i for i, _x in ledger.acked if i not in rows]
        assert not missing, "acknowledged ledger rows lost: %s" % missing[:10]
    finally:
        disk.heal()
        cluster.run("stop", "sk2", "--immediate", check=False)
        disk.unmount()
        time.sleep(0.1)
