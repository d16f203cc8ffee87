"""The pageserver's replica basebackup (`basebackup T TL LSN replica`,
docs/design.md §6.9) refuses clearly what a replica cannot start from: an
LSN with no checkpoint record at or below it, a newest checkpoint whose
redo point GC has passed (`strata start compute NAME --read-only` then asks
the primary for a CHECKPOINT and starts from the new record), a malformed
mode.  The read-only computes themselves: test_readonly_compute.py.
"""
import psycopg
import pytest

from conftest import lsn_to_int, pageserver_built, wait_until
from readonly_harness import pageserver_conn

pytestmark = pytest.mark.skipif(not pageserver_built(), reason="pageserver not built")


def wait_ingested(cluster, lsn):
    wait_until(lambda: lsn_to_int(cluster.status()["pageserver"]["last_record_lsn"])
               >= lsn_to_int(lsn), 60, "the pageserver to ingest %s" % lsn)


def committed_lsn(cluster):
    """The end of the primary's WAL once the pageserver has it."""
    lsn = cluster.sql("select pg_current_wal_flush_lsn()::text")[0][0]
    wait_ingested(cluster, lsn)
    return cluster.status()["pageserver"]["last_record_lsn"]


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
