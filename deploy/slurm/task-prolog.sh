#!/usr/bin/env bash
# Slurm TaskProlog: what it prints as "export NAME=value" lands in each
# task's environment, so ranks find their host's node, their job id and
# the job's secret (rdzv_rendezvous_opts_from_env reads RDZV_ADDR and
# RDZV_JOB, the client library RDZV_SECRET_FILE; local rank and sizes come
# from SLURM_LOCALID / SLURM_NTASKS).
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
# With RDZV_TCPSTORE=1 the node also speaks PyTorch's TCPStore protocol:
# every rank is a client of its own host's node (torch's env:// then
# starts no server on rank 0: TORCHELASTIC_USE_AGENT_STORE), and the tree
# carries the keys between hosts.
ts="${RDZV_RUN_DIR:-/run/rdzv}/${SLURM_JOB_ID}.tcpstore.port"
if [ -s "$ts" ]; then
  echo "export MASTER_ADDR=127.0.0.1"
  echo "export MASTER_PORT=$(cat "$ts")"
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
