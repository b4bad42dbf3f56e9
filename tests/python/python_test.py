"""The Python bindings against a root and two nodes (python_test.sh starts
them in DIR: DIR/a.sock, DIR/b.sock). Prints "ok: ..." per check and
exits 1 on the first failure."""
import ctypes
import os
import re
import subprocess
import sys

import rdzv
import rdzv.errors as errors

DIR, WANT_VERSION, PYPROJECT = sys.argv[1], sys.argv[2], sys.argv[3]
# Job ids of this run (the same daemons serve the 3.11 and 3.13 runs).
TAG = sys.argv[4]
print(f"python {sys.version.split()[0]}", flush=True)


def ok(what: str) -> None:
    print(f"ok: {what}", flush=True)


def expect_raises(cls, fn, *args):
    try:
        fn(*args)
    except cls as e:
        return e
    raise AssertionError(f"{fn.__name__}{args}: no {cls.__name__}")


# Versions: the package, the library, rdzvd, pyproject.toml.
assert rdzv.__version__ == WANT_VERSION, rdzv.__version__
assert rdzv.library_version() == WANT_VERSION, rdzv.library_version()
py = re.search(r'^version = "([^"]+)"', open(PYPROJECT).read(), re.M)
assert py and py.group(1) == WANT_VERSION, py
out = subprocess.run([sys.executable, "-m", "rdzv", "--version"],
                     capture_output=True, text=True, check=True).stdout
assert out.strip() == f"rdzv {WANT_VERSION} (librdzv {WANT_VERSION})", out
ok(f"versions agree: {out.strip()}")

# The store through node a, read back through node b.
a = rdzv.Client(f"unix:{DIR}/a.sock", job=f"py-{TAG}", timeout_s=10)
b = rdzv.Client(f"unix:{DIR}/b.sock", job=f"py-{TAG}", timeout_s=10)
a.set("k", "v1")
assert b.get("k") == b"v1"
assert a.add("n", 5) == 5 and b.add("n", -2) == 3
did, now = a.compare_set("k", b"v1", b"v2")
assert did and now == b"v2", (did, now)
did, now = b.compare_set("k", b"nope", b"v3")
assert not did and now == b"v2", (did, now)
a.set("once", b"x", write_once=True)
e = expect_raises(errors.WriteOnceError, a.set, "once", b"y")
assert e.name == "RDZV_EWRITE_ONCE", e.name
b.wait(["k", "n"])
assert a.num_keys() == 3, a.num_keys()
assert a.delete("k") and not a.delete("k")
e = expect_raises(errors.NokeyError, b.get, "k")
assert isinstance(e, rdzv.RdzvError) and e.status == -1010 and "'k'" in str(e)
e = expect_raises(errors.DeadlineError, b.wait, ["never"], 0.3)
assert "never" in str(e), str(e)
ok("store calls through two nodes; NokeyError, WriteOnceError and "
   f"DeadlineError with their detail ({e})")
# Bad arguments are refused in Python, before C could cut or wrap them.
expect_raises(ValueError, a.set, "a\0b", b"x")
expect_raises(ValueError, a.add, "n", 1 << 64)
expect_raises(TypeError, a.set, "k", 5)
ok("a NUL in a key, an add past int64 and an int value are refused")

# Threads sharing one client: calls go one at a time.
import threading
errs = []


def hammer(t: int) -> None:
    try:
        for i in range(100):
            a.set(f"t{t}", str(i))
            assert a.get(f"t{t}") == str(i).encode()
    except BaseException as exc:
        errs.append(exc)


ts = [threading.Thread(target=hammer, args=(t,)) for t in range(8)]
for t in ts:
    t.start()
for t in ts:
    t.join()
assert not errs, errs
ok("8 threads x 100 set+get on one client")
a.close()
b.close()
b.close()  # twice: a no-op
e = expect_raises(errors.NotconnError, b.get, "n")
ok(f"a closed client raises, not crashes: {e}")

# A rendezvous of 4 ranks on 2 hosts, one process each.
child = r'''
import os, sys, rdzv, ctypes
def make_id():
    try:
        nccl = ctypes.CDLL(os.environ.get("RDZV_NCCL_LIBRARY") or "libnccl.so.2")
        buf = ctypes.create_string_buffer(128)
        assert nccl.ncclGetUniqueId(buf) == 0
        return buf.raw
    except OSError:
        return os.urandom(128)
with rdzv.Rendezvous.join(timeout_s=60) as r:
    ids = r.unique_ids("world", make_id, ranks_per_root=2)
    r.barrier("done")
    print(r.rank, r.world_size, r.local_rank, r.node_rank, r.node_count,
          r.generation, len(ids), b"".join(ids).hex(), flush=True)
'''
procs = []
for host in ("a", "b"):
    for local in (0, 1):
        env = dict(os.environ, RDZV_ADDR=f"unix:{DIR}/{host}.sock",
                   RDZV_JOB=f"pyrdzv-{TAG}", RDZV_HOST=f"host-{host}",
                   LOCAL_RANK=str(local), LOCAL_WORLD_SIZE="2",
                   WORLD_SIZE="4")
        procs.append((host, local, subprocess.Popen(
            [sys.executable, "-c", child], env=env, stdout=subprocess.PIPE,
            text=True)))
rows = []
for host, local, p in procs:
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 0, (host, local, p.returncode)
    f = out.split()
    rows.append((host, local, [int(x) for x in f[:7]], f[7]))
for host, local, (rank, world, lr, node, nodes, gen, nids), _ in rows:
    want_node = 0 if host == "a" else 1
    assert (world, lr, node, nodes, nids) == (4, local, want_node, 2, 2), rows
    assert rank == want_node * 2 + local, rows
assert len({r[3] for r in rows}) == 1, "ids differ between ranks"
ok("rendezvous of 4 ranks on 2 hosts: ranks by host, 2 ids (2 ranks a "
   "block) the same on every rank, a barrier")
# A rendezvous dropped (no close) leaves its round: the same slot joins again.
solo = dict(addr=f"unix:{DIR}/a.sock", job=f"solo-{TAG}", host="h1",
            local_rank=0, local_size=1, world_size=1, timeout_s=20)
r1 = rdzv.Rendezvous.join(**solo)
assert r1.rank == 0 and r1.generation >= 1
del r1
r2 = rdzv.Rendezvous.join(**solo)
assert r2.rank == 0
r2.close()
ok("a dropped rendezvous left its round: its slot joined again")

# The ctypes mirror of struct rdzv_rendezvous_opts is the C struct, whole
# (rdzv_rendezvous_opts_init writes its size), and a whole-domain job's
# world names its domains.
from rdzv import _lib  # noqa: E402
o = _lib.RendezvousOpts()
_lib.lib.rdzv_rendezvous_opts_init(ctypes.byref(o))
assert o.size == ctypes.sizeof(o), (o.size, ctypes.sizeof(o))
seg = dict(addr=f"unix:{DIR}/a.sock", job=f"seg-{TAG}", host="h1",
           local_rank=0, local_size=1, world_size=1, timeout_s=20,
           domain="nvl-0", segment_hosts=1)
r1 = rdzv.Rendezvous.join(**seg)
doms = r1.store.get(f"rdzv/world/g{r1.generation}/domains")
assert doms == b"0 1 0 1 nvl-0\n", doms
r1.close()
ok(f"a whole-domain job names the domains it used ({doms!r})")

# A round complete at its maximum, every member live: another host's join
# is parked at once (ParkedError), not a restart of the job; once the
# member leaves, the same join opens the next generation.
full = dict(addr=f"unix:{DIR}/a.sock", job=f"full-{TAG}", local_rank=0,
            local_size=1, world_size=1, timeout_s=20)
r1 = rdzv.Rendezvous.join(host="h1", **full)
e = expect_raises(errors.ParkedError, lambda: rdzv.Rendezvous.join(
    **dict(full, host="h2", addr=f"unix:{DIR}/b.sock")))
assert "maximum of 1 ranks" in str(e) and "parked as a spare" in str(e), str(e)
g1 = r1.generation
r1.close()
r2 = rdzv.Rendezvous.join(host="h2", **full)
assert r2.generation == g1 + 1, (g1, r2.generation)
r2.close()
ok(f"a full round parks another host ({e.detail[-90:]}); after a leave "
   "it joins the next generation")

# TCPStore key spaces: the same prefix gives the same port, another
# prefix another; a TCPStore client's keys land under the prefix and its
# num_keys counts only them; the space closes once its asker is gone.
import socket
import time
sp = rdzv.Client(f"unix:{DIR}/a.sock", job=f"space-{TAG}", timeout_s=10)
port = sp.tcpstore_space(f"sp/{TAG}/")
assert port == sp.tcpstore_space(f"sp/{TAG}/")
port2 = sp.tcpstore_space(f"sp/{TAG}/other/")
assert port2 != port
e = expect_raises(rdzv.RdzvError, sp.tcpstore_space, "x" * 201)
assert e.name == "EINVAL", e.name
try:
    import torch.distributed as dist
    from datetime import timedelta
    try:
        ts = dist.TCPStore("127.0.0.1", port, is_master=False,
                           timeout=timedelta(seconds=10), use_libuv=False)
    except TypeError:  # torch 1.13: no use_libuv
        ts = dist.TCPStore("127.0.0.1", port, is_master=False,
                           timeout=timedelta(seconds=10))
    ts.set("k1", "v1")
    ts.set("k2", "v2")
    rd = rdzv.Client(f"unix:{DIR}/b.sock", job=f"space-{TAG}", timeout_s=10)
    # TCPStore's SET has no reply: the client returns before node a has
    # the key; node b finds it once the root has it (asked until then).
    got = None
    deadline = time.monotonic() + 60
    while got is None and time.monotonic() < deadline:
        for key in (f"sp/{TAG}/k1", f"sp/{TAG}//k1"):
            try:
                got = (key, rd.get(key))
                break
            except errors.NokeyError:
                pass
        else:
            time.sleep(0.1)
    assert got is not None and got[1] == b"v1", got
    rd.set(f"sp/{TAG}/outside-the-space-but-not-under-it/../x", b"1")
    rd.set("elsewhere", b"1")
    assert ts.get("k2") == b"v2"
    n = ts.num_keys()
    assert n in (2, 3), n  # k1, k2 (+ the one rd set under the prefix)
    ok(f"a torch TCPStore client in a key space: its key is {got[0]!r} in "
       f"rdzv (read through node b), num_keys {n} sees only the space")
    del ts
except ImportError:
    ok("no torch here: the key space's TCPStore side is left to torchrun_test")
sp.close()
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        time.sleep(0.3)
    except ConnectionRefusedError:
        break
else:
    raise AssertionError(f"key space port {port} still open 10 s after "
                         "its asker closed")
ok(f"key spaces: one port per prefix ({port}, {port2}); closed once the "
   "asker's connection closed")

# A space held by a process (what Slurm's TaskProlog asks for its task):
# open after the asker's connection closed, while the process lives;
# closed once it ended. Over TCP a pid means nothing: refused; a pid that
# is no process: ESRCH.


def port_open(p: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", p), timeout=1).close()
        return True
    except ConnectionRefusedError:
        return False


holder = subprocess.Popen(["sleep", "600"])
with rdzv.Client(f"unix:{DIR}/a.sock", job=f"space-{TAG}") as hc:
    hport = hc.tcpstore_space(f"held/{TAG}/", holder_pid=holder.pid)
    dead = subprocess.Popen(["true"])
    dead.wait()
    e3 = expect_raises(rdzv.RdzvError, hc.tcpstore_space, f"held2/{TAG}/",
                       dead.pid)
    assert e3.name == "ESRCH" and f"holder process {dead.pid}" in str(e3), \
        str(e3)
time.sleep(2.5)  # the reaper looked at least twice
assert port_open(hport), "a process-held space closed with its asker"
holder.kill()
holder.wait()
deadline = time.monotonic() + 10
while port_open(hport):
    assert time.monotonic() < deadline, \
        f"space {hport} open 10 s after its holder process ended"
    time.sleep(0.3)
with open(f"{DIR}/root.port") as f:
    rport = int(f.read())
with rdzv.Client(f"127.0.0.1:{rport}", job=f"space-{TAG}") as tc:
    e4 = expect_raises(errors.BadRoleError, tc.tcpstore_space, "p",
                       os.getpid())
    assert "over the Unix socket" in str(e4), str(e4)
ok(f"a process-held key space stays open after its asker left, closes "
   f"when the process ends; refused over TCP ({e4.detail}); a dead pid: "
   f"{e3.detail}")
# A zombie (exited, not yet reaped) holds nothing; a pid past 32 bits is
# refused before it reaches C; a client in another pid namespace names
# pids that are other processes here: refused.
zombie = subprocess.Popen(["true"])
time.sleep(0.5)  # exited, not waited for: a zombie
with rdzv.Client(f"unix:{DIR}/a.sock", job=f"space-{TAG}") as zc:
    e5 = expect_raises(rdzv.RdzvError, zc.tcpstore_space, f"z/{TAG}/",
                       zombie.pid)
    assert e5.name == "ESRCH" and "has exited" in str(e5), str(e5)
    try:
        zc.tcpstore_space(f"big/{TAG}/", 2**32 + 1)
        raise AssertionError("holder_pid 2**32+1 accepted")
    except ValueError:
        pass
zombie.wait()
nsmsg = "not run (no unshare here)"
if TAG == "py311" and os.geteuid() == 0:
    code = (f"import rdzv, sys\n"
            f"c = rdzv.Client('unix:{DIR}/a.sock', job='space-{TAG}')\n"
            f"try:\n"
            f"    c.tcpstore_space('ns/', 1)\n"
            f"    print('accepted')\n"
            f"except rdzv.RdzvError as e:\n"
            f"    print(e.name, e)\n")
    r = subprocess.run(["unshare", "--pid", "--fork", sys.executable, "-c",
                        code], capture_output=True, text=True, timeout=60)
    assert r.stdout.startswith("RDZV_EBAD_ROLE") and \
        "another pid namespace" in r.stdout, (r.stdout, r.stderr)
    nsmsg = r.stdout.strip()[-90:]
ok(f"a zombie holds nothing ({e5.detail[-40:]}); holder_pid past 32 bits: "
   f"ValueError; from another pid namespace: {nsmsg}")
try:
    from rdzv.torchrun import _run_round
    rr = [_run_round(x) for x in ("run/1", "run_1", "x" * 150,
                                  "x" * 100 + "A", "\u5b66" * 80)]
    assert len(set(rr)) == len(rr), rr
    assert all(len(x.encode()) <= 127 and "/" not in x and x.isascii()
               for x in rr), rr
    ok(f"torchrun rounds of run ids that read alike stay apart: {rr[0]}, "
       f"{rr[1]}; at most {max(len(x) for x in rr)} bytes, ASCII")
except ImportError:
    ok("no torch here: torchrun's round names are left to torchrun_test")
with rdzv.Client(f"unix:{DIR}/z.sock", job=f"space-{TAG}") as z:
    e = expect_raises(errors.BadRoleError, z.tcpstore_space, "p")
    assert "daemon z serves no TCPStore key spaces" in str(e), str(e)
with rdzv.Client(f"unix:{DIR}/s.sock", job=f"space-{TAG}") as one:
    one.tcpstore_space("p1")
    e2 = expect_raises(errors.TooManyConnectionsError, one.tcpstore_space,
                       "p2")
    assert "--tcpstore-spaces 1" in str(e2) and "p2" in str(e2), str(e2)
ok(f"key spaces refused where none are served ({e.detail}) and past the "
   f"limit ({e2.detail})")
print("python_test: PASS")
