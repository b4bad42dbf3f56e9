#!/usr/bin/env bash
# Slurm Prolog (runs as root on every host of a job before its tasks):
# starts this job's rdzv node agent on this host, and on the job's first
# host also the root. The tree is a pure function of the host list: host i
# (in `scontrol show hostnames` order) hangs off host (i-1)/F; host 0 off
# the root, which runs beside it.
#
# Settings (environment of slurmd, or /etc/default/rdzv sourced here):
#   RDZV_BIN           rdzvd path                (default /usr/local/bin/rdzvd)
#   RDZV_RUN_DIR       sockets, pid/port files   (default /run/rdzv)
#   RDZV_FANOUT        tree fan-out              (default 16)
#   RDZV_PORT_BASE     first node TCP port       (default 29400)
#   RDZV_PORT_RANGE    node ports (job id mod)   (default 1000)
#   RDZV_LISTEN_ADDR   address to listen on      (default 0.0.0.0)
#   RDZV_START_TIMEOUT seconds to wait for each daemon to listen (default 10)
#   RDZV_TCPSTORE      1: the node also serves PyTorch's TCPStore protocol
#                      on 127.0.0.1 (port in RDZV_RUN_DIR/<job>.tcpstore.port;
#                      task-prolog.sh points MASTER_ADDR/MASTER_PORT at it)
#
# Ports. A node's children on other hosts must know its port without asking
# anyone (no shared file system is assumed), so the node listens on the
# same port on every host: BASE + (job id mod RANGE). Two jobs whose ids are
# equal mod RANGE and that share a host collide on it; the second one's
# node cannot bind, and this Prolog fails (below) instead of leaving a job
# without its daemon. The root is needed only by the node beside it, so it
# binds port 0 and publishes the kernel's choice in RDZV_RUN_DIR/<job
# id>.root.port; it never collides.
#
# Each daemon writes RDZV_RUN_DIR/<job id>.<root|node>.port once all its
# listeners are up. The Prolog waits (RDZV_START_TIMEOUT at most) for it;
# if a daemon exits or does not listen in time, it stops every daemon it
# started for the job, prints why (with the end of the daemon's log,
# RDZV_RUN_DIR/<job id>.<name>.log) and exits 1, so Slurm does not start
# the job's tasks against a dead daemon. Ranks reach their node through the
# Unix socket RDZV_RUN_DIR/<job id>.sock (task-prolog.sh exports RDZV_ADDR).
set -euo pipefail
[ -r /etc/default/rdzv ] && . /etc/default/rdzv
bin=${RDZV_BIN:-/usr/local/bin/rdzvd}
run=${RDZV_RUN_DIR:-/run/rdzv}
fanout=${RDZV_FANOUT:-16}
base=${RDZV_PORT_BASE:-29400}
range=${RDZV_PORT_RANGE:-1000}
listen=${RDZV_LISTEN_ADDR:-0.0.0.0}
start_timeout=${RDZV_START_TIMEOUT:-10}
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
mkdir -p "$run"

started=() # names of the daemons started here, for stop_started

# Starts a daemon in its own session with no terminal, so that slurmd does
# not wait for it; its pid goes to a file for the epilog.
start() { # name args...
  local name=$1
  shift
  rm -f "$run/$job.$name.port"
  setsid "$bin" "$@" --port-file="$run/$job.$name.port" --log-level=1 \
    </dev/null >>"$run/$job.$name.log" 2>&1 &
  echo $! >"$run/$job.$name.pid"
  started+=("$name")
}

# Stops the daemons started here (a failed Prolog must leave none behind).
stop_started() {
  local name pid
  for name in "${started[@]}"; do
    pid=$(cat "$run/$job.$name.pid" 2>/dev/null) || continue
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$run/$job.$name.pid" "$run/$job.$name.port"
  done
}

# Waits until daemon NAME listens (its port file appears). If it exits or
# does not listen within RDZV_START_TIMEOUT seconds: stops what this Prolog
# started, says why and exits 1. NAME's port goes to $bound.
wait_started() { # name what-it-binds
  local name=$1 what=$2 why pid
  local log="$run/$job.$name.log" pf="$run/$job.$name.port"
  pid=$(cat "$run/$job.$name.pid")
  for ((t = 0; ; t++)); do
    if [ -s "$pf" ]; then
      bound=$(cat "$pf")
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      why="it exited"
      break
    fi
    if [ "$t" -ge $((start_timeout * 10)) ]; then
      why="it was not listening after ${start_timeout} s"
      break
    fi
    sleep 0.1
  done
  {
    echo "rdzv prolog: job $job on $me: the $name daemon did not start ($why)."
    if grep -qi "address already in use" "$log" 2>/dev/null; then
      echo "rdzv prolog: $what is in use: another job whose id equals $job" \
        "mod RDZV_PORT_RANGE ($range) runs on this host, or another program" \
        "holds the port; change RDZV_PORT_BASE/RDZV_PORT_RANGE or free it."
    fi
    echo "rdzv prolog: the end of $log:"
    tail -n 5 "$log" 2>/dev/null | sed 's/^/  /' || true
  } >&2
  stop_started
  exit 1
}

if [ "$index" -eq 0 ]; then
  start root --role=root --listen="$listen:0" --name="root-$job"
  wait_started root "a TCP port on $listen"
  parent="${listen/0.0.0.0/127.0.0.1}:$bound"
else
  # The parent, then its ancestors up to the first host's node, nearest
  # first: where this node reattaches if its parent is lost (the first
  # host's node is the top; its root listens on a port only it knows).
  parent=""
  p=$index
  while [ "$p" -gt 0 ]; do
    p=$(((p - 1) / fanout))
    parent="$parent,${hosts[$p]}:$port"
  done
  parent="${parent#,}"
fi
tcpstore=()
if [ "${RDZV_TCPSTORE:-0}" = 1 ]; then
  rm -f "$run/$job.tcpstore.port"
  tcpstore=(--tcpstore-listen=127.0.0.1:0 --tcpstore-job="$job"
    --tcpstore-port-file="$run/$job.tcpstore.port")
fi
start node --role=node --parent="$parent" --listen="$listen:$port" \
  --unix="$run/$job.sock" --name="$me" "${tcpstore[@]}"
wait_started node "port $port on $listen"
exit 0
