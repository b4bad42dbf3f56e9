#!/usr/bin/python3
"""One TCPStore client's sequential calls per second (tools/tcpstore-bench.sh
runs it; not a test).

  tcpstore_bench.py --port PORT [--calls N] [--reps R] [--label L]

Against the TCPStore server at 127.0.0.1:PORT, one torch client (whichever
torch this python has: 1.13 on the host, 2.x in the trixie chroot) makes N
calls of each operation one after another, R times; prints one line per
operation, "LABEL torch VERSION OP CALLS_PER_S", the median of the R runs.
Operations: set, get (torch sends WAIT + GET), add, compare_set, and with
2.x check and multi_get of 4 keys (WAIT + MULTI_GET).
"""
import argparse
import statistics
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    v2 = not torch.__version__.startswith("1.")
    kw = {"use_libuv": False} if v2 else {}
    s = dist.TCPStore("127.0.0.1", a.port, None, False,
                      timedelta(seconds=60), **kw)
    tag = "b%d" % time.time_ns()  # keys of this run only
    s.set(tag + "/k", b"v" * 32)
    for i in range(4):
        s.set("%s/m%d" % (tag, i), b"x" * 32)
    ops = [
        ("set", lambda i: s.set(tag + "/k", b"v" * 32)),
        ("get", lambda i: s.get(tag + "/k")),
        ("add", lambda i: s.add(tag + "/c", 1)),
        ("compare_set", lambda i: s.compare_set(tag + "/k", b"v" * 32,
                                                b"v" * 32)),
    ]
    if v2:
        mkeys = ["%s/m%d" % (tag, i) for i in range(4)]
        ops += [("check", lambda i: s.check([tag + "/k"])),
                ("multi_get", lambda i: s.multi_get(mkeys))]
    for name, fn in ops:
        rates = []
        for _ in range(a.reps):
            fn(0)  # warm
            t0 = time.perf_counter()
            for i in range(a.calls):
                fn(i)
            if name == "set":
                s.get(tag + "/k")  # sets get no reply: wait for the last
            rates.append(a.calls / (time.perf_counter() - t0))
        print("%-5s torch %-13s %-11s %9.0f/s" % (
            a.label, torch.__version__, name, statistics.median(rates)),
            flush=True)


if __name__ == "__main__":
    main()
