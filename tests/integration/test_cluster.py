"""The strata CLI's cluster lifecycle: up, status --json, down, stop/start.

Drives real processes: three strata-safekeeper daemons, the pageserver when
it is built, and a PostgreSQL 15 compute with strata.so, on loopback ports.
What the CLI does with the pageserver is tested in test_cli_pageserver.py;
here it is only a component that starts and stops with the others.
"""

import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import free_port_block
from conftest import (LSN_RE, SAN_BUILD, lsn_to_int, make_shared_dir, pageserver_built, pid_alive,
                      processes_using, strata_bin, wait_until)

# The subject is the CLI and the compute: the release build's daemons
# (conftest.py, release_daemons).
pytestmark = pytest.mark.release_daemons


def check_status_schema(st, directory):
    assert set(st) == {"dir", "auth", "auth_file", "remote", "compute", "computes", "pageserver",
                       "safekeepers", "configuration"}
    # Every compute (docs/cli.md, "Branches and computes"): the default one first.
    dflt = st["computes"][0]
    assert {"name", "timeline", "timeline_id", "read_only", "lsn", "port", "connstr", "pid",
            "running"} <= set(dflt), dflt
    assert dflt["name"] == "compute" and dflt["timeline"] == "main" and not dflt["read_only"]
    assert dflt["pid"] == st["compute"]["pid"] and dflt["running"] == (dflt["pid"] is not None)
    assert dflt["port"] == st["compute"]["port"] and dflt["connstr"] == st["compute"]["connstr"]
    assert dflt["lsn"] is None or LSN_RE.fullmatch(dflt["lsn"]), dflt
    assert st["dir"] == directory
    # the default remote store, beside the pageserver's data directory
    assert st["remote"] == "file://" + directory + "/remote"
    assert isinstance(st["auth"], bool)
    assert st["auth_file"] == (directory + "/auth.json" if st["auth"] else None)
    conf = st["configuration"]
    assert set(conf) == {"generation", "members", "new_members"}
    assert isinstance(conf["generation"], int) and conf["generation"] >= 0
    for m in conf["members"] + conf["new_members"]:
        assert set(m) == {"node_id", "addr"} and m["node_id"] >= 1, m
    compute = st["compute"]
    assert set(compute) == {"pid", "port", "connstr", "datadir"}
    assert compute["pid"] is None or isinstance(compute["pid"], int)
    assert isinstance(compute["port"], int)
    assert "port=%d" % compute["port"] in compute["connstr"]
    assert compute["datadir"].startswith(directory + "/")
    ps = st["pageserver"]
    assert set(ps) == {"pid", "pg_port", "http_port", "last_record_lsn", "disk_consistent_lsn",
                       "remote_consistent_lsn", "remote"}
    assert ps["pid"] is None or isinstance(ps["pid"], int)
    if not pageserver_built():
        assert ps["pid"] is None
    if ps["pid"] is None:
        assert ps["last_record_lsn"] is None and ps["disk_consistent_lsn"] is None
        assert ps["remote_consistent_lsn"] is None
    for key in ("last_record_lsn", "disk_consistent_lsn", "remote_consistent_lsn"):
        assert ps[key] is None or LSN_RE.match(ps[key]), ps[key]
    assert isinstance(ps["pg_port"], int) and isinstance(ps["http_port"], int)
    assert [sk["name"] for sk in st["safekeepers"]] == ["sk1", "sk2", "sk3"]
    ports = {compute["port"], ps["pg_port"], ps["http_port"]}
    for sk in st["safekeepers"]:
        assert set(sk) == {"name", "pid", "pg_port", "http_port", "node_id", "generation",
                           "config_behind", "failed", "term", "flush_lsn", "commit_lsn",
                           "wal_bytes", "max_wal_bytes", "wal_limited", "wal_backup_lsn",
                           "wal_backup_error"}
        assert sk["wal_limited"] in (None, True, False)
        assert sk["config_behind"] in (None, False) and sk["failed"] in (None, False), sk
        assert sk["wal_bytes"] is None or sk["wal_bytes"] >= 0
        assert sk["pid"] is None or isinstance(sk["pid"], int)
        assert sk["node_id"] is None or (isinstance(sk["node_id"], int) and sk["node_id"] >= 1)
        assert sk["generation"] is None or isinstance(sk["generation"], int)
        assert sk["term"] is None or (isinstance(sk["term"], int) and sk["term"] >= 0)
        for key in ("flush_lsn", "commit_lsn", "wal_backup_lsn"):
            assert sk[key] is None or LSN_RE.match(sk[key]), sk[key]
        assert sk["wal_backup_error"] is None or isinstance(sk["wal_backup_error"], str)
        ports.update([sk["pg_port"], sk["http_port"]])
    assert len(ports) == 9, "every port is distinct"


def test_up_status_down(cluster):
    st = cluster.status()
    check_status_schema(st, cluster.dir)
    assert pid_alive(st["compute"]["pid"])
    for sk in st["safekeepers"]:
        assert pid_alive(sk["pid"]), sk
    assert (st["pageserver"]["pid"] is not None) == pageserver_built()

    # A commit goes through the walproposer, so the safekeepers report it.
    cluster.sql("create table t (x int)")
    cluster.sql("insert into t select generate_series(1, 1000)")
    insert_lsn = lsn_to_int(cluster.sql("select pg_current_wal_flush_lsn()::text")[0][0])

    def majority_has_it():
        sks = cluster.status()["safekeepers"]
        have = [sk for sk in sks if sk["flush_lsn"] and lsn_to_int(sk["flush_lsn"]) >= insert_lsn]
        return len(have) >= 2 and all(sk["term"] >= 1 for sk in have)

    wait_until(majority_has_it, 30, "a majority of safekeepers to report the insert's LSN")
    assert cluster.sql("select count(*) from t") == [(1000,)]

    # The human form names every component.
    human = cluster.run("status").stdout
    for name in ("compute", "sk1", "sk2", "sk3", "pageserver"):
        assert name in human

    pids = [st["compute"]["pid"]] + [sk["pid"] for sk in st["safekeepers"]]
    if st["pageserver"]["pid"] is not None:
        pids.append(st["pageserver"]["pid"])
    cluster.down()
    st = cluster.status()
    check_status_schema(st, cluster.dir)
    assert st["compute"]["pid"] is None
    assert st["pageserver"]["pid"] is None
    assert all(sk["pid"] is None for sk in st["safekeepers"])
    for pid in pids:
        assert not pid_alive(pid), pid
    # down on a stopped cluster is a no-op.
    cluster.down()


def test_up_is_idempotent(cluster):
    before = cluster.status()
    with open(os.path.join(cluster.dir, "cluster.json")) as f:
        state_before = f.read()
    out = cluster.up().stdout
    assert "already running" in out
    after = cluster.status()
    assert after["compute"]["pid"] == before["compute"]["pid"]
    assert after["pageserver"]["pid"] == before["pageserver"]["pid"]
    assert [s["pid"] for s in after["safekeepers"]] == [s["pid"] for s in before["safekeepers"]]
    with open(os.path.join(cluster.dir, "cluster.json")) as f:
        assert f.read() == state_before


def test_stop_start_each_component(cluster):
    cluster.sql("create table kept (x int)")
    cluster.sql("insert into kept values (1), (2), (3)")
    for name in ("sk1", "sk2", "sk3"):
        old = cluster.safekeeper(name)["pid"]
        cluster.stop(name)
        assert cluster.safekeeper(name)["pid"] is None
        assert not pid_alive(old)
        cluster.start(name)
        new = cluster.safekeeper(name)["pid"]
        assert new is not None and new != old and pid_alive(new)

    sk2 = cluster.safekeeper("sk2")["pid"]
    cluster.stop("sk2", immediate=True)
    assert not pid_alive(sk2)
    cluster.start("sk2")

    old = cluster.status()["compute"]["pid"]
    cluster.stop("compute", immediate=True)
    assert cluster.status()["compute"]["pid"] is None
    assert not pid_alive(old)
    cluster.start("compute")
    assert cluster.sql("select sum(x) from kept") == [(6,)]
    cluster.stop("compute")
    assert cluster.status()["compute"]["pid"] is None
    cluster.start("compute")
    cluster.sql("insert into kept values (4)")
    assert cluster.sql("select sum(x) from kept") == [(10,)]

    # Stopping what is not running succeeds.
    cluster.stop("pageserver")
    assert cluster.status()["pageserver"]["pid"] is None
    cluster.stop("pageserver")
    cluster.stop("compute")
    cluster.stop("compute")


def test_port_base(cluster_dir):
    base = free_port_block(9)
    cluster_dir.up("--port-base", str(base))
    st = cluster_dir.status()
    assert st["compute"]["port"] == base
    ports = [(sk["pg_port"], sk["http_port"]) for sk in st["safekeepers"]]
    assert ports == [(base + 1, base + 2), (base + 3, base + 4), (base + 5, base + 6)]
    assert cluster_dir.sql("select current_setting('port')") == [(str(base),)]


def test_usage_and_failure_exit_codes():
    if not os.access(strata_bin(), os.X_OK):
        pytest.skip("not built yet: %s" % strata_bin())
    directory = make_shared_dir("strata-it-")
    try:
        def run(*args):
            return subprocess.run([strata_bin()] + list(args), capture_output=True, text=True,
                                  timeout=30)
        assert run().returncode == 2
        assert run("frobnicate").returncode == 2
        assert run("stop", "sk9", "--dir", directory).returncode == 2
        assert run("stop", "--dir", directory).returncode == 2
        assert run("up", "--port-base", "x", "--dir", directory).returncode == 2
        assert run("page", "--dir", directory).returncode == 2
        assert run("page", "get", "--blk", "0", "--dir", directory).returncode == 2
        assert run("page", "get", "--rel", "1663/5", "--blk", "0", "--dir", directory).returncode == 2
        assert run("page", "get", "--rel", "1663/5/1259", "--blk", "x",
                   "--dir", directory).returncode == 2
        assert run("page", "get", "--rel", "1663/5/1259", "--blk", "0", "--fork", "heap",
                   "--dir", directory).returncode == 2
        assert run("page", "get", "--rel", "1663/5/1259", "--blk", "0", "--lsn", "0/zz",
                   "--dir", directory).returncode == 2
        nocluster = run("page", "get", "--rel", "1663/5/1259", "--blk", "0",
                        "--dir", os.path.join(directory, "nope"))
        assert nocluster.returncode == 1 and nocluster.stderr.count("\n") == 1
        assert nocluster.stdout == ""
        missing = run("status", "--dir", os.path.join(directory, "nope"))
        assert missing.returncode == 1
        assert missing.stderr.count("\n") == 1 and "no cluster" in missing.stderr
        # Nothing was created by any of these.
        assert os.listdir(directory) == []
        helped = run("--help")
        assert helped.returncode == 0
        for name in ("up", "down", "status", "stop", "start", "psql", "sync-safekeepers",
                     "bench", "demo", "page get"):
            assert name in helped.stdout
    finally:
        os.rmdir(directory)


def test_psql_runs_against_the_compute(cluster):
    out = cluster.run("psql", "--", "-Atc", "select 40 + 2").stdout
    assert out.strip() == "42"


def test_sync_safekeepers_through_the_cli(cluster):
    cluster.sql("create table synced (x int)")
    cluster.sql("insert into synced select generate_series(1, 100)")
    end = lsn_to_int(cluster.sql("select pg_current_wal_flush_lsn()::text")[0][0])

    # A second proposer would fence the running compute: refused.
    refused = cluster.run("sync-safekeepers", check=False)
    assert refused.returncode == 1
    assert "compute is running" in refused.stderr
    assert cluster.status()["compute"]["pid"] is not None

    cluster.stop("compute")
    term_before = max(sk["term"] for sk in cluster.status()["safekeepers"])
    out = cluster.run("sync-safekeepers", timeout=120).stdout.strip().splitlines()[-1]
    assert LSN_RE.match(out), out
    assert lsn_to_int(out) >= end
    st = cluster.status()
    # Paxos needs a majority: sync-safekeepers may finish before the third
    # safekeeper has even seen the new term.
    assert sum(sk["term"] > term_before for sk in st["safekeepers"]) >= 2, st
    assert all(lsn_to_int(sk["commit_lsn"]) >= lsn_to_int(out) for sk in st["safekeepers"])

    # The compute comes back on top of the synced safekeepers.
    cluster.start("compute")
    cluster.sql("insert into synced values (101)")
    assert cluster.sql("select count(*) from synced") == [(101,)]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root drops privileges for postgres")
def test_untraversable_dir_is_a_clear_failure(cluster_dir):
    private = make_shared_dir("strata-it-private-")
    os.chmod(private, 0o700)
    try:
        directory = os.path.join(private, "cluster")
        proc = cluster_dir.run("up", "--dir", directory, check=False)
        assert proc.returncode == 1
        assert proc.stderr.count("\n") == 1
        assert "cannot reach" in proc.stderr and "traversable" in proc.stderr
        # It failed before starting anything.
        assert processes_using(directory) == []
        cluster_dir.run("down", "--dir", directory)
    finally:
        subprocess.run(["rm", "-rf", private])


def test_demo(cluster_dir):
    proc = cluster_dir.run("demo", "--dir", cluster_dir.dir, timeout=300)
    out = proc.stdout
    assert "progress:" in proc.stdout + proc.stderr
    assert "number of transactions actually processed" in out
    assert "connect:" in out and "stop all:" in out
    assert ("strata page get" in out) == pageserver_built()
    st = cluster_dir.status()
    assert st["compute"]["pid"] is not None
    # The summary agrees with what pgbench itself reported and with the
    # database: every transaction of the run inserted one history row.
    summary = out[out.index("== summary"):]
    txns = int(re.search(r"transactions\s+(\d+)", summary).group(1))
    processed = int(re.search(r"number of transactions actually processed: (\d+)", out).group(1))
    assert txns == processed
    history = cluster_dir.sql("select count(*) from pgbench_history")[0][0]
    assert history == txns
    # pgbench's own rate (over its measured time) and the summary's (over
    # the nominal 30 s) agree within a few percent.
    tps = float(re.search(r"TPS\s+([\d.]+)", summary).group(1))
    pgbench_tps = float(re.search(r"tps = ([\d.]+)", out).group(1))
    assert abs(tps - pgbench_tps) <= 0.05 * pgbench_tps, (tps, pgbench_tps)
    p50, p99 = map(float, re.search(r"p50 ([\d.]+) ms, p99 ([\d.]+) ms", summary).groups())
    assert 0 < p50 <= p99
    wal = int(re.search(r"WAL per transaction\s+(\d+) bytes", summary).group(1))
    assert 50 < wal < 100000
    images = re.search(r"images generated\s+(\d+)", summary)
    chain = re.search(r"longest chain read\s+(\d+)", summary)
    assert images and chain, summary


def test_bench_runs_programs_from_bench_dir(tmp_path):
    if not os.access(strata_bin(), os.X_OK):
        pytest.skip("not built yet: %s" % strata_bin())
    bench_dir = tmp_path / "bench"
    bench_dir.mkdir()
    program = bench_dir / "echo_env"
    program.write_text("#!/bin/sh\necho \"args=$* bindir=$STRATA_BINDIR\"\n")
    program.chmod(0o755)
    env = dict(os.environ, STRATA_BENCH_DIR=str(bench_dir))
    run = subprocess.run([strata_bin(), "bench", "echo_env", "--dir", str(tmp_path / "none"),
                          "-x", "--y"], env=env, capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "args=-x --y bindir=%s" % os.path.dirname(strata_bin())
    missing = subprocess.run([strata_bin(), "bench", "no_such_bench"], env=env,
                             capture_output=True, text=True, timeout=30)
    assert missing.returncode == 1 and "no benchmark no_such_bench" in missing.stderr


def test_down_without_a_majority_is_prompt(cluster):
    cluster.sql("create table before_down (x int)")
    cluster.sql("insert into before_down values (7)")
    cluster.stop("sk1", immediate=True)
    cluster.stop("sk3")
    started = time.monotonic()
    cluster.down()
    assert time.monotonic() - started < 20, "down waited for a fast shutdown that cannot finish"
    st = cluster.status()
    assert st["compute"]["pid"] is None and all(sk["pid"] is None for sk in st["safekeepers"])
    assert st["pageserver"]["pid"] is None
    cluster.up()
    assert cluster.sql("select x from before_down") == [(7,)]


def test_up_without_a_pageserver_binary(cluster_dir):
    """A strata whose directory has no strata-pageserver runs the cluster
    without one, says so, and refuses only `start pageserver`."""
    bindir = make_shared_dir("strata-it-bin-")
    try:
        for name in ("strata", "strata-safekeeper", "strata-sync-safekeepers"):
            shutil.copy2(os.path.join(SAN_BUILD, "bin", name), bindir)
        cluster_dir.strata = os.path.join(bindir, "strata")
        out = cluster_dir.up().stdout
        assert "pageserver: not built" in out
        st = cluster_dir.status()
        check_status_schema(st, cluster_dir.dir)
        assert st["pageserver"]["pid"] is None
        assert st["compute"]["pid"] is not None
        cluster_dir.sql("create table nops (x int)")
        human = cluster_dir.run("status").stdout
        assert "not built" in human
        refused = cluster_dir.run("start", "pageserver", check=False)
        assert refused.returncode == 1 and "strata-pageserver not found" in refused.stderr
        assert refused.stderr.count("\n") == 1
        cluster_dir.stop("pageserver")
        cluster_dir.down()
    finally:
        cluster_dir.strata = strata_bin()
        shutil.rmtree(bindir, ignore_errors=True)
