#!/bin/bash
# tests/gpu/run.sh's program on a CPU: comm_gpu against the FAKE NCCL test
# double with host buffers, through a real root and node. Checks that the
# GPU script's three init paths (scalable world, prefetched group on the
# background worker, split group) and their all-reduces run, so that the
# script is right before a GPU is lent. Not a GPU test.
set -u
RDZVD=$PWD/tools/rdzvd
. tools/daemons.sh
rdzv_tree_init rdzv-gpu-dry
rdzv_start root root
rdzv_start gpuhost node "$addr"
out=$(RDZV_ADDR="unix:$dir/gpuhost.sock" RDZV_JOB="gpu-dry-$$" \
  RDZV_HOST=gpuhost LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 WORLD_SIZE=1 \
  tests/gpu/comm_gpu --nccl "$PWD/tests/fake_nccl/libfake_nccl.so" \
  --host-buffers 2>&1)
rc=$?
echo "$out"
fails=0
for want in "world: rank 0 of 1, path scalable, ids 1" \
  "world.pre: path scalable" "world.split: path split"; do
  grep -qF "$want" <<<"$out" || { echo "FAIL: no line with [$want]"; fails=1; }
done
[ "$(grep -c "all-reduce of 1024 floats: ok" <<<"$out")" = 3 ] ||
  { echo "FAIL: want 3 correct all-reduces"; fails=1; }
[ "$rc" = 0 ] || { echo "FAIL: comm_gpu exited $rc"; fails=1; }
exit $fails
