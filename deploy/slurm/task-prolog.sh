#!/usr/bin/env bash
# Slurm TaskProlog: what it prints as "export NAME=value" lands in each
# task's environment, so ranks find their host's node, their job id and
# the job's secret (rdzv_rendezvous_opts_from_env reads RDZV_ADDR and
# RDZV_JOB, the client library RDZV_SECRET_FILE), and what PyTorch's
# env:// reads (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; with
# RDZV_TCPSTORE=1 MASTER_ADDR and MASTER_PORT).
# Settings as in prolog.sh ($RDZV_SETTINGS, default /etc/default/rdzv).
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
settings=${RDZV_SETTINGS:-/etc/default/rdzv}
# shellcheck source=/dev/null
[ -r "$settings" ] && . "$settings"
echo "export RDZV_ADDR=unix:${RDZV_RUN_DIR:-/run/rdzv}/${SLURM_JOB_ID}.sock"
echo "export RDZV_JOB=${SLURM_JOB_ID}"
# The host's identity in the rendezvous: its Slurm node name, as the
# Prolog placed it in the tree (the host name may differ: aliases, several
# slurmd on one host).
echo "export RDZV_HOST=${RDZV_HOSTNAME:-${SLURMD_NODENAME:-$(hostname -s)}}"
# The job's secret, which the Prolog wrote for the job's user (mode 0400):
# the client library reads the file named here (never the secret itself,
# which would show in every process's environment).
if [ "${RDZV_AUTH:-required}" != off ]; then
  echo "export RDZV_SECRET_FILE=${RDZV_RUN_DIR:-/run/rdzv}/${SLURM_JOB_ID}.secret"
fi
# What torch's env:// and torchrun-style scripts read, from Slurm's own
# variables of this task (an unmodified init_process_group() under srun
# then needs nothing else): RANK and WORLD_SIZE are the task's place in
# the step, LOCAL_RANK and LOCAL_WORLD_SIZE its place on this host.
# LOCAL_WORLD_SIZE is this host's entry of SLURM_STEP_TASKS_PER_NODE
# ("4(x3),2": three hosts of 4 tasks, then one of 2), by SLURM_NODEID.
tasks_here() {
  local list=$1 want=$2 i=0 item n reps
  # Slurm's form only (digits, or digits(xdigits), comma-separated), and a
  # numeric node id: anything else prints nothing (no variable exported).
  [[ "$list" =~ ^[0-9]+(\(x[0-9]+\))?(,[0-9]+(\(x[0-9]+\))?)*$ ]] || return 1
  [[ "$want" =~ ^[0-9]+$ ]] || return 1
  local IFS=,
  for item in $list; do
    n=${item%%(*}
    reps=1
    case $item in *"(x"*) reps=${item#*(x}; reps=${reps%)} ;; esac
    if [ "$want" -lt $((i + reps)) ]; then
      echo "$n"
      return 0
    fi
    i=$((i + reps))
  done
  return 1
}
[ -n "${SLURM_PROCID:-}" ] && echo "export RANK=$SLURM_PROCID"
ntasks=${SLURM_STEP_NUM_TASKS:-${SLURM_NTASKS:-}}
[ -n "$ntasks" ] && echo "export WORLD_SIZE=$ntasks"
[ -n "${SLURM_LOCALID:-}" ] && echo "export LOCAL_RANK=$SLURM_LOCALID"
per_node=${SLURM_STEP_TASKS_PER_NODE:-${SLURM_TASKS_PER_NODE:-}}
if [ -n "$per_node" ] && [ -n "${SLURM_NODEID:-}" ] &&
  local_n=$(tasks_here "$per_node" "$SLURM_NODEID"); then
  echo "export LOCAL_WORLD_SIZE=$local_n"
fi
# With RDZV_TCPSTORE=1 the node also speaks PyTorch's TCPStore protocol:
# every rank is a client of its own host's node (torch's env:// then
# starts no server on rank 0: TORCHELASTIC_USE_AGENT_STORE), and the tree
# carries the keys between hosts.
ts="${RDZV_RUN_DIR:-/run/rdzv}/${SLURM_JOB_ID}.tcpstore.port"
if [ -s "$ts" ]; then
  echo "export MASTER_ADDR=127.0.0.1"
  # Each srun step gets a key space of its own at the node: a port whose
  # TCPStore keys live under slurm/step<id>/ of the job (torch 2.x puts no
  # prefix on an agent store's keys, so a second step on the job's one
  # port would read the first step's keys). The space is held for the
  # task this prolog precedes (its parent process: slurmstepd runs the
  # TaskProlog from the task's own process, just before exec), so it
  # closes when the step's last task on this host ends. The job's port
  # is the fallback (a node without key spaces: --tcpstore-spaces 0). A
  # site's wrapper around this script must exec it: its parent must be
  # the task. (No step id: the batch script's own.)
  ctl=${RDZVCTL_BIN:-$(dirname "${RDZV_BIN:-/usr/local/bin/rdzvd}")/rdzvctl}
  secret=()
  [ "${RDZV_AUTH:-required}" != off ] &&
    secret=(--secret-file "${RDZV_RUN_DIR:-/run/rdzv}/${SLURM_JOB_ID}.secret")
  port=$("$ctl" --addr "unix:${RDZV_RUN_DIR:-/run/rdzv}/${SLURM_JOB_ID}.sock" \
    --job "$SLURM_JOB_ID" "${secret[@]}" --timeout 30 \
    tcpstore-space "slurm/step${SLURM_STEP_ID:-batch}/" "$PPID" 2>&1)
  if ! [[ "$port" =~ ^[0-9]+$ ]]; then
    echo "rdzv task-prolog: no key space for step ${SLURM_STEP_ID:-batch}" \
      "(the job's port instead): $port" >&2
    port=$(cat "$ts")
  fi
  echo "export MASTER_PORT=$port"
  echo "export TORCHELASTIC_USE_AGENT_STORE=True"
  # torch's env:// reads it whenever the agent store is used and prefixes
  # every key with it ("/worker/attempt_<it>/"): the step's id gives each
  # srun step of the job its own keys (with one count for all, a second
  # step read the first step's keys, and gloo connected to its dead
  # ports). Always the step's: a value in the environment was inherited
  # from the batch step, the same for every step (torchrun, run as a task,
  # sets its workers' own).
  echo "export TORCHELASTIC_RESTART_COUNT=${SLURM_STEP_ID:-0}"
fi
