#!/usr/bin/env bash
# The communicator stack on one GPU: builds rdzvd and tests/gpu/comm_gpu,
# starts a root and one node, and runs a one-rank world through the
# scalable path (ncclCommInitRankScalable) plus an all-reduce on device 0,
# printing the init timings, then a prefetched group (initialized by the
# background worker in this thread's CUDA context) and a split group, each
# with an all-reduce; then the loader's GPU test
# (//tests/unit:nccl_api_gpu_test). Exits non-zero if any step fails.
#
#   tests/gpu/run.sh                 real libnccl.so.2 (RDZV_NCCL_LIBRARY,
#                                    else the loader's search, else
#                                    /usr/local/cuda/lib64)
#   tests/gpu/run.sh --dry-run       CPU only: the FAKE NCCL test double and
#                                    host buffers (checks the script itself)
set -euo pipefail
cd "$(dirname "$0")/../.."
dry=0
[ "${1:-}" = --dry-run ] && dry=1
bazel build //tools:rdzvd //tests/gpu:comm_gpu //tests/fake_nccl:libfake_nccl.so
. tools/daemons.sh
rdzv_tree_init rdzv-gpu
rdzv_start root root
rdzv_start gpuhost node "$addr"
extra=()
if [ "$dry" = 1 ]; then
  extra=(--nccl "$PWD/bazel-bin/tests/fake_nccl/libfake_nccl.so" --host-buffers)
  echo "DRY RUN: fake NCCL (test double), host buffers; no GPU used"
fi
RDZV_ADDR="unix:$dir/gpuhost.sock" RDZV_JOB="gpu-$$" RDZV_HOST=gpuhost \
  LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 WORLD_SIZE=1 \
  bazel-bin/tests/gpu/comm_gpu "${extra[@]}"
if [ "$dry" = 0 ]; then
  bazel test //tests/unit:nccl_api_gpu_test --test_output=all
fi
