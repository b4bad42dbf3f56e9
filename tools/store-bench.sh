#!/usr/bin/env bash
# Store throughput benchmark (not a test): operations per second for one
# server, and through a 3-level tree (clients -> leaf node -> middle node
# -> root), with CLIENTS concurrent clients each keeping one request in
# flight for SECONDS per operation kind.
#
#   tools/store-bench.sh [CLIENTS] [SECONDS]      (defaults 64 and 3)
#
# Prints one line per (topology, op): "topology op ops_per_s", and the same
# as JSON to bench-store.json. Builds what it needs with Bazel.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-64}
secs=${2:-3}
bazel build //tools:rdzvd //tools:rdzv-swarm 2>/dev/null
. tools/daemons.sh
rdzv_tree_init rdzv-bench
bin=bazel-bin/tools

rdzv_start root root
rdzv_start mid node "$addr"
rdzv_start leaf node "$addr"
json="["
sep=""
for topo in one-server tree-3-level; do
  addr="unix:$dir/root.sock"
  [ "$topo" = tree-3-level ] && addr="unix:$dir/leaf.sock"
  for op in set get add; do
    out=$("$bin/rdzv-swarm" --addrs "$addr" --job "bench-$topo" \
          --clients "$clients" --timeout 30 ops "$secs" "$op" | tail -n 1)
    rate=$(echo "$out" | awk '{print $3}')
    printf '%-13s %-4s %10s ops/s\n' "$topo" "$op" "$rate"
    json+="$sep{\"topology\":\"$topo\",\"op\":\"$op\",\"clients\":$clients,\"seconds\":$secs,\"ops_per_s\":$rate}"
    sep=","
  done
done
echo "$json]" > bench-store.json
echo "wrote bench-store.json"
