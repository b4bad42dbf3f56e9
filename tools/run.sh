#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the rendezvous
# benchmark: a real tree of rdzvd processes and 1,000 / 10,000 / 16,384 /
# 100,000 simulated ranks through join, assignment, unique ids, topology
# and a final barrier, in tree and flat mode. Writes bench.json and
# bench.png here and prints one line per run.
#
#   tools/run.sh [rdzv-bench options]   (default: the four scales above)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh >/dev/null
bazel build //tools/bench:rdzv-bench 2>/dev/null
args=("$@")
if [ "${#args[@]}" -eq 0 ]; then
  args=(--ranks 1000,10000,16384,100000)
fi
exec bazel-bin/tools/bench/rdzv-bench "${args[@]}" --json bench.json \
  --plot bench.png
