#!/bin/bash
# deploy/k8s/rdzv.yaml: the node sidecar's shell computes its --parent
# chain (parent, then ancestors up to the root) from JOB_COMPLETION_INDEX;
# run that snippet, as the pod would, for a few indices.
set -u
yaml=deploy/k8s/rdzv.yaml
snippet=$(sed -n '/# The parent, then its ancestors/,/exec rdzvd/p' "$yaml" |
  sed '$d' | sed 's/^ *//')
[ -n "$snippet" ] || { echo "FAIL: no chain snippet in $yaml"; exit 1; }
fails=0
check() {
  local got
  got=$(JOB_COMPLETION_INDEX=$1 sh -c "$snippet
echo \"\$parent\"")
  if [ "$got" != "$2" ]; then
    echo "FAIL: index $1: --parent=$got (want $2)"
    fails=$((fails + 1))
  else
    echo "ok: index $1: --parent=$got"
  fi
}
check 0 "rdzv-root:29400"
check 1 "train-0.train:29401,rdzv-root:29400"
check 16 "train-0.train:29401,rdzv-root:29400"
check 17 "train-1.train:29401,train-0.train:29401,rdzv-root:29400"
check 300 "train-18.train:29401,train-1.train:29401,train-0.train:29401,rdzv-root:29400"
[ "$fails" -eq 0 ] || exit 1
