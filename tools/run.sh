#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the rendezvous
# benchmark: a real tree of rdzvd processes and 1,000 / 10,000 / 16,384 /
# 100,000 simulated ranks through join, assignment, unique ids, topology
# and a final barrier, in tree and flat mode; then the incumbents at
# 1,000 / 4,000 / 9,000 ranks (PyTorch's init pattern over TCPStore's
# protocol against PyTorch's own server, rdzvd flat and tree, and etcd);
# then PyTorch's own store traffic (--pytorch) at 1,000 and 10,000 ranks
# against rdzvd flat, the tree, and the tree without copies.
# Writes bench.json, bench.png, bench-incumbents.png and bench-pytorch.png
# here and prints one line per run and a table per incumbents' N and per
# --pytorch N.
#
#   tools/run.sh [rdzv-bench options]   (default: the four scales above)
set -euo pipefail
cd "$(dirname "$0")/.."
# Progress on stderr, so that stdout stays one line per run. A cold
# machine spends minutes here (apt-get, then Bazel's first build); a warm
# one a second.
# Logs of this run only (concurrent runs on one machine do not share them).
logs=$(mktemp -d "${TMPDIR:-/tmp}/rdzv-run.XXXXXX")
echo "run.sh: checking and installing what is missing (tools/install-deps.sh)" >&2
if ! tools/install-deps.sh >"$logs/install.log" 2>&1; then
  tail -20 "$logs/install.log" >&2
  echo "run.sh: tools/install-deps.sh failed (log: $logs/install.log)" >&2
  exit 1
fi
echo "run.sh: building rdzv-bench (bazel build //tools/bench:rdzv-bench)" >&2
if ! bazel build --noshow_progress //tools/bench:rdzv-bench \
    >"$logs/build.log" 2>&1; then
  tail -30 "$logs/build.log" >&2
  echo "run.sh: the build failed (log: $logs/build.log)" >&2
  exit 1
fi
args=("$@")
if [ "${#args[@]}" -eq 0 ]; then
  echo "run.sh: running the benchmark (about 3 minutes on 2 cores, most of it etcd at 9,000 ranks and PyTorch's traffic at 10,000)" >&2
  args=(--ranks 1000,10000,16384,100000 --incumbents 1000,4000,9000
        --pytorch 1000,10000)
else
  echo "run.sh: running the benchmark: rdzv-bench ${args[*]}" >&2
fi
exec bazel-bin/tools/bench/rdzv-bench "${args[@]}" --json bench.json \
  --plot bench.png
