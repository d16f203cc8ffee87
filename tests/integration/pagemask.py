"""Page masking as PostgreSQL's wal_consistency_checking applies it, in Python.

For: comparing an 8 KB page the pageserver reconstructed with the page a stock
standby wrote for the same block at the same LSN.  Two correct replays of the
same WAL can still differ in bytes that WAL does not govern (hint bits, the
command id, unused space, LP flags of index items killed without WAL, ...).
PostgreSQL lists exactly those bytes in its resource managers' mask functions;
this module re-implements them (written from PG 15's
src/backend/access/common/bufmask.c and heap_mask, btree_mask, hash_mask,
gin_mask, gist_mask, spg_mask, brin_mask, seq_mask, generic_mask) so that the
oracle ignores what PostgreSQL itself ignores, and nothing else.

Not for: FSM pages (never WAL-logged; no mask function exists; the oracle
leaves them out and says so) or SLRU pages (compared raw).

Also: identifying a page's access method from its special space (the way
pg_filedump does: page ids 0xFF80 hash, 0xFF81 GiST, 0xFF82 SP-GiST, BRIN page
types 0xF091..0xF093, the sequence magic 0x1717, else by special size), and a
readable description of where two pages first differ.

Layout facts used (PG 15, x86-64, BLCKSZ 8192, MAXALIGN 8):
  PageHeaderData: pd_lsn 0..8, pd_checksum 8, pd_flags 10, pd_lower 12,
  pd_upper 14, pd_special 16, pd_pagesize_version 18, pd_prune_xid 20,
  line pointers from 24 (4 bytes each: lp_off bits 0-14, lp_flags 15-16,
  lp_len 17-31).  HeapTupleHeaderData: t_xmin 0, t_xmax 4, t_cid 8,
  t_ctid 12 (6 bytes, ip_posid at 16), t_infomask2 18, t_infomask 20.
"""

import struct

BLCKSZ = 8192
SIZE_OF_PAGE_HEADER = 24
MASK_MARKER = 0

# pd_flags
PD_HAS_FREE_LINES = 0x1
PD_PAGE_FULL = 0x2
PD_ALL_VISIBLE = 0x4

# line pointer flags
LP_UNUSED, LP_NORMAL, LP_REDIRECT, LP_DEAD = 0, 1, 2, 3

# heap tuple infomask
HEAP_XMIN_COMMITTED = 0x0100
HEAP_XMIN_INVALID = 0x0200
HEAP_XMIN_FROZEN = HEAP_XMIN_COMMITTED | HEAP_XMIN_INVALID
HEAP_XMAX_COMMITTED = 0x0400
HEAP_XMAX_INVALID = 0x0800
HEAP_XACT_MASK = 0xFFF0
SPEC_TOKEN_OFFSET_NUMBER = 0xFFFE

# btree
BTP_LEAF = 1 << 0
BTP_SPLIT_END = 1 << 5
BTP_HAS_GARBAGE = 1 << 6

# hash
LH_OVERFLOW_PAGE = 1 << 0
LH_BUCKET_PAGE = 1 << 1
LH_BITMAP_PAGE = 1 << 2
LH_META_PAGE = 1 << 3
LH_PAGE_HAS_DEAD_TUPLES = 1 << 7
LH_PAGE_TYPE = LH_OVERFLOW_PAGE | LH_BUCKET_PAGE | LH_BITMAP_PAGE | LH_META_PAGE
LH_UNUSED_PAGE = 0
HASHO_PAGE_ID = 0xFF80

# gist
F_LEAF = 1 << 0
F_FOLLOW_RIGHT = 1 << 3
F_HAS_GARBAGE = 1 << 4
GIST_PAGE_ID = 0xFF81

# spgist
SPGIST_PAGE_ID = 0xFF82

# gin
GIN_LEAF = 1 << 1
GIN_DELETED = 1 << 2

# brin
BRIN_PAGETYPE_META = 0xF091
BRIN_PAGETYPE_REVMAP = 0xF092
BRIN_PAGETYPE_REGULAR = 0xF093
BRIN_EVACUATE_PAGE = 1 << 0

SEQ_MAGIC = 0x1717

# Forks, as in relation file names.
FORK_MAIN, FORK_FSM, FORK_VM, FORK_INIT = 0, 1, 2, 3
FORK_NAMES = {FORK_MAIN: "main", FORK_FSM: "fsm", FORK_VM: "vm", FORK_INIT: "init"}

# Access methods this module knows, by pg_am.amname (plus relkind-derived ones).
KNOWN_AMS = ("heap", "btree", "hash", "gist", "spgist", "gin", "brin", "sequence", "vm", "fsm")


class MaskError(ValueError):
    """The page's header is not one a mask function accepts (PostgreSQL would
    elog(ERROR) in mask_unused_space)."""


def _u16(page, off):
    return struct.unpack_from("<H", page, off)[0]


def _u32(page, off):
    return struct.unpack_from("<I", page, off)[0]


def _set_u16(page, off, value):
    struct.pack_into("<H", page, off, value)


def _set_u32(page, off, value):
    struct.pack_into("<I", page, off, value)


def header(page):
    """The page header as a dict (for diagnostics)."""
    return {
        "lsn": (_u32(page, 0) << 32) | _u32(page, 4),
        "checksum": _u16(page, 8),
        "flags": _u16(page, 10),
        "lower": _u16(page, 12),
        "upper": _u16(page, 14),
        "special": _u16(page, 16),
        "pagesize_version": _u16(page, 18),
        "prune_xid": _u32(page, 20),
    }


def page_is_new(page):
    """PageIsNew: pd_upper == 0 (an all-zero page, as an extension leaves it)."""
    return _u16(page, 14) == 0


def max_offset_number(page):
    lower = _u16(page, 12)
    return 0 if lower <= SIZE_OF_PAGE_HEADER else (lower - SIZE_OF_PAGE_HEADER) // 4


def item_id(page, offnum):
    """(lp_off, lp_flags, lp_len) of line pointer offnum (1-based)."""
    word = _u32(page, SIZE_OF_PAGE_HEADER + (offnum - 1) * 4)
    return word & 0x7FFF, (word >> 15) & 0x3, (word >> 17) & 0x7FFF


def _set_item_flags(page, offnum, flags):
    pos = SIZE_OF_PAGE_HEADER + (offnum - 1) * 4
    word = _u32(page, pos)
    word = (word & ~(0x3 << 15)) | ((flags & 0x3) << 15)
    _set_u32(page, pos, word & 0xFFFFFFFF)


def special_offset(page):
    return _u16(page, 16)


def maxalign(n):
    return (n + 7) & ~7


# -- bufmask.c -------------------------------------------------------------

def mask_page_lsn_and_checksum(page):
    _set_u32(page, 0, MASK_MARKER)
    _set_u32(page, 4, MASK_MARKER)
    _set_u16(page, 8, MASK_MARKER)


def mask_page_hint_bits(page):
    _set_u32(page, 20, MASK_MARKER)  # pd_prune_xid
    flags = _u16(page, 10)
    flags &= ~(PD_PAGE_FULL | PD_HAS_FREE_LINES | PD_ALL_VISIBLE)
    _set_u16(page, 10, flags)


def mask_unused_space(page):
    lower, upper, special = _u16(page, 12), _u16(page, 14), _u16(page, 16)
    if lower > upper or special < upper or lower < SIZE_OF_PAGE_HEADER or special > BLCKSZ:
        raise MaskError("invalid page pd_lower %d pd_upper %d pd_special %d" % (
            lower, upper, special))
    page[lower:upper] = bytes([MASK_MARKER]) * (upper - lower)


def mask_lp_flags(page):
    for off in range(1, max_offset_number(page) + 1):
        _, flags, _ = item_id(page, off)
        if flags != LP_UNUSED:
            _set_item_flags(page, off, LP_UNUSED)


def mask_page_content(page):
    page[SIZE_OF_PAGE_HEADER:BLCKSZ] = bytes([MASK_MARKER]) * (BLCKSZ - SIZE_OF_PAGE_HEADER)
    _set_u16(page, 12, MASK_MARKER)  # pd_lower
    _set_u16(page, 14, MASK_MARKER)  # pd_upper


# -- per access method -----------------------------------------------------

def heap_mask(page, blkno):
    mask_page_lsn_and_checksum(page)
    mask_page_hint_bits(page)
    mask_unused_space(page)
    for off in range(1, max_offset_number(page) + 1):
        lp_off, lp_flags, lp_len = item_id(page, off)
        if lp_flags == LP_NORMAL:
            if lp_off + 23 > BLCKSZ:
                raise MaskError("line pointer %d points past the page (off %d)" % (off, lp_off))
            infomask = _u16(page, lp_off + 20)
            if infomask & HEAP_XMIN_FROZEN != HEAP_XMIN_FROZEN:
                infomask &= ~HEAP_XACT_MASK
            else:
                infomask &= ~(HEAP_XMAX_INVALID | HEAP_XMAX_COMMITTED)
            _set_u16(page, lp_off + 20, infomask & 0xFFFF)
            _set_u32(page, lp_off + 8, MASK_MARKER)  # t_cid
            if _u16(page, lp_off + 16) == SPEC_TOKEN_OFFSET_NUMBER:
                # ItemPointerSet(&t_ctid, blkno, off)
                _set_u16(page, lp_off + 12, (blkno >> 16) & 0xFFFF)
                _set_u16(page, lp_off + 14, blkno & 0xFFFF)
                _set_u16(page, lp_off + 16, off)
        if lp_len != 0:  # ItemIdHasStorage
            pad = maxalign(lp_len) - lp_len
            end = min(lp_off + lp_len + pad, BLCKSZ)
            if pad > 0 and lp_off + lp_len < BLCKSZ:
                page[lp_off + lp_len:end] = bytes([MASK_MARKER]) * (end - lp_off - lp_len)


def btree_mask(page, blkno):
    mask_page_lsn_and_checksum(page)
    mask_page_hint_bits(page)
    mask_unused_space(page)
    sp = special_offset(page)
    flags = _u16(page, sp + 12)
    if flags & BTP_LEAF:
        mask_lp_flags(page)
    flags &= ~(BTP_HAS_GARBAGE | BTP_SPLIT_END)
    _set_u16(page, sp + 12, flags)
    _set_u16(page, sp + 14, 0)  # btpo_cycleid


def hash_mask(page, blkno):
    mask_page_lsn_and_checksum(page)
    mask_page_hint_bits(page)
    mask_unused_space(page)
    sp = special_offset(page)
    pagetype = _u16(page, sp + 12) & LH_PAGE_TYPE
    if pagetype == LH_UNUSED_PAGE:
        mask_page_content(page)
    elif pagetype in (LH_BUCKET_PAGE, LH_OVERFLOW_PAGE):
        mask_lp_flags(page)
    # The special space survives mask_page_content (it is only zeroed with
    # the rest): read the flag again from where it is now.
    _set_u16(page, sp + 12, _u16(page, sp + 12) & ~LH_PAGE_HAS_DEAD_TUPLES)


def gist_mask(page, blkno):
    mask_page_lsn_and_checksum(page)
    mask_page_hint_bits(page)
    mask_unused_space(page)
    sp = special_offset(page)
    _set_u32(page, sp, MASK_MARKER)  # NSN, stored as two 32-bit halves
    _set_u32(page, sp + 4, MASK_MARKER)
    flags = _u16(page, sp + 12) | F_FOLLOW_RIGHT  # GistMarkFollowRight
    if flags & F_LEAF:
        mask_lp_flags(page)
    flags &= ~F_HAS_GARBAGE
    _set_u16(page, sp + 12, flags)


def gin_mask(page, blkno):
    mask_page_lsn_and_checksum(page)
    sp = special_offset(page)
    flags = _u16(page, sp + 6)
    mask_page_hint_bits(page)
    if flags & GIN_DELETED:
        mask_page_content(page)
    elif _u16(page, 12) > SIZE_OF_PAGE_HEADER:
        mask_unused_space(page)


def spg_mask(page, blkno):
    mask_page_lsn_and_checksum(page)
    mask_page_hint_bits(page)
    if _u16(page, 12) >= SIZE_OF_PAGE_HEADER:
        mask_unused_space(page)


def brin_mask(page, blkno):
    mask_page_lsn_and_checksum(page)
    mask_page_hint_bits(page)
    sp = special_offset(page)
    pagetype = _u16(page, sp + 6)
    if pagetype == BRIN_PAGETYPE_REGULAR or (
            pagetype == BRIN_PAGETYPE_META and _u16(page, 12) > SIZE_OF_PAGE_HEADER):
        mask_unused_space(page)
    _set_u16(page, sp + 4, _u16(page, sp + 4) & ~BRIN_EVACUATE_PAGE)


def seq_mask(page, blkno):
    mask_page_lsn_and_checksum(page)
    mask_unused_space(page)


def generic_mask(page, blkno):
    mask_page_lsn_and_checksum(page)
    mask_unused_space(page)


def vm_mask(page, blkno):
    """Visibility-map pages: the bitmap lives between pd_lower and pd_upper, so
    mask_unused_space would hide all of it (wal_consistency_checking compares
    VM pages only incidentally).  Every VM bit change is WAL-logged (set by
    XLOG_HEAP2_VISIBLE, cleared by the heap records' *_ALL_VISIBLE_CLEARED
    flags, trimmed by smgr truncate), so we compare the whole page except the
    LSN and checksum."""
    mask_page_lsn_and_checksum(page)


MASKS = {
    "heap": heap_mask,
    "btree": btree_mask,
    "hash": hash_mask,
    "gist": gist_mask,
    "spgist": spg_mask,
    "gin": gin_mask,
    "brin": brin_mask,
    "sequence": seq_mask,
    "vm": vm_mask,
    "generic": generic_mask,
}


# -- identification --------------------------------------------------------

def identify_am(page, fork=FORK_MAIN):
    """The access method a page belongs to, from its fork and special space:
    'zero' (new page), 'vm', 'fsm', 'heap', 'btree', 'hash', 'gist',
    'spgist', 'gin', 'brin', 'sequence', or 'unknown'."""
    if fork == FORK_FSM:
        return "fsm"
    if fork == FORK_VM:
        return "zero" if page_is_new(page) else "vm"
    if page_is_new(page):
        return "zero"
    sp = special_offset(page)
    if sp > BLCKSZ or sp < SIZE_OF_PAGE_HEADER:
        return "unknown"
    size = BLCKSZ - sp
    if size == 0:
        return "heap"
    last = _u16(page, BLCKSZ - 2)
    if size == 16:
        if last == HASHO_PAGE_ID:
            return "hash"
        if last == GIST_PAGE_ID:
            return "gist"
        return "btree"
    if size == 8:
        if last == SPGIST_PAGE_ID:
            return "spgist"
        if last in (BRIN_PAGETYPE_META, BRIN_PAGETYPE_REVMAP, BRIN_PAGETYPE_REGULAR):
            return "brin"
        if _u32(page, sp) == SEQ_MAGIC and _u32(page, sp + 4) == 0:
            return "sequence"
        return "gin"
    return "unknown"


def mask(page, am, blkno):
    """A masked copy of page (bytes) for access method am.  A new (all-zero
    header) page is returned unmasked: PostgreSQL never masks one."""
    out = bytearray(page)
    assert len(out) == BLCKSZ, len(out)
    if am in ("zero", "fsm", "unknown") or page_is_new(out):
        return bytes(out)
    fn = MASKS.get(am, generic_mask)
    fn(out, blkno)
    return bytes(out)


# -- describing a difference -----------------------------------------------

_HEADER_FIELDS = ((0, 8, "pd_lsn"), (8, 10, "pd_checksum"), (10, 12, "pd_flags"),
                  (12, 14, "pd_lower"), (14, 16, "pd_upper"), (16, 18, "pd_special"),
                  (18, 20, "pd_pagesize_version"), (20, 24, "pd_prune_xid"))


def describe_offset(page, offset):
    """Where byte offset lies in page: a header field, a line pointer, an item
    (and the byte within it), free space or the special space."""
    for lo, hi, name in _HEADER_FIELDS:
        if lo <= offset < hi:
            return name
    if page_is_new(page):
        return "byte %d of a new page" % offset
    lower, upper, sp = _u16(page, 12), _u16(page, 14), _u16(page, 16)
    if offset < lower:
        return "line pointer %d" % ((offset - SIZE_OF_PAGE_HEADER) // 4 + 1)
    if offset >= sp:
        return "special space +%d" % (offset - sp)
    if offset < upper:
        return "free space (pd_lower..pd_upper)"
    for off in range(1, max_offset_number(page) + 1):
        lp_off, lp_flags, lp_len = item_id(page, off)
        if lp_len and lp_off <= offset < lp_off + maxalign(lp_len):
            return "item %d (lp_flags %d, len %d) +%d" % (off, lp_flags, lp_len, offset - lp_off)
    return "item space, no line pointer"


def first_difference(a, b):
    """The first offset at which a and b differ, or None."""
    if a == b:
        return None
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def compare_pages(expected, actual, am, blkno):
    """None when the pages are equal after masking for am, else a dict:
    am, offset (first differing byte after masking), where (described on the
    expected page), ndiff (differing bytes after masking), expected/actual
    headers.  A page whose header a mask cannot accept compares raw."""
    note = None
    try:
        me, ma = mask(expected, am, blkno), mask(actual, am, blkno)
    except MaskError as e:
        me, ma, note = bytes(expected), bytes(actual), "compared raw: %s" % e
    at = first_difference(me, ma)
    if at is None:
        return None
    ndiff = sum(1 for x, y in zip(me, ma) if x != y)
    return {"am": am, "offset": at, "where": describe_offset(expected, at), "ndiff": ndiff,
            "expected_header": header(expected), "actual_header": header(actual),
            "expected_bytes": me[at:at + 16].hex(), "actual_bytes": ma[at:at + 16].hex(),
            "note": note}
