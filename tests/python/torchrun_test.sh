#!/bin/bash
# torchrun --rdzv-backend=rdzv with real torchrun (torch 2.6 in the chroot
# of tools/torch2-chroot.sh), agents on three "hosts" (nodes a, b, c under
# one root; RDZV_HOST names each agent's host): tests/python/BUILD says
# which cases.
set -u
src=$PWD
dir=$(mktemp -d /tmp/rdzv-torchrun-XXXXXX)
pids=()
fails=0
cleanup() {
  pkill -9 -f "rdzv-id=trt-$$-" 2>/dev/null
  pkill -9 -f "$dir/torchrun_train.py" 2>/dev/null
  pkill -9 -f "rdzv_id=trt-$$-" 2>/dev/null
  kill "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
  if [ "$fails" = 0 ]; then rm -rf "$dir"; else echo "logs kept in $dir"; fi
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

chroot_sh=$src/tools/torch2-chroot.sh
croot="${RDZV_TORCH2_CHROOT:-/var/cache/rdzv/trixie-torch}"
if [ "$(id -u)" != 0 ] || ! "$chroot_sh" --dir "$croot" --check; then
  echo "FAIL: no torch 2.x chroot at $croot, or not root: build it with" \
    "tools/torch2-chroot.sh (tools/install-deps.sh does)"
  exit 1
fi

"$src/tools/rdzvd" --role=root --name=root --listen=127.0.0.1:0 \
  --port-file="$dir/root.port" --spare-wait-ms=2000 --log-level=1 \
  2>"$dir/root.log" & pids+=($!)
for _ in $(seq 100); do [ -s "$dir/root.port" ] && break; sleep 0.1; done
for n in a b c; do
  "$src/tools/rdzvd" --role=node --name="$n" \
    --parent="127.0.0.1:$(cat "$dir/root.port")" --unix="$dir/$n.sock" \
    --log-level=2 2>"$dir/$n.log" & pids+=($!)
done
for n in a b c; do
  for _ in $(seq 100); do [ -S "$dir/$n.sock" ] && break; sleep 0.1; done
done
cp -rL "$src/python" "$dir/pkg"
if ! /usr/bin/python3 -m pip install --quiet --no-build-isolation --no-deps \
  --no-index --target "$dir/site" "$dir/pkg" >"$dir/pip.log" 2>&1; then
  cat "$dir/pip.log"
  echo "FAIL: pip install of python/"
  exit 1
fi
# The handler comes in through pip's entry point; the shim only makes
# use_libuv=False torch's default (Debian's torch 2.6 has no libuv).
# (In a folder of its own: torch 1.13's TCPStore has no use_libuv.)
mkdir "$dir/shim"
cp "$src/tests/tcpstore/torch2_shim/sitecustomize.py" "$dir/shim/"
cp -L "$src/librdzv.so.0" "$src/tests/python/torchrun_train.py" "$dir/"
ctl() { "$src/tools/rdzvctl" --timeout 5 "$@"; }

# agent NODE JOB NNODES [TORCHRUN ARGS...]: one torchrun agent of host-NODE
# whose endpoint is node NODE; its output in $dir/JOB-NODE.log, its exit
# status appended as "EXIT n".
agent() {
  local n=$1 job=$2 nn=$3
  shift 3
  # shellcheck disable=SC2086 # XENV: NAME=VALUE words
  ( "$chroot_sh" --dir "$croot" --exec /usr/bin/env \
      RDZV_LIBRARY="$dir/librdzv.so.0" PYTHONPATH="$dir/site:$dir/shim" \
      RDZV_HOST="host-$n" TRAIN_STEPS="${STEPS:-0}" ${XENV:-} \
      torchrun --rdzv-backend=rdzv --rdzv-endpoint="${EP:-unix:$dir/$n.sock}" \
      --rdzv-id="trt-$$-$job" --nnodes="$nn" --nproc-per-node=2 \
      --rdzv-conf=last_call_timeout=2,join_timeout=120 \
      --monitor-interval=0.1 "$@" "$dir/torchrun_train.py" \
      >"$dir/$job-$n.log" 2>&1
    echo "EXIT $?" >>"$dir/$job-$n.log" ) &
}
exit_of() { sed -n 's/^EXIT //p' "$dir/$1-$2.log"; }
# results JOB NODE: the RESULT lines of that agent's workers
# (two workers' lines may share one line of the log: each is cut out)
results() {
  grep -ho 'RESULT host=[^ ]* rank=[0-9]* world=[0-9]* sum=[0-9.]* master=[0-9.:]* restart=[0-9]*' \
    "$dir/$1-$2.log" 2>/dev/null | sed 's/$/ /'
}
show() { for f in "$@"; do echo "--- $f"; tail -30 "$dir/$f.log"; done; }

# 1. A normal run: two agents on hosts a and b, 2 workers each, one
#    all_reduce (1+2+3+4 = 10); each host's workers use their own node's
#    key space (MASTER_ADDR 127.0.0.1, a port of that node), and the keys
#    they set are in rdzv under that space's prefix.
agent a basic 2
agent b basic 2
wait_agents() { while [ -n "$(jobs -rp | grep -vxF -f <(printf '%s\n' "${pids[@]}"))" ]; do sleep 0.5; done; }
wait_agents
if [ "$(exit_of basic a)" = 0 ] && [ "$(exit_of basic b)" = 0 ] &&
   [ "$( (results basic a; results basic b) | grep -c 'world=4 sum=10 ')" = 4 ]; then
  ok "basic: 2 agents, 4 workers, all_reduce sum 10"
else
  fail "basic run"; show basic-a basic-b
fi
pa=$(results basic a | sed -n 's/.*master=127.0.0.1:\([0-9]*\).*/\1/p' | sort -u)
pb=$(results basic b | sed -n 's/.*master=127.0.0.1:\([0-9]*\).*/\1/p' | sort -u)
if [ -n "$pa" ] && [ -n "$pb" ] && [ "$pa" != "$pb" ] &&
   grep -q "key space rdzv/agents/w1 of job trt-$$-basic on 127.0.0.1:$pa" "$dir/a.log" &&
   grep -q "key space rdzv/agents/w1 of job trt-$$-basic on 127.0.0.1:$pb" "$dir/b.log"; then
  ok "basic: host a's workers used node a's key space (port $pa), host b's node b's ($pb)"
else
  fail "basic: workers' MASTER_PORT ($pa, $pb) is not each node's key space"
  grep -h "key space" "$dir/a.log" "$dir/b.log"
fi
probes=0
for r in 0 1 2 3; do
  v=$(ctl --addr "unix:$dir/c.sock" --job "trt-$$-basic" get "rdzv/agents/w1/probe/$r" 2>&1)
  [ "$v" = 4 ] && probes=$((probes + 1))
done
if [ "$probes" = 4 ]; then
  ok "basic: every worker's store key is in rdzv (rdzv/agents/w1/probe/R, read through node c)"
else
  fail "basic: $probes of 4 workers' keys found under rdzv/agents/w1/"
fi

# 2. Scale up: --nnodes=1:2; host a trains alone, host b comes later: a's
#    agent sees a node waiting, restarts its workers (not counted as a
#    failure: restart 0), and both train at world size 4.
STEPS=40 agent a grow 1:2
for _ in $(seq 300); do results grow a | grep -q 'world=2' && break; sleep 0.2; done
STEPS=40 agent b grow 1:2
wait_agents
if [ "$(exit_of grow a)" = 0 ] && [ "$(exit_of grow b)" = 0 ] &&
   results grow a | grep -q 'world=2 sum=3 ' &&
   [ "$( (results grow a; results grow b) | grep -c 'world=4 sum=10 .*restart=0')" = 4 ]; then
  ok "scale up: host a alone (world 2), then a and b (world 4), no restart counted"
else
  fail "scale up"; show grow-a grow-b
fi

# 3. Over the maximum: --nnodes=2:2 and three agents: two train, the third
#    is parked (RDZV_EROUND_FULL) and exits 0 once the job closes.
for n in a b c; do STEPS=10 agent "$n" full 2:2; done
wait_agents
nres=$( (results full a; results full b; results full c) | grep -c 'world=4 sum=10 ')
parked=$(grep -l "parked" "$dir"/full-?.log | wc -l)
if [ "$(exit_of full a)$(exit_of full b)$(exit_of full c)" = 000 ] &&
   [ "$nres" = 4 ] && [ "$parked" = 1 ] &&
   grep -q "exiting 0" "$dir"/full-?.log; then
  ok "over the maximum: 2 agents trained, the third was parked and exited 0"
else
  fail "over the maximum ($nres results, $parked parked)"; show full-a full-b full-c
fi

# 4. An agent killed: --nnodes=2:2 --max-restarts=2; host b's agent and
#    its workers are killed (-9) mid-training, a replacement agent starts
#    on host b: the survivor restarts its workers and both finish.
STEPS=60 agent a kill 2:2 --max-restarts=2
STEPS=60 agent b kill 2:2 --max-restarts=2
for _ in $(seq 300); do
  [ "$(results kill b | grep -c world=4)" = 2 ] && break
  sleep 0.2
done
sleep 2
# Host b's agent and workers: the processes of this job whose
# environment says host-b.
for p in $(pgrep -f "rdzv-id=trt-$$-kill|$dir/torchrun_train.py"); do
  if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RDZV_HOST=host-b"; then
    kill -9 "$p" 2>/dev/null
  fi
done
sleep 1
mv "$dir/kill-b.log" "$dir/kill-b0.log"
STEPS=60 agent b kill 2:2 --max-restarts=2
wait_agents
if [ "$(exit_of kill a)" = 0 ] && [ "$(exit_of kill b)" = 0 ] &&
   [ "$( (results kill a; results kill b) | grep -c 'world=4 sum=10 ')" -ge 4 ] &&
   [ "$(results kill a | grep -c 'world=4')" -ge 4 ]; then
  ok "agent killed: host a's workers restarted with host b's replacement, both finished"
else
  fail "agent killed"; show kill-a kill-b0 kill-b
fi

# 4b. A spare agent takes a killed one's place: --nnodes=2:2; hosts a and
#     b train, host c's agent is a spare (RDZV_ROLE=spare: parked, its
#     join waiting); host b's agent and workers are killed (-9): after the
#     root's --spare-wait-ms, c gets b's node rank, its workers b's ranks
#     (2 and 3), and a and c finish.
STEPS=60 agent a spare 2:2 --max-restarts=2
STEPS=60 agent b spare 2:2 --max-restarts=2
for _ in $(seq 300); do
  [ "$(results spare b | grep -c world=4)" = 2 ] && break
  sleep 0.2
done
STEPS=60 XENV="RDZV_ROLE=spare" agent c spare 2:2 --max-restarts=2
for _ in $(seq 100); do
  ctl --addr "127.0.0.1:$(cat "$dir/root.port")" --job "trt-$$-spare" \
    members 2>/dev/null | grep -q "parked: host-c" && break
  sleep 0.2
done
members_before=$(ctl --addr "127.0.0.1:$(cat "$dir/root.port")" \
  --job "trt-$$-spare" members 2>&1)
for p in $(pgrep -f "rdzv-id=trt-$$-spare|$dir/torchrun_train.py"); do
  if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RDZV_HOST=host-b"; then
    kill -9 "$p" 2>/dev/null
  fi
done
# Only a's and c's agents are waited for (b's was killed).
for _ in $(seq 600); do
  [ -n "$(exit_of spare a)" ] && [ -n "$(exit_of spare c)" ] && break
  sleep 0.2
done
members_after=$(ctl --addr "127.0.0.1:$(cat "$dir/root.port")" \
  --job "trt-$$-spare" members 2>&1)
if [ "$(exit_of spare a)" = 0 ] && [ "$(exit_of spare c)" = 0 ] &&
   echo "$members_before" | grep -q "parked: host-c" &&
   [ "$(results spare c | grep -c 'world=4 sum=10 ')" = 2 ] &&
   results spare c | grep -q 'rank=2 ' && results spare c | grep -q 'rank=3 ' &&
   [ "$(results spare a | grep 'world=4 sum=10 ' | grep -c 'rank=[01] ')" -ge 4 ]; then
  ok "spare agent: host c parked, then took killed host b's node rank (workers 2, 3); a and c finished"
else
  fail "spare agent"; echo "$members_before"; echo "$members_after"
  show spare-a spare-b spare-c
fi

# 5. Errors: an endpoint with no node, and a node that died, each named.
# failed_with JOB NODE TEXT WHAT: that agent exited non-zero, TEXT in its log.
failed_with() {
  if [ "$(exit_of "$1" "$2")" != 0 ] && grep -qF -- "$3" "$dir/$1-$2.log"; then
    ok "$4"
  else
    fail "$4"; show "$1-$2"
  fi
}
EP="unix:$dir/nothing.sock" agent a noep 1
wait_agents
failed_with noep a "RendezvousConnectionError: rdzv node at unix:$dir/nothing.sock" \
  "wrong endpoint: RendezvousConnectionError naming it"
kill -9 "${pids[3]}"  # node c
wait "${pids[3]}" 2>/dev/null
agent c dead 1
wait_agents
failed_with dead c "RendezvousConnectionError: rdzv node at unix:$dir/c.sock" \
  "dead node: RendezvousConnectionError naming it"

# 6. An unknown job id: a node that serves one job (--job, its secret, as
#    Slurm's per-job nodes do) under a root that knows that job's secret.
#    An agent whose run id is another job (RDZV_JOB unset) gets a
#    RendezvousConnectionError saying the node refused that job; with
#    RDZV_JOB naming the node's job (what Slurm's TaskProlog exports), the
#    same run id trains (its round is agents-<run id>-<hash> of that job).
mkdir -m 700 "$dir/secrets"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/secrets/trt-$$-known"
chmod 600 "$dir/secrets/trt-$$-known"
"$src/tools/rdzvd" --role=root --name=root2 --listen=127.0.0.1:0 \
  --port-file="$dir/root2.port" --secret-dir="$dir/secrets" --log-level=1 \
  2>"$dir/root2.log" & pids+=($!)
for _ in $(seq 100); do [ -s "$dir/root2.port" ] && break; sleep 0.1; done
"$src/tools/rdzvd" --role=node --name=j --job="trt-$$-known" \
  --secret-file="$dir/secrets/trt-$$-known" \
  --parent="127.0.0.1:$(cat "$dir/root2.port")" --unix="$dir/j.sock" \
  --log-level=1 2>"$dir/j.log" & pids+=($!)
for _ in $(seq 100); do [ -S "$dir/j.sock" ] && break; sleep 0.1; done
XENV="RDZV_SECRET_FILE=$dir/secrets/trt-$$-known" agent j unknown 1
wait_agents
failed_with unknown j \
  "RendezvousConnectionError: rdzv node at unix:$dir/j.sock refused job trt-$$-unknown" \
  "unknown job id: RendezvousConnectionError naming the node and the job it refused"
XENV="RDZV_SECRET_FILE=$dir/secrets/trt-$$-known RDZV_JOB=trt-$$-known" \
  agent j unknown2 1
wait_agents
if [ "$(exit_of unknown2 j)" = 0 ] &&
   [ "$(results unknown2 j | grep -c 'world=2 sum=3 ')" = 2 ]; then
  ok "RDZV_JOB names the node's job: a run id of its own trains there"
else
  fail "RDZV_JOB"; show unknown2-j
fi

# 7. torch 1.13 (Debian 12's, the system Python): its torchrun reads no
#    entry points, so `python3 -m rdzv.torchrun` registers the handler;
#    two agents on hosts a and b, 2 workers each, one all_reduce. (-r 1
#    -t 1: docs/pytorch.md says why Debian's 1.13 on Python 3.11 needs
#    them.)
agent13() {
  local n=$1 job=$2 nn=$3
  shift 3
  ( env RDZV_LIBRARY="$dir/librdzv.so.0" PYTHONPATH="$dir/site" \
      RDZV_HOST="host-$n" TRAIN_STEPS=0 \
      /usr/bin/python3 -m rdzv.torchrun --rdzv_backend=rdzv \
      --rdzv_endpoint="unix:$dir/$n.sock" --rdzv_id="trt-$$-$job" \
      --nnodes="$nn" --nproc_per_node=2 -r 1 -t 1 \
      --rdzv_conf=last_call_timeout=2,join_timeout=120 \
      --monitor_interval=0.1 "$@" "$dir/torchrun_train.py" \
      >"$dir/$job-$n.log" 2>&1
    echo "EXIT $?" >>"$dir/$job-$n.log" ) &
}
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  agent13 a t113 2
  agent13 b t113 2
  wait_agents
  n113=$(cat "$dir/t113-a.log" "$dir/t113-b.log" |
    grep -o 'RESULT host=[^ ]* rank=[0-9]* world=4 sum=10 ' | wc -l)
  if [ "$(exit_of t113 a)" = 0 ] && [ "$(exit_of t113 b)" = 0 ] &&
     [ "$n113" = 4 ]; then
    ok "torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'): python3 -m rdzv.torchrun, 2 agents, 4 workers, all_reduce sum 10"
  else
    fail "torch 1.13 run"; show t113-a t113-b
  fi
else
  fail "no torch in /usr/bin/python3 (python3-torch: tools/install-deps.sh)"
fi

[ "$fails" = 0 ] || { echo "$fails failed"; exit 1; }
echo "all passed"
