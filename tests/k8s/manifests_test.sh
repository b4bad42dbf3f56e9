#!/bin/bash
# deploy/k8s checked offline (no API server is reachable here):
#  1. yamllint --strict (tests/k8s/yamllint.conf);
#  2. `kubectl kustomize deploy/k8s` renders, where kubectl is installed;
#  3. tools/k8s-validate on every file: each object against the Kubernetes
#     OpenAPI schema (kubernetes-models), strictly (tsc: unknown fields
#     refused; a JobSet's templates as batch/v1 JobTemplateSpecs, its own
#     fields against tools/k8s-validate/jobset.ts), and checks.mjs's rules;
#  4. the same check on copies of deploy/k8s, each with one injected
#     mistake: each must fail, naming that mistake.
# The validator's npm packages come from tools/install-deps.sh (the folder
# tools/k8s-validate/modules-dir.sh names); where they are missing, this
# test installs them into its own temporary folder from the npm registry.
set -u
fails=0
passes=0
ok() { echo "ok: $*"; passes=$((passes + 1)); }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
k8s=deploy/k8s
val=tools/k8s-validate
[ -f "$k8s/root.yaml" ] && [ -f "$val/validate.mjs" ] || {
  echo "FAIL: run from the workspace (runfiles) root"
  exit 1
}

# 1. yamllint.
if out=$(yamllint --strict -c tests/k8s/yamllint.conf "$k8s" deploy/k8s-memory-root deploy/k8s-tls 2>&1); then
  ok "yamllint --strict $k8s deploy/k8s-memory-root deploy/k8s-tls"
else
  fail "yamllint $k8s:"
  echo "$out"
fi

# 2. kustomize (kubectl needs no cluster for it), on a copy: it does not
# take the runfiles' symbolic links for files.
if command -v kubectl >/dev/null; then
  rm -rf "$tmp/kustomize"
  mkdir -p "$tmp/kustomize"
  cp -L "$k8s"/*.yaml "$tmp/kustomize/"
  if out=$(kubectl kustomize "$tmp/kustomize" 2>&1); then
    ok "kubectl kustomize $k8s: $(grep -c '^kind:' <<<"$out") objects"
  else
    fail "kubectl kustomize $k8s:"
    echo "$out"
  fi
else
  echo "skipped: kubectl kustomize (no kubectl)"
fi

# 3. The validator, from a copy of its folder beside the packages.
mods="$("$val/modules-dir.sh")"
if [ ! -f "$mods/.complete" ]; then
  echo "note: no packages in $mods (run tools/install-deps.sh);" \
    "installing them from the npm registry into $tmp/npm"
  mods="$tmp/npm"
  if ! npm_config_cache="$tmp/npm-cache" "$val/install.sh" "$mods"; then
    fail "the validator's npm packages could not be installed"
    exit 1
  fi
fi
work="$tmp/validate"
rm -rf "$work"
mkdir -p "$work"
cp "$val/package.json" "$val/validate.mjs" "$val/checks.mjs" "$val/jobset.ts" "$work/"
ln -s "$mods/node_modules" "$work/node_modules"
start=$(date +%s%N)
if out=$(node "$work/validate.mjs" "$k8s"/*.yaml 2>&1); then
  ok "$(tail -1 <<<"$out")"
else
  fail "tools/k8s-validate on $k8s:"
  echo "$out"
fi
echo "validation of $k8s took $((($(date +%s%N) - start) / 1000000)) ms"

# 3b. The overlay deploy/k8s-memory-root (one in-memory root, no etcd),
# rendered by kustomize and validated as a set of its own: one root
# replica, no etcd setting left, the rest of the root's settings kept.
if command -v kubectl >/dev/null; then
  rm -rf "$tmp/memory-root"
  mkdir -p "$tmp/memory-root/k8s" "$tmp/memory-root/overlay" "$tmp/memory-root/set"
  cp -L "$k8s"/*.yaml "$tmp/memory-root/k8s/"
  cp -L deploy/k8s-memory-root/kustomization.yaml "$tmp/memory-root/overlay/"
  if (cd "$tmp/memory-root/overlay" && kubectl kustomize . >../set/all.yaml) 2>"$tmp/memory-root/err" &&
    out=$(node "$work/validate.mjs" --sets "$tmp/memory-root/set" 2>&1) &&
    grep -qxF "k8s-validate: set $tmp/memory-root/set: ok" <<<"$out" &&
    [ "$(grep -c '^  replicas: 1$' "$tmp/memory-root/set/all.yaml")" = 1 ] &&
    ! grep -q 'RDZVD_ETCD' "$tmp/memory-root/set/all.yaml" &&
    grep -q 'name: RDZVD_SECRET_DIR' "$tmp/memory-root/set/all.yaml"; then
    ok "deploy/k8s-memory-root renders ($(grep -c '^kind:' "$tmp/memory-root/set/all.yaml") objects) and validates: one root, no etcd"
  else
    fail "deploy/k8s-memory-root:"
    cat "$tmp/memory-root/err"
    echo "${out:-}"
  fi
else
  echo "skipped: deploy/k8s-memory-root (no kubectl)"
fi

# 3c. The overlay deploy/k8s-tls (TLS on the tree's links), rendered and
# validated: the Secret rdzv-tls mounted and RDZVD_TLS_DIR set in the
# roots' container and in the job's node, nowhere else.
if command -v kubectl >/dev/null; then
  rm -rf "$tmp/tls"
  mkdir -p "$tmp/tls/k8s" "$tmp/tls/overlay" "$tmp/tls/set"
  cp -L "$k8s"/*.yaml "$tmp/tls/k8s/"
  cp -L deploy/k8s-tls/kustomization.yaml "$tmp/tls/overlay/"
  if (cd "$tmp/tls/overlay" && kubectl kustomize . >../set/all.yaml) 2>"$tmp/tls/err" &&
    out=$(node "$work/validate.mjs" --sets "$tmp/tls/set" 2>&1) &&
    grep -qxF "k8s-validate: set $tmp/tls/set: ok" <<<"$out" &&
    [ "$(grep -c 'name: RDZVD_TLS_DIR' "$tmp/tls/set/all.yaml")" = 2 ] &&
    [ "$(grep -c 'secretName: rdzv-tls' "$tmp/tls/set/all.yaml")" = 2 ] &&
    [ "$(grep -c 'mountPath: /etc/rdzv/tls' "$tmp/tls/set/all.yaml")" = 2 ]; then
    ok "deploy/k8s-tls renders ($(grep -c '^kind:' "$tmp/tls/set/all.yaml") objects) and validates: the roots and the node mount rdzv-tls"
  else
    fail "deploy/k8s-tls:"
    cat "$tmp/tls/err"
    echo "${out:-}"
  fi
else
  echo "skipped: deploy/k8s-tls (no kubectl)"
fi

# 4. Injected mistakes: NAME FILE PATTERN PERL: a copy of deploy/k8s where
# PERL (run on FILE, slurped; $n counts matches for "the Nth") changed FILE,
# on which the validator must fail with a line matching PATTERN.
mut="$tmp/mutants"
rm -rf "$mut"
mkdir -p "$mut"
names=()
declare -A file want
mutant() {
  local name=$1 f=$2
  mkdir "$mut/$name"
  cp "$k8s"/*.yaml "$mut/$name/"
  perl -0pi -e "$4" "$mut/$name/$f"
  if cmp -s "$k8s/$f" "$mut/$name/$f"; then
    fail "mutant $name: the injection changed nothing in $f (stale pattern?)"
    rm -rf "${mut:?}/$name"
    return
  fi
  names+=("$name")
  file[$name]=$f
  want[$name]=$3
}
# The issue's four.
mutant misspelled-field job.yaml \
  "imagePullPolice.*does not exist in type 'IContainer'.*\[strict\]" \
  's/imagePullPolicy: IfNotPresent/imagePullPolice: IfNotPresent/'
mutant enum-typo job.yaml \
  "spec.completionMode: must be equal to one of the allowed values" \
  's/completionMode: Indexed/completionMode: Indxed/'
mutant wrong-type root.yaml \
  "StatefulSet/rdzv-root: spec.replicas: must be integer \[schema\]" \
  's/replicas: 3/replicas: "3"/'
mutant no-publish-not-ready job.yaml \
  "Service/train: spec: a headless Service needs publishNotReadyAddresses: true" \
  's/\n  publishNotReadyAddresses: true//'
# Unknown fields and types where only the strict check sees them.
mutant jobset-unknown-field jobset.yaml \
  "spec.failurePolicy.maxRestart:.*does not exist in type 'IJobSetFailurePolicy'" \
  's/maxRestarts: 3/maxRestart: 3/'
mutant jobset-failure-reason jobset.yaml \
  "onJobFailureReasons\[0\]: Type '\"PodFailurePolicies\"' is not assignable" \
  's/"PodFailurePolicy"/"PodFailurePolicies"/'
mutant jobset-template-enum jobset.yaml \
  "JobSet/trainjs: spec.replicatedJobs\[0\].template.spec.template.spec.restartPolicy: .*\[strict\]" \
  's/restartPolicy: Never/restartPolicy: Nevr/'
mutant env-value-not-string job.yaml \
  "env\[2\].value: Type 'number' is not assignable to type 'string'" \
  's/value: "0"/value: 0/'
mutant unknown-kind root.yaml \
  "no schema for apiVersion apps/v1 kind StatefulSets" \
  's/kind: StatefulSet/kind: StatefulSets/'
mutant duplicate-key job.yaml \
  "Map keys must be unique \[yaml\]" \
  's/(\n  parallelism: 4)/$1$1/'
# What only checks.mjs sees.
mutant selector-mismatch root.yaml \
  "StatefulSet/rdzv-root: spec.selector: the selector does not match the pod template's labels" \
  '$n = 0; s/(component: )root/++$n == 4 ? "$1rooot" : "$1root"/ge'
mutant service-port-name job.yaml \
  "Service/train: spec.ports\[0\].targetPort: no selected container has a port named rdzvd" \
  's/targetPort: rdzv/targetPort: rdzvd/'
mutant policy-admits-nobody root.yaml \
  "NetworkPolicy/rdzv-root: spec.ingress\[0\].from\[0\].podSelector: admits pods that no pod template" \
  's/(component: )job$/${1}jobs/mg'
mutant no-network-policy job.yaml \
  "Job/train: spec.template.metadata.labels: no NetworkPolicy in these files selects these pods" \
  's/\n---\n# The job.s pods take.*?\n---\n/\n---\n/s'
mutant sidecar-not-native job.yaml \
  "initContainers\[0\]: the rdzv node must be a native sidecar" \
  's/\n          restartPolicy: Always//'
mutant probe-needs-job job.yaml \
  "initContainers\[0\].livenessProbe: a node probe must need no job" \
  's/(livenessProbe:\n *)httpGet:\n *path: \/livez\n *port: http/$1exec:\n              command: ["rdzvctl", "--secret-file", "\/etc\/rdzv\/job\/secret", "--job", "x", "get", "k"]/'
mutant no-readiness-probe jobset.yaml \
  "the rdzv node has no readinessProbe" \
  's/\n *readinessProbe:\n *httpGet:\n *path: \/readyz\n *port: http\n *periodSeconds: 5//'
mutant liveness-on-readyz job.yaml \
  "initContainers\[0\].livenessProbe.httpGet.path: a liveness probe on /readyz restarts rdzvd" \
  's/(livenessProbe:\n *httpGet:\n *path: )\/livez/$1\/readyz/'
mutant root-liveness-on-readyz root.yaml \
  "containers\[0\].livenessProbe.httpGet.path: a liveness probe on /readyz restarts rdzvd" \
  's/(livenessProbe:\n *httpGet:\n *path: )\/livez/$1\/readyz/'
mutant probe-path-metrics pytorch-job.yaml \
  "readinessProbe.httpGet.path: rdzvd serves probes at /livez, /readyz and /health, not /metrics" \
  's/(readinessProbe:\n *httpGet:\n *path: )\/readyz/$1\/metrics/'
mutant http-port-mismatch job.yaml \
  "startupProbe.httpGet.port: port 29480 is not the port of --http-listen 0.0.0.0:29481" \
  's/--http-listen=0.0.0.0:29480/--http-listen=0.0.0.0:29481/'
mutant root-no-http-listen root.yaml \
  "readinessProbe.httpGet: an HTTP probe, but rdzvd has no --http-listen" \
  's/\n *- name: RDZVD_HTTP_LISTEN\n *value: 0.0.0.0:29480//'
mutant no-memory-limit root.yaml \
  "containers\[0\].resources: no limits.memory" \
  's/\n *memory: 2Gi//'
mutant privilege-escalation job.yaml \
  "containers\[0\].securityContext: allowPrivilegeEscalation is not false" \
  '$n = 0; s/allowPrivilegeEscalation: false/++$n == 2 ? "allowPrivilegeEscalation: true" : $&/ge'
mutant root-user root.yaml \
  "securityContext: no non-zero runAsUser" \
  's/runAsUser: 65532/runAsUser: 0/'
mutant writable-root-fs jobset.yaml \
  "securityContext: readOnlyRootFilesystem is not true" \
  's/readOnlyRootFilesystem: true/readOnlyRootFilesystem: false/'
mutant failure-policy-container job.yaml \
  "onExitCodes.containerName: trainr is not one of the pod's containers" \
  's/containerName: trainer/containerName: trainr/'
mutant world-size jobset.yaml \
  "WORLD_SIZE 4 is not 8 pods x 1 ranks" \
  's/(name: WORLD_SIZE\n *value: )"8"/$1"4"/'
mutant node-hosts job.yaml \
  "initContainers\[0\].env\[0\].value: RDZV_HOSTS 5 is not the tree's 4 pods" \
  's/(name: RDZV_HOSTS\n *value: )"4"/$1"5"/'
mutant node-hosts-jobset jobset.yaml \
  "RDZV_HOSTS 4 is not the tree's 8 pods" \
  's/(name: RDZV_HOSTS\n *value: )"8"/$1"4"/'
mutant node-local-ranks job.yaml \
  "RDZV_LOCAL_RANKS 2 is not the trainer's LOCAL_WORLD_SIZE 1" \
  's/(name: RDZV_LOCAL_RANKS\n *value: )"1"/$1"2"/'
mutant node-children-no-hosts job.yaml \
  "the node's --children needs RDZV_HOSTS" \
  's/\n *- name: RDZV_HOSTS\n *value: "4"//'
mutant jobset-per-job-uid jobset.yaml \
  "RDZV_JOB from the Job's UID differs between the JobSet's Jobs" \
  's/(- name: RDZV_JOB\n( *))value: trainjs\n/$1valueFrom:\n$2  fieldRef:\n$2    fieldPath: metadata.labels['"'"'batch.kubernetes.io\/controller-uid'"'"']\n/'
mutant jobset-no-rdzv-host jobset.yaml \
  "no RDZV_HOST: the default .* repeats in each of the JobSet's Jobs" \
  's/- name: RDZV_HOST\n/- name: RDZV_HOSTX\n/'
mutant subdomain-without-service job.yaml \
  "spec.template.spec.subdomain: no headless Service trains" \
  's/subdomain: train/subdomain: trains/'
mutant kustomize-missing-file kustomization.yaml \
  "resources\[1\]: jobs.yaml does not exist \[kustomize\]" \
  's/- job.yaml/- jobs.yaml/'
# The job's secret (rdzvd refuses one that others may read; the roots
# look it up by the job id; whoever talks to a node needs it).
mutant secret-mode-other job.yaml \
  "volumes\[2\].secret.defaultMode: the node's --secret-file's files get mode 0444: others may read them" \
  's/defaultMode: 288/defaultMode: 292/'
mutant secret-default-mode root.yaml \
  "volumes\[0\].secret.secretName: the root's --secret-dir's files get mode 0644 \(Kubernetes' default\)" \
  's/\n *defaultMode: 288//'
mutant secret-no-fsgroup root.yaml \
  "StatefulSet/rdzv-root: spec.template.spec.securityContext: no fsGroup: the root's --secret-dir's files are root's" \
  's/\n *fsGroup: 65532//'
mutant secret-key-not-job job.yaml \
  "items\[0\].key: the secret's key train2 is not the job id train \(RDZV_JOB\)" \
  's/- key: train\n/- key: train2\n/'
mutant secret-every-key jobset.yaml \
  "mounts every key of Secret rdzv-job-secrets: a job's pods mount only their job's key" \
  's/\n *items:\n *- key: trainjs\n *path: secret//'
mutant secret-root-subpath root.yaml \
  "volumeMounts\[0\].subPath: the root's secret directory is mounted with subPath" \
  's/(mountPath: \/etc\/rdzv\/job-secrets\n( *))/$1subPath: x\n$2/'
mutant secret-root-items root.yaml \
  "the roots serve every job: they mount the whole Secret, not items" \
  's/(secretName: rdzv-job-secrets\n( *))/$1items:\n$2  - key: train\n$2    path: train\n$2/'
mutant secret-probe-none jobset.yaml \
  "livenessProbe.exec.command: the probe's rdzvctl has no secret" \
  's/(livenessProbe:\n *)httpGet:\n *path: \/livez\n *port: http/$1exec:\n                      command: ["rdzvctl", "--addr", "unix:\/run\/rdzv\/node.sock", "stats"]/'
mutant secret-trainer-none job.yaml \
  "containers\[0\].env: no RDZV_SECRET_FILE: the node requires the job's secret" \
  's/\n *- name: RDZV_SECRET_FILE\n *value: \S+//'
mutant secret-node-unmounted jobset.yaml \
  "initContainers\[0\].volumeMounts: node's --secret-file /etc/rdzv/job/secret is not in a volume this container mounts" \
  '$n = 0; s/(\n *- name: job-secret\n *mountPath: \/etc\/rdzv\/job\n *readOnly: true)/++$n == 1 ? "" : $1/ge'
# PyTorch's wiring (pytorch-job.yaml): the node's loopback TCPStore front
# end, env://'s variables, torchrun's rdzv backend.
mutant tcpstore-not-loopback pytorch-job.yaml \
  "the node's --tcpstore-listen 0.0.0.0:29500 is not loopback" \
  's/--tcpstore-listen=127.0.0.1:29500/--tcpstore-listen=0.0.0.0:29500/'
mutant tcpstore-port-zero pytorch-job.yaml \
  "the node's --tcpstore-listen 127.0.0.1:0 has no fixed port" \
  's/--tcpstore-listen=127.0.0.1:29500/--tcpstore-listen=127.0.0.1:0/'
mutant tcpstore-job pytorch-job.yaml \
  "the node's --tcpstore-job train is not the trainers' RDZV_JOB train-pt" \
  's/--tcpstore-job=train-pt/--tcpstore-job=train/'
mutant master-port pytorch-job.yaml \
  "MASTER_PORT 29501 is not the node's --tcpstore-listen port 29500" \
  's/(name: MASTER_PORT\n *value: )"29500"/$1"29501"/'
mutant no-agent-store pytorch-job.yaml \
  "TORCHELASTIC_USE_AGENT_STORE is not \"True\": rank 0's env:// would start a server" \
  's/\n *- name: TORCHELASTIC_USE_AGENT_STORE\n *value: "True"//'
mutant literal-rank pytorch-job.yaml \
  "RANK 0 is the same in every pod" \
  's/(- name: RANK\n( *))valueFrom:\n *fieldRef:\n *fieldPath: \S+\n/$1value: "0"\n/'
mutant torchrun-nnodes pytorch-job.yaml \
  "--nnodes 2:3: its maximum is not the 4 pods of the tree" \
  's/--nnodes=4/--nnodes=2:3/'
mutant torchrun-endpoint pytorch-job.yaml \
  "--rdzv-endpoint unix:/run/rdzv/other.sock is not the node's socket unix:/run/rdzv/node.sock" \
  's/--rdzv-endpoint=unix:\/run\/rdzv\/node.sock/--rdzv-endpoint=unix:\/run\/rdzv\/other.sock/'
mutant torchrun-local-ranks pytorch-job.yaml \
  "RDZV_LOCAL_RANKS 8: under torchrun's rdzv backend a pod makes one join" \
  's/(name: RDZV_LOCAL_RANKS\n *value: )"1"/$1"8"/'

# One validator run over every mutant, each a set of its own.
out=$(node "$work/validate.mjs" --sets "${names[@]/#/$mut/}" 2>&1)
for name in "${names[@]}"; do
  d="$mut/$name"
  mine=$(grep -F "$d/" <<<"$out")
  if ! grep -qxF "k8s-validate: set $d: ok" <<<"$out" &&
    grep -qE -- "${want[$name]}" <<<"$mine"; then
    ok "mutant $name (${file[$name]}): $(grep -E -- "${want[$name]}" <<<"$mine" | head -1 | sed "s|$d/||")"
  else
    fail "mutant $name (${file[$name]}) not caught as /${want[$name]}/; the validator said:"
    if [ -n "$mine" ]; then echo "$mine"; else echo "  (nothing about it)"; fi
  fi
done
# yamllint sees the duplicate key too.
if yamllint -c tests/k8s/yamllint.conf "$mut/duplicate-key" >/dev/null 2>&1; then
  fail "yamllint passed the duplicate key"
else
  ok "yamllint refuses the duplicate key"
fi

# 5. The node sidecar's own script, run by sh for every pod of job.yaml
# and pytorch-job.yaml (4 pods each) and jobset.yaml (2 Jobs of 4), with a stub rdzvd on PATH that
# prints its arguments: each node's parent chain and --children are those
# of the tree (pod i under pod (i-1)/16; children: the pods 16i+1..16i+16
# that exist), and --local-ranks is the pod's ranks.
cat >"$work/script.mjs" <<'JS'
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
// Prints the rdzv-node init container's script and its literal env
// (NAME=value lines), separated by a line "---".
for (const d of parseAllDocuments(readFileSync(process.argv[2], "utf8"))) {
  const o = d.toJS();
  if (!o || !["Job", "JobSet"].includes(o.kind)) continue;
  const tpl = o.kind === "Job" ? o.spec.template : o.spec.replicatedJobs[0].template.spec.template;
  const c = tpl.spec.initContainers.find((x) => x.name === "rdzv-node");
  for (const e of c.env || []) if (typeof e.value === "string") console.log(`${e.name}=${e.value}`);
  console.log("---");
  console.log(c.command[2]);
}
JS
mkdir -p "$tmp/stub"
printf '#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n' >"$tmp/stub/rdzvd"
chmod +x "$tmp/stub/rdzvd"
shape() { # FILE PODS JOBS_OF_4 [NAME]: runs each pod's script, checks its shape
  local f=$1 pods=$2 jobs=$3 name=${4:-train} dump envs script g j k out kids want_kids p chain
  dump=$(node "$work/script.mjs" "$k8s/$f") || { fail "$f: no node script"; return; }
  envs=$(sed '/^---$/q' <<<"$dump" | grep -v '^---$')
  script=$(sed '1,/^---$/d' <<<"$dump")
  for ((g = 0; g < pods; g++)); do
    j=$((g / 4)) k=$((g % 4))
    out=$(env -i PATH="$tmp/stub:/usr/bin:/bin" JOB_COMPLETION_INDEX=$k \
      JOB_INDEX=$j $envs sh -c "$script" 2>&1)
    kids=$((pods - 16 * g - 1))
    ((kids < 0)) && kids=0
    ((kids > 16)) && kids=16
    chain="" p=$g
    while ((p > 0)); do
      p=$(((p - 1) / 16))
      if [ "$jobs" -gt 0 ]; then
        chain="$chain,trainjs-workers-$((p / 4))-$((p % 4)).trainjs:29401"
      else
        chain="$chain,$name-$p.$name:29401"
      fi
    done
    chain="${chain#,}${chain:+,}rdzv-root-0.rdzv-root:29400"
    if grep -qx -- "--children=$kids" <<<"$out" &&
      grep -qx -- "--local-ranks=1" <<<"$out" &&
      grep -q -- "^--parent=$chain" <<<"$out"; then
      :
    else
      fail "$f pod $g: not --children=$kids --local-ranks=1 --parent=$chain...; the script ran:"
      echo "$out"
      return
    fi
  done
  ok "$f: the node script gives each of $pods pods its tree position (--parent, --children, --local-ranks)"
}
shape job.yaml 4 0
shape jobset.yaml 8 2
shape pytorch-job.yaml 4 0 train-pt

echo "manifests_test: $passes checks passed, $fails failed"
[ "$fails" -eq 0 ]
