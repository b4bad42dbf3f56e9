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
. tools/daemons.sh
rdzv_tree_init rdzv-comm-bench
bin=bazel-bin/tools
nccl=${NCCL:-$PWD/bazel-bin/tests/fake_nccl/libfake_nccl.so}

rdzv_start root root
root=$addr
rdzv_start hostA node "$root"
rdzv_start hostB node "$root"
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
