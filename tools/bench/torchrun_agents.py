"""torchrun's agents' rendezvous at scale, without workers: N handler
objects (torchrun's RendezvousHandler, one per agent, each in a thread of
this process) form the group, then idle through a steady state as
torchrun's monitor loop does (num_nodes_waiting every --monitor-s).

Run by tools/bench/torchrun-agents.sh inside the torch 2.6 chroot, which
starts the daemons and reads the root's statistics around each phase.

  torchrun_agents.py --handler rdzv|c10d --agents N --endpoints E1,E2,...
                     --job JOB --steady S --phase-dir DIR [--first I --count C]

With --first/--count this process runs agents I .. I+C-1 of the N (the
driver spreads them over processes: one interpreter's lock slows the c10d
handler's compare-and-set rounds); "formed" then says when this process's
agents have their ranks, and the driver takes the last.

--handler rdzv: python/rdzv/torchrun.py, agent i's endpoint E[i % len(E)]
  (a node's socket), its host "h<i>".
--handler c10d: torch's own c10d handler (is_host=false), endpoint E[i %
  len(E)] (a TCPStore: a node's front end, or one server).
Phases are told through files in DIR: "formed" is written once every
agent has its rank (with the seconds it took), then the steady window
runs, then "done". Prints one JSON line."""
from __future__ import annotations

import argparse
import json
import os
import threading
import time
from datetime import timedelta

from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import \
    get_rendezvous_handler


def make_handler(kind: str, i: int, args) -> object:
    eps = args.endpoints.split(",")
    ep = eps[i % len(eps)]
    conf = {"join_timeout": args.join_timeout,
            "last_call_timeout": args.last_call}
    if kind == "rdzv":
        from rdzv import torchrun
        return torchrun.create_handler(RendezvousParameters(
            "rdzv", ep, args.job, args.agents, args.agents,
            host=f"h{i:05d}", **conf))
    return get_rendezvous_handler(RendezvousParameters(
        "c10d", ep, args.job, args.agents, args.agents, is_host="false",
        read_timeout=600, **conf))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--handler", choices=("rdzv", "c10d"), required=True)
    ap.add_argument("--agents", type=int, required=True)
    ap.add_argument("--endpoints", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--steady", type=float, default=30.0)
    ap.add_argument("--monitor-s", type=float, default=0.1)
    ap.add_argument("--join-timeout", type=float, default=1800)
    ap.add_argument("--last-call", type=float, default=1)
    ap.add_argument("--phase-dir", required=True)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--count", type=int, default=0)
    args = ap.parse_args()
    first = args.first
    count = args.count or args.agents - first
    threading.stack_size(512 * 1024)

    handlers = [None] * count
    ranks = [None] * count
    errors: list[str] = []
    formed = threading.Barrier(count + 1)
    steady_end = threading.Event()
    polls = [0] * count

    def agent(i: int) -> None:
        try:
            h = make_handler(args.handler, first + i, args)
            handlers[i] = h
            info = h.next_rendezvous()
            ranks[i] = (info.rank, info.world_size)
        except BaseException as e:  # reported below
            errors.append(f"agent {i}: {type(e).__name__}: {e}")
        formed.wait()
        if ranks[i] is None:
            return
        while not steady_end.wait(args.monitor_s):
            try:
                handlers[i].num_nodes_waiting()
                polls[i] += 1
            except BaseException as e:
                errors.append(f"agent {i} steady: {type(e).__name__}: {e}")
                return

    t0 = time.monotonic()
    threads = [threading.Thread(target=agent, args=(i,), daemon=True)
               for i in range(count)]
    for t in threads:
        t.start()
    formed.wait()
    form_s = time.monotonic() - t0
    got = [r for r in ranks if r is not None]
    # Each process sees its own agents' ranks: distinct, in range, and
    # the driver checks that the processes' ranks together are 0..N-1.
    ok = (len(got) == count and len({r for r, _ in got}) == count and
          all(0 <= r < args.agents and w == args.agents for r, w in got))
    with open(os.path.join(args.phase_dir, "formed"), "w") as f:
        f.write(f"{form_s:.3f}\n")
    # The driver reads the root's statistics, then tells us to go on.
    go = os.path.join(args.phase_dir, "steady")
    while not os.path.exists(go):
        time.sleep(0.05)
    time.sleep(args.steady)
    steady_end.set()
    for t in threads:
        t.join(timeout=30)
    print(json.dumps({"handler": args.handler, "agents": args.agents,
                      "first": first, "count": count,
                      "ranks": sorted(r for r, _ in got),
                      "form_s": round(form_s, 3), "ranks_ok": ok,
                      "steady_s": args.steady, "polls": sum(polls),
                      "errors": errors[:5], "nerrors": len(errors)}),
          flush=True)
    with open(os.path.join(args.phase_dir, "done"), "w") as f:
        f.write("done\n")
    # Held until the driver has read the root's statistics: exiting closes
    # every agent's connections, which the root would count.
    quit_file = os.path.join(args.phase_dir, "quit")
    while not os.path.exists(quit_file):
        time.sleep(0.05)
    os._exit(0 if ok and not errors else 1)


if __name__ == "__main__":
    main()
