#!/bin/bash
# torchrun's agents' rendezvous measured: N agents (torchrun's handler
# objects, threads of one process: tools/bench/torchrun_agents.py, in the
# torch 2.6 chroot of tools/torch2-chroot.sh) through a root and K nodes:
#   rdzv        the native handler (--rdzv-backend=rdzv), agents spread
#               over the nodes' sockets;
#   c10d-tree   torch's c10d handler over the nodes' TCPStore front ends;
#   c10d-torch  torch's c10d handler on PyTorch's own TCPStore server (one
#               process); its requests are counted by running the same
#               handler against one rdzvd root's front end (c10d-flat).
# For each: the time to form the group, the root's requests and bytes
# while it formed, and the root's requests a second over --steady seconds
# of idling as torchrun's monitor loop does (num_nodes_waiting every
# 0.1 s). One JSON line a run on stdout, a table on stderr.
#
#   tools/bench/torchrun-agents.sh [--agents 64,256,1024] [--nodes 8]
#       [--steady 30] [--handlers rdzv,c10d-tree,c10d-flat,c10d-torch]
#       [--procs P] [--form-limit S]
#
# --procs spreads the agents over P processes (default 1: the c10d
# handler's compare-and-set rounds contend for one interpreter's lock
# there); --form-limit gives up on a group not formed after S seconds
# (default 0: wait) and reports it as not formed.
#
# Needs bazel-bin/tools/{rdzvd,rdzvctl} and bazel-bin/librdzv.so.0 (bazel
# build //tools:rdzvd //tools:rdzvctl //:librdzv.so.0) and root (chroot).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
agents=64,256,1024 nodes=8 steady=30 handlers=rdzv,c10d-tree,c10d-flat,c10d-torch
procs=1 limit=0
while [ $# -gt 0 ]; do
  case $1 in
    --agents) agents=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --steady) steady=$2; shift 2 ;;
    --handlers) handlers=$2; shift 2 ;;
    --procs) procs=$2; shift 2 ;;
    --form-limit) limit=$2; shift 2 ;;
    *) echo "usage: $0 [--agents N,...] [--nodes K] [--steady S] [--handlers H,...] [--procs P] [--form-limit S]" >&2; exit 2 ;;
  esac
done
bin=$here/bazel-bin/tools
chroot_sh=$here/tools/torch2-chroot.sh
dir=$(mktemp -d /tmp/rdzv-agents-XXXXXX)
pids=()
# (The chroot's processes are grandchildren of the pids here: killed by
# their command lines ($dir/torch...), so that none keeps the output
# pipe open.)
stop_all() {
  kill "${pids[@]}" 2>/dev/null || true
  pkill -9 -f "$dir/torch" 2>/dev/null || true
  wait 2>/dev/null || true
  pids=()
}
trap 'stop_all; [ -n "${KEEP:-}" ] || rm -rf "$dir"' EXIT
cp -rL "$here/python" "$dir/pkg"
/usr/bin/python3 -m pip install --quiet --no-build-isolation --no-deps \
  --no-index --target "$dir/site" "$dir/pkg" >/dev/null 2>&1
cp "$here/tests/tcpstore/torch2_shim/sitecustomize.py" "$dir/site/"
cp -L "$here/bazel-bin/librdzv.so.0" "$here/tools/bench/torchrun_agents.py" "$dir/"
ulimit -n 20000

wait_file() { for _ in $(seq 300); do [ -s "$1" ] && return 0; sleep 0.1; done; echo "no $1" >&2; exit 1; }
# root_stats: one JSON line, the root's requests received by op (the
# stats requests themselves left out) and its bytes in and out.
root_stats() {
  "$bin/rdzvctl" --addr "127.0.0.1:$(cat "$dir/root.port")" stats | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
print(json.dumps({"ops": {k: v["received"] for k, v in s["ops"].items()
                          if v["received"] and k != "stats"},
                  "in": s["bytes"]["in"], "out": s["bytes"]["out"]}))'
}

run() { # handler agents
  local h=$1 n=$2 job="agents-$1-$2" eps="" i
  stop_all
  rm -rf "$dir"/*.port "$dir"/*.sock "$dir"/*.ts "$dir"/p[0-9]*
  local ts_root=()
  [ "$h" = c10d-flat ] && ts_root=(--tcpstore-listen 127.0.0.1:0 --tcpstore-port-file "$dir/root.ts" --tcpstore-job "$job")
  "$bin/rdzvd" --role=root --name=root --listen=127.0.0.1:0 --port-file="$dir/root.port" \
    --max-connections=16000 --log-level=0 "${ts_root[@]}" >/dev/null 2>&1 & pids+=($!)
  wait_file "$dir/root.port"
  if [ "$h" = rdzv ] || [ "$h" = c10d-tree ]; then
    for i in $(seq 0 $((nodes - 1))); do
      "$bin/rdzvd" --role=node --name="n$i" --parent="127.0.0.1:$(cat "$dir/root.port")" \
        --unix="$dir/n$i.sock" --max-connections=16000 --log-level=0 \
        --children 0 --local-ranks $((n / nodes)) --flush-max-ms 2000 \
        --tcpstore-listen 127.0.0.1:0 --tcpstore-port-file "$dir/n$i.ts" --tcpstore-job "$job" \
        >/dev/null 2>&1 & pids+=($!)
    done
    for i in $(seq 0 $((nodes - 1))); do wait_file "$dir/n$i.ts"; done
    for i in $(seq 0 $((nodes - 1))); do
      if [ "$h" = rdzv ]; then eps+="unix:$dir/n$i.sock,"; else eps+="127.0.0.1:$(cat "$dir/n$i.ts"),"; fi
    done
  elif [ "$h" = c10d-flat ]; then
    wait_file "$dir/root.ts"; eps="127.0.0.1:$(cat "$dir/root.ts"),"
  else # c10d-torch: PyTorch's own server
    "$chroot_sh" --exec /usr/bin/python3 -c '
import sys, time, torch.distributed as d
s = d.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=False, wait_for_workers=False)
open(sys.argv[1], "w").write(str(s.port)); time.sleep(1e9)' "$dir/torch.ts" \
      >"$dir/torch.log" 2>&1 & pids+=($!)
    wait_file "$dir/torch.ts"; eps="127.0.0.1:$(cat "$dir/torch.ts"),"
  fi
  local kind=rdzv; [ "$h" = rdzv ] || kind=c10d
  local before; before=$(root_stats)
  # P processes, agents split evenly; each its own phase folder.
  local k first=0 count py=() p=$procs
  [ "$p" -gt "$n" ] && p=$n
  for ((k = 0; k < p; k++)); do
    count=$(((n - first) / (p - k)))
    mkdir -p "$dir/p$k"
    "$chroot_sh" --exec /usr/bin/env RDZV_LIBRARY="$dir/librdzv.so.0" PYTHONPATH="$dir/site" \
      python3 "$dir/torchrun_agents.py" --handler "$kind" --agents "$n" --endpoints "${eps%,}" \
      --job "$job" --steady "$steady" --phase-dir "$dir/p$k" --first "$first" --count "$count" \
      >"$dir/p$k/out.json" 2>"$dir/p$k/err.log" &
    py+=($!)
    first=$((first + count))
  done
  all_have() { local j; for ((j = 0; j < p; j++)); do [ -s "$dir/p$j/$1" ] || return 1; done; }
  any_gone() { local q; for q in "${py[@]}"; do kill -0 "$q" 2>/dev/null || return 0; done; return 1; }
  local start=$SECONDS formed_ok=1
  while ! all_have formed; do
    if any_gone || { [ "$limit" -gt 0 ] && [ $((SECONDS - start)) -ge "$limit" ]; }; then
      formed_ok=0; break
    fi
    sleep 0.1
  done
  if [ "$formed_ok" = 0 ]; then
    # Not formed (within --form-limit, or a process failed): reported so.
    local nformed=0
    for ((k = 0; k < p; k++)); do [ -s "$dir/p$k/formed" ] && nformed=$((nformed + 1)); done
    kill -9 "${py[@]}" 2>/dev/null || true
    pkill -9 -f "$dir/torchrun_agents.py" 2>/dev/null || true
    wait "${py[@]}" 2>/dev/null || true
    echo "{\"handler\": \"$h\", \"agents\": $n, \"procs\": $p, \"formed\": false, \"after_s\": $((SECONDS - start)), \"procs_formed\": $nformed}"
    stop_all
    return 0
  fi
  local formed; formed=$(root_stats)
  for ((k = 0; k < p; k++)); do touch "$dir/p$k/steady"; done
  local t0; t0=$(date +%s.%N)
  while ! all_have "done" && ! any_gone; do sleep 0.1; done
  local t1; t1=$(date +%s.%N)
  local after; after=$(root_stats)
  for ((k = 0; k < p; k++)); do touch "$dir/p$k/quit"; done
  for ((k = 0; k < p; k++)); do
    wait "${py[$k]}" || { echo "$h $n process $k failed:" >&2; tail -5 "$dir/p$k/err.log" >&2; cat "$dir/p$k/out.json" >&2; }
  done
  /usr/bin/python3 - "$h" "$n" "$nodes" "$before" "$formed" "$after" "$t0" "$t1" "$dir" "$p" <<'PY'
import json, sys
h, n, nodes, b, f, a, t0, t1, d, p = sys.argv[1:]
b, f, a = (json.loads(s) for s in (b, f, a))
outs = [json.load(open(f"{d}/p{k}/out.json")) for k in range(int(p))]
ranks = sorted(r for o in outs for r in o["ranks"])
r = {"form_s": max(o["form_s"] for o in outs),
     "ranks_ok": all(o["ranks_ok"] for o in outs) and ranks == list(range(int(n))),
     "nerrors": sum(o["nerrors"] for o in outs),
     "errors": [e for o in outs for e in o["errors"]][:5]}
steady = float(t1) - float(t0)
children = int(nodes) if h in ("rdzv", "c10d-tree") else int(n)
def delta(x, y):
    return {k: y["ops"].get(k, 0) - x["ops"].get(k, 0)
            for k in y["ops"] if y["ops"].get(k, 0) != x["ops"].get(k, 0)}
form_ops, steady_ops = delta(b, f), delta(f, a)
torch_server = h == "c10d-torch"  # PyTorch's server counts nothing
rec = {"handler": h, "agents": int(n), "procs": int(p), "formed": True,
       "root_children": children,
       "form_s": r["form_s"], "ranks_ok": r["ranks_ok"],
       "form_root_requests": None if torch_server else sum(form_ops.values()),
       "form_root_ops": None if torch_server else form_ops,
       "form_root_bytes": None if torch_server else f["in"] - b["in"] + f["out"] - b["out"],
       "steady_s": round(steady, 1),
       "steady_root_rps": None if torch_server else round(sum(steady_ops.values()) / steady, 2),
       "steady_root_rps_no_pings": None if torch_server else round(
           sum(v for k, v in steady_ops.items() if k != "ping") / steady, 2),
       "steady_root_ops": None if torch_server else steady_ops,
       "nerrors": r["nerrors"], "errors": r["errors"]}
print(json.dumps(rec), flush=True)
PY
  stop_all
}

for n in ${agents//,/ }; do
  for h in ${handlers//,/ }; do run "$h" "$n"; done
done | tee "$dir/results.jsonl"
/usr/bin/python3 - "$dir/results.jsonl" >&2 <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'handler':<11} {'agents':>6} {'children':>8} {'form s':>8} {'root req':>9} "
      f"{'req/child':>9} {'root bytes':>11} {'steady req/s':>12} {'/child':>7} "
      f"{'no pings/child':>14} ok")
for r in rows:
    if not r["formed"]:
        print(f"{r['handler']:<11} {r['agents']:>6} not formed after {r['after_s']} s "
              f"({r['procs_formed']} of {r['procs']} processes had their ranks)")
        continue
    req, rps = r["form_root_requests"], r["steady_root_rps"]
    np_ = r["steady_root_rps_no_pings"]
    c = r["root_children"]
    f = lambda v, d=0: "-" if v is None else f"{v:,.{d}f}"
    print(f"{r['handler']:<11} {r['agents']:>6} {c:>8} {r['form_s']:>8.2f} {f(req):>9} "
          f"{f(None if req is None else req / c, 1):>9} {f(r['form_root_bytes']):>11} "
          f"{f(rps, 1):>12} {f(None if rps is None else rps / c, 2):>7} "
          f"{f(None if np_ is None else np_ / c, 2):>14} "
          f"{r['ranks_ok'] and r['nerrors'] == 0}")
PY
