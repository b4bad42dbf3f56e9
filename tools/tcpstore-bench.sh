#!/usr/bin/env bash
# TCPStore front end benchmark (not a test): one torch client's sequential
# calls per second through a node (client -> node -> root) and straight to
# the root, for the torch 2.x client (the trixie chroot of
# tools/torch2-chroot.sh) and, when /usr/bin/python3 has it, torch 1.13.
#
#   tools/tcpstore-bench.sh [CALLS] [REPS]      (defaults 3000 and 3)
#
# Prints "TOPOLOGY torch VERSION OP CALLS_PER_S" lines (the median of REPS
# runs of CALLS calls each; see tools/tcpstore_bench.py). Builds rdzvd with
# Bazel; run as root (chroot). The daemons run with their defaults (a node
# sends an idle counter's add up at once: a sequential client's adds do
# not wait for --flush-ms).
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${1:-3000}
reps=${2:-3}
croot="${RDZV_TORCH2_CHROOT:-/var/cache/rdzv/trixie-torch}"
bazel build //tools:rdzvd 2>/dev/null
bin=bazel-bin/tools
dir=$(mktemp -d /tmp/tcpstore-bench-XXXXXX)
chmod 755 "$dir"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

start() { # NAME ROLE [ARGS...]
  local name=$1 role=$2
  shift 2
  "$bin/rdzvd" --role="$role" --name="$name" --listen=127.0.0.1:0 \
    --port-file="$dir/$name.port" --log-level=0 \
    --tcpstore-listen=127.0.0.1:0 --tcpstore-job=bench \
    --tcpstore-port-file="$dir/$name.tsport" "$@" 2>"$dir/$name.log" &
  pids+=($!)
  for _ in $(seq 1000); do
    [ -s "$dir/$name.port" ] && [ -s "$dir/$name.tsport" ] && return 0
    sleep 0.01
  done
  echo "tcpstore-bench.sh: rdzvd $name did not start" >&2
  exit 1
}
start root root
start node node --parent="127.0.0.1:$(cat "$dir/root.port")"
cp tools/tcpstore_bench.py "$dir/"
echo "machine: $(nproc) cores, $(uname -r); $calls calls x $reps runs each"
for topo in node root; do
  port=$(cat "$dir/$topo.tsport")
  if tools/torch2-chroot.sh --dir "$croot" --check; then
    tools/torch2-chroot.sh --dir "$croot" --exec /usr/bin/env \
      TORCH_CPP_LOG_LEVEL=ERROR /usr/bin/python3 "$dir/tcpstore_bench.py" \
      --port "$port" --calls "$calls" --reps "$reps" --label "$topo" \
      2> >(grep -v 'UCX\|cpuinfo' >&2)
  else
    echo "tcpstore-bench.sh: no torch 2.x chroot at $croot" \
      "(tools/torch2-chroot.sh builds it)" >&2
  fi
  if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
    /usr/bin/python3 "$dir/tcpstore_bench.py" --port "$port" \
      --calls "$calls" --reps "$reps" --label "$topo"
  fi
done
