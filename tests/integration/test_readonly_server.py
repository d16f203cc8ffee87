"""Read-only computes, server side (docs/operations.md "Read-only
computes"): the pageserver's replica basebackup, strata.read_lsn and reads
at the replay LSN in the extension, and the safekeepers' lag series, on a
compute started by hand (readonly_harness.py) instead of the CLI.

  * a static compute pinned at L sees the data as of L, and keeps seeing it
    while the primary writes on;
  * a replica follows the primary, opens once it replayed to where its
    basebackup's files were taken, and its lag shows in /metrics;
  * bad requests (replica basebackup with no checkpoint record to start
    from) get clear errors.
"""
import re
import urllib.request

import psycopg
import pytest

from conftest import lsn_to_int, pageserver_built, wait_until
from readonly_harness import ReadOnlyCompute, pageserver_conn

pytestmark = pytest.mark.skipif(not pageserver_built(), reason="pageserver not built")


def wait_ingested(cluster, lsn):
    wait_until(lambda: lsn_to_int(cluster.status()["pageserver"]["last_record_lsn"])
               >= lsn_to_int(lsn), 60, "the pageserver to ingest %s" % lsn)


def committed_lsn(cluster):
    """The end of the primary's WAL once the pageserver has it."""
    lsn = cluster.sql("select pg_current_wal_flush_lsn()::text")[0][0]
    wait_ingested(cluster, lsn)
    return cluster.status()["pageserver"]["last_record_lsn"]


def test_static_compute_sees_the_data_as_of_its_lsn(cluster):
    cluster.sql("create table ro_t (id int primary key, v text)")
    cluster.sql("insert into ro_t select g, md5(g::text) from generate_series(1, 3000) g")
    before = cluster.sql("select count(*), sum(hashtext(v)) from ro_t")
    lsn = committed_lsn(cluster)
    # Changes after L: new rows, an update, a dropped table, a new table.
    cluster.sql("update ro_t set v = 'changed' where id % 3 = 0")
    cluster.sql("insert into ro_t select g, 'late' from generate_series(3001, 4000) g")
    cluster.sql("create table ro_late (a int); insert into ro_late values (1)")
    ro = ReadOnlyCompute(cluster, lsn=lsn)
    try:
        ro.start()
        assert ro.sql("select pg_is_in_recovery()") == [(True,)]
        assert ro.sql("select count(*), sum(hashtext(v)) from ro_t") == before
        assert ro.sql("select to_regclass('ro_late')") == [(None,)]
        # An index scan reads the index as of L as well.
        with psycopg.connect(ro.connstr, autocommit=True) as conn:
            conn.execute("set enable_seqscan = off")
            assert conn.execute("select count(*) from ro_t where id > 2990").fetchall() == [(10,)]
        # The primary writes on; the static compute does not move.
        cluster.sql("delete from ro_t where id < 100")
        wait_ingested(cluster, cluster.sql("select pg_current_wal_flush_lsn()::text")[0][0])
        assert ro.sql("select count(*), sum(hashtext(v)) from ro_t") == before
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            ro.sql("insert into ro_t values (0, 'x')")
    finally:
        ro.stop()


def metrics_text(cluster, name):
    port = cluster.safekeeper(name)["http_port"]
    req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port, headers=cluster.bearer())
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.read().decode()


def test_replica_follows_the_primary_and_reports_lag(cluster):
    cluster.sql("create table rep_t (id int primary key, v text)")
    cluster.sql("insert into rep_t select g, md5(g::text) from generate_series(1, 2000) g")
    committed_lsn(cluster)
    ro = ReadOnlyCompute(cluster, safekeeper="sk1")
    try:
        ro.start()
        assert ro.sql("select pg_is_in_recovery()") == [(True,)]
        assert ro.sql("select count(*) from rep_t") == [(2000,)]
        cluster.sql("insert into rep_t select g, 'new' from generate_series(2001, 2500) g")
        cluster.sql("update rep_t set v = 'upd' where id <= 10")
        target = lsn_to_int(cluster.sql("select pg_current_wal_flush_lsn()::text")[0][0])

        def replayed():
            lsn = ro.sql("select pg_last_wal_replay_lsn()::text")[0][0]
            return lsn is not None and lsn_to_int(lsn) >= target

        wait_until(replayed, 60, "the replica to replay the new rows")
        assert ro.sql("select count(*), count(*) filter (where v = 'upd') from rep_t") == \
            [(2500, 10)]

        def lag_reported():
            m = re.search(r'^safekeeper_standby_replay_lag_bytes\{[^}]*application_name='
                          r'"ro_replica"[^}]*\} (\S+)$', metrics_text(cluster, "sk1"), re.M)
            return m is not None and float(m.group(1)) == 0
        wait_until(lag_reported, 30, "sk1 to report the replica's lag as 0")
    finally:
        ro.stop()


def replica_basebackup_error(cluster, lsn):
    tenant, timeline = cluster.ids()
    with pageserver_conn(cluster) as conn:
        with pytest.raises(psycopg.Error) as e:
            with conn.cursor().copy("basebackup %s %s %s replica" % (tenant, timeline, lsn)):
                pass
    return str(e.value)


def timeline_info(cluster):
    tenant, timeline = cluster.ids()
    return cluster.http_get_json(cluster.status()["pageserver"]["http_port"],
                                 "/v1/tenant/%s/timeline/%s" % (tenant, timeline))


def test_replica_basebackup_bad_requests(cluster_dir):
    """No checkpoint record at or below the LSN; the newest one's redo point
    below the GC horizon (then the CLI asks the primary for a CHECKPOINT,
    which makes a new one a replica can start from); a malformed mode."""
    cluster = cluster_dir
    cluster.env["PAGESERVER_GC_INTERVAL"] = "1s"
    cluster.env["PAGESERVER_PITR_WINDOW_BYTES"] = str(256 * 1024)
    cluster.up()
    tenant, timeline = cluster.ids()
    # The timeline's first checkpoint record is the first compute's startup
    # checkpoint, which starts at the timeline's start and is stored at its
    # end: at the start LSN there is none.
    start = timeline_info(cluster)["start_lsn"]
    assert "no checkpoint record at or below LSN %s" % start in \
        replica_basebackup_error(cluster, start)
    with pageserver_conn(cluster) as conn:
        with pytest.raises(psycopg.Error, match="malformed basebackup command"):
            with conn.cursor().copy("basebackup %s %s latest replicas" % (tenant, timeline)):
                pass

    # 1 MB of WAL after the startup checkpoint and no checkpoint since; the
    # restarts flush the store, so GC moves the horizon past that checkpoint.
    cluster.sql("create table gc_t (id int, pad text)")
    cluster.sql("insert into gc_t select g, repeat('x', 500) from generate_series(1, 2000) g")
    committed_lsn(cluster)
    cluster.stop("pageserver")
    cluster.start("pageserver")
    cp_redo = lsn_to_int(cluster.sql("select redo_lsn::text from pg_control_checkpoint()")[0][0])

    def horizon_past_checkpoint():
        h = timeline_info(cluster)["gc"]["horizon"]
        return lsn_to_int(h) > cp_redo and h
    horizon = wait_until(horizon_past_checkpoint, 60, "GC to move past the startup checkpoint")
    err = replica_basebackup_error(cluster, "latest")
    assert "is below the GC horizon" in err and "run CHECKPOINT on the timeline's primary" in \
        err, err

    # `strata start compute NAME --read-only` asks the primary for a
    # CHECKPOINT then, and starts the replica from the new record.
    out = cluster.run("start", "compute", "rep", "--read-only").stdout
    assert "asked compute compute for a CHECKPOINT" in out, out
    rep = [c for c in cluster.status()["computes"] if c["name"] == "rep"][0]
    with psycopg.connect(rep["connstr"], autocommit=True) as conn:
        assert conn.execute("select count(*) from gc_t").fetchall() == [(2000,)]
    assert lsn_to_int(horizon) > cp_redo
    cluster.run("stop", "compute", "rep")
