#!/usr/bin/env python3
"""Turn `pg_waldump -b` output into the line format the WAL unit test reads.

Used once to produce wal_sample.expected from the captured sample (see
README.md here); kept so the sample can be regenerated.  Output lines:
  R <start hex> <tot_len> <rmgr id> <xid> <prev hex>
  B <block id> <spc> <db> <rel> <fork> <blkno> <has image 0/1>
"""
import re
import sys

RMGRS = ["XLOG", "Transaction", "Storage", "CLOG", "Database", "Tablespace", "MultiXact",
         "RelMap", "Standby", "Heap2", "Heap", "Btree", "Hash", "Gin", "Gist", "Sequence",
         "SPGist", "BRIN", "CommitTs", "ReplicationOrigin", "Generic", "LogicalMessage"]
FORKS = {"main": 0, "fsm": 1, "vm": 2, "init": 3}

REC = re.compile(r"^rmgr: (\S+)\s+len \(rec/tot\):\s*\d+/\s*(\d+), tx:\s*(\d+), lsn: ([0-9A-F]+)/([0-9A-F]+), "
                 r"prev ([0-9A-F]+)/([0-9A-F]+)")
BLK = re.compile(r"^\s+blkref #(\d+): rel (\d+)/(\d+)/(\d+) fork (\w+) blk (\d+)( \(FPW\))?")

for line in sys.stdin:
    m = REC.match(line)
    if m:
        start = int(m.group(4), 16) << 32 | int(m.group(5), 16)
        prev = int(m.group(6), 16) << 32 | int(m.group(7), 16)
        print(f"R {start:X} {m.group(2)} {RMGRS.index(m.group(1))} {m.group(3)} {prev:X}")
        continue
    m = BLK.match(line)
    if m:
        print(f"B {m.group(1)} {m.group(2)} {m.group(3)} {m.group(4)} {FORKS[m.group(5)]} {m.group(6)} "
              f"{1 if m.group(7) else 0}")
