#!/usr/bin/python3
"""End-to-end checks of rdzvd's TCPStore front end with the torch 2.x client.

Run by torch2_test.sh inside the Debian trixie chroot that
tools/torch2-chroot.sh builds (Debian's python3-torch 2.6, /usr/bin/python3
3.13), against daemons running outside it: a root and two nodes, A and B,
all three with --tcpstore-listen in the same --tcpstore-job. The chroot
shares the host's network namespace, so 127.0.0.1 reaches them. The wire
protocol: store/wire/tcpstore_wire.h.

Debian's 2.6 build has no libuv: every TCPStore here is created with
use_libuv=False. torch's own code that creates one without saying (env://
with TORCHELASTIC_USE_AGENT_STORE=True, torchrun's c10d backend and its
agents' store) gets the same default from torch2_shim/sitecustomize.py,
which the shell puts on PYTHONPATH (it changes that default only; a
torch built with libuv needs no shim, and the client's bytes are the
same either way).

Groups (--groups, default all):
  smoke    each front end answers a 2.x handshake (else the run stops);
  client   every operation of the 2.x Python TCPStore client, once against
           the root's front end and once against node A's, each result
           read back through node B (set, get, add, compare_set, wait with
           and without a timeout, check, delete_key, num_keys, append,
           multi_set, multi_get, set_timeout, timeouts and error paths);
  later    raw bytes of the opcodes of releases after 2.6, which the 2.6
           client cannot send: LIST_KEYS and BARRIER served through the
           tree, QUEUE_PUSH/POP/LEN closed;
  stack    4 ranks as separate processes, 2 through node A and 2 through
           node B: gloo init_process_group with an explicit store, and with
           env:// and the agent store; all_reduce, broadcast, barrier;
  torchrun torchrun 2.6, one agent per node (--nnodes=2
           --nproc-per-node=2), --rdzv-backend=c10d with each agent's
           --rdzv-endpoint its own node's front end: (a) stock workers
           (env://), (b) the same with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1,
           (c) workers that build their store at their node's front end;
           each time where the workers' store was is checked, and that
           the rendezvous keys are in rdzv.

Mode "pattern" (run by torch2_test.sh apart): PyTorch's id exchange and
heartbeat checks by 32 real stores through the two nodes, whose cost at the
root the shell checks.

Prints one "PASS: name" or "FAIL: name: why" line per check, and a line
"FACT: ..." for each finding about torch itself (what goes through rdzv);
exits with status 1 when any check failed.
"""

import argparse
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import tcpstore_lib
from tcpstore_lib import (HOST, LONG, SHORT, V2, CheckFailed, Raw, blob,
                          check, eq, expect, finished, i64, in_thread,
                          results, u32)

# seconds for one whole check (torchrun: 4 processes)
tcpstore_lib.CHECK_LIMIT = 240

args = None


# ---------------------------------------------------------------- framework

def fact(text):
    print("FACT: %s" % text, flush=True)


def raises(fn, what, *words):
    """fn() must raise; its message must hold every word. Returns it."""
    try:
        fn()
    except Exception as e:
        msg = "%s: %s" % (type(e).__name__, e)
        for w in words:
            expect(w.lower() in msg.lower(), "%s raised [%s], want [%s] in "
                   "it" % (what, msg[:300], w))
        return msg
    raise CheckFailed("%s did not raise" % what)


# -------------------------------------------------------- torch 2.x client

def store(port, world_size=None, seconds=LONG, **kw):
    import torch.distributed as dist
    return dist.TCPStore(HOST, port, world_size, False,
                         timedelta(seconds=seconds), use_libuv=False, **kw)


def client_checks(where, port):
    """Every operation of the 2.x client against the front end at port
    (the root's or node A's); what it writes is read back through node B.
    Keys are under /<where>/. A set or an append gets no reply, in
    TCPStore as here: another store is sure to see it only after the
    writer's next call that has a reply (fence() below; the front end
    answers that once the write is applied at the root), or by waiting for
    the key."""
    import torch.distributed as dist
    pb = args.port_b
    p = where + "/"
    s = store(port, world_size=2)  # ADD init/ 1 after VALIDATE + PING
    sb = store(pb)

    def fence(st):
        st.num_keys()

    @check("%s: the 2.x client's API is what this test covers" % where)
    def _():
        have = sorted(m for m in dir(dist.TCPStore) if not m.startswith("_"))
        fact("torch %s TCPStore methods: %s" % (
            __import__("torch").__version__, ", ".join(have)))
        for m in ("set", "get", "add", "compare_set", "wait", "check",
                  "delete_key", "num_keys", "append", "multi_get",
                  "multi_set", "set_timeout"):
            expect(m in have, "TCPStore has no %s" % m)
        for m in ("queue_push", "queue_pop", "queue_len", "list_keys",
                  "barrier"):
            if m in have:
                raise CheckFailed("this torch exposes %s: add a check of it "
                                  "with the real client" % m)
        expect(s.libuvBackend is False, "libuvBackend %r" % s.libuvBackend)
        expect(s.has_extended_api(), "has_extended_api() is False")
        eq(s.port, port, "store.port")
        eq(s.timeout, timedelta(seconds=LONG), "store.timeout")

    @check("%s: set/get, read back through node B; overwrite" % where)
    def _():
        s.set(p + "k", b"v1")
        eq(s.get(p + "k"), b"v1", "get")
        eq(sb.get(p + "k"), b"v1", "get through node B")
        sb.set(p + "k", "v2")  # a str value
        fence(sb)
        eq(s.get(p + "k"), b"v2", "get after node B's set")

    @check("%s: binary, empty and 1 MiB values" % where)
    def _():
        v = bytes(range(256)) * 4096
        s.set(p + "bin", v)
        fence(s)
        eq(sb.get(p + "bin"), v, "1 MiB value through node B")
        s.set(p + "empty", b"")
        fence(s)
        eq(sb.get(p + "empty"), b"", "empty value")
        s.set(p + "nul\x00key", b"\x00\xff")
        fence(s)
        eq(sb.get(p + "nul\x00key"), b"\x00\xff", "a NUL in the key")

    @check("%s: add: new key, negative, 0, large; the counter is decimal "
           "text" % where)
    def _():
        eq(s.add(p + "c", 5), 5, "add 5 (new key)")
        eq(sb.add(p + "c", -7), -2, "add -7 via node B")
        eq(s.add(p + "c", 0), -2, "add 0")
        eq(s.get(p + "c"), b"-2", "get of the counter")
        eq(s.add(p + "big", 2 ** 62), 2 ** 62, "add 2^62")
        eq(sb.add(p + "big", -(2 ** 63) + 1), 2 ** 62 - 2 ** 63 + 1,
           "add -(2^63-1)")

    @check("%s: 200 adds from two stores on two front ends sum exactly"
           % where)
    def _():
        s1, s2 = store(port), store(pb)
        ta, ba = in_thread(lambda: [s1.add(p + "sum", 1) for _ in range(100)])
        tb, bb = in_thread(lambda: [s2.add(p + "sum", 3) for _ in range(100)])
        ra = finished(ta, ba, "adds 1")
        rb = finished(tb, bb, "adds 3")
        eq(len(set(ra + rb)), 200, "distinct return values")
        eq(s.add(p + "sum", 0), 400, "the sum")

    @check("%s: compare_set hit, miss, create with b\"\", absent key"
           % where)
    def _():
        s.set(p + "cas", b"a")
        eq(s.compare_set(p + "cas", b"a", b"b"), b"b", "hit: desired")
        eq(sb.get(p + "cas"), b"b", "after the hit, via node B")
        eq(sb.compare_set(p + "cas", b"zz", b"c"), b"b", "miss: current")
        eq(s.compare_set(p + "casnew", b"", b"x"), b"x", "create with b\"\"")
        eq(sb.get(p + "casnew"), b"x", "created value via node B")
        n0 = s.num_keys()
        eq(s.compare_set(p + "absent", b"e", b"d"), b"e",
           "absent key: expected")
        eq(s.check([p + "absent"]), False, "nothing created")
        eq(s.num_keys(), n0, "num_keys unchanged")

    @check("%s: compare_set wakes a waiter (as the libuv server does)"
           % where)
    def _():
        sw = store(pb)
        t, box = in_thread(lambda: sw.wait([p + "cas_w"],
                                           timedelta(seconds=LONG)))
        time.sleep(SHORT)
        expect(t.is_alive(), "wait returned before the key existed")
        s.compare_set(p + "cas_w", b"", b"1")
        finished(t, box, "wait after compare_set")

    @check("%s: check: all present, one missing, empty list" % where)
    def _():
        s.set(p + "ck1", b"1")
        sb.set(p + "ck2", b"2")
        eq(s.get(p + "ck2"), b"2", "sync")
        eq(s.check([p + "ck1", p + "ck2"]), True, "both present")
        eq(s.check([p + "ck1", p + "nokey"]), False, "one missing")
        eq(sb.check([p + "ck1"]), True, "via node B")
        eq(s.check([]), True, "empty list")

    @check("%s: delete_key True, then False; num_keys follows" % where)
    def _():
        s.set(p + "d", b"x")
        n0 = s.num_keys()
        eq(sb.num_keys(), n0, "num_keys via node B")
        eq(sb.delete_key(p + "d"), True, "delete via node B")
        eq(s.delete_key(p + "d"), False, "delete again")
        eq(s.num_keys(), n0 - 1, "num_keys after the delete")
        eq(s.check([p + "d"]), False, "check after the delete")
        s.set(p + "d", b"y")
        eq(sb.get(p + "d"), b"y", "set again after the delete")

    @check("%s: num_keys counts init/ and the keys (the same everywhere)"
           % where)
    def _():
        n0 = s.num_keys()
        expect(n0 >= 2, "num_keys %d (init/ and more exist)" % n0)
        s.set(p + "nk1", b"1")
        s.set(p + "nk2", b"2")
        eq(s.num_keys(), n0 + 2, "after two new keys")
        eq(sb.num_keys(), n0 + 2, "via node B")
        r = store(args.port_root)
        eq(r.num_keys(), n0 + 2, "via the root's front end")

    @check("%s: append creates, then appends; wakes a waiter" % where)
    def _():
        s.append(p + "ap", b"ab")
        s.append(p + "ap", "cd")
        fence(s)
        eq(sb.get(p + "ap"), b"abcd", "appended value via node B")
        sw = store(pb)
        t, box = in_thread(lambda: sw.get(p + "ap_w"))
        time.sleep(SHORT)
        expect(t.is_alive(), "get returned before the key existed")
        s.append(p + "ap_w", b"z")
        eq(finished(t, box, "get after append"), b"z", "value")

    @check("%s: multi_set, multi_get (in order, across nodes), empty "
           "lists" % where)
    def _():
        s.multi_set([p + "m1", p + "m2", p + "m3"], [b"a", b"bb", "ccc"])
        eq(sb.multi_get([p + "m3", p + "m1", p + "m2"]), [b"ccc", b"a", b"bb"],
           "multi_get via node B")
        eq(s.get(p + "m2"), b"bb", "get of one of them")
        s.multi_set([], [])
        eq(s.multi_get([]), [], "multi_get of nothing")

    @check("%s: multi_get blocks until the last key is set (through node "
           "B)" % where)
    def _():
        sw = store(port)
        t, box = in_thread(lambda: sw.multi_get([p + "mg1", p + "mg2"]))
        sb.set(p + "mg1", b"1")
        time.sleep(SHORT)
        expect(t.is_alive(), "multi_get returned with one of two keys")
        sb.set(p + "mg2", b"2")
        eq(finished(t, box, "multi_get"), [b"1", b"2"], "values")

    @check("%s: wait on existing keys; on 3 keys that come one by one "
           "(set, add, append via node B)" % where)
    def _():
        s.set(p + "e1", b"1")
        s.wait([p + "e1"])
        s.wait([p + "e1"], timedelta(seconds=5))
        sw = store(port)
        t, box = in_thread(lambda: sw.wait([p + "w1", p + "w2", p + "w3"],
                                           timedelta(seconds=LONG)))
        time.sleep(SHORT)
        expect(t.is_alive(), "wait returned before any key existed")
        sb.set(p + "w1", b"1")
        sb.add(p + "w2", 1)
        time.sleep(SHORT)
        expect(t.is_alive(), "wait returned with 2 of 3 keys")
        sb.append(p + "w3", b"x")
        finished(t, box, "wait")
        sw.set(p + "w4", b"ok")
        eq(sw.get(p + "w4"), b"ok", "the same store after the wait")

    @check("%s: get of a key set later by another process through node B"
           % where)
    def _():
        child = subprocess.Popen(
            [sys.executable, __file__, "child-set", "--port", str(pb),
             "--key", p + "late", "--delay", str(SHORT)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            t0 = time.monotonic()
            eq(s.get(p + "late"), b"from the child", "value")
            expect(time.monotonic() - t0 >= SHORT * 0.8,
                   "get returned after %.2f s, before the child's set"
                   % (time.monotonic() - t0))
            out, _ = child.communicate(timeout=LONG + 20)
            eq(child.returncode, 0, "child status (%s)" % out[-500:])
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()

    @check("%s: wait with a 500 ms timeout raises, sends CANCEL_WAIT, and "
           "the store still works; a late set is not misread" % where)
    def _():
        sw = store(port)
        t0 = time.monotonic()
        raises(lambda: sw.wait([p + "never"], timedelta(milliseconds=500)),
               "wait(500 ms)", "timeout")
        dt = time.monotonic() - t0
        expect(0.4 <= dt < 5, "raised after %.2f s" % dt)
        sb.set(p + "never", b"late")  # the cancelled wait's key
        sw.set(p + "after", b"z")
        eq(sw.get(p + "after"), b"z", "get after the timed-out wait")
        eq(sw.add(p + "after_c", 4), 4, "add after it")
        eq(sw.get(p + "never"), b"late", "the late key")

    @check("%s: get and multi_get of missing keys time out with the store "
           "timeout; set_timeout changes it" % where)
    def _():
        sw = store(port, seconds=1)
        t0 = time.monotonic()
        raises(lambda: sw.get(p + "missing"), "get", "timeout")
        expect(time.monotonic() - t0 < 6, "get took %.1f s"
               % (time.monotonic() - t0))
        raises(lambda: sw.multi_get([p + "e1", p + "missing"]), "multi_get",
               "timeout")
        sw.set_timeout(timedelta(milliseconds=300))
        eq(sw.timeout, timedelta(milliseconds=300), "timeout after set")
        t0 = time.monotonic()
        raises(lambda: sw.get(p + "missing"), "get (300 ms)", "timeout")
        expect(time.monotonic() - t0 < 3, "get took %.1f s after set_timeout"
               % (time.monotonic() - t0))
        eq(sw.get(p + "e1"), b"1", "the store still works")

    @check("%s: add on a non-numeric value: the server closes that "
           "connection, the client raises; other stores keep working"
           % where)
    def _():
        sx = store(port)
        sx.set(p + "nan", b"abc")
        raises(lambda: sx.add(p + "nan", 1), "add on b'abc'")
        raises(lambda: sx.get(p + "e1"), "the closed store's next call")
        eq(s.get(p + "e1"), b"1", "another store on the same front end")
        eq(store(port).get(p + "nan"), b"abc", "the value is unchanged")

    @check("%s: 32 stores (half on node B) meet at an add counter, the last "
           "sets go, every get(go) returns" % where)
    def _():
        n = 32
        stores = [store(pb if i % 2 else port) for i in range(n)]

        def member(st):
            k = st.add(p + "arrive", 1)
            if k == n:
                st.set(p + "go", b"go")
            return k, st.get(p + "go")
        ts = [in_thread(lambda st=st: member(st)) for st in stores]
        got = [finished(t, b, "member %d" % i) for i, (t, b) in enumerate(ts)]
        eq(sorted(k for k, _ in got), list(range(1, n + 1)), "add results")
        eq(set(v for _, v in got), {b"go"}, "values of go")

    @check("%s: a store created with world_size counts itself in init/"
           % where)
    def _():
        r = Raw(port)
        n0 = r.get_counter("init/")
        store(port, world_size=4)
        eq(r.get_counter("init/"), n0 + 1, "init/ after one more store")


def child_set(port, key, delay):
    s = store(port)
    time.sleep(delay)
    s.set(key, b"from the child")
    return 0


# ------------------------------------------------- raw sockets (tcpstore_lib)

def later_checks():
    pa, pb, pr = args.port_a, args.port_b, args.port_root

    @check("later: LIST_KEYS (17) lists every key of the job, the same "
           "through node A, node B and the root")
    def _():
        s = store(pa)
        s.set("lk/one", b"1")
        s.set("lk/two", b"2")
        s.add("lk/three", 3)
        got = [Raw(port).list_keys() for port in (pa, pb, pr)]
        for port, keys in zip(("A", "B", "root"), got):
            for k in (b"/lk/one", b"/lk/two", b"/lk/three", b"init/"):
                expect(k in keys, "%s: %r missing from LIST_KEYS (%d keys)"
                       % (port, k, len(keys)))
            eq(len(keys), len(set(keys)), "%s: no key twice" % port)
            eq(len(keys), s.num_keys(), "%s: count vs num_keys" % port)
        eq(sorted(got[0]), sorted(got[2]), "node A and the root agree")
        s.delete_key("lk/two")
        expect(b"/lk/two" not in Raw(pb).list_keys(), "a deleted key listed")

    @check("later: BARRIER (18) of 4 callers, 2 per node: nobody released "
           "before the 4th, all after; the counter is the key's value")
    def _():
        cs = [Raw(pa if i % 2 else pb) for i in range(4)]
        for c in cs[:3]:
            c.barrier_send("/bar/one", 4)
        for c in cs[:3]:
            eq(c.silent(), b"", "released with 3 of 4 callers")
        cs[3].barrier_send("/bar/one", 4)
        for i, c in enumerate(cs):
            eq(c.recv(1), b"\x00", "caller %d: STOP_WAITING" % i)
        eq(store(pa).get("bar/one"), b"4", "the counter (get via the client)")
        c = Raw(pr)  # past the world size: at once
        c.barrier_send("/bar/one", 4)
        eq(c.recv(1, SHORT * 2), b"\x00", "a 5th caller, at once")
        eq(c.get_counter("/bar/one"), 5, "the counter after 5")

    @check("later: BARRIER with world size 1 and 0 releases at once; a "
           "barrier holds nothing else back on other connections")
    def _():
        c = Raw(pa)
        c.barrier_send("/bar/w1", 1)
        eq(c.recv(1, SHORT * 2), b"\x00", "world size 1")
        c.barrier_send("/bar/w0", 0)
        eq(c.recv(1, SHORT * 2), b"\x00", "world size 0")
        w = Raw(pa)
        w.barrier_send("/bar/held", 2)
        eq(c.get_counter("/bar/held"), 1, "another connection's add")

    @check("later: BARRIER then CANCEL_WAIT (a client's timeout): "
           "WAIT_CANCELED, the connection works, the arrival still counts")
    def _():
        a = Raw(pa)
        a.barrier_send("/bar/cancel", 2)
        eq(a.silent(0.5), b"", "released alone")
        a.send(bytes([V2["CANCEL"]]))
        eq(a.recv(1), b"\x01", "WAIT_CANCELED")
        eq(a.get_counter("/bar/cancel"), 1, "counter after the cancel")
        b = Raw(pb)
        b.barrier_send("/bar/cancel", 2)
        eq(b.recv(1), b"\x00", "the second caller is released")
        eq(a.silent(0.5), b"", "a late answer on the cancelled connection")
        a.send(bytes([V2["PING"]]) + u32(77))
        eq(a.recv(4), u32(77), "PING after it")

    @check("later: BARRIER pipelined behind a SET and an ADD is answered "
           "after them, in order")
    def _():
        a = Raw(pa)
        a.send(bytes([V2["SET"]]) + blob("/bar/pk") + blob("x") +
               bytes([V2["ADD"]]) + blob("/bar/pc") + i64(2) +
               bytes([V2["BARRIER"]]) + blob("/bar/p") + i64(1))
        eq(a.recv(9).hex(" "), (i64(2) + b"\x00").hex(" "),
           "ADD's reply, then BARRIER's")

    def closes(name, build):
        @check("later: %s closes that connection; others keep working"
               % name)
        def _():
            other = Raw(pa)
            c = Raw(pa)
            c.send(build())
            c.expect_closed(name)
            eq(other.get_counter("/later/alive"), 0, "the other connection")
            Raw(pa).get_counter("/later/alive")

    closes("QUEUE_PUSH (14, not served)",
           lambda: bytes([V2["QPUSH"]]) + blob("/q") + blob("v"))
    closes("QUEUE_POP (15, not served)",
           lambda: bytes([V2["QPOP"]]) + blob("/q"))
    closes("QUEUE_LEN (16, not served)",
           lambda: bytes([V2["QLEN"]]) + blob("/q"))
    closes("opcode 19 (unknown)", lambda: bytes([19]))


def smoke_checks():
    for name, port in (("root", args.port_root), ("A", args.port_a),
                       ("B", args.port_b)):
        @check("smoke: the %s front end answers VALIDATE + PING and the "
               "2.6 client's constructor" % name)
        def _():
            Raw(port, nonce=99)
            s = store(port, seconds=5)
            s.set("smoke", b"1")
            eq(s.get("smoke"), b"1", "get")


# ------------------------------------------------------------------- stack

def run_procs(cmds, env, limit):
    """Runs the commands at once, each one's output to a file (no pipe to
    fill up); returns [(status, output)] once all ended, killing what is
    still running after limit seconds."""
    import tempfile
    files = [tempfile.TemporaryFile() for _ in cmds]
    procs = [subprocess.Popen(c, env=env, stdout=f, stderr=subprocess.STDOUT,
                              start_new_session=True)
             for c, f in zip(cmds, files)]
    deadline = time.monotonic() + limit
    killed = set()
    try:
        for i, p in enumerate(procs):
            try:
                p.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                killed.add(i)
    finally:
        hung = [p for p in procs if p.poll() is None]
        for p in hung:  # their stacks first (torch2_shim: faulthandler)
            try:
                os.killpg(p.pid, signal.SIGUSR1)
            except OSError:
                pass
        if hung:
            time.sleep(2)
        for p in hung:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # torchrun's workers too
            except OSError:
                pass
            p.wait()
    outs = []
    for i, (p, f) in enumerate(zip(procs, files)):
        f.seek(0)
        out = f.read().decode(errors="replace")
        f.close()
        if i in killed:
            out += "\n[killed after %d s]" % limit
        outs.append((p.returncode, out))
    return outs


def stack_checks():
    world = 4

    def ranks(name, mode):
        @check(name)
        def _():
            env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
            cmds = [[sys.executable, __file__, mode, "--rank", str(r),
                     "--world", str(world), "--port",
                     str(args.port_a if r < 2 else args.port_b),
                     "--run", "%s-%d" % (mode, os.getpid())]
                    for r in range(world)]
            outs = run_procs(cmds, env, 180)
            for r, (rc, out) in enumerate(outs):
                expect(rc == 0 and ("rank %d ok" % r) in out,
                       "rank %d: status %s, output:\n%s" % (r, rc,
                                                            out[-3000:]))

    ranks("stack: gloo init_process_group(store=TCPStore) + all_reduce, "
          "4 ranks: 0-1 via node A, 2-3 via node B", "rank-store")
    ranks("stack: gloo init_process_group(env://, agent store) + "
          "all_reduce, 4 ranks: 0-1 via node A, 2-3 via node B", "rank-env")


def collectives(rank, world, keep):
    """all_reduce, broadcast, barrier; returns what went wrong, or None.
    The tensors go into keep: the caller holds them until after
    destroy_process_group. (torch 2.6: should a gloo worker thread drop
    the last reference of a tensor while ~ProcessGroupGloo joins it under
    the GIL, both wait for ever; seen here as a hang at exit.)"""
    import torch
    import torch.distributed as dist
    assert dist.get_rank() == rank and dist.get_world_size() == world
    t = torch.tensor([rank + 1.0, 10.0 * (rank + 1)])
    keep.append(t)
    dist.all_reduce(t)
    n = world * (world + 1) / 2
    if t.tolist() != [n, 10 * n]:
        return "all_reduce: %s" % t.tolist()
    b = torch.tensor([float(rank * 7)])
    keep.append(b)
    dist.broadcast(b, src=world - 1)
    if b.tolist() != [7.0 * (world - 1)]:
        return "broadcast: %s" % b.tolist()
    dist.barrier()
    return None


def rank_main(mode, port, rank, world, run):
    import torch.distributed as dist
    if mode == "rank-store":
        base = store(port, world_size=world, seconds=60)
        s = dist.PrefixStore(run, base)
        dist.init_process_group("gloo", store=s, rank=rank, world_size=world,
                                timeout=timedelta(seconds=60))
    else:
        # env:// with the agent store: a client TCPStore at MASTER_ADDR:
        # MASTER_PORT, here each rank's own node. 2.6 adds no
        # /worker/attempt_N prefix any more (1.13 did): its keys are
        # /<group>/..., so only one such run fits in a job.
        os.environ.update(MASTER_ADDR=HOST, MASTER_PORT=str(port),
                          RANK=str(rank), WORLD_SIZE=str(world),
                          TORCHELASTIC_USE_AGENT_STORE="True",
                          TORCHELASTIC_RESTART_COUNT="0")
        dist.init_process_group("gloo", init_method="env://",
                                timeout=timedelta(seconds=60))
    keep = []
    err = collectives(rank, world, keep)
    dist.destroy_process_group()
    del keep
    if err:
        print("rank %d %s" % (rank, err))
        return 1
    print("rank %d ok" % rank, flush=True)
    return 0


# ---------------------------------------------------------------- torchrun

def torchrun_checks():
    pa, pb = args.port_a, args.port_b
    ports = {str(pa), str(pb), str(args.port_root)}

    def torchrun(variant, extra_env=None, extra_args=()):
        """Two agents (one per node), 2 workers each; returns the workers'
        reports ({rank: dict}) and the run id."""
        # The workers' store port in (a) and (b) is picked by torch's agent
        # binding port 0 and closing it; a worker binds it later, and on a
        # busy machine another process can take it in between ("Address
        # already in use", seen in CI): torch's race. A launch where a
        # worker failed (torch's launcher says "failed (exitcode: ...)") is
        # tried again once with a new run id; the first try's errors are
        # printed, and the second must pass. Not in (c), where the
        # workers' store is rdzv.
        for attempt in range(2):
            run_id = "t2-%s-%d-%d" % (variant, os.getpid(), attempt)
            rdir, outs = launch(run_id, variant, extra_env, extra_args)
            failed = [out for rc, out in outs if rc != 0]
            if not failed or attempt == 1 or variant == "rdzv" or not all(
                    "failed (exitcode:" in out for out in failed):
                break
            for out in failed:
                print("RETRY: torchrun %s launch %s: a worker failed: %s"
                      % (variant, run_id, " | ".join(
                          line.strip() for line in out.splitlines()
                          if "Error" in line or "errno" in line)[-1500:]),
                      flush=True)
        return check_launch(run_id, rdir, outs)

    def launch(run_id, variant, extra_env, extra_args):
        import tempfile
        rdir = tempfile.mkdtemp(prefix="reports-", dir=args.tmp)
        # USE_LIBUV=0: how env:// (without the agent store) is told that
        # this torch has no libuv.
        env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
                   USE_LIBUV="0", T2_VARIANT=variant, T2_REPORTS=rdir)
        env.update(extra_env or {})
        cmds = []
        for port in (pa, pb):
            cmds.append(["/usr/bin/torchrun", "--nnodes=2",
                         "--nproc-per-node=2", "--rdzv-backend=c10d",
                         "--rdzv-endpoint=%s:%d" % (HOST, port),
                         "--rdzv-conf=is_host=false",
                         "--rdzv-id=%s" % run_id, "--max-restarts=0",
                         "--monitor-interval=0.5"] + list(extra_args) +
                        [__file__, "worker", "--port", str(port)])
        return rdir, run_procs(cmds, env, args.torchrun_limit)

    def check_launch(run_id, rdir, outs):
        reports = {}
        for name in os.listdir(rdir):
            with open(os.path.join(rdir, name)) as f:
                line = f.read().strip()
            kv = dict(f.split("=", 1) for f in line.split()[1:])
            reports[int(kv["rank"])] = kv
        for i, (rc, out) in enumerate(outs):
            expect(rc == 0, "agent %d (node %s): status %s, output:\n%s"
                   % (i, "AB"[i], rc, out[-12000:]))
        eq(sorted(reports), [0, 1, 2, 3], "workers that reported")
        for r, kv in sorted(reports.items()):
            expect(kv.get("ok") == "1", "worker %d: %s" % (r, kv))
        keys = [k.decode(errors="replace") for k in Raw(pa).list_keys()]
        mine = sorted(k for k in keys if run_id in k)
        expect(any(k == "/torch.rendezvous." + run_id for k in mine),
               "no rendezvous state key /torch.rendezvous.%s in rdzv (keys "
               "with the run id: %s)" % (run_id, mine))
        return reports, run_id, mine

    @check("torchrun: (a) stock c10d: the agents' rendezvous goes through "
           "nodes A and B, the workers' env:// store is the rank-0 "
           "agent's own TCPStore; --master-addr/--master-port are ignored")
    def _():
        reports, run_id, mine = torchrun("stock", extra_args=(
            "--master-addr=%s" % HOST, "--master-port=%d" % pa))
        w = reports[0]
        fact("torchrun 2.6, c10d, stock: %d rendezvous keys in rdzv (%s); "
             "workers got TORCHELASTIC_USE_AGENT_STORE=%s MASTER_ADDR=%s "
             "MASTER_PORT=%s (node ports: A %d, B %d)"
             % (len(mine), ", ".join(mine[:6]),
                w["use_agent_store"], w["master_addr"], w["master_port"],
                pa, pb))
        eq(len({kv["master_port"] for kv in reports.values()}), 1,
           "one MASTER_PORT for every worker")
        eq(w["use_agent_store"], "True", "TORCHELASTIC_USE_AGENT_STORE")
        expect(w["master_port"] not in ports,
               "the workers' MASTER_PORT %s is an rdzv front end: torch "
               "changed; update docs/pytorch.md" % w["master_port"])
        expect(any("MASTER_ADDR" in k for k in mine) and
               any("MASTER_PORT" in k for k in mine),
               "the bootstrap address keys are not in rdzv: %s" % mine)

    @check("torchrun: (b) TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: the "
           "workers' store is hosted by worker rank 0, not by rdzv")
    def _():
        reports, run_id, mine = torchrun(
            "noshare", extra_env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"})
        w = reports[0]
        fact("torchrun 2.6, c10d, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: "
             "workers got TORCHELASTIC_USE_AGENT_STORE=%s MASTER_PORT=%s"
             % (w["use_agent_store"], w["master_port"]))
        eq(w["use_agent_store"], "False", "TORCHELASTIC_USE_AGENT_STORE")
        expect(w["master_port"] not in ports, "MASTER_PORT %s is rdzv's"
               % w["master_port"])

    @check("torchrun: (c) agents and workers both on rdzv: workers build "
           "their store at their own node's front end (run id and restart "
           "count as the prefix); nothing goes to MASTER_PORT")
    def _():
        reports, run_id, mine = torchrun("rdzv")
        used = sorted(kv["store_port"] for kv in reports.values())
        eq(used, sorted([str(pa)] * 2 + [str(pb)] * 2),
           "the workers' store ports (2 per node)")
        worker_keys = [k for k in mine if "/attempt_0/" in k]
        expect(worker_keys, "no worker key under %s/attempt_0 in rdzv"
               % run_id)
        fact("torchrun 2.6, c10d, workers on rdzv: %d worker keys in rdzv "
             "(e.g. %s)" % (len(worker_keys), worker_keys[0]))


def worker_main(port):
    """A torchrun worker: reports what torchrun gave it, then gloo."""
    import torch.distributed as dist
    e = os.environ
    rank, world = int(e["RANK"]), int(e["WORLD_SIZE"])
    variant = e["T2_VARIANT"]
    report = dict(rank=rank, group_rank=e["GROUP_RANK"],
                  use_agent_store=e.get("TORCHELASTIC_USE_AGENT_STORE"),
                  master_addr=e.get("MASTER_ADDR"),
                  master_port=e.get("MASTER_PORT"), store_port="-")
    try:
        if variant == "rdzv":
            # The worker's own node (the agent's --rdzv-endpoint, passed
            # down here as --port), a key space per run and restart.
            base = store(port, seconds=60)
            s = dist.PrefixStore("%s/attempt_%s" % (
                e["TORCHELASTIC_RUN_ID"], e["TORCHELASTIC_RESTART_COUNT"]),
                base)
            report["store_port"] = port
            dist.init_process_group("gloo", store=s, rank=rank,
                                    world_size=world,
                                    timeout=timedelta(seconds=60))
        else:
            dist.init_process_group("gloo", timeout=timedelta(seconds=60))
        keep = []
        err = collectives(rank, world, keep)
        dist.destroy_process_group()
        del keep
        report["ok"] = "0" if err else "1"
        if err:
            report["err"] = err.replace(" ", "_")
    except Exception as ex:
        report["ok"] = "0"
        report["err"] = ("%s:%s" % (type(ex).__name__, ex)).replace(" ", "_")
    line = "WORKER " + " ".join("%s=%s" % kv for kv in report.items())
    print(line, flush=True)
    with open(os.path.join(e["T2_REPORTS"], "rank%d" % rank), "w") as f:
        f.write(line + "\n")
    return 0 if report["ok"] == "1" else 1


# -------------------------------------------------------------------- main

def pattern_main(port_a, port_b, stores):
    """PyTorch's id exchange and heartbeat checks by real torch stores,
    half through node A and half through node B (each store a thread):
    the first store of each 8 sets UniqueNCCLID:<b> (128 bytes), every
    store waits for all of them and multi_gets them, checks the absent
    "dump" key 20 times, waits for and gets a one-root id. The shell
    compares the root's requests before and after (rdzvctl stats)."""
    import threading
    nb = (stores + 7) // 8
    keys = ["UniqueNCCLID:%d" % b for b in range(nb)]
    ss = [store(port_a if i % 2 == 0 else port_b) for i in range(stores)]
    errors = []

    def one(i):
        try:
            s = ss[i]
            if i % 8 == 0:
                s.set(keys[i // 8], bytes([i // 8]) * 128)
            if i == 0:
                s.set("single_uid", b"u" * 128)
            s.wait(keys)
            got = s.multi_get(keys)
            for b, v in enumerate(got):
                if v != bytes([b]) * 128:
                    errors.append("store %d: id %d wrong" % (i, b))
            for _ in range(20):
                if s.check(["dump"]):
                    errors.append("store %d: dump present" % i)
            s.wait(["single_uid"])
            if s.get("single_uid") != b"u" * 128:
                errors.append("store %d: one-root id wrong" % i)
        except Exception as e:  # noqa: BLE001 (reported, then failed)
            errors.append("store %d: %r" % (i, e))

    ts = [threading.Thread(target=one, args=(i,)) for i in range(stores)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for e in errors[:5]:
        print("pattern: %s" % e, flush=True)
    print("pattern: %d stores, %d ids, %d errors" % (stores, nb, len(errors)),
          flush=True)
    return 1 if errors else 0


def main():
    global args
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", nargs="?", default="checks",
                    choices=["checks", "child-set", "rank-store", "rank-env",
                             "worker", "pattern"])
    ap.add_argument("--stores", type=int, default=32)
    ap.add_argument("--port-root", type=int)
    ap.add_argument("--port-a", type=int)
    ap.add_argument("--port-b", type=int)
    ap.add_argument("--groups", default="smoke,client,later,stack,torchrun")
    ap.add_argument("--port", type=int)
    ap.add_argument("--key")
    ap.add_argument("--delay", type=float, default=0)
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--run")
    ap.add_argument("--torchrun-limit", type=float, default=200,
                    help="seconds one torchrun run may take")
    ap.add_argument("--tmp", default="/tmp",
                    help="a directory for the workers' reports")
    args = ap.parse_args()
    if args.mode == "child-set":
        return child_set(args.port, args.key, args.delay)
    if args.mode in ("rank-store", "rank-env"):
        return rank_main(args.mode, args.port, args.rank, args.world,
                         args.run)
    if args.mode == "worker":
        return worker_main(args.port)
    if args.mode == "pattern":
        return pattern_main(args.port_a, args.port_b, args.stores)

    import torch
    print("torch %s from %s (python %s)" % (
        torch.__version__, torch.__file__, sys.version.split()[0]),
        flush=True)
    groups = {"smoke": smoke_checks,
              "client": lambda: (client_checks("root", args.port_root),
                                 client_checks("nodeA", args.port_a)),
              "later": later_checks, "stack": stack_checks,
              "torchrun": torchrun_checks}
    for g in args.groups.split(","):
        print("== %s" % g, flush=True)
        groups[g]()
        if g == "smoke" and not all(ok for _, ok in results):
            print("FAIL: the front ends do not answer; the other checks "
                  "were not run")
            break
    bad = [n for n, ok in results if not ok]
    print("%d checks: %d passed, %d failed" % (
        len(results), len(results) - len(bad), len(bad)))
    for n in bad:
        print("FAILED: %s" % n)
    return 1 if bad else 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
