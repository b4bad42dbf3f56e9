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
bin=bazel-bin/tools
dir=$(mktemp -d /tmp/rdzv-bench-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

start() { # name role parent -> sets $addr to its TCP address
  local name=$1 role=$2 parent=${3:-}
  local args=(--role="$role" --listen=127.0.0.1:0 --port-file="$dir/$name.port"
              --unix="$dir/$name.sock" --log-level=0 --name="$name")
  [ -n "$parent" ] && args+=(--parent="$parent")
  "$bin/rdzvd" "${args[@]}" &
  pids+=($!)
  for _ in $(seq 500); do [ -s "$dir/$name.port" ] && break; sleep 0.01; done
  addr="127.0.0.1:$(cat "$dir/$name.port")"
}

start root root
start mid node "$addr"
start leaf node "$addr"
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
