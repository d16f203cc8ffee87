"""
A small pagestream client for tests (docs/design.md §3.4, proto/pagestream.h).

Raw sockets speaking the Postgres v3 protocol: startup (trust), one simple
query `pagestream_v1 <tenant> <timeline>`, then CopyBoth with one pagestream
message per CopyData.  Raw on purpose, so tests can send malformed bytes.

    c = pagestream.connect("127.0.0.1", port, tenant_hex, timeline_hex)
    page = c.get_page(1663, db, relfilenode, 0, blkno, lsn)   # bytes (8192)
    n = c.nblocks(1663, db, relfilenode, 0, lsn)
    ok = c.exists(1663, db, relfilenode, 0, lsn)
    size = c.db_size(db, lsn)
    blocks = c.slru_segment(kind, segno, lsn)                 # bytes, n x 8192
    c.close()

lsn may be an int or "X/Y"; LATEST (2**64-1) asks for the newest version.
not_modified_since defaults to 0 (no promise); pass nms= to set it.
A PS_RESP_ERROR raises PagestreamError(sqlstate, message); a server
ErrorResponse raises ServerError(fields); a closed connection raises
ConnectionClosed.  For bad input: c.raw(payload) sends one CopyData with any
bytes; c.send_request(...) and c.read_response() pipeline.
"""
import socket
import struct

LATEST = 0xFFFFFFFFFFFFFFFF
PAGE = 8192

REQ_EXISTS, REQ_NBLOCKS, REQ_GETPAGE, REQ_DBSIZE, REQ_SLRU, REQ_SPCSIZE = 0, 1, 2, 3, 4, 5
RESP_ERROR = 0xFF


class ConnectionClosed(Exception):
    pass


class ServerError(Exception):
    """A Postgres ErrorResponse; .fields maps field codes ('C', 'M', ...)."""

    def __init__(self, fields):
        self.fields = fields
        super().__init__("%s %s: %s" % (fields.get("S", "?"), fields.get("C", "?"),
                                        fields.get("M", "")))

    @property
    def sqlstate(self):
        return self.fields.get("C")

    @property
    def message(self):
        return self.fields.get("M", "")


class PagestreamError(Exception):
    def __init__(self, reqid, sqlstate, message):
        self.reqid = reqid
        self.sqlstate = sqlstate
        self.message = message
        super().__init__("%s: %s" % (sqlstate, message))


def lsn_int(lsn):
    if isinstance(lsn, int):
        return lsn
    hi, lo = lsn.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def encode_request(tag, reqid, lsn, nms, body):
    return struct.pack(">BQQQ", tag, reqid, lsn_int(lsn), lsn_int(nms)) + body


def rel_body(spc, db, rel, fork):
    return struct.pack(">IIIB", spc, db, rel, fork)


class Client:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.next_reqid = 1
        self.notices = []

    # ---- wire ----

    def _recv_exact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise ConnectionClosed("server closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_message(self):
        """(type byte as str, body bytes)."""
        head = self._recv_exact(5)
        typ, length = head[:1].decode("latin1"), struct.unpack(">I", head[1:])[0]
        if length < 4 or length > (64 << 20):
            raise ConnectionClosed("bad message length %d" % length)
        return typ, self._recv_exact(length - 4)

    def send_message(self, typ, body):
        self.sock.sendall(typ.encode("latin1") + struct.pack(">I", len(body) + 4) + body)

    @staticmethod
    def parse_error(body):
        fields = {}
        for part in body.split(b"\0"):
            if part:
                fields[part[:1].decode()] = part[1:].decode("utf-8", "replace")
        return fields

    def _expect_copy_both(self):
        while True:
            typ, body = self.read_message()
            if typ == "W":
                return
            if typ == "E":
                fields = self.parse_error(body)
                # Drain to ReadyForQuery so the connection stays usable.
                try:
                    while self.read_message()[0] != "Z":
                        pass
                except ConnectionClosed:
                    pass
                raise ServerError(fields)
            if typ == "N":
                self.notices.append(self.parse_error(body))

    def query(self, sql):
        self.send_message("Q", sql.encode() + b"\0")

    # ---- pagestream ----

    def raw(self, payload):
        """Sends one CopyData with exactly these bytes."""
        self.send_message("d", payload)

    def send_request(self, tag, lsn, body, nms=0, reqid=None):
        if reqid is None:
            reqid = self.next_reqid
            self.next_reqid += 1
        self.raw(encode_request(tag, reqid, lsn, nms, body))
        return reqid

    def read_response(self):
        """The next pagestream response: (tag, reqid, payload bytes).  A
        PS_RESP_ERROR raises PagestreamError; an ErrorResponse ServerError."""
        while True:
            typ, body = self.read_message()
            if typ == "d":
                break
            if typ == "E":
                raise ServerError(self.parse_error(body))
            if typ == "N":
                self.notices.append(self.parse_error(body))
                continue
            if typ in ("c", "C", "Z"):
                raise ConnectionClosed("copy ended (%s)" % typ)
        if len(body) < 9:
            raise ValueError("short pagestream response: %r" % body)
        tag, reqid = struct.unpack(">BQ", body[:9])
        payload = body[9:]
        if tag == RESP_ERROR:
            sqlstate = payload[:5].decode()
            (mlen,) = struct.unpack(">I", payload[5:9])
            raise PagestreamError(reqid, sqlstate, payload[9:9 + mlen].decode("utf-8", "replace"))
        return tag, reqid, payload

    def _call(self, tag, lsn, body, nms):
        reqid = self.send_request(tag, lsn, body, nms)
        rtag, rid, payload = self.read_response()
        if rid != reqid or rtag != (0x80 | tag):
            raise ValueError("response %#x/%d to request %#x/%d" % (rtag, rid, tag, reqid))
        return payload

    def exists(self, spc, db, rel, fork, lsn=LATEST, nms=0):
        payload = self._call(REQ_EXISTS, lsn, rel_body(spc, db, rel, fork), nms)
        assert len(payload) == 1 and payload[0] in (0, 1)
        return payload[0] == 1

    def nblocks(self, spc, db, rel, fork, lsn=LATEST, nms=0):
        payload = self._call(REQ_NBLOCKS, lsn, rel_body(spc, db, rel, fork), nms)
        return struct.unpack(">I", payload)[0]

    def get_page(self, spc, db, rel, fork, blk, lsn=LATEST, nms=0):
        payload = self._call(REQ_GETPAGE, lsn, rel_body(spc, db, rel, fork) +
                             struct.pack(">I", blk), nms)
        assert len(payload) == PAGE
        return payload

    def db_size(self, db, lsn=LATEST, nms=0):
        payload = self._call(REQ_DBSIZE, lsn, struct.pack(">I", db), nms)
        return struct.unpack(">q", payload)[0]

    def spc_size(self, spc, lsn=LATEST, nms=0):
        """(bytes, relations) of a tablespace, every database."""
        payload = self._call(REQ_SPCSIZE, lsn, struct.pack(">I", spc), nms)
        return struct.unpack(">qI", payload)

    def slru_segment(self, kind, segno, lsn=LATEST, nms=0):
        payload = self._call(REQ_SLRU, lsn, struct.pack(">BI", kind, segno), nms)
        (n,) = struct.unpack(">I", payload[:4])
        assert len(payload) == 4 + n * PAGE
        return payload[4:]

    def close(self):
        try:
            self.send_message("X", b"")
        except OSError:
            pass
        self.sock.close()


def startup(host, port, user="strata", database="postgres", timeout=30, password=None):
    """A socket past authentication (trust, or a cleartext password: a
    token) and ReadyForQuery, as a Client."""
    sock = socket.create_connection((host, port), timeout=timeout)
    params = b"user\0" + user.encode() + b"\0database\0" + database.encode() + b"\0\0"
    sock.sendall(struct.pack(">II", 8 + len(params), 196608) + params)
    c = Client(sock)
    while True:
        typ, body = c.read_message()
        if typ == "R":
            (code,) = struct.unpack(">I", body[:4])
            if code == 3 and password is not None:
                pw = password.encode() + b"\0"
                sock.sendall(b"p" + struct.pack(">I", 4 + len(pw)) + pw)
            elif code != 0:
                raise ServerError({"M": "authentication method %d not supported here" % code})
        elif typ == "E":
            raise ServerError(Client.parse_error(body))
        elif typ == "Z":
            return c


def connect(host, port, tenant, timeline, timeout=30, password=None):
    """A Client in CopyBoth mode on tenant/timeline (hex ids).  Raises
    ServerError when the server refuses (unknown tenant or timeline)."""
    c = startup(host, port, timeout=timeout, password=password)
    c.query("pagestream_v1 %s %s" % (tenant, timeline))
    try:
        c._expect_copy_both()
    except Exception:
        c.sock.close()
        raise
    return c
