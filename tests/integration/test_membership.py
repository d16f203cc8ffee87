"""
Safekeeper configurations (issue 11.6, the consensus half): a running
cluster moves from the implicit configuration (generation 0, the compute's
list) through generation 1 {1,2,3}, a joint generation 2 {1,2,3} -> {1,2},
to generation 3 {1,2}, while a compute commits throughout.  The walproposer
learns each configuration from the safekeepers (nobody edits its settings);
the excluded safekeeper no longer counts: with sk2 stopped, sk1 and sk3
are a majority of the old configuration but not of the new one, so a
commit must wait until sk2 is back.  A restarted compute, still configured
with all three addresses, learns generation 3 and commits again.  Every
acknowledged row is present at the end.
"""
import os
import re
import shutil
import signal
import struct
import threading
import time

import psycopg
import pytest

from conftest import wait_until


def sk_conn(cluster, name, admin=False):
    """A connection to a safekeeper's WAL-push port for the cluster's
    timeline, with the tenant's token or (admin) the admin token."""
    connstr = cluster.safekeeper_connstr(name)
    admin_token, tenant_token = cluster.tokens()
    if admin and admin_token:
        connstr = connstr.replace("password=%s" % tenant_token, "password=%s" % admin_token)
    return psycopg.connect(connstr, autocommit=True, connect_timeout=10)


def timeline_status(cluster, name):
    with sk_conn(cluster, name) as c:
        cur = c.execute("TIMELINE_STATUS")
        cols = [d.name for d in cur.description]
        return dict(zip(cols, cur.fetchone()))


def switch(cluster, name, generation, members, new_members=None):
    """SWITCH_MEMBERSHIP on one safekeeper; retried while it is busy."""
    sql = "SWITCH_MEMBERSHIP %d '%s'" % (generation, members)
    if new_members is not None:
        sql += " '%s'" % new_members
    deadline = time.monotonic() + 10
    while True:
        try:
            with sk_conn(cluster, name, admin=True) as c:
                cur = c.execute(sql)
                cols = [d.name for d in cur.description]
                return dict(zip(cols, cur.fetchone()))
        except psycopg.errors.ObjectInUse:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def member_text(cluster, names, node_ids):
    return ",".join("%d@127.0.0.1:%d" % (node_ids[n], cluster.safekeeper(n)["pg_port"])
                    for n in names)


def insert(conn, ledger, n=20):
    for _ in range(n):
        (k,) = conn.execute("INSERT INTO ledger (note) VALUES ('x') RETURNING k").fetchone()
        ledger.append(k)


def compute_log(cluster):
    path = os.path.join(cluster.dir, "compute.log")
    with open(path, errors="replace") as f:
        return f.read()


def test_configuration_change_under_load(cluster):
    names = ["sk1", "sk2", "sk3"]
    st = cluster.status()
    node_ids = {sk["name"]: sk["node_id"] for sk in st["safekeepers"]}
    assert sorted(node_ids.values()) == [1, 2, 3], st["safekeepers"]
    assert st["configuration"]["generation"] == 0

    conn = cluster.connect()
    conn.execute("CREATE TABLE ledger (k bigserial PRIMARY KEY, note text)")
    ledger = []
    insert(conn, ledger)

    # Generation 1: the same three, now written down.  Only the admin token
    # may change who counts.
    all3 = member_text(cluster, names, node_ids)
    with sk_conn(cluster, "sk1") as c:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="admin token"):
            c.execute("SWITCH_MEMBERSHIP 1 '%s'" % all3)
    for n in names:
        row = switch(cluster, n, 1, all3)
        assert row["generation"] == 1 and row["members"] == all3, row
    insert(conn, ledger)
    wait_until(lambda: "configuration generation 1" in compute_log(cluster), 30,
               "the walproposer to learn generation 1")

    # Joint: {1,2,3} -> {1,2}; then {1,2} alone.
    two = member_text(cluster, ["sk1", "sk2"], node_ids)
    for n in names:
        switch(cluster, n, 2, all3, two)
    insert(conn, ledger)
    for n in names:
        switch(cluster, n, 3, two)
    insert(conn, ledger)
    st = cluster.status()
    assert st["configuration"]["generation"] == 3
    assert [m["node_id"] for m in st["configuration"]["members"]] == [1, 2]
    assert st["configuration"]["new_members"] == []
    status3 = timeline_status(cluster, "sk3")
    assert status3["generation"] == 3 and status3["members"] == two, status3

    # sk3 no longer counts: with sk2 stopped, nothing commits.
    sk2_pid = cluster.safekeeper("sk2")["pid"]
    os.kill(sk2_pid, signal.SIGSTOP)
    done = threading.Event()
    result = {}

    def blocked_insert():
        try:
            with cluster.connect() as c2:
                (k,) = c2.execute("INSERT INTO ledger (note) VALUES ('during') RETURNING k"
                                  ).fetchone()
                result["k"] = k
        except Exception as e:  # reported below
            result["error"] = e
        done.set()

    t = threading.Thread(target=blocked_insert)
    try:
        t.start()
        assert not done.wait(4), "a commit went through with sk1 and the excluded sk3"
    finally:
        os.kill(sk2_pid, signal.SIGCONT)
    assert done.wait(60), "the commit did not finish once sk2 was back"
    t.join()
    assert "error" not in result, result
    ledger.append(result["k"])
    insert(conn, ledger)
    conn.close()

    # A restarted compute is still configured with all three addresses; it
    # learns generation 3 from the safekeepers and commits with sk1 and sk2.
    cluster.stop("compute")
    cluster.start("compute")
    conn = cluster.connect()
    insert(conn, ledger)
    log = compute_log(cluster)
    assert re.search(r"holds configuration generation 3|using safekeeper configuration "
                     r"generation 3", log), log[-3000:]
    rows = {k for (k,) in conn.execute("SELECT k FROM ledger").fetchall()}
    missing = set(ledger) - rows
    assert not missing, "acknowledged rows lost: %s" % sorted(missing)[:10]
    conn.close()


def test_replace_dead_safekeeper_under_pgbench(cluster):
    """Issue 11.6's done-when: under pgbench with a ledger, kill -9 sk2 and
    delete its directory, `strata safekeeper replace sk2` (which returns once
    the new member caught up), then kill -9 sk1: commits go on with sk3 and
    the new member, and every acknowledged commit is present.  Then sk1 is
    replaced too, and the cluster goes down and up with its new nodes."""
    from test_durability import (Ledger, create_ledger, pgbench_finish, pgbench_init,
                                 pgbench_start)
    create_ledger(cluster)
    pgbench_init(cluster)
    ledger = Ledger(cluster.connstr)
    ledger.start()
    bench = pgbench_start(cluster, seconds=40, clients=2)
    try:
        wait_until(lambda: len(ledger.acked) >= 50, 60, "ledger commits before the failure")
        os.kill(cluster.safekeeper("sk2")["pid"], signal.SIGKILL)
        shutil.rmtree(cluster.safekeeper_datadir("sk2"))
        proc = cluster.run("safekeeper", "replace", "sk2", timeout=300)
        out = proc.stdout
        print(out)
        # Generation 1 writes the first configuration down, 2 is joint.
        assert "caught up" in out and "generation 3: members" in out, out
        st = cluster.status()
        assert st["configuration"]["generation"] == 3, st["configuration"]
        members = sorted(m["node_id"] for m in st["configuration"]["members"])
        assert members == [1, 3, 4], st["configuration"]
        assert cluster.safekeeper("sk2")["node_id"] == 4

        # The old sk1 dies: sk3 and the new node 4 are the majority.
        os.kill(cluster.safekeeper("sk1")["pid"], signal.SIGKILL)
        before = len(ledger.acked)
        wait_until(lambda: len(ledger.acked) >= before + 50, 90,
                   "ledger commits with sk3 and the new sk2 only")

        # A second change on top of the first: sk1 is replaced too.
        proc = cluster.run("safekeeper", "replace", "sk1", timeout=300)
        print(proc.stdout)
        st = cluster.status()
        assert st["configuration"]["generation"] == 5, st["configuration"]
        assert sorted(m["node_id"] for m in st["configuration"]["members"]) == [3, 4, 5]
        before = len(ledger.acked)
        wait_until(lambda: len(ledger.acked) >= before + 20, 90, "commits after two changes")
    finally:
        ledger.finish()
    assert ledger.error is None, ledger.error
    processed = pgbench_finish(bench, timeout=120)
    assert processed > 0
    rows = {r for (r,) in cluster.sql("select id from ledger")}
    missing = [i for i, _x in ledger.acked if i not in rows]
    assert not missing, "acknowledged ledger rows lost: %s" % missing[:10]

    # down and up: the new node ids come back from cluster.json, and the
    # compute's sync-safekeepers and walproposer, configured with the three
    # addresses, learn generation 5 from the safekeepers.
    cluster.down()
    cluster.up()
    st = cluster.status()
    assert [sk["node_id"] for sk in st["safekeepers"]] == [5, 4, 3], st["safekeepers"]
    assert st["configuration"]["generation"] == 5
    n = cluster.sql("insert into ledger (payload) values ('after up') returning id")[0][0]
    rows = {r for (r,) in cluster.sql("select id from ledger")}
    assert n in rows
    missing = [i for i, _x in ledger.acked if i not in rows]
    assert not missing, "acknowledged ledger rows lost after down/up: %s" % missing[:10]


def forged_greeting(tenant, timeline, seg_size, generation, members):
    """A ProposerGreeting (proto/walpush.h) with system_id 0, as
    sync-safekeepers sends it, so that only the configuration is new."""
    from test_safekeeper_badinput import members_wire
    return (b"g" + struct.pack("!I", 3) + bytes.fromhex(tenant) + bytes.fromhex(timeline)
            + struct.pack("!IQI", 150020, 0, seg_size) + struct.pack("!I", generation)
            + members_wire(members) + members_wire(()))


def push_greeting(cluster, name, payload, token):
    """Greets safekeeper `name` over a hand-spoken WAL-push session with
    `token`; returns ("greeting", bytes) or ("error", fields)."""
    from test_safekeeper_badinput import Conn, PgError, opts
    tenant, timeline = cluster.ids()
    c = Conn(cluster.safekeeper(name)["pg_port"], opts(tenant, timeline), password=token)
    try:
        c.start_copy_both("START_WAL_PUSH (proto_version '3')")
        c.copy_data(payload)
        try:
            return ("greeting", c.recv_copy())
        except PgError as e:
            return ("error", e.fields)
    finally:
        c.close()


def test_tenant_token_cannot_install_a_configuration(cluster):
    """Review finding 8: a tenant-token client greets every safekeeper with
    generation 0xFFFFFFFF and a member set naming none of them.  Each must
    refuse it (only the admin installs a configuration), keep its
    configuration (TIMELINE_STATUS, and the control file across a restart),
    and the compute must go on committing."""
    names = ["sk1", "sk2", "sk3"]
    admin_token, tenant_token = cluster.tokens()
    assert admin_token and tenant_token, "the test needs a cluster with token auth"
    conn = cluster.connect()
    conn.execute("CREATE TABLE ledger (k bigserial PRIMARY KEY, note text)")
    ledger = []
    insert(conn, ledger)
    tenant, timeline = cluster.ids()
    before = {n: timeline_status(cluster, n) for n in names}
    seg = int(before["sk1"]["wal_seg_size"])
    foreign = [(99, "127.0.0.1:9")]
    replies = {n: push_greeting(cluster, n, forged_greeting(tenant, timeline, seg, 0xFFFFFFFF,
                                                            foreign), tenant_token)
               for n in names}
    after = {n: timeline_status(cluster, n) for n in names}
    for n in names:
        assert (after[n]["generation"], after[n]["members"], after[n]["new_members"]) == (
            before[n]["generation"], before[n]["members"], before[n]["new_members"]), (
            n, replies[n], after[n])
        kind, fields = replies[n]
        assert kind == "error", (n, replies[n])
        assert "admin" in fields.get("D", "") + fields.get("M", ""), fields

    # Commits go on, within a bound (a forged configuration would stall them).
    conn.execute("SET statement_timeout = '30s'")
    insert(conn, ledger)

    # The control file holds what it held: a restart reads it back.
    cluster.stop("sk1")
    cluster.start("sk1")
    st = timeline_status(cluster, "sk1")
    assert st["generation"] == before["sk1"]["generation"], st
    insert(conn, ledger)
    assert "4294967295" not in compute_log(cluster)
    rows = {k for (k,) in conn.execute("SELECT k FROM ledger").fetchall()}
    assert not set(ledger) - rows
    conn.close()


def test_member_behind_is_brought_up_to_date(cluster):
    """A member that missed a switch cannot learn it from the compute any
    more (a tenant's greeting may not install it): the compute commits with
    the others, `strata status` shows the member behind, and `strata start`
    brings it up to date with the admin token -- whether it was stopped
    during the switch or ran but was unreachable.  Then it counts again."""
    names = ["sk1", "sk2", "sk3"]
    st = cluster.status()
    node_ids = {sk["name"]: sk["node_id"] for sk in st["safekeepers"]}
    all3 = member_text(cluster, names, node_ids)
    conn = cluster.connect()
    conn.execute("CREATE TABLE ledger (k bigserial PRIMARY KEY, note text)")
    conn.execute("SET statement_timeout = '60s'")
    ledger = []
    insert(conn, ledger)

    # sk3 is stopped while generation 1 is switched on the others.
    cluster.stop("sk3")
    for n in ["sk1", "sk2"]:
        switch(cluster, n, 1, all3)
    insert(conn, ledger)
    proc = cluster.start("sk3")
    assert "sk3: configuration generation 0 -> 1" in proc.stdout, proc.stdout
    assert timeline_status(cluster, "sk3")["generation"] == 1

    # sk3 runs but is unreachable while generation 2 is switched.
    sk3_pid = cluster.safekeeper("sk3")["pid"]
    os.kill(sk3_pid, signal.SIGSTOP)
    try:
        for n in ["sk1", "sk2"]:
            switch(cluster, n, 2, all3)
    finally:
        os.kill(sk3_pid, signal.SIGCONT)
    insert(conn, ledger)
    # The compute greets it with generation 2 and is refused; it commits
    # with sk1 and sk2 meanwhile.
    wait_until(lambda: "only the admin may install" in compute_log(cluster), 60,
               "sk3 to refuse the compute's newer configuration")
    insert(conn, ledger)
    assert timeline_status(cluster, "sk3")["generation"] == 1
    sk3 = cluster.safekeeper("sk3")
    assert sk3["generation"] == 1 and sk3["config_behind"] is True, sk3
    assert cluster.safekeeper("sk1")["config_behind"] is False
    text = cluster.run("status").stdout
    assert "BEHIND: configuration generation 1 of 2, run `strata start sk3`" in text, text

    proc = cluster.start("sk3")
    assert "already running" in proc.stdout and \
        "sk3: configuration generation 1 -> 2" in proc.stdout, proc.stdout
    assert cluster.safekeeper("sk3")["config_behind"] is False
    # The compute's next attempt is taken: sk3 catches up ...
    insert(conn, ledger)

    def sk3_caught_up():
        s = {sk["name"]: sk for sk in cluster.status()["safekeepers"]}
        return s["sk3"]["flush_lsn"] is not None and \
            lsn(s["sk3"]["flush_lsn"]) >= lsn(s["sk1"]["commit_lsn"])
    wait_until(sk3_caught_up, 90, "sk3 to catch up once brought up to date")
    # ... and counts: with sk2 stopped, sk1 and sk3 commit.
    cluster.stop("sk2", immediate=True)
    insert(conn, ledger)
    cluster.start("sk2")

    # A compute that starts while sk3 is behind (generation 3 switched while
    # it was unreachable): sync-safekeepers and the walproposer elect with
    # sk1 and sk2 while sk3 refuses them.
    os.kill(sk3_pid, signal.SIGSTOP)
    try:
        for n in ["sk1", "sk2"]:
            switch(cluster, n, 3, all3)
    finally:
        os.kill(sk3_pid, signal.SIGCONT)
    conn.close()
    cluster.stop("compute")
    cluster.start("compute")
    conn = cluster.connect()
    conn.execute("SET statement_timeout = '60s'")
    insert(conn, ledger)
    assert timeline_status(cluster, "sk3")["generation"] == 2
    assert "sk3: configuration generation 2 -> 3" in cluster.start("sk3").stdout
    assert cluster.safekeeper("sk3")["config_behind"] is False
    # (This compute's WAL begins after sk3's end, which no compute holds:
    # sk3 now lags on WAL, design.md §11, operations.md.)
    insert(conn, ledger)
    rows = {k for (k,) in conn.execute("SELECT k FROM ledger").fetchall()}
    missing = set(ledger) - rows
    assert not missing, "acknowledged rows lost: %s" % sorted(missing)[:10]
    conn.close()


def lsn(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)
