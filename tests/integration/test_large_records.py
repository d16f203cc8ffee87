"""
WAL records from 100 B to 20 MB through a whole cluster, across restarts
(issue 11.2).

PostgreSQL writes one WAL record per pg_logical_emit_message call, of any
size up to its 1 GB limit.  The safekeepers' online tracker accepted them,
but the restart scan and the pageserver's WAL receiver reassembled records
in a fixed 16 MB buffer: at a 20 MB record the scan stopped (and the
safekeeper truncated the acknowledged WAL after it) and ingest stopped for
good.

A writer commits ledger rows, each transaction also emitting a logical
message of the next size in SIZES; `strata down && strata up` runs between
rounds.  After every `up` (which starts a new, stateless compute from the
pageserver's basebackup at the safekeepers' commit LSN, so the pageserver
must have ingested past every large record) each acknowledged row must be
there.  STRATA_LARGE_RECORD_ROUNDS sets the number of rounds (default 3; the
issue asks for 10, run by hand: about 6 minutes here).
"""
import os

from conftest import wait_until  # noqa: F401

SIZES = [100, 10 << 10, 1 << 20, 17 << 20, 20 << 20]
ROUNDS = int(os.environ.get("STRATA_LARGE_RECORD_ROUNDS", "3"))


def write_round(cluster, first_id):
    """Commits one ledger row per size, each with a logical message of that
    size in the same transaction; returns the ids whose COMMIT returned."""
    acked = []
    with cluster.connect(autocommit=False, options="-c statement_timeout=0") as conn:
        for i, size in enumerate(SIZES):
            row = first_id + i
            conn.execute("insert into ledger (id, size) values (%s, %s)", (row, size))
            conn.execute("select pg_logical_emit_message(true, 'strata-large', repeat('x', %s))",
                         (size,))
            conn.commit()
            acked.append(row)
    return acked


def test_large_records_survive_down_up_rounds(cluster):
    cluster.sql("create table ledger (id int primary key, size int)")
    acked = []
    for r in range(ROUNDS):
        acked += write_round(cluster, r * len(SIZES))
        cluster.down()
        cluster.up()
        present = {row[0] for row in cluster.sql("select id from ledger")}
        missing = sorted(set(acked) - present)
        assert not missing, "round %d: %d acknowledged rows lost, e.g. %s" % (
            r, len(missing), missing[:5])
    # The largest record is past the old 16 MB limit, and the pageserver
    # ingested beyond it: the last rows were read through a new compute.
    assert max(SIZES) > 16 << 20
    assert cluster.sql("select count(*), max(size) from ledger") == [(len(acked), max(SIZES))]
