"""Strata's WAL decoder against PostgreSQL's own pg_waldump on real WAL.

Runs a stock PostgreSQL 15 (as the unprivileged `postgres` user, on
127.0.0.1 and a free port), drives a workload that produces the interesting
record shapes (heap/btree changes, full-page images after a checkpoint, an
index build, VACUUM, a TOASTed row, a 100 KB record spanning many pages, a
WAL switch), stops it, then dumps all segments with pg_waldump and with
strata-waldump and asserts that every record's start LSN, length, rmgr,
xid, prev-link and block references agree, and that our end LSNs chain to
the next record's start.

strata-waldump is found in $STRATA_SAN_BUILD/bin (default <repo>/build-san).
"""
import os
import re
import shutil
import subprocess
import tempfile

import pytest
from conftest import free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A stock oracle: always Debian's PostgreSQL (docs/design.md §1.5).
PGBIN = "/usr/lib/postgresql/15/bin"
SEG_SIZE = 16 * 1024 * 1024
BLCKSZ = 8192

RMGRS = ["XLOG", "Transaction", "Storage", "CLOG", "Database", "Tablespace", "MultiXact",
         "RelMap", "Standby", "Heap2", "Heap", "Btree", "Hash", "Gin", "Gist", "Sequence",
         "SPGist", "BRIN", "CommitTs", "ReplicationOrigin", "Generic", "LogicalMessage"]
FORKS = {"main": 0, "fsm": 1, "vm": 2, "init": 3}

PG_REC = re.compile(r"^rmgr: (\S+)\s+len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*(\d+), lsn: ([0-9A-F]+)/([0-9A-F]+), "
                    r"prev ([0-9A-F]+)/([0-9A-F]+)")
PG_BLK = re.compile(r"^\s+blkref #(\d+): rel (\d+)/(\d+)/(\d+) fork (\w+) blk (\d+)( \(FPW\))?")
OUR_REC = re.compile(r"^lsn (\S+) end (\S+) rmid (\d+) info 0x([0-9A-F]{2}) xid (\d+) len (\d+) prev (\S+) "
                     r"main (\d+)(.*)$")
OUR_BLK = re.compile(r" blk (\d+) (\d+)/(\d+)/(\d+) fork (\d) blkno (\d+) img ([01]) init ([01])")

WORKLOAD = """
create table items(id int primary key, qty int, note text);
insert into items select g, g % 100, md5(g::text) from generate_series(1, 20000) g;
checkpoint;
update items set qty = qty + 1 where id % 5 = 0;
delete from items where id % 13 = 0;
create index items_qty on items(qty);
vacuum items;
create table blobs(id int, body text);
insert into blobs select 1, string_agg(md5(random()::text), '') from generate_series(1, 20000);
select pg_logical_emit_message(true, 'strata-test', repeat('m', 100000));
begin; insert into items values (1000001, 1, 'a'); savepoint s1; insert into items values (1000002, 2, 'b'); commit;
select pg_switch_wal();
insert into items select g, g % 100, 'after switch' from generate_series(20001, 30000) g;
"""


def lsn_int(text):
    hi, lo = text.split("/")
    return int(hi, 16) << 32 | int(lo, 16)


def as_postgres(*args, **kw):
    return subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True,
                          text=True, **kw)


def waldump_binary():
    build = os.environ.get("STRATA_SAN_BUILD") or os.path.join(REPO, "build-san")
    path = os.path.join(build, "bin", "strata-waldump")
    if not os.path.exists(path):
        pytest.skip(f"{path} not built")
    return path


@pytest.fixture(scope="module")
def wal_dir():
    tmp = tempfile.mkdtemp(prefix="strata-walformat-", dir="/tmp")
    shutil.chown(tmp, "postgres")
    data = os.path.join(tmp, "data")
    port = free_port()
    as_postgres(f"{PGBIN}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
    started = False
    try:
        as_postgres(f"{PGBIN}/pg_ctl", "-D", data, "-w", "-l", os.path.join(tmp, "log"), "-o",
                    f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={tmp} "
                    f"-c wal_keep_size=1GB -c fsync=off", "start")
        started = True
        # From stdin, so each statement runs on its own (VACUUM, CHECKPOINT).
        as_postgres(f"{PGBIN}/psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                    "-v", "ON_ERROR_STOP=1", "-qAt", "-f", "-", input=WORKLOAD)
        as_postgres(f"{PGBIN}/pg_ctl", "-D", data, "-w", "-m", "fast", "stop")
        started = False
        yield os.path.join(data, "pg_wal")
    finally:
        if started:
            subprocess.run(["runuser", "-u", "postgres", "--", f"{PGBIN}/pg_ctl", "-D", data, "-m",
                            "immediate", "stop"], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def segments(wal):
    names = sorted(n for n in os.listdir(wal) if re.fullmatch(r"[0-9A-F]{24}", n))
    assert len(names) >= 2, names
    return [os.path.join(wal, n) for n in names]


def pg_records(segs):
    out = subprocess.run([f"{PGBIN}/pg_waldump", "-b", segs[0], segs[-1]], capture_output=True, text=True)
    # pg_waldump stops with an error at the end of WAL (zeros); that is fine.
    assert "invalid record length" in out.stderr or out.returncode == 0, out.stderr
    recs = []
    for line in out.stdout.splitlines():
        m = PG_REC.match(line)
        if m:
            recs.append({"start": lsn_int(f"{m.group(4)}/{m.group(5)}"), "len": int(m.group(2)),
                         "rmid": RMGRS.index(m.group(1)), "xid": int(m.group(3)),
                         "prev": lsn_int(f"{m.group(6)}/{m.group(7)}"), "blocks": []})
            continue
        m = PG_BLK.match(line)
        if m:
            recs[-1]["blocks"].append((int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)),
                                       FORKS[m.group(5)], int(m.group(6)), 1 if m.group(7) else 0))
    return recs


def our_records(segs):
    out = subprocess.run([waldump_binary(), segs[0], segs[-1]], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "end of valid WAL" in out.stderr
    recs = []
    for line in out.stdout.splitlines():
        m = OUR_REC.match(line)
        assert m, line
        blocks = [(int(b[0]), int(b[1]), int(b[2]), int(b[3]), int(b[4]), int(b[5]), int(b[6]))
                  for b in OUR_BLK.findall(m.group(9))]
        recs.append({"start": lsn_int(m.group(1)), "end": lsn_int(m.group(2)), "rmid": int(m.group(3)),
                     "info": int(m.group(4), 16), "xid": int(m.group(5)), "len": int(m.group(6)),
                     "prev": lsn_int(m.group(7)), "main": int(m.group(8)), "blocks": blocks})
    return recs


def next_start(end):
    """Where a record starts that follows a record ending at end."""
    if end % SEG_SIZE == 0:
        return end + 40
    if end % BLCKSZ == 0:
        return end + 24
    return end


def test_records_match_pg_waldump(wal_dir):
    segs = segments(wal_dir)
    theirs = pg_records(segs)
    ours = our_records(segs)
    assert len(theirs) > 1000
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    for mine, pg in zip(ours, theirs):
        for key in ("start", "len", "rmid", "xid", "prev", "blocks"):
            assert mine[key] == pg[key], (key, hex(pg["start"]), mine, pg)
    for a, b in zip(ours, ours[1:]):
        assert next_start(a["end"]) == b["start"], (hex(a["start"]), hex(a["end"]), hex(b["start"]))
        assert a["end"] % 8 == 0


def test_workload_covered_the_hard_cases(wal_dir):
    ours = our_records(segments(wal_dir))
    switches = [r for r in ours if r["rmid"] == 0 and r["info"] & 0xF0 == 0x40]
    assert switches and all(r["end"] % SEG_SIZE == 0 for r in switches)
    assert any(r["len"] > 4 * BLCKSZ for r in ours), "no record spanning several pages"
    assert any(any(b[6] for b in r["blocks"]) for r in ours), "no full-page image"
    crossing = [r for r in ours if r["start"] // BLCKSZ != (r["start"] + r["len"] - 1) // BLCKSZ]
    assert len(crossing) > 10
    big = [r for r in ours if r["rmid"] == 21]
    assert big and big[0]["main"] > 100000
