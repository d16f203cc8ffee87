"""
Bad and hostile input against a real strata-safekeeper (docs/design.md §1.4, §9).

Starts the daemon (from $STRATA_SAN_BUILD/bin, default ./build-san/bin) on
ephemeral ports and talks to it with a small raw-socket Postgres-protocol
client, so malformed bytes can be sent on purpose.  Every bad input must get
an ErrorResponse whose text says what was wrong, while a well-behaved
WAL-push session (greeting, vote, elected, appends of format-valid synthetic
WAL) keeps working and the process stays up.  Also a pg_receivewal smoke
test: WAL pushed with commit_lsn set comes back byte for byte.
"""
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import json
import urllib.request

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAN_BUILD = os.environ.get("STRATA_SAN_BUILD", os.path.join(REPO, "build-san"))
SK_BIN = os.path.join(SAN_BUILD, "bin", "strata-safekeeper")
PG_BIN = "/usr/lib/postgresql/15/bin"

SEG = 16 << 20
PAGE = 8192
SYSID = 7312345678901234567

# ---------------------------------------------------------------- CRC-32C

_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data, crc=0xFFFFFFFF):
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


# ---------------------------------------------------- synthetic valid WAL


class WalWriter:
    """Builds a PostgreSQL 15 WAL byte stream: page headers (long at segment
    starts), records that may span pages (continuation flags and rem_len),
    each an XLOG no-op-like record with main data and a correct CRC."""

    def __init__(self, start, seg=SEG):
        assert start % PAGE == 0
        self.seg = seg
        self.start = start
        self.pos = start
        self.buf = bytearray()
        self.prev = 0
        self.cont_left = 0  # bytes of the current record still to place

    def _page_header(self):
        info = 0
        if self.cont_left:
            info |= 0x0001
        long_hdr = self.pos % self.seg == 0
        if long_hdr:
            info |= 0x0002
        hdr = struct.pack("<HHIQI", 0xD110, info, 1, self.pos, self.cont_left)
        hdr += b"\0" * 4
        if long_hdr:
            hdr += struct.pack("<QII", SYSID, self.seg, PAGE)
        self._raw(hdr)

    def _raw(self, b):
        self.buf += b
        self.pos += len(b)

    def _place(self, data):
        """Writes record bytes, inserting page headers at page starts."""
        i = 0
        while i < len(data):
            if self.pos % PAGE == 0:
                self._page_header()
            room = PAGE - self.pos % PAGE
            n = min(room, len(data) - i)
            self._raw(data[i:i + n])
            i += n
            self.cont_left -= n

    def record(self, payload_len):
        if self.pos % PAGE == 0:
            self._page_header()
        start = self.pos
        payload = bytes((start + k) % 251 + 1 for k in range(payload_len))
        if payload_len < 256:
            body = bytes([255, payload_len]) + payload
        else:
            body = bytes([254]) + struct.pack("<I", payload_len) + payload
        tot = 24 + len(body)
        hdr = struct.pack("<IIQBBH", tot, 0, self.prev, 0x20, 0, 0)
        crc = crc32c(hdr[:20], crc32c(body)) ^ 0xFFFFFFFF
        rec = hdr + struct.pack("<I", crc) + body
        self.cont_left = tot
        self._place(rec)
        assert self.cont_left == 0
        pad = (-self.pos) % 8
        self._raw(b"\0" * pad)
        self.prev = start
        return self.pos  # record end (8-aligned)

    def take(self):
        """Returns (begin_lsn, bytes) written since the last take."""
        begin = self.pos - len(self.buf)
        b = bytes(self.buf)
        self.buf = bytearray()
        return begin, b


# ------------------------------------------------------- PG wire client


class PgError(Exception):
    def __init__(self, fields):
        self.fields = fields
        super().__init__(f"{fields.get('S')} {fields.get('C')}: {fields.get('M')}"
                         + (f" ({fields['D']})" if 'D' in fields else ""))

    @property
    def text(self):
        return (self.fields.get("M", "") + " " + self.fields.get("D", "")).strip()


class Conn:
    def __init__(self, port, options=None, user="test", timeout=10, startup=True,
                 replication=None, password=None, application_name=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.rbuf = b""
        self.password = password  # answers a cleartext password request
        if startup:
            params = {"user": user, "database": "postgres"}
            if options is not None:
                params["options"] = options
            if replication is not None:
                params["replication"] = replication
            if application_name is not None:
                params["application_name"] = application_name
            body = struct.pack("!I", 196608)
            for k, v in params.items():
                body += k.encode() + b"\0" + v.encode() + b"\0"
            body += b"\0"
            self.send_raw(struct.pack("!I", len(body) + 4) + body)
            self.wait_ready()

    def send_raw(self, b):
        self.sock.sendall(b)

    def send(self, typ, body):
        self.send_raw(typ + struct.pack("!I", len(body) + 4) + body)

    def _recv_exact(self, n):
        while len(self.rbuf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("connection closed by server")
            self.rbuf += chunk
        out, self.rbuf = self.rbuf[:n], self.rbuf[n:]
        return out

    def recv(self):
        typ = self._recv_exact(1)
        (length,) = struct.unpack("!I", self._recv_exact(4))
        return typ, self._recv_exact(length - 4)

    @staticmethod
    def parse_error(body):
        fields = {}
        for part in body.split(b"\0"):
            if part:
                fields[chr(part[0])] = part[1:].decode(errors="replace")
        return fields

    def recv_checked(self):
        """Next message that is not a notice or parameter status; raises
        PgError on ErrorResponse."""
        while True:
            typ, body = self.recv()
            if typ == b"E":
                raise PgError(self.parse_error(body))
            if typ in (b"N", b"S", b"K"):
                continue
            return typ, body

    def wait_ready(self):
        while True:
            typ, body = self.recv_checked()
            if typ == b"R":
                (code,) = struct.unpack("!I", body[:4])
                if code == 3 and self.password is not None:
                    self.send(b"p", self.password.encode() + b"\0")
                else:
                    assert code == 0, f"unexpected auth request {code}"
            elif typ == b"Z":
                return

    def query(self, sql):
        """Simple query; returns rows (lists of str/None)."""
        self.send(b"Q", sql.encode() + b"\0")
        rows = []
        err = None
        while True:
            typ, body = self.recv()
            if typ == b"E":
                err = PgError(self.parse_error(body))
            elif typ == b"D":
                (n,) = struct.unpack("!H", body[:2])
                off, row = 2, []
                for _ in range(n):
                    (ln,) = struct.unpack("!i", body[off:off + 4])
                    off += 4
                    if ln < 0:
                        row.append(None)
                    else:
                        row.append(body[off:off + ln].decode())
                        off += ln
                rows.append(row)
            elif typ == b"Z":
                if err:
                    raise err
                return rows
            elif typ == b"W":
                return "copyboth"

    def start_copy_both(self, sql):
        self.send(b"Q", sql.encode() + b"\0")
        typ, _ = self.recv_checked()
        assert typ == b"W", typ

    def copy_data(self, payload):
        self.send(b"d", payload)

    def recv_copy(self):
        typ, body = self.recv_checked()
        assert typ == b"d", typ
        return body

    def expect_error(self):
        """Reads until an ErrorResponse; returns its fields."""
        while True:
            try:
                typ, body = self.recv()
            except (EOFError, ConnectionResetError):
                pytest.fail("connection closed without an ErrorResponse")
            if typ == b"E":
                return self.parse_error(body)

    def expect_closed(self, timeout=5):
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return
        except ConnectionResetError:
            return

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


# --------------------------------------------------- WAL-push messages


def members_wire(members):
    """One member set on the wire: u8 count, then (u64 node id, u8 length,
    address) per member."""
    b = struct.pack("!B", len(members))
    for node, addr in members:
        a = addr.encode()
        b += struct.pack("!QB", node, len(a)) + a
    return b


def greeting(tenant, timeline, seg=SEG, version=3, pg_version=150020, generation=0,
             members=(), new_members=()):
    return (b"g" + struct.pack("!I", version) + bytes.fromhex(tenant) + bytes.fromhex(timeline)
            + struct.pack("!IQI", pg_version, SYSID, seg)
            + struct.pack("!I", generation) + members_wire(members) + members_wire(new_members))


def vote(term, generation=0):
    return b"v" + struct.pack("!QI", term, generation)


def elected(term, start, history, generation=0):
    b = b"e" + struct.pack("!QIQI", term, generation, start, len(history))
    for t, l in history:
        b += struct.pack("!QQ", t, l)
    return b


def append(term, begin, wal, commit, truncate=0, generation=0, ps=(0, 0, 0)):
    """ps: the pageserver feedback the proposer relays (last_received,
    disk_consistent, remote_consistent)."""
    return (b"a" + struct.pack("!QIQQQQQQQ", term, generation, begin, begin + len(wal), commit,
                               truncate, *ps) + wal)


def parse_append_response(b):
    assert b[0:1] == b"a", b[:1]
    term, flush, commit, lr, dc, rc = struct.unpack("!QQQQQQ", b[1:49])
    return {"term": term, "flush_lsn": flush, "commit_lsn": commit,
            "ps_feedback": (lr, dc, rc)}


def lsn_str(lsn):
    return "%X/%X" % (lsn >> 32, lsn & 0xFFFFFFFF)


def opts(tenant, timeline):
    return f"-c tenant_id={tenant} -c timeline_id={timeline}"


# ------------------------------------------------------------- fixtures


class Safekeeper:
    def __init__(self, datadir, extra_args=(), wrapper=(), node_id=1):
        self.datadir = datadir
        self.node_id = node_id
        self.proc = None
        self.extra_args = list(extra_args)
        self.wrapper = list(wrapper)  # e.g. strace and its options

    def start(self):
        ports_file = os.path.join(self.datadir, "safekeeper.ports")
        if os.path.exists(ports_file):
            os.unlink(ports_file)
        self.log = open(os.path.join(os.path.dirname(self.datadir), "sk.log"), "ab")
        self.proc = subprocess.Popen(
            self.wrapper + [SK_BIN, "--id", str(self.node_id), "--datadir", self.datadir, "--listen-pg",
                            "127.0.0.1:0", "--listen-http", "127.0.0.1:0"] + self.extra_args,
            stdout=self.log, stderr=self.log)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("safekeeper exited: " + self.read_log())
            if os.path.exists(ports_file):
                parts = dict(p.split("=") for p in open(ports_file).read().split())
                self.pg_port, self.http_port = int(parts["pg"]), int(parts["http"])
                return
            time.sleep(0.05)
        raise RuntimeError("safekeeper did not become ready")

    def read_log(self):
        with open(os.path.join(os.path.dirname(self.datadir), "sk.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def http_json(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=10) as r:
            return json.loads(r.read())

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc = self.proc.returncode if self.proc else None
        self.proc = None
        self.log.close()
        return rc


@pytest.fixture
def sk():
    if not os.path.exists(SK_BIN):
        pytest.skip(f"{SK_BIN} not built")
    tmp = tempfile.mkdtemp(prefix="strata-sk-")
    s = Safekeeper(os.path.join(tmp, "data"))
    s.start()
    yield s
    rc = s.stop()
    log = s.read_log()
    shutil.rmtree(tmp, ignore_errors=True)
    assert rc == 0, "safekeeper did not shut down cleanly:\n" + log
    assert "AddressSanitizer" not in log and "runtime error" not in log, log


class Proposer:
    """A well-behaved WAL-push session driven from Python."""

    def __init__(self, sk, tenant, timeline, term=1, start=SEG, seg=SEG, create=True,
                 password=None):
        self.c = Conn(sk.pg_port, opts(tenant, timeline), password=password)
        # A new timeline is created only when the proposer asks for it.
        self.c.start_copy_both("START_WAL_PUSH (proto_version '3'%s)" % (
            ", allow_timeline_creation 'true'" if create else ""))
        self.c.copy_data(greeting(tenant, timeline, seg=seg))
        g = self.c.recv_copy()
        assert g[0:1] == b"g"
        self.c.copy_data(vote(term))
        v = self.c.recv_copy()
        assert v[0:1] == b"v" and v[9] == 1, "vote not given"
        self.term = term
        self.wal = WalWriter(start, seg)
        self.c.copy_data(elected(term, start, [(term, start)]))
        self.commit = 0
        self.pushed = bytearray()
        self.start = start

    def push(self, nrecords=5, size=100, commit=True):
        for _ in range(nrecords):
            end = self.wal.record(size)
        begin, data = self.wal.take()
        for off in range(0, len(data), 128 * 1024):
            chunk = data[off:off + 128 * 1024]
            self.c.copy_data(append(self.term, begin + off, chunk, self.commit, self.commit))
        self.pushed += data
        # Wait for an AppendResponse covering the end.
        while True:
            r = parse_append_response(self.c.recv_copy())
            if r["flush_lsn"] >= end:
                break
        if commit:
            self.commit = end
            # A heartbeat carries the new commit_lsn (and truncate_lsn).
            self.c.copy_data(append(self.term, end, b"", self.commit, self.commit))
            r = parse_append_response(self.c.recv_copy())
            assert r["commit_lsn"] == end
        return end


def new_ids():
    return os.urandom(16).hex(), os.urandom(16).hex()


# ---------------------------------------------------------------- tests


def test_good_session_and_status(sk):
    tenant, timeline = new_ids()
    p = Proposer(sk, tenant, timeline)
    end = p.push(20, 300)
    st = sk.http_json(f"/v1/tenant/{tenant}/timeline/{timeline}")
    assert st["term"] == 1
    assert st["flush_lsn"] == lsn_str(end)
    assert st["commit_lsn"] == lsn_str(end)
    status = sk.http_json("/v1/status")
    assert status["node_id"] == 1
    assert any(t["timeline_id"] == timeline for t in status["timelines"])
    # The replication commands see the committed end.
    c = Conn(sk.pg_port, opts(tenant, timeline), replication="true")
    rows = c.query("IDENTIFY_SYSTEM")
    assert rows == [[str(SYSID), "1", lsn_str(end), None]]
    assert c.query("SHOW wal_segment_size") == [["16MB"]]
    assert c.query("SHOW data_directory_mode") == [["0700"]]
    assert c.query("TIMELINE_STATUS")[0][:3] == ["1", lsn_str(end), lsn_str(end)]
    with pytest.raises(PgError) as e:
        c.query("TIMELINE_HISTORY 1")
    assert "00000001.history" in e.value.text
    c.close()
    with urllib.request.urlopen(f"http://127.0.0.1:{sk.http_port}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    assert "safekeeper_appends_total" in metrics
    assert "safekeeper_fdatasync_seconds_bucket" in metrics
    p.c.close()


def test_bad_input_gets_clear_errors(sk):
    tenant, timeline = new_ids()
    good = Proposer(sk, tenant, timeline)
    good.push(3, 200)

    # 1. Garbage instead of a startup packet.
    c = Conn(sk.pg_port, startup=False)
    c.send_raw(b"\x00\x00\x00\x10GARBAGE-GARBAGE!")
    err = c.expect_error()
    assert "protocol" in err["M"].lower(), err
    c.close()
    assert sk.alive()
    good.push(2, 100)

    # 2. A startup packet whose length is absurd.
    c = Conn(sk.pg_port, startup=False)
    c.send_raw(struct.pack("!I", 0x7FFFFFFF) + b"\x00\x03\x00\x00")
    err = c.expect_error()
    assert "length" in err["M"].lower(), err
    c.close()

    # 3. A message with a length shorter than its own length field.
    c = Conn(sk.pg_port, opts(tenant, timeline))
    c.send_raw(b"Q" + struct.pack("!I", 2))
    err = c.expect_error()
    assert "length" in err["M"].lower(), err
    c.close()
    good.push(2, 100)

    # 4. Missing and malformed ids, then an unknown tenant.
    c = Conn(sk.pg_port, startup=False)
    try:
        Conn.__init__(c, sk.pg_port, "-c tenant_id=" + tenant)
        pytest.fail("connection without timeline_id accepted")
    except PgError as e:
        assert "timeline_id" in e.text
    c.close()
    with pytest.raises(PgError) as e:
        Conn(sk.pg_port, "-c tenant_id=xyz -c timeline_id=" + timeline)
    assert "tenant_id" in e.value.text and "xyz" in e.value.text
    unknown_t, unknown_l = new_ids()
    c = Conn(sk.pg_port, opts(unknown_t, unknown_l))
    with pytest.raises(PgError) as e:
        c.query("IDENTIFY_SYSTEM")
    assert unknown_t in e.value.text and unknown_l in e.value.text
    with pytest.raises(PgError) as e:
        c.query("START_REPLICATION PHYSICAL 0/1000000")
    assert "not found" in e.value.text
    with pytest.raises(PgError) as e:
        c.query("DROP TABLE everything")
    assert "unsupported command" in e.value.text
    c.close()

    # 5. Malformed WAL-push messages inside CopyBoth.
    bad_msgs = [
        (b"x", "unknown message tag"),
        (greeting(tenant, timeline)[:20], "ProposerGreeting: message too short"),
        (greeting(tenant, timeline, seg=12345), "wal_seg_size"),
        (b"", "empty message"),
        (vote(5) + b"junk", "trailing bytes"),
    ]
    for payload, want in bad_msgs:
        c = Conn(sk.pg_port, opts(tenant, timeline))
        c.start_copy_both("START_WAL_PUSH")
        c.copy_data(payload)
        err = c.expect_error()
        assert want in (err.get("M", "") + " " + err.get("D", "")), (want, err)
        c.expect_closed()
        c.close()
        good.push(1, 50)

    # An append that is not WAL (the acceptor's tracker rejects it), sent
    # on a second connection that got through greeting and vote refusal.
    c = Conn(sk.pg_port, opts(tenant, timeline))
    c.start_copy_both("START_WAL_PUSH (proto_version '3')")
    c.copy_data(append(1, 0, b"\x01" * 64, 0))
    err = c.expect_error()
    assert "ProposerGreeting" in err["M"] + err.get("D", ""), err
    c.close()

    # Unsupported protocol version in the command.
    c = Conn(sk.pg_port, opts(tenant, timeline))
    with pytest.raises(PgError) as e:
        c.query("START_WAL_PUSH (proto_version '9')")
    assert "proto_version" in e.value.text
    c.close()

    # Bad replication-protocol feedback.
    c = Conn(sk.pg_port, opts(tenant, timeline), replication="true")
    c.start_copy_both(f"START_REPLICATION PHYSICAL {lsn_str(SEG)}")
    c.copy_data(b"r" + b"\0" * 5)
    err = c.expect_error()
    assert "standby status update" in err["M"], err
    c.close()

    # Through all of it the good session kept working.
    end = good.push(10, 1000)
    st = sk.http_json(f"/v1/tenant/{tenant}/timeline/{timeline}")
    assert st["flush_lsn"] == lsn_str(end)
    assert sk.alive()


def test_requests_before_wal_start(sk):
    tenant, timeline = new_ids()
    p = Proposer(sk, tenant, timeline, start=2 * SEG)
    p.push(3, 100)
    c = Conn(sk.pg_port, opts(tenant, timeline), replication="true")
    with pytest.raises(PgError) as e:
        c.query(f"START_REPLICATION PHYSICAL {lsn_str(SEG)}")
    assert "requested WAL segment 000000010000000000000001 has already been removed" in e.value.text
    with pytest.raises(PgError) as e:
        c.query(f"START_REPLICATION PHYSICAL {lsn_str(3 * SEG)}")
    assert "ahead of the WAL flush position" in e.value.text
    c.close()


def test_streams_only_committed_wal(sk):
    tenant, timeline = new_ids()
    p = Proposer(sk, tenant, timeline)
    committed = p.push(5, 100, commit=True)
    p.push(5, 100, commit=False)  # flushed but not committed
    c = Conn(sk.pg_port, opts(tenant, timeline), replication="true")
    c.start_copy_both(f"START_REPLICATION PHYSICAL {lsn_str(SEG)}")
    got = bytearray()
    while len(got) < committed - SEG:
        m = c.recv_copy()
        if m[0:1] == b"w":
            start, wal_end = struct.unpack("!QQ", m[1:17])
            assert start == SEG + len(got)
            assert wal_end == committed
            got += m[25:]
    assert len(got) == committed - SEG
    assert bytes(got) == bytes(p.pushed[:committed - SEG])
    # Ask for a keepalive: it reports the committed end, nothing more comes.
    c.copy_data(b"r" + struct.pack("!QQQqB", committed, committed, committed, 0, 1))
    m = c.recv_copy()
    assert m[0:1] == b"k"
    assert struct.unpack("!Q", m[1:9])[0] == committed
    # With the current term, the flushed (uncommitted) tail is served too.
    c2 = Conn(sk.pg_port, opts(tenant, timeline), replication="true")
    c2.start_copy_both(f"START_REPLICATION PHYSICAL {lsn_str(committed)} (term '1')")
    m = c2.recv_copy()
    assert m[0:1] == b"w"
    assert struct.unpack("!Q", m[1:9])[0] == committed
    assert struct.unpack("!Q", m[9:17])[0] == p.wal.pos
    c2.close()
    c3 = Conn(sk.pg_port, opts(tenant, timeline), replication="true")
    with pytest.raises(PgError) as e:
        c3.query(f"START_REPLICATION PHYSICAL {lsn_str(committed)} TERM 7")
    assert "does not match" in e.value.text
    c3.close()
    c.close()


def test_restart_keeps_acknowledged_wal(sk):
    tenant, timeline = new_ids()
    p = Proposer(sk, tenant, timeline)
    end = p.push(50, 500)
    p.c.close()
    assert sk.stop() == 0
    sk.start()
    st = sk.http_json(f"/v1/tenant/{tenant}/timeline/{timeline}")
    assert st["flush_lsn"] == lsn_str(end)
    assert st["term"] == 1
    # A new proposer in term 2 continues after it.
    c = Conn(sk.pg_port, opts(tenant, timeline))
    c.start_copy_both("START_WAL_PUSH")
    c.copy_data(greeting(tenant, timeline))
    assert struct.unpack("!QQ", c.recv_copy()[1:17])[1] == 1
    c.copy_data(vote(2))
    v = c.recv_copy()
    assert v[9] == 1 and struct.unpack("!Q", v[10:18])[0] == end
    c.close()


def test_restart_with_commit_ahead_of_local_wal(sk):
    """A quorum may commit WAL this safekeeper never received: the stored
    commit_lsn is then beyond our WAL, and a restart must not take it as
    the end of what we hold."""
    tenant, timeline = new_ids()
    p = Proposer(sk, tenant, timeline)
    end = p.push(10, 200)
    p.c.copy_data(append(1, end, b"", end + 3 * PAGE, end))
    r = parse_append_response(p.c.recv_copy())
    assert r["flush_lsn"] == end and r["commit_lsn"] == end + 3 * PAGE
    p.c.close()
    assert sk.stop() == 0  # saves the lazily-kept commit_lsn
    sk.start()
    st = sk.http_json(f"/v1/tenant/{tenant}/timeline/{timeline}")
    assert st["flush_lsn"] == lsn_str(end)
    assert st["commit_lsn"] == lsn_str(end)  # served end: min(commit, flush)
    c = Conn(sk.pg_port, opts(tenant, timeline), replication="true")
    assert c.query("IDENTIFY_SYSTEM")[0][2] == lsn_str(end)
    c.close()


def test_restart_cuts_a_torn_record(sk):
    """A record whose bytes are damaged on disk (as a torn write would
    leave them) is not part of WAL after a restart: the CRC check ends WAL
    at the previous record, and the tail is zeroed."""
    tenant, timeline = new_ids()
    p = Proposer(sk, tenant, timeline)
    good_end = p.push(10, 300, commit=True)
    last_end = p.push(1, 3000, commit=False)
    assert sk.stop() == 0
    seg_file = os.path.join(sk.datadir, tenant, timeline, "000000010000000000000001.partial")
    with open(seg_file, "r+b") as f:
        f.seek(good_end - SEG + 2000)  # inside the last record's payload
        b = f.read(1)
        f.seek(good_end - SEG + 2000)
        f.write(bytes([b[0] ^ 0xFF]))
    sk.start()
    st = sk.http_json(f"/v1/tenant/{tenant}/timeline/{timeline}")
    assert st["flush_lsn"] == lsn_str(good_end), (st, lsn_str(last_end))
    with open(seg_file, "rb") as f:
        f.seek(good_end - SEG)
        assert f.read(last_end - good_end) == b"\0" * (last_end - good_end)


def test_wal_removal_follows_pageserver_feedback(sk):
    mb = 1 << 20
    tenant, timeline = new_ids()
    p = Proposer(sk, tenant, timeline, start=mb, seg=mb)
    end = p.push(110, 30000)  # a bit over 3 segments
    assert end > 4 * mb
    tdir = os.path.join(sk.datadir, tenant, timeline)
    seg = lambda n: os.path.join(tdir, "0000000100000000%08X" % n)
    time.sleep(2.5)  # housekeeping runs every second
    assert os.path.exists(seg(1)), "removed WAL before any pageserver reported"

    c = Conn(sk.pg_port, opts(tenant, timeline), replication="true",
             application_name="strata_pageserver")
    c.start_copy_both(f"START_REPLICATION PHYSICAL {lsn_str(3 * mb)}")
    persisted = 3 * mb + 100
    # A disk position without a remote one (a seeded control file that did
    # not learn it) keeps everything: WAL above the newest manifest.
    c.copy_data(b"z" + struct.pack("!QQQ", end, persisted, 0))
    time.sleep(2.5)
    assert os.path.exists(seg(1)), "removed WAL without the pageserver's remote position"
    # A pageserver without uploads reports its disk position as remote.
    c.copy_data(b"z" + struct.pack("!QQQ", end, persisted, persisted))
    deadline = time.time() + 10
    while time.time() < deadline and os.path.exists(seg(2)):
        time.sleep(0.2)
    assert not os.path.exists(seg(1)) and not os.path.exists(seg(2))
    assert os.path.exists(seg(3)), "removed the segment holding the horizon"
    st = sk.http_json(f"/v1/tenant/{tenant}/timeline/{timeline}")
    assert st["pageserver_feedback"]["disk_consistent_lsn"] == lsn_str(persisted)
    with urllib.request.urlopen(f"http://127.0.0.1:{sk.http_port}/metrics", timeout=10) as r:
        assert "safekeeper_wal_segments_removed_total 2" in r.read().decode()
    c.close()
    c = Conn(sk.pg_port, opts(tenant, timeline), replication="true")
    with pytest.raises(PgError) as e:
        c.query(f"START_REPLICATION PHYSICAL {lsn_str(mb)}")
    assert "000000010000000000000001 has already been removed" in e.value.text
    c.close()
    # The feedback survived a restart (stored in the control file).
    assert sk.stop() == 0
    sk.start()
    st = sk.http_json(f"/v1/tenant/{tenant}/timeline/{timeline}")
    assert st["pageserver_feedback"]["disk_consistent_lsn"] == lsn_str(persisted)
    assert st["flush_lsn"] == lsn_str(end)


def test_newer_term_takes_over(sk):
    tenant, timeline = new_ids()
    a = Proposer(sk, tenant, timeline, term=1)
    end_a = a.push(5, 100)
    # Proposer B: greeting, vote for term 2, elected at A's end.
    b = Conn(sk.pg_port, opts(tenant, timeline))
    b.start_copy_both("START_WAL_PUSH")
    b.copy_data(greeting(tenant, timeline))
    assert struct.unpack("!Q", b.recv_copy()[9:17])[0] == 1
    b.copy_data(vote(2))
    v = b.recv_copy()
    assert v[9] == 1 and struct.unpack("!Q", v[10:18])[0] == end_a
    b.copy_data(elected(2, end_a, [(1, SEG), (2, end_a)]))
    # A's next append is refused with the newer term.
    a.wal.record(100)
    begin, data = a.wal.take()
    a.c.copy_data(append(1, begin, data, a.commit))
    r = parse_append_response(a.c.recv_copy())
    assert r["term"] == 2 and r["flush_lsn"] == end_a
    # B streams the same bytes; once accepted, A's connection is closed.
    b.copy_data(append(2, begin, data, 0))
    while parse_append_response(b.recv_copy())["flush_lsn"] < begin + len(data):
        pass
    err = a.c.expect_error()
    assert "took over" in err["M"], err
    # HTTP serves a snapshot the event loop publishes after it has handled
    # its input, so it may trail the AppendResponse by a moment.
    want = lsn_str(begin + len(data))
    deadline = time.time() + 5
    while True:
        st = sk.http_json(f"/v1/tenant/{tenant}/timeline/{timeline}")
        if (st["term"] == 2 and st["flush_lsn"] == want) or time.time() > deadline:
            break
        time.sleep(0.05)
    assert st["term"] == 2 and st["flush_lsn"] == want, st
    b.close()


def test_pg_receivewal_gets_pushed_bytes(sk):
    if not os.path.exists(os.path.join(PG_BIN, "pg_receivewal")):
        pytest.skip("pg_receivewal not installed")
    tenant, timeline = new_ids()
    p = Proposer(sk, tenant, timeline)
    end = p.push(200, 2000)
    out = tempfile.mkdtemp(prefix="strata-recv-")
    os.chmod(out, 0o777)
    connstr = (f"host=127.0.0.1 port={sk.pg_port} user=postgres "
               f"options='{opts(tenant, timeline)}'")
    proc = subprocess.Popen(
        ["runuser", "-u", "postgres", "--", os.path.join(PG_BIN, "pg_receivewal"),
         "-D", out, "-d", connstr, "--no-loop", "-v", "-s", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        partial = os.path.join(out, "000000010000000000000001.partial")
        want = bytes(p.pushed)
        deadline = time.time() + 30
        ok = False
        while time.time() < deadline and proc.poll() is None:
            if os.path.exists(partial):
                with open(partial, "rb") as f:
                    data = f.read(len(want))
                if data == want:
                    ok = True
                    break
            time.sleep(0.2)
        if not ok:
            proc.terminate()
            log = proc.communicate(timeout=10)[0].decode(errors="replace")
            pytest.fail("pg_receivewal did not write the pushed WAL:\n" + log)
        assert p.wal.pos == end
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)
        shutil.rmtree(out, ignore_errors=True)


def test_data_of_another_node_is_refused(sk):
    """Finding 11: a control file written as node 1 (a replaced node's
    directory moved back into another node's place) must not be served by a
    safekeeper started with --id 2; the error names both ids."""
    tenant, timeline = new_ids()
    p = Proposer(sk, tenant, timeline)
    p.push(3, 100)
    p.c.close()
    assert sk.stop() == 0
    other = Safekeeper(sk.datadir, node_id=2)
    try:
        with pytest.raises(RuntimeError) as e:
            other.start()
        msg = str(e.value)
        assert "node 1" in msg and "node 2" in msg and timeline in msg, msg
    finally:
        if other.proc is not None:
            other.stop()
    sk.start()  # its own node id still loads it (the fixture stops it)


def greet_with(port, tenant, timeline, payload, password=None):
    """One greeting on a fresh WAL-push connection: ("greeting", generation)
    or ("error", text)."""
    c = Conn(port, opts(tenant, timeline), password=password)
    try:
        c.start_copy_both("START_WAL_PUSH (proto_version '3')")
        c.copy_data(payload)
        try:
            g = c.recv_copy()
        except PgError as e:
            return ("error", e.text)
        # node_id u64, term u64, then the configuration's generation
        return ("greeting", struct.unpack("!I", g[17:21])[0])
    finally:
        c.close()


def timeline_generation(port, tenant, timeline, password=None):
    """The configuration generation TIMELINE_STATUS reports (its sixth
    column, conn.c cmd_timeline_status)."""
    c = Conn(port, opts(tenant, timeline), password=password)
    try:
        return int(c.query("TIMELINE_STATUS")[0][5])
    finally:
        c.close()


def test_configuration_in_a_greeting_needs_the_admin(tmp_path):
    """Finding 8 at the daemon: with an auth file, a greeting bringing a newer
    configuration is refused on a tenant's token (nothing stored; WAL still
    flows on that token) and adopted on the admin token.  Without an auth
    file the network is trusted and any greeting may bring one."""
    if not os.path.exists(SK_BIN):
        pytest.skip(f"{SK_BIN} not built")
    tenant, timeline = new_ids()
    admin, tenant_token = "admin-" + os.urandom(8).hex(), "tenant-" + os.urandom(8).hex()
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps({"admin_token": admin, "tenants": {tenant: tenant_token}}))
    os.chmod(auth, 0o600)
    s = Safekeeper(str(tmp_path / "data"), ["--auth-file", str(auth)])
    s.start()
    try:
        p = Proposer(s, tenant, timeline, password=tenant_token)
        p.push(3, 100)
        newer = greeting(tenant, timeline, generation=1, members=[(1, "127.0.0.1:%d" % s.pg_port)])
        kind, what = greet_with(s.pg_port, tenant, timeline, newer, tenant_token)
        assert kind == "error" and "only the admin may install" in what, (kind, what)
        assert timeline_generation(s.pg_port, tenant, timeline, tenant_token) == 0
        p.push(2, 100)  # the tenant's proposer goes on
        assert greet_with(s.pg_port, tenant, timeline, newer, admin) == ("greeting", 1)
        assert timeline_generation(s.pg_port, tenant, timeline, admin) == 1
        p.c.close()
    finally:
        assert s.stop() == 0, s.read_log()

    # No auth file: trusted, adopted from anyone.
    s = Safekeeper(str(tmp_path / "data2"))
    s.start()
    try:
        p = Proposer(s, tenant, timeline)
        p.push(2, 100)
        assert greet_with(s.pg_port, tenant, timeline, newer) == ("greeting", 1)
        assert timeline_generation(s.pg_port, tenant, timeline) == 1
        p.c.close()
    finally:
        assert s.stop() == 0, s.read_log()
