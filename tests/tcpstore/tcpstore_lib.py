"""What tcpstore_test.py (torch 1.13) and torch2_test.py (torch 2.6, in a
chroot) share: the check framework, threads with a deadline, and raw
TCPStore connections (both dialects; the bytes of every request as
store/wire/tcpstore_wire.h lays them out). Pure Python 3, no torch: it runs
under either interpreter. A script sets CHECK_LIMIT to its own longest
check before the first one runs."""

import socket
import struct
import threading
import traceback

HOST = "127.0.0.1"
SHORT = 1.5  # seconds to watch for something that must not happen
LONG = 10.0  # seconds to allow for something that must happen
CHECK_LIMIT = 150  # seconds for one whole check (the scripts set their own)
MAGIC = b"\xce\xf7\x85\x3c"  # 0x3C85F7CE, little-endian
# v2 opcodes; 14-18 are of releases after 2.6.
V2 = dict(VALIDATE=0, SET=1, CAS=2, GET=3, ADD=4, CHECK=5, WAIT=6, NUMKEYS=7,
          DELETE=8, APPEND=9, MGET=10, MSET=11, CANCEL=12, PING=13,
          QPUSH=14, QPOP=15, QLEN=16, LIST=17, BARRIER=18)

results = []  # (name, ok), one per check run


# ---------------------------------------------------------------- framework

class CheckFailed(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise CheckFailed(msg)


def eq(got, want, what):
    if got != want:
        raise CheckFailed("%s: got %r, want %r" % (what, got, want))


def check(name):
    """Runs fn as one check; prints PASS/FAIL; never raises. fn runs in a
    thread: some torch 1.13 calls have no timeout of their own (num_keys,
    add, set: only waits set SO_RCVTIMEO), so a server that never answers
    would hang the whole run; such a check fails after CHECK_LIMIT s."""
    def deco(fn):
        out = []

        def run():
            try:
                fn()
            except CheckFailed as e:
                out.append("FAIL: %s: %s" % (name, e))
            except Exception as e:  # a client error, a closed socket, ...
                out.append("FAIL: %s: %s: %s\n%s" % (
                    name, type(e).__name__, e, traceback.format_exc()))
            else:
                out.append("PASS: %s" % name)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(CHECK_LIMIT)
        if not out:
            out.append("FAIL: %s: no answer within %d s (a call without a "
                       "timeout is blocked; left behind)"
                       % (name, CHECK_LIMIT))
        print(out[0], flush=True)
        results.append((name, out[0].startswith("PASS")))
        return fn
    return deco


def in_thread(fn):
    """Starts fn in a thread; returns (thread, box) where box gets
    ("ok", value) or ("err", exception)."""
    box = []

    def run():
        try:
            box.append(("ok", fn()))
        except Exception as e:
            box.append(("err", e))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def finished(t, box, what, limit=LONG + 5):
    t.join(limit)
    expect(not t.is_alive(), "%s never returned" % what)
    expect(box and box[0][0] == "ok", "%s raised %r" % (what, box[0][1]
                                                         if box else None))
    return box[0][1]


# -------------------------------------------------------------- raw sockets

def u32(n):
    return struct.pack("<I", n)


def i64(n):
    return struct.pack("<q", n)


def blob(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack("<Q", len(b)) + b


def keys(*ks):
    return struct.pack("<Q", len(ks)) + b"".join(blob(k) for k in ks)


class Closed(Exception):
    pass


class Raw:
    """A raw TCPStore connection to one node's port."""

    def __init__(self, port, v2=True, nonce=0x4a3b2c1d):
        self.s = socket.create_connection((HOST, port), timeout=LONG)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if v2:
            self.send(b"\x00" + MAGIC)                       # VALIDATE
            self.send(bytes([V2["PING"]]) + u32(nonce))      # PING
            eq(self.recv(4), u32(nonce), "PING echo after VALIDATE")

    def send(self, b):
        self.s.sendall(b)

    def recv(self, n, timeout=LONG):
        """Exactly n bytes, or CheckFailed naming what came."""
        self.s.settimeout(timeout)
        got = b""
        while len(got) < n:
            try:
                c = self.s.recv(n - len(got))
            except socket.timeout:
                raise CheckFailed("waited %.1f s for %d bytes, got %s"
                                  % (timeout, n, got.hex(" ") or "nothing"))
            except ConnectionError as e:
                raise Closed("connection closed (%s) after %s" %
                             (e, got.hex(" ") or "nothing"))
            if not c:
                raise Closed("connection closed after %d of %d bytes (%s)"
                             % (len(got), n, got.hex(" ") or "nothing"))
            got += c
        return got

    def recv_blob(self):
        n = struct.unpack("<Q", self.recv(8))[0]
        expect(n < 1 << 30, "blob length %d" % n)
        return self.recv(n)

    def recv_i64(self, timeout=LONG):
        return struct.unpack("<q", self.recv(8, timeout))[0]

    def silent(self, secs=SHORT):
        """What arrives within secs: b"" when nothing (and still open);
        raises Closed when the server closed the connection."""
        self.s.settimeout(secs)
        try:
            c = self.s.recv(4096)
        except socket.timeout:
            return b""
        except ConnectionError as e:
            raise Closed("connection closed (%s)" % e)
        if not c:
            raise Closed("connection closed")
        return c

    def expect_silent(self, what, secs=SHORT):
        try:
            got = self.silent(secs)
        except Closed as e:
            raise CheckFailed("%s: %s" % (what, e))
        expect(got == b"", "%s: unexpected bytes %s" % (what, got.hex(" ")))

    def expect_closed(self, what, secs=LONG):
        """The server closes within secs (bytes before the close are
        reported)."""
        self.s.settimeout(secs)
        got = b""
        while True:
            try:
                c = self.s.recv(4096)
            except socket.timeout:
                raise CheckFailed("%s: connection still open after %.0f s "
                                  "(received %s)"
                                  % (what, secs, got.hex(" ") or "nothing"))
            except ConnectionError:
                c = b""
            if not c:
                expect(got == b"", "%s: closed, but first sent %s"
                       % (what, got.hex(" ")))
                return
            got += c

    def close(self):
        self.s.close()

    # v2 requests of releases after 2.6 (torch2_test.py sends them raw).
    def get_counter(self, key):
        self.send(bytes([V2["ADD"]]) + blob(key) + i64(0))
        return self.recv_i64()

    def list_keys(self):
        self.send(bytes([V2["LIST"]]))
        n = self.recv_i64()
        if not 0 <= n < 1 << 24:
            raise CheckFailed("LIST_KEYS count %d" % n)
        return [self.recv_blob() for _ in range(n)]

    def barrier_send(self, key, world):
        self.send(bytes([V2["BARRIER"]]) + blob(key) + i64(world))
