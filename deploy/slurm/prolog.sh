#!/usr/bin/env bash
# Slurm Prolog (runs as root on every host of a job before its tasks):
# starts this job's rdzv node agent on this host, and on the job's first
# host also the root. The tree is a pure function of the host list: host i
# (in `scontrol show hostnames` order) hangs off host (i-1)/F; host 0 off
# the root, which runs beside it.
#
# Settings (environment of slurmd, or /etc/default/rdzv sourced here):
#   RDZV_BIN        rdzvd path                (default /usr/local/bin/rdzvd)
#   RDZV_RUN_DIR    sockets, pid files        (default /run/rdzv)
#   RDZV_FANOUT     tree fan-out              (default 16)
#   RDZV_PORT_BASE  first TCP port            (default 29400)
#   RDZV_PORT_RANGE ports in use (job id mod) (default 1000)
#   RDZV_LISTEN_ADDR address to listen on    (default 0.0.0.0)
# The node listens on port BASE + (job id mod RANGE) on every host, the root
# on that port + RANGE on the first host: every host computes its parent's
# address without asking anyone. Ranks reach their node through the Unix
# socket RDZV_RUN_DIR/<job id>.sock (task-prolog.sh exports RDZV_ADDR).
set -euo pipefail
[ -r /etc/default/rdzv ] && . /etc/default/rdzv
bin=${RDZV_BIN:-/usr/local/bin/rdzvd}
run=${RDZV_RUN_DIR:-/run/rdzv}
fanout=${RDZV_FANOUT:-16}
base=${RDZV_PORT_BASE:-29400}
range=${RDZV_PORT_RANGE:-1000}
listen=${RDZV_LISTEN_ADDR:-0.0.0.0}
job=${SLURM_JOB_ID:?SLURM_JOB_ID is not set}
nodelist=${SLURM_JOB_NODELIST:-${SLURM_NODELIST:?no job node list}}
me=${RDZV_HOSTNAME:-$(hostname -s)}

mapfile -t hosts < <(scontrol show hostnames "$nodelist")
index=-1
for i in "${!hosts[@]}"; do
  if [ "${hosts[$i]}" = "$me" ]; then index=$i; break; fi
done
if [ "$index" -lt 0 ]; then
  echo "rdzv prolog: host '$me' is not in the job's host list ($nodelist)" >&2
  exit 1
fi
port=$((base + job % range))
root_port=$((port + range))
mkdir -p "$run"

# Starts a daemon in its own session with no terminal, so that slurmd does
# not wait for it; its pid goes to a file for the epilog.
start() { # name args...
  local name=$1
  shift
  setsid "$bin" "$@" --log-level=1 </dev/null >>"$run/$job.$name.log" 2>&1 &
  echo $! >"$run/$job.$name.pid"
}

if [ "$index" -eq 0 ]; then
  start root --role=root --listen="$listen:$root_port" --name="root-$job"
  parent="${listen/0.0.0.0/127.0.0.1}:$root_port"
else
  parent="${hosts[$(((index - 1) / fanout))]}:$port"
fi
start node --role=node --parent="$parent" --listen="$listen:$port" \
  --unix="$run/$job.sock" --name="$me"
exit 0
