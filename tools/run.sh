#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the store demo
# (tools/demo.sh: a root, two levels of nodes and 1,000 simulated ranks).
# Until the rendezvous benchmark exists, this demo is the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
exec tools/demo.sh "$@"
