#!/usr/bin/env bash
# The store demo: a root, 4 nodes under it, 16 nodes under those (fan-out
# 4, two levels of nodes) and CLIENTS simulated ranks (default 1000) in 4
# rdzv-swarm processes on the leaf nodes' Unix sockets. The ranks wait for
# one key that one client sets, add 1 to a counter, pass a barrier and a
# gather; the demo then prints what the root saw.
#
#   tools/demo.sh [CLIENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-1000}
per=$(( (clients + 3) / 4 ))
clients=$(( per * 4 ))
bazel build //tools:rdzvd //tools:rdzv-swarm //tools:rdzvctl 2>/dev/null
. tools/daemons.sh
rdzv_tree_init rdzv-demo
bin=bazel-bin/tools

rdzv_start root root
root=$addr
leaves=""
for i in 0 1 2 3; do
  rdzv_start "n1-$i" node "$root"
  mid=$addr
  for j in 0 1 2 3; do
    rdzv_start "n2-$i$j" node "$mid"
    leaves+="${leaves:+,}unix:$dir/n2-$i$j.sock"
  done
done
echo "tree: root $root, 4 + 16 nodes; $clients clients on the 16 leaves"

swarm() { # scenario args... : runs 4 swarms, prints the elapsed time
  local t0 t1 sp=() i
  t0=$(date +%s.%N)
  for i in 0 1 2 3; do
    "$bin/rdzv-swarm" --addrs "$leaves" --job demo --clients "$per" \
      --member-base $((i * per)) --timeout 60 "$@" > "$dir/swarm$i.out" &
    sp+=($!)
  done
  for p in "${sp[@]}"; do wait "$p"; done
  t1=$(date +%s.%N)
  printf '%-8s %5d clients  %.3f s (connect + op)\n' "$1" "$clients" \
    "$(echo "$t1 - $t0" | bc)"
}
ctl() { "$bin/rdzvctl" --addr "$root" --job demo "$@"; }

# Waiters first; the key is set once they are all waiting.
swarm wait demo/key &
wpid=$!
sleep 1
ctl set demo/key hello >/dev/null
wait $wpid
swarm add demo/counter
echo "counter after the adds: $(ctl get demo/counter)"
swarm barrier demo/barrier "$clients"
swarm gather demo/gather "$clients"
echo "root statistics (messages the root received):"
ctl stats | python3 -c '
import json, sys
s = json.load(sys.stdin)
for op in ("wait", "add", "barrier", "gather", "set", "get"):
    print("  %-8s %d" % (op, s["ops"][op]["received"]))
print("  connections total %d, bytes in %d" % (s["connections"]["total"], s["bytes"]["in"]))
'
