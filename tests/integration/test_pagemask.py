"""pagemask.py and the standby half of the page oracle, without a pageserver.

What these tests show:
  * each mask hides exactly what PostgreSQL's mask function hides (hint bits,
    command ids, unused space, killed LP flags, btree cycle ids, GiST NSNs,
    deleted GIN pages, ...) and still catches a changed byte of real content,
    reported with the right place (header field, line pointer, item);
  * the access method is recognised from a page's special space;
  * on real pages: a stock primary (full_page_writes=off) runs the oracle
    workload through the three safekeepers; a stock standby replaying from a
    safekeeper stops exactly at every point X_i (log and pg_controldata
    checked by the harness), and starting it again with the same target
    leaves byte-identical relation files and pg_xact; at the last point the standby's
    pages equal the primary's own pages after masking -- the comparison
    wal_consistency_checking makes -- while many differ before masking.
"""

import hashlib
import struct

import pagemask
from conftest import int_to_lsn, wait_until
from oracle_harness import (BLCKSZ, read_block, running_oracle, standby_clog_segments,
                            standby_relation_forks)
from oracle_workload import PHASES, run_phase


# -- synthetic pages -----------------------------------------------------------

def page_init(special_size=0, flags=0, lsn=0x1_0000_0028):
    page = bytearray(BLCKSZ)
    special = BLCKSZ - special_size
    struct.pack_into("<IIHHHHHHI", page, 0, lsn >> 32, lsn & 0xFFFFFFFF, 0x1234, flags,
                     24, special, special, BLCKSZ | 4, 777)
    return page


def add_item(page, data, flags=pagemask.LP_NORMAL):
    lower, upper = struct.unpack_from("<HH", page, 12)
    start = (upper - len(data)) & ~7
    page[start:start + len(data)] = data
    struct.pack_into("<I", page, lower, start | (flags << 15) | (len(data) << 17))
    struct.pack_into("<HH", page, 12, lower + 4, start)
    return (lower - 24) // 4 + 1, start


def heap_tuple(xmin, infomask, payload, cid=0):
    # t_xmin, t_xmax, t_cid, t_ctid (blk hi, blk lo, posid), infomask2, infomask, hoff
    head = struct.pack("<IIIHHHHHB", xmin, 0, cid, 0, 0, 1, 2, infomask, 24)
    return head + b"\0" + payload  # 24-byte header then data


def test_heap_mask_hides_hints_cid_and_padding_not_data():
    a = page_init()
    off, pos = add_item(a, heap_tuple(1000, 0x0002, b"hello world"))  # len 35: padded to 40
    b = bytearray(a)
    struct.pack_into("<H", b, pos + 20, 0x0002 | pagemask.HEAP_XMIN_COMMITTED)  # hint bit
    struct.pack_into("<I", b, pos + 8, 5)  # t_cid
    b[pos + 37] = 0xAA  # padding after the item
    struct.pack_into("<I", b, 20, 9999)  # pd_prune_xid
    struct.pack_into("<H", b, 10, pagemask.PD_ALL_VISIBLE)
    struct.pack_into("<I", b, 4, 0x99)  # pd_lsn
    b[100] = 0x55  # free space
    assert a != b
    assert pagemask.compare_pages(a, b, "heap", 0) is None

    c = bytearray(a)
    c[pos + 25 + 3] ^= 0xFF  # a byte of the tuple's data
    diff = pagemask.compare_pages(a, c, "heap", 0)
    assert diff is not None and diff["offset"] == pos + 28 and diff["ndiff"] == 1
    assert diff["where"] == "item 1 (lp_flags 1, len 35) +28", diff

    d = bytearray(a)
    struct.pack_into("<I", d, pos + 4, 4242)  # xmax is WAL-logged: not masked
    assert pagemask.compare_pages(a, d, "heap", 0)["where"].startswith("item 1")


def test_heap_mask_keeps_frozen_xmin_bits_and_masks_speculative_ctid():
    frozen = pagemask.HEAP_XMIN_FROZEN
    a = page_init()
    _, pos = add_item(a, heap_tuple(2, frozen, b"x" * 8))
    b = bytearray(a)
    struct.pack_into("<H", b, pos + 20, frozen | pagemask.HEAP_XMAX_INVALID)
    assert pagemask.compare_pages(a, b, "heap", 0) is None  # xmax hints still masked
    c = bytearray(a)
    struct.pack_into("<H", c, pos + 20, frozen | 0x0010)  # HEAP_XMAX_KEYSHR_LOCK
    assert pagemask.compare_pages(a, c, "heap", 0) is not None
    struct.pack_into("<H", a, pos + 16, pagemask.SPEC_TOKEN_OFFSET_NUMBER)
    d = bytearray(a)
    struct.pack_into("<HH", d, pos + 12, 0xDEAD, 0xBEEF)  # speculative token
    assert pagemask.compare_pages(a, d, "heap", 3) is None


def btree_page(flags, cycleid=0):
    page = page_init(16)
    struct.pack_into("<IIIHH", page, BLCKSZ - 16, 0, 7, 0, flags, cycleid)
    return page


def test_btree_mask():
    a = btree_page(pagemask.BTP_LEAF)
    add_item(a, b"\x01" * 16)
    b = bytearray(a)
    struct.pack_into("<I", b, 24, struct.unpack_from("<I", b, 24)[0] | (pagemask.LP_DEAD << 15))
    struct.pack_into("<HH", b, BLCKSZ - 4, pagemask.BTP_LEAF | pagemask.BTP_HAS_GARBAGE |
                     pagemask.BTP_SPLIT_END, 17)
    assert pagemask.compare_pages(a, b, "btree", 1) is None
    c = bytearray(a)
    struct.pack_into("<I", c, BLCKSZ - 12, 8)  # btpo_next
    assert pagemask.compare_pages(a, c, "btree", 1)["where"] == "special space +4"
    # LP flags of internal pages are not masked.
    d, e = btree_page(0), None
    add_item(d, b"\x01" * 16)
    e = bytearray(d)
    struct.pack_into("<I", e, 24, struct.unpack_from("<I", e, 24)[0] | (pagemask.LP_DEAD << 15))
    assert pagemask.compare_pages(d, e, "btree", 1)["where"] == "line pointer 1"


def test_gist_gin_hash_brin_masks():
    g = page_init(16)
    struct.pack_into("<IIIHH", g, BLCKSZ - 16, 1, 2, 5, pagemask.F_LEAF, pagemask.GIST_PAGE_ID)
    g2 = bytearray(g)
    struct.pack_into("<II", g2, BLCKSZ - 16, 0, 0x500)  # NSN
    struct.pack_into("<H", g2, BLCKSZ - 4, pagemask.F_LEAF | pagemask.F_HAS_GARBAGE |
                     pagemask.F_FOLLOW_RIGHT)
    assert pagemask.identify_am(g) == "gist"
    assert pagemask.compare_pages(g, g2, "gist", 0) is None

    gin = page_init(8)
    struct.pack_into("<IHH", gin, BLCKSZ - 8, 3, 0, pagemask.GIN_DELETED)
    gin2 = bytearray(gin)
    gin2[3000:3100] = b"\x07" * 100
    struct.pack_into("<HH", gin2, 12, 40, 4000)
    assert pagemask.identify_am(gin) == "gin"
    assert pagemask.compare_pages(gin, gin2, "gin", 0) is None
    live = page_init(8)
    struct.pack_into("<IHH", live, BLCKSZ - 8, 3, 0, pagemask.GIN_LEAF)
    add_item(live, b"\x02" * 12)
    live2 = bytearray(live)
    live2[BLCKSZ - 8 - 16] ^= 1
    assert pagemask.compare_pages(live, live2, "gin", 0) is not None

    h = page_init(16)
    struct.pack_into("<IIIHH", h, BLCKSZ - 16, 0, 0, 0, pagemask.LH_BUCKET_PAGE,
                     pagemask.HASHO_PAGE_ID)
    add_item(h, b"\x03" * 16)
    h2 = bytearray(h)
    struct.pack_into("<H", h2, BLCKSZ - 4, pagemask.LH_BUCKET_PAGE |
                     pagemask.LH_PAGE_HAS_DEAD_TUPLES)
    struct.pack_into("<I", h2, 24, struct.unpack_from("<I", h2, 24)[0] | (pagemask.LP_DEAD << 15))
    assert pagemask.identify_am(h) == "hash"
    assert pagemask.compare_pages(h, h2, "hash", 0) is None
    h3 = bytearray(h)
    struct.pack_into("<I", h3, BLCKSZ - 8, 9)  # hasho_bucket
    assert pagemask.compare_pages(h, h3, "hash", 0) is not None

    br = page_init(8)
    struct.pack_into("<HHHH", br, BLCKSZ - 8, 0, 0, 0, pagemask.BRIN_PAGETYPE_REGULAR)
    br2 = bytearray(br)
    struct.pack_into("<H", br2, BLCKSZ - 4, pagemask.BRIN_EVACUATE_PAGE)
    assert pagemask.identify_am(br) == "brin"
    assert pagemask.compare_pages(br, br2, "brin", 0) is None


def test_identify_and_vm():
    assert pagemask.identify_am(bytes(BLCKSZ)) == "zero"
    assert pagemask.identify_am(page_init()) == "heap"
    assert pagemask.identify_am(btree_page(pagemask.BTP_LEAF)) == "btree"
    sp = page_init(8)
    struct.pack_into("<HHHH", sp, BLCKSZ - 8, 0, 0, 0, pagemask.SPGIST_PAGE_ID)
    assert pagemask.identify_am(sp) == "spgist"
    seq = page_init(8)
    struct.pack_into("<I", seq, BLCKSZ - 8, pagemask.SEQ_MAGIC)
    assert pagemask.identify_am(seq) == "sequence"
    assert pagemask.identify_am(page_init(), pagemask.FORK_VM) == "vm"
    vm = page_init()
    vm2 = bytearray(vm)
    struct.pack_into("<I", vm2, 4, 0x1234)  # LSN: masked
    assert pagemask.compare_pages(vm, vm2, "vm", 0) is None
    vm2[24 + 10] = 0x03  # a heap page's all-visible and all-frozen bits
    diff = pagemask.compare_pages(vm, vm2, "vm", 0)
    assert diff is not None and diff["offset"] == 34


def test_bad_header_compares_raw():
    a = page_init()
    struct.pack_into("<H", a, 12, 9000)  # pd_lower past pd_upper
    b = bytearray(a)
    b[5000] = 1
    diff = pagemask.compare_pages(a, b, "heap", 0)
    assert diff is not None and "compared raw" in diff["note"]


# -- real pages ------------------------------------------------------------------

def files_digest(datadir):
    h = hashlib.sha256()
    forks = standby_relation_forks(datadir)
    for key in sorted(forks):
        nblocks, files = forks[key]
        h.update(repr((key, nblocks)).encode())
        for _, path in files:
            with open(path, "rb") as f:
                h.update(f.read())
    for segno, data in sorted(standby_clog_segments(datadir).items()):
        h.update(repr(segno).encode() + data)
    return h.hexdigest()


def known_primary_divergence(standby_page, primary_page, am, blkno):
    """Page state a primary keeps that by design never reaches WAL, so a
    replica (the standby here; the pageserver too) cannot have it.  Only the
    primary-vs-standby comparison allows these; the pageserver-vs-standby
    oracle compares two replays and allows none of them.
      * sequences: WAL carries the value SEQ_LOG_VALS (32) fetches ahead, so
        the primary's tuple (last_value, log_cnt) is behind the logged one;
      * the SP-GiST metapage (block 0): its lastUsedPages cache is written
        without WAL;
      * VM pages whose replayed bits are a subset of the primary's: CREATE
        DATABASE ... STRATEGY WAL_LOG logs each copied page as a standard
        page (log_newpage_buffer(..., true)), and a VM page's bitmap lies in
        the "hole" between pd_lower and pd_upper, so replay restores it as
        zeros (not-all-visible: the safe direction)."""
    if am == "sequence":
        return True
    if am == "spgist" and blkno == 0:
        return True
    if am == "vm":
        header_equal = (pagemask.mask(standby_page, "vm", blkno)[:24] ==
                        pagemask.mask(primary_page, "vm", blkno)[:24])
        return header_equal and all(s & ~p == 0 for s, p in zip(standby_page[24:],
                                                                primary_page[24:]))
    return False


def test_standby_stops_at_each_point_and_matches_the_primary_after_masking():
    with running_oracle(fpw=False, with_pageserver=False) as cluster:
        for name, fn in PHASES:
            run_phase(cluster, name, fn)
        last = cluster.points[-1]
        # Nothing after the last point may touch a page: a WAL switch only.
        cluster.primary.sql("select pg_switch_wal()")
        wait_until(lambda: cluster.committed_lsn() > last.lsn, 60,
                   "the safekeepers to commit past %s" % int_to_lsn(last.lsn))
        cluster.primary.stop_clean()

        for i, point in enumerate(cluster.points):
            cluster.standby.stop_at(point)
            if i == 1:
                first = files_digest(cluster.standby.datadir)
                cluster.standby.stop_at(point)
                assert files_digest(cluster.standby.datadir) == first, (
                    "stopping at %r twice left different files" % point)

        standby = standby_relation_forks(cluster.standby.datadir)
        primary = standby_relation_forks(cluster.primary.datadir)
        problems, compared, masked_only, by_am, known = [], 0, 0, {}, {}
        for key in sorted(set(standby) | set(primary)):
            if key[3] == pagemask.FORK_FSM:
                continue
            if key not in standby or key not in primary:
                problems.append("%r only on the %s" % (key, "standby" if key in standby
                                                       else "primary"))
                continue
            (sn, sfiles), (pn, pfiles) = standby[key], primary[key]
            for blk in range(max(sn, pn)):
                if blk >= sn or blk >= pn:
                    # The primary extends relations without WAL: new pages only.
                    extra = read_block(pfiles, blk) if blk >= sn else None
                    if extra is None or not pagemask.page_is_new(extra):
                        problems.append("%r blk %d: only on the %s" % (
                            key, blk, "primary" if blk >= sn else "standby"))
                    continue
                want, got = read_block(sfiles, blk), read_block(pfiles, blk)
                am = pagemask.identify_am(want, key[3])
                am = last.catalog.get((key[1], key[2]), am) if am not in ("zero", "vm") else am
                by_am[am] = by_am.get(am, 0) + 1
                compared += 1
                diff = pagemask.compare_pages(want, got, am, blk)
                if diff is not None and known_primary_divergence(want, got, am, blk):
                    known[am] = known.get(am, 0) + 1
                elif diff is not None:
                    problems.append("%r blk %d (%s): %s" % (key, blk, am, diff))
                elif want != got:
                    masked_only += 1
        pclog = standby_clog_segments(cluster.primary.datadir)
        sclog = standby_clog_segments(cluster.standby.datadir)
        assert sorted(pclog) == sorted(sclog)
        for segno in sclog:
            n = min(len(sclog[segno]), len(pclog[segno]))
            assert sclog[segno][:n] == pclog[segno][:n], "pg_xact/%04X differs" % segno
        print("compared %d pages (%s); %d differ only in masked bytes; known primary-only "
              "state: %s" % (compared, by_am, masked_only, known))
        assert not problems, "\n".join(problems[:30])
        for am in ("heap", "btree", "hash", "gist", "spgist", "gin", "brin", "sequence", "vm"):
            assert by_am.get(am, 0) > 0, "no %s page compared: %s" % (am, by_am)
        assert masked_only > 0, "masking made no difference: the test would not see it"
