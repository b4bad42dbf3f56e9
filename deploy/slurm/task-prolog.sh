#!/usr/bin/env bash
# Slurm TaskProlog: what it prints as "export NAME=value" lands in each
# task's environment, so ranks find their host's node and their job id
# (rdzv_rendezvous_opts_from_env reads RDZV_ADDR and RDZV_JOB; local rank
# and sizes come from SLURM_LOCALID / SLURM_NTASKS).
[ -r /etc/default/rdzv ] && . /etc/default/rdzv
echo "export RDZV_ADDR=unix:${RDZV_RUN_DIR:-/run/rdzv}/${SLURM_JOB_ID}.sock"
echo "export RDZV_JOB=${SLURM_JOB_ID}"
# With RDZV_TCPSTORE=1 the node also speaks PyTorch's TCPStore protocol:
# every rank is a client of its own host's node (torch's env:// then
# starts no server on rank 0: TORCHELASTIC_USE_AGENT_STORE), and the tree
# carries the keys between hosts.
ts="${RDZV_RUN_DIR:-/run/rdzv}/${SLURM_JOB_ID}.tcpstore.port"
if [ -s "$ts" ]; then
  echo "export MASTER_ADDR=127.0.0.1"
  echo "export MASTER_PORT=$(cat "$ts")"
  echo "export TORCHELASTIC_USE_AGENT_STORE=True"
  # torch's env:// reads it whenever the agent store is used (torchrun
  # sets its own; a plain srun launch has none) and prefixes every key
  # with it ("/worker/attempt_<it>/"): the step's id gives each srun step
  # of the job its own keys (with 0 for all, a second step read the first
  # step's keys, and gloo connected to its dead ports).
  echo "export TORCHELASTIC_RESTART_COUNT=${TORCHELASTIC_RESTART_COUNT:-${SLURM_STEP_ID:-0}}"
fi
