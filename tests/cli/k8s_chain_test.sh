#!/bin/bash
# deploy/k8s/job.yaml and jobset.yaml: the node sidecar's shell computes its
# --parent chain (parent, then ancestors, ending with every root) from the
# pod's index; run that snippet, as the pod would, for a few indices.
set -u
fails=0
roots="rdzv-root-0.rdzv-root:29400,rdzv-root-1.rdzv-root:29400,rdzv-root-2.rdzv-root:29400"

snippet_of() {
  local s
  s=$(sed -n '/# The parent, then its ancestors/,/exec rdzvd/p' "$1" |
    sed '$d' | sed 's/^ *//')
  [ -n "$s" ] || { echo "FAIL: no chain snippet in $1" >&2; exit 1; }
  printf '%s\n' "$s"
}

# check FILE "VAR=VALUE ..." WANT
check() {
  local got
  got=$(env $2 sh -c "$snippet
echo \"\$parent\"")
  if [ "$got" != "$3" ]; then
    echo "FAIL: $1 $2: --parent=$got (want $3)"
    fails=$((fails + 1))
  else
    echo "ok: $1 $2: --parent=$got"
  fi
}

# The Indexed Job: pod i hangs off pod (i-1)/16, train-<i>.train.
f=deploy/k8s/job.yaml
snippet=$(snippet_of "$f") || exit 1
check "$f" JOB_COMPLETION_INDEX=0 "$roots"
check "$f" JOB_COMPLETION_INDEX=1 "train-0.train:29401,$roots"
check "$f" JOB_COMPLETION_INDEX=16 "train-0.train:29401,$roots"
check "$f" JOB_COMPLETION_INDEX=17 "train-1.train:29401,train-0.train:29401,$roots"
check "$f" JOB_COMPLETION_INDEX=300 \
  "train-18.train:29401,train-1.train:29401,train-0.train:29401,$roots"

# The JobSet: Jobs of 4 pods, pod g = job index x 4 + pod index, named
# trainjs-workers-<job index>-<pod index>.trainjs.
f=deploy/k8s/jobset.yaml
snippet=$(snippet_of "$f") || exit 1
w=trainjs-workers
check "$f" "JOB_INDEX=0 JOB_COMPLETION_INDEX=0" "$roots"
check "$f" "JOB_INDEX=0 JOB_COMPLETION_INDEX=3" "$w-0-0.trainjs:29401,$roots"
check "$f" "JOB_INDEX=1 JOB_COMPLETION_INDEX=0" "$w-0-0.trainjs:29401,$roots"
check "$f" "JOB_INDEX=4 JOB_COMPLETION_INDEX=1" \
  "$w-0-1.trainjs:29401,$w-0-0.trainjs:29401,$roots"
check "$f" "JOB_INDEX=75 JOB_COMPLETION_INDEX=0" \
  "$w-4-2.trainjs:29401,$w-0-1.trainjs:29401,$w-0-0.trainjs:29401,$roots"
[ "$fails" -eq 0 ] || exit 1
