"""
Copy-on-write branches in the pageserver (issue #15, docs/storage.md
"Branches"), on one `strata up` cluster driven with SQL; branches are made
through the pageserver's HTTP API at LSNs captured with
pg_current_wal_lsn().

What it shows:
  - a branch at L1 reads, over the pagestream, exactly the parent's pages,
    sizes and relation list at L1, and a full basebackup of it at L1 holds
    the same relation files as the parent's at L1; updates the parent made
    after L1 are not visible on it; reads below its start are refused;
  - the timeline JSON (get, list, create) shows ancestor_timeline_id and
    ancestor_lsn; bad requests get clear errors (unknown ancestor 404, an
    LSN outside the window 400 naming it, conflicting fields 400);
  - lsn_by_time finds the end of the last commit at or before a time (kind
    "commit"), a later time gives the latest LSN, an earlier one is a 400
    naming the window; a branch by ancestor_time starts there;
  - a branch of a branch reads through two levels;
  - after the pageserver's volume is lost, every timeline comes back from
    the object store (the manifests carry the ancestors; ancestors are
    restored before their branches); then, with GC on and a small window, the parent's GC horizon stops at the lowest branch point
    (it would rise far above it without the cap), the branch still reads
    the same pages; DELETE of the parent is 409 naming its branches;
    deleting the branches releases the horizon;
  - when the volume is lost and the parent's restore fails (a damaged data
    object), the branch is not left half-restored: the status lists both as
    not loaded and GC of the tenant stops; once the object is repaired, both
    come back, GC with a small window keeps the parent's horizon at the
    branch point, and after another restart the branch reads at its branch
    point what it read before the loss (review finding 3).
"""
import io
import json
import os
import shutil
import tarfile
import time
import urllib.error
import urllib.request

import psycopg
import pytest

import conftest
import pagestream
from conftest import int_to_lsn, lsn_to_int, pg_user, wait_until

pytestmark = pytest.mark.skipif(not conftest.pageserver_built(), reason="pageserver not built")

SPC = 1663
WINDOW = 64 * 1024


def http(cluster, method, path, body=None, timeout=30):
    with open(os.path.join(cluster.dir, "cluster.json")) as f:
        port = json.load(f)["pageserver"]["http_port"]
    data = json.dumps(body).encode() if body is not None else None
    headers = dict(cluster.bearer())
    if data is not None:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), data=data,
                                 method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode("utf-8", "replace")


class Timelines:
    def __init__(self, cluster, only_parent=False):
        self.cluster = cluster
        self.tenant, self.main = cluster.ids()

    def path(self, tl=None, tail=""):
        return "/v1/tenant/%s/timeline%s%s" % (self.tenant, "/" + tl if tl else "", tail)

    def info(self, tl):
        status, body = http(self.cluster, "GET", self.path(tl))
        assert status == 200, body
        return body

    def branch(self, ancestor, expect=201, **fields):
        body = dict(fields)
        body["ancestor_timeline_id"] = ancestor
        # As the CLI will: the safekeepers the first compute on it will use.
        body.setdefault("safekeepers", self.info(self.main)["safekeepers"])
        status, out = http(self.cluster, "POST", self.path(), body)
        assert status == expect, (status, out)
        return out

    def lsn_by_time(self, tl, when):
        q = urllib.parse.quote(when)
        return http(self.cluster, "GET", self.path(tl, "/lsn_by_time?time=" + q))

    def connect(self, tl):
        with open(os.path.join(self.cluster.dir, "cluster.json")) as f:
            port = json.load(f)["pageserver"]["pg_port"]
        return pagestream.connect("127.0.0.1", port, self.tenant, tl,
                                  password=self.cluster.tokens()[1])

    def wait_ingested(self, lsn):
        wait_until(lambda: lsn_to_int(self.info(self.main)["last_record_lsn"]) >= lsn, 60,
                   "the pageserver to ingest %s" % int_to_lsn(lsn))


def current_lsn(cluster):
    return lsn_to_int(cluster.sql("SELECT pg_current_wal_lsn()::text")[0][0])


def read_rel(c, db, rfn, lsn):
    n = c.nblocks(SPC, db, rfn, 0, lsn)
    return [c.get_page(SPC, db, rfn, 0, b, lsn) for b in range(n)]


def basebackup_files(cluster, tl, lsn):
    """Relation files of a full basebackup (pg_control and WAL left out:
    they carry the time they were made)."""
    with open(os.path.join(cluster.dir, "cluster.json")) as f:
        port = json.load(f)["pageserver"]["pg_port"]
    admin, _ = cluster.tokens()
    buf = io.BytesIO()
    with psycopg.connect("host=127.0.0.1 port=%d user=%s dbname=postgres" % (port, pg_user()),
                         autocommit=True, connect_timeout=10, password=admin) as conn:
        with conn.cursor().copy("basebackup %s %s %s full" % (cluster.ids()[0], tl,
                                                              int_to_lsn(lsn))) as copy:
            for chunk in copy:
                buf.write(chunk)
    out = {}
    with tarfile.open(fileobj=io.BytesIO(buf.getvalue())) as tar:
        for m in tar.getmembers():
            if m.isfile() and (m.name.startswith("base/") or m.name.startswith("global/")) \
                    and m.name != "global/pg_control":
                out[m.name] = tar.extractfile(m).read()
    return out


def test_branches_read_through_keep_gc_and_resolve_times(cluster_dir):
    cluster = cluster_dir
    cluster.env["PAGESERVER_GC_INTERVAL"] = "0"  # GC on later, after a restart
    cluster.up()
    t = Timelines(cluster)
    main = t.main
    cluster.sql("CREATE TABLE br (id int PRIMARY KEY, v int, pad text)")
    cluster.sql("INSERT INTO br SELECT g, 1, repeat('x', 100) FROM generate_series(1, 300) g")
    (rfn, db), = cluster.sql("SELECT pg_relation_filenode('br'), (SELECT oid FROM pg_database "
                             "WHERE datname = current_database())")
    l1 = current_lsn(cluster)
    cluster.sql("UPDATE br SET v = 2")
    cluster.sql("CREATE TABLE after_branch (x int)")
    l2 = current_lsn(cluster)
    t.wait_ingested(l2)

    # ---- a branch at L1 reads the parent's state at L1 ----
    t0 = time.monotonic()
    b1 = t.branch(main, ancestor_lsn=int_to_lsn(l1))
    print("branch created in %.1f ms (HTTP round trip; nothing copied)" %
          ((time.monotonic() - t0) * 1000))
    start = l1 & ~7
    assert b1["start_lsn"] == int_to_lsn(start) and b1["ancestor_lsn"] == int_to_lsn(start)
    assert b1["ancestor_timeline_id"] == main, b1
    child = b1["timeline_id"]
    info = t.info(child)
    assert info["ancestor_timeline_id"] == main and info["ancestor_lsn"] == int_to_lsn(start)
    assert info["last_record_lsn"] == int_to_lsn(start), info
    assert t.info(main)["ancestor_timeline_id"] is None
    status, listing = http(cluster, "GET", t.path())
    assert status == 200
    assert {x["timeline_id"]: x["ancestor_timeline_id"] for x in listing["timelines"]} == {
        main: None, child: main}

    cp, cc = t.connect(main), t.connect(child)
    try:
        parent_at_l1 = read_rel(cp, db, rfn, start)
        assert len(parent_at_l1) > 3
        assert read_rel(cc, db, rfn, start) == parent_at_l1
        assert read_rel(cc, db, rfn, pagestream.LATEST) == parent_at_l1
        assert read_rel(cp, db, rfn, l2) != parent_at_l1, "the update must change the pages"
        assert cc.db_size(db, start) == cp.db_size(db, start)
        with pytest.raises(pagestream.PagestreamError) as e:
            cc.nblocks(SPC, db, rfn, 0, start - 8)
        assert "below the start" in e.value.message, e.value.message
    finally:
        cp.close()
        cc.close()
    # The relation created after L1 exists on the parent only.
    rels = lambda tl, lsn: {(r["db"], r["rel"], r["fork"]): r["nblocks"] for r in http(
        cluster, "GET", t.path(tl, "/rels?lsn=%s" % int_to_lsn(lsn)))[1]["rels"]}
    assert rels(child, start) == rels(main, start)
    assert len(rels(main, l2)) > len(rels(child, start))
    assert basebackup_files(cluster, child, start) == basebackup_files(cluster, main, start)

    # ---- bad requests ----
    last = lsn_to_int(t.info(main)["last_record_lsn"])
    err = t.branch("0" * 32, expect=404, ancestor_lsn=int_to_lsn(l1))
    assert "not found" in err["error"], err
    err = t.branch(main, expect=400, ancestor_lsn=int_to_lsn(last + 0x100000))
    assert "outside the readable window" in err["error"] and int_to_lsn(last) in err["error"]
    err = t.branch(main, expect=400, ancestor_lsn="0/10")
    assert "outside the readable window" in err["error"], err
    err = t.branch(main, expect=400, ancestor_lsn=int_to_lsn(l1),
                      ancestor_time="2026-01-01 00:00:00+00")
    assert "at most one" in err["error"], err
    err = t.branch(main, expect=400, initdb=True)
    assert "neither" in err["error"], err
    err = t.branch(main, expect=400, ancestor_time="yesterday")
    assert "invalid ancestor_time" in err["error"], err
    status, err = http(cluster, "POST", t.path(), {"ancestor_lsn": int_to_lsn(l1)})
    assert status == 400 and "ancestor_timeline_id" in err["error"], err

    # ---- lsn_by_time ----
    before_c1 = current_lsn(cluster)
    cluster.sql("INSERT INTO br VALUES (1001, 1, 'c1')")
    time.sleep(0.3)
    (when,), = cluster.sql("SELECT clock_timestamp()::text")
    time.sleep(0.3)
    before_c2 = current_lsn(cluster)
    cluster.sql("INSERT INTO br VALUES (1002, 1, 'c2')")
    t.wait_ingested(current_lsn(cluster))
    status, r = t.lsn_by_time(main, when)
    assert status == 200 and r["kind"] == "commit", r
    assert before_c1 < lsn_to_int(r["lsn"]) <= before_c2, (r, int_to_lsn(before_c1),
                                                           int_to_lsn(before_c2))
    status, late = t.lsn_by_time(main, "2999-01-01T00:00:00Z")
    assert status == 200 and late["kind"] == "latest", late
    assert late["lsn"] == t.info(main)["last_record_lsn"]
    status, early = t.lsn_by_time(main, "2001-01-01 00:00:00+00")
    assert status == 400 and "before the readable window" in early["error"], early
    bt = t.branch(main, ancestor_time=when)
    assert bt["start_lsn"] == r["lsn"], (bt, r)
    # On the child, below its branch point, the ancestor's commits answer.
    status, rc = t.lsn_by_time(child, "2999-01-01T00:00:00Z")
    assert status == 200 and rc["kind"] == "latest" and rc["lsn"] == int_to_lsn(start), rc

    # ---- a branch of a branch ----
    b2 = t.branch(child)
    assert b2["start_lsn"] == int_to_lsn(start) and b2["ancestor_timeline_id"] == child
    grandchild = b2["timeline_id"]
    c = t.connect(grandchild)
    try:
        assert read_rel(c, db, rfn, start) == parent_at_l1
    finally:
        c.close()

    # ---- GC: the parent's horizon stays at the lowest branch point ----
    cluster.sql("INSERT INTO br SELECT g, 3, repeat('y', 200) FROM generate_series(2000, 4000) g")
    end = current_lsn(cluster)
    assert end - WINDOW > start, "the window must end above the branch point"
    t.wait_ingested(end)
    branches = (child, grandchild, bt["timeline_id"])
    for tl in branches:  # each branch's (empty) store is in the object store
        wait_until(lambda: t.info(tl)["remote"]["manifests_uploaded"] >= 1, 60,
                   "a manifest of branch %s" % tl)
    # The volume is lost: everything comes back from the object store,
    # ancestors before their branches, with GC on and a small window.
    cluster.stop("pageserver", immediate=True)
    shutil.rmtree(os.path.join(cluster.dir, "pageserver", "tenants"))
    cluster.env["PAGESERVER_GC_INTERVAL"] = "1s"
    cluster.env["PAGESERVER_PITR_WINDOW_BYTES"] = str(WINDOW)
    cluster.start("pageserver")

    def back(tl):
        status, body = http(cluster, "GET", t.path(tl))
        return status == 200 and body
    for tl in branches:
        info = wait_until(lambda: back(tl), 120, "branch %s to be restored" % tl)
        assert info["ancestor_timeline_id"] in (main, child) and info["ancestor_lsn"] == \
            info["start_lsn"], info
    assert back(grandchild)["ancestor_timeline_id"] == child
    t.wait_ingested(end)
    gc = wait_until(lambda: (lambda i: i["gc"]["runs"] >= 1 and i["gc"])(t.info(main)), 60,
                    "the first GC pass on the parent")
    assert gc["horizon"] == int_to_lsn(start), gc  # not last - window: the branch holds it
    c = t.connect(grandchild)
    try:
        assert read_rel(c, db, rfn, start) == parent_at_l1
    finally:
        c.close()
    status, err = http(cluster, "DELETE", t.path(main))
    assert status == 409 and "has branches" in err["error"] and child in err["error"] \
        and bt["timeline_id"] in err["error"], err
    status, err = http(cluster, "DELETE", t.path(child))
    assert status == 409 and grandchild in err["error"], err
    for tl in (grandchild, child):
        status, _ = http(cluster, "DELETE", t.path(tl))
        assert status == 200
    # Released: the horizon rises to the next branch point (the time branch).
    wait_until(lambda: t.info(main)["gc"]["horizon"] == bt["start_lsn"], 30,
               "the horizon to rise to the remaining branch point %s" % bt["start_lsn"])


def newest_manifest(root, tenant, tl):
    mdir = os.path.join(root, "tenants", tenant, "timelines", tl, "manifest")
    names = sorted(n for n in os.listdir(mdir) if n.endswith(".json"))
    with open(os.path.join(mdir, names[-1])) as f:
        return json.load(f)


def ps_metric(cluster, name):
    port = cluster.status()["pageserver"]["http_port"]
    req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port, headers=cluster.bearer())
    with urllib.request.urlopen(req, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return None


class LostVolume:
    """A parent with a branch at B, both uploaded; the pageserver killed and
    its tenants directory deleted, or only the parent's directory (GC off
    until then)."""

    def __init__(self, cluster, only_parent=False):
        self.cluster = cluster
        cluster.env["PAGESERVER_GC_INTERVAL"] = "0"
        cluster.up()
        self.t = t = Timelines(cluster)
        self.remote = os.path.join(cluster.dir, "remote")
        cluster.sql("CREATE TABLE kb (id int PRIMARY KEY, v int, pad text)")
        cluster.sql("INSERT INTO kb SELECT g, 1, repeat('k', 100) FROM generate_series(1, 300) g")
        (self.rfn, self.db), = cluster.sql(
            "SELECT pg_relation_filenode('kb'), (SELECT oid FROM pg_database "
            "WHERE datname = current_database())")
        b = current_lsn(cluster)
        cluster.sql("UPDATE kb SET v = 2")
        t.wait_ingested(current_lsn(cluster))
        self.child = t.branch(t.main, ancestor_lsn=int_to_lsn(b))["timeline_id"]
        self.start = b & ~7
        self.before = self.branch_pages()
        assert len(self.before) > 3
        wait_until(lambda: t.info(self.child)["remote"]["manifests_uploaded"] >= 1, 60,
                   "a manifest of the branch")
        wait_until(lambda: lsn_to_int(t.info(t.main)["remote"]["remote_consistent_lsn"]) >=
                   self.start, 90, "the parent's upload to reach the branch point")
        cluster.stop("pageserver", immediate=True)
        tenants = os.path.join(cluster.dir, "pageserver", "tenants")
        if only_parent:
            tenants = os.path.join(tenants, t.tenant, "timelines", t.main)
        shutil.rmtree(tenants)

    def branch_pages(self):
        cc = self.t.connect(self.child)
        try:
            return read_rel(cc, self.db, self.rfn, self.start)
        finally:
            cc.close()

    def damage(self, tl, kind):
        """Flips bytes (same size) in tl's biggest data object of its newest
        manifest, or in that manifest; returns a function that repairs it."""
        mdir = os.path.join(self.remote, "tenants", self.t.tenant, "timelines", tl, "manifest")
        victim = os.path.join(mdir, sorted(os.listdir(mdir))[-1])
        if kind == "data":
            files = newest_manifest(self.remote, self.t.tenant, tl)["files"]
            victim = os.path.join(os.path.dirname(mdir), "data", "%016x.dat" %
                                  max(files, key=lambda f: f["size"])["id"])
        with open(victim, "rb") as f:
            good = f.read()
        bad = bytearray(good)
        for i in range(len(bad) // 4, len(bad) * 3 // 4, 512 if kind == "data" else 7):
            bad[i] ^= 0xFF
        with open(victim, "wb") as f:
            f.write(bytes(bad))

        def repair():
            with open(victim, "wb") as f:
                f.write(good)
        return repair

    def restores_ended(self):
        c = self.cluster
        wait_until(lambda: ps_metric(c, "pageserver_remote_restores_failed_total") or 0, 120,
                   "a restore to fail")
        wait_until(lambda: ps_metric(c, "pageserver_remote_restore_timelines_pending") == 0, 120,
                   "the restores to end")

    def write_past_the_window(self):
        """More than the GC window on the parent, flushed; then GC passes
        (every second) have had their chance to move its horizon."""
        t = self.t
        self.cluster.sql("INSERT INTO kb SELECT g, 3, repeat('z', 200) "
                         "FROM generate_series(1000, 4000) g")
        end = current_lsn(self.cluster)
        assert end - WINDOW > self.start, "the window must end above the branch point"
        t.wait_ingested(end)
        wait_until(lambda: lsn_to_int(t.info(t.main)["disk_consistent_lsn"]) - WINDOW >
                   self.start, 120, "the parent to flush past the branch point plus the window")
        time.sleep(5)
        horizon = lsn_to_int(t.info(t.main)["gc"]["horizon"] or "0/0")
        print("parent's GC horizon %s, branch point %s" % (int_to_lsn(horizon),
                                                          int_to_lsn(self.start)))
        return horizon

    def branch_reads_as_before(self, horizon):
        self.cluster.stop("pageserver")
        self.cluster.start("pageserver")
        status, body = wait_until(
            lambda: (lambda r: r[0] != 503 and r)(http(self.cluster, "GET",
                                                       self.t.path(self.child))),
            120, "the branch to load")
        assert status == 200, (status, body, int_to_lsn(horizon))
        assert self.branch_pages() == self.before
        assert lsn_to_int(self.t.info(self.t.main)["gc"]["horizon"]) <= self.start


def small_gc_window(cluster):
    cluster.env["PAGESERVER_GC_INTERVAL"] = "1s"
    cluster.env["PAGESERVER_PITR_WINDOW_BYTES"] = str(WINDOW)


def test_failed_restore_of_the_ancestor_keeps_the_branch(cluster_dir):
    """Finding 3 of reviews/reliability-4470d5a, scenario A: the volume is
    lost and the parent's restore fails (a damaged data object).  Once the
    object is repaired and GC runs with a small window, the parent's horizon
    must stay at the branch point, so that after one more restart the branch
    opens and reads at its branch point what it read before the loss.
    Before the fix the branch was left on disk, unloaded, GC moved past its
    branch point and the next start refused it (404; "below the GC
    horizon" in the log)."""
    lv = LostVolume(cluster_dir)
    cluster, t = cluster_dir, lv.t
    repair = lv.damage(t.main, "data")
    cluster.start("pageserver")
    lv.restores_ended()
    check_not_loaded(cluster, t, t.main)
    repair()
    cluster.stop("pageserver")
    small_gc_window(cluster)
    cluster.start("pageserver")
    wait_until(lambda: http(cluster, "GET", t.path(t.main))[0] == 200, 120, "the parent back")
    lv.branch_reads_as_before(lv.write_past_the_window())


def test_failed_restore_of_the_branch_holds_its_branch_point(cluster_dir):
    """Scenario B: the parent is restored but its branch's restore fails (a
    damaged manifest).  GC of the tenant stops, so the parent's horizon stays
    at or below the branch point however much it writes; its DELETE is
    refused naming the branch; once repaired, the branch comes back and
    reads as before."""
    lv = LostVolume(cluster_dir)
    cluster, t = cluster_dir, lv.t
    repair = lv.damage(lv.child, "manifest")
    small_gc_window(cluster)
    cluster.start("pageserver")
    lv.restores_ended()
    check_not_loaded(cluster, t, lv.child)
    assert lv.child in t.info(t.main)["gc"]["blocked"]
    status, err = http(cluster, "DELETE", t.path(t.main))
    assert status == 409 and lv.child in err["error"], err
    horizon = lv.write_past_the_window()
    assert horizon <= lv.start
    repair()
    lv.branch_reads_as_before(horizon)


def check_not_loaded(cluster, t, tl):
    """While tl is missing, the status names it with its reason, and the
    log says GC of the tenant stops."""
    status, body = http(cluster, "GET", "/v1/status")
    assert status == 200, body
    ids = {u["timeline_id"]: u for u in body["not_loaded"]}
    assert tl in ids and ids[tl]["reason"], body["not_loaded"]
    assert ps_metric(cluster, "pageserver_timelines_not_loaded") >= 1
    with open(os.path.join(cluster.dir, "pageserver.log"), errors="replace") as f:
        assert "GC of tenant %s stops" % t.tenant in f.read()


def test_branch_left_on_disk_loads_once_its_ancestor_is_restored(cluster_dir):
    """Only the parent's directory is lost (what a start before the fix left
    behind after a failed restore: the branch on disk, its ancestor absent).
    The parent is restored, and the branch, which could not load before it,
    loads right after, with its branch point held: GC keeps the parent's
    horizon at it, and after a restart the branch reads as before.  Before,
    the branch stayed unloaded until a restart, and GC took its pages."""
    lv = LostVolume(cluster_dir, only_parent=True)
    cluster, t = cluster_dir, lv.t
    small_gc_window(cluster)
    cluster.start("pageserver")
    wait_until(lambda: http(cluster, "GET", t.path(lv.child))[0] == 200, 60,
               "the branch to load once its parent is restored")
    assert lv.branch_pages() == lv.before
    assert http(cluster, "GET", "/v1/status")[1]["not_loaded"] == []
    assert t.info(t.main)["gc"]["blocked"] is None
    horizon = lv.write_past_the_window()
    assert horizon == lv.start
    lv.branch_reads_as_before(horizon)
