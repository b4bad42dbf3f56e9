#!/usr/bin/env bash
# Communicator benchmark (not a test): time from process start to a usable
# world handle, lazy (handles only; NCCL init on first use, whose time is
# also reported) against eager (world and three sub-groups initialized up
# front), through a root and two node daemons, with the FAKE NCCL library
# (a test double: the figures are the rendezvous and id-exchange share of
# init, not NCCL's own). Pass NCCL=/path/to/libnccl.so.2 on a GPU machine.
#
#   tools/comm-bench.sh [RANKS...]      (default: 8 32)
#
# Prints one JSON line per (ranks, mode) and writes them to bench-comm.json.
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //tools:rdzvd //tools:rdzv-comm-bench \
  //tests/fake_nccl:libfake_nccl.so 2>/dev/null
bin=bazel-bin/tools
nccl=${NCCL:-$PWD/bazel-bin/tests/fake_nccl/libfake_nccl.so}
dir=$(mktemp -d /tmp/rdzv-comm-bench-XXXXXX)
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
root=$addr
start hostA node "$root"
start hostB node "$root"
sizes=("$@")
[ "${#sizes[@]}" -eq 0 ] && sizes=(8 32)
: > bench-comm.json
for n in "${sizes[@]}"; do
  for mode in lazy eager; do
    "$bin/rdzv-comm-bench" --addrs "unix:$dir/hostA.sock,unix:$dir/hostB.sock" \
      --ranks "$n" --nccl "$nccl" --mode "$mode" --job "cb-$n-$mode" |
      tee -a bench-comm.json
  done
done
echo "wrote bench-comm.json"
